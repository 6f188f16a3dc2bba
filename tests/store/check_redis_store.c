/* SPDX-License-Identifier: MIT */
/* The Redis store (redis-store.c) against a redis-server of the test's own, driven by a poll()
 * loop: results, keys, a fleet, NOSCRIPT, a dead or hung server, the breaker, AUTH, Unix
 * sockets, a one-node cluster. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "check-run.h"
#include "core/algorithm.h"
#include "core/rules.h"
#include "redis-test-util.h"
#include "store/redis-script.h"
#include "store/redis-store.h"

#define WAIT_USEC (5ULL * USEC_PER_SEC) /* a bound on each wait, never reached when things work */

static TestRedis srv, srv2; /* srv2: a replica of srv, where a test needs one */
static TestLoop loop;
static RedisIo io;

static int store_on_io(void *target, int fd, uint32_t revents) {
        return redis_store_on_io(target, fd, revents);
}

static int store_on_timer(void *target, uint64_t now) {
        return redis_store_on_timer(target, now);
}

static void setup(void) {
        memset(&srv, 0, sizeof(srv));
        memset(&srv2, 0, sizeof(srv2));
        memset(&loop, 0, sizeof(loop));
        io = test_loop_io(&loop);
        loop.on_io = store_on_io;
        loop.on_timer = store_on_timer;
        test_redis_cluster = false; /* CK_FORK=no: test_cluster_one_node's must not leak into the next */
}

static void teardown(void) {
        test_redis_stop(&srv);
        if (srv2.dir[0])
                test_redis_stop(&srv2);
}

/* ---- rules and hits ---- */

typedef struct TestRule {
        Rule rule;
        RulePattern patterns[2];
} TestRule;

static void test_rule(TestRule *t, uint64_t limit, uint64_t reset, Algorithm algo, uint8_t id) {
        const char *reason = NULL;

        memset(t, 0, sizeof(*t));
        t->patterns[0] = (RulePattern){
                .key = (char *) "method", .key_len = 6, .value = (char *) "GET", .value_len = 3
        };
        t->patterns[1] = (RulePattern){
                .key = (char *) "path", .key_len = 4, .value = (char *) "/x", .value_len = 2
        };
        t->rule.patterns = t->patterns;
        t->rule.n_patterns = 2;
        t->rule.divvy_bucket = (char *) "method=GET path=/x";
        t->rule.divvy_bucket_len = 18;
        t->rule.credit_limit = limit;
        t->rule.reset_seconds = reset;
        t->rule.algo = (AlgoParams){ .algorithm = algo, .credit_limit = limit, .reset_seconds = reset };
        ck_assert_int_eq(algo_params_prepare(&t->rule.algo, &reason), 0);
        memset(t->rule.id, id, RULE_ID_SIZE);
}

static StoreHit hit_of(const TestRule *t, const char *actor, uint32_t group) {
        return (StoreHit){
                .rule_id = t->rule.id,
                .actor = actor,
                .actor_len = actor ? strlen(actor) : 0,
                .credit_limit = t->rule.credit_limit,
                .reset_seconds = t->rule.reset_seconds,
                .algo = &t->rule.algo,
                .op = STORE_HIT,
                .group = group,
                .rule = &t->rule,
        };
}

typedef struct Done {
        int calls;
        int order[16];
        bool done;
} Done;

static Done *done_log;
static void on_done(void *userdata, int error) {
        Done *d = done_log;

        ck_assert_int_eq(error, 0);
        ck_assert_int_lt(d->calls, 16);
        d->order[d->calls++] = (int) (intptr_t) userdata;
        d->done = true;
}

/* Submits hits[0..n) and runs the loop until done (bounded). */
static void run_batch(RedisStore *s, StoreHit *hits, size_t n) {
        Done d = { 0 };

        done_log = &d;
        ck_assert_int_eq(redis_store_submit(s, hits, n, 0, on_done, (void *) (intptr_t) 1), 0);
        ck_assert(test_loop_until(&loop, &d.done, WAIT_USEC));
        ck_assert_int_eq(d.calls, 1);
}

static RedisStore *open_store(const char *url, const RedisStoreOptions *extra) {
        RedisStoreOptions o = extra ? *extra : (RedisStoreOptions){ 0 };
        RedisStore *s = NULL;
        char err[512] = "";

        o.url = url;
        if (!o.timeout_usec)
                o.timeout_usec = 500 * USEC_PER_MSEC; /* this shared machine: slow is not what we test */
        ck_assert_msg(redis_store_open(&o, &io, &s, err, sizeof(err)) == 0, "open %s: %s", url, err);
        loop.target = s;
        return s;
}

static char *tcp_url(char *buf, size_t size) {
        snprintf(buf, size, "redis://127.0.0.1:%d", srv.port);
        return buf;
}

#define COMPAT_KEY "divvy:method=GET path=/x:alice:3:60"

/* One pipelined batch of five HITs on a fixed-window rule: divvy's answers and key. */
START_TEST (test_compat_hits) {
        TestRule r;
        StoreHit hits[5];
        RedisStore *s;
        RedisStoreStats st;
        redisReply *rep;
        char url[64];

        test_redis_start(&srv);
        test_rule(&r, 3, 60, ALGORITHM_FIXED_WINDOW, 0x11);
        for (int i = 0; i < 5; i++)
                hits[i] = hit_of(&r, "alice", 0);
        s = open_store(tcp_url(url, sizeof(url)), NULL);
        run_batch(s, hits, 5);
        for (int i = 0; i < 5; i++) {
                ck_assert_int_eq(hits[i].error, 0);
                ck_assert_int_eq(hits[i].res.allowed, i < 3);
                ck_assert_uint_eq(hits[i].res.credit, i < 3 ? 2 - (uint64_t) i : 0);
        }
        rep = test_redis_command(&srv, "GET %s", COMPAT_KEY);
        ck_assert_int_eq(rep->type, REDIS_REPLY_STRING);
        ck_assert_str_eq(rep->str, "0");
        freeReplyObject(rep);
        rep = test_redis_command(&srv, "TTL %s", COMPAT_KEY);
        ck_assert_int_gt(rep->integer, 0);
        ck_assert_int_le(rep->integer, 60);
        freeReplyObject(rep);
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_int_eq(st.state, REDIS_STORE_CONNECTED);
        ck_assert_str_eq(redis_store_state_to_string(st.state), "connected");
        ck_assert_uint_eq(st.batches, 1);
        ck_assert_uint_eq(st.calls, 1); /* five lone hits: one script call */
        ck_assert_uint_eq(st.hits_failed, 0);
        ck_assert_uint_eq(st.rtt_count, 1);
        ck_assert_str_eq(st.address, url + strlen("redis://"));
        redis_store_close(s);
}
END_TEST

