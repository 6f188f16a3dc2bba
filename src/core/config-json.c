/* SPDX-License-Identifier: MIT */
/*
 * config-json.c: the JSON rules format of divvy, read with cJSON.
 *
 *   { "overrides": [ { "operation": { "method": "GET", "ip": "*" },
 *                      "creditLimit": 3, "resetSeconds": 3600, "actorField": "ip" } ],
 *     "default": { "creditLimit": 0, "resetSeconds": 0 } }
 *
 * cJSON keeps no source positions, so after a successful parse one scan of the
 * text lists the line of every value in document order, which is the pre-order
 * of cJSON's tree: rules and attributes get line numbers in messages too.
 */
#include "config.h"

#include <cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define JSON_NUMBER_MAX 32 /* bytes: a stringified JSON number, "%.17g" and NUL included */

/* Where a value starts in the text. */
typedef struct ValuePos {
        unsigned line;
        size_t offset;
} ValuePos;

typedef struct ItemLine {
        const cJSON *item;
        ValuePos pos;
} ItemLine;

typedef struct JsonParser {
        RuleSet *rs;
        Diag *diag;
        const char *text; /* the document, for values as written */
        size_t text_len;
        ItemLine *lines; /* sorted by item address */
        size_t n_lines;
        unsigned first_notes; /* RuleDivvyNote bits for the first rule parsed (the file's) */
        bool no_overrides;    /* the document has no "overrides": divvy 1.7 cannot read it */
} JsonParser;

/* Strings a rule draft points to until ruleset_add(): stringified numbers. */
typedef struct RuleStrings {
        char attrs[_RULE_ATTR_MAX][JSON_NUMBER_MAX];
        char patterns[RULE_PATTERNS_MAX][JSON_NUMBER_MAX];
} RuleStrings;

/* Appends pos to the growing array *lines. Returns 0 or -ENOMEM (*lines unchanged). */
static int push_line(ValuePos **lines, size_t *n, size_t *allocated, ValuePos pos) {
        if (*n == *allocated) {
                size_t a = *allocated ? *allocated * 2 : 64;
                ValuePos *l = realloc(*lines, a * sizeof(ValuePos));
                if (!l)
                        return -ENOMEM;
                *lines = l;
                *allocated = a;
        }
        (*lines)[(*n)++] = pos;
        return 0;
}

/* Lines and offsets of every JSON value of a valid document, in document order. Sets
 * *ret_nul_line if a string contains \u0000, which cJSON would silently
 * truncate at. */
static int scan_value_lines(const char *t, size_t len, ValuePos **ret, size_t *ret_n,
                            unsigned *ret_nul_line) {
        char stack[CJSON_NESTING_LIMIT + 1];
        size_t depth = 0, n = 0, allocated = 0;
        ValuePos *lines = NULL;
        unsigned line = 1;
        bool expect_value = true;
        size_t i = 0;

        if (len >= 3 && memcmp(t, "\xef\xbb\xbf", 3) == 0)
                i = 3;
        for (; i < len; i++) {
                char c = t[i];
                bool record = false;
                ValuePos start = { line, i };

                switch (c) {
                case '\n':
                        line++;
                        continue;
                case ' ':
                case '\t':
                case '\r':
                        continue;
                case ':':
                        expect_value = true;
                        continue;
                case ',':
                        expect_value = depth > 0 && stack[depth - 1] == '[';
                        continue;
                case '{':
                case '[':
                        record = true;
                        if (depth < sizeof stack)
                                stack[depth++] = c;
                        expect_value = c == '[';
                        break;
                case '}':
                case ']':
                        if (depth > 0)
                                depth--;
                        expect_value = false;
                        continue;
                case '"':
                        record = expect_value;
                        for (i++; i < len && t[i] != '"'; i++) {
                                if (t[i] == '\\') {
                                        if (i + 5 < len && t[i + 1] == 'u' &&
                                            memcmp(t + i + 2, "0000", 4) == 0 && *ret_nul_line == 0)
                                                *ret_nul_line = line;
                                        i++;
                                } else if (t[i] == '\n')
                                        line++;
                        }
                        expect_value = false;
                        break;
                default: /* number, true, false, null */
                        record = expect_value;
                        while (i + 1 < len && !strchr(",]}: \t\r\n", t[i + 1]))
                                i++;
                        expect_value = false;
                        break;
                }

                if (record && push_line(&lines, &n, &allocated, start) < 0) {
                        free(lines);
                        return -ENOMEM;
                }
        }
        *ret = lines;
        *ret_n = n;
        return 0;
}

