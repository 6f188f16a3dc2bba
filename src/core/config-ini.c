/* SPDX-License-Identifier: MIT */
/*
 * config-ini.c: the INI rules format of divvy.
 *
 *   # comment                          ; comment
 *   [method=GET path="/a b" ip=*]      <- the operation, tokenized like a HIT request
 *   creditLimit = 3
 *   comment = '3 per hour'  # inline comments after whitespace; quotes are stripped
 *   [default]                          <- the catch-all rule, last
 *
 * The lexer is our own rather than libinih's: Debian's inih (r55) truncates section
 * names to 49 bytes and splits lines longer than 197 bytes without a word, cuts a
 * quoted value at " ;", does not know inline "#" comments and cannot say on which
 * line a key was. Each of those would silently change what a rule means.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INI_WHAT_MAX 80 /* bytes of a section header quoted in messages */

typedef struct IniSection {
        char *header; /* owned: the header's text between '[' and ']', blanks trimmed */
        size_t header_len;
        unsigned line;
        unsigned first_line; /* line of an earlier identical section, 0 if none */
} IniSection;

typedef struct IniParser {
        RuleSet *rs;
        Diag *diag;

        bool in_section; /* a header was seen */
        bool section_ok; /* and it parsed: the draft is added at its end */
        RuleDraft draft;
        char what[RULE_DESCRIBE_MAX + 16]; /* "rule [method=GET]" for messages */

        IniSection *sections;
        size_t n_sections;

        bool bom;         /* the file starts with a byte order mark, on a line that is no comment */
        bool line_padded; /* the current line has blanks before or after its text */
} IniParser;

static bool is_blank(char c) {
        return c == ' ' || c == '\t';
}

/* ---- how divvy 1.7 reads the same text (for config_check_divvy()) ----
 *
 * divvy reads INI with npm's ini 1.3: a line is a section only if it is exactly
 * /^\[([^\]]*)\]$/ (nothing before '[' or after ']'); the section name and each value go
 * through its unsafe(): trimmed, then either unquoted ('...' stripped, then JSON.parse()
 * tried; "..." JSON.parse()d) or cut at the first ';' or '#' with '\' escaping those and
 * itself; the values true, false and null become JavaScript's; a '.' in a section name
 * nests sections. divvy then splits the name at /\s+/ and each pair at '='. The loader
 * notes where that reading and ours part, and the compat check refuses those rules. */

/* True if s[0..n) is a JSON number (RFC 8259 grammar). */
static bool is_json_number(const char *s, size_t n) {
        size_t i = 0;
        if (i < n && s[i] == '-')
                i++;
        if (i < n && s[i] == '0')
                i++;
        else if (i < n && s[i] >= '1' && s[i] <= '9')
                while (i < n && s[i] >= '0' && s[i] <= '9')
                        i++;
        else
                return false;
        if (i < n && s[i] == '.') {
                size_t start = ++i;
                while (i < n && s[i] >= '0' && s[i] <= '9')
                        i++;
                if (i == start)
                        return false;
        }
        if (i < n && (s[i] == 'e' || s[i] == 'E')) {
                i++;
                if (i < n && (s[i] == '+' || s[i] == '-'))
                        i++;
                size_t start = i;
                while (i < n && s[i] >= '0' && s[i] <= '9')
                        i++;
                if (i == start)
                        return false;
        }
        return i == n;
}

/* A number JavaScript writes back as the same text: 0, or up to 15 digits without a
 * leading zero (exact in a double). */
static bool is_js_canonical_integer(const char *s, size_t n) {
        if (n == 0 || n > 15 || (s[0] == '0' && n > 1))
                return false;
        for (size_t i = 0; i < n; i++)
                if (s[i] < '0' || s[i] > '9')
                        return false;
        return true;
}

static bool slice_is(const char *s, size_t n, const char *word) {
        return n == strlen(word) && memcmp(s, word, n) == 0;
}

/* True if divvy's INI reader reads the raw value text raw[0..raw_n) (what follows '=')
 * as the string v[0..v_n) that we read: ini's unsafe(), then true/false/null. */
