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

/* The same with any loader of config.h's signature (fuzz-config-yaml.c: config_yaml_parse). */
struct RuleSet;
struct Diag;
typedef int (*ParseFn)(const char *text, size_t len, struct RuleSet *rs, struct Diag *diag);
void fuzz_config_parse_one(const uint8_t *data, size_t size, ParseFn parse);

#include <string.h>

/* True if reason (len bytes, not NUL-terminated) is one of the fixed reasons an ERR reply may
 * carry (src/core/protocol.c's REASON_* and the server's own in src/daemon/server.c), or
 * "store error: " followed by strerror() of some errno: text of the C library. A reason is
 * never built from client input: a reply that echoes any of it is a bug. */
static inline bool fuzz_reason_is_fixed(const char *reason, size_t len) {
        static const char *const fixed[] = {
                "empty request line",
                "blank before the command word",
                "missing count (TAKE, CHARGE and REFUND need one)",
                "count must be at least 1",
                "count must be decimal digits",
                "count has a leading zero",
                "count above 9007199254740991",
                "HELLO, RESET and EXPLAIN take no count",
                "only TAKE, PEEK and CHARGE take a timestamp",
                "a timestamp is @<seconds>[.<up to 6 digits>]",
                "client timestamps are off (--client-time-max-age)",
                "timestamp older than --client-time-max-age",
                "REFUND needs an admin listener",
                "RESET needs an admin listener",
                "unknown command",
                "unterminated quoted string",
                "expected '=' after key",
                "empty key",
                "double quote inside an unquoted string",
                "'=' inside an unquoted value",
                "expected whitespace between pairs",
                "too many key=value pairs",
                "NUL byte in request",
                "control character in request (only space and tab are allowed)",
                "invalid UTF-8 in request",
                "line too long",
                "too many connections",
                "store full",
        };
        static const char store_error[] = "store error: ";
        const size_t se = sizeof store_error - 1;

        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
                if (strlen(fixed[i]) == len && memcmp(fixed[i], reason, len) == 0)
                        return true;
        if (len > se && memcmp(reason, store_error, se) == 0)
                for (int e = 1; e < 256; e++) {
                        const char *s = strerror(e);
                        if (strlen(s) == len - se && memcmp(s, reason + se, len - se) == 0)
                                return true;
                }
        return false;
}

/* An ERR reply line (without its '\n'): `ERR unknown-command` or `ERR unknown` (or a version 2
 * verb's `ERR bad-count` / `ERR forbidden` / `ERR bad-time`), optionally
 * followed by ` "<reason>"` with a fixed reason. Anything else aborts (see fuzz_check). */
static inline void fuzz_check_err_line(const char *line, size_t len) {
        static const char *const codes[] = { "ERR unknown-command", "ERR unknown", "ERR bad-count",
                                             "ERR forbidden", "ERR bad-time" };

        for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
                size_t n = strlen(codes[i]);
                if (len < n || memcmp(line, codes[i], n) != 0)
                        continue;
                if (len == n)
                        return;
                if (len >= n + 3 && line[n] == ' ' && line[n + 1] == '"' && line[len - 1] == '"' &&
                    fuzz_reason_is_fixed(line + n + 2, len - n - 3))
                        return;
        }
        fprintf(stderr, "ERR reply with a reason that is not one of the fixed texts: %.*s\n", (int) len,
                line);
        abort();
}
