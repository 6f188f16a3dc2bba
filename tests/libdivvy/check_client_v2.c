/* SPDX-License-Identifier: MIT */
/*
 * libdivvy's version 2 calls (HELLO, TAKE, PEEK, CHARGE, REFUND, RESET, EXPLAIN) against a
 * scripted fake server on a temporary Unix socket: every request line the library sends is
 * compared byte for byte with the script, and the script's replies exercise the reply parser
 * (unknown fields, escapes, errors, an old server without HELLO). The real daemon is tested
 * by the integration tests.
 */

#include "divvy.h"
#include "check-run.h"

#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define WAIT_MS   10000 /* ms: bound on every wait of the fake server */
#define STEPS_MAX 32

#define PAIRS(...)                                                                                          \
        ((const divvy_pair[]){ __VA_ARGS__ }),                                                              \
                (sizeof((const divvy_pair[]){ __VA_ARGS__ }) / sizeof(divvy_pair))

/* One step of a script: the request line expected (without "\n") and the reply sent for it
 * (with its "\n"), in one write. A reply with a line starting with "ERR" is followed by closing the
 * connection, as divvyd and divvy do; reply NULL closes without answering. The next step then waits for a
 * new connection. */
typedef struct Step {
        const char *request;
        const char *reply;
} Step;

typedef struct Fake {
        int listen_fd;
        char dir[64];
        char address[128];
        const Step *steps;
        size_t n_steps;
        size_t done;        /* steps answered */
        size_t connections; /* accepted */
        char mismatch[512]; /* first difference from the script, "" if none */
        pthread_t thread;
} Fake;

static bool read_line(int fd, char *buf, size_t size, char *line, size_t *buf_len) {
        for (;;) {
                char *nl = memchr(buf, '\n', *buf_len);
                if (nl) {
                        size_t n = (size_t) (nl - buf);
                        memcpy(line, buf, n);
                        line[n] = '\0';
                        memmove(buf, nl + 1, *buf_len - n - 1);
                        *buf_len -= n + 1;
                        return true;
                }
                struct pollfd pfd = { .fd = fd, .events = POLLIN };
                if (*buf_len >= size || poll(&pfd, 1, WAIT_MS) != 1)
                        return false;
                ssize_t r = read(fd, buf + *buf_len, size - *buf_len);
                if (r <= 0)
                        return false;
                *buf_len += (size_t) r;
        }
}

static void *fake_run(void *userdata) {
        Fake *f = userdata;
        char buf[16384], line[16384];
        size_t buf_len = 0;
        int fd = -1;

        while (f->done < f->n_steps) {
                const Step *st = &f->steps[f->done];
                if (fd < 0) {
                        struct pollfd pfd = { .fd = f->listen_fd, .events = POLLIN };
                        if (poll(&pfd, 1, WAIT_MS) != 1)
                                break;
                        fd = accept(f->listen_fd, NULL, NULL);
                        if (fd < 0)
                                break;
                        f->connections++;
                        buf_len = 0;
                }
                if (!read_line(fd, buf, sizeof buf, line, &buf_len)) {
                        snprintf(f->mismatch, sizeof f->mismatch, "step %zu: no request (expected '%s')",
                                 f->done, st->request);
                        break;
                }
                if (strcmp(line, st->request) != 0) {
                        snprintf(f->mismatch, sizeof f->mismatch, "step %zu: got '%.200s', expected '%s'",
                                 f->done, line, st->request);
                        break;
                }
                f->done++;
                if (st->reply)
                        (void) write(fd, st->reply, strlen(st->reply));
                if (!st->reply || strncmp(st->reply, "ERR", 3) == 0 || strstr(st->reply, "\nERR")) {
                        close(fd);
                        fd = -1;
                }
        }
        if (fd >= 0) {
                /* Wait for the client to close, so that it never sees an unexpected EOF. */
                struct pollfd pfd = { .fd = fd, .events = POLLIN };
                while (poll(&pfd, 1, WAIT_MS) == 1 && read(fd, buf, sizeof buf) > 0)
                        ;
                close(fd);
        }
        return NULL;
}