static bool divvy_reads_value_alike(const char *raw, size_t raw_n, const char *v, size_t v_n) {
        char buf[RULE_TEXT_MAX + 1];
        size_t n = 0;

        while (raw_n > 0 && strchr(" \t\r\v\f", raw[0]) && raw[0] != '\0')
                raw++, raw_n--;
        while (raw_n > 0 && strchr(" \t\r\v\f", raw[raw_n - 1]) && raw[raw_n - 1] != '\0')
                raw_n--;
        if (raw_n >= 1 &&
            ((raw[0] == '"' && raw[raw_n - 1] == '"') || (raw[0] == '\'' && raw[raw_n - 1] == '\''))) {
                if (raw_n < 2)
                        return false;
                const char *in = raw + 1;
                size_t in_n = raw_n - 2;
                if (raw[0] == '"') /* JSON.parse() of the whole: alike without escapes or inner quotes */
                        return !memchr(in, '\\', in_n) && !memchr(in, '"', in_n) && in_n == v_n &&
                               memcmp(in, v, v_n) == 0;
                /* '...': stripped, then JSON.parse() tried on the inside */
                if (slice_is(in, in_n, "null") || slice_is(in, in_n, "false"))
                        return false;
                if (is_json_number(in, in_n) && !is_js_canonical_integer(in, in_n))
                        return false;
                if (in_n > 0 && strchr("\"[{ \t", in[0]))
                        return false; /* a JSON string, array or object (or one after blanks) */
                return in_n == v_n && memcmp(in, v, v_n) == 0;
        }
        /* unquoted: cut at the first unescaped ';' or '#'; '\' escapes '\', ';' and '#' */
        for (size_t i = 0; i < raw_n && n < sizeof buf - 2; i++) {
                char c = raw[i];
                if (c == '\\' && i + 1 < raw_n) {
                        char e = raw[++i];
                        if (!strchr("\\;#", e) || e == '\0')
                                buf[n++] = '\\';
                        buf[n++] = e;
                } else if (c == ';' || c == '#')
                        break;
                else
                        buf[n++] = c;
        }
        while (n > 0 && strchr(" \t\r\v\f", buf[n - 1]) && buf[n - 1] != '\0')
                n--;
        if (slice_is(buf, n, "false") || slice_is(buf, n, "null"))
                return false; /* JavaScript's false and null: no value at all */
        return n == v_n && memcmp(buf, v, v_n) == 0;
}

/* True if s[0..n) holds a character JavaScript's /\s/ matches but our tokenizer does not
 * split on (control characters, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F,
 * U+205F, U+3000, U+FEFF). */
static bool has_js_space(const char *s, size_t n) {
        const unsigned char *u = (const unsigned char *) s;
        for (size_t i = 0; i < n; i++) {
                if (u[i] == '\v' || u[i] == '\f' || u[i] == '\r' || u[i] == '\n')
                        return true;
                if (i + 1 < n && u[i] == 0xc2 && u[i + 1] == 0xa0)
                        return true;
                if (i + 2 < n &&
                    ((u[i] == 0xe1 && u[i + 1] == 0x9a && u[i + 2] == 0x80) ||
                     (u[i] == 0xe2 && u[i + 1] == 0x80 &&
                      (u[i + 2] <= 0x8a || u[i + 2] == 0xa8 || u[i + 2] == 0xa9 || u[i + 2] == 0xaf)) ||
                     (u[i] == 0xe2 && u[i + 1] == 0x81 && u[i + 2] == 0x9f) ||
                     (u[i] == 0xe3 && u[i + 1] == 0x80 && u[i + 2] == 0x80) ||
                     (u[i] == 0xef && u[i + 1] == 0xbb && u[i + 2] == 0xbf)))
                        return true;
        }
        return false;
}

/* True if divvy reads the header line "[content]" (content blank-trimmed by us; padded:
 * the line had blanks around it; after: text after ']') as the same operation: a bare
 * "[k=v k=v]" line whose values need no quotes and hold nothing ini or divvy cut at. */
static bool divvy_reads_header_alike(const char *content, size_t n, bool padded, bool after) {
        if (padded || after || (n >= 2 && content[0] == '\'' && content[n - 1] == '\''))
                return false;
        for (size_t i = 0; i < n; i++)
                if (strchr("\".;#\\]", content[i]) && content[i] != '\0')
                        return false;
        return !has_js_space(content, n);
}

