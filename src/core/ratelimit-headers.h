/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * ratelimit-headers.c: the values of the RateLimit-Policy and RateLimit response header
 * fields of draft-ietf-httpapi-ratelimit-headers-11 (the current draft), and of Retry-After;
 * for every protocol that sends them (the HTTP API's responses, gRPC's response_headers_to_add).
 *
 * Both fields are Structured Field Lists (RFC 9651) of one Item each here: the Item is a
 * String naming the policy (the rule's label), and its parameters are Integers:
 *
 *   RateLimit-Policy: "<name>";q=<quota>;w=<window seconds>
 *   RateLimit:        "<name>";r=<remaining>;t=<seconds until the window resets>
 *
 * q and r are required, w and t optional (w is left out for a window of 0, which the draft
 * forbids). An sf-integer has at most 15 digits: larger values are written as 999999999999999.
 * The name (len bytes; NULL: "default") is an sf-string: '"' and '\' are escaped with a '\',
 * and the bytes an sf-string cannot hold (outside printable ASCII, 0x20..0x7E) are left out. It
 * is cut at RATELIMIT_NAME_MAX bytes.
 *
 * Pure code: no I/O, no allocation. Each formatter writes at most RATELIMIT_HEADER_MAX bytes, a
 * NUL included (not counted in the returned length).
 */

#include <stddef.h>
#include <stdint.h>

#define RATELIMIT_NAME_MAX 255 /* bytes of a policy name written (rules.h: RULE_LABEL_MAX) */
#define RATELIMIT_INTEGER_MAX                                                                               \
        999999999999999ULL /* the largest sf-integer (RFC 9651 section 3.3.1: 15 digits) */
#define RATELIMIT_HEADER_MAX                                                                                \
        600 /* bytes of one field's value, NUL included: the quoted name, every byte escaped (512), and     \
             * two parameters of 15 digits (36) */

/* The RateLimit-Policy field value of one policy. window_seconds 0: no w parameter. */
size_t ratelimit_header_policy(char *out, const char *name, size_t len, uint64_t quota,
                               uint64_t window_seconds);

/* The RateLimit field value of one policy's service limit. */
size_t ratelimit_header_state(char *out, const char *name, size_t len, uint64_t remaining,
                              uint64_t reset_seconds);

/* Retry-After's delay-seconds (RFC 9110 section 10.2.3) into out (at least 21 bytes),
 * NUL-terminated. Returns the length. */
size_t ratelimit_header_retry_after(char *out, uint64_t seconds);
