/* SPDX-License-Identifier: MIT */

/*
 * The store's write-back mode (StoreOptions.write_back): batches go to one open write
 * transaction, committed by store_sync() and friends, and a journal mapped from a file
 * keeps every answered batch across a crash of the process.
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store.h"

#define SEC    1000000ULL            /* usec per second */
#define T0     (1700000000ULL * SEC) /* an arbitrary wall-clock start */
#define ERRBUF 512

static const uint8_t RULE_A[RULE_ID_SIZE] = { 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8,
                                              0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf, 0xb0 };

static char tmpdir[64];

static void make_tmpdir(void) {
        strcpy(tmpdir, "/tmp/check-writeback-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void) st;
        (void) flag;
        (void) ftw;
        return remove(path);
}

static void remove_tmpdir(void) {
        if (tmpdir[0])
                (void) nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        tmpdir[0] = 0;
}

static char *db_path(char *buf, size_t size, const char *file) {
        snprintf(buf, size, "%s/db%s%s", tmpdir, file ? "/" : "", file ? file : "");
        return buf;
}

static int open_wb(uint64_t map_size, uint64_t map_size_max, StoreSync sync, bool write_back, Store **ret) {
        char path[128], err[ERRBUF] = "";
        StoreOptions o = {
                .path = db_path(path, sizeof path, NULL),
                .map_size = map_size,
                .map_size_max = map_size_max,
                .sync = sync,
                .write_back = write_back,
        };

        *ret = NULL;
        return store_open(&o, ret, err, sizeof err);
}

static Store *open_store(uint64_t map_size, uint64_t map_size_max, StoreSync sync, bool write_back) {
        Store *s;

        ck_assert_int_eq(open_wb(map_size, map_size_max, sync, write_back, &s), 0);
        ck_assert_ptr_nonnull(s);
        return s;
}

static StoreHit mkhit(const char *actor, uint64_t limit, uint64_t reset) {
        return (StoreHit){ .rule_id = RULE_A,
                           .actor = actor,
                           .actor_len = strlen(actor),
                           .credit_limit = limit,
                           .reset_seconds = reset,
                           .error = 12345 };
}

static void expect_hit(Store *s, const char *actor, uint64_t limit, uint64_t reset, uint64_t now,
                       bool allowed, uint64_t credit) {
        StoreHit h = mkhit(actor, limit, reset);

        ck_assert_int_eq(store_apply(s, &h, 1, now), 0);
        ck_assert_int_eq(h.error, 0);
        ck_assert_msg(h.allowed == allowed, "%s: allowed %d, expected %d", actor, h.allowed, allowed);
        ck_assert_msg(h.credit == credit, "%s: credit %llu, expected %llu", actor,
                      (unsigned long long) h.credit, (unsigned long long) credit);
}

static StoreStats stats(Store *s) {
        StoreStats st;

        ck_assert_int_eq(store_get_stats(s, &st), 0);
        return st;
}

/* Applies hits to counters prefix<first> .. prefix<first+n-1>, batch at a time.
 * Returns the first failure (0 if none). */
static int hit_range(Store *s, const char *prefix, unsigned first, unsigned n, unsigned batch,
                     uint64_t reset, uint64_t now) {
        static char keys[1024][32];
        static StoreHit b[1024];
        unsigned k = 0;

        ck_assert_uint_le(batch, 1024);
        for (unsigned i = 0; i < n; i++) {
                snprintf(keys[k], sizeof keys[k], "%s%u", prefix, first + i);
                b[k] = mkhit(keys[k], 10, reset);
                if (++k == batch || i == n - 1) {
                        int r = store_apply(s, b, k, now);
                        if (r < 0)
                                return r;
                        k = 0;
                }
        }
        return 0;
}

START_TEST (test_commit_points) {
        Store *s = open_store(0, 0, STORE_SYNC_PERIODIC, true);
        char path[128];
        struct stat st;
        StoreStats before;

        /* the journal is preallocated beside data.mdb */
        ck_assert_int_eq(stat(db_path(path, sizeof path, STORE_JOURNAL_NAME), &st), 0);
        ck_assert_uint_ge((uint64_t) st.st_size, 1024 * 1024);

        before = stats(s);
        expect_hit(s, "a", 10, 60, T0, true, 9);
        expect_hit(s, "a", 10, 60, T0, true, 8);
        expect_hit(s, "b", 10, 60, T0, true, 9);
        /* applied, visible to the stats, but not committed yet */
        ck_assert_uint_eq(stats(s).counters, 2);
        ck_assert_uint_eq(stats(s).commits, before.commits);

        ck_assert_int_eq(store_sync(s), 0);
        ck_assert_uint_eq(stats(s).commits, before.commits + 1);
        ck_assert_uint_eq(stats(s).syncs, before.syncs + 1);
        ck_assert_int_eq(store_sync(s), 0); /* nothing new: no commit, no fsync */
        ck_assert_uint_eq(stats(s).commits, before.commits + 1);
        ck_assert_uint_eq(stats(s).syncs, before.syncs + 1);

        /* a full transaction is committed without waiting for the timer */
        ck_assert_int_eq(hit_range(s, "many-", 0, STORE_WRITE_BACK_HITS_MAX + 1000, 1000, 60, T0), 0);
        ck_assert_uint_ge(stats(s).commits, before.commits + 2);
        ck_assert_uint_eq(stats(s).counters, 2 + STORE_WRITE_BACK_HITS_MAX + 1000);

        /* a sweep commits first (one writer at a time), and sees everything */
        size_t deleted;
        ck_assert_int_eq(store_sweep(s, T0 + 61 * SEC, 100000, &deleted), 0);
        ck_assert_uint_eq(deleted, 2 + STORE_WRITE_BACK_HITS_MAX + 1000);
        ck_assert_uint_eq(stats(s).counters, 0);

        /* a window restarts after expiry, as without write-back */
        expect_hit(s, "a", 10, 60, T0 + 61 * SEC, true, 9);
        store_close(s);

        s = open_store(0, 0, STORE_SYNC_NONE, true);
        expect_hit(s, "a", 10, 60, T0 + 62 * SEC, true, 8); /* close committed */
        store_close(s);
}
END_TEST

START_TEST (test_batch_larger_than_journal) {
        Store *s = open_store(0, 64 << 20, STORE_SYNC_NONE, true);
        static char keys[STORE_WRITE_BACK_HITS_MAX + 1][16];
        static StoreHit b[STORE_WRITE_BACK_HITS_MAX + 1];
        uint64_t commits = stats(s).commits;

        for (unsigned i = 0; i <= STORE_WRITE_BACK_HITS_MAX; i++) {
                snprintf(keys[i], sizeof keys[i], "big-%u", i);
                b[i] = mkhit(keys[i], 3, 60);
        }
        ck_assert_int_eq(store_apply(s, b, STORE_WRITE_BACK_HITS_MAX + 1, T0), 0);
        for (unsigned i = 0; i <= STORE_WRITE_BACK_HITS_MAX; i++)
                ck_assert(b[i].error == 0 && b[i].allowed && b[i].credit == 2);
        /* not journaled, so committed at once */
        ck_assert_uint_eq(stats(s).commits, commits + 1);
        expect_hit(s, "big-0", 3, 60, T0, true, 1);
        store_close(s);
}
END_TEST

START_TEST (test_map_growth_and_full) {
        Store *s = open_store(64 * 1024, 64 << 20, STORE_SYNC_NONE, true);
        int r = 0;
        unsigned i;

        /* growth: every counter applied exactly once despite the rebuilds */
        ck_assert_int_eq(hit_range(s, "grow-", 0, 20000, 100, 60, T0), 0);
        ck_assert_uint_gt(stats(s).map_grows, 0);
        ck_assert_uint_eq(stats(s).counters, 20000);
        expect_hit(s, "grow-0", 10, 60, T0, true, 8);
        expect_hit(s, "grow-19999", 10, 60, T0, true, 8);
        store_close(s);
        remove_tmpdir();
        make_tmpdir();

        /* full at the maximum: the failing batch is refused whole, earlier ones are kept */
        s = open_store(128 * 1024, 512 * 1024, STORE_SYNC_NONE, true);
        for (i = 0; i < 1000; i++) {
                char prefix[32];

                snprintf(prefix, sizeof prefix, "full-%u-", i);
                r = hit_range(s, prefix, 0, 100, 100, 1, T0);
                if (r < 0)
                        break;
        }
        ck_assert_int_eq(r, -ENOSPC);
        ck_assert_uint_eq(stats(s).counters, i * 100);
        expect_hit(s, "full-0-0", 10, 1, T0, true, 8); /* still usable */
        store_close(s);
        s = open_store(128 * 1024, 512 * 1024, STORE_SYNC_NONE, true);
        ck_assert_uint_eq(stats(s).counters, i * 100);
        expect_hit(s, "full-0-0", 10, 1, T0, true, 7);
        store_close(s);
}
END_TEST

START_TEST (test_locked) {
        Store *s = open_store(0, 0, STORE_SYNC_NONE, true);
        int status;
        pid_t pid;

        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                Store *t;
                int r = open_wb(0, 0, STORE_SYNC_NONE, true, &t);
                _exit(r == -EBUSY && !t ? 0 : 1);
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "second open was not refused with EBUSY");
        store_close(s);
}
END_TEST

