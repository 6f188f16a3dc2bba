/* SPDX-License-Identifier: MIT */
/* utf8.c: the validator at RFC 3629's edges, utf8_boundary(), text_mask_controls(), and
 * utf8_cmp_utf16(), JavaScript's string order (UTF-16 code units), which names Node divvy's
 * counters: it differs from byte order only between U+E000..U+FFFF and the code points above
 * U+FFFF. */

#include <check.h>
#include <string.h>

#include "check-run.h"
#include "shared/utf8.h"

static const struct {
        const char *bytes;
        size_t len; /* of bytes */
        size_t want;
} seq_cases[] = {
        { "\xc2\x80", 2, 2 },         /* U+0080, the first of two bytes */
        { "\xc1\xbf", 2, 0 },         /* overlong U+007F */
        { "\xdf\xbf", 2, 2 },         /* U+07FF */
        { "\xe0\x9f\xbf", 3, 0 },     /* overlong U+07FF */
        { "\xe0\xa0\x80", 3, 3 },     /* U+0800 */
        { "\xed\x9f\xbf", 3, 3 },     /* U+D7FF */
        { "\xed\xa0\x80", 3, 0 },     /* U+D800, a surrogate */
        { "\xee\x80\x80", 3, 3 },     /* U+E000 */
        { "\xef\xbf\xbf", 3, 3 },     /* U+FFFF */
        { "\xf0\x8f\xbf\xbf", 4, 0 }, /* overlong U+FFFF */
        { "\xf0\x90\x80\x80", 4, 4 }, /* U+10000 */
        { "\xf4\x8f\xbf\xbf", 4, 4 }, /* U+10FFFF */
        { "\xf4\x90\x80\x80", 4, 0 }, /* above U+10FFFF */
        { "\xf5\x80\x80\x80", 4, 0 }, /* never a lead byte */
        { "\x80", 1, 0 },             /* a stray continuation byte */
        { "\xf0\x90\x80", 3, 0 },     /* cut short */
        { "\xe2\x82\x41", 3, 0 },     /* not a continuation byte */
        { "\xf0\x9f\x98\x80"
          "abc",
          7, 4 }, /* U+1F600, then more */
};

START_TEST (test_sequence_len) {
        const uint8_t *p = (const uint8_t *) seq_cases[_i].bytes;

        ck_assert_uint_eq(utf8_sequence_len(p, p + seq_cases[_i].len), seq_cases[_i].want);
}
END_TEST

START_TEST (test_boundary_and_mask) {
        const char s[] = "ab\xc3\xa9z"; /* a b é z */
        char t[] = "a\nb\tc\x7f\x01"
                   "d";

        ck_assert_uint_eq(utf8_boundary(s, 0), 0);
        ck_assert_uint_eq(utf8_boundary(s, 2), 2);
        ck_assert_uint_eq(utf8_boundary(s, 3), 2); /* inside é: before it */
        ck_assert_uint_eq(utf8_boundary(s, 4), 4);
        ck_assert_uint_eq(utf8_boundary(s, 5), 5); /* the NUL */
        text_mask_controls(t);
        ck_assert_str_eq(t, "a?b\tc??d");
}
END_TEST

/* a < b in JavaScript's order ("a" < "b" and [b, a].sort()[0] === a), and the bytes' order when it
 * differs. */
