/* SPDX-License-Identifier: MIT */
/* rls.c: RateLimitRequests encoded by protobuf-c's generated code, decoded into the arena and
 * turned into the engine's pairs and hits (every rule of hits_addend and is_negative_hits, every
 * refusal); the arena's blocks and cap; the RateLimitResponse built and read back field by field;
 * Envoy's units; the health check's messages. */

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <envoy/service/ratelimit/v3/rls.pb-c.h>
#include <grpc/health/v1/health.pb-c.h>

#include "core/config.h"
#include "core/diag.h"
#include "core/rls.h"
#include "check-run.h"

typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor Desc;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry Entry;

#define ENTRIES_MAX 70

/* One descriptor of a test request. */
typedef struct TDesc {
        const char *kv[ENTRIES_MAX * 2 + 1]; /* key, value, ..., NULL */
        bool has_addend;
        uint64_t addend;
        bool negative;
} TDesc;

/* Encodes a RateLimitRequest of domain, hits and descs into buf; returns its length. */
static size_t encode(const char *domain, uint32_t hits, const TDesc *descs, size_t n, uint8_t *buf,
                     size_t size) {
        Envoy__Service__Ratelimit__V3__RateLimitRequest r =
                ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
        static Desc d[RLS_DESCRIPTORS_MAX + 2];
        static Desc *dp[RLS_DESCRIPTORS_MAX + 2];
        static Entry e[RLS_DESCRIPTORS_MAX + 2][ENTRIES_MAX];
        static Entry *ep[RLS_DESCRIPTORS_MAX + 2][ENTRIES_MAX];
        static Google__Protobuf__UInt64Value addend[RLS_DESCRIPTORS_MAX + 2];

        r.domain = (char *) domain;
        r.hits_addend = hits;
        for (size_t i = 0; i < n; i++) {
                envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__init(&d[i]);
                size_t m = 0;
                for (; descs[i].kv[2 * m]; m++) {
                        envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__entry__init(
                                &e[i][m]);
                        e[i][m].key = (char *) descs[i].kv[2 * m];
                        e[i][m].value = (char *) descs[i].kv[2 * m + 1];
                        ep[i][m] = &e[i][m];
                }
                d[i].n_entries = m;
                d[i].entries = ep[i];
                if (descs[i].has_addend) {
                        google__protobuf__uint64_value__init(&addend[i]);
                        addend[i].value = descs[i].addend;
                        d[i].hits_addend = &addend[i];
                }
                d[i].is_negative_hits = descs[i].negative;
                dp[i] = &d[i];
        }
        r.n_descriptors = n;
        r.descriptors = dp;
        ck_assert_uint_le(envoy__service__ratelimit__v3__rate_limit_request__get_packed_size(&r), size);
        return envoy__service__ratelimit__v3__rate_limit_request__pack(&r, buf);
}

