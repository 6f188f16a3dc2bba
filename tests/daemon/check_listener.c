/* SPDX-License-Identifier: MIT */
/* listener.c: the --listen address parser, and a listening Unix socket that hands what it
 * accepts to the server. */

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include "daemon/listener.h"
#include "daemon/server.h"
#include "check-run.h"

/* ---- listen_address_parse() ---- */

static const struct {
        const char *input;
        int ret;
        ListenKind kind;
        const char *host_or_path;
        unsigned port;
        const char *canonical; /* listen_address_to_string(); NULL: same as input */
} addresses[] = {
        { "tcp:127.0.0.1:8321", 0, LISTEN_TCP, "127.0.0.1", 8321, NULL },
        { "tcp:localhost:1", 0, LISTEN_TCP, "localhost", 1, NULL },
        { "tcp:[::1]:65535", 0, LISTEN_TCP, "::1", 65535, NULL },
        { "tcp:[::]:8321", 0, LISTEN_TCP, "::", 8321, NULL },
        { "tcp:0.0.0.0:80", 0, LISTEN_TCP, "0.0.0.0", 80, NULL },
        { "unix:/run/divvyd.sock", 0, LISTEN_UNIX, "/run/divvyd.sock", 0, NULL },
        { "unix:rel/x.sock", 0, LISTEN_UNIX, "rel/x.sock", 0, NULL },
        { "tcp:127.0.0.1:0", -EINVAL, 0, NULL, 0, NULL },
        { "tcp:127.0.0.1:65536", -EINVAL, 0, NULL, 0, NULL },
        { "tcp:127.0.0.1:", -EINVAL, 0, NULL, 0, NULL },
        { "tcp:127.0.0.1:80x", -EINVAL, 0, NULL, 0, NULL },
        { "tcp:127.0.0.1:-1", -EINVAL, 0, NULL, 0, NULL },
        { "tcp:127.0.0.1:+80", -EINVAL, 0, NULL, 0, NULL },
        { "tcp:127.0.0.1", -EINVAL, 0, NULL, 0, NULL },
        { "tcp::80", -EINVAL, 0, NULL, 0, NULL },
        { "tcp:::1:80", -EINVAL, 0, NULL, 0, NULL },
        { "tcp:[::1]80", -EINVAL, 0, NULL, 0, NULL },
        { "tcp:[::1:80", -EINVAL, 0, NULL, 0, NULL },
        { "tcp:[]:80", -EINVAL, 0, NULL, 0, NULL },
        { "tcp:[1.2.3.4]:80", -EINVAL, 0, NULL, 0, NULL },
        { "127.0.0.1:8321", -EINVAL, 0, NULL, 0, NULL },
        { "8321", -EINVAL, 0, NULL, 0, NULL },
        { "udp:127.0.0.1:8321", -EINVAL, 0, NULL, 0, NULL },
        { "unix:", -EINVAL, 0, NULL, 0, NULL },
        { "", -EINVAL, 0, NULL, 0, NULL },
        /* admin listeners (issue #15): the same forms after "admin:" */
        { "admin:unix:/run/divvyd/admin.sock", 0, LISTEN_UNIX, "/run/divvyd/admin.sock", 0, NULL },
        { "admin:unix:rel.sock", 0, LISTEN_UNIX, "rel.sock", 0, NULL },
        { "admin:tcp:127.0.0.1:8322", 0, LISTEN_TCP, "127.0.0.1", 8322, NULL },
        { "admin:tcp:[::1]:8322", 0, LISTEN_TCP, "::1", 8322, NULL },
        /* a Unix path may contain "admin:" without making anything admin */
        { "unix:admin:x", 0, LISTEN_UNIX, "admin:x", 0, NULL },
        { "admin:", -EINVAL, 0, NULL, 0, NULL },
        { "admin", -EINVAL, 0, NULL, 0, NULL },
        { "admin:unix:", -EINVAL, 0, NULL, 0, NULL },
        { "admin:tcp:127.0.0.1:0", -EINVAL, 0, NULL, 0, NULL },
        { "admin:tcp:127.0.0.1", -EINVAL, 0, NULL, 0, NULL },
        { "admin:admin:unix:/x", -EINVAL, 0, NULL, 0, NULL },
        { "admin:udp:127.0.0.1:1", -EINVAL, 0, NULL, 0, NULL },
        { "Admin:unix:/x", -EINVAL, 0, NULL, 0, NULL },
        { "admin;unix:/x", -EINVAL, 0, NULL, 0, NULL },
        { "unix:/x:admin", 0, LISTEN_UNIX, "/x:admin", 0, NULL },
        { "tcp:admin:80", 0, LISTEN_TCP, "admin", 80, NULL },
};

