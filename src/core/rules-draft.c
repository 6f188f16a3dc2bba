/* SPDX-License-Identifier: MIT */
/* Rule drafts (what a loader hands in) and ruleset_add(): a draft checked, attribute by
 * attribute, and turned into a compiled Rule (rules.c). */
#include "rules.h"

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "number.h"
#include "rules-internal.h"
#include "shared/utf8.h"

/* ---- small helpers ------------------------------------------------------------ */

static char *memdup_nul(const char *p, size_t len) {
        char *s = malloc(len + 1);
        if (!s)
                return NULL;
        if (len > 0)
                memcpy(s, p, len);
        s[len] = '\0';
        return s;
}

static bool has_control(const char *s) {
        for (const unsigned char *p = (const unsigned char *) s; *p; p++)
                if (*p < 0x20 || *p == 0x7f)
                        return true;
        return false;
}

static bool label_is_valid(const char *s) {
        size_t n = 0;
        for (const char *p = s; *p; p++, n++) {
                char c = *p;
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '-'))
                        return false;
        }
        return n >= 1 && n <= RULE_LABEL_MAX;
}

/* ---- drafts --------------------------------------------------------------------- */

void rule_draft_init(RuleDraft *d, unsigned line) {
        *d = (RuleDraft){ .line = line };
}

int rule_draft_add_pattern(RuleDraft *d, const char *key, size_t key_len, const char *value,
                           size_t value_len) {
        if (!key || key_len == 0 || key_len > RULE_TEXT_MAX || value_len > RULE_TEXT_MAX ||
            (!value && value_len > 0))
                return -EINVAL;
        for (size_t i = 0; i < d->n_patterns; i++)
                if (slice_eq(d->patterns[i].key.ptr, d->patterns[i].key.len, key, key_len))
                        return -EEXIST;
        if (d->n_patterns >= RULE_PATTERNS_MAX)
                return -E2BIG;
        d->patterns[d->n_patterns++] = (ProtoPair){
                .key = { key, key_len },
                .value = { value ? value : "", value_len },
        };
        return 0;
}

int rule_draft_set(RuleDraft *d, const char *name, const char *value, unsigned line) {
        RuleAttr a = rule_attr_from_string(name);
        if (a < 0)
                return -ENOENT;
        if (!value)
                return -EINVAL;
        if (d->attrs[a])
                return -EEXIST;
        d->attrs[a] = value;
        d->attr_lines[a] = line;
        return 0;
}

static unsigned attr_line(const RuleDraft *d, RuleAttr a) {
        return d->attr_lines[a] ? d->attr_lines[a] : d->line;
}

int rule_draft_set_diag(RuleDraft *d, const char *what, const char *name, const char *value, unsigned line,
                        Diag *diag) {
        char who[RULE_DESCRIBE_MAX + 16], desc[RULE_DESCRIBE_MAX], ex[RULE_EXCERPT_MAX + 4];
        const char *suggestion;
        int r, q;

        r = rule_draft_set(d, name, value, line);
        if (r >= 0 || !diag)
                return r;

        if (what)
                snprintf(who, sizeof who, "%s", what);
        else
                snprintf(who, sizeof who, "rule %s", rule_draft_describe(d, desc, sizeof desc));
        if (r == -ENOENT) {
                suggestion = rule_attr_suggest(name);
                if (suggestion)
                        q = diag_add(diag, line, "%s has an unknown attribute \"%s\" (did you mean \"%s\"?)",
                                     who, rule_excerpt(name ? name : "", ex), suggestion);
                else
                        q = diag_add(diag, line, "%s has an unknown attribute \"%s\" (accepted: %s)", who,
                                     rule_excerpt(name ? name : "", ex), rule_attr_names());
        } else if (r == -EEXIST)
                q = diag_add(diag, line, "%s sets %s twice (first on line %u)", who, name,
                             attr_line(d, rule_attr_from_string(name)));
        else
                q = diag_add(diag, line, "%s has no value for %s", who, name ? name : "");
        return q < 0 ? q : r;
}

