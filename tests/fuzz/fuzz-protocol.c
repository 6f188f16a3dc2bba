/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the protocol framer, request parser and reply formatters (protocol.c).
 * The input is a client's byte stream. Its first byte picks the line limit (so short
 * limits are exercised too); the rest is framed like the server does, each line is
 * parsed, and every contract of protocol.h is checked: slices stay inside the input,
 * keys are non-empty and distinct, failures carry a reason, replies are single
 * well-formed lines within PROTO_REPLY_MAX. Each line also goes through the version 2 parser
 * (verbs and counts), and the version 2 formatters are fed the line as label, version and
 * actor: their replies must stay single lines within their limits.
 */

#include <string.h>

#include "fuzz.h"
#include "core/protocol.h"

/* True if s[0..len) is well-formed UTF-8 (leniently checked) without control bytes; in
 * a request, tab and DEL are allowed (the parser takes them), in a reply neither is. */
static bool text_ok(const uint8_t *s, size_t len, bool in_request) {
        for (size_t i = 0; i < len;) {
                uint8_t c = s[i];
                size_t n;

                if (c < 0x80) {
                        bool bad = c < ' ' || c == 0x7F;
                        if (in_request && (c == '\t' || c == 0x7F))
                                bad = false;
                        if (bad)
                                return false;
                        i++;
                        continue;
                }
                n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
                if (c < 0xC2 || c > 0xF4 || len - i < n)
                        return false;
                for (size_t k = 1; k < n; k++)
                        if ((s[i + k] & 0xC0) != 0x80)
                                return false;
                i += n;
        }
        return true;
}

static bool slice_inside(ProtoSlice s, const char *start, size_t len) {
        return s.ptr >= start && s.len <= len && (size_t) (s.ptr - start) <= len - s.len;
}

static void check_request(const ProtoRequest *req, int r, const char *text, size_t len) {
        char reply[PROTO_REPLY_MAX];
        size_t n;

        if (r < 0) {
                fuzz_check(r == -EBADMSG);
                fuzz_check(req->n_pairs == 0);
                fuzz_check(req->error_reason != NULL);
                fuzz_check(proto_error_code_to_string(req->error_code) != NULL);
                n = proto_format_error(reply, req->error_code, req->error_reason);
                fuzz_check(n < PROTO_REPLY_MAX && strlen(reply) == n);
                fuzz_check(memcmp(reply, "ERR ", 4) == 0 && reply[n - 1] == '\n');
                /* The reason is a fixed text, never an echo of the request. */
                fuzz_check(fuzz_reason_is_fixed(req->error_reason, strlen(req->error_reason)));
                fuzz_check_err_line(reply, n - 1);
                return;
        }

        fuzz_check(r == 0);
        fuzz_check(req->error_reason == NULL);
        fuzz_check(req->n_pairs <= PROTO_PAIRS_MAX);
        for (size_t i = 0; i < req->n_pairs; i++) {
                const ProtoPair *p = &req->pairs[i];
                const ProtoSlice *v;

                fuzz_check(p->key.len > 0);
                fuzz_check(slice_inside(p->key, text, len));
                fuzz_check(p->value.len == 0 || slice_inside(p->value, text, len));
                fuzz_check(memchr(p->key.ptr, '\0', p->key.len) == NULL);
                fuzz_check(text_ok((const uint8_t *) p->key.ptr, p->key.len, true));
                fuzz_check(p->value.len == 0 || text_ok((const uint8_t *) p->value.ptr, p->value.len, true));
                /* Keys are distinct: lookup finds this very pair. */
                v = proto_request_get(req, p->key.ptr, p->key.len);
                fuzz_check(v == &p->value);
        }
}

/* Formats an ERR reply whose reason is the (NUL-terminated) line: the formatter must
 * neutralize quotes, controls and broken UTF-8 and never overflow. */
