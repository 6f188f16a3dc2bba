/* SPDX-License-Identifier: MIT */
/*
 * libdivvy against the real divvyd (started per test on a temporary Unix socket and loopback
 * port, readiness by sd_notify) and against fake servers in a thread for what a real daemon
 * does not produce on demand: failure paths, the version 2 calls' exact requests and every
 * reply the parser must take, and the library's edges (timeouts, a full backlog, replies one
 * byte at a time, descriptors).
 */

#include "divvy.h"
#include "check-run.h"
#include "shared/clock.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 30000 /* ms: bound on the daemon's start and stop (sanitizer builds are slow) */

typedef struct Daemon {
        char dir[80];
        char sock[160];
        char notify[160];
        char db[160];
        char tcp[64];
        int port;
        int notify_fd;
        pid_t pid;
} Daemon;

static Daemon daemon_;

static const char *env_or(const char *name, const char *fallback) {
        const char *v = getenv(name);
        return v && *v ? v : fallback;
}

static int free_port(void) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof sa;
        int fd, port;

        fd = socket(AF_INET, SOCK_STREAM, 0);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(bind(fd, (struct sockaddr *) &sa, sizeof sa), 0);
        ck_assert_int_eq(getsockname(fd, (struct sockaddr *) &sa, &len), 0);
        port = ntohs(sa.sin_port);
        close(fd);
        return port;
}

/* Waits (bounded) for "READY=1" on the notify socket. */
static void wait_ready(Daemon *d) {
        char buf[4096];
        ssize_t n;

        for (;;) {
                struct pollfd pfd = { .fd = d->notify_fd, .events = POLLIN };
                ck_assert_msg(poll(&pfd, 1, WAIT_MS) == 1, "divvyd did not send READY=1");
                n = recv(d->notify_fd, buf, sizeof buf - 1, 0);
                ck_assert_int_gt(n, 0);
                buf[n] = '\0';
                if (strstr(buf, "READY=1"))
                        return;
        }
}

/* CLOCK_MONOTONIC when this process started its first daemon: no window of a test can have
 * opened before it, so a reset may be below its full length by at most the seconds since. */
static uint64_t first_start_usec;

static void daemon_start(Daemon *d, const char *extra) {
        if (first_start_usec == 0)
                first_start_usec = clock_usec(CLOCK_MONOTONIC);
        char divvyd[512], config[512];

        snprintf(divvyd, sizeof divvyd, "%s/src/divvyd", env_or("top_builddir", "."));
        snprintf(config, sizeof config, "%s/tests/data/client.ini", env_or("top_srcdir", "."));
        d->pid = fork();
        ck_assert_int_ge(d->pid, 0);
        if (d->pid == 0) {
                int null = open("/dev/null", O_WRONLY);
                if (null >= 0 && !getenv("CLIENT_TEST_VERBOSE"))
                        (void) dup2(null, STDERR_FILENO);
                setenv("NOTIFY_SOCKET", d->notify, 1);
                /* divvyd refuses root unless told (CI runs tests as root); otherwise a no-op option
                 * (periodic is the default) keeps the argument list fixed. */
                const char *root = geteuid() == 0 ? "--allow-root" : "--sync=periodic";
                execl(divvyd, divvyd, root, "--db", d->db, "--listen", d->tcp, "--listen", d->sock, config,
                      extra, (char *) NULL);
                _exit(127);
        }
        wait_ready(d);
}

static void daemon_stop(Daemon *d) {
        struct timespec tick = { .tv_nsec = 5 * 1000 * 1000 }; /* 5 ms between exit checks */
        int status = -1;
        pid_t r = 0;

        if (d->pid <= 0)
                return;
        ck_assert_int_eq(kill(d->pid, SIGTERM), 0);
        /* Bounded wait for the exit (pidfd_open() would do, but valgrind does not know it). */
        for (int i = 0; i < WAIT_MS / 5 && r == 0; i++) {
                r = waitpid(d->pid, &status, WNOHANG);
                if (r == 0)
                        nanosleep(&tick, NULL);
        }
        ck_assert_msg(r == d->pid, "divvyd did not stop within %d ms", WAIT_MS);
        d->pid = 0;
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "divvyd exit status %d", status);
}

static void setup(void) {
        Daemon *d = &daemon_;
        struct sockaddr_un sun = { .sun_family = AF_UNIX };

        *d = (Daemon){ .notify_fd = -1 };
        snprintf(d->dir, sizeof d->dir, "%s/divvy-client-XXXXXX", env_or("TMPDIR", "/tmp"));
        if (strlen(d->dir) > 60)
                snprintf(d->dir, sizeof d->dir, "/tmp/divvy-client-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(d->dir));
        snprintf(d->sock, sizeof d->sock, "unix:%s/divvyd.sock", d->dir);
        snprintf(d->notify, sizeof d->notify, "%s/notify", d->dir);
        snprintf(d->db, sizeof d->db, "%s/db", d->dir);
        d->port = free_port();
        snprintf(d->tcp, sizeof d->tcp, "tcp:127.0.0.1:%d", d->port);

        d->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(d->notify_fd, 0);
        strcpy(sun.sun_path, d->notify);
        ck_assert_int_eq(bind(d->notify_fd, (struct sockaddr *) &sun, sizeof sun), 0);
}

static void teardown(void) {
        Daemon *d = &daemon_;
        char cmd[1024];

        if (d->pid > 0) {
                kill(d->pid, SIGKILL);
                waitpid(d->pid, NULL, 0);
        }
        if (d->notify_fd >= 0)
                close(d->notify_fd);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->dir);
        (void) system(cmd);
}

static divvy *connect_to(const char *address) {
        divvy *d = NULL;

        ck_assert_int_eq(divvy_new(address, &d), 0);
        ck_assert_ptr_nonnull(d);
        return d;
}

