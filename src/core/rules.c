/* SPDX-License-Identifier: MIT */
#include "rules.h"
#include "rules-internal.h"

#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hash.h"
#include "number.h"
#include "shared/utf8.h"
#include "shared/utf8.h"

/* The limits algorithm.h and protocol.h repeat (they cannot include rules.h) must stay the
 * rules' own: a rule that loads must be one the algorithms and replies handle. */
_Static_assert(ALGO_CREDIT_MAX == RULE_CREDIT_LIMIT_MAX, "algorithm.h's creditLimit bound");
_Static_assert(ALGO_RESET_SECONDS_MAX == RULE_RESET_SECONDS_MAX, "algorithm.h's resetSeconds bound");
_Static_assert(PROTO_LABEL_MAX == RULE_LABEL_MAX, "protocol.h's label length");

/* ---- names ------------------------------------------------------------------ */

static const char *const rule_attr_table[_RULE_ATTR_MAX] = {
        [RULE_ATTR_CREDIT_LIMIT] = "creditLimit",
        [RULE_ATTR_RESET_SECONDS] = "resetSeconds",
        [RULE_ATTR_ACTOR_FIELD] = "actorField",
        [RULE_ATTR_MATCH_POLICY] = "matchPolicy",
        [RULE_ATTR_LABEL] = "label",
        [RULE_ATTR_COMMENT] = "comment",
        [RULE_ATTR_ALGORITHM] = "algorithm",
        [RULE_ATTR_BURST] = "burst",
        [RULE_ATTR_REFILL_SECONDS] = "refillSeconds",
        [RULE_ATTR_STRICT] = "strict",
        [RULE_ATTR_ON_BACKEND_ERROR] = "onBackendError",
        [RULE_ATTR_WINDOW] = "window",
        [RULE_ATTR_MATCH_KEYS] = "matchKeys",
};

/* RULE_ON_ERROR_DEFAULT has no name: it is the absence of the attribute. */
static const char *const rule_on_error_table[_RULE_ON_ERROR_MAX] = {
        [RULE_ON_ERROR_ALLOW] = "allow",
        [RULE_ON_ERROR_DENY] = "deny",
        [RULE_ON_ERROR_LOCAL] = "local",
};

static const char *const match_policy_table[_MATCH_POLICY_MAX] = {
        [MATCH_POLICY_STOP] = "stop",
        [MATCH_POLICY_CANARY] = "canary",
        [MATCH_POLICY_CONTINUE] = "continue",
};

static const char *const match_keys_table[_MATCH_KEYS_MAX] = {
        [MATCH_KEYS_SUBSET] = "subset",
        [MATCH_KEYS_EXACT] = "exact",
};

/* Index of s in table[0..n), compared exactly (or ignoring case), or -EINVAL. */
static int string_table_lookup(const char *const *table, int n, const char *s, bool ignore_case) {
        if (!s)
                return -EINVAL;
        for (int i = 0; i < n; i++)
                if (table[i] && (ignore_case ? strcasecmp(s, table[i]) : strcmp(s, table[i])) == 0)
                        return i;
        return -EINVAL;
}

const char *rule_attr_to_string(RuleAttr a) {
        return a >= 0 && a < _RULE_ATTR_MAX ? rule_attr_table[a] : NULL;
}

RuleAttr rule_attr_from_string(const char *s) {
        return (RuleAttr) string_table_lookup(rule_attr_table, _RULE_ATTR_MAX, s, false);
}

const char *rule_attr_names(void) {
        return "creditLimit, resetSeconds, actorField, matchPolicy, label, comment, algorithm, burst, "
               "refillSeconds, strict, onBackendError, window, matchKeys";
}

const char *rule_attr_suggest(const char *s) {
        int i = string_table_lookup(rule_attr_table, _RULE_ATTR_MAX, s, true);
        return i >= 0 ? rule_attr_table[i] : NULL;
}

const char *match_policy_to_string(MatchPolicy p) {
        return p >= 0 && p < _MATCH_POLICY_MAX ? match_policy_table[p] : NULL;
}

MatchPolicy match_policy_from_string(const char *s) {
        return (MatchPolicy) string_table_lookup(match_policy_table, _MATCH_POLICY_MAX, s, false);
}

const char *match_keys_to_string(MatchKeys k) {
        return k >= 0 && k < _MATCH_KEYS_MAX ? match_keys_table[k] : NULL;
}

MatchKeys match_keys_from_string(const char *s) {
        return (MatchKeys) string_table_lookup(match_keys_table, _MATCH_KEYS_MAX, s, false);
}

const char *rule_on_error_to_string(RuleOnError e) {
        return e >= 0 && e < _RULE_ON_ERROR_MAX ? rule_on_error_table[e] : NULL;
}

RuleOnError rule_on_error_from_string(const char *s) {
        return (RuleOnError) string_table_lookup(rule_on_error_table, _RULE_ON_ERROR_MAX, s, false);
}

/* ---- small helpers ------------------------------------------------------------ */