static const struct {
        const char *name;
        uint32_t request_hits;
        TDesc d;
        int r;
        const char *why;
        RlsHitKind kind;
        uint64_t count;
} desc_cases[] = {
        { "one entry", 0, { { "generic_key", "a", NULL } }, 0, NULL, RLS_HIT_TAKE, 1 },
        { "request hits", 5, { { "k", "v", NULL } }, 0, NULL, RLS_HIT_TAKE, 5 },
        { "own hits win", 5, { { "k", "v", NULL }, true, 7 }, 0, NULL, RLS_HIT_TAKE, 7 },
        { "own 0 peeks", 5, { { "k", "v", NULL }, true, 0 }, 0, NULL, RLS_HIT_PEEK, 0 },
        { "own 2^53-1",
          0,
          { { "k", "v", NULL }, true, 9007199254740991ULL },
          0,
          NULL,
          RLS_HIT_TAKE,
          9007199254740991ULL },
        { "own 2^53",
          0,
          { { "k", "v", NULL }, true, 9007199254740992ULL },
          -EINVAL,
          "hits_addend above 2^53-1" },
        { "refund", 0, { { "k", "v", NULL }, false, 0, true }, 0, NULL, RLS_HIT_REFUND, 1 },
        { "refund 3", 3, { { "k", "v", NULL }, false, 0, true }, 0, NULL, RLS_HIT_REFUND, 3 },
        { "refund 0 peeks", 3, { { "k", "v", NULL }, true, 0, true }, 0, NULL, RLS_HIT_PEEK, 0 },
        { "empty value", 0, { { "k", "", NULL } }, 0, NULL, RLS_HIT_TAKE, 1 },
        { "utf-8", 0, { { "k\xc3\xa9", "\xe2\x82\xac", NULL } }, 0, NULL, RLS_HIT_TAKE, 1 },
        { "empty key", 0, { { "", "v", NULL } }, -EINVAL, "descriptor entry with an empty key" },
        { "bad utf-8 value", 0, { { "k", "\xc3(", NULL } }, -EINVAL, "descriptor entry is not UTF-8" },
        { "bad utf-8 key", 0, { { "\xff", "v", NULL } }, -EINVAL, "descriptor entry is not UTF-8" },
        { "key twice",
          0,
          { { "a", "1", "b", "2", "a", "3", NULL } },
          -EINVAL,
          "descriptor key given twice" },
        { "domain key", 0, { { "domain", "x", NULL } }, -EINVAL, "descriptor key given twice" },
        { "no entries", 0, { { NULL } }, -EINVAL, "descriptor without entries" },
};

START_TEST (test_descriptor) {
        static uint8_t buf[4096];
        ProtoRequest req;
        RlsArena a;
        RlsRequest *r = NULL;
        RlsHits hits = { .count = 999 };
        const char *why = NULL;
        size_t len = encode("envoy", desc_cases[_i].request_hits, &desc_cases[_i].d, 1, buf, sizeof buf);
        int ret;

        rls_arena_init(&a, 1 << 20);
        ck_assert_int_eq(rls_request_decode(&a, buf, len, &r), 0);
        ck_assert_int_eq(rls_request_check(r, &why), 0);
        ck_assert_str_eq(rls_request_domain(r), "envoy");
        ck_assert_uint_eq(rls_request_descriptors(r), 1);
        ret = rls_descriptor_request(r, 0, &req, &hits, &why);
        ck_assert_msg(ret == desc_cases[_i].r, "%s: %d", desc_cases[_i].name, ret);
        if (ret < 0) {
                ck_assert_str_eq(why, desc_cases[_i].why);
                rls_arena_done(&a);
                return;
        }
        ck_assert_int_eq(hits.kind, desc_cases[_i].kind);
        ck_assert_uint_eq(hits.count, desc_cases[_i].count);
        ck_assert_uint_eq(req.count, desc_cases[_i].count);
        /* domain=<domain>, then the entries in order */
        ck_assert_uint_ge(req.n_pairs, 1);
        ck_assert_uint_eq(req.pairs[0].key.len, 6);
        ck_assert_mem_eq(req.pairs[0].key.ptr, "domain", 6);
        ck_assert_uint_eq(req.pairs[0].value.len, 5);
        ck_assert_mem_eq(req.pairs[0].value.ptr, "envoy", 5);
        for (size_t i = 0; desc_cases[_i].d.kv[2 * i]; i++) {
                const char *k = desc_cases[_i].d.kv[2 * i], *v = desc_cases[_i].d.kv[2 * i + 1];
                ck_assert_uint_gt(req.n_pairs, i + 1);
                ck_assert_uint_eq(req.pairs[i + 1].key.len, strlen(k));
                ck_assert_mem_eq(req.pairs[i + 1].key.ptr, k, strlen(k));
                ck_assert_uint_eq(req.pairs[i + 1].value.len, strlen(v));
                ck_assert_mem_eq(req.pairs[i + 1].value.ptr, v, strlen(v));
                ck_assert_uint_eq(req.n_pairs, i + 2);
        }
        /* the matching's lookup finds them */
        ck_assert_ptr_nonnull(proto_request_get(&req, "domain", 6));
        rls_arena_done(&a);
}
END_TEST

