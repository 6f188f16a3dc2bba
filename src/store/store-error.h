/* SPDX-License-Identifier: MIT */
#pragma once

/* The store's one way to fail with a sentence: the store is a library and never logs, so a
 * failed open explains itself in the caller's buffer (if any). */

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* Writes the sentence to buf (if non-NULL); returns r (a -errno), so that callers can
 * "return store_error(...)". Keeps errno for a %m in fmt. */
static inline int store_error(char *buf, size_t size, int r, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static inline int store_error(char *buf, size_t size, int r, const char *fmt, ...) {
        va_list ap;

        if (buf && size > 0) {
                va_start(ap, fmt);
                vsnprintf(buf, size, fmt, ap);
                va_end(ap);
        }
        return r;
}