static void fake_start(Fake *f, const Step *steps, size_t n_steps) {
        struct sockaddr_un sun = { .sun_family = AF_UNIX };

        *f = (Fake){ .steps = steps, .n_steps = n_steps };
        snprintf(f->dir, sizeof f->dir, "/tmp/divvy-v2-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(f->dir));
        snprintf(sun.sun_path, sizeof sun.sun_path, "%s/fake.sock", f->dir);
        snprintf(f->address, sizeof f->address, "unix:%s", sun.sun_path);
        f->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(f->listen_fd, 0);
        ck_assert_int_eq(bind(f->listen_fd, (struct sockaddr *) &sun, sizeof sun), 0);
        ck_assert_int_eq(listen(f->listen_fd, 4), 0);
        ck_assert_int_eq(pthread_create(&f->thread, NULL, fake_run, f), 0);
}

/* Frees the handle (the fake sees EOF), waits for the fake and checks it ran the whole script. */
static void fake_finish(Fake *f, divvy *d, size_t expect_connections) {
        char path[128];

        divvy_free(d);
        pthread_join(f->thread, NULL);
        close(f->listen_fd);
        snprintf(path, sizeof path, "%s/fake.sock", f->dir);
        unlink(path);
        rmdir(f->dir);
        ck_assert_msg(f->mismatch[0] == '\0', "%s", f->mismatch);
        ck_assert_msg(f->done == f->n_steps, "the script stopped at step %zu of %zu", f->done, f->n_steps);
        ck_assert_uint_eq(f->connections, expect_connections);
}

static divvy *handle(const Fake *f) {
        divvy *d = NULL;

        ck_assert_int_eq(divvy_new(f->address, &d), 0);
        ck_assert_int_eq(divvy_set_timeout(d, 10 * 1000 * 1000), 0);
        return d;
}

#define HELLO_OK "OK proto=2 server=divvyd/0.3.0 verbs=HIT,HELLO,TAKE,PEEK,CHARGE,REFUND,RESET,EXPLAIN\n"

static void assert_decision(const divvy_decision *r, bool allowed, uint64_t credit, uint64_t limit,
                            uint64_t reset, int64_t retry, const char *rule) {
        ck_assert_msg(r->allowed == allowed && r->credit == credit && r->limit == limit &&
                              r->reset_seconds == reset && r->retry_seconds == retry,
                      "got %d %llu %llu %llu %lld", r->allowed, (unsigned long long) r->credit,
                      (unsigned long long) r->limit, (unsigned long long) r->reset_seconds,
                      (long long) r->retry_seconds);
        ck_assert_str_eq(r->rule, rule);
}

/* Every verb on one connection: HELLO once, before the first, in the same write. */
START_TEST (test_every_verb) {
        static const Step steps[] = {
                { "HELLO", HELLO_OK },
                { "TAKE 3 method=GET path=/x",
                  "OK allowed=true credit=7 limit=10 reset=42 retry=0 rule=cookies\n" },
                { "TAKE 1 ip=\"1 2\"", "OK allowed=false credit=0 limit=10 reset=5 retry=5 rule=#2\n" },
                { "PEEK 0 a=b", "OK allowed=true credit=10 limit=10 reset=0 retry=0 rule=r\n" },
                { "PEEK 1", "OK allowed=false credit=0 limit=3 reset=9007199254740991 retry=-1 rule=r\n" },
                { "CHARGE 9007199254740991 a=b",
                  "OK allowed=false credit=0 limit=18446744073709551615 reset=1 retry=1 rule=r\n" },
                { "REFUND 2 a=b", "OK allowed=true credit=9 limit=10 reset=3 retry=0 rule=r\n" },
                { "RESET a=b", "OK reset=3\n" },
                { "EXPLAIN a=b",
                  "OK rule=cookies index=4 policy=stop actor=\"192.168.1.1\" algorithm=token-bucket "
                  "canaries=try,#2 continue=global\n" },
                { "HIT a=b", "OK true 1 60\n" },
                { "TAKE 1", "OK allowed=true credit=1 limit=2 reset=3 retry=0 rule=x\n" },
        };
        divvy_decision r;
        divvy_explanation e;
        divvy_result h;
        uint64_t n = 0;
        Fake f;
        divvy *d;

        fake_start(&f, steps, sizeof steps / sizeof steps[0]);
        d = handle(&f);
        ck_assert_int_eq(divvy_take(d, 3, PAIRS({ "method", "GET" }, { "path", "/x" }), &r), 0);
        assert_decision(&r, true, 7, 10, 42, 0, "cookies");
        ck_assert_str_eq(divvy_server_name(d), "divvyd/0.3.0");
        ck_assert_int_eq(divvy_take(d, 1, PAIRS({ "ip", "1 2" }), &r), 0);
        assert_decision(&r, false, 0, 10, 5, 5, "#2");
        ck_assert_int_eq(divvy_peek(d, 0, PAIRS({ "a", "b" }), &r), 0);
        assert_decision(&r, true, 10, 10, 0, 0, "r");
        ck_assert_int_eq(divvy_peek(d, 1, NULL, 0, &r), 0);
        assert_decision(&r, false, 0, 3, UINT64_C(9007199254740991), -1, "r");
        ck_assert_int_eq(divvy_charge(d, DIVVY_COUNT_MAX, PAIRS({ "a", "b" }), &r), 0);
        assert_decision(&r, false, 0, 3 * 0 + UINT64_MAX, 1, 1, "r");
        ck_assert_int_eq(divvy_refund(d, 2, PAIRS({ "a", "b" }), &r), 0);
        assert_decision(&r, true, 9, 10, 3, 0, "r");
        ck_assert_int_eq(divvy_reset(d, PAIRS({ "a", "b" }), &n), 0);
        ck_assert_uint_eq(n, 3);
        ck_assert_int_eq(divvy_explain(d, PAIRS({ "a", "b" }), &e), 0);
        ck_assert_str_eq(e.rule, "cookies");
        ck_assert_uint_eq(e.index, 4);
        ck_assert_str_eq(e.policy, "stop");
        ck_assert_str_eq(e.algorithm, "token-bucket");
        ck_assert(e.has_actor);
        ck_assert_str_eq(e.actor, "192.168.1.1");
        ck_assert_uint_eq(e.actor_len, 11);
        ck_assert(!e.actor_cut);
        ck_assert_str_eq(e.canaries, "try,#2");
        ck_assert_str_eq(e.continues, "global");
        /* HIT and the new verbs mix on the connection; HELLO is not repeated. */
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "a", "b" }), &h), 0);
        ck_assert(h.allowed && h.credit == 1 && h.reset_seconds == 60);
        ck_assert_int_eq(divvy_take(d, 1, NULL, 0, &r), 0);
        ck_assert_int_eq(divvy_pending(d), 0);
        fake_finish(&f, d, 1);
}
END_TEST

