/* SPDX-License-Identifier: MIT */

/*
 * Micro-benchmark of the LMDB checkpoint alone (src/store/checkpoint.c).
 *
 *   bench-checkpoint [COUNTERS [CHANGED-PER-CHECKPOINT [INCREMENTAL-CHECKPOINTS [TXN-RECORDS]]]]
 *
 * Defaults 10 million counters, 1 million changed per checkpoint, 5 incremental checkpoints,
 * one transaction per checkpoint (TXN-RECORDS 0; else CheckpointOptions.txn_records_max).
 * Writes a first full checkpoint of every counter (random ids), then incremental checkpoints
 * of random changed counters (a tenth of them deletions, as resets and expiries would be).
 * Reports for each its time; the bytes written per record: what LMDB handed to write(2)
 * (/proc/self/io wchar: pages times 4096), what the kernel counted (write_bytes: on Linux
 * 6.x a write that dirties any part of a clean page-cache folio adds the whole folio, up to
 * 2 MiB, though ext4 writes only the dirty blocks), and, with BENCH_DISK=DEV (e.g. loop0,
 * TMPDIR on a file system of its own), what the disk wrote (/sys/block/DEV/stat); and the
 * bytes of data.mdb per counter. Then the time of checkpoint_load() of every counter,
 * after a reopen and again (warm). The database lives in a temporary directory under
 * $TMPDIR (default /var/tmp), removed afterwards.
 *
 *   bench-checkpoint --migrate [COUNTERS]
 *
 * Fills a version-1 store (store.c, write-back) with COUNTERS counters (default 1 million)
 * and times their migration by checkpoint_open().
 */

#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shared/clock.h"
#include "store/checkpoint.h"
#include "../tests/store/v1-store.h"

#define SEC    1000000ULL            /* usec per second */
#define T0     (1700000000ULL * SEC) /* wall-clock time the benchmark pretends it is */
#define WINDOW (3600 * SEC)          /* counters live until T0 + up to an hour */
#define FILL   1024                  /* hits per batch while filling a version-1 store */

/* xorshift64*: deterministic, fast */
static uint64_t rnd(uint64_t *s) {
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        return *s * 0x2545f4914f6cdd1dULL;
}

/* Bytes this process has caused to be written to storage so far. */
static uint64_t io_field(const char *fmt) {
        char line[128];
        uint64_t v = 0;
        FILE *f = fopen("/proc/self/io", "re");

        if (!f)
                return 0;
        while (fgets(line, sizeof line, f))
                if (strncmp(line, fmt, strlen(fmt)) == 0 && (v = strtoull(line + strlen(fmt), NULL, 10), 1))
                        break;
        fclose(f);
        return v;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void) st;
        (void) flag;
        (void) ftw;
        return remove(path);
}

static int count_one(const CounterRecord *r, void *u) {
        (void) r;
        (*(uint64_t *) u)++;
        return 0;
}

static uint64_t write_bytes(void) {
        return io_field("write_bytes:");
}

/* Bytes the block device $BENCH_DISK (e.g. "loop0": a file system of its own, so that no
 * other process's writes are counted) has written so far: /sys/block/DEV/stat's sectors
 * written (7th field, 512-byte units whatever the device's sector size). 0 if unset. */
static uint64_t disk_bytes(void) {
        const char *dev = getenv("BENCH_DISK");
        unsigned long long f[7] = { 0 };
        char p[256];
        FILE *fp;

        if (!dev || !*dev)
                return 0;
        snprintf(p, sizeof p, "/sys/block/%s/stat", dev);
        fp = fopen(p, "re");
        if (!fp)
                return 0;
        if (fscanf(fp, "%llu %llu %llu %llu %llu %llu %llu", &f[0], &f[1], &f[2], &f[3], &f[4], &f[5],
                   &f[6]) != 7)
                f[6] = 0;
        fclose(fp);
        return (uint64_t) f[6] * 512;
}

