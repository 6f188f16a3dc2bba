/* SPDX-License-Identifier: MIT */
/* metrics.c: counters and the Prometheus text format; see metrics.h. */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

#include "shared/clock.h"

#define LOAD(x)     __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
/* Single writer: a load and a store, not a locked read-modify-write. */
#define ADD(x, n) STORE((x), LOAD(x) + (uint64_t) (n))

#define METRICS_LABEL_TABLE_MIN 64 /* slots of the label -> slot hash table at first use */

typedef struct LabelSlot {
        char *name; /* owned; NULL for slot 0 */
        uint64_t hits[_METRICS_STATUS_MAX];
} LabelSlot;

typedef struct Histogram {
        uint64_t buckets[METRICS_HIT_BUCKETS + 1]; /* not cumulative; the last is +Inf */
        uint64_t sum;                              /* in the observation's unit */
} Histogram;

struct Metrics {
        /* Label slots: chunks[i] holds slots i*CHUNK..; n_labels published with release. */
        LabelSlot *chunks[METRICS_LABEL_CHUNKS_MAX];
        size_t n_labels;

        /* Loop only: rule index -> slot, and label name -> slot (open addressing). */
        uint32_t *rule_slot;
        size_t n_rule_slot;
        uint32_t *table; /* slot + 1; 0 = empty */
        size_t table_size;

        uint64_t errors[_PROTO_ERROR_MAX];
        uint64_t verb_decisions[_PROTO_VERB_MAX][2]; /* [verb][allowed] (HIT's are divvy_hits_total) */
        uint64_t verb_credits[_PROTO_VERB_MAX];      /* credits consumed (TAKE allowed, CHARGE) */
        uint64_t connections;
        uint64_t grpc_calls[_METRICS_GRPC_METHOD_MAX][METRICS_GRPC_CODES];
        uint64_t http_api_responses[METRICS_HTTP_API_STATUSES];
        Histogram hit_duration; /* usec */
        Histogram batch_size;   /* requests */
        uint64_t reloads_ok, reloads_failed;
        uint64_t store_size_bytes, store_counters, sweeper_deleted;
        uint64_t store_memory_bytes, journal_bytes, journal_segments, journal_syncs, journal_sync_usec;
        uint64_t checkpoint_age_usec, checkpoint_duration_usec, checkpoint_failures;
        uint64_t journal_damaged; /* damaged journal records skipped (at start, by checkpoints) */
        uint64_t counters_max, refused_limit, refused_memory;
        uint64_t store_set; /* metrics_set_store() was called */
        uint64_t statsd_dropped;
        uint64_t serving;
        uint64_t start_usec;    /* CLOCK_MONOTONIC at metrics_new() */
        MetricsBackend backend; /* each field with STORE/LOAD */
        uint64_t backend_set;

        /* Loop only: statsd timer reservoir. */
        uint64_t samples[METRICS_HIT_SAMPLES_MAX];
        size_t n_samples;
        uint64_t sample_batches, sample_hits;
        uint64_t rng;
};

/* gRPC's status codes and the methods, as divvyd_grpc_calls_total names them. */
static const char *const grpc_code_names[METRICS_GRPC_CODES] = {
        "OK",        "CANCELLED",       "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
        "NOT_FOUND", "ALREADY_EXISTS",  "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
        "ABORTED",   "OUT_OF_RANGE",    "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
        "DATA_LOSS", "UNAUTHENTICATED",
};
static const char *const grpc_method_names[_METRICS_GRPC_METHOD_MAX] = {
        [METRICS_GRPC_UNKNOWN] = "unknown",
        [METRICS_GRPC_SHOULD_RATE_LIMIT] = "ShouldRateLimit",
        [METRICS_GRPC_HEALTH_CHECK] = "Check",
};
/* The HTTP API's statuses (http-api-server.c, frontend-http.c); the last, 0, counts any other
 * (rendered "other"). */
static const unsigned http_api_statuses[METRICS_HTTP_API_STATUSES] = { 200, 400, 403, 404, 405,
                                                                       413, 415, 429, 503, 0 };

