/* SPDX-License-Identifier: MIT */
/*
 * config-yaml.c: envoyproxy/ratelimit's YAML configuration, one file per domain, read with
 * libyaml and compiled into divvyd rules (divvyd.rules(5), "YAML files").
 *
 *   domain: api
 *   descriptors:
 *     - key: user                      <- no value: one counter per value
 *       rate_limit: { unit: minute, requests_per_unit: 10, name: per-user }
 *     - key: path
 *       value: /admin*                 <- '*': a glob on the whole value
 *       descriptors:
 *         - key: user
 *           rate_limit: { unit: hour, requests_per_unit: 5 }
 *
 * Each descriptor with a rate_limit becomes one rule: the patterns domain=<domain> and one
 * per descriptor on its path (a key without value as key=*), matchKeys exact (envoyproxy/
 * ratelimit answers only a descriptor of exactly that depth), window aligned, actorField
 * the keys without value and the wildcard keys (it counts per value of every entry, except
 * a wildcard's with share_threshold). envoyproxy/ratelimit walks the tree greedily: at each
 * depth an exact value first, then the first wildcard that matches (in file order), then the
 * key without value, and never goes back. The rules are emitted in that order, each
 * descriptor's subtree before its later siblings; after a descriptor's subtree come
 * "blockers", rules that always allow, for each key sequence a later sibling of the same key
 * could still match: a request the greedy walk took into the descriptor and found no limit in
 * gets no limit, as there. What divvyd cannot do the same is refused with the line.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#define YAML_DESCRIPTORS_MAX                                                                                \
        RULES_MAX /* descriptors per file, aliases expanded: bounds the work an alias bomb can cause */
#define YAML_UNLIMITED_CREDIT                                                                               \
        "4294967295" /* creditLimit of the rules that always allow (resetSeconds 0): the                    \
                      * remaining envoyproxy/ratelimit reports for unlimited, 2^32-1 */
#define YAML_DEPTH_MAX   (RULE_PATTERNS_MAX - 1) /* descriptors on one path: domain= is a pattern too */
#define YAML_COMMENT_MAX 512                     /* bytes of a rule's comment, envoyproxy/ratelimit's key */

typedef enum ValueKind {
        VALUE_NONE,  /* no value: key=*, counted per value */
        VALUE_EXACT, /* a value without '*' */
        VALUE_GLOB,  /* a value with '*': each '*' any run of bytes */
} ValueKind;

/* One descriptor; strings point into the libyaml document. */
typedef struct Desc {
        const char *key, *value; /* value NULL: none */
        ValueKind kind;
        unsigned line; /* of its "key" */
        bool has_limit, unlimited, shadow, share;
        bool unit_bad;    /* a unit was given and reported */
        const char *rpu;  /* requests_per_unit, digits */
        const char *unit; /* resetSeconds of the unit, digits */
        const char *name; /* NULL: none */
        unsigned rpu_line, unit_line, name_line, shadow_line, limit_line;
        struct Desc *children;
        size_t n_children;
        const struct Desc *parent; /* NULL at the top */
} Desc;

typedef struct YamlParser {
        RuleSet *rs;
        Diag *diag;
        yaml_document_t *doc;
        const char *domain;
        unsigned domain_line;
        size_t n_descs; /* created, for YAML_DESCRIPTORS_MAX */
        bool too_many;  /* reported once */
} YamlParser;

/* The path from the domain to a descriptor. */
typedef struct Path {
        const Desc *d[YAML_DEPTH_MAX];
        size_t n;
} Path;

static const struct {
        const char *name;
        const char *seconds;
} yaml_units[] = {
        { "second", "1" },
        { "minute", "60" },
        { "hour", "3600" },
        { "day", "86400" },
        { "week", "604800" },
        { "month", "2592000" },
        /* 30 days */ { "year", "31536000" }, /* 365 days */
};

static unsigned node_line(const yaml_node_t *n) {
        return n ? (unsigned) n->start_mark.line + 1 : 0;
}

static const char *node_text(const yaml_node_t *n) {
        return (const char *) n->data.scalar.value;
}

static bool is_null(const yaml_node_t *n) {
        static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };

        if (!n || n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
                return false;
        for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
                if (strcmp(node_text(n), nulls[i]) == 0)
                        return true;
        return false;
}

static const char *node_kind(const yaml_node_t *n) {
        return n->type == YAML_MAPPING_NODE    ? "a mapping"
               : n->type == YAML_SEQUENCE_NODE ? "a list"
                                               : "a scalar";
}

/* A string field (domain, key, value, unit, name): any scalar as written, "" for null (as
 * envoyproxy/ratelimit's YAML reader takes it). NULL if reported. */
static const char *yaml_string(YamlParser *p, const yaml_node_t *n, const char *field, int *q) {
        if (n->type != YAML_SCALAR_NODE) {
                *q = diag_add(p->diag, node_line(n), "%s: expected a string, got %s", field, node_kind(n));
                return NULL;
        }
        if (is_null(n))
                return "";
        if (strlen(node_text(n)) != n->data.scalar.length) {
                *q = diag_add(p->diag, node_line(n), "%s: contains a NUL character", field);
                return NULL;
        }
        if (n->data.scalar.length > RULE_TEXT_MAX) {
                *q = diag_add(p->diag, node_line(n), "%s: longer than %d bytes", field, RULE_TEXT_MAX);
                return NULL;
        }
        return node_text(n);
}

