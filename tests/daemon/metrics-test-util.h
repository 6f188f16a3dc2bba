/* SPDX-License-Identifier: MIT */
#pragma once

/* Shared by check_metrics.c and check_statsd.c: a finalized RuleSet from INI text. */

#include <check.h>
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
