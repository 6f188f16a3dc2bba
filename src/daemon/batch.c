/* SPDX-License-Identifier: MIT */
/* batch.c: the batch engine: requests taken by the front-ends, matched, applied to the store,
 * decided, counted, answered by the front-ends; see batch.h and frontend.h. */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "batch.h"
#include "frontend.h"
#include "log.h"

#include "shared/clock.h"

struct Batch {
        BatchCore core;         /* first: what the front-ends see (frontend.h) */
        const RuleSet *rules;   /* borrowed */
        StoreSubmitFunc submit; /* the store backend: one call per batch */
        void *backend;          /* borrowed */
        BatchDoneFunc done;     /* called when a batch is answered */
        void *done_userdata;
        Metrics *metrics;                                 /* borrowed; may be NULL */
        const Frontend *frontends[_CONNECTION_PROTO_MAX]; /* borrowed */

        /* Allocated once, by batch_new() (and core.slots). */
        StoreHit *hits;             /* BATCH_HITS_MAX, core.n_hits of them */
        const Rule **rules_matched; /* BATCH_RULES_MAX, core.n_rules_matched of them */
        int32_t *rule_hit;          /* BATCH_RULES_MAX: the hit of each matched rule, or -1 */
        ClientLimit *limits;        /* BATCH_REQUESTS_MAX, one per slot; only with allow_client_limits */
        /* BATCH_HITS_MAX + 1: the actor of each hit whose rule combines several fields
         * (rule_actor() writes it there), and the last for EXPLAIN's */
        char (*actors)[RULE_ACTOR_COMBINED_MAX];

        uint64_t start_usec; /* CLOCK_MONOTONIC when the first request was taken; 0 without metrics */
        bool started;
        bool pending; /* submitted, not completed yet */

        char store_error_reason[PROTO_REPLY_MAX];
        uint64_t store_errors;
        size_t hit_errors;                /* hits of the batch completed with an error of their own */
        uint64_t store_error_logged_usec; /* CLOCK_MONOTONIC of the last store error logged */
        uint64_t refused_logged_usec;     /* ... of the last refused new counter (--max-counters) */
};

int batch_new(const BatchSettings *settings, Batch **ret) {
        Batch *b = calloc(1, sizeof *b);
        if (!b)
                return -ENOMEM;
        b->core.settings = *settings;
        b->core.slots = calloc(BATCH_REQUESTS_MAX, sizeof *b->core.slots);
        b->hits = calloc(BATCH_HITS_MAX, sizeof *b->hits);
        b->rules_matched = calloc(BATCH_RULES_MAX, sizeof *b->rules_matched);
        b->rule_hit = calloc(BATCH_RULES_MAX, sizeof *b->rule_hit);
        b->actors = calloc(BATCH_HITS_MAX + 1, sizeof *b->actors);
        if (settings->allow_client_limits)
                b->limits = calloc(BATCH_REQUESTS_MAX, sizeof *b->limits);
        if (!b->core.slots || !b->hits || !b->rules_matched || !b->rule_hit || !b->actors ||
            (settings->allow_client_limits && !b->limits)) {
                batch_free(b);
                return -ENOMEM;
        }
        *ret = b;
        return 0;
}

Batch *batch_free(Batch *b) {
        if (!b)
                return NULL;
        free(b->core.slots);
        free(b->hits);
        free(b->rules_matched);
        free(b->rule_hit);
        free(b->limits);
        free(b->actors);
        free(b);
        return NULL;
}

void batch_set_frontend(Batch *b, ConnectionProto proto, const Frontend *fe) {
        b->frontends[proto] = fe;
}

void batch_set_rules(Batch *b, const RuleSet *rules) {
        b->rules = rules;
}

void batch_set_store(Batch *b, Store *store) {
        batch_set_backend(b, store_submit_backend, store);
}