/* divvy and older divvyd answer HELLO with unknown-command and close: the request was sent
 * behind it but is not executed; the call says so clearly. The next call probes again. */
START_TEST (test_old_server) {
        static const Step steps[] = {
                { "HELLO", "ERR unknown-command \"Unrecognized command: HELLO\"\n" },
                { "HELLO", "ERR unknown-command\n" },
                { "HIT a=b", "OK true 2 60\n" },
        };
        divvy_decision r;
        divvy_result h;
        Fake f;
        divvy *d;

        fake_start(&f, steps, sizeof steps / sizeof steps[0]);
        d = handle(&f);
        ck_assert_int_eq(divvy_take(d, 1, PAIRS({ "a", "b" }), &r), -EPROTONOSUPPORT);
        ck_assert_ptr_nonnull(strstr(divvy_last_error(d), "does not speak divvy protocol version 2"));
        ck_assert_int_eq(divvy_pending(d), 0);
        ck_assert_int_eq(divvy_hello(d), -EPROTONOSUPPORT);
        ck_assert_str_eq(divvy_server_name(d), "");
        /* HIT still works with it. */
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "a", "b" }), &h), 0);
        ck_assert(h.allowed && h.credit == 2);
        fake_finish(&f, d, 3);
}
END_TEST

/* HELLO is per connection: after the server closed, the next call greets the new one. */
START_TEST (test_hello_per_connection) {
        static const Step steps[] = {
                { "HELLO", "OK proto=2 server=divvyd/1 extra=\"x y\"\n" },
                { "HELLO", NULL }, /* idle connection closed by the server (e.g. a restart) */
                { "HELLO", HELLO_OK },
                { "RESET", "OK reset=0\n" },
        };
        uint64_t n = 99;
        Fake f;
        divvy *d;

        fake_start(&f, steps, sizeof steps / sizeof steps[0]);
        d = handle(&f);
        ck_assert_int_eq(divvy_hello(d), 2);
        ck_assert_str_eq(divvy_server_name(d), "divvyd/1");
        /* The explicit HELLO goes out again and the server closes without answering. */
        ck_assert_int_eq(divvy_hello(d), -ECONNRESET);
        ck_assert_int_eq(divvy_reset(d, NULL, 0, &n), 0);
        ck_assert_uint_eq(n, 0);
        fake_finish(&f, d, 2);
}
END_TEST

