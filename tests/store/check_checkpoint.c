/* SPDX-License-Identifier: MIT */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <lmdb.h> /* test-only: to forge foreign databases and look at the layout */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/hash.h"
#include "store/checkpoint.h"
#include "v1-store.h"
#include "check-run.h"
#include "store-test-util.h"

#define SEC        1000000ULL            /* usec per second */
#define T0         (1700000000ULL * SEC) /* an arbitrary wall-clock start */
#define ERRBUF     512
#define LONG_ACTOR 500 /* bytes: longer than STORE_ACTOR_INLINE_MAX, so version 1 hashed it into its key */

static const uint8_t RULE_A[RULE_ID_SIZE] = { 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8,
                                              0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0xa0 };
static const uint8_t RULE_B[RULE_ID_SIZE] = { 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8,
                                              0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf, 0xb0 };

/* ---- fixture: one temporary directory per test, the store in its "db" ---- */

static char dbdir[sizeof tmpdir + 8];

static void make_tmpdir(void) {
        store_test_make_tmpdir("check-checkpoint");
        snprintf(dbdir, sizeof dbdir, "%s/db", tmpdir);
}

/* The id key of the database opened last (v1_id() hashes under it). */
static uint8_t id_key[CHECKPOINT_ID_KEY_SIZE];

static Checkpoint *open_opts(const CheckpointOptions *o) {
        char err[ERRBUF] = "";
        Checkpoint *c = NULL;
        int r;

        r = checkpoint_open(dbdir, o, &c, err, sizeof err);
        ck_assert_msg(r == 0, "checkpoint_open: %d %s", r, err);
        ck_assert_ptr_nonnull(c);
        checkpoint_id_key(c, id_key);
        return c;
}

static Checkpoint *open_default(void) {
        return open_opts(NULL);
}

/* Expects checkpoint_open() to fail with error, its sentence containing what. */
static void expect_refused(const CheckpointOptions *o, int error, const char *what) {
        char err[ERRBUF] = "";
        Checkpoint *c = NULL;
        int r;

        r = checkpoint_open(dbdir, o, &c, err, sizeof err);
        ck_assert_int_eq(r, error);
        ck_assert_ptr_null(c);
        ck_assert_msg(strstr(err, what), "error '%s' lacks '%s'", err, what);
}

/* Deterministic, well-spread ids (splitmix64). */
static uint64_t mix(uint64_t x) {
        x += 0x9e3779b97f4a7c15ULL;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
        return x ^ (x >> 31);
}

static CounterRecord rec(uint64_t i, uint64_t w0, uint64_t w1) {
        return (CounterRecord){ .id = { .lo = mix(2 * i), .hi = mix(2 * i + 1) },
                                .algorithm = COUNTER_FIXED_WINDOW,
                                .state = { .w0 = w0, .w1 = w1 } };
}

/* What checkpoint_load() returned, in order. */
typedef struct Loaded {
        CounterRecord *r;
        size_t n, allocated;
} Loaded;

static int collect(const CounterRecord *r, void *u) {
        Loaded *l = u;

        if (l->n == l->allocated) {
                l->allocated = l->allocated ? 2 * l->allocated : 64;
                l->r = realloc(l->r, l->allocated * sizeof *l->r);
                ck_assert_ptr_nonnull(l->r);
        }
        l->r[l->n++] = *r;
        return 0;
}

static Loaded load(Checkpoint *c, uint64_t now) {
        Loaded l = { 0 };

        ck_assert_int_eq(checkpoint_load(c, now, collect, &l), 0);
        for (size_t i = 1; i < l.n; i++)
                ck_assert_int_lt(counter_id_compare(&l.r[i - 1].id, &l.r[i].id), 0);
        return l;
}

static const CounterRecord *find(const Loaded *l, const CounterId *id) {
        for (size_t i = 0; i < l->n; i++)
                if (counter_id_compare(&l->r[i].id, id) == 0)
                        return l->r + i;
        return NULL;
}

static void expect_record(const Loaded *l, const CounterRecord *want) {
        const CounterRecord *got = find(l, &want->id);

        ck_assert_msg(got, "record %016llx%016llx missing", (unsigned long long) want->id.hi,
                      (unsigned long long) want->id.lo);
        ck_assert_uint_eq(got->algorithm, want->algorithm);
        ck_assert_uint_eq(got->state.w0, want->state.w0);
        ck_assert_uint_eq(got->state.w1, want->state.w1);
}

/* Loads at now: exactly the n records want. */
static void expect_exactly(Checkpoint *c, uint64_t now, const CounterRecord *want, size_t n) {
        Loaded l = load(c, now);

        ck_assert_uint_eq(l.n, n);
        for (size_t i = 0; i < n; i++)
                expect_record(&l, want + i);
        free(l.r);
}

