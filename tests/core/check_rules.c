/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/rules.h"
#include "check-run.h"

/* ---- helpers ------------------------------------------------------------------- */

#define SPECS_MAX 64

/* Fills req from a NULL-terminated list of "key", "value" strings. */
static void req_fill(ProtoRequest *req, const char *const *kv) {
        *req = (ProtoRequest){ .command = PROTO_COMMAND_HIT };
        for (size_t i = 0; kv[i]; i += 2) {
                ck_assert_ptr_nonnull(kv[i + 1]);
                ck_assert_uint_lt(req->n_pairs, PROTO_PAIRS_MAX);
                req->pairs[req->n_pairs++] = (ProtoPair){
                        .key = { kv[i], strlen(kv[i]) },
                        .value = { kv[i + 1], strlen(kv[i + 1]) },
                };
        }
}

/* Builds a RuleSet from rule specs "key=value key=value ; attr=value attr=value"
 * ("default" for the empty operation; '~' in an attribute value stands for a space).
 * Rule i starts on line 10*(i+1); its k-th attribute is on line 10*(i+1)+k+1.
 * Returns the first failure of rule_draft_set/ruleset_add (without finalizing),
 * else the result of ruleset_finalize() (or 0 if !finalize). */
static int build(const char *const *specs, bool finalize, RuleSet **ret, Diag *diag) {
        RuleSet *rs = NULL;
        int r, first = 0;

        ck_assert_int_eq(ruleset_new("test", &rs), 0);
        for (size_t i = 0; specs[i]; i++) {
                char *buf = strdup(specs[i]), *attrs = strchr(buf, ';'), *save = NULL;
                unsigned line = 10 * (unsigned) (i + 1), k = 0;
                RuleDraft d;

                ck_assert_ptr_nonnull(attrs);
                *attrs++ = '\0';
                rule_draft_init(&d, line);
                for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
                        if (strcmp(t, "default") == 0) {
                                d.is_default = true;
                                continue;
                        }
                        char *eq = strchr(t, '=');
                        ck_assert_ptr_nonnull(eq);
                        ck_assert_int_eq(
                                rule_draft_add_pattern(&d, t, (size_t) (eq - t), eq + 1, strlen(eq + 1)), 0);
                }
                for (char *t = strtok_r(attrs, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
                        char *eq = strchr(t, '=');
                        ck_assert_ptr_nonnull(eq);
                        *eq = '\0';
                        for (char *p = eq + 1; *p; p++)
                                if (*p == '~')
                                        *p = ' ';
                        r = rule_draft_set_diag(&d, NULL, t, eq + 1, line + ++k, diag);
                        if (r < 0 && first == 0)
                                first = r;
                }
                if (first == 0) {
                        r = ruleset_add(rs, &d, diag);
                        if (r < 0)
                                first = r;
                }
                free(buf);
        }
        if (first == 0 && finalize)
                first = ruleset_finalize(rs, diag);
        *ret = rs;
        return first;
}

static bool diag_has(const Diag *d, const char *needle) {
        for (size_t i = 0; i < d->n_messages; i++)
                if (strstr(d->messages[i], needle))
                        return true;
        return false;
}

static void diag_dump(const Diag *d) {
        for (size_t i = 0; i < d->n_messages; i++)
                fprintf(stderr, "  diag: %s\n", d->messages[i]);
}

/* A brute-force matcher: every rule in order, no index; canary and continue rules go on; an exact
 * rule (matchKeys exact) needs every field of the request to be one of its keys. */
static size_t linear_match(const RuleSet *rs, const ProtoRequest *req, const Rule *out[RULES_MATCH_MAX]) {
        size_t n = 0;
        for (size_t i = 0; i < rs->n_rules; i++) {
                const Rule *r = &rs->rules[i];
                bool ok = true;
                for (size_t k = 0; k < req->n_pairs && ok && r->match_keys == MATCH_KEYS_EXACT; k++) {
                        ok = false;
                        for (size_t j = 0; j < r->n_patterns; j++)
                                ok = ok || (req->pairs[k].key.len == r->patterns[j].key_len &&
                                            memcmp(req->pairs[k].key.ptr, r->patterns[j].key,
                                                   r->patterns[j].key_len) == 0);
                }
                for (size_t j = 0; j < r->n_patterns && ok; j++) {
                        const RulePattern *p = &r->patterns[j];
                        const ProtoSlice *v = NULL;
                        for (size_t k = 0; k < req->n_pairs; k++)
                                if (req->pairs[k].key.len == p->key_len &&
                                    memcmp(req->pairs[k].key.ptr, p->key, p->key_len) == 0)
                                        v = &req->pairs[k].value;
                        ok = v && rule_pattern_match(p, v->ptr, v->len);
                }
                if (!ok)
                        continue;
                out[n++] = r;
                if (r->match_policy == MATCH_POLICY_STOP)
                        break;
        }
        return n;
}

/* Matches kv against rs and checks the matched rules' labels, in order ("a,b"). */
static void expect_match(const RuleSet *rs, const char *const *kv, const char *labels) {
        const Rule *out[RULES_MATCH_MAX], *lin[RULES_MATCH_MAX];
        ProtoRequest req;
        char got[512] = "";

        req_fill(&req, kv);
        size_t n = ruleset_match(rs, &req, out);
        ck_assert_uint_ge(n, 1);
        for (size_t i = 0; i < n; i++) {
                if (i > 0)
                        strcat(got, ",");
                strcat(got, out[i]->label ? out[i]->label : "?");
        }
        ck_assert_str_eq(got, labels);
        ck_assert_uint_eq(linear_match(rs, &req, lin), n);
        for (size_t i = 0; i < n; i++)
                ck_assert_ptr_eq(lin[i], out[i]);
}

#define KV(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* ---- names ------------------------------------------------------------------------ */

START_TEST (test_names) {
        ck_assert_str_eq(rule_attr_to_string(RULE_ATTR_CREDIT_LIMIT), "creditLimit");
        ck_assert_str_eq(rule_attr_to_string(RULE_ATTR_COMMENT), "comment");
        ck_assert_ptr_null(rule_attr_to_string(_RULE_ATTR_MAX));
        ck_assert_ptr_null(rule_attr_to_string(_RULE_ATTR_INVALID));
        for (int a = 0; a < _RULE_ATTR_MAX; a++) {
                ck_assert_int_eq(rule_attr_from_string(rule_attr_to_string((RuleAttr) a)), a);
                ck_assert_ptr_nonnull(strstr(rule_attr_names(), rule_attr_to_string((RuleAttr) a)));
        }
        ck_assert_int_eq(rule_attr_from_string("creditlimit"), -EINVAL);
        ck_assert_int_eq(rule_attr_from_string(NULL), -EINVAL);
        ck_assert_str_eq(rule_attr_suggest("creditlimit"), "creditLimit");
        ck_assert_str_eq(rule_attr_suggest("ACTORFIELD"), "actorField");
        ck_assert_ptr_null(rule_attr_suggest("credit"));
        ck_assert_str_eq(rule_attr_names(),
                         "creditLimit, resetSeconds, actorField, matchPolicy, label, comment, "
                         "algorithm, burst, refillSeconds, strict, onBackendError, window, matchKeys");
        ck_assert_str_eq(rule_attr_to_string(RULE_ATTR_ALGORITHM), "algorithm");
        ck_assert_str_eq(rule_attr_to_string(RULE_ATTR_ON_BACKEND_ERROR), "onBackendError");
        ck_assert_str_eq(rule_attr_suggest("onbackenderror"), "onBackendError");
        ck_assert_str_eq(rule_attr_to_string(RULE_ATTR_BURST), "burst");
        ck_assert_str_eq(rule_attr_to_string(RULE_ATTR_REFILL_SECONDS), "refillSeconds");
        ck_assert_str_eq(rule_attr_to_string(RULE_ATTR_STRICT), "strict");
        ck_assert_str_eq(rule_attr_suggest("refillseconds"), "refillSeconds");
        ck_assert_str_eq(rule_attr_suggest("Algorithm"), "algorithm");

        ck_assert_str_eq(match_policy_to_string(MATCH_POLICY_STOP), "stop");
        ck_assert_str_eq(match_policy_to_string(MATCH_POLICY_CANARY), "canary");
        ck_assert_ptr_null(match_policy_to_string(_MATCH_POLICY_MAX));
        ck_assert_int_eq(match_policy_from_string("canary"), MATCH_POLICY_CANARY);
        ck_assert_str_eq(match_policy_to_string(MATCH_POLICY_CONTINUE), "continue");
        ck_assert_int_eq(match_policy_from_string("continue"), MATCH_POLICY_CONTINUE);
        ck_assert_int_eq(match_policy_from_string("Continue"), -EINVAL);
        ck_assert_int_eq(match_policy_from_string("stop"), MATCH_POLICY_STOP);
        ck_assert_int_eq(match_policy_from_string("Stop"), -EINVAL);
        ck_assert_int_eq(match_policy_from_string(""), -EINVAL);
        ck_assert_int_eq(match_policy_from_string(NULL), -EINVAL);

        /* onBackendError's values (issue #16), exact case; the default has no name. */
        ck_assert_str_eq(rule_on_error_to_string(RULE_ON_ERROR_ALLOW), "allow");
        ck_assert_str_eq(rule_on_error_to_string(RULE_ON_ERROR_DENY), "deny");
        ck_assert_str_eq(rule_on_error_to_string(RULE_ON_ERROR_LOCAL), "local");
        ck_assert_ptr_null(rule_on_error_to_string(RULE_ON_ERROR_DEFAULT));
        ck_assert_ptr_null(rule_on_error_to_string(_RULE_ON_ERROR_MAX));
        ck_assert_ptr_null(rule_on_error_to_string(_RULE_ON_ERROR_INVALID));
        ck_assert_int_eq(rule_on_error_from_string("allow"), RULE_ON_ERROR_ALLOW);
        ck_assert_int_eq(rule_on_error_from_string("deny"), RULE_ON_ERROR_DENY);
        ck_assert_int_eq(rule_on_error_from_string("local"), RULE_ON_ERROR_LOCAL);
        for (int e = RULE_ON_ERROR_ALLOW; e < _RULE_ON_ERROR_MAX; e++)
                ck_assert_int_eq(rule_on_error_from_string(rule_on_error_to_string((RuleOnError) e)), e);
        ck_assert_int_eq(rule_on_error_from_string("Allow"), -EINVAL);
        ck_assert_int_eq(rule_on_error_from_string("LOCAL"), -EINVAL);
        ck_assert_int_eq(rule_on_error_from_string("default"), -EINVAL);
        ck_assert_int_eq(rule_on_error_from_string(""), -EINVAL);
        ck_assert_int_eq(rule_on_error_from_string("allow "), -EINVAL);
        ck_assert_int_eq(rule_on_error_from_string(NULL), -EINVAL);
}
END_TEST

/* ---- drafts ------------------------------------------------------------------------ */

START_TEST (test_draft) {
        static char big[RULE_TEXT_MAX + 1];
        char keys[RULE_PATTERNS_MAX + 1][8];
        RuleDraft d;
        Diag diag;

        memset(big, 'x', sizeof big);
        rule_draft_init(&d, 7);
        ck_assert_uint_eq(d.line, 7);
        ck_assert_int_eq(rule_draft_add_pattern(&d, "a", 1, "1", 1), 0);
        ck_assert_int_eq(rule_draft_add_pattern(&d, "a", 1, "2", 1), -EEXIST);
        ck_assert_int_eq(rule_draft_add_pattern(&d, "", 0, "2", 1), -EINVAL);
        ck_assert_int_eq(rule_draft_add_pattern(&d, NULL, 0, "2", 1), -EINVAL);
        ck_assert_int_eq(rule_draft_add_pattern(&d, big, sizeof big, "2", 1), -EINVAL);
        ck_assert_int_eq(rule_draft_add_pattern(&d, "b", 1, big, sizeof big), -EINVAL);
        ck_assert_int_eq(rule_draft_add_pattern(&d, "b", 1, big, RULE_TEXT_MAX), 0);
        ck_assert_int_eq(rule_draft_add_pattern(&d, "c", 1, NULL, 0), 0); /* empty value */
        ck_assert_uint_eq(d.n_patterns, 3);

        rule_draft_init(&d, 1);
        for (size_t i = 0; i <= RULE_PATTERNS_MAX; i++) {
                snprintf(keys[i], sizeof keys[i], "k%zu", i);
                ck_assert_int_eq(rule_draft_add_pattern(&d, keys[i], strlen(keys[i]), "v", 1),
                                 i < RULE_PATTERNS_MAX ? 0 : -E2BIG);
        }

        rule_draft_init(&d, 3);
        ck_assert_int_eq(rule_draft_set(&d, "creditLimit", "1", 4), 0);
        ck_assert_str_eq(d.attrs[RULE_ATTR_CREDIT_LIMIT], "1");
        ck_assert_uint_eq(d.attr_lines[RULE_ATTR_CREDIT_LIMIT], 4);
        ck_assert_int_eq(rule_draft_set(&d, "creditLimit", "2", 5), -EEXIST);
        ck_assert_int_eq(rule_draft_set(&d, "creditlimit", "2", 5), -ENOENT);
        ck_assert_int_eq(rule_draft_set(&d, "operation", "x", 5), -ENOENT);
        ck_assert_int_eq(rule_draft_set(&d, "label", NULL, 5), -EINVAL);

        /* The loader helper reports what went wrong, with a hint. */
        diag_init(&diag, "r.ini");
        ck_assert_int_eq(rule_draft_add_pattern(&d, "method", 6, "GET", 3), 0);
        ck_assert_int_eq(rule_draft_set_diag(&d, NULL, "creditlimit", "2", 8, &diag), -ENOENT);
        ck_assert_int_eq(rule_draft_set_diag(&d, NULL, "limit", "2", 9, &diag), -ENOENT);
        ck_assert_int_eq(rule_draft_set_diag(&d, NULL, "creditLimit", "2", 10, &diag), -EEXIST);
        ck_assert_int_eq(rule_draft_set_diag(&d, NULL, "label", "x", 11, &diag), 0);
        ck_assert_uint_eq(diag.n_messages, 3);
        ck_assert_str_eq(diag.messages[0],
                         "r.ini:8: rule [method=GET] has an unknown attribute \"creditlimit\" (did you mean "
                         "\"creditLimit\"?)");
        ck_assert_str_eq(diag.messages[1], "r.ini:9: rule [method=GET] has an unknown attribute \"limit\" "
                                           "(accepted: creditLimit, resetSeconds, actorField, matchPolicy, "
                                           "label, comment, algorithm, burst, refillSeconds, strict, "
                                           "onBackendError, window, matchKeys)");
        ck_assert_str_eq(diag.messages[2],
                         "r.ini:10: rule [method=GET] sets creditLimit twice (first on line 4)");
        diag_done(&diag);
}
END_TEST

/* ---- numbers --------------------------------------------------------------------------- */

