/* SPDX-License-Identifier: MIT */
/* metrics.c: counting, label slots across reloads, and the Prometheus text rendering. */

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/metrics.h"
#include "metrics-test-util.h"
#include "check-run.h"

/* Rule 0 labelled "cookies", 1 canary labelled "canary", 2 unlabelled, 3 default. */
static const char *const config_a = "[path=/cookies]\ncreditLimit = 1\nresetSeconds = 60\nlabel = cookies\n"
                                    "[path=/special]\ncreditLimit = 1\nresetSeconds = 60\nlabel = canary\n"
                                    "matchPolicy = canary\n"
                                    "[path=/x]\ncreditLimit = 1\nresetSeconds = 60\n"
                                    "[default]\ncreditLimit = 0\nresetSeconds = 0\n";
/* After a reload: "cookies" moved to index 1, "canary" gone, "new" added at index 0. */
static const char *const config_b = "[path=/new]\ncreditLimit = 1\nresetSeconds = 60\nlabel = new\n"
                                    "[path=/cookies]\ncreditLimit = 1\nresetSeconds = 60\nlabel = cookies\n"
                                    "[default]\ncreditLimit = 0\nresetSeconds = 0\n";

static char *render(Metrics *m) {
        char *text = NULL;
        size_t len = 0;
        ck_assert_int_eq(metrics_render(m, &text, &len), 0);
        ck_assert_uint_eq(strlen(text), len);
        return text;
}

static const struct {
        MetricsStatus status;
        const char *name;
} statuses[] = {
        { METRICS_STATUS_ACCEPTED, "accepted" },
        { METRICS_STATUS_REJECTED, "rejected" },
        { METRICS_STATUS_CANARY_ACCEPTED, "canary-accepted" },
        { METRICS_STATUS_CANARY_REJECTED, "canary-rejected" },
};

START_TEST (test_status_names) {
        ck_assert_str_eq(metrics_status_to_string(statuses[_i].status), statuses[_i].name);
        ck_assert_int_eq(metrics_status_from_string(statuses[_i].name), statuses[_i].status);
}
END_TEST

START_TEST (test_status_invalid) {
        ck_assert_ptr_null(metrics_status_to_string(_METRICS_STATUS_MAX));
        ck_assert_int_eq(metrics_status_from_string("Accepted"), -EINVAL);
        ck_assert_int_eq(metrics_status_from_string(NULL), -EINVAL);
}
END_TEST

static const struct {
        const char *in, *out;
} escapes[] = {
        { "", "" },           { "plain-label_1", "plain-label_1" }, { "a\"b", "a\\\"b" },
        { "a\\b", "a\\\\b" }, { "line\nbreak", "line\\nbreak" },    { "\\\"\n", "\\\\\\\"\\n" },
};

START_TEST (test_escape_label_value) {
        char buf[64];
        size_t n = metrics_escape_label_value(escapes[_i].in, buf, sizeof buf);
        ck_assert_str_eq(buf, escapes[_i].out);
        ck_assert_uint_eq(n, strlen(escapes[_i].out));
}
END_TEST

START_TEST (test_escape_truncates) {
        char buf[4];
        ck_assert_uint_eq(metrics_escape_label_value("a\"bc", buf, sizeof buf), 5);
        ck_assert_str_eq(buf, "a\\\"");
        ck_assert_uint_eq(metrics_escape_label_value("abc", buf, 0), 3);
}
END_TEST