#define PAIRS(...)                                                                                          \
        ((const divvy_pair[]){ __VA_ARGS__ }),                                                              \
                (sizeof((const divvy_pair[]){ __VA_ARGS__ }) / sizeof(divvy_pair))

static uint64_t seconds_since_first_start(void) {
        uint64_t d = clock_usec(CLOCK_MONOTONIC) - first_start_usec;
        return d / 1000000 + (d % 1000000 != 0);
}

/* reset > 0 is the window's full length: the reply may show it less the whole seconds that
 * have passed since the window can have opened (nothing here is decided by how fast it runs). */
static void assert_result(const divvy_result *r, bool allowed, uint64_t credit, int64_t reset) {
        int64_t low = reset;

        if (reset > 0)
                low = reset - (int64_t) seconds_since_first_start();
        ck_assert_msg(r->allowed == allowed && r->credit == credit && r->reset_seconds >= low &&
                              r->reset_seconds <= reset,
                      "got %d %llu %lld, expected %d %llu [%lld, %lld]", r->allowed,
                      (unsigned long long) r->credit, (long long) r->reset_seconds, allowed,
                      (unsigned long long) credit, (long long) low, (long long) reset);
}

/* ---- without a server ------------------------------------------------------------------- */

static const struct {
        const char *address;
        int expect;
} address_cases[] = {
        { "unix:/run/divvyd/divvyd.sock", 0 },
        { "/run/divvyd/divvyd.sock", 0 },
        { "tcp:127.0.0.1:8321", 0 },
        { "tcp:[::1]:8321", 0 },
        { "tcp:localhost", 0 },
        { "127.0.0.1:8321", 0 },
        { "[::1]:1", 0 },
        { "divvy.internal:65535", 0 },
        { "localhost", 0 },
        { "", -EINVAL },
        { "unix:", -EINVAL },
        { "tcp:", -EINVAL },
        { "tcp::8321", -EINVAL },
        { "127.0.0.1:", -EINVAL },
        { "127.0.0.1:0", -EINVAL },
        { "127.0.0.1:65536", -EINVAL },
        { "127.0.0.1:80x", -EINVAL },
        { "127.0.0.1:-1", -EINVAL },
        { "::1:8321", -EINVAL },
        { "[::1", -EINVAL },
        { "[::1]x", -EINVAL },
        { "host name:1", -EINVAL },
        { "unix:/" /* + 200 'x' appended by the test */, -ENAMETOOLONG },
};

START_TEST (test_addresses) {
        char buf[512];
        const char *a = address_cases[_i].address;
        divvy *d = NULL;

        if (address_cases[_i].expect == -ENAMETOOLONG) {
                snprintf(buf, sizeof buf, "%s%0200d", a, 0);
                a = buf;
        }
        ck_assert_msg(divvy_new(a, &d) == address_cases[_i].expect, "address '%s'", a);
        ck_assert(address_cases[_i].expect == 0 ? d != NULL : d == NULL);
        ck_assert_ptr_null(divvy_free(d));
}
END_TEST

static const struct {
        const char *s;
        bool key_ok, value_ok;
} string_cases[] = {
        { "plain", true, true },
        { "", false, true },
        { "with space", true, true },
        { "a=b", true, true },
        { "tab\there", true, true },
        { "caf\xc3\xa9", true, true },
        { "quote\"", false, false },
        { "line\nbreak", false, false },
        { "cr\r", false, false },
        { "bell\a", false, false },
        { "bad\xc3", false, false },
        { "overlong\xc0\xaf", false, false },
        { "surrogate\xed\xa0\x80", false, false },
};

START_TEST (test_strings) {
        ck_assert_msg(divvy_string_is_valid(string_cases[_i].s, true) == string_cases[_i].key_ok, "key #%d",
                      _i);
        ck_assert_msg(divvy_string_is_valid(string_cases[_i].s, false) == string_cases[_i].value_ok,
                      "value #%d", _i);
}
END_TEST

START_TEST (test_invalid_before_connecting) {
        /* The address does not exist: -EINVAL proves nothing was even tried on the network. */
        divvy *d = connect_to("unix:/nonexistent/divvyd.sock");
        divvy_pair many[DIVVY_PAIRS_MAX + 1];
        char big[DIVVY_LINE_MAX];
        divvy_result res;

        ck_assert_int_eq(divvy_hit(d, PAIRS({ "path", "/x\"y" }), &res), -EINVAL);
        ck_assert_ptr_nonnull(strstr(divvy_last_error(d), "'\"'"));
        ck_assert_ptr_nonnull(strstr(divvy_last_error(d), "path"));
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "path", "a\nHIT b=c" }), &res), -EINVAL);
        ck_assert_ptr_nonnull(strstr(divvy_last_error(d), "line break"));
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "", "x" }), &res), -EINVAL);
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "k", NULL }), &res), -EINVAL);

        for (size_t i = 0; i < DIVVY_PAIRS_MAX + 1; i++)
                many[i] = (divvy_pair){ "k", "v" };
        ck_assert_int_eq(divvy_hit(d, many, DIVVY_PAIRS_MAX + 1, &res), -E2BIG);
        memset(big, 'v', sizeof big - 1);
        big[sizeof big - 1] = '\0';
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "k", big }), &res), -E2BIG);
        ck_assert_int_eq(divvy_pending(d), 0);

        ck_assert_int_eq(divvy_read_result(d, &res), -ENOMSG);
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "k", "v" }), &res), -ENOENT);
        ck_assert_ptr_nonnull(strstr(divvy_last_error(d), "unix:/nonexistent/divvyd.sock"));
        ck_assert_int_eq(divvy_pending(d), 0);
        divvy_free(d);
}
END_TEST

