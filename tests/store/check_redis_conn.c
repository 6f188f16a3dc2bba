/* SPDX-License-Identifier: MIT */
/* One non-blocking Redis connection (redis-conn.c) against a redis-server of the test's own. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "check-run.h"
#include "store/redis-conn.h"
#include "redis-test-util.h"

#define WAIT_USEC (5ULL * USEC_PER_SEC) /* a bound on each wait, never reached when things work */

static TestRedis srv;
static TestLoop loop;
static RedisIo io;

typedef struct Seen {
        int n; /* callbacks so far */
        long long v[256];
        int error[256];
        int type[256];
        bool done;
        int want;
} Seen;

static void seen_reply(void *userdata, redisReply *r, int error) {
        Seen *s = userdata;

        ck_assert_int_lt(s->n, 256);
        s->error[s->n] = error;
        s->type[s->n] = r ? r->type : -1;
        s->v[s->n] = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
        if (r && r->type == REDIS_REPLY_STRING)
                s->v[s->n] = strtoll(r->str, NULL, 10);
        s->n++;
        if (s->n >= s->want)
                s->done = true;
}

typedef struct Events {
        int connected, closed, last_error;
        bool any;
} Events;

static void on_event(void *userdata, int error) {
        Events *e = userdata;

        if (error == 0)
                e->connected++;
        else {
                e->closed++;
                e->last_error = error;
        }
        e->any = true;
}

static RedisConn *conn_target;

static int conn_on_io(void *target, int fd, uint32_t revents) {
        RedisConn *c = target;

        ck_assert_int_eq(fd, redis_conn_fd(c));
        return redis_conn_on_io(c, revents);
}

static int conn_on_timer(void *target, uint64_t now) {
        (void) target;
        (void) now;
        return 0;
}

static void setup(void) {
        memset(&srv, 0, sizeof(srv));
        memset(&loop, 0, sizeof(loop));
        io = test_loop_io(&loop);
        loop.on_io = conn_on_io;
        loop.on_timer = conn_on_timer;
}

static void teardown(void) {
        test_redis_stop(&srv);
}

static RedisConn *new_conn(const RedisConnOptions *o, Events *ev) {
        RedisConn *c = NULL;

        ck_assert_int_eq(redis_conn_new(&io, o, on_event, ev, &c), 0);
        loop.target = c;
        conn_target = c;
        return c;
}

static void cmd(RedisConn *c, Seen *s, const char *a0, const char *a1, const char *a2) {
        const char *argv[3] = { a0, a1, a2 };
        size_t argvlen[3] = { strlen(a0), a1 ? strlen(a1) : 0, a2 ? strlen(a2) : 0 };
        int argc = a2 ? 3 : a1 ? 2 : 1;

        ck_assert_int_eq(redis_conn_command(c, argc, argv, argvlen, seen_reply, s, NULL), 0);
}

static RedisAddr tcp_addr(void) {
        RedisAddr a;
        char err[200];

        ck_assert_int_eq(redis_addr_from_host(&a, "127.0.0.1", srv.port, true, err, sizeof(err)), 0);
        return a;
}

/* 100 commands queued while connecting, one flush: the replies come back in order. */
START_TEST (test_pipeline_in_order) {
        Events ev = { 0 };
        Seen s = { .want = 101 };
        RedisConn *c;
        RedisAddr a;
        char key[32];

        test_redis_start(&srv);
        c = new_conn(NULL, &ev);
        a = tcp_addr();
        ck_assert_int_eq(redis_conn_connect(c, &a), 0);
        ck_assert_int_eq(redis_conn_state(c), REDIS_CONN_CONNECTING);
        ck_assert_int_eq(ev.connected, 0); /* never from inside connect */
        snprintf(key, sizeof(key), "k");
        for (int i = 0; i < 100; i++)
                cmd(c, &s, "INCR", key, NULL);
        cmd(c, &s, "GET", key, NULL);
        ck_assert_int_eq(redis_conn_flush(c), 0);
        ck_assert(test_loop_until(&loop, &s.done, WAIT_USEC));
        ck_assert_int_eq(ev.connected, 1);
        ck_assert_int_eq(redis_conn_state(c), REDIS_CONN_CONNECTED);
        for (int i = 0; i < 100; i++) {
                ck_assert_int_eq(s.error[i], 0);
                ck_assert_int_eq(s.v[i], i + 1);
        }
        ck_assert_int_eq(s.v[100], 100);
        ck_assert_uint_eq(redis_conn_pending(c), 0);
        ck_assert_str_eq(redis_conn_address(c), a.name);
        redis_conn_free(c);
        ck_assert_uint_eq(loop.n, 0); /* unwatched before close */
}
END_TEST

