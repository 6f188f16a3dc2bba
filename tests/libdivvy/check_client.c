/* SPDX-License-Identifier: MIT */
/*
 * libdivvy against the real divvyd (started per test on a temporary Unix socket and loopback
 * port, readiness by sd_notify) and against a scripted fake server for the failure paths a
 * real daemon does not produce on demand.
 */

#include "divvy.h"
#include "check-run.h"
#include "shared/clock.h"

#include <check.h>
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
        return s;
}

int main(void) {
        return check_run_suite(client_suite());
}
