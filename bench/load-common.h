/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * What the load generators divvy-benchmark and grpc-load share: the options they both take and
 * their parsers, the server's address and the connect() to it, the run's timeline (threads,
 * warmup, measuring, stop) and the signals that abort it, the latency histogram and the summary
 * (throughput, percentiles) in the lines they print.
 *
 * Not library code: a part of those programs, it prints.
 */

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>

/* Histogram: 128 linear sub-buckets per power of two of nanoseconds (< 0.8% error). */
#define BENCH_HIST_SUB_BITS 7
#define BENCH_HIST_SUB      (1u << BENCH_HIST_SUB_BITS)
#define BENCH_HIST_BUCKETS  ((64u - BENCH_HIST_SUB_BITS + 1u) * BENCH_HIST_SUB)

/* Where the run is (bench_phase): the threads' requests are measured in PHASE_MEASURE only. */
typedef enum Phase {
        PHASE_WARMUP,
        PHASE_MEASURE,
        PHASE_STOP,
} Phase;

/* The measured answers of a thread, or of the run. */
typedef struct BenchLatency {
        uint64_t measured; /* how many */
        uint64_t last_ns;  /* CLOCK_MONOTONIC of the last one */
        uint64_t max_ns;   /* largest latency */
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

#define BENCH_CONNECTIONS_MAX 10000 /* far beyond any useful run, bounds the arrays */
#define BENCH_THREADS_MAX     256

/* The options both programs take (see their --help): -a, -c, -n, -d, -w, -t, --label, -q. */
typedef struct BenchOptions {
        const char *address;
        BenchAddress addr;
        unsigned connections;
        unsigned threads;
        uint64_t requests;    /* -n; 0: run for duration_ns */
        uint64_t duration_ns; /* -d */
        uint64_t warmup_ns;   /* -w */
        const char *label;
        bool quiet;      /* only the machine-readable line */
        bool any_case;   /* counts take the suffixes K and m too (see bench_parse_count()) */
        double secs_max; /* -d and -w at most */
        bool have_d, have_w;
} BenchOptions;

/* getopt_long()'s value of --label; a program's own long options come after it. */
#define BENCH_OPT_LABEL 0x100
/* Their long options, the start of a program's getopt_long() table. (clang-format 14 would break
 * the last initializer in two.) */
/* clang-format off */
#define BENCH_LONG_OPTIONS                                                                                  \
        { "address", required_argument, NULL, 'a' },                                                        \
        { "connections", required_argument, NULL, 'c' },                                                    \
        { "requests", required_argument, NULL, 'n' },                                                       \
        { "duration", required_argument, NULL, 'd' },                                                       \
        { "warmup", required_argument, NULL, 'w' },                                                         \
        { "threads", required_argument, NULL, 't' },                                                        \
        { "label", required_argument, NULL, BENCH_OPT_LABEL },                                              \
        { "quiet", no_argument, NULL, 'q' }
/* clang-format on */

/* Set by SIGINT and SIGTERM once bench_signals() has run, or by a thread that cannot go on:
 * the run stops early and fails. */
extern atomic_bool bench_aborting;
/* The run's phase (a Phase), and its times on CLOCK_MONOTONIC, as bench_run() sets them. */
extern _Atomic int bench_phase;
extern uint64_t bench_start_ns;         /* when the threads were started: the open loop's call 0 */
extern uint64_t bench_measure_start_ns; /* when the measuring began (see bench_run()) */
extern _Atomic uint64_t bench_stop_ns;  /* when the measuring ended (-d); 0 with -n */

/* One measured answer, at t, ns after its request was sent (or due). */
void bench_latency_add(BenchLatency *l, uint64_t t, uint64_t ns);
void bench_latency_merge(BenchLatency *into, const BenchLatency *from);
double bench_latency_percentile(const BenchLatency *l, double q);

void bench_summarize(BenchSummary *s, const BenchLatency *l, uint64_t start_ns);
/* The human summary's latency line, and the RESULT line's latency fields (no newline). */
void bench_print_latency(const BenchSummary *s);
void bench_print_result_latency(const BenchSummary *s);

/* N with an optional suffix k or M (any_case: also K or m) for a thousand or a million. */
int bench_parse_count(const char *s, bool any_case, uint64_t *ret);
int bench_parse_uint(const char *s, bool any_case, unsigned lo, unsigned hi, unsigned *ret);
/* Seconds, a fraction allowed, from 0 to max; *ret in ns. */
int bench_parse_seconds(const char *s, double max, uint64_t *ret);

/* getopt_long()'s c and its argument into o if c is one of the options above: 0, or -EINVAL
 * if the value is invalid; 1 if c is not one of them. */
int bench_option(BenchOptions *o, int c, const char *arg);
/* After the options: -n and -d exclude each other (says so on stderr: -EINVAL); without either,
 * 10 s; a warmup of 1 s unless -n or -w. */
int bench_options_times(BenchOptions *o, const char *prog);

/* tcp:HOST:PORT, HOST:PORT, [IPV6]:PORT or unix:PATH. */
int bench_parse_address(const char *a, BenchAddress *ret);
/* A blocking socket connected to a (TCP_NODELAY over TCP), or -errno. */
int bench_connect(const BenchAddress *a);
/* fd made non-blocking; on failure it is closed and -errno returned. A negative fd is returned
 * as it is. */
int bench_set_nonblock(int fd);

/* total (connections) spread evenly over n parts (threads): where part i starts, and its size. */
uint64_t bench_share_start(uint64_t total, unsigned n, unsigned i);
uint64_t bench_share(uint64_t total, unsigned n, unsigned i);
/* A connection's quota of measured requests: its share of requests, UINT64_MAX without -n. */
uint64_t bench_quota(uint64_t requests, unsigned connections, unsigned i);
/* fd watched for input in epfd, ptr in its events; 0 or -errno. */
int bench_epoll_add(int epfd, int fd, void *ptr);
/* fd (added with ptr) also watched for output or no longer, as want_out says, unless *out_now
 * says it already is; 0 or -errno. */
int bench_epoll_set_out(int epfd, int fd, void *ptr, bool *out_now, bool want_out);

/*
 * The run: fn started in a thread for each of the n workers (an array of elements of size bytes,
 * each with its pthread_t at thread_offset), warmup_ns of unmeasured load, then the measuring
 * until duration_ns has passed (0: until the threads end by themselves, -n), the threads joined.
 * bench_measure_start_ns is when the warmup ended or, with due_times (an open loop, whose calls
 * are due on a schedule), when the first measured call was due. Returns how many threads were
 * started: n, or fewer if one could not be (then bench_aborting is set).
 */
unsigned bench_run(const char *prog, void *workers, unsigned n, size_t size, size_t thread_offset,
                   void *(*fn)(void *), uint64_t warmup_ns, uint64_t duration_ns, bool due_times);

void bench_sleep_ns(uint64_t ns);
/* SIGPIPE ignored; SIGINT and SIGTERM set bench_aborting. */
void bench_signals(void);