/* Binary-safe arguments: a value with CR LF and NUL survives the encoding. */
START_TEST (test_binary_argument) {
        Events ev = { 0 };
        Seen s = { .want = 1 };
        RedisConn *c;
        RedisAddr a;
        const char value[] = "a\r\nb\0c$3\r\n";
        const char *argv[3] = { "SET", "bin", value };
        size_t argvlen[3] = { 3, 3, sizeof(value) - 1 };
        redisReply *r;

        test_redis_start(&srv);
        c = new_conn(NULL, &ev);
        a = tcp_addr();
        ck_assert_int_eq(redis_conn_connect(c, &a), 0);
        ck_assert_int_eq(redis_conn_command(c, 3, argv, argvlen, seen_reply, &s, NULL), 0);
        ck_assert_int_eq(redis_conn_flush(c), 0);
        ck_assert(test_loop_until(&loop, &s.done, WAIT_USEC));
        ck_assert_int_eq(s.type[0], REDIS_REPLY_STATUS);
        r = test_redis_command(&srv, "GET bin");
        ck_assert_ptr_nonnull(r);
        ck_assert_uint_eq(r->len, sizeof(value) - 1);
        ck_assert_mem_eq(r->str, value, sizeof(value) - 1);
        freeReplyObject(r);
        redis_conn_free(c);
}
END_TEST

/* An abandoned command's reply is read and dropped; the ones after it are delivered. */
START_TEST (test_abandon) {
        Events ev = { 0 };
        Seen s = { .want = 2 };
        RedisConn *c;
        RedisAddr a;
        const char *argv[2] = { "INCR", "x" };
        size_t argvlen[2] = { 4, 1 };
        uint64_t seq[3];

        test_redis_start(&srv);
        c = new_conn(NULL, &ev);
        a = tcp_addr();
        ck_assert_int_eq(redis_conn_connect(c, &a), 0);
        for (int i = 0; i < 3; i++)
                ck_assert_int_eq(redis_conn_command(c, 2, argv, argvlen, seen_reply, &s, &seq[i]), 0);
        ck_assert_uint_eq(seq[1], seq[0] + 1);
        ck_assert_int_eq(redis_conn_abandon(c, seq[1]), 0);
        ck_assert_int_eq(redis_conn_abandon(c, seq[2] + 1), -ENOENT);
        ck_assert_int_eq(redis_conn_flush(c), 0);
        ck_assert(test_loop_until(&loop, &s.done, WAIT_USEC));
        ck_assert_int_eq(s.n, 2);
        ck_assert_int_eq(s.v[0], 1);
        ck_assert_int_eq(s.v[1], 3); /* the abandoned one ran on the server, its reply dropped */
        ck_assert_uint_eq(redis_conn_replies(c), 3); /* read: the dropped one counts (a live server) */
        ck_assert_uint_eq(redis_conn_pending(c), 0);
        ck_assert_int_eq(redis_conn_abandon(c, seq[0]), -ENOENT);
        redis_conn_free(c);
}
END_TEST