START_TEST (test_unreachable) {
        char address[64];
        divvy_result res;
        divvy *d;

        snprintf(address, sizeof address, "127.0.0.1:%d", free_port());
        d = connect_to(address);
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "k", "v" }), &res), -ECONNREFUSED);
        ck_assert_ptr_nonnull(strstr(divvy_last_error(d), address));
        ck_assert_int_eq(divvy_connect(d), -ECONNREFUSED);
        ck_assert_int_eq(divvy_ping(d), -ECONNREFUSED);
        divvy_free(d);
}
END_TEST

/* ---- against divvyd --------------------------------------------------------------------- */

START_TEST (test_hit) {
        const char *address = _i == 0 ? daemon_.sock : daemon_.tcp;
        divvy_result res;
        divvy *d;

        daemon_start(&daemon_, NULL);
        d = connect_to(address);
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "path", "/limited" }, { "user", "hit" }), &res), 0);
        assert_result(&res, true, 1, 3600);
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "path", "/limited" }, { "user", "hit" }), &res), 0);
        assert_result(&res, true, 0, 3600);
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "path", "/limited" }, { "user", "hit" }), &res), 0);
        assert_result(&res, false, 0, 3600);
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "path", "/open" }), &res), 0);
        assert_result(&res, true, 5, 0);
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "path", "/closed" }), &res), 0);
        assert_result(&res, false, 0, -1);
        ck_assert_int_eq(divvy_hit(d, NULL, 0, &res), 0); /* the default rule */
        assert_result(&res, false, 0, -1);
        ck_assert_int_eq(divvy_ping(d), 0);
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "path", "/open" }), &res), 0); /* reconnects after ping */
        assert_result(&res, true, 5, 0);
        divvy_free(d);
        daemon_stop(&daemon_);
}
END_TEST

START_TEST (test_quoting_round_trip) {
        divvy_result res;
        divvy *d;

        daemon_start(&daemon_, NULL);
        d = connect_to(daemon_.sock);
        /* The rule is [path="/a b" q="x=y z" user=*]: it matches only if both values arrive intact. */
        ck_assert_int_eq(
                divvy_hit(d, PAIRS({ "path", "/a b" }, { "q", "x=y z" }, { "user", "quote" }), &res), 0);
        assert_result(&res, true, 99, 3600);
        ck_assert_int_eq(
                divvy_hit(d, PAIRS({ "path", "/a b" }, { "q", "x=y z" }, { "user", "quote" }), &res), 0);
        assert_result(&res, true, 98, 3600);
        /* Near misses fall through to the default rule. */
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "path", "/a b" }, { "q", "x=y" }, { "user", "quote" }), &res),
                         0);
        assert_result(&res, false, 0, -1);
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "path", "/a" }, { "q", "x=y z" }, { "user", "quote" }), &res),
                         0);
        assert_result(&res, false, 0, -1);
        /* An actor with a tab, '=', a non-ASCII letter and an empty key value are carried too. */
        ck_assert_int_eq(divvy_hit(d,
                                   PAIRS({ "path", "/a b" }, { "q", "x=y z" },
                                         { "user", "t\tu=v caf\xc3\xa9" }, { "empty", "" }),
                                   &res),
                         0);
        assert_result(&res, true, 99, 3600);
        /* The '"' is refused by the library; the connection stays usable. */
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "path", "/a \"b\"" }), &res), -EINVAL);
        ck_assert_int_eq(
                divvy_hit(d, PAIRS({ "path", "/a b" }, { "q", "x=y z" }, { "user", "quote" }), &res), 0);
        assert_result(&res, true, 97, 3600);
        divvy_free(d);
        daemon_stop(&daemon_);
}
END_TEST

START_TEST (test_pipeline_10000) {
        const char *address = _i == 0 ? daemon_.sock : daemon_.tcp;
        const size_t n = 10000;
        size_t sent = 0, got = 0;
        uint64_t expect = 99999;
        divvy_result res;
        char user[32];
        divvy *d;
        int r;

        daemon_start(&daemon_, NULL);
        d = connect_to(address);
        snprintf(user, sizeof user, "pipeline-%d", _i);
        while (got < n) {
                /* Send as far as the pipeline allows, then read what is due. */
                while (sent < n) {
                        r = divvy_send_hit(d, PAIRS({ "path", "/big" }, { "user", user }));
                        if (r == -ENOBUFS)
                                break;
                        ck_assert_int_eq(r, 0);
                        sent++;
                }
                ck_assert_int_eq(divvy_pending(d), sent - got);
                if (sent < n) /* stopped by the bound, and it holds */
                        ck_assert_int_eq(divvy_pending(d), DIVVY_PIPELINE_MAX);
                do {
                        ck_assert_int_eq(divvy_read_result(d, &res), 0);
                        ck_assert_msg(res.allowed && res.credit == expect,
                                      "result %zu: credit %llu, expected %llu", got,
                                      (unsigned long long) res.credit, (unsigned long long) expect);
                        expect--;
                        got++;
                } while (got < sent && divvy_pending(d) > DIVVY_PIPELINE_MAX / 2);
        }
        ck_assert_int_eq(divvy_pending(d), 0);
        ck_assert_int_eq(divvy_read_result(d, &res), -ENOMSG);
        /* divvy_hit() refuses while pipelined results are pending. */
        ck_assert_int_eq(divvy_send_hit(d, PAIRS({ "path", "/big" }, { "user", user })), 0);
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "path", "/big" }, { "user", user }), &res), -EBUSY);
        ck_assert_int_eq(divvy_flush(d), 0);
        ck_assert_int_eq(divvy_read_result(d, &res), 0);
        assert_result(&res, true, 89999, 3600);
        divvy_free(d);
        daemon_stop(&daemon_);
}
END_TEST