/* A string a request's pair must carry (domain, key, value): NULL if reported. */
static const char *yaml_pair_text(YamlParser *p, const yaml_node_t *n, const char *field, int *q) {
        const char *s = yaml_string(p, n, field, q), *why = s ? proto_text_unsendable(s) : NULL;

        if (!why)
                return s;
        *q = diag_add(p->diag, node_line(n), "%s: %s", field, why);
        return NULL;
}

/* A boolean field, as YAML 1.1 spells one (true/false, yes/no, on/off, y/n). Returns 1, 0
 * if reported (*q: the report's result). */
static int yaml_bool(YamlParser *p, const yaml_node_t *n, const char *field, bool *ret, int *q) {
        static const char *const yes[] = { "true", "yes", "on", "y" }, *const no[] = { "false", "no", "off",
                                                                                       "n" };

        if (n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
                for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
                        if (strcasecmp(node_text(n), yes[i]) == 0) {
                                *ret = true;
                                return 1;
                        }
                        if (strcasecmp(node_text(n), no[i]) == 0) {
                                *ret = false;
                                return 1;
                        }
                }
        *q = diag_add(p->diag, node_line(n), "%s: expected true or false", field);
        return 0;
}

/* requests_per_unit: an unquoted decimal whole number that fits envoyproxy/ratelimit's uint32. */
static const char *yaml_count(YamlParser *p, const yaml_node_t *n, int *q) {
        const char *s = n->type == YAML_SCALAR_NODE ? node_text(n) : "";
        size_t len = strlen(s);
        /* no leading zero: YAML 1.1 (envoyproxy/ratelimit's reader) takes 010 for octal 8 */
        bool ok = n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                  len > 0 && len <= 10 && strspn(s, "0123456789") == len && (s[0] != '0' || len == 1);

        if (ok && (len < 10 || strcmp(s, "4294967295") <= 0))
                return s;
        *q = diag_add(p->diag, node_line(n),
                      "requests_per_unit: expected a whole number from 0 to 4294967295");
        return NULL;
}

/* Finds a duplicate key of a mapping: reports it at its line. Returns 0 if none, 1 if
 * reported, < 0 on failure. */
static int duplicate_key(YamlParser *p, const yaml_node_t *map, const yaml_node_pair_t *pair) {
        const yaml_node_t *k = yaml_document_get_node(p->doc, pair->key);

        for (const yaml_node_pair_t *o = map->data.mapping.pairs.start; o < pair; o++) {
                const yaml_node_t *ok = yaml_document_get_node(p->doc, o->key);
                if (ok->type == YAML_SCALAR_NODE && strcmp(node_text(ok), node_text(k)) == 0) {
                        int q = diag_add(p->diag, node_line(k), "duplicate key '%s' (first on line %u)",
                                         node_text(k), node_line(ok));
                        return q < 0 ? q : 1;
                }
        }
        return 0;
}

/* Calls the field's handler for each key of map, refusing non-scalar, duplicate and unknown
 * keys (accepted: the names in fields, "a, b, c"). Returns 0 or -ENOMEM. */
typedef int (*FieldFn)(YamlParser *p, void *ctx, const char *name, yaml_node_t *v);

static int each_field(YamlParser *p, const yaml_node_t *map, const char *where, const char *fields,
                      FieldFn fn, void *ctx) {
        int q = 0;

        for (yaml_node_pair_t *pair = map->data.mapping.pairs.start;
             pair < map->data.mapping.pairs.top && q >= 0; pair++) {
                yaml_node_t *k = yaml_document_get_node(p->doc, pair->key);
                yaml_node_t *v = yaml_document_get_node(p->doc, pair->value);
                const char *name = k->type == YAML_SCALAR_NODE ? node_text(k) : NULL;
                /* no list's separators in a name: "key, value" is no field of "key, value, ..." */
                bool listed = name && !strpbrk(name, ", ");
                size_t len = name ? strlen(name) : 0;
                const char *at = listed && len > 0 ? strstr(fields, name) : NULL;

                /* a whole name of the list: at a start, followed by ',' or the end */
                while (at && !((at == fields || at[-1] == ' ') && (at[len] == ',' || at[len] == '\0')))
                        at = strstr(at + 1, name);
                if (!name)
                        q = diag_add(p->diag, node_line(k), "%s: a key must be a string, got %s", where,
                                     node_kind(k));
                else if ((q = duplicate_key(p, map, pair)) != 0)
                        continue;
                else if (strcmp(name, "<<") == 0)
                        q = diag_add(p->diag, node_line(k), "%s: YAML merge keys (<<) are not supported",
                                     where);
                else if (!at)
                        q = diag_add(p->diag, node_line(k), "%s: unknown key '%s' (accepted here: %s)",
                                     where, name, fields);
                else
                        q = fn(p, ctx, name, v);
        }
        return q < 0 ? q : 0;
}

static int parse_descriptors(YamlParser *p, const yaml_node_t *list, size_t depth, const Desc *parent,
                             Desc **ret, size_t *ret_n);