const char *rule_excerpt(const char *s, char buf[static RULE_EXCERPT_MAX + 4]) {
        size_t len = strlen(s), n = len > RULE_EXCERPT_MAX ? utf8_boundary(s, RULE_EXCERPT_MAX) : len;
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char) s[i];
                buf[i] = c < 0x20 || c == 0x7f || c == '"' ? '?' : (char) c;
        }
        if (n < len)
                memcpy(buf + n, "...", 3), n += 3;
        buf[n] = '\0';
        return buf;
}

/* ---- describing rules ----------------------------------------------------------- */

typedef struct Writer {
        char *buf;
        size_t size, len;
        bool truncated;
} Writer;

static void writer_put(Writer *w, const char *p, size_t n) {
        if (w->truncated)
                return;
        size_t room = w->size - 1 - w->len;
        if (n > room) {
                n = room;
                w->truncated = true;
        }
        memcpy(w->buf + w->len, p, n);
        w->len += n;
}

static void writer_put_char(Writer *w, char c) {
        writer_put(w, &c, 1);
}

/* Writes a key or value as the protocol would accept it: bare if it has no
 * whitespace, '=' or '"' and is not empty, else in double quotes. Bytes the
 * protocol cannot carry ('"' in quotes, control bytes) are shown as '?'. */
static void writer_put_token(Writer *w, const char *p, size_t n) {
        bool quote = n == 0;
        for (size_t i = 0; i < n && !quote; i++)
                quote = strchr(" \t\r\n\v\f=\"", p[i]) != NULL && p[i] != '\0';
        if (quote)
                writer_put_char(w, '"');
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char) p[i];
                writer_put_char(w, c < 0x20 || c == 0x7f || c == '"' ? '?' : (char) c);
        }
        if (quote)
                writer_put_char(w, '"');
}

static const char *writer_finish(Writer *w) {
        if (w->truncated && w->size >= 5) {
                size_t pos = utf8_boundary(w->buf, w->size - 5);
                memcpy(w->buf + pos, "...]", 4);
                w->len = pos + 4;
        }
        w->buf[w->len] = '\0';
        return w->buf;
}

const char *rule_describe(const Rule *r, char *buf, size_t size) {
        Writer w = { .buf = buf, .size = size };

        if (!buf || size == 0)
                return buf;
        if (r->n_patterns == 0) {
                writer_put(&w, "[default]", 9);
                return writer_finish(&w);
        }
        writer_put_char(&w, '[');
        for (size_t i = 0; i < r->n_patterns; i++) {
                const RulePattern *p = &r->patterns[i];
                if (i > 0)
                        writer_put_char(&w, ' ');
                writer_put_token(&w, p->key, p->key_len);
                writer_put_char(&w, '=');
                writer_put_token(&w, p->value, p->value_len);
        }
        writer_put_char(&w, ']');
        return writer_finish(&w);
}

const char *rule_draft_describe(const RuleDraft *d, char *buf, size_t size) {
        Writer w = { .buf = buf, .size = size };
        uint8_t order[RULE_PATTERNS_MAX];
        size_t n = d->n_patterns < RULE_PATTERNS_MAX ? d->n_patterns : RULE_PATTERNS_MAX;

        if (!buf || size == 0)
                return buf;
        if (n == 0) {
                writer_put(&w, "[default]", 9);
                return writer_finish(&w);
        }
        /* Insertion sort of at most RULE_PATTERNS_MAX indices by key. */
        for (size_t i = 0; i < n; i++) {
                size_t j = i;
                for (; j > 0; j--) {
                        const ProtoSlice *a = &d->patterns[order[j - 1]].key, *b = &d->patterns[i].key;
                        if (slice_cmp(a->ptr, a->len, b->ptr, b->len) <= 0)
                                break;
                        order[j] = order[j - 1];
                }
                order[j] = (uint8_t) i;
        }
        writer_put_char(&w, '[');
        for (size_t i = 0; i < n; i++) {
                const ProtoPair *p = &d->patterns[order[i]];
                if (i > 0)
                        writer_put_char(&w, ' ');
                writer_put_token(&w, p->key.ptr, p->key.len);
                writer_put_char(&w, '=');
                writer_put_token(&w, p->value.ptr, p->value.len);
        }
        writer_put_char(&w, ']');
        return writer_finish(&w);
}

static int rule_vreport(Diag *diag, const char *file, unsigned line, const char *desc, const char *fmt,
                        va_list ap) __attribute__((format(printf, 5, 0)));
static int rule_vreport(Diag *diag, const char *file, unsigned line, const char *desc, const char *fmt,
                        va_list ap) {
        char *reason = NULL;
        int r;

        if (!diag)
                return 0;
        r = vasprintf(&reason, fmt, ap);
        if (r < 0)
                return -ENOMEM;
        r = diag_add_in(diag, file, line, "rule %s %s", desc, reason);
        free(reason);
        return r;
}

int rule_report(Diag *diag, unsigned line, const char *desc, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = rule_vreport(diag, NULL, line, desc, fmt, ap);
        va_end(ap);
        return r;
}

int rule_report_in(Diag *diag, const char *file, unsigned line, const char *desc, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = rule_vreport(diag, file, line, desc, fmt, ap);
        va_end(ap);
        return r;
}

