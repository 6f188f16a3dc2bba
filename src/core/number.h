/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * number.c: the one parser of unsigned decimal numbers that people type, in rules
 * files (creditLimit, resetSeconds), on command lines (ports, timeouts) and in store URLs,
 * and that Redis sends back (ports, slots in its redirects), so that
 * "007", "+1", " 1" or "0x10" mean the same (or are refused alike) everywhere.
 */

#include <stddef.h>
#include <stdint.h>

/* Parses s as a strict non-negative decimal integer in [min, max]: digits only
 * (leading zeros allowed, "007" is 7), no sign, space, fraction, exponent or base
 * prefix, no suffix. Returns 0 and sets *ret; -EINVAL if s is NULL, empty or not
 * all digits (malformed beats out of range: "99999999999999999999x" is -EINVAL);
 * -ERANGE if the value is below min or above max (never wraps, 2^64 included).
 * *ret is untouched on failure. */
int parse_uint64(const char *s, uint64_t min, uint64_t max, uint64_t *ret);

/* The same for the len bytes at s, which need not end in a NUL (a field of a URL, of a
 * Redis reply): parse_uint64() of that text. */
int parse_uint64_n(const char *s, size_t len, uint64_t min, uint64_t max, uint64_t *ret);

/* Writes v in decimal at p (at most 20 bytes, no NUL); returns the end. Inline: every reply
 * of both protocols formats its numbers with these. */
static inline char *number_append_u64(char *p, uint64_t v) {
        char digits[20]; /* UINT64_MAX has 20 decimal digits */
        size_t n = 0;

        do {
                digits[n++] = (char) ('0' + v % 10);
                v /= 10;
        } while (v > 0);
        while (n > 0)
                *p++ = digits[--n];
        return p;
}

/* As number_append_u64(), signed (at most 20 bytes). */
static inline char *number_append_i64(char *p, int64_t v) {
        if (v < 0) {
                *p++ = '-';
                return number_append_u64(p,
                                         UINT64_C(0) - (uint64_t) v); /* modular: right for INT64_MIN too */
        }
        return number_append_u64(p, (uint64_t) v);
}
