/* SPDX-License-Identifier: MIT */
/* statsd-pack.c: prefix rule, datagram packing, and aggregation into divvy's names. */

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "statsd-test-util.h"
#include "daemon/statsd-pack.h"
#include "check-run.h"

/* Datagrams captured by the packer's emit callback. */
typedef struct Capture {
        char payload[64][STATSD_PAYLOAD_MAX + 1];
        size_t n_lines[64];
        size_t n;
} Capture;

static void capture_emit(const char *payload, size_t len, size_t n_lines, void *userdata) {
        Capture *c = userdata;
        ck_assert_uint_lt(c->n, 64);
        memcpy(c->payload[c->n], payload, len);
        c->payload[c->n][len] = '\0';
        c->n_lines[c->n] = n_lines;
        c->n++;
}

static const struct {
        const char *in;
        const char *out; /* NULL: refused */
} prefixes[] = {
        { NULL, "" },      { "", "" },   { "divvy", "divvy." }, { "divvy.", "divvy." },
        { "a.b", "a.b." }, { ".", "." }, { "x..", "x.." },
};

START_TEST (test_prefix) {
        char buf[STATSD_PREFIX_MAX + 1];
        ck_assert_int_eq(statsd_normalize_prefix(prefixes[_i].in, buf, sizeof buf), 0);
        ck_assert_str_eq(buf, prefixes[_i].out);
}
END_TEST

START_TEST (test_prefix_too_long) {
        char big[STATSD_PREFIX_MAX + 2], buf[STATSD_PREFIX_MAX + 8];
        memset(big, 'p', sizeof big - 1);
        big[sizeof big - 1] = '\0';
        ck_assert_int_eq(statsd_normalize_prefix(big, buf, sizeof buf), -ENAMETOOLONG);
        /* Exactly STATSD_PREFIX_MAX with the dot fits. */
        big[STATSD_PREFIX_MAX - 1] = '\0';
        ck_assert_int_eq(statsd_normalize_prefix(big, buf, sizeof buf), 0);
        ck_assert_uint_eq(strlen(buf), STATSD_PREFIX_MAX);
        /* A buffer too small for the result. */
        ck_assert_int_eq(statsd_normalize_prefix("abc", buf, 4), -ENAMETOOLONG);
        ck_assert_int_eq(statsd_normalize_prefix("abc", buf, 5), 0);
}
END_TEST

START_TEST (test_packer_exact) {
        Capture c = { .n = 0 };
        StatsdPacker p;

        /* 20-byte payloads: "aaaa:1|c" (8) + "\n" + "bbbb:22|c" (9) = 18 fit; the next does not. */
        statsd_packer_init(&p, 20, capture_emit, &c);
        statsd_packer_finish(&p); /* nothing yet: no empty datagram */
        ck_assert_uint_eq(c.n, 0);
        ck_assert_int_eq(statsd_packer_add(&p, "aaaa:1|c", 8), 0);
        ck_assert_int_eq(statsd_packer_addf(&p, "%s:%d|c", "bbbb", 22), 0);
        ck_assert_int_eq(statsd_packer_add(&p, "cc:3|c", 6), 0);
        ck_assert_int_eq(statsd_packer_add(&p, "exactly-twenty:1|c..", 20), 0); /* a line = max */
        ck_assert_int_eq(statsd_packer_add(&p, "twenty-one-bytes:1|c.", 21), -EMSGSIZE);
        ck_assert_int_eq(statsd_packer_add(&p, "", 0), -EMSGSIZE);
        ck_assert_int_eq(statsd_packer_add(&p, "d:4|g", 5), 0);
        statsd_packer_finish(&p);
        statsd_packer_finish(&p);

        ck_assert_uint_eq(c.n, 4);
        ck_assert_str_eq(c.payload[0], "aaaa:1|c\nbbbb:22|c");
        ck_assert_uint_eq(c.n_lines[0], 2);
        ck_assert_str_eq(c.payload[1], "cc:3|c");
        ck_assert_str_eq(c.payload[2], "exactly-twenty:1|c..");
        ck_assert_str_eq(c.payload[3], "d:4|g");
        ck_assert_uint_eq(p.n_datagrams, 4);
        ck_assert_uint_eq(p.n_oversized, 2);
}
END_TEST

