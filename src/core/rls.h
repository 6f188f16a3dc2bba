/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * rls.c: Envoy's rate limit service (issue #34), the messages: a RateLimitRequest decoded
 * into an arena, each of its descriptors turned into the engine's request (the pairs
 * domain=<domain> and the descriptor's entries, in order) and the hits it asks for, and the
 * RateLimitResponse built from the decisions. Also grpc.health.v1's messages. Pure: no I/O;
 * the only allocations are the arena's blocks (one kept, the others given back at reset).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "core/algorithm.h"
#include "core/protocol.h"
#include "core/rules.h"

typedef struct Envoy__Service__Ratelimit__V3__RateLimitRequest RlsRequest;
typedef struct Envoy__Service__Ratelimit__V3__RateLimitResponse RlsResponse;

#define RLS_DESCRIPTORS_MAX                                                                                 \
        64 /* descriptors per request: all of them are decided in one batch, all or nothing, so             \
            * this many times RULES_MATCH_MAX hits must fit an empty batch (BATCH_HITS_MAX) */
#define RLS_ARENA_BLOCK                                                                                     \
        (16u * 1024u) /* bytes: the arena's first block, kept across resets: a batch's requests of          \
                       * one connection decode into it without an allocation */

/* The RateLimitResponse.RateLimit.Unit values (Envoy's). */
typedef enum RlsUnit {
        RLS_UNIT_UNKNOWN = 0,
        RLS_UNIT_SECOND = 1,
        RLS_UNIT_MINUTE = 2,
        RLS_UNIT_HOUR = 3,
        RLS_UNIT_DAY = 4,
        RLS_UNIT_MONTH = 5, /* 30 days, as envoyproxy/ratelimit counts it */
        RLS_UNIT_YEAR = 6,  /* 365 days */
        RLS_UNIT_WEEK = 7,
} RlsUnit;

/* A bump allocator that protobuf-c decodes into (allocator), freed all at once. */
typedef struct RlsArenaBlock RlsArenaBlock;
typedef struct RlsArena {
        ProtobufCAllocator allocator; /* its allocator_data is the arena */
        RlsArenaBlock *first;         /* RLS_ARENA_BLOCK bytes, allocated at the first use, kept */
        RlsArenaBlock *extra;         /* blocks beyond it, given back by rls_arena_reset() */
        size_t total;                 /* bytes of the blocks */
        size_t max;                   /* cap of total */
        bool failed;                  /* an allocation was refused since the last reset */
} RlsArena;

void rls_arena_init(RlsArena *a, size_t max);
void *rls_arena_alloc(RlsArena *a, size_t n);
/* Forgets everything allocated; keeps the first block. */
void rls_arena_reset(RlsArena *a);
/* Frees every block. */
void rls_arena_done(RlsArena *a);

/* Decodes a RateLimitRequest into a. Returns 0, -EBADMSG (not a RateLimitRequest) or -ENOMEM
 * (over the arena's cap). */
int rls_request_decode(RlsArena *a, const uint8_t *data, size_t len, RlsRequest **ret);

/* The checks of the request as a whole: a domain, and 1..RLS_DESCRIPTORS_MAX descriptors.
 * Returns 0, or -EINVAL with *ret_why (static). */
int rls_request_check(const RlsRequest *r, const char **ret_why);
size_t rls_request_descriptors(const RlsRequest *r);
const char *rls_request_domain(const RlsRequest *r);

/* What a descriptor does to its counters. */
typedef enum RlsHitKind {
        RLS_HIT_TAKE,   /* hits_addend credits (the request's, 0 meaning 1, or its own) */
        RLS_HIT_PEEK,   /* its own hits_addend 0: checks only */
        RLS_HIT_REFUND, /* is_negative_hits: gives hits_addend credits back */
} RlsHitKind;

typedef struct RlsHits {
        RlsHitKind kind;
        uint64_t count; /* 1..PROTO_COUNT_MAX; 0 for RLS_HIT_PEEK */
} RlsHits;

/* Turns descriptor i of r into the engine's request ret: the pairs domain=<domain> then the
 * entries in order (their strings point into the arena), and the hits it asks for. Returns 0,
 * or -EINVAL with *ret_why (static): no entries, more than PROTO_PAIRS_MAX - 1 entries, an empty key, a key
 * or value that is not UTF-8, a key given twice ("domain" included), a hits_addend above
 * PROTO_COUNT_MAX. */