START_TEST (test_fresh_render) {
        Metrics *m = NULL;
        ck_assert_int_eq(metrics_new(&m), 0);
        char *t = render(m);

        static const char *const expected[] = {
                "# HELP divvy_tcp_connections_total Total number of open TCP connections to Divvy.",
                "# TYPE divvy_tcp_connections_total gauge",
                "divvy_tcp_connections_total 0",
                "# TYPE divvy_hit_duration_seconds histogram",
                "divvy_hit_duration_seconds_bucket{le=\"+Inf\"} 0",
                "divvy_hit_duration_seconds_sum 0.000000",
                "divvy_hit_duration_seconds_count 0",
                "# TYPE divvy_hits_total counter",
                "divvy_hits_total{status=\"accepted\",rule_label=\"\"} 0",
                "divvy_hits_total{status=\"rejected\",rule_label=\"\"} 0",
                "divvy_hits_total{status=\"canary-accepted\",rule_label=\"\"} 0",
                "divvy_hits_total{status=\"canary-rejected\",rule_label=\"\"} 0",
                "# TYPE divvy_errors_total counter",
                "divvy_errors_total{code=\"unknown-command\"} 0",
                "divvy_errors_total{code=\"unknown\"} 0",
                "# TYPE divvyd_store_size_bytes gauge",
                "divvyd_store_size_bytes 0",
                "# TYPE divvyd_store_counters gauge",
                "divvyd_store_counters 0",
                "divvyd_store_counters_max 0",
                "divvyd_store_counters_refused_total{reason=\"limit\"} 0",
                "divvyd_store_counters_refused_total{reason=\"memory\"} 0",
                "# TYPE divvyd_batch_size histogram",
                "divvyd_batch_size_bucket{le=\"1024\"} 0",
                "divvyd_batch_size_sum 0",
                "divvyd_batch_size_count 0",
                "# TYPE divvyd_sweeper_deleted_total counter",
                "divvyd_sweeper_deleted_total 0",
                "# TYPE divvyd_reloads_total counter",
                "divvyd_reloads_total{result=\"ok\"} 0",
                "divvyd_reloads_total{result=\"failed\"} 0",
                "# TYPE divvyd_store_memory_bytes gauge",
                "divvyd_store_memory_bytes 0",
                "# TYPE divvyd_journal_bytes gauge",
                "divvyd_journal_bytes 0",
                "# TYPE divvyd_journal_segments gauge",
                "divvyd_journal_segments 0",
                "# TYPE divvyd_journal_syncs_total counter",
                "divvyd_journal_syncs_total 0",
                "# TYPE divvyd_journal_sync_seconds_total counter",
                "divvyd_journal_sync_seconds_total 0.000000",
                "# TYPE divvyd_checkpoint_age_seconds gauge",
                "divvyd_checkpoint_age_seconds 0.000",
                "# TYPE divvyd_checkpoint_duration_seconds gauge",
                "divvyd_checkpoint_duration_seconds 0.000",
                "# TYPE divvyd_checkpoint_failures_total counter",
                "divvyd_checkpoint_failures_total 0",
                "# TYPE divvyd_requests_total counter",
                "divvyd_requests_total{verb=\"take\",decision=\"allowed\"} 0",
                "divvyd_requests_total{verb=\"explain\",decision=\"denied\"} 0",
                "# TYPE divvyd_grpc_calls_total counter",
                "divvyd_grpc_calls_total{method=\"ShouldRateLimit\",code=\"OK\"} 0",
                "# TYPE divvyd_http_api_responses_total counter",
                "divvyd_http_api_responses_total{status=\"200\"} 0",
                "# TYPE divvyd_credits_consumed_total counter",
                "divvyd_credits_consumed_total{verb=\"charge\"} 0",
                "# TYPE divvyd_statsd_dropped_total counter",
                "divvyd_statsd_dropped_total 0",
                "# TYPE divvyd_build_info gauge",
                "divvyd_build_info{version=\"" PACKAGE_VERSION "\"} 1",
        };
        for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
                ck_assert_line(t, expected[i]);

        /* Every sample belongs to a family announced by # HELP and # TYPE before it. */
        char *copy = strdup(t), *save = NULL, family[128] = "";
        size_t n_help = 0, n_type = 0;
        for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                if (strncmp(line, "# HELP ", 7) == 0) {
                        n_help++;
                        sscanf(line + 7, "%127s", family);
                } else if (strncmp(line, "# TYPE ", 7) == 0) {
                        n_type++;
                        ck_assert_int_eq(strncmp(line + 7, family, strlen(family)), 0);
                } else {
                        ck_assert_msg(strncmp(line, family, strlen(family)) == 0, "%s outside %s", line,
                                      family);
                        ck_assert_ptr_nonnull(strchr(line, ' '));
                }
        }
        ck_assert_uint_eq(n_help, 26);
        ck_assert_uint_eq(n_type, 26);
        ck_assert(t[strlen(t) - 1] == '\n');
        free(copy);
        free(t);
        metrics_free(m);
}
END_TEST