/* Where rule o is, for a message about rule r: "line N", or "FILE:N" if o is in another file
 * of a directory (buf: RULE_WHERE_MAX bytes). */
#define RULE_WHERE_MAX 4096
static const char *rule_where(const Rule *r, const Rule *o, char *buf) {
        if (o->file && (!r->file || strcmp(o->file, r->file) != 0))
                snprintf(buf, RULE_WHERE_MAX, "%s:%u", o->file, o->line);
        else
                snprintf(buf, RULE_WHERE_MAX, "line %u", o->line);
        return buf;
}

/* ---- rules ---------------------------------------------------------------------- */

static void pattern_done(RulePattern *p) {
        free(p->key);
        free(p->value);
        free(p->segments);
        *p = (RulePattern){};
}

void rule_done(Rule *r) {
        for (size_t i = 0; i < r->n_patterns; i++)
                pattern_done(&r->patterns[i]);
        free(r->patterns);
        free(r->divvy_bucket);
        free(r->actor_field);
        free(r->actor_fields);
        free(r->label);
        free(r->comment);
        *r = (Rule){};
}

/* Classifies p->value and, for globs, splits it at '*' into its non-empty literal
 * segments (pointing into p->value). */
int rule_pattern_compile(RulePattern *p) {
        const char *v = p->value;
        size_t len = p->value_len, n = 0;

        if (len == 1 && v[0] == '*') {
                p->kind = PATTERN_ANY;
                return 0;
        }
        if (!memchr(v, '*', len)) {
                p->kind = PATTERN_EXACT;
                return 0;
        }

        p->kind = PATTERN_GLOB;
        p->anchored_start = v[0] != '*';
        p->anchored_end = v[len - 1] != '*';
        for (size_t i = 0; i < len; i++)
                if (v[i] != '*' && (i == 0 || v[i - 1] == '*'))
                        n++;
        if (n == 0)
                return 0; /* only stars: matches every value */
        p->segments = calloc(n, sizeof(ProtoSlice));
        if (!p->segments)
                return -ENOMEM;
        for (size_t i = 0; i < len;) {
                if (v[i] == '*') {
                        i++;
                        continue;
                }
                size_t start = i;
                while (i < len && v[i] != '*')
                        i++;
                p->segments[p->n_segments++] = (ProtoSlice){ v + start, i - start };
        }
        return 0;
}

static bool glob_match(const RulePattern *p, const char *v, size_t len) {
        const ProtoSlice *s = p->segments;
        size_t first = 0, last = p->n_segments, pos = 0, end = len;

        if (p->anchored_start) {
                if (last == 0 || s[0].len > len || memcmp(v, s[0].ptr, s[0].len) != 0)
                        return false;
                pos = s[0].len;
                first = 1;
        }
        if (p->anchored_end && last > first) {
                const ProtoSlice *e = &s[last - 1];
                if (e->len > end - pos || memcmp(v + len - e->len, e->ptr, e->len) != 0)
                        return false;
                end = len - e->len;
                last--;
        }
        /* The middle segments float: the leftmost occurrence of each is always the
         * best choice, so one forward scan decides (no backtracking). */
        for (size_t i = first; i < last; i++) {
                const char *hit = memmem(v + pos, end - pos, s[i].ptr, s[i].len);
                if (!hit)
                        return false;
                pos = (size_t) (hit - v) + s[i].len;
        }
        return true;
}

bool rule_pattern_match(const RulePattern *p, const char *v, size_t len) {
        if (!v)
                v = "";
        switch (p->kind) {
        case PATTERN_ANY:
                return true;
        case PATTERN_EXACT:
                return slice_eq(v, len, p->value, p->value_len);
        case PATTERN_GLOB:
                return glob_match(p, v, len);
        default:
                return false;
        }
}

/* True if r matches req: each of its keys present with a matching value, and with matchKeys
 * exact no other field (the request's keys are distinct, so counting them is enough: checked
 * first, the cheapest test). */
static bool rule_matches(const Rule *r, const ProtoRequest *req) {
        if (r->match_keys == MATCH_KEYS_EXACT && req->n_pairs != r->n_patterns)
                return false;
        for (size_t i = 0; i < r->n_patterns; i++) {
                const RulePattern *p = &r->patterns[i];
                const ProtoSlice *v = proto_request_get(req, p->key, p->key_len);
                if (!v || !rule_pattern_match(p, v->ptr, v->len))
                        return false;
        }
        return true;
}

/* The value of field f in req: "" when absent. */
static ProtoSlice actor_value(const ProtoRequest *req, const char *f, size_t f_len) {
        const ProtoSlice *v = proto_request_get(req, f, f_len);

        return v && v->ptr ? *v : (ProtoSlice){ "", 0 };
}

/* The hashed form of a long combination (rules.h): "#" and the hash of the values' hashes. */
static size_t actor_hashed(const ProtoSlice *v, size_t n, char *buf) {
        static const char hex[] = "0123456789abcdef";
        uint8_t h[PROTO_PAIRS_MAX][HASH128_SIZE], out[HASH128_SIZE];

        assert(n <= PROTO_PAIRS_MAX);
        for (size_t i = 0; i < n; i++)
                hash128(v[i].ptr, v[i].len, h[i]);
        hash128(h, n * HASH128_SIZE, out);
        buf[0] = '#';
        for (size_t i = 0; i < HASH128_SIZE; i++) {
                buf[1 + 2 * i] = hex[out[i] >> 4];
                buf[2 + 2 * i] = hex[out[i] & 15];
        }
        return 1 + 2 * HASH128_SIZE;
}