static void pair_items(const cJSON *item, const ValuePos *lines, size_t n, ItemLine *out, size_t *k) {
        for (; item; item = item->next) {
                if (*k < n)
                        out[*k] = (ItemLine){ item, lines[*k] };
                (*k)++;
                pair_items(item->child, lines, n, out, k);
        }
}

static int cmp_item(const void *a, const void *b) {
        uintptr_t x = (uintptr_t) ((const ItemLine *) a)->item, y = (uintptr_t) ((const ItemLine *) b)->item;
        return x < y ? -1 : x > y;
}

static int build_lines(JsonParser *p, const cJSON *root, const char *text, size_t len,
                       unsigned *ret_nul_line) {
        ValuePos *lines = NULL;
        size_t n = 0, k = 0;
        int r;

        p->text = text;
        p->text_len = len;
        r = scan_value_lines(text, len, &lines, &n, ret_nul_line);
        if (r < 0)
                return r;
        p->lines = calloc(n ? n : 1, sizeof(ItemLine));
        if (!p->lines) {
                free(lines);
                return -ENOMEM;
        }
        pair_items(root, lines, n, p->lines, &k);
        free(lines);
        /* k != n would be a scanner bug; lines are then best effort, never wrong
         * memory. */
        p->n_lines = k < n ? k : n;
        qsort(p->lines, p->n_lines, sizeof(ItemLine), cmp_item);
        return 0;
}

static const ValuePos *pos_of(const JsonParser *p, const cJSON *item) {
        ItemLine key = { .item = item };
        const ItemLine *found = bsearch(&key, p->lines, p->n_lines, sizeof(ItemLine), cmp_item);
        return found ? &found->pos : NULL;
}

static unsigned line_of(const JsonParser *p, const cJSON *item) {
        const ValuePos *pos = pos_of(p, item);
        return pos ? pos->line : 0;
}

static const char *type_name(const cJSON *item) {
        if (cJSON_IsString(item))
                return "a string";
        if (cJSON_IsNumber(item))
                return "a number";
        if (cJSON_IsBool(item))
                return "a boolean";
        if (cJSON_IsNull(item))
                return "null";
        if (cJSON_IsArray(item))
                return "an array";
        return "an object";
}

/* Integers as integers ("3", not "3.0"); others in the shortest form that reads back. */
static const char *format_number(double d, char buf[static JSON_NUMBER_MAX]) {
        if (d >= -1e18 && d <= 1e18 && (double) (long long) d == d)
                snprintf(buf, JSON_NUMBER_MAX, "%lld", (long long) d);
        else {
                snprintf(buf, JSON_NUMBER_MAX, "%.15g", d);
                if (strtod(buf, NULL) != d)
                        snprintf(buf, JSON_NUMBER_MAX, "%.17g", d);
        }
        return buf;
}

/* The number item as its attribute's value: format_number(), but an integer the double
 * cannot hold exactly (beyond 2^53) as written, so that the range's message quotes the
 * file's number, not its neighbour ("9007199254740993", not "...992"). */
static const char *attr_number(const JsonParser *p, const cJSON *item, char buf[static JSON_NUMBER_MAX]) {
        const ValuePos *pos = pos_of(p, item);

        if (pos && (item->valuedouble >= 0x1p53 || item->valuedouble <= -0x1p53)) {
                const char *s = p->text + pos->offset;
                size_t left = p->text_len - pos->offset, n = left > 0 && s[0] == '-', digits = 0;

                while (n + digits < left && s[n + digits] >= '0' && s[n + digits] <= '9')
                        digits++;
                if (digits > 0 && s[n] != '0' && (n + digits == left || !memchr(".eE", s[n + digits], 3)) &&
                    n + digits < JSON_NUMBER_MAX) {
                        memcpy(buf, s, n + digits);
                        buf[n + digits] = '\0';
                        return buf;
                }
        }
        return format_number(item->valuedouble, buf);
}