/* Upper bounds of divvy_hit_duration_seconds, in usec and as rendered. */
static const uint64_t hit_bounds_usec[METRICS_HIT_BUCKETS] = {
        10, 25, 50, 100, 250, 500, 1000, 2000, 5000, 10000, 100000, 500000,
};
static const char *const hit_bounds_text[METRICS_HIT_BUCKETS] = {
        "1e-05", "2.5e-05", "5e-05", "0.0001", "0.00025", "0.0005",
        "0.001", "0.002",   "0.005", "0.01",   "0.1",     "0.5",
};
static const uint64_t batch_bounds[METRICS_BATCH_BUCKETS] = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024 };
static const char *const batch_bounds_text[METRICS_BATCH_BUCKETS] = {
        "1", "2", "4", "8", "16", "32", "64", "128", "256", "512", "1024",
};

static const char *const status_names[_METRICS_STATUS_MAX] = {
        [METRICS_STATUS_ACCEPTED] = "accepted",
        [METRICS_STATUS_REJECTED] = "rejected",
        [METRICS_STATUS_CANARY_ACCEPTED] = "canary-accepted",
        [METRICS_STATUS_CANARY_REJECTED] = "canary-rejected",
};

const char *metrics_status_to_string(MetricsStatus s) {
        if (s < 0 || s >= _METRICS_STATUS_MAX)
                return NULL;
        return status_names[s];
}

MetricsStatus metrics_status_from_string(const char *s) {
        if (!s)
                return _METRICS_STATUS_INVALID;
        for (int i = 0; i < _METRICS_STATUS_MAX; i++)
                if (strcmp(s, status_names[i]) == 0)
                        return (MetricsStatus) i;
        return _METRICS_STATUS_INVALID;
}

static LabelSlot *slot_at(const Metrics *m, size_t slot) {
        return &m->chunks[slot / METRICS_LABEL_CHUNK][slot % METRICS_LABEL_CHUNK];
}

int metrics_new(Metrics **ret) {
        Metrics *m = calloc(1, sizeof *m);
        if (!m)
                return -ENOMEM;
        m->chunks[0] = calloc(METRICS_LABEL_CHUNK, sizeof(LabelSlot));
        if (!m->chunks[0]) {
                free(m);
                return -ENOMEM;
        }
        m->n_labels = 1; /* slot 0: unlabelled */
        m->rng = 0x9e3779b97f4a7c15ULL;
        m->start_usec = clock_usec(CLOCK_MONOTONIC);
        *ret = m;
        return 0;
}

Metrics *metrics_free(Metrics *m) {
        if (!m)
                return NULL;
        for (size_t i = 0; i < m->n_labels; i++)
                free(slot_at(m, i)->name);
        for (size_t i = 0; i < METRICS_LABEL_CHUNKS_MAX; i++)
                free(m->chunks[i]);
        free(m->rule_slot);
        free(m->table);
        free(m);
        return NULL;
}

/* FNV-1a: the table only ever holds labels from our own config. */
static size_t label_hash(const char *s) {
        uint64_t h = 0xcbf29ce484222325ULL;
        for (; *s; s++)
                h = (h ^ (uint8_t) *s) * 0x100000001b3ULL;
        return (size_t) h;
}

static void table_insert(uint32_t *table, size_t size, const Metrics *m, uint32_t slot) {
        size_t i = label_hash(slot_at(m, slot)->name) & (size - 1);
        while (table[i] != 0)
                i = (i + 1) & (size - 1);
        table[i] = slot + 1;
}

static int table_grow(Metrics *m, size_t want) {
        size_t size = m->table_size ? m->table_size : METRICS_LABEL_TABLE_MIN;
        while (size < want * 2)
                size *= 2;
        if (size == m->table_size)
                return 0;
        uint32_t *t = calloc(size, sizeof *t);
        if (!t)
                return -ENOMEM;
        for (size_t s = 1; s < m->n_labels; s++)
                table_insert(t, size, m, (uint32_t) s);
        free(m->table);
        m->table = t;
        m->table_size = size;
        return 0;
}

/* The slot of label name, created if new. Returns the slot, 0 if there is no room
 * left for new labels, or -ENOMEM. */
