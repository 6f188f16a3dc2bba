/* SPDX-License-Identifier: MIT */

/*
 * Micro-benchmark of the resident counter table alone (src/store/table.c).
 *
 *   bench-table [COUNTERS [LOOKUPS]]      defaults: 10000000 counters, as many lookups
 *
 * 1. grown: from an empty table, insert COUNTERS random 128-bit ids (through every
 *    incremental migration), then LOOKUPS random lookups-with-update of existing ids, each
 *    timed, then untimed: one at a time, and in batches of 16 prefetched with
 *    table_prefetch();
 * 2. pre-sized: the same inserts into a table created for COUNTERS (no migration);
 * 3. one expiry sweep step of 1000 slots, timed;
 * 4. the pause a stop-the-world rehash would cost: one more insert into the full pre-sized
 *    table starts a growth, finished at once with table_migrate_step(SIZE_MAX).
 * 0. the untimed cost of inserts (grown and pre-sized): timing every operation serialises
 *    them (the clock waits for the cache misses), so per-operation figures are higher.
 * For each: ns per operation, percentiles and the worst single operation (the grown table's
 * worst insert against the pre-sized one's shows whether growth pauses), and bytes of table
 * memory (table_memory(), and VmRSS growth) per live counter.
 *
 * Every operation is timed on its own with clock_gettime(): the ns/op include that clock's
 * cost, printed first so that it can be subtracted. Wall-clock latencies include the
 * scheduler: the involuntary context switches of each phase are printed beside its worst
 * case (on a shared machine, a preemption is several ms).
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "shared/clock.h"
#include "store/table.h"

#define COUNTERS_DEFAULT 10000000ULL                  /* the scale: 10 million live counters */
#define T0               (1700000000ULL * 1000000ULL) /* usec: wall clock the benchmark pretends */
#define LIFETIME         (3600ULL * 1000000ULL)       /* usec: every counter lives an hour */
#define HIST_BUCKETS     64                           /* log2(ns) latency buckets */
#define CLOCK_SAMPLES    1000000                      /* clock_gettime() calls to price it */
#define SWEEP_SLOTS      1000                         /* slots per timed expiry step */
#define BATCH            16 /* hits per prefetched batch: enough misses in flight to cover DRAM latency */

/* splitmix64: the i-th id without storing 160 MB of them */
static uint64_t mix(uint64_t x) {
        x += 0x9e3779b97f4a7c15ULL;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
        return x ^ (x >> 31);
}

static CounterId id_of(uint64_t i) {
        return (CounterId){ .lo = mix(2 * i), .hi = mix(2 * i + 1) };
}

/* Latencies of one phase: total, worst, and a log2 histogram for percentiles. */
typedef struct Lat {
        uint64_t n, total_ns, max_ns;
        uint64_t hist[HIST_BUCKETS];
        long nivcsw; /* involuntary context switches during the phase */
} Lat;

static long nivcsw(void) {
        struct rusage ru;

        return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_nivcsw : 0;
}

static void lat_add(Lat *l, uint64_t ns) {
        unsigned b = 0;

        while (b + 1 < HIST_BUCKETS && (ns >> (b + 1)) > 0)
                b++;
        l->hist[b]++;
        l->n++;
        l->total_ns += ns;
        if (ns > l->max_ns)
                l->max_ns = ns;
}

/* The upper bound of the log2 bucket holding the p-th fraction (e.g. 0.999) of operations. */
static uint64_t lat_percentile(const Lat *l, double p) {
        uint64_t want = (uint64_t) ((double) l->n * p), seen = 0;

        for (unsigned b = 0; b < HIST_BUCKETS; b++) {
                seen += l->hist[b];
                if (seen >= want)
                        return (UINT64_C(2) << b) - 1;
        }
        return l->max_ns;
}

static void lat_print(const char *what, const Lat *l) {
        uint64_t slow = 0; /* operations of 65.5 us or more (bucket 16 and up) */

        for (unsigned b = 16; b < HIST_BUCKETS; b++)
                slow += l->hist[b];
        printf("%-26s %7.1f ns/op  p99 <%6llu ns  p99.9 <%6llu ns  p99.99 <%7llu ns  "
               ">=65us: %4llu  worst %8.1f us  (%ld preemptions)\n",
               what, l->n ? (double) l->total_ns / (double) l->n : 0.0,
               (unsigned long long) lat_percentile(l, 0.99), (unsigned long long) lat_percentile(l, 0.999),
               (unsigned long long) lat_percentile(l, 0.9999), (unsigned long long) slow,
               (double) l->max_ns / 1000.0, l->nivcsw);
}

/* A "Name: N kB" line of a /proc file, in bytes, or 0 if unreadable. */
static uint64_t proc_kb(const char *path, const char *name) {
        char line[256];
        unsigned long long kb = 0;
        size_t len = strlen(name);
        FILE *f = fopen(path, "re");

        if (!f)
                return 0;
        while (fgets(line, sizeof line, f))
                if (strncmp(line, name, len) == 0 && line[len] == ':' &&
                    sscanf(line + len + 1, "%llu", &kb) == 1)
                        break;
        fclose(f);
        return (uint64_t) kb * 1024;
}

