/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * rules.c: the configuration model (an ordered list of rules), the whole config's validation
 * (ruleset_finalize()), and the matcher that maps a parsed request (HIT or a version 2 verb) to
 * the rules that apply. rules-draft.c: the drafts and ruleset_add(), which checks one draft and
 * compiles it into a Rule.
 *
 * Pure code, no I/O: the loaders (config-ini.c, config-json.c) hand in RuleDrafts,
 * and every check of a value lives in these two files, once. A finalized RuleSet is immutable;
 * the server swaps whole RuleSets on reload.
 */

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "algorithm.h"
#include "diag.h"
#include "protocol.h"

#define RULES_MAX 100000 /* rules per config: bounds load time and memory */
#define RULE_PATTERNS_MAX                                                                                   \
        PROTO_PAIRS_MAX                           /* a rule needing more keys than a request may            \
                                                   * carry could never match */
#define RULE_CREDIT_LIMIT_MAX 9007199254740991ULL /* 2^53-1: exact in JSON numbers */
#define RULE_RESET_SECONDS_MAX                                                                              \
        3155760000ULL       /* 100 years: keeps now+reset far from                                          \
                             * overflow in any time type */
#define RULE_LABEL_MAX 255  /* ^[a-zA-Z0-9_-]{1,255}$ */
#define RULE_TEXT_MAX  4096 /* bytes: comment, pattern keys/values, actorField */
#define RULES_CANARY_MAX                                                                                    \
        32 /* canary and continue rules together, per config: both are matched on and                       \
            * the request goes on, so this bounds the work (and counters touched) per request */
#define RULES_NONFINAL_MAX RULES_CANARY_MAX       /* the same bound, by what it counts */
#define RULES_MATCH_MAX    (RULES_CANARY_MAX + 1) /* rules one request can touch */
#define RULE_ID_SIZE       16                     /* bytes of a rule's counter identity hash */
#define RULE_ACTOR_COMBINED_MAX                                                                             \
        256 /* bytes of the actor of an actorField of several fields (rule_actor()): their values           \
             * as netstrings, or beyond this their hash, so that a caller's buffer per hit is small */

typedef enum MatchPolicy {
        MATCH_POLICY_STOP,
        MATCH_POLICY_CANARY,
        MATCH_POLICY_CONTINUE, /* enforced like stop, but matching goes on (issue #15) */
        _MATCH_POLICY_MAX,
        _MATCH_POLICY_INVALID = -EINVAL,
} MatchPolicy;

/* What a rule's hits get when the remote store (Redis/Valkey, issue #16) cannot answer in time:
 * the attribute onBackendError. DEFAULT: the daemon's --on-backend-error. Not part of the
 * counter's identity. */
typedef enum RuleOnError {
        RULE_ON_ERROR_DEFAULT = 0, /* not set: the daemon's global default */
        RULE_ON_ERROR_ALLOW,       /* "allow": allowed, credit = creditLimit */
        RULE_ON_ERROR_DENY,        /* "deny": denied until resetSeconds */
        RULE_ON_ERROR_LOCAL,       /* "local": this host's LMDB store decides (a per-host limit) */
        _RULE_ON_ERROR_MAX,
        _RULE_ON_ERROR_INVALID = -EINVAL,
} RuleOnError;

/* How a rule's operation keys meet a request's fields: the attribute matchKeys. Not part of the
 * counter's identity. */
typedef enum MatchKeys {
        MATCH_KEYS_SUBSET = 0, /* "subset": every key of the rule present and matching; the request's other
                                * fields are ignored (divvy's matching, the default) */
        MATCH_KEYS_EXACT,      /* "exact": that, and the request carries no other field (Envoy's descriptors,
                                * which match only at their exact depth) */
        _MATCH_KEYS_MAX,
        _MATCH_KEYS_INVALID = -EINVAL,
} MatchKeys;