static int64_t label_slot(Metrics *m, const char *name) {
        int r = table_grow(m, m->n_labels + 1);
        if (r < 0)
                return r;
        size_t i = label_hash(name) & (m->table_size - 1);
        for (; m->table[i] != 0; i = (i + 1) & (m->table_size - 1))
                if (strcmp(slot_at(m, m->table[i] - 1)->name, name) == 0)
                        return m->table[i] - 1;

        size_t slot = m->n_labels;
        size_t chunk = slot / METRICS_LABEL_CHUNK;
        if (chunk >= METRICS_LABEL_CHUNKS_MAX)
                return 0;
        if (!m->chunks[chunk]) {
                m->chunks[chunk] = calloc(METRICS_LABEL_CHUNK, sizeof(LabelSlot));
                if (!m->chunks[chunk])
                        return -ENOMEM;
        }
        char *copy = strdup(name);
        if (!copy)
                return -ENOMEM;
        slot_at(m, slot)->name = copy;
        m->table[i] = (uint32_t) slot + 1;
        /* Publish: a reader that sees the new count sees the name and zeroed counters. */
        __atomic_store_n(&m->n_labels, slot + 1, __ATOMIC_RELEASE);
        return (int64_t) slot;
}

int metrics_set_rules(Metrics *m, const RuleSet *rs) {
        size_t n = rs ? rs->n_rules : 0;
        uint32_t *map = calloc(n ? n : 1, sizeof *map);
        if (!map)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                const Rule *rule = &rs->rules[i];
                if (!rule->label || rule->index >= n)
                        continue;
                int64_t slot = label_slot(m, rule->label);
                if (slot < 0) {
                        free(map);
                        return (int) slot;
                }
                map[rule->index] = (uint32_t) slot;
        }
        free(m->rule_slot);
        m->rule_slot = map;
        m->n_rule_slot = n;
        return 0;
}

void metrics_count_hit(Metrics *m, size_t rule_index, MetricsStatus status) {
        if (status < 0 || status >= _METRICS_STATUS_MAX)
                return;
        size_t slot = rule_index < m->n_rule_slot ? m->rule_slot[rule_index] : 0;
        ADD(slot_at(m, slot)->hits[status], 1);
}

void metrics_count_error(Metrics *m, ProtoErrorCode code) {
        if (code < 0 || code >= _PROTO_ERROR_MAX)
                return;
        ADD(m->errors[code], 1);
}

void metrics_count_grpc(Metrics *m, MetricsGrpcMethod method, unsigned code) {
        if (method < 0 || method >= _METRICS_GRPC_METHOD_MAX || code >= METRICS_GRPC_CODES)
                return;
        ADD(m->grpc_calls[method][code], 1);
}

void metrics_count_http_api(Metrics *m, unsigned status) {
        size_t i = 0;

        while (i + 1 < METRICS_HTTP_API_STATUSES && http_api_statuses[i] != status)
                i++;
        ADD(m->http_api_responses[i], 1);
}

uint64_t metrics_grpc_calls(const Metrics *m, MetricsGrpcMethod method, unsigned code) {
        if (method < 0 || method >= _METRICS_GRPC_METHOD_MAX || code >= METRICS_GRPC_CODES)
                return 0;
        return LOAD(m->grpc_calls[method][code]);
}

void metrics_count_verb(Metrics *m, ProtoVerb verb, bool allowed, uint64_t credits) {
        if (verb < 0 || verb >= _PROTO_VERB_MAX)
                return;
        ADD(m->verb_decisions[verb][allowed], 1);
        if (credits)
                ADD(m->verb_credits[verb], credits);
}

uint64_t metrics_verb_decisions(const Metrics *m, ProtoVerb verb, bool allowed) {
        if (verb < 0 || verb >= _PROTO_VERB_MAX)
                return 0;
        return LOAD(m->verb_decisions[verb][allowed]);
}

uint64_t metrics_verb_credits(const Metrics *m, ProtoVerb verb) {
        if (verb < 0 || verb >= _PROTO_VERB_MAX)
                return 0;
        return LOAD(m->verb_credits[verb]);
}

void metrics_set_connections(Metrics *m, uint64_t n) {
        STORE(m->connections, n);
}

static void histogram_observe(Histogram *h, const uint64_t *bounds, size_t n_bounds, uint64_t value,
                              uint64_t count) {
        size_t b = 0;
        while (b < n_bounds && value > bounds[b])
                b++;
        ADD(h->buckets[b], count);
        ADD(h->sum, value * count);
}

/* xorshift64: cheap, and only picks which batch a reservoir slot keeps. */
static uint64_t next_random(Metrics *m) {
        uint64_t x = m->rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        m->rng = x;
        return x;
}