void batch_set_backend(Batch *b, StoreSubmitFunc submit, void *backend) {
        b->submit = submit;
        b->backend = backend;
}

void batch_set_done(Batch *b, BatchDoneFunc done, void *userdata) {
        b->done = done;
        b->done_userdata = userdata;
}

bool batch_pending(const Batch *b) {
        return b->pending;
}

void batch_set_metrics(Batch *b, Metrics *metrics) {
        b->metrics = metrics;
}

Metrics *batch_metrics(const Batch *b) {
        return b->metrics;
}

uint64_t batch_store_errors(const Batch *b) {
        return b->store_errors;
}

bool batch_has_room(const Batch *b) {
        return batch_room(b);
}

/* What each verb does to the counters of the rules a request matches (HIT: TAKE of the slot's
 * count, 1; the verb stays the slot's, for the reply's shape). */
static const AlgoOp verb_algo_op[_PROTO_VERB_MAX] = {
        [PROTO_VERB_HIT] = ALGO_TAKE,      [PROTO_VERB_TAKE] = ALGO_TAKE,
        [PROTO_VERB_PEEK] = ALGO_PEEK,     [PROTO_VERB_CHARGE] = ALGO_CHARGE,
        [PROTO_VERB_REFUND] = ALGO_REFUND, [PROTO_VERB_RESET] = ALGO_RESET,
};

static void batch_add_hit(Batch *b, size_t rule_at, const Rule *rule, AlgoOp op, uint64_t count,
                          uint32_t group) {
        ProtoSlice actor = rule_actor(rule, &b->core.request, b->actors[b->core.n_hits]);

        b->rule_hit[rule_at] = (int32_t) b->core.n_hits;
        b->hits[b->core.n_hits++] = (StoreHit){
                .rule_id = rule->id,
                .actor = actor.ptr,
                .actor_len = actor.len,
                .credit_limit = rule->credit_limit,
                .reset_seconds = rule->reset_seconds,
                .algo = &rule->algo,
                .op = op,
                .count = count,
                .group = group,
                .at_usec = b->core.slots[b->core.n_slots - 1].at_usec,
                .rule = rule,
        };
}

/* The hits of slot's canaries (its rules matched, its request in b->core.request): each counts
 * on its own; TAKE and HIT charge them as HIT does; PEEK leaves them alone. */
static void batch_add_canaries(Batch *b, const BatchSlot *slot) {
        AlgoOp op = verb_algo_op[slot->verb];

        if (op == ALGO_PEEK)
                return;
        for (uint32_t i = 0; i < slot->n_rules; i++) {
                const Rule *rule = b->rules_matched[slot->first_rule + i];

                if (rule_enforcing(rule) || rule_trivial_decision(rule) != RULE_TRIVIAL_NONE)
                        continue;
                batch_add_hit(b, slot->first_rule + i, rule, op, slot->count, 0);
                b->hits[b->core.n_hits - 1].at_usec = slot->at_usec; /* (not the last slot's, at a close) */
        }
}

/* Matches the parsed request of slot: its rules, and the store hits its verb makes.
 * Canaries count on their own (TAKE and HIT charge them as HIT does; PEEK leaves them alone);
 * the enforcing rules (continue rules and the stop rule) of a HIT or TAKE are one
 * all-or-nothing group, and none is charged when one of them always denies. */
