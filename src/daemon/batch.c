/* SPDX-License-Identifier: MIT */
/* batch.c: requests taken from connections, matched, applied to the store, answered; see batch.h. */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "batch.h"
#include "log.h"

#include "shared/clock.h"

/* Matched rules per batch: every store hit, every canary without a counter (both bounded
 * by BATCH_HITS_MAX) and one decider without a counter per request. */
#define BATCH_RULES_MAX (2 * BATCH_HITS_MAX + BATCH_REQUESTS_MAX)

/* One request of a batch, in arrival order. Pointers are valid for the batch only. */
typedef struct BatchSlot {
        Connection *conn;
        ProtoSlice line;     /* the request, for --debug */
        uint32_t first_rule; /* its matched rules in Batch.rules_matched: canaries, then the decider */
        uint32_t n_rules;    /* 0: an error slot, answered with error_code/error_reason */
        uint32_t first_hit;  /* the store hits of its RULE_TRIVIAL_NONE rules, in the same order */
        uint32_t n_hits;
        ProtoErrorCode error_code;
        const char *error_reason; /* static */
} BatchSlot;

struct Batch {
        BatchSettings settings;
        const RuleSet *rules;   /* borrowed */
        StoreSubmitFunc submit; /* the store backend: one call per batch */
        void *backend;          /* borrowed */
        BatchDoneFunc done;     /* called when a batch is answered */
        void *done_userdata;
        Metrics *metrics; /* borrowed; may be NULL */

        /* Preallocated once: a batch allocates nothing. */
        BatchSlot *slots; /* BATCH_REQUESTS_MAX */
        size_t n_slots;
        StoreHit *hits; /* BATCH_HITS_MAX */
        size_t n_hits;
        const Rule **rules_matched; /* BATCH_RULES_MAX */
        size_t n_rules_matched;
        size_t n_canaries_uncounted; /* canaries without a counter: bounded like the hits */
        ProtoRequest request;        /* scratch: matching is done before the next line is parsed */

        uint64_t start_usec; /* CLOCK_MONOTONIC when the first request was taken; 0 without metrics */
        bool started;
        bool pending; /* submitted, not completed yet */

        char store_error_reason[PROTO_REPLY_MAX];
        uint64_t store_errors;
        uint64_t store_error_logged_usec; /* CLOCK_MONOTONIC of the last store error logged */
};

int batch_new(const BatchSettings *settings, Batch **ret) {
        Batch *b = calloc(1, sizeof *b);
        if (!b)
                return -ENOMEM;
        b->settings = *settings;
        b->slots = calloc(BATCH_REQUESTS_MAX, sizeof *b->slots);
        b->hits = calloc(BATCH_HITS_MAX, sizeof *b->hits);
        b->rules_matched = calloc(BATCH_RULES_MAX, sizeof *b->rules_matched);
        if (!b->slots || !b->hits || !b->rules_matched) {
                batch_free(b);
                return -ENOMEM;
        }
        *ret = b;
        return 0;
}