static void check_error_reply(const char *line, size_t len) {
        static char reason[PROTO_LINE_MAX + 1];
        char reply[PROTO_REPLY_MAX + 16];
        size_t n;

        if (len > PROTO_LINE_MAX)
                len = PROTO_LINE_MAX;
        memcpy(reason, line, len);
        reason[len] = '\0';
        memset(reply, 0x55, sizeof reply);
        n = proto_format_error(reply, PROTO_ERROR_UNKNOWN, reason);
        fuzz_check(n < PROTO_REPLY_MAX && strlen(reply) == n);
        fuzz_check((unsigned char) reply[PROTO_REPLY_MAX] == 0x55); /* nothing written beyond */
        fuzz_check(memcmp(reply, "ERR unknown \"", 13) == 0);
        fuzz_check(n >= 15 && reply[n - 1] == '\n' && reply[n - 2] == '"');
        fuzz_check(memchr(reply + 13, '"', n - 15) == NULL);
        fuzz_check(text_ok((const uint8_t *) reply, n - 1, false));
}

static void check_ok_reply(const uint8_t *data, size_t size) {
        char reply[PROTO_REPLY_MAX];
        uint64_t credit = 0, reset = 0;
        size_t n;

        if (size >= 16) {
                memcpy(&credit, data, 8);
                memcpy(&reset, data + 8, 8);
        }
        n = proto_format_ok(reply, size & 1, credit, (int64_t) reset);
        fuzz_check(n < PROTO_REPLY_MAX && strlen(reply) == n && reply[n - 1] == '\n');
        fuzz_check(memcmp(reply, "OK ", 3) == 0);
}

/* Version 2: the same contracts, plus the count's and the HIT-unchanged ones. */
static void check_request_v2(const char *line, size_t len) {
        static ProtoRequest req, v1;
        int r = proto_parse_request(line, len, PROTO_PAIRS_MAX, &req);
        int r1 = proto_parse_line(line, len, PROTO_PAIRS_MAX, &v1);

        check_request(&req, r, line, len);
        if (r < 0) {
                fuzz_check(req.error_code == PROTO_ERROR_UNKNOWN ||
                           req.error_code == PROTO_ERROR_UNKNOWN_COMMAND ||
                           req.error_code == PROTO_ERROR_BAD_COUNT ||
                           req.error_code == PROTO_ERROR_BAD_TIME);
                /* HIT never gets a new error code, and fails exactly as in version 1. */
                if (r1 < 0 && v1.error_code != PROTO_ERROR_UNKNOWN_COMMAND) {
                        fuzz_check(req.error_code == v1.error_code);
                        fuzz_check(strcmp(req.error_reason, v1.error_reason) == 0);
                }
                fuzz_check(r1 < 0);
                return;
        }
        fuzz_check(req.verb >= 0 && req.verb < _PROTO_VERB_MAX);
        switch (req.verb) {
        case PROTO_VERB_HIT:
                fuzz_check(r1 == 0 && v1.n_pairs == req.n_pairs && !req.has_count && req.count == 0);
                break;
        case PROTO_VERB_TAKE:
        case PROTO_VERB_CHARGE:
        case PROTO_VERB_REFUND:
                fuzz_check(req.has_count && req.count >= 1 && req.count <= PROTO_COUNT_MAX);
                break;
        case PROTO_VERB_PEEK:
                fuzz_check(req.count <= PROTO_COUNT_MAX && (req.has_count || req.count == 1));
                break;
        default:
                fuzz_check(!req.has_count && req.count == 0);
                break;
        }
        /* a client's timestamp only after TAKE, PEEK and CHARGE */
        fuzz_check(!req.has_at || req.verb == PROTO_VERB_TAKE || req.verb == PROTO_VERB_PEEK ||
                   req.verb == PROTO_VERB_CHARGE);
        fuzz_check(req.has_at || req.at_usec == 0);
        if (req.verb != PROTO_VERB_HIT)
                fuzz_check(r1 < 0 && v1.error_code == PROTO_ERROR_UNKNOWN_COMMAND);
}

static bool one_line(const char *reply, size_t n, size_t max) {
        return n < max && strlen(reply) == n && n > 3 && memcmp(reply, "OK ", 3) == 0 &&
               reply[n - 1] == '\n' && memchr(reply, '\n', n - 1) == NULL &&
               text_ok((const uint8_t *) reply, n - 1, false);
}

