/* SPDX-License-Identifier: MIT */
#include "utf8.h"

size_t utf8_sequence_len(const uint8_t *p, const uint8_t *end) {
        uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        size_t n;

        if (p[0] >= 0xC2 && p[0] <= 0xDF)
                n = 2;
        else if (p[0] == 0xE0) {
                n = 3;
                lo = 0xA0; /* overlong below U+0800 */
        } else if (p[0] == 0xED) {
                n = 3;
                hi = 0x9F; /* U+D800..U+DFFF are surrogates */
        } else if (p[0] >= 0xE1 && p[0] <= 0xEF)
                n = 3;
        else if (p[0] == 0xF0) {
                n = 4;
                lo = 0x90; /* overlong below U+10000 */
        } else if (p[0] >= 0xF1 && p[0] <= 0xF3)
                n = 4;
        else if (p[0] == 0xF4) {
                n = 4;
                hi = 0x8F; /* above U+10FFFF */
        } else
                return 0; /* 0x80..0xC1 and 0xF5..0xFF never start a sequence */

        if ((size_t) (end - p) < n || p[1] < lo || p[1] > hi)
                return 0;
        for (size_t i = 2; i < n; i++)
                if ((p[i] & 0xC0) != 0x80)
                        return 0;
        return n;
}

void text_mask_controls(char *s) {
        for (char *p = s; *p; p++)
                if (((unsigned char) *p < 0x20 && *p != '\t') || *p == 0x7f)
                        *p = '?';
}

size_t utf8_boundary(const char *s, size_t pos) {
        while (pos > 0 && ((unsigned char) s[pos] & 0xc0) == 0x80)
                pos--;
        return pos;
}

/* The code point of the well-formed sequence at p (n bytes, from utf8_sequence_len()). */
static uint32_t utf8_decode(const uint8_t *p, size_t n) {
        static const uint8_t lead_mask[5] = { 0, 0x7F, 0x1F, 0x0F, 0x07 };
        uint32_t cp = p[0] & lead_mask[n];

        for (size_t i = 1; i < n; i++)
                cp = (cp << 6) | (p[i] & 0x3F);
        return cp;
}

/* The rank of the character at p (< end) in UTF-16 code unit order, and its length in *len: its
 * code point, moved above U+10FFFF for U+E000..U+FFFF (UTF-16 writes the code points above
 * U+FFFF as surrogates, U+D800..U+DFFF, which sort before U+E000); a byte that starts no
 * well-formed sequence ranks alone, above every character. Different characters (or bytes)
 * have different ranks, so comparing ranks in turn is a total order. */
static uint32_t utf16_rank(const uint8_t *p, const uint8_t *end, size_t *len) {
        size_t n = p[0] < 0x80 ? 1 : utf8_sequence_len(p, end);
        uint32_t cp;

        if (n == 0) {
                *len = 1;
                return 0x120000 + p[0];
        }
        *len = n;
        cp = utf8_decode(p, n);
        return cp >= 0xE000 && cp <= 0xFFFF ? cp + 0x110000 : cp;
}

int utf8_cmp_utf16(const char *a, size_t a_len, const char *b, size_t b_len) {
        const uint8_t *x = (const uint8_t *) a, *y = (const uint8_t *) b;
        size_t i = 0, nx, ny;

        /* Equal ranks are equal bytes, so both walks stay at the same offset i. */
        while (i < a_len && i < b_len) {
                uint32_t rx, ry;

                if (x[i] == y[i] && x[i] < 0x80) {
                        i++;
                        continue;
                }
                rx = utf16_rank(x + i, x + a_len, &nx);
                ry = utf16_rank(y + i, y + b_len, &ny);
                if (rx != ry)
                        return rx < ry ? -1 : 1;
                i += nx;
        }
        return (i < a_len) - (i < b_len);
}