/* Ends the current section: a valid one becomes a rule. */
static int flush_section(IniParser *p) {
        int r;

        if (!p->in_section || !p->section_ok)
                return 0;
        p->in_section = false;
        r = ruleset_add(p->rs, &p->draft, p->diag);
        /* Other failures are in diag already, which is how the caller knows. */
        return r == -ENOMEM ? r : 0;
}

/* Keeps the text of a section header for the duplicate check at the end. Only identical
 * texts are duplicates, as in divvy's INI reader (which merged them silently): the same
 * operation with its keys in another order is another section, which the rules'
 * validation then judges like a JSON rule (a canary before a stop rule on one operation
 * is the canary's main use; a second stop rule is unreachable). */
static int remember_section(IniParser *p, const char *text, size_t len, unsigned line) {
        char *header;

        /* Every section is a rule, and a file with more than RULES_MAX is refused anyway: stop
         * here, so that 64 MiB of "[a=1]" lines cannot make us keep ten million sections
         * (over a gigabyte and seconds of sorting for the duplicate check). */
        if (p->n_sections > RULES_MAX) {
                (void) diag_add(p->diag, line, "more than %d sections: a config has at most %d rules",
                                RULES_MAX, RULES_MAX);
                return -EINVAL;
        }

        header = malloc(len + 1);
        if (!header)
                return -ENOMEM;
        memcpy(header, text, len);
        header[len] = '\0';

        if (p->n_sections % 64 == 0) {
                IniSection *s = realloc(p->sections, (p->n_sections + 64) * sizeof(IniSection));
                if (!s) {
                        free(header);
                        return -ENOMEM;
                }
                p->sections = s;
        }
        p->sections[p->n_sections++] = (IniSection){ .header = header, .header_len = len, .line = line };
        return 0;
}

static int cmp_header(const void *a, const void *b) {
        const IniSection *x = a, *y = b;
        size_t n = x->header_len < y->header_len ? x->header_len : y->header_len;
        int c = memcmp(x->header, y->header, n);
        if (c != 0)
                return c;
        if (x->header_len != y->header_len)
                return x->header_len < y->header_len ? -1 : 1;
        return x->line < y->line ? -1 : x->line > y->line;
}

static int cmp_line(const void *a, const void *b) {
        const IniSection *x = a, *y = b;
        return x->line < y->line ? -1 : x->line > y->line;
}

/* Two sections with the same header: divvy's INI reader merged them silently. */
static int report_duplicate_sections(IniParser *p) {
        int r;

        if (p->n_sections < 2)
                return 0;
        qsort(p->sections, p->n_sections, sizeof(IniSection), cmp_header);
        for (size_t i = 1; i < p->n_sections; i++) {
                IniSection *prev = &p->sections[i - 1], *s = &p->sections[i];
                if (prev->header_len == s->header_len && memcmp(prev->header, s->header, s->header_len) == 0)
                        s->first_line = prev->first_line ? prev->first_line : prev->line;
        }
        qsort(p->sections, p->n_sections, sizeof(IniSection), cmp_line);
        for (size_t i = 0; i < p->n_sections; i++)
                if (p->sections[i].first_line > 0) {
                        r = diag_add(p->diag, p->sections[i].line,
                                     "duplicate section: same header as the section on line %u",
                                     p->sections[i].first_line);
                        if (r < 0)
                                return r;
                }
        return 0;
}

/* '=' outside double quotes: one per pair in a well-formed header. */
static size_t count_pairs(const char *s, size_t n) {
        size_t count = 0;
        bool quoted = false;

        for (size_t i = 0; i < n; i++)
                if (s[i] == '"')
                        quoted = !quoted;
                else if (s[i] == '=' && !quoted)
                        count++;
        return count;
}

/* The operation of a section header, "k=v k2=v2", tokenized like a HIT request, into
 * the draft: the section becomes a rule at its end if this succeeds. */
