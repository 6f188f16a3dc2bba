/* SPDX-License-Identifier: MIT */
/* config-yaml.c (envoyproxy/ratelimit's YAML) and config.c's directories of YAML files: the
 * compiled rules of valid files, the decisions of envoyproxy/ratelimit's tree walk reproduced
 * by the rules' order, and every refusal with its line and reason. */

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "check-run.h"

/* ---- helpers ---- */

static char *src_path(const char *rel) {
        const char *top = getenv("top_srcdir");
        char *p;
        ck_assert_int_ge(asprintf(&p, "%s/%s", top ? top : ".", rel), 0);
        return p;
}

static bool diag_has(const Diag *d, const char *file, unsigned line, const char *what) {
        char prefix[4096];

        if (line > 0)
                snprintf(prefix, sizeof prefix, "%s:%u: ", file, line);
        else
                snprintf(prefix, sizeof prefix, "%s: ", file);
        for (size_t i = 0; i < d->n_messages; i++)
                if (strncmp(d->messages[i], prefix, strlen(prefix)) == 0 && strstr(d->messages[i], what))
                        return true;
        return false;
}

static void assert_diag_has(const Diag *d, const char *file, unsigned line, const char *what) {
        if (diag_has(d, file, line, what))
                return;
        for (size_t i = 0; i < d->n_messages; i++)
                fprintf(stderr, "  diag: %s\n", d->messages[i]);
        ck_abort_msg("no message \"%s:%u: ...%s...\"", file, line, what);
}

/* text as one YAML file, finalized; NULL (and the messages in diag) if refused. */
static RuleSet *parse(const char *text, Diag *diag) {
        RuleSet *rs = NULL;
        int r;

        diag_init(diag, "t.yaml");
        ck_assert_int_eq(ruleset_new("t.yaml", &rs), 0);
        r = config_yaml_parse(text, strlen(text), rs, diag);
        if (r == 0)
                r = ruleset_finalize(rs, diag);
        ck_assert_int_eq(r<0, diag_count(diag)> 0);
        if (r < 0)
                rs = ruleset_free(rs);
        return rs;
}

static char *dump(const RuleSet *rs) {
        char *out = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&out, &len);

        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(config_dump_json(rs, f), 0);
        ck_assert_int_eq(fclose(f), 0);
        return out;
}

/* The decision for the pairs "k=v k=v ...": the canaries counted, then the stop rule's limit
 * "<creditLimit>/<resetSeconds>" with its actorField, or "ok" for a rule that always
 * allows: "canary 0/60, ok", "5/1 user". */
static void decide(const RuleSet *rs, const char *pairs, char *buf, size_t size) {
        const Rule *out[RULES_MATCH_MAX];
        ProtoRequest req = { .command = PROTO_COMMAND_HIT };
        char *copy = strdup(pairs), *save = NULL;
        size_t len = 0;

        for (char *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
                char *eq = strchr(tok, '=');
                ck_assert_ptr_nonnull(eq);
                req.pairs[req.n_pairs++] =
                        (ProtoPair){ { tok, (size_t) (eq - tok) }, { eq + 1, strlen(eq + 1) } };
        }
        size_t n = ruleset_match(rs, &req, out);
        buf[0] = '\0';
        for (size_t i = 0; i < n; i++) {
                const Rule *r = out[i];
                len += (size_t) snprintf(buf + len, size - len, "%s", i ? ", " : "");
                if (r->match_policy == MATCH_POLICY_CANARY)
                        len += (size_t) snprintf(buf + len, size - len, "canary ");
                if (rule_trivial_decision(r) == RULE_TRIVIAL_ALLOW)
                        len += (size_t) snprintf(buf + len, size - len, "ok");
                else
                        len += (size_t) snprintf(
                                buf + len, size - len, "%llu/%llu%s%s", (unsigned long long) r->credit_limit,
                                (unsigned long long) r->reset_seconds, r->actor_field ? " " : "",
                                r->actor_field ? r->actor_field : "");
        }
        free(copy);
}

/* ---- decisions: envoyproxy/ratelimit's answers ---- */

