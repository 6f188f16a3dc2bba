/* SPDX-License-Identifier: MIT */
/* frontend-http.c: the HTTP API's front-end; see frontend-http.h. */

#include <string.h>

#include "frontend-http.h"
#include "log.h"

#include "core/rls.h"

/* What one request of an exchange became, as format_decision()/format_error() write it into the
 * connection's output (copied: the output is not aligned), then text_len bytes of text: an
 * EXPLAIN's JSON, an error's reason. */
typedef enum HttpRecordKind {
        HTTP_RECORD_DECISION, /* TAKE, PEEK, CHARGE, REFUND: res, the rule */
        HTTP_RECORD_RESET,    /* res.credit: counters deleted */
        HTTP_RECORD_EXPLAIN,  /* the text is the JSON body */
        HTTP_RECORD_REFUSED,  /* refused when taken (the client's): code, the text its reason */
        HTTP_RECORD_FAILED,   /* the store failed it: the text is the reason */
} HttpRecordKind;

typedef struct HttpRecord {
        uint8_t kind; /* HttpRecordKind */
        ProtoErrorCode code;
        AlgoResult res;
        bool has_rule;
        uint64_t quota, window; /* the rule's creditLimit and resetSeconds */
        /* /json: the descriptor's status as gRPC's (its name NULL), the hits it asked for, and
         * whether a rule that always denies decided its group (its hits were PEEKs) */
        RlsStatus status;
        RlsHits hits;
        bool group_denied;
        bool labelled; /* name is the rule's label (gRPC's name), not "#<index>" */
        char name[PROTO_LABEL_MAX + 1];
        size_t text_len;
} HttpRecord;

#define HTTP_RECORD_TEXT_MAX PROTO_REPLY_V2_MAX /* bytes of an error's reason kept */

/* The room one request's record may take. */
static size_t http_record_room(HttpApiEndpoint e) {
        return sizeof(HttpRecord) + (e == HTTP_API_EXPLAIN ? HTTP_API_EXPLAIN_MAX : HTTP_RECORD_TEXT_MAX);
}

/* Checks the n requests of c's exchange as the engine will take them (each turned into the
 * engine's request and admitted: its count, its verb on this listener), before any is matched:
 * a /json request with one bad descriptor charges none. False: *ret has the first one's error. */
static bool http_check_all(Batch *b, Connection *c, size_t n, BatchSlot *ret) {
        const HttpExchange *x = c->userdata;
        ProtoRequest *req = batch_request(b);

        for (size_t i = 0; i < n; i++) {
                *ret = (BatchSlot){ .conn = c };
                if (http_api_request_to_proto(&x->req, i, req) < 0) {
                        batch_slot_error(ret, req->error_code, req->error_reason);
                        return false;
                }
                ret->verb = req->verb;
                if (!batch_admit(b, ret))
                        return false;
        }
        return true;
}

/* batch_group_close()'s refill: slot's descriptor into the batch's request again. */
static void http_refill(Batch *b, BatchSlot *slot, void *userdata) {
        (void) http_api_request_to_proto(userdata, slot->n, batch_request(b)); /* passed once */
}

/* The exchange of c: its body parsed (once: it is decoded in place), then one slot per request.
 * All of them or none: a /json request's descriptors are answered together, so they wait for a
 * batch with room for all, and an error in one is the only slot; they are decided as gRPC's
 * descriptors of one call, in one group (nothing charged unless every one allows). */
static void http_take(Batch *b, Connection *c) {
        HttpExchange *x = c->userdata;
        ProtoSlice line = { c->in, c->in_len > 200 ? 200 : c->in_len };
        BatchSlot check, *slot, *first = NULL;
        size_t n = 1;
        uint32_t group;

        if (x->taken)
                return;
        if (!x->parsed)
                x->parse_result = http_api_parse(x->endpoint, c->in, c->in_len, &x->req);
        x->parsed = true;
        if (x->parse_result >= 0 && x->endpoint == HTTP_API_ENVOY)
                n = x->req.n_descriptors;
        if (!batch_room_for(b, n))
                return; /* the next batch takes it */
        x->taken = true;
        if (!batch_reserve_replies(c, n * http_record_room(x->endpoint), 0))
                return; /* out of memory: answered with no record (503) */
        connection_consume_input(c, c->in_len);

        if (x->parse_result < 0 || !http_check_all(b, c, n, &check)) {
                slot = batch_slot_add(b, c, line);
                if (x->parse_result < 0)
                        batch_slot_error(slot, PROTO_ERROR_UNKNOWN, x->req.error);
                else
                        batch_slot_error(slot, check.error_code, check.error_reason);
                return;
        }
        group = n > 1 ? batch_group_id(b) : 0;
        for (size_t i = 0; i < n; i++) {
                ProtoRequest *req = batch_request(b);

                slot = batch_slot_add(b, c, line);
                (void) http_api_request_to_proto(&x->req, i, req); /* checked above */
                slot->verb = req->verb;
                slot->group = group;
                slot->n = i;
                first = first ?: slot;
                if (batch_admit(b, slot))
                        batch_match(b, slot);
        }
        if (group)
                batch_group_close(b, first, n, http_refill, &x->req);
}