static uint64_t counters(Checkpoint *c) {
        CheckpointStats st;

        ck_assert_int_eq(checkpoint_get_stats(c, &st), 0);
        return st.counters;
}

/* ---- write, load, reopen ---- */

START_TEST (test_round_trip) {
        enum { N = 2000 };
        CounterRecord *rs = calloc(N, sizeof *rs), *want = calloc(N, sizeof *want);
        Checkpoint *c = open_default();
        CheckpointStats st;
        Loaded l;

        ck_assert_ptr_nonnull(rs);
        ck_assert_ptr_nonnull(want);
        for (size_t i = 0; i < N; i++)
                want[i] = rs[i] = rec(i, T0 + (i + 1) * SEC, i * 7);
        want[5].algorithm = rs[5].algorithm = COUNTER_TOKEN_BUCKET;
        ck_assert_int_eq(checkpoint_write(c, rs, N, 17, T0), 0);
        ck_assert_uint_eq(checkpoint_journal_seq(c), 17);

        expect_exactly(c, T0, want, N);
        ck_assert_int_eq(checkpoint_get_stats(c, &st), 0);
        ck_assert_uint_eq(st.counters, N);
        ck_assert_uint_eq(st.checkpoints, 1);
        ck_assert_uint_eq(st.journal_seq, 17);
        ck_assert_uint_gt(st.file_size, 0);
        ck_assert_uint_ge(st.map_size, st.data_size);
        checkpoint_close(c);

        /* reopened: the same counters, the same journal sequence */
        c = open_default();
        ck_assert_uint_eq(checkpoint_journal_seq(c), 17);
        expect_exactly(c, T0, want, N);

        /* later loads skip what has expired since: counter i lives until T0 + i + 1 s */
        l = load(c, T0 + 1000 * SEC);
        ck_assert_uint_eq(l.n, N - 1000);
        free(l.r);

        /* an empty checkpoint still moves the journal sequence */
        ck_assert_int_eq(checkpoint_write(c, NULL, 0, 99, T0), 0);
        checkpoint_close(c);
        c = open_default();
        ck_assert_uint_eq(checkpoint_journal_seq(c), 99);
        checkpoint_close(c);
        free(rs);
        free(want);
}
END_TEST

START_TEST (test_last_record_wins) {
        Checkpoint *c = open_default();
        CounterRecord rs[] = {
                rec(1, T0 + 10 * SEC, 1),
                rec(2, T0 + 10 * SEC, 2),
                rec(1, T0 + 20 * SEC, 3), /* 1: last wins */
                rec(3, T0 + 10 * SEC, 4),
                rec(3, 0, 0), /* 3: deleted */
                rec(4, 0, 0),
                rec(4, T0 + 30 * SEC, 5), /* 4: recreated */
                rec(1, T0 + 40 * SEC, 6),
                rec(5, T0 - SEC, 7), /* 5: expired */
        };
        CounterRecord w1 = rec(1, T0 + 40 * SEC, 6), w2 = rec(2, T0 + 10 * SEC, 2),
                      w4 = rec(4, T0 + 30 * SEC, 5);
        CounterRecord r3 = rec(3, 0, 0), r5 = rec(5, 0, 0);
        Loaded l;

        ck_assert_int_eq(checkpoint_write(c, rs, sizeof rs / sizeof rs[0], 1, T0), 0);
        l = load(c, T0);
        ck_assert_uint_eq(l.n, 3);
        expect_record(&l, &w1);
        expect_record(&l, &w2);
        expect_record(&l, &w4);
        ck_assert_ptr_null(find(&l, &r3.id));
        ck_assert_ptr_null(find(&l, &r5.id));
        free(l.r);
        ck_assert_uint_eq(counters(c), 3);
        checkpoint_close(c);
}
END_TEST

START_TEST (test_deletions) {
        Checkpoint *c = open_default();
        CounterRecord rs[] = { rec(1, T0 + 10 * SEC, 1), rec(2, T0 + 10 * SEC, 2),
                               rec(3, T0 + 10 * SEC, 3) };
        CounterRecord del[] = {
                rec(1, 0, 0),        /* a reset */
                rec(2, T0 + SEC, 9), /* expired by the time of this checkpoint: deleted too */
                rec(7, 0, 0),        /* never checkpointed: nothing to do */
        };
        CounterRecord w3 = rec(3, T0 + 10 * SEC, 3);
        Loaded l;

        ck_assert_int_eq(checkpoint_write(c, rs, 3, 1, T0), 0);
        ck_assert_uint_eq(counters(c), 3);
        ck_assert_int_eq(checkpoint_write(c, del, 3, 2, T0 + 2 * SEC), 0);
        ck_assert_uint_eq(counters(c), 1);
        l = load(c, T0 + 2 * SEC);
        ck_assert_uint_eq(l.n, 1);
        expect_record(&l, &w3);
        free(l.r);

        /* a record with a bad algorithm is refused before anything is written */
        rs[0].algorithm = _COUNTER_ALGORITHM_MAX;
        ck_assert_int_eq(checkpoint_write(c, rs, 3, 3, T0), -EINVAL);
        ck_assert_uint_eq(checkpoint_journal_seq(c), 2);
        checkpoint_close(c);
}
END_TEST

