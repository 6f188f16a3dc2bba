/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * What the load generators divvy-benchmark and grpc-load share: the latency histogram and its
 * summary (throughput, percentiles) in the lines they print, the option parsers, the server's
 * address and the connect() to it, the sleep and the signals that abort a run.
 *
 * Not library code: a part of those programs, it prints.
 */

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/un.h>

/* Histogram: 128 linear sub-buckets per power of two of nanoseconds (< 0.8% error). */
#define BENCH_HIST_SUB_BITS 7
#define BENCH_HIST_SUB      (1u << BENCH_HIST_SUB_BITS)
#define BENCH_HIST_BUCKETS  ((64u - BENCH_HIST_SUB_BITS + 1u) * BENCH_HIST_SUB)

typedef struct BenchLatency {
        uint64_t max_ns; /* largest measured latency */
        uint64_t hist[BENCH_HIST_BUCKETS];
} BenchLatency;

/* A run's figures, as printed: rps over secs from the start of measuring to the last measured
 * answer; the percentiles and max in us. */
typedef struct BenchSummary {
        double secs, rps, p50, p90, p99, p999, max_us;
} BenchSummary;

typedef struct BenchAddress {
        bool is_unix;
        char host[256];
        char port[16];
        char path[sizeof(((struct sockaddr_un *) NULL)->sun_path)];
} BenchAddress;

/* Set by SIGINT and SIGTERM once bench_signals() has run: the run stops early and fails. */
extern atomic_bool bench_aborting;

void bench_latency_add(BenchLatency *l, uint64_t ns);
void bench_latency_merge(BenchLatency *into, const BenchLatency *from);
double bench_latency_percentile(const BenchLatency *l, double q);

void bench_summarize(BenchSummary *s, const BenchLatency *l, uint64_t measured, uint64_t start_ns,
                     uint64_t last_ns);
/* The human summary's latency line, and the RESULT line's latency fields (no newline). */
void bench_print_latency(const BenchSummary *s);
void bench_print_result_latency(const BenchSummary *s);

/* N with an optional suffix k or M (any_case: also K or m) for a thousand or a million. */
int bench_parse_count(const char *s, bool any_case, uint64_t *ret);
int bench_parse_uint(const char *s, bool any_case, unsigned lo, unsigned hi, unsigned *ret);
/* Seconds, a fraction allowed, from 0 to max; *ret in ns. */
int bench_parse_seconds(const char *s, double max, uint64_t *ret);

/* tcp:HOST:PORT, HOST:PORT, [IPV6]:PORT or unix:PATH. */
int bench_parse_address(const char *a, BenchAddress *ret);
/* A blocking socket connected to a (TCP_NODELAY over TCP), or -errno. */
int bench_connect(const BenchAddress *a);
/* fd made non-blocking; on failure it is closed and -errno returned. A negative fd is returned
 * as it is. */
int bench_set_nonblock(int fd);

void bench_sleep_ns(uint64_t ns);
/* SIGPIPE ignored; SIGINT and SIGTERM set bench_aborting. */
void bench_signals(void);
