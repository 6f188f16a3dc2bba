/* SPDX-License-Identifier: MIT */
#pragma once

/* Shared by the tests of the metrics and their readers: a finalized RuleSet from INI text, and
 * line assertions on a rendered text. */

#include <check.h>
#include <stdbool.h>
#include <string.h>

#include "core/config.h"

static inline RuleSet *load_ini(const char *text) {
        RuleSet *rs = NULL;
        Diag diag;

        diag_init(&diag, "t.ini");
        ck_assert_int_eq(ruleset_new("t.ini", &rs), 0);
        ck_assert_int_eq(config_ini_parse(text, strlen(text), rs, &diag), 0);
        ck_assert_int_eq(ruleset_finalize(rs, &diag), 0);
        diag_done(&diag);
        return rs;
}

/* True if text has line as a whole line. */
static inline bool has_line(const char *text, const char *line) {
        size_t n = strlen(line);
        for (const char *p = text; (p = strstr(p, line)); p++)
                if ((p == text || p[-1] == '\n') && p[n] == '\n')
                        return true;
        return false;
}

#define ck_assert_line(text, line)                                                                          \
        ck_assert_msg(has_line((text), (line)), "missing line: %s\n%s", (line), (text))
#define ck_assert_no_line(text, line)                                                                       \
        ck_assert_msg(!has_line((text), (line)), "unexpected line: %s\n%s", (line), (text))