START_TEST (test_hits_by_label_and_reload) {
        Metrics *m = NULL;
        RuleSet *a = load_ini(config_a), *b = load_ini(config_b);

        ck_assert_int_eq(metrics_new(&m), 0);
        ck_assert_int_eq(metrics_set_rules(m, a), 0);
        metrics_count_hit(m, 0, METRICS_STATUS_ACCEPTED);
        metrics_count_hit(m, 0, METRICS_STATUS_ACCEPTED);
        metrics_count_hit(m, 0, METRICS_STATUS_REJECTED);
        metrics_count_hit(m, 1, METRICS_STATUS_CANARY_ACCEPTED);
        metrics_count_hit(m, 1, METRICS_STATUS_CANARY_REJECTED);
        metrics_count_hit(m, 2, METRICS_STATUS_ACCEPTED);
        metrics_count_hit(m, 3, METRICS_STATUS_REJECTED);
        metrics_count_hit(m, 3, METRICS_STATUS_REJECTED);
        metrics_count_hit(m, 99, METRICS_STATUS_ACCEPTED); /* out of range: unlabelled */
        metrics_count_hit(m, 0, _METRICS_STATUS_MAX);      /* ignored */

        ck_assert_uint_eq(metrics_n_labels(m), 3);
        ck_assert_ptr_null(metrics_label_name(m, 0));
        ck_assert_str_eq(metrics_label_name(m, 1), "cookies");
        ck_assert_str_eq(metrics_label_name(m, 2), "canary");
        ck_assert_ptr_null(metrics_label_name(m, 3));
        ck_assert_uint_eq(metrics_hits_total(m, METRICS_STATUS_ACCEPTED), 4);
        ck_assert_uint_eq(metrics_hits_total(m, METRICS_STATUS_REJECTED), 3);

        char *t = render(m);
        ck_assert_line(t, "divvy_hits_total{status=\"accepted\",rule_label=\"\"} 2");
        ck_assert_line(t, "divvy_hits_total{status=\"rejected\",rule_label=\"\"} 2");
        ck_assert_line(t, "divvy_hits_total{status=\"canary-accepted\",rule_label=\"\"} 0");
        ck_assert_line(t, "divvy_hits_total{status=\"accepted\",rule_label=\"cookies\"} 2");
        ck_assert_line(t, "divvy_hits_total{status=\"rejected\",rule_label=\"cookies\"} 1");
        ck_assert_line(t, "divvy_hits_total{status=\"canary-accepted\",rule_label=\"canary\"} 1");
        ck_assert_line(t, "divvy_hits_total{status=\"canary-rejected\",rule_label=\"canary\"} 1");
        /* Labelled series appear with their first hit, as in divvy. */
        ck_assert_no_line(t, "divvy_hits_total{status=\"canary-accepted\",rule_label=\"cookies\"} 0");
        free(t);

        /* Reload: counts follow the label, not the rule index; a vanished label keeps its
         * counts; the new label gets a new slot. */
        ck_assert_int_eq(metrics_set_rules(m, b), 0);
        metrics_count_hit(m, 1, METRICS_STATUS_ACCEPTED); /* cookies */
        metrics_count_hit(m, 0, METRICS_STATUS_REJECTED); /* new */
        metrics_count_hit(m, 2, METRICS_STATUS_ACCEPTED); /* default: unlabelled */
        ck_assert_uint_eq(metrics_n_labels(m), 4);
        ck_assert_str_eq(metrics_label_name(m, 3), "new");
        t = render(m);
        ck_assert_line(t, "divvy_hits_total{status=\"accepted\",rule_label=\"cookies\"} 3");
        ck_assert_line(t, "divvy_hits_total{status=\"rejected\",rule_label=\"new\"} 1");
        ck_assert_line(t, "divvy_hits_total{status=\"accepted\",rule_label=\"\"} 3");
        ck_assert_line(t, "divvy_hits_total{status=\"canary-accepted\",rule_label=\"canary\"} 1");
        free(t);

        /* Reloading the first config again reuses the existing slots. */
        ck_assert_int_eq(metrics_set_rules(m, a), 0);
        ck_assert_uint_eq(metrics_n_labels(m), 4);
        metrics_count_hit(m, 1, METRICS_STATUS_CANARY_ACCEPTED);
        ck_assert_uint_eq(metrics_label_hits(m, 2, METRICS_STATUS_CANARY_ACCEPTED), 2);

        /* No rules at all: everything unlabelled. */
        ck_assert_int_eq(metrics_set_rules(m, NULL), 0);
        metrics_count_hit(m, 0, METRICS_STATUS_ACCEPTED);
        ck_assert_uint_eq(metrics_label_hits(m, 0, METRICS_STATUS_ACCEPTED), 4);

        ruleset_free(a);
        ruleset_free(b);
        metrics_free(m);
}
END_TEST