_Static_assert(RULE_ACTOR_COMBINED_MAX >= 1 + 2 * HASH128_SIZE, "the hashed form of an actor fits");

ProtoSlice rule_actor(const Rule *r, const ProtoRequest *req, char buf[static RULE_ACTOR_COMBINED_MAX]) {
        ProtoSlice v[PROTO_PAIRS_MAX];
        char digits[20];
        size_t len = 0, n = r->n_actor_fields;
        char *p = buf;

        if (!r->actor_field)
                return (ProtoSlice){ NULL, 0 };
        if (n <= 1)
                return actor_value(req, r->actor_field, r->actor_field_len);
        assert(n <= PROTO_PAIRS_MAX); /* rules-draft.c's bound */
        for (size_t i = 0; i < n; i++) {
                v[i] = actor_value(req, r->actor_fields[i].ptr, r->actor_fields[i].len);
                len += (size_t) (number_append_u64(digits, v[i].len) - digits) + 2 + v[i].len;
        }
        if (len > RULE_ACTOR_COMBINED_MAX)
                return (ProtoSlice){ buf, actor_hashed(v, n, buf) };
        for (size_t i = 0; i < n; i++) {
                p = number_append_u64(p, v[i].len);
                *p++ = ':';
                if (v[i].len > 0)
                        memcpy(p, v[i].ptr, v[i].len);
                p += v[i].len;
                *p++ = ',';
        }
        return (ProtoSlice){ buf, (size_t) (p - buf) };
}

/* Counter identity. This encoding is part of the on-disk format (rule ids key the
 * counters in the store): changing it orphans every counter, so bump
 * STORE_FORMAT_VERSION if you must. hash128() over:
 *
 *   "divvyd-rule-id-v1"                       17 bytes, no NUL
 *   u32le n_patterns
 *   n_patterns x { u32le key_len, key bytes, u32le value_len, value bytes }
 *                                             sorted by key, bytewise
 *   u64le creditLimit
 *   u64le resetSeconds
 *   u8 0                                      no actorField, or
 *   u8 1, u32le actor_len, actor bytes        with actorField naming one field, or
 *   u8 2, u32le n_fields,                     with actorField naming several (issue #34), in
 *     n_fields x { u32le name_len, name }     the order written
 *
 * and then, only for a rule whose algorithm is not fixed-window (issue #15: the
 * default, with which burst, refillSeconds and strict are refused), so that every
 * rule of an older config keeps its id:
 *
 *   u8 0xa1                                   tag: algorithm parameters, v1
 *   u8 algorithm                              Algorithm (algorithm.h), gcra = token-bucket
 *   u64le burst                               0 when it is creditLimit (the default)
 *   u64le refillSeconds                       0: continuous refill (the default)
 *   u8 strict                                 0 or 1
 *
 * and then, only for a rule whose window is not first-hit (issue #34):
 *
 *   u8 0xa2                                   tag: the window, v1
 *   u8 window                                 AlgoWindow (algorithm.h)
 *
 * Every variable-length field is length-prefixed, so no two different rules
 * encode alike (the v1 encoding ends where it ends, and each tail starts with its own tag,
 * so a tail cannot make one rule look like another). Position, label, comment, matchPolicy,
 * matchKeys and onBackendError are not included: reordering, relabelling, recommenting,
 * promoting a canary (to stop or continue), matching exactly the rule's keys or changing
 * what the rule answers while the remote store is down keeps counting in the same counters
 * across a reload. */
#define RULE_ID_MAGIC     "divvyd-rule-id-v1"
#define RULE_ID_ALGO_V1   0xa1
#define RULE_ID_WINDOW_V1 0xa2

/* True if the rule's algorithm parameters are divvy's: then they stay out of its id. A
 * fixed-window rule has no others (draft_algo() refuses burst, refillSeconds and strict on it). */
static bool rule_algo_is_default(const Rule *r) {
        return r->algo.algorithm == ALGORITHM_FIXED_WINDOW;
}

static uint8_t *put_le(uint8_t *p, uint64_t v, unsigned bytes) {
        for (unsigned i = 0; i < bytes; i++)
                *p++ = (uint8_t) (v >> (8 * i));
        return p;
}

static uint8_t *put_bytes(uint8_t *p, const char *s, size_t len) {
        p = put_le(p, len, 4);
        if (len > 0)
                memcpy(p, s, len);
        return p + len;
}

