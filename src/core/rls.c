/* SPDX-License-Identifier: MIT */
/* rls.c: Envoy's rate limit service messages and the health check's; see rls.h. */

#include <errno.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <envoy/service/ratelimit/v3/rls.pb-c.h> /* generated (src/core/Makefile-core.am) */
#include <grpc/health/v1/health.pb-c.h>

#include "core/ratelimit-headers.h"
#include "core/rls.h"
#include "shared/utf8.h"

#define RLS_SERVICE_NAME "envoy.service.ratelimit.v3.RateLimitService"

struct RlsArenaBlock {
        RlsArenaBlock *next;
        size_t size, used;
        alignas(max_align_t) unsigned char data[];
};

static void *arena_pb_alloc(void *data, size_t n) {
        return rls_arena_alloc(data, n);
}

static void arena_pb_free(void *data, void *p) {
        /* freed with the arena */
}

void rls_arena_init(RlsArena *a, size_t max) {
        *a = (RlsArena){
                .allocator = { .alloc = arena_pb_alloc, .free = arena_pb_free, .allocator_data = a },
                .max = max,
        };
}

static RlsArenaBlock *arena_block_new(RlsArena *a, size_t size) {
        RlsArenaBlock *b;

        if (size > a->max || a->total > a->max - size)
                return NULL;
        b = malloc(sizeof *b + size);
        if (!b)
                return NULL;
        *b = (RlsArenaBlock){ .size = size };
        a->total += size;
        return b;
}

static void *arena_block_take(RlsArenaBlock *b, size_t n) {
        void *p;

        if (b->size - b->used < n)
                return NULL;
        p = b->data + b->used;
        b->used += n;
        return p;
}

void *rls_arena_alloc(RlsArena *a, size_t n) {
        const size_t align = alignof(max_align_t);
        RlsArenaBlock *b;
        void *p;

        if (n == 0)
                n = 1;
        if (n > SIZE_MAX - align)
                goto fail;
        n = (n + align - 1) / align * align;
        if (!a->first) {
                a->first = arena_block_new(a, RLS_ARENA_BLOCK);
                if (!a->first)
                        goto fail;
        }
        p = arena_block_take(a->extra ? a->extra : a->first, n);
        if (p)
                return p;
        b = arena_block_new(a, n > RLS_ARENA_BLOCK ? n : RLS_ARENA_BLOCK);
        if (!b)
                goto fail;
        b->next = a->extra;
        a->extra = b;
        return arena_block_take(b, n);
fail:
        a->failed = true;
        return NULL;
}

void rls_arena_reset(RlsArena *a) {
        while (a->extra) {
                RlsArenaBlock *next = a->extra->next;

                a->total -= a->extra->size;
                free(a->extra);
                a->extra = next;
        }
        if (a->first)
                a->first->used = 0;
        a->failed = false;
}

void rls_arena_done(RlsArena *a) {
        rls_arena_reset(a);
        free(a->first);
        a->first = NULL;
        a->total = 0;
}

int rls_request_decode(RlsArena *a, const uint8_t *data, size_t len, RlsRequest **ret) {
        RlsRequest *r;

        a->failed = false;
        r = envoy__service__ratelimit__v3__rate_limit_request__unpack(&a->allocator, len, data);
        if (!r)
                return a->failed ? -ENOMEM : -EBADMSG;
        *ret = r;
        return 0;
}

size_t rls_request_descriptors(const RlsRequest *r) {
        return r->n_descriptors;
}

const char *rls_request_domain(const RlsRequest *r) {
        return r->domain ? r->domain : "";
}

int rls_request_check(const RlsRequest *r, const char **ret_why) {
        if (!r->domain || !r->domain[0]) {
                *ret_why = "rate limit domain must not be empty";
                return -EINVAL;
        }
        if (r->n_descriptors == 0) {
                *ret_why = "rate limit descriptor list must not be empty";
                return -EINVAL;
        }
        if (r->n_descriptors > RLS_DESCRIPTORS_MAX) {
                *ret_why = "more than 64 descriptors";
                return -EINVAL;
        }
        return 0;
}