START_TEST (test_many_labels) {
        /* More labels than one chunk and the first hash table: slots stay stable. */
        enum { N = METRICS_LABEL_CHUNK + 100 };
        size_t size = (size_t) N * 64 + 64;
        char *text = malloc(size), *p = text;
        for (int i = 0; i < N; i++)
                p += sprintf(p, "[k=v%d]\ncreditLimit = 1\nresetSeconds = 1\nlabel = l%d\n", i, i);
        strcpy(p, "[default]\ncreditLimit = 0\nresetSeconds = 0\n");
        RuleSet *rs = load_ini(text);
        Metrics *m = NULL;

        ck_assert_int_eq(metrics_new(&m), 0);
        ck_assert_int_eq(metrics_set_rules(m, rs), 0);
        ck_assert_uint_eq(metrics_n_labels(m), N + 1);
        for (int i = 0; i < N; i++)
                for (int k = 0; k <= i % 3; k++)
                        metrics_count_hit(m, (size_t) i, METRICS_STATUS_ACCEPTED);
        ck_assert_int_eq(metrics_set_rules(m, rs), 0);
        ck_assert_uint_eq(metrics_n_labels(m), N + 1);
        for (int i = 0; i < N; i++) {
                char name[16];
                snprintf(name, sizeof name, "l%d", i);
                ck_assert_str_eq(metrics_label_name(m, (size_t) i + 1), name);
                ck_assert_uint_eq(metrics_label_hits(m, (size_t) i + 1, METRICS_STATUS_ACCEPTED), i % 3 + 1);
        }
        char *t = render(m);
        ck_assert_line(t, "divvy_hits_total{status=\"accepted\",rule_label=\"l1100\"} 3");
        free(t);
        metrics_free(m);
        ruleset_free(rs);
        free(text);
}
END_TEST