static const struct {
        const char *text;
        bool credit_ok, reset_ok;
        uint64_t value;
        const char *error;
} number_cases[] = {
        { "10", true, true, 10, NULL },
        { "0", true, true, 0, NULL },
        { "007", true, true, 7, NULL },
        { "3155760000", true, true, 3155760000ULL, NULL },
        { "3155760001", true, false, 3155760001ULL, "is above the maximum 3155760000" },
        { "9007199254740991", true, false, 9007199254740991ULL, "is above the maximum 3155760000" },
        { "9007199254740992", false, false, 0, "is above the maximum" },
        { "18446744073709551616", false, false, 0, "is above the maximum" }, /* 2^64: must not wrap to 0 */
        { "99999999999999999999999", false, false, 0, "is above the maximum" },
        { "", false, false, 0, "\"\" is not a non-negative decimal integer" },
        { "-1", false, false, 0, "\"-1\" is not a non-negative decimal integer" },
        { "+1", false, false, 0, "is not a non-negative" },
        { "1.5", false, false, 0, "is not a non-negative" },
        { "1e3", false, false, 0, "is not a non-negative" },
        { "0x10", false, false, 0, "is not a non-negative" },
        { " 1", false, false, 0, "is not a non-negative" },
        { "1 ", false, false, 0, "is not a non-negative" },
        { "ten", false, false, 0, "is not a non-negative" },
        { "99999999999999999999x", false, false, 0, "is not a non-negative" }, /* malformed beats too big */
};

START_TEST (test_numbers) {
        /* The same cases for both attributes (resetSeconds has the smaller maximum). */
        for (int which = 0; which < 2; which++) {
                RuleAttr a = which ? RULE_ATTR_RESET_SECONDS : RULE_ATTR_CREDIT_LIMIT;
                RuleAttr other = which ? RULE_ATTR_CREDIT_LIMIT : RULE_ATTR_RESET_SECONDS;
                const char *t = number_cases[_i].text;
                RuleSet *rs;
                RuleDraft d;
                Diag diag;

                diag_init(&diag, "n.ini");
                ck_assert_int_eq(ruleset_new(NULL, &rs), 0);
                rule_draft_init(&d, 5);
                d.attrs[a] = t;
                d.attr_lines[a] = 6;
                d.attrs[other] = "1";
                int r = ruleset_add(rs, &d, &diag);
                if (which ? number_cases[_i].reset_ok : number_cases[_i].credit_ok) {
                        ck_assert_int_eq(r, 0);
                        ck_assert_uint_eq(diag.n_messages, 0);
                        uint64_t v = which ? rs->rules[0].reset_seconds : rs->rules[0].credit_limit;
                        ck_assert_uint_eq(v, number_cases[_i].value);
                } else {
                        ck_assert_int_eq(r, -EINVAL);
                        ck_assert_uint_eq(rs->n_rules, 0);
                        ck_assert_uint_eq(diag.n_messages, 1);
                        ck_assert_msg(strncmp(diag.messages[0], "n.ini:6: rule [default] ", 24) == 0, "%s",
                                      diag.messages[0]);
                        ck_assert_ptr_nonnull(strstr(diag.messages[0], rule_attr_to_string(a)));
                        ck_assert_msg(strstr(diag.messages[0], number_cases[_i].error), "%s",
                                      diag.messages[0]);
                }
                ruleset_free(rs);
                diag_done(&diag);
        }
}
END_TEST