static bool text_ok(const char *s, size_t len) {
        const uint8_t *p = (const uint8_t *) s, *end = p + len;

        while (p < end) {
                size_t n = *p < 0x80 ? 1 : utf8_sequence_len(p, end);
                if (n == 0)
                        return false;
                p += n;
        }
        return true;
}

static ProtoSlice slice_of(const char *s) {
        return (ProtoSlice){ .ptr = s ? s : "", .len = s ? strlen(s) : 0 };
}

static int descriptor_hits(const RlsRequest *r,
                           const Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor *d,
                           RlsHits *ret, const char **ret_why) {
        uint64_t count = r->hits_addend == 0 ? 1 : r->hits_addend;

        if (d->hits_addend) {
                count = d->hits_addend->value;
                if (count > PROTO_COUNT_MAX) {
                        *ret_why = "hits_addend above 2^53-1";
                        return -EINVAL;
                }
        }
        if (count == 0)
                *ret = (RlsHits){ .kind = RLS_HIT_PEEK };
        else
                *ret = (RlsHits){ .kind = d->is_negative_hits ? RLS_HIT_REFUND : RLS_HIT_TAKE,
                                  .count = count };
        return 0;
}

int rls_descriptor_request(const RlsRequest *r, size_t i, ProtoRequest *ret, RlsHits *ret_hits,
                           const char **ret_why) {
        const Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor *d = r->descriptors[i];
        size_t n = 0;

        ret->n_pairs = 0;
        ret->has_count = ret->has_at = false;
        ret->error_reason = NULL;
        if (d->n_entries == 0) {
                *ret_why = "descriptor without entries";
                return -EINVAL;
        }
        if (d->n_entries + 1 > PROTO_PAIRS_MAX) {
                *ret_why = "too many entries in a descriptor";
                return -EINVAL;
        }
        ret->pairs[n++] = (ProtoPair){ .key = { "domain", 6 }, .value = slice_of(r->domain) };
        for (size_t e = 0; e < d->n_entries; e++) {
                ProtoPair p = { .key = slice_of(d->entries[e]->key),
                                .value = slice_of(d->entries[e]->value) };

                if (p.key.len == 0) {
                        *ret_why = "descriptor entry with an empty key";
                        return -EINVAL;
                }
                if (!text_ok(p.key.ptr, p.key.len) || !text_ok(p.value.ptr, p.value.len)) {
                        *ret_why = "descriptor entry is not UTF-8";
                        return -EINVAL;
                }
                for (size_t k = 0; k < n; k++)
                        if (ret->pairs[k].key.len == p.key.len &&
                            memcmp(ret->pairs[k].key.ptr, p.key.ptr, p.key.len) == 0) {
                                *ret_why = "descriptor key given twice";
                                return -EINVAL;
                        }
                ret->pairs[n++] = p;
        }
        if (descriptor_hits(r, d, ret_hits, ret_why) < 0)
                return -EINVAL;
        ret->n_pairs = n;
        ret->count = ret_hits->count;
        return 0;
}

void rls_status_of(const Rule *rule, const AlgoResult *res, RlsStatus *s) {
        *s = (RlsStatus){ 0 };
        if (!rule)
                return;
        s->over_limit = !res->allowed;
        if (rule_trivial_decision(rule) == RULE_TRIVIAL_ALLOW)
                return; /* unlimited */
        s->has_limit = true;
        s->requests_per_unit = rule->credit_limit;
        s->window_seconds = rule->reset_seconds;
        s->name = rule->label;
        s->remaining = res->credit;
        s->capacity = rule->algo.burst > 0 ? rule->algo.burst : rule->credit_limit;
        s->reset_seconds = res->reset > 0 ? (uint64_t) res->reset : 0;
}

