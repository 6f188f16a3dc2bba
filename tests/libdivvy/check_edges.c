/* SPDX-License-Identifier: MIT */
/*
 * libdivvy at its edges, against a fake server in a thread (no daemon): a timeout too large
 * to add to the clock, replies that arrived before the server closed and the library's next
 * write failed, a Unix socket whose listen backlog is full, replies one byte at a time, an
 * endless reply line, and the descriptors left after many failed calls.
 */

#include "divvy.h"
#include "check-run.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 10000 /* ms: bound on every wait of the fake server */

static char dir[80];
static char sock_path[108];
static char address[128];

static void setup(void) {
        const char *tmp = getenv("TMPDIR");

        snprintf(dir, sizeof dir, "%s/divvy-edges-XXXXXX", tmp && *tmp && strlen(tmp) < 50 ? tmp : "/tmp");
        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(sock_path, sizeof sock_path, "%s/fake.sock", dir);
        snprintf(address, sizeof address, "unix:%s", sock_path);
}

static void teardown(void) {
        unlink(sock_path);
        rmdir(dir);
}

static int listen_unix(int backlog) {
        struct sockaddr_un sun = { .sun_family = AF_UNIX };
        int fd;

        strcpy(sun.sun_path, sock_path);
        unlink(sock_path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(bind(fd, (struct sockaddr *) &sun, sizeof sun), 0);
        ck_assert_int_eq(listen(fd, backlog), 0);
        return fd;
}

/* One connection: read `lines` request lines, send `reply` (one byte per send() when
 * bytewise), then close at once or, with hold, once the client has closed. */
typedef struct Fake {
        int listen_fd;
        size_t lines;
        const char *reply;
        size_t reply_len; /* 0: strlen(reply) */
        bool bytewise, hold;
        pthread_t thread;
} Fake;

static void *fake_run(void *userdata) {
        Fake *f = userdata;
        struct pollfd pfd = { .events = POLLIN };
        char buf[4096];
        size_t lines = 0, len;
        ssize_t n;
        int fd;

        pfd.fd = f->listen_fd;
        if (poll(&pfd, 1, WAIT_MS) != 1)
                return NULL;
        fd = accept(f->listen_fd, NULL, NULL);
        if (fd < 0)
                return NULL;
        pfd.fd = fd;
        while (lines < f->lines && poll(&pfd, 1, WAIT_MS) == 1 && (n = read(fd, buf, sizeof buf)) > 0)
                for (ssize_t i = 0; i < n; i++)
                        lines += buf[i] == '\n';
        len = f->reply_len ? f->reply_len : strlen(f->reply);
        for (size_t off = 0; off < len;) {
                n = send(fd, f->reply + off, f->bytewise ? 1 : len - off, MSG_NOSIGNAL);
                if (n <= 0)
                        break;
                off += (size_t) n;
        }
        while (f->hold && poll(&pfd, 1, WAIT_MS) == 1 && read(fd, buf, sizeof buf) > 0)
                ;
        close(fd);
        return NULL;
}

static void fake_start(Fake *f) {
        f->listen_fd = listen_unix(4);
        ck_assert_int_eq(pthread_create(&f->thread, NULL, fake_run, f), 0);
}

static void fake_stop(Fake *f) {
        pthread_join(f->thread, NULL);
        close(f->listen_fd);
}

static divvy *handle(void) {
        divvy *d = NULL;

        ck_assert_int_eq(divvy_new(address, &d), 0);
        return d;
}

static const divvy_pair pair[] = { { "n", "x" } };

/* ---- a timeout too large to add to the clock ------------------------------------------------- */

/* divvy_set_timeout() takes any uint64_t: UINT64_MAX must wait (practically) forever, not
 * wrap the deadline into the past and time out before the first wait. The reply is already
 * there, so a correct handle never waits at all. */
START_TEST (test_huge_timeout) {
        const uint64_t huge[] = { UINT64_MAX, UINT64_MAX - 1, UINT64_MAX / 2 + 1 };
        divvy_decision dec;
        divvy_result res;
        divvy *d;
        Fake f = { .lines = 1, .reply = "OK true 1 2\n", .hold = true };

        fake_start(&f);
        d = handle();
        ck_assert_int_eq(divvy_set_timeout(d, huge[_i]), 0);
        ck_assert_msg(divvy_hit(d, pair, 1, &res) == 0, "hit: %s", divvy_last_error(d));
        ck_assert(res.allowed && res.credit == 1 && res.reset_seconds == 2);
        divvy_free(d);
        fake_stop(&f);

        f = (Fake){ .lines = 2,
                    .reply = "OK proto=2\nOK allowed=true credit=1 limit=2 reset=3 retry=0 rule=#0\n",
                    .hold = true };
        fake_start(&f);
        d = handle();
        ck_assert_int_eq(divvy_set_timeout(d, huge[_i]), 0);
        ck_assert_msg(divvy_take(d, 1, pair, 1, &dec) == 0, "take: %s", divvy_last_error(d));
        ck_assert(dec.allowed && dec.credit == 1 && dec.limit == 2);
        divvy_free(d);
        fake_stop(&f);
}
END_TEST

/* ---- replies that arrived before a failed write --------------------------------------------- */

/* Two pipelined requests are written; the server answers the first, refuses the second with
 * ERR and closes. The client queues a third and flushes: send() fails (EPIPE), but the
 * replies are in the socket. They must be read as the contract says (results that arrived
 * are kept; after an ERR the rest are -ECANCELED), not all turned into -ECONNRESET: the
 * first hit was executed and allowed, and a caller told it failed may retry it. */
START_TEST (test_replies_before_broken_pipe) {
        divvy_result res;
        divvy *d;
        int r;
        Fake f = { .lines = 2, .reply = "OK true 7 9\nERR unknown \"store full\"\n" };

        fake_start(&f);
        d = handle();
        ck_assert_int_eq(divvy_send_hit(d, pair, 1), 0);
        ck_assert_int_eq(divvy_send_hit(d, pair, 1), 0);
        ck_assert_int_eq(divvy_flush(d), 0);
        fake_stop(&f); /* answered and closed */

        ck_assert_int_eq(divvy_send_hit(d, pair, 1), 0);
        r = divvy_flush(d);
        ck_assert_msg(r == -EPROTO, "flush: %d (%s)", r, divvy_last_error(d));
        ck_assert_int_eq(divvy_pending(d), 3);

        r = divvy_read_result(d, &res);
        ck_assert_msg(r == 0, "result 1: %d (%s)", r, divvy_last_error(d));
        ck_assert(res.allowed && res.credit == 7 && res.reset_seconds == 9);
        r = divvy_read_result(d, &res);
        ck_assert_msg(r == -EPROTO, "result 2: %d (%s)", r, divvy_last_error(d));
        ck_assert_str_eq(divvy_server_error_code(d), "unknown");
        ck_assert_str_eq(divvy_server_error_reason(d), "store full");
        r = divvy_read_result(d, &res);
        ck_assert_msg(r == -ECANCELED, "result 3: %d (%s)", r, divvy_last_error(d));
        ck_assert_int_eq(divvy_pending(d), 0);
        divvy_free(d);
}
END_TEST

/* ---- a Unix socket whose listen backlog is full --------------------------------------------- */

typedef struct Backlog {
        int listen_fd;
        int fillers[64];
        size_t n_fillers;
        pthread_t thread;
} Backlog;

/* Fills the backlog of a listener nobody accepts on: a non-blocking connect() to it fails
 * with EAGAIN (a Unix socket never completes a connect later, unlike TCP). */
static void backlog_fill(Backlog *b) {
        struct sockaddr_un sun = { .sun_family = AF_UNIX };

        strcpy(sun.sun_path, sock_path);
        b->listen_fd = listen_unix(0);
        for (b->n_fillers = 0; b->n_fillers < 64; b->n_fillers++) {
                int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                ck_assert_int_ge(fd, 0);
                if (connect(fd, (struct sockaddr *) &sun, sizeof sun) < 0) {
                        ck_assert_int_eq(errno, EAGAIN);
                        close(fd);
                        break;
                }
                b->fillers[b->n_fillers] = fd;
        }
        ck_assert_uint_lt(b->n_fillers, 64);
}

static void backlog_close(Backlog *b) {
        for (size_t i = 0; i < b->n_fillers; i++)
                close(b->fillers[i]);
        close(b->listen_fd);
}

/* While the backlog is full, a connect must not report success on a socket that is not
 * connected (the request then failed with -ENOTCONN, ping with -EINVAL): it waits, bounded
 * by the timeout. */
START_TEST (test_backlog_full_times_out) {
        divvy_result res;
        Backlog b = {};
        divvy *d;
        int r;

        backlog_fill(&b);
        d = handle();
        ck_assert_int_eq(divvy_set_timeout(d, 50 * 1000), 0);
        r = divvy_connect(d);
        ck_assert_msg(r == -ETIMEDOUT, "connect: %d (%s)", r, divvy_last_error(d));
        r = divvy_hit(d, pair, 1, &res);
        ck_assert_msg(r == -ETIMEDOUT, "hit: %d (%s)", r, divvy_last_error(d));
        ck_assert_int_eq(divvy_pending(d), 0);
        r = divvy_ping(d);
        ck_assert_msg(r == -ETIMEDOUT, "ping: %d (%s)", r, divvy_last_error(d));
        divvy_free(d);
        backlog_close(&b);
}
END_TEST

/* Accepts every connection (the fillers first) and answers one request on the last. */
static void *backlog_drain(void *userdata) {
        Backlog *b = userdata;
        struct timespec pause = { .tv_nsec = 20 * 1000 * 1000 }; /* let the client start waiting */
        struct pollfd pfd = { .events = POLLIN };
        char buf[256];
        int fd = -1;

        nanosleep(&pause, NULL);
        for (size_t i = 0; i <= b->n_fillers; i++) {
                if (fd >= 0)
                        close(fd);
                pfd.fd = b->listen_fd;
                if (poll(&pfd, 1, WAIT_MS) != 1)
                        return NULL;
                fd = accept(b->listen_fd, NULL, NULL);
                if (fd < 0)
                        return NULL;
        }
        pfd.fd = fd;
        if (poll(&pfd, 1, WAIT_MS) == 1 && read(fd, buf, sizeof buf) > 0)
                (void) send(fd, "OK true 5 6\n", 12, MSG_NOSIGNAL);
        while (poll(&pfd, 1, WAIT_MS) == 1 && read(fd, buf, sizeof buf) > 0)
                ;
        close(fd);
        return NULL;
}

/* Once the server accepts again (whenever within the timeout), the waiting call connects. */
START_TEST (test_backlog_full_then_accepted) {
        divvy_result res;
        Backlog b = {};
        divvy *d;
        int r;

        backlog_fill(&b);
        ck_assert_int_eq(pthread_create(&b.thread, NULL, backlog_drain, &b), 0);
        d = handle();
        ck_assert_int_eq(divvy_set_timeout(d, WAIT_MS * 1000ULL), 0);
        r = divvy_hit(d, pair, 1, &res);
        ck_assert_msg(r == 0, "hit: %d (%s)", r, divvy_last_error(d));
        ck_assert(res.allowed && res.credit == 5 && res.reset_seconds == 6);
        divvy_free(d);
        pthread_join(b.thread, NULL);
        backlog_close(&b);
}
END_TEST

/* ---- replies one byte at a time, and an endless line ---------------------------------------- */

START_TEST (test_bytewise_replies) {
        divvy_explanation e;
        divvy_result res;
        divvy *d;
        Fake f = { .lines = 1, .reply = "OK false 0 -1\r\n", .bytewise = true, .hold = true };

        fake_start(&f);
        d = handle();
        ck_assert_msg(divvy_hit(d, pair, 1, &res) == 0, "hit: %s", divvy_last_error(d));
        ck_assert(!res.allowed && res.credit == 0 && res.reset_seconds == -1);
        divvy_free(d);
        fake_stop(&f);

        f = (Fake){ .lines = 2,
                    .reply =
                            "OK proto=2 server=fake/1\nOK rule=a index=3 policy=stop algorithm=token-bucket "
                            "actor=\"t\\tx\\x41\\\\\" canaries=- continue=b,#4\n",
                    .bytewise = true,
                    .hold = true };
        fake_start(&f);
        d = handle();
        ck_assert_msg(divvy_explain(d, pair, 1, &e) == 0, "explain: %s", divvy_last_error(d));
        ck_assert_str_eq(e.rule, "a");
        ck_assert_uint_eq(e.index, 3);
        ck_assert(e.has_actor && !e.actor_cut);
        ck_assert_uint_eq(e.actor_len, 5);
        ck_assert_mem_eq(e.actor, "t\txA\\", 5);
        ck_assert_str_eq(e.canaries, "");
        ck_assert_str_eq(e.continues, "b,#4");
        ck_assert_str_eq(divvy_server_name(d), "fake/1");
        divvy_free(d);
        fake_stop(&f);
}
END_TEST

/* A reply line that never ends is refused once it passes the longest reply (-EBADMSG), for HIT,
 * a version 2 call and ping alike: nothing waits for the timeout or reads past a buffer. */
START_TEST (test_endless_reply_line) {
        static char endless[40000];
        divvy_decision dec;
        divvy_result res;
        divvy *d;
        int r;
        Fake f = { .lines = _i == 2 ? 0 : 1, .reply = endless, .reply_len = sizeof endless, .hold = true };

        memset(endless, 'O', sizeof endless);
        fake_start(&f);
        d = handle();
        ck_assert_int_eq(divvy_set_timeout(d, WAIT_MS * 1000ULL), 0);
        r = _i == 0   ? divvy_hit(d, pair, 1, &res)
            : _i == 1 ? divvy_peek(d, 0, pair, 1, &dec)
                      : divvy_ping(d);
        ck_assert_msg(r == -EBADMSG, "call %d: %d (%s)", _i, r, divvy_last_error(d));
        ck_assert_int_eq(divvy_pending(d), 0);
        divvy_free(d);
        fake_stop(&f);
}
END_TEST

/* ---- descriptors ---------------------------------------------------------------------------- */

static size_t count_fds(void) {
        DIR *dd = opendir("/proc/self/fd");
        size_t n = 0;

        ck_assert_ptr_nonnull(dd);
        while (readdir(dd))
                n++;
        closedir(dd);
        return n;
}

/* Every failed call closes what it opened: refused connects, reconnects after ERR replies. */
START_TEST (test_no_fd_leak) {
        divvy_decision dec;
        divvy_result res;
        size_t before;
        divvy *d;

        before = count_fds();
        ck_assert_int_eq(divvy_new("unix:/nonexistent/divvyd.sock", &d), 0);
        for (int i = 0; i < 100; i++) {
                ck_assert_int_eq(divvy_hit(d, pair, 1, &res), -ENOENT);
                ck_assert_int_eq(divvy_take(d, 1, pair, 1, &dec), -ENOENT);
                ck_assert_int_eq(divvy_ping(d), -ENOENT);
                ck_assert_int_eq(divvy_connect(d), -ENOENT);
                ck_assert_int_eq(divvy_send_hit(d, pair, 1), 0);
                ck_assert_int_eq(divvy_flush(d), -ENOENT);
                ck_assert_int_eq(divvy_read_result(d, &res), -ENOENT);
        }
        divvy_free(d);
        ck_assert_uint_eq(count_fds(), before);
}
END_TEST

/* ---- one timeout for HELLO and the request after it ------------------------------------------ */

/* Answers HELLO after 750 ms and the TAKE after 1500 ms, counted from the requests. */
static void *slow_v2_run(void *userdata) {
        Fake *f = userdata;
        struct pollfd pfd = { .events = POLLIN };
        const struct timespec step = { .tv_nsec = 750 * 1000 * 1000 };
        static const char hello[] = "OK proto=2\n",
                          take[] = "OK allowed=true credit=1 limit=2 reset=3 retry=0 rule=#0\n";
        char buf[4096];
        size_t lines = 0;
        ssize_t n;
        int fd;

        pfd.fd = f->listen_fd;
        if (poll(&pfd, 1, WAIT_MS) != 1 || (fd = accept(f->listen_fd, NULL, NULL)) < 0)
                return NULL;
        pfd.fd = fd;
        while (lines < 2 && poll(&pfd, 1, WAIT_MS) == 1 && (n = read(fd, buf, sizeof buf)) > 0)
                for (ssize_t i = 0; i < n; i++)
                        lines += buf[i] == '\n';
        (void) nanosleep(&step, NULL);
        (void) send(fd, hello, sizeof hello - 1, MSG_NOSIGNAL);
        (void) nanosleep(&step, NULL);
        (void) send(fd, take, sizeof take - 1, MSG_NOSIGNAL);
        while (poll(&pfd, 1, WAIT_MS) == 1 && read(fd, buf, sizeof buf) > 0)
                ;
        close(fd);
        return NULL;
}

/* A version 2 call is bounded by one timeout, as divvy_hit() is and as divvy(1) promises for
 * --timeout ("bound on each request, connect included"): each wait had its own, so a server
 * answering HELLO just in time stretched `divvy --timeout 1 take` to almost 2 s. With a 1 s
 * timeout the TAKE's reply (at 1.5 s at the earliest) must come too late; any delay of the
 * fake only makes it later. */
START_TEST (test_v2_call_one_timeout) {
        divvy_decision dec;
        divvy *d;
        int r;
        Fake f = { 0 };

        f.listen_fd = listen_unix(4);
        ck_assert_int_eq(pthread_create(&f.thread, NULL, slow_v2_run, &f), 0);
        d = handle();
        ck_assert_int_eq(divvy_set_timeout(d, 1000 * 1000), 0);
        r = divvy_take(d, 1, pair, 1, &dec);
        ck_assert_msg(r == -ETIMEDOUT, "take: %d (%s)", r, divvy_last_error(d));
        ck_assert_int_eq(divvy_pending(d), 0);
        divvy_free(d);
        fake_stop(&f);
}
END_TEST

static Suite *edges_suite(void) {
        Suite *s = suite_create("client-edges");
        TCase *tc = tcase_create("edges");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_loop_test(tc, test_huge_timeout, 0, 3);
        tcase_add_test(tc, test_replies_before_broken_pipe);
        tcase_add_test(tc, test_backlog_full_times_out);
        tcase_add_test(tc, test_backlog_full_then_accepted);
        tcase_add_test(tc, test_bytewise_replies);
        tcase_add_loop_test(tc, test_endless_reply_line, 0, 3);
        tcase_add_test(tc, test_no_fd_leak);
        tcase_add_test(tc, test_v2_call_one_timeout);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        return check_run_suite(edges_suite());
}
