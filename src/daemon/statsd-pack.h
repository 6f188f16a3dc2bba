/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * statsd-pack.c: the statsd lines, without any socket. The aggregator turns the growth
 * of the Metrics counters since its last collection into divvy's statsd lines; the
 * packer packs lines into as few payloads of at most STATSD_PAYLOAD_MAX bytes as they
 * fit in, and hands each finished one to a callback (the sender, statsd.c, which calls
 * this module and never the reverse).
 *
 * Names (divvy's, from its Instrumenter): counters <prefix>hit.<status> and, for
 * rules with a label, <prefix>hit.<status>.<label> (status: accepted, rejected,
 * canary-accepted, canary-rejected), <prefix>error.<code> (unknown-command,
 * unknown); timer <prefix>hit (milliseconds, fractional); gauge <prefix>connections.
 *
 * Prefix: divvy passes STATSD_PREFIX to the npm statsd-client, whose constructor
 * appends a "." to a non-empty prefix that does not already end in one ("divvy"
 * and "divvy." both give "divvy.hit.accepted"; "" gives "hit.accepted").
 * statsd_normalize_prefix() does the same.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "metrics.h"

#define STATSD_PAYLOAD_MAX                                                                                  \
        1432 /* bytes per datagram: statsd's recommendation for commodity networks (fits a 1500-byte MTU    \
              * with IP/UDP headers and room for tunnels), and what the npm statsd-client defaults to */
#define STATSD_PREFIX_MAX 200 /* bytes: leaves a label (RULE_LABEL_MAX) room in one line */
#define STATSD_LINE_MAX   (STATSD_PREFIX_MAX + RULE_LABEL_MAX + 64) /* bytes: longest line we format */

/* Receives one finished datagram: payload[0..len) holds n_lines lines separated by "\n". */
typedef void (*StatsdEmit)(const char *payload, size_t len, size_t n_lines, void *userdata);

/* Packs lines into payloads of at most max_payload bytes (pure; no I/O). */
typedef struct StatsdPacker {
        char buf[STATSD_PAYLOAD_MAX];
        size_t len;
        size_t n_lines;
        size_t max_payload; /* <= STATSD_PAYLOAD_MAX */
        StatsdEmit emit;
        void *userdata;
        uint64_t n_datagrams; /* emitted so far */
        uint64_t n_oversized; /* lines longer than max_payload, dropped */
} StatsdPacker;

void statsd_packer_init(StatsdPacker *p, size_t max_payload, StatsdEmit emit, void *userdata);
/* Appends one line (without "\n"), emitting the current payload first if the line does
 * not fit in it. Returns 0, or -EMSGSIZE (line dropped, counted) if it fits in no payload. */
int statsd_packer_add(StatsdPacker *p, const char *line, size_t len);
int statsd_packer_addf(StatsdPacker *p, const char *format, ...) __attribute__((format(printf, 2, 3)));
/* Emits the partial payload, if any. */
void statsd_packer_finish(StatsdPacker *p);

/* divvy's prefix rule (see Prefix above) into buf. Returns 0, or -ENAMETOOLONG if the result
 * does not fit in size or exceeds STATSD_PREFIX_MAX. NULL is "". */
int statsd_normalize_prefix(const char *prefix, char *buf, size_t size);

/* Turns Metrics counters into statsd lines: remembers what it sent (loop only). */
typedef struct StatsdAggregator StatsdAggregator;

int statsd_aggregator_new(const char *prefix, StatsdAggregator **ret);
StatsdAggregator *statsd_aggregator_free(StatsdAggregator *a);
/* Feeds p with this interval's lines, in this order: hit.<status> (non-zero growth
 * only), hit.<status>.<label> (idem, labels in first-seen order), error.<code> (idem),
 * the hit timer samples taken from m (with |@rate when fewer samples than HITs),
 * connections gauge (always). Returns the number of lines, or -ENOMEM. Does not call
 * statsd_packer_finish(). */
int statsd_aggregator_collect(StatsdAggregator *a, Metrics *m, StatsdPacker *p);