static const char shop[] = "domain: shop\n"
                           "descriptors:\n"
                           "  - key: client\n"
                           "    value: mobile\n"
                           "    descriptors:\n"
                           "      - key: user\n"
                           "        rate_limit: {unit: second, requests_per_unit: 5}\n"
                           "      - key: user\n"
                           "        value: admin\n"
                           "        rate_limit: {unit: second, requests_per_unit: 50}\n"
                           "  - key: path\n"
                           "    rate_limit: {unit: minute, requests_per_unit: 20, name: per-path}\n"
                           "  - key: path\n"
                           "    value: /login\n"
                           "    rate_limit: {unit: MINUTE, requests_per_unit: 3}\n"
                           "  - key: path\n"
                           "    value: /health\n"
                           "  - key: path\n"
                           "    value: /img/*.png\n"
                           "    rate_limit: {unit: hour, requests_per_unit: 10}\n"
                           "  - key: path\n"
                           "    value: /img/*\n"
                           "    rate_limit: {unit: hour, requests_per_unit: 100}\n"
                           "  - key: region\n"
                           "    value: eu-*\n"
                           "    share_threshold: true\n"
                           "    rate_limit: {unit: day, requests_per_unit: 7}\n"
                           "  - key: a\n"
                           "    value: '1'\n"
                           "    descriptors:\n"
                           "      - key: b\n"
                           "        value: '2'\n"
                           "        rate_limit: {unit: week, requests_per_unit: 2}\n"
                           "  - key: a\n"
                           "    descriptors:\n"
                           "      - key: b\n"
                           "        rate_limit: {unit: month, requests_per_unit: 4}\n"
                           "  - key: probe\n"
                           "    shadow_mode: true\n"
                           "    rate_limit: {unit: year, requests_per_unit: 0}\n"
                           "  - key: internal\n"
                           "    detailed_metric: true\n"
                           "    rate_limit: {unlimited: true, name: internal}\n"
                           "  - key: blocked\n"
                           "    rate_limit: {unit: second}\n";

static const struct {
        const char *pairs, *want;
} shop_decisions[] = {
        { "domain=shop client=mobile user=bob", "5/1 user" },
        { "domain=shop user=bob client=mobile", "5/1 user" },
        { "domain=shop client=mobile user=admin", "50/1" },
        { "domain=shop client=mobile", "ok" },             /* no limit at that depth */
        { "domain=shop client=web user=bob", "ok" },       /* no such value */
        { "domain=shop path=/a", "20/60 path" },           /* the key without value */
        { "domain=shop path=/login", "3/60" },             /* an exact value first */
        { "domain=shop path=/health", "ok" },              /* a value without limit: exempt */
        { "domain=shop path=/img/a.png", "10/3600 path" }, /* the first wildcard in file order */
        { "domain=shop path=/img/a.gif", "100/3600 path" },
        { "domain=shop path=/a extra=x", "ok" },     /* deeper than the file: no limit */
        { "domain=other path=/a", "ok" },            /* another domain */
        { "path=/a", "ok" },                         /* no domain */
        { "domain=shop region=eu-west", "7/86400" }, /* share_threshold: one counter */
        { "domain=shop region=us-east", "ok" },
        { "domain=shop a=1 b=2", "2/604800" },
        { "domain=shop a=1 b=3", "ok" }, /* the walk took a=1 and found no b=3: never a's other branch */
        { "domain=shop a=5 b=3", "4/2592000 a b" },
        { "domain=shop probe=x", "canary 0/31536000 probe, ok" }, /* counted, never denies */
        { "domain=shop internal=x", "ok" },                       /* unlimited */
        { "domain=shop blocked=x", "0/1 blocked" },               /* requests_per_unit absent: 0 */
};

