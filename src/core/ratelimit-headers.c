/* SPDX-License-Identifier: MIT */
/* ratelimit-headers.c: the RateLimit and RateLimit-Policy field values; see ratelimit-headers.h. */

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>

#include "core/ratelimit-headers.h"

/* name (len bytes; NULL: "default") as an sf-string at out; returns the bytes written (at most
 * 2 + 2 * RATELIMIT_NAME_MAX). */
static size_t sf_string(char *out, const char *name, size_t len) {
        size_t o = 0;

        if (!name) {
                name = "default";
                len = 7;
        }
        if (len > RATELIMIT_NAME_MAX)
                len = RATELIMIT_NAME_MAX;
        out[o++] = '"';
        for (size_t i = 0; i < len; i++) {
                unsigned char ch = (unsigned char) name[i];

                if (ch < 0x20 || ch > 0x7E)
                        continue;
                if (ch == '"' || ch == '\\')
                        out[o++] = '\\';
                out[o++] = (char) ch;
        }
        out[o++] = '"';
        return o;
}

static uint64_t sf_integer(uint64_t v) {
        return v > RATELIMIT_INTEGER_MAX ? RATELIMIT_INTEGER_MAX : v;
}

/* "<name>";<k1>=<v1>[;<k2>=<v2>] (the second parameter only if with2). */
static size_t item(char *out, const char *name, size_t len, char k1, uint64_t v1, char k2, uint64_t v2,
                   bool with2) {
        size_t o = sf_string(out, name, len);
        int n;

        n = snprintf(out + o, RATELIMIT_HEADER_MAX - o, ";%c=%" PRIu64, k1, sf_integer(v1));
        o += n > 0 ? (size_t) n : 0;
        if (with2) {
                n = snprintf(out + o, RATELIMIT_HEADER_MAX - o, ";%c=%" PRIu64, k2, sf_integer(v2));
                o += n > 0 ? (size_t) n : 0;
        }
        out[o] = '\0';
        return o;
}

size_t ratelimit_header_policy(char *out, const char *name, size_t len, uint64_t quota,
                               uint64_t window_seconds) {
        return item(out, name, len, 'q', quota, 'w', window_seconds, window_seconds > 0);
}

size_t ratelimit_header_state(char *out, const char *name, size_t len, uint64_t remaining,
                              uint64_t reset_seconds) {
        return item(out, name, len, 'r', remaining, 't', reset_seconds, true);
}

size_t ratelimit_header_retry_after(char *out, uint64_t seconds) {
        return (size_t) snprintf(out, 21, "%" PRIu64, seconds);
}