/* ---- the map cap ---- */

enum { SMALL = 500, BIG = 100000 };

/* On a map of at most 2 MB: checkpoints SMALL counters (journal_seq 5), then fails to
 * checkpoint BIG (they need about 5 MB). Returns those BIG records. */
static CounterRecord *overflow(Checkpoint *c) {
        CounterRecord *rs = calloc(BIG, sizeof *rs);

        ck_assert_ptr_nonnull(rs);
        for (size_t i = 0; i < SMALL; i++)
                rs[i] = rec(i, T0 + 10 * SEC, i);
        ck_assert_int_eq(checkpoint_write(c, rs, SMALL, 5, T0), 0);
        for (size_t i = 0; i < BIG; i++)
                rs[i] = rec(i, T0 + 20 * SEC, i + 1);
        ck_assert_int_eq(checkpoint_write(c, rs, BIG, 6, T0), -ENOSPC);
        ck_assert_uint_eq(checkpoint_journal_seq(c), 5);
        return rs;
}

/* ---- chunked checkpoints ---- */

/* Chunked: transactions of 7 records, never splitting the records of one id. */
START_TEST (test_chunked_write) {
        enum { IDS = 40, PER_ID = 3 };
        CheckpointOptions o = { .txn_records_max = 7 };
        CounterRecord rs[IDS * PER_ID], want[IDS];
        Checkpoint *c = open_opts(&o);

        for (size_t k = 0; k < PER_ID; k++) /* in journal order: round k of every id */
                for (size_t i = 0; i < IDS; i++)
                        rs[k * IDS + i] = rec(i, T0 + (k + 1) * SEC, k * 100 + i);
        for (size_t i = 0; i < IDS; i++)
                want[i] = rec(i, T0 + PER_ID * SEC, (PER_ID - 1) * 100 + i);
        ck_assert_int_eq(checkpoint_write(c, rs, IDS * PER_ID, 3, T0), 0);
        ck_assert_uint_eq(checkpoint_journal_seq(c), 3);
        expect_exactly(c, T0, want, IDS);

        /* deletions of every other id, chunked too */
        for (size_t i = 0; i < IDS; i++)
                rs[i] = rec(i, i % 2 ? 0 : T0 + 9 * SEC, i);
        ck_assert_int_eq(checkpoint_write(c, rs, IDS, 4, T0), 0);
        ck_assert_uint_eq(counters(c), IDS / 2);
        checkpoint_close(c);
}
END_TEST

/* Chunked and out of room: the transactions that committed stay, journal_seq does not move,
 * so a replay of the journal from it still yields every counter's last state. */
START_TEST (test_chunked_enospc) {
        CheckpointOptions o = { .map_size = 1 << 20, .map_size_max = 2 << 20, .txn_records_max = 1000 };
        Checkpoint *c = open_opts(&o);
        CounterRecord *rs = overflow(c);
        Loaded l;

        checkpoint_close(c);

        c = open_opts(&o);
        ck_assert_uint_eq(checkpoint_journal_seq(c), 5);
        l = load(c, T0);
        ck_assert_uint_gt(l.n, SMALL); /* some chunks committed */
        ck_assert_uint_lt(l.n, BIG);
        free(l.r);
        checkpoint_close(c);
        free(rs);
}
END_TEST

/* ---- the expiry walk ---- */

START_TEST (test_expire_walk_bounded) {
        enum { N = 100, MAX = 7 };
        CheckpointOptions o = { .expire_max = 1 };
        CounterRecord rs[N];
        size_t deleted, total = 0, calls = 0;
        Checkpoint *c;
        Loaded l;
        int r;

        c = open_opts(&o);
        for (size_t i = 0; i < N; i++) /* every other counter expires at T0 + 10 s */
                rs[i] = rec(i, T0 + (i % 2 ? 10 : 1000) * SEC, i);
        ck_assert_int_eq(checkpoint_write(c, rs, N, 1, T0), 0);
        ck_assert_uint_eq(counters(c), N);

        /* a walk examines at most MAX entries, so it deletes at most MAX; it wraps after N */
        do {
                r = checkpoint_expire(c, T0 + 20 * SEC, MAX, &deleted);
                ck_assert_int_ge(r, 0);
                ck_assert_uint_le(deleted, MAX);
                total += deleted;
                calls++;
        } while (r == 0);
        ck_assert_uint_eq(calls, (N + MAX - 1) / MAX);
        ck_assert_uint_eq(total, N / 2);
        ck_assert_uint_eq(counters(c), N / 2);

        /* a pass over what is left deletes nothing more */
        ck_assert_int_eq(checkpoint_expire(c, T0 + 20 * SEC, 2 * N, &deleted), 1);
        ck_assert_uint_eq(deleted, 0);
        l = load(c, T0);
        ck_assert_uint_eq(l.n, N / 2);
        for (size_t i = 0; i < l.n; i++)
                ck_assert_uint_eq(l.r[i].state.w0, T0 + 1000 * SEC);
        free(l.r);
        ck_assert_int_eq(checkpoint_expire(c, T0, 0, &deleted), 0);
        ck_assert_uint_eq(deleted, 0);
        checkpoint_close(c);
}
END_TEST