/* Crash test: a child applies batches and acknowledges each through a pipe, never
 * committing on its own (fewer hits than a transaction holds) unless _i says so;
 * the parent SIGKILLs it and checks that every acknowledged hit survived, through the
 * journal. */
#define CRASH_COUNTERS 64
#define CRASH_BATCH    16
#define CRASH_BATCHES  100000 /* bound; the pipe fills long before, and the child blocks */
#define CRASH_LIMIT    1000000

static unsigned crash_counter(unsigned batch, unsigned i) {
        return (batch * 7 + i * 5) % CRASH_COUNTERS;
}

static void crash_child(int fd, bool sync_every_100) {
        char keys[CRASH_COUNTERS][8];
        StoreHit b[CRASH_BATCH];
        Store *s;

        if (open_wb(0, 0, STORE_SYNC_PERIODIC, true, &s) < 0)
                _exit(2);
        for (unsigned c = 0; c < CRASH_COUNTERS; c++)
                snprintf(keys[c], sizeof keys[c], "c%u", c);
        for (uint32_t batch = 0; batch < CRASH_BATCHES; batch++) {
                for (unsigned i = 0; i < CRASH_BATCH; i++)
                        b[i] = mkhit(keys[crash_counter(batch, i)], CRASH_LIMIT, 86400);
                if (store_apply(s, b, CRASH_BATCH, T0 + batch) < 0)
                        _exit(3);
                if (sync_every_100 && batch % 100 == 99 && store_sync(s) < 0)
                        _exit(5);
                if (write(fd, &batch, sizeof batch) != sizeof batch)
                        _exit(4);
        }
        store_close(s);
        _exit(0);
}

