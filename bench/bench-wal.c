/* SPDX-License-Identifier: MIT */

/*
 * Micro-benchmark of the write-ahead journal alone (src/store/wal.c).
 *
 *   bench-wal [--quick] [RECORDS]
 *
 * 1. Appends RECORDS records (default 20 million, --quick 2 million) in batches of 256
 *    without syncing, as --sync=none/periodic do, to default-size segments, releasing
 *    sealed segments as a checkpoint would: records/s, the slowest append (a rotation:
 *    its seal syncs the segment) and the slowest wal_prepare().
 * 2. --sync=always's group commit: batches of 256 each followed by wal_sync() (msync of
 *    the range written): µs per sync, mean, median and worst, on the disk of $TMPDIR.
 * The journal lives in a temporary directory under $TMPDIR (default /var/tmp: a real disk,
 * not a tmpfs) and is removed afterwards.
 */

#include <errno.h>
#include <inttypes.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "shared/clock.h"
#include "store/wal.h"

#define BATCH           256                   /* records per batch: the store's largest */
#define RECORDS_DEFAULT (20ULL * 1000 * 1000) /* ~14 segments of 64 MiB */
#define RECORDS_QUICK   (2ULL * 1000 * 1000)
#define SYNC_BATCHES    2000                         /* batches timed with a wal_sync() each */
#define T0              (1700000000ULL * 1000000ULL) /* µs: the wall clock we pretend */
#define NSEC_PER_USEC_F 1000.0

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void) st;
        (void) flag;
        (void) ftw;
        return remove(path);
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

        return x < y ? -1 : x > y;
}

static void fill(CounterRecord *b, uint64_t first) {
        for (size_t i = 0; i < BATCH; i++) {
                uint64_t k = first + i;

                b[i] = (CounterRecord){
                        .id = { .lo = k * 0x9e3779b97f4a7c15ULL, .hi = k },
                        .algorithm = COUNTER_FIXED_WINDOW,
                        .state = { .w0 = T0 + k, .w1 = k & 0xffff },
                };
        }
}

static Wal *open_wal(const char *dir) {
        char err[512] = "";
        Wal *w = NULL;
        int r;

        r = wal_open(dir, NULL, &w, err, sizeof err);
        if (r < 0) {
                fprintf(stderr, "wal_open: %s\n", err);
                exit(EXIT_FAILURE);
        }
        return w;
}

/* Releases every sealed segment, as the checkpoint would once it committed them. */
static void release_sealed(Wal *w) {
        uint64_t last;

        if (wal_sealed(w, NULL, &last) > 0 && wal_release(w, last) < 0) {
                fprintf(stderr, "wal_release: %s\n", wal_error(w));
                exit(EXIT_FAILURE);
        }
}

static void bench_append(const char *dir, uint64_t records) {
        uint64_t t0, t, worst = 0, worst_prepare = 0;
        CounterRecord b[BATCH];
        WalStats st;
        Wal *w = open_wal(dir);

        t0 = clock_nsec(CLOCK_MONOTONIC);
        for (uint64_t i = 0; i < records; i += BATCH) {
                uint64_t t1 = clock_nsec(CLOCK_MONOTONIC);

                fill(b, i);
                if (wal_append(w, b, BATCH) < 0) {
                        fprintf(stderr, "wal_append: %s\n", wal_error(w));
                        exit(EXIT_FAILURE);
                }
                t = clock_nsec(CLOCK_MONOTONIC) - t1;
                if (t > worst)
                        worst = t;
                wal_get_stats(w, &st);
                if (!st.spare_ready) { /* the owner's idle moment: prepare the next segment */
                        release_sealed(w);
                        t1 = clock_nsec(CLOCK_MONOTONIC);
                        if (wal_prepare(w) < 0) {
                                fprintf(stderr, "wal_prepare: %s\n", wal_error(w));
                                exit(EXIT_FAILURE);
                        }
                        t = clock_nsec(CLOCK_MONOTONIC) - t1;
                        if (t > worst_prepare)
                                worst_prepare = t;
                }
        }
        t = clock_nsec(CLOCK_MONOTONIC) - t0;
        wal_get_stats(w, &st);
        printf("append, batches of %d, no sync: %.2f million records/s (%.1f ns/record, %.0f MB/s), "
               "%" PRIu64 " rotations\n",
               BATCH, (double) records * 1e3 / (double) t, (double) t / (double) records,
               (double) records * WAL_RECORD_SIZE * 1e3 / (double) t, st.rotations);
        printf("  slowest append (a rotation, its seal syncs the segment): %.1f ms; slowest wal_prepare(): "
               "%.1f ms\n",
               (double) worst / 1e6, (double) worst_prepare / 1e6);
        wal_close(w);
}

static void bench_sync(const char *dir) {
        static uint64_t lat[SYNC_BATCHES];
        CounterRecord b[BATCH];
        double sum = 0;
        Wal *w = open_wal(dir);

        release_sealed(w);
        wal_sync(w); /* the new segment's name */
        for (size_t i = 0; i < SYNC_BATCHES; i++) {
                uint64_t t1;

                fill(b, i * BATCH);
                if (wal_append(w, b, BATCH) < 0) {
                        fprintf(stderr, "wal_append: %s\n", wal_error(w));
                        exit(EXIT_FAILURE);
                }
                t1 = clock_nsec(CLOCK_MONOTONIC);
                if (wal_sync(w) < 0) {
                        fprintf(stderr, "wal_sync: %s\n", wal_error(w));
                        exit(EXIT_FAILURE);
                }
                lat[i] = clock_nsec(CLOCK_MONOTONIC) - t1;
                sum += (double) lat[i];
        }
        qsort(lat, SYNC_BATCHES, sizeof *lat, cmp_u64);
        printf("wal_sync() per batch of %d (group commit, --sync=always): mean %.0f µs, median %.0f µs, "
               "p99 %.0f µs, worst %.0f µs => at most %.0f batches/s, %.0f records/s\n",
               BATCH, sum / SYNC_BATCHES / NSEC_PER_USEC_F, (double) lat[SYNC_BATCHES / 2] / NSEC_PER_USEC_F,
               (double) lat[SYNC_BATCHES * 99 / 100] / NSEC_PER_USEC_F,
               (double) lat[SYNC_BATCHES - 1] / NSEC_PER_USEC_F, 1e9 * SYNC_BATCHES / sum,
               1e9 * SYNC_BATCHES * BATCH / sum);
        wal_close(w);
}

int main(int argc, char *argv[]) {
        uint64_t records = RECORDS_DEFAULT;
        const char *tmp = getenv("TMPDIR");
        char dir[4096];

        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--quick") == 0)
                        records = RECORDS_QUICK;
                else if (argv[i][0] >= '1' && argv[i][0] <= '9')
                        records = strtoull(argv[i], NULL, 10);
                else {
                        fprintf(stderr, "usage: %s [--quick] [RECORDS]\n", argv[0]);
                        return EXIT_FAILURE;
                }
        }
        snprintf(dir, sizeof dir, "%s/bench-wal-XXXXXX", tmp ? tmp : "/var/tmp");
        if (!mkdtemp(dir)) {
                fprintf(stderr, "mkdtemp %s: %s\n", dir, strerror(errno));
                return EXIT_FAILURE;
        }
        printf("journal in %s, segments of %llu MiB, records of %d bytes\n", dir,
               WAL_SEGMENT_SIZE_DEFAULT >> 20, WAL_RECORD_SIZE);
        bench_append(dir, records);
        bench_sync(dir);
        (void) nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        return EXIT_SUCCESS;
}
