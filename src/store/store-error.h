/* SPDX-License-Identifier: MIT */
#pragma once

/* What the store's files share below their own jobs: the one way to fail with a sentence (the
 * store is a library and never logs, so a failure explains itself in the caller's buffer) and
 * the little-endian fields of its on-disk records. */

#include <endian.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define STORE_ERROR_MAX                                                                                     \
        512 /* bytes of an error sentence the store keeps (a checkpoint's, the journal's)                   \
             */

/* Writes the sentence into buf (if buf is non-NULL and size > 0). */
static inline void set_error(char *buf, size_t size, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static inline void set_error(char *buf, size_t size, const char *fmt, ...) {
        va_list ap;

        if (!buf || size == 0)
                return;
        va_start(ap, fmt);
        vsnprintf(buf, size, fmt, ap);
        va_end(ap);
}

static inline uint32_t get_le32(const void *p) {
        uint32_t v;

        memcpy(&v, p, sizeof v);
        return le32toh(v);
}

static inline void put_le32(void *p, uint32_t v) {
        v = htole32(v);
        memcpy(p, &v, sizeof v);
}

static inline uint64_t get_le64(const void *p) {
        uint64_t v;

        memcpy(&v, p, sizeof v);
        return le64toh(v);
}

static inline void put_le64(void *p, uint64_t v) {
        v = htole64(v);
        memcpy(p, &v, sizeof v);
}