/* A sliding-window rule uses divvyd's own key, with the actor's hash tag. */
START_TEST (test_own_key) {
        TestRule r;
        StoreHit h;
        RedisStore *s;
        redisReply *rep;
        char url[64];

        test_redis_start(&srv);
        test_rule(&r, 10, 60, ALGORITHM_SLIDING_WINDOW, 0xab);
        h = hit_of(&r, "bob", 0);
        s = open_store(tcp_url(url, sizeof(url)), NULL);
        run_batch(s, &h, 1);
        ck_assert_int_eq(h.error, 0);
        ck_assert(h.res.allowed);
        ck_assert_uint_eq(h.res.credit, 9);
        rep = test_redis_command(&srv, "EXISTS divvyd:{bob}:abababababababababababababababab");
        ck_assert_int_eq(rep->integer, 1);
        freeReplyObject(rep);
        redis_store_close(s);
}
END_TEST

/* Two stores on one Redis share the counter; batches complete in submission order. */
START_TEST (test_fleet_and_order) {
        TestRule r;
        StoreHit a[2], b[2], c[1];
        RedisStore *s1, *s2;
        RedisIo io2;
        TestLoop loop2 = { 0 };
        Done d = { 0 };
        char url[64];

        test_redis_start(&srv);
        test_rule(&r, 3, 60, ALGORITHM_FIXED_WINDOW, 0x11);
        s1 = open_store(tcp_url(url, sizeof(url)), NULL);
        a[0] = a[1] = hit_of(&r, "alice", 0);
        run_batch(s1, a, 2);
        /* the second store has its own loop */
        io2 = test_loop_io(&loop2);
        loop2.on_io = store_on_io;
        loop2.on_timer = store_on_timer;
        {
                RedisStoreOptions o = { .url = url, .timeout_usec = 500 * USEC_PER_MSEC };
                char err[256];

                ck_assert_int_eq(redis_store_open(&o, &io2, &s2, err, sizeof(err)), 0);
                loop2.target = s2;
        }
        b[0] = b[1] = hit_of(&r, "alice", 0);
        done_log = &d;
        ck_assert_int_eq(redis_store_submit(s2, b, 2, 0, on_done, (void *) (intptr_t) 7), 0);
        ck_assert(test_loop_until(&loop2, &d.done, WAIT_USEC));
        ck_assert(b[0].res.allowed);
        ck_assert_uint_eq(b[0].res.credit, 0);
        ck_assert(!b[1].res.allowed); /* the fleet's third and fourth hit */

        /* order: two batches on s1, completed 1 then 2 */
        memset(&d, 0, sizeof(d));
        a[0] = hit_of(&r, "carol", 0);
        a[1] = hit_of(&r, "carol", 0);
        c[0] = hit_of(&r, "carol", 0);
        ck_assert_int_eq(redis_store_submit(s1, a, 2, 0, on_done, (void *) (intptr_t) 1), 0);
        ck_assert_int_eq(redis_store_submit(s1, c, 1, 0, on_done, (void *) (intptr_t) 2), 0);
        for (int i = 0; i < 1000 && d.calls < 2; i++)
                test_loop_once(&loop, 10000);
        ck_assert_int_eq(d.calls, 2);
        ck_assert_int_eq(d.order[0], 1);
        ck_assert_int_eq(d.order[1], 2);
        ck_assert_uint_eq(c[0].res.credit, 0);
        redis_store_close(s1);
        redis_store_close(s2);
}
END_TEST

/* SCRIPT FLUSH: the next call gets NOSCRIPT, is resent as EVAL, and no hit sees an error. */
START_TEST (test_noscript) {
        TestRule r;
        StoreHit h[3];
        RedisStore *s;
        RedisStoreStats st;
        redisReply *rep;
        char url[64];

        test_redis_start(&srv);
        test_rule(&r, 3, 60, ALGORITHM_FIXED_WINDOW, 0x11);
        s = open_store(tcp_url(url, sizeof(url)), NULL);
        h[0] = hit_of(&r, "alice", 0);
        run_batch(s, h, 1);
        rep = test_redis_command(&srv, "SCRIPT FLUSH");
        freeReplyObject(rep);
        h[0] = h[1] = h[2] = hit_of(&r, "alice", 0);
        run_batch(s, h, 3);
        for (int i = 0; i < 3; i++)
                ck_assert_int_eq(h[i].error, 0);
        ck_assert(h[1].res.allowed);
        ck_assert(!h[2].res.allowed);
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.noscript_reloads, 1);
        ck_assert_uint_eq(st.hits_failed, 0);
        rep = test_redis_command(&srv, "SCRIPT EXISTS %s", redis_script_sha1);
        ck_assert_int_eq(rep->element[0]->integer, 1); /* EVAL cached it */
        freeReplyObject(rep);
        redis_store_close(s);
}
END_TEST

/* Submits until a batch has no failed hit (or the bound): the store recovers by itself. */
static bool until_ok(RedisStore *s, TestRule *r, int max_tries) {
        for (int i = 0; i < max_tries; i++) {
                StoreHit h = hit_of(r, "dave", 0);

                run_batch(s, &h, 1);
                if (h.error == 0)
                        return true;
                for (int k = 0; k < 5; k++)
                        test_loop_once(&loop, 10000);
        }
        return false;
}