static int rate_limit_field(YamlParser *p, void *ctx, const char *name, yaml_node_t *v) {
        Desc *d = ctx;
        int q = 0;

        if (strcmp(name, "unit") == 0) {
                const char *s = yaml_string(p, v, "unit", &q);
                d->unit_line = node_line(v);
                d->unit_bad = !s;
                if (s && s[0] != '\0') {
                        for (size_t i = 0; i < sizeof yaml_units / sizeof yaml_units[0]; i++)
                                if (strcasecmp(s, yaml_units[i].name) == 0)
                                        d->unit = yaml_units[i].seconds;
                        d->unit_bad = !d->unit;
                        if (!d->unit)
                                q = diag_add(
                                        p->diag, node_line(v),
                                        "invalid rate limit unit '%s' (accepted: second, minute, hour, day, "
                                        "week, month, year)",
                                        s);
                }
        } else if (strcmp(name, "requests_per_unit") == 0) {
                d->rpu = yaml_count(p, v, &q);
                d->rpu_line = node_line(v);
        } else if (strcmp(name, "unlimited") == 0)
                (void) yaml_bool(p, v, "unlimited", &d->unlimited, &q);
        else if (strcmp(name, "name") == 0) {
                d->name = yaml_string(p, v, "name", &q);
                d->name_line = node_line(v);
        } else /* replaces */
                q = diag_add(p->diag, node_line(v),
                             "replaces: not supported (it drops another descriptor's limit of the same "
                             "request by name; divvyd decides each descriptor on its own)");
        return q;
}

typedef struct DescCtx {
        Desc *d;
        size_t depth;
        const yaml_node_t *key, *descriptors;
} DescCtx;

static int descriptor_field(YamlParser *p, void *ctx, const char *name, yaml_node_t *v) {
        DescCtx *c = ctx;
        Desc *d = c->d;
        int q = 0;

        if (strcmp(name, "key") == 0) {
                c->key = v;
                d->key = yaml_pair_text(p, v, "key", &q);
        } else if (strcmp(name, "value") == 0)
                d->value = yaml_pair_text(p, v, "value", &q);
        else if (strcmp(name, "descriptors") == 0)
                c->descriptors = v;
        else if (strcmp(name, "rate_limit") == 0) {
                if (is_null(v))
                        return 0;
                if (v->type != YAML_MAPPING_NODE)
                        return diag_add(p->diag, node_line(v), "rate_limit: expected a mapping, got %s",
                                        node_kind(v));
                d->has_limit = true;
                d->limit_line = node_line(v);
                q = each_field(p, v, "rate_limit", "unit, requests_per_unit, unlimited, name, replaces",
                               rate_limit_field, d);
                if (q >= 0 && d->unlimited && d->unit)
                        q = diag_add(p->diag, d->unit_line,
                                     "should not specify rate limit unit when unlimited");
                else if (q >= 0 && !d->unlimited && !d->unit && !d->unit_bad)
                        q = diag_add(
                                p->diag, d->unit_line ? d->unit_line : d->limit_line,
                                "rate_limit: no unit (accepted: second, minute, hour, day, week, month, "
                                "year)");
        } else if (strcmp(name, "shadow_mode") == 0) {
                d->shadow_line = node_line(v);
                (void) yaml_bool(p, v, name, &d->shadow, &q);
        } else if (strcmp(name, "share_threshold") == 0)
                (void) yaml_bool(p, v, name, &d->share, &q);
        else if (strcmp(name, "quota_mode") == 0) {
                bool on = false;
                if (yaml_bool(p, v, name, &on, &q) && on)
                        q = diag_add(
                                p->diag, node_line(v),
                                "quota_mode: not supported (its over-limit answer depends on the request's "
                                "other descriptors; divvyd decides each descriptor on its own)");
        } else if (strcmp(name, "detailed_metric") == 0 || strcmp(name, "value_to_metric") == 0) {
                bool on = false; /* statistics' names only: no decision changes */
                (void) yaml_bool(p, v, name, &on, &q);
        }
        /* metadata: returned to Envoy as dynamic metadata only; no decision changes */
        return q;
}

/* One descriptor mapping into d. Returns 0 or -ENOMEM; problems go to diag. */
static int parse_descriptor(YamlParser *p, const yaml_node_t *n, size_t depth, Desc *d) {
        DescCtx c = { .d = d, .depth = depth };
        int q;

        d->line = node_line(n);
        if (n->type != YAML_MAPPING_NODE)
                return diag_add(p->diag, node_line(n),
                                "descriptors: expected a list of mappings, got %s in it", node_kind(n));
        q = each_field(p, n, "descriptor",
                       "key, value, rate_limit, descriptors, shadow_mode, share_threshold, quota_mode, "
                       "detailed_metric, value_to_metric, metadata",
                       descriptor_field, &c);
        if (q < 0)
                return q;
        if (c.key)
                d->line = node_line(c.key);
        if (!c.key || (d->key && d->key[0] == '\0'))
                return diag_add(p->diag, d->line, "descriptor has empty key");
        if (!d->key)
                return 0;
        if (strcmp(d->key, "domain") == 0)
                q = diag_add(p->diag, d->line,
                             "key 'domain': divvyd passes the domain as the pair domain=<domain>, so no "
                             "descriptor may use that key");
        else if (strchr(d->key, '*'))
                q = diag_add(p->diag, d->line,
                             "key '%s' contains '*' (envoyproxy/ratelimit reads it as part of a wildcard)",
                             d->key);
        if (q < 0)
                return q;
        if (d->value && d->value[0] == '\0')
                d->value = NULL; /* value: "" is no value, as there */
        d->kind = !d->value ? VALUE_NONE : strchr(d->value, '*') ? VALUE_GLOB : VALUE_EXACT;
        if (d->share && d->kind != VALUE_GLOB) {
                q = diag_add(p->diag, d->line,
                             "share_threshold can only be used with wildcard values (containing '*'), but "
                             "found key '%s'",
                             d->key);
                if (q < 0)
                        return q;
        }
        if (d->has_limit && !d->unlimited && !d->rpu)
                d->rpu = d->rpu_line ? NULL : "0"; /* absent: 0, as there (every request over the limit) */
        if (c.descriptors && !is_null(c.descriptors))
                return parse_descriptors(p, c.descriptors, depth + 1, d, &d->children, &d->n_children);
        return 0;
}