/* The server's errors for new verbs, and what follows an ERR. */
START_TEST (test_server_errors) {
        static const Step steps[] = {
                { "HELLO", HELLO_OK },
                { "REFUND 1 a=b", "ERR forbidden \"REFUND and RESET need an admin listener\"\n" },
                { "HELLO", HELLO_OK },
                { "CHARGE 5", "ERR bad-count \"count must be at least 1\"\n" },
                { "HELLO", HELLO_OK },
                { "PEEK 1", "OK allowed=true credit=1 limit=1 reset=1 retry=0 rule=r\n" },
        };
        divvy_decision r;
        Fake f;
        divvy *d;

        fake_start(&f, steps, sizeof steps / sizeof steps[0]);
        d = handle(&f);
        ck_assert_int_eq(divvy_refund(d, 1, PAIRS({ "a", "b" }), &r), -EPROTO);
        ck_assert_str_eq(divvy_server_error_code(d), "forbidden");
        ck_assert_str_eq(divvy_server_error_reason(d), "REFUND and RESET need an admin listener");
        ck_assert_int_eq(divvy_charge(d, 5, NULL, 0, &r), -EPROTO);
        ck_assert_str_eq(divvy_server_error_code(d), "bad-count");
        ck_assert_int_eq(divvy_peek(d, 1, NULL, 0, &r), 0);
        fake_finish(&f, d, 3);
}
END_TEST

/* HELLO's answer and the request's ERR arrive in one read: the connection is closed by the
 * ERR before HELLO's answer is looked at, so the next call must greet its new connection. */
START_TEST (test_hello_and_err_together) {
        static const Step steps[] = {
                { "HELLO", HELLO_OK "ERR forbidden \"admin only\"\n" },
                { "HELLO", HELLO_OK },
                { "PEEK 1", "OK allowed=true credit=1 limit=1 reset=1 retry=0 rule=r\n" },
        };
        divvy_decision r;
        Fake f;
        divvy *d;

        fake_start(&f, steps, sizeof steps / sizeof steps[0]);
        d = handle(&f);
        ck_assert_int_eq(divvy_refund(d, 1, NULL, 0, &r), -EPROTO);
        ck_assert_str_eq(divvy_server_error_code(d), "forbidden");
        ck_assert_int_eq(divvy_peek(d, 1, NULL, 0, &r), 0);
        fake_finish(&f, d, 2);
}
END_TEST

