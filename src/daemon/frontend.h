/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * frontend.h: what stands between the batch engine (batch.c) and a protocol's front-end
 * (frontend-line.c, frontend-resp.c; frontends.c lists them). The engine keeps the slots, the
 * matching, the one submit to the store, the completion and the counting, whatever the
 * protocol; a front-end takes requests from a connection into slots (with the engine's
 * functions below) and formats a slot's decision or error in its protocol. The engine knows a
 * front-end only by its Frontend, one per ConnectionProto (batch_set_frontend()): a protocol
 * more is a file more, and a row in frontends.c.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "connection.h"
#include "core/algorithm.h"
#include "core/client-limits.h"
#include "core/protocol.h"
#include "core/rules.h"

/* What the engine does with a slot when the batch completes. */
typedef enum BatchSlotKind {
        BATCH_SLOT_VERB,  /* a verb (verb): its rules' hits, decided and counted by the engine */
        BATCH_SLOT_ERROR, /* refused when taken (error_code, error_reason): counted, format_error() */
        BATCH_SLOT_LOCAL, /* answered by the front-end alone (RESP's PING, ...): format_local() */
        BATCH_SLOT_LIMIT, /* a limit the client gives (batch_take_limit()): one hit (DEL: two) */
} BatchSlotKind;

/* One request of a batch, in arrival order. Pointers are valid for the batch only. */
typedef struct BatchSlot {
        Connection *conn;
        ProtoSlice line;     /* the request's bytes in the input: for --debug, EXPLAIN's actor */
        uint32_t first_rule; /* its matched rules in the batch: canaries and continue rules in
                              * config order, then the stop rule */
        uint32_t n_rules;
        uint32_t first_hit; /* its store hits in the batch */
        uint32_t n_hits;
        uint8_t kind; /* BatchSlotKind */
        ProtoVerb verb;
        uint64_t count;   /* the request's count (1 for HIT) */
        uint64_t at_usec; /* the client's timestamp, or 0 */
        /* Nonzero: the slot is one of consecutive slots whose enforcing hits, of any verb, form ONE
         * all-or-nothing group (batch_group_close()); the group's id, its first slot's index + 1. */
        uint32_t group;
        bool group_denied; /* batch_group_close(): a rule that always denies decided the group */
        ProtoErrorCode error_code;
        const char *error_reason; /* static, or NULL */
        /* The front-end's own: what its reply needs beyond the engine's decision. */
        uint8_t fe_cmd, fe_reply, fe_sub;
        ProtoSlice arg;
        uint64_t n;
        void *fe_data;
} BatchSlot;

/* One decision, as the engine hands it to a front-end: the algorithm's result (a RESET's deleted
 * counters in res.credit) and the binding rule (NULL: none, e.g. HELLO, a client's limit). */
typedef struct BatchDecision {
        const Rule *rule;
        AlgoResult res;
} BatchDecision;

struct Frontend {
        const char *name;
        /* Takes up to BATCH_LINES_PER_CONNECTION requests of c into slots of b (batch_take()'s
         * contract). */
        void (*take)(Batch *b, Connection *c);
        /* Formats, at p (room reserved when taken), a BATCH_SLOT_VERB or BATCH_SLOT_LIMIT slot's
         * decision, counted already. Returns the length. */
        size_t (*format_decision)(Batch *b, const BatchSlot *slot, const BatchDecision *d, char *p);
        /* Formats the error code/reason for slot (its own, or the store's), counted already;
         * sets c->closing and c->err_sent if nothing after it is answered. Returns the length. */
        size_t (*format_error)(Batch *b, const BatchSlot *slot, ProtoErrorCode code, const char *reason,
                               char *p);
        /* Formats a BATCH_SLOT_LOCAL slot's reply; NULL if the protocol has none. */
        size_t (*format_local)(Batch *b, const BatchSlot *slot, char *p);
};

/* ---- the engine, for its front-ends (batch.c) ---- */

/* Matched rules per batch (a request is taken only while RULES_MATCH_MAX more fit). */
#define BATCH_RULES_MAX (2 * BATCH_HITS_MAX + BATCH_REQUESTS_MAX)

/* The part of a batch its front-ends read and append to for every request (inline functions
 * below); struct Batch begins with it. */
typedef struct BatchCore {
        BatchSettings settings;
        BatchSlot *slots; /* BATCH_REQUESTS_MAX */
        size_t n_slots;
        size_t n_hits;          /* store hits of the slots */
        size_t n_rules_matched; /* matched rules of the slots */
        ProtoRequest request;   /* scratch: matching is done before the next request is parsed */
} BatchCore;

static inline const BatchSettings *batch_settings(const Batch *b) {
        return &((const BatchCore *) (const void *) b)->settings;
}

/* The request a front-end parses into. */
static inline ProtoRequest *batch_request(Batch *b) {
        return &((BatchCore *) (void *) b)->request;
}

