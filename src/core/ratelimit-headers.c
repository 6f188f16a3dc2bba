/* SPDX-License-Identifier: MIT */
/* ratelimit-headers.c: the IETF draft's RateLimit fields; see ratelimit-headers.h. */

#include <inttypes.h>
#include <stdio.h>

#include "core/ratelimit-headers.h"

/* The Structured Field string of name, quotes included, at out (room for 2 * len + 2 bytes). */
static size_t sf_string(char *out, const char *name, size_t len) {
        size_t o = 0;

        if (!name) {
                name = "default";
                len = 7;
        }
        out[o++] = '"';
        for (size_t i = 0; i < len; i++) {
                unsigned char ch = (unsigned char) name[i];

                if (ch < 0x20 || ch > 0x7e)
                        continue;
                if (ch == '"' || ch == '\\')
                        out[o++] = '\\';
                out[o++] = (char) ch;
        }
        out[o++] = '"';
        return o;
}

static size_t item(char *out, const char *name, size_t len, char k1, uint64_t v1, char k2, uint64_t v2) {
        size_t o;
        int n;

        if (len > 255)
                len = 255;
        o = sf_string(out, name, len);
        n = snprintf(out + o, RATELIMIT_HEADER_MAX - o, ";%c=%" PRIu64 ";%c=%" PRIu64, k1, v1, k2, v2);
        return o + (n > 0 ? (size_t) n : 0);
}

size_t ratelimit_header_policy(char *out, const char *name, size_t len, uint64_t quota,
                               uint64_t window_seconds) {
        return item(out, name, len, 'q', quota, 'w', window_seconds);
}

size_t ratelimit_header_state(char *out, const char *name, size_t len, uint64_t remaining,
                              uint64_t reset_seconds) {
        return item(out, name, len, 'r', remaining, 't', reset_seconds);
}
