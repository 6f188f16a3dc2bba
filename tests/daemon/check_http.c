/* SPDX-License-Identifier: MIT */
/* http.c: the Prometheus endpoint and /healthz over a real loopback socket, and http_new()'s errors. */

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "daemon/http.h"
#include "daemon/metrics.h"
#include "metrics-test-util.h"
#include "check-run.h"

/* One HTTP/1.0 exchange with the endpoint: the whole response (headers and body). */
static char *http_get(uint16_t port, const char *request) {
        struct sockaddr_in sin = { .sin_family = AF_INET,
                                   .sin_port = htons(port),
                                   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        struct timeval tv = { .tv_sec = 10 }; /* bounded */
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
        ck_assert_int_eq(connect(fd, (struct sockaddr *) &sin, sizeof sin), 0);
        ck_assert_int_eq(send(fd, request, strlen(request), MSG_NOSIGNAL), (ssize_t) strlen(request));

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

static Suite *http_suite(void) {
        Suite *s = suite_create("http");
        TCase *tc = tcase_create("http");

        tcase_add_loop_test(tc, test_http, 0, sizeof http_cases / sizeof http_cases[0]);
        tcase_add_test(tc, test_http_settings);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        return check_run_suite(http_suite());
}