void metrics_observe_batch(Metrics *m, size_t n_requests, size_t n_hits, uint64_t duration_usec) {
        if (n_requests > 0)
                histogram_observe(&m->batch_size, batch_bounds, METRICS_BATCH_BUCKETS, n_requests, 1);
        if (n_hits == 0)
                return;
        histogram_observe(&m->hit_duration, hit_bounds_usec, METRICS_HIT_BUCKETS, duration_usec, n_hits);

        /* Reservoir sampling (algorithm R) over this interval's batches. */
        m->sample_batches++;
        m->sample_hits += n_hits;
        if (m->n_samples < METRICS_HIT_SAMPLES_MAX)
                m->samples[m->n_samples++] = duration_usec;
        else {
                uint64_t j = next_random(m) % m->sample_batches;
                if (j < METRICS_HIT_SAMPLES_MAX)
                        m->samples[j] = duration_usec;
        }
}

size_t metrics_take_hit_samples(Metrics *m, uint64_t *out, size_t max, uint64_t *ret_hits) {
        size_t n = m->n_samples < max ? m->n_samples : max;
        memcpy(out, m->samples, n * sizeof *out);
        if (ret_hits)
                *ret_hits = m->sample_hits;
        m->n_samples = 0;
        m->sample_batches = 0;
        m->sample_hits = 0;
        return n;
}

void metrics_count_reload(Metrics *m, bool ok) {
        if (ok)
                ADD(m->reloads_ok, 1);
        else
                ADD(m->reloads_failed, 1);
}

void metrics_set_store(Metrics *m, const StoreStats *st) {
        STORE(m->store_size_bytes, st->file_size);
        STORE(m->store_counters, st->counters);
        STORE(m->sweeper_deleted, st->swept_total);
        STORE(m->store_memory_bytes, st->memory);
        STORE(m->journal_bytes, st->journal_bytes);
        STORE(m->journal_segments, st->journal_segments);
        STORE(m->journal_syncs, st->syncs);
        STORE(m->journal_sync_usec, st->sync_usec);
        STORE(m->checkpoint_age_usec, st->checkpoint_age_usec);
        STORE(m->checkpoint_duration_usec, st->checkpoint_duration_usec);
        STORE(m->checkpoint_failures, st->checkpoint_failures);
        STORE(m->journal_damaged, st->journal_damaged_records);
        STORE(m->counters_max, st->counters_max);
        STORE(m->refused_limit, st->refused_limit);
        STORE(m->refused_memory, st->refused_memory);
        STORE(m->store_set, 1);
}

bool metrics_store_gauges(const Metrics *m, MetricsStoreGauges *ret) {
        if (!LOAD(m->store_set))
                return false;
        *ret = (MetricsStoreGauges){
                .counters = LOAD(m->store_counters),
                .size_bytes = LOAD(m->store_size_bytes),
                .memory_bytes = LOAD(m->store_memory_bytes),
                .journal_bytes = LOAD(m->journal_bytes),
                .checkpoint_age_usec = LOAD(m->checkpoint_age_usec),
                .checkpoint_duration_usec = LOAD(m->checkpoint_duration_usec),
                .checkpoint_failures = LOAD(m->checkpoint_failures),
        };
        return true;
}

void metrics_set_backend(Metrics *m, const MetricsBackend *b) {
        STORE(m->backend.up, b->up);
        for (size_t i = 0; i < _METRICS_BACKEND_ERROR_MAX; i++)
                STORE(m->backend.errors[i], b->errors[i]);
        for (size_t i = 0; i < _RULE_ON_ERROR_MAX; i++)
                STORE(m->backend.fallbacks[i], b->fallbacks[i]);
        STORE(m->backend.rtt_usec_sum, b->rtt_usec_sum);
        STORE(m->backend.rtt_count, b->rtt_count);
        STORE(m->backend.reconnects, b->reconnects);
        STORE(m->backend.noscript_reloads, b->noscript_reloads);
        STORE(m->backend.redirects, b->redirects);
        STORE(m->backend_set, 1);
}

void metrics_add_statsd_dropped(Metrics *m, uint64_t n) {
        ADD(m->statsd_dropped, n);
}

void metrics_set_serving(Metrics *m, bool serving) {
        STORE(m->serving, (uint64_t) serving);
}

size_t metrics_n_labels(const Metrics *m) {
        return __atomic_load_n(&m->n_labels, __ATOMIC_ACQUIRE);
}

const char *metrics_label_name(const Metrics *m, size_t slot) {
        if (slot >= metrics_n_labels(m))
                return NULL;
        return slot_at(m, slot)->name;
}

