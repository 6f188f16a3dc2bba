/* SPDX-License-Identifier: MIT */
/* grpc.c: gRPC's length-prefixed messages, grpc-timeout and grpc-message; see grpc.h. */

#include <errno.h>

#include "core/grpc.h"

uint32_t grpc_prefix_length(const uint8_t *buf) {
        return (uint32_t) buf[1] << 24 | (uint32_t) buf[2] << 16 | (uint32_t) buf[3] << 8 | buf[4];
}

void grpc_prefix_write(uint8_t out[GRPC_PREFIX_SIZE], uint32_t len) {
        out[0] = 0;
        out[1] = (uint8_t) (len >> 24);
        out[2] = (uint8_t) (len >> 16);
        out[3] = (uint8_t) (len >> 8);
        out[4] = (uint8_t) len;
}

int grpc_unary_parse(const uint8_t *buf, size_t len, size_t max, GrpcMessage *ret) {
        uint32_t n;

        if (len < GRPC_PREFIX_SIZE)
                return -ENODATA;
        if (buf[0] > 1)
                return -EBADMSG;
        n = grpc_prefix_length(buf);
        if (n > max)
                return -EMSGSIZE;
        if (len - GRPC_PREFIX_SIZE < n)
                return -ENODATA;
        if (len - GRPC_PREFIX_SIZE > n)
                return -EBADMSG;
        *ret = (GrpcMessage){ .compressed = buf[0] == 1, .data = buf + GRPC_PREFIX_SIZE, .len = n };
        return 0;
}

int grpc_timeout_parse(const char *s, size_t len, uint64_t *ret_usec) {
        uint64_t v = 0, usec;

        if (len < 2 || len > GRPC_TIMEOUT_DIGITS_MAX + 1)
                return -EINVAL;
        for (size_t i = 0; i + 1 < len; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -EINVAL;
                v = v * 10 + (uint64_t) (s[i] - '0');
        }
        /* 8 digits: at most 99,999,999 hours, 3.6e17 us: no overflow */
        switch (s[len - 1]) {
        case 'H':
                usec = v * 3600ULL * 1000000ULL;
                break;
        case 'M':
                usec = v * 60ULL * 1000000ULL;
                break;
        case 'S':
                usec = v * 1000000ULL;
                break;
        case 'm':
                usec = v * 1000ULL;
                break;
        case 'u':
                usec = v;
                break;
        case 'n':
                usec = (v + 999) / 1000;
                break;
        default:
                return -EINVAL;
        }
        *ret_usec = usec;
        return 0;
}

size_t grpc_message_encode(const char *msg, size_t len, char *out, size_t out_size) {
        static const char hex[] = "0123456789ABCDEF";
        size_t o = 0;

        for (size_t i = 0; i < len; i++) {
                unsigned char ch = (unsigned char) msg[i];

                if (ch >= 0x20 && ch <= 0x7e && ch != '%') {
                        if (o + 2 > out_size)
                                break;
                        out[o++] = (char) ch;
                        continue;
                }
                if (o + 4 > out_size)
                        break;
                out[o++] = '%';
                out[o++] = hex[ch >> 4];
                out[o++] = hex[ch & 15];
        }
        out[o] = '\0';
        return o;
}
