/* SPDX-License-Identifier: MIT */

/* Edge cases of the local counter store that check_store.c does not reach: the wall clock
 * stepping back before a clean stop, the version 2 verbs (CHARGE, REFUND, RESET) journaled and
 * replayed after a kill -9 with journal segments at their smallest, and a batch larger than a
 * journal segment. */

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/store.h"
#include "store/wal.h"
#include "check-run.h"
#include "store-test-util.h"

#define SEC    1000000ULL            /* usec per second */
#define T0     (1700000000ULL * SEC) /* an arbitrary wall-clock start */
#define ERRBUF 512

static const uint8_t RULE_A[RULE_ID_SIZE] = { 0xe1, 0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8,
                                              0xe9, 0xea, 0xeb, 0xec, 0xed, 0xee, 0xef, 0xe0 };

static void make_tmpdir(void) {
        store_test_make_tmpdir("check-store-edges");
}

/* Options for the database tmpdir/<name>. */
static StoreOptions options(const char *name, StoreSync sync, uint64_t now) {
        static char paths[2][PATH_MAX];
        static unsigned k;
        char *p = paths[k++ % 2];

        snprintf(p, PATH_MAX, "%s/%s", tmpdir, name);
        return (StoreOptions){ .path = p, .sync = sync, .journal_segment_size = 64 * 1024, .now_usec = now };
}

static Store *open_with(const StoreOptions *o) {
        char err[ERRBUF] = "";
        Store *s = NULL;
        int r;

        r = store_open(o, &s, err, sizeof err);
        ck_assert_msg(r == 0, "store_open %s: %d %s", o->path, r, err);
        return s;
}

