/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * What rules.c (the compiled model, its index and matching) and rules-draft.c (drafts, and
 * turning one into a Rule: every check of an attribute's value) share; not for other files.
 * rules-draft.c calls rules.c, never the reverse.
 */

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "rules.h"

/* Bytewise order of two byte strings (a prefix first). */
static inline int slice_cmp(const char *a, size_t a_len, const char *b, size_t b_len) {
        size_t n = a_len < b_len ? a_len : b_len;
        int c = n > 0 ? memcmp(a, b, n) : 0;
        if (c != 0)
                return c;
        return a_len < b_len ? -1 : a_len > b_len ? 1 : 0;
}

static inline bool slice_eq(const char *a, size_t a_len, const char *b, size_t b_len) {
        return a_len == b_len && (a_len == 0 || memcmp(a, b, a_len) == 0);
}

/* Appends "rule <desc> <reason>" to diag (which may be NULL). Returns 0 or -ENOMEM. */
int rule_report(Diag *diag, unsigned line, const char *desc, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
/* rule_report() about a line of file (NULL: diag's). */
int rule_report_in(Diag *diag, const char *file, unsigned line, const char *desc, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));

/* Frees what r owns and zeroes it (a Rule half built by ruleset_add() too). */
void rule_done(Rule *r);

/* Classifies p->value and, for globs, splits it at '*' into its non-empty literal segments
 * (pointing into p->value). Returns 0 or -ENOMEM. */
int rule_pattern_compile(RulePattern *p);

/* Sets r->id, the counter identity (the encoding above rule_compute_id() in rules.c is part
 * of the on-disk format). Returns 0 or -ENOMEM. */
int rule_compute_id(Rule *r);
