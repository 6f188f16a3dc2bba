/* SPDX-License-Identifier: MIT */
/* Micro-benchmark of ruleset_match(): a 10,000-rule config where most rules are exact
 * paths (the index narrows a HIT to a handful of candidates), against the worst case
 * where every rule is a glob (each HIT walks the rules in order). Prints ns/match;
 * no pass/fail. Usage: bench-rules [N_RULES [N_MATCHES]] */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rules.h"
#include "shared/clock.h"

#define SPEC_MAX 64 /* bytes: longest pattern value built here */

static int add_rule(RuleSet *rs, const char *path, const char *method, const char *credit, Diag *diag) {
        RuleDraft d;
        int r;

        rule_draft_init(&d, 0);
        if (path && (r = rule_draft_add_pattern(&d, "path", 4, path, strlen(path))) < 0)
                return r;
        if (method && (r = rule_draft_add_pattern(&d, "method", 6, method, strlen(method))) < 0)
                return r;
        d.attrs[RULE_ATTR_CREDIT_LIMIT] = credit;
        d.attrs[RULE_ATTR_RESET_SECONDS] = "60";
        return ruleset_add(rs, &d, diag);
}

/* glob: every rule is "/api/N/" followed by a star instead of "/api/N". */
static int build(size_t n_rules, bool glob, RuleSet **ret, uint64_t *ret_load_ns) {
        char path[SPEC_MAX];
        RuleSet *rs = NULL;
        Diag diag;
        int r;

        diag_init(&diag, glob ? "globs" : "exact");
        uint64_t t0 = clock_nsec(CLOCK_MONOTONIC);
        r = ruleset_new(NULL, &rs);
        for (size_t i = 0; r >= 0 && i < n_rules; i++) {
                snprintf(path, sizeof path, glob ? "/api/%zu/*" : "/api/%zu", i);
                r = add_rule(rs, path, "GET", "100", &diag);
        }
        if (r >= 0)
                r = add_rule(rs, "/static/*", NULL, "1000", &diag);
        if (r >= 0)
                r = add_rule(rs, NULL, NULL, "0", &diag);
        if (r >= 0)
                r = ruleset_finalize(rs, &diag);
        *ret_load_ns = clock_nsec(CLOCK_MONOTONIC) - t0;
        if (r < 0) {
                diag_print(&diag, stderr);
                fprintf(stderr, "bench-rules: building the config failed: %s\n", strerror(-r));
                ruleset_free(rs);
        } else
                *ret = rs;
        diag_done(&diag);
        return r;
}

static void run(const char *name, const RuleSet *rs, size_t n_rules, size_t n_matches, bool glob,
                uint64_t load_ns) {
        enum { N_PATHS = 1024 };
        static char paths[N_PATHS][SPEC_MAX];
        static ProtoRequest reqs[N_PATHS];
        const Rule *out[RULES_MATCH_MAX];
        char desc[256];
        size_t checksum = 0;

        /* Requests spread over the config, a few falling through to the default. */
        for (size_t i = 0; i < N_PATHS; i++) {
                size_t k = (i * 7919u) % (n_rules + n_rules / 16 + 1);
                snprintf(paths[i], sizeof paths[i], glob ? "/api/%zu/x" : "/api/%zu", k);
                reqs[i] = (ProtoRequest){ .command = PROTO_COMMAND_HIT, .n_pairs = 3 };
                reqs[i].pairs[0] = (ProtoPair){ { "method", 6 }, { "GET", 3 } };
                reqs[i].pairs[1] = (ProtoPair){ { "path", 4 }, { paths[i], strlen(paths[i]) } };
                reqs[i].pairs[2] = (ProtoPair){ { "ip", 2 }, { "192.0.2.1", 9 } };
        }

        uint64_t t0 = clock_nsec(CLOCK_MONOTONIC);
        for (size_t i = 0; i < n_matches; i++) {
                size_t n = ruleset_match(rs, &reqs[i % N_PATHS], out);
                checksum += out[n - 1]->index;
        }
        uint64_t dt = clock_nsec(CLOCK_MONOTONIC) - t0;

        printf("%-7s %6zu rules: %9.1f ns/match over %zu matches; load+validate %.1f ms; %s (checksum "
               "%zu)\n",
               name, n_rules, (double) dt / (double) n_matches, n_matches, (double) load_ns / 1e6,
               ruleset_index_describe(rs, desc, sizeof desc), checksum);
}

int main(int argc, char *argv[]) {
        size_t n_rules = argc > 1 ? strtoul(argv[1], NULL, 10) : 10000;
        size_t n_matches = argc > 2 ? strtoul(argv[2], NULL, 10) : 200000;
        RuleSet *rs;
        uint64_t load_ns;

        if (n_rules == 0 || n_rules > RULES_MAX - 2 || n_matches == 0) {
                fprintf(stderr, "usage: bench-rules [N_RULES (1..%d) [N_MATCHES]]\n", RULES_MAX - 2);
                return EXIT_FAILURE;
        }

        if (build(n_rules, false, &rs, &load_ns) < 0)
                return EXIT_FAILURE;
        run("indexed", rs, n_rules, n_matches, false, load_ns);
        ruleset_free(rs);

        /* The worst case walks every rule per HIT: fewer matches keep the run short. */
        if (build(n_rules, true, &rs, &load_ns) < 0)
                return EXIT_FAILURE;
        run("globs", rs, n_rules, n_matches / 100 + 1, true, load_ns);
        ruleset_free(rs);
        return EXIT_SUCCESS;
}
