/* SPDX-License-Identifier: MIT */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <lmdb.h> /* test-only: to forge incompatible and foreign databases */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shared/clock.h"
#include "store/checkpoint.h"
#include "store/snapshot.h"
#include "store/store.h"
#include "store/wal.h"
#include "fixture-v1.h"
#include "v1-store.h"
#include "store/store-verify.h"
#include "check-run.h"
#include "store-test-util.h"

#define SEC       1000000ULL            /* usec per second */
#define T0        (1700000000ULL * SEC) /* an arbitrary wall-clock start */
#define LONG_SIZE 10000                 /* bytes: the longest actor we try */
#define ERRBUF    512

static const uint8_t RULE_A[RULE_ID_SIZE] = { 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8,
                                              0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0xa0 };
static const uint8_t RULE_B[RULE_ID_SIZE] = { 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8,
                                              0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0xa1 };

/* ---- fixture: one temporary directory per test ---- */

static void make_tmpdir(void) {
        store_test_make_tmpdir("check-store");
}

static char *db_path(char *buf, size_t size, const char *file) {
        snprintf(buf, size, "%s/db%s%s", tmpdir, file ? "/" : "", file ? file : "");
        return buf;
}

/* Test hook for the journal's preallocation: ENOSPC while disk_full. */
static bool disk_full;
static int allocate_hook(int fd, off_t len) {
        if (disk_full)
                return ENOSPC;
        return posix_fallocate(fd, 0, len);
}

/* The "snapshot" test case's fixture sets it: its tests run with snapshot checkpoints. */
static bool snapshot_mode;

static StoreOptions options(StoreSync sync) {
        static char path[PATH_MAX];

        return (StoreOptions){
                .path = db_path(path, sizeof path, NULL),
                .sync = sync,
                .journal_segment_size = 64 * 1024, /* small segments: rotations in every test */
                .journal_allocate = allocate_hook,
                .now_usec = T0,
                .snapshot = snapshot_mode,
        };
}

static Store *open_with(const StoreOptions *o) {
        char err[ERRBUF] = "";
        Store *s = NULL;
        int r;

        r = store_open(o, &s, err, sizeof err);
        ck_assert_msg(r == 0, "store_open: %d %s", r, err);
        ck_assert_ptr_nonnull(s);
        return s;
}

static Store *open_store_opts(uint64_t map_size, uint64_t map_size_max, StoreSync sync) {
        StoreOptions o = options(sync);

        o.map_size = map_size;
        o.map_size_max = map_size_max;
        return open_with(&o);
}

static Store *open_store(void) {
        return open_store_opts(0, 0, STORE_SYNC_NONE);
}

/* Test hook of the group commit's sync (the sync thread calls it): holds while sync_hold is
 * set (bounded: 10 s), fails with -EIO while sync_fail is set, counts its calls (sync_entered
 * on entry, sync_calls once past the hold). */
static int sync_hold, sync_fail, sync_calls, sync_entered;
static int sync_hook(int fd) {
        __atomic_add_fetch(&sync_entered, 1, __ATOMIC_RELEASE);
        for (unsigned i = 0; i < 10000 && __atomic_load_n(&sync_hold, __ATOMIC_ACQUIRE); i++)
                nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
        __atomic_add_fetch(&sync_calls, 1, __ATOMIC_RELEASE);
        if (__atomic_load_n(&sync_fail, __ATOMIC_ACQUIRE))
                return -EIO;
        return fdatasync(fd) < 0 ? -errno : 0;
}

static int try_open(char *err, size_t err_size) {
        StoreOptions o = options(STORE_SYNC_NONE);
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
                           .count = 1, /* op 0: TAKE 1, divvy's HIT */
                           .error = 12345 };
}

/* Applies one hit and checks the outcome. */
static void expect_hit(Store *s, const uint8_t *rule, const char *actor, size_t actor_len, uint64_t limit,
                       uint64_t reset, uint64_t now, bool allowed, uint64_t credit, uint64_t reset_left) {
        StoreHit h = mkhit(rule, actor, actor_len, limit, reset);

        ck_assert_int_eq(store_apply(s, &h, 1, now), 0);
        ck_assert_int_eq(h.error, 0);
        ck_assert_msg(h.res.allowed == allowed, "allowed %d, expected %d", h.res.allowed, allowed);
        ck_assert_uint_eq(h.res.credit, credit);
        ck_assert_uint_eq(h.res.reset, reset_left);
}

/* A counter's credit, read by a PEEK of 0 (which journals nothing, so works on a full disk). */
static uint64_t peek_credit(Store *s, const uint8_t *rule, const char *actor, uint64_t limit, uint64_t reset,
                            uint64_t now) {
        StoreHit h = mkhit(rule, actor, strlen(actor), limit, reset);

        h.op = ALGO_PEEK;
        h.count = 0;
        ck_assert_int_eq(store_apply(s, &h, 1, now), 0);
        ck_assert(h.res.allowed);
        return h.res.credit;
}

static StoreStats stats(Store *s) {
        StoreStats st;

        ck_assert_int_eq(store_get_stats(s, &st), 0);
        return st;
}

static uint64_t stat_counters(Store *s) {
        return stats(s).counters;
}

/* Sweeps the whole table (steps of chunk slots, each bounded) and returns the deletions. */
static size_t sweep_all(Store *s, uint64_t now, size_t chunk) {
        size_t total = 0, d;

        if (chunk < 64)
                chunk = 64;
        for (unsigned i = 0; i < 4 * (1U << 20) / chunk; i++) {
                ck_assert_int_ge(store_sweep(s, now, chunk, &d), 0);
                total += d;
        }
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
                ck_assert_msg(h.res.reset == table[i].reset_left,
                              "offset %llu: reset_left %llu, expected %llu",
                              (unsigned long long) table[i].offset_usec, (unsigned long long) h.res.reset,
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
        ck_assert(b[0].res.allowed && b[0].res.credit == 1);
        ck_assert(b[1].res.allowed && b[1].res.credit == 4);
        ck_assert(b[2].res.allowed && b[2].res.credit == 0);
        ck_assert(!b[3].res.allowed && b[3].res.credit == 0);
        ck_assert(b[4].res.allowed && b[4].res.credit == 3);
        for (size_t i = 0; i < 5; i++) {
                ck_assert_int_eq(b[i].error, 0);
                ck_assert_uint_eq(b[i].res.reset, 30);
        }
        ck_assert_uint_eq(stat_counters(s), 2);

        /* an empty batch is a no-op */
        ck_assert_int_eq(store_apply(s, NULL, 0, T0), 0);
        store_close(s);
}
END_TEST

/* The store's contract (store.h): the hits are built from validated rules and are not checked
 * per hit; what store_apply() still refuses is a call without a store or without its hits, and
 * nothing of such a call is kept. */
START_TEST (test_invalid_hits) {
        Store *s = open_store();
        StoreHit b[2] = { mkhit(RULE_A, "a", 1, 5, 30), mkhit(RULE_A, "a", 1, 5, 30) };

        ck_assert_int_eq(store_apply(NULL, b, 2, T0), -EINVAL);
        ck_assert_int_eq(store_apply(s, NULL, 2, T0), -EINVAL);
        ck_assert_int_eq(store_apply(s, NULL, 0, T0), 0);
        ck_assert_int_eq(store_apply(s, b, 0, T0), 0);
        ck_assert_int_eq(b[0].error, 12345); /* untouched: no hit was applied */
        ck_assert_uint_eq(stat_counters(s), 0);
        /* the same hits, applied: TAKE 1 each (op 0, count 1), in order */
        ck_assert_int_eq(store_apply(s, b, 2, T0), 0);
        ck_assert(b[0].res.allowed && b[1].res.allowed);
        ck_assert_uint_eq(b[0].res.credit, 4);
        ck_assert_uint_eq(b[1].res.credit, 3);
        ck_assert_uint_eq(stat_counters(s), 1);
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
        ck_assert_msg(strstr(err, "format version '7' is not supported by this divvyd (expects 2 or 3, or 1 "
                                  "to migrate)"),
                      "%s", err);

        forge_meta("version", "1x");
        ck_assert_int_eq(try_open(err, sizeof err), -EPROTO);
        ck_assert_msg(strstr(err, "version '1x' is not supported"), "%s", err);

        forge_meta("version", "2");
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
        ck_assert_int_eq(store_checkpoint(s, T0), 0); /* the counters in data.mdb */
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

/* The fixture opened by the current code, which migrates it to version 2 (the expired counter
 * is dropped): the counters it holds, as hits see them, also after a reopen of version 2. */
START_TEST (test_format_v1_counters) {
        static char long_actor[FIXTURE_LONG_ACTOR_LEN];
        const uint64_t now = FIXTURE_T0 + 10 * SEC;
        StoreOptions o = options(STORE_SYNC_ALWAYS);
        Store *s;

        copy_fixture_v1();
        memset(long_actor, 'x', sizeof long_actor);
        o.now_usec = now;
        s = open_with(&o);
        ck_assert_uint_eq(stat_counters(s), 3);
        /* 3 of 10 used, 60 s window from FIXTURE_T0 */
        expect_hit(s, FIXTURE_RULE_A, NULL, 0, 10, 60, now, true, 6, 50);
        /* 1 of 5 used, 3600 s window */
        expect_hit(s, FIXTURE_RULE_A, "alice", 5, 5, 3600, now, true, 3, 3590);
        /* an actor over 400 bytes (hashed): 2 of 2 used, a day's window */
        expect_hit(s, FIXTURE_RULE_B, long_actor, sizeof long_actor, 2, 86400, now, false, 0, 86390);
        /* its 1 s window is over: a new one */
        expect_hit(s, FIXTURE_RULE_B, "bob", 3, 4, 1, now, true, 3, 1);
        store_close(s);
        s = open_with(&o);
        expect_hit(s, FIXTURE_RULE_A, NULL, 0, 10, 60, now, true, 5, 50);
        expect_hit(s, FIXTURE_RULE_B, "bob", 3, 4, 1, now, true, 2, 1);
        store_close(s);
}
END_TEST

/* ---- version 2: journal, checkpoint, migration ---- */

/* Counters survive a reopen in every sync mode, whether they are in the checkpoint, only in
 * the journal, or both. */
START_TEST (test_reopen) {
        char key[32];
        Store *s = open_store_opts(0, 0, STORE_SYNC_ALWAYS);

        for (unsigned i = 0; i < 100; i++) {
                snprintf(key, sizeof key, "actor-%u", i);
                for (unsigned j = 0; j <= i % 5; j++)
                        expect_hit(s, RULE_A, key, strlen(key), 10, 3600, T0, true, 9 - j, 3600);
                if (i == 49)
                        ck_assert_int_eq(store_checkpoint(s, T0), 0); /* half checkpointed */
        }
        ck_assert_uint_ge(stats(s).syncs, 1);
        ck_assert_uint_eq(stats(s).commits, 1);
        ck_assert_uint_eq(stats(s).checkpoint_counters, 50);
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
                if (m == STORE_SYNC_PERIODIC)
                        ck_assert_int_eq(store_checkpoint(s, T0 + 10 * SEC), 0);
                store_close(s);
        }
}
END_TEST

START_TEST (test_sweep) {
        Store *s = open_store();

        hit_many(s, "short-", 0, 300, 5, T0, 0);
        hit_many(s, "long-", 0, 100, 3600, T0, 0);
        ck_assert_uint_eq(stat_counters(s), 400);
        ck_assert_uint_eq(sweep_all(s, T0 + 5 * SEC - 1, 16), 0);
        ck_assert_uint_eq(sweep_all(s, T0 + 5 * SEC, 16), 300);
        ck_assert_uint_eq(stat_counters(s), 100);
        ck_assert_uint_eq(stats(s).swept_total, 300);
        expect_hit(s, RULE_A, "long-9", 6, 5, 3600, T0 + 10 * SEC, true, 3, 3590);
        expect_hit(s, RULE_A, "short-9", 7, 5, 5, T0 + 10 * SEC, true, 4, 5);
        store_close(s);
}
END_TEST

/* store_sweep() asks for its next step soon only in the middle of a pass: a step that
 * covered the whole table is over, even though it deleted (counters that expire within a
 * millisecond would otherwise keep the sweeper running every millisecond). */
START_TEST (test_sweep_pass) {
        Store *s = open_store();
        size_t d = 0;

        hit_many(s, "short-", 0, 300, 5, T0, 0);
        ck_assert_int_eq(store_sweep(s, T0 + 5 * SEC, 1U << 20, &d), 0);
        ck_assert_uint_eq(d, 300);
        ck_assert_uint_eq(stat_counters(s), 0);

        /* a step of a few slots that deleted: the rest of the pass follows soon */
        hit_many(s, "again-", 0, 300, 5, T0, 0);
        ck_assert_int_eq(store_sweep(s, T0 + 5 * SEC, 64, &d), 1);
        ck_assert_uint_gt(d, 0);
        ck_assert_uint_lt(d, 300);
        ck_assert_uint_eq(sweep_all(s, T0 + 5 * SEC, 64) + d, 300);
        store_close(s);
}
END_TEST

/* kill -9 of a process that applied N batches without any sync: the page cache has the
 * journal, the next open finds all N. */
START_TEST (test_kill_child) {
        enum { N = 500 };
        int pipefd[2];
        pid_t pid;
        char c;
        int status;

        ck_assert_int_eq(pipe(pipefd), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                Store *s = open_store();

                close(pipefd[0]);
                for (unsigned i = 0; i < N; i++) {
                        char key[32];
                        StoreHit h[2];

                        snprintf(key, sizeof key, "k%u", i % 50);
                        h[0] = mkhit(RULE_A, key, strlen(key), 1000, 3600);
                        h[1] = mkhit(RULE_B, NULL, 0, 1000, 3600);
                        if (store_apply(s, h, 2, T0) < 0)
                                _exit(1);
                        if (i == N / 2 && store_checkpoint(s, T0) < 0)
                                _exit(2);
                }
                (void) write(pipefd[1], "x", 1);
                pause();
                _exit(0);
        }
        close(pipefd[1]);
        ck_assert_int_eq(read(pipefd[0], &c, 1), 1);
        close(pipefd[0]);
        kill(pid, SIGKILL);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFSIGNALED(status));

        Store *s = open_store();
        ck_assert_uint_eq(stat_counters(s), 51);
        expect_hit(s, RULE_B, NULL, 0, 1000, 3600, T0, true, 1000 - N - 1, 3600);
        expect_hit(s, RULE_A, "k7", 2, 1000, 3600, T0, true, 1000 - N / 50 - 1, 3600);
        store_close(s);
}
END_TEST

