/* SPDX-License-Identifier: MIT */
#pragma once

/* STRINGIFY(8321) is "8321": a numeric constant inside a string literal. */
#define STRINGIFY_(x) #x
#define STRINGIFY(x)  STRINGIFY_(x)