static int report(Checkpoint *c, const char *what, CounterRecord *rs, size_t n, uint64_t seq) {
        uint64_t wb = write_bytes(), wc = io_field("wchar:"), db = disk_bytes(),
                 t = clock_nsec(CLOCK_MONOTONIC);
        CheckpointStats st;
        int r;

        r = checkpoint_write(c, rs, n, seq, T0);
        t = clock_nsec(CLOCK_MONOTONIC) - t;
        wb = write_bytes() - wb;
        wc = io_field("wchar:") - wc;
        db = disk_bytes() - db;
        if (r < 0 || checkpoint_get_stats(c, &st) < 0) {
                fprintf(stderr, "checkpoint_write: %s\n", strerror(-r));
                return r < 0 ? r : -EIO;
        }
        printf("%-22s %9zu records %7.3f s  written/record: %7.1f bytes by LMDB, %7.1f by the kernel's "
               "count, %7.1f by the disk  "
               "%10" PRIu64 " counters  %5.1f bytes data.mdb/counter  map %" PRIu64 " MiB\n",
               what, n, (double) t / 1e9, n ? (double) wc / (double) n : 0.0,
               n ? (double) wb / (double) n : 0.0, n ? (double) db / (double) n : 0.0, st.counters,
               st.counters ? (double) st.file_size / (double) st.counters : 0.0, st.map_size >> 20);
        return 0;
}

static int load(Checkpoint *c, const char *what, uint64_t want) {
        uint64_t n = 0, t = clock_nsec(CLOCK_MONOTONIC);
        int r;

        r = checkpoint_load(c, T0, count_one, &n);
        t = clock_nsec(CLOCK_MONOTONIC) - t;
        if (r < 0 || n != want) {
                fprintf(stderr, "checkpoint_load: %s, %" PRIu64 " of %" PRIu64 "\n", strerror(-r), n, want);
                return -EIO;
        }
        printf("%-22s %9" PRIu64 " counters %8.3f s  (%.0f ns/counter)\n", what, n, (double) t / 1e9,
               (double) t / (double) n);
        return 0;
}

static uint64_t file_size(const char *dir) {
        char p[4200];
        struct stat st;

        snprintf(p, sizeof p, "%s/data.mdb", dir);
        return stat(p, &st) < 0 ? 0 : (uint64_t) st.st_size;
}

/* --migrate: a version-1 store of total counters, then checkpoint_open() on it. */
static int migrate(const char *dir, size_t total) {
        static const uint8_t rule[RULE_ID_SIZE] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
        V1StoreOptions so = { .path = dir, .sync = V1_STORE_SYNC_NONE, .write_back = true };
        CheckpointOptions o = { .now_usec = T0 };
        static char actors[FILL][16];
        V1StoreHit hits[FILL];
        CheckpointStats st;
        char err[512] = "";
        Checkpoint *c = NULL;
        V1Store *s = NULL;
        uint64_t t, v1_size;

        if (v1_store_open(&so, &s, err, sizeof err) < 0) {
                fprintf(stderr, "%s\n", err);
                return -EIO;
        }
        t = clock_nsec(CLOCK_MONOTONIC);
        for (size_t i = 0; i < total; i += FILL) {
                size_t n = total - i < FILL ? total - i : FILL;

                for (size_t j = 0; j < n; j++) {
                        snprintf(actors[j], sizeof actors[j], "a%010zu", i + j);
                        hits[j] = (V1StoreHit){ .rule_id = rule,
                                                .actor = actors[j],
                                                .actor_len = 11,
                                                .credit_limit = 100,
                                                .reset_seconds = 3600 };
                }
                if (v1_store_apply(s, hits, n, T0) < 0) {
                        fprintf(stderr, "v1_store_apply failed\n");
                        v1_store_close(s);
                        return -EIO;
                }
        }
        v1_store_close(s);
        v1_size = file_size(dir);
        printf("version-1 store        %9zu counters %8.3f s to fill  %6.1f bytes data.mdb/counter\n", total,
               (double) (clock_nsec(CLOCK_MONOTONIC) - t) / 1e9, (double) v1_size / (double) total);
        t = clock_nsec(CLOCK_MONOTONIC);
        if (checkpoint_open(dir, &o, &c, err, sizeof err) < 0) {
                fprintf(stderr, "%s\n", err);
                return -EIO;
        }
        t = clock_nsec(CLOCK_MONOTONIC) - t;
        if (checkpoint_get_stats(c, &st) < 0) {
                checkpoint_close(c);
                return -EIO;
        }
        printf("migration to version 2 %9" PRIu64
               " counters %8.3f s  %6.1f bytes data.mdb/counter (file: v1 "
               "pages freed inside)\n",
               st.migrated, (double) t / 1e9, (double) st.file_size / (double) st.counters);
        checkpoint_close(c);
        return st.migrated == total ? 0 : -EIO;
}