typedef enum PatternKind {
        PATTERN_ANY,   /* "*": key present, any value */
        PATTERN_EXACT, /* no '*': byte equality */
        PATTERN_GLOB,  /* contains '*' elsewhere: whole-value glob, each '*' any run */
        _PATTERN_KIND_MAX,
        _PATTERN_KIND_INVALID = -EINVAL,
} PatternKind;

typedef struct RulePattern {
        char *key; /* owned, NUL-terminated */
        size_t key_len;
        char *value; /* owned, NUL-terminated */
        size_t value_len;
        PatternKind kind;
        /* PATTERN_GLOB: the value split at '*' into literal segments (pointing into
         * value), computed once at load so matching never re-parses the glob. */
        ProtoSlice *segments;
        size_t n_segments;
        bool anchored_start, anchored_end; /* no '*' at the start / end */
} RulePattern;

/* What a loader saw in a rule's text that Node divvy 1.7's reader would read otherwise, for
 * config_check_divvy() (--check-config --compat=divvy); the loaded rule itself is not
 * affected. Bits of Rule.divvy_notes. */
typedef enum RuleDivvyNote {
        RULE_DIVVY_INI_HEADER = 1u << 0,        /* INI header divvy's reader splits or cuts otherwise */
        RULE_DIVVY_BOM = 1u << 1,               /* first rule of a file that starts with a byte order mark */
        RULE_DIVVY_JSON_NO_OPERATION = 1u << 2, /* JSON default rule without "operation" */
        RULE_DIVVY_JSON_NO_OVERRIDES = 1u << 3, /* JSON default rule of a file without "overrides" */
        RULE_DIVVY_JSON_OPERATION_NUMBER = 1u << 4, /* an operation value JavaScript writes otherwise */
} RuleDivvyNote;

typedef struct Rule {
        size_t index;          /* position in the config, 0-based */
        unsigned line;         /* source line, for messages; 0 if unknown */
        const char *file;      /* the file of line when not the RuleSet's source (a YAML file of a
                                * directory): one of its files; NULL otherwise */
        RulePattern *patterns; /* sorted by key (bytewise) */
        size_t n_patterns;
        /* The operation as Node divvy 1.7 names its counters: key=value, values as written,
         * joined by one space, the keys in JavaScript's order (utf8_cmp_utf16()); "" for the
         * default rule. Owned, NUL-terminated. */
        char *divvy_bucket;
        size_t divvy_bucket_len;
        uint64_t credit_limit;
        uint64_t reset_seconds;
        char *actor_field; /* owned; NULL if not set: the field names as written, one space between two */
        size_t actor_field_len;
        /* actor_field split at its spaces: the fields whose values name the actor (one counter
         * per combination of their values), slices of actor_field in the order written; owned
         * array, NULL (and 0) if actorField is not set */
        ProtoSlice *actor_fields;
        size_t n_actor_fields;
        MatchPolicy match_policy;
        MatchKeys match_keys; /* matchKeys; MATCH_KEYS_SUBSET if not set */
        char *label;          /* owned; NULL if not set */
        char *comment;        /* owned; NULL if not set */
        unsigned label_line;  /* line of the label attribute, for messages; 0 if unknown */
        /* The algorithm and its parameters (algorithm, creditLimit, resetSeconds, burst,
         * refillSeconds, strict, window), prepared with algo_params_prepare() at ruleset_add()
         * unless the rule is trivial (rule_trivial_decision()): then only the copied
         * values are set. burst is the effective capacity: creditLimit unless a token
         * bucket's config set it. */
        AlgoParams algo;
        RuleOnError on_backend_error; /* onBackendError; RULE_ON_ERROR_DEFAULT if not set */
        unsigned divvy_notes;         /* RuleDivvyNote bits the loader set in the draft */
        unsigned divvy_attrs; /* bit (1 << RuleAttr): attributes whose text divvy 1.7 reads otherwise */
        /* Counter identity: a hash of the canonical operation (sorted keys) +
         * creditLimit + resetSeconds + actorField, + the algorithm and its parameters, and the
         * window, only when not the defaults (exact encoding: rules.c, rule_compute_id). Same
         * value for a rule that is only reordered, relabelled, recommented, switched between
         * stop, canary and continue or between matchKeys subset and exact, so its counters keep
         * counting across a reload; different when its limits, its algorithm, its window or its
         * actorField change. */
        uint8_t id[RULE_ID_SIZE];
} Rule;

