/* SPDX-License-Identifier: MIT */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <ftw.h>
#include <lmdb.h> /* test-only: to forge incompatible and foreign databases */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/store.h"
#include "check-run.h"
#include "fixture-v1.h"

#define SEC       1000000ULL            /* usec per second */
#define T0        (1700000000ULL * SEC) /* an arbitrary wall-clock start */
#define LONG_SIZE 10000                 /* bytes: the longest actor we try */
#define ERRBUF    512

static const uint8_t RULE_A[RULE_ID_SIZE] = { 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8,
                                              0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0xa0 };
static const uint8_t RULE_B[RULE_ID_SIZE] = { 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8,
                                              0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0xa1 };

/* ---- fixture: one temporary directory per test ---- */

static char tmpdir[PATH_MAX / 2];

/* Under the build directory when run by make (a disk filesystem there is likelier than on
 * /tmp, which may be a tmpfs: test_periodic_sync_journal_head needs one), else in /tmp. */
static void make_tmpdir(void) {
        const char *base = getenv("top_builddir");

        ck_assert_int_lt(
                snprintf(tmpdir, sizeof tmpdir, "%s/check-store-XXXXXX", base && *base ? base : "/tmp"),
                (int) sizeof tmpdir - 64);
        ck_assert_msg(mkdtemp(tmpdir), "mkdtemp %s: %s", tmpdir, strerror(errno));
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

static int open_store_full(uint64_t map_size, uint64_t map_size_max, StoreSync sync, bool write_back,
                           Store **ret, char *err, size_t err_size) {
        char path[PATH_MAX];
        StoreOptions o = {
                .path = db_path(path, sizeof path, NULL),
                .map_size = map_size,
                .map_size_max = map_size_max,
                .sync = sync,
                .write_back = write_back,
        };

        *ret = NULL;
        return store_open(&o, ret, err, err_size);
}

static Store *open_store_wb(uint64_t map_size, uint64_t map_size_max, StoreSync sync, bool write_back) {
        char err[ERRBUF] = "";
        Store *s = NULL;
        int r;

        r = open_store_full(map_size, map_size_max, sync, write_back, &s, err, sizeof err);
        ck_assert_msg(r == 0, "store_open: %d %s", r, err);
        ck_assert_ptr_nonnull(s);
        return s;
}

static Store *open_store_opts(uint64_t map_size, uint64_t map_size_max, StoreSync sync) {
        return open_store_wb(map_size, map_size_max, sync, false);
}

static Store *open_store(void) {
        return open_store_opts(0, 0, STORE_SYNC_NONE);
}

static int try_open(char *err, size_t err_size) {
        char path[PATH_MAX];
        StoreOptions o = { .path = db_path(path, sizeof path, NULL), .sync = STORE_SYNC_NONE };
        Store *s = NULL;
        int r;

        r = store_open(&o, &s, err, err_size);
        if (r == 0)
                store_close(s);
        else
                ck_assert_ptr_null(s);
        return r;
}

static StoreHit mkhit(const uint8_t *rule, const char *actor, size_t actor_len, uint64_t limit,
                      uint64_t reset) {
        return (StoreHit){ .rule_id = rule,
                           .actor = actor,
                           .actor_len = actor_len,
                           .credit_limit = limit,
                           .reset_seconds = reset,
                           .error = 12345 };
}

/* Applies one hit and checks the outcome. */
static void expect_hit(Store *s, const uint8_t *rule, const char *actor, size_t actor_len, uint64_t limit,
                       uint64_t reset, uint64_t now, bool allowed, uint64_t credit, uint64_t reset_left) {
        StoreHit h = mkhit(rule, actor, actor_len, limit, reset);

        ck_assert_int_eq(store_apply(s, &h, 1, now), 0);
        ck_assert_int_eq(h.error, 0);
        ck_assert_msg(h.allowed == allowed, "allowed %d, expected %d", h.allowed, allowed);
        ck_assert_uint_eq(h.credit, credit);
        ck_assert_uint_eq(h.reset_left, reset_left);
}

static uint64_t stat_counters(Store *s) {
        StoreStats st;

        ck_assert_int_eq(store_get_stats(s, &st), 0);
        return st.counters;
}

static size_t sweep_all(Store *s, uint64_t now, size_t chunk) {
        size_t total = 0, d;
        int r;

        for (unsigned i = 0; i < 100000; i++) {
                r = store_sweep(s, now, chunk, &d);
                ck_assert_int_ge(r, 0);
                total += d;
                if (r == 0)
                        return total;
        }
        ck_abort_msg("sweep did not finish");
        return total;
}

/* ---- tests ---- */

START_TEST (test_sync_strings) {
        static const struct {
                const char *s;
                StoreSync v;
        } table[] = {
                { "none", STORE_SYNC_NONE },       { "periodic", STORE_SYNC_PERIODIC },
                { "always", STORE_SYNC_ALWAYS },   { "", _STORE_SYNC_INVALID },
                { "Always", _STORE_SYNC_INVALID }, { "nonex", _STORE_SYNC_INVALID },
        };

        for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
                ck_assert_int_eq(store_sync_from_string(table[i].s), table[i].v);
                if (table[i].v >= 0)
                        ck_assert_str_eq(store_sync_to_string(table[i].v), table[i].s);
        }
        ck_assert_int_eq(store_sync_from_string(NULL), _STORE_SYNC_INVALID);
        ck_assert_ptr_null(store_sync_to_string(_STORE_SYNC_MAX));
        ck_assert_ptr_null(store_sync_to_string(_STORE_SYNC_INVALID));
}
END_TEST

START_TEST (test_create_decrement_exhaust) {
        Store *s = open_store();

        /* creation: limit-1 left, full window */
        expect_hit(s, RULE_A, "alice", 5, 3, 60, T0, true, 2, 60);
        expect_hit(s, RULE_A, "alice", 5, 3, 60, T0 + 1, true, 1, 60);
        expect_hit(s, RULE_A, "alice", 5, 3, 60, T0 + 10 * SEC, true, 0, 50);
        /* exhausted: denied, stays at 0, window unchanged */
        expect_hit(s, RULE_A, "alice", 5, 3, 60, T0 + 10 * SEC, false, 0, 50);
        expect_hit(s, RULE_A, "alice", 5, 3, 60, T0 + 59 * SEC, false, 0, 1);
        /* limit 1: the first hit is allowed with no credit left */
        expect_hit(s, RULE_A, "bob", 3, 1, 5, T0, true, 0, 5);
        expect_hit(s, RULE_A, "bob", 3, 1, 5, T0, false, 0, 5);
        ck_assert_uint_eq(stat_counters(s), 2);
        store_close(s);
}
END_TEST

START_TEST (test_expiry_renewal) {
        Store *s = open_store();
        uint64_t end = T0 + 10 * SEC;

        expect_hit(s, RULE_A, "x", 1, 2, 10, T0, true, 1, 10);
        expect_hit(s, RULE_A, "x", 1, 2, 10, T0, true, 0, 10);
        /* 1 us before the end: still live and exhausted, 1 s left (rounded up) */
        expect_hit(s, RULE_A, "x", 1, 2, 10, end - 1, false, 0, 1);
        /* exactly at the end: a fresh window, without any sweep */
        expect_hit(s, RULE_A, "x", 1, 2, 10, end, true, 1, 10);
        expect_hit(s, RULE_A, "x", 1, 2, 10, end + 10 * SEC - 1, true, 0, 1);
        /* long after: renewed again, and only one counter exists */
        expect_hit(s, RULE_A, "x", 1, 2, 10, end + 1000 * SEC, true, 1, 10);
        ck_assert_uint_eq(stat_counters(s), 1);
        /* the renewed counter's old index entries are gone: a sweep at a time when
         * it is live deletes nothing */
        ck_assert_uint_eq(sweep_all(s, end + 1005 * SEC, 10), 0);
        ck_assert_uint_eq(stat_counters(s), 1);
        ck_assert_uint_eq(sweep_all(s, end + 1010 * SEC, 10), 1);
        ck_assert_uint_eq(stat_counters(s), 0);
        store_close(s);
}
END_TEST