START_TEST (test_expire_walk_in_write) {
        enum { N = 50, MAX = 8 };
        CheckpointOptions o = { .expire_max = MAX };
        CounterRecord rs[N];
        CheckpointStats st;
        Checkpoint *c;

        c = open_opts(&o);
        for (size_t i = 0; i < N; i++)
                rs[i] = rec(i, T0 + 10 * SEC, i);
        ck_assert_int_eq(checkpoint_write(c, rs, N, 1, T0), 0);
        ck_assert_uint_eq(counters(c), N);
        /* every later checkpoint walks MAX more entries, all expired by now */
        for (unsigned k = 1; k <= 3; k++) {
                ck_assert_int_eq(checkpoint_write(c, NULL, 0, 1 + k, T0 + 20 * SEC), 0);
                ck_assert_uint_eq(counters(c), N - k * MAX);
        }
        ck_assert_int_eq(checkpoint_get_stats(c, &st), 0);
        ck_assert_uint_eq(st.expired_total, 3 * MAX);
        checkpoint_close(c);
}
END_TEST

START_TEST (test_enospc_keeps_previous) {
        CheckpointOptions o = { .map_size = 1 << 20, .map_size_max = 2 << 20 };
        Checkpoint *c = open_opts(&o);
        CounterRecord *rs = overflow(c);
        CheckpointStats st;
        Loaded l;

        ck_assert_int_eq(checkpoint_get_stats(c, &st), 0);
        ck_assert_uint_le(st.map_size, (2 << 20) - (2 << 20) / 8);
        l = load(c, T0);
        ck_assert_uint_eq(l.n, SMALL);
        for (size_t i = 0; i < SMALL; i++) {
                CounterRecord w = rec(i, T0 + 10 * SEC, i);
                expect_record(&l, &w);
        }
        free(l.r);
        checkpoint_close(c);

        /* reopened as it was; with a larger cap the retry succeeds */
        o.map_size_max = 64 << 20;
        c = open_opts(&o);
        ck_assert_uint_eq(checkpoint_journal_seq(c), 5);
        ck_assert_int_eq(checkpoint_write(c, rs, BIG, 6, T0), 0);
        ck_assert_uint_eq(counters(c), BIG);
        ck_assert_int_eq(checkpoint_get_stats(c, &st), 0);
        ck_assert_uint_gt(st.map_grows, 0);
        checkpoint_close(c);
        free(rs);
}
END_TEST

/* A checkpoint killed in the middle of its transaction leaves the previous one: the child
 * writes checkpoint after checkpoint, the k-th giving every counter w1 = k and journal_seq
 * k + 2, until it is killed; whichever was the last to commit, all of it is there and
 * nothing of the one after. */
START_TEST (test_killed_write_keeps_previous) {
        enum { N = 200000 };
        CounterRecord *rs = calloc(N, sizeof *rs);
        Checkpoint *c;
        Loaded l;
        int fds[2], status;
        pid_t pid;
        char b;

        ck_assert_ptr_nonnull(rs);
        c = open_default();
        for (size_t i = 0; i < 100; i++)
                rs[i] = rec(i, T0 + 10 * SEC, i);
        ck_assert_int_eq(checkpoint_write(c, rs, 100, 1, T0), 0);
        checkpoint_close(c);

        ck_assert_int_eq(pipe(fds), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                c = open_default();
                (void) !write(fds[1], "x", 1);
                for (uint64_t k = 0;; k++) { /* until killed, most likely inside a transaction */
                        for (size_t i = 0; i < N; i++)
                                rs[i] = rec(i, T0 + 20 * SEC, k);
                        (void) checkpoint_write(c, rs, N, k + 2, T0);
                }
        }
        close(fds[1]);
        ck_assert_int_eq(read(fds[0], &b, 1), 1);
        close(fds[0]);
        usleep(300 * 1000);
        kill(pid, SIGKILL);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);

        c = open_default();
        l = load(c, T0);
        if (checkpoint_journal_seq(c) == 1) {
                ck_assert_uint_eq(l.n, 100);
                ck_assert_uint_eq(l.r[0].state.w0, T0 + 10 * SEC);
        } else { /* the last checkpoint that committed, whole */
                ck_assert_uint_eq(l.n, N);
                for (size_t i = 0; i < l.n; i++) {
                        ck_assert_uint_eq(l.r[i].state.w0, T0 + 20 * SEC);
                        ck_assert_uint_eq(l.r[i].state.w1, checkpoint_journal_seq(c) - 2);
                }
        }
        free(l.r);
        checkpoint_close(c);
        free(rs);
}
END_TEST