START_TEST (test_reconnect_after_restart) {
        const char *address = _i == 0 ? daemon_.sock : daemon_.tcp;
        divvy_result res;
        divvy *d;

        daemon_start(&daemon_, NULL);
        d = connect_to(address);
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "path", "/limited" }, { "user", "restart" }), &res), 0);
        assert_result(&res, true, 1, 3600);

        daemon_stop(&daemon_);
        /* Down: the handle's connection is dead and a new one is refused. */
        ck_assert_int_lt(divvy_hit(d, PAIRS({ "path", "/limited" }, { "user", "restart" }), &res), 0);
        ck_assert_int_eq(divvy_pending(d), 0);

        daemon_start(&daemon_, NULL);
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "path", "/limited" }, { "user", "restart" }), &res), 0);
        ck_assert(res.allowed && res.credit == 0); /* the counter survived the restart */

        /* A restart between two calls, with the old connection still open on our side. */
        daemon_stop(&daemon_);
        daemon_start(&daemon_, NULL);
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "path", "/limited" }, { "user", "restart" }), &res), 0);
        ck_assert(!res.allowed && res.credit == 0);
        divvy_free(d);
        daemon_stop(&daemon_);
}
END_TEST

START_TEST (test_server_err_too_many_connections) {
        divvy *first, *second;
        divvy_result res;

        daemon_start(&daemon_, "--max-connections=1");
        first = connect_to(daemon_.sock);
        second = connect_to(daemon_.sock);
        ck_assert_int_eq(divvy_hit(first, PAIRS({ "path", "/open" }), &res), 0);
        ck_assert_int_eq(divvy_hit(second, PAIRS({ "path", "/open" }), &res), -EPROTO);
        ck_assert_str_eq(divvy_server_error_code(second), "unknown");
        ck_assert_str_eq(divvy_server_error_reason(second), "too many connections");
        ck_assert_ptr_nonnull(strstr(divvy_last_error(second), "too many connections"));
        ck_assert_int_eq(divvy_ping(second), -EPROTO);
        divvy_free(first);
        divvy_free(second);
        daemon_stop(&daemon_);
}
END_TEST

START_TEST (test_ping_stopped_daemon) {
        divvy *d;

        daemon_start(&daemon_, NULL);
        d = connect_to(daemon_.tcp);
        ck_assert_int_eq(divvy_ping(d), 0);
        ck_assert_int_eq(kill(daemon_.pid, SIGSTOP), 0);
        ck_assert_int_eq(divvy_set_timeout(d, 200 * 1000), 0);
        ck_assert_int_eq(divvy_ping(d), -ETIMEDOUT); /* the kernel accepts, nobody answers */
        ck_assert_int_eq(kill(daemon_.pid, SIGCONT), 0);
        divvy_free(d);
        daemon_stop(&daemon_);
}
END_TEST

/* ---- against a scripted fake server ----------------------------------------------------- */

typedef struct Fake {
        int listen_fd;
        size_t expect_lines; /* read this many request lines, then answer */
        const char *reply;   /* NULL: never answer, wait for the client to close */
        char address[160];
        pthread_t thread;
} Fake;

static void *fake_run(void *userdata) {
        Fake *f = userdata;
        char buf[65536];
        size_t lines = 0;
        ssize_t n;
        int fd;

        fd = accept(f->listen_fd, NULL, NULL);
        if (fd < 0)
                return NULL;
        while (lines < f->expect_lines || !f->reply) {
                struct pollfd pfd = { .fd = fd, .events = POLLIN };
                if (poll(&pfd, 1, WAIT_MS) != 1)
                        break;
                n = read(fd, buf, sizeof buf);
                if (n <= 0)
                        break;
                for (ssize_t i = 0; i < n; i++)
                        lines += buf[i] == '\n';
        }
        if (f->reply)
                (void) write(fd, f->reply, strlen(f->reply));
        close(fd);
        return NULL;
}

static void fake_start(Fake *f, size_t expect_lines, const char *reply) {
        struct sockaddr_un sun = { .sun_family = AF_UNIX };

        f->expect_lines = expect_lines;
        f->reply = reply;
        snprintf(sun.sun_path, sizeof sun.sun_path, "%s/fake.sock", daemon_.dir);
        snprintf(f->address, sizeof f->address, "unix:%s", sun.sun_path);
        unlink(sun.sun_path);
        f->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(f->listen_fd, 0);
        ck_assert_int_eq(bind(f->listen_fd, (struct sockaddr *) &sun, sizeof sun), 0);
        ck_assert_int_eq(listen(f->listen_fd, 4), 0);
        ck_assert_int_eq(pthread_create(&f->thread, NULL, fake_run, f), 0);
}

static void fake_stop(Fake *f) {
        pthread_join(f->thread, NULL);
        close(f->listen_fd);
}