bool rls_statuses_settle(RlsStatus *st, const RlsHits *hits, size_t n, bool peeked) {
        bool over = false;

        for (size_t i = 0; i < n; i++)
                over = over || st[i].over_limit;
        if (!over)
                return false;
        for (size_t i = 0; i < n; i++) {
                RlsStatus *s = &st[i];
                const RlsHits *h = &hits[i];

                if (!s->has_limit || s->over_limit)
                        continue;
                if (h->kind == RLS_HIT_TAKE || (h->kind == RLS_HIT_REFUND && peeked))
                        s->remaining = s->remaining + h->count > s->capacity ? s->capacity
                                                                             : s->remaining + h->count;
                else if (h->kind == RLS_HIT_REFUND)
                        s->remaining = s->remaining > h->count ? s->remaining - h->count : 0;
        }
        return true;
}

const RlsStatus *rls_binding_status(const RlsStatus *st, size_t n) {
        const RlsStatus *best = NULL;

        for (size_t i = 0; i < n; i++) {
                if (!st[i].has_limit)
                        continue;
                if (st[i].over_limit)
                        return &st[i];
                if (!best || st[i].remaining < best->remaining)
                        best = &st[i];
        }
        return best;
}

size_t rls_ratelimit_headers(RlsArena *a, const RlsStatus *st, size_t n, RlsHeader h[RLS_HEADERS_MAX]) {
        const RlsStatus *best = rls_binding_status(st, n);
        size_t name_len;
        char *policy, *state;

        if (!best)
                return 0;
        policy = rls_arena_alloc(a, RATELIMIT_HEADER_MAX);
        state = rls_arena_alloc(a, RATELIMIT_HEADER_MAX);
        if (!policy || !state)
                return 0;
        name_len = best->name ? strlen(best->name) : 0;
        ratelimit_header_policy(policy, best->name, name_len, best->requests_per_unit, best->window_seconds);
        ratelimit_header_state(state, best->name, name_len, best->remaining, best->reset_seconds);
        h[0] = (RlsHeader){ "RateLimit-Policy", policy };
        h[1] = (RlsHeader){ "RateLimit", state };
        return 2;
}

RlsUnit rls_unit(uint64_t window_seconds) {
        switch (window_seconds) {
        case 1:
                return RLS_UNIT_SECOND;
        case 60:
                return RLS_UNIT_MINUTE;
        case 3600:
                return RLS_UNIT_HOUR;
        case 86400:
                return RLS_UNIT_DAY;
        case 7 * 86400:
                return RLS_UNIT_WEEK;
        case 30 * 86400:
                return RLS_UNIT_MONTH;
        case 365 * 86400:
                return RLS_UNIT_YEAR;
        default:
                return RLS_UNIT_UNKNOWN;
        }
}

static uint32_t cut32(uint64_t v) {
        return v > UINT32_MAX ? UINT32_MAX : (uint32_t) v;
}

#define RLS_NEW(a, type) ((type *) rls_arena_alloc((a), sizeof(type)))

static Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus *status_build(RlsArena *a,
                                                                                        const RlsStatus *s) {
        Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus *m =
                RLS_NEW(a, Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus);

        if (!m)
                return NULL;
        envoy__service__ratelimit__v3__rate_limit_response__descriptor_status__init(m);
        m->code = s->over_limit ? ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT
                                : ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK;
        m->limit_remaining = cut32(s->remaining);
        if (s->has_limit) {
                m->current_limit = RLS_NEW(a, Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit);
                if (!m->current_limit)
                        return NULL;
                envoy__service__ratelimit__v3__rate_limit_response__rate_limit__init(m->current_limit);
                m->current_limit->requests_per_unit = cut32(s->requests_per_unit);
                m->current_limit->unit =
                        (Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit__Unit) rls_unit(
                                s->window_seconds);
                m->current_limit->name = (char *) (s->name ? s->name : "");
        }
        if (s->reset_seconds > 0) {
                m->duration_until_reset = RLS_NEW(a, Google__Protobuf__Duration);
                if (!m->duration_until_reset)
                        return NULL;
                google__protobuf__duration__init(m->duration_until_reset);
                m->duration_until_reset->seconds =
                        s->reset_seconds > INT64_MAX ? INT64_MAX : (int64_t) s->reset_seconds;
        }
        return m;
}

