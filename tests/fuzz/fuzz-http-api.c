/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the HTTP API's JSON request parser and its replies (core/http-api.c). The first
 * byte picks the endpoint, the rest is the body. Every contract of http-api.h is checked: a
 * failure carries a sentence, a success's keys and values are slices of the body (decoded in
 * place), never empty keys, valid UTF-8 without control characters, no key twice; every request
 * turned into the engine's has distinct keys and a count in range; and the replies formatted
 * from the parsed text (a rule name, an EXPLAIN actor, an error reason) stay within their
 * bounds and are JSON strings that end where they should.
 */

#include <string.h>

#include "fuzz.h"
#include "core/http-api.h"
#include "shared/utf8.h"

static bool inside(ProtoSlice s, const char *start, size_t len) {
        return s.len <= len && (s.len == 0 || (s.ptr >= start && (size_t) (s.ptr - start) <= len - s.len));
}

static bool clean_text(ProtoSlice s) {
        const uint8_t *p = (const uint8_t *) s.ptr, *end = p + s.len;

        while (p < end) {
                if (*p < 0x20)
                        return false;
                if (*p >= 0x80) {
                        size_t n = utf8_sequence_len(p, end);
                        if (n == 0)
                                return false;
                        p += n;
                } else
                        p++;
        }
        return true;
}

static bool distinct(const ProtoPair *pairs, size_t n) {
        for (size_t i = 0; i < n; i++)
                for (size_t k = i + 1; k < n; k++)
                        if (pairs[i].key.len == pairs[k].key.len &&
                            memcmp(pairs[i].key.ptr, pairs[k].key.ptr, pairs[i].key.len) == 0)
                                return false;
        return true;
}

/* A JSON object's text: starts with '{', ends with '}', no raw control character inside. */
static bool json_object_text(const char *s, size_t n) {
        if (n < 2 || s[0] != '{' || s[n - 1] != '}' || s[n] != '\0')
                return false;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char) s[i] < 0x20)
                        return false;
        return true;
}

static void check_replies(const ProtoRequest *p) {
        static char buf[HTTP_API_EXPLAIN_MAX];
        char name[PROTO_LABEL_MAX + 1];
        AlgoResult res = { .allowed = true, .credit = p->count, .limit = UINT64_MAX, .reset = 1 };
        size_t n;

        for (size_t i = 0; i < p->n_pairs; i++) {
                /* a value as a rule name (cut to a label's length) and as an EXPLAIN actor */
                size_t len =
                        p->pairs[i].value.len > PROTO_LABEL_MAX ? PROTO_LABEL_MAX : p->pairs[i].value.len;
                ProtoExplain ex = { .rule = { .index = i },
                                    .policy = "stop",
                                    .actor = p->pairs[i].value,
                                    .algorithm = "fixed-window" };

                memcpy(name, p->pairs[i].value.ptr, len);
                name[len] = '\0';
                n = http_api_format_decision(buf, &res, name);
                fuzz_check(n < HTTP_API_REPLY_MAX && json_object_text(buf, n));
                RlsStatus st = { .has_limit = true,
                                 .requests_per_unit = p->count,
                                 .window_seconds = 60,
                                 .name = name,
                                 .remaining = res.credit,
                                 .reset_seconds = 1 };
                n = http_api_format_envoy_status(buf, &st);
                fuzz_check(n < HTTP_API_ENVOY_STATUS_MAX && json_object_text(buf, n));
                n = http_api_format_error(buf, "bad-request", name);
                fuzz_check(n < HTTP_API_REPLY_MAX && json_object_text(buf, n));
                n = http_api_format_explain(buf, &ex);
                fuzz_check(n < HTTP_API_EXPLAIN_MAX && json_object_text(buf, n));
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static HttpApiRequest req;
        static ProtoRequest p;
        static char body[HTTP_API_BODY_MAX];
        HttpApiEndpoint e;
        size_t len;

        if (size < 1)
                return 0;
        e = (HttpApiEndpoint) (data[0] % _HTTP_API_ENDPOINT_MAX);
        len = size - 1 > HTTP_API_BODY_MAX ? HTTP_API_BODY_MAX : size - 1;
        memcpy(body, data + 1, len);

        if (http_api_parse(e, body, len, &req) < 0) {
                fuzz_check(req.error && req.error[0]);
                return 0;
        }
        fuzz_check(req.endpoint == e);
        if (e == HTTP_API_ENVOY) {
                fuzz_check(req.n_descriptors >= 1 && req.n_descriptors <= HTTP_API_DESCRIPTORS_MAX);
                fuzz_check(inside(req.domain, body, len) && req.domain.len > 0 && clean_text(req.domain));
        } else {
                fuzz_check(req.n_pairs <= PROTO_PAIRS_MAX && distinct(req.pairs, req.n_pairs));
                fuzz_check(req.count <= PROTO_COUNT_MAX);
        }
        for (size_t i = 0; i < (e == HTTP_API_ENVOY ? req.n_descriptors : 1); i++) {
                if (http_api_request_to_proto(&req, i, &p) < 0) {
                        fuzz_check(p.error_reason && p.n_pairs == 0);
                        continue;
                }
                fuzz_check(p.n_pairs <= PROTO_PAIRS_MAX && distinct(p.pairs, p.n_pairs));
                fuzz_check(!p.has_count || p.count <= PROTO_COUNT_MAX);
                for (size_t k = 0; k < p.n_pairs; k++) {
                        bool domain = e == HTTP_API_ENVOY && k == 0;

                        fuzz_check(p.pairs[k].key.len > 0);
                        fuzz_check(domain || inside(p.pairs[k].key, body, len));
                        fuzz_check(inside(p.pairs[k].value, body, len));
                        fuzz_check(clean_text(p.pairs[k].key) && clean_text(p.pairs[k].value));
                }
                check_replies(&p);
        }
        return 0;
}
