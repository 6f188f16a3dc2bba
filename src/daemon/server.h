/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * server.c: the divvy protocol server's connections: accepts them, reads, writes,
 * closes, and times them out. Every connection is in one edge-triggered epoll
 * instance (see connection.h) watched by one sd-event source; its callback only
 * reads and queues the connections that have requests on a ready list. A
 * low-priority defer source (or the epoll callback itself, after reading) then runs
 * one batch (batch.h) over the ready connections, in order, and sends each
 * connection's replies with one send(). The server calls the batch, never the
 * other way round. A store that completes later (sync=always's group commit, a
 * remote backend) leaves a batch in flight: its connections are not read, taken,
 * compacted or closed until it completes, and further batches take the other ready
 * connections, up to SERVER_BATCHES at once. The rules, the store and the metrics are borrowed from the
 * manager, which may swap the rules between batches.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-event.h>

#include "metrics.h"
#include "core/rules.h"
#include "store/store.h"

#define SERVER_LINGER_USEC                                                                                  \
        (2ULL * 1000ULL * 1000ULL) /* 2 s: after an ERR we shut down our side and read until the            \
                                    * peer's EOF this long, so that closing with unread input does          \
                                    * not reset the connection and destroy the ERR reply in flight */
#define SERVER_HOUSEKEEPING_USEC                                                                            \
        (500ULL * 1000ULL) /* 500 ms: how often idle and lingering connections are checked */

#define SERVER_REQUEST_TIMEOUT_DEFAULT_USEC                                                                 \
        (10ULL * 1000ULL * 1000ULL) /* 10 s: a client's request arrives in one write or a few; one          \
                                     * byte every few seconds must not hold a connection forever */

#define SERVER_BATCHES                                                                                      \
        8 /* batches in flight at once in a store that completes later: the group commit's depth            \
           * (each sync covers the batches submitted while the previous one ran) */

typedef struct ServerSettings {
        unsigned max_connections;
        uint64_t idle_timeout_usec;        /* 0: off */
        uint64_t request_timeout_usec;     /* a request must arrive whole this long after its first
                                            * byte (or the previous request's answer); 0: off */
        size_t output_limit;               /* bytes of unsent replies beyond which we stop reading */
        bool debug;                        /* log every request a rule decides, with that rule */
        uint64_t client_time_max_age_usec; /* how old a TAKE/PEEK/CHARGE @time may be; 0 refuses it */
        bool resp;                         /* a connection whose first byte is '*' speaks RESP (#17) */
        bool allow_client_limits;          /* RESP: CL.THROTTLE and RL.* (limits a client defines) */
        bool inspect_admin;                /* PEEK and EXPLAIN on admin listeners only (--inspect=admin) */
        bool grpc_allow_refunds;           /* gRPC: is_negative_hits on any --grpc listener */
        bool grpc_ratelimit_headers;       /* gRPC: the IETF RateLimit fields in each response */
        bool grpc_backend_unavailable;     /* gRPC: UNAVAILABLE where onBackendError would decide */
} ServerSettings;

/* Counters of the connections and the batches, for STATUS and the tests; monotonic unless
 * noted. The outcomes (HITs, ERR replies) are counted in the Metrics only (metrics.h). */
typedef struct ServerCounters {
        uint64_t connections_accepted;
        uint64_t connections_rejected;       /* over max_connections */
        uint64_t connections_current;        /* gauge */
        uint64_t connections_closed_at_stop; /* with nothing to answer: closed without a drain */
        uint64_t batches;
        uint64_t batch_requests; /* requests answered, including errors */
} ServerCounters;

typedef struct Server Server;
typedef struct Connection Connection; /* connection.h */

int server_new(sd_event *e, const ServerSettings *settings, Server **ret);
/* Closes every connection. Accepts NULL. */
Server *server_free(Server *s);

/* Borrowed; the caller keeps them alive and swaps them only between batches (any
 * other event callback is "between batches"). */
void server_set_rules(Server *s, const RuleSet *rules);
void server_set_store(Server *s, Store *store);
/* Another store backend (store.h: StoreSubmitFunc), e.g. a test double that completes later. */
void server_set_backend(Server *s, StoreSubmitFunc submit, void *backend);

/* A batch is in flight in a store that completes later: the rules must not be swapped or
 * freed, nor the server freed, until it is answered. Never true with the local store in
 * sync=none or periodic mode. */
bool server_batch_pending(const Server *s);
/* While held, no new batch starts (requests read wait, unanswered); those in flight complete.
 * A SIGHUP reload waits for none to be in flight: without the hold, a steady load keeps one in
 * flight at every moment and the reload never comes. When the last one completes while held,
 * idle(userdata) runs, once, from the loop (never inside a store's completion). Releasing
 * the hold runs the requests that waited. idle may be NULL. */
void server_hold_batches(Server *s, bool hold, void (*idle)(void *userdata), void *userdata);
/* Borrowed; NULL (the default) counts nothing. The server and its batch update it per
 * hit and per batch with plain stores, never a syscall (see metrics.h). */
void server_set_metrics(Server *s, Metrics *metrics);
/* The metrics set (NULL: none): for what a listener of its own answers (the HTTP API). */
Metrics *server_metrics(const Server *s);

/* Takes over an accepted socket (the listeners call this; is_tcp: set TCP_NODELAY; admin:
 * accepted on an admin listener, see Connection.admin). When stopping it is closed; over
 * max_connections it is answered an ERR and closed. */
void server_accept(int fd, bool is_tcp, bool admin, Server *s);
/* The same for a --grpc listener's socket: a gRPC connection (frontend-grpc.h). */
void server_accept_grpc(int fd, bool is_tcp, bool admin, Server *s);

/* Schedules c, a connection without a socket (Connection.done set, fd < 0, its input the
 * request), into the next batch; c->done runs when that batch answered it. c must stay alive
 * until then, or be taken back with server_unschedule() before a batch took it. */
void server_schedule(Server *s, Connection *c);
void server_unschedule(Server *s, Connection *c);

/* Stop: reads once what each connection's socket already holds, then no more; a connection
 * with nothing to answer or send is closed at once (idle pooled connections do not hold up
 * the exit); the others answer every request read, are half-closed once their output is
 * flushed and linger for the peer's EOF (SERVER_LINGER_USEC); when none is left,
 * sd_event_exit(0). */
void server_stop(Server *s);

const ServerCounters *server_counters(const Server *s);