void batch_match(Batch *b, BatchSlot *slot) {
        size_t base = b->core.n_rules_matched;
        const Rule **matched = b->rules_matched + base;
        size_t n = 0, n_enforcing = 0;
        bool deny = false;
        AlgoOp op = verb_algo_op[slot->verb];
        uint32_t group = 0;

        if (slot->verb == PROTO_VERB_HELLO) {
                slot->n_rules = 0;
                return;
        }
        n = ruleset_match(b->rules, &b->core.request, matched);
        for (size_t i = 0; i < n; i++) {
                b->rule_hit[base + i] = -1;
                if (!rule_enforcing(matched[i]))
                        continue;
                switch (rule_trivial_decision(matched[i])) {
                case RULE_TRIVIAL_DENY:
                        deny = true;
                        break;
                case RULE_TRIVIAL_NONE:
                        n_enforcing++;
                        break;
                default:
                        break;
                }
        }
        slot->n_rules = (uint32_t) n;
        b->core.n_rules_matched += n;
        if (slot->verb == PROTO_VERB_EXPLAIN)
                return;
        if (slot->group != 0)
                group = slot->group; /* a group across slots: its canaries come at its close */
        else if (op == ALGO_TAKE && n_enforcing > 1)
                group = (uint32_t) (b->core.n_slots); /* this slot's index + 1: never 0 */

        /* Canaries first, so that the enforcing hits of a group are consecutive. */
        if (slot->group == 0)
                batch_add_canaries(b, slot);
        for (size_t i = 0; i < n; i++) {
                const Rule *rule = matched[i];

                if (!rule_enforcing(rule) || rule_trivial_decision(rule) != RULE_TRIVIAL_NONE)
                        continue;
                if (deny && op == ALGO_TAKE)
                        continue; /* an always-deny rule decides: nothing is charged */
                batch_add_hit(b, base + i, rule, op, slot->count, group);
        }
        slot->n_hits = (uint32_t) (b->core.n_hits - slot->first_hit);
}

void batch_group_close(Batch *b, BatchSlot *first, size_t n,
                       void (*refill)(Batch *b, BatchSlot *slot, void *userdata), void *userdata) {
        size_t from = first->first_hit;
        bool deny = false;

        for (size_t s = 0; s < n; s++)
                for (uint32_t i = 0; i < first[s].n_rules; i++) {
                        const Rule *rule = b->rules_matched[first[s].first_rule + i];
                        deny = deny ||
                               (rule_enforcing(rule) && rule_trivial_decision(rule) == RULE_TRIVIAL_DENY);
                }
        if (deny)
                /* a rule that always denies decides: nothing of the group is charged, and the
                 * other slots' rules tell what they have (a PEEK of the same count) */
                for (size_t h = from; h < b->core.n_hits; h++) {
                        b->hits[h].op = ALGO_PEEK;
                        b->hits[h].group = 0;
                }
        for (size_t s = 0; s < n; s++)
                first[s].group_denied = deny;
        if (verb_algo_op[first->verb] != ALGO_RESET)
                for (size_t s = 0; s < n; s++) {
                        refill(b, &first[s], userdata);
                        batch_add_canaries(b, &first[s]);
                }
        for (size_t s = 0; s < n; s++) {
                first[s].first_hit = (uint32_t) from;
                first[s].n_hits = (uint32_t) (b->core.n_hits - from);
        }
}

bool batch_slot_fallback(const Batch *b, const BatchSlot *slot) {
        for (uint32_t i = 0; i < slot->n_hits; i++)
                if (b->hits[slot->first_hit + i].fallback)
                        return true;
        return false;
}

void batch_slot_error(BatchSlot *slot, ProtoErrorCode code, const char *reason) {
        slot->kind = BATCH_SLOT_ERROR;
        slot->n_rules = 0;
        slot->error_code = code;
        slot->error_reason = reason;
}

/* Why a client's timestamp is refused, or NULL. Later than now is fine: batch_finish() makes
 * it now (never in the future). */
static const char *batch_check_time(const Batch *b, uint64_t at_usec) {
        uint64_t now;

        if (b->core.settings.client_time_max_age_usec == 0)
                return "client timestamps are off (--client-time-max-age)";
        now = clock_usec(CLOCK_REALTIME);
        if (at_usec < now && now - at_usec > b->core.settings.client_time_max_age_usec)
                return "timestamp older than --client-time-max-age";
        return NULL;
}