static const struct {
        const char *a, *b;
        int bytes; /* the sign of memcmp-then-length order */
} order_cases[] = {
        { "", "a", -1 },
        { "a", "ab", -1 },
        { "ab", "b", -1 },
        { "Z", "a", -1 },
        { "z", "\xc3\xa9", -1 },                    /* z < é */
        { "\xed\x9f\xbf", "\xf0\x90\x80\x80", -1 }, /* U+D7FF < U+10000 */
        /* surrogate pairs (U+D800..) before U+E000..U+FFFF: the other way round in bytes */
        { "\xf0\x90\x80\x80", "\xee\x80\x80", 1 },   /* U+10000 < U+E000 */
        { "\xf0\x9f\x98\x80", "\xef\xbc\x81", 1 },   /* 😀 < ！ (U+FF01), the pair */
        { "\xf4\x8f\xbf\xbf", "\xef\xbf\xbf", 1 },   /* U+10FFFF < U+FFFF */
        { "x\xf0\x9f\x98\x80", "x\xef\xbc\x81", 1 }, /* after an equal prefix */
        { "\xf0\x9f\x98\x80"
          "a",
          "\xf0\x9f\x98\x80"
          "b",
          -1 },
        { "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf", -1 }, /* U+10000 < U+10FFFF */
        { "\xee\x80\x80", "\xef\xbf\xbf", -1 },         /* U+E000 < U+FFFF */
        { "\xf0\x9f\x98\x80",
          "\xf0\x9f\x98\x80"
          "a",
          -1 }, /* a proper prefix */
        /* ill-formed bytes: after every character, by value */
        { "\xef\xbf\xbf", "\x80", 1 },
        { "\x80", "\xff", -1 },
        { "\xf4\x8f\xbf\xbf", "\xf0\x90\x80", 1 }, /* a cut-off sequence: its bytes */
};

static int sign(int v) {
        return (v > 0) - (v < 0);
}

static int bytes_cmp(const char *a, const char *b) {
        size_t la = strlen(a), lb = strlen(b);
        int c = memcmp(a, b, la < lb ? la : lb);

        return c != 0 ? sign(c) : (la > lb) - (la < lb);
}

START_TEST (test_cmp_utf16) {
        const char *a = order_cases[_i].a, *b = order_cases[_i].b;

        ck_assert_int_lt(utf8_cmp_utf16(a, strlen(a), b, strlen(b)), 0);
        ck_assert_int_gt(utf8_cmp_utf16(b, strlen(b), a, strlen(a)), 0);
        ck_assert_int_eq(utf8_cmp_utf16(a, strlen(a), a, strlen(a)), 0);
        ck_assert_int_eq(utf8_cmp_utf16(b, strlen(b), b, strlen(b)), 0);
        ck_assert_int_eq(bytes_cmp(a, b), order_cases[_i].bytes);
}
END_TEST

/* Every pair of the cases' strings: a total order (antisymmetric, and transitive over triples). */
START_TEST (test_cmp_utf16_total) {
        const size_t n = sizeof order_cases / sizeof order_cases[0];
        const char *s[2 * sizeof order_cases / sizeof order_cases[0]];

        for (size_t i = 0; i < n; i++) {
                s[2 * i] = order_cases[i].a;
                s[2 * i + 1] = order_cases[i].b;
        }
        for (size_t i = 0; i < 2 * n; i++)
                for (size_t j = 0; j < 2 * n; j++) {
                        int ij = sign(utf8_cmp_utf16(s[i], strlen(s[i]), s[j], strlen(s[j])));
                        int ji = sign(utf8_cmp_utf16(s[j], strlen(s[j]), s[i], strlen(s[i])));

                        ck_assert_int_eq(ij, -ji);
                        ck_assert_int_eq(ij == 0, strcmp(s[i], s[j]) == 0);
                        for (size_t k = 0; k < 2 * n; k++)
                                if (ij < 0 && utf8_cmp_utf16(s[j], strlen(s[j]), s[k], strlen(s[k])) < 0)
                                        ck_assert_int_lt(
                                                utf8_cmp_utf16(s[i], strlen(s[i]), s[k], strlen(s[k])), 0);
                }
}
END_TEST

int main(void) {
        Suite *s = suite_create("utf8");
        TCase *tc = tcase_create("utf8");

        tcase_add_loop_test(tc, test_sequence_len, 0, sizeof seq_cases / sizeof seq_cases[0]);
        tcase_add_test(tc, test_boundary_and_mask);
        tcase_add_loop_test(tc, test_cmp_utf16, 0, sizeof order_cases / sizeof order_cases[0]);
        tcase_add_test(tc, test_cmp_utf16_total);
        suite_add_tcase(s, tc);
        return check_run_suite(s);
}