/* A version-1 database (built by the old store) is migrated on open, under the id key it
 * stores: hits find the migrated counters, also after a reopen. */
START_TEST (test_migrate_v1) {
        char path[PATH_MAX], err[ERRBUF] = "";
        V1StoreOptions o1 = { .path = db_path(path, sizeof path, NULL), .sync = V1_STORE_SYNC_ALWAYS };
        static char long_actor[500];
        V1Store *v1 = NULL;
        V1StoreHit h[3];
        Store *s;

        memset(long_actor, 'x', sizeof long_actor);
        ck_assert_int_eq(v1_store_open(&o1, &v1, err, sizeof err), 0);
        h[0] = (V1StoreHit){ .rule_id = RULE_A,
                             .actor = "alice",
                             .actor_len = 5,
                             .credit_limit = 10,
                             .reset_seconds = 3600 };
        h[1] = (V1StoreHit){ .rule_id = RULE_B, .credit_limit = 10, .reset_seconds = 60 };
        h[2] = (V1StoreHit){ .rule_id = RULE_A,
                             .actor = long_actor,
                             .actor_len = sizeof long_actor,
                             .credit_limit = 10,
                             .reset_seconds = 3600 };
        ck_assert_int_eq(v1_store_apply(v1, h, 3, T0), 0);
        ck_assert_int_eq(v1_store_apply(v1, h, 1, T0), 0);
        v1_store_close(v1);

        s = open_store();
        ck_assert_uint_eq(stat_counters(s), 3);
        expect_hit(s, RULE_A, "alice", 5, 10, 3600, T0 + SEC, true, 7, 3599);
        expect_hit(s, RULE_B, NULL, 0, 10, 60, T0 + SEC, true, 8, 59);
        expect_hit(s, RULE_A, long_actor, sizeof long_actor, 10, 3600, T0 + SEC, true, 8, 3599);
        store_close(s);
        s = open_store();
        expect_hit(s, RULE_A, "alice", 5, 10, 3600, T0 + SEC, true, 6, 3599);
        store_close(s);
}
END_TEST

/* A data.mdb older than the journal beside it (a backup restored in halves): the records
 * between its checkpoint and the journal's first are gone, so the store refuses to start
 * instead of silently losing what they counted. */
START_TEST (test_journal_gap_refused) {
        static uint8_t old[1 << 20];
        char path[PATH_MAX], err[ERRBUF] = "";
        ssize_t n;
        Store *s;
        int fd;

        s = open_store();
        hit_many(s, "gap-a-", 0, 100, 3600, T0, 0);
        ck_assert_int_eq(store_checkpoint(s, T0), 0);
        store_close(s);
        db_path(path, sizeof path, "data.mdb");
        fd = open(path, O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        n = read(fd, old, sizeof old);
        close(fd);
        ck_assert_int_gt(n, 0);
        ck_assert_int_lt(n, (ssize_t) sizeof old);

        /* More hits, a checkpoint that releases the journal they were in, more hits. */
        s = open_store();
        hit_many(s, "gap-b-", 0, 3000, 3600, T0, 0);
        ck_assert_int_eq(store_checkpoint(s, T0), 0);
        hit_many(s, "gap-c-", 0, 100, 3600, T0, 0);
        store_close(s);
        ck_assert_int_eq(try_open(err, sizeof err), 0); /* whole: it opens */

        write_file(path, old, (size_t) n);
        ck_assert_int_eq(try_open(err, sizeof err), -EBADMSG);
        ck_assert_msg(strstr(err, "does not go on where data.mdb's checkpoint stops"), "%s", err);
}
END_TEST

/* A child applies one hit on each of the keys, one batch each (record i of the journal's
 * first segment is keys[i]'s new state, lsn i + 1), and is killed. */
static void hit_keys_and_kill(const char *const *keys, size_t n) {
        pid_t pid;
        int status;

        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                Store *s = open_store();

                for (size_t i = 0; i < n; i++) {
                        StoreHit h = mkhit(RULE_A, keys[i], strlen(keys[i]), 1000, 3600);

                        if (store_apply(s, &h, 1, T0) < 0)
                                _exit(1);
                }
                raise(SIGKILL);
                _exit(2);
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFSIGNALED(status));
}