int main(int argc, char **argv) {
        size_t total = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000000;
        size_t changed = argc > 2 ? strtoull(argv[2], NULL, 10) : 1000000;
        unsigned rounds = argc > 3 ? (unsigned) strtoul(argv[3], NULL, 10) : 5;
        CheckpointOptions o = { .txn_records_max = argc > 4 ? strtoull(argv[4], NULL, 10) : 0 };
        const char *tmp = getenv("TMPDIR");
        char dir[4096], err[512] = "";
        CounterRecord *all, *batch;
        Checkpoint *c = NULL;
        uint64_t s = 0x243f6a8885a308d3ULL, live;

        CheckpointStats st;
        int r = EXIT_FAILURE;

        if (argc > 1 && strcmp(argv[1], "--migrate") == 0) {
                total = argc > 2 ? strtoull(argv[2], NULL, 10) : 1000000;
                snprintf(dir, sizeof dir, "%s/bench-checkpoint-XXXXXX", tmp && *tmp ? tmp : "/var/tmp");
                if (!mkdtemp(dir))
                        return EXIT_FAILURE;
                r = migrate(dir, total) < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
                (void) nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
                return r;
        }
        if (total == 0 || changed > total) {
                fprintf(stderr, "usage: bench-checkpoint [COUNTERS [CHANGED [ROUNDS]]]\n");
                return EXIT_FAILURE;
        }
        snprintf(dir, sizeof dir, "%s/bench-checkpoint-XXXXXX", tmp && *tmp ? tmp : "/var/tmp");
        all = calloc(total, sizeof *all);
        batch = calloc(changed ? changed : 1, sizeof *batch);
        if (!all || !batch || !mkdtemp(dir)) {
                fprintf(stderr, "out of memory or cannot create %s\n", dir);
                goto out;
        }
        for (size_t i = 0; i < total; i++)
                all[i] = (CounterRecord){ .id = { .lo = rnd(&s), .hi = rnd(&s) },
                                          .state = { .w0 = T0 + 1 + rnd(&s) % WINDOW,
                                                     .w1 = rnd(&s) % 1000 } };
        if (checkpoint_open(dir, &o, &c, err, sizeof err) < 0) {
                fprintf(stderr, "%s\n", err);
                goto out;
        }
        printf("checkpoint of %zu counters, %zu changed per incremental checkpoint, %zu records per "
               "transaction (0: all), in %s\n",
               total, changed, o.txn_records_max, dir);
        if (report(c, "full checkpoint", all, total, 1) < 0)
                goto out;
        live = total;
        for (unsigned k = 0; k < rounds; k++) {
                /* changed counters: existing ones (all[] is sorted by id now), one in ten a deletion */
                for (size_t i = 0; i < changed; i++) {
                        batch[i] = all[rnd(&s) % total];
                        batch[i].state.w1 = rnd(&s) % 1000;
                        if (i % 10 == 9)
                                batch[i].state.w0 = 0;
                }
                if (report(c, "incremental checkpoint", batch, changed, 2 + k) < 0)
                        goto out;
        }
        if (checkpoint_get_stats(c, &st) < 0)
                goto out;
        live = st.counters;
        checkpoint_close(c);
        c = NULL;
        if (checkpoint_open(dir, &o, &c, err, sizeof err) < 0) {
                fprintf(stderr, "%s\n", err);
                goto out;
        }
        if (load(c, "load after reopen", live) < 0 || load(c, "load warm", live) < 0)
                goto out;
        r = EXIT_SUCCESS;
out:
        checkpoint_close(c);
        if (dir[0])
                (void) nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        free(all);
        free(batch);
        return r;
}