/* ---- drafts into rules ---------------------------------------------------------- */

static int pattern_cmp(const void *a, const void *b) {
        const RulePattern *x = a, *y = b;
        return slice_cmp(x->key, x->key_len, y->key, y->key_len);
}

/* Parses a required number attribute. Returns 1 if valid, 0 if reported, -ENOMEM. */
static int draft_number(const RuleDraft *d, RuleAttr a, uint64_t max, const char *desc, Diag *diag,
                        uint64_t *ret) {
        char ex[RULE_EXCERPT_MAX + 4];
        const char *name = rule_attr_to_string(a), *s = d->attrs[a];
        int r;

        if (!s)
                r = rule_report(diag, d->line, desc, "has no %s (it is required)", name);
        else {
                r = parse_uint64(s, 0, max, ret);
                if (r >= 0)
                        return 1;
                if (r == -ERANGE)
                        r = rule_report(diag, attr_line(d, a), desc, "%s %s is above the maximum %" PRIu64,
                                        name, rule_excerpt(s, ex), max);
                else
                        r = rule_report(diag, attr_line(d, a), desc,
                                        "%s \"%s\" is not a non-negative decimal integer", name,
                                        rule_excerpt(s, ex));
        }
        return r < 0 ? r : 0;
}

/* An optional number attribute in [min, max]: *ret untouched if absent. Returns 1 if
 * absent or valid, 0 if reported, -ENOMEM. */
static int draft_optional_number(const RuleDraft *d, RuleAttr a, uint64_t min, uint64_t max,
                                 const char *min_hint, const char *desc, Diag *diag, uint64_t *ret) {
        uint64_t v;
        int r;

        if (!d->attrs[a])
                return 1;
        r = draft_number(d, a, max, desc, diag, &v);
        if (r <= 0)
                return r;
        if (v < min)
                return rule_report(diag, attr_line(d, a), desc,
                                   "%s %" PRIu64 " is below the minimum %" PRIu64 "%s",
                                   rule_attr_to_string(a), v, min, min_hint)
                               ?: 0;
        *ret = v;
        return 1;
}

/* The line of the attribute a reason from algo_params_prepare() is about: the one it
 * names first ("refillSeconds 7 does not divide resetSeconds 60 ..."), else the
 * algorithm's, else the rule's. */
static unsigned algo_reason_line(const RuleDraft *d, const char *reason) {
        static const RuleAttr named[] = { RULE_ATTR_CREDIT_LIMIT, RULE_ATTR_RESET_SECONDS, RULE_ATTR_BURST,
                                          RULE_ATTR_REFILL_SECONDS, RULE_ATTR_STRICT };
        const char *first = NULL;
        unsigned line = attr_line(d, RULE_ATTR_ALGORITHM);

        for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
                const char *at = d->attrs[named[i]] ? strstr(reason, rule_attr_to_string(named[i])) : NULL;
                if (at && (!first || at < first)) {
                        first = at;
                        line = attr_line(d, named[i]);
                }
        }
        return line;
}

/* An optional attribute naming a value of an enum: v is what its from_string() made of it.
 * Returns 1 if v is one (or the attribute is absent), 0 if reported, -ENOMEM. */
static int draft_enum(const RuleDraft *d, RuleAttr a, int v, const char *accepted, const char *desc,
                      Diag *diag) {
        char ex[RULE_EXCERPT_MAX + 4];

        if (v >= 0)
                return 1;
        return rule_report(diag, attr_line(d, a), desc, "has an unknown %s \"%s\" (accepted: %s)",
                           rule_attr_to_string(a), rule_excerpt(d->attrs[a], ex), accepted)
                       ?: 0;
}

/* window: optional, first-hit by default; aligned only on the windowed algorithms (a token
 * bucket has no windows: silently ignoring it would hide a mistake). Returns 1, 0 if reported,
 * -ENOMEM. */
