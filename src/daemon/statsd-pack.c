/* SPDX-License-Identifier: MIT */
/* statsd-pack.c: statsd lines from the metrics, packed into payloads; see statsd-pack.h. */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "statsd-pack.h"

/* ---- packing ------------------------------------------------------------ */

void statsd_packer_init(StatsdPacker *p, size_t max_payload, StatsdEmit emit, void *userdata) {
        *p = (StatsdPacker){
                .max_payload = max_payload > 0 && max_payload <= STATSD_PAYLOAD_MAX ? max_payload
                                                                                    : STATSD_PAYLOAD_MAX,
                .emit = emit,
                .userdata = userdata,
        };
}

void statsd_packer_finish(StatsdPacker *p) {
        if (p->n_lines == 0)
                return;
        p->emit(p->buf, p->len, p->n_lines, p->userdata);
        p->n_datagrams++;
        p->len = 0;
        p->n_lines = 0;
}

int statsd_packer_add(StatsdPacker *p, const char *line, size_t len) {
        if (len == 0 || len > p->max_payload) {
                p->n_oversized++;
                return -EMSGSIZE;
        }
        /* "\n" between lines, none after the last. */
        if (p->n_lines > 0 && p->len + 1 + len > p->max_payload)
                statsd_packer_finish(p);
        if (p->n_lines > 0)
                p->buf[p->len++] = '\n';
        memcpy(p->buf + p->len, line, len);
        p->len += len;
        p->n_lines++;
        return 0;
}

int statsd_packer_addf(StatsdPacker *p, const char *format, ...) {
        char line[STATSD_LINE_MAX];
        va_list ap;

        va_start(ap, format);
        int n = vsnprintf(line, sizeof line, format, ap);
        va_end(ap);
        if (n < 0 || (size_t) n >= sizeof line) {
                p->n_oversized++;
                return -EMSGSIZE;
        }
        return statsd_packer_add(p, line, (size_t) n);
}

int statsd_normalize_prefix(const char *prefix, char *buf, size_t size) {
        if (!prefix)
                prefix = "";
        size_t len = strlen(prefix);
        bool dot = len > 0 && prefix[len - 1] != '.';
        size_t total = len + (dot ? 1 : 0);
        if (total > STATSD_PREFIX_MAX || total + 1 > size)
                return -ENAMETOOLONG;
        memcpy(buf, prefix, len);
        if (dot)
                buf[len++] = '.';
        buf[len] = '\0';
        return 0;
}

/* ---- aggregation -------------------------------------------------------- */

struct StatsdAggregator {
        char prefix[STATSD_PREFIX_MAX + 1];
        uint64_t (*last)[_METRICS_STATUS_MAX]; /* per label slot: counts already sent */
        size_t n_last;
        uint64_t last_errors[_PROTO_ERROR_MAX];
};

int statsd_aggregator_new(const char *prefix, StatsdAggregator **ret) {
        StatsdAggregator *a = calloc(1, sizeof *a);
        if (!a)
                return -ENOMEM;
        int r = statsd_normalize_prefix(prefix, a->prefix, sizeof a->prefix);
        if (r < 0) {
                free(a);
                return r;
        }
        *ret = a;
        return 0;
}

StatsdAggregator *statsd_aggregator_free(StatsdAggregator *a) {
        if (!a)
                return NULL;
        free(a->last);
        free(a);
        return NULL;
}

int statsd_aggregator_collect(StatsdAggregator *a, Metrics *m, StatsdPacker *p) {
        size_t n_labels = metrics_n_labels(m);
        if (n_labels > a->n_last) {
                uint64_t(*last)[_METRICS_STATUS_MAX] = realloc(a->last, n_labels * sizeof *last);
                if (!last)
                        return -ENOMEM;
                memset(last + a->n_last, 0, (n_labels - a->n_last) * sizeof *last);
                a->last = last;
                a->n_last = n_labels;
        }

        /* Growth since the last flush, per slot and in total. */
        uint64_t totals[_METRICS_STATUS_MAX] = { 0 };
        for (size_t i = 0; i < n_labels; i++)
                for (int st = 0; st < _METRICS_STATUS_MAX; st++)
                        totals[st] += metrics_label_hits(m, i, (MetricsStatus) st) - a->last[i][st];

        int n = 0;
        for (int st = 0; st < _METRICS_STATUS_MAX; st++)
                if (totals[st] > 0 &&
                    statsd_packer_addf(p, "%shit.%s:%" PRIu64 "|c", a->prefix,
                                       metrics_status_to_string((MetricsStatus) st), totals[st]) >= 0)
                        n++;

        for (size_t i = 0; i < n_labels; i++)
                for (int st = 0; st < _METRICS_STATUS_MAX; st++) {
                        uint64_t v = metrics_label_hits(m, i, (MetricsStatus) st);
                        uint64_t delta = v - a->last[i][st];
                        a->last[i][st] = v;
                        /* Slot 0 (unlabelled rules) only has the plain hit.<status> counter. */
                        if (i == 0 || delta == 0)
                                continue;
                        if (statsd_packer_addf(p, "%shit.%s.%s:%" PRIu64 "|c", a->prefix,
                                               metrics_status_to_string((MetricsStatus) st),
                                               metrics_label_name(m, i), delta) >= 0)
                                n++;
                }

        for (int c = 0; c < _PROTO_ERROR_MAX; c++) {
                uint64_t v = metrics_errors(m, (ProtoErrorCode) c);
                uint64_t delta = v - a->last_errors[c];
                a->last_errors[c] = v;
                if (delta > 0 &&
                    statsd_packer_addf(p, "%serror.%s:%" PRIu64 "|c", a->prefix,
                                       proto_error_code_to_string((ProtoErrorCode) c), delta) >= 0)
                        n++;
        }

        uint64_t samples[METRICS_HIT_SAMPLES_MAX], hits = 0;
        size_t n_samples = metrics_take_hit_samples(m, samples, METRICS_HIT_SAMPLES_MAX, &hits);
        char rate[32] = "";
        if (n_samples > 0 && n_samples < hits)
                snprintf(rate, sizeof rate, "|@%.6g", (double) n_samples / (double) hits);
        for (size_t i = 0; i < n_samples; i++)
                if (statsd_packer_addf(p, "%shit:%" PRIu64 ".%03" PRIu64 "|ms%s", a->prefix,
                                       samples[i] / 1000, samples[i] % 1000, rate) >= 0)
                        n++;

        if (statsd_packer_addf(p, "%sconnections:%" PRIu64 "|g", a->prefix, metrics_connections(m)) >= 0)
                n++;

        /* The store's gauges (once the manager published them): the checkpoint's health. */
        MetricsStoreGauges g;
        if (metrics_store_gauges(m, &g)) {
                const struct {
                        const char *name;
                        uint64_t value;
                } gauges[] = {
                        { "store.counters", g.counters },
                        { "store.size_bytes", g.size_bytes },
                        { "store.memory_bytes", g.memory_bytes },
                        { "journal.bytes", g.journal_bytes },
                        { "checkpoint.age_ms", g.checkpoint_age_usec / 1000 },
                        { "checkpoint.duration_ms", g.checkpoint_duration_usec / 1000 },
                        { "checkpoint.failures", g.checkpoint_failures },
                };
                for (size_t i = 0; i < sizeof gauges / sizeof gauges[0]; i++)
                        if (statsd_packer_addf(p, "%s%s:%" PRIu64 "|g", a->prefix, gauges[i].name,
                                               gauges[i].value) >= 0)
                                n++;
        }
        return n;
}