START_TEST (test_histograms) {
        Metrics *m = NULL;
        ck_assert_int_eq(metrics_new(&m), 0);

        metrics_observe_batch(m, 1, 1, 5);         /* le 1e-05 */
        metrics_observe_batch(m, 3, 2, 10);        /* le 1e-05: bounds are inclusive */
        metrics_observe_batch(m, 4, 3, 30);        /* le 5e-05 */
        metrics_observe_batch(m, 1000, 1, 1500);   /* le 0.002 */
        metrics_observe_batch(m, 1025, 1, 600000); /* +Inf */
        metrics_observe_batch(m, 2, 0, 999);       /* no HIT: only the batch size */
        metrics_observe_batch(m, 0, 0, 1);         /* nothing */

        char *t = render(m);
        static const char *const expected[] = {
                "divvy_hit_duration_seconds_bucket{le=\"1e-05\"} 3",
                "divvy_hit_duration_seconds_bucket{le=\"2.5e-05\"} 3",
                "divvy_hit_duration_seconds_bucket{le=\"5e-05\"} 6",
                "divvy_hit_duration_seconds_bucket{le=\"0.0001\"} 6",
                "divvy_hit_duration_seconds_bucket{le=\"0.00025\"} 6",
                "divvy_hit_duration_seconds_bucket{le=\"0.0005\"} 6",
                "divvy_hit_duration_seconds_bucket{le=\"0.001\"} 6",
                "divvy_hit_duration_seconds_bucket{le=\"0.002\"} 7",
                "divvy_hit_duration_seconds_bucket{le=\"0.005\"} 7",
                "divvy_hit_duration_seconds_bucket{le=\"0.01\"} 7",
                "divvy_hit_duration_seconds_bucket{le=\"0.1\"} 7",
                "divvy_hit_duration_seconds_bucket{le=\"0.5\"} 7",
                "divvy_hit_duration_seconds_bucket{le=\"+Inf\"} 8",
                /* 5 + 2*10 + 3*30 + 1500 + 600000 = 601615 us */
                "divvy_hit_duration_seconds_sum 0.601615",
                "divvy_hit_duration_seconds_count 8",
                "divvyd_batch_size_bucket{le=\"1\"} 1",
                "divvyd_batch_size_bucket{le=\"2\"} 2",
                "divvyd_batch_size_bucket{le=\"4\"} 4",
                "divvyd_batch_size_bucket{le=\"8\"} 4",
                "divvyd_batch_size_bucket{le=\"512\"} 4",
                "divvyd_batch_size_bucket{le=\"1024\"} 5",
                "divvyd_batch_size_bucket{le=\"+Inf\"} 6",
                "divvyd_batch_size_sum 2035",
                "divvyd_batch_size_count 6",
        };
        for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
                ck_assert_line(t, expected[i]);
        /* Buckets are rendered in increasing order of le. */
        ck_assert(strstr(t, "le=\"1e-05\"") < strstr(t, "le=\"0.5\""));
        free(t);
        metrics_free(m);
}
END_TEST