START_TEST (test_entries_bound) {
        static uint8_t buf[16384];
        static TDesc d;
        static char keys[ENTRIES_MAX][24];
        ProtoRequest req;
        RlsArena a;
        RlsRequest *r;
        RlsHits hits;
        const char *why = NULL;
        size_t n = PROTO_PAIRS_MAX - 1 + (size_t) _i; /* 63 fit beside domain=, 64 do not */

        memset(&d, 0, sizeof d);
        for (size_t i = 0; i < n; i++) {
                snprintf(keys[i], sizeof keys[i], "k%zu", i);
                d.kv[2 * i] = keys[i];
                d.kv[2 * i + 1] = "v";
        }
        rls_arena_init(&a, 1 << 20);
        ck_assert_int_eq(rls_request_decode(&a, buf, encode("d", 0, &d, 1, buf, sizeof buf), &r), 0);
        if (_i == 0) {
                ck_assert_int_eq(rls_descriptor_request(r, 0, &req, &hits, &why), 0);
                ck_assert_uint_eq(req.n_pairs, PROTO_PAIRS_MAX);
        } else {
                ck_assert_int_eq(rls_descriptor_request(r, 0, &req, &hits, &why), -EINVAL);
                ck_assert_str_eq(why, "too many entries in a descriptor");
        }
        rls_arena_done(&a);
}
END_TEST

START_TEST (test_request_check) {
        static uint8_t buf[16384];
        static TDesc d[RLS_DESCRIPTORS_MAX + 1];
        RlsArena a;
        RlsRequest *r;
        const char *why = NULL;

        for (size_t i = 0; i <= RLS_DESCRIPTORS_MAX; i++)
                d[i] = (TDesc){ { "k", "v", NULL } };
        rls_arena_init(&a, 1 << 20);
        ck_assert_int_eq(rls_request_decode(&a, buf, encode("", 0, d, 1, buf, sizeof buf), &r), 0);
        ck_assert_int_eq(rls_request_check(r, &why), -EINVAL);
        ck_assert_str_eq(why, "rate limit domain must not be empty");
        ck_assert_int_eq(rls_request_decode(&a, buf, encode("d", 0, d, 0, buf, sizeof buf), &r), 0);
        ck_assert_int_eq(rls_request_check(r, &why), -EINVAL);
        ck_assert_str_eq(why, "rate limit descriptor list must not be empty");
        ck_assert_int_eq(
                rls_request_decode(&a, buf, encode("d", 0, d, RLS_DESCRIPTORS_MAX, buf, sizeof buf), &r), 0);
        ck_assert_int_eq(rls_request_check(r, &why), 0);
        ck_assert_uint_eq(rls_request_descriptors(r), RLS_DESCRIPTORS_MAX);
        ck_assert_int_eq(
                rls_request_decode(&a, buf, encode("d", 0, d, RLS_DESCRIPTORS_MAX + 1, buf, sizeof buf), &r),
                0);
        ck_assert_int_eq(rls_request_check(r, &why), -EINVAL);
        ck_assert_str_eq(why, "more than 64 descriptors");
        rls_arena_done(&a);
}
END_TEST

START_TEST (test_decode_errors) {
        static uint8_t buf[4096];
        TDesc d = { { "k", "v", NULL } };
        RlsArena a;
        RlsRequest *r = NULL;
        size_t len;

        rls_arena_init(&a, 1 << 20);
        /* field 1 (domain) says 10 bytes, 2 follow */
        ck_assert_int_eq(rls_request_decode(&a,
                                            (const uint8_t *) "\x0a\x0a"
                                                              "ab",
                                            4, &r),
                         -EBADMSG);
        /* a wire type 7 does not exist */
        ck_assert_int_eq(rls_request_decode(&a, (const uint8_t *) "\x0f", 1, &r), -EBADMSG);
        /* unknown fields (field 9 varint) are skipped: a newer Envoy's */
        len = encode("d", 0, &d, 1, buf, sizeof buf);
        buf[len++] = 0x48;
        buf[len++] = 0x01;
        ck_assert_int_eq(rls_request_decode(&a, buf, len, &r), 0);
        ck_assert_uint_eq(rls_request_descriptors(r), 1);
        /* an empty message is a request without domain or descriptors */
        ck_assert_int_eq(rls_request_decode(&a, buf, 0, &r), 0);
        ck_assert_uint_eq(rls_request_descriptors(r), 0);
        rls_arena_done(&a);

        /* over the arena's cap */
        rls_arena_init(&a, 64);
        len = encode("d", 0, &d, 1, buf, sizeof buf);
        ck_assert_int_eq(rls_request_decode(&a, buf, len, &r), -ENOMEM);
        rls_arena_done(&a);
}
END_TEST

