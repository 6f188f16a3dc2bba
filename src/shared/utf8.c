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
