/* SPDX-License-Identifier: MIT */
/* hash.c against the SipHash-2-4 128-bit reference vectors (key 00..0f, message 00..n-1). */

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "check-run.h"

static const struct {
        size_t len;
        const char *hex;
} vectors[] = {
        { 0, "a3817f04ba25a8e66df67214c7550293" },
        { 1, "da87c1d86b99af44347659119b22fc45" },
        { 2, "8177228da4a45dc7fca38bdef60affe4" },
};

static void to_hex(const uint8_t *b, size_t n, char *out) {
        for (size_t i = 0; i < n; i++)
                sprintf(out + 2 * i, "%02x", b[i]);
}

START_TEST (test_reference_vectors) {
        uint8_t key[16], msg[64], out[HASH128_SIZE];
        char hex[2 * HASH128_SIZE + 1];

        for (unsigned i = 0; i < 16; i++)
                key[i] = (uint8_t) i;
        for (unsigned i = 0; i < sizeof msg; i++)
                msg[i] = (uint8_t) i;

        siphash24_128(key, msg, vectors[_i].len, out);
        to_hex(out, sizeof out, hex);
        ck_assert_str_eq(hex, vectors[_i].hex);
}
END_TEST

START_TEST (test_fixed_key_is_stable) {
        /* hash128() output is part of the on-disk format: pin it. */
        uint8_t a[HASH128_SIZE], b[HASH128_SIZE];
        hash128("divvy", 5, a);
        hash128("divvy", 5, b);
        ck_assert_mem_eq(a, b, HASH128_SIZE);
        hash128("divvz", 5, b);
        ck_assert(memcmp(a, b, HASH128_SIZE) != 0);
}
END_TEST

START_TEST (test_all_tail_lengths_differ) {
        /* Every length 0..63 of the same prefix hashes differently (length is mixed in). */
        uint8_t msg[64] = { 0 }, out[64][HASH128_SIZE];
        for (size_t n = 0; n < 64; n++) {
                hash128(msg, n, out[n]);
                for (size_t m = 0; m < n; m++)
                        ck_assert(memcmp(out[n], out[m], HASH128_SIZE) != 0);
        }
}
END_TEST

int main(void) {
        Suite *s = suite_create("hash");
        TCase *tc = tcase_create("siphash");
        tcase_add_loop_test(tc, test_reference_vectors, 0, sizeof vectors / sizeof vectors[0]);
        tcase_add_test(tc, test_fixed_key_is_stable);
        tcase_add_test(tc, test_all_tail_lengths_differ);
        suite_add_tcase(s, tc);

        return check_run_suite(s);
}