/* Four pipelined requests; the script answers them; each result is checked. */
static const struct {
        const char *reply;
        int expect[4];
        const char *code, *reason;
} fake_cases[] = {
        { "OK true 3 60\nOK false 0 59\r\nOK  true\t1 -1\nOK true 18446744073709551615 0\n",
          { 0, 0, 0, 0 } },
        { "OK true 1 2\nERR unknown-command \"no such command\"\n",
          { 0, -EPROTO, -ECANCELED, -ECANCELED },
          "unknown-command",
          "no such command" },
        { "ERR unknown\n", { -EPROTO, -ECANCELED, -ECANCELED, -ECANCELED }, "unknown", "" },
        { "OK true 1 2\nOK maybe 1 2\n", { 0, -EBADMSG, -EBADMSG, -EBADMSG } },
        { "OK true 1\n", { -EBADMSG, -EBADMSG, -EBADMSG, -EBADMSG } },
        { "OK true 1 2 3\n", { -EBADMSG, -EBADMSG, -EBADMSG, -EBADMSG } },
        { "OK true -1 2\n", { -EBADMSG, -EBADMSG, -EBADMSG, -EBADMSG } },
        { "OK true 18446744073709551616 2\n", { -EBADMSG, -EBADMSG, -EBADMSG, -EBADMSG } },
        { "OK true 1 2\nOK true 1 2\n", { 0, 0, -ECONNRESET, -ECONNRESET } },
        { "", { -ECONNRESET, -ECONNRESET, -ECONNRESET, -ECONNRESET } },
        { "OK true 1 2\nOK true 1 2\nOK true 1 2\nOK true 1 2\nOK true 1 2\n", { 0, 0, 0, 0 } },
        /* the int64_t a reset is read into, both ends; one past INT64_MIN */
        { "OK true 1 -9223372036854775808\nOK true 1 9223372036854775807\nOK true 1 -9223372036854775809\n",
          { 0, 0, -EBADMSG, -EBADMSG } },
};
#define FAKE_CASE_INT64_ENDS 11

START_TEST (test_fake_replies) {
        divvy_result res;
        Fake f = {};
        divvy *d;

        fake_start(&f, 4, fake_cases[_i].reply);
        d = connect_to(f.address);
        for (int i = 0; i < 4; i++)
                ck_assert_int_eq(divvy_send_hit(d, PAIRS({ "n", "x" })), 0);
        for (int i = 0; i < 4; i++) {
                int r = divvy_read_result(d, &res);
                ck_assert_msg(r == fake_cases[_i].expect[i], "case %d result %d: %d (%s)", _i, i, r,
                              divvy_last_error(d));
                if (r == -EPROTO) {
                        ck_assert_str_eq(divvy_server_error_code(d), fake_cases[_i].code);
                        ck_assert_str_eq(divvy_server_error_reason(d), fake_cases[_i].reason);
                }
                if (_i == 0 && i == 2)
                        assert_result(&res, true, 1, -1);
                if (_i == 0 && i == 3)
                        assert_result(&res, true, UINT64_MAX, 0);
                if (_i == FAKE_CASE_INT64_ENDS && i < 2)
                        assert_result(&res, true, 1, i == 0 ? INT64_MIN : INT64_MAX);
        }
        ck_assert_int_eq(divvy_pending(d), 0);
        fake_stop(&f);
        divvy_free(d);
}
END_TEST

START_TEST (test_fake_timeout) {
        divvy_result res;
        Fake f = {};
        divvy *d;

        fake_start(&f, 1, NULL); /* reads, never answers */
        d = connect_to(f.address);
        ck_assert_int_eq(divvy_set_timeout(d, 100 * 1000), 0);
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "n", "x" }), &res), -ETIMEDOUT);
        ck_assert_ptr_nonnull(strstr(divvy_last_error(d), "Timed out"));
        ck_assert_int_eq(divvy_pending(d), 0);
        divvy_free(d); /* closes: the fake sees EOF and ends */
        fake_stop(&f);
}
END_TEST

#define FAKE_WAIT_MS 10000 /* ms: bound on every wait of the fake servers below */

/* ---- the version 2 calls against a scripted fake server ------------------------------------ */

/* The version 2 calls (HELLO, TAKE, PEEK, CHARGE, REFUND, RESET, EXPLAIN) against a scripted fake
 * server on a temporary Unix socket: every request line the library sends is compared byte for
 * byte with the script, and the script's replies exercise the reply parser (unknown fields,
 * escapes, errors, an old server without HELLO). */

#define STEPS_MAX 32

/* One step of a script: the request line expected (without "\n") and the reply sent for it
 * (with its "\n"), in one write. A reply with a line starting with "ERR" is followed by closing the
 * connection, as divvyd and divvy do; reply NULL closes without answering. The next step then waits for a
 * new connection. */
typedef struct Step {
        const char *request;
        const char *reply;
} Step;

typedef struct Script {
        int listen_fd;
        char dir[64];
        char address[128];
        const Step *steps;
        size_t n_steps;
        size_t done;        /* steps answered */
        size_t connections; /* accepted */
        char mismatch[512]; /* first difference from the script, "" if none */
        pthread_t thread;
} Script;

static bool script_read_line(int fd, char *buf, size_t size, char *line, size_t *buf_len) {
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
                if (*buf_len >= size || poll(&pfd, 1, FAKE_WAIT_MS) != 1)
                        return false;
                ssize_t r = read(fd, buf + *buf_len, size - *buf_len);
                if (r <= 0)
                        return false;
                *buf_len += (size_t) r;
        }
}