START_TEST (test_address_parse) {
        ListenAddress a;
        char buf[LISTEN_ADDRESS_MAX + 16];
        int r = listen_address_parse(addresses[_i].input, &a);

        ck_assert_msg(r == addresses[_i].ret, "%s: got %d", addresses[_i].input, r);
        if (r < 0)
                return;
        ck_assert_int_eq(a.kind, addresses[_i].kind);
        /* admin exactly when the input starts with the prefix */
        ck_assert_int_eq(a.admin, strncmp(addresses[_i].input, "admin:", 6) == 0);
        if (a.kind == LISTEN_TCP) {
                ck_assert_str_eq(a.host, addresses[_i].host_or_path);
                ck_assert_uint_eq(a.port, addresses[_i].port);
        } else
                ck_assert_str_eq(a.path, addresses[_i].host_or_path);
        ck_assert_str_eq(listen_address_to_string(&a, buf, sizeof buf),
                         addresses[_i].canonical ?: addresses[_i].input);
}
END_TEST

START_TEST (test_address_unix_path_length) {
        char s[sizeof(((struct sockaddr_un *) 0)->sun_path) + 16] = "unix:";
        ListenAddress a;

        /* sun_path holds 107 bytes and the NUL. */
        memset(s + 5, 'p', 107);
        s[5 + 107] = '\0';
        ck_assert_int_eq(listen_address_parse(s, &a), 0);
        ck_assert_uint_eq(strlen(a.path), 107);
        s[5 + 107] = 'p';
        s[5 + 108] = '\0';
        ck_assert_int_eq(listen_address_parse(s, &a), -EINVAL);
}
END_TEST

START_TEST (test_address_admin_unix_path_length) {
        char s[sizeof(((struct sockaddr_un *) 0)->sun_path) + 16] = "admin:unix:";
        ListenAddress a;

        /* The prefix does not count against sun_path. */
        memset(s + 11, 'p', 107);
        s[11 + 107] = '\0';
        ck_assert_int_eq(listen_address_parse(s, &a), 0);
        ck_assert(a.admin);
        ck_assert_uint_eq(strlen(a.path), 107);
        s[11 + 107] = 'p';
        s[11 + 108] = '\0';
        ck_assert_int_eq(listen_address_parse(s, &a), -EINVAL);
}
END_TEST

START_TEST (test_address_admin_length) {
        char s[LISTEN_ADDRESS_MAX + 1];
        ListenAddress a;

        /* The whole argument, prefix included, is bounded by LISTEN_ADDRESS_MAX. */
        memset(s, 'h', sizeof s);
        memcpy(s, "admin:tcp:", 10);
        strcpy(s + LISTEN_ADDRESS_MAX - 3, ":80");
        ck_assert_uint_eq(strlen(s), LISTEN_ADDRESS_MAX);
        ck_assert_int_eq(listen_address_parse(s, &a), -EINVAL);
}
END_TEST

static const struct {
        const char *name;
        bool admin;
} fdnames[] = {
        { "admin", true },   { "admin-tcp", true }, { "admin_unix", true }, { "divvyd", false },
        { "unix", false },   { "tcp", false },      { "Admin", false },     { "adm", false },
        { "xadmin", false }, { "", false },         { NULL, false },
};

START_TEST (test_fdname_is_admin) {
        ck_assert_msg(listen_fdname_is_admin(fdnames[_i].name) == fdnames[_i].admin, "%s",
                      fdnames[_i].name ?: "(null)");
}
END_TEST

/* A --grpc listener under socket activation: its name contains "grpc" (issue #34). */
static const struct {
        const char *name;
        bool grpc, admin;
} grpc_fdnames[] = {
        { "grpc", true, false },  { "admin-grpc", true, true }, { "divvyd-grpc", true, false },
        { "grpc2", true, false }, { "divvyd", false, false },   { "admin", false, true },
        { "GRPC", false, false }, { "grp", false, false },      { "", false, false },
        { NULL, false, false },
};

START_TEST (test_fdname_is_grpc) {
        ck_assert_msg(listen_fdname_is_grpc(grpc_fdnames[_i].name) == grpc_fdnames[_i].grpc, "%s",
                      grpc_fdnames[_i].name ?: "(null)");
        ck_assert(listen_fdname_is_admin(grpc_fdnames[_i].name) == grpc_fdnames[_i].admin);
}
END_TEST