static uint64_t rss_bytes(void) {
        return proc_kb("/proc/self/status", "VmRSS");
}

/* Inserts ids 0..n-1 as fresh fixed-window counters, timing each put; returns the most
 * table memory per counter seen once past n/10 counters (old + new array during a
 * migration). Exits on failure. */
static double insert_all(Table *t, uint64_t n, Lat *l) {
        double peak = 0;

        l->nivcsw = -nivcsw();
        for (uint64_t i = 0; i < n; i++) {
                TableEntry *e;
                uint64_t t0 = clock_nsec(CLOCK_MONOTONIC);
                int r = table_put(t, id_of(i), &e);

                if (r != 1) {
                        fprintf(stderr, "table_put(%llu): %s\n", (unsigned long long) i,
                                r < 0 ? strerror(-r) : "already there");
                        exit(EXIT_FAILURE);
                }
                table_entry_set_state(e, (CounterState){ T0 + LIFETIME, 1000 });
                lat_add(l, clock_nsec(CLOCK_MONOTONIC) - t0);
                if (i >= n / 10 && (double) table_memory(t) / (double) (i + 1) > peak)
                        peak = (double) table_memory(t) / (double) (i + 1);
        }
        l->nivcsw += nivcsw();
        return peak;
}

/* m lookups-with-update of random existing ids (a hit: one credit taken). */
static void hit_random(Table *t, uint64_t n, uint64_t m, Lat *l) {
        uint64_t x = 0x1234567ULL;

        l->nivcsw = -nivcsw();

        for (uint64_t k = 0; k < m; k++) {
                TableEntry *e;
                CounterState s;
                uint64_t i, t0;

                x = mix(x);
                i = x % n;
                t0 = clock_nsec(CLOCK_MONOTONIC);
                if (table_put(t, id_of(i), &e) != 0) {
                        fprintf(stderr, "counter %llu missing\n", (unsigned long long) i);
                        exit(EXIT_FAILURE);
                }
                s = table_entry_state(e);
                s.w1 = s.w1 > 0 ? s.w1 - 1 : 0;
                table_entry_set_state(e, s);
                lat_add(l, clock_nsec(CLOCK_MONOTONIC) - t0);
        }
        l->nivcsw += nivcsw();
}

/* m lookups-with-update of random existing ids, timed as a whole: one at a time, or in
 * batches of BATCH whose ids are all prefetched first (as the store can do for a batch of
 * hits). Returns ns per hit. */
static double hit_throughput(Table *t, uint64_t n, uint64_t m, bool batched) {
        uint64_t x = 0x7654321ULL, done = 0, t0 = clock_nsec(CLOCK_MONOTONIC);
        size_t batch = batched ? BATCH : 1;

        while (done + batch <= m) {
                CounterId ids[BATCH];

                for (size_t i = 0; i < batch; i++) {
                        x = mix(x);
                        ids[i] = id_of(x % n);
                        if (batched)
                                table_prefetch(t, ids[i]);
                }
                for (size_t i = 0; i < batch; i++) {
                        TableEntry *e;
                        CounterState s;

                        if (table_put(t, ids[i], &e) != 0) {
                                fprintf(stderr, "a counter is missing\n");
                                exit(EXIT_FAILURE);
                        }
                        s = table_entry_state(e);
                        s.w1 = s.w1 > 0 ? s.w1 - 1 : 0;
                        table_entry_set_state(e, s);
                }
                done += batch;
        }
        return (double) (clock_nsec(CLOCK_MONOTONIC) - t0) / (double) done;
}

/* Inserts ids 0..n-1 into a new table (pre-sized for n, or grown from empty), timed as a
 * whole. Returns ns per insert. */
static double insert_throughput(uint64_t n, bool presize) {
        Table *t = NULL;
        uint64_t t0;
        double ns;

        if (table_new(presize ? n : 0, &t) < 0) {
                fprintf(stderr, "table_new: out of memory\n");
                exit(EXIT_FAILURE);
        }
        t0 = clock_nsec(CLOCK_MONOTONIC);
        for (uint64_t i = 0; i < n; i++) {
                TableEntry *e;

                if (table_put(t, id_of(i), &e) != 1) {
                        fprintf(stderr, "table_put(%llu) failed\n", (unsigned long long) i);
                        exit(EXIT_FAILURE);
                }
                table_entry_set_state(e, (CounterState){ T0 + LIFETIME, 1000 });
        }
        ns = (double) (clock_nsec(CLOCK_MONOTONIC) - t0) / (double) n;
        table_free(t);
        return ns;
}