START_TEST (test_arena) {
        RlsArena a;
        void *p, *q, *first;

        rls_arena_init(&a, 3 * RLS_ARENA_BLOCK);
        p = rls_arena_alloc(&a, 1);
        q = rls_arena_alloc(&a, 1);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq((uintptr_t) p % alignof(max_align_t), 0);
        ck_assert_uint_eq((uintptr_t) q % alignof(max_align_t), 0);
        ck_assert_ptr_ne(p, q);
        ck_assert_uint_eq(a.total, RLS_ARENA_BLOCK);
        /* beyond the first block: one more */
        ck_assert_ptr_nonnull(rls_arena_alloc(&a, RLS_ARENA_BLOCK));
        ck_assert_uint_eq(a.total, 2 * RLS_ARENA_BLOCK);
        /* beyond the cap: refused, marked */
        ck_assert_ptr_null(rls_arena_alloc(&a, 2 * RLS_ARENA_BLOCK));
        ck_assert(a.failed);
        /* reset: the first block again, the others given back */
        first = p;
        rls_arena_reset(&a);
        ck_assert(!a.failed);
        ck_assert_uint_eq(a.total, RLS_ARENA_BLOCK);
        ck_assert_ptr_eq(rls_arena_alloc(&a, 8), first);
        ck_assert_ptr_null(rls_arena_alloc(&a, SIZE_MAX));
        rls_arena_done(&a);
        ck_assert_uint_eq(a.total, 0);
        rls_arena_done(&a); /* twice: nothing left */
}
END_TEST

static const struct {
        uint64_t seconds;
        RlsUnit unit;
} unit_cases[] = {
        { 1, RLS_UNIT_SECOND },         { 60, RLS_UNIT_MINUTE },       { 3600, RLS_UNIT_HOUR },
        { 86400, RLS_UNIT_DAY },        { 604800, RLS_UNIT_WEEK },     { 2592000, RLS_UNIT_MONTH },
        { 31536000, RLS_UNIT_YEAR },    { 0, RLS_UNIT_UNKNOWN },       { 2, RLS_UNIT_UNKNOWN },
        { 90, RLS_UNIT_UNKNOWN },       { 2678400, RLS_UNIT_UNKNOWN }, /* 31 days */
        { 31622400, RLS_UNIT_UNKNOWN },                                /* 366 days */
};

START_TEST (test_unit) {
        ck_assert_int_eq(rls_unit(unit_cases[_i].seconds), unit_cases[_i].unit);
}
END_TEST