/* Replies: unknown fields and field order do not matter; a missing or malformed field is
 * -EBADMSG, and the connection is dropped. */
static const struct {
        const char *reply;
        int expect;
} decision_replies[] = {
        { "OK allowed=true credit=7 limit=10 reset=42 retry=0 rule=cookies\n", 0 },
        { "OK rule=cookies retry=0 reset=42 limit=10 credit=7 allowed=true\n", 0 },
        { "OK  allowed=true\tcredit=7 limit=10 reset=42 retry=0 rule=cookies new=\"a rule=x b\" flag\r\n",
          0 },
        { "OK future=\"rule=nope\" allowed=true credit=7 limit=10 reset=42 retry=0 rule=cookies\n", 0 },
        { "OK allowed=true credit=7 limit=10 reset=42 retry=0\n", -EBADMSG },
        { "OK allowed=yes credit=7 limit=10 reset=42 retry=0 rule=cookies\n", -EBADMSG },
        { "OK allowed=true credit=-7 limit=10 reset=42 retry=0 rule=cookies\n", -EBADMSG },
        { "OK allowed=true credit=7 limit=10 reset=42 retry=x rule=cookies\n", -EBADMSG },
        { "OK allowed=true credit=7 limit=10 reset=42 retry=-9223372036854775809 rule=cookies\n", -EBADMSG },
        { "OK allowed=true credit=18446744073709551616 limit=10 reset=42 retry=0 rule=cookies\n", -EBADMSG },
        { "OK allowed=\"true\" credit=7 limit=10 reset=42 retry=0 rule=cookies\n", -EBADMSG },
        { "OK allowed=true credit=7 limit=10 reset=42 retry=0 rule=cookies x=\"open\n", -EBADMSG },
        { "OK true 7 42\n", -EBADMSG },
        { "OKallowed=true credit=7 limit=10 reset=42 retry=0 rule=cookies\n", -EBADMSG },
};

START_TEST (test_decision_replies) {
        const Step steps[] = { { "HELLO", HELLO_OK }, { "TAKE 1", decision_replies[_i].reply } };
        divvy_decision r;
        Fake f;
        divvy *d;

        fake_start(&f, steps, 2);
        d = handle(&f);
        ck_assert_int_eq(divvy_take(d, 1, NULL, 0, &r), decision_replies[_i].expect);
        if (decision_replies[_i].expect == 0)
                assert_decision(&r, true, 7, 10, 42, 0, "cookies");
        ck_assert_int_eq(divvy_pending(d), 0);
        fake_finish(&f, d, 1);
}
END_TEST