static void *script_run(void *userdata) {
        Script *f = userdata;
        char buf[16384], line[16384];
        size_t buf_len = 0;
        int fd = -1;

        while (f->done < f->n_steps) {
                const Step *st = &f->steps[f->done];
                if (fd < 0) {
                        struct pollfd pfd = { .fd = f->listen_fd, .events = POLLIN };
                        if (poll(&pfd, 1, FAKE_WAIT_MS) != 1)
                                break;
                        fd = accept(f->listen_fd, NULL, NULL);
                        if (fd < 0)
                                break;
                        f->connections++;
                        buf_len = 0;
                }
                if (!script_read_line(fd, buf, sizeof buf, line, &buf_len)) {
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
                while (poll(&pfd, 1, FAKE_WAIT_MS) == 1 && read(fd, buf, sizeof buf) > 0)
                        ;
                close(fd);
        }
        return NULL;
}

static void script_start(Script *f, const Step *steps, size_t n_steps) {
        struct sockaddr_un sun = { .sun_family = AF_UNIX };

        *f = (Script){ .steps = steps, .n_steps = n_steps };
        snprintf(f->dir, sizeof f->dir, "/tmp/divvy-v2-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(f->dir));
        snprintf(sun.sun_path, sizeof sun.sun_path, "%s/fake.sock", f->dir);
        snprintf(f->address, sizeof f->address, "unix:%s", sun.sun_path);
        f->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(f->listen_fd, 0);
        ck_assert_int_eq(bind(f->listen_fd, (struct sockaddr *) &sun, sizeof sun), 0);
        ck_assert_int_eq(listen(f->listen_fd, 4), 0);
        ck_assert_int_eq(pthread_create(&f->thread, NULL, script_run, f), 0);
}

/* Frees the handle (the fake sees EOF), waits for the fake and checks it ran the whole script. */
static void script_finish(Script *f, divvy *d, size_t expect_connections) {
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

static divvy *script_handle(const Script *f) {
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
        Script f;
        divvy *d;

        script_start(&f, steps, sizeof steps / sizeof steps[0]);
        d = script_handle(&f);
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
        script_finish(&f, d, 1);
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
        Script f;
        divvy *d;

        script_start(&f, steps, sizeof steps / sizeof steps[0]);
        d = script_handle(&f);
        ck_assert_int_eq(divvy_take(d, 1, PAIRS({ "a", "b" }), &r), -EPROTONOSUPPORT);
        ck_assert_ptr_nonnull(strstr(divvy_last_error(d), "does not speak divvy protocol version 2"));
        ck_assert_int_eq(divvy_pending(d), 0);
        ck_assert_int_eq(divvy_hello(d), -EPROTONOSUPPORT);
        ck_assert_str_eq(divvy_server_name(d), "");
        /* HIT still works with it. */
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "a", "b" }), &h), 0);
        ck_assert(h.allowed && h.credit == 2);
        script_finish(&f, d, 3);
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
        Script f;
        divvy *d;

        script_start(&f, steps, sizeof steps / sizeof steps[0]);
        d = script_handle(&f);
        ck_assert_int_eq(divvy_hello(d), 2);
        ck_assert_str_eq(divvy_server_name(d), "divvyd/1");
        /* The explicit HELLO goes out again and the server closes without answering. */
        ck_assert_int_eq(divvy_hello(d), -ECONNRESET);
        ck_assert_int_eq(divvy_reset(d, NULL, 0, &n), 0);
        ck_assert_uint_eq(n, 0);
        script_finish(&f, d, 2);
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
        Script f;
        divvy *d;

        script_start(&f, steps, sizeof steps / sizeof steps[0]);
        d = script_handle(&f);
        ck_assert_int_eq(divvy_refund(d, 1, PAIRS({ "a", "b" }), &r), -EPROTO);
        ck_assert_str_eq(divvy_server_error_code(d), "forbidden");
        ck_assert_str_eq(divvy_server_error_reason(d), "REFUND and RESET need an admin listener");
        ck_assert_int_eq(divvy_charge(d, 5, NULL, 0, &r), -EPROTO);
        ck_assert_str_eq(divvy_server_error_code(d), "bad-count");
        ck_assert_int_eq(divvy_peek(d, 1, NULL, 0, &r), 0);
        script_finish(&f, d, 3);
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
        Script f;
        divvy *d;

        script_start(&f, steps, sizeof steps / sizeof steps[0]);
        d = script_handle(&f);
        ck_assert_int_eq(divvy_refund(d, 1, NULL, 0, &r), -EPROTO);
        ck_assert_str_eq(divvy_server_error_code(d), "forbidden");
        ck_assert_int_eq(divvy_peek(d, 1, NULL, 0, &r), 0);
        script_finish(&f, d, 2);
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
        Script f;
        divvy *d;

        script_start(&f, steps, 2);
        d = script_handle(&f);
        ck_assert_int_eq(divvy_take(d, 1, NULL, 0, &r), decision_replies[_i].expect);
        if (decision_replies[_i].expect == 0)
                assert_decision(&r, true, 7, 10, 42, 0, "cookies");
        ck_assert_int_eq(divvy_pending(d), 0);
        script_finish(&f, d, 1);
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
        Script f;
        divvy *d;

        script_start(&f, steps, sizeof steps / sizeof steps[0]);
        d = script_handle(&f);
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
        script_finish(&f, d, 1);
}
END_TEST

/* Bad arguments are refused before anything is sent (the fake expects no request at all). */
START_TEST (test_invalid_arguments) {
        divvy_decision r;
        divvy_result h;
        Script f;
        divvy *d;

        script_start(&f, NULL, 0);
        d = script_handle(&f);
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
        script_finish(&f, d, 0);
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
        Script f;
        divvy *d;

        script_start(&f, steps, sizeof steps / sizeof steps[0]);
        d = script_handle(&f);
        ck_assert_int_eq(divvy_take(d, 1, PAIRS({ "@user", "x" }, { "a", "@b" }), &r), 0);
        assert_decision(&r, true, 4, 5, 60, 0, "at");
        ck_assert_int_eq(divvy_peek(d, 0, PAIRS({ "@user", "x" }), &r), 0);
        ck_assert_int_eq(divvy_reset(d, PAIRS({ "@user", "x" }), NULL), 0);
        ck_assert_int_eq(divvy_explain(d, PAIRS({ "@ x", "y" }, { "@user", "x" }), &e), 0);
        ck_assert_str_eq(e.actor, "x");
        ck_assert_int_eq(divvy_hit(d, PAIRS({ "@user", "x" }), &h), 0);
        ck_assert(h.allowed && h.credit == 3);
        script_finish(&f, d, 1);
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
        Script f;
        divvy *d;

        script_start(&f, steps, sizeof steps / sizeof steps[0]);
        d = script_handle(&f);
        ck_assert_int_eq(divvy_hello(d), 2);
        ck_assert_str_eq(divvy_server_name(d), "divvyd/1");
        ck_assert_int_eq(divvy_hello(d), -EPROTONOSUPPORT);
        ck_assert_str_eq(divvy_server_name(d), "");
        ck_assert_int_eq(divvy_hello(d), 2);
        ck_assert_str_eq(divvy_server_name(d), "divvyd/2");
        ck_assert_int_eq(divvy_hello(d), -ECONNRESET);
        ck_assert_str_eq(divvy_server_name(d), "");
        script_finish(&f, d, 2);
}
END_TEST

