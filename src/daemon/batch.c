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

#include "build-config.h"

#include "core/client-limits.h"
#include "shared/clock.h"

/* Matched rules per batch (a request is taken only while RULES_MATCH_MAX more fit). */
#define BATCH_RULES_MAX (2 * BATCH_HITS_MAX + BATCH_REQUESTS_MAX)

/* One request of a batch, in arrival order. Pointers are valid for the batch only. */
typedef struct BatchSlot {
        Connection *conn;
        ProtoSlice line;     /* the request, for --debug */
        uint32_t first_rule; /* its matched rules in Batch.rules_matched: canaries and continue
                              * rules in config order, then the stop rule */
        uint32_t n_rules;    /* 0: an error slot (error_code/error_reason), or HELLO */
        uint32_t first_hit;  /* its store hits in Batch.hits (Batch.rule_hit maps each rule to one) */
        uint32_t n_hits;
        ProtoVerb verb;
        uint64_t count;   /* the request's count (1 for HIT) */
        uint64_t at_usec; /* the client's timestamp, or 0 */
        ProtoErrorCode error_code;
        const char *error_reason; /* static; NULL: not an error slot */
        /* RESP connections (issue #17): */
        uint8_t resp_cmd;   /* RespCommand */
        uint8_t resp_reply; /* BatchRespReply */
        uint8_t resp_sub;   /* BatchRespSub: CLIENT's and COMMAND's subcommand */
        ProtoSlice arg;     /* what the reply needs: PING's or ECHO's message, a name to set, an
                             * unknown command's name (in the input, which the batch holds) */
        uint64_t n;         /* COMMAND INFO: the names asked about */
} BatchSlot;

/* How a RESP slot is answered. */
typedef enum BatchRespReply {
        BATCH_RESP_NORMAL,      /* by its command */
        BATCH_RESP_FATAL,       /* "-ERR <error_reason>", then closed: the framing is broken */
        BATCH_RESP_ERROR,       /* "-ERR <error_reason>" */
        BATCH_RESP_PROTO_ERROR, /* "-ERR <code> <error_reason>": a divvy error, as on a line */
        BATCH_RESP_UNKNOWN,     /* "-ERR unknown command '<arg>'" */
        BATCH_RESP_ARITY,       /* "-ERR wrong number of arguments for '<command>' command" */
        BATCH_RESP_NOPROTO,     /* HELLO 3 */
        BATCH_RESP_TEXT_ERROR,  /* "-<error_reason>": CL.THROTTLE's and RL.*'s own words */
} BatchRespReply;

typedef enum BatchRespSub {
        BATCH_SUB_NONE,
        BATCH_SUB_SETNAME,
        BATCH_SUB_GETNAME,
        BATCH_SUB_OK, /* CLIENT SETINFO: +OK */
        BATCH_SUB_ID,
        BATCH_SUB_EMPTY, /* COMMAND, COMMAND DOCS: an empty array */
        BATCH_SUB_COUNT,
        BATCH_SUB_INFO,
} BatchRespSub;

/* Room for any RESP error reply of a batch: the reasons are static sentences and the store's
 * (shorter than PROTO_REPLY_MAX), an unknown command's name is cut at RESP_NAME_SHOWN. */
#define BATCH_RESP_ERROR_ROOM (PROTO_REPLY_MAX + 64)

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
        int32_t *rule_hit;          /* BATCH_RULES_MAX: the hit of each matched rule, or -1 */
        size_t n_rules_matched;
        ProtoRequest request;     /* scratch: matching is done before the next line is parsed */
        RespRequest resp_request; /* scratch: a RESP EXPLAIN's request, parsed again */
        ClientLimit *limits;      /* BATCH_REQUESTS_MAX, one per slot; only with allow_client_limits */

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
        b->settings = *settings;
        b->slots = calloc(BATCH_REQUESTS_MAX, sizeof *b->slots);
        b->hits = calloc(BATCH_HITS_MAX, sizeof *b->hits);
        b->rules_matched = calloc(BATCH_RULES_MAX, sizeof *b->rules_matched);
        b->rule_hit = calloc(BATCH_RULES_MAX, sizeof *b->rule_hit);
        if (settings->allow_client_limits)
                b->limits = calloc(BATCH_REQUESTS_MAX, sizeof *b->limits);
        if (!b->slots || !b->hits || !b->rules_matched || !b->rule_hit ||
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
        free(b->slots);
        free(b->hits);
        free(b->rules_matched);
        free(b->rule_hit);
        free(b->limits);
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
               b->n_rules_matched + RULES_MATCH_MAX <= BATCH_RULES_MAX;
}

bool batch_has_room(const Batch *b) {
        return batch_room(b);
}

/* What each verb does to the counters of the rules a request matches. */
static const StoreOp verb_store_op[_PROTO_VERB_MAX] = {
        [PROTO_VERB_HIT] = STORE_HIT,       [PROTO_VERB_TAKE] = STORE_TAKE,
        [PROTO_VERB_PEEK] = STORE_PEEK,     [PROTO_VERB_CHARGE] = STORE_CHARGE,
        [PROTO_VERB_REFUND] = STORE_REFUND, [PROTO_VERB_RESET] = STORE_RESET,
};

static void batch_add_hit(Batch *b, size_t rule_at, const Rule *rule, StoreOp op, uint64_t count,
                          uint32_t group) {
        ProtoSlice actor = rule_actor(rule, &b->request);

        b->rule_hit[rule_at] = (int32_t) b->n_hits;
        b->hits[b->n_hits++] = (StoreHit){
                .rule_id = rule->id,
                .actor = actor.ptr,
                .actor_len = actor.len,
                .credit_limit = rule->credit_limit,
                .reset_seconds = rule->reset_seconds,
                .algo = &rule->algo,
                .op = op,
                .count = count,
                .group = group,
                .at_usec = b->slots[b->n_slots - 1].at_usec,
                .rule = rule,
        };
}

