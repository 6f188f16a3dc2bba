/* SPDX-License-Identifier: MIT */
/* http.c: the Prometheus endpoint and /healthz over a real loopback socket, and http_new()'s errors. */

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "daemon/http.h"
#include "daemon/metrics.h"
#include "shared/clock.h"
#include "metrics-test-util.h"
#include "check-run.h"

/* A connection to the endpoint on which request (its first len bytes) was sent; reads time
 * out after 10 s. */
static int http_send(uint16_t port, const char *request, size_t len) {
        struct sockaddr_in sin = { .sin_family = AF_INET,
                                   .sin_port = htons(port),
                                   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        struct timeval tv = { .tv_sec = 10 }; /* bounded */
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
        ck_assert_int_eq(connect(fd, (struct sockaddr *) &sin, sizeof sin), 0);
        ck_assert_int_eq(send(fd, request, len, MSG_NOSIGNAL), (ssize_t) len);
        return fd;
}

/* One HTTP/1.0 exchange with the endpoint: the whole response (headers and body). */
static char *http_get(uint16_t port, const char *request) {
        int fd = http_send(port, request, strlen(request));

        size_t size = 1 << 16, len = 0;
        char *buf = malloc(size);
        for (;;) {
                ck_assert_uint_lt(len, size - 1);
                ssize_t n = recv(fd, buf + len, size - 1 - len, 0);
                ck_assert_int_ge(n, 0);
                if (n == 0)
                        break;
                len += (size_t) n;
        }
        buf[len] = '\0';
        close(fd);
        return buf;
}

static const struct {
        const char *request;
        bool serving;
        const char *status_line;
        const char *body; /* NULL: not checked */
} http_cases[] = {
        { "GET /metrics HTTP/1.0\r\n\r\n", true, "HTTP/1.1 200 OK", NULL },
        { "GET /metrics?x=1 HTTP/1.0\r\n\r\n", true, "HTTP/1.1 200 OK", NULL },
        { "GET /healthz HTTP/1.0\r\n\r\n", true, "HTTP/1.1 200 OK", "ok\n" },
        { "GET /healthz HTTP/1.0\r\n\r\n", false, "HTTP/1.1 503 Service Unavailable", "not serving\n" },
        { "GET / HTTP/1.0\r\n\r\n", true, "HTTP/1.1 404 Not Found", "not found\n" },
        { "GET /metrics/ HTTP/1.0\r\n\r\n", true, "HTTP/1.1 404 Not Found", "not found\n" },
        { "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n", true, "HTTP/1.1 405 Method Not Allowed",
          "method not allowed\n" },
        { "HEAD /metrics HTTP/1.0\r\n\r\n", true, "HTTP/1.1 200 OK", "" },
};

START_TEST (test_http) {
        Metrics *m = NULL;
        Http *h = NULL;
        char err[256] = "";

        ck_assert_int_eq(metrics_new(&m), 0);
        metrics_set_serving(m, http_cases[_i].serving);
        metrics_set_connections(m, 4);
        HttpSettings settings = { .address = "127.0.0.1", .port = 0, .metrics_path = "/metrics" };
        ck_assert_int_eq(http_new(&settings, m, &h, err, sizeof err), 0);
        ck_assert_uint_gt(http_port(h), 0);

        char *response = http_get(http_port(h), http_cases[_i].request);
        ck_assert_msg(strncmp(response, http_cases[_i].status_line, strlen(http_cases[_i].status_line)) == 0,
                      "%s", response);
        char *body = strstr(response, "\r\n\r\n");
        ck_assert_ptr_nonnull(body);
        body += 4;
        if (http_cases[_i].body)
                ck_assert_str_eq(body, http_cases[_i].body);
        else {
                ck_assert_ptr_nonnull(strcasestr(response, "Content-Type: text/plain; version=0.0.4"));
                ck_assert_line(body, "divvy_tcp_connections_total 4");
                ck_assert_line(body, "divvyd_build_info{version=\"" PACKAGE_VERSION "\"} 1");
        }
        free(response);
        http_free(h);
        metrics_free(m);
}
END_TEST

START_TEST (test_http_settings) {
        Metrics *m = NULL;
        Http *h = NULL;
        char err[256] = "";

        ck_assert_int_eq(metrics_new(&m), 0);
        ck_assert_int_eq(http_new(&(HttpSettings){ .address = "localhost", .metrics_path = "/m" }, m, &h,
                                  err, sizeof err),
                         -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "not a numeric"));
        ck_assert_int_eq(http_new(&(HttpSettings){ .metrics_path = "metrics" }, m, &h, err, sizeof err),
                         -EINVAL);
        ck_assert_int_eq(http_new(&(HttpSettings){ .metrics_path = NULL }, m, &h, err, sizeof err), -EINVAL);

        /* IPv6 loopback, and the default address. */
        ck_assert_int_eq(
                http_new(&(HttpSettings){ .address = "::1", .metrics_path = "/m" }, m, &h, err, sizeof err),
                0);
        http_free(h);
        ck_assert_int_eq(http_new(&(HttpSettings){ .metrics_path = "/m" }, m, &h, err, sizeof err), 0);
        /* The same port twice: the second fails with a message. */
        Http *h2 = NULL;
        HttpSettings again = { .address = "127.0.0.1", .port = http_port(h), .metrics_path = "/m" };
        ck_assert_int_lt(http_new(&again, m, &h2, err, sizeof err), 0);
        ck_assert_ptr_nonnull(strstr(err, "cannot serve HTTP on 127.0.0.1 port"));
        http_free(h);
        ck_assert_ptr_null(http_free(NULL));
        metrics_free(m);
}
END_TEST

