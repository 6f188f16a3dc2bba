/* SPDX-License-Identifier: MIT */
/* diag.c: each message's "FILE:LINE: " prefix (no line, no file), one line whatever the text
 * quotes (control bytes but tab masked), the copy of the file name, the bound of DIAG_MAX
 * messages past which they are only counted, and what diag_print() writes. */

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "core/diag.h"

/* What diag_print() writes, NUL-terminated; the caller frees it. */
static char *printed(const Diag *d) {
        char *buf = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&buf, &size);

        ck_assert_ptr_nonnull(f);
        diag_print(d, f);
        ck_assert_int_eq(fclose(f), 0);
        return buf;
}

START_TEST (test_prefix) {
        char file[] = "rules.ini";
        Diag d, none;

        diag_init(&d, file);
        file[0] = 'X'; /* the name was copied */
        ck_assert_int_eq(diag_add(&d, 12, "rule [%s] creditLimit \"%s\"", "method=GET", "x"), 0);
        ck_assert_int_eq(diag_add(&d, 0, "cannot read: %d", 5), 0);
        ck_assert_uint_eq(d.n_messages, 2);
        ck_assert_str_eq(d.messages[0], "rules.ini:12: rule [method=GET] creditLimit \"x\"");
        ck_assert_str_eq(d.messages[1], "rules.ini: cannot read: 5");
        ck_assert_uint_eq(diag_count(&d), 2);
        diag_done(&d);
        ck_assert_ptr_null(d.messages);
        ck_assert_ptr_null(d.file);
        ck_assert_uint_eq(diag_count(&d), 0);

        diag_init(&none, NULL);
        ck_assert_int_eq(diag_add(&none, 3, "a"), 0);
        ck_assert_int_eq(diag_add(&none, 0, "b"), 0);
        ck_assert_str_eq(none.messages[0], "<config>:3: a");
        ck_assert_str_eq(none.messages[1], "<config>: b");
        diag_done(&none);
}
END_TEST

/* A JSON key may hold "\n", an INI line a CR or an escape: the message stays one line, tab
 * kept, every other control byte (C0 and DEL) a '?'; the file name is masked too. */
START_TEST (test_one_line) {
        Diag d;

        diag_init(&d, "a\nb.json");
        ck_assert_int_eq(diag_add(&d, 1, "key \"%s\"", "x\nREADY=1\r\x1b[0m\x7f\tend"), 0);
        ck_assert_str_eq(d.messages[0], "a?b.json:1: key \"x?READY=1??[0m?\tend\"");
        diag_done(&d);
}
END_TEST

/* DIAG_MAX messages are kept, the rest counted; diag_print() writes each kept message on a
 * line of its own and one line for the dropped ones. */
START_TEST (test_bound_and_print) {
        Diag d;
        char *out, *want;
        size_t n = 0;

        diag_init(&d, "r.ini");
        for (unsigned i = 1; i <= DIAG_MAX + 5; i++)
                ck_assert_int_eq(diag_add(&d, i, "error %u", i), 0);
        ck_assert_uint_eq(d.n_messages, DIAG_MAX);
        ck_assert_uint_eq(d.n_dropped, 5);
        ck_assert_uint_eq(diag_count(&d), DIAG_MAX + 5);
        ck_assert_str_eq(d.messages[DIAG_MAX - 1], "r.ini:100: error 100");

        out = printed(&d);
        want = calloc(DIAG_MAX + 1, 32);
        ck_assert_ptr_nonnull(want);
        for (unsigned i = 1; i <= DIAG_MAX; i++)
                n += (size_t) sprintf(want + n, "r.ini:%u: error %u\n", i, i);
        sprintf(want + n, "r.ini: ... and 5 more errors\n");
        ck_assert_str_eq(out, want);
        free(out);
        free(want);
        diag_done(&d);

        /* nothing dropped: no summary line; no file: "<config>" in it */
        diag_init(&d, NULL);
        out = printed(&d);
        ck_assert_str_eq(out, "");
        free(out);
        ck_assert_int_eq(diag_add(&d, 2, "x"), 0);
        out = printed(&d);
        ck_assert_str_eq(out, "<config>:2: x\n");
        free(out);
        d.n_dropped = 1;
        out = printed(&d);
        ck_assert_str_eq(out, "<config>:2: x\n<config>: ... and 1 more errors\n");
        free(out);
        diag_done(&d);
}
END_TEST

static Suite *diag_suite(void) {
        Suite *s = suite_create("diag");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_prefix);
        tcase_add_test(tc, test_one_line);
        tcase_add_test(tc, test_bound_and_print);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        return check_run_suite(diag_suite());
}