START_TEST (test_reset_left_rounding) {
        static const struct {
                uint64_t offset_usec; /* time since the window began */
                uint64_t reset_left;
        } table[] = {
                { 0, 100 },      { 1, 100 },           { SEC - 1, 100 },
                { SEC, 99 },     { SEC + 1, 99 },      { 50 * SEC + 500000, 50 },
                { 99 * SEC, 1 }, { 100 * SEC - 1, 1 },
        };
        Store *s = open_store();

        expect_hit(s, RULE_A, NULL, 0, 1000000, 100, T0, true, 999999, 100);
        for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
                StoreHit h = mkhit(RULE_A, NULL, 0, 1000000, 100);

                ck_assert_int_eq(store_apply(s, &h, 1, T0 + table[i].offset_usec), 0);
                ck_assert_msg(h.reset_left == table[i].reset_left,
                              "offset %llu: reset_left %llu, expected %llu",
                              (unsigned long long) table[i].offset_usec, (unsigned long long) h.reset_left,
                              (unsigned long long) table[i].reset_left);
        }
        store_close(s);
}
END_TEST

START_TEST (test_batch_in_order) {
        Store *s = open_store();
        StoreHit b[5] = {
                mkhit(RULE_A, "u", 1, 2, 30), mkhit(RULE_A, "v", 1, 5, 30), mkhit(RULE_A, "u", 1, 2, 30),
                mkhit(RULE_A, "u", 1, 2, 30), mkhit(RULE_A, "v", 1, 5, 30),
        };

        ck_assert_int_eq(store_apply(s, b, 5, T0), 0);
        ck_assert(b[0].allowed && b[0].credit == 1);
        ck_assert(b[1].allowed && b[1].credit == 4);
        ck_assert(b[2].allowed && b[2].credit == 0);
        ck_assert(!b[3].allowed && b[3].credit == 0);
        ck_assert(b[4].allowed && b[4].credit == 3);
        for (size_t i = 0; i < 5; i++) {
                ck_assert_int_eq(b[i].error, 0);
                ck_assert_uint_eq(b[i].reset_left, 30);
        }
        ck_assert_uint_eq(stat_counters(s), 2);

        /* an empty batch is a no-op */
        ck_assert_int_eq(store_apply(s, NULL, 0, T0), 0);
        store_close(s);
}
END_TEST

START_TEST (test_invalid_hits) {
        Store *s = open_store();
        StoreHit b[2] = { mkhit(RULE_A, "a", 1, 5, 30), mkhit(RULE_A, "a", 1, 0, 30) };

        ck_assert_int_eq(store_apply(s, b, 2, T0), -EINVAL);
        ck_assert_int_eq(b[0].error, -EINVAL);
        ck_assert_int_eq(b[1].error, -EINVAL);
        b[1] = mkhit(RULE_A, "a", 1, 5, 0);
        ck_assert_int_eq(store_apply(s, b, 2, T0), -EINVAL);
        b[1] = mkhit(NULL, "a", 1, 5, 30);
        ck_assert_int_eq(store_apply(s, b, 2, T0), -EINVAL);
        b[1] = mkhit(RULE_A, NULL, 3, 5, 30);
        ck_assert_int_eq(store_apply(s, b, 2, T0), -EINVAL);
        /* nothing of the failed batches was kept */
        ck_assert_uint_eq(stat_counters(s), 0);
        store_close(s);
}
END_TEST

START_TEST (test_distinct_counters) {
        Store *s = open_store();
        char *a400 = malloc(LONG_SIZE), *b400 = malloc(LONG_SIZE);
        size_t lens[] = { 400, 401, LONG_SIZE };

        ck_assert_ptr_nonnull(a400);
        ck_assert_ptr_nonnull(b400);
        memset(a400, 'q', LONG_SIZE);
        memcpy(b400, a400, LONG_SIZE);

        /* no actor, empty actor, an actor, another rule: four counters */
        expect_hit(s, RULE_A, NULL, 0, 10, 60, T0, true, 9, 60);
        expect_hit(s, RULE_A, "", 0, 10, 60, T0, true, 9, 60);
        expect_hit(s, RULE_A, "", 0, 10, 60, T0, true, 8, 60);
        expect_hit(s, RULE_A, NULL, 0, 10, 60, T0, true, 8, 60);
        expect_hit(s, RULE_A, "a", 1, 10, 60, T0, true, 9, 60);
        expect_hit(s, RULE_B, "a", 1, 10, 60, T0, true, 9, 60);
        expect_hit(s, RULE_B, NULL, 0, 10, 60, T0, true, 9, 60);
        expect_hit(s, RULE_A, "a", 1, 10, 60, T0, true, 8, 60);
        /* an actor whose bytes look like a tag + hash is still its own counter */
        expect_hit(s, RULE_A, "\0", 1, 10, 60, T0, true, 9, 60);
        ck_assert_uint_eq(stat_counters(s), 6);

        /* long actors: verbatim up to 400, hashed above; prefixes of each other and
         * pairs differing only in the last byte are all distinct */
        for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
                b400[lens[i] - 1] = 'r';
                expect_hit(s, RULE_A, a400, lens[i], 10, 60, T0, true, 9, 60);
                expect_hit(s, RULE_A, b400, lens[i], 10, 60, T0, true, 9, 60);
                expect_hit(s, RULE_A, a400, lens[i], 10, 60, T0, true, 8, 60);
                expect_hit(s, RULE_A, b400, lens[i], 10, 60, T0, true, 8, 60);
                b400[lens[i] - 1] = 'q';
        }
        ck_assert_uint_eq(stat_counters(s), 12);
        /* all of them expire and are swept alike */
        ck_assert_uint_eq(sweep_all(s, T0 + 60 * SEC, 0), 12);
        free(a400);
        free(b400);
        store_close(s);
}
END_TEST

START_TEST (test_reopen) {
        char key[32];
        Store *s = open_store_opts(0, 0, STORE_SYNC_ALWAYS);
        StoreStats st;

        for (unsigned i = 0; i < 100; i++) {
                snprintf(key, sizeof key, "actor-%u", i);
                for (unsigned j = 0; j <= i % 5; j++)
                        expect_hit(s, RULE_A, key, strlen(key), 10, 3600, T0, true, 9 - j, 3600);
        }
        ck_assert_int_eq(store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.syncs, st.commits);
        store_close(s);

        for (StoreSync m = 0; m < _STORE_SYNC_MAX; m++) {
                s = open_store_opts(0, 0, m);
                ck_assert_uint_eq(stat_counters(s), 100 + (m > 0)); /* + the RULE_B one */
                for (unsigned i = 0; i < 100; i++) {
                        snprintf(key, sizeof key, "actor-%u", i);
                        /* a second reopen sees the hit of the first one too */
                        expect_hit(s, RULE_A, key, strlen(key), 10, 3600, T0 + 10 * SEC, true,
                                   9 - (i % 5 + 1) - m, 3590);
                }
                expect_hit(s, RULE_B, NULL, 0, 10, 3600, T0, true, 9 - m, 3600);
                store_close(s);
        }
}
END_TEST