/* A client that sends part of a request's header and then nothing: its socket. */
static int slow_client(uint16_t port) {
        static const char part[] = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Slow: ";

        return http_send(port, part, sizeof part - 1);
}

/* True if the server closed fd (end of stream or reset), false if it is still open; waits up
 * to fd's receive timeout only if wait. */
static bool closed_by_server(int fd, bool wait) {
        char c;
        ssize_t n = recv(fd, &c, 1, wait ? 0 : MSG_DONTWAIT);

        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return false;
        ck_assert_int_le(n, 0); /* nothing is answered to half a request */
        return true;
}

/* Waits (bounded) until the endpoint has n connections open. */
static void wait_connections(Http *h, unsigned n) {
        for (unsigned i = 0; i < 10000 && http_connections(h) != n; i++)
                usleep(1000);
        ck_assert_uint_eq(http_connections(h), n);
}

START_TEST (test_http_slow_clients_do_not_starve_healthz) {
        /* More clients trickling header bytes than the endpoint has connections: each new
         * connection beyond HTTP_CONNECTIONS_EVICT closes the one that has waited longest, so
         * every /healthz probe is answered, and the slow clients closed are the oldest. */
        enum { N_SLOW = HTTP_CONNECTIONS_MAX + 8, N_PROBES = 5 };
        int slow[N_SLOW];
        Metrics *m = NULL;
        Http *h = NULL;
        char err[256] = "";
        unsigned closed = 0;

        ck_assert_int_eq(metrics_new(&m), 0);
        metrics_set_serving(m, true);
        ck_assert_int_eq(http_new(&(HttpSettings){ .address = "127.0.0.1", .metrics_path = "/metrics" }, m,
                                  &h, err, sizeof err),
                         0);
        for (size_t i = 0; i < N_SLOW; i++) {
                slow[i] = slow_client(http_port(h));
                wait_connections(h, i + 1 < HTTP_CONNECTIONS_EVICT ? i + 1 : HTTP_CONNECTIONS_EVICT);
        }
        for (unsigned i = 0; i < N_PROBES; i++) {
                char *response = http_get(http_port(h), "GET /healthz HTTP/1.0\r\n\r\n");
                ck_assert_msg(strncmp(response, "HTTP/1.1 200 OK", 15) == 0, "probe %u: \"%s\"", i,
                              response);
                free(response);
        }
        /* The closed ones are the oldest: the first N_SLOW - HTTP_CONNECTIONS_EVICT, and one more
         * for each probe that came while the one before it was not yet reaped. (shutdown() sent
         * their FIN before the probe's answer: no wait.) */
        while (closed < N_SLOW && closed_by_server(slow[closed], false))
                closed++;
        ck_assert_uint_ge(closed, N_SLOW - HTTP_CONNECTIONS_EVICT);
        ck_assert_uint_le(closed, N_SLOW - HTTP_CONNECTIONS_EVICT + N_PROBES);
        for (size_t i = 0; i < N_SLOW; i++) {
                ck_assert_msg(i < closed || !closed_by_server(slow[i], false),
                              "slow client %zu of %u closed", i, closed);
                close(slow[i]);
        }
        http_free(h);
        metrics_free(m);
}
END_TEST

START_TEST (test_http_request_deadline) {
        /* Requests not answered within HTTP_REQUEST_USEC of their connection's start: closed by
         * http_expire(), and only then. */
        int slow[3];
        Metrics *m = NULL;
        Http *h = NULL;
        char err[256] = "";

        ck_assert_int_eq(metrics_new(&m), 0);
        metrics_set_serving(m, true);
        ck_assert_int_eq(http_new(&(HttpSettings){ .address = "127.0.0.1", .metrics_path = "/metrics" }, m,
                                  &h, err, sizeof err),
                         0);
        for (size_t i = 0; i < 3; i++)
                slow[i] = slow_client(http_port(h));
        wait_connections(h, 3);
        ck_assert_uint_eq(http_expire(h, clock_usec(CLOCK_MONOTONIC)), 0);
        for (size_t i = 0; i < 3; i++)
                ck_assert(!closed_by_server(slow[i], false));
        ck_assert_uint_eq(http_expire(h, clock_usec(CLOCK_MONOTONIC) + HTTP_REQUEST_USEC), 3);
        ck_assert_uint_eq(http_connections(h), 0);
        for (size_t i = 0; i < 3; i++) {
                ck_assert(closed_by_server(slow[i], true));
                close(slow[i]);
        }
        char *response = http_get(http_port(h), "GET /healthz HTTP/1.0\r\n\r\n");
        ck_assert_msg(strncmp(response, "HTTP/1.1 200 OK", 15) == 0, "%s", response);
        free(response);
        http_free(h);
        metrics_free(m);
}
END_TEST

static Suite *http_suite(void) {
        Suite *s = suite_create("http");
        TCase *tc = tcase_create("http");

        tcase_add_loop_test(tc, test_http, 0, sizeof http_cases / sizeof http_cases[0]);
        tcase_add_test(tc, test_http_settings);
        tcase_add_test(tc, test_http_slow_clients_do_not_starve_healthz);
        tcase_add_test(tc, test_http_request_deadline);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        return check_run_suite(http_suite());
}