static int draft_window(const RuleDraft *d, const char *desc, Algorithm algorithm, Diag *diag,
                        AlgoWindow *ret) {
        const char *s = d->attrs[RULE_ATTR_WINDOW];
        AlgoWindow w = s ? algo_window_from_string(s) : ALGO_WINDOW_FIRST_HIT;
        int q = draft_enum(d, RULE_ATTR_WINDOW, w, "first-hit, aligned", desc, diag);

        if (q <= 0)
                return q;
        *ret = w;
        if (w != ALGO_WINDOW_FIRST_HIT && algorithm == ALGORITHM_TOKEN_BUCKET)
                return rule_report(
                               diag, attr_line(d, RULE_ATTR_WINDOW), desc,
                               "sets window %s, which only the fixed-window and sliding-window algorithms "
                               "have (a token bucket has no windows)",
                               algo_window_to_string(w))
                               ?: 0;
        return 1;
}

/* algorithm, burst, refillSeconds, strict and window into rule->algo, with creditLimit and
 * resetSeconds (already in rule when limits_ok), then algo_params_prepare() unless the
 * rule is trivial (creditLimit 0 or resetSeconds 0 keep their meaning for every
 * algorithm). burst, refillSeconds, strict and window aligned are refused on an algorithm
 * that does not use them: silently ignoring them would hide a mistake. Returns 1, 0 if
 * reported, -ENOMEM. */
static int draft_algo(const RuleDraft *d, const char *desc, bool limits_ok, Diag *diag, Rule *rule) {
        static const RuleAttr token_bucket_only[] = { RULE_ATTR_BURST, RULE_ATTR_REFILL_SECONDS,
                                                      RULE_ATTR_STRICT };
        char ex[RULE_EXCERPT_MAX + 4];
        const char *s = d->attrs[RULE_ATTR_ALGORITHM], *reason = NULL;
        AlgoParams *p = &rule->algo;
        bool ok = true;
        int q;

        *p = (AlgoParams){ .algorithm = ALGORITHM_FIXED_WINDOW };
        if (s) {
                Algorithm a = algorithm_from_string(s);
                if (a < 0)
                        return rule_report(diag, attr_line(d, RULE_ATTR_ALGORITHM), desc,
                                           "has an unknown algorithm \"%s\" (accepted: fixed-window, "
                                           "sliding-window, token-bucket, gcra)",
                                           rule_excerpt(s, ex))
                                       ?: 0;
                p->algorithm = a;
        }
        if (p->algorithm != ALGORITHM_TOKEN_BUCKET) {
                for (size_t i = 0; i < sizeof token_bucket_only / sizeof token_bucket_only[0]; i++) {
                        RuleAttr a = token_bucket_only[i];
                        if (!d->attrs[a])
                                continue;
                        q = rule_report(diag, attr_line(d, a), desc,
                                        "sets %s, which only the token-bucket algorithm uses (this rule's "
                                        "algorithm is %s%s)",
                                        rule_attr_to_string(a), algorithm_to_string(p->algorithm),
                                        s ? "" : ", the default");
                        if (q < 0)
                                return q;
                        ok = false;
                }
                if (!ok)
                        return 0;
        }

        q = draft_optional_number(d, RULE_ATTR_BURST, 1, RULE_CREDIT_LIMIT_MAX,
                                  " (leave burst out for a capacity of creditLimit)", desc, diag, &p->burst);
        if (q < 0)
                return q;
        ok = ok && q > 0;
        q = draft_optional_number(d, RULE_ATTR_REFILL_SECONDS, 0, RULE_RESET_SECONDS_MAX, "", desc, diag,
                                  &p->refill_seconds);
        if (q < 0)
                return q;
        ok = ok && q > 0;
        s = d->attrs[RULE_ATTR_STRICT];
        if (s && strcmp(s, "true") != 0 && strcmp(s, "false") != 0) {
                q = rule_report(diag, attr_line(d, RULE_ATTR_STRICT), desc,
                                "has an invalid strict \"%s\" (accepted: true, false)", rule_excerpt(s, ex));
                if (q < 0)
                        return q;
                ok = false;
        }
        p->strict = s && strcmp(s, "true") == 0;
        q = draft_window(d, desc, p->algorithm, diag, &p->window);
        if (q < 0)
                return q;
        ok = ok && q > 0;
        if (!ok || !limits_ok)
                return 0;

        p->credit_limit = rule->credit_limit;
        p->reset_seconds = rule->reset_seconds;
        if (p->burst == 0) /* the capacity, as algo_params_prepare() sets it (trivial rules too) */
                p->burst = p->credit_limit;
        if (rule_trivial_decision(rule) != RULE_TRIVIAL_NONE)
                return 1;
        if (algo_params_prepare(p, &reason) < 0)
                return rule_report(diag, algo_reason_line(d, reason ? reason : ""), desc, "%s",
                                   reason ? reason : "has algorithm parameters that cannot be used")
                               ?: 0;
        return 1;
}