/* ---- refusing what is not ours ---- */

/* An LMDB environment in dbdir with one named database holding key -> value. */
static void forge(const char *db, const char *key, const char *value) {
        MDB_env *env;
        MDB_txn *txn;
        MDB_dbi dbi;
        MDB_val k = { .mv_size = strlen(key), .mv_data = (void *) key };
        MDB_val v = { .mv_size = strlen(value), .mv_data = (void *) value };

        ck_assert_int_eq(mkdir(dbdir, 0750) == 0 || errno == EEXIST, 1);
        ck_assert_int_eq(mdb_env_create(&env), 0);
        ck_assert_int_eq(mdb_env_set_maxdbs(env, 8), 0);
        ck_assert_int_eq(mdb_env_open(env, dbdir, 0, 0640), 0);
        ck_assert_int_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
        ck_assert_int_eq(mdb_dbi_open(txn, db, MDB_CREATE, &dbi), 0);
        ck_assert_int_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
        ck_assert_int_eq(mdb_txn_commit(txn), 0);
        mdb_env_close(env);
}

/* lock.mdb is allocated before LMDB maps it (issue #30: a new one on a full tmpfs was a SIGBUS):
 * a new one whole, 0600; one LMDB made (sparse beyond its first page) keeps its size, since
 * every process sizes its reader table by it, and gets its blocks. */
START_TEST (test_lock_preallocated) {
        char lock[sizeof dbdir + 16], err[ERRBUF] = "";
        struct stat st;
        int fd;

        snprintf(lock, sizeof lock, "%s/lock.mdb", dbdir);
        checkpoint_close(open_default());
        ck_assert_int_eq(stat(lock, &st), 0);
        ck_assert_int_eq(st.st_mode & 07777, 0600);
        ck_assert_int_ge(st.st_size, 8192);
        ck_assert_int_ge((off_t) st.st_blocks * 512, st.st_size); /* no hole */

        ck_assert_int_eq(unlink(lock), 0);
        fd = open(lock, O_RDWR | O_CREAT, 0600);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(ftruncate(fd, 3 * 4096), 0); /* as LMDB makes it: a hole */
        close(fd);
        ck_assert_int_eq(checkpoint_lock_prepare(dbdir, err, sizeof err), 0);
        ck_assert_int_eq(stat(lock, &st), 0);
        ck_assert_int_eq(st.st_size, 3 * 4096);
        ck_assert_int_ge((off_t) st.st_blocks * 512, st.st_size);
        checkpoint_close(open_default());
}
END_TEST

START_TEST (test_refuse_foreign) {
        forge("things", "hello", "world");
        expect_refused(NULL, -EPROTO, "not a divvyd counter store");
}
END_TEST

START_TEST (test_refuse_wrong_magic) {
        forge("meta", "magic", "another program");
        expect_refused(NULL, -EPROTO, "not a divvyd counter store");
}
END_TEST

START_TEST (test_refuse_unknown_version) {
        Checkpoint *c = open_default();

        checkpoint_close(c);
        forge("meta", "version", "4");
        expect_refused(NULL, -EPROTO, "version '4' is not supported");
        forge("meta", "version", "two");
        expect_refused(NULL, -EPROTO, "version 'two'");
}
END_TEST

START_TEST (test_refuse_garbage) {
        char p[PATH_MAX + 64];
        FILE *f;

        ck_assert_int_eq(mkdir(dbdir, 0750), 0);
        snprintf(p, sizeof p, "%s/data.mdb", dbdir);
        f = fopen(p, "w");
        ck_assert_ptr_nonnull(f);
        for (int i = 0; i < 4096; i++)
                fputc('x', f);
        fclose(f);
        expect_refused(NULL, -EBADMSG, "not a valid LMDB database");
}
END_TEST

