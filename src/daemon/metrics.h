/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * metrics.c: the daemon's counters, gauges and histograms, and their rendering in
 * the Prometheus text exposition format 0.0.4. One Metrics object per daemon, the
 * one place where outcomes are counted: the batch (batch.c) counts every HIT and ERR
 * reply it formats, the server the connections (and the ERR of one it refuses); the
 * statsd aggregator (statsd-pack.c), the HTTP endpoint (http.c) and the manager's
 * STATUS read from it.
 *
 * Threading: exactly ONE writer, the serving loop. Every value is a uint64_t
 * written with a relaxed atomic store (a plain "mov" on x86-64/arm64: no lock,
 * no fence, no syscall) and read with relaxed atomic loads by the HTTP thread,
 * which therefore never makes the loop wait and never sees a torn value. A
 * scrape may see one batch half counted (a histogram's _sum a batch ahead of
 * its buckets), never a counter going backwards; _count is always the sum of
 * the buckets rendered with it.
 *
 * Per-rule-label hit counters live in "label slots": slot 0 counts every rule
 * without a label (rule_label=""), one slot per distinct label ever configured.
 * Slots are only appended, in fixed-size chunks that never move, and published
 * with a release store of their count, so a reload (metrics_set_rules()) never
 * frees anything a concurrent scrape may be reading, and a label keeps its
 * counts across reloads (Prometheus counters must not reset while we run). The
 * hot path maps a rule to its slot through an array indexed by Rule.index,
 * rebuilt at each metrics_set_rules(): label strings are touched only when
 * rendering.
 */

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/protocol.h"
#include "core/rules.h"
#include "store/store.h"

/* divvy's metrics status of a hit: its `statusForInstrumenter`. */
typedef enum MetricsStatus {
        METRICS_STATUS_ACCEPTED,        /* "accepted" */
        METRICS_STATUS_REJECTED,        /* "rejected" */
        METRICS_STATUS_CANARY_ACCEPTED, /* "canary-accepted" */
        METRICS_STATUS_CANARY_REJECTED, /* "canary-rejected" */
        _METRICS_STATUS_MAX,
        _METRICS_STATUS_INVALID = -EINVAL,
} MetricsStatus;

#define METRICS_HIT_BUCKETS                                                                                 \
        12 /* divvy_hit_duration_seconds buckets: divvy's 1, 2, 5, 10, 100, 500 ms plus 10, 25, 50,         \
            * 100, 250, 500 us, since a divvyd HIT takes microseconds, not milliseconds */
#define METRICS_BATCH_BUCKETS                                                                               \
        11 /* divvyd_batch_size buckets: powers of two 1 .. 1024 (BATCH_REQUESTS_MAX) */
#define METRICS_LABEL_CHUNK 1024 /* label slots per chunk: chunks never move once allocated */
#define METRICS_LABEL_CHUNKS_MAX                                                                            \
        1024 /* chunks: at most 1M distinct labels over the daemon's life (RULES_MAX is 100k per config);   \
              * rules with labels beyond that are counted as unlabelled */
#define METRICS_HIT_SAMPLES_MAX                                                                             \
        32 /* hit durations kept per statsd interval (reservoir sampled over batches): the statsd           \
            * `hit` timer sends at most this many lines per flush, with |@rate */

typedef struct Metrics Metrics;

int metrics_new(Metrics **ret);
Metrics *metrics_free(Metrics *m);

/* Loop side (the single writer). None of these allocates except metrics_set_rules(). */

/* Maps the rules of rs (by Rule.index) to label slots, creating slots for labels
 * not seen before. Call at every config load/reload, before the batch counts hits
 * against rs. On -ENOMEM the previous mapping stays (rules beyond it count as
 * unlabelled). rs may be NULL (no rules: everything unlabelled). */
int metrics_set_rules(Metrics *m, const RuleSet *rs);

/* One store hit of rule number rule_index (Rule.index) with its outcome. */
void metrics_count_hit(Metrics *m, size_t rule_index, MetricsStatus status);
void metrics_count_error(Metrics *m, ProtoErrorCode code);
/* One request of a version 2 verb (not HIT: divvy's metrics count those) with its decision
 * (HELLO, EXPLAIN and RESET are "allowed") and the credits it consumed (TAKE allowed, CHARGE). */
void metrics_count_verb(Metrics *m, ProtoVerb verb, bool allowed, uint64_t credits);
void metrics_set_connections(Metrics *m, uint64_t n);
/* One gRPC call answered with a grpc-status code (0 .. METRICS_GRPC_CODES - 1), by method:
 * divvyd_grpc_calls_total. */