bool batch_reserve_failed(Connection *c, size_t taken) {
        if (taken == 0) {
                log_warning("Connection %" PRIu64 ": out of memory for replies, closing", c->id);
                c->closing = true;
                connection_consume_input(c, c->in_len - c->in_pos);
        }
        return false;
}

ClientLimit *batch_slot_limit(Batch *b, const BatchSlot *slot) {
        return b->limits ? &b->limits[slot - b->core.slots] : NULL;
}

/* The verb a client's limit's operation is counted as. */
static const ProtoVerb algo_op_verb[_ALGO_OP_MAX] = {
        [ALGO_TAKE] = PROTO_VERB_TAKE,     [ALGO_PEEK] = PROTO_VERB_PEEK,
        [ALGO_CHARGE] = PROTO_VERB_CHARGE, [ALGO_REFUND] = PROTO_VERB_REFUND,
        [ALGO_RESET] = PROTO_VERB_RESET, /* DEL */
};

/* A client's limit in slot (the batch's last), parsed: one store hit on the counter its
 * parameters name, a token bucket of those parameters; counted as the verb of its operation.
 * The counter's id is cl->id, which client-limits.c hashed from the key once: the hit has no
 * actor, so the store hashes the 16-byte id alone, not the key again. */
void batch_take_limit(Batch *b, BatchSlot *slot) {
        ClientLimit *cl = &b->limits[slot - b->core.slots];
        AlgoOp op = cl->op < _ALGO_OP_MAX ? cl->op : ALGO_PEEK;
        /* CL.THROTTLE's negative quantity (two's complement in count): counted as a refund of
         * that many, applied as a take (redis-cell writes a cell it did not have) */
        bool refund = cl->kind == CLIENT_LIMIT_THROTTLE && (int64_t) cl->count < 0;

        /* RL's AT: any time Smyte accepts (not --client-time-max-age's), on the client's time line */
        if (cl->at_usec != 0)
                client_limit_set_wall_clock(cl, clock_usec(CLOCK_REALTIME));
        slot->kind = BATCH_SLOT_LIMIT;
        slot->verb = refund ? PROTO_VERB_REFUND : algo_op_verb[op];
        slot->at_usec = cl->at_usec;
        slot->count = refund ? -cl->count : cl->count;
        b->hits[b->core.n_hits++] = (StoreHit){
                .rule_id = cl->id,
                .credit_limit = cl->algo.credit_limit,
                .reset_seconds = cl->algo.reset_seconds,
                .algo = &cl->algo,
                .op = op, /* DEL: ALGO_RESET deletes the cell */
                .count = cl->count,
                .at_usec = cl->at_usec,
        };
        slot->n_hits = 1;
        if (cl->has_also) { /* DEL: the key's GCRA counter too, the same operation */
                b->hits[b->core.n_hits] = b->hits[b->core.n_hits - 1];
                b->hits[b->core.n_hits++].rule_id = cl->also_id;
                slot->n_hits = 2;
        }
}

bool batch_admit(Batch *b, BatchSlot *slot) {
        const Connection *c = slot->conn;

        slot->count = slot->verb == PROTO_VERB_HIT ? 1 : b->core.request.count;
        if (b->core.request.has_at) {
                const char *why = batch_check_time(b, b->core.request.at_usec);
                if (why) {
                        batch_slot_error(slot, PROTO_ERROR_BAD_TIME, why);
                        return false;
                }
                slot->at_usec = b->core.request.at_usec;
        }
        if ((slot->verb == PROTO_VERB_REFUND || slot->verb == PROTO_VERB_RESET) && !c->admin) {
                batch_slot_error(slot, PROTO_ERROR_FORBIDDEN,
                                 slot->verb == PROTO_VERB_RESET ? "RESET needs an admin listener"
                                                                : "REFUND needs an admin listener");
                return false;
        }
        if ((slot->verb == PROTO_VERB_PEEK || slot->verb == PROTO_VERB_EXPLAIN) &&
            b->core.settings.inspect_admin && !c->admin) {
                batch_slot_error(slot, PROTO_ERROR_FORBIDDEN,
                                 slot->verb == PROTO_VERB_PEEK ? "PEEK needs an admin listener"
                                                               : "EXPLAIN needs an admin listener");
                return false;
        }
        return true;
}

