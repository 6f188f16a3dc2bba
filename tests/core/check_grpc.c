/* SPDX-License-Identifier: MIT */
/* grpc.c: a unary call's length-prefixed message at and past its bounds, grpc-timeout in every
 * unit and malformed, grpc-message's percent-encoding and its cut. */

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "core/grpc.h"
#include "check-run.h"

static const struct {
        const char *bytes;
        size_t len, max;
        int r;
        bool compressed;
        size_t msg_len;
} unary_cases[] = {
        { "\0\0\0\0\0", 5, 16, 0, false, 0 },                 /* an empty message */
        { "\0\0\0\0\3abc", 8, 16, 0, false, 3 },              /* one message */
        { "\1\0\0\0\3abc", 8, 16, 0, true, 3 },               /* compressed */
        { "\2\0\0\0\3abc", 8, 16, -EBADMSG, false, 0 },       /* an unknown flag */
        { "\0\0\0\0\3abcd", 9, 16, -EBADMSG, false, 0 },      /* a byte after it: a second message */
        { "\0\0\0\0\3ab", 7, 16, -ENODATA, false, 0 },        /* cut short */
        { "\0\0\0\0", 4, 16, -ENODATA, false, 0 },            /* the prefix cut short */
        { "", 0, 16, -ENODATA, false, 0 },                    /* no body */
        { "\0\0\0\0\x10", 5, 16, -ENODATA, false, 0 },        /* 16 bytes announced, max 16: waits */
        { "\0\0\0\0\x11", 5, 16, -EMSGSIZE, false, 0 },       /* 17: over max, known from the prefix */
        { "\0\xff\xff\xff\xff", 5, 16, -EMSGSIZE, false, 0 }, /* 2^32-1 */
        { "\0\0\0\1\0", 5, 255, -EMSGSIZE, false, 0 },        /* 256: the length is big-endian */
};

START_TEST (test_unary) {
        GrpcMessage m = { .len = 12345 };
        int r = grpc_unary_parse((const uint8_t *) unary_cases[_i].bytes, unary_cases[_i].len,
                                 unary_cases[_i].max, &m);

        ck_assert_msg(r == unary_cases[_i].r, "case %d: %d, expected %d", _i, r, unary_cases[_i].r);
        if (r < 0) {
                ck_assert_uint_eq(m.len, 12345); /* untouched */
                return;
        }
        ck_assert_int_eq(m.compressed, unary_cases[_i].compressed);
        ck_assert_uint_eq(m.len, unary_cases[_i].msg_len);
        ck_assert_ptr_eq(m.data, (const uint8_t *) unary_cases[_i].bytes + GRPC_PREFIX_SIZE);
}
END_TEST

START_TEST (test_prefix) {
        uint8_t p[GRPC_PREFIX_SIZE];

        grpc_prefix_write(p, 0x01020304);
        ck_assert_mem_eq(p, "\0\1\2\3\4", 5);
        ck_assert_uint_eq(grpc_prefix_length(p), 0x01020304);
        grpc_prefix_write(p, UINT32_MAX);
        ck_assert_uint_eq(grpc_prefix_length(p), UINT32_MAX);
}
END_TEST

static const struct {
        const char *text;
        int r;
        uint64_t usec;
} timeout_cases[] = {
        { "1H", 0, 3600ULL * 1000000ULL },
        { "2M", 0, 120ULL * 1000000ULL },
        { "20S", 0, 20ULL * 1000000ULL },
        { "20m", 0, 20000 },
        { "250u", 0, 250 },
        { "1000n", 0, 1 },
        { "1001n", 0, 2 }, /* nanoseconds round up */
        { "1n", 0, 1 },
        { "0n", 0, 0 },
        { "0S", 0, 0 },
        { "99999999H", 0, 99999999ULL * 3600ULL * 1000000ULL }, /* 8 digits: the most */
        { "00000001m", 0, 1000 },
        { "123456789S", -EINVAL, 0 }, /* 9 digits */
        { "S", -EINVAL, 0 },
        { "10", -EINVAL, 0 },  /* no unit */
        { "10s", -EINVAL, 0 }, /* seconds are S */
        { "10h", -EINVAL, 0 },
        { "-1S", -EINVAL, 0 },
        { " 1S", -EINVAL, 0 },
        { "1 S", -EINVAL, 0 },
        { "", -EINVAL, 0 },
};

START_TEST (test_timeout) {
        uint64_t usec = 777;
        int r = grpc_timeout_parse(timeout_cases[_i].text, strlen(timeout_cases[_i].text), &usec);

        ck_assert_msg(r == timeout_cases[_i].r, "case %d \"%s\": %d", _i, timeout_cases[_i].text, r);
        ck_assert_uint_eq(usec, r == 0 ? timeout_cases[_i].usec : 777);
}
END_TEST

START_TEST (test_message_encode) {
        char out[GRPC_MESSAGE_TEXT_MAX];

        ck_assert_uint_eq(grpc_message_encode("unknown method", 14, out, sizeof out), 14);
        ck_assert_str_eq(out, "unknown method");
        ck_assert_uint_eq(grpc_message_encode("100% \"x\"\n\xc3\xa9", 11, out, sizeof out), 19);
        ck_assert_str_eq(out, "100%25 \"x\"%0A%C3%A9");
        /* cut at a whole escape: "ab%0A" needs 6 bytes with the NUL */
        ck_assert_uint_eq(grpc_message_encode("ab\ncd", 5, out, 5), 2);
        ck_assert_str_eq(out, "ab");
        ck_assert_uint_eq(grpc_message_encode("ab\ncd", 5, out, 6), 5);
        ck_assert_str_eq(out, "ab%0A");
        ck_assert_uint_eq(grpc_message_encode("", 0, out, 4), 0);
        ck_assert_str_eq(out, "");
}
END_TEST

int main(void) {
        Suite *s = suite_create("grpc");
        TCase *tc = tcase_create("grpc");

        tcase_add_loop_test(tc, test_unary, 0, sizeof unary_cases / sizeof unary_cases[0]);
        tcase_add_test(tc, test_prefix);
        tcase_add_loop_test(tc, test_timeout, 0, sizeof timeout_cases / sizeof timeout_cases[0]);
        tcase_add_test(tc, test_message_encode);
        suite_add_tcase(s, tc);
        return check_run_suite(s);
}
