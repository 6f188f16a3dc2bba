/* SPDX-License-Identifier: MIT */
#pragma once

/* The store tests' one fixture: a temporary directory per test, on a real filesystem (under
 * $top_builddir when make check runs the test, else /var/tmp; never a tmpfs by accident:
 * the journal's and LMDB's file behaviour is what is tested), removed after the test.
 *
 * Each test's directory is made in the forked child (a checked fixture) under the program's
 * one, which the parent makes and removes (an unchecked fixture): a failed check ends the
 * child before its checked teardown can run, and the parent still removes everything.
 * Register both with store_test_fixtures(). */

#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char tmpdir[1024]; /* bytes: room for $top_builddir; paths under it fit in PATH_MAX */
static char store_test_topdir[sizeof tmpdir - 64]; /* the program's: room for "/NAME-XXXXXX" */
static const char *store_test_name;

/* Makes tmpdir, a test's directory: .../check-wal-XXXXXX/check-wal-XXXXXX for "check-wal". */
static inline void store_test_make_tmpdir(const char *name) {
        const char *b = getenv("top_builddir");

        ck_assert_uint_lt(strlen(name), 48);
        snprintf(tmpdir, sizeof tmpdir, "%s/%s-XXXXXX",
                 store_test_topdir[0] ? store_test_topdir
                 : b && *b            ? b
                                      : "/var/tmp",
                 name);
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

static inline void store_test_make_topdir(void) {
        const char *b = getenv("top_builddir");

        snprintf(store_test_topdir, sizeof store_test_topdir, "%s/%s-XXXXXX", b && *b ? b : "/var/tmp",
                 store_test_name);
        ck_assert_ptr_nonnull(mkdtemp(store_test_topdir));
}

static inline void store_test_remove_topdir(void) {
        if (store_test_topdir[0])
                (void) nftw(store_test_topdir, store_test_rm_one, 16, FTW_DEPTH | FTW_PHYS);
        store_test_topdir[0] = 0;
}

/* Registers the program's directory (name, e.g. "check-wal") and each test's: setup makes the
 * test's (store_test_make_tmpdir(name) first), remove_tmpdir() removes it. */
static inline void store_test_fixtures(TCase *tc, const char *name, void (*setup)(void)) {
        store_test_name = name;
        tcase_add_unchecked_fixture(tc, store_test_make_topdir, store_test_remove_topdir);
        tcase_add_checked_fixture(tc, setup, remove_tmpdir);
}