typedef struct RuleIndex RuleIndex; /* private to rules.c */

typedef struct RuleSet {
        char *source; /* owned: file it came from, for messages; may be NULL */
        char **files; /* owned: the files of a directory its rules came from (Rule.file) */
        size_t n_files;
        Rule *rules;
        size_t n_rules;
        size_t n_allocated;
        bool finalized;
        RuleIndex *index;
} RuleSet;

typedef enum RuleAttr {
        RULE_ATTR_CREDIT_LIMIT,     /* "creditLimit" */
        RULE_ATTR_RESET_SECONDS,    /* "resetSeconds" */
        RULE_ATTR_ACTOR_FIELD,      /* "actorField" */
        RULE_ATTR_MATCH_POLICY,     /* "matchPolicy" */
        RULE_ATTR_LABEL,            /* "label" */
        RULE_ATTR_COMMENT,          /* "comment" */
        RULE_ATTR_ALGORITHM,        /* "algorithm" */
        RULE_ATTR_BURST,            /* "burst" */
        RULE_ATTR_REFILL_SECONDS,   /* "refillSeconds" */
        RULE_ATTR_STRICT,           /* "strict" */
        RULE_ATTR_ON_BACKEND_ERROR, /* "onBackendError" */
        RULE_ATTR_WINDOW,           /* "window" */
        RULE_ATTR_MATCH_KEYS,       /* "matchKeys" */
        _RULE_ATTR_MAX,
        _RULE_ATTR_INVALID = -EINVAL,
} RuleAttr;

/* What a loader collected for one rule before validation: every value a string
 * (JSON numbers are stringified by the loader) so all number/policy/label
 * checks live here, once. */
typedef struct RuleDraft {
        unsigned line;                         /* line of the rule's start; 0 if unknown */
        bool is_default;                       /* [default] / "default": empty operation */
        ProtoPair patterns[RULE_PATTERNS_MAX]; /* slices into loader-owned memory */
        size_t n_patterns;
        const char *attrs[_RULE_ATTR_MAX];   /* NULL if absent; loader-owned */
        unsigned attr_lines[_RULE_ATTR_MAX]; /* line of each attribute; 0: use line */
        unsigned divvy_notes, divvy_attrs;   /* copied to the Rule: see there */
} RuleDraft;

const char *rule_attr_to_string(RuleAttr a);
RuleAttr rule_attr_from_string(const char *s); /* exact case */

void rule_draft_init(RuleDraft *d, unsigned line);

/* Appends an operation pattern. Errors: -EEXIST duplicate key, -E2BIG too many,
 * -EINVAL empty key or over RULE_TEXT_MAX. The slices must stay valid until
 * ruleset_add(). */
int rule_draft_add_pattern(RuleDraft *d, const char *key, size_t key_len, const char *value,
                           size_t value_len);

/* Sets a rule attribute by its config name (creditLimit, resetSeconds, actorField,
 * matchPolicy, label, comment, algorithm, burst, refillSeconds, strict, onBackendError, window,
 * matchKeys; exact case). Errors:
 * -ENOENT unknown name (a typo like "creditlimit" must not silently become 0), -EINVAL value NULL, -EEXIST
 * set twice. The string must stay valid until ruleset_add(). */
int rule_draft_set(RuleDraft *d, const char *name, const char *value, unsigned line);

int ruleset_new(const char *source, RuleSet **ret);
RuleSet *ruleset_free(RuleSet *rs);
/* The rules from the from-th on came from file (a YAML file of the directory rs is): their
 * messages name it (Rule.file). Returns 0 or -ENOMEM. */
