/* SPDX-License-Identifier: MIT */
/* frontend-resp.c: RESP's front-end (RESP2, and RESP3 after HELLO 3); see frontend-resp.h. */

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend-resp.h"
#include "frontend.h"
#include "log.h"

#include "build-config.h"

#include "core/client-limits.h"
#include "core/resp-commands.h"

_Static_assert(RESP_CLIENT_NAME_MAX == CONNECTION_NAME_MAX, "a client's name fits its connection");
_Static_assert(RESP_MULTI_BYTES >= RESP_REQUEST_MAX, "a transaction may queue any one request");
_Static_assert(RESP_REPLY_HIT_MAX <= RESP_ERROR_ROOM, "a HIT's reply fits the room it reserves");
_Static_assert(RULES_MATCH_MAX >= 2, "DEL's two hits (its cell and its GCRA counter) fit a slot's share");

/* The room a reply to one of divvyd's own commands needs on RESP (an error included). */
static size_t resp_verb_reply_max(ProtoVerb verb) {
        switch (verb) {
        case PROTO_VERB_EXPLAIN: /* either version's: EXPLAIN is rare */
                return RESP_REPLY_EXPLAIN3_MAX > PROTO_REPLY_EXPLAIN_MAX + RESP_BULK_OVERHEAD
                               ? RESP_REPLY_EXPLAIN3_MAX
                               : PROTO_REPLY_EXPLAIN_MAX + RESP_BULK_OVERHEAD;
        case PROTO_VERB_HIT:
        case PROTO_VERB_RESET:
                return RESP_ERROR_ROOM;
        default:
                return RESP_REPLY_DECISION_MAX > RESP_ERROR_ROOM ? RESP_REPLY_DECISION_MAX : RESP_ERROR_ROOM;
        }
}

/* A slot answered by an error of RESP's own kind (reply). */
static void resp_slot_error(BatchSlot *slot, RespReply reply, ProtoErrorCode code, const char *reason) {
        batch_slot_error(slot, code, reason);
        slot->fe_reply = (uint8_t) reply;
}

/* A request that is neither one of divvyd's own commands nor a client's limit taken: the reply
 * its row's plan decided (an error, or one the front-end formats alone). */
static void resp_take_plan(BatchSlot *slot, const RespPlan *plan) {
        slot->arg = plan->arg;
        if (plan->reply == RESP_REPLY_NORMAL) {
                slot->kind = BATCH_SLOT_LOCAL;
                slot->fe_sub = (uint8_t) plan->sub;
                slot->n = plan->n;
                return;
        }
        resp_slot_error(slot, plan->reply,
                        plan->reply == RESP_REPLY_UNKNOWN ? PROTO_ERROR_UNKNOWN_COMMAND
                                                          : PROTO_ERROR_UNKNOWN,
                        plan->reason);
}

/* CL.THROTTLE or RL.* in slot, with --allow-client-limits: parsed into the engine's ClientLimit,
 * then the engine's one hit. */
static void resp_take_client_limit(Batch *b, BatchSlot *slot, const RespRequest *req) {
        ClientLimit *cl = batch_slot_limit(b, slot);
        const char *err = NULL;
        int r;

        if (slot->fe_cmd == RESP_CMD_CL_THROTTLE)
                r = client_limit_parse_throttle((int) req->argc - 1, req->argv + 1, cl, &err);
        else if (slot->fe_cmd == RESP_CMD_GCRA)
                r = client_limit_parse_gcra((int) req->argc - 1, req->argv + 1, cl, &err);
        else if (slot->fe_cmd == RESP_CMD_DEL)
                r = client_limit_parse_del((int) req->argc - 1, req->argv + 1, cl, &err);
        else
                r = client_limit_parse_reduce(resp_command_to_string(slot->fe_cmd), (int) req->argc - 1,
                                              req->argv + 1, cl, &err);
        if (r < 0) {
                resp_slot_error(slot, RESP_REPLY_TEXT_ERROR, PROTO_ERROR_UNKNOWN,
                                err ?: "ERR invalid arguments");
                return;
        }
        batch_take_limit(b, slot);
        if (slot->kind == BATCH_SLOT_ERROR)
                slot->fe_reply = RESP_REPLY_PROTO_ERROR;
}