int rule_compute_id(Rule *r) {
        size_t size = strlen(RULE_ID_MAGIC) + 4 + 8 + 8 + 1 + 4 + r->actor_field_len +
                      4 * r->n_actor_fields + 1 + 1 + 8 + 8 + 1 + 1 + 1;
        for (size_t i = 0; i < r->n_patterns; i++)
                size += 8 + r->patterns[i].key_len + r->patterns[i].value_len;

        uint8_t *buf = malloc(size), *p = buf;
        if (!buf)
                return -ENOMEM;
        memcpy(p, RULE_ID_MAGIC, strlen(RULE_ID_MAGIC));
        p += strlen(RULE_ID_MAGIC);
        p = put_le(p, r->n_patterns, 4);
        for (size_t i = 0; i < r->n_patterns; i++) {
                p = put_bytes(p, r->patterns[i].key, r->patterns[i].key_len);
                p = put_bytes(p, r->patterns[i].value, r->patterns[i].value_len);
        }
        p = put_le(p, r->credit_limit, 8);
        p = put_le(p, r->reset_seconds, 8);
        if (r->n_actor_fields > 1) {
                *p++ = 2;
                p = put_le(p, r->n_actor_fields, 4);
                for (size_t i = 0; i < r->n_actor_fields; i++)
                        p = put_bytes(p, r->actor_fields[i].ptr, r->actor_fields[i].len);
        } else if (r->actor_field) {
                *p++ = 1;
                p = put_bytes(p, r->actor_field, r->actor_field_len);
        } else
                *p++ = 0;
        if (!rule_algo_is_default(r)) {
                *p++ = RULE_ID_ALGO_V1;
                *p++ = (uint8_t) r->algo.algorithm;
                p = put_le(p, r->algo.burst == r->credit_limit ? 0 : r->algo.burst, 8);
                p = put_le(p, r->algo.refill_seconds, 8);
                *p++ = r->algo.strict ? 1 : 0;
        }
        if (r->algo.window != ALGO_WINDOW_FIRST_HIT) {
                *p++ = RULE_ID_WINDOW_V1;
                *p++ = (uint8_t) r->algo.window;
        }
        assert((size_t) (p - buf) <= size);
        hash128(buf, (size_t) (p - buf), r->id);
        free(buf);
        return 0;
}

/* ---- rule sets -------------------------------------------------------------------- */

typedef struct IndexSlot {
        const char *value; /* a rule's pattern value; NULL: free slot */
        size_t value_len;
        uint64_t hash;
        uint32_t start, count; /* range of RuleIndex.lists */
} IndexSlot;

struct RuleIndex {
        const char *key; /* a rule's pattern key; NULL: no index, every rule is "other" */
        size_t key_len;
        IndexSlot *slots;
        size_t mask;     /* n_slots - 1, n_slots a power of two */
        uint32_t *lists; /* rule indices grouped by value, ascending in each group */
        size_t n_indexed, n_values;
        uint32_t *others; /* rules without an exact pattern on key, ascending */
        size_t n_others;
};

static RuleIndex *rule_index_free(RuleIndex *ix) {
        if (!ix)
                return NULL;
        free(ix->slots);
        free(ix->lists);
        free(ix->others);
        free(ix);
        return NULL;
}

int ruleset_new(const char *source, RuleSet **ret) {
        RuleSet *rs = calloc(1, sizeof(RuleSet));
        if (!rs)
                return -ENOMEM;
        if (source) {
                rs->source = strdup(source);
                if (!rs->source) {
                        free(rs);
                        return -ENOMEM;
                }
        }
        *ret = rs;
        return 0;
}

RuleSet *ruleset_free(RuleSet *rs) {
        if (!rs)
                return NULL;
        for (size_t i = 0; i < rs->n_rules; i++)
                rule_done(&rs->rules[i]);
        free(rs->rules);
        rule_index_free(rs->index);
        for (size_t i = 0; i < rs->n_files; i++)
                free(rs->files[i]);
        free(rs->files);
        free(rs->source);
        free(rs);
        return NULL;
}

int ruleset_set_file(RuleSet *rs, size_t from, const char *file) {
        char **files = realloc(rs->files, (rs->n_files + 1) * sizeof(char *));

        if (!files)
                return -ENOMEM;
        rs->files = files;
        rs->files[rs->n_files] = strdup(file);
        if (!rs->files[rs->n_files])
                return -ENOMEM;
        for (size_t i = from; i < rs->n_rules; i++)
                rs->rules[i].file = rs->files[rs->n_files];
        rs->n_files++;
        return 0;
}

/* ---- the index -------------------------------------------------------------------- */

/* FNV-1a, then a final avalanche so the low bits (the slot number) depend on every byte. */
static uint64_t index_hash(const char *p, size_t len) {
        uint64_t h = UINT64_C(0xcbf29ce484222325);
        for (size_t i = 0; i < len; i++) {
                h ^= (unsigned char) p[i];
                h *= UINT64_C(0x100000001b3);
        }
        h ^= h >> 33;
        h *= UINT64_C(0xff51afd7ed558ccd);
        h ^= h >> 33;
        return h;
}

static const IndexSlot *index_lookup(const RuleIndex *ix, const char *v, size_t len) {
        if (!ix->slots)
                return NULL;
        uint64_t h = index_hash(v ? v : "", len);
        for (size_t i = h & ix->mask;; i = (i + 1) & ix->mask) {
                const IndexSlot *s = &ix->slots[i];
                if (!s->value)
                        return NULL;
                if (s->hash == h && slice_eq(s->value, s->value_len, v ? v : "", len))
                        return s;
        }
}