static void descs_free(Desc *v, size_t n) {
        for (size_t i = 0; i < n; i++)
                descs_free(v[i].children, v[i].n_children);
        free(v);
}

/* A descriptors list at depth (1: the domain's) into a new array. Returns 0 or -ENOMEM. */
static int parse_descriptors(YamlParser *p, const yaml_node_t *list, size_t depth, const Desc *parent,
                             Desc **ret, size_t *ret_n) {
        size_t n;
        Desc *v;
        int q;

        if (list->type != YAML_SEQUENCE_NODE)
                return diag_add(p->diag, node_line(list), "descriptors: expected a list, got %s",
                                node_kind(list));
        n = (size_t) (list->data.sequence.items.top - list->data.sequence.items.start);
        if (n == 0)
                return 0;
        if (depth > YAML_DEPTH_MAX)
                return diag_add(p->diag, node_line(list), "descriptors nested deeper than %d levels",
                                YAML_DEPTH_MAX);
        if (n > YAML_DESCRIPTORS_MAX - p->n_descs) {
                if (p->too_many)
                        return 0;
                p->too_many = true;
                return diag_add(p->diag, node_line(list), "more than %d descriptors (aliases expanded)",
                                YAML_DESCRIPTORS_MAX);
        }
        p->n_descs += n;
        v = calloc(n, sizeof(Desc));
        if (!v)
                return -ENOMEM;
        *ret = v;
        *ret_n = n;
        for (size_t i = 0; i < n; i++) {
                v[i].parent = parent;
                q = parse_descriptor(p, yaml_document_get_node(p->doc, list->data.sequence.items.start[i]),
                                     depth, &v[i]);
                if (q < 0)
                        return q;
        }
        /* Siblings alike: envoyproxy/ratelimit refuses the same key and value twice. */
        for (size_t i = 0; i < n; i++)
                for (size_t j = 0; j < i && v[i].key; j++) {
                        bool same_value = (!v[i].value && !v[j].value) ||
                                          (v[i].value && v[j].value && strcmp(v[i].value, v[j].value) == 0);
                        if (!v[j].key || strcmp(v[i].key, v[j].key) != 0 || !same_value)
                                continue;
                        q = diag_add(p->diag, v[i].line,
                                     "duplicate descriptor key '%s'%s%s%s (first on line %u)", v[i].key,
                                     v[i].value ? ", value '" : "", v[i].value ? v[i].value : "",
                                     v[i].value ? "'" : "", v[j].line);
                        if (q < 0)
                                return q;
                        break;
                }
        return 0;
}

typedef struct RootCtx {
        const yaml_node_t *descriptors;
} RootCtx;

static int root_field(YamlParser *p, void *ctx, const char *name, yaml_node_t *v) {
        RootCtx *c = ctx;
        int q = 0;

        if (strcmp(name, "domain") == 0) {
                p->domain = yaml_pair_text(p, v, "domain", &q);
                p->domain_line = node_line(v);
        } else
                c->descriptors = v;
        return q;
}

/* ---- checks on the whole tree ---------------------------------------------------------- */

/* A key used twice on one path: a divvyd request carries each key once. */
static int check_path_keys(YamlParser *p, const Desc *v, size_t n, Path *path) {
        int q = 0;

        for (size_t i = 0; i < n && q >= 0; i++) {
                const Desc *d = &v[i];
                bool dup = false;

                if (!d->key)
                        continue;
                for (size_t k = 0; k < path->n && !dup; k++)
                        if (strcmp(path->d[k]->key, d->key) == 0) {
                                q = diag_add(p->diag, d->line,
                                             "key '%s' is already on this descriptor's path (line %u): a "
                                             "divvyd request carries each key once",
                                             d->key, path->d[k]->line);
                                dup = true;
                        }
                if (dup || path->n >= YAML_DEPTH_MAX)
                        continue;
                path->d[path->n++] = d;
                q = check_path_keys(p, d->children, d->n_children, path);
                path->n--;
        }
        return q;
}

/* A limit's path, for the check that no two paths of a domain have the same keys in another
 * order (they would be one rule's keys to divvyd): its last descriptor (the path is read back
 * through the parents), its depth and a hash of its keys that ignores their order. */
typedef struct KeySeq {
        const Desc *leaf;
        size_t n;
        uint64_t set_hash;
} KeySeq;

static uint64_t key_hash(const char *s) {
        uint64_t h = UINT64_C(0xcbf29ce484222325); /* FNV-1a, then a final mix */
        for (; *s; s++)
                h = (h ^ (unsigned char) *s) * UINT64_C(0x100000001b3);
        return (h ^ (h >> 31)) * UINT64_C(0x9e3779b97f4a7c15);
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(const char *const *) a, *(const char *const *) b);
}

/* The keys of s's path from the top into seq, and sorted into set. */
static void path_keys(const KeySeq *s, const char **seq, const char **set) {
        size_t i = s->n;
        for (const Desc *d = s->leaf; d && i > 0; d = d->parent) {
                i--;
                seq[i] = set[i] = d->key;
        }
        qsort(set, s->n, sizeof(*set), cmp_str);
}