START_TEST (test_address_host_length) {
        char s[LISTEN_ADDRESS_MAX];
        ListenAddress a;

        /* The host is checked against host[] before it is copied there. */
        for (unsigned bracket = 0; bracket < 2; bracket++)
                for (size_t n = sizeof a.host - 8; n < sizeof a.host + 200; n++) {
                        size_t k = 0;

                        k += (size_t) snprintf(s + k, sizeof s - k, "tcp:%s", bracket ? "[:" : "");
                        memset(s + k, 'h', n - bracket);
                        k += n - bracket;
                        snprintf(s + k, sizeof s - k, "%s:80", bracket ? "]" : "");
                        ck_assert_int_eq(listen_address_parse(s, &a), n < sizeof a.host ? 0 : -EINVAL);
                        if (n < sizeof a.host)
                                ck_assert_uint_eq(strlen(a.host), n);
                }
}
END_TEST

/* ---- listening ---- */

START_TEST (test_unix_listener_feeds_server) {
        char dir[] = "/tmp/check-listener-XXXXXX", spec[128], err[256] = "";
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        ServerSettings settings = { .max_connections = 8, .output_limit = 4096 };
        ListenAddress a;
        sd_event *e = NULL;
        Server *server = NULL;
        Listener *l = NULL;
        struct stat st;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(spec, sizeof spec, "unix:%s/s.sock", dir);
        ck_assert_int_eq(listen_address_parse(spec, &a), 0);
        ck_assert_int_eq(sd_event_new(&e), 0);
        ck_assert_int_eq(server_new(e, &settings, &server), 0);
        ck_assert_msg(listener_new(e, &a, 0600, server, &l, err, sizeof err) == 0, "listener_new: %s", err);
        ck_assert_str_eq(listener_name(l), spec);
        ck_assert_int_eq(lstat(a.path, &st), 0);
        ck_assert(S_ISSOCK(st.st_mode));
        ck_assert_uint_eq(st.st_mode & 07777, 0600);

        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        strcpy(sa.sun_path, a.path);
        ck_assert_int_eq(connect(fd, (struct sockaddr *) &sa, sizeof sa), 0);
        for (unsigned i = 0; i < 100 && server_counters(server)->connections_accepted == 0; i++)
                ck_assert_int_ge(sd_event_run(e, 100 * 1000), 0);
        ck_assert_uint_eq(server_counters(server)->connections_accepted, 1);
        ck_assert_uint_eq(server_counters(server)->connections_current, 1);

        /* A second listener on a path in use is refused; freeing ours removes the file. */
        Listener *l2 = NULL;
        ck_assert_int_eq(listener_new(e, &a, 0600, server, &l2, err, sizeof err), -EADDRINUSE);
        ck_assert_ptr_nonnull(strstr(err, "in use"));
        ck_assert_ptr_null(listener_free(l));
        ck_assert_int_eq(lstat(a.path, &st), -1);
        ck_assert_int_eq(errno, ENOENT);

        close(fd);
        server_free(server);
        sd_event_unref(e);
        ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* An admin Unix listener: named as --listen says, its file gets the mode the caller chose
 * (the daemon's default for admin sockets is LISTEN_ADMIN_MODE_DEFAULT), it accepts. */
START_TEST (test_admin_unix_listener) {
        char dir[] = "/tmp/check-listener-XXXXXX", spec[128], err[256] = "";
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        ServerSettings settings = { .max_connections = 8, .output_limit = 4096 };
        ListenAddress a, plain;
        sd_event *e = NULL;
        Server *server = NULL;
        Listener *l = NULL, *lp = NULL;
        struct stat st;

        ck_assert_uint_eq(LISTEN_ADMIN_MODE_DEFAULT, 0600);
        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(spec, sizeof spec, "admin:unix:%s/admin.sock", dir);
        ck_assert_int_eq(listen_address_parse(spec, &a), 0);
        ck_assert(a.admin);
        snprintf(spec, sizeof spec, "unix:%s/plain.sock", dir);
        ck_assert_int_eq(listen_address_parse(spec, &plain), 0);
        ck_assert(!plain.admin);
        ck_assert_int_eq(sd_event_new(&e), 0);
        ck_assert_int_eq(server_new(e, &settings, &server), 0);
        ck_assert_msg(listener_new(e, &a, LISTEN_ADMIN_MODE_DEFAULT, server, &l, err, sizeof err) == 0,
                      "listener_new: %s", err);
        ck_assert_msg(listener_new(e, &plain, 0660, server, &lp, err, sizeof err) == 0, "listener_new: %s",
                      err);
        snprintf(spec, sizeof spec, "admin:unix:%s/admin.sock", dir);
        ck_assert_str_eq(listener_name(l), spec);
        ck_assert(listener_is_admin(l));
        ck_assert(!listener_is_admin(lp));
        ck_assert_int_eq(lstat(a.path, &st), 0);
        ck_assert(S_ISSOCK(st.st_mode));
        ck_assert_uint_eq(st.st_mode & 07777, 0600);
        ck_assert_int_eq(lstat(plain.path, &st), 0);
        ck_assert_uint_eq(st.st_mode & 07777, 0660);

        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        strcpy(sa.sun_path, a.path);
        ck_assert_int_eq(connect(fd, (struct sockaddr *) &sa, sizeof sa), 0);
        for (unsigned i = 0; i < 100 && server_counters(server)->connections_accepted == 0; i++)
                ck_assert_int_ge(sd_event_run(e, 100 * 1000), 0);
        ck_assert_uint_eq(server_counters(server)->connections_accepted, 1);

        ck_assert_ptr_null(listener_free(l));
        ck_assert_ptr_null(listener_free(lp));
        ck_assert_int_eq(lstat(a.path, &st), -1);
        close(fd);
        server_free(server);
        sd_event_unref(e);
        ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* Sockets passed by systemd: admin by their name (FileDescriptorName=). */
START_TEST (test_adopt_admin_by_name) {
        char expect[64];
        ServerSettings settings = { .max_connections = 8, .output_limit = 4096 };
        sd_event *e = NULL;
        Server *server = NULL;
        Listener *l = NULL;
        int fd;

        ck_assert_int_eq(sd_event_new(&e), 0);
        ck_assert_int_eq(server_new(e, &settings, &server), 0);
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        struct sockaddr_in in = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        ck_assert_int_eq(bind(fd, (struct sockaddr *) &in, sizeof in), 0);
        ck_assert_int_eq(listen(fd, 4), 0);

        ck_assert_int_eq(listener_adopt(e, fd, fdnames[_i].name, server, &l), 0);
        ck_assert_msg(listener_is_admin(l) == fdnames[_i].admin, "%s", fdnames[_i].name ?: "(null)");
        snprintf(expect, sizeof expect, "fd %d (%s)%s", fd, fdnames[_i].name ?: "unnamed",
                 fdnames[_i].admin ? " [admin]" : "");
        ck_assert_str_eq(listener_name(l), expect);
        ck_assert_ptr_null(listener_free(l)); /* closes fd */

        server_free(server);
        sd_event_unref(e);
}
END_TEST

START_TEST (test_adopt_refuses_non_listening) {
        sd_event *e = NULL;
        Listener *l = NULL;
        int sv[2];

        ck_assert_int_eq(sd_event_new(&e), 0);
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        ck_assert_int_eq(listener_adopt(e, sv[0], "x", NULL, &l), -ENOTSOCK);
        ck_assert_ptr_null(l);
        close(sv[0]);
        close(sv[1]);
        sd_event_unref(e);
}
END_TEST

int main(void) {
        Suite *s = suite_create("listener");
        TCase *tc;

        tc = tcase_create("address");
        tcase_add_loop_test(tc, test_address_parse, 0, sizeof addresses / sizeof addresses[0]);
        tcase_add_test(tc, test_address_unix_path_length);
        tcase_add_test(tc, test_address_host_length);
        tcase_add_test(tc, test_address_admin_unix_path_length);
        tcase_add_test(tc, test_address_admin_length);
        tcase_add_loop_test(tc, test_fdname_is_admin, 0, sizeof fdnames / sizeof fdnames[0]);
        tcase_add_loop_test(tc, test_fdname_is_grpc, 0, sizeof grpc_fdnames / sizeof grpc_fdnames[0]);
        suite_add_tcase(s, tc);

        tc = tcase_create("listen");
        tcase_add_test(tc, test_unix_listener_feeds_server);
        tcase_add_test(tc, test_admin_unix_listener);
        tcase_add_loop_test(tc, test_adopt_admin_by_name, 0, sizeof fdnames / sizeof fdnames[0]);
        tcase_add_test(tc, test_adopt_refuses_non_listening);
        suite_add_tcase(s, tc);

        return check_run_suite(s);
}
