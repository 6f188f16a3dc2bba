/* SPDX-License-Identifier: MIT */
/* log.c: "<N>message\n" lines on stderr; see log.h. */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "log.h"
#include "shared/utf8.h"

static int max_level = LOG_INFO;

void log_set_max_level(int level) {
        max_level = level;
}

int log_get_max_level(void) {
        return max_level;
}

int log_internal(int level, int error, const char *format, ...) {
        char buf[LOG_LINE_MAX];
        int saved_errno = errno, n, prefix;
        va_list ap;

        if (error < 0)
                error = -error;

        prefix = snprintf(buf, sizeof buf, "<%d>", level & LOG_PRIMASK);

        /* "%m" prints errno: make it the error we were handed. */
        if (error > 0)
                errno = error;
        va_start(ap, format);
        n = vsnprintf(buf + prefix, sizeof buf - prefix, format, ap); /* one byte past the cut */
        va_end(ap);
        if (n < 0)
                n = 0;
        if ((size_t) n > sizeof buf - prefix - 2) /* too long: room for the newline, no split
                                                   * character */
                n = (int) utf8_boundary(buf + prefix, sizeof buf - prefix - 2);
        buf[prefix + n] = '\0';
        /* One line, whatever the message quotes (a path from the command line, an error text
         * from Redis): a line break would start a line without its <N> prefix. */
        text_mask_controls(buf + prefix);
        n += prefix;
        buf[n++] = '\n';

        /* One write per line, so concurrent writers (and journald) never see half lines.
         * Nothing sensible can be done if stderr is gone. */
        for (size_t done = 0; done < (size_t) n;) {
                ssize_t k = write(STDERR_FILENO, buf + done, n - done);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                done += (size_t) k;
        }

        errno = saved_errno;
        return -error;
}