/* Version 1 refuses version 2 (so an older divvyd cannot damage a migrated store). */
START_TEST (test_v1_refuses_v2) {
        V1StoreOptions so = { .path = dbdir, .sync = V1_STORE_SYNC_ALWAYS };
        Checkpoint *c = open_default();
        char err[ERRBUF] = "";
        V1Store *s = NULL;

        checkpoint_close(c);
        ck_assert_int_eq(v1_store_open(&so, &s, err, sizeof err), -EPROTO);
        ck_assert_ptr_null(s);
        ck_assert_ptr_nonnull(strstr(err, "version 2"));
}
END_TEST

/* ---- migration from version 1 ---- */

/* The v2 id of a v1 counter, from the v1 key built by hand (store.c's layout: rule id, tag 0
 * no actor / 1 verbatim / 2 hashed, then the actor or its hash128()), under the secret id key
 * of the database opened last: the migration must hash under the key it stores. */
static CounterId v1_id(const uint8_t *rule, const char *actor, size_t len) {
        uint8_t key[RULE_ID_SIZE + 1 + V1_STORE_ACTOR_INLINE_MAX];
        size_t klen = RULE_ID_SIZE + 1;

        memcpy(key, rule, RULE_ID_SIZE);
        if (!actor)
                key[RULE_ID_SIZE] = 0;
        else if (len <= V1_STORE_ACTOR_INLINE_MAX) {
                key[RULE_ID_SIZE] = 1;
                memcpy(key + klen, actor, len);
                klen += len;
        } else {
                key[RULE_ID_SIZE] = 2;
                hash128(actor, len, key + klen);
                klen += HASH128_SIZE;
        }
        return counter_id_from_key(id_key, key, klen);
}

static V1StoreHit hit(const uint8_t *rule, const char *actor, size_t len, uint64_t limit, uint64_t reset) {
        return (V1StoreHit){ .rule_id = rule,
                             .actor = actor,
                             .actor_len = len,
                             .credit_limit = limit,
                             .reset_seconds = reset };
}

static char long_actor[LONG_ACTOR];

/* A real version-1 store by store.c, sync=always, at T0: see expect_migrated(). */
static void make_v1(uint64_t map_size, uint64_t map_size_max, size_t extra) {
        V1StoreOptions so = { .path = dbdir,
                              .sync = V1_STORE_SYNC_ALWAYS,
                              .map_size = map_size,
                              .map_size_max = map_size_max };
        V1StoreHit hs[] = {
                hit(RULE_A, NULL, 0, 10, 60), /* 3 hits: credit 7 */
                hit(RULE_A, NULL, 0, 10, 60),
                hit(RULE_A, NULL, 0, 10, 60),
                hit(RULE_A, "alice", 5, 5, 3600), /* credit 4 */
                hit(RULE_B, "alice", 5, 2, 120),  /* 2 hits: credit 0 */
                hit(RULE_B, "alice", 5, 2, 120),
                hit(RULE_B, long_actor, LONG_ACTOR, 100, 600), /* hashed actor: credit 99 */
                hit(RULE_B, "", 0, 3, 60),                     /* empty actor: credit 2 */
                hit(RULE_B, "bob", 3, 3, 5),                   /* expired at migration time */
        };
        char err[ERRBUF] = "";
        V1Store *s = NULL;

        memset(long_actor, 'L', sizeof long_actor);
        ck_assert_int_eq(v1_store_open(&so, &s, err, sizeof err), 0);
        ck_assert_int_eq(v1_store_apply(s, hs, sizeof hs / sizeof hs[0], T0), 0);
        for (size_t i = 0; i < extra; i++) {
                char a[32];
                V1StoreHit h;

                snprintf(a, sizeof a, "actor-%zu", i);
                h = hit(RULE_A, a, strlen(a), 10, 60);
                ck_assert_int_eq(v1_store_apply(s, &h, 1, T0), 0);
        }
        v1_store_close(s);
}

#define MIGRATION_NOW (T0 + 30 * SEC)

static void expect_migrated(Checkpoint *c, size_t extra) {
        CounterRecord want[] = {
                { v1_id(RULE_A, NULL, 0), 0, { T0 + 60 * SEC, 7 } },
                { v1_id(RULE_A, "alice", 5), 0, { T0 + 3600 * SEC, 4 } },
                { v1_id(RULE_B, "alice", 5), 0, { T0 + 120 * SEC, 0 } },
                { v1_id(RULE_B, long_actor, LONG_ACTOR), 0, { T0 + 600 * SEC, 99 } },
                { v1_id(RULE_B, "", 0), 0, { T0 + 60 * SEC, 2 } },
        };
        CounterId bob = v1_id(RULE_B, "bob", 3);
        CheckpointStats st;
        Loaded l = load(c, MIGRATION_NOW);

        ck_assert_uint_eq(l.n, 5 + extra);
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
                expect_record(&l, want + i);
        ck_assert_ptr_null(find(&l, &bob));
        for (size_t i = 0; i < extra; i++) {
                char a[32];
                CounterRecord w;

                snprintf(a, sizeof a, "actor-%zu", i);
                w = (CounterRecord){ v1_id(RULE_A, a, strlen(a)), 0, { T0 + 60 * SEC, 9 } };
                expect_record(&l, &w);
        }
        free(l.r);
        ck_assert_uint_eq(checkpoint_journal_seq(c), 0);
        ck_assert_int_eq(checkpoint_get_stats(c, &st), 0);
        ck_assert_uint_eq(st.counters, 5 + extra);
}