static IndexSlot *index_insert(RuleIndex *ix, const char *v, size_t len) {
        uint64_t h = index_hash(v, len);
        for (size_t i = h & ix->mask;; i = (i + 1) & ix->mask) {
                IndexSlot *s = &ix->slots[i];
                if (!s->value) {
                        *s = (IndexSlot){ .value = v, .value_len = len, .hash = h };
                        ix->n_values++;
                        return s;
                }
                if (s->hash == h && slice_eq(s->value, s->value_len, v, len))
                        return s;
        }
}

static const RulePattern *rule_find_pattern(const Rule *r, const char *key, size_t key_len) {
        size_t lo = 0, hi = r->n_patterns;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = slice_cmp(r->patterns[mid].key, r->patterns[mid].key_len, key, key_len);
                if (c == 0)
                        return &r->patterns[mid];
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return NULL;
}

static int key_value_ptr_cmp(const void *a, const void *b) {
        const RulePattern *x = *(const RulePattern *const *) a, *y = *(const RulePattern *const *) b;
        int c = slice_cmp(x->key, x->key_len, y->key, y->key_len);
        return c != 0 ? c : slice_cmp(x->value, x->value_len, y->value, y->value_len);
}

/* Picks the index key: the one that minimizes the longest walk a request can cause,
 * (rules without an exact pattern on the key) + (largest group of rules sharing one
 * exact value). With 10,000 rules [method=GET path=/api/N], "path" (10,000 groups of
 * 1) wins over "method" (one group of 10,000). Ties: the bytewise smallest key, so the
 * choice is deterministic. *ret is NULL if no rule has an exact pattern. */
static int index_pick_key(const RuleSet *rs, const RulePattern **ret) {
        size_t n = 0, best_cost = SIZE_MAX;
        const RulePattern **all, *best = NULL;

        for (size_t i = 0; i < rs->n_rules; i++)
                for (size_t j = 0; j < rs->rules[i].n_patterns; j++)
                        n += rs->rules[i].patterns[j].kind == PATTERN_EXACT;
        *ret = NULL;
        if (n == 0)
                return 0;
        all = malloc(n * sizeof(*all));
        if (!all)
                return -ENOMEM;
        n = 0;
        for (size_t i = 0; i < rs->n_rules; i++)
                for (size_t j = 0; j < rs->rules[i].n_patterns; j++)
                        if (rs->rules[i].patterns[j].kind == PATTERN_EXACT)
                                all[n++] = &rs->rules[i].patterns[j];
        qsort(all, n, sizeof(*all), key_value_ptr_cmp);
        for (size_t i = 0, key_run; i < n; i += key_run) {
                size_t max_group = 0, group = 0;
                for (key_run = 0; i + key_run < n; key_run++) {
                        const RulePattern *p = all[i + key_run],
                                          *prev = key_run > 0 ? all[i + key_run - 1] : NULL;
                        if (!slice_eq(p->key, p->key_len, all[i]->key, all[i]->key_len))
                                break;
                        if (prev && slice_eq(p->value, p->value_len, prev->value, prev->value_len))
                                group++;
                        else
                                group = 1;
                        if (group > max_group)
                                max_group = group;
                }
                /* A rule has each key at most once, so key_run rules are indexed. */
                size_t cost = rs->n_rules - key_run + max_group;
                if (cost < best_cost) {
                        best_cost = cost;
                        best = all[i];
                }
        }
        free(all);
        *ret = best;
        return 0;
}

static int rule_index_build(const RuleSet *rs, RuleIndex **ret) {
        RuleIndex *ix = calloc(1, sizeof(RuleIndex));
        const RulePattern *key;
        size_t n_slots = 8;
        int r;

        if (!ix)
                return -ENOMEM;
        r = index_pick_key(rs, &key);
        if (r < 0)
                goto fail;
        if (key) {
                ix->key = key->key;
                ix->key_len = key->key_len;
        }

        ix->others = malloc(rs->n_rules * sizeof(uint32_t));
        ix->lists = malloc(rs->n_rules * sizeof(uint32_t));
        if (!ix->others || !ix->lists)
                goto fail_nomem;

        /* Pass 1: sort rules into "others" and per-value counts. */
        if (ix->key) {
                size_t n_exact = 0;
                for (size_t i = 0; i < rs->n_rules; i++) {
                        const RulePattern *p = rule_find_pattern(&rs->rules[i], ix->key, ix->key_len);
                        n_exact += p && p->kind == PATTERN_EXACT;
                }
                while (n_slots < 2 * n_exact)
                        n_slots *= 2;
                ix->slots = calloc(n_slots, sizeof(IndexSlot));
                if (!ix->slots)
                        goto fail_nomem;
                ix->mask = n_slots - 1;
        }
        for (size_t i = 0; i < rs->n_rules; i++) {
                const RulePattern *p =
                        ix->key ? rule_find_pattern(&rs->rules[i], ix->key, ix->key_len) : NULL;
                if (p && p->kind == PATTERN_EXACT) {
                        index_insert(ix, p->value, p->value_len)->count++;
                        ix->n_indexed++;
                } else
                        ix->others[ix->n_others++] = (uint32_t) i;
        }

        /* Pass 2: give each value its range of lists, then fill the ranges in rule
         * order (count is reused as the fill cursor), so each list is ascending. */
        if (ix->slots) {
                uint32_t start = 0;
                for (size_t s = 0; s < n_slots; s++) {
                        ix->slots[s].start = start;
                        start += ix->slots[s].count;
                        ix->slots[s].count = 0;
                }
                for (size_t i = 0; i < rs->n_rules; i++) {
                        const RulePattern *p = rule_find_pattern(&rs->rules[i], ix->key, ix->key_len);
                        if (!p || p->kind != PATTERN_EXACT)
                                continue;
                        IndexSlot *s = (IndexSlot *) index_lookup(ix, p->value, p->value_len);
                        assert(s);
                        ix->lists[s->start + s->count++] = (uint32_t) i;
                }
        }
        *ret = ix;
        return 0;

fail_nomem:
        r = -ENOMEM;
fail:
        rule_index_free(ix);
        return r;
}

