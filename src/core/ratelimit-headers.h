/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * ratelimit-headers.c: the values of the RateLimit-Policy and RateLimit response header
 * fields of draft-ietf-httpapi-ratelimit-headers-11 (the current draft), and of Retry-After.
 *
 * Both fields are Structured Field Lists (RFC 9651) of one Item each here: the Item is a
 * String naming the policy (the rule's label), and its parameters are Integers:
 *
 *   RateLimit-Policy: "<name>";q=<quota>;w=<window seconds>
 *   RateLimit:        "<name>";r=<remaining>;t=<seconds until the window resets>
 *
 * q and r are required, w and t optional (w is left out for a window of 0, which the draft
 * forbids). sf-integer has at most 15 digits: larger values are written as 999999999999999.
 * The name is an sf-string: '"' and '\' are escaped with a '\', and every byte outside
 * printable ASCII (0x20..0x7E), which an sf-string cannot hold, is written as '?'. It is cut
 * at RATELIMIT_NAME_MAX bytes.
 *
 * Pure code: no I/O, no allocation. Each formatter writes at most RATELIMIT_FIELD_MAX bytes
 * and a NUL (not counted in the returned length); buf must hold RATELIMIT_FIELD_MAX + 1.
 */

#include <stddef.h>
#include <stdint.h>

#define RATELIMIT_NAME_MAX 255 /* bytes of a policy name written (rules.h: RULE_LABEL_MAX) */
#define RATELIMIT_INTEGER_MAX                                                                               \
        999999999999999ULL /* the largest sf-integer (RFC 9651 section 3.3.1: 15 digits) */
#define RATELIMIT_FIELD_MAX                                                                                 \
        (2 + 2 * RATELIMIT_NAME_MAX + 2 * (3 + 15)) /* bytes: the quoted name, every byte escaped, and      \
                                                     * two parameters of 15 digits */

/* The RateLimit-Policy field value of one policy. window_seconds 0: no w parameter. */
size_t ratelimit_format_policy(char *buf, const char *name, uint64_t quota, uint64_t window_seconds);

/* The RateLimit field value of one policy's service limit. */
size_t ratelimit_format_limit(char *buf, const char *name, uint64_t remaining, uint64_t reset_seconds);

/* Retry-After's delay-seconds (RFC 9110 section 10.2.3) into buf (at least 21 bytes), NUL-terminated.
 * Returns the length. */
size_t ratelimit_format_retry_after(char *buf, uint64_t seconds);