START_TEST (test_gauges_and_counters) {
        Metrics *m = NULL;
        ck_assert_int_eq(metrics_new(&m), 0);

        metrics_set_connections(m, 7);
        metrics_set_connections(m, 5);
        metrics_count_error(m, PROTO_ERROR_UNKNOWN_COMMAND);
        metrics_count_error(m, PROTO_ERROR_UNKNOWN);
        metrics_count_error(m, PROTO_ERROR_UNKNOWN);
        metrics_count_error(m, _PROTO_ERROR_MAX); /* ignored */
        metrics_count_reload(m, true);
        metrics_count_reload(m, true);
        metrics_count_reload(m, false);
        metrics_set_store(m, &(StoreStats){ .counters = 42,
                                            .file_size = 65536,
                                            .swept_total = 9,
                                            .memory = 1 << 20,
                                            .journal_bytes = 3 << 20,
                                            .journal_segments = 2,
                                            .syncs = 77,
                                            .sync_usec = 8123456,
                                            .checkpoint_age_usec = 1500000,
                                            .checkpoint_duration_usec = 250000,
                                            .checkpoint_failures = 4,
                                            .counters_max = 1000,
                                            .refused_limit = 12,
                                            .refused_memory = 3 });
        metrics_add_statsd_dropped(m, 3);
        metrics_add_statsd_dropped(m, 4);

        ck_assert(!metrics_serving(m));
        metrics_set_serving(m, true);
        ck_assert(metrics_serving(m));
        ck_assert_uint_eq(metrics_connections(m), 5);
        ck_assert_uint_eq(metrics_errors(m, PROTO_ERROR_UNKNOWN), 2);
        ck_assert_uint_eq(metrics_errors(m, _PROTO_ERROR_MAX), 0);
        ck_assert_uint_eq(metrics_statsd_dropped(m), 7);

        char *t = render(m);
        ck_assert_line(t, "divvy_tcp_connections_total 5");
        ck_assert_line(t, "divvy_errors_total{code=\"unknown-command\"} 1");
        ck_assert_line(t, "divvy_errors_total{code=\"unknown\"} 2");
        ck_assert_line(t, "divvyd_reloads_total{result=\"ok\"} 2");
        ck_assert_line(t, "divvyd_reloads_total{result=\"failed\"} 1");
        ck_assert_line(t, "divvyd_store_size_bytes 65536");
        ck_assert_line(t, "divvyd_store_memory_bytes 1048576");
        ck_assert_line(t, "divvyd_journal_bytes 3145728");
        ck_assert_line(t, "divvyd_journal_segments 2");
        ck_assert_line(t, "divvyd_journal_syncs_total 77");
        ck_assert_line(t, "divvyd_journal_sync_seconds_total 8.123456");
        ck_assert_line(t, "divvyd_checkpoint_age_seconds 1.500");
        ck_assert_line(t, "divvyd_checkpoint_duration_seconds 0.250");
        ck_assert_line(t, "divvyd_checkpoint_failures_total 4");
        ck_assert_line(t, "divvyd_store_counters 42");
        ck_assert_line(t, "divvyd_store_counters_max 1000");
        ck_assert_line(t, "divvyd_store_counters_refused_total{reason=\"limit\"} 12");
        ck_assert_line(t, "divvyd_store_counters_refused_total{reason=\"memory\"} 3");
        ck_assert_line(t, "divvyd_sweeper_deleted_total 9");
        ck_assert_line(t, "divvyd_statsd_dropped_total 7");
        free(t);
        metrics_free(m);
}
END_TEST

START_TEST (test_backend) {
        /* The Redis store's block: absent until set, then every series with its labels. */
        Metrics *m = NULL;
        char *t;

        ck_assert_int_eq(metrics_new(&m), 0);
        t = render(m);
        ck_assert_ptr_null(strstr(t, "divvyd_backend_"));
        free(t);
        MetricsBackend b = { .up = true,
                             .errors = { [METRICS_BACKEND_TIMEOUT] = 3,
                                         [METRICS_BACKEND_CONNECTION] = 5,
                                         [METRICS_BACKEND_PROTOCOL] = 1,
                                         [METRICS_BACKEND_SERVER] = 10 },
                             .fallbacks = { [RULE_ON_ERROR_ALLOW] = 2,
                                            [RULE_ON_ERROR_DENY] = 4,
                                            [RULE_ON_ERROR_LOCAL] = 6 },
                             .rtt_usec_sum = 1500,
                             .rtt_count = 3,
                             .reconnects = 7,
                             .noscript_reloads = 8,
                             .redirects = 9 };
        metrics_set_backend(m, &b);
        t = render(m);
        ck_assert_line(t, "divvyd_backend_up 1");
        ck_assert_line(t, "divvyd_backend_errors_total{kind=\"timeout\"} 3");
        ck_assert_line(t, "divvyd_backend_errors_total{kind=\"connection\"} 5");
        ck_assert_line(t, "divvyd_backend_errors_total{kind=\"protocol\"} 1");
        ck_assert_line(t, "divvyd_backend_errors_total{kind=\"server\"} 10");
        ck_assert_line(t, "divvyd_backend_fallbacks_total{policy=\"allow\"} 2");
        ck_assert_line(t, "divvyd_backend_fallbacks_total{policy=\"deny\"} 4");
        ck_assert_line(t, "divvyd_backend_fallbacks_total{policy=\"local\"} 6");
        ck_assert_line(t, "divvyd_backend_round_trip_seconds_sum 0.001500");
        ck_assert_line(t, "divvyd_backend_round_trip_seconds_count 3");
        ck_assert_line(t, "divvyd_backend_reconnects_total 7");
        ck_assert_line(t, "divvyd_backend_noscript_reloads_total 8");
        ck_assert_line(t, "divvyd_backend_redirects_total 9");
        free(t);
        b.up = false;
        metrics_set_backend(m, &b);
        t = render(m);
        ck_assert_line(t, "divvyd_backend_up 0");
        free(t);
        metrics_free(m);
}
END_TEST