/* Copies the draft's operation into r (sorted, compiled); reports bad patterns.
 * Returns 1 if all valid, 0 if something was reported, -ENOMEM. */
static int draft_patterns(const RuleDraft *d, Rule *r, const char *desc, Diag *diag) {
        char ex[RULE_EXCERPT_MAX + 4];
        int q = 0;
        bool ok = true;

        if (d->n_patterns > RULE_PATTERNS_MAX)
                return rule_report(diag, d->line, desc, "has more than %d operation keys", RULE_PATTERNS_MAX)
                               ?: 0;
        if (d->n_patterns == 0)
                return 1;

        r->patterns = calloc(d->n_patterns, sizeof(RulePattern));
        if (!r->patterns)
                return -ENOMEM;
        for (size_t i = 0; i < d->n_patterns; i++) {
                const ProtoPair *pp = &d->patterns[i];
                const char *kp = pp->key.ptr ? pp->key.ptr : "", *vp = pp->value.ptr ? pp->value.ptr : "";
                RulePattern *p = &r->patterns[r->n_patterns];

                if (pp->key.len == 0 || pp->key.len > RULE_TEXT_MAX || pp->value.len > RULE_TEXT_MAX) {
                        q = rule_report(
                                diag, d->line, desc,
                                "has an operation key or value that is empty or longer than %d bytes",
                                RULE_TEXT_MAX);
                        if (q < 0)
                                return q;
                        ok = false;
                        continue;
                }
                if (memchr(kp, '\0', pp->key.len) || memchr(vp, '\0', pp->value.len)) {
                        q = rule_report(diag, d->line, desc, "has a NUL byte in an operation key or value");
                        if (q < 0)
                                return q;
                        ok = false;
                        continue;
                }
                p->key = memdup_nul(kp, pp->key.len);
                p->value = memdup_nul(vp, pp->value.len);
                r->n_patterns++;
                if (!p->key || !p->value)
                        return -ENOMEM;
                p->key_len = pp->key.len;
                p->value_len = pp->value.len;
        }
        qsort(r->patterns, r->n_patterns, sizeof(RulePattern), pattern_cmp);
        for (size_t i = 0; i < r->n_patterns; i++) {
                RulePattern *p = &r->patterns[i];
                if (i > 0 && pattern_cmp(&r->patterns[i - 1], p) == 0) {
                        q = rule_report(diag, d->line, desc, "has the operation key \"%s\" twice",
                                        rule_excerpt(p->key, ex));
                        if (q < 0)
                                return q;
                        ok = false;
                }
                if (rule_pattern_compile(p) < 0)
                        return -ENOMEM;
        }
        return ok;
}