uint64_t metrics_label_hits(const Metrics *m, size_t slot, MetricsStatus status) {
        if (slot >= metrics_n_labels(m) || status < 0 || status >= _METRICS_STATUS_MAX)
                return 0;
        return LOAD(slot_at(m, slot)->hits[status]);
}

uint64_t metrics_hits_total(const Metrics *m, MetricsStatus status) {
        uint64_t total = 0;
        size_t n = metrics_n_labels(m);
        for (size_t i = 0; i < n; i++)
                total += metrics_label_hits(m, i, status);
        return total;
}

uint64_t metrics_errors(const Metrics *m, ProtoErrorCode code) {
        if (code < 0 || code >= _PROTO_ERROR_MAX)
                return 0;
        return LOAD(m->errors[code]);
}

uint64_t metrics_connections(const Metrics *m) {
        return LOAD(m->connections);
}

uint64_t metrics_uptime_usec(const Metrics *m) {
        return clock_usec(CLOCK_MONOTONIC) - m->start_usec;
}

uint64_t metrics_statsd_dropped(const Metrics *m) {
        return LOAD(m->statsd_dropped);
}

bool metrics_serving(const Metrics *m) {
        return LOAD(m->serving) != 0;
}

size_t metrics_escape_label_value(const char *s, char *buf, size_t size) {
        size_t n = 0;
        for (; *s; s++) {
                char esc = 0;
                if (*s == '\\')
                        esc = '\\';
                else if (*s == '"')
                        esc = '"';
                else if (*s == '\n')
                        esc = 'n';
                if (esc) {
                        if (n + 1 < size)
                                buf[n] = '\\';
                        n++;
                        if (n + 1 < size)
                                buf[n] = esc;
                        n++;
                } else {
                        if (n + 1 < size)
                                buf[n] = *s;
                        n++;
                }
        }
        if (size > 0)
                buf[n < size ? n : size - 1] = '\0';
        return n;
}

/* Renders into a memstream; a write error is remembered by the stream and reported
 * by fclose(). Label values go through metrics_escape_label_value(), the one escaper, a
 * piece at a time so that no value is too long for the stack buffer. */
static void put_label_value(FILE *f, const char *s) {
        char piece[RULE_LABEL_MAX + 1], escaped[2 * RULE_LABEL_MAX + 1];
        size_t len = strlen(s);

        for (size_t i = 0; i < len; i += RULE_LABEL_MAX) {
                size_t n = len - i < RULE_LABEL_MAX ? len - i : RULE_LABEL_MAX;
                memcpy(piece, s + i, n);
                piece[n] = '\0';
                fwrite(escaped, 1, metrics_escape_label_value(piece, escaped, sizeof escaped), f);
        }
}