static int parse_operation(IniParser *p, const char *content, size_t len, unsigned line) {
        char desc[RULE_DESCRIBE_MAX];
        ProtoRequest req;
        int r;

        r = proto_parse_pairs(content, len, RULE_PATTERNS_MAX, &req);
        if (r < 0)
                return diag_add(p->diag, line, "%s: invalid operation: %s", p->what, req.error_reason);
        if (count_pairs(content, len) != req.n_pairs)
                return diag_add(p->diag, line, "%s: a key appears twice in the operation", p->what);

        for (size_t i = 0; i < req.n_pairs; i++) {
                const ProtoPair *pair = &req.pairs[i];
                r = rule_draft_add_pattern(&p->draft, pair->key.ptr, pair->key.len, pair->value.ptr,
                                           pair->value.len);
                if (r < 0)
                        return diag_add(p->diag, line, "%s: key '%.*s': %s", p->what, (int) pair->key.len,
                                        pair->key.ptr,
                                        r == -E2BIG    ? "too many keys"
                                        : r == -EEXIST ? "appears twice"
                                                       : "empty or too long");
        }
        p->section_ok = true;
        snprintf(p->what, sizeof p->what, "rule %s", rule_draft_describe(&p->draft, desc, sizeof desc));
        return remember_section(p, content, len, line);
}

static int parse_header(IniParser *p, char *s, size_t n, unsigned line) {
        size_t close = 0;
        bool quoted = false;
        int r;

        r = flush_section(p);
        if (r < 0)
                return r;

        /* The header ends at the first ']' outside double quotes: [path="/a]b"] works. */
        for (size_t i = 1; i < n && close == 0; i++)
                if (s[i] == '"')
                        quoted = !quoted;
                else if (s[i] == ']' && !quoted)
                        close = i;

        p->in_section = true;
        p->section_ok = false;
        rule_draft_init(&p->draft, line);
        if (close == 0) {
                snprintf(p->what, sizeof p->what, "section [%.*s...",
                         (int) (n > INI_WHAT_MAX ? INI_WHAT_MAX : n - 1), s + 1);
                return diag_add(p->diag, line, "section header without closing ']'");
        }

        char *content = s + 1;
        size_t len = close - 1;
        while (len > 0 && is_blank(content[0])) {
                content++;
                len--;
        }
        while (len > 0 && is_blank(content[len - 1]))
                len--;
        if (len > INI_WHAT_MAX)
                snprintf(p->what, sizeof p->what, "section [%.*s...]", INI_WHAT_MAX, content);
        else
                snprintf(p->what, sizeof p->what, "section [%.*s]", (int) len, content);

        const char *rest = s + close + 1;
        while (is_blank(*rest))
                rest++;
        if (rest < s + n && *rest != ';' && *rest != '#')
                return diag_add(p->diag, line, "%s: unexpected text after ']'", p->what);

        if (!divvy_reads_header_alike(content, len, p->line_padded, close + 1 < n))
                p->draft.divvy_notes |= RULE_DIVVY_INI_HEADER;
        if (p->bom && p->n_sections == 0)
                p->draft.divvy_notes |= RULE_DIVVY_BOM;

        if (len == 0)
                return diag_add(p->diag, line, "empty section header []; the catch-all rule is [default]");

        if (len == strlen("default") && memcmp(content, "default", len) == 0) {
                p->draft.is_default = true;
                p->section_ok = true;
                snprintf(p->what, sizeof p->what, "rule [default]");
                return remember_section(p, content, len, line);
        }

        return parse_operation(p, content, len, line);
}