/* After a migration: n counters, want among them. */
static void expect_loaded(Checkpoint *c, size_t n, const CounterRecord *want) {
        Loaded l = load(c, MIGRATION_NOW);

        ck_assert_uint_eq(l.n, n);
        expect_record(&l, want);
        free(l.r);
}

/* Looks into data.mdb: whether the named database exists. */
static bool has_db(const char *name) {
        MDB_env *env;
        MDB_txn *txn;
        MDB_dbi dbi;
        int r;

        ck_assert_int_eq(mdb_env_create(&env), 0);
        ck_assert_int_eq(mdb_env_set_maxdbs(env, 8), 0);
        ck_assert_int_eq(mdb_env_open(env, dbdir, MDB_RDONLY, 0640), 0);
        ck_assert_int_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
        r = mdb_dbi_open(txn, name, 0, &dbi);
        mdb_txn_abort(txn);
        mdb_env_close(env);
        ck_assert(r == 0 || r == MDB_NOTFOUND);
        return r == 0;
}

START_TEST (test_migrate_v1) {
        CheckpointOptions o = { .now_usec = MIGRATION_NOW };
        CheckpointStats st;
        Checkpoint *c;

        make_v1(0, 0, 0);
        ck_assert(has_db("expiry"));
        c = open_opts(&o);
        ck_assert_int_eq(checkpoint_get_stats(c, &st), 0);
        ck_assert_uint_eq(st.migrated, 5);
        expect_migrated(c, 0);
        checkpoint_close(c);
        ck_assert(!has_db("expiry"));

        /* reopened: version 2 now, nothing migrated again */
        c = open_opts(&o);
        ck_assert_int_eq(checkpoint_get_stats(c, &st), 0);
        ck_assert_uint_eq(st.migrated, 0);
        expect_migrated(c, 0);
        checkpoint_close(c);
}
END_TEST

/* A migration that does not fit the map cap fails as a whole: version 1 stays as it was, and
 * migrates at the next start with room. */
START_TEST (test_migrate_interrupted) {
        enum { EXTRA = 1500 };
        CheckpointOptions o = { .now_usec = MIGRATION_NOW };
        V1StoreOptions so = { .path = dbdir, .sync = V1_STORE_SYNC_ALWAYS };
        V1StoreHit h = hit(RULE_A, "alice", 5, 5, 3600);
        char p[PATH_MAX + 64], err[ERRBUF] = "";
        struct stat fst;
        V1Store *s = NULL;
        Checkpoint *c;

        make_v1(1 << 20, 8 << 20, EXTRA);
        snprintf(p, sizeof p, "%s/data.mdb", dbdir);
        ck_assert_int_eq(stat(p, &fst), 0);
        o.map_size = o.map_size_max = (uint64_t) fst.st_size; /* no room for a second copy */
        expect_refused(&o, -ENOSPC, "needs more room");
        ck_assert(has_db("expiry"));

        /* still version 1, with its counters: the next hit of alice on RULE_A takes credit 4 -> 3 */
        ck_assert_int_eq(v1_store_open(&so, &s, err, sizeof err), 0);
        ck_assert_int_eq(v1_store_apply(s, &h, 1, T0 + SEC), 0);
        ck_assert_uint_eq(h.credit, 3);
        v1_store_close(s);

        o.map_size = o.map_size_max = 0;
        c = open_opts(&o);
        expect_loaded(c, 5 + EXTRA,
                      &(CounterRecord){ v1_id(RULE_A, "alice", 5), 0, { T0 + 3600 * SEC, 3 } });
        checkpoint_close(c);
}
END_TEST

/* A child process with the version-1 store open, as a running old divvyd would have it:
 * with write_back, it has applied two hits on RULE_A's counter (journaled, not committed).
 * Returns once the child is ready; the caller kills it. */
static pid_t spawn_v1(bool write_back) {
        V1StoreOptions so = { .path = dbdir, .sync = V1_STORE_SYNC_PERIODIC, .write_back = write_back };
        V1StoreHit h = hit(RULE_A, NULL, 0, 10, 60);
        char err[ERRBUF] = "", b;
        V1Store *s = NULL;
        int fds[2];
        pid_t pid;

        ck_assert_int_eq(pipe(fds), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                if (v1_store_open(&so, &s, err, sizeof err) < 0 ||
                    (write_back &&
                     (v1_store_apply(s, &h, 1, T0 + SEC) < 0 || v1_store_apply(s, &h, 1, T0 + SEC) < 0)))
                        _exit(1);
                (void) !write(fds[1], "x", 1);
                for (;;)
                        pause();
        }
        close(fds[1]);
        ck_assert_int_eq(read(fds[0], &b, 1), 1);
        close(fds[0]);
        return pid;
}