/* Sets r->divvy_bucket from r's patterns (distinct keys). Returns 0 or -ENOMEM. */
static int rule_divvy_bucket(Rule *r) {
        size_t order[RULE_PATTERNS_MAX], len = 0, off = 0;
        char *b;

        assert(r->n_patterns <= RULE_PATTERNS_MAX);
        /* Insertion sort of at most RULE_PATTERNS_MAX indices, in Node divvy's key order. */
        for (size_t i = 0; i < r->n_patterns; i++) {
                size_t j = i;
                const RulePattern *p = &r->patterns[i];

                for (; j > 0; j--) {
                        const RulePattern *q = &r->patterns[order[j - 1]];
                        if (utf8_cmp_utf16(q->key, q->key_len, p->key, p->key_len) <= 0)
                                break;
                        order[j] = order[j - 1];
                }
                order[j] = i;
                len += (i > 0) + p->key_len + 1 + p->value_len;
        }
        b = malloc(len + 1);
        if (!b)
                return -ENOMEM;
        for (size_t i = 0; i < r->n_patterns; i++) {
                const RulePattern *p = &r->patterns[order[i]];

                if (i > 0)
                        b[off++] = ' ';
                memcpy(b + off, p->key, p->key_len);
                off += p->key_len;
                b[off++] = '=';
                memcpy(b + off, p->value, p->value_len);
                off += p->value_len;
        }
        b[off] = '\0';
        r->divvy_bucket = b;
        r->divvy_bucket_len = off;
        return 0;
}

/* Copies an optional text attribute, reporting over-long values and (if
 * no_control) control characters. Returns 1, 0 if reported, -ENOMEM. */
static int draft_text(const RuleDraft *d, RuleAttr a, bool no_control, const char *desc, Diag *diag,
                      char **ret, size_t *ret_len) {
        const char *s = d->attrs[a], *name = rule_attr_to_string(a);
        size_t len;
        int q;

        if (!s)
                return 1;
        len = strlen(s);
        if (len > RULE_TEXT_MAX)
                q = rule_report(diag, attr_line(d, a), desc, "%s is longer than %d bytes", name,
                                RULE_TEXT_MAX);
        else if (no_control && has_control(s))
                q = rule_report(diag, attr_line(d, a), desc, "%s contains control characters", name);
        else {
                *ret = memdup_nul(s, len);
                if (!*ret)
                        return -ENOMEM;
                if (ret_len)
                        *ret_len = len;
                return 1;
        }
        return q < 0 ? q : 0;
}

/* actorField: optional, not empty (an empty field would name no actor); one or more field
 * names separated by single spaces, each named once and at most PROTO_PAIRS_MAX (a request
 * carries no more fields). Sets rule->actor_fields. Returns 1, 0 if reported, -ENOMEM. */
static int draft_actor_field(const RuleDraft *d, const char *desc, Diag *diag, Rule *rule) {
        char ex[RULE_EXCERPT_MAX + 4], name[RULE_TEXT_MAX + 1];
        const char *s = d->attrs[RULE_ATTR_ACTOR_FIELD];
        unsigned line = attr_line(d, RULE_ATTR_ACTOR_FIELD);
        size_t n = 1;
        int q;

        if (s && s[0] == '\0')
                return rule_report(diag, line, desc,
                                   "has an empty actorField (leave it out for one shared counter)")
                               ?: 0;
        q = draft_text(d, RULE_ATTR_ACTOR_FIELD, false, desc, diag, &rule->actor_field,
                       &rule->actor_field_len);
        if (q <= 0 || !rule->actor_field)
                return q;
        for (const char *p = rule->actor_field; *p; p++)
                n += *p == ' ';
        if (n > PROTO_PAIRS_MAX)
                return rule_report(diag, line, desc,
                                   "names %zu fields in actorField \"%s\": at most %d (a request carries no "
                                   "more)",
                                   n, rule_excerpt(rule->actor_field, ex), PROTO_PAIRS_MAX)
                               ?: 0;
        rule->actor_fields = calloc(n, sizeof(ProtoSlice));
        if (!rule->actor_fields)
                return -ENOMEM;
        for (const char *p = rule->actor_field, *end;; p = end + 1) {
                ProtoSlice *f = &rule->actor_fields[rule->n_actor_fields];

                end = strchr(p, ' ');
                *f = (ProtoSlice){ p, end ? (size_t) (end - p) : strlen(p) };
                if (f->len == 0)
                        return rule_report(
                                       diag, line, desc,
                                       "has an empty field name in actorField \"%s\" (separate the names "
                                       "by single spaces)",
                                       rule_excerpt(rule->actor_field, ex))
                                       ?: 0;
                for (size_t i = 0; i < rule->n_actor_fields; i++)
                        if (slice_eq(rule->actor_fields[i].ptr, rule->actor_fields[i].len, f->ptr, f->len)) {
                                memcpy(name, f->ptr, f->len); /* <= RULE_TEXT_MAX */
                                name[f->len] = '\0';
                                return rule_report(diag, line, desc,
                                                   "names the field \"%s\" twice in actorField",
                                                   rule_excerpt(name, ex))
                                               ?: 0;
                        }
                rule->n_actor_fields++;
                if (!end)
                        return 1;
        }
}

