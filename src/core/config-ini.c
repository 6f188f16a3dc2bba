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
} IniParser;

static bool is_blank(char c) {
        return c == ' ' || c == '\t';
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

        /* Both ends lie within this line (or on its '\n'), so terminating in place is safe. */
        *key_end = '\0';
        *v_end = '\0';

        r = rule_draft_set_diag(&p->draft, p->section_ok ? NULL : p->what, s, v, line, p->diag);
        /* Other failures are in diag already, which is how the caller knows. */
        return r == -ENOMEM ? r : 0;
}

static int parse_line(IniParser *p, char *s, size_t n, unsigned line) {
        if (n > 0 && s[n - 1] == '\r')
                n--;
        if (memchr(s, '\0', n))
                return diag_add(p->diag, line, "NUL byte in line");
        if (line == 1 && n >= 3 && memcmp(s, "\xef\xbb\xbf", 3) == 0) { /* UTF-8 byte order mark */
                s += 3;
                n -= 3;
        }
        while (n > 0 && is_blank(*s)) {
                s++;
                n--;
        }
        while (n > 0 && is_blank(s[n - 1]))
                n--;

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
