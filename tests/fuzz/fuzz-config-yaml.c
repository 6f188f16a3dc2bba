/* SPDX-License-Identifier: MIT */
/* Fuzz target: the YAML loader (config-yaml.c, envoyproxy/ratelimit's format) and the validator;
 * see fuzz-config.c: a file that loads must survive the --dump-config round trip. */

#include "core/config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        fuzz_config_parse_one(data, size, config_yaml_parse);
        return 0;
}