/* ---- at the library's edges, against a fake peer in a thread -------------------------------- */

/* The library at its edges, against a fake peer in a thread (no daemon): a timeout too large to
 * add to the clock, replies that arrived before the server closed and the library's next write
 * failed, a Unix socket whose listen backlog is full, replies one byte at a time, an endless
 * reply line, and the descriptors left after many failed calls. */

static char peer_dir[80];
static char peer_sock_path[108];
static char peer_address[128];

static void peer_setup(void) {
        const char *tmp = getenv("TMPDIR");

        snprintf(peer_dir, sizeof peer_dir, "%s/divvy-edges-XXXXXX",
                 tmp && *tmp && strlen(tmp) < 50 ? tmp : "/tmp");
        ck_assert_ptr_nonnull(mkdtemp(peer_dir));
        snprintf(peer_sock_path, sizeof peer_sock_path, "%s/fake.sock", peer_dir);
        snprintf(peer_address, sizeof peer_address, "unix:%s", peer_sock_path);
}

static void peer_teardown(void) {
        unlink(peer_sock_path);
        rmdir(peer_dir);
}

static int listen_unix(int backlog) {
        struct sockaddr_un sun = { .sun_family = AF_UNIX };
        int fd;

        strcpy(sun.sun_path, peer_sock_path);
        unlink(peer_sock_path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(bind(fd, (struct sockaddr *) &sun, sizeof sun), 0);
        ck_assert_int_eq(listen(fd, backlog), 0);
        return fd;
}

/* One connection: read `lines` request lines, send `reply` (one byte per send() when
 * bytewise), then close at once or, with hold, once the client has closed. */
typedef struct Peer {
        int listen_fd;
        size_t lines;
        const char *reply;
        size_t reply_len; /* 0: strlen(reply) */
        bool bytewise, hold;
        pthread_t thread;
} Peer;

static void *peer_run(void *userdata) {
        Peer *f = userdata;
        struct pollfd pfd = { .events = POLLIN };
        char buf[4096];
        size_t lines = 0, len;
        ssize_t n;
        int fd;

        pfd.fd = f->listen_fd;
        if (poll(&pfd, 1, FAKE_WAIT_MS) != 1)
                return NULL;
        fd = accept(f->listen_fd, NULL, NULL);
        if (fd < 0)
                return NULL;
        pfd.fd = fd;
        while (lines < f->lines && poll(&pfd, 1, FAKE_WAIT_MS) == 1 && (n = read(fd, buf, sizeof buf)) > 0)
                for (ssize_t i = 0; i < n; i++)
                        lines += buf[i] == '\n';
        len = f->reply_len ? f->reply_len : strlen(f->reply);
        for (size_t off = 0; off < len;) {
                n = send(fd, f->reply + off, f->bytewise ? 1 : len - off, MSG_NOSIGNAL);
                if (n <= 0)
                        break;
                off += (size_t) n;
        }
        while (f->hold && poll(&pfd, 1, FAKE_WAIT_MS) == 1 && read(fd, buf, sizeof buf) > 0)
                ;
        close(fd);
        return NULL;
}

static void peer_start(Peer *f) {
        f->listen_fd = listen_unix(4);
        ck_assert_int_eq(pthread_create(&f->thread, NULL, peer_run, f), 0);
}

static void peer_stop(Peer *f) {
        pthread_join(f->thread, NULL);
        close(f->listen_fd);
}

static divvy *peer_handle(void) {
        divvy *d = NULL;

        ck_assert_int_eq(divvy_new(peer_address, &d), 0);
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
        Peer f = { .lines = 1, .reply = "OK true 1 2\n", .hold = true };

        peer_start(&f);
        d = peer_handle();
        ck_assert_int_eq(divvy_set_timeout(d, huge[_i]), 0);
        ck_assert_msg(divvy_hit(d, pair, 1, &res) == 0, "hit: %s", divvy_last_error(d));
        ck_assert(res.allowed && res.credit == 1 && res.reset_seconds == 2);
        divvy_free(d);
        peer_stop(&f);

        f = (Peer){ .lines = 2,
                    .reply = "OK proto=2\nOK allowed=true credit=1 limit=2 reset=3 retry=0 rule=#0\n",
                    .hold = true };
        peer_start(&f);
        d = peer_handle();
        ck_assert_int_eq(divvy_set_timeout(d, huge[_i]), 0);
        ck_assert_msg(divvy_take(d, 1, pair, 1, &dec) == 0, "take: %s", divvy_last_error(d));
        ck_assert(dec.allowed && dec.credit == 1 && dec.limit == 2);
        divvy_free(d);
        peer_stop(&f);
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
        Peer f = { .lines = 2, .reply = "OK true 7 9\nERR unknown \"store full\"\n" };

        peer_start(&f);
        d = peer_handle();
        ck_assert_int_eq(divvy_send_hit(d, pair, 1), 0);
        ck_assert_int_eq(divvy_send_hit(d, pair, 1), 0);
        ck_assert_int_eq(divvy_flush(d), 0);
        peer_stop(&f); /* answered and closed */

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

        strcpy(sun.sun_path, peer_sock_path);
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
        d = peer_handle();
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
                if (poll(&pfd, 1, FAKE_WAIT_MS) != 1)
                        return NULL;
                fd = accept(b->listen_fd, NULL, NULL);
                if (fd < 0)
                        return NULL;
        }
        pfd.fd = fd;
        if (poll(&pfd, 1, FAKE_WAIT_MS) == 1 && read(fd, buf, sizeof buf) > 0)
                (void) send(fd, "OK true 5 6\n", 12, MSG_NOSIGNAL);
        while (poll(&pfd, 1, FAKE_WAIT_MS) == 1 && read(fd, buf, sizeof buf) > 0)
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
        d = peer_handle();
        ck_assert_int_eq(divvy_set_timeout(d, FAKE_WAIT_MS * 1000ULL), 0);
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
        Peer f = { .lines = 1, .reply = "OK false 0 -1\r\n", .bytewise = true, .hold = true };

        peer_start(&f);
        d = peer_handle();
        ck_assert_msg(divvy_hit(d, pair, 1, &res) == 0, "hit: %s", divvy_last_error(d));
        ck_assert(!res.allowed && res.credit == 0 && res.reset_seconds == -1);
        divvy_free(d);
        peer_stop(&f);

        f = (Peer){ .lines = 2,
                    .reply =
                            "OK proto=2 server=fake/1\nOK rule=a index=3 policy=stop algorithm=token-bucket "
                            "actor=\"t\\tx\\x41\\\\\" canaries=- continue=b,#4\n",
                    .bytewise = true,
                    .hold = true };
        peer_start(&f);
        d = peer_handle();
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
        peer_stop(&f);
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
        Peer f = { .lines = _i == 2 ? 0 : 1, .reply = endless, .reply_len = sizeof endless, .hold = true };

        memset(endless, 'O', sizeof endless);
        peer_start(&f);
        d = peer_handle();
        ck_assert_int_eq(divvy_set_timeout(d, FAKE_WAIT_MS * 1000ULL), 0);
        r = _i == 0   ? divvy_hit(d, pair, 1, &res)
            : _i == 1 ? divvy_peek(d, 0, pair, 1, &dec)
                      : divvy_ping(d);
        ck_assert_msg(r == -EBADMSG, "call %d: %d (%s)", _i, r, divvy_last_error(d));
        ck_assert_int_eq(divvy_pending(d), 0);
        divvy_free(d);
        peer_stop(&f);
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
        Peer *f = userdata;
        struct pollfd pfd = { .events = POLLIN };
        const struct timespec step = { .tv_nsec = 750 * 1000 * 1000 };
        static const char hello[] = "OK proto=2\n",
                          take[] = "OK allowed=true credit=1 limit=2 reset=3 retry=0 rule=#0\n";
        char buf[4096];
        size_t lines = 0;
        ssize_t n;
        int fd;

        pfd.fd = f->listen_fd;
        if (poll(&pfd, 1, FAKE_WAIT_MS) != 1 || (fd = accept(f->listen_fd, NULL, NULL)) < 0)
                return NULL;
        pfd.fd = fd;
        while (lines < 2 && poll(&pfd, 1, FAKE_WAIT_MS) == 1 && (n = read(fd, buf, sizeof buf)) > 0)
                for (ssize_t i = 0; i < n; i++)
                        lines += buf[i] == '\n';
        (void) nanosleep(&step, NULL);
        (void) send(fd, hello, sizeof hello - 1, MSG_NOSIGNAL);
        (void) nanosleep(&step, NULL);
        (void) send(fd, take, sizeof take - 1, MSG_NOSIGNAL);
        while (poll(&pfd, 1, FAKE_WAIT_MS) == 1 && read(fd, buf, sizeof buf) > 0)
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
        Peer f = { 0 };

        f.listen_fd = listen_unix(4);
        ck_assert_int_eq(pthread_create(&f.thread, NULL, slow_v2_run, &f), 0);
        d = peer_handle();
        ck_assert_int_eq(divvy_set_timeout(d, 1000 * 1000), 0);
        r = divvy_take(d, 1, pair, 1, &dec);
        ck_assert_msg(r == -ETIMEDOUT, "take: %d (%s)", r, divvy_last_error(d));
        ck_assert_int_eq(divvy_pending(d), 0);
        divvy_free(d);
        peer_stop(&f);
}
END_TEST