/* How one framed request is taken: its row, and one of its verb (resp_to_request() into
 * batch_request()), a client's limit, or a connection command's plan. */
typedef struct RespTaken {
        const RespCommandRow *row;
        ProtoVerb verb;
        bool limit;
        RespPlan plan;
} RespTaken;

/* Classifies req (a complete request of at least one argument) into *t; returns the room its
 * reply may take. queued: req is being queued after MULTI, and a verb's arguments are not parsed
 * yet (EXEC parses them; the room does not depend on them). */
static size_t resp_classify(Batch *b, const RespRequest *req, RespTaken *t, bool queued) {
        *t = (RespTaken){ .verb = _PROTO_VERB_INVALID, .plan = { .reply = RESP_REPLY_NORMAL } };
        t->row = resp_command_lookup(req->argv[0]);
        if (t->row && (t->row->flags & RESP_COMMAND_VERB) && queued)
                return resp_verb_reply_max(t->row->verb);
        if (t->row && (t->row->flags & RESP_COMMAND_VERB)) {
                t->verb = t->row->verb;
                /* parsed before the room is reserved: the slices point into the input, which
                 * reserving does not move */
                if (resp_to_request(t->verb, req->argv, req->argc, batch_request(b)) < 0) {
                        t->verb = _PROTO_VERB_INVALID; /* answered with the request's error */
                        return resp_verb_reply_max(t->row->verb);
                }
                return resp_verb_reply_max(t->verb);
        }
        if (t->row && (t->row->flags & RESP_COMMAND_CLIENT_LIMIT) &&
            batch_settings(b)->allow_client_limits) {
                t->limit = true;
                return RESP_ERROR_ROOM + CLIENT_LIMIT_ERROR_MAX;
        }
        resp_command_plan(t->row, req->argv, req->argc, &t->plan);
        return t->plan.room;
}

/* Takes req, classified as t, into slot: to the engine, or answered by the front-end. */
static void resp_take_one(Batch *b, BatchSlot *slot, const RespRequest *req, const RespTaken *t) {
        ProtoRequest *request = batch_request(b);

        slot->fe_cmd = (uint8_t) (t->row ? t->row->cmd : RESP_CMD_UNKNOWN);
        if (t->limit)
                return resp_take_client_limit(b, slot, req);
        if (!t->row || !(t->row->flags & RESP_COMMAND_VERB))
                return resp_take_plan(slot, &t->plan);
        if (t->verb < 0)
                return resp_slot_error(slot, RESP_REPLY_PROTO_ERROR, request->error_code,
                                       request->error_reason);
        slot->verb = t->verb;
        if (!batch_admit(b, slot)) {
                slot->fe_reply = RESP_REPLY_PROTO_ERROR; /* answered; the connection goes on */
                return;
        }
        batch_match(b, slot);
        if (slot->kind == BATCH_SLOT_ERROR)
                slot->fe_reply = RESP_REPLY_PROTO_ERROR;
}

/* A slot answered by the front-end with fe_cmd's reply (sub and n as resp_format_local() reads). */
static void resp_slot_local(BatchSlot *slot, RespCommand cmd, RespSub sub, uint64_t n) {
        slot->kind = BATCH_SLOT_LOCAL;
        slot->fe_cmd = (uint8_t) cmd;
        slot->fe_sub = (uint8_t) sub;
        slot->n = n;
}

static void resp_multi_reset(ConnectionResp *cr) {
        cr->multi = cr->multi_aborted = false;
        cr->multi_n = 0;
        cr->multi_len = cr->multi_room = 0;
}

/* The whole transaction's slots must fit one batch and one connection's share of it. */
_Static_assert((RESP_MULTI_MAX + 1) * RULES_MATCH_MAX <= BATCH_HITS_MAX, "a transaction fits a batch");
_Static_assert(RESP_MULTI_MAX + 1 <= BATCH_LINES_PER_CONNECTION, "a transaction fits a connection's share");
_Static_assert(RESP_MULTI_MAX + 1 <= BATCH_REQUESTS_MAX, "a transaction fits a batch's slots");

/* EXEC after MULTI (cr->multi, not aborted): the queued requests, parsed again from multi_buf,
 * taken into this batch behind one slot for the array's header, all or none. Returns false if
 * they do not fit this batch or c's output now (EXEC stays unread for the next batch). */