/* A version-1 store, refused while an old divvyd has it open, which is then killed. */
static void refused_while_running(const CheckpointOptions *o, bool write_back) {
        int status;
        pid_t pid;

        make_v1(0, 0, 0);
        pid = spawn_v1(write_back);
        expect_refused(o, -EBUSY, "in use by another process");
        kill(pid, SIGKILL);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
}

/* A version-1 write-back journal: refused while a divvyd holds it, and while it holds
 * records data.mdb lacks; migrated once the old store replayed it. */
START_TEST (test_migrate_v1_journal) {
        CheckpointOptions o = { .now_usec = MIGRATION_NOW };
        V1StoreOptions so = { .path = dbdir, .sync = V1_STORE_SYNC_PERIODIC };
        char err[ERRBUF] = "";
        V1Store *s = NULL;
        Checkpoint *c;

        refused_while_running(&o, true);

        /* killed: its two hits are in the journal only */
        expect_refused(&o, -EUCLEAN, "start the previous divvyd once and stop it cleanly");
        ck_assert(has_db("expiry"));

        /* the old store replays them, and then the migration has them */
        ck_assert_int_eq(v1_store_open(&so, &s, err, sizeof err), 0);
        v1_store_close(s);
        c = open_opts(&o);
        expect_loaded(c, 5, &(CounterRecord){ v1_id(RULE_A, NULL, 0), 0, { T0 + 60 * SEC, 5 } });
        checkpoint_close(c);
}
END_TEST

/* Another process with the version-1 store open (no write-back, so no journal to lock):
 * refused, since it would go on writing version-1 keys; migrated once it is gone. */
START_TEST (test_migrate_v1_in_use) {
        CheckpointOptions o = { .now_usec = MIGRATION_NOW };
        Checkpoint *c;

        refused_while_running(&o, false);
        ck_assert(has_db("expiry"));

        c = open_opts(&o);
        expect_migrated(c, 0);
        checkpoint_close(c);
}
END_TEST

/* A clean write-back store leaves an empty journal: migrated, and the journal removed. */
START_TEST (test_migrate_v1_empty_journal) {
        CheckpointOptions o = { .now_usec = MIGRATION_NOW };
        V1StoreOptions so = { .path = dbdir, .sync = V1_STORE_SYNC_PERIODIC, .write_back = true };
        char p[PATH_MAX + 64], err[ERRBUF] = "";
        V1Store *s = NULL;
        Checkpoint *c;

        make_v1(0, 0, 0);
        ck_assert_int_eq(v1_store_open(&so, &s, err, sizeof err), 0);
        v1_store_close(s);
        snprintf(p, sizeof p, "%s/journal.divvyd", dbdir);
        ck_assert_int_eq(access(p, F_OK), 0);
        c = open_opts(&o);
        expect_migrated(c, 0);
        checkpoint_close(c);
        ck_assert_int_eq(access(p, F_OK), -1);
}
END_TEST

static Suite *checkpoint_suite(void) {
        Suite *s = suite_create("checkpoint");
        TCase *tc = tcase_create("checkpoint");

        store_test_fixtures(tc, "check-checkpoint", make_tmpdir);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_round_trip);
        tcase_add_test(tc, test_last_record_wins);
        tcase_add_test(tc, test_deletions);
        tcase_add_test(tc, test_chunked_write);
        tcase_add_test(tc, test_chunked_enospc);
        tcase_add_test(tc, test_expire_walk_bounded);
        tcase_add_test(tc, test_expire_walk_in_write);
        tcase_add_test(tc, test_enospc_keeps_previous);
        tcase_add_test(tc, test_killed_write_keeps_previous);
        tcase_add_test(tc, test_lock_preallocated);
        tcase_add_test(tc, test_refuse_foreign);
        tcase_add_test(tc, test_refuse_wrong_magic);
        tcase_add_test(tc, test_refuse_unknown_version);
        tcase_add_test(tc, test_refuse_garbage);
        tcase_add_test(tc, test_v1_refuses_v2);
        tcase_add_test(tc, test_migrate_v1);
        tcase_add_test(tc, test_migrate_interrupted);
        tcase_add_test(tc, test_migrate_v1_journal);
        tcase_add_test(tc, test_migrate_v1_in_use);
        tcase_add_test(tc, test_migrate_v1_empty_journal);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        return check_run_suite(checkpoint_suite());
}