static int cmp_keyseq(const void *a, const void *b) {
        const KeySeq *x = a, *y = b;
        if (x->n != y->n)
                return x->n < y->n ? -1 : 1;
        if (x->set_hash != y->set_hash)
                return x->set_hash < y->set_hash ? -1 : 1;
        return (x->leaf->line > y->leaf->line) - (x->leaf->line < y->leaf->line);
}

static void collect_keyseqs(const Desc *v, size_t n, size_t depth, uint64_t set_hash, KeySeq *out,
                            size_t *k) {
        for (size_t i = 0; i < n && depth < YAML_DEPTH_MAX; i++) {
                uint64_t h = set_hash + key_hash(v[i].key);
                if (v[i].has_limit)
                        out[(*k)++] = (KeySeq){ &v[i], depth + 1, h };
                collect_keyseqs(v[i].children, v[i].n_children, depth + 1, h, out, k);
        }
}

static size_t count_limits(const Desc *v, size_t n) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
                k += v[i].has_limit + count_limits(v[i].children, v[i].n_children);
        return k;
}

static void describe_keys(const char *const *keys, size_t n, char *buf, size_t size) {
        size_t len = 0;
        buf[0] = '\0';
        for (size_t i = 0; i < n && len < size; i++)
                len += (size_t) snprintf(buf + len, size - len, "%s%s", i ? "." : "", keys[i]);
}

static int check_key_orders(YamlParser *p, const Desc *v, size_t n) {
        const char *seq_a[YAML_DEPTH_MAX], *set_a[YAML_DEPTH_MAX], *seq_b[YAML_DEPTH_MAX],
                *set_b[YAML_DEPTH_MAX];
        size_t total = count_limits(v, n), k = 0;
        KeySeq *seqs;
        int q = 0;

        if (total < 2)
                return 0;
        seqs = calloc(total, sizeof(KeySeq));
        if (!seqs)
                return -ENOMEM;
        collect_keyseqs(v, n, 0, 0, seqs, &k);
        qsort(seqs, k, sizeof(KeySeq), cmp_keyseq);
        for (size_t i = 1, first = 0; i < k && q >= 0; i++) {
                const KeySeq *a = &seqs[i], *b = &seqs[first];
                char da[256], db[256];
                bool same_set = true, same_seq = true;

                if (a->n != b->n || a->set_hash != b->set_hash) {
                        first = i;
                        continue;
                }
                path_keys(a, seq_a, set_a);
                path_keys(b, seq_b, set_b);
                for (size_t j = 0; j < a->n; j++) {
                        same_set = same_set && strcmp(set_a[j], set_b[j]) == 0;
                        same_seq = same_seq && strcmp(seq_a[j], seq_b[j]) == 0;
                }
                if (!same_set || same_seq) /* a collision of the hash, or the same path's keys */
                        continue;
                describe_keys(seq_a, a->n, da, sizeof da);
                describe_keys(seq_b, b->n, db, sizeof db);
                q = diag_add(
                        p->diag, a->leaf->line,
                        "the descriptor path %s has the keys of the path %s (line %u) in another order: "
                        "divvyd matches a request's keys in any order",
                        da, db, b->leaf->line);
        }
        free(seqs);
        return q < 0 ? q : 0;
}

/* ---- rules ---------------------------------------------------------------------------- */

/* What one rule's draft points to besides the document. */
typedef struct RuleText {
        char comment[YAML_COMMENT_MAX];
        char *actor; /* owned */
} RuleText;

/* envoyproxy/ratelimit's name of the limit, "domain.key_value.key" (its statistics' key),
 * control characters as '?'. */
static void rule_comment(const YamlParser *p, const Path *path, char *buf, size_t size) {
        size_t len = (size_t) snprintf(buf, size, "%s", p->domain);

        for (size_t i = 0; i < path->n && len < size; i++) {
                const Desc *d = path->d[i];
                len += (size_t) snprintf(buf + len, size - len, ".%s%s%s", d->key, d->value ? "_" : "",
                                         d->value ? d->value : "");
        }
        for (char *c = buf; *c; c++)
                if ((unsigned char) *c < 0x20 || *c == 0x7f)
                        *c = '?';
}

/* The draft's patterns: domain=<domain>, then the path, then suffix keys as key=*. */
static int draft_patterns(YamlParser *p, RuleDraft *d, const Path *path, const char *const *suffix,
                          size_t n_suffix) {
        int r = rule_draft_add_pattern(d, "domain", 6, p->domain, strlen(p->domain));

        for (size_t i = 0; i < path->n && r >= 0; i++) {
                const Desc *x = path->d[i];
                const char *v = x->kind == VALUE_NONE ? "*" : x->value;
                r = rule_draft_add_pattern(d, x->key, strlen(x->key), v, strlen(v));
        }
        for (size_t i = 0; i < n_suffix && r >= 0; i++)
                r = rule_draft_add_pattern(d, suffix[i], strlen(suffix[i]), "*", 1);
        return r;
}

/* The keys counted per value, separated by one space, into t->actor; NULL if none. Refuses a
 * key with a blank, which an actorField cannot name. Returns 0, 1 if reported, -ENOMEM. */
