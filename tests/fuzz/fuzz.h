/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The libFuzzer entry points of the targets in tests/fuzz/. Each fuzz-*.c defines
 * LLVMFuzzerTestOneInput(); built with --enable-fuzzer, libFuzzer supplies main(),
 * otherwise fuzz-replay.c does (it runs the target once per corpus file, so the seed
 * corpus and every crash reproducer kept there are a regression test of make check).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken invariant is a crash: libFuzzer saves the input that caused it. */
#define fuzz_check(cond)                                                                                    \
        do {                                                                                                \
                if (!(cond)) {                                                                              \
                        fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);        \
                        abort();                                                                            \
                }                                                                                           \
        } while (0)

/* fuzz-config.c: loads data as an INI (json false) or JSON rules file; if it is valid,
 * dumps it as JSON, loads that back and checks that both sets are the same rules. */
void fuzz_config_one(const uint8_t *data, size_t size, bool json);