/* AUTH and SELECT run first: the password lets commands through, and they land in the db. */
START_TEST (test_auth_select) {
        Events ev = { 0 };
        Seen s = { .want = 1 };
        RedisConnOptions o = { .password = "s3cret pass", .db = 3 };
        RedisConn *c;
        RedisAddr a;
        redisContext *bc;
        redisReply *r;

        snprintf(srv.password, sizeof(srv.password), "s3cret pass");
        test_redis_start(&srv);
        c = new_conn(&o, &ev);
        a = tcp_addr();
        ck_assert_int_eq(redis_conn_connect(c, &a), 0);
        cmd(c, &s, "SET", "in3", "yes");
        ck_assert_int_eq(redis_conn_flush(c), 0);
        ck_assert(test_loop_until(&loop, &s.done, WAIT_USEC));
        ck_assert_int_eq(s.error[0], 0);
        ck_assert_int_eq(s.type[0], REDIS_REPLY_STATUS);
        bc = test_redis_client(&srv);
        ck_assert_ptr_nonnull(bc);
        r = redisCommand(bc, "EXISTS in3");
        ck_assert_int_eq(r->integer, 0); /* not in db 0 */
        freeReplyObject(r);
        freeReplyObject(redisCommand(bc, "SELECT 3"));
        r = redisCommand(bc, "GET in3");
        ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
        ck_assert_str_eq(r->str, "yes");
        freeReplyObject(r);
        redisFree(bc);
        redis_conn_free(c);
}
END_TEST

/* A wrong password closes the connection: the commands after AUTH fail with -EACCES. */
START_TEST (test_auth_refused) {
        Events ev = { 0 };
        Seen s = { .want = 1 };
        RedisConnOptions o = { .password = "wrong" };
        RedisConn *c;
        RedisAddr a;

        snprintf(srv.password, sizeof(srv.password), "right");
        test_redis_start(&srv);
        c = new_conn(&o, &ev);
        a = tcp_addr();
        ck_assert_int_eq(redis_conn_connect(c, &a), 0);
        cmd(c, &s, "PING", NULL, NULL);
        ck_assert_int_eq(redis_conn_flush(c), 0);
        ck_assert(test_loop_until(&loop, &s.done, WAIT_USEC));
        ck_assert_int_eq(s.error[0], -EACCES);
        ck_assert_int_eq(ev.closed, 1);
        ck_assert_int_eq(ev.last_error, -EACCES);
        ck_assert_int_eq(redis_conn_state(c), REDIS_CONN_CLOSED);
        ck_assert_ptr_nonnull(strstr(redis_conn_last_error(c), "AUTH refused"));
        ck_assert_int_eq(
                redis_conn_command(c, 1, (const char *[]){ "PING" }, (size_t[]){ 4 }, NULL, NULL, NULL),
                -ENOTCONN);
        redis_conn_free(c);
}
END_TEST

START_TEST (test_unix_socket) {
        Events ev = { 0 };
        Seen s = { .want = 1 };
        RedisConn *c;
        RedisAddr a;

        test_redis_start(&srv);
        c = new_conn(NULL, &ev);
        ck_assert_int_eq(redis_addr_from_unix(&a, srv.sock), 0);
        ck_assert_int_eq(redis_conn_connect(c, &a), 0);
        cmd(c, &s, "INCRBY", "u", "7");
        ck_assert_int_eq(redis_conn_flush(c), 0);
        ck_assert(test_loop_until(&loop, &s.done, WAIT_USEC));
        ck_assert_int_eq(s.v[0], 7);
        ck_assert_str_eq(redis_conn_address(c), srv.sock);
        redis_conn_free(c);
}
END_TEST

/* The server dies with commands pending: each callback gets an error, then the event callback;
 * the same object connects again once the server is back. */