static int yaml_actor(YamlParser *p, const Path *path, RuleText *t) {
        size_t len = 0;

        for (size_t i = 0; i < path->n; i++)
                len += strlen(path->d[i]->key) + 1;
        t->actor = malloc(len + 1);
        if (!t->actor)
                return -ENOMEM;
        len = 0;
        for (size_t i = 0; i < path->n; i++) {
                const Desc *x = path->d[i];
                bool shared = x->kind == VALUE_GLOB && x->share;

                if (x->kind == VALUE_EXACT || shared)
                        continue;
                if (strpbrk(x->key, " \t")) {
                        int q = diag_add(p->diag, x->line,
                                         "key '%s' contains a blank: divvyd cannot count per value of a key "
                                         "with blanks (actorField lists keys separated by spaces)",
                                         x->key);
                        free(t->actor);
                        t->actor = NULL;
                        return q < 0 ? q : 1;
                }
                len += (size_t) sprintf(t->actor + len, "%s%s", len ? " " : "", x->key);
        }
        if (len == 0) {
                free(t->actor);
                t->actor = NULL;
        }
        return 0;
}

/* Adds the draft: rules-draft.c checks it and reports into diag. -ENOMEM only is fatal. */
static int add(YamlParser *p, RuleDraft *d) {
        int r = ruleset_add(p->rs, d, p->diag);
        return r == -ENOMEM ? r : 0;
}

/* A rule that always allows (resetSeconds 0): no limit, as envoyproxy/ratelimit answers. */
static int add_always_allow(YamlParser *p, const Path *path, const char *const *suffix, size_t n_suffix,
                            unsigned line, const char *label, unsigned label_line, const char *comment) {
        RuleDraft d;
        int r;

        rule_draft_init(&d, line);
        r = draft_patterns(p, &d, path, suffix, n_suffix);
        if (r < 0)
                return r == -ENOMEM ? r : diag_add(p->diag, line, "descriptors nested too deep");
        (void) rule_draft_set(&d, "creditLimit", YAML_UNLIMITED_CREDIT, line);
        (void) rule_draft_set(&d, "resetSeconds", "0", line);
        (void) rule_draft_set(&d, "matchKeys", "exact", line);
        if (label)
                (void) rule_draft_set(&d, "label", label, label_line);
        if (comment)
                (void) rule_draft_set(&d, "comment", comment, line);
        return add(p, &d);
}

/* The rule of descriptor x (last on path), with a limit: see the file's comment. */
static int add_limit(YamlParser *p, const Path *path, const Desc *x) {
        const char *label = x->name && x->name[0] ? x->name : NULL;
        RuleText t = { .actor = NULL };
        RuleDraft d;
        int r;

        rule_comment(p, path, t.comment, sizeof t.comment);
        if (x->unlimited)
                return add_always_allow(p, path, NULL, 0, x->line, label, x->name_line, t.comment);

        r = yaml_actor(p, path, &t);
        if (r != 0)
                return r < 0 ? r : 0;
        rule_draft_init(&d, x->line);
        r = draft_patterns(p, &d, path, NULL, 0);
        if (r < 0) {
                free(t.actor);
                return r == -ENOMEM ? r : diag_add(p->diag, x->line, "descriptors nested too deep");
        }
        (void) rule_draft_set(&d, "creditLimit", x->rpu, x->rpu_line);
        (void) rule_draft_set(&d, "resetSeconds", x->unit, x->unit_line);
        (void) rule_draft_set(&d, "window", "aligned", x->unit_line);
        (void) rule_draft_set(&d, "matchKeys", "exact", x->line);
        if (t.actor)
                (void) rule_draft_set(&d, "actorField", t.actor, x->line);
        if (label)
                (void) rule_draft_set(&d, "label", label, x->name_line);
        (void) rule_draft_set(&d, "comment", t.comment, x->line);
        /* shadow_mode: counted, never denies; and nothing after it decides for it */
        if (x->shadow)
                (void) rule_draft_set(&d, "matchPolicy", "canary", x->shadow_line);
        r = add(p, &d);
        free(t.actor);
        if (r < 0 || !x->shadow)
                return r;
        return add_always_allow(p, path, NULL, 0, x->line, NULL, 0, t.comment);
}

/* The keys below a descriptor (top) down to a limit in its subtree (leaf): what a blocker adds
 * to a path as key=*. hash: of the keys in order. */
typedef struct Suffix {
        const Desc *top, *leaf;
        size_t n;
        uint64_t hash;
} Suffix;

/* Distinct suffixes in the order added, with a hash table on them (slots: index + 1, 0 free;
 * a power of two, at most half full). */
typedef struct SuffixSet {
        Suffix *v;
        size_t n, allocated;
        size_t *slots;
        size_t n_slots;
} SuffixSet;

static void suffix_set_done(SuffixSet *set) {
        free(set->v);
        free(set->slots);
        *set = (SuffixSet){ .v = NULL };
}

static bool suffix_eq(const Suffix *a, const Suffix *b) {
        const Desc *x = a->leaf, *y = b->leaf;

        if (a->n != b->n || a->hash != b->hash)
                return false;
        for (size_t i = 0; i < a->n; i++, x = x->parent, y = y->parent)
                if (strcmp(x->key, y->key) != 0)
                        return false;
        return true;
}

static bool suffix_set_has(const SuffixSet *set, const Suffix *s) {
        if (set->n_slots == 0)
                return false;
        for (size_t i = s->hash & (set->n_slots - 1);; i = (i + 1) & (set->n_slots - 1)) {
                if (set->slots[i] == 0)
                        return false;
                if (suffix_eq(&set->v[set->slots[i] - 1], s))
                        return true;
        }
}

