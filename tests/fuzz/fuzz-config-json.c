/* SPDX-License-Identifier: MIT */
/* Fuzz target: the JSON rules loader (config-json.c) and the validator; see fuzz-config.c. */

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        fuzz_config_one(data, size, true);
        return 0;
}