static int parse_key_value(IniParser *p, char *s, size_t n, unsigned line) {
        char *eq = memchr(s, '=', n);
        char *end = s + n;
        int r;

        if (!p->in_section)
                return diag_add(p->diag, line,
                                "'%.*s' outside of any section; rules start with [operation] or [default]",
                                (int) (n > INI_WHAT_MAX ? INI_WHAT_MAX : n), s);
        if (!eq)
                return diag_add(p->diag, line, "%s: expected 'key = value', got '%.*s'", p->what,
                                (int) (n > INI_WHAT_MAX ? INI_WHAT_MAX : n), s);

        char *key_end = eq;
        while (key_end > s && is_blank(key_end[-1]))
                key_end--;
        if (key_end == s)
                return diag_add(p->diag, line, "%s: missing key before '='", p->what);

        char *v = eq + 1, *v_end;
        while (v < end && is_blank(*v))
                v++;
        if (v < end && (*v == '"' || *v == '\'')) {
                char *q = memchr(v + 1, *v, (size_t) (end - v - 1));
                if (!q)
                        return diag_add(p->diag, line, "%s: %.*s: unterminated quoted value", p->what,
                                        (int) (key_end - s), s);
                char *rest = q + 1;
                while (rest < end && is_blank(*rest))
                        rest++;
                if (rest < end && *rest != ';' && *rest != '#')
                        return diag_add(p->diag, line, "%s: %.*s: unexpected text after the closing quote",
                                        p->what, (int) (key_end - s), s);
                v++;
                v_end = q;
        } else {
                /* Unquoted: ';' or '#' at the start or after whitespace begins a comment. */
                v_end = v;
                while (v_end < end &&
                       !((*v_end == ';' || *v_end == '#') && (v_end == v || is_blank(v_end[-1]))))
                        v_end++;
                while (v_end > v && is_blank(v_end[-1]))
                        v_end--;
        }

        /* Read before the value is terminated in place, which may cut the raw text. */
        bool alike = divvy_reads_value_alike(eq + 1, (size_t) (end - eq - 1), v, (size_t) (v_end - v));

        /* Both ends lie within this line (or on its '\n'), so terminating in place is safe. */
        *key_end = '\0';
        *v_end = '\0';

        /* The attributes that decide (comment does not; the others divvy does not know). */
        RuleAttr a = rule_attr_from_string(s);
        if (!alike && (a == RULE_ATTR_CREDIT_LIMIT || a == RULE_ATTR_RESET_SECONDS ||
                       a == RULE_ATTR_ACTOR_FIELD || a == RULE_ATTR_MATCH_POLICY || a == RULE_ATTR_LABEL))
                p->draft.divvy_attrs |= 1u << a;

        r = rule_draft_set_diag(&p->draft, p->section_ok ? NULL : p->what, s, v, line, p->diag);
        /* Other failures are in diag already, which is how the caller knows. */
        return r == -ENOMEM ? r : 0;
}

static int parse_line(IniParser *p, char *s, size_t n, unsigned line) {
        if (n > 0 && s[n - 1] == '\r')
                n--;
        if (memchr(s, '\0', n))
                return diag_add(p->diag, line, "NUL byte in line");
        bool bom = line == 1 && n >= 3 && memcmp(s, "\xef\xbb\xbf", 3) == 0;
        if (bom) { /* UTF-8 byte order mark */
                s += 3;
                n -= 3;
        }
        p->line_padded = n > 0 && (is_blank(s[0]) || is_blank(s[n - 1]));
        while (n > 0 && is_blank(*s)) {
                s++;
                n--;
        }
        while (n > 0 && is_blank(s[n - 1]))
                n--;

        /* divvy reads a byte order mark before a comment as a blank (JavaScript's \s), and
         * before anything else as part of the line */
        if (bom && !(n > 0 && (*s == ';' || *s == '#')))
                p->bom = true;
        if (n == 0 || *s == ';' || *s == '#')
                return 0;
        if (*s == '[')
                return parse_header(p, s, n, line);
        return parse_key_value(p, s, n, line);
}

int config_ini_parse(const char *text, size_t len, RuleSet *rs, Diag *diag) {
        IniParser p = { .rs = rs, .diag = diag };
        size_t n_before = diag_count(diag); /* every problem is a message: more means invalid */
        char *buf;
        unsigned line = 1;
        int r = 0;

        /* A private copy: keys and values are terminated in place and the drafts
         * point into it until ruleset_add() has copied them. */
        buf = malloc(len + 1);
        if (!buf)
                return -ENOMEM;
        memcpy(buf, text, len);
        buf[len] = '\0';

        for (char *s = buf, *end = buf + len; s < end; line++) {
                char *nl = memchr(s, '\n', (size_t) (end - s));
                char *line_end = nl ? nl : end;
                r = parse_line(&p, s, (size_t) (line_end - s), line);
                if (r < 0)
                        goto finish;
                s = line_end + 1;
        }
        r = flush_section(&p);
        if (r < 0)
                goto finish;
        r = report_duplicate_sections(&p);

finish:
        for (size_t i = 0; i < p.n_sections; i++)
                free(p.sections[i].header);
        free(p.sections);
        free(buf);
        if (r < 0)
                return r;
        return diag_count(diag) > n_before ? -EINVAL : 0;
}