START_TEST (test_server_killed_and_reconnect) {
        Events ev = { 0 };
        Seen s = { .want = 1 }, s2 = { .want = 3 };
        RedisConn *c;
        RedisAddr a;

        test_redis_start(&srv);
        c = new_conn(NULL, &ev);
        a = tcp_addr();
        ck_assert_int_eq(redis_conn_connect(c, &a), 0);
        cmd(c, &s, "PING", NULL, NULL);
        ck_assert_int_eq(redis_conn_flush(c), 0);
        ck_assert(test_loop_until(&loop, &s.done, WAIT_USEC));
        test_redis_kill(&srv);
        for (int i = 0; i < 3; i++)
                cmd(c, &s2, "PING", NULL, NULL);
        (void) redis_conn_flush(c);
        ck_assert(test_loop_until(&loop, &s2.done, WAIT_USEC));
        for (int i = 0; i < 3; i++) {
                ck_assert_int_lt(s2.error[i], 0);
                ck_assert_int_eq(s2.type[i], -1);
        }
        ck_assert_int_eq(ev.closed, 1);
        ck_assert_uint_eq(redis_conn_replies(c),
                          1); /* the PING's; commands failed by the close are not replies */
        ck_assert_int_eq(redis_conn_state(c), REDIS_CONN_CLOSED);
        ck_assert_uint_eq(loop.n, 0);

        /* nothing listens: refused, reported by the event callback (TCP) */
        ev.any = false;
        ck_assert_int_eq(redis_conn_connect(c, &a), 0);
        ck_assert(test_loop_until(&loop, &ev.any, WAIT_USEC));
        ck_assert_int_eq(ev.last_error, -ECONNREFUSED);

        test_redis_start(&srv);
        memset(&s, 0, sizeof(s));
        s.want = 1;
        ck_assert_int_eq(redis_conn_connect(c, &a), 0);
        cmd(c, &s, "PING", NULL, NULL);
        ck_assert_int_eq(redis_conn_flush(c), 0);
        ck_assert(test_loop_until(&loop, &s.done, WAIT_USEC));
        ck_assert_int_eq(s.error[0], 0);
        ck_assert_int_eq(s.type[0], REDIS_REPLY_STATUS);
        ck_assert_int_eq(ev.connected, 2);
        redis_conn_free(c);
}
END_TEST