/* The server is killed: hits fail (the batch completes); restarted: the same store recovers. */
START_TEST (test_server_killed_and_back) {
        TestRule r;
        StoreHit h;
        RedisStore *s;
        RedisStoreStats st;
        RedisStoreOptions o = { .backoff_min_usec = 20 * USEC_PER_MSEC,
                                .backoff_max_usec = 100 * USEC_PER_MSEC,
                                .breaker_threshold = 1000 };
        char url[64];

        test_redis_start(&srv);
        test_rule(&r, 100, 60, ALGORITHM_FIXED_WINDOW, 0x22);
        s = open_store(tcp_url(url, sizeof(url)), &o);
        ck_assert(until_ok(s, &r, 1));
        test_redis_kill(&srv);
        h = hit_of(&r, "dave", 0);
        run_batch(s, &h, 1);
        ck_assert_int_lt(h.error, 0);
        ck_assert_int_ne(h.error, -ETIMEDOUT); /* a dead server is seen at once, not at the deadline */
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.hits_failed, 1);
        ck_assert_str_ne(st.last_error, "");
        test_redis_start(&srv);
        ck_assert(until_ok(s, &r, 200));
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_uint_ge(st.reconnects, 1);
        ck_assert_int_eq(st.state, REDIS_STORE_CONNECTED);
        redis_store_close(s);
}
END_TEST

/* A hung server (SIGSTOP): the batch completes at its deadline with -ETIMEDOUT; once it runs
 * again the late reply is dropped and the next batch is answered. */
START_TEST (test_hung_server_timeout) {
        TestRule r;
        StoreHit h;
        RedisStore *s;
        RedisStoreStats st;
        RedisStoreOptions o = { .timeout_usec = 100 * USEC_PER_MSEC, .breaker_threshold = 1000 };
        char url[64];

        test_redis_start(&srv);
        test_rule(&r, 100, 60, ALGORITHM_FIXED_WINDOW, 0x22);
        s = open_store(tcp_url(url, sizeof(url)), &o);
        ck_assert(until_ok(s, &r, 1));
        ck_assert_int_eq(kill(srv.pid, SIGSTOP), 0);
        h = hit_of(&r, "dave", 0);
        run_batch(s, &h, 1);
        ck_assert_int_eq(h.error, -ETIMEDOUT);
        ck_assert_int_eq(kill(srv.pid, SIGCONT), 0);
        h = hit_of(&r, "dave", 0);
        run_batch(s, &h, 1);
        ck_assert_int_eq(h.error, 0);
        ck_assert_uint_eq(h.res.credit, 100 - 3); /* the timed-out hit counted on the server */
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.errors_timeout, 1);
        redis_store_close(s);
}
END_TEST

/* Several batches in flight timing out together (one stall of a batch's time) are not a dead
 * server: the connection is kept; batches timing out one after another for threshold x the
 * timeout, with no reply in between, are: it is closed and made again. */
START_TEST (test_stall_is_not_death) {
        TestRule r;
        StoreHit h[3];
        RedisStore *s;
        RedisStoreStats st;
        RedisStoreOptions o = { .timeout_usec = 50 * USEC_PER_MSEC, .breaker_threshold = 3 };
        char url[64];
        Done d = { 0 };

        test_redis_start(&srv);
        test_rule(&r, 100, 60, ALGORITHM_FIXED_WINDOW, 0x23);
        s = open_store(tcp_url(url, sizeof(url)), &o);
        ck_assert(until_ok(s, &r, 1));
        ck_assert_int_eq(kill(srv.pid, SIGSTOP), 0);
        done_log = &d;
        for (int i = 0; i < 3; i++) {
                h[i] = hit_of(&r, "erin", 0);
                ck_assert_int_eq(redis_store_submit(s, h + i, 1, 0, on_done, (void *) (intptr_t) (i + 1)),
                                 0);
        }
        for (int k = 0; k < 200 && d.calls < 3; k++)
                test_loop_once(&loop, 10000);
        ck_assert_int_eq(d.calls, 3);
        for (int i = 0; i < 3; i++)
                ck_assert_int_eq(h[i].error, -ETIMEDOUT);
        ck_assert_int_eq(kill(srv.pid, SIGCONT), 0);
        h[0] = hit_of(&r, "erin", 0);
        run_batch(s, h, 1);
        ck_assert_int_eq(h[0].error, 0);
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.reconnects, 0);
        ck_assert_uint_eq(st.errors_connection, 0);

        /* a real stall: three batches one after another, 150 ms without a reply */
        ck_assert_int_eq(kill(srv.pid, SIGSTOP), 0);
        for (int i = 0; i < 3; i++) {
                h[0] = hit_of(&r, "erin", 0);
                run_batch(s, h, 1);
                ck_assert_int_eq(h[0].error, -ETIMEDOUT);
        }
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        /* the breaker opened too (threshold 3), its sentence quoting the one before it whole
         * (set_error() formats from last_error into last_error); the reconnect is seen below */
        ck_assert_msg(strstr(st.last_error, "(last: a batch had no reply within 50 ms)"), "%s",
                      st.last_error);
        ck_assert_int_eq(kill(srv.pid, SIGCONT), 0);
        ck_assert(until_ok(s, &r, 50));
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_uint_ge(st.reconnects, 1);
        redis_store_close(s);
}
END_TEST