START_TEST (test_periodic_sync_counts) {
        Store *s = open_store_opts(0, 0, STORE_SYNC_PERIODIC);
        StoreStats st;

        ck_assert_int_eq(store_sync(s), 0);
        ck_assert_int_eq(store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.syncs, 0);
        expect_hit(s, RULE_A, "a", 1, 10, 60, T0, true, 9, 60);
        expect_hit(s, RULE_A, "a", 1, 10, 60, T0, true, 8, 60);
        ck_assert_int_eq(store_sync(s), 0);
        ck_assert_int_eq(store_sync(s), 0); /* nothing new: no second fsync */
        ck_assert_int_eq(store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.syncs, 1);
        ck_assert_uint_ge(st.commits, 2);
        ck_assert_ptr_nonnull(store_options(s));
        ck_assert_int_eq(store_options(s)->sync, STORE_SYNC_PERIODIC);
        ck_assert_uint_eq(store_options(s)->map_size, STORE_MAP_SIZE_DEFAULT);
        store_close(s);

        s = open_store_opts(0, 0, STORE_SYNC_NONE);
        expect_hit(s, RULE_A, "a", 1, 10, 60, T0, true, 7, 60);
        ck_assert_int_eq(store_sync(s), 0);
        ck_assert_int_eq(store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.syncs, 0);
        store_close(s);
}
END_TEST

/* Kilobytes of our mapping of the journal not yet written to disk (from /proc/self/smaps). */
static unsigned long journal_dirty_kb(void) {
        char path[PATH_MAX], line[512];
        unsigned long total = 0, kb;
        bool in = false, found = false;
        FILE *f;

        db_path(path, sizeof path, STORE_JOURNAL_NAME);
        f = fopen("/proc/self/smaps", "re");
        ck_assert_ptr_nonnull(f);
        while (fgets(line, sizeof line, f)) {
                unsigned long from, to;

                if (sscanf(line, "%lx-%lx ", &from, &to) == 2) { /* a mapping's first line */
                        in = strstr(line, path) != NULL;
                        found = found || in;
                        continue;
                }
                if (in && (sscanf(line, "Shared_Dirty: %lu kB", &kb) == 1 ||
                           sscanf(line, "Private_Dirty: %lu kB", &kb) == 1))
                        total += kb;
        }
        fclose(f);
        ck_assert_msg(found, "journal mapping not found");
        return total;
}

/* After the periodic fsync the journal's end mark is on disk too: else an OS crash could
 * replay a generation the kernel wrote back long before over the newer database. */
START_TEST (test_periodic_sync_journal_head) {
        Store *s = open_store_wb(0, 0, STORE_SYNC_PERIODIC, true);
        struct statfs fs;

        /* on a tmpfs there is no disk to write to and nothing to check: say so, loudly */
        ck_assert_int_eq(statfs(tmpdir, &fs), 0);
        ck_assert_msg(fs.f_type != TMPFS_MAGIC,
                      "cannot check the journal's end mark: %s is on a tmpfs; run the test with "
                      "top_builddir set to a directory on a disk filesystem",
                      tmpdir);
        expect_hit(s, RULE_A, "a", 1, 10, 60, T0, true, 9, 60);
        expect_hit(s, RULE_A, "a", 1, 10, 60, T0, true, 8, 60);
        /* the records are in the page cache only (not asserted: the kernel may write them
         * back at any time) */
        ck_assert_int_eq(store_sync(s), 0);
        ck_assert_uint_eq(journal_dirty_kb(), 0); /* the end mark that replaced them: on disk */
        store_close(s);
}
END_TEST

/* Rewrites the divvyd meta table with LMDB directly. */
static void forge_meta(const char *key, const char *value) {
        char path[PATH_MAX];
        MDB_env *env;
        MDB_txn *txn;
        MDB_dbi dbi;
        MDB_val k = { .mv_size = strlen(key), .mv_data = (void *) key };
        MDB_val v = { .mv_size = strlen(value), .mv_data = (void *) value };

        ck_assert_int_eq(mdb_env_create(&env), 0);
        ck_assert_int_eq(mdb_env_set_maxdbs(env, 4), 0);
        ck_assert_int_eq(mdb_env_open(env, db_path(path, sizeof path, NULL), 0, 0640), 0);
        ck_assert_int_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
        ck_assert_int_eq(mdb_dbi_open(txn, "meta", MDB_CREATE, &dbi), 0);
        ck_assert_int_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
        ck_assert_int_eq(mdb_txn_commit(txn), 0);
        mdb_env_close(env);
}

START_TEST (test_incompatible_version) {
        char err[ERRBUF];

        store_close(open_store());
        forge_meta("version", "7");
        ck_assert_int_eq(try_open(err, sizeof err), -EPROTO);
        ck_assert_msg(strstr(err, "format version 7 is not supported by this divvyd (expects 1)"), "%s",
                      err);

        forge_meta("version", "1x");
        ck_assert_int_eq(try_open(err, sizeof err), -EPROTO);
        ck_assert_msg(strstr(err, "version '1x' is unreadable"), "%s", err);

        forge_meta("version", "1");
        ck_assert_int_eq(try_open(err, sizeof err), 0);
        forge_meta("magic", "something else");
        ck_assert_int_eq(try_open(err, sizeof err), -EPROTO);
        ck_assert_msg(strstr(err, "not a divvyd counter store"), "%s", err);
}
END_TEST

START_TEST (test_foreign_lmdb) {
        char path[PATH_MAX], err[ERRBUF];
        MDB_env *env;
        MDB_txn *txn;
        MDB_val k = { .mv_size = 3, .mv_data = (void *) "foo" },
                v = { .mv_size = 3, .mv_data = (void *) "bar" };

        /* a valid LMDB environment of some other program */
        ck_assert_int_eq(mkdir(db_path(path, sizeof path, NULL), 0750), 0);
        ck_assert_int_eq(mdb_env_create(&env), 0);
        ck_assert_int_eq(mdb_env_open(env, path, 0, 0640), 0);
        ck_assert_int_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
        ck_assert_int_eq(mdb_put(txn, 1, &k, &v, 0), 0);
        ck_assert_int_eq(mdb_txn_commit(txn), 0);
        mdb_env_close(env);

        ck_assert_int_eq(try_open(err, sizeof err), -EPROTO);
        ck_assert_msg(strstr(err, "not a divvyd counter store"), "%s", err);
}
END_TEST

static void write_file(const char *path, const void *data, size_t size) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0640);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, data, size), (ssize_t) size);
        close(fd);
}

START_TEST (test_corrupt_random) {
        char path[PATH_MAX], err[ERRBUF] = "";
        static uint8_t junk[64 * 1024];
        uint32_t x = 0x2545f491u + (uint32_t) _i; /* deterministic xorshift */

        for (size_t i = 0; i < sizeof junk; i++) {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                junk[i] = (uint8_t) x;
        }
        ck_assert_int_eq(mkdir(db_path(path, sizeof path, NULL), 0750), 0);
        write_file(db_path(path, sizeof path, "data.mdb"), junk, _i == 0 ? sizeof junk : 100);
        ck_assert_int_eq(try_open(err, sizeof err), -EBADMSG);
        ck_assert_msg(strstr(err, "data.mdb is not a valid LMDB database"), "%s", err);
}
END_TEST

static void hit_many(Store *s, const char *prefix, unsigned from, unsigned to, uint64_t reset, uint64_t now,
                     int expect);