START_TEST (test_number_limits) {
        RuleSet *rs;
        Diag diag;

        diag_init(&diag, NULL);
        ck_assert_int_eq(build(KV("default ; creditLimit=9007199254740991 resetSeconds=3155760000"), true,
                               &rs, &diag),
                         0);
        ck_assert_uint_eq(rs->rules[0].credit_limit, RULE_CREDIT_LIMIT_MAX);
        ck_assert_uint_eq(rs->rules[0].reset_seconds, RULE_RESET_SECONDS_MAX);
        ruleset_free(rs);
        ck_assert_int_eq(
                build(KV("default ; creditLimit=9007199254740992 resetSeconds=1"), true, &rs, &diag),
                -EINVAL);
        ck_assert(diag_has(&diag, "<config>:11: rule [default] creditLimit 9007199254740992 is above the "
                                  "maximum 9007199254740991"));
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

/* ---- validation ------------------------------------------------------------------------- */

static const struct {
        const char *name;
        const char *specs[8];
        int ret;         /* of build() */
        const char *msg; /* expected in some message; NULL: no message */
} validation_cases[] = {
        { "minimal", { "default ; creditLimit=0 resetSeconds=0" }, 0, NULL },
        { "no rules", { NULL }, -EINVAL, "test: no rules: a config needs at least a final [default] rule" },
        { "missing creditLimit",
          { "a=1 ; resetSeconds=1", "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:10: rule [a=1] has no creditLimit (it is required)" },
        { "missing resetSeconds",
          { "a=1 ; creditLimit=1", "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:10: rule [a=1] has no resetSeconds (it is required)" },
        { "unknown attribute",
          { "a=1 ; creditLimit=1 resetSeconds=1 creditlimit=3" },
          -ENOENT,
          "test:13: rule [a=1] has an unknown attribute \"creditlimit\" (did you mean \"creditLimit\"?)" },
        { "last not default",
          { "a=1 ; creditLimit=1 resetSeconds=1" },
          -EINVAL,
          "test:10: rule [a=1] is the last rule but not a default" },
        { "default not last",
          { "default ; creditLimit=1 resetSeconds=1", "a=1 ; creditLimit=1 resetSeconds=1",
            "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:10: rule [default] must be the last rule: it matches every request, so the 2 rules after it "
          "are unreachable" },
        { "two defaults",
          { "default ; creditLimit=1 resetSeconds=1", "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:10: rule [default] must be the last rule" },
        { "default canary",
          { "default ; creditLimit=1 resetSeconds=1 matchPolicy=canary" },
          -EINVAL,
          "test:13: rule [default] is a default rule (empty operation) and must have matchPolicy stop" },
        { "empty canary before default",
          { "; creditLimit=1 resetSeconds=1 matchPolicy=canary", "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "must have matchPolicy stop" },
        { "unknown matchPolicy",
          { "a=1 ; creditLimit=1 resetSeconds=1 matchPolicy=Canary",
            "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:13: rule [a=1] has an unknown matchPolicy \"Canary\" (accepted: stop, canary, continue)" },
        { "bad label",
          { "a=1 ; creditLimit=1 resetSeconds=1 label=a.b", "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:13: rule [a=1] has an invalid label \"a.b\": use 1 to 255 of a-z A-Z 0-9 _ -" },
        { "empty label",
          { "a=1 ; creditLimit=1 resetSeconds=1 label=", "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "has an invalid label \"\"" },
        { "label with space",
          { "a=1 ; creditLimit=1 resetSeconds=1 label=a~b", "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "has an invalid label \"a b\"" },
        { "duplicate label",
          { "a=1 ; creditLimit=1 resetSeconds=1 label=x", "a=2 ; creditLimit=1 resetSeconds=1",
            "a=3 ; creditLimit=1 resetSeconds=1 label=x", "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:33: rule [a=3] has the label \"x\" of rule [a=1] (line 10): labels must be unique" },
        { "empty actorField",
          { "a=1 ; creditLimit=1 resetSeconds=1 actorField=", "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:13: rule [a=1] has an empty actorField" },
        { "actorField not in operation is fine",
          { "a=1 ; creditLimit=1 resetSeconds=1 actorField=ip", "default ; creditLimit=0 resetSeconds=0" },
          0,
          NULL },
        { "comment with spaces is fine",
          { "a=1 ; creditLimit=1 resetSeconds=1 comment=hello~world",
            "default ; creditLimit=0 resetSeconds=0" },
          0,
          NULL },
        /* Shadowing, after divvy's own examples. */
        { "any before exact",
          { "a=* ; creditLimit=1 resetSeconds=1", "a=1 ; creditLimit=1 resetSeconds=1",
            "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:20: rule [a=1] is unreachable: rule [a=*] (line 10) matches every request it matches" },
        { "exact before any",
          { "a=1 ; creditLimit=1 resetSeconds=1", "a=* ; creditLimit=1 resetSeconds=1",
            "default ; creditLimit=0 resetSeconds=0" },
          0,
          NULL },
        { "glob before exact",
          { "path=/x/* ; creditLimit=1 resetSeconds=1", "path=/x/y ; creditLimit=1 resetSeconds=1",
            "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "rule [path=/x/y] is unreachable: rule [path=/x/*] (line 10)" },
        { "exact before glob",
          { "path=/x/y ; creditLimit=1 resetSeconds=1", "path=/x/* ; creditLimit=1 resetSeconds=1",
            "default ; creditLimit=0 resetSeconds=0" },
          0,
          NULL },
        { "wider glob before narrower glob",
          { "path=/x/* ; creditLimit=1 resetSeconds=1", "path=/x/y/* ; creditLimit=1 resetSeconds=1",
            "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "rule [path=/x/y/*] is unreachable" },
        { "overlapping globs are fine",
          { "path=/x/*/a ; creditLimit=1 resetSeconds=1", "path=/x/y/* ; creditLimit=1 resetSeconds=1",
            "default ; creditLimit=0 resetSeconds=0" },
          0,
          NULL },
        { "fewer keys shadow more keys",
          { "method=GET ; creditLimit=1 resetSeconds=1",
            "method=GET path=/pantry/* ; creditLimit=1 resetSeconds=1",
            "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:20: rule [method=GET path=/pantry/*] is unreachable: rule [method=GET] (line 10) matches "
          "every "
          "request it matches" },
        { "more keys do not shadow fewer",
          { "method=GET path=/pantry/* ; creditLimit=1 resetSeconds=1",
            "method=GET ; creditLimit=1 resetSeconds=1", "default ; creditLimit=0 resetSeconds=0" },
          0,
          NULL },
        { "exact duplicate",
          { "a=1 b=2 ; creditLimit=1 resetSeconds=1", "b=2 a=1 ; creditLimit=5 resetSeconds=9",
            "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:20: rule [a=1 b=2] is unreachable: rule [a=1 b=2] (line 10)" },
        { "canary before anything",
          { "a=* ; creditLimit=1 resetSeconds=1 matchPolicy=canary", "a=1 ; creditLimit=1 resetSeconds=1",
            "default ; creditLimit=0 resetSeconds=0" },
          0,
          NULL },
        { "canary shadowed by stop",
          { "a=* ; creditLimit=1 resetSeconds=1", "a=1 ; creditLimit=1 resetSeconds=1 matchPolicy=canary",
            "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:20: rule [a=1] is unreachable" },
        { "star-only glob shadows any",
          { "a=** ; creditLimit=1 resetSeconds=1", "a=* ; creditLimit=1 resetSeconds=1",
            "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "rule [a=*] is unreachable: rule [a=**]" },
        { "marked default with operation",
          { "default a=1 ; creditLimit=1 resetSeconds=1" },
          -EINVAL,
          "test:10: rule [a=1] is marked default but has an operation" },
        /* matchPolicy continue (issue #15): like a canary for validation, never masks. */
        { "default continue",
          { "default ; creditLimit=1 resetSeconds=1 matchPolicy=continue" },
          -EINVAL,
          "test:13: rule [default] is a default rule (empty operation) and must have matchPolicy stop" },
        { "unknown matchPolicy lists continue",
          { "a=1 ; creditLimit=1 resetSeconds=1 matchPolicy=go-on",
            "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:13: rule [a=1] has an unknown matchPolicy \"go-on\" (accepted: stop, canary, continue)" },
        { "continue before anything",
          { "a=* ; creditLimit=1 resetSeconds=1 matchPolicy=continue", "a=1 ; creditLimit=1 resetSeconds=1",
            "default ; creditLimit=0 resetSeconds=0" },
          0,
          NULL },
        { "continue then stop on the same operation",
          { "a=1 b=2 ; creditLimit=1 resetSeconds=1 matchPolicy=continue",
            "b=2 a=1 ; creditLimit=1 resetSeconds=1", "default ; creditLimit=0 resetSeconds=0" },
          0,
          NULL },
        { "canary, continue, stop on the same operation",
          { "a=1 ; creditLimit=1 resetSeconds=1 matchPolicy=canary",
            "a=1 ; creditLimit=2 resetSeconds=1 matchPolicy=continue", "a=1 ; creditLimit=3 resetSeconds=1",
            "default ; creditLimit=0 resetSeconds=0" },
          0,
          NULL },
        { "continue shadowed by stop",
          { "a=* ; creditLimit=1 resetSeconds=1", "a=1 ; creditLimit=1 resetSeconds=1 matchPolicy=continue",
            "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:20: rule [a=1] is unreachable: rule [a=*] (line 10) matches every request it matches" },
        { "stop after continue after stop",
          { "a=1 ; creditLimit=1 resetSeconds=1", "a=* ; creditLimit=1 resetSeconds=1 matchPolicy=continue",
            "a=1 b=* ; creditLimit=1 resetSeconds=1", "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:30: rule [a=1 b=*] is unreachable: rule [a=1] (line 10)" },
        /* algorithm, burst, refillSeconds, strict (issue #15): good values. */
        { "algorithm fixed-window",
          { "default ; creditLimit=1 resetSeconds=1 algorithm=fixed-window" },
          0,
          NULL },
        { "algorithm sliding-window",
          { "default ; creditLimit=4294967295 resetSeconds=1 algorithm=sliding-window" },
          0,
          NULL },
        { "algorithm token-bucket, all parameters",
          { "default ; creditLimit=10 resetSeconds=60 algorithm=token-bucket burst=25 refillSeconds=6 "
            "strict=true" },
          0,
          NULL },
        { "algorithm gcra",
          { "default ; creditLimit=10 resetSeconds=60 algorithm=gcra strict=false" },
          0,
          NULL },
        { "refillSeconds 0 is continuous",
          { "default ; creditLimit=10 resetSeconds=60 algorithm=token-bucket refillSeconds=0" },
          0,
          NULL },
        { "burst below creditLimit",
          { "default ; creditLimit=100 resetSeconds=60 algorithm=token-bucket burst=1" },
          0,
          NULL },
        { "large burst",
          { "default ; creditLimit=1 resetSeconds=60 algorithm=token-bucket burst=100000" },
          0,
          NULL },
        { "trivial rule: burst at its maximum",
          { "default ; creditLimit=1 resetSeconds=0 algorithm=token-bucket burst=9007199254740991" },
          0,
          NULL },
        { "refillSeconds dividing into whole credits",
          { "default ; creditLimit=10 resetSeconds=60 algorithm=token-bucket refillSeconds=18" },
          0,
          NULL },
        { "refillSeconds above resetSeconds",
          { "default ; creditLimit=10 resetSeconds=60 algorithm=token-bucket refillSeconds=120 burst=20" },
          0,
          NULL },
        /* Refused by algo_params_prepare(): its reason, at the line of the attribute it names first. */
        { "burst that takes centuries to refill",
          { "default ; creditLimit=1 resetSeconds=60 algorithm=token-bucket burst=9007199254740991" },
          -EINVAL,
          "test:14: rule [default] burst takes more than 200 years to refill at creditLimit per "
          "resetSeconds" },
        { "a default burst refills within resetSeconds, the longest allowed",
          { "default ; resetSeconds=3155760000 creditLimit=3 algorithm=token-bucket" },
          0,
          NULL },
        { "refillSeconds not dividing into whole credits",
          { "default ; creditLimit=10 resetSeconds=60 algorithm=token-bucket strict=true refillSeconds=7" },
          -EINVAL,
          "test:15: rule [default] refillSeconds does not divide resetSeconds into whole credits "
          "(creditLimit * refillSeconds / resetSeconds must be an integer)" },
        { "token bucket faster than one credit per microsecond",
          { "default ; resetSeconds=1 creditLimit=1000001 algorithm=gcra" },
          -EINVAL,
          "test:12: rule [default] creditLimit per resetSeconds gives an interval under 1 microsecond (at "
          "most "
          "1000000 credits per second)" },
        { "token bucket at one credit per microsecond",
          { "default ; resetSeconds=1 creditLimit=1000000 algorithm=gcra" },
          0,
          NULL },
        { "sliding window above 2^32-1 credits",
          { "default ; algorithm=sliding-window creditLimit=4294967296 resetSeconds=1" },
          -EINVAL,
          "test:12: rule [default] creditLimit above 4294967295 is not supported by algorithm "
          "sliding-window" },
        { "fixed window keeps the whole range",
          { "default ; creditLimit=9007199254740991 resetSeconds=3155760000" },
          0,
          NULL },
        /* Trivial rules keep their meaning: nothing to prepare, nothing refused. */
        { "trivial deny token-bucket",
          { "default ; creditLimit=0 resetSeconds=60 algorithm=token-bucket burst=5 refillSeconds=7" },
          0,
          NULL },
        { "trivial allow token-bucket with a rate no bucket can have",
          { "default ; creditLimit=9007199254740991 resetSeconds=0 algorithm=token-bucket" },
          0,
          NULL },
        { "trivial sliding-window above its limit",
          { "default ; creditLimit=4294967296 resetSeconds=0 algorithm=sliding-window" },
          0,
          NULL },
        /* Bad values, each at the line of the attribute at fault. */
        { "unknown algorithm",
          { "default ; creditLimit=1 resetSeconds=1 algorithm=leaky-bucket" },
          -EINVAL,
          "test:13: rule [default] has an unknown algorithm \"leaky-bucket\" (accepted: fixed-window, "
          "sliding-window, token-bucket, gcra)" },
        { "algorithm is case-sensitive",
          { "default ; creditLimit=1 resetSeconds=1 algorithm=Token-Bucket" },
          -EINVAL,
          "test:13: rule [default] has an unknown algorithm \"Token-Bucket\"" },
        { "empty algorithm",
          { "default ; creditLimit=1 resetSeconds=1 algorithm=" },
          -EINVAL,
          "test:13: rule [default] has an unknown algorithm \"\"" },
        { "burst without an algorithm",
          { "a=1 ; creditLimit=1 resetSeconds=1 burst=5", "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:13: rule [a=1] sets burst, which only the token-bucket algorithm uses (this rule's "
          "algorithm is fixed-window, the default)" },
        { "burst on sliding-window",
          { "a=1 ; creditLimit=1 resetSeconds=1 algorithm=sliding-window burst=5",
            "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:14: rule [a=1] sets burst, which only the token-bucket algorithm uses (this rule's "
          "algorithm is sliding-window)" },
        { "refillSeconds on fixed-window",
          { "a=1 ; creditLimit=1 resetSeconds=1 refillSeconds=1 algorithm=fixed-window",
            "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:13: rule [a=1] sets refillSeconds, which only the token-bucket algorithm uses (this rule's "
          "algorithm is fixed-window)" },
        { "strict=false on fixed-window is refused too",
          { "a=1 ; creditLimit=1 resetSeconds=1 strict=false", "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:13: rule [a=1] sets strict, which only the token-bucket algorithm uses" },
        { "burst 0",
          { "default ; creditLimit=5 resetSeconds=1 algorithm=token-bucket burst=0" },
          -EINVAL,
          "test:14: rule [default] burst 0 is below the minimum 1 (leave burst out for a capacity of "
          "creditLimit)" },
        { "burst not a number",
          { "default ; creditLimit=5 resetSeconds=1 algorithm=token-bucket burst=5k" },
          -EINVAL,
          "test:14: rule [default] burst \"5k\" is not a non-negative decimal integer" },
        { "burst negative",
          { "default ; creditLimit=5 resetSeconds=1 algorithm=token-bucket burst=-5" },
          -EINVAL,
          "test:14: rule [default] burst \"-5\" is not a non-negative decimal integer" },
        { "burst above the maximum",
          { "default ; creditLimit=5 resetSeconds=1 algorithm=token-bucket burst=9007199254740992" },
          -EINVAL,
          "test:14: rule [default] burst 9007199254740992 is above the maximum 9007199254740991" },
        { "refillSeconds not a number",
          { "default ; creditLimit=5 resetSeconds=1 algorithm=token-bucket refillSeconds=1.5" },
          -EINVAL,
          "test:14: rule [default] refillSeconds \"1.5\" is not a non-negative decimal integer" },
        { "refillSeconds above the maximum",
          { "default ; creditLimit=5 resetSeconds=1 algorithm=token-bucket refillSeconds=3155760001" },
          -EINVAL,
          "test:14: rule [default] refillSeconds 3155760001 is above the maximum 3155760000" },
        { "strict yes",
          { "default ; creditLimit=5 resetSeconds=1 algorithm=token-bucket strict=yes" },
          -EINVAL,
          "test:14: rule [default] has an invalid strict \"yes\" (accepted: true, false)" },
        { "strict is case-sensitive",
          { "default ; creditLimit=5 resetSeconds=1 algorithm=token-bucket strict=True" },
          -EINVAL,
          "test:14: rule [default] has an invalid strict \"True\" (accepted: true, false)" },
        { "strict 1",
          { "default ; creditLimit=5 resetSeconds=1 algorithm=gcra strict=1" },
          -EINVAL,
          "test:14: rule [default] has an invalid strict \"1\"" },
        /* onBackendError (issue #16): every value, on any algorithm and policy; bad values at
         * their line. */
        { "onBackendError allow",
          { "a=1 ; creditLimit=1 resetSeconds=1 onBackendError=allow",
            "default ; creditLimit=0 resetSeconds=0" },
          0,
          NULL },
        { "onBackendError deny on a canary",
          { "a=1 ; creditLimit=1 resetSeconds=1 matchPolicy=canary onBackendError=deny",
            "default ; creditLimit=0 resetSeconds=0" },
          0,
          NULL },
        { "onBackendError local on a token bucket default",
          { "default ; creditLimit=5 resetSeconds=1 algorithm=token-bucket onBackendError=local" },
          0,
          NULL },
        { "onBackendError unknown",
          { "a=1 ; creditLimit=1 resetSeconds=1 onBackendError=fail",
            "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:13: rule [a=1] has an unknown onBackendError \"fail\" (accepted: allow, deny, local)" },
        { "onBackendError is case-sensitive",
          { "default ; creditLimit=0 resetSeconds=0 comment=x onBackendError=Deny" },
          -EINVAL,
          "test:14: rule [default] has an unknown onBackendError \"Deny\" (accepted: allow, deny, local)" },
        { "onBackendError empty",
          { "default ; creditLimit=0 resetSeconds=0 onBackendError=" },
          -EINVAL,
          "test:13: rule [default] has an unknown onBackendError \"\" (accepted: allow, deny, local)" },
        { "onBackendError default is not a value",
          { "default ; onBackendError=default creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:11: rule [default] has an unknown onBackendError \"default\" (accepted: allow, deny, "
          "local)" },
        { "onBackendError twice",
          { "default ; onBackendError=allow creditLimit=0 resetSeconds=0 onBackendError=deny" },
          -EEXIST,
          "test:14: rule [default] sets onBackendError twice (first on line 11)" },
        /* window (issue #34): the windowed algorithms only. */
        { "window aligned on the default algorithm",
          { "a=1 ; creditLimit=1 resetSeconds=60 window=aligned", "default ; creditLimit=0 resetSeconds=0" },
          0,
          NULL },
        { "window aligned on a sliding window default rule",
          { "default ; creditLimit=5 resetSeconds=60 algorithm=sliding-window window=aligned" },
          0,
          NULL },
        { "window first-hit on a token bucket",
          { "default ; creditLimit=5 resetSeconds=60 algorithm=token-bucket window=first-hit" },
          0,
          NULL },
        { "window aligned on a trivial rule",
          { "default ; creditLimit=0 resetSeconds=0 window=aligned" },
          0,
          NULL },
        { "window aligned on a token bucket",
          { "a=1 ; creditLimit=1 resetSeconds=1 algorithm=token-bucket window=aligned",
            "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:14: rule [a=1] sets window aligned, which only the fixed-window and sliding-window "
          "algorithms have (a token bucket has no windows)" },
        { "window aligned on gcra, the window first",
          { "default ; window=aligned creditLimit=5 resetSeconds=60 algorithm=gcra" },
          -EINVAL,
          "test:11: rule [default] sets window aligned" },
        { "window unknown",
          { "a=1 ; creditLimit=1 resetSeconds=1 window=fixed", "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:13: rule [a=1] has an unknown window \"fixed\" (accepted: first-hit, aligned)" },
        { "window is case-sensitive",
          { "default ; creditLimit=0 resetSeconds=0 window=Aligned" },
          -EINVAL,
          "test:13: rule [default] has an unknown window \"Aligned\" (accepted: first-hit, aligned)" },
        { "window empty",
          { "default ; creditLimit=0 resetSeconds=0 window=" },
          -EINVAL,
          "test:13: rule [default] has an unknown window \"\"" },
        { "window twice",
          { "default ; window=aligned creditLimit=0 resetSeconds=0 window=aligned" },
          -EEXIST,
          "test:14: rule [default] sets window twice (first on line 11)" },
        /* matchKeys (issue #34) */
        { "matchKeys exact",
          { "a=1 b=* ; creditLimit=1 resetSeconds=1 matchKeys=exact",
            "default ; creditLimit=0 resetSeconds=0" },
          0,
          NULL },
        { "matchKeys subset on the default rule",
          { "default ; creditLimit=0 resetSeconds=0 matchKeys=subset" },
          0,
          NULL },
        { "matchKeys exact on the default rule",
          { "default ; creditLimit=0 resetSeconds=0 matchKeys=exact" },
          -EINVAL,
          "test:13: rule [default] is a default rule (empty operation) and must have matchKeys subset" },
        { "matchKeys unknown",
          { "a=1 ; creditLimit=1 resetSeconds=1 matchKeys=all", "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:13: rule [a=1] has an unknown matchKeys \"all\" (accepted: subset, exact)" },
        { "matchKeys is case-sensitive",
          { "a=1 ; matchKeys=Exact creditLimit=1 resetSeconds=1", "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:11: rule [a=1] has an unknown matchKeys \"Exact\"" },
        /* Shadowing with matchKeys exact: an exact rule shadows only exact rules of its keys. */
        { "subset shadows exact",
          { "a=1 ; creditLimit=1 resetSeconds=1", "a=1 ; creditLimit=1 resetSeconds=1 matchKeys=exact",
            "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:20: rule [a=1] is unreachable: rule [a=1] (line 10) matches every request it matches" },
        { "exact does not shadow subset",
          { "a=1 ; creditLimit=1 resetSeconds=1 matchKeys=exact", "a=1 ; creditLimit=1 resetSeconds=1",
            "default ; creditLimit=0 resetSeconds=0" },
          0,
          NULL },
        { "exact does not shadow more keys",
          { "a=* ; creditLimit=1 resetSeconds=1 matchKeys=exact",
            "a=1 b=2 ; creditLimit=1 resetSeconds=1 matchKeys=exact",
            "default ; creditLimit=0 resetSeconds=0" },
          0,
          NULL },
        { "exact shadows exact of the same keys",
          { "a=* b=* ; creditLimit=1 resetSeconds=1 matchKeys=exact",
            "b=2 a=1 ; creditLimit=1 resetSeconds=1 matchKeys=exact",
            "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:20: rule [a=1 b=2] is unreachable: rule [a=* b=*] (line 10)" },
        /* actorField of several fields (issue #34) */
        { "actorField of two fields",
          { "a=1 ; creditLimit=1 resetSeconds=1 actorField=ip~user",
            "default ; creditLimit=0 resetSeconds=0" },
          0,
          NULL },
        { "actorField with two spaces",
          { "a=1 ; creditLimit=1 resetSeconds=1 actorField=ip~~user",
            "default ; creditLimit=0 resetSeconds=0" },
          -EINVAL,
          "test:13: rule [a=1] has an empty field name in actorField \"ip  user\" (separate the names by "
          "single spaces)" },
        { "actorField with a leading space",
          { "default ; creditLimit=0 resetSeconds=0 actorField=~ip" },
          -EINVAL,
          "test:13: rule [default] has an empty field name in actorField \" ip\"" },
        { "actorField with a trailing space",
          { "default ; creditLimit=0 resetSeconds=0 actorField=ip~" },
          -EINVAL,
          "test:13: rule [default] has an empty field name in actorField \"ip \"" },
        { "actorField of one space",
          { "default ; creditLimit=0 resetSeconds=0 actorField=~" },
          -EINVAL,
          "has an empty field name in actorField \" \"" },
        { "actorField naming a field twice",
          { "default ; creditLimit=0 resetSeconds=0 actorField=ip~user~ip" },
          -EINVAL,
          "test:13: rule [default] names the field \"ip\" twice in actorField" },
};

START_TEST (test_validation) {
        RuleSet *rs;
        Diag diag;

        diag_init(&diag, "test");
        int r = build(validation_cases[_i].specs, true, &rs, &diag);
        if (r != validation_cases[_i].ret ||
            (validation_cases[_i].msg && !diag_has(&diag, validation_cases[_i].msg)) ||
            (!validation_cases[_i].msg && diag.n_messages > 0)) {
                diag_dump(&diag);
                ck_abort_msg("case \"%s\": got %d, expected %d and \"%s\"", validation_cases[_i].name, r,
                             validation_cases[_i].ret, validation_cases[_i].msg ?: "");
        }
        ck_assert(rs->finalized == (r == 0));
        if (r != 0)
                ck_assert_ptr_null(rs->index);
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

/* onBackendError lands in the rule; absent, it is the daemon's default. */
START_TEST (test_on_backend_error) {
        RuleSet *rs;
        ck_assert_int_eq(build(KV("a=1 ; creditLimit=1 resetSeconds=1 onBackendError=allow",
                                  "a=2 ; creditLimit=1 resetSeconds=1 onBackendError=deny",
                                  "a=3 ; creditLimit=1 resetSeconds=1 onBackendError=local",
                                  "default ; creditLimit=0 resetSeconds=0"),
                               true, &rs, NULL),
                         0);
        ck_assert_int_eq(rs->rules[0].on_backend_error, RULE_ON_ERROR_ALLOW);
        ck_assert_int_eq(rs->rules[1].on_backend_error, RULE_ON_ERROR_DENY);
        ck_assert_int_eq(rs->rules[2].on_backend_error, RULE_ON_ERROR_LOCAL);
        ck_assert_int_eq(rs->rules[3].on_backend_error, RULE_ON_ERROR_DEFAULT);
        ruleset_free(rs);
}
END_TEST

/* Problems that need long or odd input: built by hand. */
START_TEST (test_validation_text) {
        static char big[RULE_TEXT_MAX + 2];
        RuleSet *rs;
        RuleDraft d;
        Diag diag;

        memset(big, 'c', RULE_TEXT_MAX + 1);
        diag_init(&diag, "t");
        ck_assert_int_eq(ruleset_new(NULL, &rs), 0);

        rule_draft_init(&d, 1);
        d.attrs[RULE_ATTR_CREDIT_LIMIT] = d.attrs[RULE_ATTR_RESET_SECONDS] = "1";
        d.attrs[RULE_ATTR_COMMENT] = big;
        ck_assert_int_eq(ruleset_add(rs, &d, &diag), -EINVAL);
        ck_assert(diag_has(&diag, "t:1: rule [default] comment is longer than 4096 bytes"));

        d.attrs[RULE_ATTR_COMMENT] = "tab\there";
        d.attr_lines[RULE_ATTR_COMMENT] = 2;
        ck_assert_int_eq(ruleset_add(rs, &d, &diag), -EINVAL);
        ck_assert(diag_has(&diag, "t:2: rule [default] comment contains control characters"));

        d.attrs[RULE_ATTR_COMMENT] = NULL;
        d.attrs[RULE_ATTR_ACTOR_FIELD] = big;
        ck_assert_int_eq(ruleset_add(rs, &d, &diag), -EINVAL);
        ck_assert(diag_has(&diag, "actorField is longer than 4096 bytes"));
        d.attrs[RULE_ATTR_ACTOR_FIELD] = NULL;

        /* A hand-filled draft that bypassed rule_draft_add_pattern(). */
        d.patterns[0] = (ProtoPair){ { "k", 1 }, { "a\0b", 3 } };
        d.patterns[1] = (ProtoPair){ { "k", 1 }, { "x", 1 } };
        d.n_patterns = 2;
        ck_assert_int_eq(ruleset_add(rs, &d, &diag), -EINVAL);
        ck_assert(diag_has(&diag, "has a NUL byte in an operation key or value"));
        d.patterns[0] = (ProtoPair){ { "k", 1 }, { "y", 1 } };
        ck_assert_int_eq(ruleset_add(rs, &d, &diag), -EINVAL);
        ck_assert(diag_has(&diag, "t:1: rule [k=y k=x] has the operation key \"k\" twice"));
        d.patterns[1] = (ProtoPair){ { "", 0 }, { "x", 1 } };
        ck_assert_int_eq(ruleset_add(rs, &d, &diag), -EINVAL);
        ck_assert(diag_has(&diag, "has an operation key or value that is empty or longer than 4096 bytes"));

        /* Every problem of a rule is reported, not just the first. */
        size_t before = diag.n_messages;
        rule_draft_init(&d, 9);
        d.attrs[RULE_ATTR_CREDIT_LIMIT] = "x";
        d.attrs[RULE_ATTR_MATCH_POLICY] = "sometimes";
        d.attrs[RULE_ATTR_LABEL] = "no way";
        ck_assert_int_eq(ruleset_add(rs, &d, &diag), -EINVAL);
        ck_assert_uint_eq(diag.n_messages - before, 4); /* creditLimit, resetSeconds, policy, label */

        /* A bad operation does not hide a refusal of the algorithm's parameters. */
        before = diag.n_messages;
        rule_draft_init(&d, 9);
        d.patterns[0] = (ProtoPair){ { "", 0 }, { "x", 1 } };
        d.n_patterns = 1;
        d.attrs[RULE_ATTR_CREDIT_LIMIT] = "10";
        d.attrs[RULE_ATTR_RESET_SECONDS] = "60";
        d.attrs[RULE_ATTR_ALGORITHM] = "token-bucket";
        d.attrs[RULE_ATTR_REFILL_SECONDS] = "7";
        d.attr_lines[RULE_ATTR_REFILL_SECONDS] = 12;
        ck_assert_int_eq(ruleset_add(rs, &d, &diag), -EINVAL);
        ck_assert_uint_eq(diag.n_messages - before, 2);
        ck_assert(diag_has(&diag, "t:12: rule [\"\"=x] refillSeconds does not divide resetSeconds"));

        ck_assert_uint_eq(rs->n_rules, 0);
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

START_TEST (test_canary_limit) {
        const char *specs[RULES_CANARY_MAX + 3] = { 0 };
        char bufs[RULES_CANARY_MAX + 2][64];
        RuleSet *rs;
        Diag diag;

        for (int n = RULES_CANARY_MAX; n <= RULES_CANARY_MAX + 1; n++) {
                for (int i = 0; i < n; i++) {
                        snprintf(bufs[i], sizeof bufs[i],
                                 "a=%d ; creditLimit=1 resetSeconds=1 matchPolicy=canary", i);
                        specs[i] = bufs[i];
                }
                specs[n] = "default ; creditLimit=0 resetSeconds=0";
                specs[n + 1] = NULL;
                diag_init(&diag, "t");
                int r = build(specs, true, &rs, &diag);
                if (n == RULES_CANARY_MAX)
                        ck_assert_int_eq(r, 0);
                else {
                        ck_assert_int_eq(r, -EINVAL);
                        ck_assert(diag_has(&diag,
                                           "t:330: rule [a=32] is one canary rule too many: a config has "
                                           "at most 32 canary and continue rules together"));
                }
                ruleset_free(rs);
                diag_done(&diag);
        }
}
END_TEST

/* RULES_CANARY_MAX bounds canary and continue rules together: mixes of both, at the limit
 * and one over it, the one over being either kind. */
START_TEST (test_nonfinal_limit) {
        const char *specs[RULES_CANARY_MAX + 3] = { 0 };
        char bufs[RULES_CANARY_MAX + 2][80], want[160];
        RuleSet *rs;
        Diag diag;

        ck_assert_int_eq(RULES_NONFINAL_MAX, RULES_CANARY_MAX);
        for (int n = RULES_CANARY_MAX; n <= RULES_CANARY_MAX + 1; n++) {
                for (int i = 0; i < n; i++) {
                        /* _i = 0: even rules canary; _i = 1: odd ones (so the last differs) */
                        snprintf(bufs[i], sizeof bufs[i],
                                 "a=%d ; creditLimit=1 resetSeconds=1 matchPolicy=%s", i,
                                 i % 2 == _i ? "canary" : "continue");
                        specs[i] = bufs[i];
                }
                specs[n] = "default ; creditLimit=0 resetSeconds=0";
                specs[n + 1] = NULL;
                diag_init(&diag, "t");
                int r = build(specs, true, &rs, &diag);
                if (n == RULES_CANARY_MAX)
                        ck_assert_int_eq(r, 0);
                else {
                        ck_assert_int_eq(r, -EINVAL);
                        snprintf(want, sizeof want,
                                 "t:330: rule [a=32] is one %s rule too many: a config has at most 32 "
                                 "canary and "
                                 "continue rules together",
                                 _i == 0 ? "canary" : "continue");
                        ck_assert(diag_has(&diag, want));
                        ck_assert_uint_eq(diag.n_messages, 1);
                }
                ruleset_free(rs);
                diag_done(&diag);
        }
}
END_TEST

START_TEST (test_rules_max) {
        RuleSet *rs;
        RuleDraft d;
        Diag diag;

        diag_init(&diag, "t");
        ck_assert_int_eq(ruleset_new(NULL, &rs), 0);
        rule_draft_init(&d, 1);
        d.attrs[RULE_ATTR_CREDIT_LIMIT] = d.attrs[RULE_ATTR_RESET_SECONDS] = "1";
        for (size_t i = 0; i < RULES_MAX; i++)
                ck_assert_int_eq(ruleset_add(rs, &d, &diag), 0);
        ck_assert_int_eq(ruleset_add(rs, &d, &diag), -EINVAL);
        ck_assert(diag_has(&diag, "t:1: rule [default] is one too many: a config has at most 100000 rules"));
        ck_assert_uint_eq(rs->n_rules, RULES_MAX);
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

START_TEST (test_finalize_twice) {
        RuleSet *rs;
        RuleDraft d;

        ck_assert_int_eq(build(KV("default ; creditLimit=1 resetSeconds=0"), true, &rs, NULL), 0);
        ck_assert_int_eq(ruleset_finalize(rs, NULL), -EBUSY);
        rule_draft_init(&d, 1);
        ck_assert_int_eq(ruleset_add(rs, &d, NULL), -EBUSY);
        ck_assert_ptr_null(ruleset_free(rs));
        ck_assert_ptr_null(ruleset_free(NULL));
}
END_TEST

/* ---- globs ---------------------------------------------------------------------------- */

static const struct {
        const char *pattern, *value;
        bool match;
} glob_cases[] = {
        { "*", "", true },
        { "*", "anything", true },
        { "/a/*", "/a/", true },
        { "/a/*", "/a/b", true },
        { "/a/*", "/a/b/c", true },
        { "/a/*", "/a", false },
        { "/a/*", "/b/a/", false },
        { "*/c", "/c", true },
        { "*/c", "/a/b/c", true },
        { "*/c", "/a/b/c/", false },
        { "*/c", "/a/b/cd", false },
        { "/a/*/c", "/a/b/c", true },
        { "/a/*/c", "/a//c", true },
        { "/a/*/c", "/a/b/x/c", true },
        { "/a/*/c", "/a/b/c/d", false }, /* divvy's prefix-only bug: must not match */
        { "/a/*/c", "/a/c", false },     /* the two anchors may not overlap */
        { "a*b*c", "abc", true },
        { "a*b*c", "aXbYc", true },
        { "a*b*c", "acb", false },
        { "a*b*c", "abcb", false },
        { "a*b*c", "abcbc", true },
        { "a*a", "a", false },
        { "a*a", "aa", true },
        { "**", "", true },
        { "**", "x", true },
        { "a**b", "ab", true },
        { "a**b", "aXYb", true },
        { "a**b", "aXYbc", false },
        { "*a*", "bab", true },
        { "*a*", "bbb", false },
        { "*ab*ab*", "abab", true },
        { "*ab*ab*", "aba", false },
        { "x*y*z", "xyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyz", true },
        { "x*y*y*y*y*y*y*z", "xyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy", false },
        { "/caf\xc3\xa9/*", "/caf\xc3\xa9/cr\xc3\xa8me", true }, /* multibyte: bytes compare */
        { "*\xc3\xa8me", "/caf\xc3\xa9/cr\xc3\xa8me", true },
        { "/caf\xc3\xa9/*", "/cafe/x", false },
        { "\xe2\x98\x83*\xe2\x98\x83", "\xe2\x98\x83\xe2\x98\x83", true },
        { "exact", "exact", true },
        { "exact", "exac", false },
        { "exact", "exactt", false },
        { "", "", true },
        { "", "x", false },
};

START_TEST (test_globs) {
        const char *pat = glob_cases[_i].pattern, *val = glob_cases[_i].value;
        RuleSet *rs;
        RuleDraft d;

        ck_assert_int_eq(ruleset_new(NULL, &rs), 0);
        rule_draft_init(&d, 1);
        ck_assert_int_eq(rule_draft_add_pattern(&d, "k", 1, pat, strlen(pat)), 0);
        d.attrs[RULE_ATTR_CREDIT_LIMIT] = d.attrs[RULE_ATTR_RESET_SECONDS] = "1";
        ck_assert_int_eq(ruleset_add(rs, &d, NULL), 0);

        const RulePattern *p = &rs->rules[0].patterns[0];
        ck_assert_int_eq(p->kind, strcmp(pat, "*") == 0 ? PATTERN_ANY
                                  : strchr(pat, '*')    ? PATTERN_GLOB
                                                        : PATTERN_EXACT);
        ck_assert_msg(rule_pattern_match(p, val, strlen(val)) == glob_cases[_i].match, "\"%s\" ~ \"%s\"",
                      pat, val);
        ruleset_free(rs);
}
END_TEST

START_TEST (test_glob_segments) {
        static const struct {
                const char *pattern;
                size_t n;
                const char *segs[3];
                bool start, end;
        } cases[] = {
                { "/a/*", 1, { "/a/" }, true, false },         { "*/c", 1, { "/c" }, false, true },
                { "a*b*c", 3, { "a", "b", "c" }, true, true }, { "**", 0, { NULL }, false, false },
                { "*x**y*", 2, { "x", "y" }, false, false },
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
                RuleSet *rs;
                RuleDraft d;

                ck_assert_int_eq(ruleset_new(NULL, &rs), 0);
                rule_draft_init(&d, 1);
                ck_assert_int_eq(
                        rule_draft_add_pattern(&d, "k", 1, cases[c].pattern, strlen(cases[c].pattern)), 0);
                d.attrs[RULE_ATTR_CREDIT_LIMIT] = d.attrs[RULE_ATTR_RESET_SECONDS] = "1";
                ck_assert_int_eq(ruleset_add(rs, &d, NULL), 0);
                const RulePattern *p = &rs->rules[0].patterns[0];
                ck_assert_int_eq(p->kind, PATTERN_GLOB);
                ck_assert_uint_eq(p->n_segments, cases[c].n);
                ck_assert(p->anchored_start == cases[c].start);
                ck_assert(p->anchored_end == cases[c].end);
                for (size_t i = 0; i < p->n_segments; i++) {
                        ck_assert_uint_eq(p->segments[i].len, strlen(cases[c].segs[i]));
                        ck_assert(memcmp(p->segments[i].ptr, cases[c].segs[i], p->segments[i].len) == 0);
                        /* segments point into the pattern's own value */
                        ck_assert(p->segments[i].ptr >= p->value &&
                                  p->segments[i].ptr < p->value + p->value_len);
                }
                ruleset_free(rs);
        }
}
END_TEST

/* ---- matching: the README's examples ------------------------------------------------------- */

START_TEST (test_readme_pantry) {
        char abuf[RULE_ACTOR_COMBINED_MAX];
        RuleSet *rs;
        Diag diag;
        const Rule *out[RULES_MATCH_MAX];
        ProtoRequest req;

        diag_init(&diag, "example.ini");
        ck_assert_int_eq(
                build(KV("method=GET path=/status ; creditLimit=1000 resetSeconds=60 label=status",
                         "method=GET path=/pantry/cookies/special-cookie ; creditLimit=1 resetSeconds=86400 "
                         "matchPolicy=canary label=special",
                         "method=GET path=/pantry/cookies/* ip=* ; creditLimit=3 resetSeconds=3600 "
                         "actorField=ip "
                         "label=cookies",
                         "method=GET path=/pantry/* ip=* ; creditLimit=1 resetSeconds=3600 actorField=ip "
                         "label=pantry",
                         "method=GET path=/crisper/carrots userId=* ; creditLimit=10 resetSeconds=60 "
                         "actorField=userId label=carrots",
                         "default ; creditLimit=0 resetSeconds=0 label=deny"),
                      true, &rs, &diag),
                0);
        ck_assert_uint_eq(diag.n_messages, 0);

        expect_match(rs, KV("method", "GET", "path", "/status"), "status");
        expect_match(rs, KV("path", "/status", "method", "GET", "extra", "ignored"), "status");
        expect_match(rs, KV("method", "POST", "path", "/status"), "deny");
        expect_match(rs, KV("method", "GET", "path", "/pantry/cookies/chocolate-chip", "ip", "192.168.1.1"),
                     "cookies");
        expect_match(rs, KV("method", "GET", "path", "/pantry/cookies/oatmeal", "ip", "4.3.2.1"), "cookies");
        /* The canary is returned first, then the rule that answers. */
        expect_match(rs, KV("method", "GET", "path", "/pantry/cookies/special-cookie", "ip", "192.168.1.1"),
                     "special,cookies");
        /* Without ip the canary still counts; the answer falls to the default. */
        expect_match(rs, KV("method", "GET", "path", "/pantry/cookies/special-cookie"), "special,deny");
        expect_match(rs, KV("method", "GET", "path", "/pantry/jam", "ip", "1.1.1.1"), "pantry");
        expect_match(rs, KV("method", "GET", "path", "/pantry/jam"), "deny"); /* '*' needs the key present */
        expect_match(rs, KV("method", "GET", "path", "/pantry/", "ip", ""), "pantry");
        expect_match(rs, KV("method", "GET", "path", "/crisper/carrots", "userId", "u1"), "carrots");
        expect_match(rs, KV("method", "GET", "path", "/crisper/carrots/baby", "userId", "u1"), "deny");
        expect_match(rs, KV("x", "y"), "deny");
        expect_match(rs, KV("a", "b"), "deny");

        /* Actors. */
        req_fill(&req, KV("method", "GET", "path", "/pantry/cookies/oatmeal", "ip", "4.3.2.1"));
        ck_assert_uint_eq(ruleset_match(rs, &req, out), 1);
        ProtoSlice a = rule_actor(out[0], &req, abuf);
        ck_assert_uint_eq(a.len, 7);
        ck_assert(memcmp(a.ptr, "4.3.2.1", 7) == 0);
        req_fill(&req, KV("method", "GET", "path", "/crisper/carrots", "userId", "alice", "ip", "1.2.3.4"));
        ck_assert_uint_eq(ruleset_match(rs, &req, out), 1);
        a = rule_actor(out[0], &req, abuf);
        ck_assert_uint_eq(a.len, 5);
        ck_assert(memcmp(a.ptr, "alice", 5) == 0);
        req_fill(&req, KV("method", "GET", "path", "/status"));
        ck_assert_uint_eq(ruleset_match(rs, &req, out), 1);
        ck_assert_ptr_null(rule_actor(out[0], &req, abuf).ptr); /* no actorField: one shared counter */

        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

START_TEST (test_actor_absent) {
        char abuf[RULE_ACTOR_COMBINED_MAX];
        const Rule *out[RULES_MATCH_MAX];
        ProtoRequest req;
        RuleSet *rs;

        ck_assert_int_eq(build(KV("method=GET ; creditLimit=5 resetSeconds=60 actorField=ip label=get",
                                  "default ; creditLimit=1 resetSeconds=0 label=accept"),
                               true, &rs, NULL),
                         0);
        req_fill(&req, KV("method", "GET"));
        ck_assert_uint_eq(ruleset_match(rs, &req, out), 1);
        ProtoSlice a = rule_actor(out[0], &req, abuf);
        ck_assert_ptr_nonnull(a.ptr); /* '' when the field is absent: not "no actor" */
        ck_assert_uint_eq(a.len, 0);
        expect_match(rs, KV("method", "POST"), "accept");
        ruleset_free(rs);
}
END_TEST

/* The actor of rule (first of rs) for the request kv, as a string ("-" for none). */
static const char *actor_of(const RuleSet *rs, const char *const *kv, char *out, size_t size) {
        char buf[RULE_ACTOR_COMBINED_MAX];
        ProtoRequest req;

        req_fill(&req, kv);
        ProtoSlice a = rule_actor(&rs->rules[0], &req, buf);
        ck_assert_uint_le(a.len, RULE_ACTOR_COMBINED_MAX);
        ck_assert_uint_lt(a.len, size);
        if (!a.ptr)
                snprintf(out, size, "-");
        else {
                memcpy(out, a.ptr, a.len);
                out[a.len] = '\0';
        }
        return out;
}

/* An actorField of several fields: one actor per combination of their values, in the order
 * written, each value a netstring; absent fields count as empty; a long combination is its
 * hash. One field is the value itself, a slice of the request, as before. */
START_TEST (test_actor_fields) {
        static const char *const tricky[] = { "",      "a",   "b",   ",", ":",  "1:a,",
                                              "a,1:b", "0:,", "1:,", "#", "a b" };
        enum { N = sizeof tricky / sizeof tricky[0] };
        static char got[N][N][RULE_ACTOR_COMBINED_MAX + 1];
        char a[RULE_ACTOR_COMBINED_MAX + 1], b[RULE_ACTOR_COMBINED_MAX + 1], buf[RULE_ACTOR_COMBINED_MAX];
        char long_value[300];
        RuleSet *rs;

        ck_assert_int_eq(
                build(KV("default ; creditLimit=5 resetSeconds=60 actorField=ip~user"), true, &rs, NULL), 0);
        ck_assert_str_eq(actor_of(rs, KV("ip", "1.2.3.4", "user", "alice"), a, sizeof a),
                         "7:1.2.3.4,5:alice,");
        ck_assert_str_eq(actor_of(rs, KV("user", "alice", "x", "y", "ip", "1.2.3.4"), a, sizeof a),
                         "7:1.2.3.4,5:alice,");
        ck_assert_str_eq(actor_of(rs, KV("ip", "1.2.3.4"), a, sizeof a), "7:1.2.3.4,0:,");
        ck_assert_str_eq(actor_of(rs, KV("ip", "1.2.3.4", "user", ""), a, sizeof a), "7:1.2.3.4,0:,");
        ck_assert_str_eq(actor_of(rs, KV("user", "alice"), a, sizeof a), "0:,5:alice,");
        ck_assert_str_eq(actor_of(rs, KV("method", "GET"), a, sizeof a), "0:,0:,");
        /* unambiguous: two combinations have one actor only if they are one */
        for (size_t i = 0; i < N; i++)
                for (size_t j = 0; j < N; j++)
                        actor_of(rs, KV("ip", tricky[i], "user", tricky[j]), got[i][j], sizeof got[i][j]);
        for (size_t i = 0; i < N * N; i++)
                for (size_t j = i + 1; j < N * N; j++)
                        ck_assert_msg(strcmp(got[i / N][i % N], got[j / N][j % N]) != 0, "%s",
                                      got[i / N][i % N]);
        /* the longest combination kept as it is, and one byte more: its hash */
        memset(long_value, 'v', sizeof long_value);
        long_value[247] = '\0'; /* "247:" + 247 bytes + "," + "1:x," = 256 */
        actor_of(rs, KV("ip", long_value, "user", "x"), a, sizeof a);
        ck_assert_uint_eq(strlen(a), 256);
        ck_assert(strncmp(a, "247:vvv", 7) == 0 && strcmp(a + 252, "1:x,") == 0);
        actor_of(rs, KV("ip", long_value, "user", "xy"), a, sizeof a);
        ck_assert_uint_eq(strlen(a), 33);
        ck_assert_int_eq(a[0], '#');
        {
                uint8_t h[2][HASH128_SIZE], want[HASH128_SIZE];
                char hex[2 * HASH128_SIZE + 2] = "#";

                hash128(long_value, strlen(long_value), h[0]);
                hash128("xy", 2, h[1]);
                hash128(h, sizeof h, want);
                for (size_t i = 0; i < HASH128_SIZE; i++)
                        snprintf(hex + 1 + 2 * i, 3, "%02x", want[i]);
                ck_assert_str_eq(a, hex);
        }
        actor_of(rs, KV("ip", long_value, "user", "xz"), b, sizeof b);
        ck_assert_str_ne(a, b);
        actor_of(rs, KV("user", "xy", "ip", long_value), b, sizeof b);
        ck_assert_str_eq(a, b);
        actor_of(rs, KV("ip", "xy", "user", long_value), b, sizeof b); /* the order of the fields counts */
        ck_assert_str_ne(a, b);
        ruleset_free(rs);

        /* one field: the value, a slice of the request (buf untouched), as before */
        ck_assert_int_eq(build(KV("default ; creditLimit=5 resetSeconds=60 actorField=ip"), true, &rs, NULL),
                         0);
        ProtoRequest req;
        req_fill(&req, KV("ip", long_value));
        ProtoSlice s = rule_actor(&rs->rules[0], &req, buf);
        ck_assert_ptr_eq(s.ptr, long_value);
        ck_assert_uint_eq(s.len, strlen(long_value));
        ck_assert_str_eq(actor_of(rs, KV("user", "x"), a, sizeof a), "");
        ruleset_free(rs);
        /* none: NULL */
        ck_assert_int_eq(build(KV("default ; creditLimit=5 resetSeconds=60"), true, &rs, NULL), 0);
        ck_assert_str_eq(actor_of(rs, KV("ip", "x"), a, sizeof a), "-");
        ruleset_free(rs);
}
END_TEST

/* matchKeys exact: exactly the rule's keys, no other field; subset rules as before. */
START_TEST (test_match_keys) {
        RuleSet *rs;

        ck_assert_int_eq(
                build(KV("domain=api path=* ; creditLimit=5 resetSeconds=60 matchKeys=exact label=api-path",
                         "domain=api ; creditLimit=5 resetSeconds=60 matchKeys=exact label=api",
                         "domain=api user=* ; creditLimit=5 resetSeconds=60 label=api-user",
                         "domain=web ; creditLimit=5 resetSeconds=60 label=web",
                         "default ; creditLimit=1 resetSeconds=0 label=other"),
                      true, &rs, NULL),
                0);
        expect_match(rs, KV("domain", "api", "path", "/x"), "api-path");
        expect_match(rs, KV("path", "/x", "domain", "api"), "api-path");
        expect_match(rs, KV("domain", "api"), "api");
        /* a field more: not the exact rules, whatever the field */
        expect_match(rs, KV("domain", "api", "path", "/x", "method", "GET"), "other");
        expect_match(rs, KV("domain", "api", "method", "GET"), "other");
        expect_match(rs, KV("domain", "api", "user", "u", "path", "/x"), "api-user");
        expect_match(rs, KV("domain", "api", "user", "u"), "api-user");
        /* a key of the rule missing, or its value not matching */
        expect_match(rs, KV("path", "/x"), "other");
        expect_match(rs, KV("domain", "API", "path", "/x"), "other");
        /* subset rules still ignore other fields */
        expect_match(rs, KV("domain", "web", "path", "/x", "user", "u"), "web");
        ruleset_free(rs);
}
END_TEST

START_TEST (test_birthday_cake) {
        RuleSet *rs;
        Diag diag;

        diag_init(&diag, "cake.ini");
        ck_assert_int_eq(
                build(KV("method=POST path=/kitchen/oven/birthday-cake ; creditLimit=1 "
                         "resetSeconds=31536000 "
                         "actorField=userId label=one-cake-a-year "
                         "comment=one~birthday~cake~per~user~per~year",
                         "method=POST path=/kitchen/oven/*-cake ; creditLimit=3 resetSeconds=86400 "
                         "label=cakes",
                         "method=POST path=/kitchen/oven/* ; creditLimit=10 resetSeconds=3600 label=oven",
                         "method=GET path=/kitchen/* ; creditLimit=1 resetSeconds=0 label=look",
                         "default ; creditLimit=1 resetSeconds=0 label=accept"),
                      true, &rs, &diag),
                0);
        expect_match(rs, KV("method", "POST", "path", "/kitchen/oven/birthday-cake", "userId", "u"),
                     "one-cake-a-year");
        expect_match(rs, KV("method", "POST", "path", "/kitchen/oven/carrot-cake"), "cakes");
        expect_match(rs, KV("method", "POST", "path", "/kitchen/oven/cake"), "oven");
        expect_match(rs, KV("method", "POST", "path", "/kitchen/oven/carrot-cake/slice"), "oven");
        expect_match(rs, KV("method", "GET", "path", "/kitchen/oven/birthday-cake"), "look");
        expect_match(rs, KV("method", "PUT", "path", "/kitchen/oven/birthday-cake"), "accept");
        ck_assert_str_eq(rs->rules[0].comment, "one birthday cake per user per year");
        ck_assert_int_eq(rs->rules[2].match_policy, MATCH_POLICY_STOP);
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

START_TEST (test_default_deny_accept) {
        RuleSet *rs;

        ck_assert_int_eq(
                build(KV("default ; creditLimit=0 resetSeconds=0 comment=Default~deny!"), true, &rs, NULL),
                0);
        ck_assert_uint_eq(rs->rules[0].credit_limit, 0);
        ck_assert_uint_eq(rs->rules[0].reset_seconds, 0);
        ck_assert_str_eq(rs->rules[0].comment, "Default deny!");
        ck_assert_ptr_null(rs->rules[0].label);
        ck_assert_ptr_null(rs->rules[0].actor_field);
        const Rule *out[RULES_MATCH_MAX];
        ProtoRequest req;
        req_fill(&req, KV("method", "GET"));
        ck_assert_uint_eq(ruleset_match(rs, &req, out), 1);
        ck_assert_ptr_eq(out[0], &rs->rules[0]);
        req_fill(&req, KV(NULL, NULL));
        ck_assert_uint_eq(ruleset_match(rs, &req, out), 1); /* a HIT with no pairs */
        ruleset_free(rs);

        ck_assert_int_eq(build(KV("default ; creditLimit=1 resetSeconds=0"), true, &rs, NULL), 0);
        ck_assert_uint_eq(rs->rules[0].credit_limit, 1);
        ruleset_free(rs);
}
END_TEST

/* creditLimit 0 denies whatever resetSeconds says; resetSeconds 0 then allows; only a
 * rule with both positive needs its counter. Rules built from text, as a config would. */
static const struct {
        const char *spec;
        RuleTrivial want;
} trivial_cases[] = {
        { "default ; creditLimit=0 resetSeconds=0", RULE_TRIVIAL_DENY },
        { "a=1 ; creditLimit=0 resetSeconds=60", RULE_TRIVIAL_DENY },
        { "a=1 ; creditLimit=0 resetSeconds=3155760000", RULE_TRIVIAL_DENY },
        { "a=1 ; creditLimit=1 resetSeconds=0", RULE_TRIVIAL_ALLOW },
        { "a=1 ; creditLimit=9007199254740991 resetSeconds=0 actorField=ip", RULE_TRIVIAL_ALLOW },
        { "a=1 ; creditLimit=1 resetSeconds=1", RULE_TRIVIAL_NONE },
        { "a=1 ; creditLimit=5 resetSeconds=60 matchPolicy=canary", RULE_TRIVIAL_NONE },
        { "a=1 ; creditLimit=0 resetSeconds=0 matchPolicy=canary", RULE_TRIVIAL_DENY },
};

START_TEST (test_trivial_decision) {
        RuleSet *rs;

        ck_assert_int_eq(build((const char *const[]){ trivial_cases[_i].spec, NULL }, false, &rs, NULL), 0);
        ck_assert_uint_eq(rs->n_rules, 1);
        ck_assert_msg(rule_trivial_decision(&rs->rules[0]) == trivial_cases[_i].want, "%s: %d, expected %d",
                      trivial_cases[_i].spec, rule_trivial_decision(&rs->rules[0]), trivial_cases[_i].want);
        ruleset_free(rs);
}
END_TEST

/* ---- describe --------------------------------------------------------------------------------- */

START_TEST (test_describe) {
        char buf[RULE_DESCRIBE_MAX], small[16];
        RuleSet *rs;
        RuleDraft d;

        ck_assert_int_eq(ruleset_new(NULL, &rs), 0);
        rule_draft_init(&d, 1);
        ck_assert_int_eq(rule_draft_add_pattern(&d, "path", 4, "/x", 2), 0);
        ck_assert_int_eq(rule_draft_add_pattern(&d, "method", 6, "GET", 3), 0);
        ck_assert_int_eq(rule_draft_add_pattern(&d, "q", 1, "a b", 3), 0);
        ck_assert_int_eq(rule_draft_add_pattern(&d, "e", 1, "", 0), 0);
        ck_assert_int_eq(rule_draft_add_pattern(&d, "x=y", 3, "1=2", 3), 0);
        ck_assert_int_eq(rule_draft_add_pattern(&d, "z", 1, "say \"hi\"\n", 9), 0);
        d.attrs[RULE_ATTR_CREDIT_LIMIT] = d.attrs[RULE_ATTR_RESET_SECONDS] = "1";
        const char *expect = "[e=\"\" method=GET path=/x q=\"a b\" \"x=y\"=\"1=2\" z=\"say ?hi??\"]";
        ck_assert_str_eq(rule_draft_describe(&d, buf, sizeof buf), expect);
        ck_assert_int_eq(ruleset_add(rs, &d, NULL), 0);
        ck_assert_str_eq(rule_describe(&rs->rules[0], buf, sizeof buf), expect);

        /* Truncation: always NUL-terminated, ends in "...]", fits. */
        ck_assert_str_eq(rule_describe(&rs->rules[0], small, sizeof small), "[e=\"\" metho...]");
        for (size_t size = 1; size <= strlen(expect) + 1; size++) {
                char b[128];
                memset(b, 'Z', sizeof b);
                rule_describe(&rs->rules[0], b, size);
                ck_assert_uint_lt(strlen(b), size);
                ck_assert_int_eq(b[size], 'Z');
                if (size >= 5 && size <= strlen(expect))
                        ck_assert_str_eq(b + strlen(b) - 4, "...]");
        }
        ck_assert_ptr_eq(rule_describe(&rs->rules[0], small, 0), small);
        ruleset_free(rs);

        /* Cutting never splits a UTF-8 character. */
        ck_assert_int_eq(ruleset_new(NULL, &rs), 0);
        rule_draft_init(&d, 1);
        ck_assert_int_eq(rule_draft_add_pattern(&d, "k", 1, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 8), 0);
        d.attrs[RULE_ATTR_CREDIT_LIMIT] = d.attrs[RULE_ATTR_RESET_SECONDS] = "1";
        ck_assert_int_eq(ruleset_add(rs, &d, NULL), 0);
        char b10[10], b11[11];
        ck_assert_str_eq(rule_describe(&rs->rules[0], b10, sizeof b10), "[k=\xc3\xa9...]");
        ck_assert_str_eq(rule_describe(&rs->rules[0], b11, sizeof b11),
                         "[k=\xc3\xa9...]"); /* not mid-char */
        ruleset_free(rs);

        rule_draft_init(&d, 1);
        ck_assert_str_eq(rule_draft_describe(&d, buf, sizeof buf), "[default]");
}
END_TEST

/* ---- canary and continue ------------------------------------------------------------------- */

/* One config, requests and the rules each touches, in order. Labels: cnN canary, ctN
 * continue, sN stop. */
static const char *const policy_specs[] = {
        "path=/x method=GET ; creditLimit=1 resetSeconds=9 matchPolicy=canary label=cn1",
        "path=/x ; creditLimit=2 resetSeconds=9 matchPolicy=continue label=ct1",
        "method=GET ; creditLimit=3 resetSeconds=9 matchPolicy=continue label=ct2",
        "path=/x method=GET ; creditLimit=4 resetSeconds=9 label=s1",
        "path=/y ; creditLimit=5 resetSeconds=9 matchPolicy=canary label=cn2",
        "path=/y* user=* ; creditLimit=5 resetSeconds=9 matchPolicy=continue actorField=user label=ct3",
        "path=/x ; creditLimit=6 resetSeconds=9 label=s2",
        "path=/y user=root ; creditLimit=7 resetSeconds=9 label=s3",
        "path=/z ; creditLimit=8 resetSeconds=9 matchPolicy=continue label=ct4",
        "path=/z ; creditLimit=8 resetSeconds=9 matchPolicy=canary label=cn3",
        "default ; creditLimit=0 resetSeconds=0 label=def",
        NULL,
};

static const struct {
        const char *kv[8];
        const char *labels;
        size_t n_enforcing;
} policy_cases[] = {
        { { "method", "GET", "path", "/x" }, "cn1,ct1,ct2,s1", 3 },
        { { "method", "POST", "path", "/x" }, "ct1,s2", 2 },
        { { "method", "GET", "path", "/y" }, "ct2,cn2,def", 2 },
        { { "method", "GET", "path", "/y", "user", "root" }, "ct2,cn2,ct3,s3", 3 },
        { { "method", "PUT", "path", "/yy", "user", "root" }, "ct3,def", 2 },
        { { "method", "PUT", "path", "/y", "user", "bob" }, "cn2,ct3,def", 2 },
        { { "path", "/z" }, "ct4,cn3,def", 2 },
        { { "method", "GET" }, "ct2,def", 2 },
        { { "method", "POST" }, "def", 1 },
        { { "path", "/x", "method", "GET", "user", "u" }, "cn1,ct1,ct2,s1", 3 },
};

START_TEST (test_policy_match) {
        const Rule *out[RULES_MATCH_MAX];
        ProtoRequest req;
        RuleSet *rs;
        size_t n, enforcing = 0;

        ck_assert_int_eq(build(policy_specs, true, &rs, NULL), 0);
        /* expect_match() also compares with the brute-force matcher. */
        expect_match(rs, policy_cases[_i].kv, policy_cases[_i].labels);
        req_fill(&req, policy_cases[_i].kv);
        n = ruleset_match(rs, &req, out);
        for (size_t i = 0; i < n; i++)
                enforcing += rule_enforcing(out[i]);
        ck_assert_uint_eq(enforcing, policy_cases[_i].n_enforcing);
        ck_assert_int_eq(out[n - 1]->match_policy, MATCH_POLICY_STOP);
        ruleset_free(rs);
}
END_TEST

START_TEST (test_rule_enforcing) {
        Rule r = { .match_policy = MATCH_POLICY_STOP };
        ck_assert(rule_enforcing(&r));
        r.match_policy = MATCH_POLICY_CONTINUE;
        ck_assert(rule_enforcing(&r));
        r.match_policy = MATCH_POLICY_CANARY;
        ck_assert(!rule_enforcing(&r));
}
END_TEST

/* The index in use (one value per rule on "path") with continue and canary rules among
 * thousands of stop rules, indexed and not: every request walks the same rules as the
 * brute-force matcher, in config order. */
START_TEST (test_policy_index_large) {
        enum { N = 3000 };
        char(*bufs)[112] = malloc((N + 64) * sizeof(*bufs));
        const char **specs = malloc((N + 64) * sizeof(char *));
        char desc[256], path[32], want[64];
        RuleSet *rs;
        size_t n = 0;

        ck_assert_ptr_nonnull(bufs);
        ck_assert_ptr_nonnull(specs);
        /* 30 non-final rules in all: indexed continue rules for /api/0, /api/100, ..., a
         * canary for /api/50, and non-indexed continue rules on method and a glob. */
        for (int i = 0; i < N; i++) {
                if (i % 100 == 0 && i < 2700) {
                        snprintf(bufs[n], sizeof bufs[n],
                                 "path=/api/%d ; creditLimit=1 resetSeconds=60 matchPolicy=continue "
                                 "label=ct%d",
                                 i, i);
                        specs[n] = bufs[n];
                        n++;
                }
                if (i == 50) {
                        snprintf(bufs[n], sizeof bufs[n],
                                 "path=/api/50 ; creditLimit=1 resetSeconds=60 matchPolicy=canary "
                                 "label=cn50");
                        specs[n] = bufs[n];
                        n++;
                }
                if (i == 1000) {
                        specs[n++] = "method=POST ; creditLimit=1 resetSeconds=60 matchPolicy=continue "
                                     "label=post";
                        specs[n++] = "path=/api/2* ; creditLimit=1 resetSeconds=60 matchPolicy=continue "
                                     "label=api2";
                }
                snprintf(bufs[n], sizeof bufs[n],
                         "path=/api/%d method=* ; creditLimit=%d resetSeconds=60 label=r%d", i, i, i);
                specs[n] = bufs[n];
                n++;
        }
        specs[n++] = "default ; creditLimit=0 resetSeconds=0 label=deny";
        specs[n] = NULL;
        ck_assert_int_eq(build(specs, true, &rs, NULL), 0);
        ck_assert_str_eq(ruleset_index_describe(rs, desc, sizeof desc),
                         "index on \"path\": 3028 rules under 3000 values, 3 other rules");

        expect_match(rs, KV("method", "GET", "path", "/api/0"), "ct0,r0");
        expect_match(rs, KV("method", "GET", "path", "/api/50"), "cn50,r50");
        expect_match(rs, KV("method", "POST", "path", "/api/50"), "cn50,r50"); /* POST comes later */
        expect_match(rs, KV("method", "POST", "path", "/api/1550"), "post,r1550");
        expect_match(rs, KV("method", "POST", "path", "/api/2550"), "post,api2,r2550");
        expect_match(rs, KV("method", "POST", "path", "/api/2600"), "post,api2,ct2600,r2600");
        expect_match(rs, KV("method", "GET", "path", "/api/2600"), "api2,ct2600,r2600");
        expect_match(rs, KV("method", "GET", "path", "/api/2800"), "api2,r2800");
        expect_match(rs, KV("method", "POST", "path", "/api/20000"), "post,api2,deny");
        expect_match(rs, KV("path", "/api/700"), "ct700,deny"); /* r700 needs a method */
        for (int i = 0; i < N; i += 7) {
                snprintf(path, sizeof path, "/api/%d", i);
                bool api2 = i >= 1000 && strncmp(path, "/api/2", 6) == 0, ct = i % 100 == 0 && i < 2700;
                if (ct)
                        snprintf(want, sizeof want, "%sct%d,r%d", api2 ? "api2," : "", i, i);
                else
                        snprintf(want, sizeof want, "%sr%d", api2 ? "api2," : "", i);
                expect_match(rs, KV("method", "GET", "path", path), want);
        }
        ruleset_free(rs);
        free(specs);
        free(bufs);
}
END_TEST

/* ---- identity --------------------------------------------------------------------------------- */

static void rule_id_of(const char *spec, uint8_t id[RULE_ID_SIZE]) {
        RuleSet *rs;
        ck_assert_int_eq(build((const char *const[]){ spec, NULL }, false, &rs, NULL), 0);
        ck_assert_uint_eq(rs->n_rules, 1);
        memcpy(id, rs->rules[0].id, RULE_ID_SIZE);
        ruleset_free(rs);
}

static const struct {
        const char *a, *b;
        bool same;
} identity_cases[] = {
        { "a=1 b=2 ; creditLimit=5 resetSeconds=60", "b=2 a=1 ; creditLimit=5 resetSeconds=60", true },
        { "a=1 ; creditLimit=5 resetSeconds=60 label=x comment=c",
          "a=1 ; creditLimit=5 resetSeconds=60 label=y comment=d", true },
        { "a=1 ; creditLimit=5 resetSeconds=60", "a=1 ; creditLimit=5 resetSeconds=60 matchPolicy=canary",
          true },
        { "a=1 ; creditLimit=5 resetSeconds=60", "a=1 ; resetSeconds=60 creditLimit=005", true },
        { "a=1 ; creditLimit=5 resetSeconds=60", "a=1 ; creditLimit=6 resetSeconds=60", false },
        { "a=1 ; creditLimit=5 resetSeconds=60", "a=1 ; creditLimit=5 resetSeconds=61", false },
        { "a=1 ; creditLimit=5 resetSeconds=60", "a=2 ; creditLimit=5 resetSeconds=60", false },
        { "a=1 ; creditLimit=5 resetSeconds=60", "b=1 ; creditLimit=5 resetSeconds=60", false },
        { "a=1 ; creditLimit=5 resetSeconds=60", "a=1 b=2 ; creditLimit=5 resetSeconds=60", false },
        { "a=1 ; creditLimit=5 resetSeconds=60", "a=1 ; creditLimit=5 resetSeconds=60 actorField=ip",
          false },
        { "a=1 ; creditLimit=5 resetSeconds=60 actorField=ip",
          "a=1 ; creditLimit=5 resetSeconds=60 actorField=ua", false },
        { "a=1 ; creditLimit=5 resetSeconds=60", "a=* ; creditLimit=5 resetSeconds=60", false },
        /* Unambiguous encoding: moving bytes between key and value changes the id. */
        { "ab=c ; creditLimit=5 resetSeconds=60", "a=bc ; creditLimit=5 resetSeconds=60", false },
        { "a=1 b=2 ; creditLimit=5 resetSeconds=60", "a=1b=2 ; creditLimit=5 resetSeconds=60", false },
        { "a=1 ; creditLimit=60 resetSeconds=5", "a=1 ; creditLimit=5 resetSeconds=60", false },
        { "default ; creditLimit=0 resetSeconds=0", "default ; creditLimit=0 resetSeconds=0 comment=x",
          true },
        { "default ; creditLimit=0 resetSeconds=0", "default ; creditLimit=1 resetSeconds=0", false },
        /* Issue #15: the defaults keep every id; anything else is another counter. */
        { "a=1 ; creditLimit=5 resetSeconds=60",
          "a=1 ; creditLimit=5 resetSeconds=60 algorithm=fixed-window", true },
        { "a=1 ; creditLimit=5 resetSeconds=60", "a=1 ; creditLimit=5 resetSeconds=60 matchPolicy=continue",
          true },
        { "a=1 ; creditLimit=5 resetSeconds=60 matchPolicy=canary",
          "a=1 ; creditLimit=5 resetSeconds=60 matchPolicy=continue", true },
        { "a=1 ; creditLimit=5 resetSeconds=60",
          "a=1 ; creditLimit=5 resetSeconds=60 algorithm=sliding-window", false },
        { "a=1 ; creditLimit=5 resetSeconds=60",
          "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket", false },
        { "a=1 ; creditLimit=5 resetSeconds=60 algorithm=sliding-window",
          "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket", false },
        { "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket",
          "a=1 ; creditLimit=5 resetSeconds=60 algorithm=gcra", true },
        { "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket",
          "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket burst=5", true },
        { "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket",
          "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket burst=6", false },
        { "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket burst=6",
          "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket burst=7", false },
        { "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket",
          "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket refillSeconds=0", true },
        { "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket",
          "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket refillSeconds=12", false },
        { "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket refillSeconds=12",
          "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket refillSeconds=24", false },
        { "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket",
          "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket strict=false", true },
        { "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket",
          "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket strict=true", false },
        /* burst and refillSeconds are separate fields: swapping their values changes the id. */
        { "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket burst=12",
          "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket refillSeconds=12", false },
        { "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket burst=6 actorField=ip",
          "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket burst=6 actorField=ua", false },
        { "default ; creditLimit=0 resetSeconds=0",
          "default ; creditLimit=0 resetSeconds=0 algorithm=token-bucket", false },
        /* Issue #16: onBackendError is what a rule answers while the remote store is down, not
         * what its counter means. */
        { "a=1 ; creditLimit=5 resetSeconds=60", "a=1 ; creditLimit=5 resetSeconds=60 onBackendError=allow",
          true },
        { "a=1 ; creditLimit=5 resetSeconds=60", "a=1 ; creditLimit=5 resetSeconds=60 onBackendError=deny",
          true },
        { "a=1 ; creditLimit=5 resetSeconds=60 algorithm=gcra",
          "a=1 ; creditLimit=5 resetSeconds=60 algorithm=gcra onBackendError=local", true },
        { "a=1 ; creditLimit=5 resetSeconds=60 onBackendError=allow",
          "a=1 ; creditLimit=5 resetSeconds=60 onBackendError=deny", true },
        /* Issue #34: the window is another counter unless it is the default; matchKeys is
         * which requests reach the counter, not what it counts; several actor fields are
         * another counter, in the order written. */
        { "a=1 ; creditLimit=5 resetSeconds=60", "a=1 ; creditLimit=5 resetSeconds=60 window=first-hit",
          true },
        { "a=1 ; creditLimit=5 resetSeconds=60", "a=1 ; creditLimit=5 resetSeconds=60 window=aligned",
          false },
        { "a=1 ; creditLimit=5 resetSeconds=60 algorithm=sliding-window",
          "a=1 ; creditLimit=5 resetSeconds=60 algorithm=sliding-window window=aligned", false },
        { "a=1 ; creditLimit=5 resetSeconds=60 window=aligned",
          "a=1 ; creditLimit=5 resetSeconds=60 algorithm=sliding-window window=aligned", false },
        { "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket",
          "a=1 ; creditLimit=5 resetSeconds=60 algorithm=token-bucket window=first-hit", true },
        { "a=1 ; creditLimit=5 resetSeconds=60", "a=1 ; creditLimit=5 resetSeconds=60 matchKeys=exact",
          true },
        { "a=1 ; creditLimit=5 resetSeconds=60 matchKeys=subset",
          "a=1 ; creditLimit=5 resetSeconds=60 matchKeys=exact", true },
        { "a=1 ; creditLimit=5 resetSeconds=60 actorField=ip",
          "a=1 ; creditLimit=5 resetSeconds=60 actorField=ip~user", false },
        { "a=1 ; creditLimit=5 resetSeconds=60 actorField=ip~user",
          "a=1 ; creditLimit=5 resetSeconds=60 actorField=user~ip", false },
        { "a=1 ; creditLimit=5 resetSeconds=60 actorField=ip~user",
          "a=1 ; creditLimit=5 resetSeconds=60 actorField=ip~user~x", false },
        /* the names are length-prefixed: moving a byte from one to the other changes the id */
        { "a=1 ; creditLimit=5 resetSeconds=60 actorField=ab~c",
          "a=1 ; creditLimit=5 resetSeconds=60 actorField=a~bc", false },
};

START_TEST (test_identity) {
        uint8_t a[RULE_ID_SIZE], b[RULE_ID_SIZE];
        rule_id_of(identity_cases[_i].a, a);
        rule_id_of(identity_cases[_i].b, b);
        ck_assert_msg((memcmp(a, b, RULE_ID_SIZE) == 0) == identity_cases[_i].same, "%s | %s",
                      identity_cases[_i].a, identity_cases[_i].b);
}
END_TEST

START_TEST (test_identity_reorder) {
        RuleSet *x, *y;
        ck_assert_int_eq(build(KV("a=1 ; creditLimit=5 resetSeconds=60 label=one",
                                  "b=2 ; creditLimit=5 resetSeconds=60 label=two",
                                  "default ; creditLimit=0 resetSeconds=0"),
                               true, &x, NULL),
                         0);
        ck_assert_int_eq(build(KV("b=2 ; creditLimit=5 resetSeconds=60 label=deux",
                                  "a=1 ; creditLimit=5 resetSeconds=60 label=un comment=moved",
                                  "default ; creditLimit=0 resetSeconds=0"),
                               true, &y, NULL),
                         0);
        ck_assert(memcmp(x->rules[0].id, y->rules[1].id, RULE_ID_SIZE) == 0);
        ck_assert(memcmp(x->rules[1].id, y->rules[0].id, RULE_ID_SIZE) == 0);
        ck_assert(memcmp(x->rules[0].id, x->rules[1].id, RULE_ID_SIZE) != 0);
        ck_assert_uint_eq(y->rules[1].index, 1);
        ck_assert_uint_eq(y->rules[1].line, 20);
        ruleset_free(x);
        ruleset_free(y);
}
END_TEST

/* The exact on-disk encoding: a golden value, so an accidental change fails here. */
START_TEST (test_identity_golden) {
        static const uint8_t enc[] = {
                'd', 'i', 'v', 'v', 'y', 'd', '-', 'r', 'u', 'l', 'e',
                '-', 'i', 'd', '-', 'v', '1', 2,   0,   0,   0,   /* n_patterns */
                1,   0,   0,   0,   'a', 1,   0,   0,   0,   '1', /* a=1 */
                1,   0,   0,   0,   'b', 1,   0,   0,   0,   '*', /* b=* */
                5,   0,   0,   0,   0,   0,   0,   0,             /* creditLimit */
                60,  0,   0,   0,   0,   0,   0,   0,             /* resetSeconds */
                1,   2,   0,   0,   0,   'i', 'p',                /* actorField */
        };
        uint8_t want[RULE_ID_SIZE], got[RULE_ID_SIZE];
        char hex[2 * RULE_ID_SIZE + 1];
        hash128(enc, sizeof enc, want);
        rule_id_of("b=* a=1 ; creditLimit=5 resetSeconds=60 actorField=ip", got);
        ck_assert(memcmp(want, got, RULE_ID_SIZE) == 0);
        /* And the id itself, as a literal computed once: the encoding above and hash128()
         * together. It keys this rule's counters on disk; if it changes, every existing
         * database is orphaned (bump STORE_FORMAT_VERSION, never this literal). */
        for (size_t i = 0; i < RULE_ID_SIZE; i++)
                snprintf(hex + 2 * i, 3, "%02x", got[i]);
        ck_assert_str_eq(hex, "406694f9a2837ef0017f027ef453822e");

        static const uint8_t enc_default[] = {
                'd', 'i', 'v', 'v', 'y', 'd', '-', 'r', 'u', 'l', 'e', '-', 'i', 'd', '-', 'v', '1', 0, 0,
                0,   0,   1,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0, 0,
        };
        hash128(enc_default, sizeof enc_default, want);
        rule_id_of("default ; creditLimit=1 resetSeconds=0", got);
        ck_assert(memcmp(want, got, RULE_ID_SIZE) == 0);
        rule_id_of("default ; creditLimit=1 resetSeconds=0 algorithm=fixed-window matchPolicy=stop", got);
        ck_assert(memcmp(want, got, RULE_ID_SIZE) == 0);
}
END_TEST

/* The encoding of a rule with algorithm parameters: the v1 encoding, then the tail. */
START_TEST (test_identity_golden_algo) {
        static const uint8_t enc[] = {
                'd',  'i', 'v', 'v', 'y', 'd', '-', 'r', 'u', 'l', 'e',
                '-',  'i', 'd', '-', 'v', '1', 1,   0,   0,   0,   /* n_patterns */
                1,    0,   0,   0,   'a', 1,   0,   0,   0,   '1', /* a=1 */
                10,   0,   0,   0,   0,   0,   0,   0,             /* creditLimit */
                60,   0,   0,   0,   0,   0,   0,   0,             /* resetSeconds */
                0,                                                 /* no actorField */
                0xa1, 2,                                           /* tag, token-bucket */
                25,   0,   0,   0,   0,   0,   0,   0,             /* burst */
                6,    0,   0,   0,   0,   0,   0,   0,             /* refillSeconds */
                1,                                                 /* strict */
        };
        static const uint8_t
                enc_sliding
                        [] = {
                                'd', 'i', 'v', 'v', 'y', 'd', '-', 'r', 'u', 'l',  'e', '-', 'i',
                                'd', '-', 'v', '1', 1,   0,   0,   0,   1,   0,    0,   0,   'a',
                                1,   0,   0,   0,   '1', 10,  0,   0,   0,   0,    0,   0,   0,
                                60,  0,   0,   0,   0,   0,   0,   0,   0,   0xa1, 1, /* tag,
                                                                                         sliding-window
                                                                                       */
                                0,   0,   0,   0,   0,   0,   0,   0,   0,   0,    0,   0,   0,
                                0,   0,   0,   0,
                        };
        uint8_t want[RULE_ID_SIZE], got[RULE_ID_SIZE];

        hash128(enc, sizeof enc, want);
        rule_id_of(
                "a=1 ; creditLimit=10 resetSeconds=60 algorithm=gcra burst=25 refillSeconds=6 strict=true",
                got);
        ck_assert(memcmp(want, got, RULE_ID_SIZE) == 0);
        hash128(enc_sliding, sizeof enc_sliding, want);
        rule_id_of("a=1 ; creditLimit=10 resetSeconds=60 algorithm=sliding-window", got);
        ck_assert(memcmp(want, got, RULE_ID_SIZE) == 0);
}
END_TEST

/* Issue #34's tails: several actor fields in place of the one, the window after the algorithm's. */
START_TEST (test_identity_golden_issue34) {
        static const uint8_t enc_fields[] = {
                'd', 'i', 'v', 'v', 'y', 'd', '-', 'r', 'u', 'l', 'e',
                '-', 'i', 'd', '-', 'v', '1', 1,   0,   0,   0,   /* n_patterns */
                1,   0,   0,   0,   'a', 1,   0,   0,   0,   '1', /* a=1 */
                5,   0,   0,   0,   0,   0,   0,   0,             /* creditLimit */
                60,  0,   0,   0,   0,   0,   0,   0,             /* resetSeconds */
                2,   2,   0,   0,   0,                            /* several actor fields: 2 */
                2,   0,   0,   0,   'i', 'p',                     /* ip */
                4,   0,   0,   0,   'u', 's', 'e', 'r',           /* user */
        };
        static const uint8_t enc_aligned[] = {
                'd',  'i', 'v', 'v', 'y', 'd', '-', 'r', 'u', 'l', 'e',
                '-',  'i', 'd', '-', 'v', '1', 1,   0,   0,   0,   /* n_patterns */
                1,    0,   0,   0,   'a', 1,   0,   0,   0,   '1', /* a=1 */
                5,    0,   0,   0,   0,   0,   0,   0,             /* creditLimit */
                60,   0,   0,   0,   0,   0,   0,   0,             /* resetSeconds */
                1,    2,   0,   0,   0,   'i', 'p',                /* actorField ip */
                0xa1, 1,                                           /* tag, sliding-window */
                0,    0,   0,   0,   0,   0,   0,   0,             /* burst */
                0,    0,   0,   0,   0,   0,   0,   0,             /* refillSeconds */
                0,                                                 /* strict */
                0xa2, 1,                                           /* tag, window aligned */
        };
        uint8_t want[RULE_ID_SIZE], got[RULE_ID_SIZE];

        hash128(enc_fields, sizeof enc_fields, want);
        rule_id_of("a=1 ; creditLimit=5 resetSeconds=60 actorField=ip~user matchKeys=exact", got);
        ck_assert(memcmp(want, got, RULE_ID_SIZE) == 0);
        hash128(enc_aligned, sizeof enc_aligned, want);
        rule_id_of(
                "a=1 ; creditLimit=5 resetSeconds=60 algorithm=sliding-window window=aligned actorField=ip",
                got);
        ck_assert(memcmp(want, got, RULE_ID_SIZE) == 0);
        /* a fixed window: the window's tail right after the v1 encoding */
        static const uint8_t enc_fixed[] = {
                'd',  'i', 'v', 'v', 'y', 'd', '-', 'r', 'u', 'l', 'e',
                '-',  'i', 'd', '-', 'v', '1', 1,   0,   0,   0,   /* n_patterns */
                1,    0,   0,   0,   'a', 1,   0,   0,   0,   '1', /* a=1 */
                5,    0,   0,   0,   0,   0,   0,   0,             /* creditLimit */
                60,   0,   0,   0,   0,   0,   0,   0,             /* resetSeconds */
                1,    2,   0,   0,   0,   'i', 'p',                /* actorField ip */
                0xa2, 1,                                           /* tag, window aligned */
        };
        hash128(enc_fixed, sizeof enc_fixed, want);
        rule_id_of("a=1 ; creditLimit=5 resetSeconds=60 window=aligned actorField=ip", got);
        ck_assert(memcmp(want, got, RULE_ID_SIZE) == 0);
}
END_TEST

/* The attributes of issue #34 in the compiled rule. */
START_TEST (test_issue34_attrs) {
        RuleSet *rs;

        ck_assert_int_eq(
                build(KV("a=1 ; creditLimit=5 resetSeconds=60 actorField=ip~user~x-forwarded-for "
                         "window=aligned matchKeys=exact",
                         "a=2 ; creditLimit=5 resetSeconds=60 actorField=ip",
                         "default ; creditLimit=5 resetSeconds=60 algorithm=sliding-window window=aligned"),
                      true, &rs, NULL),
                0);
        const Rule *r = &rs->rules[0];
        ck_assert_uint_eq(r->n_actor_fields, 3);
        ck_assert_str_eq(r->actor_field, "ip user x-forwarded-for");
        ck_assert_uint_eq(r->actor_fields[0].len, 2);
        ck_assert(memcmp(r->actor_fields[0].ptr, "ip", 2) == 0);
        ck_assert_uint_eq(r->actor_fields[1].len, 4);
        ck_assert(memcmp(r->actor_fields[1].ptr, "user", 4) == 0);
        ck_assert_uint_eq(r->actor_fields[2].len, 15);
        ck_assert(memcmp(r->actor_fields[2].ptr, "x-forwarded-for", 15) == 0);
        ck_assert_int_eq(r->algo.window, ALGO_WINDOW_ALIGNED);
        ck_assert_int_eq(r->match_keys, MATCH_KEYS_EXACT);
        r = &rs->rules[1];
        ck_assert_uint_eq(r->n_actor_fields, 1);
        ck_assert_ptr_eq(r->actor_fields[0].ptr, r->actor_field);
        ck_assert_uint_eq(r->actor_fields[0].len, 2);
        ck_assert_int_eq(r->algo.window, ALGO_WINDOW_FIRST_HIT);
        ck_assert_int_eq(r->match_keys, MATCH_KEYS_SUBSET);
        r = &rs->rules[2];
        ck_assert_uint_eq(r->n_actor_fields, 0);
        ck_assert_ptr_null(r->actor_fields);
        ck_assert_int_eq(r->algo.window, ALGO_WINDOW_ALIGNED);
        ruleset_free(rs);

        ck_assert_str_eq(algo_window_to_string(ALGO_WINDOW_FIRST_HIT), "first-hit");
        ck_assert_str_eq(algo_window_to_string(ALGO_WINDOW_ALIGNED), "aligned");
        ck_assert_ptr_null(algo_window_to_string(_ALGO_WINDOW_MAX));
        ck_assert_int_eq(algo_window_from_string("aligned"), ALGO_WINDOW_ALIGNED);
        ck_assert_int_eq(algo_window_from_string("Aligned"), -EINVAL);
        ck_assert_int_eq(algo_window_from_string(NULL), -EINVAL);
        ck_assert_str_eq(match_keys_to_string(MATCH_KEYS_EXACT), "exact");
        ck_assert_str_eq(match_keys_to_string(MATCH_KEYS_SUBSET), "subset");
        ck_assert_int_eq(match_keys_from_string("exact"), MATCH_KEYS_EXACT);
        ck_assert_int_eq(match_keys_from_string("superset"), -EINVAL);
        ck_assert_int_eq(rule_attr_from_string("window"), RULE_ATTR_WINDOW);
        ck_assert_int_eq(rule_attr_from_string("matchKeys"), RULE_ATTR_MATCH_KEYS);
        ck_assert_str_eq(rule_attr_suggest("matchkeys"), "matchKeys");
}
END_TEST

/* An actorField of PROTO_PAIRS_MAX fields loads; one more is refused. */
START_TEST (test_actor_fields_max) {
        char names[PROTO_PAIRS_MAX * 5 + 8];
        RuleSet *rs;
        RuleDraft d;
        Diag diag;
        size_t n = 0;

        for (int i = 0; i < PROTO_PAIRS_MAX; i++)
                n += (size_t) snprintf(names + n, sizeof names - n, "%sf%d", i > 0 ? " " : "", i);
        for (int more = 0; more < 2; more++) {
                if (more)
                        snprintf(names + n, sizeof names - n, " f%d", PROTO_PAIRS_MAX);
                diag_init(&diag, "m.ini");
                ck_assert_int_eq(ruleset_new(NULL, &rs), 0);
                rule_draft_init(&d, 3);
                ck_assert_int_eq(rule_draft_set(&d, "creditLimit", "1", 4), 0);
                ck_assert_int_eq(rule_draft_set(&d, "resetSeconds", "1", 5), 0);
                ck_assert_int_eq(rule_draft_set(&d, "actorField", names, 6), 0);
                if (!more) {
                        ck_assert_int_eq(ruleset_add(rs, &d, &diag), 0);
                        ck_assert_uint_eq(rs->rules[0].n_actor_fields, PROTO_PAIRS_MAX);
                } else {
                        ck_assert_int_eq(ruleset_add(rs, &d, &diag), -EINVAL);
                        ck_assert_uint_eq(diag.n_messages, 1);
                        ck_assert(diag_has(
                                &diag, "m.ini:6: rule [default] names 65 fields in actorField \"f0 f1 "));
                        ck_assert(diag_has(&diag, "...\": at most 64 (a request carries no more)"));
                }
                ruleset_free(rs);
                diag_done(&diag);
        }
}
END_TEST

/* What ruleset_add() puts in Rule.algo. */
static const struct {
        const char *spec;
        Algorithm algorithm;
        uint64_t burst, refill_seconds;
        bool strict;
} algo_cases[] = {
        { "default ; creditLimit=10 resetSeconds=60", ALGORITHM_FIXED_WINDOW, 10, 0, false },
        { "default ; creditLimit=10 resetSeconds=60 algorithm=sliding-window", ALGORITHM_SLIDING_WINDOW, 10,
          0, false },
        { "default ; creditLimit=10 resetSeconds=0", ALGORITHM_FIXED_WINDOW, 10, 0, false },
        { "default ; creditLimit=0 resetSeconds=9 algorithm=sliding-window", ALGORITHM_SLIDING_WINDOW, 0, 0,
          false },
        { "default ; creditLimit=10 resetSeconds=60 algorithm=token-bucket", ALGORITHM_TOKEN_BUCKET, 10, 0,
          false },
        { "default ; creditLimit=10 resetSeconds=60 algorithm=gcra burst=3 refillSeconds=30 strict=true",
          ALGORITHM_TOKEN_BUCKET, 3, 30, true },
        { "default ; creditLimit=0 resetSeconds=60 algorithm=token-bucket", ALGORITHM_TOKEN_BUCKET, 0, 0,
          false },
        { "default ; creditLimit=7 resetSeconds=0 algorithm=token-bucket burst=9", ALGORITHM_TOKEN_BUCKET, 9,
          0, false },
};

START_TEST (test_algo_params) {
        RuleSet *rs;

        ck_assert_int_eq(build((const char *const[]){ algo_cases[_i].spec, NULL }, true, &rs, NULL), 0);
        const AlgoParams *p = &rs->rules[0].algo;
        ck_assert_int_eq(p->algorithm, algo_cases[_i].algorithm);
        ck_assert_uint_eq(p->credit_limit, rs->rules[0].credit_limit);
        ck_assert_uint_eq(p->reset_seconds, rs->rules[0].reset_seconds);
        ck_assert_uint_eq(p->burst, algo_cases[_i].burst);
        ck_assert_uint_eq(p->refill_seconds, algo_cases[_i].refill_seconds);
        ck_assert(p->strict == algo_cases[_i].strict);
        ruleset_free(rs);
}
END_TEST

/* ---- index --------------------------------------------------------------------------------- */

static uint64_t rng_state;
static uint32_t rng(void) {
        /* xorshift64*: deterministic across platforms */
        rng_state ^= rng_state >> 12;
        rng_state ^= rng_state << 25;
        rng_state ^= rng_state >> 27;
        return (uint32_t) ((rng_state * UINT64_C(2685821657736338717)) >> 32);
}

static const char *const rand_keys[] = { "path", "method", "ip", "user" };
static const char *const rand_values[] = {
        "/a", "/b", "/a/b", "/a/c", "GET", "POST", "1", "2", "", "/a/b/c"
};
static const char *const rand_globs[] = { "/a/*", "*/b", "/a/*/c", "/api/1*", "*c", "/api/*7", "/api/*1*" };

static void rand_value(char *buf, size_t size, bool allow_glob) {
        unsigned r = rng() % 16;
        if (allow_glob && r == 0)
                snprintf(buf, size, "*");
        else if (allow_glob && r == 1)
                snprintf(buf, size, "%s", rand_globs[rng() % (sizeof rand_globs / sizeof rand_globs[0])]);
        else if (r < 10)
                snprintf(buf, size, "/api/%u", rng() % 400);
        else
                snprintf(buf, size, "%s", rand_values[rng() % (sizeof rand_values / sizeof rand_values[0])]);
}

/* A random rule spec: usually an exact path, plus 0-2 other keys. */
static void rand_spec(char *buf, size_t size, MatchPolicy policy) {
        char v[32];
        size_t n = 0;
        bool used[4] = { 0 };
        unsigned n_keys = 1 + rng() % 3;

        for (unsigned k = 0; k < n_keys; k++) {
                unsigned key = k == 0 && rng() % 4 != 0 ? 0 : rng() % 4;
                if (used[key])
                        continue;
                used[key] = true;
                rand_value(v, sizeof v, !(key == 0 && rng() % 3 != 0));
                if (v[0] == '\0')
                        continue; /* the spec syntax cannot carry empty values */
                n += (size_t) snprintf(buf + n, size - n, "%s=%s ", rand_keys[key], v);
        }
        snprintf(buf + n, size - n, "; creditLimit=%u resetSeconds=60 matchPolicy=%s matchKeys=%s",
                 rng() % 1000, match_policy_to_string(policy), rng() % 4 == 0 ? "exact" : "subset");
}

START_TEST (test_index_random) {
        enum { N_CONFIGS = 6, N_RULES = 80, N_REQUESTS = 400 };
        static char specs_buf[N_RULES + 1][160];
        const char *specs[N_RULES + 2];
        size_t n_exact = 0; /* requests an exact rule (matchKeys exact) matched */

        rng_state = UINT64_C(0x9e3779b97f4a7c15) + (uint64_t) _i;
        for (int c = 0; c < N_CONFIGS; c++) {
                size_t n = 0, n_canary = 0, n_continue = 0;
                RuleSet *rs;

                /* Grow a valid config one rule at a time: keep a candidate only if the
                 * config with it (and a default) still validates. */
                for (int attempt = 0; attempt < N_RULES * 4 && n < N_RULES; attempt++) {
                        unsigned pick = rng() % 8;
                        MatchPolicy policy = n_canary + n_continue >= RULES_CANARY_MAX ? MATCH_POLICY_STOP
                                             : pick == 0                               ? MATCH_POLICY_CANARY
                                             : pick == 1 ? MATCH_POLICY_CONTINUE
                                                         : MATCH_POLICY_STOP;
                        rand_spec(specs_buf[n], sizeof specs_buf[n], policy);
                        for (size_t i = 0; i <= n; i++)
                                specs[i] = specs_buf[i];
                        specs[n + 1] = "default ; creditLimit=0 resetSeconds=0";
                        specs[n + 2] = NULL;
                        if (build(specs, true, &rs, NULL) == 0) {
                                n++;
                                n_canary += policy == MATCH_POLICY_CANARY;
                                n_continue += policy == MATCH_POLICY_CONTINUE;
                        }
                        ruleset_free(rs);
                }
                /* Not vacuous: many rules survive validation, some of them canaries. */
                ck_assert_uint_gt(n, N_RULES / 3);
                ck_assert_uint_gt(n_canary, 0);
                ck_assert_uint_gt(n_continue, 0);
                for (size_t i = 0; i < n; i++)
                        specs[i] = specs_buf[i];
                specs[n] = "default ; creditLimit=0 resetSeconds=0";
                specs[n + 1] = NULL;
                ck_assert_int_eq(build(specs, true, &rs, NULL), 0);

                for (int q = 0; q < N_REQUESTS; q++) {
                        const Rule *got[RULES_MATCH_MAX], *want[RULES_MATCH_MAX];
                        char vals[6][32];
                        const char *kv[16];
                        size_t m = 0;
                        ProtoRequest req;

                        for (unsigned k = 0; k < 4; k++) {
                                if (rng() % 4 == 0)
                                        continue;
                                /* glob and '*' strings also appear literally in requests */
                                rand_value(vals[k], sizeof vals[k], rng() % 8 == 0);
                                kv[m++] = rand_keys[k];
                                kv[m++] = vals[k];
                        }
                        if (rng() % 2) {
                                kv[m++] = "extra";
                                kv[m++] = "x";
                        }
                        kv[m] = NULL;
                        req_fill(&req, kv);
                        size_t ng = ruleset_match(rs, &req, got), nw = linear_match(rs, &req, want);
                        ck_assert_uint_eq(ng, nw);
                        ck_assert_uint_ge(ng, 1);
                        for (size_t i = 0; i < ng; i++)
                                ck_assert_ptr_eq(got[i], want[i]);
                        ck_assert_int_eq(got[ng - 1]->match_policy, MATCH_POLICY_STOP);
                        for (size_t i = 0; i < ng; i++)
                                n_exact += got[i]->match_keys == MATCH_KEYS_EXACT;
                }
                ruleset_free(rs);
        }
        ck_assert_uint_gt(n_exact, 0); /* not vacuous */
}
END_TEST

START_TEST (test_index_large) {
        enum { N = 10000 };
        char(*bufs)[96] = malloc((N + 4) * sizeof(*bufs));
        const char **specs = malloc((N + 5) * sizeof(char *));
        char desc[256];
        RuleSet *rs;
        size_t n = 0;

        ck_assert_ptr_nonnull(bufs);
        ck_assert_ptr_nonnull(specs);
        for (int i = 0; i < N; i++) {
                snprintf(bufs[n], sizeof bufs[n],
                         "path=/api/%d method=GET ; creditLimit=%d resetSeconds=60 label=r%d", i, i, i);
                specs[n] = bufs[n];
                n++;
        }
        specs[n++] = "path=/api/* method=GET ; creditLimit=1 resetSeconds=60 label=api-get";
        specs[n++] = "path=/static/* ; creditLimit=1 resetSeconds=0 label=static";
        specs[n++] = "method=* ip=* ; creditLimit=5 resetSeconds=1 actorField=ip label=by-ip";
        specs[n++] = "default ; creditLimit=0 resetSeconds=0 label=deny";
        specs[n] = NULL;
        ck_assert_int_eq(build(specs, true, &rs, NULL), 0);
        ck_assert_str_eq(ruleset_index_describe(rs, desc, sizeof desc),
                         "index on \"path\": 10000 rules under 10000 values, 4 other rules");

        expect_match(rs, KV("method", "GET", "path", "/api/777"), "r777");
        expect_match(rs, KV("method", "GET", "path", "/api/9999", "ip", "1"), "r9999");
        expect_match(rs, KV("method", "GET", "path", "/api/10000"), "api-get");
        expect_match(rs, KV("method", "POST", "path", "/api/1", "ip", "1"), "by-ip");
        expect_match(rs, KV("path", "/static/x.css"), "static");
        expect_match(rs, KV("path", "/api/1"), "deny");
        ruleset_free(rs);
        free(specs);
        free(bufs);
}
END_TEST

START_TEST (test_index_pick) {
        char desc[256];
        RuleSet *rs;

        /* path is constrained exactly by more rules than method. */
        ck_assert_int_eq(
                build(KV("path=/a method=GET ; creditLimit=1 resetSeconds=1",
                         "path=/b ; creditLimit=1 resetSeconds=1", "path=/c ; creditLimit=1 resetSeconds=1",
                         "path=/c/* method=POST ; creditLimit=1 resetSeconds=1",
                         "default ; creditLimit=0 resetSeconds=0"),
                      true, &rs, NULL),
                0);
        ck_assert_str_eq(ruleset_index_describe(rs, desc, sizeof desc),
                         "index on \"path\": 3 rules under 3 values, 2 other rules");
        ruleset_free(rs);

        ck_assert_int_eq(
                build(KV("path=* ; creditLimit=1 resetSeconds=1", "default ; creditLimit=0 resetSeconds=0"),
                      true, &rs, NULL),
                0);
        ck_assert_str_eq(ruleset_index_describe(rs, desc, sizeof desc),
                         "no index key: 2 rules checked in order");
        ruleset_free(rs);

        ck_assert_int_eq(build(KV("default ; creditLimit=0 resetSeconds=0"), false, &rs, NULL), 0);
        ck_assert_str_eq(ruleset_index_describe(rs, desc, sizeof desc), "no index (not finalized)");
        ruleset_free(rs);
}
END_TEST

/* The shadow check also works when the index sees many values. */
START_TEST (test_index_shadow) {
        Diag diag;
        RuleSet *rs;

        diag_init(&diag, "s");
        ck_assert_int_eq(
                build(KV("path=/a ; creditLimit=1 resetSeconds=1", "path=/b ; creditLimit=1 resetSeconds=1",
                         "path=/a method=GET ; creditLimit=1 resetSeconds=1",
                         "path=/b/* ; creditLimit=1 resetSeconds=1",
                         "default ; creditLimit=0 resetSeconds=0"),
                      true, &rs, &diag),
                -EINVAL);
        ck_assert_uint_eq(diag.n_messages, 1);
        ck_assert(
                diag_has(&diag, "s:30: rule [method=GET path=/a] is unreachable: rule [path=/a] (line 10)"));
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

static Suite *rules_suite(void) {
        Suite *s = suite_create("rules");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_names);
        tcase_add_test(tc, test_draft);
        tcase_add_loop_test(tc, test_numbers, 0, sizeof number_cases / sizeof number_cases[0]);
        tcase_add_test(tc, test_number_limits);
        tcase_add_loop_test(tc, test_validation, 0, sizeof validation_cases / sizeof validation_cases[0]);
        tcase_add_test(tc, test_validation_text);
        tcase_add_test(tc, test_on_backend_error);
        tcase_add_test(tc, test_canary_limit);
        tcase_add_loop_test(tc, test_nonfinal_limit, 0, 2);
        tcase_add_loop_test(tc, test_policy_match, 0, sizeof policy_cases / sizeof policy_cases[0]);
        tcase_add_test(tc, test_rule_enforcing);
        tcase_add_test(tc, test_finalize_twice);
        tcase_add_loop_test(tc, test_globs, 0, sizeof glob_cases / sizeof glob_cases[0]);
        tcase_add_test(tc, test_glob_segments);
        tcase_add_test(tc, test_readme_pantry);
        tcase_add_test(tc, test_actor_absent);
        tcase_add_test(tc, test_match_keys);
        tcase_add_test(tc, test_actor_fields);
        tcase_add_test(tc, test_birthday_cake);
        tcase_add_test(tc, test_default_deny_accept);
        tcase_add_loop_test(tc, test_trivial_decision, 0, sizeof trivial_cases / sizeof trivial_cases[0]);
        tcase_add_test(tc, test_describe);
        tcase_add_loop_test(tc, test_identity, 0, sizeof identity_cases / sizeof identity_cases[0]);
        tcase_add_test(tc, test_identity_reorder);
        tcase_add_test(tc, test_identity_golden);
        tcase_add_test(tc, test_identity_golden_algo);
        tcase_add_test(tc, test_identity_golden_issue34);
        tcase_add_test(tc, test_issue34_attrs);
        tcase_add_test(tc, test_actor_fields_max);
        tcase_add_loop_test(tc, test_algo_params, 0, sizeof algo_cases / sizeof algo_cases[0]);
        tcase_add_loop_test(tc, test_index_random, 0, 4);
        tcase_add_test(tc, test_index_pick);
        tcase_add_test(tc, test_index_shadow);
        suite_add_tcase(s, tc);

        TCase *big = tcase_create("big");
        tcase_set_timeout(big, 120);
        tcase_add_test(big, test_rules_max);
        tcase_add_test(big, test_index_large);
        tcase_add_test(big, test_policy_index_large);
        suite_add_tcase(s, big);
        return s;
}

int main(void) {
        return check_run_suite(rules_suite());
}