static bool resp_take_exec(Batch *b, Connection *c, ProtoSlice exec, size_t *reserved, unsigned taken) {
        ConnectionResp *cr = c->resp;
        const BatchCore *k = (const BatchCore *) (const void *) b;
        size_t room = RESP_INT_MAX_LEN + cr->multi_room, off;
        RespRequest req;
        RespTaken t;
        BatchSlot *slot;

        if (taken + cr->multi_n + 1 > BATCH_LINES_PER_CONNECTION ||
            k->n_slots + cr->multi_n + 1 > BATCH_REQUESTS_MAX ||
            k->n_hits + (cr->multi_n + 1) * RULES_MATCH_MAX > BATCH_HITS_MAX ||
            k->n_rules_matched + (cr->multi_n + 1) * RULES_MATCH_MAX > BATCH_RULES_MAX)
                return false;
        if (!batch_reserve_replies(c, *reserved + room, taken))
                return false;
        *reserved += room;
        slot = batch_slot_add(b, c, exec);
        resp_slot_local(slot, RESP_CMD_EXEC, RESP_SUB_NONE, cr->multi_n);
        connection_consume_input(c, exec.len);
        for (off = 0; off < cr->multi_len; off += req.consumed) {
                resp_parse_again(cr->multi_buf + off, &req); /* each was parsed when it was queued */
                (void) resp_classify(b, &req, &t, false);
                resp_take_one(b, batch_slot_add(b, c, (ProtoSlice){ cr->multi_buf + off, req.consumed }),
                              &req, &t);
        }
        resp_multi_reset(cr); /* multi_buf is not written again before this batch is answered */
        return true;
}

/* A request on a connection in a transaction, or MULTI, EXEC, DISCARD or WATCH, in slot (added,
 * its input consumed): queued (+QUEUED) or answered. Redis's rules: an unknown command or a wrong
 * number of arguments while queueing, WATCH inside MULTI, and a transaction beyond
 * RESP_MULTI_MAX requests or RESP_MULTI_BYTES bytes abort it (EXEC answers EXECABORT); a nested
 * MULTI is refused and the transaction goes on. */
static void resp_take_transaction(Connection *c, BatchSlot *slot, const RespTaken *t, ProtoSlice bytes,
                                  size_t room) {
        ConnectionResp *cr = c->resp;
        RespCommand cmd = t->row ? t->row->cmd : RESP_CMD_UNKNOWN;
        const char *err = NULL;

        if (t->plan.reply == RESP_REPLY_UNKNOWN || t->plan.reply == RESP_REPLY_ARITY) {
                cr->multi_aborted = cr->multi;
                return resp_take_plan(slot, &t->plan);
        }
        switch (cmd) {
        case RESP_CMD_MULTI:
                if (cr->multi)
                        err = "MULTI calls can not be nested";
                else if (!cr->multi_buf && !(cr->multi_buf = malloc(RESP_MULTI_BYTES)))
                        err = "out of memory";
                else
                        cr->multi = true;
                break;
        case RESP_CMD_EXEC:
                err = "EXEC without MULTI"; /* a transaction's EXEC is resp_take_exec()'s */
                break;
        case RESP_CMD_DISCARD:
                if (!cr->multi)
                        err = "DISCARD without MULTI";
                resp_multi_reset(cr);
                break;
        case RESP_CMD_WATCH:
                if (cr->multi) {
                        err = "WATCH inside MULTI is not allowed";
                        cr->multi_aborted = true;
                } else
                        err = "WATCH is not supported: divvyd's EXEC runs its commands together, "
                              "without optimistic locking";
                break;
        default: /* queued */
                if (cr->multi_n >= RESP_MULTI_MAX || cr->multi_len + bytes.len > RESP_MULTI_BYTES) {
                        err = "transaction too large: divvyd queues at most " RESP_MULTI_MAX_TEXT
                              " commands of at most " RESP_MULTI_BYTES_TEXT " bytes in all";
                        cr->multi_aborted = true;
                        break;
                }
                memcpy(cr->multi_buf + cr->multi_len, bytes.ptr, bytes.len);
                cr->multi_len += bytes.len;
                cr->multi_room += room;
                cr->multi_n++;
                return resp_slot_local(slot, RESP_CMD_MULTI, RESP_SUB_QUEUED, 0);
        }
        slot->fe_cmd = (uint8_t) cmd;
        if (err)
                return resp_slot_error(slot, RESP_REPLY_ERROR, PROTO_ERROR_UNKNOWN, err);
        resp_slot_local(slot, cmd, RESP_SUB_OK, 0);
}