/* An optional enum attribute of matching (matchPolicy, matchKeys) whose value v (dflt if absent)
 * a default rule must leave at dflt, named dflt_name: it is the last word for the requests
 * nothing else matches. Returns 1, 0 if reported, -ENOMEM. */
static int draft_match_enum(const RuleDraft *d, RuleAttr a, int v, int dflt, const char *dflt_name,
                            const char *accepted, const char *desc, Diag *diag) {
        int q = draft_enum(d, a, v, accepted, desc, diag);

        if (q <= 0)
                return q;
        if (d->n_patterns == 0 && v != dflt)
                return rule_report(diag, attr_line(d, a), desc,
                                   "is a default rule (empty operation) and must have %s %s",
                                   rule_attr_to_string(a), dflt_name)
                               ?: 0;
        return 1;
}

/* matchPolicy: optional, stop by default, and on a default rule. Returns 1, 0 if reported,
 * -ENOMEM. */
static int draft_match_policy(const RuleDraft *d, const char *desc, Diag *diag, MatchPolicy *ret) {
        const char *s = d->attrs[RULE_ATTR_MATCH_POLICY];

        *ret = s ? match_policy_from_string(s) : MATCH_POLICY_STOP;
        return draft_match_enum(d, RULE_ATTR_MATCH_POLICY, *ret, MATCH_POLICY_STOP, "stop",
                                "stop, canary, continue", desc, diag);
}

/* matchKeys: optional, subset by default, and on a default rule (exact would match only the
 * requests without fields). Returns 1, 0 if reported, -ENOMEM. */
static int draft_match_keys(const RuleDraft *d, const char *desc, Diag *diag, MatchKeys *ret) {
        const char *s = d->attrs[RULE_ATTR_MATCH_KEYS];

        *ret = s ? match_keys_from_string(s) : MATCH_KEYS_SUBSET;
        return draft_match_enum(d, RULE_ATTR_MATCH_KEYS, *ret, MATCH_KEYS_SUBSET, "subset", "subset, exact",
                                desc, diag);
}

/* label: optional, ^[a-zA-Z0-9_-]{1,255}$ (it names metrics series). Returns 1, 0 if
 * reported, -ENOMEM. */
static int draft_label(const RuleDraft *d, const char *desc, Diag *diag, Rule *rule) {
        char ex[RULE_EXCERPT_MAX + 4];
        const char *s = d->attrs[RULE_ATTR_LABEL];

        rule->label_line = s ? attr_line(d, RULE_ATTR_LABEL) : 0;
        if (s && !label_is_valid(s))
                return rule_report(diag, attr_line(d, RULE_ATTR_LABEL), desc,
                                   "has an invalid label \"%s\": use 1 to %d of a-z A-Z 0-9 _ -",
                                   rule_excerpt(s, ex), RULE_LABEL_MAX)
                               ?: 0;
        return draft_text(d, RULE_ATTR_LABEL, true, desc, diag, &rule->label, NULL);
}