/* A walk, in config order, over the rules that may match a request: those listed
 * under the request's value of the index key, merged with the others (rules without
 * an exact pattern on that key). It yields candidates only: the caller checks each
 * with rule_matches() and decides when to stop (ruleset_match(), check_reachable()). */
typedef struct MatchWalk {
        const uint32_t *cand;
        size_t n_cand, i_cand, i_other;
} MatchWalk;

static void match_walk_init(const RuleIndex *ix, const ProtoRequest *req, MatchWalk *w) {
        *w = (MatchWalk){};
        if (!ix->key)
                return;
        const ProtoSlice *v = proto_request_get(req, ix->key, ix->key_len);
        if (!v)
                return;
        const IndexSlot *s = index_lookup(ix, v->ptr, v->len);
        if (!s)
                return;
        w->cand = ix->lists + s->start;
        w->n_cand = s->count;
}

/* The next candidate rule index in config order, or SIZE_MAX when done. */
static size_t match_walk_next(const RuleIndex *ix, MatchWalk *w) {
        bool have_cand = w->i_cand < w->n_cand, have_other = w->i_other < ix->n_others;
        if (have_cand && (!have_other || w->cand[w->i_cand] < ix->others[w->i_other]))
                return w->cand[w->i_cand++];
        if (have_other)
                return ix->others[w->i_other++];
        return SIZE_MAX;
}

size_t ruleset_match(const RuleSet *rs, const ProtoRequest *req, const Rule *out[RULES_MATCH_MAX]) {
        const RuleIndex *ix = rs->index;
        MatchWalk w;
        size_t n = 0;

        assert(rs->finalized && ix);
        match_walk_init(ix, req, &w);
        for (size_t i; (i = match_walk_next(ix, &w)) != SIZE_MAX;) {
                const Rule *r = &rs->rules[i];
                if (!rule_matches(r, req))
                        continue;
                if (r->match_policy == MATCH_POLICY_STOP) {
                        out[n++] = r;
                        break;
                }
                /* canary or continue: touched, and matching goes on */
                if (n < RULES_CANARY_MAX) /* finalize guarantees this; guard anyway */
                        out[n++] = r;
        }
        return n;
}

const char *ruleset_index_describe(const RuleSet *rs, char *buf, size_t size) {
        const RuleIndex *ix = rs->index;
        char ex[RULE_EXCERPT_MAX + 4];

        if (!buf || size == 0)
                return buf;
        if (!ix)
                snprintf(buf, size, "no index (not finalized)");
        else if (!ix->key)
                snprintf(buf, size, "no index key: %zu rules checked in order", ix->n_others);
        else
                snprintf(buf, size, "index on \"%s\": %zu rules under %zu values, %zu other rules",
                         rule_excerpt(ix->key, ex), ix->n_indexed, ix->n_values, ix->n_others);
        return buf;
}

/* ---- whole-config validation ----------------------------------------------------------- */

static int label_ptr_cmp(const void *a, const void *b) {
        const Rule *x = *(const Rule *const *) a, *y = *(const Rule *const *) b;
        int c = strcmp(x->label, y->label);
        if (c != 0)
                return c;
        return x->index < y->index ? -1 : x->index > y->index;
}

static int check_labels(const RuleSet *rs, Diag *diag, bool *ok) {
        char desc[RULE_DESCRIBE_MAX], other[RULE_DESCRIBE_MAX], where[RULE_WHERE_MAX];
        const Rule **labelled;
        size_t n = 0;
        int q = 0;

        labelled = malloc(rs->n_rules * sizeof(*labelled));
        if (!labelled)
                return -ENOMEM;
        for (size_t i = 0; i < rs->n_rules; i++)
                if (rs->rules[i].label)
                        labelled[n++] = &rs->rules[i];
        qsort(labelled, n, sizeof(*labelled), label_ptr_cmp);
        for (size_t i = 1, first = 0; i < n && q >= 0; i++) {
                if (strcmp(labelled[first]->label, labelled[i]->label) != 0) {
                        first = i;
                        continue;
                }
                const Rule *r = labelled[i], *f = labelled[first];
                q = rule_report_in(diag, r->file, r->label_line ? r->label_line : r->line,
                                   rule_describe(r, desc, sizeof desc),
                                   "has the label \"%s\" of rule %s (%s): labels must be unique", r->label,
                                   rule_describe(f, other, sizeof other), rule_where(r, f, where));
                *ok = false;
        }
        free(labelled);
        return q;
}

