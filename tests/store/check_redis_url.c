/* SPDX-License-Identifier: MIT */
/* The Redis store's URLs (redis-url.c): the table of URLs accepted and refused, and the fields
 * one parse fills in. Pure: no redis-server. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "check-run.h"
#include "store/redis-url.h"

START_TEST (test_urls) {
        static const struct {
                const char *url;
                int mode; /* -1: bad */
                const char *host_or_msg;
                int port, db;
        } cases[] = {
                { "redis://127.0.0.1:6380", REDIS_MODE_SINGLE, "127.0.0.1", 6380, 0 },
                { "redis://localhost", REDIS_MODE_SINGLE, "localhost", 6379, 0 },
                { "redis://h:1/5", REDIS_MODE_SINGLE, "h", 1, 5 },
                { "redis://u:p%3Aw@[::1]:7000/2", REDIS_MODE_SINGLE, "::1", 7000, 2 },
                { "redis+unix:///run/r.sock?db=3", REDIS_MODE_SINGLE, "", 0, 3 },
                { "redis+sentinel://a:1,b/mymaster?db=1", REDIS_MODE_SENTINEL, "a", 1, 1 },
                { "redis+cluster://a:1,b:2,c:3", REDIS_MODE_CLUSTER, "a", 1, 0 },
                { "http://x", -1, "unknown scheme", 0, 0 },
                { "redis://", -1, "empty host", 0, 0 },
                { "redis://h:0", -1, "bad port", 0, 0 },
                { "redis://h:65536", -1, "bad port", 0, 0 },
                { "redis://h:x", -1, "bad port", 0, 0 },
                { "redis://h/x", -1, "bad db", 0, 0 },
                { "redis://a,b", -1, "one host", 0, 0 },
                { "redis://h?db=1", -1, "unknown query", 0, 0 },
                { "redis://[::1", -1, "no ']'", 0, 0 },
                { "redis://:p%zz@h", -1, "percent-encoding", 0, 0 },
                { "redis+unix://relative", -1, "absolute path", 0, 0 },
                { "redis+sentinel://a:1", -1, "master's name is missing", 0, 0 },
                { "redis+cluster://a:1/3", -1, "no database", 0, 0 },
                { "redis+cluster://a:1?db=2", -1, "unknown query", 0, 0 },
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                RedisUrl u;
                char err[256] = "";
                int r = redis_url_parse(cases[i].url, &u, err, sizeof(err));

                if (cases[i].mode < 0) {
                        ck_assert_msg(r == -EINVAL, "%s: accepted", cases[i].url);
                        ck_assert_msg(strstr(err, cases[i].host_or_msg), "%s: '%s'", cases[i].url, err);
                        continue;
                }
                ck_assert_msg(r == 0, "%s: %s", cases[i].url, err);
                ck_assert_int_eq(u.mode, cases[i].mode);
                ck_assert_int_eq(u.db, cases[i].db);
                if (cases[i].host_or_msg[0]) {
                        ck_assert_str_eq(u.hosts[0].host, cases[i].host_or_msg);
                        ck_assert_int_eq(u.hosts[0].port, cases[i].port);
                }
        }
        {
                RedisUrl u;

                ck_assert_int_eq(redis_url_parse("redis://u:p%3Aw@[::1]:7000/2", &u, NULL, 0), 0);
                ck_assert_str_eq(u.user, "u");
                ck_assert_str_eq(u.password, "p:w");
                ck_assert_int_eq(redis_url_parse("redis+sentinel://a:1,b/mymaster", &u, NULL, 0), 0);
                ck_assert_uint_eq(u.n_hosts, 2);
                ck_assert_int_eq(u.hosts[1].port, REDIS_SENTINEL_DEFAULT_PORT);
                ck_assert_str_eq(u.master, "mymaster");
                ck_assert_int_eq(redis_url_parse("redis+unix:///run/r.sock", &u, NULL, 0), 0);
                ck_assert_str_eq(u.unix_path, "/run/r.sock");
                ck_assert(redis_url_is_redis("redis+cluster://x"));
                ck_assert(!redis_url_is_redis("/var/lib/divvyd"));
        }
}
END_TEST

static Suite *redis_url_suite(void) {
        Suite *s = suite_create("redis-url");
        TCase *tc = tcase_create("parse");

        tcase_add_test(tc, test_urls);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        return check_run_suite(redis_url_suite());
}