START_TEST (test_corrupt_truncated) {
        static const off_t sizes[] = { 4096, 3 * 4096, -1 /* half */ };
        char path[PATH_MAX], err[ERRBUF] = "";
        Store *s = open_store();
        struct stat st;

        hit_many(s, "trunc-", 0, 4000, 60, T0, 0);
        store_close(s);

        db_path(path, sizeof path, "data.mdb");
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_int_gt(st.st_size, 16 * 4096);
        ck_assert_int_eq(truncate(path, sizes[_i] >= 0 ? sizes[_i] : st.st_size / 2), 0);
        ck_assert_int_eq(try_open(err, sizeof err), -EBADMSG);
        ck_assert_msg(strstr(err, "data.mdb"), "%s", err);
        ck_assert_msg(strstr(err, "truncated"), "%s", err);
}
END_TEST

static void hit_many(Store *s, const char *prefix, unsigned from, unsigned to, uint64_t reset, uint64_t now,
                     int expect) {
        static char keys[256][32];
        StoreHit b[256];
        unsigned n = 0;
        int r;

        for (unsigned i = from; i < to; i++) {
                snprintf(keys[n], sizeof keys[n], "%s%u", prefix, i);
                b[n] = mkhit(RULE_A, keys[n], strlen(keys[n]), 5, reset);
                n++;
                if (n == 256 || i + 1 == to) {
                        r = store_apply(s, b, n, now);
                        ck_assert_int_eq(r, expect);
                        for (unsigned j = 0; j < n; j++)
                                ck_assert_int_eq(b[j].error, expect);
                        n = 0;
                }
        }
}

START_TEST (test_map_growth) {
        Store *s = open_store_opts(64 * 1024, 64 << 20, STORE_SYNC_NONE);
        StoreStats st;

        ck_assert_uint_eq(store_options(s)->map_size, 64 * 1024);
        hit_many(s, "grow-", 0, 20000, 60, T0, 0);
        ck_assert_int_eq(store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.counters, 20000);
        ck_assert_uint_gt(st.map_grows, 0);
        ck_assert_uint_gt(st.map_size, 64 * 1024);
        ck_assert_uint_le(st.map_size, 64 << 20);
        ck_assert_uint_le(st.data_size, st.file_size);
        ck_assert_uint_le(st.file_size, st.map_size);
        /* every counter was applied exactly once despite the retries */
        expect_hit(s, RULE_A, "grow-0", 6, 5, 60, T0, true, 3, 60);
        expect_hit(s, RULE_A, "grow-19999", 10, 5, 60, T0, true, 3, 60);
        store_close(s);
}
END_TEST

/* Creates counters of 1 s windows (actors prefix + "<batch>-<i>"), batch hits a batch at T0,
 * until the store refuses a batch whole (-ENOSPC for every hit, asserted); returns how many
 * it created. sync_every: store_sync() after that many batches (0: never). spread: actors
 * prefix + 8 hex digits in no order, and each batch's windows ending 1 us after the last
 * one's (the daemon's pattern: a sweep's deletions touch pages all over the map). */
static unsigned fill_until_full(Store *s, const char *prefix, unsigned batch, unsigned sync_every,
                                bool spread) {
        static char keys[100][32];
        unsigned filled = 0;

        ck_assert_uint_le(batch, 100);
        for (unsigned i = 0; i < 100000; i++) {
                StoreHit b[100];
                int r;

                for (unsigned j = 0; j < batch; j++) {
                        if (spread)
                                snprintf(keys[j], sizeof keys[j], "%s%08x", prefix,
                                         (i * batch + j) * 2654435761u);
                        else
                                snprintf(keys[j], sizeof keys[j], "%s%u-%u", prefix, i, j);
                        b[j] = mkhit(RULE_A, keys[j], strlen(keys[j]), 5, 1);
                }
                r = store_apply(s, b, batch, T0 + (spread ? i : 0));
                if (r < 0) {
                        ck_assert_int_eq(r, -ENOSPC);
                        for (unsigned j = 0; j < batch; j++)
                                ck_assert_int_eq(b[j].error, -ENOSPC);
                        return filled;
                }
                filled += batch;
                if (sync_every > 0 && i % sync_every == 0)
                        (void) store_sync(s); /* may meet the full map too: the journal keeps the hits */
        }
        ck_abort_msg("the store never filled up");
        return filled;
}

START_TEST (test_map_full) {
        Store *s = open_store_opts(128 * 1024, 512 * 1024, STORE_SYNC_NONE);
        StoreStats st;
        unsigned filled, batch = 100;
        char key[32];

        /* fill with short windows until the map is full at its maximum */
        filled = fill_until_full(s, "full-", batch, 0, false);
        ck_assert_int_eq(store_get_stats(s, &st), 0);
        /* new hits stop at 7/8 of the maximum: the rest is kept for journal rebuilds and sweeps */
        ck_assert_uint_eq(st.map_size, 512 * 1024 - 512 * 1024 / 8);
        ck_assert_uint_eq(st.counters, filled);
        /* still usable: existing counters keep counting... */
        expect_hit(s, RULE_A, "full-0-0", 8, 5, 1, T0, true, 3, 1);
        snprintf(key, sizeof key, "full-%u-", filled / batch);

        /* once the windows are over the sweeper frees the room */
        ck_assert_uint_eq(sweep_all(s, T0 + SEC, 0), filled);
        ck_assert_uint_eq(stat_counters(s), 0);
        hit_many(s, key, 0, batch, 1, T0 + SEC, 0);
        ck_assert_uint_eq(stat_counters(s), batch);
        store_close(s);
}
END_TEST

/* The map's initial size is its maximum (--map-size equal to --map-size-max): new hits
 * still stop short of the maximum, so that once the windows are over the sweeper has the
 * pages it needs to delete (copy-on-write) and the store serves new counters again.
 * _i: 0 write-through, 1 write-back. */
START_TEST (test_map_full_at_max_recovers) {
        Store *s =
                open_store_wb(512 * 1024, 512 * 1024, _i ? STORE_SYNC_PERIODIC : STORE_SYNC_NONE, _i == 1);
        unsigned filled = fill_until_full(s, "max-", 100, 8, false);

        ck_assert_uint_eq(stat_counters(s), filled);

        ck_assert_uint_eq(sweep_all(s, T0 + SEC, 0), filled);
        ck_assert_int_eq(store_sync(s), 0);
        ck_assert_uint_eq(stat_counters(s), 0);
        hit_many(s, "again-", 0, 1000, 60, T0 + SEC, 0);
        ck_assert_int_eq(store_sync(s), 0);
        ck_assert_uint_eq(stat_counters(s), 1000);
        store_close(s);
}
END_TEST

/* The daemon's case: a map at its maximum filled in one write-back transaction (no commit
 * between the filling and the sweeps), actors in no particular order and windows ending
 * a little apart, so that a sweep's deletions touch pages all over the map. LMDB hands a
 * transaction the pages a commit freed only two commits later: a first sweep that took the
 * whole reserve left the next ones nothing, and the store was never swept again. */