void batch_take(Batch *b, Connection *c) {
        if (!b->started) {
                /* For the metrics: a HIT's duration is its batch's (parse, match, store, format). */
                b->start_usec = b->metrics ? clock_usec(CLOCK_MONOTONIC) : 0;
                b->started = true;
        }
        if (c->proto != CONNECTION_PROTO_LINE && !c->framed)
                connection_frame(c); /* decides the protocol by the first byte */
        b->frontends[c->proto]->take(b, c);
}

static void batch_count_hit(Batch *b, const Rule *rule, MetricsStatus status) {
        if (b->metrics)
                metrics_count_hit(b->metrics, rule->index, status);
}

static void batch_count_error(Batch *b, ProtoErrorCode code) {
        if (b->metrics)
                metrics_count_error(b->metrics, code);
}

void batch_log_reply(const BatchSlot *slot, const Rule *rule, const char *reply, size_t reply_len) {
        char desc[RULE_DESCRIBE_MAX];

        log_debug("Connection %" PRIu64 ": \"%.*s\" -> %.*s by rule %s%s%s%s", slot->conn->id,
                  (int) (slot->line.len > 200 ? 200 : slot->line.len), slot->line.ptr, (int) reply_len - 1,
                  reply, rule_describe(rule, desc, sizeof desc), rule->comment ? " (" : "",
                  rule->comment ?: "", rule->comment ? ")" : "");
}

/* rule's answer; false if it has none (an enforcing rule not evaluated: an always-deny rule
 * decided the request without touching the counters). */
static bool batch_rule_decision(const Batch *b, size_t rule_at, BatchDecision *ret) {
        const Rule *rule = b->rules_matched[rule_at];

        *ret = (BatchDecision){ .rule = rule };
        switch (rule_trivial_decision(rule)) {
        case RULE_TRIVIAL_DENY:
                ret->res.retry = -1;
                return true;
        case RULE_TRIVIAL_ALLOW:
                ret->res.allowed = true;
                ret->res.credit = ret->res.limit = rule->credit_limit;
                return true;
        default:
                break;
        }
        if (b->rule_hit[rule_at] < 0)
                return false;
        const StoreHit *h = b->hits + b->rule_hit[rule_at];
        ret->res = h->res;
        return true;
}

/* The binding rule among the enforcing rules of slot: when all allow, the one with the
 * smallest credit left; else the denying one with the longest wait (-1, never, is the
 * longest). Ties go to the later rule (between two -1s, the first), so a lone stop rule
 * decides as in divvy. One pass:
 * the best allowing and the best denying rule so far; any denial decides. A request that
 * matched its stop rule alone (the common case) is that rule's answer. */
static void batch_binding(const Batch *b, const BatchSlot *slot, BatchDecision *ret) {
        BatchDecision d, allow = { 0 }, deny = { 0 };
        bool have_allow = false, have_deny = false;

        if (slot->n_rules == 1) {
                if (!batch_rule_decision(b, slot->first_rule, ret))
                        *ret = (BatchDecision){ .rule = NULL };
                return;
        }
        for (uint32_t i = 0; i < slot->n_rules; i++) {
                if (!rule_enforcing(b->rules_matched[slot->first_rule + i]) ||
                    !batch_rule_decision(b, slot->first_rule + i, &d))
                        continue;
                if (d.res.allowed) {
                        if (!have_allow || d.res.credit <= allow.res.credit) {
                                allow = d;
                                have_allow = true;
                        }
                } else if (!have_deny ||
                           (deny.res.retry >= 0 && (d.res.retry < 0 || d.res.retry >= deny.res.retry))) {
                        deny = d;
                        have_deny = true;
                }
        }
        *ret = have_deny ? deny : allow;
}