static void print_memory(const char *what, Table *t, uint64_t rss_before) {
        uint64_t n = table_count(t), rss = rss_bytes();

        printf("%-26s %5.1f bytes/counter (table_memory), %5.1f (VmRSS growth), %zu slots, %s, "
               "%llu MiB in huge pages\n",
               what, (double) table_memory(t) / (double) n,
               rss > rss_before ? (double) (rss - rss_before) / (double) n : 0.0, table_capacity(t),
               table_migrating(t) ? "migrating" : "no migration",
               (unsigned long long) (proc_kb("/proc/self/smaps_rollup", "AnonHugePages") >> 20));
}

int main(int argc, char *argv[]) {
        uint64_t n = COUNTERS_DEFAULT, m, t0, rss0;
        double peak;
        Lat clock_cost = {}, grow = {}, hits = {}, presized = {}, presized_hits = {};
        Table *t = NULL;
        size_t deleted = 0;
        int r;

        if (argc > 1)
                n = strtoull(argv[1], NULL, 10);
        m = argc > 2 ? strtoull(argv[2], NULL, 10) : n;
        if (n == 0) {
                fprintf(stderr, "usage: %s [COUNTERS [LOOKUPS]]\n", argv[0]);
                return EXIT_FAILURE;
        }
        printf("bench-table: %llu counters, %llu lookups\n", (unsigned long long) n, (unsigned long long) m);

        for (unsigned i = 0; i < CLOCK_SAMPLES; i++) {
                t0 = clock_nsec(CLOCK_MONOTONIC);
                lat_add(&clock_cost, clock_nsec(CLOCK_MONOTONIC) - t0);
        }
        lat_print("clock_gettime() itself", &clock_cost);

        printf("%-26s %7.1f ns/op growing from empty, %.1f ns/op pre-sized\n", "insert, untimed",
               insert_throughput(n, false), insert_throughput(n, true));

        /* 1. grown from empty */
        rss0 = rss_bytes();
        r = table_new(0, &t);
        if (r < 0) {
                fprintf(stderr, "table_new: %s\n", strerror(-r));
                return EXIT_FAILURE;
        }
        peak = insert_all(t, n, &grow);
        lat_print("insert, growing", &grow);
        printf("%-26s %5.1f bytes/counter at most (old + new array, past %llu counters)\n",
               "  during the migrations", peak, (unsigned long long) (n / 10));
        print_memory("  after the inserts", t, rss0);
        while (table_migrating(t))
                (void) table_migrate_step(t, SIZE_MAX);
        print_memory("  migration finished", t, rss0);
        hit_random(t, n, m, &hits);
        lat_print("lookup+update, grown", &hits);
        printf("%-26s %7.1f ns/op one at a time, %.1f ns/op in prefetched batches of %d\n",
               "lookup+update, untimed", hit_throughput(t, n, m, false), hit_throughput(t, n, m, true),
               BATCH);

        t0 = clock_nsec(CLOCK_MONOTONIC);
        (void) table_expire_step(t, T0, SWEEP_SLOTS, &deleted);
        printf("%-26s %8.1f us (%d slots examined, none expired)\n", "expiry step",
               (double) (clock_nsec(CLOCK_MONOTONIC) - t0) / 1000.0, SWEEP_SLOTS);
        t0 = clock_nsec(CLOCK_MONOTONIC);
        (void) table_expire_step(t, T0 + 2 * LIFETIME, SWEEP_SLOTS, &deleted);
        printf("%-26s %8.1f us (%d slots examined, %zu expired and deleted)\n", "expiry step",
               (double) (clock_nsec(CLOCK_MONOTONIC) - t0) / 1000.0, SWEEP_SLOTS, deleted);
        t = table_free(t);

        /* 2. pre-sized: the same work without any migration, the baseline for the worst case */
        rss0 = rss_bytes();
        r = table_new(n, &t);
        if (r < 0) {
                fprintf(stderr, "table_new(%llu): %s\n", (unsigned long long) n, strerror(-r));
                return EXIT_FAILURE;
        }
        (void) insert_all(t, n, &presized);
        lat_print("insert, pre-sized", &presized);
        print_memory("  after the inserts", t, rss0);
        hit_random(t, n, m, &presized_hits);
        lat_print("lookup+update, pre-sized", &presized_hits);

        /* 4. what a rehash of the whole table in one go would cost */
        {
                TableEntry *e;
                uint64_t next = n, pause;

                do
                        r = table_put(t, id_of(next++), &e);
                while (r == 1 && !table_migrating(t));
                t0 = clock_nsec(CLOCK_MONOTONIC);
                (void) table_migrate_step(t, SIZE_MAX);
                pause = clock_nsec(CLOCK_MONOTONIC) - t0;
                printf("%-26s %7.1f ms: %llu counters moved in one call, the pause incremental "
                       "migration avoids\n",
                       "stop-the-world rehash", (double) pause / 1e6, (unsigned long long) table_count(t));
        }
        t = table_free(t);
        return EXIT_SUCCESS;
}