START_TEST (test_map_full_sweep_chain) {
        Store *s = open_store_wb(1 << 20, 1 << 20, STORE_SYNC_PERIODIC, true);
        unsigned filled = fill_until_full(s, "f-", 64, 0, true);
        size_t d, swept = 0;
        int r;

        /* the sweeper's timer: 100 at a time, while more remain */
        for (unsigned tick = 0; tick < 1000; tick++) {
                r = store_sweep(s, T0 + 2 * SEC, 100, &d);
                ck_assert_msg(r >= 0, "sweep %u failed: %d after %zu of %u", tick, r, swept, filled);
                swept += d;
                if (r == 0)
                        break;
        }
        ck_assert_uint_eq(swept, filled);
        ck_assert_int_eq(store_sync(s), 0);
        ck_assert_uint_eq(stat_counters(s), 0);
        hit_many(s, "again-", 0, 1000, 60, T0 + 2 * SEC, 0);
        store_close(s);
}
END_TEST

START_TEST (test_sweep_chunks) {
        Store *s = open_store();
        size_t d;

        /* 25 short windows (ending at T0+1s .. T0+5s) and 10 long ones */
        for (unsigned k = 1; k <= 5; k++) {
                char prefix[16];

                snprintf(prefix, sizeof prefix, "short%u-", k);
                hit_many(s, prefix, 0, 5, k, T0, 0);
        }
        hit_many(s, "long-", 0, 10, 3600, T0, 0);
        ck_assert_uint_eq(stat_counters(s), 35);

        /* nothing expired yet */
        ck_assert_int_eq(store_sweep(s, T0 + SEC - 1, 100, &d), 0);
        ck_assert_uint_eq(d, 0);

        /* at T0+3s, 15 are expired: chunks of 4 -> 4,4,4,3 */
        ck_assert_int_eq(store_sweep(s, T0 + 3 * SEC, 4, &d), 1);
        ck_assert_uint_eq(d, 4);
        ck_assert_int_eq(store_sweep(s, T0 + 3 * SEC, 4, &d), 1);
        ck_assert_uint_eq(d, 4);
        ck_assert_int_eq(store_sweep(s, T0 + 3 * SEC, 4, &d), 1);
        ck_assert_uint_eq(d, 4);
        ck_assert_int_eq(store_sweep(s, T0 + 3 * SEC, 4, &d), 0);
        ck_assert_uint_eq(d, 3);
        ck_assert_uint_eq(stat_counters(s), 20);
        /* exactly 15 expired: a chunk of 15 finds nothing more */
        ck_assert_int_eq(store_sweep(s, T0 + 3 * SEC, 15, &d), 0);
        ck_assert_uint_eq(d, 0);

        /* oldest first: the ones ending at 3s are gone, those ending at 4s still count */
        expect_hit(s, RULE_A, "short3-0", 8, 5, 3, T0 + 3 * SEC, true, 4, 3);
        expect_hit(s, RULE_A, "short4-0", 8, 5, 4, T0 + 3 * SEC, true, 3, 1);
        ck_assert_uint_eq(stat_counters(s), 21);

        ck_assert_uint_eq(sweep_all(s, T0 + 3600 * SEC - 1, 3), 11);
        ck_assert_uint_eq(stat_counters(s), 10);
        /* long ones intact */
        expect_hit(s, RULE_A, "long-9", 6, 5, 3600, T0 + 3600 * SEC - 1, true, 3, 1);

        StoreStats st;
        ck_assert_int_eq(store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.swept_total, 15 + 11);
        store_close(s);
}
END_TEST

START_TEST (test_churn_file_stops_growing) {
        Store *s = open_store();
        StoreStats st;
        uint64_t size_mid = 0;
        char prefix[32];

        /* 300 one-second windows, 500 new actors in each: 150,000 distinct actors
         * over time, never more than 1000 live */
        for (unsigned round = 0; round < 300; round++) {
                uint64_t now = T0 + round * SEC;

                sweep_all(s, now, 0);
                snprintf(prefix, sizeof prefix, "r%06u-",
                         round); /* fixed length: same key sizes each round */
                hit_many(s, prefix, 0, 500, 1, now, 0);
                ck_assert_uint_le(stat_counters(s), 1000);
                if (round == 100) {
                        ck_assert_int_eq(store_get_stats(s, &st), 0);
                        size_mid = st.file_size;
                }
        }
        ck_assert_int_eq(store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.swept_total, 299 * 500);
        ck_assert_msg(st.file_size <= size_mid, "data.mdb grew from %llu to %llu bytes",
                      (unsigned long long) size_mid, (unsigned long long) st.file_size);
        store_close(s);
}
END_TEST

/* Crash test: a child commits batches and acknowledges each through a pipe; the
 * parent SIGKILLs it after a deterministic number of acknowledgements and checks
 * that every acknowledged hit survived. */
#define CRASH_COUNTERS 64
#define CRASH_BATCH    16
#define CRASH_BATCHES                                                                                       \
        100000 /* bound on the child's work; its acknowledgements (4 bytes each) overflow the pipe          \
                * long before, so the child blocks until it is killed */
#define CRASH_LIMIT 1000000

static unsigned crash_counter(unsigned batch, unsigned i) {
        return (batch * 7 + i * 5) % CRASH_COUNTERS;
}

/* The child's store: write-through; write-back never committing on its own (fewer hits than
 * a transaction holds: everything is in the journal); write-back committing every 100
 * batches as the sync timer would. */
typedef enum CrashMode {
        CRASH_WRITE_THROUGH,
        CRASH_WRITE_BACK,
        CRASH_WRITE_BACK_SYNCING,
        _CRASH_MODE_MAX
} CrashMode;

static void crash_child(int fd, CrashMode mode) {
        char err[ERRBUF];
        char keys[CRASH_COUNTERS][8];
        StoreHit b[CRASH_BATCH];
        Store *s = NULL;

        if (open_store_full(0, 0, mode == CRASH_WRITE_THROUGH ? STORE_SYNC_NONE : STORE_SYNC_PERIODIC,
                            mode != CRASH_WRITE_THROUGH, &s, err, sizeof err) < 0)
                _exit(2);
        for (unsigned c = 0; c < CRASH_COUNTERS; c++)
                snprintf(keys[c], sizeof keys[c], "c%u", c);
        for (uint32_t batch = 0; batch < CRASH_BATCHES; batch++) {
                for (unsigned i = 0; i < CRASH_BATCH; i++) {
                        unsigned c = crash_counter(batch, i);
                        b[i] = mkhit(RULE_A, keys[c], strlen(keys[c]), CRASH_LIMIT, 86400);
                }
                if (store_apply(s, b, CRASH_BATCH, T0 + batch) < 0)
                        _exit(3);
                if (mode == CRASH_WRITE_BACK_SYNCING && batch % 100 == 99 && store_sync(s) < 0)
                        _exit(5);
                if (write(fd, &batch, sizeof batch) != sizeof batch)
                        _exit(4);
        }
        store_close(s);
        _exit(0);
}

/* _i: kill_after[_i % 4] in mode _i / 4; write-back stores are reopened alternately with
 * and without write-back (either way the journal is replayed; without, it is removed). */
