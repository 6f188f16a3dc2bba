/* SPDX-License-Identifier: MIT */

/*
 * Micro-benchmark of the counter store alone (no sockets, no parsing).
 *
 *   bench-store [--quick] [10k] [10m] [sweep] [NUMBER-OF-COUNTERS]
 *
 * For 10 thousand and 10 million live counters (format version 2: the resident table, the
 * journal, the LMDB checkpoint): the time of a checkpoint of every counter, data.mdb and the
 * table's memory per live counter, hits/s for batches of 1, 16 and 256 hits (random counters,
 * sync=periodic: the journal append included, its sync left to the timer and so outside the
 * timed loop), and at 10 million counters the time of sweep steps of 1000 and 100 table slots.
 * --quick runs the 10k case only. The database lives in a temporary directory
 * under $TMPDIR (default /tmp) and is removed afterwards.
 */

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shared/clock.h"
#include "store/store.h"

#define SEC          1000000ULL            /* usec per second */
#define T0           (1700000000ULL * SEC) /* wall-clock time the benchmark pretends it is */
#define ACTOR_LEN    11                    /* bytes: "a%010u", fixed so keys have one size */
#define FILL_BATCH   1024                  /* hits per batch while pre-filling */
#define BATCH_MAX    256                   /* largest measured batch */
#define LIMIT        (1ULL << 40)          /* credit: never exhausted during the run */
#define RESET_MIN    60                    /* seconds: windows of 60 .. 60+RESET_SPREAD-1 s */
#define RESET_SPREAD 3600
#define SWEEP_STEPS  100 /* sweep steps timed */
#define SWEEP_CHUNK  1000

static uint64_t xorshift(uint64_t *x) {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        return *x;
}

static const uint8_t rule_id[RULE_ID_SIZE] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };

/* Actor names for a batch live here: store_apply() copies what it keeps. */
static char actors[FILL_BATCH][ACTOR_LEN + 1];

static void set_hit(StoreHit *h, size_t slot, uint64_t counter) {
        uint64_t reset = RESET_MIN + counter % RESET_SPREAD;
        char *a = actors[slot];

        /* "a%010llu" without printf's cost, which would dwarf the store's */
        a[0] = 'a';
        for (int d = ACTOR_LEN - 1; d >= 1; d--, counter /= 10)
                a[d] = (char) ('0' + counter % 10);
        a[ACTOR_LEN] = 0;
        *h = (StoreHit){
                .rule_id = rule_id,
                .actor = actors[slot],
                .actor_len = ACTOR_LEN,
                .credit_limit = LIMIT,
                .reset_seconds = reset,
                .count = 1,
        };
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void) st;
        (void) flag;
        (void) ftw;
        return remove(path);
}

static int fill(Store *s, uint64_t keys) {
        StoreHit b[FILL_BATCH];
        uint64_t t = clock_nsec(CLOCK_MONOTONIC);

        for (uint64_t i = 0; i < keys;) {
                size_t n = 0;

                for (; n < FILL_BATCH && i < keys; n++, i++)
                        set_hit(b + n, n, i);
                if (store_apply(s, b, n, T0) < 0) {
                        fprintf(stderr, "fill: store_apply: %s\n", strerror(-b[0].error));
                        return -1;
                }
        }
        (void) store_sync(s);
        printf("  pre-filled %llu counters in %.1f s\n", (unsigned long long) keys,
               (clock_nsec(CLOCK_MONOTONIC) - t) / 1e9);
        return 0;
}

static int run_hits(Store *s, uint64_t keys, size_t batch, uint64_t total) {
        StoreHit b[BATCH_MAX];
        uint64_t x = 0x9e3779b97f4a7c15ULL, t, elapsed;

        t = clock_nsec(CLOCK_MONOTONIC);
        for (uint64_t done = 0; done < total; done += batch) {
                for (size_t i = 0; i < batch; i++)
                        set_hit(b + i, i, xorshift(&x) % keys);
                if (store_apply(s, b, batch, T0 + SEC) < 0) {
                        fprintf(stderr, "store_apply: %s\n", strerror(-b[0].error));
                        return -1;
                }
        }
        elapsed = clock_nsec(CLOCK_MONOTONIC) - t;
        (void) store_sync(s); /* the timer's job, outside the timed loop */
        printf("  batch %3zu: %9.0f hits/s  (%llu hits, %.2f us/batch)\n", batch, total / (elapsed / 1e9),
               (unsigned long long) total, elapsed / 1e3 / (total / batch));
        return 0;
}