int ruleset_set_file(RuleSet *rs, size_t from, const char *file);
/* The file a message about r names: its own, else rs's source. */
static inline const char *ruleset_rule_file(const RuleSet *rs, const Rule *r) {
        return r->file ? r->file : rs->source;
}
static inline void ruleset_freep(RuleSet **rs) {
        if (*rs)
                ruleset_free(*rs);
}

/* Validates one draft and appends it as a Rule (copying all strings), its AlgoParams
 * prepared (algo_params_prepare(); not for a trivial rule). On invalid
 * input appends every problem to diag (which may be NULL), each as
 * "FILE:LINE: rule [op] <reason>" at the line of the attribute at fault (else of the
 * rule), and returns -EINVAL; the rule is not added. -EINVAL too for the rule after
 * RULES_MAX. -EBUSY if rs is finalized, -ENOMEM on allocation failure. */
int ruleset_add(RuleSet *rs, const RuleDraft *d, Diag *diag);

/* Whole-config checks, then builds the match index: at least one rule; the last rule,
 * and only it, is a default (empty operation; ruleset_add() made it policy stop); no
 * unreachable rule (shadowed by an earlier stop rule: canary and continue rules never
 * shadow); unique labels; at most RULES_CANARY_MAX canary and continue rules together. Returns 0, -EINVAL
 * with messages in diag (which may be NULL), -EBUSY if already finalized, or -ENOMEM. */
int ruleset_finalize(RuleSet *rs, Diag *diag);

/* Rules a request touches, in config order: every matching canary and continue rule
 * before the first matching stop rule, then that stop rule (always present in a
 * finalized set, which ends with a default). The enforcing ones (rule_enforcing()) are
 * the continue rules and the last. Returns the count (>= 1, <= RULES_MATCH_MAX).
 * No allocation; does not re-parse globs; uses the index so that a request does not
 * walk every rule of a large config. */
size_t ruleset_match(const RuleSet *rs, const ProtoRequest *req, const Rule *out[RULES_MATCH_MAX]);

/* True if pattern p matches value v[0..len) (v NULL: the empty value); exposed for tests. */
bool rule_pattern_match(const RulePattern *p, const char *v, size_t len);

/* The actor of a request for rule r, what its counter is for (the store keys a counter by the
 * rule's id and this): a NULL slice (ptr NULL) when the rule has no actorField; with one field,
 * its value in the request, "" when the field is absent (a slice of the request: buf is not
 * used); with several (issue #34), the combination of their values in the order of
 * actorField, written into buf: each value as a netstring, "<decimal length>:<bytes>," (an
 * absent field "0:,"), so that no two combinations read alike whatever bytes they hold,
 * e.g. "9:127.0.0.1,5:alice,"; a combination longer than RULE_ACTOR_COMBINED_MAX is
 * "#<32 lowercase hex digits>" instead, hash128() of the hash128() of each value in order
 * (a netstring never starts with '#'). No allocation. */
ProtoSlice rule_actor(const Rule *r, const ProtoRequest *req, char buf[static RULE_ACTOR_COMBINED_MAX]);

/* "[method=GET path=/x]" or "[default]" into buf; for messages and --debug. */
const char *rule_describe(const Rule *r, char *buf, size_t size);

const char *match_policy_to_string(MatchPolicy p);
MatchPolicy match_policy_from_string(const char *s);

const char *match_keys_to_string(MatchKeys k); /* "subset", "exact" */
MatchKeys match_keys_from_string(const char *s);

/* "allow", "deny", "local" (exact case; the attribute onBackendError and the daemon's
 * --on-backend-error). RULE_ON_ERROR_DEFAULT has no name: to_string() gives NULL for it,
 * from_string() never returns it (-EINVAL for anything but the three names). */
const char *rule_on_error_to_string(RuleOnError e);
RuleOnError rule_on_error_from_string(const char *s);

/* Helpers for the loaders' messages and --debug output. */

