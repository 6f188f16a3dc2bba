/* SPDX-License-Identifier: MIT */
/* frontend-line.c: the divvy line protocol's front-end; see frontend-line.h. */

#include <errno.h>
#include <inttypes.h>

#include "frontend-line.h"
#include "frontend.h"
#include "log.h"

#include "build-config.h"

/* The room a reply to verb needs in the output buffer. */
static size_t line_reply_max(ProtoVerb verb) {
        switch (verb) {
        case PROTO_VERB_HIT:
                return PROTO_REPLY_MAX;
        case PROTO_VERB_EXPLAIN:
                return PROTO_REPLY_EXPLAIN_MAX;
        default:
                return PROTO_REPLY_V2_MAX;
        }
}

/* Lines of c, one slot each; a line answered ERR closes the connection (the input after it is
 * dropped). */
static void line_take(Batch *b, Connection *c) {
        ProtoRequest *req = batch_request(b);
        unsigned taken = 0;
        size_t reserved = 0, room;

        while (taken < BATCH_LINES_PER_CONNECTION && batch_room(b)) {
                ProtoSlice line;
                size_t consumed = 0;
                BatchSlot *slot;
                int r;

                if (connection_unsent(c) >= batch_settings(b)->output_limit) {
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
                        r = proto_parse_request(line.ptr, line.len, PROTO_PAIRS_MAX, req);
                else
                        r = -EMSGSIZE;
                room = r < 0 ? PROTO_REPLY_MAX : line_reply_max(req->verb);
                if (!batch_reserve_replies(c, reserved + room, taken))
                        break;
                reserved += room;

                connection_consume_input(c, consumed);
                taken++;
                slot = batch_slot_add(b, c, line);

                if (r == -EMSGSIZE) {
                        batch_slot_error(slot, PROTO_ERROR_UNKNOWN, "line too long");
                        c->closing = true;
                        break;
                }
                if (r < 0) {
                        batch_slot_error(slot, req->error_code, req->error_reason);
                        c->closing = true; /* lines after a bad one are not executed */
                        connection_consume_input(c, c->in_len - c->in_pos);
                        break;
                }
                slot->verb = req->verb;
                if (!batch_admit(b, slot)) {
                        c->closing = true; /* as after any bad line */
                        connection_consume_input(c, c->in_len - c->in_pos);
                        break;
                }
                batch_match(b, slot);
        }
}

/* An ERR reply: nothing after it is answered. */
static size_t line_format_error(Batch *b, const BatchSlot *slot, ProtoErrorCode code, const char *reason,
                                char *p) {
        Connection *c = slot->conn;
        size_t len = proto_format_error(p, code, reason);

        (void) b;
        c->closing = c->err_sent = true;
        if (slot->kind == BATCH_SLOT_ERROR)
                log_debug("Connection %" PRIu64 ": \"%.*s\" -> %.*s", c->id,
                          (int) (slot->line.len > 200 ? 200 : slot->line.len), slot->line.ptr, (int) len - 1,
                          p);
        return len;
}

/* EXPLAIN's reply: the actor is the request's; its line is still in the input, parsed again
 * (EXPLAIN is rare and never on the HIT path). */
static size_t line_format_explain(Batch *b, const BatchSlot *slot, char *p) {
        ProtoRuleRef canaries[RULES_MATCH_MAX], continues[RULES_MATCH_MAX];
        ProtoRequest *req = batch_request(b);
        ProtoExplain ex;

        if (proto_parse_request(slot->line.ptr, slot->line.len, PROTO_PAIRS_MAX, req) < 0)
                req = NULL;
        batch_explain(b, slot, req, canaries, continues, &ex);
        return proto_format_explain(p, &ex);
}

static size_t line_format_decision(Batch *b, const BatchSlot *slot, const BatchDecision *d, char *p) {
        const AlgoResult *res = &d->res;
        size_t len;

        switch (slot->verb) {
        case PROTO_VERB_HIT:
                if (rule_trivial_decision(d->rule) == RULE_TRIVIAL_DENY)
                        len = proto_format_ok(p, false, 0, -1);
                else
                        len = proto_format_ok(p, res->allowed, res->credit, (int64_t) res->reset);
                break;
        case PROTO_VERB_HELLO:
                len = proto_format_hello(p, PACKAGE_VERSION);
                break;
        case PROTO_VERB_EXPLAIN:
                len = line_format_explain(b, slot, p);
                break;
        case PROTO_VERB_RESET:
                len = proto_format_reset(p, res->credit);
                break;
        default: { /* TAKE, PEEK, CHARGE, REFUND */
                ProtoRuleRef rule = batch_rule_ref(d->rule);

                len = proto_format_decision(p, res, &rule);
                break;
        }
        }
        if (__builtin_expect(batch_settings(b)->debug, 0) && d->rule)
                batch_log_reply(slot, d->rule, p, len);
        return len;
}

const Frontend frontend_line = {
        .name = "line",
        .take = line_take,
        .format_decision = line_format_decision,
        .format_error = line_format_error,
};
