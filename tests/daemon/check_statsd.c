/* SPDX-License-Identifier: MIT */
/* statsd.c: the UDP sender against a local socket (and a closed port), the TCP sender, and
 * statsd_new()'s errors. */

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "statsd-test-util.h"
#include "daemon/statsd.h"
#include "check-run.h"

/* A UDP socket on 127.0.0.1 and an ephemeral port. */
static int udp_listen(uint16_t *ret_port) {
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof sin;
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(bind(fd, (struct sockaddr *) &sin, sizeof sin), 0);
        ck_assert_int_eq(getsockname(fd, (struct sockaddr *) &sin, &len), 0);
        *ret_port = ntohs(sin.sin_port);
        return fd;
}

static ssize_t udp_receive(int fd, char *buf, size_t size) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        if (poll(&pfd, 1, 5000) != 1) /* bounded; loopback delivery is immediate */
                return -1;
        ssize_t n = recv(fd, buf, size - 1, MSG_DONTWAIT);
        if (n >= 0)
                buf[n] = '\0';
        return n;
}

START_TEST (test_udp_send) {
        Metrics *m = NULL;
        Statsd *s = NULL;
        RuleSet *rs = load_ini(config);
        uint16_t port;
        int fd = udp_listen(&port);
        char buf[STATSD_PAYLOAD_MAX + 1], err[256] = "";

        ck_assert_int_eq(metrics_new(&m), 0);
        ck_assert_int_eq(metrics_set_rules(m, rs), 0);
        StatsdSettings settings = { .host = "127.0.0.1", .port = port, .prefix = "divvy" };
        ck_assert_int_eq(statsd_new(NULL, &settings, m, &s, err, sizeof err), 0);
        play_sequence(m);
        ck_assert_int_eq(statsd_flush(s), 10);
        ck_assert_int_gt(udp_receive(fd, buf, sizeof buf), 0);
        ck_assert_str_eq(buf, aggregations[1].first);

        /* statsd_free() sends a last flush. */
        metrics_count_hit(m, 0, METRICS_STATUS_REJECTED);
        statsd_free(s);
        ck_assert_int_gt(udp_receive(fd, buf, sizeof buf), 0);
        ck_assert_str_eq(buf,
                         "divvy.hit.rejected:1|c\ndivvy.hit.rejected.cookies:1|c\ndivvy.connections:3|g");
        ck_assert_uint_eq(metrics_statsd_dropped(m), 0);

        close(fd);
        ruleset_free(rs);
        metrics_free(m);
}
END_TEST

START_TEST (test_udp_closed_port) {
        /* A closed port answers with ICMP port unreachable: the connected socket reports
         * ECONNREFUSED on a later send. Flushing never blocks; the lost lines are counted. */
        Metrics *m = NULL;
        Statsd *s = NULL;
        uint16_t port;
        char err[256] = "";

        close(udp_listen(&port));
        ck_assert_int_eq(metrics_new(&m), 0);
        StatsdSettings settings = { .host = "127.0.0.1", .port = port };
        ck_assert_int_eq(statsd_new(NULL, &settings, m, &s, err, sizeof err), 0);
        for (int i = 0; i < 10 && metrics_statsd_dropped(m) == 0; i++) {
                metrics_count_hit(m, 0, METRICS_STATUS_ACCEPTED);
                ck_assert_int_eq(statsd_flush(s), 2);
        }
        ck_assert_uint_eq(metrics_statsd_dropped(m), 2); /* one datagram: hit.accepted + connections */
        statsd_free(s);
        metrics_free(m);
}
END_TEST