/* Matches the parsed request of slot: its rules, and the store hits its verb makes.
 * Canaries count on their own (TAKE and HIT charge them as HIT does; PEEK leaves them alone);
 * the enforcing rules (continue rules and the stop rule) of a HIT or TAKE are one
 * all-or-nothing group, and none is charged when one of them always denies. */
static void batch_match(Batch *b, BatchSlot *slot) {
        size_t base = b->n_rules_matched;
        const Rule **matched = b->rules_matched + base;
        size_t n = 0, n_enforcing = 0;
        bool deny = false;
        StoreOp op = verb_store_op[slot->verb];
        uint32_t group = 0;

        if (slot->verb == PROTO_VERB_HELLO) {
                slot->n_rules = 0;
                return;
        }
        n = ruleset_match(b->rules, &b->request, matched);
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
        b->n_rules_matched += n;
        if (slot->verb == PROTO_VERB_EXPLAIN)
                return;
        if ((op == STORE_HIT || op == STORE_TAKE) && n_enforcing > 1)
                group = (uint32_t) (b->n_slots); /* this slot's index + 1: never 0 */

        /* Canaries first, so that the enforcing hits of a group are consecutive. */
        for (size_t i = 0; i < n; i++) {
                const Rule *rule = matched[i];

                if (rule_enforcing(rule) || rule_trivial_decision(rule) != RULE_TRIVIAL_NONE)
                        continue;
                if (op != STORE_PEEK)
                        batch_add_hit(b, base + i, rule, op, slot->count, 0);
        }
        for (size_t i = 0; i < n; i++) {
                const Rule *rule = matched[i];

                if (!rule_enforcing(rule) || rule_trivial_decision(rule) != RULE_TRIVIAL_NONE)
                        continue;
                if (deny && (op == STORE_HIT || op == STORE_TAKE))
                        continue; /* an always-deny rule decides: nothing is charged */
                batch_add_hit(b, base + i, rule, op, slot->count, group);
        }
        slot->n_hits = (uint32_t) (b->n_hits - slot->first_hit);
}

static void slot_set_error(BatchSlot *slot, ProtoErrorCode code, const char *reason) {
        slot->n_rules = 0;
        slot->error_code = code;
        slot->error_reason = reason;
}

/* Why a client's timestamp is refused, or NULL. Later than now is fine: batch_finish() makes
 * it now (never in the future). */
static const char *batch_check_time(const Batch *b, uint64_t at_usec) {
        uint64_t now;

        if (b->settings.client_time_max_age_usec == 0)
                return "client timestamps are off (--client-time-max-age)";
        now = clock_usec(CLOCK_REALTIME);
        if (at_usec < now && now - at_usec > b->settings.client_time_max_age_usec)
                return "timestamp older than --client-time-max-age";
        return NULL;
}

/* The room a reply to verb needs in the output buffer. */
static size_t batch_reply_max(ProtoVerb verb) {
        switch (verb) {
        case PROTO_VERB_HIT:
                return PROTO_REPLY_MAX;
        case PROTO_VERB_EXPLAIN:
                return PROTO_REPLY_EXPLAIN_MAX;
        default:
                return PROTO_REPLY_V2_MAX;
        }
}

/* Why resp_name_ok() refused a name (HELLO SETNAME, CLIENT SETNAME). */
#define RESP_REASON_NAME                                                                                    \
        "Client names cannot contain spaces, newlines or special characters, nor be longer than 128 bytes"
_Static_assert(CONNECTION_NAME_MAX == 128, "RESP_REASON_NAME says 128 bytes");

/* True if name may be a client's name (Redis: no spaces, newlines or special characters). */
static bool resp_name_ok(ProtoSlice name) {
        if (name.len > CONNECTION_NAME_MAX)
                return false;
        for (size_t i = 0; i < name.len; i++)
                if ((uint8_t) name.ptr[i] <= ' ' || (uint8_t) name.ptr[i] >= 0x7F)
                        return false;
        return true;
}

/* Decides what a RESP connection command (PING, HELLO, CLIENT, ...) of slot will answer, from
 * its arguments; the reply itself is formatted in order, when the batch completes. Returns
 * the room its reply needs. */