typedef enum MetricsGrpcMethod {
        METRICS_GRPC_UNKNOWN, /* a path the gRPC front-end does not serve */
        METRICS_GRPC_SHOULD_RATE_LIMIT,
        METRICS_GRPC_HEALTH_CHECK,
        _METRICS_GRPC_METHOD_MAX,
} MetricsGrpcMethod;
#define METRICS_GRPC_CODES        17 /* OK .. UNAUTHENTICATED */
#define METRICS_HTTP_API_STATUSES 10 /* the statuses the HTTP API answers (metrics.c) */
void metrics_count_grpc(Metrics *m, MetricsGrpcMethod method, unsigned code);
/* One response of the HTTP API (--http-api) with its HTTP status: divvyd_http_api_responses_total. */
void metrics_count_http_api(Metrics *m, unsigned status);
/* A batch of n_requests requests, n_hits of them HITs answered OK, took duration_usec:
 * feeds divvyd_batch_size, divvy_hit_duration_seconds (n_hits observations of
 * duration_usec) and the statsd timer reservoir. */
void metrics_observe_batch(Metrics *m, size_t n_requests, size_t n_hits, uint64_t duration_usec);
void metrics_count_reload(Metrics *m, bool ok);
/* Store gauges and the sweeper's running total, from store_get_stats(). */
void metrics_set_store(Metrics *m, const StoreStats *st);
void metrics_add_statsd_dropped(Metrics *m, uint64_t n);

/* The remote store (--store=redis..., issue #16), as remote.c last read it: rendered only once
 * set. Counters are totals since start. */
typedef enum MetricsBackendError {
        METRICS_BACKEND_TIMEOUT,    /* "timeout": no reply within --backend-timeout */
        METRICS_BACKEND_CONNECTION, /* "connection": down, refused, reset, breaker open */
        METRICS_BACKEND_PROTOCOL,   /* "protocol": a reply not understood */
        METRICS_BACKEND_SERVER,     /* "server": an error reply (CLUSTERDOWN, READONLY, script error) */
        _METRICS_BACKEND_ERROR_MAX,
} MetricsBackendError;
typedef struct MetricsBackend {
        bool up;                                     /* connected and answering */
        uint64_t errors[_METRICS_BACKEND_ERROR_MAX]; /* script calls, by kind */
        uint64_t fallbacks[_RULE_ON_ERROR_MAX];      /* hits decided by each onBackendError policy */
        uint64_t rtt_usec_sum, rtt_count;            /* round trips of script calls */
        uint64_t reconnects, noscript_reloads, redirects;
} MetricsBackend;
void metrics_set_backend(Metrics *m, const MetricsBackend *b);
/* /healthz answers 200 while serving, 503 otherwise (starting, stopping). */
void metrics_set_serving(Metrics *m, bool serving);

/* Readers (any thread). */
size_t metrics_n_labels(const Metrics *m);
/* NULL for slot 0 (unlabelled rules). */
const char *metrics_label_name(const Metrics *m, size_t slot);
uint64_t metrics_label_hits(const Metrics *m, size_t slot, MetricsStatus status);
uint64_t metrics_hits_total(const Metrics *m, MetricsStatus status);
uint64_t metrics_errors(const Metrics *m, ProtoErrorCode code);
uint64_t metrics_connections(const Metrics *m);
uint64_t metrics_grpc_calls(const Metrics *m, MetricsGrpcMethod method, unsigned code);
uint64_t metrics_verb_decisions(const Metrics *m, ProtoVerb verb, bool allowed);
uint64_t metrics_verb_credits(const Metrics *m, ProtoVerb verb);
uint64_t metrics_statsd_dropped(const Metrics *m);
uint64_t metrics_uptime_usec(const Metrics *m); /* since metrics_new(), as RESP's INFO says */
bool metrics_serving(const Metrics *m);

/* The store's gauges for statsd, as metrics_set_store() last set them. */
typedef struct MetricsStoreGauges {
        uint64_t counters, size_bytes, memory_bytes, journal_bytes;
        uint64_t checkpoint_age_usec, checkpoint_duration_usec, checkpoint_failures;
} MetricsStoreGauges;
/* Returns false (and sets nothing) until metrics_set_store() was first called. */
bool metrics_store_gauges(const Metrics *m, MetricsStoreGauges *ret);

/* Loop side: moves the statsd timer samples of the current interval (hit durations in
 * usec, at most max) into out and resets the reservoir. *ret_hits: HITs timed in the
 * interval, so the sample rate is n / *ret_hits. Returns n. */
size_t metrics_take_hit_samples(Metrics *m, uint64_t *out, size_t max, uint64_t *ret_hits);

/* Renders every metric in the Prometheus text format 0.0.4 into a malloc'ed,
 * NUL-terminated buffer (*ret, *ret_len without the NUL). Safe on any thread while
 * the loop writes. Returns 0 or -ENOMEM. */
int metrics_render(const Metrics *m, char **ret, size_t *ret_len);

/* Writes s with the exposition format's label-value escapes (\\ \" \n) into buf
 * (NUL-terminated, cut at size-1). Returns the length the full escaped string has
 * (like snprintf). */
size_t metrics_escape_label_value(const char *s, char *buf, size_t size);

const char *metrics_status_to_string(MetricsStatus s);
MetricsStatus metrics_status_from_string(const char *s);