/* EXPLAIN's actor: escapes, the cut marker, no actorField; empty lists. */
START_TEST (test_explain_replies) {
        static const Step steps[] = {
                { "HELLO", HELLO_OK },
                { "EXPLAIN",
                  "OK rule=#0 index=0 policy=stop actor=- algorithm=fixed-window canaries=- continue=-\n" },
                { "EXPLAIN a=b",
                  "OK rule=r index=1 policy=stop actor=\"a\\\"b\\\\c\\td\\x01\\x7f\\xc3\\xa9 e\" "
                  "algorithm=sliding-window canaries=- continue=a,...\n" },
                { "EXPLAIN a=c",
                  "OK rule=r index=1 policy=stop actor=\"abc\\...\" algorithm=x canaries=- continue=-\n" },
                { "EXPLAIN a=d",
                  "OK rule=r index=1 policy=stop actor=\"\" algorithm=x canaries=- continue=-\n" },
                { "EXPLAIN a=e", "OK rule=r index=1 policy=stop algorithm=x canaries=- continue=-\n" },
        };
        divvy_explanation e;
        Fake f;
        divvy *d;

        fake_start(&f, steps, sizeof steps / sizeof steps[0]);
        d = handle(&f);
        ck_assert_int_eq(divvy_explain(d, NULL, 0, &e), 0);
        ck_assert_str_eq(e.rule, "#0");
        ck_assert(!e.has_actor);
        ck_assert_str_eq(e.canaries, "");
        ck_assert_str_eq(e.continues, "");
        ck_assert_int_eq(divvy_explain(d, PAIRS({ "a", "b" }), &e), 0);
        ck_assert(e.has_actor && !e.actor_cut);
        ck_assert_uint_eq(e.actor_len, 13);
        ck_assert_mem_eq(e.actor, "a\"b\\c\td\x01\x7f\xc3\xa9 e", 13);
        ck_assert_str_eq(e.continues, "a,...");
        ck_assert_int_eq(divvy_explain(d, PAIRS({ "a", "c" }), &e), 0);
        ck_assert(e.actor_cut);
        ck_assert_str_eq(e.actor, "abc");
        ck_assert_int_eq(divvy_explain(d, PAIRS({ "a", "d" }), &e), 0);
        ck_assert(e.has_actor && e.actor_len == 0 && !e.actor_cut);
        ck_assert_int_eq(divvy_explain(d, PAIRS({ "a", "e" }), &e), -EBADMSG);
        fake_finish(&f, d, 1);
}
END_TEST

/* Bad arguments are refused before anything is sent (the fake expects no request at all). */
START_TEST (test_invalid_arguments) {
        divvy_decision r;
        divvy_result h;
        Fake f;
        divvy *d;

        fake_start(&f, NULL, 0);
        d = handle(&f);
        ck_assert_int_eq(divvy_take(d, 0, NULL, 0, &r), -EINVAL);
        ck_assert_ptr_nonnull(strstr(divvy_last_error(d), "Invalid count 0 for TAKE"));
        ck_assert_int_eq(divvy_charge(d, 0, NULL, 0, &r), -EINVAL);
        ck_assert_int_eq(divvy_refund(d, 0, NULL, 0, &r), -EINVAL);
        ck_assert_int_eq(divvy_take(d, DIVVY_COUNT_MAX + 1, NULL, 0, &r), -EINVAL);
        ck_assert_int_eq(divvy_peek(d, DIVVY_COUNT_MAX + 1, NULL, 0, &r), -EINVAL);
        ck_assert_int_eq(divvy_take(d, 1, NULL, 0, NULL), -EINVAL);
        ck_assert_int_eq(divvy_explain(d, NULL, 0, NULL), -EINVAL);
        ck_assert_int_eq(divvy_take(d, 1, PAIRS({ "a", "x\"y" }), &r), -EINVAL);
        ck_assert_int_eq(divvy_reset(d, PAIRS({ "", "y" }), NULL), -EINVAL);
        ck_assert_int_eq(divvy_take(NULL, 1, NULL, 0, &r), -EINVAL);
        ck_assert_int_eq(divvy_hello(NULL), -EINVAL);
        /* Synchronous calls refuse while pipelined results are pending. */
        ck_assert_int_eq(divvy_send_hit(d, PAIRS({ "a", "b" })), 0);
        ck_assert_int_eq(divvy_take(d, 1, NULL, 0, &r), -EBUSY);
        ck_assert_int_eq(divvy_pending(d), 1);
        (void) h;
        fake_finish(&f, d, 0);
}
END_TEST

/* A key starting with '@' is quoted in a version 2 request: divvyd reads an unquoted "@..."
 * token after the count as a client timestamp (TAKE 1 @user=x got ERR bad-time, EXPLAIN
 * @user=x "only TAKE, PEEK and CHARGE take a timestamp"). HIT has none: its bytes are kept. */