START_TEST (test_packer_mtu) {
        /* 300 lines of 30 bytes: each datagram at most 1432 bytes, filled as far as the next
         * line allows (47 lines = 47*30 + 46 = 1456 > 1432, so 46 lines = 1425), and the
         * concatenation is every line in order. */
        static Capture c;
        StatsdPacker p;
        char expected[300 * 31 + 1] = "", joined[300 * 31 + 1] = "";

        c.n = 0;
        statsd_packer_init(&p, STATSD_PAYLOAD_MAX, capture_emit, &c);
        for (int i = 0; i < 300; i++) {
                char line[31];
                snprintf(line, sizeof line, "divvy.hit.accepted.l%06d:1|c", i);
                ck_assert_uint_eq(strlen(line), 30);
                ck_assert_int_eq(statsd_packer_add(&p, line, 30), 0);
                strcat(expected, line);
                strcat(expected, "\n");
        }
        statsd_packer_finish(&p);
        ck_assert_uint_eq(c.n, 7); /* ceil(300 / 46) */
        for (size_t i = 0; i < c.n; i++) {
                ck_assert_uint_le(strlen(c.payload[i]), STATSD_PAYLOAD_MAX);
                ck_assert_uint_eq(c.n_lines[i], i < 6 ? 46 : 300 - 6 * 46);
                if (i < 6)
                        ck_assert_uint_eq(strlen(c.payload[i]), 46 * 30 + 45);
                ck_assert(c.payload[i][strlen(c.payload[i]) - 1] != '\n');
                strcat(joined, c.payload[i]);
                strcat(joined, "\n");
        }
        ck_assert_str_eq(joined, expected);
}
END_TEST

START_TEST (test_aggregate) {
        Metrics *m = NULL;
        StatsdAggregator *a = NULL;
        RuleSet *rs = load_ini(config);
        Capture c = { .n = 0 };
        StatsdPacker p;

        ck_assert_int_eq(metrics_new(&m), 0);
        ck_assert_int_eq(metrics_set_rules(m, rs), 0);
        ck_assert_int_eq(statsd_aggregator_new(aggregations[_i].prefix, &a), 0);
        play_sequence(m);

        statsd_packer_init(&p, STATSD_PAYLOAD_MAX, capture_emit, &c);
        ck_assert_int_eq(statsd_aggregator_collect(a, m, &p), 10);
        statsd_packer_finish(&p);
        ck_assert_uint_eq(c.n, 1);
        ck_assert_str_eq(c.payload[0], aggregations[_i].first);

        /* Nothing new: only the gauge. */
        ck_assert_int_eq(statsd_aggregator_collect(a, m, &p), 1);
        statsd_packer_finish(&p);
        ck_assert_uint_eq(c.n, 2);
        ck_assert_str_eq(c.payload[1], aggregations[_i].second);

        /* Deltas, not totals: two more hits on "cookies" after a reload that moved it. */
        RuleSet *moved = load_ini("[path=/x]\ncreditLimit = 1\nresetSeconds = 60\nlabel = x\n"
                                  "[path=/cookies]\ncreditLimit = 1\nresetSeconds = 60\nlabel = cookies\n"
                                  "[default]\ncreditLimit = 0\nresetSeconds = 0\n");
        ck_assert_int_eq(metrics_set_rules(m, moved), 0);
        metrics_count_hit(m, 1, METRICS_STATUS_ACCEPTED);
        metrics_count_hit(m, 1, METRICS_STATUS_ACCEPTED);
        metrics_count_error(m, PROTO_ERROR_UNKNOWN);
        metrics_set_connections(m, 0);
        ck_assert_int_eq(statsd_aggregator_collect(a, m, &p), 4);
        statsd_packer_finish(&p);
        char expected[512];
        const char *px = aggregations[_i].prefix;
        char norm[64];
        ck_assert_int_eq(statsd_normalize_prefix(px, norm, sizeof norm), 0);
        snprintf(expected, sizeof expected,
                 "%shit.accepted:2|c\n%shit.accepted.cookies:2|c\n%serror.unknown:1|c\n%sconnections:0|g",
                 norm, norm, norm, norm);
        ck_assert_str_eq(c.payload[2], expected);

        ruleset_free(moved);
        ruleset_free(rs);
        statsd_aggregator_free(a);
        metrics_free(m);
}
END_TEST

START_TEST (test_store_gauges) {
        /* Not before the manager published the store's stats; then every gauge, each flush. */
        Metrics *m = NULL;
        StatsdAggregator *a = NULL;
        Capture c = { .n = 0 };
        StatsdPacker p;

        ck_assert_int_eq(metrics_new(&m), 0);
        ck_assert_int_eq(statsd_aggregator_new("d", &a), 0);
        statsd_packer_init(&p, STATSD_PAYLOAD_MAX, capture_emit, &c);
        ck_assert_int_eq(statsd_aggregator_collect(a, m, &p), 1);
        statsd_packer_finish(&p);
        ck_assert_str_eq(c.payload[0], "d.connections:0|g");

        metrics_set_store(m, &(StoreStats){ .counters = 42,
                                            .file_size = 65536,
                                            .memory = 1024,
                                            .journal_bytes = 3 << 20,
                                            .checkpoint_age_usec = 1500000,
                                            .checkpoint_duration_usec = 250000,
                                            .checkpoint_failures = 4 });
        ck_assert_int_eq(statsd_aggregator_collect(a, m, &p), 8);
        statsd_packer_finish(&p);
        ck_assert_str_eq(c.payload[1],
                         "d.connections:0|g\nd.store.counters:42|g\nd.store.size_bytes:65536|g\n"
                         "d.store.memory_bytes:1024|g\nd.journal.bytes:3145728|g\n"
                         "d.checkpoint.age_ms:1500|g\nd.checkpoint.duration_ms:250|g\n"
                         "d.checkpoint.failures:4|g");
        statsd_aggregator_free(a);
        metrics_free(m);
}
END_TEST