ProtoRuleRef batch_rule_ref(const Rule *r) {
        return (ProtoRuleRef){ .label = r->label, .index = r->index };
}

void batch_explain(const Batch *b, const BatchSlot *slot, const ProtoRequest *req, ProtoRuleRef *canaries,
                   ProtoRuleRef *continues, ProtoExplain *ret) {
        const Rule *stop = b->rules_matched[slot->first_rule + slot->n_rules - 1];
        ProtoSlice actor = { NULL, 0 };

        *ret = (ProtoExplain){
                .rule = batch_rule_ref(stop),
                .policy = match_policy_to_string(stop->match_policy),
                .algorithm = algorithm_to_string(stop->algo.algorithm),
                .canaries = canaries,
                .continues = continues,
        };
        for (uint32_t i = 0; i + 1 < slot->n_rules; i++) {
                const Rule *r = b->rules_matched[slot->first_rule + i];
                if (r->match_policy == MATCH_POLICY_CONTINUE)
                        continues[ret->n_continues++] = batch_rule_ref(r);
                else
                        canaries[ret->n_canaries++] = batch_rule_ref(r);
        }
        if (stop->actor_field && req) {
                actor = rule_actor(stop, req, b->actors[BATCH_HITS_MAX]);
                if (!actor.ptr)
                        actor = (ProtoSlice){ "", 0 };
        }
        ret->actor = actor;
}

/* Counts the canaries of slot (HIT and TAKE: each by its own counter's decision). */
static void batch_count_canaries(Batch *b, const BatchSlot *slot) {
        for (uint32_t i = 0; i + 1 < slot->n_rules; i++) {
                BatchDecision d;
                size_t at = slot->first_rule + i;

                if (rule_enforcing(b->rules_matched[at]) || !batch_rule_decision(b, at, &d))
                        continue;
                batch_count_hit(b, d.rule,
                                d.res.allowed ? METRICS_STATUS_CANARY_ACCEPTED
                                              : METRICS_STATUS_CANARY_REJECTED);
        }
}

/* What a slot decides, the same in every protocol: HIT, RESET, TAKE, PEEK, CHARGE, REFUND by its
 * rules' counters, HELLO and EXPLAIN without one, a client's limit by its one hit (DEL: two); the canaries
 * and a HIT's outcome counted; RESET's deleted counters in d->res.credit. */
static void batch_decide(Batch *b, const BatchSlot *slot, BatchDecision *d) {
        if (slot->kind == BATCH_SLOT_LIMIT) {
                *d = (BatchDecision){ .rule = NULL };
                d->res = b->hits[slot->first_hit].res;
                for (uint32_t i = 1; i < slot->n_hits; i++) /* DEL's second counter: deleted too */
                        d->res.credit += b->hits[slot->first_hit + i].res.credit;
                return;
        }
        switch (slot->verb) {
        case PROTO_VERB_HIT:
                batch_count_canaries(b, slot);
                batch_binding(b, slot, d);
                batch_count_hit(b, d->rule,
                                d->res.allowed ? METRICS_STATUS_ACCEPTED : METRICS_STATUS_REJECTED);
                return;
        case PROTO_VERB_HELLO:
                *d = (BatchDecision){ .res.allowed = true };
                return;
        case PROTO_VERB_EXPLAIN:
                *d = (BatchDecision){ .rule = b->rules_matched[slot->first_rule + slot->n_rules - 1],
                                      .res.allowed = true };
                return;
        case PROTO_VERB_RESET: {
                uint64_t n = 0;
                for (uint32_t i = 0; i < slot->n_hits; i++)
                        n += b->hits[slot->first_hit + i].res.credit;
                *d = (BatchDecision){ .res = { .allowed = true, .credit = n } };
                return;
        }
        default: /* TAKE, PEEK, CHARGE, REFUND */
                if (slot->verb == PROTO_VERB_TAKE)
                        batch_count_canaries(b, slot);
                batch_binding(b, slot, d);
                return;
        }
}