static void suffix_set_place(SuffixSet *set, size_t index) {
        size_t i = set->v[index].hash & (set->n_slots - 1);
        while (set->slots[i] != 0)
                i = (i + 1) & (set->n_slots - 1);
        set->slots[i] = index + 1;
}

/* Adds s unless the set has it. Returns 0 or -ENOMEM. */
static int suffix_set_add(SuffixSet *set, const Suffix *s) {
        if (suffix_set_has(set, s))
                return 0;
        if (set->n == set->allocated) {
                size_t a = set->allocated ? set->allocated * 2 : 8;
                Suffix *v = realloc(set->v, a * sizeof(Suffix));
                if (!v)
                        return -ENOMEM;
                set->v = v;
                set->allocated = a;
        }
        if ((set->n + 1) * 2 > set->n_slots) {
                size_t n_slots = set->n_slots ? set->n_slots * 2 : 16,
                       *slots = calloc(n_slots, sizeof(size_t));
                if (!slots)
                        return -ENOMEM;
                free(set->slots);
                set->slots = slots;
                set->n_slots = n_slots;
                for (size_t i = 0; i < set->n; i++)
                        suffix_set_place(set, i);
        }
        set->v[set->n] = *s;
        suffix_set_place(set, set->n++);
        return 0;
}

/* True if a literal "*" matches the descriptor's pattern (key=*, or a value of stars only). */
static bool matches_star(const Desc *d) {
        return d->kind == VALUE_NONE || strspn(d->value, "*") == strlen(d->value);
}

/* Adds the suffix of each limit in node's subtree (node n levels below top) to set; star_only:
 * only through the descendants that matches_star(). Returns 0 or -ENOMEM. */
static int suffixes_collect(SuffixSet *set, const Desc *top, const Desc *node, size_t n, uint64_t hash,
                            bool star_only) {
        int r = 0;

        if (node->has_limit)
                r = suffix_set_add(set, &(Suffix){ top, node, n, hash });
        for (size_t i = 0; i < node->n_children && r >= 0 && n < YAML_DEPTH_MAX; i++) {
                const Desc *c = &node->children[i];
                if (!star_only || matches_star(c))
                        r = suffixes_collect(set, top, c, n + 1,
                                             hash * UINT64_C(0x100000001b3) + key_hash(c->key), star_only);
        }
        return r;
}

/* Blockers after the subtree of path's last descriptor c: an always-allow rule for each suffix
 * a later sibling of the same key could match (later[0..n_later)), the path's patterns then
 * the suffix's keys as key=*, unless a rule of c's subtree already decides all of it (a limit
 * reached from c through descriptors that match "*"). */
static int add_blockers(YamlParser *p, const Path *path, const Suffix *later, size_t n_later) {
        SuffixSet own = { .v = NULL };
        const Desc *c = path->d[path->n - 1];
        int r = 0;

        if (n_later == 0)
                return 0;
        r = suffixes_collect(&own, c, c, 0, 0, true);
        for (size_t i = 0; i < n_later && r >= 0; i++) {
                const char *suffix[YAML_DEPTH_MAX];
                size_t k = later[i].n;

                if (suffix_set_has(&own, &later[i]))
                        continue;
                for (const Desc *d = later[i].leaf; k > 0; d = d->parent)
                        suffix[--k] = d->key;
                r = add_always_allow(p, path, suffix, later[i].n, c->line, NULL, 0, NULL);
        }
        suffix_set_done(&own);
        return r;
}

static int kind_rank(ValueKind k) {
        return k == VALUE_EXACT ? 0 : k == VALUE_GLOB ? 1 : 2;
}

/* Siblings by key, then as envoyproxy/ratelimit tries them: exact values, wildcards in the
 * file's order, the key without value. (Between keys the order is free: a path's keys are
 * never another's in another order, check_key_orders().) */
static int cmp_sibling(const void *a, const void *b) {
        const Desc *x = *(const Desc *const *) a, *y = *(const Desc *const *) b;
        int c = strcmp(x->key, y->key);

        if (c == 0)
                c = kind_rank(x->kind) - kind_rank(y->kind);
        return c != 0 ? c : (x > y) - (x < y);
}

/* The rules of a descriptors list below path, in the order of envoyproxy/ratelimit's walk. */
static int add_level(YamlParser *p, const Desc *v, size_t n, Path *path) {
        SuffixSet later = { .v = NULL };
        const Desc **sorted = NULL;
        size_t *n_later = NULL;
        int r = 0;

        if (n == 0 || path->n >= YAML_DEPTH_MAX)
                return 0;
        sorted = malloc(n * sizeof(*sorted));
        n_later = malloc(n * sizeof(*n_later));
        if (!sorted || !n_later) {
                r = -ENOMEM;
                goto finish;
        }
        for (size_t i = 0; i < n; i++)
                sorted[i] = &v[i];
        qsort(sorted, n, sizeof(*sorted), cmp_sibling);
        for (size_t g = 0, end; g < n && r >= 0; g = end) {
                for (end = g + 1; end < n && strcmp(sorted[end]->key, sorted[g]->key) == 0;)
                        end++;
                /* Backwards: what the siblings after each could match, a prefix of one list. */
                later.n = 0;
                if (later.slots)
                        memset(later.slots, 0, later.n_slots * sizeof(size_t));
                for (size_t i = end; i-- > g && r >= 0;) {
                        n_later[i] = later.n;
                        if (sorted[i]->kind != VALUE_EXACT) /* exact values never meet */
                                r = suffixes_collect(&later, sorted[i], sorted[i], 0, 0, false);
                }
                for (size_t i = g; i < end && r >= 0; i++) {
                        const Desc *c = sorted[i];

                        path->d[path->n++] = c;
                        if (c->has_limit)
                                r = add_limit(p, path, c);
                        if (r >= 0)
                                r = add_level(p, c->children, c->n_children, path);
                        if (r >= 0)
                                r = add_blockers(p, path, later.v, n_later[i]);
                        path->n--;
                }
        }
finish:
        suffix_set_done(&later);
        free(n_later);
        free(sorted);
        return r;
}

