/* SPDX-License-Identifier: MIT */
/* frontend-resp.c: RESP2's front-end; see frontend-resp.h. */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "frontend-resp.h"
#include "frontend.h"
#include "log.h"

#include "build-config.h"

#include "core/client-limits.h"
#include "core/resp-commands.h"

_Static_assert(RESP_CLIENT_NAME_MAX == CONNECTION_NAME_MAX, "a client's name fits its connection");

/* The room a reply to one of divvyd's own commands needs on RESP (an error included). */
static size_t resp_verb_reply_max(ProtoVerb verb) {
        switch (verb) {
        case PROTO_VERB_EXPLAIN:
                return PROTO_REPLY_EXPLAIN_MAX + RESP_BULK_OVERHEAD;
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

/* The RESP requests of c, one slot each: the same slots, rules and hits as lines. A command's
 * error is answered and the connection goes on; broken framing is answered once and closes it,
 * like a line protocol error. */
static void resp_take(Batch *b, Connection *c) {
        ProtoRequest *request = batch_request(b);
        unsigned taken = 0;
        size_t reserved = 0, room;
        ConnectionResp *cr = c->resp;

        while (taken < BATCH_LINES_PER_CONNECTION && batch_room(b)) {
                const RespRequest *req = cr ? &cr->req : NULL;
                const RespCommandRow *row = NULL;
                ProtoVerb verb = _PROTO_VERB_INVALID;
                bool limit = false;
                RespPlan plan = { .reply = RESP_REPLY_NORMAL };
                BatchSlot *slot;
                size_t consumed;
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
                        row = resp_command_lookup(req->argv[0]);
                        consumed = c->frame_consumed;
                        if (row && (row->flags & RESP_COMMAND_VERB)) {
                                verb = row->verb;
                                room = resp_verb_reply_max(verb);
                                /* parsed before the room is reserved: the slices point into the
                                 * input, which reserving does not move */
                                if (resp_to_request(verb, req->argv, req->argc, request) < 0)
                                        verb = _PROTO_VERB_INVALID; /* answered with the request's error */
                        } else if (row && (row->flags & RESP_COMMAND_CLIENT_LIMIT) &&
                                   batch_settings(b)->allow_client_limits) {
                                limit = true;
                                room = RESP_ERROR_ROOM + CLIENT_LIMIT_ERROR_MAX;
                        } else {
                                resp_command_plan(row, req->argv, req->argc, &plan);
                                room = plan.room;
                        }
                }
                if (!batch_reserve_replies(c, reserved + room, taken))
                        break;
                reserved += room;
                slot = batch_slot_add(b, c, (ProtoSlice){ c->in + c->in_pos, consumed });
                slot->fe_cmd = (uint8_t) (row ? row->cmd : RESP_CMD_UNKNOWN);
                connection_consume_input(c, consumed);
                taken++;

                if (r < 0) {
                        resp_slot_error(slot, RESP_REPLY_FATAL, PROTO_ERROR_UNKNOWN,
                                        r == -ENOMEM ? "out of memory" : req->error);
                        c->closing = true;
                        break;
                }
                if (limit) {
                        resp_take_client_limit(b, slot, req);
                        continue;
                }
                if (!row || !(row->flags & RESP_COMMAND_VERB)) {
                        resp_take_plan(slot, &plan);
                        if (row && (row->flags & RESP_COMMAND_CLOSE)) {
                                c->closing = true; /* +OK, then closed: what follows is not read */
                                connection_consume_input(c, c->in_len - c->in_pos);
                                break;
                        }
                        continue;
                }
                if (verb < 0) {
                        resp_slot_error(slot, RESP_REPLY_PROTO_ERROR, request->error_code,
                                        request->error_reason);
                        continue;
                }
                slot->verb = verb;
                if (!batch_admit(b, slot)) {
                        slot->fe_reply = RESP_REPLY_PROTO_ERROR; /* answered; the connection goes on */
                        continue;
                }
                batch_match(b, slot);
                if (slot->kind == BATCH_SLOT_ERROR)
                        slot->fe_reply = RESP_REPLY_PROTO_ERROR;
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
        return resp_format_explain(p, &ex);
}

static size_t resp_format_decision_reply(Batch *b, const BatchSlot *slot, const BatchDecision *d, char *p) {
        const AlgoResult *res = &d->res;
        size_t len;

        if (slot->kind == BATCH_SLOT_LIMIT)
                return resp_format_client_limit(b, slot, res, p);
        switch (slot->verb) {
        case PROTO_VERB_HIT:
                if (rule_trivial_decision(d->rule) == RULE_TRIVIAL_DENY)
                        len = resp_format_hit(p, false, 0, -1);
                else
                        len = resp_format_hit(p, res->allowed, res->credit, (int64_t) res->reset);
                break;
        case PROTO_VERB_EXPLAIN:
                len = resp_format_explain_reply(b, slot, p);
                break;
        case PROTO_VERB_RESET:
                len = resp_format_integer(p, res->credit > INT64_MAX ? INT64_MAX : (int64_t) res->credit);
                break;
        default: { /* TAKE, PEEK, CHARGE, REFUND */
                ProtoRuleRef rule = batch_rule_ref(d->rule);

                len = resp_format_decision(p, res, &rule);
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

/* HELLO's reply: Redis's map, as a flat array in RESP2. */
static size_t resp_fe_format_hello(const Connection *c, char *buf) {
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
                return resp_fe_format_hello(c, p);
        case RESP_CMD_CLIENT:
                switch (slot->fe_sub) {
                case RESP_SUB_SETNAME:
                        resp_fe_set_name(c, slot->arg);
                        break;
                case RESP_SUB_GETNAME:
                        if (!c->resp->has_name)
                                return resp_format_null(p);
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
                                len += resp_format_null(p + len);
                        return len;
                }
                return resp_format_array(p, 0);
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