START_TEST (test_crash) {
        static const unsigned kill_after[] = { 1, 13, 97, 400 };
        CrashMode mode = (CrashMode) (_i / 4);
        bool reopen_wb = mode != CRASH_WRITE_THROUGH && _i % 2 == 0;
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
                crash_child(fds[1], mode);
        }
        close(fds[1]);

        /* read acknowledgements; kill after kill_after[_i] of them */
        for (;;) {
                ssize_t l = read(fds[0], &batch, sizeof batch);
                if (l == 0)
                        break;
                ck_assert_int_eq(l, sizeof batch);
                ck_assert_uint_eq(batch, acked);
                acked++;
                if (acked == kill_after[_i % 4])
                        ck_assert_int_eq(kill(pid, SIGKILL), 0);
        }
        close(fds[0]);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child status %d", status);
        ck_assert_uint_ge(acked, kill_after[_i % 4]);
        ck_assert_uint_lt(acked, CRASH_BATCHES);

        for (unsigned b = 0; b < acked; b++)
                for (unsigned i = 0; i < CRASH_BATCH; i++)
                        hits[crash_counter(b, i)]++;
        /* at most one batch may have been committed without its acknowledgement */
        for (unsigned i = 0; i < CRASH_BATCH; i++)
                extra[crash_counter(acked, i)]++;

        s = open_store_wb(0, 0, STORE_SYNC_PERIODIC, reopen_wb);
        for (unsigned c = 0; c < CRASH_COUNTERS; c++) {
                char key[8];
                StoreHit h;

                snprintf(key, sizeof key, "c%u", c);
                h = mkhit(RULE_A, key, strlen(key), CRASH_LIMIT, 86400);
                ck_assert_int_eq(store_apply(s, &h, 1, T0 + CRASH_BATCHES), 0);
                ck_assert_msg(h.credit + 1 + hits[c] <= CRASH_LIMIT,
                              "counter %u lost hits: credit %llu, %u acked", c,
                              (unsigned long long) h.credit, hits[c]);
                ck_assert_msg(h.credit + 1 + hits[c] + extra[c] >= CRASH_LIMIT,
                              "counter %u has phantom hits: credit %llu, %u acked", c,
                              (unsigned long long) h.credit, hits[c]);
        }
        store_close(s);
        if (mode != CRASH_WRITE_THROUGH && !reopen_wb) {
                char path[PATH_MAX];
                ck_assert_int_eq(access(db_path(path, sizeof path, STORE_JOURNAL_NAME), F_OK), -1);
        }
}
END_TEST

/* ---- the on-disk format, pinned ---- */

/* tests/data/store/v1/data.mdb (README there), copied into the test's directory. */
static void copy_fixture_v1(void) {
        const char *top = getenv("top_srcdir");
        char src[PATH_MAX], dst[PATH_MAX];
        static uint8_t buf[1 << 20];
        ssize_t n;
        int fd;

        snprintf(src, sizeof src, "%s/tests/data/store/v1/data.mdb", top && *top ? top : ".");
        fd = open(src, O_RDONLY | O_CLOEXEC);
        ck_assert_msg(fd >= 0, "%s: %s (set top_srcdir)", src, strerror(errno));
        n = read(fd, buf, sizeof buf);
        close(fd);
        ck_assert_int_gt(n, 0);
        ck_assert_int_lt(n, (ssize_t) sizeof buf);
        ck_assert_int_eq(mkdir(db_path(dst, sizeof dst, NULL), 0750), 0);
        write_file(db_path(dst, sizeof dst, "data.mdb"), buf, (size_t) n);
}

#define FIXTURE_RULE_A_HEX "\xa1\xa2\xa3\xa4\xa5\xa6\xa7\xa8\xa9\xaa\xab\xac\xad\xae\xaf\xa0"
#define FIXTURE_RULE_B_HEX "\xa1\xa2\xa3\xa4\xa5\xa6\xa7\xa8\xa9\xaa\xab\xac\xad\xae\xaf\xa1"

/* Every byte of the version-1 layout (see store.c): key = rule id + tag (0 no actor,
 * 1 verbatim, 2 hash128 of the actor) + actor; value = expiry (u64 LE usec) + credit
 * (u64 LE); the expiry index key = expiry (u64 BE) + the counter key. */
static const struct {
        const char *key;
        size_t key_len;
        const char *value; /* 16 bytes */
} FIXTURE_V1[] = {
        { FIXTURE_RULE_A_HEX "\x00", 17,
          "\x00\xc7\xb1\x1b\x24\x0a\x06\x00"
          "\x07\0\0\0\0\0\0\0" },
        { FIXTURE_RULE_A_HEX "\x01"
                             "alice",
          22,
          "\x00\xe4\xb1\xee\x24\x0a\x06\x00"
          "\x04\0\0\0\0\0\0\0" },
        { FIXTURE_RULE_B_HEX "\x01"
                             "bob",
          20,
          "\x40\x82\x2d\x18\x24\x0a\x06\x00"
          "\x02\0\0\0\0\0\0\0" },
        { FIXTURE_RULE_B_HEX "\x02\xb6\x78\x3f\xcf\x6c\xae\x41\x3c\x18\xb1\x1e\x21\xa6\x4f\x65\x4d", 33,
          "\x00\xa0\xf5\x35\x38\x0a\x06\x00"
          "\x00\0\0\0\0\0\0\0" },
};

/* The fixture read with LMDB alone: the key and value layout, byte for byte. */
START_TEST (test_format_v1_layout) {
        char path[PATH_MAX];
        MDB_env *env;
        MDB_txn *txn;
        MDB_dbi meta, counters, expiry;
        MDB_stat st;
        MDB_val k, v;

        copy_fixture_v1();
        ck_assert_int_eq(mdb_env_create(&env), 0);
        ck_assert_int_eq(mdb_env_set_maxdbs(env, 4), 0);
        ck_assert_int_eq(mdb_env_open(env, db_path(path, sizeof path, NULL), MDB_RDONLY, 0640), 0);
        ck_assert_int_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
        ck_assert_int_eq(mdb_dbi_open(txn, "meta", 0, &meta), 0);
        ck_assert_int_eq(mdb_dbi_open(txn, "counters", 0, &counters), 0);
        ck_assert_int_eq(mdb_dbi_open(txn, "expiry", 0, &expiry), 0);

        k = (MDB_val){ .mv_size = 7, .mv_data = (void *) "version" };
        ck_assert_int_eq(mdb_get(txn, meta, &k, &v), 0);
        ck_assert_int_eq(v.mv_size, 1);
        ck_assert_int_eq(memcmp(v.mv_data, "1", 1), 0);
        k = (MDB_val){ .mv_size = 5, .mv_data = (void *) "magic" };
        ck_assert_int_eq(mdb_get(txn, meta, &k, &v), 0);
        ck_assert_int_eq(v.mv_size, strlen("divvyd counter store"));
        ck_assert_int_eq(memcmp(v.mv_data, "divvyd counter store", v.mv_size), 0);

        ck_assert_int_eq(mdb_stat(txn, counters, &st), 0);
        ck_assert_uint_eq(st.ms_entries, 4);
        ck_assert_int_eq(mdb_stat(txn, expiry, &st), 0);
        ck_assert_uint_eq(st.ms_entries, 4);
        for (size_t i = 0; i < sizeof FIXTURE_V1 / sizeof FIXTURE_V1[0]; i++) {
                uint8_t ikey[8 + 64];

                k = (MDB_val){ .mv_size = FIXTURE_V1[i].key_len, .mv_data = (void *) FIXTURE_V1[i].key };
                ck_assert_msg(mdb_get(txn, counters, &k, &v) == 0, "counter %zu missing", i);
                ck_assert_uint_eq(v.mv_size, 16);
                ck_assert_msg(memcmp(v.mv_data, FIXTURE_V1[i].value, 16) == 0, "counter %zu differs", i);
                for (unsigned b = 0; b < 8; b++) /* the expiry, big-endian */
                        ikey[b] = (uint8_t) FIXTURE_V1[i].value[7 - b];
                memcpy(ikey + 8, FIXTURE_V1[i].key, FIXTURE_V1[i].key_len);
                k = (MDB_val){ .mv_size = 8 + FIXTURE_V1[i].key_len, .mv_data = ikey };
                ck_assert_msg(mdb_get(txn, expiry, &k, &v) == 0, "index entry %zu missing", i);
                ck_assert_uint_eq(v.mv_size, 0);
        }
        mdb_txn_abort(txn);
        mdb_env_close(env);
}
END_TEST