START_TEST (test_response) {
        const RlsStatus st[] = {
                { .has_limit = true,
                  .requests_per_unit = 10,
                  .window_seconds = 60,
                  .name = "per-key",
                  .remaining = 7,
                  .reset_seconds = 42 },
                { .over_limit = true,
                  .has_limit = true,
                  .requests_per_unit = 5000000000ULL,
                  .window_seconds = 90,
                  .name = NULL,
                  .remaining = 0,
                  .reset_seconds = 3 },
                { 0 }, /* not evaluated: OK, nothing else */
                { .has_limit = true,
                  .requests_per_unit = 1,
                  .window_seconds = 604800,
                  .name = "w",
                  .remaining = 1ULL << 40,
                  .reset_seconds = 0 },
        };
        const RlsHeader h[] = { { "RateLimit", "\"w\";r=1;t=1" } };
        uint8_t buf[1024];
        RlsArena a;
        RlsResponse *resp;
        Envoy__Service__Ratelimit__V3__RateLimitResponse *m;
        size_t len;

        rls_arena_init(&a, 1 << 20);
        resp = rls_response_build(&a, st, 4, h, 1);
        ck_assert_ptr_nonnull(resp);
        len = rls_response_size(resp);
        ck_assert_uint_le(len, sizeof buf);
        ck_assert_uint_eq(rls_response_pack(resp, buf), len);
        m = envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, len, buf);
        ck_assert_ptr_nonnull(m);
        ck_assert_int_eq(m->overall_code,
                         ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT);
        ck_assert_uint_eq(m->n_statuses, 4);
        /* 0: OK, its limit, a minute, its label, what is left, the reset */
        ck_assert_int_eq(m->statuses[0]->code, ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK);
        ck_assert_uint_eq(m->statuses[0]->current_limit->requests_per_unit, 10);
        ck_assert_int_eq(m->statuses[0]->current_limit->unit,
                         ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__UNIT__MINUTE);
        ck_assert_str_eq(m->statuses[0]->current_limit->name, "per-key");
        ck_assert_uint_eq(m->statuses[0]->limit_remaining, 7);
        ck_assert_int_eq(m->statuses[0]->duration_until_reset->seconds, 42);
        ck_assert_int_eq(m->statuses[0]->duration_until_reset->nanos, 0);
        /* 1: over; a limit cut to 2^32-1; 90 s is no unit; no label */
        ck_assert_int_eq(m->statuses[1]->code,
                         ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT);
        ck_assert_uint_eq(m->statuses[1]->current_limit->requests_per_unit, UINT32_MAX);
        ck_assert_int_eq(m->statuses[1]->current_limit->unit,
                         ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__UNIT__UNKNOWN);
        ck_assert_str_eq(m->statuses[1]->current_limit->name, "");
        ck_assert_int_eq(m->statuses[1]->duration_until_reset->seconds, 3);
        /* 2: OK and nothing more */
        ck_assert_int_eq(m->statuses[2]->code, ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK);
        ck_assert_ptr_null(m->statuses[2]->current_limit);
        ck_assert_ptr_null(m->statuses[2]->duration_until_reset);
        ck_assert_uint_eq(m->statuses[2]->limit_remaining, 0);
        /* 3: a week; remaining cut; no reset sent */
        ck_assert_int_eq(m->statuses[3]->current_limit->unit,
                         ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__UNIT__WEEK);
        ck_assert_uint_eq(m->statuses[3]->limit_remaining, UINT32_MAX);
        ck_assert_ptr_null(m->statuses[3]->duration_until_reset);
        ck_assert_uint_eq(m->n_response_headers_to_add, 1);
        ck_assert_str_eq(m->response_headers_to_add[0]->key, "RateLimit");
        ck_assert_str_eq(m->response_headers_to_add[0]->value, "\"w\";r=1;t=1");
        ck_assert_uint_eq(m->n_request_headers_to_add, 0);
        envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(m, NULL);

        /* all OK: OK overall */
        resp = rls_response_build(&a, st, 1, NULL, 0);
        len = rls_response_pack(resp, buf);
        m = envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, len, buf);
        ck_assert_int_eq(m->overall_code, ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK);
        ck_assert_uint_eq(m->n_response_headers_to_add, 0);
        envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(m, NULL);
        rls_arena_done(&a);

        /* a full arena: NULL */
        rls_arena_init(&a, 16);
        ck_assert_ptr_null(rls_response_build(&a, st, 4, h, 1));
        rls_arena_done(&a);
}
END_TEST

/* rls_response_encode() writes what protobuf-c's pack of rls_response_build()'s message writes,
 * byte for byte: every combination of a status's fields (zeros left out, values cut, varints of
 * 1 to 10 bytes), 0 to 3 statuses, with and without headers. */
