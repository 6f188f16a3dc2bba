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
#include <sys/ioctl.h>
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

/* A TCP listener on 127.0.0.1 and an ephemeral port. */
static int tcp_listen(uint16_t *ret_port) {
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof sin;
        int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(lfd, 0);
        ck_assert_int_eq(bind(lfd, (struct sockaddr *) &sin, sizeof sin), 0);
        ck_assert_int_eq(listen(lfd, 4), 0);
        ck_assert_int_eq(getsockname(lfd, (struct sockaddr *) &sin, &len), 0);
        *ret_port = ntohs(sin.sin_port);
        return lfd;
}

/* Runs the loop until the peer cfd has received exactly want (bounded), into buf. */
static void tcp_receive(sd_event *e, int cfd, char *buf, size_t size, const char *want) {
        size_t got = 0;

        for (int i = 0; i < 50 && got < strlen(want); i++) {
                ck_assert_int_ge(sd_event_run(e, 100 * 1000), 0);
                struct pollfd pfd = { .fd = cfd, .events = POLLIN };
                if (poll(&pfd, 1, 0) == 1) {
                        ssize_t n = recv(cfd, buf + got, size - 1 - got, 0);
                        ck_assert_int_gt(n, 0);
                        got += (size_t) n;
                }
        }
        buf[got] = '\0';
        ck_assert_str_eq(buf, want);
}

/* A statsd sender over TCP (the given prefix, flushed only when asked) connected to a
 * listener of ours; cfd is our end of the connection. */
typedef struct TcpFixture {
        int lfd, cfd;
        uint16_t port;
        sd_event *e;
        Metrics *m;
        Statsd *s;
} TcpFixture;

static void tcp_setup(TcpFixture *f, const char *prefix) {
        char err[256] = "";

        *f = (TcpFixture){ .cfd = -1 };
        f->lfd = tcp_listen(&f->port);
        ck_assert_int_ge(sd_event_new(&f->e), 0);
        ck_assert_int_eq(metrics_new(&f->m), 0);
        StatsdSettings settings = { .host = "127.0.0.1",
                                    .port = f->port,
                                    .tcp = true,
                                    .prefix = prefix,
                                    .interval_usec = 3600ULL * 1000 * 1000 };
        ck_assert_int_eq(statsd_new(f->e, &settings, f->m, &f->s, err, sizeof err), 0);
        f->cfd = accept(f->lfd, NULL, NULL);
        ck_assert_int_ge(f->cfd, 0);
}

static void tcp_teardown(TcpFixture *f) {
        statsd_free(f->s);
        close(f->cfd);
        close(f->lfd);
        metrics_free(f->m);
        sd_event_unref(f->e);
}

START_TEST (test_tcp_send) {
        /* Lines over TCP, each ending in "\n", buffered while the connection completes (the
         * loop has not run: the sender does not know it is connected yet). */
        TcpFixture f;
        char buf[4096];

        tcp_setup(&f, "p");
        metrics_count_hit(f.m, 0, METRICS_STATUS_ACCEPTED);
        ck_assert_int_eq(statsd_flush(f.s), 2);
        tcp_receive(f.e, f.cfd, buf, sizeof buf, "p.hit.accepted:1|c\np.connections:0|g\n");
        ck_assert_uint_eq(metrics_statsd_dropped(f.m), 0);
        tcp_teardown(&f);
}
END_TEST

/* Our end of the connection to the peer port: the statsd sender's socket. */
static int find_sender_fd(uint16_t peer_port, int not_fd) {
        for (int fd = 3; fd < 1024; fd++) {
                struct sockaddr_in sin;
                socklen_t len = sizeof sin;

                if (fd != not_fd && getpeername(fd, (struct sockaddr *) &sin, &len) == 0 &&
                    sin.sin_family == AF_INET && ntohs(sin.sin_port) == peer_port)
                        return fd;
        }
        return -1;
}

START_TEST (test_tcp_peer_that_talks) {
        /* statsd never talks back; what a collector sends anyway is read and dropped, at most
         * STATSD_DISCARD_MAX bytes per turn of the loop. It was read until the socket ran
         * empty: a peer that never stops sending held the loop there for good. */
        TcpFixture f;
        int sfd, unread_before, unread;
        char buf[4096];
        static char junk[256 * 1024];
        size_t sent = 0;

        tcp_setup(&f, NULL);
        ck_assert_int_eq(statsd_flush(f.s), 1);
        tcp_receive(f.e, f.cfd, buf, sizeof buf, "connections:0|g\n");

        /* Fill the sender's socket while its loop does not run. */
        sfd = find_sender_fd(f.port, f.cfd);
        ck_assert_int_ge(sfd, 0);
        memset(junk, 'x', sizeof junk);
        while (sent < sizeof junk) {
                ssize_t n = send(f.cfd, junk + sent, sizeof junk - sent, MSG_DONTWAIT);
                if (n <= 0)
                        break; /* its receive buffer is full */
                sent += (size_t) n;
        }
        ck_assert_int_eq(ioctl(sfd, FIONREAD, &unread_before), 0);
        ck_assert_int_gt(unread_before, 3 * STATSD_DISCARD_MAX);

        /* One turn of the loop: some read, most left for later turns */
        ck_assert_int_gt(sd_event_run(f.e, 0), 0);
        ck_assert_int_eq(ioctl(sfd, FIONREAD, &unread), 0);
        ck_assert_int_lt(unread, unread_before);
        ck_assert_int_ge(unread, unread_before - (int) STATSD_DISCARD_MAX - (int) sizeof buf);

        /* The next turns take the rest; the connection stays up and works */
        for (int i = 0; i < 1000 && unread > 0; i++) {
                ck_assert_int_ge(sd_event_run(f.e, 100 * 1000), 0);
                ck_assert_int_eq(ioctl(sfd, FIONREAD, &unread), 0);
        }
        ck_assert_int_eq(unread, 0);
        ck_assert_int_eq(statsd_flush(f.s), 1);
        tcp_receive(f.e, f.cfd, buf, sizeof buf, "connections:0|g\n");
        tcp_teardown(&f);
}
END_TEST

static Suite *statsd_suite(void) {
        Suite *s = suite_create("statsd");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_udp_send);
        tcase_add_test(tc, test_udp_closed_port);
        tcase_add_test(tc, test_new_errors);
        tcase_add_test(tc, test_tcp_send);
        tcase_add_test(tc, test_tcp_peer_that_talks);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        return check_run_suite(statsd_suite());
}