/* ---- the document ------------------------------------------------------------------------ */

static int parse_root(YamlParser *p, const yaml_node_t *root, Desc **ret, size_t *ret_n) {
        RootCtx c = { .descriptors = NULL };
        int q;

        if (!root)
                return diag_add(p->diag, 1, "empty file: expected a mapping with domain and descriptors");
        if (root->type != YAML_MAPPING_NODE)
                return diag_add(p->diag, node_line(root),
                                "expected a mapping with domain and descriptors, got %s", node_kind(root));
        q = each_field(p, root, "file", "domain, descriptors", root_field, &c);
        if (q < 0)
                return q;
        if (!p->domain_line || (p->domain && p->domain[0] == '\0'))
                return diag_add(p->diag, p->domain_line ? p->domain_line : node_line(root),
                                "config file cannot have empty domain");
        if (p->domain && strchr(p->domain, '*')) {
                q = diag_add(p->diag, p->domain_line,
                             "domain '%s' contains '*', which divvyd's rules would read as a wildcard",
                             p->domain);
                if (q < 0)
                        return q;
        }
        if (c.descriptors && !is_null(c.descriptors))
                return parse_descriptors(p, c.descriptors, 1, NULL, ret, ret_n);
        return 0;
}

static int report_syntax(YamlParser *p, const yaml_parser_t *parser) {
        const yaml_mark_t *m = parser->problem ? &parser->problem_mark : &parser->context_mark;

        return diag_add(p->diag, (unsigned) m->line + 1, "YAML syntax error at column %zu: %s%s%s",
                        m->column + 1, parser->problem ? parser->problem : "cannot read the file",
                        parser->context ? " " : "", parser->context ? parser->context : "");
}

int config_yaml_load(const char *text, size_t len, RuleSet *rs, Diag *diag, char **ret_domain,
                     unsigned *ret_line) {
        YamlParser p = { .rs = rs, .diag = diag };
        size_t n_before = diag_count(diag), n = 0;
        yaml_document_t doc, more;
        yaml_parser_t parser;
        Desc *descs = NULL;
        Path path = { .n = 0 };
        int r;

        if (memchr(text, '\0', len)) {
                r = diag_add(diag, 0, "NUL byte in file");
                return r < 0 ? r : -EINVAL;
        }
        if (!yaml_parser_initialize(&parser))
                return -ENOMEM;
        yaml_parser_set_input_string(&parser, (const unsigned char *) text, len);
        if (!yaml_parser_load(&parser, &doc)) {
                r = parser.error == YAML_MEMORY_ERROR ? -ENOMEM : report_syntax(&p, &parser);
                yaml_parser_delete(&parser);
                return r < 0 ? r : -EINVAL;
        }
        p.doc = &doc;
        r = parse_root(&p, yaml_document_get_root_node(&doc), &descs, &n);
        if (r >= 0) {
                if (!yaml_parser_load(&parser, &more))
                        r = parser.error == YAML_MEMORY_ERROR ? -ENOMEM : report_syntax(&p, &parser);
                else {
                        if (yaml_document_get_root_node(&more))
                                r = diag_add(
                                        diag, (unsigned) more.start_mark.line + 1,
                                        "a second YAML document: a file holds one domain's configuration");
                        yaml_document_delete(&more);
                }
        }
        if (r >= 0 && diag_count(diag) == n_before)
                r = check_path_keys(&p, descs, n, &path);
        if (r >= 0 && diag_count(diag) == n_before)
                r = check_key_orders(&p, descs, n);
        if (r >= 0 && diag_count(diag) == n_before)
                r = add_level(&p, descs, n, &path);
        if (r >= 0 && diag_count(diag) == n_before && ret_domain) {
                *ret_domain = strdup(p.domain);
                if (!*ret_domain)
                        r = -ENOMEM;
                else if (ret_line)
                        *ret_line = p.domain_line;
        }
        descs_free(descs, n);
        yaml_document_delete(&doc);
        yaml_parser_delete(&parser);
        if (r < 0)
                return r;
        return diag_count(diag) > n_before ? -EINVAL : 0;
}

int config_yaml_add_default(RuleSet *rs, Diag *diag) {
        RuleDraft d;

        /* A request no descriptor matches has no limit: envoyproxy/ratelimit answers OK. */
        rule_draft_init(&d, 0);
        d.is_default = true;
        (void) rule_draft_set(&d, "creditLimit", YAML_UNLIMITED_CREDIT, 0);
        (void) rule_draft_set(&d, "resetSeconds", "0", 0);
        (void) rule_draft_set(&d, "comment", "no limit: no descriptor of the YAML files matches", 0);
        return ruleset_add(rs, &d, diag);
}

int config_yaml_parse(const char *text, size_t len, RuleSet *rs, Diag *diag) {
        int r = config_yaml_load(text, len, rs, diag, NULL, NULL);
        return r < 0 ? r : config_yaml_add_default(rs, diag);
}