START_TEST (test_response_encode) {
        static const uint64_t limits[] = { 0, 1, 127, 128, 16384, UINT32_MAX, 1ULL << 40 };
        static const uint64_t windows[] = { 1, 60, 90, 86400, 365 * 86400 };
        static const char *const names[] = { NULL, "", "k",
                                             "a label of more than 127 bytes, for a length "
                                             "of two bytes: .................................."
                                             "................................................" };
        static const uint64_t remainings[] = { 0, 1, 300, UINT32_MAX, 1ULL << 40 };
        static const uint64_t resets[] = { 0, 1, 200, 1ULL << 40, UINT64_MAX };
        const RlsHeader h[] = { { "RateLimit-Policy", "\"k\";q=10;w=60" }, { "RateLimit", "" } };
        RlsStatus st[3];
        size_t cases = 0;
        uint8_t want[2048], got[2048];
        RlsArena a;

        rls_arena_init(&a, 1 << 20);
        for (unsigned over = 0; over < 2; over++)
                for (unsigned has = 0; has < 2; has++)
                        for (size_t l = 0; l < sizeof limits / sizeof limits[0]; l++)
                                for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++)
                                        for (size_t nm = 0; nm < sizeof names / sizeof names[0]; nm++)
                                                for (size_t r = 0;
                                                     r < sizeof remainings / sizeof remainings[0]; r++)
                                                        for (size_t z = 0;
                                                             z < sizeof resets / sizeof resets[0]; z++) {
                                                                RlsStatus s = { .over_limit = over,
                                                                                .has_limit = has,
                                                                                .requests_per_unit =
                                                                                        limits[l],
                                                                                .window_seconds = windows[w],
                                                                                .name = names[nm],
                                                                                .remaining = remainings[r],
                                                                                .reset_seconds = resets[z] };
                                                                size_t n = cases % 4, nh = (cases / 4) % 3;
                                                                RlsResponse *resp;
                                                                size_t len;

                                                                for (size_t i = 0; i < 3; i++) {
                                                                        st[i] = s;
                                                                        st[i].over_limit =
                                                                                i == 1 ? !over : over;
                                                                }
                                                                rls_arena_reset(&a);
                                                                resp = rls_response_build(&a, st, n, h, nh);
                                                                ck_assert_ptr_nonnull(resp);
                                                                len = rls_response_size(resp);
                                                                ck_assert_uint_le(len, sizeof want);
                                                                ck_assert_uint_eq(
                                                                        rls_response_pack(resp, want), len);
                                                                ck_assert_uint_eq(rls_response_encoded_size(
                                                                                          st, n, h, nh),
                                                                                  len);
                                                                memset(got, 0xa5, sizeof got);
                                                                ck_assert_uint_eq(rls_response_encode(
                                                                                          st, n, h, nh, got),
                                                                                  len);
                                                                ck_assert_mem_eq(got, want, len);
                                                                ck_assert_uint_eq(got[len], 0xa5);
                                                                cases++;
                                                        }
        ck_assert_uint_eq(cases, 2 * 2 * 7 * 5 * 4 * 5 * 5);
        rls_arena_done(&a);
}
END_TEST