static StoreHit mkhit(const char *actor, AlgoOp op, uint64_t count, const AlgoParams *algo) {
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
static StoreHit apply1(Store *s, const char *actor, AlgoOp op, uint64_t count, const AlgoParams *algo,
                       uint64_t now) {
        StoreHit h = mkhit(actor, op, count, algo);

        ck_assert_int_eq(store_apply(s, &h, 1, now), 0);
        ck_assert_int_eq(h.error, 0);
        return h;
}

/* The wall clock the store was last given may be earlier than one it was given before (a step
 * back, README "Wall-clock steps"). The last checkpoint of a clean stop must judge what is live
 * by the clock the hits were answered at, not by the largest one ever seen: a counter created
 * after the clock came back is live and must still be there after the restart. */
START_TEST (test_clock_back_then_clean_stop) {
        StoreOptions o = options("db", STORE_SYNC_PERIODIC, T0);
        StoreHit h;
        Store *s;

        s = open_with(&o);
        h = apply1(s, "before", ALGO_TAKE, 1, NULL, T0);
        ck_assert_uint_eq(h.res.credit, 4);
        /* the clock steps an hour forward, the timer runs, and it steps back */
        (void) store_maintain(s, T0 + 3600 * SEC);
        (void) store_maintain(s, T0 + 1 * SEC);
        h = apply1(s, "before", ALGO_TAKE, 1, NULL, T0 + 1 * SEC); /* still its window */
        ck_assert_uint_eq(h.res.credit, 3);
        h = apply1(s, "after", ALGO_TAKE, 1, NULL, T0 + 2 * SEC);
        ck_assert_uint_eq(h.res.credit, 4);
        store_close(s); /* a clean stop: its last checkpoint */

        o.now_usec = T0 + 3 * SEC;
        s = open_with(&o);
        h = apply1(s, "before", ALGO_PEEK, 0, NULL, T0 + 3 * SEC);
        ck_assert_uint_eq(h.res.credit, 3);
        h = apply1(s, "after", ALGO_PEEK, 0, NULL, T0 + 3 * SEC);
        ck_assert_uint_eq(h.res.credit, 4);
        store_close(s);
}
END_TEST

/* A batch changes more counters than one journal segment holds (the daemon's batches have up
 * to 4096 hits; --journal-segment-size may be as small as 64 KiB, 1364 records): it is
 * journaled, not refused, and replayed whole. */
START_TEST (test_batch_larger_than_segment) {
        enum { N = 4096 };
        StoreOptions o = options("db", STORE_SYNC_PERIODIC, T0);
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
                        hits[i] = mkhit(actors[i], ALGO_TAKE, 1, NULL);
                }
                ck_assert_int_eq(store_apply(s, hits, N, T0), 0);
                for (unsigned i = 0; i < N; i++) {
                        ck_assert_int_eq(hits[i].error, 0);
                        ck_assert(hits[i].res.allowed);
                }
                store_close(s);
                s = open_with(&o);
                h = apply1(s, actors[N - 1], ALGO_PEEK, 0, NULL, T0);
                ck_assert_uint_eq(h.res.credit, 4);
                h = apply1(s, actors[0], ALGO_PEEK, 0, NULL, T0);
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

                out[i] = mkhit(model_actor[rng() % MODEL_ACTORS], ops[rng() % (sizeof ops / sizeof ops[0])],
                               1 + rng() % 3, a);
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
                killed = options(killed_name, sync, T0);
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
                ref = options(ref_name, STORE_SYNC_NONE, T0);
                Store *b = model_run(&ref, seed, algos, batches, &ref_now);

                killed = options(killed_name, sync, ref_now);
                killed.journal_segment_size = round < 2 ? WAL_SEGMENT_SIZE_MIN : 64 * 1024;
                Store *a = open_with(&killed);
                for (unsigned i = 0; i < MODEL_ACTORS; i++)
                        for (unsigned j = 0; j < 2; j++) {
                                StoreHit x = apply1(a, model_actor[i], ALGO_PEEK, 1, &algos[j], ref_now);
                                StoreHit y = apply1(b, model_actor[i], ALGO_PEEK, 1, &algos[j], ref_now);

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

static uint64_t counters(Store *s) {
        StoreStats st;

        ck_assert_int_eq(store_get_stats(s, &st), 0);
        return st.counters;
}

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
        StoreOptions o = options("values", STORE_SYNC_NONE, T0);
        Store *s = open_with(&o);
        StoreHit b[3], h;

        /* group 7: denied first (TAKE 6 of 5), then two allowed alone */
        b[0] = mkhit("g-deny", ALGO_TAKE, 6, NULL);
        b[1] = mkhit("g-ok", ALGO_TAKE, 1, NULL);
        b[2] = mkhit("g-ok", ALGO_TAKE, 2, NULL);
        b[0].group = b[1].group = b[2].group = 7;
        ck_assert_int_eq(store_apply(s, b, 3, T0), 0);
        ck_assert(!b[0].res.allowed);
        ck_assert_int_eq(b[0].res.retry, -1);
        ck_assert(b[1].res.allowed && b[1].res.credit == 4); /* each decided as if alone */
        ck_assert(b[2].res.allowed && b[2].res.credit == 2);
        ck_assert_uint_eq(counters(s), 0); /* none applied, and the denied TAKE created nothing */
        h = apply1(s, "g-ok", ALGO_TAKE, 1, NULL, T0);
        ck_assert_uint_eq(h.res.credit, 4);

        /* a TAKE above the capacity, alone: denied for ever, no counter left behind */
        h = apply1(s, "too-big", ALGO_TAKE, 6, NULL, T0);
        ck_assert(!h.res.allowed);
        ck_assert_int_eq(h.res.retry, -1);
        ck_assert_uint_eq(counters(s), 1); /* g-ok only */

        /* RESET: credit 1 when a live counter was deleted, 0 for an expired one */
        h = apply1(s, "g-ok", ALGO_RESET, 0, NULL, T0 + 1);
        ck_assert_uint_eq(h.res.credit, 1);
        (void) apply1(s, "old", ALGO_TAKE, 1, NULL, T0);
        h = apply1(s, "old", ALGO_RESET, 0, NULL, T0 + 61 * SEC);
        ck_assert(h.res.allowed);
        ck_assert_uint_eq(h.res.credit, 0);
        ck_assert_uint_eq(counters(s), 0);

        /* expiry at the window's end exactly (fixed window: T0 + 60 s), not a microsecond later */
        (void) apply1(s, "w", ALGO_TAKE, 1, NULL, T0);
        ck_assert_uint_eq(sweep_at(s, T0 + 60 * SEC - 1), 0);
        ck_assert_uint_eq(sweep_at(s, T0 + 60 * SEC), 1);
        ck_assert_uint_eq(counters(s), 0);
        store_close(s);
}
END_TEST

static Suite *store_edges_suite(void) {
        Suite *su = suite_create("store-edges");
        TCase *tc = tcase_create("core");

        store_test_fixtures(tc, "check-store-edges", make_tmpdir);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_clock_back_then_clean_stop);
        tcase_add_test(tc, test_batch_larger_than_segment);
        tcase_add_test(tc, test_verbs_replayed_after_kill);
        tcase_add_test(tc, test_batch_leaves_by_value);
        suite_add_tcase(su, tc);
        return su;
}

int main(void) {
        return check_run_suite(store_edges_suite());
}
