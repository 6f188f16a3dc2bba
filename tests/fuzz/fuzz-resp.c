/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the RESP2 request parser, resp_to_request() and the RESP formatters (resp.c).
 * The input is a client's byte stream after its first byte, which picks the limits (so small
 * ones are exercised too). Requests are taken one after the other as the daemon does, and
 * every contract of resp.h is checked: slices stay inside the input and the request, "need
 * more" is only ever said while the request is within its byte limit (a client cannot make the
 * daemon buffer more than that), failures are final and carry a sentence, requests turned into
 * ProtoRequests have valid distinct keys, and every reply formatted from the request's bytes
 * is well-formed RESP within its bound.
 */

#include <string.h>

#include "fuzz.h"
#include "core/resp.h"

static bool slice_inside(ProtoSlice s, const char *start, size_t len) {
        return s.len <= len && (s.len == 0 || (s.ptr >= start && (size_t) (s.ptr - start) <= len - s.len));
}

/* A RESP error or simple string reply: one line ending in CRLF, no CR or LF inside. */
static bool one_line(const char *r, size_t n, char type) {
        if (n < 3 || r[0] != type || r[n - 2] != '\r' || r[n - 1] != '\n')
                return false;
        for (size_t i = 0; i < n - 2; i++)
                if (r[i] == '\r' || r[i] == '\n')
                        return false;
        return true;
}

static void check_replies(const RespRequest *req, const ProtoRequest *preq) {
        static char buf[RESP_BULK_MAX + RESP_BULK_OVERHEAD + RESP_ERROR_MAX];
        RespRequest back;
        size_t n;

        n = resp_format_unknown_command(buf, req->argv[0]);
        fuzz_check(n <= RESP_ERROR_MAX && one_line(buf, n, '-'));
        n = resp_format_bulk(buf, req->argv[req->argc - 1].ptr, req->argv[req->argc - 1].len);
        fuzz_check(n <= req->argv[req->argc - 1].len + RESP_BULK_OVERHEAD);
        /* A bulk reply reads back as the same bytes (a one-element request but for its '$'). */
        memmove(buf + 4, buf, n);
        memcpy(buf, "*1\r\n", 4);
        fuzz_check(resp_parse(buf, n + 4, 1, RESP_REQUEST_MAX, &back) == 1);
        fuzz_check(back.consumed == n + 4 && back.argc == 1);
        fuzz_check(back.argv[0].len == req->argv[req->argc - 1].len);
        fuzz_check(memcmp(back.argv[0].ptr, req->argv[req->argc - 1].ptr, back.argv[0].len) == 0);
        if (preq && preq->error_reason) {
                n = resp_format_proto_error(buf, preq->error_code, preq->error_reason);
                fuzz_check(n <= RESP_ERROR_MAX && one_line(buf, n, '-'));
        }
}

static void check_request(const RespRequest *req, const char *start, size_t len) {
        static ProtoRequest preq;
        RespCommand cmd;
        ProtoVerb verb;
        int r;

        fuzz_check(req->consumed <= len);
        for (size_t i = 0; i < req->argc; i++)
                fuzz_check(slice_inside(req->argv[i], start, req->consumed));
        if (req->argc == 0)
                return;
        cmd = resp_command_from_name(req->argv[0]);
        fuzz_check(cmd >= RESP_CMD_UNKNOWN && cmd < _RESP_CMD_MAX);
        verb = resp_command_verb(cmd);
        if (verb < 0) {
                check_replies(req, NULL);
                return;
        }
        r = resp_to_request(verb, req->argv, req->argc, &preq);
        if (r < 0) {
                fuzz_check(r == -EBADMSG && preq.error_reason && preq.n_pairs == 0);
                fuzz_check(proto_error_code_to_string(preq.error_code) != NULL);
        } else {
                fuzz_check(r == 0 && preq.verb == verb && preq.n_pairs <= PROTO_PAIRS_MAX);
                fuzz_check(preq.count <= PROTO_COUNT_MAX);
                for (size_t i = 0; i < preq.n_pairs; i++) {
                        fuzz_check(preq.pairs[i].key.len > 0);
                        fuzz_check(slice_inside(preq.pairs[i].key, start, req->consumed));
                        fuzz_check(slice_inside(preq.pairs[i].value, start, req->consumed));
                        fuzz_check(memchr(preq.pairs[i].key.ptr, '=', preq.pairs[i].key.len) == NULL);
                        for (size_t k = 0; k < i; k++)
                                fuzz_check(preq.pairs[k].key.len != preq.pairs[i].key.len ||
                                           memcmp(preq.pairs[k].key.ptr, preq.pairs[i].key.ptr,
                                                  preq.pairs[i].key.len) != 0);
                }
        }
        check_replies(req, &preq);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static RespRequest req;
        size_t max_args, max_bytes, pos = 0;
        const char *buf;

        if (size == 0)
                return 0;
        /* < 128: the daemon's limits; otherwise small ones, so that the limit paths are reached. */
        max_args = data[0] < 128 ? RESP_ARGS_MAX : data[0] % 8;
        max_bytes = data[0] < 128 ? RESP_REQUEST_MAX : 16u + (data[0] % 64u) * 4u;
        buf = (const char *) data + 1;
        size--;

        while (pos < size) {
                int r = resp_parse(buf + pos, size - pos, max_args, max_bytes, &req);

                if (r == 0) {
                        /* Buffered, waiting: never more than the limit allows. */
                        fuzz_check(size - pos <= max_bytes + RESP_HEADER_MAX);
                        fuzz_check(buf[pos] == '*');
                        break;
                }
                if (r < 0) {
                        fuzz_check(r == -EBADMSG || r == -E2BIG || r == -EMSGSIZE);
                        fuzz_check(req.error != NULL && req.argc == 0);
                        break;
                }
                fuzz_check(r == 1 && req.consumed > 0 && req.consumed <= max_bytes + RESP_HEADER_MAX);
                fuzz_check(req.argc <= max_args);
                check_request(&req, buf + pos, size - pos);
                if (req.argc > 0) { /* as a queued request at EXEC: the same arguments again */
                        static RespRequest again;

                        resp_parse_again(buf + pos, &again);
                        fuzz_check(again.argc == req.argc && again.consumed == req.consumed);
                        for (size_t i = 0; i < req.argc; i++)
                                fuzz_check(again.argv[i].ptr == req.argv[i].ptr &&
                                           again.argv[i].len == req.argv[i].len);
                }
                pos += req.consumed;
        }
        return 0;
}
