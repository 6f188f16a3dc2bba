/* SPDX-License-Identifier: MIT */
/*
 * The body of the config fuzz targets (fuzz-config-ini.c, fuzz-config-json.c,
 * fuzz-config-yaml.c): a rules
 * file from the fuzzer goes through the loader and the validator; a valid one must
 * survive the --dump-config round trip unchanged (same rules, same counter identities)
 * and be usable by the matcher and rule_describe(). Invalid ones must leave messages.
 */

#include <string.h>

#include "core/config.h"
#include "fuzz.h"

#define FUZZ_CONFIG_INPUT_MAX                                                                               \
        (256u * 1024u) /* bytes: larger inputs are skipped; they only slow the fuzzer down */

/* Parses a NUL-terminated copy of data[0..size) and finalizes. Returns the set or NULL;
 * checks that a failure left at least one message. */
static RuleSet *load(const char *data, size_t size, ParseFn parse) {
        RuleSet *rs = NULL;
        char *text;
        Diag diag;
        int r;

        text = malloc(size + 1);
        fuzz_check(text);
        memcpy(text, data, size);
        text[size] = '\0';

        diag_init(&diag, "fuzz");
        fuzz_check(ruleset_new("fuzz", &rs) == 0);
        r = parse(text, size, rs, &diag);
        fuzz_check(r == 0 || r == -EINVAL);
        if (r == 0)
                r = ruleset_finalize(rs, &diag);
        fuzz_check(r == 0 || r == -EINVAL);
        fuzz_check((r < 0) == (diag_count(&diag) > 0));
        fuzz_check(diag.n_messages <= DIAG_MAX);
        for (size_t i = 0; i < diag.n_messages; i++)
                fuzz_check(diag.messages[i] && strncmp(diag.messages[i], "fuzz", 4) == 0);
        diag_done(&diag);
        free(text);
        if (r < 0)
                rs = ruleset_free(rs);
        return rs;
}

static void check_same(const RuleSet *a, const RuleSet *b) {
        fuzz_check(a->n_rules == b->n_rules);
        for (size_t i = 0; i < a->n_rules; i++) {
                const Rule *x = &a->rules[i], *y = &b->rules[i];

                fuzz_check(memcmp(x->id, y->id, RULE_ID_SIZE) == 0);
                fuzz_check(x->credit_limit == y->credit_limit);
                fuzz_check(x->reset_seconds == y->reset_seconds);
                fuzz_check(x->match_policy == y->match_policy);
                fuzz_check(x->algo.algorithm == y->algo.algorithm && x->algo.burst == y->algo.burst &&
                           x->algo.refill_seconds == y->algo.refill_seconds &&
                           x->algo.strict == y->algo.strict && x->algo.window == y->algo.window);
                fuzz_check(x->match_keys == y->match_keys && x->n_actor_fields == y->n_actor_fields);
                fuzz_check(x->n_patterns == y->n_patterns);
                fuzz_check(!x->label == !y->label && (!x->label || strcmp(x->label, y->label) == 0));
                fuzz_check(!x->comment == !y->comment &&
                           (!x->comment || strcmp(x->comment, y->comment) == 0));
                fuzz_check(!x->actor_field == !y->actor_field &&
                           (!x->actor_field || strcmp(x->actor_field, y->actor_field) == 0));
        }
}

/* Every rule matches a request made of its own patterns (globs taken literally match
 * themselves, since '*' matches any run): the matcher's answer must be some rule at
 * or before it, and the decider must be a stop rule. */
static void check_match(const RuleSet *rs) {
        static ProtoRequest req;
        const Rule *out[RULES_MATCH_MAX];
        char desc[RULE_DESCRIBE_MAX], summary[256];

        fuzz_check(config_summary(rs, summary, sizeof summary) == summary);
        for (size_t i = 0; i < rs->n_rules && i < 64; i++) {
                const Rule *rule = &rs->rules[i];
                size_t n;

                fuzz_check(rule_describe(rule, desc, sizeof desc) == desc);
                fuzz_check(strlen(desc) < sizeof desc);
                req = (ProtoRequest){ .command = PROTO_COMMAND_HIT };
                for (size_t k = 0; k < rule->n_patterns && k < PROTO_PAIRS_MAX; k++)
                        req.pairs[req.n_pairs++] = (ProtoPair){
                                .key = { rule->patterns[k].key, rule->patterns[k].key_len },
                                .value = { rule->patterns[k].value, rule->patterns[k].value_len },
                        };
                n = ruleset_match(rs, &req, out);
                fuzz_check(n >= 1 && n <= RULES_MATCH_MAX);
                fuzz_check(out[n - 1]->match_policy == MATCH_POLICY_STOP);
                for (size_t k = 0; k + 1 < n; k++)
                        fuzz_check(out[k]->match_policy != MATCH_POLICY_STOP &&
                                   out[k]->index < out[n - 1]->index);
                if (rule->match_policy == MATCH_POLICY_STOP)
                        fuzz_check(out[n - 1]->index <= rule->index);
        }
}

void fuzz_config_one(const uint8_t *data, size_t size, bool json) {
        fuzz_config_parse_one(data, size, json ? config_json_parse : config_ini_parse);
}

void fuzz_config_parse_one(const uint8_t *data, size_t size, ParseFn parse) {
        RuleSet *rs, *again;
        char *dump = NULL;
        size_t dump_len = 0;
        FILE *f;

        if (size > FUZZ_CONFIG_INPUT_MAX)
                return;
        rs = load((const char *) data, size, parse);
        if (!rs)
                return;

        check_match(rs);

        f = open_memstream(&dump, &dump_len);
        fuzz_check(f);
        fuzz_check(config_dump_json(rs, f) == 0);
        fuzz_check(fclose(f) == 0);

        again = load(dump, dump_len, config_json_parse);
        if (!again)
                fprintf(stderr, "dump that does not load back:\n%s\n", dump);
        fuzz_check(again);
        check_same(rs, again);

        ruleset_free(again);
        ruleset_free(rs);
        free(dump);
}