static const struct {
        const char *name;
        bool peeked;
        RlsStatus st[3];
        RlsHits hits[3];
        bool over;
        uint64_t remaining[3];
} settle_cases[] = {
        { "all OK: as reported",
          false,
          { { .has_limit = true, .requests_per_unit = 10, .capacity = 10, .remaining = 4 },
            { .has_limit = true, .requests_per_unit = 10, .capacity = 10, .remaining = 0 } },
          { { RLS_HIT_TAKE, 2 }, { RLS_HIT_TAKE, 1 } },
          false,
          { 4, 0 } },
        { "one over: the TAKE gets its count back",
          false,
          { { .has_limit = true, .requests_per_unit = 10, .capacity = 10, .remaining = 4 },
            { .over_limit = true,
              .has_limit = true,
              .requests_per_unit = 3,
              .capacity = 3,
              .remaining = 0 } },
          { { RLS_HIT_TAKE, 2 }, { RLS_HIT_TAKE, 1 } },
          true,
          { 6, 0 } },
        { "a token bucket's burst above its creditLimit: what it has, up to the burst",
          false,
          { { .has_limit = true, .requests_per_unit = 5, .capacity = 10, .remaining = 5 },
            { .over_limit = true, .has_limit = true, .requests_per_unit = 3, .capacity = 3 } },
          { { RLS_HIT_TAKE, 3 }, { RLS_HIT_TAKE, 1 } },
          true,
          { 8, 0 } },
        { "never above the limit",
          false,
          { { .has_limit = true, .requests_per_unit = 5, .capacity = 5, .remaining = 4 },
            { .over_limit = true, .has_limit = true, .requests_per_unit = 3, .capacity = 3 } },
          { { RLS_HIT_TAKE, 3 }, { RLS_HIT_TAKE, 1 } },
          true,
          { 5, 0 } },
        { "an undone REFUND gives back what it gave",
          false,
          { { .has_limit = true, .requests_per_unit = 10, .capacity = 10, .remaining = 7 },
            { .over_limit = true, .has_limit = true, .requests_per_unit = 3, .capacity = 3 },
            { .has_limit = true, .requests_per_unit = 10, .capacity = 10, .remaining = 1 } },
          { { RLS_HIT_REFUND, 2 }, { RLS_HIT_TAKE, 1 }, { RLS_HIT_REFUND, 5 } },
          true,
          { 5, 0, 0 } },
        { "peeked: a REFUND was a PEEK of its count",
          true,
          { { .has_limit = true, .requests_per_unit = 10, .capacity = 10, .remaining = 7 },
            { .over_limit = true, .has_limit = true } },
          { { RLS_HIT_REFUND, 2 }, { RLS_HIT_TAKE, 1 } },
          true,
          { 9, 0 } },
        { "a PEEK (hits_addend 0) and no limit stay",
          false,
          { { .has_limit = true, .requests_per_unit = 10, .capacity = 10, .remaining = 7 },
            { .over_limit = true, .has_limit = true },
            { .remaining = 0 } },
          { { RLS_HIT_PEEK, 0 }, { RLS_HIT_TAKE, 1 }, { RLS_HIT_TAKE, 1 } },
          true,
          { 7, 0, 0 } },
};

START_TEST (test_settle) {
        RlsStatus st[3];

        memcpy(st, settle_cases[_i].st, sizeof st);
        ck_assert_msg(rls_statuses_settle(st, settle_cases[_i].hits, 3, settle_cases[_i].peeked) ==
                              settle_cases[_i].over,
                      "%s", settle_cases[_i].name);
        for (size_t i = 0; i < 3; i++)
                ck_assert_msg(st[i].remaining == settle_cases[_i].remaining[i], "%s: %zu: %" PRIu64,
                              settle_cases[_i].name, i, st[i].remaining);
}
END_TEST

