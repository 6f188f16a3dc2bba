/* SPDX-License-Identifier: MIT */
#pragma once

/* Shared by check_statsd_pack.c and check_statsd.c: a config with labels, a known sequence of
 * metrics, and the statsd datagram divvy's names give it. */

#include "metrics-test-util.h"
#include "daemon/metrics.h"

static const char *const config = "[path=/cookies]\ncreditLimit = 1\nresetSeconds = 60\nlabel = cookies\n"
                                  "[path=/special]\ncreditLimit = 1\nresetSeconds = 60\nlabel = canary\n"
                                  "matchPolicy = canary\n"
                                  "[default]\ncreditLimit = 0\nresetSeconds = 0\n";

/* A known sequence of hits, errors and batches. */
static inline void play_sequence(Metrics *m) {
        metrics_count_hit(m, 0, METRICS_STATUS_ACCEPTED);
        metrics_count_hit(m, 0, METRICS_STATUS_ACCEPTED);
        metrics_count_hit(m, 0, METRICS_STATUS_REJECTED);
        metrics_count_hit(m, 1, METRICS_STATUS_CANARY_ACCEPTED);
        metrics_count_hit(m, 2, METRICS_STATUS_REJECTED);
        metrics_count_hit(m, 2, METRICS_STATUS_ACCEPTED);
        metrics_count_error(m, PROTO_ERROR_UNKNOWN_COMMAND);
        metrics_set_connections(m, 3);
        metrics_observe_batch(m, 2, 1, 1500); /* 1.5 ms */
        metrics_observe_batch(m, 3, 1, 42);   /* 0.042 ms */
}

static const struct {
        const char *prefix;
        const char *first;  /* the datagram after play_sequence() */
        const char *second; /* the next one, with nothing new */
} aggregations[] = {
        { "",
          "hit.accepted:3|c\nhit.rejected:2|c\nhit.canary-accepted:1|c\n"
          "hit.accepted.cookies:2|c\nhit.rejected.cookies:1|c\nhit.canary-accepted.canary:1|c\n"
          "error.unknown-command:1|c\nhit:1.500|ms\nhit:0.042|ms\nconnections:3|g",
          "connections:3|g" },
        { "divvy",
          "divvy.hit.accepted:3|c\ndivvy.hit.rejected:2|c\ndivvy.hit.canary-accepted:1|c\n"
          "divvy.hit.accepted.cookies:2|c\ndivvy.hit.rejected.cookies:1|c\n"
          "divvy.hit.canary-accepted.canary:1|c\ndivvy.error.unknown-command:1|c\n"
          "divvy.hit:1.500|ms\ndivvy.hit:0.042|ms\ndivvy.connections:3|g",
          "divvy.connections:3|g" },
        { "svc.divvy.",
          "svc.divvy.hit.accepted:3|c\nsvc.divvy.hit.rejected:2|c\nsvc.divvy.hit.canary-accepted:1|c\n"
          "svc.divvy.hit.accepted.cookies:2|c\nsvc.divvy.hit.rejected.cookies:1|c\n"
          "svc.divvy.hit.canary-accepted.canary:1|c\nsvc.divvy.error.unknown-command:1|c\n"
          "svc.divvy.hit:1.500|ms\nsvc.divvy.hit:0.042|ms\nsvc.divvy.connections:3|g",
          "svc.divvy.connections:3|g" },
};
