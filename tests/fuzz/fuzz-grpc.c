/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the gRPC front-end's pure parsing (grpc.c, rls.c). The input is a call's body as
 * it arrives on a stream: its first byte picks the arena's cap (so that small caps, which fail
 * decoding midway, are exercised too), the rest is the body. The body is parsed as one
 * length-prefixed message; the message is decoded as a RateLimitRequest into the arena and, if
 * it passes the request's checks, every descriptor is turned into the engine's request, and a
 * response is built from made-up decisions, packed and checked; the message is also read as a
 * HealthCheckRequest and its first bytes as a grpc-timeout. Checked: slices stay inside the
 * body, errors carry a sentence, pairs are distinct and bounded, counts within their range, the
 * response's size is what packing writes.
 */

#include <string.h>

#include "fuzz.h"
#include "core/grpc.h"
#include "core/rls.h"

static void check_descriptors(RlsArena *a, RlsRequest *r) {
        static RlsStatus st[RLS_DESCRIPTORS_MAX];
        static RlsHits all_hits[RLS_DESCRIPTORS_MAX];
        static uint8_t out[1 << 20], direct[1 << 20];
        size_t n = rls_request_descriptors(r), len;
        RlsHeader h[RLS_HEADERS_MAX];
        size_t nh;
        RlsResponse *resp;

        for (size_t i = 0; i < n; i++) {
                ProtoRequest req;
                RlsHits hits;
                const char *why = NULL;
                int ret = rls_descriptor_request(r, i, &req, &hits, &why);

                st[i] = (RlsStatus){ 0 };
                all_hits[i] = (RlsHits){ RLS_HIT_PEEK, 0 };
                if (ret < 0) {
                        fuzz_check(ret == -EINVAL && why && why[0]);
                        continue;
                }
                all_hits[i] = hits;
                fuzz_check(req.n_pairs >= 2 && req.n_pairs <= PROTO_PAIRS_MAX);
                fuzz_check(req.pairs[0].key.len == 6 && memcmp(req.pairs[0].key.ptr, "domain", 6) == 0);
                for (size_t p = 0; p < req.n_pairs; p++) {
                        fuzz_check(req.pairs[p].key.len > 0);
                        for (size_t q = 0; q < p; q++)
                                fuzz_check(req.pairs[p].key.len != req.pairs[q].key.len ||
                                           memcmp(req.pairs[p].key.ptr, req.pairs[q].key.ptr,
                                                  req.pairs[p].key.len));
                }
                fuzz_check(hits.kind == RLS_HIT_PEEK ? hits.count == 0
                                                     : hits.count >= 1 && hits.count <= PROTO_COUNT_MAX);
                fuzz_check(req.count == hits.count);
                st[i] = (RlsStatus){ .over_limit = i % 3 == 1,
                                     .has_limit = i % 2 == 0,
                                     .requests_per_unit = hits.count,
                                     .window_seconds = i * 60,
                                     .name = i % 4 ? "label" : NULL,
                                     .remaining = hits.count,
                                     .reset_seconds = i };
        }
        (void) rls_statuses_settle(st, all_hits, n, n % 2);
        for (size_t i = 0; i < n; i++)
                fuzz_check(!st[i].has_limit || st[i].over_limit ||
                           st[i].remaining <= st[i].requests_per_unit || all_hits[i].kind == RLS_HIT_PEEK);
        nh = rls_ratelimit_headers(a, st, n, h);
        fuzz_check(nh == 0 || nh == 2);
        resp = rls_response_build(a, st, n, h, nh);
        if (!resp)
                return; /* the arena's cap */
        len = rls_response_size(resp);
        fuzz_check(len <= sizeof out);
        fuzz_check(rls_response_pack(resp, out) == len);
        /* the direct encoder the daemon answers with writes the same bytes */
        fuzz_check(rls_response_encoded_size(st, n, h, nh) == len);
        fuzz_check(rls_response_encoded_max(st, n, h, nh) >= len);
        fuzz_check(len <= sizeof direct && rls_response_encode(st, n, h, nh, direct) == len);
        fuzz_check(memcmp(direct, out, len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static const size_t caps[] = { 64, 1024, RLS_ARENA_BLOCK, 4u << 20 };
        RlsArena a;
        GrpcMessage m;
        RlsRequest *r;
        const char *why = NULL;
        uint64_t usec;
        int ret;

        if (size < 1)
                return 0;
        rls_arena_init(&a, caps[data[0] % 4]);
        data++;
        size--;

        if (grpc_timeout_parse((const char *) data, size < 10 ? size : 10, &usec) == 0)
                fuzz_check(usec <= 99999999ULL * 3600ULL * 1000000ULL);

        ret = grpc_unary_parse(data, size, 1 << 20, &m);
        if (ret < 0) {
                fuzz_check(ret == -ENODATA || ret == -EBADMSG || ret == -EMSGSIZE);
                /* the bytes as a message all the same */
                m = (GrpcMessage){ .data = data, .len = size };
        } else
                fuzz_check(m.data == data + GRPC_PREFIX_SIZE && m.len == size - GRPC_PREFIX_SIZE);

        ret = rls_request_decode(&a, m.data, m.len, &r);
        fuzz_check(ret == 0 || ret == -EBADMSG || ret == -ENOMEM);
        if (ret == 0) {
                if (rls_request_check(r, &why) == 0)
                        check_descriptors(&a, r);
                else
                        fuzz_check(why && why[0]);
        }
        rls_arena_reset(&a);
        ret = rls_health_request(&a, m.data, m.len);
        fuzz_check(ret == 0 || ret == -ENOENT || ret == -EBADMSG || ret == -ENOMEM);
        rls_arena_done(&a);
        return 0;
}