/* Flips a bit in the middle of record index of the journal's segment seq. */
static void flip_record(uint64_t seq, uint64_t index) {
        char path[PATH_MAX], name[WAL_SEGMENT_NAME_MAX];
        off_t off = (off_t) (WAL_HEADER_SIZE + index * WAL_RECORD_SIZE + 30);
        uint8_t b;
        int fd;

        snprintf(path, sizeof path, "%s/db/%s", tmpdir, wal_segment_name(seq, name));
        fd = open(path, O_RDWR | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(pread(fd, &b, 1, off), 1);
        b ^= 0x04;
        ck_assert_int_eq(pwrite(fd, &b, 1, off), 1);
        close(fd);
}

/* Damaged journal records after a kill: the store opens, every valid record after them is
 * replayed (a counter with a later record is exact), only the counters whose last record is
 * damaged lose that change, and the damage is named and counted. The first record after the
 * checkpoint damaged is not a journal from another time. */
START_TEST (test_journal_damage_replayed_past) {
        static const char *const keys[] = { "k0", "k1", "k2", "k3", "k4", "k5", "k0", "k6" };
        char err[ERRBUF] = "";
        Store *s;

        hit_keys_and_kill(keys, 8);
        flip_record(1, 0); /* k0's first state: superseded by record 6 */
        flip_record(1, 4); /* k4's only one: lost */
        s = open_store();
        ck_assert_uint_eq(stats(s).journal_damaged_records, 2);
        ck_assert_msg(strstr(store_journal_damage(s),
                             "/db/wal-0000000000000001.divvyd: record 0 (lsn 1) is damaged; 2 damaged "
                             "journal records skipped in 1 segment at start: "),
                      "%s", store_journal_damage(s));
        ck_assert_uint_eq(stat_counters(s), 6); /* k0-k6 but k4 */
        expect_hit(s, RULE_A, "k0", 2, 1000, 3600, T0, true, 1000 - 3, 3600);
        expect_hit(s, RULE_A, "k4", 2, 1000, 3600, T0, true, 1000 - 1, 3600);
        expect_hit(s, RULE_A, "k5", 2, 1000, 3600, T0, true, 1000 - 2, 3600);
        expect_hit(s, RULE_A, "k6", 2, 1000, 3600, T0, true, 1000 - 2, 3600);
        store_close(s); /* checkpoints what was replayed: the damage is behind us */
        s = open_store();
        ck_assert_uint_eq(stats(s).journal_damaged_records, 0);
        ck_assert_str_eq(store_journal_damage(s), "");
        expect_hit(s, RULE_A, "k6", 2, 1000, 3600, T0, true, 1000 - 3, 3600);
        store_close(s);

        /* a journal whose only record after the checkpoint is damaged */
        remove_tmpdir();
        make_tmpdir();
        hit_keys_and_kill(keys, 1);
        flip_record(1, 0);
        ck_assert_int_eq(try_open(err, sizeof err), 0);
}
END_TEST

/* A record damaged in the journal written since open: the checkpoint skips it, names it and
 * counts it; the checkpoint lacks that change (a later record of the counter would bring it
 * back, from the table's state), so a restart loses it. */
START_TEST (test_journal_damage_at_checkpoint) {
        static const char *const keys[] = { "k0", "k1", "k2", "k3", "k4" };
        Store *s = open_store();

        for (size_t i = 0; i < 5; i++)
                expect_hit(s, RULE_A, keys[i], 2, 1000, 3600, T0, true, 1000 - 1, 3600);
        flip_record(1, 2);
        ck_assert_int_eq(store_checkpoint(s, T0), 0);
        ck_assert_uint_eq(stats(s).journal_damaged_records, 1);
        ck_assert_msg(
                strstr(store_journal_damage(s),
                       "/db/wal-0000000000000001.divvyd: record 2 (lsn 3) is damaged; 1 damaged journal "
                       "record skipped in 1 segment by a checkpoint of the journal written since start: "),
                "%s", store_journal_damage(s));
        expect_hit(s, RULE_A, "k3", 2, 1000, 3600, T0, true, 1000 - 2, 3600);
        store_close(s);
        s = open_store();
        ck_assert_uint_eq(stats(s).journal_damaged_records, 0);
        expect_hit(s, RULE_A, "k2", 2, 1000, 3600, T0, true, 1000 - 1, 3600); /* its hit is lost */
        expect_hit(s, RULE_A, "k3", 2, 1000, 3600, T0, true, 1000 - 3, 3600);
        store_close(s);
}
END_TEST

static int collect_one(const CounterRecord *r, void *u) {
        *(CounterRecord *) u = *r;
        return 0;
}

/* The id key is random per database, kept in data.mdb, and what every hit hashes under. */
START_TEST (test_id_key) {
        char path[PATH_MAX], err[ERRBUF] = "", other[PATH_MAX];
        uint8_t k1[CHECKPOINT_ID_KEY_SIZE], k2[CHECKPOINT_ID_KEY_SIZE], k3[CHECKPOINT_ID_KEY_SIZE];
        Checkpoint *c = NULL;
        Store *s = open_store();

        expect_hit(s, RULE_A, "a", 1, 10, 3600, T0, true, 9, 3600);
        ck_assert_int_eq(store_checkpoint(s, T0), 0);
        store_close(s);

        ck_assert_int_eq(checkpoint_open(db_path(path, sizeof path, NULL), NULL, &c, err, sizeof err), 0);
        checkpoint_id_key(c, k1);
        checkpoint_close(c);
        ck_assert_int_eq(checkpoint_open(path, NULL, &c, err, sizeof err), 0);
        checkpoint_id_key(c, k2);
        checkpoint_close(c);
        ck_assert_mem_eq(k1, k2, sizeof k1); /* kept */
        snprintf(other, sizeof other, "%s/other", tmpdir);
        ck_assert_int_eq(checkpoint_open(other, NULL, &c, err, sizeof err), 0);
        checkpoint_id_key(c, k3);
        checkpoint_close(c);
        ck_assert_mem_ne(k1, k3, sizeof k1); /* another database, another key */

        /* the checkpoint holds the id the key gives for rule A's "a" */
        uint8_t key[RULE_ID_SIZE + 2];
        memcpy(key, RULE_A, RULE_ID_SIZE);
        key[RULE_ID_SIZE] = 1;
        key[RULE_ID_SIZE + 1] = 'a';
        CounterId want = counter_id_from_key(k1, key, sizeof key);
        ck_assert_int_eq(checkpoint_open(path, NULL, &c, err, sizeof err), 0);
        CounterRecord got = {};
        ck_assert_int_eq(checkpoint_load(c, T0, collect_one, &got), 0);
        checkpoint_close(c);
        ck_assert_int_eq(counter_id_compare(&got.id, &want), 0);
        ck_assert_uint_eq(got.state.w1, 9);
}
END_TEST

/* A journal that cannot make its next segment fails the batch, and the table is as before
 * it: an error, never a lie. */
/* A hit is decided by its rule's algorithm (StoreHit.algo), whose tag the journal keeps; a
 * counter of another algorithm (the rule changed) counts as absent. */
START_TEST (test_algorithm_dispatch) {
        StoreOptions o = options(STORE_SYNC_NONE);
        AlgoParams tb = { .algorithm = ALGORITHM_TOKEN_BUCKET, .credit_limit = 5, .reset_seconds = 60 };
        const char *reason = NULL;
        StoreHit h;
        Store *s;

        ck_assert_int_eq(algo_params_prepare(&tb, &reason), 0);
        o.close_checkpoint_usec = STORE_CLOSE_CHECKPOINT_OFF; /* reopen replays the journal */
        s = open_with(&o);
        expect_hit(s, RULE_A, "x", 1, 5, 60, T0, true, 4, 60); /* algo NULL: a fixed window */
        expect_hit(s, RULE_A, "x", 1, 5, 60, T0, true, 3, 60);

        /* the same counter id, now a token bucket: the fixed window's state is not read */
        h = mkhit(RULE_A, "x", 1, 5, 60);
        h.algo = &tb;
        ck_assert_int_eq(store_apply(s, &h, 1, T0), 0);
        ck_assert(h.res.allowed);
        ck_assert_uint_eq(h.res.credit, 4);
        store_close(s);

        /* replayed as a token bucket: the next take continues it */
        s = open_with(&o);
        h = mkhit(RULE_A, "x", 1, 5, 60);
        h.algo = &tb;
        ck_assert_int_eq(store_apply(s, &h, 1, T0), 0);
        ck_assert(h.res.allowed);
        ck_assert_uint_eq(h.res.credit, 3);
        /* and back to a fixed window: a fresh one */
        expect_hit(s, RULE_A, "x", 1, 5, 60, T0, true, 4, 60);
        store_close(s);
}
END_TEST

/* Groups are all or nothing: a denied member undoes the others' changes, in the table and in
 * the journal (a replay must not bring them back), and a counter a member created is gone. */
START_TEST (test_group_all_or_nothing) {
        StoreOptions o = options(STORE_SYNC_NONE);
        StoreHit b[5];
        Store *s;

        o.close_checkpoint_usec = STORE_CLOSE_CHECKPOINT_OFF; /* reopen replays the journal */
        s = open_with(&o);
        expect_hit(s, RULE_A, "old", 3, 5, 60, T0, true, 4, 60);

        b[0] = mkhit(RULE_A, "old", 3, 5, 60);   /* allowed alone */
        b[1] = mkhit(RULE_A, "fresh", 5, 5, 60); /* allowed alone, creates a counter */
        b[2] = mkhit(RULE_B, "deny", 4, 1, 60);  /* TAKE 2 of 1: denied */
        b[3] = mkhit(RULE_A, "ok-1", 4, 5, 60);  /* a group of allowed hits: applied */
        b[4] = mkhit(RULE_A, "ok-2", 4, 5, 60);
        b[0].group = b[1].group = b[2].group = 1;
        b[2].op = ALGO_TAKE;
        b[2].count = 2;
        b[3].group = b[4].group = 2;
        ck_assert_int_eq(store_apply(s, b, 5, T0), 0);
        /* each reports its own decision as if alone */
        ck_assert(b[0].res.allowed && b[0].res.credit == 3);
        ck_assert(b[1].res.allowed && b[1].res.credit == 4);
        ck_assert(!b[2].res.allowed);
        ck_assert(b[3].res.allowed && b[4].res.allowed);
        ck_assert_uint_eq(stat_counters(s), 3); /* old, ok-1, ok-2: not fresh, not deny */
        store_close(s);

        s = open_with(&o);
        ck_assert_uint_eq(stat_counters(s), 3);
        expect_hit(s, RULE_A, "old", 3, 5, 60, T0, true, 3, 60); /* group 1 charged nothing */
        expect_hit(s, RULE_A, "fresh", 5, 5, 60, T0, true, 4, 60);
        expect_hit(s, RULE_A, "ok-1", 4, 5, 60, T0, true, 3, 60); /* group 2 was applied */
        store_close(s);
}
END_TEST

/* Applies one hit of RULE_A (a 1000 per hour window) on actor key. */
static StoreHit key_hit(const char *key) {
        return mkhit(RULE_A, key, strlen(key), 1000, 3600);
}

/* At max_counters, a batch of requests on existing counters and one that needs a new counter
 * (alone, and in an all-or-nothing group with an existing one): only the new counter's
 * request fails, with -EDQUOT and nothing charged; every other hit is applied and journaled.
 * A restart with a lower cap keeps every counter and still refuses new ones. */
START_TEST (test_max_counters_refuses_only_new) {
        StoreOptions o = options(STORE_SYNC_NONE);
        StoreHit b[6];
        Store *s;

        o.max_counters = 3;
        o.close_checkpoint_usec = STORE_CLOSE_CHECKPOINT_OFF; /* reopen replays the journal */
        s = open_with(&o);
        expect_hit(s, RULE_A, "a", 1, 1000, 3600, T0, true, 999, 3600);
        expect_hit(s, RULE_A, "b", 1, 1000, 3600, T0, true, 999, 3600);
        expect_hit(s, RULE_A, "c", 1, 1000, 3600, T0, true, 999, 3600);

        b[0] = key_hit("a");
        b[1] = key_hit("new-1"); /* alone: refused */
        b[2] = key_hit("b");
        b[3] = key_hit("c"); /* a group with a new counter: refused whole, c not charged */
        b[4] = key_hit("new-2");
        b[5] = key_hit("a");
        b[3].group = b[4].group = 7;
        ck_assert_int_eq(store_apply(s, b, 6, T0), 0);
        ck_assert_int_eq(b[0].error, 0);
        ck_assert(b[0].res.allowed && b[0].res.credit == 998);
        ck_assert_int_eq(b[1].error, -EDQUOT);
        ck_assert(!b[1].res.allowed);
        ck_assert_int_eq(b[2].error, 0);
        ck_assert(b[2].res.allowed && b[2].res.credit == 998);
        ck_assert_int_eq(b[3].error, -EDQUOT);
        ck_assert_int_eq(b[4].error, -EDQUOT);
        ck_assert_int_eq(b[5].error, 0);
        ck_assert(b[5].res.allowed && b[5].res.credit == 997);
        ck_assert_uint_eq(stats(s).counters, 3);
        ck_assert_uint_eq(stats(s).counters_max, 3);
        ck_assert_uint_eq(stats(s).refused_limit, 2);
        ck_assert_uint_eq(stats(s).refused_memory, 0);
        expect_hit(s, RULE_A, "c", 1, 1000, 3600, T0, true, 998, 3600); /* the group charged nothing */
        store_close(s);

        /* a lower cap at the next start: the acknowledged counters all stay */
        o.max_counters = 1;
        s = open_with(&o);
        ck_assert_uint_eq(stat_counters(s), 3);
        expect_hit(s, RULE_A, "a", 1, 1000, 3600, T0, true, 996, 3600);
        expect_hit(s, RULE_A, "b", 1, 1000, 3600, T0, true, 997, 3600);
        b[0] = key_hit("new-3");
        ck_assert_int_eq(store_apply(s, b, 1, T0), 0);
        ck_assert_int_eq(b[0].error, -EDQUOT);
        ck_assert_uint_eq(stat_counters(s), 3);
        store_close(s);

        /* the refused hits were never journaled */
        o.max_counters = 0;
        s = open_with(&o);
        ck_assert_uint_eq(stat_counters(s), 3);
        expect_hit(s, RULE_A, "new-1", 5, 1000, 3600, T0, true, 999, 3600);
        expect_hit(s, RULE_A, "c", 1, 1000, 3600, T0, true, 997, 3600);
        store_close(s);
}
END_TEST

/* When the table cannot grow (its memory capped: a failed mmap()), a batch that needs a new
 * counter fails only for that request: the other requests of the batch, on existing counters,
 * are answered and charged, also after a restart. */
START_TEST (test_table_enomem_fails_one_request) {
        StoreOptions o = options(STORE_SYNC_NONE);
        char key[32];
        StoreHit b[3];
        Store *s;
        unsigned n;

        o.table_memory_max = 16 * 1024; /* the arrays of about 200 counters */
        o.close_checkpoint_usec = STORE_CLOSE_CHECKPOINT_OFF;
        s = open_with(&o);
        expect_hit(s, RULE_A, "x", 1, 1000, 3600, T0, true, 999, 3600);
        for (n = 0;; n++) {
                ck_assert_uint_lt(n, 10000);
                snprintf(key, sizeof key, "new-%u", n);
                b[0] = key_hit("x");
                b[1] = key_hit(key);
                b[2] = key_hit("x");
                ck_assert_int_eq(store_apply(s, b, 3, T0), 0);
                ck_assert_int_eq(b[0].error, 0);
                ck_assert_int_eq(b[2].error, 0);
                ck_assert_uint_eq(b[0].res.credit, 999 - 2 * n - 1);
                ck_assert_uint_eq(b[2].res.credit, 999 - 2 * n - 2);
                if (b[1].error != 0)
                        break;
        }
        ck_assert_int_eq(b[1].error, -ENOMEM);
        ck_assert(!b[1].res.allowed);
        ck_assert_uint_gt(n, 100);
        ck_assert_uint_eq(stat_counters(s), n + 1);
        ck_assert_uint_eq(stats(s).refused_memory, 1);
        store_close(s);

        o.table_memory_max = 0;
        s = open_with(&o);
        ck_assert_uint_eq(stat_counters(s), n + 1);
        expect_hit(s, RULE_A, "x", 1, 1000, 3600, T0, true, 999 - 2 * n - 3, 3600);
        expect_hit(s, RULE_A, key, strlen(key), 1000, 3600, T0, true, 999, 3600); /* never counted */
        store_close(s);
}
END_TEST

/* After a crash, the replay of a journal that adds many counters to the checkpoint's needs no
 * more table memory than the running store held: the table is made at its final size instead
 * of growing from the checkpoint's (both arrays at once). Its growth is capped at what the
 * running store's table held: the start succeeds and every counter is exact. */
START_TEST (test_replay_fits_running_table) {
        enum { N1 = 2500, N2 = 2500 };
        StoreOptions o = options(STORE_SYNC_NONE);
        char key[32];
        size_t held;
        Store *s;

        o.close_checkpoint_usec = STORE_CLOSE_CHECKPOINT_OFF; /* a crash: the journal replays */
        s = open_with(&o);
        for (unsigned i = 0; i < N1 + N2; i++) {
                StoreHit h;

                snprintf(key, sizeof key, "k%u", i);
                h = key_hit(key);
                ck_assert_int_eq(store_apply(s, &h, 1, T0), 0);
                ck_assert_int_eq(h.error, 0);
                if (i + 1 == N1)
                        ck_assert_int_eq(store_checkpoint(s, T0), 0);
        }
        for (unsigned i = 0; i < 64; i++)
                (void) store_sweep(s, T0, 1 << 16, NULL); /* ends the migration, if one runs */
        held = stats(s).memory;
        store_close(s);

        o.table_memory_max = held;
        s = open_with(&o);
        ck_assert_uint_eq(stat_counters(s), N1 + N2);
        ck_assert_uint_le(stats(s).memory, held);
        for (unsigned i = 0; i < N1 + N2; i += 97) {
                snprintf(key, sizeof key, "k%u", i);
                expect_hit(s, RULE_A, key, strlen(key), 1000, 3600, T0, true, 998, 3600);
        }
        store_close(s);
}
END_TEST

/* A failed batch is undone newest hit first: a counter it hit twice, or refunded then took
 * from, is back to its state before the batch, in the table and in the journal. */
START_TEST (test_undo_on_journal_full) {
        Store *s = open_store();
        char key[32] = "";
        StoreHit h[4];
        uint64_t before, x_left = 999999; /* x's credit after the last batch that succeeded */
        int r = 0;

        expect_hit(s, RULE_A, "x", 1, 1000000, 3600, T0, true, x_left, 3600);
        disk_full = true;
        /* the spare segment made at open takes the first rotation; the one after fails */
        for (unsigned i = 0; r == 0; i++) {
                ck_assert_uint_lt(i, 100000);
                if (i > 0)
                        x_left = h[2].res.credit;
                snprintf(key, sizeof key, "fill-%u", i);
                h[0] = mkhit(RULE_A, "x", 1, 1000000, 3600);
                h[1] = mkhit(RULE_A, key, strlen(key), 10, 3600);
                h[2] = mkhit(RULE_A, "x", 1, 1000000, 3600);
                before = stat_counters(s);
                r = store_apply(s, h, 3, T0);
        }
        ck_assert_int_eq(r, -ENOSPC);
        for (unsigned i = 0; i < 3; i++)
                ck_assert_int_eq(h[i].error, -ENOSPC);
        /* the failed batch left nothing: its new counter is absent, x as before it (both its
         * charges undone, not only the second) */
        ck_assert_uint_eq(stat_counters(s), before);
        ck_assert_uint_eq(peek_credit(s, RULE_A, "x", 1000000, 3600, T0), x_left);

        /* REFUND then TAKE in a batch that fails: x keeps neither (the refund is undone too) */
        h[0] = mkhit(RULE_A, "x", 1, 1000000, 3600);
        h[0].op = ALGO_REFUND;
        h[0].count = 5;
        h[1] = mkhit(RULE_A, "refund-fill-1", 13, 10, 3600);
        h[2] = mkhit(RULE_A, "refund-fill-2", 13, 10, 3600);
        h[3] = mkhit(RULE_A, "x", 1, 1000000, 3600);
        h[3].op = ALGO_TAKE;
        h[3].count = 1;
        ck_assert_int_eq(store_apply(s, h, 4, T0), -ENOSPC);
        ck_assert_uint_eq(stat_counters(s), before);
        ck_assert_uint_eq(peek_credit(s, RULE_A, "x", 1000000, 3600, T0), x_left);
        disk_full = false;
        StoreHit x = mkhit(RULE_A, "x", 1, 1000000, 3600);
        ck_assert_int_eq(store_apply(s, &x, 1, T0), 0);
        ck_assert_uint_eq(x.res.credit, x_left - 1);
        expect_hit(s, RULE_A, key, strlen(key), 10, 3600, T0, true, 9, 3600);
        store_close(s);

        /* the journal agrees with what was answered */
        s = open_store();
        expect_hit(s, RULE_A, "x", 1, 1000000, 3600, T0, true, x.res.credit - 1, 3600);
        expect_hit(s, RULE_A, key, strlen(key), 10, 3600, T0, true, 8, 3600);
        store_close(s);
}
END_TEST

/* A restart on a full disk (issue #30): the journal has no room for a segment. Bug: store_open()
 * failed with -ENOSPC, so divvyd could not start where it had been serving. Now it opens with
 * every journaled counter, serves what needs no journal (a denied hit, a PEEK), fails what
 * does with -ENOSPC, counting nothing, and store_maintain() makes the segment once there is
 * room, without a reopen. */
START_TEST (test_open_on_full_disk) {
        StoreOptions o = options(STORE_SYNC_NONE);
        StoreStats st;
        StoreHit h;
        Store *s;

        o.close_checkpoint_usec = STORE_CLOSE_CHECKPOINT_OFF; /* as after a kill: all in the journal */
        s = open_with(&o);
        expect_hit(s, RULE_A, "x", 1, 2, 3600, T0, true, 1, 3600);
        expect_hit(s, RULE_A, "x", 1, 2, 3600, T0, true, 0, 3600);
        expect_hit(s, RULE_A, "y", 1, 5, 3600, T0, true, 4, 3600);
        store_close(s);

        disk_full = true;
        s = open_with(&o);
        st = stats(s);
        ck_assert(!st.journal_ready && st.journal_failing);
        ck_assert_msg(strstr(store_journal_error(s), "No space left"), "%s", store_journal_error(s));
        ck_assert_uint_eq(st.counters, 2);
        expect_hit(s, RULE_A, "x", 1, 2, 3600, T0, false, 0, 3600); /* denied: nothing to journal */
        h = mkhit(RULE_A, "y", 1, 5, 3600);
        h.op = ALGO_PEEK;
        h.count = 1;
        ck_assert_int_eq(store_apply(s, &h, 1, T0), 0);
        ck_assert(h.res.allowed);
        ck_assert_uint_eq(h.res.credit, 3); /* what TAKE 1 would leave of the 4 journaled */
        h = mkhit(RULE_A, "y", 1, 5, 3600);
        ck_assert_int_eq(store_apply(s, &h, 1, T0), -ENOSPC);
        ck_assert_int_eq(h.error, -ENOSPC);
        h = mkhit(RULE_A, "new", 3, 5, 3600);
        ck_assert_int_eq(store_apply(s, &h, 1, T0), -ENOSPC);
        ck_assert_uint_eq(stat_counters(s), 2);
        ck_assert_int_eq(store_maintain(s, T0), 0); /* retried: still full */
        ck_assert(stats(s).journal_failing);
        /* a checkpoint (data.mdb has room here) releases the journal: no segment is left */
        ck_assert_int_eq(store_checkpoint(s, T0), 0);
        ck_assert_uint_eq(stats(s).journal_segments, 0);

        disk_full = false;
        ck_assert_int_eq(store_maintain(s, T0), 0);
        st = stats(s);
        ck_assert(st.journal_ready && !st.journal_failing);
        ck_assert_str_eq(store_journal_error(s), "");
        expect_hit(s, RULE_A, "y", 1, 5, 3600, T0, true, 3, 3600); /* the refused hit counted nothing */
        store_close(s);
        s = open_with(&o);
        expect_hit(s, RULE_A, "y", 1, 5, 3600, T0, true, 2, 3600);
        expect_hit(s, RULE_A, "x", 1, 2, 3600, T0, false, 0, 3600);
        ck_assert_uint_eq(stat_counters(s), 2);
        store_close(s);
}
END_TEST

/* The database's files are the daemon user's alone whatever the umask (issue #30): data.mdb
 * holds the counter-id key, and the group may be the one clients join to reach the socket.
 * Bug: they were created 0640. Every file of the directory while the store is open (journal
 * segments, the spare, wal.lock, data.mdb, lock.mdb), and lock.mdb made by store_verify(). */
static void expect_files_0600(const char *dir, unsigned *ret_n) {
        char path[PATH_MAX];
        struct dirent *de;
        struct stat st;
        DIR *d = opendir(dir);

        ck_assert_ptr_nonnull(d);
        while ((de = readdir(d))) {
                snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
                ck_assert_int_eq(lstat(path, &st), 0);
                if (!S_ISREG(st.st_mode))
                        continue;
                ck_assert_msg((st.st_mode & 07777) == 0600, "%s: mode %o", de->d_name,
                              (unsigned) (st.st_mode & 07777));
                (*ret_n)++;
        }
        closedir(d);
}

START_TEST (test_file_modes) {
        static const mode_t masks[] = { 0002, 0022, 0 };
        char dir[PATH_MAX], lock[PATH_MAX], err[ERRBUF] = "";

        db_path(dir, sizeof dir, NULL);
        db_path(lock, sizeof lock, "lock.mdb");
        for (size_t i = 0; i < sizeof masks / sizeof *masks; i++) {
                mode_t old = umask(masks[i]);
                unsigned n = 0;
                Store *s = open_store();

                hit_many(s, "md-", 0, 10, 3600, T0, 0);
                expect_files_0600(dir, &n);
                ck_assert_uint_ge(n, 5); /* data.mdb, lock.mdb, wal.lock, a segment, the spare */
                store_close(s);
                ck_assert_int_eq(unlink(lock), 0);
                ck_assert_int_eq(store_verify(dir, err, sizeof err), 0);
                n = 0;
                expect_files_0600(dir, &n);
                umask(old);
                ck_assert_int_eq(nftw(dir, store_test_rm_one, 16, FTW_DEPTH | FTW_PHYS), 0);
        }
}
END_TEST

/* A checkpoint of more counters than a pass holds (at least 4096: a pass never holds fewer)
 * reads the journal in slices of the id space: every counter lands in data.mdb once, with
 * the newest of its three journaled states. */
START_TEST (test_checkpoint_slices_newest) {
        StoreOptions o = options(STORE_SYNC_NONE);
        Store *s;
        StoreStats st;

        o.checkpoint_pass_records = 1000;
        o.close_checkpoint_usec = STORE_CLOSE_CHECKPOINT_OFF;
        s = open_with(&o);
        for (int k = 0; k < 3; k++)
                hit_many(s, "sl-", 0, 6000, 3600, T0, 0);
        ck_assert_int_eq(store_checkpoint(s, T0), 0);
        st = stats(s);
        ck_assert_uint_eq(st.checkpoint_counters, 6000);
        ck_assert_uint_eq(st.journal_segments, 1); /* the journal released */
        store_close(s);

        s = open_with(&o);
        ck_assert_uint_eq(stats(s).journal_records, 0);
        ck_assert_uint_eq(stat_counters(s), 6000);
        for (unsigned i = 0; i < 6000; i += 599) {
                char key[16];

                snprintf(key, sizeof key, "sl-%u", i);
                expect_hit(s, RULE_A, key, strlen(key), 5, 3600, T0, true, 1, 3600); /* 4th hit of 5 */
        }
        store_close(s);
}
END_TEST

/* A clean stop checkpoints the whole journal: the next open replays nothing, and the last
 * state of every counter, journaled many times, is what the checkpoint holds. */
START_TEST (test_close_checkpoints_journal) {
        StoreOptions o = options(STORE_SYNC_NONE);
        Store *s;
        StoreStats st;

        o.checkpoint_pass_records = 100; /* several passes, de-duplicated in each */
        s = open_with(&o);
        hit_many(s, "c-", 0, 1000, 3600, T0, 0);
        hit_many(s, "c-", 0, 1000, 3600, T0, 0);
        ck_assert_uint_eq(stats(s).commits, 0);
        store_close(s);

        s = open_with(&o);
        st = stats(s);
        ck_assert_uint_eq(st.checkpoint_counters, 1000);
        ck_assert_uint_eq(st.journal_records, 0); /* nothing to replay */
        ck_assert_uint_eq(stat_counters(s), 1000);
        expect_hit(s, RULE_A, "c-7", 3, 5, 3600, T0, true, 2, 3600);
        store_close(s);

        /* past its deadline the last checkpoint stops (or never starts): the journal stays,
         * and the replay still has every hit */
        o.close_checkpoint_usec = 1;
        s = open_with(&o);
        hit_many(s, "e-", 0, 5000, 3600, T0, 0);
        store_close(s);
        o.close_checkpoint_usec = 0;
        s = open_with(&o);
        ck_assert_uint_gt(stats(s).journal_records, 0);
        ck_assert_uint_eq(stat_counters(s), 6000);
        expect_hit(s, RULE_A, "e-4999", 6, 5, 3600, T0, true, 3, 3600);
        store_close(s);

        /* switched off, the journal stays and is replayed */
        o.close_checkpoint_usec = STORE_CLOSE_CHECKPOINT_OFF;
        s = open_with(&o);
        hit_many(s, "d-", 0, 10, 3600, T0, 0);
        store_close(s);
        s = open_with(&o);
        ck_assert_uint_gt(stats(s).journal_records, 0);
        expect_hit(s, RULE_A, "d-3", 3, 5, 3600, T0, true, 3, 3600);
        ck_assert_uint_eq(stat_counters(s), 6010);
        store_close(s);
}
END_TEST

/* A checkpoint in several passes (one id range each) holds everything, and the journal it
 * covers is released. */
START_TEST (test_checkpoint_passes) {
        StoreOptions o = options(STORE_SYNC_NONE);
        Store *s;
        StoreStats st;

        o.checkpoint_pass_records = 100;
        o.checkpoint_txn_records = 64;
        s = open_with(&o);
        hit_many(s, "p-", 0, 1000, 3600, T0, 0);
        hit_many(s, "p-", 0, 1000, 3600, T0, 0);
        ck_assert_int_eq(store_checkpoint(s, T0), 0);
        st = stats(s);
        ck_assert_uint_eq(st.checkpoint_counters, 1000);
        ck_assert_uint_eq(st.journal_segments, 1); /* only the current one is left */
        ck_assert_uint_eq(st.commits, 1);
        ck_assert(!st.checkpoint_failing);
        hit_many(s, "p-", 0, 10, 3600, T0, 0);
        store_close(s);

        s = open_with(&o);
        ck_assert_uint_eq(stat_counters(s), 1000);
        expect_hit(s, RULE_A, "p-5", 3, 5, 3600, T0, true, 1, 3600);
        expect_hit(s, RULE_A, "p-500", 5, 5, 3600, T0, true, 2, 3600);

        /* many records of few counters: one pass, the last state of each wins */
        for (unsigned i = 0; i < 300; i++)
                for (unsigned k = 0; k < 3; k++) {
                        char key[16];

                        snprintf(key, sizeof key, "few-%u", k);
                        expect_hit(s, RULE_B, key, strlen(key), 1000, 3600, T0, true, 999 - i, 3600);
                }
        ck_assert_int_eq(store_checkpoint(s, T0), 0);
        ck_assert_uint_eq(stats(s).checkpoint_counters, 1003);
        store_close(s);

        s = open_with(&o);
        ck_assert_uint_eq(stat_counters(s), 1003);
        expect_hit(s, RULE_B, "few-2", 5, 1000, 3600, T0, true, 699, 3600);
        store_close(s);
}
END_TEST

/* The map cap reached by a checkpoint: hits are still answered, the journal is kept, the
 * failure is reported; with a larger cap the next attempt succeeds and nothing is lost. */
START_TEST (test_checkpoint_map_cap_retry) {
        Store *s = open_store_opts(64 * 1024, 128 * 1024, STORE_SYNC_NONE);
        StoreStats st;

        hit_many(s, "cap-", 0, 5000, 3600, T0, 0);
        ck_assert_int_eq(store_checkpoint(s, T0), -ENOSPC);
        st = stats(s);
        ck_assert(st.checkpoint_failing);
        ck_assert_uint_eq(st.checkpoint_failures, 1);
        ck_assert_msg(strstr(store_checkpoint_error(s), "maximum map size"), "%s",
                      store_checkpoint_error(s));
        hit_many(s, "cap-", 0, 5000, 3600, T0, 0);  /* still answered */
        ck_assert_int_eq(store_maintain(s, T0), 0); /* backoff: no new attempt at once */
        store_close(s);

        s = open_store_opts(64 * 1024, 64 << 20, STORE_SYNC_NONE);
        ck_assert_uint_eq(stat_counters(s), 5000);
        ck_assert_int_eq(store_checkpoint(s, T0), 0);
        st = stats(s);
        ck_assert(!st.checkpoint_failing);
        ck_assert_uint_eq(st.checkpoint_counters, 5000);
        expect_hit(s, RULE_A, "cap-1", 5, 5, 3600, T0, true, 2, 3600);
        store_close(s);
}
END_TEST

static int done_calls, done_error = 1;
static void on_done(void *userdata, int error) {
        int *order = userdata;

        *order = ++done_calls;
        done_error = error;
}

/* The local store completes inside store_submit(), with the hits' outputs set first. */
START_TEST (test_submit_completes) {
        Store *s = open_store();
        StoreHit h = mkhit(RULE_A, "sub", 3, 5, 60);
        int order = 0;

        ck_assert_int_eq(store_submit(s, &h, 1, T0, on_done, &order), 0);
        ck_assert_int_eq(order, 1);
        ck_assert_int_eq(done_error, 0);
        ck_assert_uint_eq(h.res.credit, 4);
        ck_assert_int_eq(store_submit_backend(s, &h, 1, T0, on_done, &order), 0);
        ck_assert_int_eq(order, 2);
        ck_assert_uint_eq(h.res.credit, 3);
        /* a batch store_apply() refuses (no hits): completed with the error */
        ck_assert_int_eq(store_submit(s, NULL, 1, T0, on_done, &order), 0);
        ck_assert_int_eq(order, 3);
        ck_assert_int_eq(done_error, -EINVAL);
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

START_TEST (test_verify_sigchld_ignored) {
        /* A caller ignoring SIGCHLD must not make the check fail with ECHILD. */
        char path[PATH_MAX], err[ERRBUF] = "";
        struct sigaction sa;
        Store *s = open_store();

        expect_hit(s, RULE_A, "v", 1, 5, 60, T0, true, 4, 60);
        store_close(s);
        ck_assert_ptr_ne(signal(SIGCHLD, SIG_IGN), SIG_ERR);
        ck_assert_int_eq(store_verify(db_path(path, sizeof path, NULL), err, sizeof err), 0);
        ck_assert_str_eq(err, "");
        ck_assert_int_eq(sigaction(SIGCHLD, NULL, &sa), 0);
        ck_assert(sa.sa_handler == SIG_IGN); /* the caller's disposition is back */
        signal(SIGCHLD, SIG_DFL);
}
END_TEST

/* ---- the group commit (sync=always, store_submit()) ---- */

#define GC_MAX 8
static int gc_order[GC_MAX], gc_error[GC_MAX], gc_calls;
static void gc_done(void *userdata, int error) {
        int i = (int) (intptr_t) userdata;

        ck_assert_int_lt(gc_calls, GC_MAX);
        gc_order[gc_calls++] = i;
        gc_error[i] = error;
}

static Store *open_always(void) {
        StoreOptions o = options(STORE_SYNC_ALWAYS);

        o.journal_sync = sync_hook;
        sync_hold = sync_fail = sync_calls = sync_entered = gc_calls = 0;
        return open_with(&o);
}

/* Waits (poll, bounded: 10 s) and completes until want batches are done. */
static void gc_wait(Store *s, int want) {
        for (unsigned i = 0; i < 100 && gc_calls < want; i++) {
                struct pollfd p = { .fd = store_event_fd(s), .events = POLLIN };

                ck_assert_int_ge(poll(&p, 1, 100), 0);
                ck_assert_int_ge(store_process(s), 0);
        }
        ck_assert_int_eq(gc_calls, want);
}

static void gc_submit(Store *s, StoreHit *h, const char *actor, int i) {
        *h = mkhit(RULE_A, actor, strlen(actor), 5, 60);
        ck_assert_int_eq(store_submit(s, h, 1, T0, gc_done, (void *) (intptr_t) i), 0);
}

/* A batch is answered only after the sync thread synced it; the batches queued meanwhile
 * complete in submission order; their outputs are set when store_submit() returns. */
START_TEST (test_group_commit_waits_for_sync) {
        Store *s = open_always();
        StoreHit h[3];

        ck_assert_int_ge(store_event_fd(s), 0);
        __atomic_store_n(&sync_hold, 1, __ATOMIC_RELEASE);
        gc_submit(s, &h[0], "gc-a", 0);
        ck_assert_uint_eq(h[0].res.credit, 4); /* applied, not answered */
        gc_submit(s, &h[1], "gc-b", 1);
        gc_submit(s, &h[2], "gc-a", 2);
        ck_assert_uint_eq(h[2].res.credit, 3); /* sees batch 0 */
        for (unsigned i = 0; i < 20; i++) {
                ck_assert_int_eq(store_process(s), 0); /* the sync is held: nothing is done */
                nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
        }
        ck_assert_int_eq(gc_calls, 0);
        __atomic_store_n(&sync_hold, 0, __ATOMIC_RELEASE);
        gc_wait(s, 3);
        for (int i = 0; i < 3; i++) {
                ck_assert_int_eq(gc_order[i], i);
                ck_assert_int_eq(gc_error[i], 0);
        }
        ck_assert_int_ge(__atomic_load_n(&sync_calls, __ATOMIC_ACQUIRE), 1);
        ck_assert_uint_ge(stats(s).syncs, 1);
        /* only denied hits: nothing journaled, answered at once */
        h[0] = mkhit(RULE_A, "gc-z", 4, 1, 60);
        ck_assert_int_eq(store_apply(s, &h[0], 1, T0), 0);
        gc_submit(s, &h[1], "gc-z", 3);
        ck_assert_int_eq(gc_calls, 4);
        ck_assert_int_eq(gc_error[3], 0);
        ck_assert(!h[1].res.allowed);
        store_close(s);
}
END_TEST

/* Each sync of the group commit is counted with the time it took (the metrics'
 * divvyd_journal_sync_seconds_total): one held for 20 ms, from the moment the sync thread is
 * in it, adds one sync and at least 20 ms, whatever the machine's speed. */
START_TEST (test_group_commit_sync_time) {
        Store *s = open_always();
        StoreStats before = stats(s), after;
        StoreHit h;
        uint64_t t0;

        __atomic_store_n(&sync_hold, 1, __ATOMIC_RELEASE);
        gc_submit(s, &h, "gc-t", 0);
        for (unsigned i = 0; i < 10000 && __atomic_load_n(&sync_entered, __ATOMIC_ACQUIRE) == 0; i++)
                nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
        ck_assert_int_eq(__atomic_load_n(&sync_entered, __ATOMIC_ACQUIRE), 1);
        t0 = clock_usec(CLOCK_MONOTONIC);
        while (clock_usec(CLOCK_MONOTONIC) - t0 < 20000)
                nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
        __atomic_store_n(&sync_hold, 0, __ATOMIC_RELEASE);
        gc_wait(s, 1);
        after = stats(s);
        ck_assert_uint_eq(after.syncs, before.syncs + 1);
        ck_assert_uint_ge(after.sync_usec - before.sync_usec, 20000);
        store_close(s);
}
END_TEST

/* A failed sync completes the batches it covers with its error (the table counted them: an
 * ERR answer may have been counted), and the next batch tries again. */
START_TEST (test_group_commit_sync_failure) {
        Store *s = open_always();
        StoreHit h[3];

        __atomic_store_n(&sync_fail, 1, __ATOMIC_RELEASE);
        gc_submit(s, &h[0], "gc-f", 0);
        gc_submit(s, &h[1], "gc-f", 1);
        gc_wait(s, 2);
        ck_assert_int_eq(gc_error[0], -EIO);
        ck_assert_int_eq(gc_error[1], -EIO);
        __atomic_store_n(&sync_fail, 0, __ATOMIC_RELEASE);
        gc_submit(s, &h[2], "gc-f", 2);
        ck_assert_uint_eq(h[2].res.credit, 2); /* conservative: the failed ones were counted */
        gc_wait(s, 3);
        ck_assert_int_eq(gc_order[2], 2);
        ck_assert_int_eq(gc_error[2], 0);
        store_close(s);
}
END_TEST

/* store_apply()'s own sync (sync=always) failing: the batch answers the error and every
 * counter it hit is back as before it, in the table and, after a reopen, in the journal (the
 * undone states journaled after the batch's). */
START_TEST (test_apply_sync_failure_undone) {
        StoreOptions o = options(STORE_SYNC_ALWAYS);
        StoreHit b[4];
        Store *s;

        o.journal_sync = sync_hook;
        o.close_checkpoint_usec = STORE_CLOSE_CHECKPOINT_OFF; /* reopen replays the journal */
        sync_hold = sync_fail = 0;
        s = open_with(&o);
        expect_hit(s, RULE_A, "sa", 2, 10, 60, T0, true, 9, 60);
        expect_hit(s, RULE_A, "sb", 2, 10, 60, T0, true, 9, 60);
        __atomic_store_n(&sync_fail, 1, __ATOMIC_RELEASE);
        b[0] = mkhit(RULE_A, "sa", 2, 10, 60);
        b[1] = mkhit(RULE_A, "sc", 2, 10, 60); /* creates a counter */
        b[2] = mkhit(RULE_A, "sa", 2, 10, 60);
        b[3] = mkhit(RULE_A, "sb", 2, 10, 60);
        b[3].op = ALGO_REFUND;
        b[3].count = 1;
        ck_assert_int_eq(store_apply(s, b, 4, T0), -EIO);
        for (unsigned i = 0; i < 4; i++)
                ck_assert_int_eq(b[i].error, -EIO);
        ck_assert_uint_eq(stat_counters(s), 2); /* sc is gone */
        ck_assert_uint_eq(peek_credit(s, RULE_A, "sa", 10, 60, T0), 9);
        ck_assert_uint_eq(peek_credit(s, RULE_A, "sb", 10, 60, T0), 9);
        __atomic_store_n(&sync_fail, 0, __ATOMIC_RELEASE);
        store_close(s);

        s = open_with(&o);
        ck_assert_uint_eq(peek_credit(s, RULE_A, "sa", 10, 60, T0), 9);
        ck_assert_uint_eq(peek_credit(s, RULE_A, "sb", 10, 60, T0), 9);
        expect_hit(s, RULE_A, "sc", 2, 10, 60, T0, true, 9, 60);
        store_close(s);
}
END_TEST

/* store_close() completes every batch submitted, synced, and they survive a reopen. */
START_TEST (test_group_commit_close_drains) {
        Store *s = open_always();
        StoreHit h[GC_MAX];
        char actor[16];

        for (int i = 0; i < GC_MAX; i++) {
                snprintf(actor, sizeof actor, "gc-c%d", i % 2);
                gc_submit(s, &h[i], actor, i);
        }
        store_close(s);
        ck_assert_int_eq(gc_calls, GC_MAX);
        for (int i = 0; i < GC_MAX; i++) {
                ck_assert_int_eq(gc_order[i], i);
                ck_assert_int_eq(gc_error[i], 0);
        }
        s = open_store();
        ck_assert_int_eq(store_event_fd(s), -1);
        expect_hit(s, RULE_A, "gc-c0", 5, 5, 60, T0, true, 0, 60); /* 4 of 5 were counted */
        store_close(s);
}
END_TEST

/* A rotation of the journal between batches (a checkpoint's, or a full segment) is synced
 * by the next store_submit(): every batch completes, in order, across many segments. */
static int rot_next;
static void rot_done(void *userdata, int error) {
        ck_assert_int_eq(error, 0);
        ck_assert_int_eq((int) (intptr_t) userdata, rot_next);
        rot_next++;
}

START_TEST (test_group_commit_rotations) {
        Store *s = open_always();
        enum { N = 4000, B = 100 }; /* 64 KiB segments: ~1300 records each */
        static StoreHit h[N];
        static char actor[N][16];

        for (int i = 0; i < N; i++) {
                snprintf(actor[i], sizeof actor[i], "gc-r%d", i);
                h[i] = mkhit(RULE_A, actor[i], strlen(actor[i]), 5, 60);
        }
        rot_next = 0;
        for (int i = 0; i < N / B; i++) {
                ck_assert_int_eq(store_submit(s, h + i * B, B, T0, rot_done, (void *) (intptr_t) i), 0);
                if (i == 10)
                        ck_assert_int_eq(store_checkpoint(s, T0), 0);
                ck_assert_int_ge(store_process(s), 0);
        }
        store_close(s);
        ck_assert_int_eq(rot_next, N / B);
        ck_assert_uint_ge(__atomic_load_n(&sync_calls, __ATOMIC_ACQUIRE), 3);
        ck_assert_uint_eq(stat_counters(s = open_store()), N);
        store_close(s);
}
END_TEST

/* test_open_on_full_disk with the group commit (sync=always), and a clean stop's checkpoint
 * on the full disk (it releases the journal without a current segment): the sync thread
 * starts without a segment to sync, and takes the one store_maintain() makes. */
START_TEST (test_group_commit_open_on_full_disk) {
        Store *s = open_always();
        StoreHit h;

        gc_submit(s, &h, "a", 0);
        gc_wait(s, 1);
        ck_assert_int_eq(gc_error[0], 0);
        store_close(s);

        disk_full = true;
        s = open_always();
        ck_assert(!stats(s).journal_ready);
        gc_submit(s, &h, "b", 0); /* answered at once: nothing was journaled */
        ck_assert_int_eq(gc_calls, 1);
        ck_assert_int_eq(gc_error[0], -ENOSPC);
        ck_assert_int_eq(store_maintain(s, T0), 0);
        store_close(s); /* its checkpoint (of nothing new) on the full disk */

        s = open_always();
        ck_assert(!stats(s).journal_ready);
        disk_full = false;
        ck_assert_int_eq(store_maintain(s, T0), 0);
        ck_assert(stats(s).journal_ready);
        gc_submit(s, &h, "a", 0);
        gc_wait(s, 1);
        ck_assert_int_eq(gc_error[0], 0);
        ck_assert_uint_eq(h.res.credit, 3); /* the second hit on a; b's refused one counted nothing */
        gc_submit(s, &h, "b", 1);
        gc_wait(s, 2);
        ck_assert_int_eq(gc_error[1], 0);
        ck_assert_uint_eq(h.res.credit, 4);
        store_close(s);
}
END_TEST

/* A directory without lock.mdb (docs/running.md: a hot copy by mdb_copy "is a valid store on its own")
 * gets one from the read-through check, the first to open it: it must be the daemon's to open
 * afterwards. Bug: the check's child opened the environment with mode 0, so lock.mdb was
 * created ---------- and divvyd, as any user but root, failed to start ("cannot open LMDB
 * environment: Permission denied"), then and at every later start. A lock.mdb left with mode 0
 * by that bug is given data.mdb's mode back. */
START_TEST (test_verify_creates_usable_lock) {
        char path[PATH_MAX], lock[PATH_MAX], data[PATH_MAX], err[ERRBUF] = "";
        struct stat st_lock, st_data;
        Store *s = open_store();

        hit_many(s, "lk-", 0, 10, 3600, T0, 0);
        store_close(s);
        db_path(lock, sizeof lock, "lock.mdb");
        db_path(data, sizeof data, "data.mdb");

        for (unsigned k = 0; k < 2; k++) {
                if (k == 0)
                        ck_assert_int_eq(unlink(lock), 0); /* the copy of a hot backup */
                else
                        ck_assert_int_eq(chmod(lock, 0), 0); /* what the bug left */
                ck_assert_int_eq(store_verify(db_path(path, sizeof path, NULL), err, sizeof err), 0);
                ck_assert_int_eq(stat(lock, &st_lock), 0);
                ck_assert_int_eq(stat(data, &st_data), 0);
                ck_assert_uint_ne(st_lock.st_mode & 0777, 0);
                ck_assert_uint_eq(st_lock.st_mode & 0777, st_data.st_mode & 0777);
                s = open_store();
                ck_assert_uint_eq(stat_counters(s), 10);
                store_close(s);
        }
}
END_TEST

/* A checkpoint that cannot start (the journal's next segment cannot be made: a full disk) is
 * retried after 1 s, then 2, 4, ... as STORE-DESIGN.md's "Checkpoints" says of any failed one. Bug: a
 * failed start set the backoff back to 1 s, so a full disk was retried, counted in
 * divvyd_checkpoint_failures_total and a 64 MiB segment fallocate()d every second for ever. */
START_TEST (test_checkpoint_start_failure_backoff) {
        StoreOptions o = options(STORE_SYNC_NONE);
        uint64_t t1 = 0, t2 = 0;
        Store *s;

        o.checkpoint_interval_usec = 1;
        s = open_with(&o);
        hit_many(s, "bk-", 0, 10, 3600, T0, 0);
        ck_assert_int_eq(store_checkpoint(s, T0), 0); /* takes the segment made in advance */
        hit_many(s, "bk-", 0, 10, 3600, T0, 0);
        disk_full = true;
        ck_assert_int_eq(store_maintain(s, T0), -ENOSPC);
        ck_assert_uint_eq(stats(s).checkpoint_failures, 1);
        ck_assert(stats(s).checkpoint_failing);
        ck_assert_msg(strstr(store_checkpoint_error(s), "cannot start a checkpoint"), "%s",
                      store_checkpoint_error(s));

        /* the attempts: the 2nd after 1 s, the 3rd no sooner than 2 s after it (a lower bound:
         * a slow machine only makes it later) */
        for (unsigned i = 0; i < 1000 && stats(s).checkpoint_failures < 3; i++) {
                uint64_t before = stats(s).checkpoint_failures;

                nanosleep(&(struct timespec){ .tv_nsec = 20 * 1000 * 1000 }, NULL);
                (void) store_maintain(s, T0);
                if (before == 1 && stats(s).checkpoint_failures == 2)
                        t1 = clock_usec(CLOCK_MONOTONIC);
                else if (before == 2 && stats(s).checkpoint_failures == 3)
                        t2 = clock_usec(CLOCK_MONOTONIC);
        }
        ck_assert_uint_eq(stats(s).checkpoint_failures, 3);
        ck_assert_uint_gt(t1, 0);
        ck_assert_msg(t2 - t1 >= STORE_CHECKPOINT_RETRY_MIN_USEC * 2 - 50000,
                      "3rd attempt %llu us after the 2nd", (unsigned long long) (t2 - t1));

        disk_full = false;
        store_close(s);
        s = open_with(&o);
        ck_assert_uint_eq(stat_counters(s), 10);
        expect_hit(s, RULE_A, "bk-1", 4, 5, 3600, T0, true, 2, 3600);
        store_close(s);
}
END_TEST

/* Sets or clears the immutable attribute of path (root, a file system that has it). Returns 0
 * or -errno. The kernel reads and writes an int, but the ioctl numbers are declared with a
 * long's size, which valgrind checks: the int is the first member of a zeroed long-sized
 * union, so that it is at the address on any byte order and every byte valgrind looks at is
 * set. */
static int set_immutable(const char *path, bool on) {
        union {
                int flags;
                long size;
        } u = { .size = 0 };
        int fd = open(path, O_RDONLY | O_CLOEXEC), r = 0;

        if (fd < 0)
                return -errno;
        if (ioctl(fd, FS_IOC_GETFLAGS, &u) < 0)
                r = -errno;
        else {
                u.flags = on ? u.flags | FS_IMMUTABLE_FL : u.flags & ~FS_IMMUTABLE_FL;
                if (ioctl(fd, FS_IOC_SETFLAGS, &u) < 0)
                        r = -errno;
        }
        close(fd);
        return r;
}

/* The oldest journal segment in dir (its full path into buf), or false. */
static bool oldest_segment(const char *dir, char *buf, size_t size) {
        DIR *d = opendir(dir);
        struct dirent *de;
        char best[256] = "";

        ck_assert_ptr_nonnull(d);
        while ((de = readdir(d)))
                if (strncmp(de->d_name, "wal-", 4) == 0 && strlen(de->d_name) > 7 &&
                    strcmp(de->d_name + strlen(de->d_name) - 7, ".divvyd") == 0 &&
                    (!best[0] || strcmp(de->d_name, best) < 0))
                        snprintf(best, sizeof best, "%s", de->d_name);
        closedir(d);
        if (best[0])
                snprintf(buf, size, "%s/%s", dir, best);
        return best[0];
}

/* A checkpoint written whose covered journal segments cannot be deleted (immutable here; a
 * directory turned read-only does the same to an unprivileged daemon) shows in STATUS as
 * "checkpoint failing". Bug: only the next checkpoint tried the deletion again, and an idle
 * daemon has none: STATUS said "failing" for good. store_maintain() retries it. */
START_TEST (test_checkpoint_release_retried) {
        StoreOptions o = options(STORE_SYNC_NONE);
        char seg[PATH_MAX];
        int r = 0;
        Store *s;

        o.checkpoint_interval_usec = 1;
        s = open_with(&o);
        hit_many(s, "rl-", 0, 10, 3600, T0, 0);
        ck_assert_int_eq(store_maintain(s, T0), 0); /* the job started: the segment is sealed */
        ck_assert(oldest_segment(o.path, seg, sizeof seg));
        r = set_immutable(seg, true);
        if (r < 0) {
                printf("SKIP: %s: cannot make %s immutable: %s\n", __func__, seg, strerror(-r));
                (void) store_checkpoint(s, T0);
                store_close(s);
                return;
        }
        for (unsigned i = 0; i < 1000 && store_maintain(s, T0) == 0; i++) /* until reaped */
                nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);
        bool failing = stats(s).checkpoint_failing;
        bool said = strstr(store_checkpoint_error(s), "deleting the journal it covers failed");
        (void) store_maintain(s, T0); /* nothing new to checkpoint; still undeletable */
        bool still = stats(s).checkpoint_failing, kept = access(seg, F_OK) == 0;

        /* first undone, so that a failed check leaves no file the fixture cannot delete */
        ck_assert_int_eq(set_immutable(seg, false), 0);
        ck_assert(failing && said && still && kept);
        (void) store_maintain(s, T0); /* no new record: no checkpoint, the deletion again */
        ck_assert_msg(!stats(s).checkpoint_failing, "%s", store_checkpoint_error(s));
        ck_assert_int_eq(access(seg, F_OK), -1);
        ck_assert_uint_eq(stats(s).checkpoint_failures, 0);
        store_close(s);
        s = open_with(&o);
        ck_assert_uint_eq(stat_counters(s), 10);
        store_close(s);
}
END_TEST

/* A run of steps that each ask for the next one soon sweeps every expired counter: the
 * manager then waits --sweep-interval. Bug: once 3/4 of a large table had been swept, it
 * shrank, and the shrink's migration (which the sweeper's steps carry on, dropping the expired
 * counters of the old array) began with the part of the old array already swept, now empty:
 * those steps deleted nothing, said "no backlog", and the manager waited an interval after
 * each; after the migration, the new array began with the survivors of the part already swept,
 * and the same again. The last quarter of the expired counters (and the old array's memory)
 * stayed for an interval per 4,096 to 8,192 of those slots: 1.5 s for 50,000 counters at
 * --sweep-interval=200. */
START_TEST (test_sweep_shrink_no_stall) {
        Store *s = open_store();
        size_t d = 0, total = 0;
        unsigned steps = 0;
        int r;

        hit_many(s, "mass-", 0, 50000, 5, T0, 0);
        hit_many(s, "live-", 0, 100, 3600, T0, 0);
        ck_assert_uint_eq(stat_counters(s), 50100);

        /* never swept: the run starts at the beginning of the table (or of the last growth's
         * migration), so it is one whole pass, migrations included */

        do {
                r = store_sweep(s, T0 + 5 * SEC, STORE_SWEEP_CHUNK_DEFAULT, &d);
                ck_assert_int_ge(r, 0);
                total += d;
        } while (r > 0 && ++steps < 10000);
        ck_assert_uint_lt(steps, 10000);
        ck_assert_uint_eq(total, 50000);
        ck_assert_uint_eq(stat_counters(s), 100);
        store_close(s);
}
END_TEST

/* ---- edge cases: the wall clock stepping back before a clean stop, a batch larger than a
 * journal segment, the version 2 verbs journaled and replayed after a kill -9 with journal
 * segments at their smallest, and what a batch leaves in the table ---- */

/* Options for the database tmpdir/<name>. */
static StoreOptions named_options(const char *name, StoreSync sync, uint64_t now) {
        static char paths[2][PATH_MAX];
        static unsigned k;
        char *p = paths[k++ % 2];

        snprintf(p, PATH_MAX, "%s/%s", tmpdir, name);
        return (StoreOptions){ .path = p, .sync = sync, .journal_segment_size = 64 * 1024, .now_usec = now };
}

static StoreHit algo_hit(const char *actor, AlgoOp op, uint64_t count, const AlgoParams *algo) {
        return (StoreHit){ .rule_id = RULE_A,
                           .actor = actor,
                           .actor_len = strlen(actor),
                           .credit_limit = algo ? algo->credit_limit : 5,
                           .reset_seconds = algo ? algo->reset_seconds : 60,
                           .algo = algo,
                           .op = op,
                           .count = count };
}

/* One hit alone at now; checks that it was applied and returns it. */
static StoreHit apply_one(Store *s, const char *actor, AlgoOp op, uint64_t count, const AlgoParams *algo,
                          uint64_t now) {
        StoreHit h = algo_hit(actor, op, count, algo);

        ck_assert_int_eq(store_apply(s, &h, 1, now), 0);
        ck_assert_int_eq(h.error, 0);
        return h;
}

/* The wall clock the store was last given may be earlier than one it was given before (a step
 * back, STORE-DESIGN.md "Wall-clock steps"). The last checkpoint of a clean stop must judge what is live
 * by the clock the hits were answered at, not by the largest one ever seen: a counter created
 * after the clock came back is live and must still be there after the restart. */
START_TEST (test_clock_back_then_clean_stop) {
        StoreOptions o = named_options("db", STORE_SYNC_PERIODIC, T0);
        StoreHit h;
        Store *s;

        s = open_with(&o);
        h = apply_one(s, "before", ALGO_TAKE, 1, NULL, T0);
        ck_assert_uint_eq(h.res.credit, 4);
        /* the clock steps an hour forward, the timer runs, and it steps back */
        (void) store_maintain(s, T0 + 3600 * SEC);
        (void) store_maintain(s, T0 + 1 * SEC);
        h = apply_one(s, "before", ALGO_TAKE, 1, NULL, T0 + 1 * SEC); /* still its window */
        ck_assert_uint_eq(h.res.credit, 3);
        h = apply_one(s, "after", ALGO_TAKE, 1, NULL, T0 + 2 * SEC);
        ck_assert_uint_eq(h.res.credit, 4);
        store_close(s); /* a clean stop: its last checkpoint */

        o.now_usec = T0 + 3 * SEC;
        s = open_with(&o);
        h = apply_one(s, "before", ALGO_PEEK, 0, NULL, T0 + 3 * SEC);
        ck_assert_uint_eq(h.res.credit, 3);
        h = apply_one(s, "after", ALGO_PEEK, 0, NULL, T0 + 3 * SEC);
        ck_assert_uint_eq(h.res.credit, 4);
        store_close(s);
}
END_TEST

/* A batch changes more counters than one journal segment holds (the daemon's batches have up
 * to 4096 hits; --journal-segment-size may be as small as 64 KiB, 1364 records): it is
 * journaled, not refused, and replayed whole. */
START_TEST (test_batch_larger_than_segment) {
        enum { N = 4096 };
        StoreOptions o = named_options("db", STORE_SYNC_PERIODIC, T0);
        static StoreHit hits[N];
        static char actors[N][16];
        StoreHit h;
        Store *s;

        for (StoreSync sync = STORE_SYNC_NONE; sync < _STORE_SYNC_MAX; sync++) {
                o.sync = sync;
                o.close_checkpoint_usec = STORE_CLOSE_CHECKPOINT_OFF; /* the reopen replays */
                s = open_with(&o);
                for (unsigned i = 0; i < N; i++) {
                        snprintf(actors[i], sizeof actors[i], "b%u-%u", (unsigned) sync, i);
                        hits[i] = algo_hit(actors[i], ALGO_TAKE, 1, NULL);
                }
                ck_assert_int_eq(store_apply(s, hits, N, T0), 0);
                for (unsigned i = 0; i < N; i++) {
                        ck_assert_int_eq(hits[i].error, 0);
                        ck_assert(hits[i].res.allowed);
                }
                store_close(s);
                s = open_with(&o);
                h = apply_one(s, actors[N - 1], ALGO_PEEK, 0, NULL, T0);
                ck_assert_uint_eq(h.res.credit, 4);
                h = apply_one(s, actors[0], ALGO_PEEK, 0, NULL, T0);
                ck_assert_uint_eq(h.res.credit, 4);
                store_close(s);
        }
}
END_TEST

/* ---- the version 2 verbs, journaled, replayed after a kill -9 ---- */

#define MODEL_ACTORS  12
#define MODEL_BATCHES 400

static uint64_t rng_state;
static uint32_t rng(void) {
        rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
        return (uint32_t) (rng_state >> 33);
}

static const char *const model_actor[MODEL_ACTORS] = { "u0", "u1", "u2", "u3", "u4",  "u5",
                                                       "u6", "u7", "u8", "u9", "u10", "u11" };

/* Batch k of the sequence seeded by seed: 1 to 4 hits, every op, two algorithms; *now moves on
 * by 0 to 0.4 s (windows of 30 s: some end during the run, most are live at its end). Returns
 * the number of hits. */
static size_t model_batch(uint64_t seed, unsigned k, const AlgoParams *algos, StoreHit out[4],
                          uint64_t *now) {
        static const AlgoOp ops[] = { ALGO_TAKE,   ALGO_TAKE,   ALGO_TAKE,  ALGO_CHARGE,
                                      ALGO_REFUND, ALGO_REFUND, ALGO_RESET, ALGO_PEEK };
        size_t n;

        rng_state = seed * 1000003ULL + k;
        (void) rng();
        n = 1 + rng() % 4;
        for (size_t i = 0; i < n; i++) {
                const AlgoParams *a = &algos[rng() % 2];

                out[i] = algo_hit(model_actor[rng() % MODEL_ACTORS],
                                  ops[rng() % (sizeof ops / sizeof ops[0])], 1 + rng() % 3, a);
        }
        *now += (rng() % 400) * 1000 + rng() % 1000;
        return n;
}

/* Runs the first batches of the sequence on the store at o, with a checkpoint now and then, and
 * returns it open. */
static Store *model_run(const StoreOptions *o, uint64_t seed, const AlgoParams *algos, unsigned batches,
                        uint64_t *now) {
        Store *s = open_with(o);

        for (unsigned k = 0; k < batches; k++) {
                StoreHit b[4];
                size_t n = model_batch(seed, k, algos, b, now);

                if (store_apply(s, b, n, *now) < 0)
                        _exit(3);
                if (k % 97 == 50 && store_checkpoint(s, *now) < 0)
                        _exit(4);
        }
        return s;
}

START_TEST (test_verbs_replayed_after_kill) {
        AlgoParams algos[2] = {
                { .algorithm = ALGORITHM_FIXED_WINDOW, .credit_limit = 7, .reset_seconds = 30 },
                { .algorithm = ALGORITHM_TOKEN_BUCKET, .credit_limit = 7, .reset_seconds = 30 },
        };
        const char *reason = NULL;

        ck_assert_int_eq(algo_params_prepare(&algos[0], &reason), 0);
        ck_assert_int_eq(algo_params_prepare(&algos[1], &reason), 0);

        for (unsigned round = 0; round < 4; round++) {
                StoreSync sync = round % 2 ? STORE_SYNC_ALWAYS : STORE_SYNC_PERIODIC;
                uint64_t seed = 17 + round, now = T0, ref_now = T0;
                unsigned batches = MODEL_BATCHES - 37 * round; /* killed at different points */
                char killed_name[32], ref_name[32];
                StoreOptions killed, ref;
                int pipefd[2], status;
                pid_t pid;
                char c;

                snprintf(killed_name, sizeof killed_name, "killed-%u", round);
                snprintf(ref_name, sizeof ref_name, "ref-%u", round);
                killed = named_options(killed_name, sync, T0);
                /* the smallest segments (4 records): batches of 1 to 4 fill them to the record,
                 * rotations at every few batches */
                killed.journal_segment_size = round < 2 ? WAL_SEGMENT_SIZE_MIN : 64 * 1024;

                ck_assert_int_eq(pipe(pipefd), 0);
                pid = fork();
                ck_assert_int_ge(pid, 0);
                if (pid == 0) {
                        close(pipefd[0]);
                        (void) model_run(&killed, seed, algos, batches, &now);
                        if (write(pipefd[1], "x", 1) != 1)
                                _exit(5);
                        for (unsigned i = 0; i < 600; i++) /* bounded: killed long before */
                                sleep(1);
                        _exit(0);
                }
                close(pipefd[1]);
                ck_assert_int_eq(read(pipefd[0], &c, 1), 1);
                close(pipefd[0]);
                ck_assert_int_eq(kill(pid, SIGKILL), 0);
                ck_assert_int_eq(waitpid(pid, &status, 0), pid);
                ck_assert(WIFSIGNALED(status));

                /* the same batches on a store never killed nor reopened: what was answered */
                ref = named_options(ref_name, STORE_SYNC_NONE, T0);
                Store *b = model_run(&ref, seed, algos, batches, &ref_now);

                killed = named_options(killed_name, sync, ref_now);
                killed.journal_segment_size = round < 2 ? WAL_SEGMENT_SIZE_MIN : 64 * 1024;
                Store *a = open_with(&killed);
                for (unsigned i = 0; i < MODEL_ACTORS; i++)
                        for (unsigned j = 0; j < 2; j++) {
                                StoreHit x = apply_one(a, model_actor[i], ALGO_PEEK, 1, &algos[j], ref_now);
                                StoreHit y = apply_one(b, model_actor[i], ALGO_PEEK, 1, &algos[j], ref_now);

                                ck_assert_msg(x.res.credit == y.res.credit && x.res.reset == y.res.reset &&
                                                      x.res.allowed == y.res.allowed,
                                              "round %u, %s, algorithm %u: after the kill credit %" PRIu64
                                              " reset %" PRIu64 ", never killed %" PRIu64 " reset %" PRIu64,
                                              round, model_actor[i], j, x.res.credit, x.res.reset,
                                              y.res.credit, y.res.reset);
                        }
                store_close(a);
                store_close(b);
        }
}
END_TEST

/* The counters swept at now (the whole table, a bounded number of steps). */
static size_t sweep_at(Store *s, uint64_t now) {
        size_t total = 0, d;

        for (unsigned i = 0; i < 8; i++) {
                ck_assert_int_ge(store_sweep(s, now, 1U << 20, &d), 0);
                total += d;
        }
        return total;
}

/* What a batch leaves in the table, by value: an all-or-nothing group denied by its FIRST
 * hit charges none of the others; a TAKE above the capacity creates no counter; RESET says
 * whether it deleted a live counter; a counter expires exactly at its window's end. */
START_TEST (test_batch_leaves_by_value) {
        StoreOptions o = named_options("values", STORE_SYNC_NONE, T0);
        Store *s = open_with(&o);
        StoreHit b[3], h;

        /* group 7: denied first (TAKE 6 of 5), then two allowed alone */
        b[0] = algo_hit("g-deny", ALGO_TAKE, 6, NULL);
        b[1] = algo_hit("g-ok", ALGO_TAKE, 1, NULL);
        b[2] = algo_hit("g-ok", ALGO_TAKE, 2, NULL);
        b[0].group = b[1].group = b[2].group = 7;
        ck_assert_int_eq(store_apply(s, b, 3, T0), 0);
        ck_assert(!b[0].res.allowed);
        ck_assert_int_eq(b[0].res.retry, -1);
        ck_assert(b[1].res.allowed && b[1].res.credit == 4); /* each decided as if alone */
        ck_assert(b[2].res.allowed && b[2].res.credit == 2);
        ck_assert_uint_eq(stat_counters(s), 0); /* none applied, and the denied TAKE created nothing */
        h = apply_one(s, "g-ok", ALGO_TAKE, 1, NULL, T0);
        ck_assert_uint_eq(h.res.credit, 4);

        /* a TAKE above the capacity, alone: denied for ever, no counter left behind */
        h = apply_one(s, "too-big", ALGO_TAKE, 6, NULL, T0);
        ck_assert(!h.res.allowed);
        ck_assert_int_eq(h.res.retry, -1);
        ck_assert_uint_eq(stat_counters(s), 1); /* g-ok only */

        /* RESET: credit 1 when a live counter was deleted, 0 for an expired one */
        h = apply_one(s, "g-ok", ALGO_RESET, 0, NULL, T0 + 1);
        ck_assert_uint_eq(h.res.credit, 1);
        (void) apply_one(s, "old", ALGO_TAKE, 1, NULL, T0);
        h = apply_one(s, "old", ALGO_RESET, 0, NULL, T0 + 61 * SEC);
        ck_assert(h.res.allowed);
        ck_assert_uint_eq(h.res.credit, 0);
        ck_assert_uint_eq(stat_counters(s), 0);

        /* expiry at the window's end exactly (fixed window: T0 + 60 s), not a microsecond later */
        (void) apply_one(s, "w", ALGO_TAKE, 1, NULL, T0);
        ck_assert_uint_eq(sweep_at(s, T0 + 60 * SEC - 1), 0);
        ck_assert_uint_eq(sweep_at(s, T0 + 60 * SEC), 1);
        ck_assert_uint_eq(stat_counters(s), 0);
        store_close(s);
}
END_TEST

/* The maintenance call that reaps a finished checkpoint starts no other one unless the journal
 * since it calls for one: the interval since that checkpoint is counted from its end, not
 * from before it (once the journal's few new records made each reap start the next
 * checkpoint at once, and under load the checkpoints ran back to back). */
START_TEST (test_maintain_reap_waits) {
        StoreOptions o = options(STORE_SYNC_NONE);
        int r = 0;
        Store *s;

        o.checkpoint_journal_max = 64 * 1024; /* 1365 records */
        s = open_with(&o);
        hit_many(s, "r-", 0, 2000, 3600, T0, 0);
        ck_assert_int_eq(store_maintain(s, T0), 0); /* starts one */
        ck_assert(stats(s).checkpoint_running);
        hit_many(s, "r-", 2000, 2100, 3600, T0, 0); /* far below the threshold */
        for (unsigned i = 0; i < 10000 && (r = store_maintain(s, T0)) == 0; i++)
                nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
        ck_assert_int_eq(r, 1); /* reaped */
        ck_assert_uint_eq(stats(s).commits, 1);
        ck_assert_msg(!stats(s).checkpoint_running, "a checkpoint started again at the reap");
        store_close(s);
}
END_TEST

/* ---- snapshot checkpoints (format version 3) ---- */

static void make_tmpdir_snapshot(void) {
        make_tmpdir();
        snapshot_mode = true;
}

/* data.mdb's format version, read with LMDB directly. */
static int db_version(void) {
        char path[PATH_MAX], ver[8] = "";
        MDB_env *env;
        MDB_txn *txn;
        MDB_dbi dbi;
        MDB_val k = { .mv_size = 7, .mv_data = (char *) "version" }, v;

        ck_assert_int_eq(mdb_env_create(&env), 0);
        ck_assert_int_eq(mdb_env_set_maxdbs(env, 4), 0);
        ck_assert_int_eq(mdb_env_open(env, db_path(path, sizeof path, NULL), MDB_RDONLY, 0600), 0);
        ck_assert_int_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
        ck_assert_int_eq(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
        ck_assert_int_eq(mdb_get(txn, dbi, &k, &v), 0);
        ck_assert_uint_lt(v.mv_size, sizeof ver);
        memcpy(ver, v.mv_data, v.mv_size);
        mdb_txn_abort(txn);
        mdb_env_close(env);
        return atoi(ver);
}

static unsigned count_segments(void) {
        char path[PATH_MAX];
        struct dirent *d;
        unsigned n = 0;
        DIR *dir = opendir(db_path(path, sizeof path, NULL));

        ck_assert_ptr_nonnull(dir);
        while ((d = readdir(dir)))
                n += strncmp(d->d_name, "wal-", 4) == 0 && !strstr(d->d_name, ".new");
        closedir(dir);
        return n;
}

/* Every counter hit_many(prefix, from, to) made, with one hit each: 4 credits of 5 left. */
static void expect_many(Store *s, const char *prefix, unsigned from, unsigned to, uint64_t credit) {
        for (unsigned i = from; i < to; i++) {
                char key[32];

                snprintf(key, sizeof key, "%s%u", prefix, i);
                ck_assert_msg(peek_credit(s, RULE_A, key, 5, 3600, T0) == credit, "%s: %" PRIu64 " credits",
                              key, peek_credit(s, RULE_A, key, 5, 3600, T0));
        }
}

/* A version-2 database is migrated by the first snapshot: data.mdb becomes version 3 (its
 * counters gone), counters.snap holds them, the journal it covers is deleted; a divvyd started
 * without the option goes on with snapshots; every counter is there after each reopen. */
START_TEST (test_snapshot_migrates_v2) {
        char path[PATH_MAX];
        struct stat st;
        Store *s;

        snapshot_mode = false;
        s = open_store();
        hit_many(s, "m-", 0, 3000, 3600, T0, 0);
        ck_assert_int_eq(store_checkpoint(s, T0), 0); /* into data.mdb */
        hit_many(s, "m-", 1000, 4000, 3600, T0, 0);
        ck_assert_int_eq(store_sync(s), 0);
        store_close(s);
        ck_assert_int_eq(db_version(), 2);
        ck_assert_int_eq(stat(db_path(path, sizeof path, SNAPSHOT_NAME), &st), -1);
        ck_assert_int_eq(stat(db_path(path, sizeof path, "data.mdb"), &st), 0);
        ck_assert_int_gt(st.st_size, 128 * 1024); /* 3000 counters */

        snapshot_mode = true;
        s = open_store();
        hit_many(s, "m-", 3000, 5000, 3600, T0, 0);
        ck_assert_int_gt(count_segments(), 1);
        ck_assert_int_eq(store_checkpoint(s, T0), 0); /* the first snapshot */
        ck_assert_int_eq(stat(db_path(path, sizeof path, SNAPSHOT_NAME), &st), 0);
        ck_assert_int_eq(st.st_size,
                         SNAPSHOT_HEADER_SIZE + 5000 * SNAPSHOT_RECORD_SIZE + SNAPSHOT_TRAILER_SIZE);
        ck_assert_uint_eq(count_segments(), 1); /* the current one */
        ck_assert_uint_eq(stats(s).checkpoint_counters, 5000);
        ck_assert_uint_eq(stats(s).file_size, (uint64_t) st.st_size);
        hit_many(s, "m-", 4000, 6000, 3600, T0, 0); /* in the journal only */
        store_close(s);
        ck_assert_int_eq(db_version(), 3);
        ck_assert_int_eq(stat(db_path(path, sizeof path, "data.mdb"), &st), 0);
        ck_assert_int_lt(st.st_size, 64 * 1024); /* compacted: its meta only */

        snapshot_mode = false; /* the database's version decides */
        s = open_store();
        ck_assert_uint_eq(stat_counters(s), 6000);
        ck_assert_uint_eq(stats(s).checkpoint_counters, 6000); /* the last snapshot, close()'s */
        ck_assert_uint_eq(stats(s).file_size,
                          SNAPSHOT_HEADER_SIZE + 6000 * SNAPSHOT_RECORD_SIZE + SNAPSHOT_TRAILER_SIZE);
        expect_many(s, "m-", 0, 1000, 4);
        expect_many(s, "m-", 1000, 3000, 3);
        expect_many(s, "m-", 3000, 4000, 3);
        expect_many(s, "m-", 4000, 5000, 3);
        expect_many(s, "m-", 5000, 6000, 4);
        hit_many(s, "m-", 0, 10, 3600, T0, 0);
        ck_assert_int_eq(store_checkpoint(s, T0), 0);
        store_close(s);
        ck_assert_int_eq(db_version(), 3);
        s = open_store();
        expect_many(s, "m-", 0, 10, 3);
        ck_assert_uint_eq(stat_counters(s), 6000);
        store_close(s);
}
END_TEST

/* Version 1 -> 2 -> 3: the migrated counters reach the snapshot. */
START_TEST (test_snapshot_from_v1) {
        char path[PATH_MAX], err[ERRBUF] = "";
        V1StoreOptions o1 = { .path = db_path(path, sizeof path, NULL), .sync = V1_STORE_SYNC_ALWAYS };
        V1Store *v1 = NULL;
        V1StoreHit h = { .rule_id = RULE_A,
                         .actor = "alice",
                         .actor_len = 5,
                         .credit_limit = 10,
                         .reset_seconds = 3600 };
        Store *s;

        ck_assert_int_eq(v1_store_open(&o1, &v1, err, sizeof err), 0);
        ck_assert_int_eq(v1_store_apply(v1, &h, 1, T0), 0);
        v1_store_close(v1);
        s = open_store(); /* migrated to version 2 */
        expect_hit(s, RULE_A, "alice", 5, 10, 3600, T0 + SEC, true, 8, 3599);
        store_close(s); /* its last checkpoint: the first snapshot */
        ck_assert_int_eq(db_version(), 3);
        s = open_store();
        expect_hit(s, RULE_A, "alice", 5, 10, 3600, T0 + SEC, true, 7, 3599);
        store_close(s);
}
END_TEST

static void kill_hook(int point) {
        static int want = -1;

        if (want < 0)
                want = atoi(getenv("SNAPSHOT_KILL_AT"));
        if (point == want)
                raise(SIGKILL);
}

/* kill -9 in the middle of a snapshot's write (_i even) and between its complete file and the
 * rename that makes it the snapshot (_i odd), in the first snapshot (the migration from
 * version 2, _i < 2) and in a later one: the next open finds every acknowledged change, from
 * the previous checkpoint and the journal, which the dead snapshot did not release. */
START_TEST (test_snapshot_kill) {
        enum { N = 6000 };
        int point = _i % 2, status;
        bool later = _i >= 2;
        char path[PATH_MAX], v[4];
        struct stat st;
        pid_t pid;
        Store *s;

        snprintf(v, sizeof v, "%d", point);
        ck_assert_int_eq(setenv("SNAPSHOT_KILL_AT", v, 1), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                StoreOptions o = options(STORE_SYNC_NONE);

                if (later) {
                        s = open_with(&o);
                        hit_many(s, "k-", 0, N / 2, 3600, T0, 0);
                        if (store_checkpoint(s, T0) < 0)
                                _exit(1);
                        store_close(s);
                }
                o.snapshot_hook = kill_hook;
                s = open_with(&o);
                hit_many(s, "k-", 0, N, 3600, T0, 0); /* acknowledged */
                (void) store_checkpoint(s, T0);
                _exit(2); /* not reached: the hook kills */
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %d", status);
        ck_assert_int_eq(stat(db_path(path, sizeof path, SNAPSHOT_TMP_NAME), &st), 0); /* left behind */
        ck_assert_int_eq(db_version(), later ? 3 : 2);

        s = open_store();
        ck_assert_int_eq(stat(db_path(path, sizeof path, SNAPSHOT_TMP_NAME), &st), -1); /* removed */
        ck_assert_uint_eq(stat_counters(s), N);
        expect_many(s, "k-", 0, later ? N / 2 : 0, 3);
        expect_many(s, "k-", later ? N / 2 : 0, N, 4);
        ck_assert_int_eq(store_checkpoint(s, T0), 0); /* and the next snapshot succeeds */
        store_close(s);
        s = open_store();
        ck_assert_uint_eq(stat_counters(s), N);
        expect_many(s, "k-", N - 10, N, 4);
        store_close(s);
}
END_TEST

/* A snapshot damaged on disk is refused with a sentence (its checksums), as is a missing one
 * (data.mdb says version 3): no start with counters silently gone. */
START_TEST (test_snapshot_damaged_refused) {
        char path[PATH_MAX], err[ERRBUF] = "";
        uint8_t b;
        int fd;
        Store *s = open_store();

        hit_many(s, "d-", 0, 1000, 3600, T0, 0);
        store_close(s);
        db_path(path, sizeof path, SNAPSHOT_NAME);
        fd = open(path, O_RDWR | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(pread(fd, &b, 1, SNAPSHOT_HEADER_SIZE + 500 * SNAPSHOT_RECORD_SIZE + 20), 1);
        b ^= 0x10;
        ck_assert_int_eq(pwrite(fd, &b, 1, SNAPSHOT_HEADER_SIZE + 500 * SNAPSHOT_RECORD_SIZE + 20), 1);
        close(fd);
        ck_assert_int_eq(try_open(err, sizeof err), -EBADMSG);
        ck_assert_msg(strstr(err, "/db/counters.snap: its records are damaged (bad checksum)"), "%s", err);

        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(try_open(err, sizeof err), -EBADMSG);
        ck_assert_msg(strstr(err, "/db/counters.snap is missing: data.mdb (format version 3)"), "%s", err);
}
END_TEST

/* A snapshot that cannot be written (here its temporary file cannot be made) changes nothing:
 * the previous snapshot stays, the journal is kept, the failure is reported and retried, and
 * the counters are all there after a restart. */
START_TEST (test_snapshot_failure_keeps_journal) {
        char path[PATH_MAX];
        StoreOptions o = options(STORE_SYNC_NONE);
        Store *s;

        o.close_checkpoint_usec = STORE_CLOSE_CHECKPOINT_OFF;
        s = open_with(&o);
        hit_many(s, "f-", 0, 2000, 3600, T0, 0);
        ck_assert_int_eq(store_checkpoint(s, T0), 0);
        hit_many(s, "f-", 1000, 3000, 3600, T0, 0);
        ck_assert_int_eq(mkdir(db_path(path, sizeof path, SNAPSHOT_TMP_NAME), 0700), 0);
        ck_assert_int_lt(store_checkpoint(s, T0), 0);
        ck_assert_msg(strstr(store_checkpoint_error(s), SNAPSHOT_TMP_NAME), "%s", store_checkpoint_error(s));
        ck_assert_uint_gt(count_segments(), 1);
        store_close(s);
        ck_assert_int_eq(rmdir(path), 0);

        s = open_store();
        ck_assert_uint_eq(stat_counters(s), 3000);
        expect_many(s, "f-", 0, 1000, 4);
        expect_many(s, "f-", 1000, 2000, 3);
        expect_many(s, "f-", 2000, 3000, 4);
        store_close(s);
}
END_TEST

/* A long journal and a stop whose last snapshot ran out of its bound (here: no time at all):
 * the next start loads the previous snapshot and replays the whole journal; every acknowledged
 * change is there. */
START_TEST (test_snapshot_stop_out_of_bound) {
        enum { N = 20000 };
        StoreOptions o = options(STORE_SYNC_PERIODIC);
        Store *s;

        o.close_checkpoint_usec = 1; /* the last snapshot stops at its deadline */
        s = open_with(&o);
        hit_many(s, "b-", 0, N / 4, 3600, T0, 0);
        ck_assert_int_eq(store_checkpoint(s, T0), 0);
        for (unsigned k = 0; k < 3; k++)
                hit_many(s, "b-", 0, N, 3600, T0, 0);
        store_close(s);
        s = open_store();
        ck_assert_uint_eq(stat_counters(s), N);
        expect_many(s, "b-", 0, N / 4, 1);
        expect_many(s, "b-", N / 4, N, 2);
        store_close(s);
}
END_TEST

static Suite *store_suite(void) {
        Suite *su = suite_create("store");
        TCase *tc = tcase_create("core");

        store_test_fixtures(tc, "check-store", make_tmpdir);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_sync_strings);
        tcase_add_test(tc, test_create_decrement_exhaust);
        tcase_add_test(tc, test_expiry_renewal);
        tcase_add_test(tc, test_reset_left_rounding);
        tcase_add_test(tc, test_batch_in_order);
        tcase_add_test(tc, test_invalid_hits);
        tcase_add_test(tc, test_distinct_counters);
        tcase_add_test(tc, test_reopen);
        tcase_add_test(tc, test_incompatible_version);
        tcase_add_test(tc, test_foreign_lmdb);
        tcase_add_loop_test(tc, test_corrupt_random, 0, 2);
        tcase_add_loop_test(tc, test_corrupt_truncated, 0, 3);
        tcase_add_test(tc, test_verify_sigchld_ignored);
        tcase_add_test(tc, test_sweep);
        tcase_add_test(tc, test_sweep_pass);
        tcase_add_test(tc, test_kill_child);
        tcase_add_test(tc, test_migrate_v1);
        tcase_add_test(tc, test_journal_gap_refused);
        tcase_add_test(tc, test_journal_damage_replayed_past);
        tcase_add_test(tc, test_journal_damage_at_checkpoint);
        tcase_add_test(tc, test_format_v1_layout);
        tcase_add_test(tc, test_format_v1_counters);
        tcase_add_test(tc, test_id_key);
        tcase_add_test(tc, test_undo_on_journal_full);
        tcase_add_test(tc, test_open_on_full_disk);
        tcase_add_test(tc, test_group_commit_open_on_full_disk);
        tcase_add_test(tc, test_file_modes);
        tcase_add_test(tc, test_group_all_or_nothing);
        tcase_add_test(tc, test_max_counters_refuses_only_new);
        tcase_add_test(tc, test_table_enomem_fails_one_request);
        tcase_add_test(tc, test_replay_fits_running_table);
        tcase_add_test(tc, test_algorithm_dispatch);
        tcase_add_test(tc, test_checkpoint_passes);
        tcase_add_test(tc, test_close_checkpoints_journal);
        tcase_add_test(tc, test_checkpoint_slices_newest);
        tcase_add_test(tc, test_checkpoint_map_cap_retry);
        tcase_add_test(tc, test_submit_completes);
        tcase_add_test(tc, test_group_commit_waits_for_sync);
        tcase_add_test(tc, test_group_commit_sync_time);
        tcase_add_test(tc, test_group_commit_sync_failure);
        tcase_add_test(tc, test_apply_sync_failure_undone);
        tcase_add_test(tc, test_group_commit_close_drains);
        tcase_add_test(tc, test_group_commit_rotations);
        tcase_add_test(tc, test_verify_creates_usable_lock);
        tcase_add_test(tc, test_checkpoint_start_failure_backoff);
        tcase_add_test(tc, test_checkpoint_release_retried);
        tcase_add_test(tc, test_sweep_shrink_no_stall);
        tcase_add_test(tc, test_open_errors);
        tcase_add_test(tc, test_dir_created);
        tcase_add_test(tc, test_clock_back_then_clean_stop);
        tcase_add_test(tc, test_batch_larger_than_segment);
        tcase_add_test(tc, test_verbs_replayed_after_kill);
        tcase_add_test(tc, test_batch_leaves_by_value);
        tcase_add_test(tc, test_maintain_reap_waits);
        suite_add_tcase(su, tc);

        /* snapshot checkpoints: their own tests, and the durability tests again */
        tc = tcase_create("snapshot");
        store_test_fixtures(tc, "check-store", make_tmpdir_snapshot);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_snapshot_migrates_v2);
        tcase_add_test(tc, test_snapshot_from_v1);
        tcase_add_loop_test(tc, test_snapshot_kill, 0, 4);
        tcase_add_test(tc, test_snapshot_damaged_refused);
        tcase_add_test(tc, test_snapshot_failure_keeps_journal);
        tcase_add_test(tc, test_snapshot_stop_out_of_bound);
        tcase_add_test(tc, test_reopen);
        tcase_add_test(tc, test_kill_child);
        tcase_add_test(tc, test_migrate_v1);
        tcase_add_test(tc, test_verbs_replayed_after_kill);
        tcase_add_test(tc, test_close_checkpoints_journal);
        tcase_add_test(tc, test_max_counters_refuses_only_new);
        tcase_add_test(tc, test_replay_fits_running_table);
        tcase_add_test(tc, test_maintain_reap_waits);
        suite_add_tcase(su, tc);
        return su;
}

int main(void) {
        return check_run_suite(store_suite());
}
