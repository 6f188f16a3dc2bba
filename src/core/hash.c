/* SPDX-License-Identifier: MIT */
/* SipHash-2-4, 128-bit output variant, written from the SipHash paper
 * (Aumasson & Bernstein, 2012). */

#include "hash.h"

#include <string.h>

static const uint8_t divvyd_hash_key[16] = { 'd', 'i', 'v', 'v', 'y', 'd', '-', 'c',
                                             'o', 'u', 'n', 't', 'e', 'r', 's', '1' };

static inline uint64_t rotl64(uint64_t x, unsigned b) {
        return (x << b) | (x >> (64 - b));
}

static inline uint64_t load_le64(const uint8_t *p) {
        uint64_t v = 0;
        for (unsigned i = 0; i < 8; i++)
                v |= (uint64_t) p[i] << (8 * i);
        return v;
}

static inline void store_le64(uint8_t *p, uint64_t v) {
        for (unsigned i = 0; i < 8; i++)
                p[i] = (uint8_t) (v >> (8 * i));
}

#define SIPROUND                                                                                            \
        do {                                                                                                \
                v0 += v1;                                                                                   \
                v1 = rotl64(v1, 13);                                                                        \
                v1 ^= v0;                                                                                   \
                v0 = rotl64(v0, 32);                                                                        \
                v2 += v3;                                                                                   \
                v3 = rotl64(v3, 16);                                                                        \
                v3 ^= v2;                                                                                   \
                v0 += v3;                                                                                   \
                v3 = rotl64(v3, 21);                                                                        \
                v3 ^= v0;                                                                                   \
                v2 += v1;                                                                                   \
                v1 = rotl64(v1, 17);                                                                        \
                v1 ^= v2;                                                                                   \
                v2 = rotl64(v2, 32);                                                                        \
        } while (0)

void siphash24_128(const uint8_t key[16], const void *data, size_t len, uint8_t out[HASH128_SIZE]) {
        const uint8_t *p = data;
        uint64_t k0 = load_le64(key), k1 = load_le64(key + 8);
        uint64_t v0 = k0 ^ UINT64_C(0x736f6d6570736575);
        uint64_t v1 = k1 ^ UINT64_C(0x646f72616e646f6d) ^ 0xee;
        uint64_t v2 = k0 ^ UINT64_C(0x6c7967656e657261);
        uint64_t v3 = k1 ^ UINT64_C(0x7465646279746573);
        size_t left = len;

        for (; left >= 8; left -= 8, p += 8) {
                uint64_t m = load_le64(p);
                v3 ^= m;
                SIPROUND;
                SIPROUND;
                v0 ^= m;
        }

        uint8_t tail[8] = { 0 };
        memcpy(tail, p, left);
        uint64_t b = ((uint64_t) len << 56) | load_le64(tail);
        v3 ^= b;
        SIPROUND;
        SIPROUND;
        v0 ^= b;

        v2 ^= 0xee;
        SIPROUND;
        SIPROUND;
        SIPROUND;
        SIPROUND;
        store_le64(out, v0 ^ v1 ^ v2 ^ v3);

        v1 ^= 0xdd;
        SIPROUND;
        SIPROUND;
        SIPROUND;
        SIPROUND;
        store_le64(out + 8, v0 ^ v1 ^ v2 ^ v3);
}

void hash128(const void *data, size_t len, uint8_t out[HASH128_SIZE]) {
        siphash24_128(divvyd_hash_key, data, len, out);
}