/* The RESP requests of c, one slot each: the same slots, rules and hits as lines. A command's
 * error is answered and the connection goes on; broken framing is answered once and closes it,
 * like a line protocol error. */
static void resp_take(Batch *b, Connection *c) {
        unsigned taken = 0;
        size_t reserved = 0, room;
        ConnectionResp *cr = c->resp;

        while (taken < BATCH_LINES_PER_CONNECTION && batch_room(b)) {
                const RespRequest *req = cr ? &cr->req : NULL;
                RespTaken t = { .verb = _PROTO_VERB_INVALID };
                BatchSlot *slot;
                size_t consumed;
                bool transaction;
                int r;

                if (connection_unsent(c) >= batch_settings(b)->output_limit) {
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
                cr = c->resp;
                req = cr ? &cr->req : NULL;
                if (r > 0 && req->argc == 0) {
                        /* "*0" or "*-1": Redis answers nothing, and so do we */
                        connection_consume_input(c, c->frame_consumed);
                        taken++;
                        continue;
                }

                if (r < 0) {
                        room = RESP_ERROR_ROOM;
                        consumed = c->in_len - c->in_pos;
                } else {
                        consumed = c->frame_consumed;
                        room = resp_classify(b, req, &t, cr->multi);
                }
                transaction = r > 0 && t.row && !(t.row->flags & RESP_COMMAND_CLOSE) &&
                              (cr->multi || (t.row->flags & RESP_COMMAND_TRANSACTION));
                if (transaction && cr->multi && !cr->multi_aborted && t.row->cmd == RESP_CMD_EXEC &&
                    t.plan.reply == RESP_REPLY_NORMAL) {
                        if (resp_take_exec(b, c, (ProtoSlice){ c->in + c->in_pos, consumed }, &reserved,
                                           taken))
                                taken++;
                        break; /* the transaction's replies end what this batch takes from c */
                }
                if (!batch_reserve_replies(c, reserved + room, taken))
                        break;
                reserved += room;
                slot = batch_slot_add(b, c, (ProtoSlice){ c->in + c->in_pos, consumed });
                slot->fe_cmd = (uint8_t) (t.row ? t.row->cmd : RESP_CMD_UNKNOWN);
                taken++;

                if (r < 0) {
                        connection_consume_input(c, consumed);
                        resp_slot_error(slot, RESP_REPLY_FATAL, PROTO_ERROR_UNKNOWN,
                                        r == -ENOMEM ? "out of memory" : req->error);
                        c->closing = true;
                        break;
                }
                if (transaction && t.row->cmd == RESP_CMD_EXEC && cr->multi &&
                    t.plan.reply == RESP_REPLY_NORMAL) {
                        /* aborted while queueing: nothing runs */
                        resp_slot_error(slot, RESP_REPLY_TEXT_ERROR, PROTO_ERROR_UNKNOWN,
                                        "EXECABORT Transaction discarded because of previous errors.");
                        resp_multi_reset(cr);
                } else if (transaction || (cr->multi && !t.row))
                        resp_take_transaction(c, slot, &t, (ProtoSlice){ c->in + c->in_pos, consumed },
                                              room);
                else
                        resp_take_one(b, slot, req, &t);
                connection_consume_input(c, consumed);
                if (t.row && (t.row->flags & RESP_COMMAND_CLOSE)) {
                        c->closing = true; /* +OK, then closed: what follows is not read */
                        connection_consume_input(c, c->in_len - c->in_pos);
                        break;
                }
        }
}

/* An error: a slot's own, in the kind it was refused with, or the store's, as a divvy error. */
static size_t resp_format_error_reply(Batch *b, const BatchSlot *slot, ProtoErrorCode code,
                                      const char *reason, char *p) {
        Connection *c = slot->conn;

        (void) b;
        switch (slot->kind == BATCH_SLOT_ERROR ? slot->fe_reply : RESP_REPLY_PROTO_ERROR) {
        case RESP_REPLY_FATAL:
                c->closing = c->err_sent = true;
                return resp_format_error(p, "ERR", reason);
        case RESP_REPLY_UNKNOWN:
                return resp_format_unknown_command(p, slot->arg);
        case RESP_REPLY_ARITY: {
                char why[96];
                snprintf(why, sizeof why, "wrong number of arguments for '%s' command",
                         resp_command_to_string(slot->fe_cmd) ?: "?");
                return resp_format_error(p, "ERR", why);
        }
        case RESP_REPLY_TEXT_ERROR:
                return resp_format_error_text(p, reason);
        case RESP_REPLY_NOPROTO:
                return resp_format_error(p, "NOPROTO", "sorry, this protocol version is not supported");
        case RESP_REPLY_PROTO_ERROR:
                return resp_format_proto_error(p, code, reason);
        default: /* RESP_REPLY_ERROR */
                return resp_format_error(p, "ERR", reason);
        }
}

/* CL.THROTTLE's or RL.*'s reply, from the result of its one hit. */
static size_t resp_format_client_limit(Batch *b, const BatchSlot *slot, const AlgoResult *res, char *p) {
        const ClientLimit *cl = batch_slot_limit(b, slot);
        int64_t v[CLIENT_LIMIT_THROTTLE_REPLY_LEN];
        size_t len, n;

        if (slot->fe_cmd != RESP_CMD_CL_THROTTLE && slot->fe_cmd != RESP_CMD_GCRA) /* RL.*, DEL: one */
                return resp_format_integer(p, client_limit_reduce_reply(cl, res));
        if (client_limit_throttle_error(res))
                return resp_format_error_text(p, client_limit_throttle_error(res));
        n = client_limit_format_throttle(cl, res, v);
        len = resp_format_array(p, n);
        for (size_t i = 0; i < n; i++)
                len += resp_format_integer(p + len, v[i]);
        return len;
}

/* EXPLAIN's reply: the actor is the request's; its bytes are still in the input, parsed again
 * (EXPLAIN is rare and never on the HIT path). */
static size_t resp_format_explain_reply(Batch *b, const BatchSlot *slot, char *p) {
        ProtoRuleRef canaries[RULES_MATCH_MAX], continues[RULES_MATCH_MAX];
        ProtoRequest *req = batch_request(b);
        RespRequest parsed;
        ProtoExplain ex;

        if (resp_parse(slot->line.ptr, slot->line.len, RESP_ARGS_MAX, RESP_REQUEST_MAX, &parsed) <= 0 ||
            resp_to_request(PROTO_VERB_EXPLAIN, parsed.argv, parsed.argc, req) < 0)
                req = NULL;
        batch_explain(b, slot, req, canaries, continues, &ex);
        return resp_format_explain(p, slot->conn->resp->resp3, &ex);
}

static size_t resp_format_decision_reply(Batch *b, const BatchSlot *slot, const BatchDecision *d, char *p) {
        const AlgoResult *res = &d->res;
        bool resp3 = slot->conn->resp->resp3;
        size_t len;

        if (slot->kind == BATCH_SLOT_LIMIT)
                return resp_format_client_limit(b, slot, res, p);
        switch (slot->verb) {
        case PROTO_VERB_HIT:
                if (rule_trivial_decision(d->rule) == RULE_TRIVIAL_DENY)
                        len = resp_format_hit(p, resp3, false, 0, -1);
                else
                        len = resp_format_hit(p, resp3, res->allowed, res->credit, (int64_t) res->reset);
                break;
        case PROTO_VERB_EXPLAIN:
                len = resp_format_explain_reply(b, slot, p);
                break;
        case PROTO_VERB_RESET:
                len = resp_format_integer(p, res->credit > INT64_MAX ? INT64_MAX : (int64_t) res->credit);
                break;
        default: { /* TAKE, PEEK, CHARGE, REFUND */
                ProtoRuleRef rule = batch_rule_ref(d->rule);

                len = resp_format_decision(p, resp3, res, &rule);
                break;
        }
        }
        if (batch_settings(b)->debug && d->rule) {
                char desc[RULE_DESCRIBE_MAX];
                log_debug("Connection %" PRIu64 ": RESP %s -> allowed=%d credit=%" PRIu64 " by rule %s",
                          slot->conn->id, resp_command_to_string(slot->fe_cmd), res->allowed, res->credit,
                          rule_describe(d->rule, desc, sizeof desc));
        }
        return len;
}

static char *resp_put_bulk(char *p, const char *s) {
        return p + resp_format_bulk(p, s, strlen(s));
}

/* RESP's null in the connection's version: "$-1" (RESP2) or "_" (RESP3). */
static size_t resp_fe_null(const Connection *c, char *p) {
        return c->resp->resp3 ? resp_format_null3(p) : resp_format_null(p);
}

/* HELLO's reply: Redis's map (RESP3), or the same as a flat array (RESP2). */
static size_t resp_fe_format_hello(const Connection *c, char *buf) {
        char *p = buf;

        p += c->resp->resp3 ? resp_format_map(p, 7) : resp_format_array(p, 14);
        p = resp_put_bulk(p, "server");
        p = resp_put_bulk(p, "divvyd");
        p = resp_put_bulk(p, "version");
        p += resp_format_bulk(p, PACKAGE_VERSION, strnlen(PACKAGE_VERSION, PROTO_VERSION_MAX));
        p = resp_put_bulk(p, "proto");
        p += resp_format_integer(p, c->resp->resp3 ? 3 : 2);
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

/* One "name:value" line of INFO's text (Redis's line ends are "\r\n"), cut at end. */
static char *info_line(char *p, const char *end, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static char *info_line(char *p, const char *end, const char *fmt, ...) {
        va_list ap;
        int n;

        va_start(ap, fmt);
        n = vsnprintf(p, (size_t) (end - p), fmt, ap);
        va_end(ap);
        if (n < 0)
                return p;
        return p + ((size_t) n < (size_t) (end - p) ? (size_t) n : (size_t) (end - p - 1));
}

/* INFO's reply: a Redis-shaped text of the sections asked for (RespInfoSection), the figures the
 * metrics hold (zero without them). ioredis's ready check reads "loading:0". */
static size_t resp_fe_format_info(Batch *b, uint64_t sections, char *buf) {
        const Metrics *m = batch_metrics(b);
        MetricsStoreGauges g = { 0 };
        char text[RESP_INFO_MAX], *p = text, *end = text + sizeof text;
        uint64_t up = m ? metrics_uptime_usec(m) / 1000000 : 0;

        if (m)
                (void) metrics_store_gauges(m, &g);
        if (sections & RESP_INFO_SERVER)
                p = info_line(
                        p, end,
                        "# Server\r\nredis_version:7.2.0\r\ndivvyd_version:%s\r\nredis_mode:standalone\r\n"
                        "uptime_in_seconds:%" PRIu64 "\r\nuptime_in_days:%" PRIu64 "\r\n\r\n",
                        PACKAGE_VERSION, up, up / 86400);
        if (sections & RESP_INFO_CLIENTS)
                p = info_line(p, end, "# Clients\r\nconnected_clients:%" PRIu64 "\r\n\r\n",
                              m ? metrics_connections(m) : 0);
        if (sections & RESP_INFO_MEMORY)
                p = info_line(p, end, "# Memory\r\nused_memory:%" PRIu64 "\r\n\r\n", g.memory_bytes);
        if (sections & RESP_INFO_PERSISTENCE)
                p = info_line(p, end,
                              "# Persistence\r\nloading:0\r\nasync_loading:0\r\n"
                              "divvyd_checkpoint_age_seconds:%" PRIu64
                              "\r\ndivvyd_checkpoint_failures:%" PRIu64 "\r\ndivvyd_journal_bytes:%" PRIu64
                              "\r\ndivvyd_store_bytes:%" PRIu64 "\r\n\r\n",
                              g.checkpoint_age_usec / 1000000, g.checkpoint_failures, g.journal_bytes,
                              g.size_bytes);
        if (sections & RESP_INFO_STATS)
                p = info_line(p, end,
                              "# Stats\r\ndivvyd_hits_accepted:%" PRIu64 "\r\ndivvyd_hits_rejected:%" PRIu64
                              "\r\ndivvyd_hits_canary_accepted:%" PRIu64
                              "\r\ndivvyd_hits_canary_rejected:%" PRIu64 "\r\n\r\n",
                              m ? metrics_hits_total(m, METRICS_STATUS_ACCEPTED) : 0,
                              m ? metrics_hits_total(m, METRICS_STATUS_REJECTED) : 0,
                              m ? metrics_hits_total(m, METRICS_STATUS_CANARY_ACCEPTED) : 0,
                              m ? metrics_hits_total(m, METRICS_STATUS_CANARY_REJECTED) : 0);
        if (sections & RESP_INFO_KEYSPACE)
                p = info_line(p, end,
                              "# Keyspace\r\ndb0:keys=%" PRIu64 ",expires=%" PRIu64 ",avg_ttl=0\r\n\r\n",
                              g.counters, g.counters);
        if (p > text) /* Redis ends the text without the last blank line */
                p -= 2;
        return resp_format_bulk(buf, text, (size_t) (p - text));
}

static void resp_fe_set_name(Connection *c, ProtoSlice name) {
        memcpy(c->resp->name, name.ptr, name.len);
        c->resp->name_len = name.len;
        c->resp->has_name = name.len > 0; /* Redis: an empty name clears it */
}

/* The reply to a RESP connection command (PING, HELLO, ...), decided when it was taken. */
static size_t resp_format_local(Batch *b, const BatchSlot *slot, char *p) {
        Connection *c = slot->conn;

        (void) b;

        switch (slot->fe_cmd) {
        case RESP_CMD_PING:
                if (slot->arg.ptr)
                        return resp_format_bulk(p, slot->arg.ptr, slot->arg.len);
                return resp_format_simple(p, "PONG");
        case RESP_CMD_ECHO:
                return resp_format_bulk(p, slot->arg.ptr, slot->arg.len);
        case RESP_CMD_HELLO:
                if (slot->fe_sub == RESP_SUB_SETNAME)
                        resp_fe_set_name(c, slot->arg);
                if (slot->n) /* the version asked for: this reply is already in it */
                        c->resp->resp3 = slot->n == 3;
                return resp_fe_format_hello(c, p);
        case RESP_CMD_CLIENT:
                switch (slot->fe_sub) {
                case RESP_SUB_SETNAME:
                        resp_fe_set_name(c, slot->arg);
                        break;
                case RESP_SUB_GETNAME:
                        if (!c->resp->has_name)
                                return resp_fe_null(c, p);
                        return resp_format_bulk(p, c->resp->name, c->resp->name_len);
                case RESP_SUB_ID:
                        return resp_format_integer(p, (int64_t) c->id);
                default:
                        break;
                }
                return resp_format_simple(p, "OK");
        case RESP_CMD_COMMAND:
                if (slot->fe_sub == RESP_SUB_COUNT)
                        return resp_format_integer(p, _RESP_CMD_MAX - 1);
                if (slot->fe_sub == RESP_SUB_INFO) {
                        size_t len = resp_format_array(p, slot->n);
                        for (uint64_t i = 0; i < slot->n; i++)
                                len += resp_fe_null(c, p + len);
                        return len;
                }
                if (slot->fe_sub == RESP_SUB_DOCS && c->resp->resp3)
                        return resp_format_map(p, 0);
                return resp_format_array(p, 0);
        case RESP_CMD_INFO:
                return resp_fe_format_info(b, slot->n, p);
        case RESP_CMD_MULTI: /* +QUEUED for each request of a transaction: written whole */
                if (slot->fe_sub != RESP_SUB_QUEUED)
                        return resp_format_simple(p, "OK");
                memcpy(p, "+QUEUED\r\n", 9);
                return 9;
        case RESP_CMD_EXEC: /* the header: the queued requests' replies follow in their slots */
                return resp_format_array(p, slot->n);
        case RESP_CMD_QUIT:
                c->err_sent = true; /* +OK is the last reply */
                return resp_format_simple(p, "OK");
        default: /* SELECT 0 */
                return resp_format_simple(p, "OK");
        }
}

const Frontend frontend_resp = {
        .name = "resp",
        .take = resp_take,
        .format_decision = resp_format_decision_reply,
        .format_error = resp_format_error_reply,
        .format_local = resp_format_local,
};