/* The fixture opened by the current code: the counters it holds, as hits see them. */
START_TEST (test_format_v1_counters) {
        static char long_actor[FIXTURE_LONG_ACTOR_LEN];
        const uint64_t now = FIXTURE_T0 + 10 * SEC;
        Store *s;

        copy_fixture_v1();
        memset(long_actor, 'x', sizeof long_actor);
        s = open_store();
        ck_assert_uint_eq(stat_counters(s), 4);
        /* 3 of 10 used, 60 s window from FIXTURE_T0 */
        expect_hit(s, FIXTURE_RULE_A, NULL, 0, 10, 60, now, true, 6, 50);
        /* 1 of 5 used, 3600 s window */
        expect_hit(s, FIXTURE_RULE_A, "alice", 5, 5, 3600, now, true, 3, 3590);
        /* an actor over 400 bytes (hashed): 2 of 2 used, a day's window */
        expect_hit(s, FIXTURE_RULE_B, long_actor, sizeof long_actor, 2, 86400, now, false, 0, 86390);
        /* its 1 s window is over: a new one */
        expect_hit(s, FIXTURE_RULE_B, "bob", 3, 4, 1, now, true, 3, 1);
        store_close(s);
}
END_TEST

/* ---- write-back (StoreOptions.write_back) ---- */

START_TEST (test_write_back_commit_points) {
        Store *s = open_store_wb(0, 0, STORE_SYNC_PERIODIC, true);
        char path[PATH_MAX];
        struct stat st;
        StoreStats before, after;
        size_t deleted;

        /* the journal is preallocated beside data.mdb */
        ck_assert_int_eq(stat(db_path(path, sizeof path, STORE_JOURNAL_NAME), &st), 0);
        ck_assert_int_ge(st.st_size, 1024 * 1024);

        ck_assert_int_eq(store_get_stats(s, &before), 0);
        expect_hit(s, RULE_A, "a", 1, 10, 60, T0, true, 9, 60);
        expect_hit(s, RULE_A, "a", 1, 10, 60, T0, true, 8, 60);
        expect_hit(s, RULE_A, "b", 1, 10, 60, T0, true, 9, 60);
        /* applied and visible to the stats, not committed yet */
        ck_assert_int_eq(store_get_stats(s, &after), 0);
        ck_assert_uint_eq(after.counters, 2);
        ck_assert_uint_eq(after.commits, before.commits);

        ck_assert_int_eq(store_sync(s), 0);
        ck_assert_int_eq(store_sync(s), 0); /* nothing new: no commit, no fsync */
        ck_assert_int_eq(store_get_stats(s, &after), 0);
        ck_assert_uint_eq(after.commits, before.commits + 1);
        ck_assert_uint_eq(after.syncs, before.syncs + 1);

        /* a full transaction is committed without waiting for the timer */
        hit_many(s, "many-", 0, STORE_WRITE_BACK_HITS_MAX + 1000, 60, T0, 0);
        ck_assert_int_eq(store_get_stats(s, &after), 0);
        ck_assert_uint_ge(after.commits, before.commits + 2);
        ck_assert_uint_eq(after.counters, 2 + STORE_WRITE_BACK_HITS_MAX + 1000);

        /* a sweep runs inside the open transaction: it sees everything, commits nothing */
        ck_assert_int_eq(store_get_stats(s, &before), 0);
        ck_assert_int_eq(store_sweep(s, T0 + 61 * SEC, 100000, &deleted), 0);
        ck_assert_uint_eq(deleted, 2 + STORE_WRITE_BACK_HITS_MAX + 1000);
        ck_assert_int_eq(store_get_stats(s, &after), 0);
        ck_assert_uint_eq(after.counters, 0);
        ck_assert_uint_eq(after.commits, before.commits);
        ck_assert_int_eq(store_sync(s), 0);
        ck_assert_uint_eq(stat_counters(s), 0);

        expect_hit(s, RULE_A, "a", 1, 10, 60, T0 + 61 * SEC, true, 9, 60); /* a new window */
        store_close(s);
        s = open_store_wb(0, 0, STORE_SYNC_NONE, true);
        expect_hit(s, RULE_A, "a", 1, 10, 60, T0 + 62 * SEC, true, 8, 59); /* close committed */
        store_close(s);
}
END_TEST

START_TEST (test_write_back_oversized_batch) {
        static char keys[STORE_WRITE_BACK_HITS_MAX + 1][16];
        static StoreHit b[STORE_WRITE_BACK_HITS_MAX + 1];
        Store *s = open_store_wb(0, 64 << 20, STORE_SYNC_NONE, true);
        StoreStats st;
        uint64_t commits;

        ck_assert_int_eq(store_get_stats(s, &st), 0);
        commits = st.commits;
        for (unsigned i = 0; i <= STORE_WRITE_BACK_HITS_MAX; i++) {
                snprintf(keys[i], sizeof keys[i], "big-%u", i);
                b[i] = mkhit(RULE_A, keys[i], strlen(keys[i]), 3, 60);
        }
        ck_assert_int_eq(store_apply(s, b, STORE_WRITE_BACK_HITS_MAX + 1, T0), 0);
        for (unsigned i = 0; i <= STORE_WRITE_BACK_HITS_MAX; i++)
                ck_assert(b[i].error == 0 && b[i].allowed && b[i].credit == 2);
        /* too big for the journal, so committed at once */
        ck_assert_int_eq(store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.commits, commits + 1);
        expect_hit(s, RULE_A, "big-0", 5, 3, 60, T0, true, 1, 60);
        store_close(s);
}
END_TEST

START_TEST (test_write_back_map_growth) {
        Store *s = open_store_wb(64 * 1024, 64 << 20, STORE_SYNC_NONE, true);
        StoreStats st;

        /* each growth rebuilds the transaction from the journal: still exactly once */
        hit_many(s, "grow-", 0, 20000, 60, T0, 0);
        ck_assert_int_eq(store_get_stats(s, &st), 0);
        ck_assert_uint_eq(st.counters, 20000);
        ck_assert_uint_gt(st.map_grows, 0);
        expect_hit(s, RULE_A, "grow-0", 6, 5, 60, T0, true, 3, 60);
        expect_hit(s, RULE_A, "grow-19999", 10, 5, 60, T0, true, 3, 60);
        store_close(s);
}
END_TEST

START_TEST (test_write_back_map_full) {
        Store *s = open_store_wb(128 * 1024, 512 * 1024, STORE_SYNC_NONE, true);
        /* the failing batch is refused whole, the ones before it are kept */
        unsigned filled = fill_until_full(s, "full-", 100, 0, false);

        ck_assert_uint_eq(stat_counters(s), filled);
        expect_hit(s, RULE_A, "full-0-0", 8, 5, 1, T0, true, 3, 1); /* still usable */
        store_close(s);
        s = open_store_wb(128 * 1024, 512 * 1024, STORE_SYNC_NONE, true);
        ck_assert_uint_eq(stat_counters(s), filled);
        expect_hit(s, RULE_A, "full-0-0", 8, 5, 1, T0, true, 2, 1);
        /* the sweeper frees the room */
        ck_assert_uint_eq(sweep_all(s, T0 + SEC, 0), filled);
        expect_hit(s, RULE_A, "after", 5, 5, 1, T0 + SEC, true, 4, 1);
        store_close(s);
}
END_TEST