START_TEST (test_hit_samples) {
        Metrics *m = NULL;
        uint64_t out[METRICS_HIT_SAMPLES_MAX], hits = 99;
        ck_assert_int_eq(metrics_new(&m), 0);

        ck_assert_uint_eq(metrics_take_hit_samples(m, out, METRICS_HIT_SAMPLES_MAX, &hits), 0);
        ck_assert_uint_eq(hits, 0);

        /* Under the cap: every batch is a sample, in order. */
        metrics_observe_batch(m, 3, 2, 11);
        metrics_observe_batch(m, 1, 0, 500); /* no HIT: not a sample */
        metrics_observe_batch(m, 5, 5, 22);
        ck_assert_uint_eq(metrics_take_hit_samples(m, out, METRICS_HIT_SAMPLES_MAX, &hits), 2);
        ck_assert_uint_eq(out[0], 11);
        ck_assert_uint_eq(out[1], 22);
        ck_assert_uint_eq(hits, 7);

        /* Over the cap: at most METRICS_HIT_SAMPLES_MAX, each one a real observation. */
        for (uint64_t i = 0; i < 1000; i++)
                metrics_observe_batch(m, 2, 2, 1000 + i);
        size_t n = metrics_take_hit_samples(m, out, METRICS_HIT_SAMPLES_MAX, &hits);
        ck_assert_uint_eq(n, METRICS_HIT_SAMPLES_MAX);
        ck_assert_uint_eq(hits, 2000);
        bool later = false;
        for (size_t i = 0; i < n; i++) {
                ck_assert(out[i] >= 1000 && out[i] < 2000);
                later |= out[i] >= 1000 + METRICS_HIT_SAMPLES_MAX;
        }
        ck_assert_msg(later, "reservoir kept only the first batches");

        /* Reset after taking. */
        ck_assert_uint_eq(metrics_take_hit_samples(m, out, 4, &hits), 0);
        ck_assert_uint_eq(hits, 0);
        metrics_free(m);
}
END_TEST

static Suite *metrics_suite(void) {
        Suite *s = suite_create("metrics");
        TCase *tc = tcase_create("core");

        tcase_add_loop_test(tc, test_status_names, 0, sizeof statuses / sizeof statuses[0]);
        tcase_add_test(tc, test_status_invalid);
        tcase_add_loop_test(tc, test_escape_label_value, 0, sizeof escapes / sizeof escapes[0]);
        tcase_add_test(tc, test_escape_truncates);
        tcase_add_test(tc, test_fresh_render);
        tcase_add_test(tc, test_hits_by_label_and_reload);
        tcase_add_test(tc, test_many_labels);
        tcase_add_test(tc, test_histograms);
        tcase_add_test(tc, test_gauges_and_counters);
        tcase_add_test(tc, test_backend);
        tcase_add_test(tc, test_hit_samples);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        return check_run_suite(metrics_suite());
}
