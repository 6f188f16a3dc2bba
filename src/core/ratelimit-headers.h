/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * ratelimit-headers.c: the RateLimit and RateLimit-Policy fields of the IETF draft
 * draft-ietf-httpapi-ratelimit-headers (Structured Field lists): one policy, named by a rule's
 * label, its quota q per window w seconds, and what is left of it, r, for t more seconds.
 * Pure: formats into the caller's buffer.
 */

#include <stddef.h>
#include <stdint.h>

#define RATELIMIT_HEADER_MAX                                                                                \
        600 /* bytes of one field's value, NUL included: a 255-byte label, escaped (510), and two           \
             * 20-digit parameters */

/* `"<name>";q=<quota>;w=<window_seconds>`, the policy's item of RateLimit-Policy. name (len bytes,
 * NULL for "default") is a Structured Field string: '"' and '\' are escaped, other bytes outside
 * 0x20..0x7e are left out. out has RATELIMIT_HEADER_MAX bytes; returns the length. */
size_t ratelimit_header_policy(char *out, const char *name, size_t len, uint64_t quota,
                               uint64_t window_seconds);

/* `"<name>";r=<remaining>;t=<reset_seconds>`, the policy's item of RateLimit. */
size_t ratelimit_header_state(char *out, const char *name, size_t len, uint64_t remaining,
                              uint64_t reset_seconds);