START_TEST (test_write_back_map_full_recovers) {
        /* Batches of varying sizes into a map at its maximum: whatever batch fails, the
         * hits answered before it are kept, the store reopens, and once the windows are
         * over the sweeper makes room again. */
        static char keys[200][32];
        unsigned sizes[] = { 1, 7, 31, 64, 100, 150, 200 };
        uint64_t ok_hits = 0;
        Store *s = open_store_wb(128 * 1024, 512 * 1024, STORE_SYNC_PERIODIC, true);
        unsigned failures = 0;

        for (unsigned i = 0; i < 5000 && failures < 20; i++) {
                unsigned n = sizes[(i + (unsigned) _i) % (sizeof sizes / sizeof sizes[0])];
                StoreHit b[200];

                for (unsigned j = 0; j < n; j++) {
                        snprintf(keys[j], sizeof keys[j], "vf-%u-%u", i, j);
                        b[j] = mkhit(RULE_A, keys[j], strlen(keys[j]), 5, 1);
                }
                if (store_apply(s, b, n, T0) < 0)
                        failures++;
                else
                        ok_hits += n;
                if (i % 16 == 0)
                        (void) store_sync(s);
        }
        ck_assert_uint_gt(failures, 0);
        store_close(s);

        s = open_store_wb(128 * 1024, 512 * 1024, STORE_SYNC_PERIODIC, true);
        ck_assert_uint_eq(stat_counters(s), ok_hits);
        ck_assert_uint_eq(sweep_all(s, T0 + SEC, 0), ok_hits);
        expect_hit(s, RULE_A, "after", 5, 5, 1, T0 + SEC, true, 4, 1);
        store_close(s);
}
END_TEST

START_TEST (test_write_back_locked) {
        Store *s = open_store_wb(0, 0, STORE_SYNC_NONE, true);
        int status;
        pid_t pid;

        /* a second process: its open fails instead of waiting for LMDB's writer lock */
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                char err[ERRBUF] = "";
                Store *t;
                int r = open_store_full(0, 0, STORE_SYNC_ALWAYS, false, &t, err, sizeof err);
                _exit(r == -EBUSY && !t && strstr(err, "in use") ? 0 : 1);
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "second open was not refused with EBUSY");
        store_close(s);
}
END_TEST

/* A journal torn by an OS crash in the middle of a record is replayed up to the tear. */
START_TEST (test_write_back_torn_journal) {
        /* records: key length (2), key (rule id, tag, actor), expiry, credit, generation, check */
        const off_t record = 2 + RULE_ID_SIZE + 1 + strlen("first") + 8 + 8 + 8 + 4;
        char path[PATH_MAX], c;
        int status, fd;
        pid_t pid;
        Store *s;

        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                char err[ERRBUF];

                if (open_store_full(0, 0, STORE_SYNC_NONE, true, &s, err, sizeof err) < 0)
                        _exit(2);
                for (unsigned i = 0; i < 3; i++) {
                        const char *actor = i < 2 ? "first" : "other";
                        StoreHit h = mkhit(RULE_A, actor, strlen(actor), 10, 60);
                        if (store_apply(s, &h, 1, T0) < 0)
                                _exit(3);
                }
                raise(SIGKILL);
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFSIGNALED(status));

        /* flip a byte inside the third record */
        fd = open(db_path(path, sizeof path, STORE_JOURNAL_NAME), O_RDWR);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(pread(fd, &c, 1, 2 * record + 10), 1);
        c ^= 0x55;
        ck_assert_int_eq(pwrite(fd, &c, 1, 2 * record + 10), 1);
        close(fd);

        s = open_store_wb(0, 0, STORE_SYNC_NONE, true);
        expect_hit(s, RULE_A, "first", 5, 10, 60, T0, true, 7, 60); /* both its records replayed */
        expect_hit(s, RULE_A, "other", 5, 10, 60, T0, true, 9, 60); /* its torn one not */
        store_close(s);
}
END_TEST

START_TEST (test_open_errors) {
        char path[PATH_MAX], err[ERRBUF];
        StoreOptions o = { .path = NULL };
        Store *s = NULL;

        ck_assert_int_eq(store_open(&o, &s, err, sizeof err), -EINVAL);
        o.path = db_path(path, sizeof path, NULL);
        o.sync = (StoreSync) 7;
        ck_assert_int_eq(store_open(&o, &s, err, sizeof err), -EINVAL);
        o.sync = STORE_SYNC_NONE;
        write_file(path, "x", 1);
        ck_assert_int_eq(store_open(&o, &s, err, sizeof err), -ENOTDIR);
        ck_assert_msg(strstr(err, "not a directory"), "%s", err);
        ck_assert_ptr_null(s);
        ck_assert_ptr_null(store_close(NULL));
        ck_assert_ptr_null(store_options(NULL));
}
END_TEST

START_TEST (test_dir_created) {
        char path[PATH_MAX];
        struct stat st;
        Store *s = open_store();

        ck_assert_int_eq(stat(db_path(path, sizeof path, NULL), &st), 0);
        ck_assert(S_ISDIR(st.st_mode));
        ck_assert_int_eq(st.st_mode & 0027, 0); /* 0750 less the umask */
        store_close(s);
}
END_TEST

static Suite *store_suite(void) {
        Suite *su = suite_create("store");
        TCase *tc = tcase_create("core");

        tcase_add_checked_fixture(tc, make_tmpdir, remove_tmpdir);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_sync_strings);
        tcase_add_test(tc, test_create_decrement_exhaust);
        tcase_add_test(tc, test_expiry_renewal);
        tcase_add_test(tc, test_reset_left_rounding);
        tcase_add_test(tc, test_batch_in_order);
        tcase_add_test(tc, test_invalid_hits);
        tcase_add_test(tc, test_distinct_counters);
        tcase_add_test(tc, test_reopen);
        tcase_add_test(tc, test_periodic_sync_counts);
        tcase_add_test(tc, test_periodic_sync_journal_head);
        tcase_add_test(tc, test_incompatible_version);
        tcase_add_test(tc, test_foreign_lmdb);
        tcase_add_loop_test(tc, test_corrupt_random, 0, 2);
        tcase_add_loop_test(tc, test_corrupt_truncated, 0, 3);
        tcase_add_test(tc, test_map_growth);
        tcase_add_test(tc, test_map_full);
        tcase_add_loop_test(tc, test_map_full_at_max_recovers, 0, 2);
        tcase_add_test(tc, test_map_full_sweep_chain);
        tcase_add_test(tc, test_sweep_chunks);
        tcase_add_test(tc, test_churn_file_stops_growing);
        tcase_add_loop_test(tc, test_crash, 0, 4 * _CRASH_MODE_MAX);
        tcase_add_test(tc, test_write_back_commit_points);
        tcase_add_test(tc, test_write_back_oversized_batch);
        tcase_add_test(tc, test_write_back_map_growth);
        tcase_add_test(tc, test_write_back_map_full);
        tcase_add_loop_test(tc, test_write_back_map_full_recovers, 0, 7);
        tcase_add_test(tc, test_write_back_locked);
        tcase_add_test(tc, test_write_back_torn_journal);
        tcase_add_test(tc, test_open_errors);
        tcase_add_test(tc, test_dir_created);
        tcase_add_test(tc, test_format_v1_layout);
        tcase_add_test(tc, test_format_v1_counters);
        suite_add_tcase(su, tc);
        return su;
}

int main(void) {
        return check_run_suite(store_suite());
}