START_TEST (test_crash) {
        static const unsigned kill_after[] = { 1, 13, 97, 400, 1, 13, 97, 400 };
        bool syncing = _i >= 4, reopen_wb = _i % 2 == 0;
        unsigned acked = 0, hits[CRASH_COUNTERS] = { 0 }, extra[CRASH_COUNTERS] = { 0 };
        int fds[2], status;
        uint32_t batch;
        pid_t pid;
        Store *s;

        ck_assert_int_eq(pipe(fds), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                close(fds[0]);
                crash_child(fds[1], syncing);
        }
        close(fds[1]);
        for (;;) {
                ssize_t l = read(fds[0], &batch, sizeof batch);
                if (l == 0)
                        break;
                ck_assert_int_eq(l, sizeof batch);
                ck_assert_uint_eq(batch, acked);
                acked++;
                if (acked == kill_after[_i])
                        ck_assert_int_eq(kill(pid, SIGKILL), 0);
        }
        close(fds[0]);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child status %d", status);
        ck_assert_uint_ge(acked, kill_after[_i]);

        for (unsigned b = 0; b < acked; b++)
                for (unsigned i = 0; i < CRASH_BATCH; i++)
                        hits[crash_counter(b, i)]++;
        for (unsigned i = 0; i < CRASH_BATCH; i++) /* applied, not acknowledged yet */
                extra[crash_counter(acked, i)]++;

        /* reopened with or without write-back, the journal is replayed */
        s = open_store(0, 0, STORE_SYNC_PERIODIC, reopen_wb);
        for (unsigned c = 0; c < CRASH_COUNTERS; c++) {
                char key[8];
                StoreHit h;

                snprintf(key, sizeof key, "c%u", c);
                h = mkhit(key, CRASH_LIMIT, 86400);
                ck_assert_int_eq(store_apply(s, &h, 1, T0 + CRASH_BATCHES), 0);
                ck_assert_msg(h.credit + 1 + hits[c] <= CRASH_LIMIT,
                              "counter %u lost hits: credit %llu, %u acked", c,
                              (unsigned long long) h.credit, hits[c]);
                ck_assert_msg(h.credit + 1 + hits[c] + extra[c] >= CRASH_LIMIT,
                              "counter %u has phantom hits: credit %llu, %u acked", c,
                              (unsigned long long) h.credit, hits[c]);
        }
        store_close(s);
        if (!reopen_wb) {
                char path[128];
                ck_assert_int_eq(access(db_path(path, sizeof path, STORE_JOURNAL_NAME), F_OK), -1);
        }
}
END_TEST