RlsResponse *rls_response_build(RlsArena *a, const RlsStatus *st, size_t n, const RlsHeader *h, size_t nh) {
        RlsResponse *m = RLS_NEW(a, RlsResponse);
        bool over = false;

        if (!m)
                return NULL;
        envoy__service__ratelimit__v3__rate_limit_response__init(m);
        m->statuses = rls_arena_alloc(a, (n ? n : 1) * sizeof *m->statuses);
        if (!m->statuses)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                m->statuses[i] = status_build(a, &st[i]);
                if (!m->statuses[i])
                        return NULL;
                over = over || st[i].over_limit;
        }
        m->n_statuses = n;
        m->overall_code = over ? ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT
                               : ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK;
        if (nh > 0) {
                m->response_headers_to_add = rls_arena_alloc(a, nh * sizeof *m->response_headers_to_add);
                if (!m->response_headers_to_add)
                        return NULL;
                for (size_t i = 0; i < nh; i++) {
                        Envoy__Config__Core__V3__HeaderValue *hv =
                                RLS_NEW(a, Envoy__Config__Core__V3__HeaderValue);
                        if (!hv)
                                return NULL;
                        envoy__config__core__v3__header_value__init(hv);
                        hv->key = (char *) h[i].key;
                        hv->value = (char *) h[i].value;
                        m->response_headers_to_add[i] = hv;
                }
                m->n_response_headers_to_add = nh;
        }
        return m;
}

size_t rls_response_size(const RlsResponse *r) {
        return envoy__service__ratelimit__v3__rate_limit_response__get_packed_size(r);
}

size_t rls_response_pack(const RlsResponse *r, uint8_t *out) {
        return envoy__service__ratelimit__v3__rate_limit_response__pack(r, out);
}

/* ---- RateLimitResponse written directly: the bytes protobuf-c's pack of rls_response_build()'s
 * message writes (fields in number order, proto3's zero values left out), without building it ---- */

/* Writes v as a varint at p (unless p is NULL); returns its size. */
static size_t pb_varint(uint8_t *p, uint64_t v) {
        size_t n = 0;

        do {
                uint8_t b = (uint8_t) (v & 0x7f);
                v >>= 7;
                if (p)
                        p[n] = v ? (uint8_t) (b | 0x80) : b;
                n++;
        } while (v);
        return n;
}

/* A varint field of value v (left out if 0). */
static size_t pb_uint(uint8_t *p, unsigned field, uint64_t v) {
        size_t n;

        if (v == 0)
                return 0;
        n = pb_varint(p, (uint64_t) field << 3);
        return n + pb_varint(p ? p + n : NULL, v);
}

/* A length-delimited field's key and length (its len bytes follow). */
static size_t pb_len(uint8_t *p, unsigned field, size_t len) {
        size_t n = pb_varint(p, (uint64_t) field << 3 | 2);

        return n + pb_varint(p ? p + n : NULL, len);
}

/* A string field (left out if empty). */
static size_t pb_string(uint8_t *p, unsigned field, const char *s) {
        size_t len = s ? strlen(s) : 0, n;

        if (len == 0)
                return 0;
        n = pb_len(p, field, len);
        if (p)
                memcpy(p + n, s, len);
        return n + len;
}

#define PB_AT(p, n) ((p) ? (p) + (n) : NULL)