START_TEST (test_at_key_quoted) {
        static const Step steps[] = {
                { "HELLO", HELLO_OK },
                { "TAKE 1 \"@user\"=x a=@b", "OK allowed=true credit=4 limit=5 reset=60 retry=0 rule=at\n" },
                { "PEEK 0 \"@user\"=x", "OK allowed=true credit=4 limit=5 reset=60 retry=0 rule=at\n" },
                { "RESET \"@user\"=x", "OK reset=1\n" },
                { "EXPLAIN \"@ x\"=y \"@user\"=x", "OK rule=at index=0 policy=stop actor=\"x\" "
                                                   "algorithm=fixed-window canaries=- continue=-\n" },
                { "HIT @user=x", "OK true 3 60\n" },
        };
        divvy_decision r;
        divvy_explanation e;
        divvy_result h;
        Fake f;
        divvy *d;

        fake_start(&f, steps, sizeof steps / sizeof steps[0]);
        d = handle(&f);
        ck_assert_int_eq(divvy_take(d, 1, PAIRS({ "@user", "x" }, { "a", "@b" }), &r), 0);
        assert_decision(&r, true, 4, 5, 60, 0, "at");
        ck_assert_int_eq(divvy_peek(d, 0, PAIRS({ "@user", "x" }), &r), 0);
        ck_assert_int_eq(divvy_reset(d, PAIRS({ "@user", "x" }), NULL), 0);
        ck_assert_int_eq(divvy_explain(d, PAIRS({ "@ x", "y" }, { "@user", "x" }), &e), 0);
        ck_assert_str_eq(e.actor, "x");
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "@user", "x" }), &h), 0);
        ck_assert(h.allowed && h.credit == 3);
        fake_finish(&f, d, 1);
}
END_TEST

/* divvy_server_name() is the name of the last successful HELLO, else "": a HELLO that fails
 * (an old server behind the same address now, a broken connection) clears the name the one
 * before it gave, instead of still naming a server that no longer answers. */
START_TEST (test_server_name_after_failed_hello) {
        static const Step steps[] = {
                { "HELLO", "OK proto=2 server=divvyd/1\n" },
                { "HELLO", "ERR unknown-command\n" },
                { "HELLO", "OK proto=2 server=divvyd/2\n" },
                { "HELLO", NULL },
        };
        Fake f;
        divvy *d;

        fake_start(&f, steps, sizeof steps / sizeof steps[0]);
        d = handle(&f);
        ck_assert_int_eq(divvy_hello(d), 2);
        ck_assert_str_eq(divvy_server_name(d), "divvyd/1");
        ck_assert_int_eq(divvy_hello(d), -EPROTONOSUPPORT);
        ck_assert_str_eq(divvy_server_name(d), "");
        ck_assert_int_eq(divvy_hello(d), 2);
        ck_assert_str_eq(divvy_server_name(d), "divvyd/2");
        ck_assert_int_eq(divvy_hello(d), -ECONNRESET);
        ck_assert_str_eq(divvy_server_name(d), "");
        fake_finish(&f, d, 2);
}
END_TEST

static Suite *client_v2_suite(void) {
        Suite *s = suite_create("client-v2");
        TCase *tc = tcase_create("fake");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_every_verb);
        tcase_add_test(tc, test_old_server);
        tcase_add_test(tc, test_hello_per_connection);
        tcase_add_test(tc, test_server_errors);
        tcase_add_test(tc, test_hello_and_err_together);
        tcase_add_loop_test(tc, test_decision_replies, 0,
                            sizeof decision_replies / sizeof decision_replies[0]);
        tcase_add_test(tc, test_explain_replies);
        tcase_add_test(tc, test_invalid_arguments);
        tcase_add_test(tc, test_at_key_quoted);
        tcase_add_test(tc, test_server_name_after_failed_hello);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        return check_run_suite(client_v2_suite());
}
