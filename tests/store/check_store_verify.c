/* SPDX-License-Identifier: MIT */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/store-verify.h"
#include "store/store.h"
#include "check-run.h"
#include "store-test-util.h"

#define SEC    1000000ULL
#define T0     (1700000000ULL * SEC)
#define ERRBUF 512
#define PAGE   4096

static const uint8_t RULE[RULE_ID_SIZE] = { 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8,
                                            0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0xa0 };

static char dbdir[sizeof tmpdir + 8], datafile[sizeof tmpdir + 32];

static void setup(void) {
        store_test_make_tmpdir("check-verify");
        snprintf(dbdir, sizeof dbdir, "%s/db", tmpdir);
        snprintf(datafile, sizeof datafile, "%s/data.mdb", dbdir);
}

/* A store of n counters checkpointed into data.mdb (a tree of several levels from a few
 * thousand on). */
static void make_store(unsigned n) {
        StoreOptions o = { .path = dbdir, .sync = STORE_SYNC_NONE, .now_usec = T0 };
        static char keys[64][32];
        char err[ERRBUF] = "";
        StoreHit b[64];
        Store *s = NULL;

        ck_assert_msg(store_open(&o, &s, err, sizeof err) == 0, "%s", err);
        for (unsigned i = 0; i < n; i += 64) {
                unsigned m = n - i < 64 ? n - i : 64;

                for (unsigned j = 0; j < m; j++) {
                        snprintf(keys[j], sizeof keys[j], "actor-%u", i + j);
                        b[j] = (StoreHit){ .rule_id = RULE,
                                           .actor = keys[j],
                                           .actor_len = strlen(keys[j]),
                                           .credit_limit = 5,
                                           .reset_seconds = 60,
                                           .count = 1 };
                }
                ck_assert_int_eq(store_apply(s, b, m, T0), 0);
        }
        /* Into data.mdb: hits are journaled, the tree is written by a checkpoint. */
        ck_assert_int_eq(store_checkpoint(s, T0), 0);
        store_close(s);
}

static int verify(char *err, size_t size) {
        strcpy(err, "unset");
        return store_verify(dbdir, err, size);
}

START_TEST (test_nothing_to_verify) {
        char err[ERRBUF];
        int fd;

        ck_assert_int_eq(verify(err, sizeof err), 0); /* no directory */
        ck_assert_str_eq(err, "");
        ck_assert_int_eq(mkdir(dbdir, 0750), 0);
        ck_assert_int_eq(verify(err, sizeof err), 0); /* no data.mdb yet */
        fd = open(datafile, O_WRONLY | O_CREAT | O_CLOEXEC, 0640);
        ck_assert_int_ge(fd, 0);
        close(fd);
        ck_assert_int_eq(verify(err, sizeof err), 0); /* empty: store_open() explains */
        ck_assert_int_eq(unlink(datafile), 0);
        ck_assert_int_eq(mkdir(datafile, 0750), 0);
        ck_assert_int_eq(verify(err, sizeof err), 0); /* not a file: store_open() explains */
        ck_assert_str_eq(err, "");
}
END_TEST

START_TEST (test_good_store_passes) {
        char err[ERRBUF];

        make_store(5000);
        ck_assert_int_eq(verify(err, sizeof err), 0);
        ck_assert_str_eq(err, "");
}
END_TEST

/* Not LMDB at all: left to store_open(), which says so better. */
START_TEST (test_foreign_file_left_to_open) {
        char err[ERRBUF];
        static char junk[4 * PAGE];
        int fd;

        memset(junk, 'j', sizeof junk);
        ck_assert_int_eq(mkdir(dbdir, 0750), 0);
        fd = open(datafile, O_WRONLY | O_CREAT | O_CLOEXEC, 0640);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, junk, sizeof junk), (ssize_t) sizeof junk);
        close(fd);
        ck_assert_int_eq(verify(err, sizeof err), 0);
}
END_TEST

/* Every page but the two meta pages overwritten: the trees the meta pages name are garbage.
 * _i picks the garbage: 0 all ones, 1 zeros, 2 a pattern. Whether reading it fails or
 * crashes, the database is refused with a sentence naming it. */
START_TEST (test_damaged_store_refused) {
        static uint8_t page[PAGE];
        char err[ERRBUF];
        struct stat st;
        int fd;

        make_store(5000);
        for (size_t i = 0; i < sizeof page; i++)
                page[i] = _i == 0 ? 0xff : _i == 1 ? 0 : (uint8_t) (i * 31 + 7);
        ck_assert_int_eq(stat(datafile, &st), 0);
        ck_assert_int_gt(st.st_size, 8 * PAGE);
        fd = open(datafile, O_WRONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        for (off_t off = 2 * PAGE; off < st.st_size; off += PAGE)
                ck_assert_int_eq(pwrite(fd, page, PAGE, off), PAGE);
        close(fd);

        ck_assert_int_eq(verify(err, sizeof err), -EBADMSG);
        ck_assert_msg(strstr(err, datafile) && strstr(err, "is damaged"), "%s", err);
}
END_TEST

/* A caller that ignores SIGCHLD must not make the check fail with ECHILD, and gets its
 * disposition back. */
START_TEST (test_sigchld_ignored) {
        char err[ERRBUF];
        struct sigaction sa;

        make_store(10);
        ck_assert_ptr_ne(signal(SIGCHLD, SIG_IGN), SIG_ERR);
        ck_assert_int_eq(verify(err, sizeof err), 0);
        ck_assert_str_eq(err, "");
        ck_assert_int_eq(sigaction(SIGCHLD, NULL, &sa), 0);
        ck_assert(sa.sa_handler == SIG_IGN);
        signal(SIGCHLD, SIG_DFL);
}
END_TEST

/* A caller that blocks SIGALRM: the child unblocks it for its timeout, and the caller's mask
 * is untouched. */
START_TEST (test_sigalrm_blocked) {
        char err[ERRBUF];
        sigset_t set, old;

        make_store(10);
        sigemptyset(&set);
        sigaddset(&set, SIGALRM);
        ck_assert_int_eq(sigprocmask(SIG_BLOCK, &set, &old), 0);
        ck_assert_int_eq(verify(err, sizeof err), 0);
        ck_assert_int_eq(sigprocmask(SIG_SETMASK, &old, &set), 0);
        ck_assert(sigismember(&set, SIGALRM));
}
END_TEST

static Suite *store_verify_suite(void) {
        Suite *su = suite_create("store-verify");
        TCase *tc = tcase_create("core");

        store_test_fixtures(tc, "check-verify", setup);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_nothing_to_verify);
        tcase_add_test(tc, test_good_store_passes);
        tcase_add_test(tc, test_foreign_file_left_to_open);
        tcase_add_loop_test(tc, test_damaged_store_refused, 0, 3);
        tcase_add_test(tc, test_sigchld_ignored);
        tcase_add_test(tc, test_sigalrm_blocked);
        suite_add_tcase(su, tc);
        return su;
}

int main(void) {
        return check_run_suite(store_verify_suite());
}