/* onBackendError: optional, the daemon's --on-backend-error when absent. Not part of the
 * rule's id: what a rule answers while the remote store is down says nothing about its
 * counter. Returns 1, 0 if reported, -ENOMEM. */
static int draft_on_backend_error(const RuleDraft *d, const char *desc, Diag *diag, RuleOnError *ret) {
        const char *s = d->attrs[RULE_ATTR_ON_BACKEND_ERROR];
        RuleOnError e = s ? rule_on_error_from_string(s) : RULE_ON_ERROR_DEFAULT;

        if (e >= 0)
                *ret = e;
        return draft_enum(d, RULE_ATTR_ON_BACKEND_ERROR, e, "allow, deny, local", desc, diag);
}

static int ruleset_grow(RuleSet *rs) {
        if (rs->n_rules < rs->n_allocated)
                return 0;
        size_t n = rs->n_allocated ? rs->n_allocated * 2 : 16;
        Rule *rules = realloc(rs->rules, n * sizeof(Rule));
        if (!rules)
                return -ENOMEM;
        rs->rules = rules;
        rs->n_allocated = n;
        return 0;
}

int ruleset_add(RuleSet *rs, const RuleDraft *d, Diag *diag) {
        char desc[RULE_DESCRIBE_MAX];
        Rule rule = { .line = d->line,
                      .match_policy = MATCH_POLICY_STOP,
                      .divvy_notes = d->divvy_notes,
                      .divvy_attrs = d->divvy_attrs };
        bool ok = true;
        int q;

        if (rs->finalized)
                return -EBUSY;

        rule_draft_describe(d, desc, sizeof desc);

        if (rs->n_rules >= RULES_MAX) {
                q = rule_report(diag, d->line, desc, "is one too many: a config has at most %d rules",
                                RULES_MAX);
                return q < 0 ? q : -EINVAL;
        }

#define CHECK(expr)                                                                                         \
        do {                                                                                                \
                int _q = (expr);                                                                            \
                if (_q < 0)                                                                                 \
                        goto fail_errno;                                                                    \
                if (_q == 0)                                                                                \
                        ok = false;                                                                         \
        } while (0)

        if (d->is_default && d->n_patterns > 0)
                CHECK(rule_report(diag, d->line, desc, "is marked default but has an operation") ?: 0);

        CHECK(draft_patterns(d, &rule, desc, diag));
        bool ok_before_limits = ok;
        ok = true;
        CHECK(draft_number(d, RULE_ATTR_CREDIT_LIMIT, RULE_CREDIT_LIMIT_MAX, desc, diag,
                           &rule.credit_limit));
        CHECK(draft_number(d, RULE_ATTR_RESET_SECONDS, RULE_RESET_SECONDS_MAX, desc, diag,
                           &rule.reset_seconds));
        /* The algorithm's parameters are checked against the limits only when both are known. */
        bool limits_ok = ok;
        ok = ok && ok_before_limits;
        CHECK(draft_algo(d, desc, limits_ok, diag, &rule));

        CHECK(draft_actor_field(d, desc, diag, &rule));
        CHECK(draft_match_policy(d, desc, diag, &rule.match_policy));
        CHECK(draft_match_keys(d, desc, diag, &rule.match_keys));
        CHECK(draft_label(d, desc, diag, &rule));
        CHECK(draft_on_backend_error(d, desc, diag, &rule.on_backend_error));
        CHECK(draft_text(d, RULE_ATTR_COMMENT, true, desc, diag, &rule.comment, NULL));
#undef CHECK

        if (!ok) {
                rule_done(&rule);
                return -EINVAL;
        }
        if (rule_compute_id(&rule) < 0 || rule_divvy_bucket(&rule) < 0 || ruleset_grow(rs) < 0)
                goto fail_errno;

        rule.index = rs->n_rules;
        rs->rules[rs->n_rules++] = rule;
        return 0;

fail_errno:
        rule_done(&rule);
        return -ENOMEM;
}