static size_t http_put_record(char *p, const HttpRecord *rec, const char *text, size_t text_len) {
        memcpy(p, rec, sizeof *rec);
        if (text_len > 0)
                memcpy(p + sizeof *rec, text, text_len);
        return sizeof *rec + text_len;
}

/* EXPLAIN's JSON: the actor is the request's, built again from the parsed body. */
static size_t http_format_explain(Batch *b, const BatchSlot *slot, char *text) {
        ProtoRuleRef canaries[RULES_MATCH_MAX], continues[RULES_MATCH_MAX];
        const HttpExchange *x = slot->conn->userdata;
        ProtoRequest *req = batch_request(b);
        ProtoExplain ex;

        if (http_api_request_to_proto(&x->req, 0, req) < 0)
                req = NULL;
        batch_explain(b, slot, req, canaries, continues, &ex);
        return http_api_format_explain(text, &ex);
}

/* The hits a /json descriptor asked for, as gRPC's. */
static RlsHits http_hits(const BatchSlot *slot) {
        RlsHits h = { .kind = RLS_HIT_TAKE, .count = slot->count };

        if (slot->verb == PROTO_VERB_PEEK)
                h.kind = RLS_HIT_PEEK;
        else if (slot->verb == PROTO_VERB_REFUND)
                h.kind = RLS_HIT_REFUND;
        return h;
}

static size_t http_format_decision(Batch *b, const BatchSlot *slot, const BatchDecision *d, char *p) {
        HttpRecord rec = { .kind = HTTP_RECORD_DECISION,
                           .res = d->res,
                           .hits = http_hits(slot),
                           .group_denied = slot->group_denied };

        if (d->rule) {
                ProtoRuleRef ref = batch_rule_ref(d->rule);

                rec.has_rule = true;
                rec.quota = d->rule->credit_limit;
                rec.window = d->rule->reset_seconds;
                http_api_rule_name(&ref, rec.name);
        }
        rls_status_of(d->rule, &d->res, &rec.status);
        rec.labelled = rec.status.name != NULL;
        rec.status.name = NULL; /* the rule may be gone when the reply is written: rec.name */
        switch (slot->verb) {
        case PROTO_VERB_EXPLAIN:
                rec.kind = HTTP_RECORD_EXPLAIN;
                rec.text_len = http_format_explain(b, slot, p + sizeof rec);
                memcpy(p, &rec, sizeof rec);
                return sizeof rec + rec.text_len;
        case PROTO_VERB_RESET:
                rec.kind = HTTP_RECORD_RESET;
                break;
        default:
                break;
        }
        if (__builtin_expect(batch_settings(b)->debug, 0) && d->rule) {
                char json[HTTP_API_REPLY_MAX + 1];
                size_t len = http_api_format_decision(json, &d->res, rec.name);

                json[len++] = '\n';
                batch_log_reply(slot, d->rule, json, len);
        }
        return http_put_record(p, &rec, NULL, 0);
}

static size_t http_format_error(Batch *b, const BatchSlot *slot, ProtoErrorCode code, const char *reason,
                                char *p) {
        HttpRecord rec = { .kind = slot->kind == BATCH_SLOT_ERROR ? HTTP_RECORD_REFUSED : HTTP_RECORD_FAILED,
                           .code = code };

        (void) b;
        reason = reason ?: "";
        rec.text_len = strnlen(reason, HTTP_RECORD_TEXT_MAX - 1);
        if (slot->kind == BATCH_SLOT_ERROR)
                log_debug("HTTP API request \"%.*s\" refused: %s", (int) slot->line.len, slot->line.ptr,
                          reason);
        return http_put_record(p, &rec, reason, rec.text_len);
}

const Frontend frontend_http = {
        .name = "http",
        .take = http_take,
        .format_decision = http_format_decision,
        .format_error = http_format_error,
};

/* ---- the HTTP response ---- */