START_TEST (test_shop_decisions) {
        char got[256];
        Diag diag;
        RuleSet *rs = parse(shop, &diag);

        ck_assert_ptr_nonnull(rs);
        decide(rs, shop_decisions[_i].pairs, got, sizeof got);
        ck_assert_msg(strcmp(got, shop_decisions[_i].want) == 0, "%s: got \"%s\", want \"%s\"",
                      shop_decisions[_i].pairs, got, shop_decisions[_i].want);
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

/* The compiled rules of a small file, in order: the window, the keys matched exactly, the
 * counters per value, the blockers after a subtree, the default that allows. */
START_TEST (test_compiled_rules) {
        static const char text[] = "domain: d\n"
                                   "descriptors:\n"
                                   "  - key: k\n"
                                   "    rate_limit:\n"
                                   "      unit: hour\n"
                                   "      requests_per_unit: 10\n"
                                   "  - key: k\n"
                                   "    value: v\n"
                                   "    descriptors:\n"
                                   "      - key: u\n"
                                   "        rate_limit: {unit: minute, requests_per_unit: 2, name: k-v-u}\n";
        static const char want[] = "{\n"
                                   "  \"overrides\": [\n"
                                   "    {\n"
                                   "      \"operation\": {\n"
                                   "        \"domain\": \"d\",\n"
                                   "        \"k\": \"v\",\n"
                                   "        \"u\": \"*\"\n"
                                   "      },\n"
                                   "      \"creditLimit\": 2,\n"
                                   "      \"resetSeconds\": 60,\n"
                                   "      \"window\": \"aligned\",\n"
                                   "      \"actorField\": \"u\",\n"
                                   "      \"matchKeys\": \"exact\",\n"
                                   "      \"label\": \"k-v-u\",\n"
                                   "      \"comment\": \"d.k_v.u\"\n"
                                   "    },\n"
                                   "    {\n"
                                   "      \"operation\": {\n"
                                   "        \"domain\": \"d\",\n"
                                   "        \"k\": \"v\"\n"
                                   "      },\n"
                                   "      \"creditLimit\": 4294967295,\n"
                                   "      \"resetSeconds\": 0,\n"
                                   "      \"matchKeys\": \"exact\"\n"
                                   "    },\n"
                                   "    {\n"
                                   "      \"operation\": {\n"
                                   "        \"domain\": \"d\",\n"
                                   "        \"k\": \"*\"\n"
                                   "      },\n"
                                   "      \"creditLimit\": 10,\n"
                                   "      \"resetSeconds\": 3600,\n"
                                   "      \"window\": \"aligned\",\n"
                                   "      \"actorField\": \"k\",\n"
                                   "      \"matchKeys\": \"exact\",\n"
                                   "      \"comment\": \"d.k\"\n"
                                   "    }\n"
                                   "  ],\n"
                                   "  \"default\": {\n"
                                   "    \"creditLimit\": 4294967295,\n"
                                   "    \"resetSeconds\": 0,\n"
                                   "    \"comment\": \"no limit: no descriptor of the YAML files matches\"\n"
                                   "  }\n"
                                   "}\n";
        Diag diag;
        RuleSet *rs = parse(text, &diag);
        char *got;

        ck_assert_ptr_nonnull(rs);
        got = dump(rs);
        ck_assert_str_eq(got, want);
        free(got);
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

/* Accepted and changing no decision: statistics' names, response metadata, YAML's spellings. */
START_TEST (test_accepted_spellings) {
        static const char text[] = "# a comment\n"
                                   "domain: 'd'\n"
                                   "descriptors:\n"
                                   "  - key: k\n"
                                   "    value: ~\n" /* null: no value */
                                   "    detailed_metric: yes\n"
                                   "    value_to_metric: off\n"
                                   "    shadow_mode: False\n"
                                   "    metadata: {team: {name: x}, tags: [a, b]}\n"
                                   "    rate_limit: &r\n"
                                   "      unit: Second\n"
                                   "      requests_per_unit: 0\n"
                                   "  - key: j\n"
                                   "    value: \"\"\n" /* empty: no value */
                                   "    rate_limit: *r\n"
                                   "  - key: n\n"
                                   "    value: 12\n" /* a number: its text */
                                   "    rate_limit: {unit: day, requests_per_unit: 4294967295}\n";
        char got[128];
        Diag diag;
        RuleSet *rs = parse(text, &diag);

        ck_assert_ptr_nonnull(rs);
        decide(rs, "domain=d k=x", got, sizeof got);
        ck_assert_str_eq(got, "0/1 k");
        decide(rs, "domain=d j=x", got, sizeof got);
        ck_assert_str_eq(got, "0/1 j");
        decide(rs, "domain=d n=12", got, sizeof got);
        ck_assert_str_eq(got, "4294967295/86400");
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

/* ---- refusals, each at its line ---- */

#define D "domain: d\ndescriptors:\n"

static const struct {
        const char *text;
        unsigned line;
        const char *reason;
} refusals[] = {
        { D "  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n", 5,
          "invalid rate limit unit 'fortnight' (accepted: second, minute, hour, day, week, month, year)" },
        { D "  - key: a\n    rate_limit:\n      unlimited: true\n      unit: day\n", 6,
          "should not specify rate limit unit when unlimited" },
        { D "  - key: a\n    rate_limit:\n      requests_per_unit: 5\n", 5, "rate_limit: no unit" },
        { "descriptors:\n  - key: a\n", 1, "config file cannot have empty domain" },
        { "domain: ''\n", 1, "config file cannot have empty domain" },
        { "", 1, "empty file: expected a mapping with domain and descriptors" },
        { "- a\n", 1, "expected a mapping with domain and descriptors, got a list" },
        { D "  - value: v\n", 3, "descriptor has empty key" },
        { D "  - key: a\n    ratelimit: {unit: day, requests_per_unit: 5}\n", 4, "unknown key 'ratelimit'" },
        { D "  - key: a\n    rate_limit: {unit: day, requestsperunit: 5}\n", 4,
          "unknown key 'requestsperunit'" },
        { "domain: d\nkey: a\n", 2, "unknown key 'key' (accepted here: domain, descriptors)" },
        { D "  - a\n  - b\n", 3, "descriptors: expected a list of mappings, got a scalar in it" },
        { "domain: d\ndescriptors: {key: a}\n", 2, "descriptors: expected a list, got a mapping" },
        { D "  - key: a\n    value: v\n  - key: a\n    value: v\n", 5,
          "duplicate descriptor key 'a', value 'v' (first on line 3)" },
        { D "  - key: a\n  - key: a\n", 4, "duplicate descriptor key 'a' (first on line 3)" },
        { D "  - key: a\n    rate_limit:\n      unit: second\n      name: x\n      replaces:\n        - "
            "name: y\n",
          8, "replaces: not supported" },
        { D "  - key: a\n    quota_mode: true\n", 4, "quota_mode: not supported" },
        { D "  - key: a\n    value: v\n    share_threshold: true\n", 3,
          "share_threshold can only be used with wildcard values" },
        { D "  - key: domain\n", 3, "key 'domain': divvyd passes the domain as the pair domain=<domain>" },
        { D "  - key: a*\n", 3, "key 'a*' contains '*'" },
        { "domain: d*\n", 1, "domain 'd*' contains '*'" },
        { D "  - key: a\n    descriptors:\n      - key: a\n        rate_limit: {unit: day}\n", 5,
          "key 'a' is already on this descriptor's path (line 3)" },
        { D "  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: day}\n"
            "  - key: b\n    descriptors:\n      - key: a\n        rate_limit: {unit: day}\n",
          9, "the descriptor path b.a has the keys of the path a.b (line 5) in another order" },
        { "domain: d\ndescriptors:\n  - key: [\n", 4, "YAML syntax error" },
        { "'''\n", 2, "YAML syntax error at column 1: found unexpected end of stream" },
        { "domain: d\n---\ndomain: e\n", 2, "a second YAML document" },
        { D "  - key: a\n    rate_limit: {unit: day, requests_per_unit: -1}\n", 4,
          "requests_per_unit: expected a whole number from 0 to 4294967295" },
        { D "  - key: a\n    rate_limit: {unit: day, requests_per_unit: 4294967296}\n", 4,
          "requests_per_unit: expected a whole number" },
        { D "  - key: a\n    rate_limit: {unit: day, requests_per_unit: 010}\n", 4,
          "requests_per_unit: expected a whole number" },
        { D "  - key: a\n    rate_limit: {unit: day, requests_per_unit: '5'}\n", 4,
          "requests_per_unit: expected a whole number" },
        { D "  - key: a\n    shadow_mode: maybe\n", 4, "shadow_mode: expected true or false" },
        { D "  - key: a\n    rate_limit: {unit: day, name: a.b}\n", 4, "invalid label \"a.b\"" },
        { D "  - key: a\n    rate_limit: {unit: day, name: x}\n  - key: b\n    rate_limit: {unit: day, "
            "name: x}\n",
          6, "has the label \"x\" of rule" },
        { D "  - key: a\n    key: b\n", 4, "duplicate key 'key' (first on line 3)" },
        { D "  - <<: {key: a}\n", 3, "YAML merge keys (<<) are not supported" },
        { D "  - key: a b\n    rate_limit: {unit: day}\n", 3, "key 'a b' contains a blank" },
        { D "  - key: p\n    value: f*\n    rate_limit: {unit: day}\n"
            "  - key: p\n    value: foo*\n    rate_limit: {unit: day}\n",
          6, "is unreachable" },
        { D "  - key: a\n    rate_limit: [1]\n", 4, "rate_limit: expected a mapping, got a list" },
        { D "  - key: {x: 1}\n", 3, "key: expected a string, got a mapping" },
        { D "  - key: a\n    value: \"x\\0y\"\n", 4, "value: contains a NUL character" },
        { D "  - key: a\n    value: \"x\\ny\"\n", 4,
          "value: contains a control character, which a request cannot carry" },
        { D "  - key: 'a\"'\n", 3, "key: contains '\"', which a request cannot carry" },
        { D "  - key: a\n    shadow_mode: true\n    rate_limit: {unit: day}\n"
            "  - key: b\n    shadow_mode: true\n    rate_limit: {unit: day}\n",
          0, NULL }, /* valid: the end of the table's refusals */
};

START_TEST (test_refusal) {
        Diag diag;
        RuleSet *rs;

        if (!refusals[_i].reason)
                return;
        rs = parse(refusals[_i].text, &diag);
        ck_assert_msg(rs == NULL, "refusal %d loaded", _i);
        assert_diag_has(&diag, "t.yaml", refusals[_i].line, refusals[_i].reason);
        diag_done(&diag);
}
END_TEST

/* Deeper than a request's keys: refused at the list too deep, not a crash. */
START_TEST (test_too_deep) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        Diag diag;

        fprintf(f, "domain: d\ndescriptors:\n");
        for (int i = 0; i < RULE_PATTERNS_MAX + 2; i++)
                fprintf(f, "%*s- key: k%d\n%*s  descriptors:\n", 2 * (2 * i + 1), "", i, 2 * (2 * i + 1),
                        "");
        fprintf(f, "%*s- key: last\n", 2 * (2 * RULE_PATTERNS_MAX + 5), "");
        fclose(f);
        ck_assert_ptr_null(parse(text, &diag));
        assert_diag_has(&diag, "t.yaml", 2 * RULE_PATTERNS_MAX + 1, "descriptors nested deeper than");
        diag_done(&diag);
        free(text);
}
END_TEST

/* An alias bomb: a list of aliases of lists of aliases, refused by the count of descriptors. */
START_TEST (test_alias_bomb) {
        char *big = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&big, &len);
        Diag diag;

        fprintf(f, "domain: d\ndescriptors:\n  - key: k0\n    descriptors: &l0\n");
        for (int i = 0; i < 10; i++)
                fprintf(f, "      - {key: k%d}\n", 100 + i);
        for (int level = 1; level < 8; level++) {
                fprintf(f, "  - key: k%d\n    descriptors: &l%d\n", level, level);
                for (int i = 0; i < 10; i++)
                        fprintf(f, "      - {key: x%d_%d, descriptors: *l%d}\n", level, i, level - 1);
        }
        fclose(f);
        ck_assert_ptr_null(parse(big, &diag));
        ck_assert(diag_count(&diag) >= 1);
        ck_assert_msg(strstr(diag.messages[0], "more than 100000 descriptors (aliases expanded)"), "%s",
                      diag.messages[0]);
        diag_done(&diag);
        free(big);
}
END_TEST

/* ---- directories: envoyproxy/ratelimit's layout ---- */

START_TEST (test_directory) {
        char *dir = src_path("tests/data/yaml"), got[128];
        RuleSet *rs = NULL;
        Diag diag;

        diag_init(&diag, dir);
        ck_assert_int_eq(config_load(dir, &rs, &diag), 0);
        decide(rs, "domain=ingress remote_address=10.0.0.1", got, sizeof got);
        ck_assert_str_eq(got, "100/60 remote_address");
        decide(rs, "domain=payments customer=c1", got, sizeof got);
        ck_assert_str_eq(got, "10/3600 customer");
        decide(rs, "domain=payments remote_address=10.0.0.1", got, sizeof got);
        ck_assert_str_eq(got, "ok");
        decide(rs, "domain=notes.txt k=v", got, sizeof got); /* not a .yaml file: not read */
        ck_assert_str_eq(got, "ok");
        ck_assert_str_eq(rs->source, dir);
        ruleset_free(rs);
        diag_done(&diag);
        free(dir);
}
END_TEST

START_TEST (test_directory_refusals) {
        char *dup = src_path("tests/data/yaml-dup"), *bad = src_path("tests/data/yaml-bad"),
             *empty = src_path("tests/data/yaml-empty"), *file = NULL;
        RuleSet *rs = NULL;
        Diag diag;

        /* the same domain twice: both names */
        diag_init(&diag, dup);
        ck_assert_int_eq(config_load(dup, &rs, &diag), -EINVAL);
        ck_assert_int_ge(asprintf(&file, "%s/b.yml", dup), 0);
        assert_diag_has(&diag, file, 1, "duplicate domain 'api': a.yaml configures it too");
        diag_done(&diag);
        free(file);

        /* a bad file among good ones: its own name and line; nothing loads */
        diag_init(&diag, bad);
        ck_assert_int_eq(config_load(bad, &rs, &diag), -EINVAL);
        ck_assert_int_ge(asprintf(&file, "%s/2-bad.yaml", bad), 0);
        assert_diag_has(&diag, file, 5, "invalid rate limit unit 'fortnight'");
        ck_assert_uint_eq(diag_count(&diag), 1);
        diag_done(&diag);
        free(file);

        /* no YAML file at all */
        diag_init(&diag, empty);
        ck_assert_int_eq(config_load(empty, &rs, &diag), -ENOENT);
        assert_diag_has(&diag, empty, 0, "no YAML files (*.yaml, *.yml) in the directory");
        diag_done(&diag);
        ck_assert_ptr_null(rs);

        free(dup);
        free(bad);
        free(empty);
}
END_TEST

/* A single .yaml file is a config of its own, as .ini and .json are. */
START_TEST (test_single_file) {
        char *path = src_path("tests/data/yaml/ingress.yaml"), got[128];
        RuleSet *rs = NULL;
        Diag diag;

        diag_init(&diag, path);
        ck_assert_int_eq(config_load(path, &rs, &diag), 0);
        decide(rs, "domain=ingress remote_address=10.0.0.1", got, sizeof got);
        ck_assert_str_eq(got, "100/60 remote_address");
        ruleset_free(rs);
        diag_done(&diag);
        free(path);
}
END_TEST

int main(void) {
        Suite *s = suite_create("config-yaml");
        TCase *tc = tcase_create("yaml");

        tcase_add_loop_test(tc, test_shop_decisions, 0, sizeof shop_decisions / sizeof shop_decisions[0]);
        tcase_add_test(tc, test_compiled_rules);
        tcase_add_test(tc, test_accepted_spellings);
        tcase_add_loop_test(tc, test_refusal, 0, sizeof refusals / sizeof refusals[0]);
        tcase_add_test(tc, test_too_deep);
        tcase_add_test(tc, test_alias_bomb);
        suite_add_tcase(s, tc);

        tc = tcase_create("directories");
        tcase_add_test(tc, test_directory);
        tcase_add_test(tc, test_directory_refusals);
        tcase_add_test(tc, test_single_file);
        suite_add_tcase(s, tc);

        return check_run_suite(s);
}