/* A request made of rule r's patterns taken as literal values: an earlier rule
 * that matches it matches every request r matches (a '*' in the earlier rule's
 * pattern can only stand where r has a '*' or literal bytes). */
static void pseudo_request(const Rule *r, ProtoRequest *req) {
        req->command = PROTO_COMMAND_HIT;
        req->n_pairs = r->n_patterns;
        for (size_t i = 0; i < r->n_patterns; i++)
                req->pairs[i] = (ProtoPair){
                        .key = { r->patterns[i].key, r->patterns[i].key_len },
                        .value = { r->patterns[i].value, r->patterns[i].value_len },
                };
}

static int check_reachable(const RuleSet *rs, size_t end, Diag *diag, bool *ok) {
        char desc[RULE_DESCRIBE_MAX], other[RULE_DESCRIBE_MAX], where[RULE_WHERE_MAX];
        ProtoRequest req;

        for (size_t j = 0; j < end; j++) {
                const Rule *r = &rs->rules[j];
                MatchWalk w;

                pseudo_request(r, &req);
                match_walk_init(rs->index, &req, &w);
                for (size_t i; (i = match_walk_next(rs->index, &w)) < j;) {
                        const Rule *e = &rs->rules[i];
                        /* Canary and continue rules let matching go on: they mask nothing. An
                         * exact rule matches no request with a field more, which a subset
                         * rule always has; against an exact rule, the pseudo-request's keys
                         * are exactly its own. */
                        if (e->match_policy != MATCH_POLICY_STOP ||
                            (e->match_keys == MATCH_KEYS_EXACT && r->match_keys != MATCH_KEYS_EXACT) ||
                            !rule_matches(e, &req))
                                continue;
                        int q = rule_report_in(
                                diag, r->file, r->line, rule_describe(r, desc, sizeof desc),
                                "is unreachable: rule %s (%s) matches every request it matches",
                                rule_describe(e, other, sizeof other), rule_where(r, e, where));
                        if (q < 0)
                                return q;
                        *ok = false;
                        break;
                }
        }
        return 0;
}

int ruleset_finalize(RuleSet *rs, Diag *diag) {
        char desc[RULE_DESCRIBE_MAX];
        size_t first_default = SIZE_MAX, n_nonfinal = 0;
        bool ok = true;
        int q;

        if (rs->finalized)
                return -EBUSY;
        if (rs->n_rules == 0) {
                q = diag ? diag_add(diag, 0, "no rules: a config needs at least a final [default] rule") : 0;
                return q < 0 ? q : -EINVAL;
        }

        for (size_t i = 0; i < rs->n_rules; i++) {
                const Rule *r = &rs->rules[i];
                q = 0;
                if (r->n_patterns == 0 && i + 1 < rs->n_rules) {
                        q = rule_report_in(
                                diag, r->file, r->line, rule_describe(r, desc, sizeof desc),
                                "must be the last rule: it matches every request, so the %zu rule%s after "
                                "it %s unreachable",
                                rs->n_rules - i - 1, rs->n_rules - i - 1 == 1 ? "" : "s",
                                rs->n_rules - i - 1 == 1 ? "is" : "are");
                        ok = false;
                }
                if (r->n_patterns == 0 && first_default == SIZE_MAX)
                        first_default = i;
                if (r->match_policy != MATCH_POLICY_STOP && ++n_nonfinal == RULES_CANARY_MAX + 1) {
                        q = rule_report_in(
                                diag, r->file, r->line, rule_describe(r, desc, sizeof desc),
                                "is one %s rule too many: a config has at most %d canary and continue "
                                "rules together",
                                match_policy_to_string(r->match_policy), RULES_CANARY_MAX);
                        ok = false;
                }
                if (q < 0)
                        return q;
        }
        const Rule *last = &rs->rules[rs->n_rules - 1];
        if (last->n_patterns != 0) {
                q = rule_report_in(
                        diag, last->file, last->line, rule_describe(last, desc, sizeof desc),
                        "is the last rule but not a default: a config must end with a [default] rule "
                        "(empty operation) for the requests no other rule matches");
                if (q < 0)
                        return q;
                ok = false;
        }

        q = check_labels(rs, diag, &ok);
        if (q < 0)
                return q;

        q = rule_index_build(rs, &rs->index);
        if (q < 0)
                return q;
        /* Rules after an early default were reported above, once. */
        q = check_reachable(rs, first_default == SIZE_MAX ? rs->n_rules : first_default + 1, diag, &ok);
        if (q < 0 || !ok) {
                rs->index = rule_index_free(rs->index);
                return q < 0 ? q : -EINVAL;
        }
        rs->finalized = true;
        return 0;
}