/* After N failed batches the breaker opens (batches refused at once), then one probe closes it. */
START_TEST (test_breaker) {
        TestRule r;
        StoreHit h;
        RedisStore *s;
        RedisStoreStats st;
        RedisStoreOptions o = { .backoff_min_usec = 20 * USEC_PER_MSEC,
                                .backoff_max_usec = 50 * USEC_PER_MSEC,
                                .breaker_threshold = 3 };
        char url[64];
        uint64_t calls;

        test_redis_start(&srv);
        test_rule(&r, 100, 60, ALGORITHM_FIXED_WINDOW, 0x22);
        s = open_store(tcp_url(url, sizeof(url)), &o);
        ck_assert(until_ok(s, &r, 1));
        test_redis_kill(&srv);
        for (int i = 0; i < 3; i++) {
                h = hit_of(&r, "dave", 0);
                run_batch(s, &h, 1);
                ck_assert_int_lt(h.error, 0);
        }
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.breaker_opens, 1);
        ck_assert_int_eq(st.state, REDIS_STORE_BREAKER_OPEN);
        ck_assert_ptr_nonnull(strstr(st.last_error, "breaker"));
        calls = st.calls;
        h = hit_of(&r, "dave", 0);
        run_batch(s, &h, 1);
        ck_assert_int_eq(h.error, -ECONNREFUSED);
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_uint_ge(st.errors_refused, 1);
        ck_assert_uint_eq(st.calls, calls); /* refused by the breaker: nothing was sent */
        test_redis_start(&srv);
        ck_assert(until_ok(s, &r, 300));
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_int_eq(st.state, REDIS_STORE_CONNECTED);
        redis_store_close(s);
}
END_TEST

/* Runs the loop, submitting nothing, until the store's state is want or its breaker opened
 * min_opens times (0: not looked at); at most WAIT_USEC. */
static bool idle_until(RedisStore *s, RedisStoreState want, uint64_t min_opens) {
        uint64_t end = clock_usec(CLOCK_MONOTONIC) + WAIT_USEC;
        RedisStoreStats st;

        for (;;) {
                ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
                if (min_opens ? st.breaker_opens >= min_opens : st.state == want)
                        return true;
                if (clock_usec(CLOCK_MONOTONIC) >= end)
                        return false;
                test_loop_once(&loop, 10000);
        }
}

/* Opens the breaker of s (threshold 3): the server killed, three failed batches. */
static void open_breaker(RedisStore *s, TestRule *r) {
        RedisStoreStats st;
        StoreHit h;

        test_redis_kill(&srv);
        for (int i = 0; i < 3; i++) {
                h = hit_of(r, "dave", 0);
                run_batch(s, &h, 1);
                ck_assert_int_lt(h.error, 0);
        }
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_int_eq(st.state, REDIS_STORE_BREAKER_OPEN);
}

/* Once its open period is over the breaker probes on its own, with no batch to be the probe:
 * while the server is down it opens again and again (the timer armed each time); once the
 * server is back it closes and the store is connected, before any batch comes (an idle daemon
 * said "breaker-open" until the next request). The probe is a PING, not a script call. */
START_TEST (test_breaker_probes_when_idle) {
        TestRule r;
        StoreHit h;
        RedisStore *s;
        RedisStoreStats st;
        RedisStoreOptions o = { .backoff_min_usec = 20 * USEC_PER_MSEC,
                                .backoff_max_usec = 80 * USEC_PER_MSEC,
                                .breaker_threshold = 3 };
        char url[64];
        uint64_t calls;

        test_redis_start(&srv);
        test_rule(&r, 100, 60, ALGORITHM_FIXED_WINDOW, 0x24);
        s = open_store(tcp_url(url, sizeof(url)), &o);
        ck_assert(until_ok(s, &r, 1));
        open_breaker(s, &r);
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.breaker_opens, 1);
        calls = st.calls;
        ck_assert_uint_ne(loop.timer, 0); /* the end of the open period */

        /* down: each probe fails, the breaker opens again */
        ck_assert_msg(idle_until(s, REDIS_STORE_BREAKER_OPEN, 4), "the breaker did not probe on its own");
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_int_eq(st.state, REDIS_STORE_BREAKER_OPEN);
        ck_assert_uint_eq(st.calls, calls);

        /* back: closed, connected, still with no batch */
        test_redis_start(&srv);
        ck_assert_msg(idle_until(s, REDIS_STORE_CONNECTED, 0), "still %s after the server came back",
                      redis_store_state_to_string(redis_store_state(s)));
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_uint_ge(st.breaker_probes, 1);
        ck_assert_uint_eq(st.calls, calls);
        ck_assert_uint_eq(st.batches_pending, 0);
        h = hit_of(&r, "dave", 0);
        run_batch(s, &h, 1); /* sent, not refused: the breaker is closed */
        ck_assert_int_eq(h.error, 0);
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.calls, calls + 1);
        redis_store_close(s);
}
END_TEST

/* The breaker's own probe on a hung server (SIGSTOP) whose connection is up and has answered:
 * while its PING waits, batches are refused at once (one probe at a time); with no reply by the
 * connect timeout the connection is closed and the breaker opens again; once the server runs, a
 * later probe closes it, no batch needed. The breaker is opened by batches that time out with a
 * late reply read between them: a slow server, whose connection is kept (test_stall_is_not_death). */
