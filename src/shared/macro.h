/* SPDX-License-Identifier: MIT */
#pragma once

/* STRINGIFY(8321) is "8321": a numeric constant inside a string literal. */
#define STRINGIFY_(x) #x
#define STRINGIFY(x)  STRINGIFY_(x)

/* Calls f(&var) when var goes out of scope: _cleanup_(foo_freep) Foo *foo = NULL; */
#define _cleanup_(f) __attribute__((cleanup(f)))