#define RULE_DESCRIBE_MAX                                                                                   \
        256 /* bytes: buffer for rule_describe() in messages; longer                                        \
             * operations are cut at a character boundary and end in "...]" */

#define RULE_EXCERPT_MAX 64 /* bytes of a user-supplied string quoted in a message */

/* A printable excerpt of a user-supplied string for messages, in buf: control bytes and '"'
 * become '?', a string longer than RULE_EXCERPT_MAX is cut at a character boundary and ends in
 * "...". Returns buf. */
const char *rule_excerpt(const char *s, char buf[static RULE_EXCERPT_MAX + 4]);

/* "creditLimit, resetSeconds, actorField, matchPolicy, label, comment, algorithm, burst,
 * refillSeconds, strict, onBackendError, window, matchKeys": for messages. */
const char *rule_attr_names(void);

/* The accepted attribute name that s differs from only in case ("creditlimit" ->
 * "creditLimit"), or NULL. */
const char *rule_attr_suggest(const char *s);

/* rule_describe() for a draft: its patterns so far, keys sorted, or "[default]". */
const char *rule_draft_describe(const RuleDraft *d, char *buf, size_t size);

/* rule_draft_set() that also reports a failure into diag (which may be NULL) at line,
 * in the same format as ruleset_add(): 'rule [op] has an unknown attribute "creditlimit"
 * (did you mean "creditLimit"?)', '... (accepted: creditLimit, ...)', '... sets label
 * twice (first on line N)' or '... has no value for label'. what, if not NULL, names the
 * rule instead of "rule [op]": a loader passes it ("overrides[3]", "section [a==b]")
 * while the operation could not be read, since the draft alone would then describe
 * itself as "[default]". Returns what rule_draft_set() returns, or -ENOMEM. */
int rule_draft_set_diag(RuleDraft *d, const char *what, const char *name, const char *value, unsigned line,
                        Diag *diag);

/* One line about the match index of a finalized set, for --debug and benchmarks:
 * 'index on "path": 9990 rules under 9990 values, 11 other rules'. */
const char *ruleset_index_describe(const RuleSet *rs, char *buf, size_t size);

/* What a rule answers without a counter, decided here once for every caller (the batch's
 * matching, its reply and its canary counts). creditLimit = 0 always denies (the reply is
 * "OK false 0 -1"), even when resetSeconds is 0 too; otherwise resetSeconds = 0 always
 * allows ("OK true <creditLimit> 0"). Neither kind touches the store. Inline: the batch asks
 * it for every matched rule of every request. */
typedef enum RuleTrivial {
        RULE_TRIVIAL_NONE,  /* creditLimit > 0 and resetSeconds > 0: its counter decides */
        RULE_TRIVIAL_DENY,  /* creditLimit = 0 */
        RULE_TRIVIAL_ALLOW, /* resetSeconds = 0 with creditLimit > 0 */
} RuleTrivial;

static inline RuleTrivial rule_trivial_decision(const Rule *r) {
        if (r->credit_limit == 0)
                return RULE_TRIVIAL_DENY;
        if (r->reset_seconds == 0)
                return RULE_TRIVIAL_ALLOW;
        return RULE_TRIVIAL_NONE;
}

/* True if the Redis store (outside a cluster) keeps r's counters in Node divvy 1.7's keys,
 * "divvy:<operation>:<actor>:<creditLimit>:<resetSeconds>": for the rules divvy 1.7 could
 * share, a fixed window from the first hit with an actor of at most one field; the others get
 * divvyd's own keys. */
static inline bool rule_divvy_keys(const Rule *r) {
        return r->algo.algorithm == ALGORITHM_FIXED_WINDOW && r->algo.window == ALGO_WINDOW_FIRST_HIT &&
               r->n_actor_fields <= 1;
}

/* True if the rule's verdict counts for the request (stop or continue), false for a
 * canary, which is only measured. */
static inline bool rule_enforcing(const Rule *r) {
        return r->match_policy == MATCH_POLICY_STOP || r->match_policy == MATCH_POLICY_CONTINUE;
}
