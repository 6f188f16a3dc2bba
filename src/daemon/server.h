/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * server.c: the divvy protocol server. Owns the client connections and runs the
 * batch engine: socket callbacks only read and queue the connection on a ready
 * list; a low-priority defer source then frames, parses and matches the queued
 * lines of every ready connection, applies all their counter hits with ONE
 * store_apply(), formats the replies in order and writes each connection's output
 * with one send(). The rules and the store are borrowed from the manager, which
 * may swap the rules between batches (no pointer into a RuleSet outlives a batch).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-event.h>

#include "metrics.h"
#include "core/protocol.h"
#include "core/rules.h"
#include "store/store.h"

#define SERVER_BATCH_REQUESTS_MAX 1024 /* requests per batch: bounds the latency of one batch */
#define SERVER_BATCH_HITS_MAX                                                                               \
        4096 /* store hits per batch (one write transaction): bounds the transaction and the arrays */
#define SERVER_LINES_PER_CONNECTION                                                                         \
        64 /* requests taken from one connection per batch: a pipelining client cannot fill a               \
            * batch and starve the others */
#define SERVER_LINGER_USEC                                                                                  \
        (2ULL * 1000ULL * 1000ULL) /* 2 s: after an ERR we shut down our side and read until the            \
                                    * peer's EOF this long, so that closing with unread input does          \
                                    * not reset the connection and destroy the ERR reply in flight */
#define SERVER_HOUSEKEEPING_USEC                                                                            \
        (500ULL * 1000ULL) /* 500 ms: how often idle and lingering connections are checked */

typedef struct ServerSettings {
        unsigned max_connections;
        uint64_t idle_timeout_usec; /* 0: off */
        size_t output_limit;        /* bytes of unsent replies beyond which we stop reading */
        bool debug;                 /* log every HIT with its deciding rule */
} ServerSettings;

/* Counters for STATUS and (later) metrics. Monotonic unless noted. */
typedef struct ServerCounters {
        uint64_t hits_accepted;
        uint64_t hits_rejected;
        uint64_t hits_canary_accepted;
        uint64_t hits_canary_rejected;
        uint64_t errors[_PROTO_ERROR_MAX]; /* ERR replies sent, by code */
        uint64_t store_errors;             /* failed store_apply() batches */
        uint64_t connections_accepted;
        uint64_t connections_rejected; /* over max_connections */
        uint64_t connections_current;  /* gauge */
        uint64_t batches;
        uint64_t batch_requests; /* requests answered, including errors */
} ServerCounters;

typedef struct Server Server;

int server_new(sd_event *e, const ServerSettings *settings, Server **ret);
/* Closes every connection. Accepts NULL. */
Server *server_free(Server *s);

/* Borrowed; the caller keeps them alive and swaps them only between batches (any
 * other event callback is "between batches"). */
void server_set_rules(Server *s, const RuleSet *rules);
void server_set_store(Server *s, Store *store);
/* Borrowed; NULL (the default) counts nothing. The server updates it per hit and per
 * batch with plain stores, never a syscall (see metrics.h). */
void server_set_metrics(Server *s, Metrics *metrics);

/* Takes over an accepted socket (a listener_accept_t target: userdata is the Server). */
void server_accept(int fd, bool is_tcp, Server *s);

/* Stop: no more reads, answer every request already read, close each connection once
 * its output is flushed; when none is left, sd_event_exit(0). */
void server_stop(Server *s);

const ServerCounters *server_counters(const Server *s);