START_TEST (test_new_errors) {
        Metrics *m = NULL;
        Statsd *s = NULL;
        char err[256] = "", big[STATSD_PREFIX_MAX + 2];

        ck_assert_int_eq(metrics_new(&m), 0);
        ck_assert_int_eq(statsd_new(NULL, &(StatsdSettings){ .host = "127.0.0.1" }, m, &s, err, sizeof err),
                         -EINVAL);
        ck_assert_int_eq(statsd_new(NULL, &(StatsdSettings){ .port = 8125 }, m, &s, err, sizeof err),
                         -EINVAL);
        ck_assert_int_eq(statsd_new(NULL, &(StatsdSettings){ .host = "no such host.invalid", .port = 8125 },
                                    m, &s, err, sizeof err),
                         -EADDRNOTAVAIL);
        ck_assert_ptr_nonnull(strstr(err, "cannot resolve statsd host \"no such host.invalid\""));
        memset(big, 'p', sizeof big - 1);
        big[sizeof big - 1] = '\0';
        ck_assert_int_eq(statsd_new(NULL, &(StatsdSettings){ .host = "127.0.0.1", .port = 1, .prefix = big },
                                    m, &s, err, sizeof err),
                         -ENAMETOOLONG);
        /* TCP needs an event loop. */
        ck_assert_int_eq(statsd_new(NULL, &(StatsdSettings){ .host = "127.0.0.1", .port = 1, .tcp = true },
                                    m, &s, err, sizeof err),
                         -EINVAL);
        ck_assert_ptr_null(statsd_free(NULL));
        metrics_free(m);
}
END_TEST

START_TEST (test_tcp_send) {
        /* Lines over TCP, each ending in "\n", buffered while the connection completes. */
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof sin;
        int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(lfd, 0);
        ck_assert_int_eq(bind(lfd, (struct sockaddr *) &sin, sizeof sin), 0);
        ck_assert_int_eq(listen(lfd, 4), 0);
        ck_assert_int_eq(getsockname(lfd, (struct sockaddr *) &sin, &len), 0);

        sd_event *e = NULL;
        Metrics *m = NULL;
        Statsd *s = NULL;
        char err[256] = "", buf[4096];
        ck_assert_int_ge(sd_event_new(&e), 0);
        ck_assert_int_eq(metrics_new(&m), 0);
        StatsdSettings settings = { .host = "127.0.0.1",
                                    .port = ntohs(sin.sin_port),
                                    .tcp = true,
                                    .prefix = "p",
                                    .interval_usec = 3600ULL * 1000 * 1000 };
        ck_assert_int_eq(statsd_new(e, &settings, m, &s, err, sizeof err), 0);
        metrics_count_hit(m, 0, METRICS_STATUS_ACCEPTED);
        ck_assert_int_eq(statsd_flush(s), 2);

        int cfd = accept(lfd, NULL, NULL);
        ck_assert_int_ge(cfd, 0);
        /* Let the loop see the connection complete and write. Bounded. */
        size_t got = 0;
        for (int i = 0; i < 50 && got < strlen("p.hit.accepted:1|c\np.connections:0|g\n"); i++) {
                ck_assert_int_ge(sd_event_run(e, 100 * 1000), 0);
                struct pollfd pfd = { .fd = cfd, .events = POLLIN };
                if (poll(&pfd, 1, 0) == 1) {
                        ssize_t n = recv(cfd, buf + got, sizeof buf - 1 - got, 0);
                        ck_assert_int_gt(n, 0);
                        got += (size_t) n;
                }
        }
        buf[got] = '\0';
        ck_assert_str_eq(buf, "p.hit.accepted:1|c\np.connections:0|g\n");
        ck_assert_uint_eq(metrics_statsd_dropped(m), 0);

        statsd_free(s);
        close(cfd);
        close(lfd);
        metrics_free(m);
        sd_event_unref(e);
}
END_TEST

static Suite *statsd_suite(void) {
        Suite *s = suite_create("statsd");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_udp_send);
        tcase_add_test(tc, test_udp_closed_port);
        tcase_add_test(tc, test_new_errors);
        tcase_add_test(tc, test_tcp_send);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        return check_run_suite(statsd_suite());
}