static int parse_operation(JsonParser *p, const cJSON *op, const char *what, bool is_default, RuleDraft *d,
                           RuleStrings *strings, bool *ok) {
        size_t j = 0;
        int r;

        if (!cJSON_IsObject(op)) {
                *ok = false;
                return diag_add(p->diag, line_of(p, op), "%s: operation: expected an object, got %s", what,
                                type_name(op));
        }
        if (is_default && op->child) {
                *ok = false;
                return diag_add(p->diag, line_of(p, op),
                                "%s: operation: must be empty, the default rule matches everything", what);
        }

        for (const cJSON *m = op->child; m; m = m->next, j++) {
                unsigned line = line_of(p, m);
                const char *v;

                if (cJSON_IsString(m))
                        v = m->valuestring;
                else if (cJSON_IsNumber(m) && j < RULE_PATTERNS_MAX) {
                        v = format_number(m->valuedouble, strings->patterns[j]);
                        /* JavaScript writes exponents its own way ("1e-7", 1e20 in full) */
                        if (strpbrk(v, "eE"))
                                d->divvy_notes |= RULE_DIVVY_JSON_OPERATION_NUMBER;
                } else if (cJSON_IsBool(m))
                        v = cJSON_IsTrue(m) ? "true" : "false";
                else if (cJSON_IsNumber(m))
                        v = "0"; /* too many keys: add_pattern says so below */
                else {
                        *ok = false;
                        r = diag_add(p->diag, line,
                                     "%s: operation: '%s': expected a string, number or boolean, got %s",
                                     what, m->string, type_name(m));
                        if (r < 0)
                                return r;
                        continue;
                }

                const char *why = proto_text_unsendable(m->string);
                if (why || (why = proto_text_unsendable(v))) {
                        *ok = false;
                        r = diag_add(p->diag, line, "%s: operation: '%s': %s %s", what, m->string,
                                     proto_text_unsendable(m->string) ? "key" : "value", why);
                        if (r < 0)
                                return r;
                        continue;
                }
                r = rule_draft_add_pattern(d, m->string, strlen(m->string), v, strlen(v));
                if (r < 0) {
                        *ok = false;
                        r = diag_add(p->diag, line, "%s: operation: '%s': %s", what, m->string,
                                     r == -E2BIG    ? "too many keys"
                                     : r == -EEXIST ? "appears twice"
                                                    : "empty or too long");
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

/* The rule's "operation" member, wherever it is among the others, into d. Clears *ok
 * if it is missing (the default rule may leave it out), repeated or invalid. Returns 0
 * or -ENOMEM. */
static int parse_rule_operation(JsonParser *p, const cJSON *item, const char *what, bool is_default,
                                RuleDraft *d, RuleStrings *strings, bool *ok) {
        const cJSON *operation = NULL;
        int r = 0;

        for (const cJSON *m = item->child; m; m = m->next) {
                if (strcmp(m->string, "operation") != 0)
                        continue;
                if (operation)
                        r = diag_add(p->diag, line_of(p, m),
                                     "%s: duplicate key 'operation' (first on line %u)", what,
                                     line_of(p, operation));
                else {
                        operation = m;
                        r = parse_operation(p, m, what, is_default, d, strings, ok);
                }
                if (r < 0)
                        return r;
        }
        if (!operation && is_default) /* divvy 1.7 fails on a default without one */
                d->divvy_notes |= RULE_DIVVY_JSON_NO_OPERATION;
        if (!operation && !is_default) {
                *ok = false;
                return diag_add(p->diag, d->line,
                                "%s: missing \"operation\" (use {} to match every request)", what);
        }
        return 0;
}

static bool attr_is_number(RuleAttr a) {
        return a == RULE_ATTR_CREDIT_LIMIT || a == RULE_ATTR_RESET_SECONDS || a == RULE_ATTR_BURST ||
               a == RULE_ATTR_REFILL_SECONDS;
}

/* What an attribute's JSON value may be, for messages. */
static const char *attr_expected(RuleAttr a) {
        return attr_is_number(a) ? "a number" : a == RULE_ATTR_STRICT ? "true or false" : "a string";
}

/* Every member of the rule but "operation", as attributes of d: JSON numbers and
 * booleans (strict) are stringified for rules.c, which checks every value. what names the rule in messages;
 * named_by_what: d's operation could not be read, so rules.c must use what too
 * instead of describing d. Clears *ok on any problem. Returns 0 or -ENOMEM. */
static int parse_rule_attributes(JsonParser *p, const cJSON *item, const char *what, bool named_by_what,
                                 RuleDraft *d, RuleStrings *strings, bool *ok) {
        int r = 0;

        for (const cJSON *m = item->child; m; m = m->next) {
                unsigned line = line_of(p, m);
                RuleAttr a = rule_attr_from_string(m->string);
                const char *v = NULL;

                if (strcmp(m->string, "operation") == 0)
                        continue;
                if (a < 0 && strcasecmp(m->string, "operation") == 0)
                        r = diag_add(p->diag, line,
                                     "%s has an unknown attribute \"%s\" (did you mean \"operation\"?)",
                                     what, m->string);
                else if (a < 0 || cJSON_IsString(m)) {
                        /* unknown names too: rule_draft_set_diag() words that message */
                        v = cJSON_IsString(m) ? m->valuestring : "";
                        /* divvy 1.7 keys its counters by a limit given as a string as written */
                        if (attr_is_number(a) && v[0] == '0' && v[1] != '\0')
                                d->divvy_attrs |= 1u << a;
                } else if (cJSON_IsNumber(m) && attr_is_number(a))
                        v = attr_number(p, m, strings->attrs[a]);
                else if (cJSON_IsBool(m) && a == RULE_ATTR_STRICT)
                        v = cJSON_IsTrue(m) ? "true" : "false";
                else
                        r = diag_add(p->diag, line, "%s: %s: expected %s, got %s", what, m->string,
                                     attr_expected(a), type_name(m));
                if (r < 0)
                        return r;
                if (!v) {
                        *ok = false;
                        continue;
                }
                r = rule_draft_set_diag(d, named_by_what ? what : NULL, m->string, v, line, p->diag);
                if (r == -ENOMEM)
                        return r;
                if (r < 0)
                        *ok = false;
                r = 0;
        }
        return 0;
}

/* One rule object; where names it in messages until its operation is known
 * ("overrides[2]"), then it is "rule [method=GET]" like in rules.c's messages. */
static int parse_rule(JsonParser *p, const cJSON *item, const char *where, bool is_default) {
        char what[RULE_DESCRIBE_MAX + 16], desc[RULE_DESCRIBE_MAX];
        RuleStrings strings;
        RuleDraft d;
        bool ok = true;
        int r;

        rule_draft_init(&d, line_of(p, item));
        d.is_default = is_default;
        d.divvy_notes = p->first_notes | (is_default && p->no_overrides ? RULE_DIVVY_JSON_NO_OVERRIDES : 0);
        p->first_notes = 0;
        snprintf(what, sizeof what, "%s", where);

        if (!cJSON_IsObject(item))
                return diag_add(p->diag, d.line, "%s: expected an object, got %s", what, type_name(item));

        /* The operation first, so that messages about the attributes can name the rule. */
        r = parse_rule_operation(p, item, what, is_default, &d, &strings, &ok);
        if (r < 0)
                return r;
        bool operation_ok = ok;
        if (operation_ok)
                snprintf(what, sizeof what, "rule %s", rule_draft_describe(&d, desc, sizeof desc));

        r = parse_rule_attributes(p, item, what, !operation_ok, &d, &strings, &ok);
        if (r < 0)
                return r;
        if (!ok)
                return 0;
        r = ruleset_add(p->rs, &d, p->diag);
        /* Other failures are in diag already, which is how the caller knows. */
        return r == -ENOMEM ? r : 0;
}

/* 1-based line number of text[offset]: for what cJSON reports as a position. */
static unsigned text_line_of(const char *text, size_t offset) {
        unsigned line = 1;

        for (size_t i = 0; i < offset; i++)
                if (text[i] == '\n')
                        line++;
        return line;
}

static int report_syntax_error(JsonParser *p, const char *text, size_t len, const char *at) {
        size_t offset = at && at >= text && at <= text + len ? (size_t) (at - text) : len;
        unsigned line = text_line_of(text, offset);
        size_t bol = offset;

        while (bol > 0 && text[bol - 1] != '\n')
                bol--;
        if (offset >= len)
                return diag_add(p->diag, line, "JSON syntax error at column %zu: unexpected end of file",
                                offset - bol + 1);

        size_t n = strcspn(text + offset, "\r\n");
        if (n == 0)
                return diag_add(p->diag, line, "JSON syntax error at the end of the line (column %zu)",
                                offset - bol + 1);
        return diag_add(p->diag, line, "JSON syntax error at column %zu, near '%.*s'", offset - bol + 1,
                        (int) (n > 20 ? 20 : n), text + offset);
}

static int parse_document(JsonParser *p, const cJSON *root) {
        const cJSON *overrides = NULL, *def = NULL;
        int r;

        if (!cJSON_IsObject(root))
                return diag_add(p->diag, line_of(p, root),
                                "expected an object with \"overrides\" and \"default\", got %s",
                                type_name(root));

        for (const cJSON *m = root->child; m; m = m->next) {
                const cJSON **slot = strcmp(m->string, "overrides") == 0 ? &overrides
                                     : strcmp(m->string, "default") == 0 ? &def
                                                                         : NULL;
                if (!slot)
                        r = diag_add(p->diag, line_of(p, m),
                                     "unknown key '%s' (accepted: overrides, default)", m->string);
                else if (*slot)
                        r = diag_add(p->diag, line_of(p, m), "duplicate key '%s' (first on line %u)",
                                     m->string, line_of(p, *slot));
                else {
                        *slot = m;
                        r = 0;
                }
                if (r < 0)
                        return r;
        }

        if (overrides && !cJSON_IsArray(overrides)) {
                r = diag_add(p->diag, line_of(p, overrides), "overrides: expected an array, got %s",
                             type_name(overrides));
                if (r < 0)
                        return r;
        } else if (overrides) {
                size_t i = 0;
                for (const cJSON *item = overrides->child; item; item = item->next, i++) {
                        char what[32];
                        snprintf(what, sizeof what, "overrides[%zu]", i);
                        r = parse_rule(p, item, what, false);
                        if (r < 0)
                                return r;
                }
        }

        p->no_overrides = !overrides;
        if (!def)
                return diag_add(p->diag, 0,
                                "missing \"default\" rule (the one that applies when no override matches)");
        return parse_rule(p, def, "default", true);
}

int config_json_parse(const char *text, size_t len, RuleSet *rs, Diag *diag) {
        JsonParser p = {
                .rs = rs,
                .diag = diag,
                /* JSON.parse() refuses a byte order mark, which cJSON skips */
                .first_notes = len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0 ? RULE_DIVVY_BOM : 0,
        };
        size_t n_before = diag_count(diag); /* every problem is a message: more means invalid */
        const char *end = NULL;
        unsigned nul_line = 0;
        cJSON *root;
        int r;

        const char *nul = memchr(text, '\0', len);
        if (nul) {
                r = diag_add(p.diag, text_line_of(text, (size_t) (nul - text)), "NUL byte in file");
                return r < 0 ? r : -EINVAL;
        }

        /* len + 1: with require_null_terminated, cJSON wants to see the NUL. */
        root = cJSON_ParseWithLengthOpts(text, len + 1, &end, true);
        if (!root) {
                r = report_syntax_error(&p, text, len, end);
                return r < 0 ? r : -EINVAL;
        }

        r = build_lines(&p, root, text, len, &nul_line);
        if (r < 0)
                goto finish;
        if (nul_line > 0) {
                r = diag_add(p.diag, nul_line, "\\u0000 in a string is not allowed");
                if (r < 0)
                        goto finish;
        }
        r = parse_document(&p, root);

finish:
        free(p.lines);
        cJSON_Delete(root);
        if (r < 0)
                return r;
        return diag_count(diag) > n_before ? -EINVAL : 0;
}
