/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * batch.c: the batch engine. The server hands it the connections that have requests
 * (batch_take(), one connection after the other); the front-end of each connection's protocol
 * (frontend.h) frames and parses their requests into per-request slots, which the engine
 * matches to their rules, and the engine collects the store hits of all of them. batch_finish() then hands
 * every hit to the store with ONE submit call (store.h: store_submit(), completion-based); once the store
 * completes (the local store at once, inside batch_finish(); a remote one later, from the event loop) the
 * batch formats every slot, counts its outcome in the Metrics once, whatever the protocol, and has the
 * front-end format the reply in request order at the end of each connection's output buffer
 * (room was reserved when the request was taken); then it calls the done callback. Until then the batch is
 * pending: nothing may be taken, and the connections of the batch and their input (the hits point into it)
 * must stay as they are. It never reads, writes or closes a socket: sending the replies is the server's job.
 *
 * The rules, the store and the metrics are borrowed; the rules may be swapped between
 * batches only (no pointer into a RuleSet outlives a batch). The batch's own arrays are
 * allocated once, by batch_new(); the one allocation a batch may make is a connection's output
 * buffer growing when a request is taken (room for its reply; connection_reserve()).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "connection.h"
#include "metrics.h"
#include "core/rules.h"
#include "store/store.h"

#define BATCH_REQUESTS_MAX 1024 /* requests per batch: bounds the latency of one batch */
#define BATCH_HITS_MAX                                                                                      \
        4096 /* store hits per batch (one store_submit(), one journal append): bounds the append and        \
              * the arrays */
#define BATCH_LINES_PER_CONNECTION                                                                          \
        64 /* requests taken from one connection per batch: a pipelining client cannot fill a               \
            * batch and starve the others */
#define BATCH_ERROR_LOG_INTERVAL_USEC                                                                       \
        (10ULL * 1000ULL * 1000ULL) /* 10 s: store errors repeat for every batch; log them this often */

typedef struct BatchSettings {
        size_t output_limit; /* bytes of unsent replies beyond which a connection is not taken from */
        bool debug;          /* log every request a rule decides (not HELLO, RESET) with that rule */
        uint64_t client_time_max_age_usec; /* TAKE/PEEK/CHARGE @time: how old it may be; 0 refuses it */
        bool allow_client_limits;          /* RESP: CL.THROTTLE and RL.* (limits a client defines) */
        bool inspect_admin;                /* PEEK and EXPLAIN on admin listeners only (--inspect=admin) */
        bool grpc_allow_refunds;           /* gRPC: is_negative_hits on any --grpc listener */
        bool grpc_ratelimit_headers;       /* gRPC: the IETF RateLimit fields in each response */
        bool grpc_backend_unavailable;     /* gRPC: UNAVAILABLE where onBackendError would decide */
} BatchSettings;

typedef struct Batch Batch;
typedef struct Frontend Frontend; /* frontend.h */

int batch_new(const BatchSettings *settings, Batch **ret);
Batch *batch_free(Batch *b);

/* Borrowed; see above. */
void batch_set_rules(Batch *b, const RuleSet *rules);
/* The front-end that takes and answers the requests of connections speaking proto (borrowed;
 * frontends.h: frontends_attach() sets every one divvyd has). */
void batch_set_frontend(Batch *b, ConnectionProto proto, const Frontend *fe);
/* The local store (store_submit()), or any backend with the same interface. */
void batch_set_store(Batch *b, Store *store);
void batch_set_backend(Batch *b, StoreSubmitFunc submit, void *backend);

/* Called once per batch_finish(), when the batch is answered: n_answered requests (ERR
 * replies included) have their replies in their connections' output buffers. */
typedef void (*BatchDoneFunc)(Batch *b, size_t n_answered, void *userdata);
void batch_set_done(Batch *b, BatchDoneFunc done, void *userdata);
/* Borrowed; NULL (the default): nothing is counted. */
void batch_set_metrics(Batch *b, Metrics *metrics);
/* The metrics set (NULL if none, borrowed): what RESP's INFO reports, and what a front-end
 * counts of what it answers by itself. */
Metrics *batch_metrics(const Batch *b);

/* True if the batch can take at least one more request (of a new connection). */
bool batch_has_room(const Batch *b);

/* Takes up to BATCH_LINES_PER_CONNECTION requests of c, while the batch has room, by the
 * front-end of c's protocol (lines, or RESP requests on a RESP connection: see connection.h; all
 * are matched, counted and decided alike, and answered in the connection's protocol). Sets
 * c->blocked when c's unsent output is over the output limit, c->closing after a request
 * that is answered ERR (the input after it is dropped; on RESP, only after a framing error or
 * QUIT: other errors are answered and the connection goes on). c must stay alive until
 * batch_finish(). */
void batch_take(Batch *b, Connection *c);

/* Submits the store hits of every request taken (at wall-clock time now_usec); once they
 * are applied, formats every reply and counts it, empties the batch and calls the done
 * callback (also for an empty batch). A connection with an ERR reply gets err_sent and
 * closing; nothing after its ERR is answered. Returns 0 if the batch completed before
 * returning (done was called), 1 if it is pending (done will be called), -EBUSY if a batch
 * is pending already. */
int batch_finish(Batch *b, uint64_t now_usec);

/* A batch was submitted and has not completed yet. */
bool batch_pending(const Batch *b);

/* Batches the store failed so far. */
uint64_t batch_store_errors(const Batch *b);