/* A version 2 verb's request in the metrics (a client's limit's as the verb of its operation),
 * with the credits it consumed (HIT's are divvy's metrics, counted by batch_decide()). */
/* Whether the group across slots that slot is in was charged (every enforcing hit allowed);
 * true for a slot in no such group. */
static bool batch_group_charged(const Batch *b, const BatchSlot *slot) {
        if (slot->group == 0)
                return true;
        if (slot->group_denied)
                return false;
        for (uint32_t i = 0; i < slot->n_hits; i++) {
                const StoreHit *h = &b->hits[slot->first_hit + i];
                if (h->group == slot->group && !h->res.allowed)
                        return false;
        }
        return true;
}

static void batch_count_verb(Batch *b, const BatchSlot *slot, const BatchDecision *d) {
        bool consumed = slot->verb == PROTO_VERB_CHARGE ||
                        (slot->verb == PROTO_VERB_TAKE && d->res.allowed && batch_group_charged(b, slot));

        if (slot->verb != PROTO_VERB_HIT && b->metrics)
                metrics_count_verb(b->metrics, slot->verb, d->res.allowed, consumed ? slot->count : 0);
}

/* The -errno with which the store failed slot's hits, or 0: the whole batch's (store_error), or
 * one of its own hits' that no backend could decide (issue #16: a remote store's REFUND or
 * RESET, or its fallback's local store failing) or that needed a new counter the local store
 * could not create (--max-counters, a table that cannot grow), answered with
 * batch_store_reason(). */
static inline int batch_slot_failed(const Batch *b, const BatchSlot *slot, int store_error) {
        if (slot->n_hits == 0)
                return 0;
        if (store_error < 0)
                return store_error;
        if (b->hit_errors > 0)
                for (uint32_t i = 0; i < slot->n_hits; i++)
                        if (b->hits[slot->first_hit + i].error < 0)
                                return b->hits[slot->first_hit + i].error;
        return 0;
}

/* The reason of an ERR for the store's -errno r (docs/protocol.md, "Errors close the connection"): a fixed
 * text, or the error's in b's buffer. */
static const char *batch_store_reason(Batch *b, int r) {
        if (r == -ENOSPC)
                return "store full";
        if (r == -EDQUOT)
                return "counter limit reached";
        snprintf(b->store_error_reason, sizeof b->store_error_reason, "store error: %s", strerror(-r));
        return b->store_error_reason;
}

/* Decides, counts and has the front-end format slot's reply at the end of its connection's
 * output (room was reserved when it was taken). Returns false if the request is not answered
 * (an earlier reply closed the connection), sets *ret_ok if it is answered OK. */
static inline __attribute__((always_inline)) bool batch_answer(Batch *b, const BatchSlot *slot,
                                                               int store_error, bool *ret_ok) {
        Connection *c = slot->conn;
        const Frontend *fe = b->frontends[c->proto];
        char *p = c->out + c->out_len;
        BatchDecision d;
        int e;

        if (c->err_sent)
                return false; /* after an ERR that closes (or QUIT): nothing more is answered */
        switch (slot->kind) {
        case BATCH_SLOT_ERROR:
                batch_count_error(b, slot->error_code);
                c->out_len += fe->format_error(b, slot, slot->error_code, slot->error_reason, p);
                return true;
        case BATCH_SLOT_LOCAL:
                c->out_len += fe->format_local(b, slot, p);
                *ret_ok = true;
                return true;
        default:
                break;
        }
        e = batch_slot_failed(b, slot, store_error);
        if (e < 0) {
                batch_count_error(b, PROTO_ERROR_UNKNOWN);
                c->out_len += fe->format_error(b, slot, PROTO_ERROR_UNKNOWN, batch_store_reason(b, e), p);
                return true;
        }
        batch_decide(b, slot, &d);
        batch_count_verb(b, slot, &d);
        c->out_len += fe->format_decision(b, slot, &d, p);
        *ret_ok = true;
        return true;
}

