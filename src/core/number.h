/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * number.c: the one parser of unsigned decimal numbers that people type, in rules
 * files (creditLimit, resetSeconds) and on command lines (ports, timeouts), so that
 * "007", "+1", " 1" or "0x10" mean the same (or are refused alike) everywhere.
 */

#include <stdint.h>

/* Parses s as a strict non-negative decimal integer in [min, max]: digits only
 * (leading zeros allowed, "007" is 7), no sign, space, fraction, exponent or base
 * prefix, no suffix. Returns 0 and sets *ret; -EINVAL if s is NULL, empty or not
 * all digits (malformed beats out of range: "99999999999999999999x" is -EINVAL);
 * -ERANGE if the value is below min or above max (never wraps, 2^64 included).
 * *ret is untouched on failure. */
int parse_uint64(const char *s, uint64_t min, uint64_t max, uint64_t *ret);