START_TEST (test_breaker_probe_hung) {
        TestRule r;
        StoreHit h;
        RedisStore *s;
        RedisStoreStats st;
        RedisStoreOptions o = { .timeout_usec = 100 * USEC_PER_MSEC,
                                .backoff_min_usec = 20 * USEC_PER_MSEC,
                                .backoff_max_usec = 80 * USEC_PER_MSEC,
                                .connect_timeout_usec = 1000 * USEC_PER_MSEC,
                                .breaker_threshold = 3 };
        char url[64];
        uint64_t calls, opens, end;

        test_redis_start(&srv);
        test_rule(&r, 100, 60, ALGORITHM_FIXED_WINDOW, 0x25);
        s = open_store(tcp_url(url, sizeof(url)), &o);
        ck_assert(until_ok(s, &r, 1));
        for (int i = 0; i < 3; i++) {
                redisReply *pong;

                if (i > 0) { /* the late reply to the last batch: written once PING is answered */
                        ck_assert_int_eq(kill(srv.pid, SIGCONT), 0);
                        pong = test_redis_command(&srv, "PING");
                        ck_assert_ptr_nonnull(pong);
                        freeReplyObject(pong);
                        for (int k = 0; k < 3; k++)
                                test_loop_once(&loop, 10000);
                }
                ck_assert_int_eq(kill(srv.pid, SIGSTOP), 0);
                h = hit_of(&r, "dave", 0);
                run_batch(s, &h, 1);
                ck_assert_int_eq(h.error, -ETIMEDOUT);
        }
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_int_eq(st.state, REDIS_STORE_BREAKER_OPEN);
        ck_assert_uint_eq(st.reconnects, 0); /* the connection is kept */
        calls = st.calls;

        /* a probe in flight: its PING sent, no reply */
        end = clock_usec(CLOCK_MONOTONIC) + WAIT_USEC;
        while (st.breaker_probes == 0 && clock_usec(CLOCK_MONOTONIC) < end) {
                test_loop_once(&loop, 10000);
                ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        }
        ck_assert_uint_eq(st.breaker_probes, 1);
        opens = st.breaker_opens;
        h = hit_of(&r, "dave", 0);
        run_batch(s, &h, 1);
        ck_assert_int_eq(h.error, -ECONNREFUSED); /* refused: the probe is the store's */
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.calls, calls);
        ck_assert_int_eq(st.state, REDIS_STORE_BREAKER_OPEN);

        /* no reply within the connect timeout: closed, open again */
        ck_assert(idle_until(s, REDIS_STORE_BREAKER_OPEN, opens + 1));
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_msg(strstr(st.last_error, ": no reply to PING within 1000 ms)"), "%s", st.last_error);

        ck_assert_int_eq(kill(srv.pid, SIGCONT), 0);
        ck_assert_msg(idle_until(s, REDIS_STORE_CONNECTED, 0), "still %s after SIGCONT",
                      redis_store_state_to_string(redis_store_state(s)));
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.calls, calls);
        ck_assert_uint_ge(st.reconnects, 1);
        h = hit_of(&r, "dave", 0);
        run_batch(s, &h, 1);
        ck_assert_int_eq(h.error, 0);
        redis_store_close(s);
}
END_TEST

/* AUTH: the URL's password, the option's override, and a wrong one (-EACCES). */
START_TEST (test_auth) {
        TestRule r;
        StoreHit h;
        RedisStore *s;
        RedisStoreOptions o = { .password = "p@ss word", .breaker_threshold = 1000 };
        char url[128];

        snprintf(srv.password, sizeof(srv.password), "p@ss word");
        test_redis_start(&srv);
        test_rule(&r, 100, 60, ALGORITHM_FIXED_WINDOW, 0x22);
        snprintf(url, sizeof(url), "redis://:p%%40ss%%20word@127.0.0.1:%d", srv.port);
        s = open_store(url, NULL);
        ck_assert(until_ok(s, &r, 1));
        redis_store_close(s);
        snprintf(url, sizeof(url), "redis://:wrong@127.0.0.1:%d", srv.port);
        s = open_store(url, &o);
        ck_assert(until_ok(s, &r, 1));
        redis_store_close(s);
        o.password = NULL;
        s = open_store(url, &o);
        h = hit_of(&r, "dave", 0);
        run_batch(s, &h, 1);
        ck_assert_int_eq(h.error, -EACCES);
        redis_store_close(s);
}
END_TEST

/* redis+unix:// with ?db=N. */
START_TEST (test_unix_db) {
        TestRule r;
        StoreHit h;
        RedisStore *s;
        redisContext *c;
        redisReply *rep;
        char url[200];

        test_redis_start(&srv);
        test_rule(&r, 3, 60, ALGORITHM_FIXED_WINDOW, 0x11);
        snprintf(url, sizeof(url), "redis+unix://%s?db=2", srv.sock);
        s = open_store(url, NULL);
        h = hit_of(&r, "alice", 0);
        run_batch(s, &h, 1);
        ck_assert_int_eq(h.error, 0);
        c = test_redis_client(&srv);
        freeReplyObject(redisCommand(c, "SELECT 2"));
        rep = redisCommand(c, "GET %s", COMPAT_KEY);
        ck_assert_int_eq(rep->type, REDIS_REPLY_STRING);
        ck_assert_str_eq(rep->str, "2");
        freeReplyObject(rep);
        redisFree(c);
        redis_store_close(s);
}
END_TEST

/* A group of two where the second is denied: neither is written (one script call). */
START_TEST (test_group_all_or_nothing) {
        TestRule r1, r2;
        StoreHit h[3];
        RedisStore *s;
        RedisStoreStats st;
        char url[64];

        test_redis_start(&srv);
        test_rule(&r1, 5, 60, ALGORITHM_SLIDING_WINDOW, 0x01);
        test_rule(&r2, 1, 60, ALGORITHM_SLIDING_WINDOW, 0x02);
        s = open_store(tcp_url(url, sizeof(url)), NULL);
        h[0] = hit_of(&r2, "erin", 0); /* uses r2's only credit */
        run_batch(s, h, 1);
        h[0] = hit_of(&r1, "erin", 0); /* a canary */
        h[1] = hit_of(&r1, "erin", 9);
        h[2] = hit_of(&r2, "erin", 9);
        run_batch(s, h, 3);
        ck_assert(h[0].res.allowed);
        ck_assert_uint_eq(h[0].res.credit, 4);
        ck_assert(h[1].res.allowed); /* decided as if alone ... */
        ck_assert(!h[2].res.allowed);
        h[0] = hit_of(&r1, "erin", 0);
        run_batch(s, h, 1);
        ck_assert_uint_eq(h[0].res.credit, 3); /* ... but not applied: only the canary counted */
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.calls, 3);
        redis_store_close(s);
}
END_TEST

/* Closing with a batch in flight completes it with -ECANCELED. */
START_TEST (test_close_pending) {
        TestRule r;
        StoreHit h;
        RedisStore *s;
        Done d = { 0 };
        char url[64];

        test_redis_start(&srv);
        test_rule(&r, 3, 60, ALGORITHM_FIXED_WINDOW, 0x11);
        s = open_store(tcp_url(url, sizeof(url)), NULL);
        h = hit_of(&r, "alice", 0);
        done_log = &d;
        ck_assert_int_eq(redis_store_submit(s, &h, 1, 0, on_done, NULL), 0);
        redis_store_close(s);
        ck_assert_int_eq(d.calls, 1);
        ck_assert_int_eq(h.error, -ECANCELED);
        ck_assert_uint_eq(loop.n, 0);
        ck_assert_uint_eq(loop.timer, 0);
}
END_TEST