static size_t batch_take_resp_command(const Batch *b, BatchSlot *slot, const RespRequest *req) {
        const ProtoSlice *argv = req->argv;
        size_t argc = req->argc;
        int64_t v;

#define RESP_ERROR(why)                                                                                     \
        do {                                                                                                \
                slot->resp_reply = BATCH_RESP_ERROR;                                                        \
                slot->error_reason = (why);                                                                 \
                return BATCH_RESP_ERROR_ROOM;                                                               \
        } while (0)
#define RESP_ARITY()                                                                                        \
        do {                                                                                                \
                slot->resp_reply = BATCH_RESP_ARITY;                                                        \
                return BATCH_RESP_ERROR_ROOM;                                                               \
        } while (0)

        switch (slot->resp_cmd) {
        case RESP_CMD_PING:
                if (argc > 2)
                        RESP_ARITY();
                if (argc == 2)
                        slot->arg = argv[1];
                return BATCH_RESP_ERROR_ROOM + slot->arg.len;
        case RESP_CMD_ECHO:
                if (argc != 2)
                        RESP_ARITY();
                slot->arg = argv[1];
                return BATCH_RESP_ERROR_ROOM + slot->arg.len;
        case RESP_CMD_QUIT:
                return BATCH_RESP_ERROR_ROOM;
        case RESP_CMD_HELLO:
                if (argc >= 2) {
                        if (resp_parse_int(argv[1], &v) < 0)
                                RESP_ERROR("Protocol version is not an integer or out of range");
                        if (v != 2) {
                                slot->resp_reply = BATCH_RESP_NOPROTO;
                                return BATCH_RESP_ERROR_ROOM;
                        }
                }
                for (size_t i = 2; i < argc; i++) {
                        if (resp_slice_eq(argv[i], "SETNAME") && i + 1 < argc) {
                                if (!resp_name_ok(argv[i + 1]))
                                        RESP_ERROR(RESP_REASON_NAME);
                                slot->resp_sub = BATCH_SUB_SETNAME;
                                slot->arg = argv[++i];
                        } else if (resp_slice_eq(argv[i], "AUTH"))
                                RESP_ERROR("AUTH is not supported: divvyd has no passwords (use an admin "
                                           "listener or a Unix socket's mode)");
                        else
                                RESP_ERROR("Syntax error in HELLO option");
                }
                return BATCH_RESP_ERROR_ROOM + 256;
        case RESP_CMD_CLIENT:
                if (argc < 2)
                        RESP_ARITY();
                if (resp_slice_eq(argv[1], "SETNAME")) {
                        if (argc != 3)
                                RESP_ARITY();
                        if (!resp_name_ok(argv[2]))
                                RESP_ERROR(RESP_REASON_NAME);
                        slot->resp_sub = BATCH_SUB_SETNAME;
                        slot->arg = argv[2];
                } else if (resp_slice_eq(argv[1], "GETNAME")) {
                        if (argc != 2)
                                RESP_ARITY();
                        slot->resp_sub = BATCH_SUB_GETNAME;
                } else if (resp_slice_eq(argv[1], "SETINFO")) {
                        if (argc != 4)
                                RESP_ARITY();
                        slot->resp_sub = BATCH_SUB_OK;
                } else if (resp_slice_eq(argv[1], "ID")) {
                        if (argc != 2)
                                RESP_ARITY();
                        slot->resp_sub = BATCH_SUB_ID;
                } else
                        RESP_ERROR(
                                "unknown CLIENT subcommand (divvyd knows SETNAME, GETNAME, SETINFO and ID)");
                return BATCH_RESP_ERROR_ROOM + CONNECTION_NAME_MAX;
        case RESP_CMD_COMMAND:
                if (argc == 1 || resp_slice_eq(argv[1], "DOCS"))
                        slot->resp_sub = BATCH_SUB_EMPTY;
                else if (resp_slice_eq(argv[1], "COUNT") && argc == 2)
                        slot->resp_sub = BATCH_SUB_COUNT;
                else if (resp_slice_eq(argv[1], "INFO")) {
                        slot->resp_sub = BATCH_SUB_INFO;
                        slot->n = argc - 2;
                } else
                        RESP_ERROR("unknown COMMAND subcommand (divvyd knows DOCS, COUNT and INFO)");
                return BATCH_RESP_ERROR_ROOM + 5 * argc;
        case RESP_CMD_SELECT:
                if (argc != 2)
                        RESP_ARITY();
                if (resp_parse_int(argv[1], &v) < 0)
                        RESP_ERROR("value is not an integer or out of range");
                if (v != 0)
                        RESP_ERROR("DB index is out of range (divvyd has database 0 only)");
                return BATCH_RESP_ERROR_ROOM;
        case RESP_CMD_CL_THROTTLE:
        case RESP_CMD_RL_REDUCE:
        case RESP_CMD_RL_GET:
        case RESP_CMD_RL_PREDUCE:
        case RESP_CMD_RL_PGET:
        case RESP_CMD_DEL:
                RESP_ERROR("CL.THROTTLE and RL.* are off: start divvyd with --allow-client-limits");
        case RESP_CMD_AUTH:
                RESP_ERROR("AUTH <password> called without any password configured for the default user");
        default:
                slot->resp_reply = BATCH_RESP_UNKNOWN;
                slot->arg = argv[0];
                return BATCH_RESP_ERROR_ROOM;
        }
#undef RESP_ERROR
#undef RESP_ARITY
}

/* Reserves n bytes of replies in c's output. False: stop taking from c; with nothing taken yet,
 * the connection is out of memory and closes (its input dropped); else the rest waits for the
 * next batch. */
static bool batch_reserve(Connection *c, size_t n, size_t taken) {
        if (connection_reserve(c, n))
                return true;
        if (taken == 0) {
                log_warning("Connection %" PRIu64 ": out of memory for replies, closing", c->id);
                c->closing = true;
                connection_consume_input(c, c->in_len - c->in_pos);
        }
        return false;
}

/* The room a reply to one of divvyd's own commands needs on RESP (an error included). */
static size_t batch_resp_reply_max(ProtoVerb verb) {
        switch (verb) {
        case PROTO_VERB_EXPLAIN:
                return PROTO_REPLY_EXPLAIN_MAX + RESP_BULK_OVERHEAD;
        case PROTO_VERB_HIT:
        case PROTO_VERB_RESET:
                return BATCH_RESP_ERROR_ROOM;
        default:
                return RESP_REPLY_DECISION_MAX > BATCH_RESP_ERROR_ROOM ? RESP_REPLY_DECISION_MAX
                                                                       : BATCH_RESP_ERROR_ROOM;
        }
}

static bool resp_is_client_limit(RespCommand cmd) {
        return cmd >= RESP_CMD_CL_THROTTLE && cmd <= RESP_CMD_DEL;
}

/* CL.THROTTLE or RL.* in slot (the batch's last), with --allow-client-limits: one store hit on
 * the counter the client's parameters name, a token bucket of those parameters. */
static void batch_take_client_limit(Batch *b, BatchSlot *slot, const RespRequest *req) {
        static const StoreOp store_op[_ALGO_OP_MAX] = {
                [ALGO_TAKE] = STORE_TAKE,
                [ALGO_PEEK] = STORE_PEEK,
                [ALGO_CHARGE] = STORE_CHARGE,
                [ALGO_REFUND] = STORE_REFUND,
        };
        ClientLimit *cl = &b->limits[b->n_slots - 1];
        const char *err = NULL;
        int r;

        if (slot->resp_cmd == RESP_CMD_CL_THROTTLE)
                r = client_limit_parse_throttle((int) req->argc - 1, req->argv + 1, cl, &err);
        else if (slot->resp_cmd == RESP_CMD_DEL)
                r = client_limit_parse_del((int) req->argc - 1, req->argv + 1, cl, &err);
        else
                r = client_limit_parse_reduce(resp_command_to_string(slot->resp_cmd), (int) req->argc - 1,
                                              req->argv + 1, cl, &err);
        if (r < 0) {
                slot->resp_reply = BATCH_RESP_TEXT_ERROR;
                slot->error_reason = err ?: "ERR invalid arguments";
                return;
        }
        /* RL's AT: any time Smyte accepts (not --client-time-max-age's), on the client's time line */
        if (cl->at_usec != 0)
                client_limit_set_wall_clock(cl, clock_usec(CLOCK_REALTIME));
        slot->at_usec = cl->at_usec;
        slot->count = cl->count;
        b->hits[b->n_hits++] = (StoreHit){
                .rule_id = cl->id,
                .actor = cl->key.ptr ? cl->key.ptr : "",
                .actor_len = cl->key.len,
                .credit_limit = cl->algo.credit_limit,
                .reset_seconds = cl->algo.reset_seconds,
                .algo = &cl->algo,
                .op = cl->del ? STORE_RESET : store_op[cl->op < _ALGO_OP_MAX ? cl->op : ALGO_PEEK],
                .count = cl->count,
                .at_usec = cl->at_usec,
        };
        slot->n_hits = 1;
}