static int run_sweep(Store *s, size_t chunk) {
        uint64_t worst = 0, sum = 0;
        size_t deleted_total = 0, d;
        int r = 1;
        unsigned steps = 0;

        /* at T0+120s the windows of 60..120 s are over: ~1.7% of the counters */
        while (steps < SWEEP_STEPS && r == 1) {
                uint64_t t = clock_nsec(CLOCK_MONOTONIC), e;

                r = store_sweep(s, T0 + 120 * SEC, chunk, &d);
                e = clock_nsec(CLOCK_MONOTONIC) - t;
                if (r < 0) {
                        fprintf(stderr, "store_sweep: %s\n", strerror(-r));
                        return -1;
                }
                sum += e;
                worst = e > worst ? e : worst;
                deleted_total += d;
                steps++;
        }
        printf("  sweep: %u steps of %zu table slots: mean %.3f ms, worst %.3f ms (%zu deleted)\n", steps,
               chunk, sum / 1e6 / steps, worst / 1e6, deleted_total);
        return 0;
}

static int run_case(const char *name, uint64_t keys, bool sweep) {
        char dir[256], path[300], err[512];
        const char *tmp = getenv("TMPDIR");
        StoreOptions o = { .sync = STORE_SYNC_PERIODIC, .now_usec = T0 };
        StoreStats st;
        Store *s = NULL;
        int r;

        snprintf(dir, sizeof dir, "%s/bench-store-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir)) {
                perror("mkdtemp");
                return -1;
        }
        snprintf(path, sizeof path, "%s/db", dir);
        o.path = path;
        r = store_open(&o, &s, err, sizeof err);
        if (r < 0) {
                fprintf(stderr, "store_open: %s\n", err);
                goto out;
        }

        printf("%s: %llu counters, sync=periodic\n", name, (unsigned long long) keys);
        r = fill(s, keys);
        if (r < 0)
                goto out;
        uint64_t t = clock_nsec(CLOCK_MONOTONIC);
        r = store_checkpoint(s, T0);
        if (r < 0) {
                fprintf(stderr, "store_checkpoint: %s\n", strerror(-r));
                goto out;
        }
        printf("  checkpoint of every counter: %.2f s\n", (clock_nsec(CLOCK_MONOTONIC) - t) / 1e9);
        r = store_get_stats(s, &st);
        if (r < 0)
                goto out;
        printf("  data.mdb: %.1f MiB, %.1f bytes per live counter (pages in use: %.1f bytes per counter); "
               "table %.1f bytes per live counter\n",
               st.file_size / 1048576.0, (double) st.file_size / st.counters,
               (double) st.data_size / st.counters, (double) st.memory / st.counters);

        r = run_hits(s, keys, 1, 200000);
        if (r == 0)
                r = run_hits(s, keys, 16, 1000000);
        if (r == 0)
                r = run_hits(s, keys, 256, 4000000);
        if (r == 0 && sweep)
                r = run_sweep(s, SWEEP_CHUNK);
        if (r == 0 && sweep)
                r = run_sweep(s, SWEEP_CHUNK / 10);
        if (r == 0 && store_get_stats(s, &st) == 0)
                printf("  map %.0f MiB, grows %llu, checkpoints %llu, journal syncs %llu, journal %.0f "
                       "MiB\n",
                       st.map_size / 1048576.0, (unsigned long long) st.map_grows,
                       (unsigned long long) st.commits, (unsigned long long) st.syncs,
                       st.journal_bytes / 1048576.0);
out:
        store_close(s);
        (void) nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        return r;
}

int main(int argc, char *argv[]) {
        bool k10 = false, m10 = false, sweep = false, any = false;
        uint64_t custom = 0;

        setvbuf(stdout, NULL, _IOLBF, 0); /* progress shows while the long cases run */

        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--quick") == 0 || strcmp(argv[i], "10k") == 0)
                        k10 = true;
                else if (strcmp(argv[i], "10m") == 0)
                        m10 = true;
                else if (strcmp(argv[i], "sweep") == 0)
                        m10 = sweep = true;
                else if (argv[i][0] >= '1' && argv[i][0] <= '9')
                        custom = strtoull(argv[i], NULL, 10);
                else {
                        fprintf(stderr, "usage: %s [--quick] [10k] [10m] [sweep] [COUNTERS]\n", argv[0]);
                        return EXIT_FAILURE;
                }
                any = true;
        }
        if (!any)
                k10 = m10 = sweep = true;

        if (k10 && run_case("10k", 10000, false) < 0)
                return EXIT_FAILURE;
        if (m10 && run_case("10m", 10000000, sweep) < 0)
                return EXIT_FAILURE;
        if (custom > 0 && run_case("custom", custom, true) < 0)
                return EXIT_FAILURE;
        return EXIT_SUCCESS;
}
