/* SPDX-License-Identifier: MIT */
/* ratelimit-headers.c: the RateLimit and RateLimit-Policy field values; see ratelimit-headers.h. */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/ratelimit-headers.h"

/* name as an sf-string at p; returns the bytes written (at most 2 + 2 * RATELIMIT_NAME_MAX). */
static size_t format_sf_string(char *p, const char *name) {
        size_t n = 0, len = name ? strnlen(name, RATELIMIT_NAME_MAX) : 0;

        p[n++] = '"';
        for (size_t i = 0; i < len; i++) {
                unsigned char ch = (unsigned char) name[i];

                if (ch == '"' || ch == '\\')
                        p[n++] = '\\';
                p[n++] = ch >= 0x20 && ch <= 0x7E ? (char) ch : '?';
        }
        p[n++] = '"';
        return n;
}

static uint64_t sf_integer(uint64_t v) {
        return v > RATELIMIT_INTEGER_MAX ? RATELIMIT_INTEGER_MAX : v;
}

/* "<name>";<k1>=<v1>[;<k2>=<v2>] (the second parameter only if with2). */
static size_t format_item(char *buf, const char *name, const char *k1, uint64_t v1, const char *k2,
                          uint64_t v2, int with2) {
        size_t n = format_sf_string(buf, name);
        int r;

        r = snprintf(buf + n, RATELIMIT_FIELD_MAX + 1 - n, ";%s=%" PRIu64, k1, sf_integer(v1));
        n += (size_t) r;
        if (with2) {
                r = snprintf(buf + n, RATELIMIT_FIELD_MAX + 1 - n, ";%s=%" PRIu64, k2, sf_integer(v2));
                n += (size_t) r;
        }
        buf[n] = '\0';
        return n;
}

size_t ratelimit_format_policy(char *buf, const char *name, uint64_t quota, uint64_t window_seconds) {
        return format_item(buf, name, "q", quota, "w", window_seconds, window_seconds > 0);
}

size_t ratelimit_format_limit(char *buf, const char *name, uint64_t remaining, uint64_t reset_seconds) {
        return format_item(buf, name, "r", remaining, "t", reset_seconds, 1);
}

size_t ratelimit_format_retry_after(char *buf, uint64_t seconds) {
        return (size_t) snprintf(buf, 21, "%" PRIu64, seconds);
}