Batch *batch_free(Batch *b) {
        if (!b)
                return NULL;
        free(b->slots);
        free(b->hits);
        free(b->rules_matched);
        free(b);
        return NULL;
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

uint64_t batch_store_errors(const Batch *b) {
        return b->store_errors;
}

/* batch_has_room(), inlined where it runs for every request. */
static inline bool batch_room(const Batch *b) {
        return b->n_slots < BATCH_REQUESTS_MAX && b->n_hits + RULES_MATCH_MAX <= BATCH_HITS_MAX &&
               b->n_canaries_uncounted + RULES_MATCH_MAX <= BATCH_HITS_MAX;
}

bool batch_has_room(const Batch *b) {
        return batch_room(b);
}

/* Matches the parsed request of slot: its rules, and a store hit for each that counts. */
static void batch_match(Batch *b, BatchSlot *slot) {
        const Rule **matched = b->rules_matched + b->n_rules_matched;
        size_t n = ruleset_match(b->rules, &b->request, matched);

        for (size_t i = 0; i < n; i++) {
                const Rule *rule = matched[i];

                if (rule_trivial_decision(rule) != RULE_TRIVIAL_NONE) {
                        /* No counter. A canary's verdict is known now, but counted only if the
                         * request is answered OK. */
                        if (i < n - 1)
                                b->n_canaries_uncounted++;
                        continue;
                }
                ProtoSlice actor = rule_actor(rule, &b->request);
                b->hits[b->n_hits++] = (StoreHit){
                        .rule_id = rule->id,
                        .actor = actor.ptr,
                        .actor_len = actor.len,
                        .credit_limit = rule->credit_limit,
                        .reset_seconds = rule->reset_seconds,
                };
        }
        slot->n_rules = (uint32_t) n;
        slot->n_hits = (uint32_t) (b->n_hits - slot->first_hit);
        b->n_rules_matched += n;
}

static void slot_set_error(BatchSlot *slot, ProtoErrorCode code, const char *reason) {
        slot->n_rules = 0;
        slot->error_code = code;
        slot->error_reason = reason;
}

void batch_take(Batch *b, Connection *c) {
        unsigned taken = 0;

        if (!b->started) {
                /* For the metrics: a HIT's duration is its batch's (parse, match, store, format). */
                b->start_usec = b->metrics ? clock_usec(CLOCK_MONOTONIC) : 0;
                b->started = true;
        }

        while (taken < BATCH_LINES_PER_CONNECTION && batch_room(b)) {
                ProtoSlice line;
                size_t consumed = 0;
                BatchSlot *slot;
                int r;

                if (connection_unsent(c) >= b->settings.output_limit) {
                        c->blocked = true;
                        break;
                }

                r = connection_next_line(c, &line, &consumed);
                if (r == 0) {
                        if (!c->eof || c->in_pos >= c->in_len)
                                break;
                        /* An unterminated last line at EOF is answered as if it had its "\n". */
                        line.ptr = c->in + c->in_pos;
                        line.len = consumed = c->in_len - c->in_pos;
                        if (line.ptr[line.len - 1] == '\r')
                                line.len--;
                } else if (r < 0) {
                        line.ptr = c->in + c->in_pos;
                        line.len = 0;
                        consumed = c->in_len - c->in_pos;
                }

                if (!connection_reserve(c, (size_t) (taken + 1) * PROTO_REPLY_MAX)) {
                        if (taken > 0)
                                break; /* answer what we have; the rest waits for the next batch */
                        log_warning("Connection %" PRIu64 ": out of memory for replies, closing", c->id);
                        c->closing = true;
                        connection_consume_input(c, c->in_len - c->in_pos);
                        break;
                }

                connection_consume_input(c, consumed);
                taken++;
                slot = &b->slots[b->n_slots++];
                *slot = (BatchSlot){
                        .conn = c,
                        .line = line,
                        .first_rule = (uint32_t) b->n_rules_matched,
                        .first_hit = (uint32_t) b->n_hits,
                };

                if (r < 0) {
                        slot_set_error(slot, PROTO_ERROR_UNKNOWN, "line too long");
                        c->closing = true;
                        break;
                }

                r = proto_parse_line(line.ptr, line.len, PROTO_PAIRS_MAX, &b->request);
                if (r < 0) {
                        slot_set_error(slot, b->request.error_code, b->request.error_reason);
                        c->closing = true; /* lines after a bad one are not executed */
                        connection_consume_input(c, c->in_len - c->in_pos);
                        break;
                }

                batch_match(b, slot);
        }
}

static void batch_count_hit(Batch *b, const Rule *rule, MetricsStatus status) {
        if (b->metrics)
                metrics_count_hit(b->metrics, rule->index, status);
}

static void batch_count_error(Batch *b, ProtoErrorCode code) {
        if (b->metrics)
                metrics_count_error(b->metrics, code);
}

static void batch_log_hit(const BatchSlot *slot, const Rule *rule, const char *reply, size_t reply_len) {
        char desc[RULE_DESCRIBE_MAX];

        log_debug("Connection %" PRIu64 ": \"%.*s\" -> %.*s by rule %s%s%s%s", slot->conn->id,
                  (int) (slot->line.len > 200 ? 200 : slot->line.len), slot->line.ptr, (int) reply_len - 1,
                  reply, rule_describe(rule, desc, sizeof desc), rule->comment ? " (" : "",
                  rule->comment ?: "", rule->comment ? ")" : "");
}

/* An ERR reply for slot at the end of its connection's output: nothing after it is answered. */
static void batch_format_error(Batch *b, const BatchSlot *slot, ProtoErrorCode code, const char *reason) {
        Connection *c = slot->conn;
        size_t len = proto_format_error(c->out + c->out_len, code, reason);

        batch_count_error(b, code);
        c->closing = c->err_sent = true;
        c->out_len += len;
}

/* Formats slot's reply at the end of its connection's output (room was reserved when it
 * was taken) and counts its outcomes. Returns false if the request is not answered, sets
 * *ret_ok if it is answered OK. */
static inline __attribute__((always_inline)) bool batch_format_reply(Batch *b, const BatchSlot *slot,
                                                                     int store_error, bool *ret_ok) {
        Connection *c = slot->conn;
        char *p = c->out + c->out_len;
        size_t len;

        if (c->err_sent)
                return false; /* an earlier reply of this batch was an ERR: nothing after it is answered */

        if (slot->n_rules == 0) {
                batch_format_error(b, slot, slot->error_code, slot->error_reason);
                log_debug("Connection %" PRIu64 ": \"%.*s\" -> %.*s", c->id,
                          (int) (slot->line.len > 200 ? 200 : slot->line.len), slot->line.ptr,
                          (int) (c->out + c->out_len - p) - 1, p);
                return true;
        }
        if (slot->n_hits > 0 && store_error < 0) {
                batch_format_error(b, slot, PROTO_ERROR_UNKNOWN, b->store_error_reason);
                return true;
        }

        const Rule *const *rules = b->rules_matched + slot->first_rule;
        const StoreHit *hit = b->hits + slot->first_hit;
        uint32_t last = slot->n_rules - 1;

        for (uint32_t i = 0; i < last; i++)
                switch (rule_trivial_decision(rules[i])) {
                case RULE_TRIVIAL_DENY:
                        batch_count_hit(b, rules[i], METRICS_STATUS_CANARY_REJECTED);
                        break;
                case RULE_TRIVIAL_ALLOW:
                        batch_count_hit(b, rules[i], METRICS_STATUS_CANARY_ACCEPTED);
                        break;
                case RULE_TRIVIAL_NONE:
                        batch_count_hit(b, rules[i],
                                        hit->allowed ? METRICS_STATUS_CANARY_ACCEPTED
                                                     : METRICS_STATUS_CANARY_REJECTED);
                        hit++;
                        break;
                }

        const Rule *rule = rules[last];
        bool allowed;
        switch (rule_trivial_decision(rule)) {
        case RULE_TRIVIAL_DENY:
                allowed = false;
                len = proto_format_ok(p, false, 0, -1);
                break;
        case RULE_TRIVIAL_ALLOW:
                allowed = true;
                len = proto_format_ok(p, true, rule->credit_limit, 0);
                break;
        default: /* RULE_TRIVIAL_NONE: hit is the decider's, the request's last */
                allowed = hit->allowed;
                len = proto_format_ok(p, hit->allowed, hit->credit, (int64_t) hit->reset_left);
                break;
        }
        batch_count_hit(b, rule, allowed ? METRICS_STATUS_ACCEPTED : METRICS_STATUS_REJECTED);
        c->out_len += len;
        *ret_ok = true;

        if (b->settings.debug)
                batch_log_hit(slot, rule, p, len);
        return true;
}

/* The store failed the batch: every request with a hit is answered with its -errno; a full
 * store fails every batch: logged once per interval, with a count. */
static void batch_store_failed(Batch *b, int r) {
        uint64_t now = clock_usec(CLOCK_MONOTONIC);

        b->store_errors++;
        if (b->store_error_logged_usec == 0 ||
            now - b->store_error_logged_usec >= BATCH_ERROR_LOG_INTERVAL_USEC) {
                log_error_errno(
                        r, "Failed to apply %zu hits to the store (%" PRIu64 " failed batches so far): %m",
                        b->n_hits, b->store_errors);
                b->store_error_logged_usec = now;
        }
        if (r == -ENOSPC)
                snprintf(b->store_error_reason, sizeof b->store_error_reason, "store full");
        else
                snprintf(b->store_error_reason, sizeof b->store_error_reason, "store error: %s",
                         strerror(-r));
}

/* The hits have their outputs: formats every reply, counts, empties the batch, tells the
 * server. */
static void batch_complete(Batch *b, int store_error) {
        size_t n_answered = 0, n_ok = 0;

        if (store_error < 0)
                batch_store_failed(b, store_error);
        for (size_t i = 0; i < b->n_slots; i++) {
                bool ok = false;
                if (batch_format_reply(b, &b->slots[i], store_error, &ok))
                        n_answered++;
                if (ok)
                        n_ok++;
        }

        if (b->metrics && b->started)
                metrics_observe_batch(b->metrics, n_answered, n_ok,
                                      clock_usec(CLOCK_MONOTONIC) - b->start_usec);

        b->n_slots = b->n_hits = b->n_rules_matched = b->n_canaries_uncounted = 0;
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
        if (b->n_hits == 0) {
                batch_complete(b, 0);
                return 0;
        }
        r = b->submit(b->backend, b->hits, b->n_hits, now_usec, batch_store_done, b);
        if (r < 0)
                batch_complete(b, r); /* not taken: answered with the error */
        /* batch_complete() clears it: still set, the store completes later */
        return b->pending;
}
