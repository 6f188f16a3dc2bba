/* SPDX-License-Identifier: MIT */
/* number.c: parse_uint64() at its edges, for the bounds both its users need (rules
 * files: 0 .. 2^53-1; command lines: small ranges such as 1 .. 65535), and
 * parse_uint64_n() on text that does not end where the number does (store URLs, Redis
 * replies). */

#include <check.h>
#include <errno.h>
#include <stdint.h>

#include "core/number.h"
#include "check-run.h"

static const struct {
        const char *text;
        uint64_t min, max;
        int r;
        uint64_t value;
} cases[] = {
        { "0", 0, 10, 0, 0 },
        { "10", 0, 10, 0, 10 },
        { "007", 0, 10, 0, 7 },
        { "11", 0, 10, -ERANGE, 0 },
        { "0", 1, 65535, -ERANGE, 0 }, /* below min */
        { "1", 1, 65535, 0, 1 },
        { "65535", 1, 65535, 0, 65535 },
        { "65536", 1, 65535, -ERANGE, 0 },
        /* A max below 9: the last digit alone can exceed it. */
        { "5", 0, 5, 0, 5 },
        { "6", 0, 5, -ERANGE, 0 },
        { "9", 0, 0, -ERANGE, 0 },
        { "0", 0, 0, 0, 0 },
        { "18446744073709551615", 0, UINT64_MAX, 0, UINT64_MAX },
        { "18446744073709551616", 0, UINT64_MAX, -ERANGE, 0 }, /* 2^64 must not wrap to 0 */
        { "99999999999999999999999", 0, UINT64_MAX, -ERANGE, 0 },
        { "9007199254740991", 0, 9007199254740991ULL, 0, 9007199254740991ULL },
        { "9007199254740992", 0, 9007199254740991ULL, -ERANGE, 0 },
        { "", 0, 10, -EINVAL, 0 },
        { NULL, 0, 10, -EINVAL, 0 },
        { "-1", 0, 10, -EINVAL, 0 },
        { "+1", 0, 10, -EINVAL, 0 },
        { " 1", 0, 10, -EINVAL, 0 },
        { "1 ", 0, 10, -EINVAL, 0 },
        { "1.5", 0, 10, -EINVAL, 0 },
        { "1e3", 0, 10000, -EINVAL, 0 },
        { "0x10", 0, 100, -EINVAL, 0 },
        { "10k", 0, 100000, -EINVAL, 0 },
        { "99999999999999999999x", 0, UINT64_MAX, -EINVAL, 0 }, /* malformed beats too big */
};

START_TEST (test_parse_uint64) {
        uint64_t v = 12345;
        int r = parse_uint64(cases[_i].text, cases[_i].min, cases[_i].max, &v);

        ck_assert_msg(r == cases[_i].r, "\"%s\" in [%ju, %ju]: %d, expected %d",
                      cases[_i].text ? cases[_i].text : "(null)", (uintmax_t) cases[_i].min,
                      (uintmax_t) cases[_i].max, r, cases[_i].r);
        if (r == 0)
                ck_assert_uint_eq(v, cases[_i].value);
        else
                ck_assert_uint_eq(v, 12345); /* untouched on failure */
}
END_TEST

/* parse_uint64_n(): only the len bytes count, whatever follows them. */
static const struct {
        const char *bytes;
        size_t len;
        uint64_t min, max;
        int r;
        uint64_t value;
} cases_n[] = {
        { "6379/0", 4, 1, 65535, 0, 6379 },   /* the port of host:6379/0 */
        { "65536", 4, 1, 65535, 0, 6553 },    /* a prefix */
        { "65536", 5, 1, 65535, -ERANGE, 0 }, /* the whole */
        { "0", 1, 1, 65535, -ERANGE, 0 },     /* port 0 */
        { "16383 127.0.0.1:7000", 5, 0, 16383, 0, 16383 },
        { "16384 127.0.0.1:7000", 5, 0, 16383, -ERANGE, 0 },
        { "00012", 5, 0, 16383, 0, 12 },
        { "12 ", 3, 0, 100, -EINVAL, 0 },     /* a blank inside the length */
        { "1\0002", 3, 0, 1000, -EINVAL, 0 }, /* a NUL inside the length */
        { "123", 0, 0, 1000, -EINVAL, 0 },    /* nothing */
        { NULL, 3, 0, 1000, -EINVAL, 0 },
        { "99999999999999999999x", 20, 0, UINT64_MAX, -ERANGE, 0 },
};

START_TEST (test_parse_uint64_n) {
        uint64_t v = 12345;
        int r = parse_uint64_n(cases_n[_i].bytes, cases_n[_i].len, cases_n[_i].min, cases_n[_i].max, &v);

        ck_assert_msg(r == cases_n[_i].r, "case %d (%zu bytes): %d, expected %d", _i, cases_n[_i].len, r,
                      cases_n[_i].r);
        if (r == 0)
                ck_assert_uint_eq(v, cases_n[_i].value);
        else
                ck_assert_uint_eq(v, 12345); /* untouched on failure */
}
END_TEST

int main(void) {
        Suite *s = suite_create("number");
        TCase *tc = tcase_create("parse");
        tcase_add_loop_test(tc, test_parse_uint64, 0, sizeof cases / sizeof cases[0]);
        tcase_add_loop_test(tc, test_parse_uint64_n, 0, sizeof cases_n / sizeof cases_n[0]);
        suite_add_tcase(s, tc);

        return check_run_suite(s);
}