/* A DescriptorStatus's fields (without its own key and length). */
static size_t status_encode(uint8_t *p, const RlsStatus *s) {
        size_t n = pb_uint(p, 1, s->over_limit ? 2 : 1), sub;

        if (s->has_limit) {
                const char *name = s->name ? s->name : "";
                uint32_t unit = (uint32_t) rls_unit(s->window_seconds);

                sub = pb_uint(NULL, 1, cut32(s->requests_per_unit)) + pb_uint(NULL, 2, unit) +
                      pb_string(NULL, 3, name);
                n += pb_len(PB_AT(p, n), 2, sub);
                n += pb_uint(PB_AT(p, n), 1, cut32(s->requests_per_unit));
                n += pb_uint(PB_AT(p, n), 2, unit);
                n += pb_string(PB_AT(p, n), 3, name);
        }
        n += pb_uint(PB_AT(p, n), 3, cut32(s->remaining));
        if (s->reset_seconds > 0) {
                uint64_t secs = s->reset_seconds > INT64_MAX ? INT64_MAX : s->reset_seconds;

                n += pb_len(PB_AT(p, n), 4, pb_uint(NULL, 1, secs));
                n += pb_uint(PB_AT(p, n), 1, secs);
        }
        return n;
}

/* The whole response at p, or (p NULL) its size. */
static size_t response_encode(uint8_t *p, const RlsStatus *st, size_t n, const RlsHeader *h, size_t nh) {
        bool over = false;
        size_t len;

        for (size_t i = 0; i < n; i++)
                over = over || st[i].over_limit;
        len = pb_uint(p, 1, over ? 2 : 1);
        for (size_t i = 0; i < n; i++) {
                size_t sub = status_encode(NULL, &st[i]);

                len += pb_len(PB_AT(p, len), 2, sub);
                len += p ? status_encode(p + len, &st[i]) : sub;
        }
        for (size_t i = 0; i < nh; i++) {
                size_t sub = pb_string(NULL, 1, h[i].key) + pb_string(NULL, 2, h[i].value);

                len += pb_len(PB_AT(p, len), 3, sub);
                len += pb_string(PB_AT(p, len), 1, h[i].key);
                len += pb_string(PB_AT(p, len), 2, h[i].value);
        }
        return len;
}

size_t rls_response_encoded_max(const RlsStatus *st, size_t n, const RlsHeader *h, size_t nh) {
        /* a status: its key and length (11), code (2), current_limit's key and length (11),
         * requests_per_unit (6), unit (2), name's key and length (11), limit_remaining (6),
         * duration_until_reset (2 + 11): 62, and its name; a header: 33 and its strings */
        size_t max = 2;

        for (size_t i = 0; i < n; i++)
                max += 64 + (st[i].name ? strlen(st[i].name) : 0);
        for (size_t i = 0; i < nh; i++)
                max += 40 + strlen(h[i].key) + strlen(h[i].value);
        return max;
}

size_t rls_response_encoded_size(const RlsStatus *st, size_t n, const RlsHeader *h, size_t nh) {
        return response_encode(NULL, st, n, h, nh);
}

size_t rls_response_encode(const RlsStatus *st, size_t n, const RlsHeader *h, size_t nh, uint8_t *out) {
        return response_encode(out, st, n, h, nh);
}

size_t rls_health_response(bool serving, uint8_t *out) {
        Grpc__Health__V1__HealthCheckResponse m = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;

        m.status = serving ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                           : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
        return grpc__health__v1__health_check_response__pack(&m, out);
}

int rls_health_request(RlsArena *a, const uint8_t *data, size_t len) {
        Grpc__Health__V1__HealthCheckRequest *m;

        a->failed = false;
        m = grpc__health__v1__health_check_request__unpack(&a->allocator, len, data);
        if (!m)
                return a->failed ? -ENOMEM : -EBADMSG;
        if (m->service && m->service[0] && strcmp(m->service, RLS_SERVICE_NAME) != 0)
                return -ENOENT;
        return 0;
}
