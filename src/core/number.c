/* SPDX-License-Identifier: MIT */
#include "number.h"

#include <errno.h>
#include <string.h>
#include <stdbool.h>
#include <stddef.h>

int parse_uint64_n(const char *s, size_t len, uint64_t min, uint64_t max, uint64_t *ret) {
        uint64_t v = 0;
        bool above = false;

        if (!s || len == 0)
                return -EINVAL;
        /* Every byte is checked before the value is judged, so that a malformed
         * number is reported as malformed, however long. */
        for (size_t i = 0; i < len; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -EINVAL;
                unsigned d = (unsigned) (s[i] - '0');
                /* v * 10 + d <= max, asked without overflowing (and right for max < 9). */
                if (above || v > max / 10 || (v == max / 10 && d > max % 10))
                        above = true;
                else
                        v = v * 10 + d;
        }
        if (above || v < min)
                return -ERANGE;
        *ret = v;
        return 0;
}

int parse_uint64(const char *s, uint64_t min, uint64_t max, uint64_t *ret) {
        return parse_uint64_n(s, s ? strlen(s) : 0, min, max, ret);
}