/* A server that is down at open is not an error: hits fail until it is up. */
START_TEST (test_open_while_down) {
        TestRule r;
        StoreHit h;
        RedisStore *s;
        RedisStoreOptions o = { .backoff_min_usec = 20 * USEC_PER_MSEC,
                                .backoff_max_usec = 50 * USEC_PER_MSEC,
                                .breaker_threshold = 1000 };
        char url[64];

        srv.port = test_free_port();
        snprintf(srv.dir, sizeof(srv.dir), "/tmp/divvyd-redis-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(srv.dir));
        snprintf(srv.sock, sizeof(srv.sock), "%s/redis.sock", srv.dir);
        test_rule(&r, 100, 60, ALGORITHM_FIXED_WINDOW, 0x22);
        s = open_store(tcp_url(url, sizeof(url)), &o);
        h = hit_of(&r, "dave", 0);
        run_batch(s, &h, 1);
        ck_assert_int_lt(h.error, 0);
        test_redis_start(&srv);
        ck_assert(until_ok(s, &r, 200));
        redis_store_close(s);
}
END_TEST

/* A one-node Redis Cluster: CLUSTER SLOTS, routing by slot, own keys even for fixed windows. */
START_TEST (test_cluster_one_node) {
        TestRule r;
        StoreHit h[2];
        RedisStore *s;
        RedisStoreStats st;
        redisReply *rep;
        char url[64];
        bool ok = false;

        test_redis_cluster = true;
        test_redis_start(&srv);
        rep = test_redis_command(&srv, "CLUSTER ADDSLOTSRANGE 0 16383");
        ck_assert_int_eq(rep->type, REDIS_REPLY_STATUS);
        freeReplyObject(rep);
        for (int i = 0; i < 500 && !ok; i++) {
                rep = test_redis_command(&srv, "CLUSTER INFO");
                ok = rep && strstr(rep->str, "cluster_state:ok");
                freeReplyObject(rep);
                if (!ok)
                        usleep(10000);
        }
        ck_assert(ok);
        test_rule(&r, 3, 60, ALGORITHM_FIXED_WINDOW, 0x11);
        snprintf(url, sizeof(url), "redis+cluster://127.0.0.1:%d", srv.port);
        s = open_store(url, NULL);
        h[0] = hit_of(&r, "alice", 0);
        h[1] = hit_of(&r, "zed", 0); /* another slot: another call */
        run_batch(s, h, 2);
        ck_assert_int_eq(h[0].error, 0);
        ck_assert_int_eq(h[1].error, 0);
        ck_assert_uint_eq(h[0].res.credit, 2);
        rep = test_redis_command(&srv, "EXISTS divvyd:{alice}:11111111111111111111111111111111");
        ck_assert_int_eq(rep->integer, 1);
        freeReplyObject(rep);
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.calls, 2);
        ck_assert_uint_ge(st.discoveries, 1);
        ck_assert_int_eq(st.mode, REDIS_MODE_CLUSTER);
        ck_assert_str_eq(st.address, url + strlen("redis+cluster://")); /* the node the calls went to */
        redis_store_close(s);
}
END_TEST

/* Starts a redis-sentinel on port sport watching primary as "mymaster" (its config in the
 * primary's directory, removed by sentinel_stop()) and waits until it answers (5 s at most).
 * Returns its pid. */
static pid_t sentinel_start(const TestRedis *primary, int sport) {
        char conf[160];
        bool ok = false;
        pid_t pid;
        FILE *f;

        snprintf(conf, sizeof(conf), "%s/sentinel.conf", primary->dir);
        f = fopen(conf, "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f, "port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster 127.0.0.1 %d 1\n", sport,
                primary->dir, primary->port);
        fclose(f);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                int null = open("/dev/null", O_WRONLY);

                (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (null >= 0)
                        (void) dup2(null, STDOUT_FILENO);
                execlp("redis-sentinel", "redis-sentinel", conf, (char *) NULL);
                _exit(127);
        }
        for (int i = 0; i < 500 && !ok; i++) {
                redisContext *c = redisConnect("127.0.0.1", sport);
                redisReply *rep =
                        c && !c->err ? redisCommand(c, "SENTINEL get-master-addr-by-name mymaster") : NULL;

                ok = rep && rep->type == REDIS_REPLY_ARRAY;
                if (rep)
                        freeReplyObject(rep);
                if (c)
                        redisFree(c);
                if (!ok)
                        usleep(10000);
        }
        ck_assert(ok);
        return pid;
}

static void sentinel_stop(pid_t pid, const TestRedis *primary) {
        char conf[160];

        (void) kill(pid, SIGKILL);
        (void) waitpid(pid, NULL, 0);
        snprintf(conf, sizeof(conf), "%s/sentinel.conf", primary->dir);
        (void) unlink(conf);
}

/* Runs the loop until the sentinel at port lists a client subscribed to n patterns (CLIENT
 * LIST's psub=n); at most WAIT_USEC. */
static bool sentinel_subscribed(int port, int n) {
        uint64_t end = clock_usec(CLOCK_MONOTONIC) + WAIT_USEC;
        char want[32];

        snprintf(want, sizeof(want), " psub=%d ", n);
        for (;;) {
                redisContext *c = redisConnect("127.0.0.1", port);
                redisReply *rep = c && !c->err ? redisCommand(c, "CLIENT LIST") : NULL;
                bool ok = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, want) != NULL;

                if (rep)
                        freeReplyObject(rep);
                if (c)
                        redisFree(c);
                if (ok)
                        return true;
                if (clock_usec(CLOCK_MONOTONIC) >= end)
                        return false;
                test_loop_once(&loop, 10000);
        }
}