static Suite *client_suite(void) {
        Suite *s = suite_create("client");
        TCase *tc;

        tc = tcase_create("offline");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_loop_test(tc, test_addresses, 0, sizeof address_cases / sizeof address_cases[0]);
        tcase_add_loop_test(tc, test_strings, 0, sizeof string_cases / sizeof string_cases[0]);
        tcase_add_test(tc, test_invalid_before_connecting);
        tcase_add_test(tc, test_unreachable);
        suite_add_tcase(s, tc);

        tc = tcase_create("daemon");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 120);
        tcase_add_loop_test(tc, test_hit, 0, 2);
        tcase_add_test(tc, test_quoting_round_trip);
        tcase_add_loop_test(tc, test_pipeline_10000, 0, 2);
        tcase_add_loop_test(tc, test_reconnect_after_restart, 0, 2);
        tcase_add_test(tc, test_server_err_too_many_connections);
        tcase_add_test(tc, test_ping_stopped_daemon);
        suite_add_tcase(s, tc);

        tc = tcase_create("fake");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_loop_test(tc, test_fake_replies, 0, sizeof fake_cases / sizeof fake_cases[0]);
        tcase_add_test(tc, test_fake_timeout);
        suite_add_tcase(s, tc);

        tc = tcase_create("v2");

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

        tc = tcase_create("peer");

        tcase_add_checked_fixture(tc, peer_setup, peer_teardown);
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
        return check_run_suite(client_suite());
}