/* A journal whose tail was torn (an OS crash in the middle of a record) is replayed up
 * to the tear. */
START_TEST (test_torn_journal) {
        char path[128];
        int status, fd;
        struct stat st;
        pid_t pid;
        Store *s;

        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                if (open_wb(0, 0, STORE_SYNC_NONE, true, &s) < 0)
                        _exit(2);
                for (unsigned i = 0; i < 3; i++) {
                        StoreHit h = mkhit(i < 2 ? "first" : "second", 10, 60);
                        if (store_apply(s, &h, 1, T0) < 0)
                                _exit(3);
                }
                raise(SIGKILL);
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFSIGNALED(status));

        /* flip a byte of the third record ("second"): 2 records of 30 + 17 + 5 bytes before it */
        fd = open(db_path(path, sizeof path, STORE_JOURNAL_NAME), O_RDWR);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(fstat(fd, &st), 0);
        {
                off_t at = 2 * (30 + RULE_ID_SIZE + 1 + 5) + 10;
                char c;
                ck_assert_int_eq(pread(fd, &c, 1, at), 1);
                c ^= 0x55;
                ck_assert_int_eq(pwrite(fd, &c, 1, at), 1);
        }
        close(fd);

        s = open_store(0, 0, STORE_SYNC_NONE, true);
        expect_hit(s, "first", 10, 60, T0, true, 7);  /* both of its hits were replayed */
        expect_hit(s, "second", 10, 60, T0, true, 9); /* its torn record was not */
        store_close(s);
}
END_TEST

static Suite *writeback_suite(void) {
        Suite *s = suite_create("writeback");
        TCase *tc = tcase_create("core");

        tcase_add_checked_fixture(tc, make_tmpdir, remove_tmpdir);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_commit_points);
        tcase_add_test(tc, test_batch_larger_than_journal);
        tcase_add_test(tc, test_map_growth_and_full);
        tcase_add_test(tc, test_locked);
        tcase_add_loop_test(tc, test_crash, 0, 8);
        tcase_add_test(tc, test_torn_journal);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(writeback_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