/* A descriptor's status carries what its rule can hold: a token bucket's burst, else creditLimit. */
START_TEST (test_status_capacity) {
        static const char ini[] = "[domain=d k=tb]\ncreditLimit = 5\nresetSeconds = 60\n"
                                  "algorithm = token-bucket\nburst = 10\n\n"
                                  "[domain=d k=fw]\ncreditLimit = 7\nresetSeconds = 60\n\n"
                                  "[default]\ncreditLimit = 1\nresetSeconds = 1\n";
        RuleSet *rs = NULL;
        Diag diag;
        AlgoResult res = { .allowed = true, .credit = 4, .reset = 3 };
        RlsStatus s;

        diag_init(&diag, "t.ini");
        ck_assert_int_eq(ruleset_new("t.ini", &rs), 0);
        ck_assert_int_eq(config_ini_parse(ini, sizeof ini - 1, rs, &diag), 0);
        ck_assert_int_eq(ruleset_finalize(rs, &diag), 0);
        rls_status_of(&rs->rules[0], &res, &s);
        ck_assert(s.has_limit);
        ck_assert_uint_eq(s.requests_per_unit, 5);
        ck_assert_uint_eq(s.capacity, 10);
        rls_status_of(&rs->rules[1], &res, &s);
        ck_assert_uint_eq(s.capacity, 7);
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

START_TEST (test_binding_and_headers) {
        RlsStatus st[] = {
                { .has_limit = true,
                  .requests_per_unit = 10,
                  .window_seconds = 60,
                  .name = "a",
                  .remaining = 4 },
                { .remaining = 0 }, /* no limit: never binding */
                { .has_limit = true,
                  .requests_per_unit = 5,
                  .window_seconds = 1,
                  .name = "b",
                  .remaining = 2,
                  .reset_seconds = 1 },
                { .has_limit = true,
                  .requests_per_unit = 5,
                  .window_seconds = 1,
                  .name = "c",
                  .remaining = 2 },
        };
        RlsHeader h[RLS_HEADERS_MAX];
        RlsArena a;

        ck_assert_ptr_eq(rls_binding_status(st, 4), &st[2]); /* the least left, the first of equals */
        ck_assert_ptr_null(rls_binding_status(st + 1, 1));
        st[3].over_limit = true;
        st[0].over_limit = true;
        ck_assert_ptr_eq(rls_binding_status(st, 4), &st[0]); /* the first over */
        rls_arena_init(&a, 1 << 20);
        ck_assert_uint_eq(rls_ratelimit_headers(&a, st, 4, h), 2);
        ck_assert_str_eq(h[0].key, "RateLimit-Policy");
        ck_assert_str_eq(h[0].value, "\"a\";q=10;w=60");
        ck_assert_str_eq(h[1].key, "RateLimit");
        ck_assert_str_eq(h[1].value, "\"a\";r=4;t=0");
        ck_assert_uint_eq(rls_ratelimit_headers(&a, st + 1, 1, h), 0);
        rls_arena_done(&a);
        rls_arena_init(&a, 64); /* full */
        ck_assert_uint_eq(rls_ratelimit_headers(&a, st, 4, h), 0);
        rls_arena_done(&a);
}
END_TEST

START_TEST (test_health) {
        uint8_t buf[128];
        Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
        Grpc__Health__V1__HealthCheckResponse *m;
        RlsArena a;
        size_t len;

        for (int serving = 0; serving <= 1; serving++) {
                len = rls_health_response(serving, buf);
                ck_assert_uint_le(len, RLS_HEALTH_RESPONSE_MAX);
                m = grpc__health__v1__health_check_response__unpack(NULL, len, buf);
                ck_assert_ptr_nonnull(m);
                ck_assert_int_eq(
                        m->status,
                        serving ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                                : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING);
                grpc__health__v1__health_check_response__free_unpacked(m, NULL);
        }
        rls_arena_init(&a, 1 << 20);
        ck_assert_int_eq(rls_health_request(&a, buf, 0), 0); /* the server as a whole */
        req.service = (char *) "envoy.service.ratelimit.v3.RateLimitService";
        len = grpc__health__v1__health_check_request__pack(&req, buf);
        ck_assert_int_eq(rls_health_request(&a, buf, len), 0);
        req.service = (char *) "grpc.health.v1.Health";
        len = grpc__health__v1__health_check_request__pack(&req, buf);
        ck_assert_int_eq(rls_health_request(&a, buf, len), -ENOENT);
        ck_assert_int_eq(rls_health_request(&a, (const uint8_t *) "\x0a\x05x", 3), -EBADMSG);
        rls_arena_done(&a);
}
END_TEST

int main(void) {
        Suite *s = suite_create("rls");
        TCase *tc = tcase_create("rls");

        tcase_add_loop_test(tc, test_descriptor, 0, sizeof desc_cases / sizeof desc_cases[0]);
        tcase_add_loop_test(tc, test_entries_bound, 0, 2);
        tcase_add_test(tc, test_request_check);
        tcase_add_test(tc, test_decode_errors);
        tcase_add_test(tc, test_arena);
        tcase_add_loop_test(tc, test_unit, 0, sizeof unit_cases / sizeof unit_cases[0]);
        tcase_add_test(tc, test_response);
        tcase_add_test(tc, test_response_encode);
        tcase_add_test(tc, test_health);
        tcase_add_loop_test(tc, test_settle, 0, sizeof settle_cases / sizeof settle_cases[0]);
        tcase_add_test(tc, test_status_capacity);
        tcase_add_test(tc, test_binding_and_headers);
        suite_add_tcase(s, tc);
        return check_run_suite(s);
}