/* Sentinel: the primary is looked up, ROLE checked, and hits go there; the store subscribes to
 * the sentinel's failover events and asks it again every REDIS_STORE_SENTINEL_CHECK_USEC, the
 * primary in use meanwhile. */
START_TEST (test_sentinel) {
        TestRule r;
        RedisStore *s;
        RedisStoreStats st;
        char url[128], addr[64];
        int sport = test_free_port();
        pid_t pid;
        RedisStoreOptions o = { .backoff_min_usec = 20 * USEC_PER_MSEC,
                                .backoff_max_usec = 80 * USEC_PER_MSEC,
                                .breaker_threshold = 3 };

        if (system("command -v redis-sentinel >/dev/null 2>&1") != 0)
                return; /* not installed: nothing to test */
        test_redis_start(&srv);
        pid = sentinel_start(&srv, sport);
        test_rule(&r, 100, 60, ALGORITHM_FIXED_WINDOW, 0x22);
        snprintf(url, sizeof(url), "redis+sentinel://127.0.0.1:%d/mymaster", sport);
        s = open_store(url, &o);
        ck_assert(until_ok(s, &r, 20));
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_int_eq(st.mode, REDIS_MODE_SENTINEL);
        ck_assert_uint_ge(st.discoveries, 1);
        ck_assert_int_eq(st.state, REDIS_STORE_CONNECTED);
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", srv.port);
        ck_assert_str_eq(st.address, addr);
        ck_assert_msg(sentinel_subscribed(sport, 7), "no subscription to the sentinel's failover events");
        {
                uint64_t looked_up = st.discoveries,
                         end = clock_usec(CLOCK_MONOTONIC) + REDIS_STORE_SENTINEL_CHECK_USEC * 5 / 2;

                while (clock_usec(CLOCK_MONOTONIC) < end) {
                        test_loop_once(&loop, 10000);
                        ck_assert_int_eq(redis_store_state(s), REDIS_STORE_CONNECTED);
                }
                ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
                ck_assert_uint_ge(st.discoveries, looked_up + 2); /* asked again, twice */
                ck_assert_str_eq(st.address, addr);
                ck_assert_uint_eq(st.primary_switches, 0);
                ck_assert(until_ok(s, &r, 1));
        }
        /* the primary down (no replica: the sentinel keeps naming it), the breaker open; back,
         * and the breaker's own probe (the primary looked up, ROLE, PING) closes it, no batch */
        open_breaker(s, &r);
        test_redis_start(&srv);
        ck_assert_msg(idle_until(s, REDIS_STORE_CONNECTED, 0), "still %s after the primary came back",
                      redis_store_state_to_string(redis_store_state(s)));
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        ck_assert_uint_ge(st.breaker_probes, 1);
        ck_assert_str_eq(st.address, addr);
        redis_store_close(s);
        sentinel_stop(pid, &srv);
}
END_TEST

/* The script calls t has run (EVALSHA and EVAL, from INFO commandstats). */
static uint64_t script_calls(const TestRedis *t) {
        redisReply *rep = test_redis_command(t, "INFO commandstats");
        uint64_t n = 0;

        ck_assert_ptr_nonnull(rep);
        ck_assert_int_eq(rep->type, REDIS_REPLY_STRING);
        for (unsigned i = 0; i < 2; i++) {
                const char *name = i == 0 ? "cmdstat_evalsha:calls=" : "cmdstat_eval:calls=";
                const char *p = strstr(rep->str, name);

                if (p)
                        n += strtoull(p + strlen(name), NULL, 10);
        }
        freeReplyObject(rep);
        return n;
}

/* A sentinel command's reply (NULL: no answer). */
static redisReply *sentinel_command(int sport, const char *cmd) {
        redisContext *c = redisConnect("127.0.0.1", sport);
        redisReply *rep = c && !c->err ? redisCommand(c, cmd) : NULL;

        if (c)
                redisFree(c);
        return rep;
}

/* Runs cmd on the sentinel until check(reply) says yes; at most 20 s (a failover's steps). */
static bool sentinel_until(int sport, const char *cmd, bool (*check)(const redisReply *, int), int arg) {
        for (int i = 0; i < 2000; i++) {
                redisReply *rep = sentinel_command(sport, cmd);
                bool ok = rep && check(rep, arg);

                if (rep)
                        freeReplyObject(rep);
                if (ok)
                        return true;
                usleep(10000);
        }
        return false;
}

/* The READONLY errors t has replied (INFO errorstats). */
static uint64_t readonly_errors(const TestRedis *t) {
        redisReply *rep = test_redis_command(t, "INFO errorstats");
        const char *name = "errorstat_READONLY:count=", *p;
        uint64_t n;

        ck_assert_ptr_nonnull(rep);
        ck_assert_int_eq(rep->type, REDIS_REPLY_STRING);
        p = strstr(rep->str, name);
        n = p ? strtoull(p + strlen(name), NULL, 10) : 0;
        freeReplyObject(rep);
        return n;
}

/* Runs cmd on the sentinel, which must reply OK. */
static void sentinel_ok(int sport, const char *cmd) {
        redisReply *rep = sentinel_command(sport, cmd);

        ck_assert_msg(rep && rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "OK") == 0, "%s: %s", cmd,
                      rep && rep->str ? rep->str : "no reply");
        freeReplyObject(rep);
}

static bool primary_is(const redisReply *rep, int port) {
        return rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 && atoi(rep->element[1]->str) == port;
}

/* Makes t a replica of primary and waits until its link is up (5 s at most). */
static void make_replica(const TestRedis *t, const TestRedis *primary) {
        redisReply *rep = test_redis_command(t, "REPLICAOF 127.0.0.1 %d", primary->port);
        bool up = false;

        ck_assert_ptr_nonnull(rep);
        freeReplyObject(rep);
        for (int i = 0; i < 500 && !up; i++) {
                rep = test_redis_command(t, "INFO replication");
                up = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, "master_link_status:up");
                if (rep)
                        freeReplyObject(rep);
                if (!up)
                        usleep(10000);
        }
        ck_assert_msg(up, "127.0.0.1:%d: no link to its primary", t->port);
}