static void check_v2_replies(const char *line, size_t len, const uint8_t *data, size_t size) {
        static char text[PROTO_LINE_MAX + 1], reply[PROTO_REPLY_EXPLAIN_MAX + 16];
        ProtoRuleRef refs[40];
        uint64_t num[4] = { 0 };
        size_t n;

        memcpy(num, data, size < sizeof num ? size : sizeof num);
        if (len > PROTO_LINE_MAX)
                len = PROTO_LINE_MAX;
        memcpy(text, line, len);
        text[len] = '\0'; /* cut at the first NUL, as a C string would be */

        memset(reply, 0x55, sizeof reply);
        n = proto_format_decision(reply,
                                  &(AlgoResult){ .allowed = num[0] & 1,
                                                 .credit = num[0],
                                                 .limit = num[1],
                                                 .reset = num[2],
                                                 .retry = (int64_t) num[3] },
                                  &(ProtoRuleRef){ size & 2 ? text : NULL, num[1] });
        fuzz_check(one_line(reply, n, PROTO_REPLY_V2_MAX) &&
                   (unsigned char) reply[PROTO_REPLY_V2_MAX] == 0x55);
        n = proto_format_hello(reply, text);
        fuzz_check(one_line(reply, n, PROTO_REPLY_V2_MAX) &&
                   (unsigned char) reply[PROTO_REPLY_V2_MAX] == 0x55);

        for (size_t i = 0; i < 40; i++)
                refs[i] =
                        (ProtoRuleRef){ (i + size) % 3 ? text + (i * 7) % (len + 1) : NULL, num[i % 4] + i };
        memset(reply, 0x55, sizeof reply);
        n = proto_format_explain(reply, &(ProtoExplain){ { text, num[0] },
                                                         text,
                                                         { size & 4 ? NULL : line, len },
                                                         text,
                                                         refs,
                                                         size % 41,
                                                         refs + size % 7,
                                                         (size / 7) % 34 });
        fuzz_check(one_line(reply, n, PROTO_REPLY_EXPLAIN_MAX));
        fuzz_check((unsigned char) reply[PROTO_REPLY_EXPLAIN_MAX] == 0x55);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static ProtoRequest req;
        const char *buf;
        size_t line_max, pos = 0;

        check_ok_reply(data, size);
        if (size == 0)
                return 0;
        /* 0: the real limit; otherwise a small one, so that the limit paths are reached. */
        line_max = data[0] < 128 ? PROTO_LINE_MAX : data[0] - 128u;
        buf = (const char *) data + 1;
        size--;

        while (pos < size) {
                ProtoSlice line = {};
                size_t consumed = 0;
                int r = proto_next_line(buf + pos, size - pos, line_max, &line, &consumed);

                if (r < 0) {
                        fuzz_check(r == -EMSGSIZE);
                        break;
                }
                if (r == 0) {
                        /* The rest is a partial line within the limit (+1 for a pending "\r"). */
                        fuzz_check(size - pos <= line_max + 1);
                        fuzz_check(memchr(buf + pos, '\n', size - pos) == NULL);
                        line = (ProtoSlice){ .ptr = buf + pos, .len = size - pos };
                        consumed = size - pos;
                } else {
                        fuzz_check(r == 1);
                        fuzz_check(line.ptr == buf + pos);
                        fuzz_check(consumed >= 1 && consumed <= size - pos);
                        fuzz_check(buf[pos + consumed - 1] == '\n');
                        fuzz_check(line.len <= line_max && line.len < consumed);
                        fuzz_check(memchr(line.ptr, '\n', line.len) == NULL);
                }

                r = proto_parse_line(line.ptr, line.len, PROTO_PAIRS_MAX, &req);
                check_request(&req, r, line.ptr, line.len);
                if (r == 0)
                        fuzz_check(req.command == PROTO_COMMAND_HIT);

                r = proto_parse_pairs(line.ptr, line.len, (size_t) data[0] % (PROTO_PAIRS_MAX + 8), &req);
                check_request(&req, r, line.ptr, line.len);
                if (r == 0)
                        fuzz_check(req.command == _PROTO_COMMAND_INVALID);

                check_request_v2(line.ptr, line.len);
                check_v2_replies(line.ptr, line.len, data, size);

                check_error_reply(line.ptr, line.len);
                pos += consumed;
        }
        return 0;
}
