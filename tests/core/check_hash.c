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

/* hash128() under divvyd's fixed key, message 00..n-1: literal outputs, computed once.
 * They are part of the on-disk format (rule ids and hashed actors key every counter):
 * if one of them changes, every existing database is orphaned, its counters silently
 * restarting from zero. Never "update" these; bump STORE_FORMAT_VERSION and migrate.
 * The lengths walk the 8-byte block loop and its tail: empty, tail only, one block,
 * block plus tail, and several blocks. */
static const struct {
        size_t len;
        const char *hex;
} pinned[] = {
        { 0, "a9efb69f467ebc0ec0b2c9cfb9eab188" },   { 1, "76677f235c9c7590addc5a6f6064e82f" },
        { 2, "e63bb81c5f63ca160e997f571069eea9" },   { 7, "ab98894fc61fbe8ab2a616c07a9f007b" },
        { 8, "f50bee912e4615112ec05d0ee50d3b94" },   { 9, "f4954a368254fb15043aba6bf7f93ce1" },
        { 15, "2041f170acf95c1f489cb8c0b656c40b" },  { 16, "0ea53e66b8ce3b99710d6154546df705" },
        { 17, "a2fc70e721e6d3dd9df99a838b06688d" },  { 31, "da68c418afec6b9ea643387c7ff538b4" },
        { 32, "964e6f1aed389abad650b5b1e8dfe5ed" },  { 33, "933332258b7dc159422ab3b560c555ad" },
        { 63, "df7d849746ac80952c11f88291783713" },  { 64, "b04824363004a207530354abb31b8081" },
        { 100, "dc9f3f80b31af42adf3d576ffc79ee60" },
};

START_TEST (test_fixed_key_pinned) {
        uint8_t msg[100], out[HASH128_SIZE];
        char hex[2 * HASH128_SIZE + 1];

        for (unsigned i = 0; i < sizeof msg; i++)
                msg[i] = (uint8_t) i;
        ck_assert_uint_le(pinned[_i].len, sizeof msg);
        hash128(msg, pinned[_i].len, out);
        to_hex(out, sizeof out, hex);
        ck_assert_msg(strcmp(hex, pinned[_i].hex) == 0, "hash128 of %zu bytes: %s, pinned %s",
                      pinned[_i].len, hex, pinned[_i].hex);
}
END_TEST

START_TEST (test_fixed_key_text) {
        uint8_t out[HASH128_SIZE];
        char hex[2 * HASH128_SIZE + 1];

        /* A string, as rule ids and actors are hashed: the same pin, from text. */
        hash128("divvy", 5, out);
        to_hex(out, sizeof out, hex);
        ck_assert_str_eq(hex, "d97fa1ea99c6a95e9f82a51f4e5af894");
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
        tcase_add_loop_test(tc, test_fixed_key_pinned, 0, sizeof pinned / sizeof pinned[0]);
        tcase_add_test(tc, test_fixed_key_text);
        tcase_add_test(tc, test_all_tail_lengths_differ);
        suite_add_tcase(s, tc);

        return check_run_suite(s);
}
