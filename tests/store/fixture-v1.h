/* SPDX-License-Identifier: MIT */
#pragma once

/* What tests/data/store/v1/data.mdb holds: written by tests/store/make-fixture-v1.c at
 * FIXTURE_T0, read back by check_store's test_format_v1_fixture. */

#include <stdint.h>

#define FIXTURE_T0             (1700000000ULL * 1000000ULL) /* usec: the clock it was written at */
#define FIXTURE_MAP_SIZE       (256ULL * 1024)              /* bytes: small, so is the file */
#define FIXTURE_LONG_ACTOR_LEN 500                          /* 'x' bytes: over 400, so hashed */

static const uint8_t FIXTURE_RULE_A[16] = { 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8,
                                            0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0xa0 };
static const uint8_t FIXTURE_RULE_B[16] = { 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8,
                                            0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0xa1 };