/* batch_has_room(), inlined where it runs for every request. */
static inline bool batch_room(const Batch *b) {
        const BatchCore *k = (const BatchCore *) (const void *) b;

        return k->n_slots < BATCH_REQUESTS_MAX && k->n_hits + RULES_MATCH_MAX <= BATCH_HITS_MAX &&
               k->n_rules_matched + RULES_MATCH_MAX <= BATCH_RULES_MAX;
}

/* Appends a slot for c's request at line (kind BATCH_SLOT_VERB, no rules, no hits); the caller
 * has checked batch_room(). */
static inline BatchSlot *batch_slot_add(Batch *b, Connection *c, ProtoSlice line) {
        BatchCore *k = (BatchCore *) (void *) b;
        BatchSlot *slot = &k->slots[k->n_slots++];

        *slot = (BatchSlot){
                .conn = c,
                .line = line,
                .first_rule = (uint32_t) k->n_rules_matched,
                .first_hit = (uint32_t) k->n_hits,
        };
        return slot;
}

bool batch_reserve_failed(Connection *c, size_t taken);

void batch_slot_error(BatchSlot *slot, ProtoErrorCode code, const char *reason);
/* The checks a parsed request (batch_request(), its verb in slot) passes before its rules are
 * matched, the same in every protocol: its count, a client's timestamp within
 * --client-time-max-age, REFUND and RESET on admin listeners only, and with --inspect=admin PEEK
 * and EXPLAIN too. False: slot's error is set; the front-end answers it as its protocol does. */
bool batch_admit(Batch *b, BatchSlot *slot);
/* Matches the parsed request of slot (the batch's last): its rules and its store hits. */
void batch_match(Batch *b, BatchSlot *slot);
/* A group across slots (gRPC's descriptors of one request, decided all or nothing): the
 * front-end adds n consecutive slots, each with slot->group = batch_group_id() of the first and
 * matched by batch_match(), which then adds only their enforcing hits, all in that group; then
 * batch_group_close() finishes the group: if a rule that always denies matched one of them, the
 * group's hits are PEEKs (nothing is charged; the others report what they have) and each slot's
 * group_denied is set; the canaries' hits follow the group's (refill(b, slot, userdata) parses each slot's
 * request into batch_request() again, for their actors), and every slot of the group covers the group's hits
 * (one failing fails them all). Nothing is charged unless every enforcing hit allows; each reports its
 * decision as if alone (store.h). */
static inline uint32_t batch_group_id(const Batch *b) {
        return (uint32_t) ((const BatchCore *) (const void *) b)->n_slots + 1;
}
void batch_group_close(Batch *b, BatchSlot *first, size_t n,
                       void (*refill)(Batch *b, BatchSlot *slot, void *userdata), void *userdata);
/* Whether a hit of slot was decided by its rule's onBackendError (the store backend failed it). */
bool batch_slot_fallback(const Batch *b, const BatchSlot *slot);
/* batch_room() for a request of n slots taken at once. */
static inline bool batch_room_for(const Batch *b, size_t n) {
        const BatchCore *k = (const BatchCore *) (const void *) b;

        return k->n_slots + n <= BATCH_REQUESTS_MAX && k->n_hits + n * RULES_MATCH_MAX <= BATCH_HITS_MAX &&
               k->n_rules_matched + n * RULES_MATCH_MAX <= BATCH_RULES_MAX;
}
/* Reserves n bytes of replies in c's output (growing it if needed: the one allocation taking a
 * request may make). False: stop taking from c; with nothing taken yet (taken == 0) the
 * connection is out of memory and closes (its input dropped); else the rest waits for the next
 * batch. batch_reserve_failed() is its slow path, false. */
static inline bool batch_reserve_replies(Connection *c, size_t n, size_t taken) {
        return connection_reserve(c, n) || batch_reserve_failed(c, taken);
}
/* The ClientLimit of slot (the batch's last) to parse a client's limit into; NULL without
 * --allow-client-limits. */
ClientLimit *batch_slot_limit(Batch *b, const BatchSlot *slot);
/* slot's limit is parsed: checks its time, adds its one hit (DEL: two, its cell and its GCRA counter). */
void batch_take_limit(Batch *b, BatchSlot *slot);
/* What EXPLAIN reports for slot; req: its request parsed again (the actor is the request's),
 * or NULL. canaries and continues: RULES_MATCH_MAX each. */
void batch_explain(const Batch *b, const BatchSlot *slot, const ProtoRequest *req, ProtoRuleRef *canaries,
                   ProtoRuleRef *continues, ProtoExplain *ret);
ProtoRuleRef batch_rule_ref(const Rule *r);
/* Logs slot's request, its reply (len bytes at reply, ending in "\n") and the rule that decided
 * (--debug). */
void batch_log_reply(const BatchSlot *slot, const Rule *rule, const char *reply, size_t len);
