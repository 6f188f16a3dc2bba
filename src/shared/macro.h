/* SPDX-License-Identifier: MIT */
#pragma once

/* STRINGIFY(8321) is "8321": a numeric constant inside a string literal. */
#define STRINGIFY_(x) #x
#define STRINGIFY(x)  STRINGIFY_(x)

/* Calls f(&var) when var goes out of scope: _cleanup_(foo_freep) Foo *foo = NULL; */
#define _cleanup_(f) __attribute__((cleanup(f)))

/* The value of a hexadecimal digit (either case), or -1. */
static inline int hex_digit_value(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}