START_TEST (test_timer_sample_rate) {
        Metrics *m = NULL;
        StatsdAggregator *a = NULL;
        static Capture c;
        StatsdPacker p;

        c.n = 0;
        ck_assert_int_eq(metrics_new(&m), 0);
        ck_assert_int_eq(statsd_aggregator_new("d", &a), 0);
        /* 100 batches of 4 HITs: 32 samples for 400 HITs, rate 0.08. */
        for (int i = 0; i < 100; i++)
                metrics_observe_batch(m, 4, 4, 250);
        statsd_packer_init(&p, STATSD_PAYLOAD_MAX, capture_emit, &c);
        ck_assert_int_eq(statsd_aggregator_collect(a, m, &p), METRICS_HIT_SAMPLES_MAX + 1);
        statsd_packer_finish(&p);
        ck_assert_uint_eq(c.n, 1);
        char expected[METRICS_HIT_SAMPLES_MAX * 32 + 64] = "";
        for (int i = 0; i < METRICS_HIT_SAMPLES_MAX; i++)
                strcat(expected, "d.hit:0.250|ms|@0.08\n");
        strcat(expected, "d.connections:0|g");
        ck_assert_str_eq(c.payload[0], expected);

        /* One batch with one HIT: rate 1, no @ field. */
        metrics_observe_batch(m, 1, 1, 1000001);
        ck_assert_int_eq(statsd_aggregator_collect(a, m, &p), 2);
        statsd_packer_finish(&p);
        ck_assert_str_eq(c.payload[1], "d.hit:1000.001|ms\nd.connections:0|g");

        /* One batch of 2 HITs: one sample standing for two. */
        metrics_observe_batch(m, 2, 2, 7);
        ck_assert_int_eq(statsd_aggregator_collect(a, m, &p), 2);
        statsd_packer_finish(&p);
        ck_assert_str_eq(c.payload[2], "d.hit:0.007|ms|@0.5\nd.connections:0|g");

        statsd_aggregator_free(a);
        metrics_free(m);
}
END_TEST

START_TEST (test_aggregate_many_labels_split) {
        /* 200 labels hit once each: many lines, split over datagrams, none lost. */
        enum { N = 200 };
        char *text = malloc(N * 64 + 64), *q = text;
        for (int i = 0; i < N; i++)
                q += sprintf(q, "[k=v%d]\ncreditLimit = 1\nresetSeconds = 1\nlabel = label-%03d\n", i, i);
        strcpy(q, "[default]\ncreditLimit = 0\nresetSeconds = 0\n");
        RuleSet *rs = load_ini(text);
        Metrics *m = NULL;
        StatsdAggregator *a = NULL;
        static Capture c;
        StatsdPacker p;

        c.n = 0;
        ck_assert_int_eq(metrics_new(&m), 0);
        ck_assert_int_eq(metrics_set_rules(m, rs), 0);
        ck_assert_int_eq(statsd_aggregator_new("divvy", &a), 0);
        for (int i = 0; i < N; i++)
                metrics_count_hit(m, (size_t) i, METRICS_STATUS_ACCEPTED);
        statsd_packer_init(&p, STATSD_PAYLOAD_MAX, capture_emit, &c);
        ck_assert_int_eq(statsd_aggregator_collect(a, m, &p), N + 2);
        statsd_packer_finish(&p);
        ck_assert_uint_gt(c.n, 1);
        size_t lines = 0;
        for (size_t i = 0; i < c.n; i++) {
                ck_assert_uint_le(strlen(c.payload[i]), STATSD_PAYLOAD_MAX);
                lines += c.n_lines[i];
        }
        ck_assert_uint_eq(lines, N + 2);
        ck_assert_ptr_nonnull(
                strstr(c.payload[0], "divvy.hit.accepted:200|c\ndivvy.hit.accepted.label-000:1|c\n"));
        ck_assert_ptr_nonnull(
                strstr(c.payload[c.n - 1], "divvy.hit.accepted.label-199:1|c\ndivvy.connections:0|g"));

        statsd_aggregator_free(a);
        metrics_free(m);
        ruleset_free(rs);
        free(text);
}
END_TEST

static Suite *statsd_pack_suite(void) {
        Suite *s = suite_create("statsd-pack");
        TCase *tc = tcase_create("core");

        tcase_add_loop_test(tc, test_prefix, 0, sizeof prefixes / sizeof prefixes[0]);
        tcase_add_test(tc, test_prefix_too_long);
        tcase_add_test(tc, test_packer_exact);
        tcase_add_test(tc, test_packer_mtu);
        tcase_add_loop_test(tc, test_aggregate, 0, sizeof aggregations / sizeof aggregations[0]);
        tcase_add_test(tc, test_timer_sample_rate);
        tcase_add_test(tc, test_store_gauges);
        tcase_add_test(tc, test_aggregate_many_labels_split);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        return check_run_suite(statsd_pack_suite());
}