/* A server that answers garbage: -EPROTO to everything pending. */
START_TEST (test_protocol_error) {
        Events ev = { 0 };
        Seen s = { .want = 2 };
        RedisConn *c;
        RedisAddr a;
        int lfd, afd;
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof(sa);
        char buf[256];

        lfd = socket(AF_INET, SOCK_STREAM, 0);
        ck_assert_int_ge(lfd, 0);
        ck_assert_int_eq(bind(lfd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        ck_assert_int_eq(listen(lfd, 1), 0);
        ck_assert_int_eq(getsockname(lfd, (struct sockaddr *) &sa, &len), 0);
        c = new_conn(NULL, &ev);
        ck_assert_int_eq(redis_addr_from_host(&a, "127.0.0.1", ntohs(sa.sin_port), true, NULL, 0), 0);
        ck_assert_int_eq(redis_conn_connect(c, &a), 0);
        cmd(c, &s, "PING", NULL, NULL);
        cmd(c, &s, "PING", NULL, NULL);
        afd = accept(lfd, NULL, NULL);
        ck_assert_int_ge(afd, 0);
        ck_assert(test_loop_until(&loop, &(bool){ false }, 50000) == false); /* let it connect and write */
        ck_assert_int_gt(read(afd, buf, sizeof(buf)), 0);
        ck_assert_int_eq(write(afd, "?garbage\r\n", 10), 10);
        ck_assert(test_loop_until(&loop, &s.done, WAIT_USEC));
        ck_assert_int_eq(s.error[0], -EPROTO);
        ck_assert_int_eq(s.error[1], -EPROTO);
        ck_assert_ptr_nonnull(strstr(redis_conn_last_error(c), "protocol error"));
        redis_conn_free(c);
        close(afd);
        close(lfd);
}
END_TEST

typedef struct Pushed {
        int n;
        char payload[8][32];
        bool done;
} Pushed;

static void seen_push(void *userdata, redisReply *r, int error) {
        Pushed *p = userdata;

        ck_assert_int_eq(error, 0);
        ck_assert_int_lt(p->n, 8);
        ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
        snprintf(p->payload[p->n++], sizeof(p->payload[0]), "%s", r->element[r->elements - 1]->str);
        p->done = p->n == 3;
}

/* A subscriber's connection: the messages the server sends unasked go to the push callback, and
 * the confirmations and a PING's reply still answer their commands, in order (without it a
 * message is a reply to no command, and the connection is closed). */
START_TEST (test_pubsub_push) {
        Events ev = { 0 };
        Seen s = { .want = 2 };
        Pushed p = { 0 };
        RedisConn *c;
        RedisAddr a;
        redisContext *pub;

        test_redis_start(&srv);
        c = new_conn(NULL, &ev);
        redis_conn_set_push(c, seen_push, &p);
        a = tcp_addr();
        ck_assert_int_eq(redis_conn_connect(c, &a), 0);
        cmd(c, &s, "PSUBSCRIBE", "+switch-*", NULL);
        cmd(c, &s, "SUBSCRIBE", "+try-failover", NULL);
        ck_assert_int_eq(redis_conn_flush(c), 0);
        ck_assert(test_loop_until(&loop, &s.done, WAIT_USEC));
        ck_assert_int_eq(s.type[0], REDIS_REPLY_ARRAY); /* the confirmations */
        ck_assert_int_eq(s.type[1], REDIS_REPLY_ARRAY);
        pub = redisConnect("127.0.0.1", srv.port);
        ck_assert(pub && !pub->err);
        freeReplyObject(redisCommand(pub, "PUBLISH +switch-master %s", "m 1.1.1.1 1 2.2.2.2 2"));
        freeReplyObject(redisCommand(pub, "PUBLISH +try-failover %s", "master m 1.1.1.1 1"));
        freeReplyObject(redisCommand(pub, "PUBLISH +other %s", "not subscribed"));
        freeReplyObject(redisCommand(pub, "PUBLISH +switch-other %s", "third"));
        redisFree(pub);
        ck_assert(test_loop_until(&loop, &p.done, WAIT_USEC));
        ck_assert_str_eq(p.payload[0], "m 1.1.1.1 1 2.2.2.2 2");
        ck_assert_str_eq(p.payload[1], "master m 1.1.1.1 1");
        ck_assert_str_eq(p.payload[2], "third");
        s.done = false;
        s.want = 3;
        cmd(c, &s, "PING", NULL, NULL); /* subscribed: ["pong", ""] */
        ck_assert_int_eq(redis_conn_flush(c), 0);
        ck_assert(test_loop_until(&loop, &s.done, WAIT_USEC));
        ck_assert_int_eq(s.error[2], 0);
        ck_assert_int_eq(s.type[2], REDIS_REPLY_ARRAY);
        ck_assert_int_eq(redis_conn_state(c), REDIS_CONN_CONNECTED);
        ck_assert_int_eq(ev.closed, 0);
        ck_assert_uint_eq(redis_conn_pending(c), 0);
        redis_conn_free(c);
}
END_TEST

START_TEST (test_addresses) {
        RedisAddr a;
        char err[200];

        ck_assert_int_eq(redis_addr_from_host(&a, "::1", 6379, true, err, sizeof(err)), 0);
        ck_assert_str_eq(a.name, "[::1]:6379");
        ck_assert_int_eq(redis_addr_from_host(&a, "127.0.0.1", 0, true, err, sizeof(err)), -EINVAL);
        ck_assert_int_eq(redis_addr_from_host(&a, "example.invalid", 6379, true, err, sizeof(err)),
                         -EADDRNOTAVAIL);
        ck_assert_ptr_nonnull(strstr(err, "only numeric"));
        ck_assert_int_eq(redis_addr_from_unix(&a, "/run/redis.sock"), 0);
        ck_assert_int_eq(a.sa.ss_family, AF_UNIX);
        memset(err, 'x', sizeof(err));
        err[150] = '\0';
        ck_assert_int_eq(redis_addr_from_unix(&a, err), -ENAMETOOLONG);
}
END_TEST

static Suite *conn_suite(void) {
        Suite *s = suite_create("redis-conn");
        TCase *tc = tcase_create("redis-conn");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 30);
        tcase_add_test(tc, test_pipeline_in_order);
        tcase_add_test(tc, test_binary_argument);
        tcase_add_test(tc, test_abandon);
        tcase_add_test(tc, test_auth_select);
        tcase_add_test(tc, test_auth_refused);
        tcase_add_test(tc, test_unix_socket);
        tcase_add_test(tc, test_server_killed_and_reconnect);
        tcase_add_test(tc, test_protocol_error);
        tcase_add_test(tc, test_addresses);
        tcase_add_test(tc, test_pubsub_push);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        redis_test_require_server();
        return check_run_suite(conn_suite());
}
