/* SPDX-License-Identifier: MIT */
#pragma once

/* The store tests' one fixture: a temporary directory per test, on a real filesystem (under
 * $top_builddir when make check runs the test, else /var/tmp; never a tmpfs by accident:
 * the journal's and LMDB's file behaviour is what is tested), removed after the test. */

#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static char tmpdir[1024]; /* bytes: room for $top_builddir; paths under it fit in PATH_MAX */

/* Makes tmpdir, named after the test program ("check-wal" makes .../check-wal-XXXXXX). */
static inline void store_test_make_tmpdir(const char *name) {
        const char *b = getenv("top_builddir");

        snprintf(tmpdir, sizeof tmpdir, "%s/%s-XXXXXX", b && *b ? b : "/var/tmp", name);
        ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static inline int store_test_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void) st;
        (void) flag;
        (void) ftw;
        return remove(path);
}

static inline void remove_tmpdir(void) {
        if (tmpdir[0])
                (void) nftw(tmpdir, store_test_rm_one, 16, FTW_DEPTH | FTW_PHYS);
        tmpdir[0] = 0;
}