static void put_header(FILE *f, const char *name, const char *type, const char *help) {
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void put_histogram(FILE *f, const char *name, const Histogram *h, const char *const *bounds_text,
                          size_t n_bounds, double scale) {
        uint64_t cumulative = 0;
        for (size_t b = 0; b <= n_bounds; b++) {
                cumulative += LOAD(h->buckets[b]);
                fprintf(f, "%s_bucket{le=\"%s\"} %" PRIu64 "\n", name,
                        b < n_bounds ? bounds_text[b] : "+Inf", cumulative);
        }
        uint64_t sum = LOAD(h->sum);
        if (scale == 1.0)
                fprintf(f, "%s_sum %" PRIu64 "\n", name, sum);
        else
                fprintf(f, "%s_sum %.6f\n", name, (double) sum * scale);
        fprintf(f, "%s_count %" PRIu64 "\n", name, cumulative);
}

static void put_backend(FILE *f, const Metrics *m) {
        static const char *const error_kinds[_METRICS_BACKEND_ERROR_MAX] = {
                [METRICS_BACKEND_TIMEOUT] = "timeout",
                [METRICS_BACKEND_CONNECTION] = "connection",
                [METRICS_BACKEND_PROTOCOL] = "protocol",
                [METRICS_BACKEND_SERVER] = "server",
        };
        static const char *const policies[_RULE_ON_ERROR_MAX] = {
                [RULE_ON_ERROR_ALLOW] = "allow",
                [RULE_ON_ERROR_DENY] = "deny",
                [RULE_ON_ERROR_LOCAL] = "local",
        };

        if (!LOAD(m->backend_set))
                return;
        put_header(f, "divvyd_backend_up", "gauge", "1 while the remote store (Redis/Valkey) answers.");
        fprintf(f, "divvyd_backend_up %d\n", LOAD(m->backend.up) ? 1 : 0);
        put_header(f, "divvyd_backend_errors_total", "counter",
                   "Script calls the remote store did not answer, by kind.");
        for (size_t i = 0; i < _METRICS_BACKEND_ERROR_MAX; i++)
                fprintf(f, "divvyd_backend_errors_total{kind=\"%s\"} %" PRIu64 "\n", error_kinds[i],
                        LOAD(m->backend.errors[i]));
        put_header(f, "divvyd_backend_fallbacks_total", "counter",
                   "Hits the remote store could not answer, decided by their rule's onBackendError.");
        for (size_t i = RULE_ON_ERROR_ALLOW; i < _RULE_ON_ERROR_MAX; i++)
                fprintf(f, "divvyd_backend_fallbacks_total{policy=\"%s\"} %" PRIu64 "\n", policies[i],
                        LOAD(m->backend.fallbacks[i]));
        put_header(f, "divvyd_backend_round_trip_seconds", "summary",
                   "Round trips of script calls to the remote store.");
        fprintf(f, "divvyd_backend_round_trip_seconds_sum %.6f\n",
                (double) LOAD(m->backend.rtt_usec_sum) / 1e6);
        fprintf(f, "divvyd_backend_round_trip_seconds_count %" PRIu64 "\n", LOAD(m->backend.rtt_count));
        put_header(f, "divvyd_backend_reconnects_total", "counter",
                   "Connection attempts to the remote store after the first of each server.");
        fprintf(f, "divvyd_backend_reconnects_total %" PRIu64 "\n", LOAD(m->backend.reconnects));
        put_header(f, "divvyd_backend_noscript_reloads_total", "counter",
                   "NOSCRIPT replies (a SCRIPT FLUSH, a restart, a failover) recovered by EVAL.");
        fprintf(f, "divvyd_backend_noscript_reloads_total %" PRIu64 "\n", LOAD(m->backend.noscript_reloads));
        put_header(f, "divvyd_backend_redirects_total", "counter",
                   "Cluster redirections followed (MOVED, ASK).");
        fprintf(f, "divvyd_backend_redirects_total %" PRIu64 "\n", LOAD(m->backend.redirects));
}

int metrics_render(const Metrics *m, char **ret, size_t *ret_len) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f)
                return -ENOMEM;

        /* divvy's metrics, with divvy's names and help texts. */
        put_header(f, "divvy_tcp_connections_total", "gauge",
                   "Total number of open TCP connections to Divvy.");
        fprintf(f, "divvy_tcp_connections_total %" PRIu64 "\n", metrics_connections(m));

        put_header(f, "divvy_hit_duration_seconds", "histogram",
                   "Histogram of Divvy processing time for HITs.");
        put_histogram(f, "divvy_hit_duration_seconds", &m->hit_duration, hit_bounds_text,
                      METRICS_HIT_BUCKETS, 1e-6);

        put_header(f, "divvy_hits_total", "counter", "Counter of total HITs to Divvy.");
        size_t n_labels = metrics_n_labels(m);
        for (size_t i = 0; i < n_labels; i++) {
                const LabelSlot *slot = slot_at(m, i);
                for (int st = 0; st < _METRICS_STATUS_MAX; st++) {
                        uint64_t v = LOAD(slot->hits[st]);
                        /* Like divvy (prom-client), a labelled series appears with its first hit;
                         * the unlabelled ones are always there. */
                        if (v == 0 && i != 0)
                                continue;
                        fprintf(f, "divvy_hits_total{status=\"%s\",rule_label=\"", status_names[st]);
                        if (slot->name)
                                put_label_value(f, slot->name);
                        fprintf(f, "\"} %" PRIu64 "\n", v);
                }
        }

        put_header(f, "divvy_errors_total", "counter", "Counter of total Divvy errors.");
        for (int c = 0; c < _PROTO_ERROR_MAX; c++) {
                /* divvy's two codes always; the version 2 verbs' once they occurred */
                if (c > PROTO_ERROR_UNKNOWN && metrics_errors(m, (ProtoErrorCode) c) == 0)
                        continue;
                fputs("divvy_errors_total{code=\"", f);
                put_label_value(f, proto_error_code_to_string((ProtoErrorCode) c));
                fprintf(f, "\"} %" PRIu64 "\n", metrics_errors(m, (ProtoErrorCode) c));
        }

        /* divvyd's own. */
        put_header(f, "divvyd_requests_total", "counter",
                   "Requests of the protocol version 2 verbs by decision (HIT's are divvy_hits_total).");
        for (int v = 0; v < _PROTO_VERB_MAX; v++) {
                char verb[16];
                const char *name = proto_verb_to_string((ProtoVerb) v);
                size_t k;

                if (v == PROTO_VERB_HIT || !name)
                        continue;
                for (k = 0; name[k] && k + 1 < sizeof verb; k++)
                        verb[k] = (char) (name[k] >= 'A' && name[k] <= 'Z' ? name[k] - 'A' + 'a' : name[k]);
                verb[k] = 0;
                for (int a = 1; a >= 0; a--)
                        fprintf(f, "divvyd_requests_total{verb=\"%s\",decision=\"%s\"} %" PRIu64 "\n", verb,
                                a ? "allowed" : "denied", LOAD(m->verb_decisions[v][a]));
        }
        put_header(f, "divvyd_grpc_calls_total", "counter",
                   "gRPC calls (--grpc) by method and grpc-status code, those the gRPC front-end refuses "
                   "by itself included (shown once they occurred; ShouldRateLimit's OK always).");
        for (int meth = 0; meth < _METRICS_GRPC_METHOD_MAX; meth++)
                for (unsigned code = 0; code < METRICS_GRPC_CODES; code++) {
                        uint64_t v = LOAD(m->grpc_calls[meth][code]);
                        if (v == 0 && !(meth == METRICS_GRPC_SHOULD_RATE_LIMIT && code == 0))
                                continue;
                        fprintf(f, "divvyd_grpc_calls_total{method=\"%s\",code=\"%s\"} %" PRIu64 "\n",
                                grpc_method_names[meth], grpc_code_names[code], v);
                }
        put_header(f, "divvyd_http_api_responses_total", "counter",
                   "HTTP API responses (--http-api) by status, those refused before any decision included "
                   "(shown once they occurred; 200 always).");
        for (size_t i = 0; i < METRICS_HTTP_API_STATUSES; i++) {
                uint64_t v = LOAD(m->http_api_responses[i]);
                if (v == 0 && i != 0)
                        continue;
                if (http_api_statuses[i] == 0)
                        fprintf(f, "divvyd_http_api_responses_total{status=\"other\"} %" PRIu64 "\n", v);
                else
                        fprintf(f, "divvyd_http_api_responses_total{status=\"%u\"} %" PRIu64 "\n",
                                http_api_statuses[i], v);
        }
        put_header(f, "divvyd_credits_consumed_total", "counter",
                   "Credits consumed by TAKE (allowed) and CHARGE, beyond the one of each HIT.");
        fprintf(f, "divvyd_credits_consumed_total{verb=\"take\"} %" PRIu64 "\n",
                LOAD(m->verb_credits[PROTO_VERB_TAKE]));
        fprintf(f, "divvyd_credits_consumed_total{verb=\"charge\"} %" PRIu64 "\n",
                LOAD(m->verb_credits[PROTO_VERB_CHARGE]));
        put_header(f, "divvyd_store_size_bytes", "gauge", "Size of the counter database file (data.mdb).");
        fprintf(f, "divvyd_store_size_bytes %" PRIu64 "\n", LOAD(m->store_size_bytes));
        put_header(f, "divvyd_store_counters", "gauge",
                   "Counters in the store (live ones and expired ones the sweeper has not deleted yet).");
        fprintf(f, "divvyd_store_counters %" PRIu64 "\n", LOAD(m->store_counters));
        put_header(f, "divvyd_store_counters_max", "gauge",
                   "--max-counters: new counters beyond it are refused (0: no cap).");
        fprintf(f, "divvyd_store_counters_max %" PRIu64 "\n", LOAD(m->counters_max));
        put_header(
                f, "divvyd_store_counters_refused_total", "counter",
                "Requests refused because they needed a new counter: at --max-counters (limit), or when the "
                "counter table could not grow (memory).");
        fprintf(f, "divvyd_store_counters_refused_total{reason=\"limit\"} %" PRIu64 "\n",
                LOAD(m->refused_limit));
        fprintf(f, "divvyd_store_counters_refused_total{reason=\"memory\"} %" PRIu64 "\n",
                LOAD(m->refused_memory));
        put_header(f, "divvyd_store_memory_bytes", "gauge", "Memory held by the resident counter table.");
        fprintf(f, "divvyd_store_memory_bytes %" PRIu64 "\n", LOAD(m->store_memory_bytes));
        put_header(f, "divvyd_journal_bytes", "gauge",
                   "Bytes of the write-ahead journal's segment files (preallocated), sealed and current.");
        fprintf(f, "divvyd_journal_bytes %" PRIu64 "\n", LOAD(m->journal_bytes));
        put_header(f, "divvyd_journal_segments", "gauge", "Segments of the write-ahead journal.");
        fprintf(f, "divvyd_journal_segments %" PRIu64 "\n", LOAD(m->journal_segments));
        put_header(f, "divvyd_journal_syncs_total", "counter",
                   "Syncs of the write-ahead journal to disk (fdatasync or msync) since start.");
        fprintf(f, "divvyd_journal_syncs_total %" PRIu64 "\n", LOAD(m->journal_syncs));
        put_header(f, "divvyd_journal_sync_seconds_total", "counter",
                   "Time those syncs took. Its rate over the syncs' rate is the mean sync latency, "
                   "which bounds the requests answered per second with --sync=always.");
        fprintf(f, "divvyd_journal_sync_seconds_total %.6f\n", (double) LOAD(m->journal_sync_usec) / 1e6);
        put_header(f, "divvyd_journal_damaged_records_total", "counter",
                   "Damaged journal records skipped by the replay at start or by a checkpoint: the counter "
                   "changes they held are lost (logged at error level, with the segment and the record).");
        fprintf(f, "divvyd_journal_damaged_records_total %" PRIu64 "\n", LOAD(m->journal_damaged));
        put_header(f, "divvyd_checkpoint_age_seconds", "gauge",
                   "Seconds since the last successful checkpoint (or since start).");
        fprintf(f, "divvyd_checkpoint_age_seconds %.3f\n", (double) LOAD(m->checkpoint_age_usec) / 1e6);
        put_header(f, "divvyd_checkpoint_duration_seconds", "gauge",
                   "How long the last successful checkpoint took.");
        fprintf(f, "divvyd_checkpoint_duration_seconds %.3f\n",
                (double) LOAD(m->checkpoint_duration_usec) / 1e6);
        put_header(f, "divvyd_checkpoint_failures_total", "counter",
                   "Checkpoints that failed (the journal is kept and the checkpoint retried).");
        fprintf(f, "divvyd_checkpoint_failures_total %" PRIu64 "\n", LOAD(m->checkpoint_failures));
        put_backend(f, m);
        put_header(f, "divvyd_batch_size", "histogram", "Requests answered per batch (one journal append).");
        put_histogram(f, "divvyd_batch_size", &m->batch_size, batch_bounds_text, METRICS_BATCH_BUCKETS, 1.0);
        put_header(f, "divvyd_sweeper_deleted_total", "counter", "Expired counters deleted by the sweeper.");
        fprintf(f, "divvyd_sweeper_deleted_total %" PRIu64 "\n", LOAD(m->sweeper_deleted));
        put_header(f, "divvyd_reloads_total", "counter", "Configuration reloads (SIGHUP), by result.");
        fprintf(f, "divvyd_reloads_total{result=\"ok\"} %" PRIu64 "\n", LOAD(m->reloads_ok));
        fprintf(f, "divvyd_reloads_total{result=\"failed\"} %" PRIu64 "\n", LOAD(m->reloads_failed));
        put_header(f, "divvyd_statsd_dropped_total", "counter",
                   "statsd metric lines dropped (statsd unreachable, or its buffer full).");
        fprintf(f, "divvyd_statsd_dropped_total %" PRIu64 "\n", metrics_statsd_dropped(m));
        put_header(f, "divvyd_build_info", "gauge", "divvyd build information; always 1.");
        fputs("divvyd_build_info{version=\"", f);
        put_label_value(f, PACKAGE_VERSION);
        fputs("\"} 1\n", f);

        bool failed = ferror(f);
        if (fclose(f) != 0 || failed) {
                free(buf);
                return -ENOMEM;
        }
        *ret = buf;
        *ret_len = len;
        return 0;
}
