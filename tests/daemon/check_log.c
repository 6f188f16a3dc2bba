/* SPDX-License-Identifier: MIT */
/* log.c: one "<N>message\n" line per message on stderr, the level filter, the *_errno()
 * variants ("%m", the value returned, errno kept), control bytes masked so a message stays one
 * line, and the cut at LOG_LINE_MAX on a character boundary. stderr is a temporary file for
 * each test and restored after it. */

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check-run.h"
#include "daemon/log.h"

static FILE *captured;
static int saved_stderr = -1;

static void setup(void) {
        captured = tmpfile();
        ck_assert_ptr_nonnull(captured);
        fflush(stderr);
        saved_stderr = dup(STDERR_FILENO);
        ck_assert_int_ge(saved_stderr, 0);
        ck_assert_int_ge(dup2(fileno(captured), STDERR_FILENO), 0);
        log_set_max_level(LOG_INFO);
}

static void teardown(void) {
        dup2(saved_stderr, STDERR_FILENO);
        close(saved_stderr);
        fclose(captured);
        log_set_max_level(LOG_INFO);
}

/* Everything written to stderr since the last call, NUL-terminated in buf. */
static const char *written(void) {
        static char buf[3 * LOG_LINE_MAX];
        size_t n;

        rewind(captured);
        n = fread(buf, 1, sizeof buf - 1, captured);
        buf[n] = '\0';
        ck_assert_int_eq(ftruncate(fileno(captured), 0), 0);
        rewind(captured);
        return buf;
}

START_TEST (test_levels) {
        ck_assert_int_eq(log_get_max_level(), LOG_INFO);
        ck_assert_int_eq(log_debug("not %s", "shown"), 0);
        ck_assert_str_eq(written(), "");
        ck_assert_int_eq(log_info("a %d", 1), 0);
        ck_assert_int_eq(log_notice("b"), 0);
        ck_assert_int_eq(log_warning("c"), 0);
        ck_assert_int_eq(log_error("d"), 0);
        ck_assert_str_eq(written(), "<6>a 1\n<5>b\n<4>c\n<3>d\n");

        log_set_max_level(LOG_DEBUG);
        ck_assert_int_eq(log_get_max_level(), LOG_DEBUG);
        ck_assert_int_eq(log_debug("e"), 0);
        ck_assert_str_eq(written(), "<7>e\n");
        log_set_max_level(LOG_ERR);
        ck_assert_int_eq(log_warning("f"), 0);
        ck_assert_int_eq(log_error("g"), 0);
        ck_assert_str_eq(written(), "<3>g\n");
}
END_TEST

/* "%m" prints the error handed in (either sign), the call returns -abs(error) whether or not
 * the level is shown, and errno is what it was before. */
START_TEST (test_errno_variants) {
        errno = 42;
        ck_assert_int_eq(log_error_errno(EIO, "read %s: %m", "x"), -EIO);
        ck_assert_int_eq(errno, 42);
        ck_assert_int_eq(log_warning_errno(-ENOENT, "open: %m"), -ENOENT);
        ck_assert_int_eq(errno, 42);
        ck_assert_int_eq(log_debug_errno(EPERM, "hidden: %m"), -EPERM);
        ck_assert_int_eq(log_debug_errno(-EPERM, "hidden: %m"), -EPERM);
        ck_assert_int_eq(log_info_errno(0, "no error"), 0);
        ck_assert_int_eq(errno, 42);
        ck_assert_str_eq(written(), "<3>read x: Input/output error\n<4>open: No such file or directory\n"
                                    "<6>no error\n");
}
END_TEST

/* A line break, CR, escape or DEL in a message (a path, a Redis error text) becomes '?': the
 * message is one line with its prefix; tab is kept. */
START_TEST (test_one_line) {
        ck_assert_int_eq(log_warning("path %s", "/a\nREADY=1\r\x1b\x7f\tb"), 0);
        ck_assert_str_eq(written(), "<4>path /a?READY=1???\tb\n");
}
END_TEST

/* Longer than LOG_LINE_MAX: cut so the line with its newline fits, never inside a character. */
START_TEST (test_cut) {
        enum { ROOM = LOG_LINE_MAX - 3 - 2 }; /* the message's bytes after "<6>", before the cut */
        static char msg[LOG_LINE_MAX + 100], want[LOG_LINE_MAX + 8];

        memset(msg, 'x', sizeof msg - 1);
        msg[sizeof msg - 1] = '\0';
        ck_assert_int_eq(log_info("%s", msg), 0);
        snprintf(want, sizeof want, "<6>%.*s\n", (int) ROOM, msg);
        ck_assert_uint_eq(strlen(want), LOG_LINE_MAX - 1);
        ck_assert_str_eq(written(), want);

        /* a two-byte "é" across the cut: it goes whole */
        memcpy(msg + ROOM - 1, "\xc3\xa9", 2);
        ck_assert_int_eq(log_info("%s", msg), 0);
        snprintf(want, sizeof want, "<6>%.*s\n", (int) ROOM - 1, msg);
        ck_assert_str_eq(written(), want);

        /* exactly ROOM bytes: not cut */
        msg[ROOM - 1] = 'x';
        msg[ROOM] = '\0';
        ck_assert_int_eq(log_info("%s", msg), 0);
        snprintf(want, sizeof want, "<6>%.*s\n", (int) ROOM, msg);
        ck_assert_str_eq(written(), want);
}
END_TEST

static Suite *log_suite(void) {
        Suite *s = suite_create("log");
        TCase *tc = tcase_create("core");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_levels);
        tcase_add_test(tc, test_errno_variants);
        tcase_add_test(tc, test_one_line);
        tcase_add_test(tc, test_cut);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        return check_run_suite(log_suite());
}