/* The checks a parsed request (b->request, its verb in slot) passes before its rules are
 * matched, the same in both protocols: its count, a client's timestamp within
 * --client-time-max-age, REFUND and RESET on admin listeners only, and with --inspect=admin PEEK
 * and EXPLAIN too. False: slot's error is set; the caller answers it as its protocol does. */
static bool batch_admit(Batch *b, BatchSlot *slot, const Connection *c) {
        slot->count = slot->verb == PROTO_VERB_HIT ? 1 : b->request.count;
        if (b->request.has_at) {
                const char *why = batch_check_time(b, b->request.at_usec);
                if (why) {
                        slot_set_error(slot, PROTO_ERROR_BAD_TIME, why);
                        return false;
                }
                slot->at_usec = b->request.at_usec;
        }
        if ((slot->verb == PROTO_VERB_REFUND || slot->verb == PROTO_VERB_RESET) && !c->admin) {
                slot_set_error(slot, PROTO_ERROR_FORBIDDEN,
                               slot->verb == PROTO_VERB_RESET ? "RESET needs an admin listener"
                                                              : "REFUND needs an admin listener");
                return false;
        }
        if ((slot->verb == PROTO_VERB_PEEK || slot->verb == PROTO_VERB_EXPLAIN) &&
            b->settings.inspect_admin && !c->admin) {
                slot_set_error(slot, PROTO_ERROR_FORBIDDEN,
                               slot->verb == PROTO_VERB_PEEK ? "PEEK needs an admin listener"
                                                             : "EXPLAIN needs an admin listener");
                return false;
        }
        return true;
}

/* batch_take() for a RESP connection: the same slots, rules and hits as lines, from RESP
 * requests. A command's error is answered and the connection goes on; broken framing is
 * answered once and closes it, like a line protocol error. */
static void batch_take_resp(Batch *b, Connection *c) {
        unsigned taken = 0;
        size_t reserved = 0, room;
        ConnectionResp *cr = c->resp;

        while (taken < BATCH_LINES_PER_CONNECTION && batch_room(b)) {
                const RespRequest *req = cr ? &cr->req : NULL;
                RespCommand cmd = RESP_CMD_UNKNOWN;
                ProtoVerb verb = _PROTO_VERB_INVALID;
                BatchSlot *slot;
                size_t consumed;
                int r;

                if (connection_unsent(c) >= b->settings.output_limit) {
                        c->blocked = true;
                        break;
                }
                r = connection_next_resp(c);
                if (r == 0) {
                        if (c->eof && c->in_pos < c->in_len)
                                /* a request cut short by the peer's EOF: nothing to answer */
                                connection_consume_input(c, c->in_len - c->in_pos);
                        break;
                }
                if (r > 0 && req->argc == 0) {
                        /* "*0" or "*-1": Redis answers nothing, and so do we */
                        connection_consume_input(c, c->frame_consumed);
                        taken++;
                        continue;
                }

                if (r < 0) {
                        room = BATCH_RESP_ERROR_ROOM;
                        consumed = c->in_len - c->in_pos;
                } else {
                        cmd = resp_command_from_name(req->argv[0]);
                        verb = resp_command_verb(cmd);
                        consumed = c->frame_consumed;
                        room = 0;
                        if (verb >= 0) {
                                room = batch_resp_reply_max(verb);
                                if (resp_to_request(verb, req->argv, req->argc, &b->request) < 0)
                                        verb = _PROTO_VERB_INVALID; /* answered with b->request's error */
                        }
                }
                slot = &b->slots[b->n_slots];
                *slot = (BatchSlot){
                        .conn = c,
                        .line = { c->in + c->in_pos, consumed },
                        .first_rule = (uint32_t) b->n_rules_matched,
                        .first_hit = (uint32_t) b->n_hits,
                        .resp_cmd = (uint8_t) cmd,
                };
                if (r > 0 && room == 0)
                        room = resp_is_client_limit(cmd) && b->limits
                                       ? BATCH_RESP_ERROR_ROOM + CLIENT_LIMIT_ERROR_MAX
                                       : batch_take_resp_command(b, slot, req);

                if (!batch_reserve(c, reserved + room, taken))
                        break;
                reserved += room;
                connection_consume_input(c, consumed);
                taken++;
                b->n_slots++;

                if (r < 0) {
                        slot->resp_reply = BATCH_RESP_FATAL;
                        slot->error_reason = r == -ENOMEM ? "out of memory" : req->error;
                        c->closing = true;
                        break;
                }
                if (cmd == RESP_CMD_QUIT) {
                        c->closing = true; /* +OK, then closed: what follows is not read */
                        connection_consume_input(c, c->in_len - c->in_pos);
                        break;
                }
                if (resp_is_client_limit(cmd) && b->limits) {
                        batch_take_client_limit(b, slot, req);
                        continue;
                }
                if (resp_command_verb(cmd) < 0)
                        continue; /* a connection command: its reply is decided */
                if (verb < 0) {
                        slot->resp_reply = BATCH_RESP_PROTO_ERROR;
                        slot_set_error(slot, b->request.error_code, b->request.error_reason);
                        continue;
                }
                slot->verb = verb;
                if (!batch_admit(b, slot, c)) {
                        slot->resp_reply = BATCH_RESP_PROTO_ERROR; /* answered; the connection goes on */
                        continue;
                }
                batch_match(b, slot);
        }
}

