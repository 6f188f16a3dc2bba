/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * grpc.c: the parts of gRPC over HTTP/2 that are text and bytes (issue #34): the 5-byte prefix
 * of a length-prefixed message, the grpc-timeout header, the status codes and the
 * percent-encoding of grpc-message. Pure: no I/O, no allocation.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GRPC_PREFIX_SIZE 5 /* bytes: the compressed flag, then the message's length (big-endian) */
#define GRPC_TIMEOUT_DIGITS_MAX                                                                             \
        8 /* ASCII digits of a grpc-timeout value: the gRPC over HTTP/2 spec's bound */
#define GRPC_MESSAGE_TEXT_MAX                                                                               \
        256 /* bytes of a grpc-message we send, percent-encoded, NUL included: a short reason */

/* The status codes of gRPC (the trailer grpc-status). */
typedef enum GrpcStatus {
        GRPC_STATUS_OK = 0,
        GRPC_STATUS_CANCELLED = 1,
        GRPC_STATUS_UNKNOWN = 2,
        GRPC_STATUS_INVALID_ARGUMENT = 3,
        GRPC_STATUS_DEADLINE_EXCEEDED = 4,
        GRPC_STATUS_NOT_FOUND = 5,
        GRPC_STATUS_PERMISSION_DENIED = 7,
        GRPC_STATUS_RESOURCE_EXHAUSTED = 8,
        GRPC_STATUS_FAILED_PRECONDITION = 9,
        GRPC_STATUS_UNIMPLEMENTED = 12,
        GRPC_STATUS_INTERNAL = 13,
        GRPC_STATUS_UNAVAILABLE = 14,
} GrpcStatus;

/* One length-prefixed message. */
typedef struct GrpcMessage {
        bool compressed; /* flag 1: encoded by the grpc-encoding the request named */
        const uint8_t *data;
        size_t len;
} GrpcMessage;

/* Parses the body of a unary call, buf[0..len): exactly one length-prefixed message, whose
 * length is at most max. Returns 0 and *ret (data points into buf); -ENODATA if the body holds
 * no whole message (empty, or cut short); -EMSGSIZE if the prefix announces more than max bytes
 * (known from the prefix alone: grpc_prefix_length() tells it early); -EBADMSG for a flag other
 * than 0 or 1, or bytes after the message (a second message: a unary call has one). */
int grpc_unary_parse(const uint8_t *buf, size_t len, size_t max, GrpcMessage *ret);

/* The length a prefix announces (buf holds at least GRPC_PREFIX_SIZE bytes). */
uint32_t grpc_prefix_length(const uint8_t *buf);

/* Writes the prefix of an uncompressed message of len bytes. */
void grpc_prefix_write(uint8_t out[GRPC_PREFIX_SIZE], uint32_t len);

/* Parses a grpc-timeout value (1 to 8 ASCII digits, then one of H M S m u n) into
 * microseconds, a nanosecond value rounded up (0n is 0). Returns 0, or -EINVAL. */
int grpc_timeout_parse(const char *s, size_t len, uint64_t *ret_usec);

/* Percent-encodes msg (len bytes) for grpc-message into out (out_size >= 4 bytes): the bytes
 * outside 0x20..0x7e and '%' as %XX; cut at a whole escape if it does not fit; NUL-terminated.
 * Returns the length written. */
size_t grpc_message_encode(const char *msg, size_t len, char *out, size_t out_size);