/* The store failed the batch, or hits of it: every request with such a hit is answered with its
 * -errno; a full store fails every batch: logged once per interval, with a count. New counters
 * refused at --max-counters are the operator's choice, not a failure: a warning, as seldom
 * (the store counts them). */
static void batch_store_failed(Batch *b, int r) {
        uint64_t now = clock_usec(CLOCK_MONOTONIC);

        if (r == -EDQUOT) {
                if (b->refused_logged_usec == 0 ||
                    now - b->refused_logged_usec >= BATCH_ERROR_LOG_INTERVAL_USEC) {
                        log_warning("New counters refused: --max-counters is reached (answered ERR unknown "
                                    "\"counter limit reached\"; existing counters are served)");
                        b->refused_logged_usec = now;
                }
                return;
        }
        b->store_errors++;
        if (b->store_error_logged_usec == 0 ||
            now - b->store_error_logged_usec >= BATCH_ERROR_LOG_INTERVAL_USEC) {
                log_error_errno(
                        r, "Failed to apply %zu hits to the store (%" PRIu64 " failed batches so far): %m",
                        b->core.n_hits, b->store_errors);
                b->store_error_logged_usec = now;
        }
}

/* The hits have their outputs: formats every reply, counts, empties the batch, tells the
 * server. */
static void batch_complete(Batch *b, int store_error) {
        size_t n_answered = 0, n_ok = 0;
        bool refused = false, failed = false;

        b->hit_errors = 0;
        if (store_error < 0)
                batch_store_failed(b, store_error);
        else
                for (size_t i = 0; i < b->core.n_hits; i++)
                        if (b->hits[i].error < 0) {
                                bool *seen = b->hits[i].error == -EDQUOT ? &refused : &failed;

                                b->hit_errors++;
                                if (!*seen)
                                        batch_store_failed(b, b->hits[i].error);
                                *seen = true;
                        }
        for (size_t i = 0; i < b->core.n_slots; i++) {
                bool ok = false;

                if (batch_answer(b, &b->core.slots[i], store_error, &ok))
                        n_answered++;
                if (ok)
                        n_ok++;
        }

        if (b->metrics && b->started)
                metrics_observe_batch(b->metrics, n_answered, n_ok,
                                      clock_usec(CLOCK_MONOTONIC) - b->start_usec);

        b->core.n_slots = b->core.n_hits = b->core.n_rules_matched = 0;
        b->started = false;
        b->pending = false;
        if (b->done)
                b->done(b, n_answered, b->done_userdata);
}

static void batch_store_done(void *userdata, int error) {
        batch_complete(userdata, error < 0 ? error : 0);
}

int batch_finish(Batch *b, uint64_t now_usec) {
        int r;

        if (b->pending)
                return -EBUSY;
        b->pending = true;
        if (b->core.n_hits == 0) {
                batch_complete(b, 0);
                return 0;
        }
        for (size_t i = 0; i < b->core.n_hits; i++)
                if (b->hits[i].at_usec > now_usec && !(b->hits[i].algo && b->hits[i].algo->peer))
                        b->hits[i].at_usec = now_usec; /* a client's time is never in the future */
        /* (but RL's AT, Smyte's client time line, is taken as it is) */
        r = b->submit(b->backend, b->hits, b->core.n_hits, now_usec, batch_store_done, b);
        if (r < 0)
                batch_complete(b, r); /* not taken: answered with the error */
        /* batch_complete() clears it: still set, the store completes later */
        return b->pending;
}