void batch_take(Batch *b, Connection *c) {
        unsigned taken = 0;
        size_t reserved = 0, room;

        if (!b->started) {
                /* For the metrics: a HIT's duration is its batch's (parse, match, store, format). */
                b->start_usec = b->metrics ? clock_usec(CLOCK_MONOTONIC) : 0;
                b->started = true;
        }
        if (c->proto != CONNECTION_PROTO_LINE) {
                /* decided by the first byte: framing decides */
                if (!c->framed)
                        connection_frame(c);
                if (c->proto == CONNECTION_PROTO_RESP) {
                        batch_take_resp(b, c);
                        return;
                }
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

                /* Parsed before the reply room is reserved: a verb's reply may be longer than
                 * HIT's. The pairs point into the input, which reserving does not move. */
                if (r >= 0)
                        r = proto_parse_request(line.ptr, line.len, PROTO_PAIRS_MAX, &b->request);
                else
                        r = -EMSGSIZE;
                room = r < 0 ? PROTO_REPLY_MAX : batch_reply_max(b->request.verb);
                if (!batch_reserve(c, reserved + room, taken))
                        break;
                reserved += room;

                connection_consume_input(c, consumed);
                taken++;
                slot = &b->slots[b->n_slots++];
                *slot = (BatchSlot){
                        .conn = c,
                        .line = line,
                        .first_rule = (uint32_t) b->n_rules_matched,
                        .first_hit = (uint32_t) b->n_hits,
                };

                if (r == -EMSGSIZE) {
                        slot_set_error(slot, PROTO_ERROR_UNKNOWN, "line too long");
                        c->closing = true;
                        break;
                }
                if (r < 0) {
                        slot_set_error(slot, b->request.error_code, b->request.error_reason);
                        c->closing = true; /* lines after a bad one are not executed */
                        connection_consume_input(c, c->in_len - c->in_pos);
                        break;
                }
                slot->verb = b->request.verb;
                if (!batch_admit(b, slot, c)) {
                        c->closing = true; /* as after any bad line */
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

/* One rule's answer to a request: its counter's, or its trivial one. */
typedef struct BatchDecision {
        const Rule *rule;
        bool allowed;
        uint64_t credit, limit, reset;
        int64_t retry;
} BatchDecision;

/* rule's answer; false if it has none (an enforcing rule not evaluated: an always-deny rule
 * decided the request without touching the counters). */
static bool batch_rule_decision(const Batch *b, size_t rule_at, BatchDecision *ret) {
        const Rule *rule = b->rules_matched[rule_at];

        *ret = (BatchDecision){ .rule = rule };
        switch (rule_trivial_decision(rule)) {
        case RULE_TRIVIAL_DENY:
                ret->retry = -1;
                return true;
        case RULE_TRIVIAL_ALLOW:
                ret->allowed = true;
                ret->credit = ret->limit = rule->credit_limit;
                return true;
        default:
                break;
        }
        if (b->rule_hit[rule_at] < 0)
                return false;
        const StoreHit *h = b->hits + b->rule_hit[rule_at];
        ret->allowed = h->allowed;
        ret->credit = h->credit;
        ret->limit = h->limit;
        ret->reset = h->reset_left;
        ret->retry = h->retry;
        return true;
}

/* The binding rule among the enforcing rules of slot: when all allow, the one with the
 * smallest credit left; else the denying one with the longest wait (-1, never, is the
 * longest). Ties go to the later rule (between two -1s, the first), so a lone stop rule
 * decides as in divvy. One pass:
 * the best allowing and the best denying rule so far; any denial decides. */
static void batch_binding(const Batch *b, const BatchSlot *slot, BatchDecision *ret) {
        BatchDecision d, allow = { 0 }, deny = { 0 };
        bool have_allow = false, have_deny = false;

        for (uint32_t i = 0; i < slot->n_rules; i++) {
                if (!rule_enforcing(b->rules_matched[slot->first_rule + i]) ||
                    !batch_rule_decision(b, slot->first_rule + i, &d))
                        continue;
                if (d.allowed) {
                        if (!have_allow || d.credit <= allow.credit) {
                                allow = d;
                                have_allow = true;
                        }
                } else if (!have_deny || (deny.retry >= 0 && (d.retry < 0 || d.retry >= deny.retry))) {
                        deny = d;
                        have_deny = true;
                }
        }
        *ret = have_deny ? deny : allow;
}

static ProtoRuleRef batch_rule_ref(const Rule *r) {
        return (ProtoRuleRef){ .label = r->label, .index = r->index };
}

/* EXPLAIN's reply: the matched rules, without touching a counter. */
static size_t batch_format_explain(Batch *b, const BatchSlot *slot, char *p) {
        ProtoRuleRef canaries[RULES_MATCH_MAX], continues[RULES_MATCH_MAX];
        size_t n_canaries = 0, n_continues = 0;
        const Rule *stop = b->rules_matched[slot->first_rule + slot->n_rules - 1];

        for (uint32_t i = 0; i + 1 < slot->n_rules; i++) {
                const Rule *r = b->rules_matched[slot->first_rule + i];
                if (r->match_policy == MATCH_POLICY_CONTINUE)
                        continues[n_continues++] = batch_rule_ref(r);
                else
                        canaries[n_canaries++] = batch_rule_ref(r);
        }
        /* The actor is the request's: its pairs were parsed from the slot's line, which the
         * batch still holds, so parse it again (EXPLAIN is rare and never on the HIT path). */
        ProtoSlice actor = { NULL, 0 };
        int r = -EBADMSG;
        if (stop->actor_field && slot->conn->proto == CONNECTION_PROTO_RESP) {
                /* a RESP slot's line is its request's bytes */
                if (resp_parse(slot->line.ptr, slot->line.len, RESP_ARGS_MAX, RESP_REQUEST_MAX,
                               &b->resp_request) > 0)
                        r = resp_to_request(PROTO_VERB_EXPLAIN, b->resp_request.argv, b->resp_request.argc,
                                            &b->request);
        } else if (stop->actor_field)
                r = proto_parse_request(slot->line.ptr, slot->line.len, PROTO_PAIRS_MAX, &b->request);
        if (r >= 0) {
                actor = rule_actor(stop, &b->request);
                if (!actor.ptr)
                        actor = (ProtoSlice){ "", 0 };
        }
        return proto_format_explain(p, &(ProtoExplain){
                                               .rule = batch_rule_ref(stop),
                                               .policy = match_policy_to_string(stop->match_policy),
                                               .actor = actor,
                                               .algorithm = algorithm_to_string(stop->algo.algorithm),
                                               .canaries = canaries,
                                               .n_canaries = n_canaries,
                                               .continues = continues,
                                               .n_continues = n_continues,
                                       });
}

/* Counts the canaries of slot (HIT and TAKE: each by its own counter's decision). */
static void batch_count_canaries(Batch *b, const BatchSlot *slot) {
        for (uint32_t i = 0; i + 1 < slot->n_rules; i++) {
                BatchDecision d;
                size_t at = slot->first_rule + i;

                if (rule_enforcing(b->rules_matched[at]) || !batch_rule_decision(b, at, &d))
                        continue;
                batch_count_hit(b, d.rule,
                                d.allowed ? METRICS_STATUS_CANARY_ACCEPTED : METRICS_STATUS_CANARY_REJECTED);
        }
}

/* What a verb decides (HIT, RESET, TAKE, PEEK, CHARGE, REFUND), the same in both protocols:
 * the canaries and a HIT's outcome counted; RESET's deleted counters in d->credit. */
static void batch_decide(Batch *b, const BatchSlot *slot, BatchDecision *d) {
        switch (slot->verb) {
        case PROTO_VERB_HIT:
                batch_count_canaries(b, slot);
                batch_binding(b, slot, d);
                batch_count_hit(b, d->rule, d->allowed ? METRICS_STATUS_ACCEPTED : METRICS_STATUS_REJECTED);
                return;
        case PROTO_VERB_RESET: {
                uint64_t n = 0;
                for (uint32_t i = 0; i < slot->n_hits; i++)
                        n += b->hits[slot->first_hit + i].credit;
                *d = (BatchDecision){ .allowed = true, .credit = n };
                return;
        }
        default: /* TAKE, PEEK, CHARGE, REFUND */
                if (slot->verb == PROTO_VERB_TAKE)
                        batch_count_canaries(b, slot);
                batch_binding(b, slot, d);
                return;
        }
}

static ProtoDecision batch_proto_decision(const BatchDecision *d) {
        return (ProtoDecision){
                .allowed = d->allowed,
                .credit = d->credit,
                .limit = d->limit,
                .reset = d->reset,
                .retry = d->retry,
                .rule = batch_rule_ref(d->rule),
        };
}

/* A version 2 verb's request in the metrics, with the credits it consumed (HIT's are divvy's
 * metrics, counted by batch_decide()). */
static void batch_count_verb(Batch *b, const BatchSlot *slot, const BatchDecision *d) {
        if (slot->verb != PROTO_VERB_HIT && b->metrics)
                metrics_count_verb(b->metrics, slot->verb, d->allowed,
                                   (slot->verb == PROTO_VERB_TAKE && d->allowed) ||
                                                   slot->verb == PROTO_VERB_CHARGE
                                           ? slot->count
                                           : 0);
}

/* The -errno with which the store failed slot's hits, or 0: the whole batch's (store_error), or
 * one of its own hits' that no backend could decide (issue #16: a remote store's REFUND or
 * RESET, or its fallback's local store failing) or that needed a new counter the local store
 * could not create (--max-counters, a table that cannot grow). Either protocol answers it with
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

/* The reason of an ERR for the store's -errno r (README "Errors"): a fixed text, or the
 * error's in b's buffer. */
static const char *batch_store_reason(Batch *b, int r) {
        if (r == -ENOSPC)
                return "store full";
        if (r == -EDQUOT)
                return "counter limit reached";
        snprintf(b->store_error_reason, sizeof b->store_error_reason, "store error: %s", strerror(-r));
        return b->store_error_reason;
}

/* Formats slot's reply at the end of its connection's output (room was reserved when it
 * was taken) and counts its outcomes. Returns false if the request is not answered, sets
 * *ret_ok if it is answered OK. */
static inline __attribute__((always_inline)) bool batch_format_reply(Batch *b, const BatchSlot *slot,
                                                                     int store_error, bool *ret_ok) {
        Connection *c = slot->conn;
        char *p = c->out + c->out_len;
        BatchDecision d;
        size_t len;
        int e;

        if (c->err_sent)
                return false; /* an earlier reply of this batch was an ERR: nothing after it is answered */

        if (slot->error_reason || (slot->n_rules == 0 && slot->verb != PROTO_VERB_HELLO)) {
                batch_format_error(b, slot, slot->error_code, slot->error_reason);
                log_debug("Connection %" PRIu64 ": \"%.*s\" -> %.*s", c->id,
                          (int) (slot->line.len > 200 ? 200 : slot->line.len), slot->line.ptr,
                          (int) (c->out + c->out_len - p) - 1, p);
                return true;
        }
        e = batch_slot_failed(b, slot, store_error);
        if (e < 0) {
                batch_format_error(b, slot, PROTO_ERROR_UNKNOWN, batch_store_reason(b, e));
                return true;
        }

        switch (slot->verb) {
        case PROTO_VERB_HIT:
                batch_decide(b, slot, &d);
                if (rule_trivial_decision(d.rule) == RULE_TRIVIAL_DENY)
                        len = proto_format_ok(p, false, 0, -1);
                else
                        len = proto_format_ok(p, d.allowed, d.credit, (int64_t) d.reset);
                break;
        case PROTO_VERB_HELLO:
                len = proto_format_hello(p, PACKAGE_VERSION);
                d = (BatchDecision){ .allowed = true };
                break;
        case PROTO_VERB_EXPLAIN:
                len = batch_format_explain(b, slot, p);
                d = (BatchDecision){ .allowed = true,
                                     .rule = b->rules_matched[slot->first_rule + slot->n_rules - 1] };
                break;
        case PROTO_VERB_RESET:
                batch_decide(b, slot, &d);
                len = proto_format_reset(p, d.credit);
                break;
        default: { /* TAKE, PEEK, CHARGE, REFUND */
                ProtoDecision pd;

                batch_decide(b, slot, &d);
                pd = batch_proto_decision(&d);
                len = proto_format_decision(p, &pd);
                break;
        }
        }
        batch_count_verb(b, slot, &d);
        c->out_len += len;
        *ret_ok = true;

        if (b->settings.debug && d.rule)
                batch_log_hit(slot, d.rule, p, len);
        return true;
}

static char *resp_put_bulk(char *p, const char *s) {
        return p + resp_format_bulk(p, s, strlen(s));
}

/* HELLO's reply: Redis's map, as a flat array in RESP2. */
static size_t batch_format_resp_hello(const Connection *c, char *buf) {
        char *p = buf;

        p += resp_format_array(p, 14);
        p = resp_put_bulk(p, "server");
        p = resp_put_bulk(p, "divvyd");
        p = resp_put_bulk(p, "version");
        p += resp_format_bulk(p, PACKAGE_VERSION, strnlen(PACKAGE_VERSION, PROTO_VERSION_MAX));
        p = resp_put_bulk(p, "proto");
        p += resp_format_integer(p, 2);
        p = resp_put_bulk(p, "id");
        p += resp_format_integer(p, (int64_t) c->id);
        p = resp_put_bulk(p, "mode");
        p = resp_put_bulk(p, "standalone");
        p = resp_put_bulk(p, "role");
        p = resp_put_bulk(p, "master");
        p = resp_put_bulk(p, "modules");
        p += resp_format_array(p, 0);
        return (size_t) (p - buf);
}

static void batch_resp_set_name(Connection *c, ProtoSlice name) {
        memcpy(c->resp->name, name.ptr, name.len);
        c->resp->name_len = name.len;
        c->resp->has_name = name.len > 0; /* Redis: an empty name clears it */
}

/* The reply to a RESP connection command (PING, HELLO, ...), decided when it was taken. */
static size_t batch_format_resp_command(const BatchSlot *slot, char *p) {
        Connection *c = slot->conn;

        switch (slot->resp_cmd) {
        case RESP_CMD_PING:
                if (slot->arg.ptr)
                        return resp_format_bulk(p, slot->arg.ptr, slot->arg.len);
                return resp_format_simple(p, "PONG");
        case RESP_CMD_ECHO:
                return resp_format_bulk(p, slot->arg.ptr, slot->arg.len);
        case RESP_CMD_HELLO:
                if (slot->resp_sub == BATCH_SUB_SETNAME)
                        batch_resp_set_name(c, slot->arg);
                return batch_format_resp_hello(c, p);
        case RESP_CMD_CLIENT:
                switch (slot->resp_sub) {
                case BATCH_SUB_SETNAME:
                        batch_resp_set_name(c, slot->arg);
                        break;
                case BATCH_SUB_GETNAME:
                        if (!c->resp->has_name)
                                return resp_format_null(p);
                        return resp_format_bulk(p, c->resp->name, c->resp->name_len);
                case BATCH_SUB_ID:
                        return resp_format_integer(p, (int64_t) c->id);
                default:
                        break;
                }
                return resp_format_simple(p, "OK");
        case RESP_CMD_COMMAND:
                if (slot->resp_sub == BATCH_SUB_COUNT)
                        return resp_format_integer(p, _RESP_CMD_MAX - 1);
                if (slot->resp_sub == BATCH_SUB_INFO) {
                        size_t len = resp_format_array(p, slot->n);
                        for (uint64_t i = 0; i < slot->n; i++)
                                len += resp_format_null(p + len);
                        return len;
                }
                return resp_format_array(p, 0);
        default: /* QUIT, SELECT 0 */
                return resp_format_simple(p, "OK");
        }
}

/* batch_format_reply() for a RESP slot: the same decisions and counts, in RESP. */
static bool batch_format_resp(Batch *b, const BatchSlot *slot, int store_error, bool *ret_ok) {
        Connection *c = slot->conn;
        char *p = c->out + c->out_len;
        BatchDecision d;
        size_t len;
        int e;

        if (c->err_sent)
                return false; /* after a framing error or QUIT: nothing more is answered */

        switch (slot->resp_reply) {
        case BATCH_RESP_FATAL:
                len = resp_format_error(p, "ERR", slot->error_reason);
                c->closing = c->err_sent = true;
                batch_count_error(b, PROTO_ERROR_UNKNOWN);
                goto answered;
        case BATCH_RESP_ERROR:
                len = resp_format_error(p, "ERR", slot->error_reason);
                batch_count_error(b, PROTO_ERROR_UNKNOWN);
                goto answered;
        case BATCH_RESP_PROTO_ERROR:
                len = resp_format_proto_error(p, slot->error_code, slot->error_reason);
                batch_count_error(b, slot->error_code);
                goto answered;
        case BATCH_RESP_UNKNOWN:
                len = resp_format_unknown_command(p, slot->arg);
                batch_count_error(b, PROTO_ERROR_UNKNOWN_COMMAND);
                goto answered;
        case BATCH_RESP_ARITY: {
                char why[96];
                const char *name = resp_command_to_string(slot->resp_cmd) ?: "?";
                snprintf(why, sizeof why, "wrong number of arguments for '%s' command", name);
                len = resp_format_error(p, "ERR", why);
                batch_count_error(b, PROTO_ERROR_UNKNOWN);
                goto answered;
        }
        case BATCH_RESP_TEXT_ERROR:
                len = resp_format_error_text(p, slot->error_reason);
                batch_count_error(b, PROTO_ERROR_UNKNOWN);
                goto answered;
        case BATCH_RESP_NOPROTO:
                len = resp_format_error(p, "NOPROTO", "sorry, this protocol version is not supported");
                batch_count_error(b, PROTO_ERROR_UNKNOWN);
                goto answered;
        default:
                break;
        }

        if (resp_command_verb(slot->resp_cmd) < 0 && !resp_is_client_limit(slot->resp_cmd)) {
                len = batch_format_resp_command(slot, p);
                if (slot->resp_cmd == RESP_CMD_QUIT)
                        c->err_sent = true; /* +OK is the last reply */
                *ret_ok = true;
                goto answered;
        }

        e = batch_slot_failed(b, slot, store_error);
        if (e < 0) {
                len = resp_format_proto_error(p, PROTO_ERROR_UNKNOWN, batch_store_reason(b, e));
                batch_count_error(b, PROTO_ERROR_UNKNOWN);
                goto answered;
        }

        if (resp_is_client_limit(slot->resp_cmd)) {
                const StoreHit *h = &b->hits[slot->first_hit];
                const ClientLimit *cl = &b->limits[slot - b->slots];
                AlgoResult res = { .allowed = h->allowed,
                                   .credit = h->credit,
                                   .limit = h->limit,
                                   .reset = h->reset_left,
                                   .retry = h->retry };
                if (slot->resp_cmd == RESP_CMD_CL_THROTTLE && client_limit_throttle_error(&res)) {
                        len = resp_format_error_text(p, client_limit_throttle_error(&res));
                        batch_count_error(b, PROTO_ERROR_UNKNOWN);
                        goto answered;
                }
                if (slot->resp_cmd == RESP_CMD_CL_THROTTLE) {
                        int64_t v[CLIENT_LIMIT_THROTTLE_REPLY_LEN];
                        size_t n = client_limit_format_throttle(cl, &res, v);
                        len = resp_format_array(p, n);
                        for (size_t i = 0; i < n; i++)
                                len += resp_format_integer(p + len, v[i]);
                } else
                        len = resp_format_integer(p, client_limit_reduce_reply(cl, &res));
                *ret_ok = true;
                goto answered;
        }

        switch (slot->verb) {
        case PROTO_VERB_HIT:
                batch_decide(b, slot, &d);
                if (rule_trivial_decision(d.rule) == RULE_TRIVIAL_DENY)
                        len = resp_format_hit(p, false, 0, -1);
                else
                        len = resp_format_hit(p, d.allowed, d.credit, (int64_t) d.reset);
                break;
        case PROTO_VERB_EXPLAIN: {
                /* The line protocol's fields, without "OK " and "\n", as one bulk string. */
                const char *text = p + RESP_BULK_OVERHEAD;
                size_t n = batch_format_explain(b, slot, p + RESP_BULK_OVERHEAD);
                char head[RESP_BULK_OVERHEAD];
                size_t h;

                if (n >= 4 && memcmp(text, "OK ", 3) == 0) {
                        text += 3;
                        n -= 4;
                }
                h = (size_t) snprintf(head, sizeof head, "$%zu\r\n", n);
                memmove(p + h, text, n); /* h < RESP_BULK_OVERHEAD: the text moves towards p */
                memcpy(p, head, h);
                memcpy(p + h + n, "\r\n", 2);
                len = h + n + 2;
                d = (BatchDecision){ .allowed = true,
                                     .rule = b->rules_matched[slot->first_rule + slot->n_rules - 1] };
                break;
        }
        case PROTO_VERB_RESET:
                batch_decide(b, slot, &d);
                len = resp_format_integer(p, d.credit > INT64_MAX ? INT64_MAX : (int64_t) d.credit);
                break;
        default: { /* TAKE, PEEK, CHARGE, REFUND */
                ProtoDecision pd;

                batch_decide(b, slot, &d);
                pd = batch_proto_decision(&d);
                len = resp_format_decision(p, &pd);
                break;
        }
        }
        batch_count_verb(b, slot, &d);
        *ret_ok = true;
        if (b->settings.debug && d.rule) {
                char desc[RULE_DESCRIBE_MAX];
                log_debug("Connection %" PRIu64 ": RESP %s -> allowed=%d credit=%" PRIu64 " by rule %s",
                          c->id, resp_command_to_string(slot->resp_cmd), d.allowed, d.credit,
                          rule_describe(d.rule, desc, sizeof desc));
        }
answered:
        c->out_len += len;
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
                        b->n_hits, b->store_errors);
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
                for (size_t i = 0; i < b->n_hits; i++)
                        if (b->hits[i].error < 0) {
                                bool *seen = b->hits[i].error == -EDQUOT ? &refused : &failed;

                                b->hit_errors++;
                                if (!*seen)
                                        batch_store_failed(b, b->hits[i].error);
                                *seen = true;
                        }
        for (size_t i = 0; i < b->n_slots; i++) {
                bool ok = false, answered;
                if (__builtin_expect(b->slots[i].conn->proto == CONNECTION_PROTO_RESP, 0))
                        answered = batch_format_resp(b, &b->slots[i], store_error, &ok);
                else
                        answered = batch_format_reply(b, &b->slots[i], store_error, &ok);
                if (answered)
                        n_answered++;
                if (ok)
                        n_ok++;
        }

        if (b->metrics && b->started)
                metrics_observe_batch(b->metrics, n_answered, n_ok,
                                      clock_usec(CLOCK_MONOTONIC) - b->start_usec);

        b->n_slots = b->n_hits = b->n_rules_matched = 0;
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
        for (size_t i = 0; i < b->n_hits; i++)
                if (b->hits[i].at_usec > now_usec && !(b->hits[i].algo && b->hits[i].algo->peer))
                        b->hits[i].at_usec = now_usec; /* a client's time is never in the future */
        /* (but RL's AT, Smyte's client time line, is taken as it is) */
        r = b->submit(b->backend, b->hits, b->n_hits, now_usec, batch_store_done, b);
        if (r < 0)
                batch_complete(b, r); /* not taken: answered with the error */
        /* batch_complete() clears it: still set, the store completes later */
        return b->pending;
}
