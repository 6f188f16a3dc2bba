/* SPDX-License-Identifier: MIT */
#pragma once

/* The one way every unit test runs its suite: Check's defaults (fork mode, CK_RUN_CASE,
 * CK_VERBOSITY from the environment), exit status 0 only if every check passed. Frees s. */

#include <check.h>
#include <stdlib.h>

static inline int check_run_suite(Suite *s) {
        SRunner *sr = srunner_create(s);
        int failed;

        srunner_run_all(sr, CK_ENV); /* CK_VERBOSITY, default normal */
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
