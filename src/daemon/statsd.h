/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * statsd.c: divvy's statsd metrics, aggregated, and their sender. Nothing happens per
 * hit: every interval a timer has the aggregator (statsd-pack.h) turn the growth of the
 * Metrics counters since the last flush into counter lines, the sampled `hit` timer
 * and the `connections` gauge, packed into as few datagrams as fit STATSD_PAYLOAD_MAX,
 * and sends them over UDP, or over TCP (one line per "\n").
 *
 * A dead or slow statsd never blocks the loop: sockets are non-blocking; UDP
 * errors (ECONNREFUSED from an earlier datagram to a closed port, ENOBUFS, ...)
 * drop that datagram; over TCP a bounded output buffer drops what does not fit,
 * and a failed or closed connection is retried with exponential backoff. Every
 * dropped line is counted (divvyd_statsd_dropped_total). The lines' names: statsd-pack.h.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-event.h>

#include "metrics.h"
#include "statsd-pack.h"

#define STATSD_INTERVAL_DEFAULT_USEC (1000ULL * 1000ULL) /* 1 s: flush interval */
#define STATSD_TCP_BUFFER_MAX                                                                               \
        (64u * 1024u) /* bytes of unsent TCP output: a stalled statsd costs at most this much memory */
#define STATSD_DISCARD_MAX                                                                                  \
        (16u * 1024u) /* bytes a TCP collector sent (it should send none) read and dropped per wake-up      \
                       * of the loop, so that one that never stops cannot hold the loop */
#define STATSD_BACKOFF_MIN_USEC (100ULL * 1000ULL)          /* 100 ms: first TCP reconnect delay */
#define STATSD_BACKOFF_MAX_USEC (30ULL * 1000ULL * 1000ULL) /* 30 s: reconnect delay cap */

typedef struct StatsdSettings {
        const char *host; /* name or address; resolved once, at statsd_new() */
        uint16_t port;
        const char *prefix; /* NULL or "" for none */
        bool tcp;
        uint64_t interval_usec; /* 0 = default */
} StatsdSettings;

typedef struct Statsd Statsd;

/* Resolves the host, opens the socket (UDP) or starts connecting (TCP) and arms the
 * flush timer on e. m is borrowed and must outlive the Statsd. On failure returns
 * -errno with a sentence in errbuf (e.g. 'cannot resolve statsd host "x": Name or
 * service not known'). */
int statsd_new(sd_event *e, const StatsdSettings *settings, Metrics *m, Statsd **ret, char *errbuf,
               size_t errbuf_size);
/* Sends a last flush (best effort), closes. Accepts NULL. */
Statsd *statsd_free(Statsd *s);
static inline void statsd_freep(Statsd **s) {
        if (*s)
                statsd_free(*s);
}

/* Collects and sends now (the timer calls this). Returns the number of lines collected
 * (sent, queued for TCP, or counted as dropped), or -ENOMEM. */
int statsd_flush(Statsd *s);