/* A primary demoted under a connection the store keeps open (REPLICAOF run on it directly:
 * nothing closes the store's connection, as the sentinel's own reconfiguration would), the
 * sentinel re-pointed without a failover (SENTINEL REMOVE + MONITOR: no event the store follows)
 * and no periodic lookup due (sentinel_check_usec: an hour), answers READONLY: the store drops
 * that connection and asks the sentinel again, so the next hit does not reach the old primary and
 * the hits after it reach the new one. */
START_TEST (test_sentinel_readonly_follows_new_primary) {
        TestRule r;
        RedisStore *s;
        RedisStoreStats st;
        StoreHit h;
        redisReply *rep;
        char url[128], addr[64], cmd[96];
        int sport = test_free_port();
        uint64_t old_calls, old_readonly, new_calls, looked_up;
        pid_t pid;
        RedisStoreOptions o = { .backoff_min_usec = 20 * USEC_PER_MSEC,
                                .backoff_max_usec = 80 * USEC_PER_MSEC,
                                .breaker_threshold = 1000,
                                .sentinel_check_usec = 3600 * USEC_PER_SEC };

        if (system("command -v redis-sentinel >/dev/null 2>&1") != 0)
                return; /* not installed: nothing to test */
        test_redis_start(&srv);
        test_redis_start(&srv2);
        make_replica(&srv2, &srv);
        pid = sentinel_start(&srv, sport);
        test_rule(&r, 100, 60, ALGORITHM_FIXED_WINDOW, 0x23);
        snprintf(url, sizeof(url), "redis+sentinel://127.0.0.1:%d/mymaster", sport);
        s = open_store(url, &o);
        ck_assert(until_ok(s, &r, 20));
        ck_assert_msg(sentinel_subscribed(sport, 7), "no subscription to the sentinel's failover events");
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        looked_up = st.discoveries;

        /* the replica promoted and the old primary, still up, demoted by hand; the sentinel
         * re-pointed */
        rep = test_redis_command(&srv2, "REPLICAOF NO ONE");
        ck_assert_ptr_nonnull(rep);
        ck_assert_int_eq(rep->type, REDIS_REPLY_STATUS);
        freeReplyObject(rep);
        make_replica(&srv, &srv2);
        sentinel_ok(sport, "SENTINEL REMOVE mymaster");
        snprintf(cmd, sizeof(cmd), "SENTINEL MONITOR mymaster 127.0.0.1 %d 1", srv2.port);
        sentinel_ok(sport, cmd);
        ck_assert(sentinel_until(sport, "SENTINEL get-master-addr-by-name mymaster", primary_is, srv2.port));
        for (int i = 0; i < 10; i++)
                test_loop_once(&loop, 10000); /* whatever the sentinel published, the store has read */
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", srv.port);
        ck_assert_str_eq(st.address, addr);           /* the store's connection is still the old primary's */
        ck_assert_uint_eq(st.discoveries, looked_up); /* and nothing made it ask the sentinel */

        old_readonly = readonly_errors(&srv);
        h = hit_of(&r, "dave", 0);
        run_batch(s, &h, 1);
        ck_assert_int_eq(h.error, -EROFS); /* READONLY: the demoted primary */
        ck_assert_uint_eq(readonly_errors(&srv), old_readonly + 1);
        old_calls = script_calls(&srv);
        old_readonly = readonly_errors(&srv);
        new_calls = script_calls(&srv2);
        /* the next hit waits for the lookup (or fails, if that is slow): it is not sent to the old
         * primary */
        h = hit_of(&r, "erin", 0);
        run_batch(s, &h, 1);
        ck_assert_int_ne(h.error, -EROFS);
        ck_assert_uint_eq(readonly_errors(&srv), old_readonly);
        ck_assert_uint_eq(script_calls(&srv), old_calls);
        ck_assert_msg(until_ok(s, &r, 50), "hits still fail after the READONLY");
        for (int i = 0; i < 5; i++) {
                h = hit_of(&r, "frank", 0);
                run_batch(s, &h, 1);
                ck_assert_int_eq(h.error, 0);
                ck_assert_uint_eq(h.res.credit, 99 - (uint64_t) i);
        }
        ck_assert_uint_eq(readonly_errors(&srv), old_readonly); /* none reached the old primary */
        ck_assert_uint_eq(script_calls(&srv), old_calls);
        ck_assert_uint_ge(script_calls(&srv2), new_calls + 6); /* all reached the new one */
        ck_assert_int_eq(redis_store_get_stats(s, &st), 0);
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", srv2.port);
        ck_assert_str_eq(st.address, addr);
        ck_assert_uint_eq(st.primary_switches, 1);
        redis_store_close(s);
        sentinel_stop(pid, &srv);
}
END_TEST

static Suite *store_suite(void) {
        Suite *s = suite_create("redis-store");
        TCase *tc = tcase_create("redis-store");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_compat_hits);
        tcase_add_test(tc, test_own_key);
        tcase_add_test(tc, test_fleet_and_order);
        tcase_add_test(tc, test_noscript);
        tcase_add_test(tc, test_server_killed_and_back);
        tcase_add_test(tc, test_hung_server_timeout);
        tcase_add_test(tc, test_stall_is_not_death);
        tcase_add_test(tc, test_breaker);
        tcase_add_test(tc, test_breaker_probes_when_idle);
        tcase_add_test(tc, test_breaker_probe_hung);
        tcase_add_test(tc, test_auth);
        tcase_add_test(tc, test_unix_db);
        tcase_add_test(tc, test_group_all_or_nothing);
        tcase_add_test(tc, test_close_pending);
        tcase_add_test(tc, test_open_while_down);
        tcase_add_test(tc, test_cluster_one_node);
        tcase_add_test(tc, test_sentinel);
        tcase_add_test(tc, test_sentinel_readonly_follows_new_primary);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        redis_test_require_server();
        return check_run_suite(store_suite());
}