static void http_reply_error(HttpReply *ret, unsigned status, const char *code, const char *reason,
                             size_t reason_len) {
        char text[HTTP_RECORD_TEXT_MAX];

        memcpy(text, reason, reason_len);
        text[reason_len] = '\0';
        ret->status = status;
        ret->body_len = http_api_format_error(ret->body, code, text);
}

/* The HTTP status of a request refused with code. */
static unsigned http_refused_status(ProtoErrorCode code) {
        return code == PROTO_ERROR_FORBIDDEN ? 403 : 400;
}

/* /v1/...: the one record's reply. */
static void http_reply_v1(const HttpRecord *rec, const char *text, HttpReply *ret) {
        switch (rec->kind) {
        case HTTP_RECORD_EXPLAIN:
                ret->status = 200;
                memcpy(ret->body, text, rec->text_len);
                ret->body[rec->text_len] = '\0';
                ret->body_len = rec->text_len;
                return;
        case HTTP_RECORD_RESET:
                ret->status = 200;
                ret->body_len = http_api_format_reset(ret->body, rec->res.credit);
                return;
        default:
                break;
        }
        ret->status = rec->res.allowed ? 200 : 429;
        ret->body_len = http_api_format_decision(ret->body, &rec->res, rec->has_rule ? rec->name : NULL);
        if (rec->has_rule) {
                ret->has_limit = true;
                ratelimit_header_policy(ret->policy, rec->name, strlen(rec->name), rec->quota, rec->window);
                ratelimit_header_state(ret->limit, rec->name, strlen(rec->name), rec->res.credit,
                                       rec->res.reset);
        }
        if (!rec->res.allowed && rec->res.retry >= 1) {
                ret->has_retry_after = true;
                ratelimit_header_retry_after(ret->retry_after, (uint64_t) rec->res.retry);
        }
}

void frontend_http_reply(const Connection *c, HttpReply *ret) {
        const HttpExchange *x = c->userdata;
        HttpRecord rec;
        RlsStatus st[HTTP_API_DESCRIPTORS_MAX];
        RlsHits hits[HTTP_API_DESCRIPTORS_MAX];
        size_t at = 0, n = 0, i, len;
        bool over = false, peeked = false;

        ret->has_limit = ret->has_retry_after = false;
        /* An error anywhere answers the whole exchange: the first one. */
        while (at + sizeof rec <= c->out_len) {
                memcpy(&rec, c->out + at, sizeof rec);
                if (rec.kind == HTTP_RECORD_REFUSED || rec.kind == HTTP_RECORD_FAILED) {
                        const char *code = rec.kind == HTTP_RECORD_FAILED      ? "unavailable"
                                           : rec.code == PROTO_ERROR_FORBIDDEN ? "forbidden"
                                           : rec.code == PROTO_ERROR_BAD_COUNT ? "bad-count"
                                                                               : "bad-request";
                        http_reply_error(
                                ret, rec.kind == HTTP_RECORD_FAILED ? 503 : http_refused_status(rec.code),
                                code, c->out + at + sizeof rec, rec.text_len);
                        return;
                }
                at += sizeof rec + rec.text_len;
                n++;
        }
        if (n == 0) {
                http_reply_error(ret, 503, "unavailable", "not answered", strlen("not answered"));
                return;
        }
        if (x->endpoint != HTTP_API_ENVOY) {
                memcpy(&rec, c->out, sizeof rec);
                http_reply_v1(&rec, c->out + sizeof rec, ret);
                return;
        }

        /* /json: envoyproxy/ratelimit's RateLimitResponse, as protojson writes it; all or nothing,
         * the statuses settled as gRPC's (what the descriptors not charged have left). */
        for (at = 0, n = 0; at < c->out_len && n < HTTP_API_DESCRIPTORS_MAX;
             at += sizeof rec + rec.text_len, n++) {
                memcpy(&rec, c->out + at, sizeof rec);
                st[n] = rec.status;
                hits[n] = rec.hits;
                peeked |= rec.group_denied;
        }
        over = rls_statuses_settle(st, hits, n, peeked);
        len = (size_t) snprintf(ret->body, sizeof ret->body, "{\"overallCode\":\"%s\",\"statuses\":[",
                                over ? "OVER_LIMIT" : "OK");
        for (at = 0, i = 0; i < n; at += sizeof rec + rec.text_len, i++) {
                memcpy(&rec, c->out + at, sizeof rec);
                st[i].name = rec.labelled ? rec.name : NULL;
                if (i > 0)
                        ret->body[len++] = ',';
                len += http_api_format_envoy_status(ret->body + len, &st[i]);
        }
        memcpy(ret->body + len, "]}", 3);
        ret->body_len = len + 2;
        ret->status = over ? 429 : 200;
}