int rls_descriptor_request(const RlsRequest *r, size_t i, ProtoRequest *ret, RlsHits *ret_hits,
                           const char **ret_why);

/* One descriptor's answer. */
typedef struct RlsStatus {
        bool over_limit;
        bool has_limit;             /* current_limit is sent: a rule with a counter decided */
        uint64_t requests_per_unit; /* the rule's limit (cut to 2^32-1) */
        uint64_t window_seconds;    /* its window: the unit, if one of Envoy's */
        const char *name;           /* the rule's label, NUL-terminated, or NULL */
        uint64_t remaining;         /* cut to 2^32-1 */
        uint64_t capacity;          /* the most it can have left: the rule's burst (creditLimit
                                     * but for a token bucket with a burst of its own) */
        uint64_t reset_seconds;     /* duration_until_reset; 0: not sent */
} RlsStatus;

/* The status of a descriptor decided by rule (NULL: not evaluated, a rule that always denies
 * decided the request: OK) with res: over its limit if denied; an unlimited rule (one that always
 * allows) sends no limit. name points to the rule's label. */
void rls_status_of(const Rule *rule, const AlgoResult *res, RlsStatus *s);

typedef struct RlsHeader {
        const char *key, *value; /* NUL-terminated */
} RlsHeader;

/* All or nothing, once every descriptor of a request is decided: if one is over its limit,
 * none was charged, but each reported its decision as if alone (store.h): what it would have
 * left after its TAKE (the store undid it; or, with peeked, a rule that always denies decided
 * and its hits were PEEKs of the same count, also for a REFUND), or after its REFUND (undone).
 * Sets the others' remaining to what they have (at most their capacity). Returns whether one
 * is over its limit. */
bool rls_statuses_settle(RlsStatus *st, const RlsHits *hits, size_t n, bool peeked);

/* The status the IETF RateLimit fields describe: the first over its limit, else the one with
 * the least left; only statuses with a limit; NULL if none has one. */
const RlsStatus *rls_binding_status(const RlsStatus *st, size_t n);

#define RLS_HEADERS_MAX 2
/* The RateLimit-Policy and RateLimit fields of st's binding status (rls_binding_status()), their
 * values in a; returns how many (0: none has a limit, or a is full). */
size_t rls_ratelimit_headers(RlsArena *a, const RlsStatus *st, size_t n, RlsHeader h[RLS_HEADERS_MAX]);

/* Envoy's unit for a window of so many seconds, or RLS_UNIT_UNKNOWN (not sent). */
RlsUnit rls_unit(uint64_t window_seconds);

/* Builds the response (its structs in a): overall_code OVER_LIMIT if a status is, else OK;
 * the statuses in order; the headers in response_headers_to_add. NULL if a is full. The
 * daemon answers with rls_response_encode() (below); this, packed by protobuf-c, is what the
 * tests hold it to. */
RlsResponse *rls_response_build(RlsArena *a, const RlsStatus *st, size_t n, const RlsHeader *h, size_t nh);
size_t rls_response_size(const RlsResponse *r);
/* Writes it at out (rls_response_size() bytes). */
size_t rls_response_pack(const RlsResponse *r, uint8_t *out);

/* The same response's bytes, written directly (no message built, no allocation): what
 * rls_response_pack() writes of rls_response_build()'s message. rls_response_encoded_size() is their
 * number; rls_response_encode() writes them at out and returns it. */
size_t rls_response_encoded_size(const RlsStatus *st, size_t n, const RlsHeader *h, size_t nh);
/* At least rls_response_encoded_size(), cheaper to compute: what to reserve before encoding. */
size_t rls_response_encoded_max(const RlsStatus *st, size_t n, const RlsHeader *h, size_t nh);
size_t rls_response_encode(const RlsStatus *st, size_t n, const RlsHeader *h, size_t nh, uint8_t *out);

/* grpc.health.v1: the HealthCheckResponse of a status (SERVING or NOT_SERVING), at out (at
 * least RLS_HEALTH_RESPONSE_MAX bytes). Returns its length. */
#define RLS_HEALTH_RESPONSE_MAX 8
size_t rls_health_response(bool serving, uint8_t *out);
/* Checks a HealthCheckRequest: 0 for the server as a whole (service "") or one of ours, -ENOENT for
 * another service, -EBADMSG if it is not one. */
int rls_health_request(RlsArena *a, const uint8_t *data, size_t len);
