/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * http-api.c: the HTTP decision API's bodies (docs/http-api.md): the endpoints by path, the
 * JSON requests parsed into the engine's pairs, and the JSON replies formatted.
 *
 *   POST /v1/take, /v1/peek, /v1/charge, /v1/refund, /v1/reset, /v1/explain:
 *        {"pairs": {"<key>": "<value>", ...}, "count": <n>}
 *        pairs: required, an object of strings (1 .. PROTO_PAIRS_MAX keys, no key twice);
 *        count: an integer 0 .. PROTO_COUNT_MAX, on take, peek, charge and refund only
 *        (default 1; 0 only on peek, as the line protocol's verbs).
 *   POST /json: envoyproxy/ratelimit's RateLimitRequest in proto3 JSON:
 *        {"domain": "<d>", "descriptors": [{"entries": [{"key": "<k>", "value": "<v>"}, ...],
 *          "hits_addend": <n>, "is_negative_hits": <bool>}, ...], "hits_addend": <n>}
 *        each field also in its lowerCamelCase name (hitsAddend, isNegativeHits), as protojson
 *        reads them; a descriptor's hits_addend (a UInt64Value: a number or a decimal string)
 *        is its count, 0 a peek; else the request's hits_addend, 0 or absent meaning 1. A
 *        descriptor's "limit" override is refused.
 *
 * The parser is strict JSON (RFC 8259): one value, objects and arrays, no trailing commas, no
 * comments; every field not listed above, a field twice, a wrong type, a string that is not
 * valid UTF-8 or holds a control character (the line protocol refuses them too) fails with a
 * sentence. Strings are decoded in place (escapes, \u surrogate pairs): the pairs point into
 * the body, which the caller keeps. No allocation, no recursion beyond a fixed depth.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/algorithm.h"
#include "core/protocol.h"
#include "core/rls.h"

#define HTTP_API_BODY_MAX                                                                                   \
        (16u * 1024u) /* bytes: the largest request body; 64 pairs of 100-byte values need 13 KiB */
#define HTTP_API_DESCRIPTORS_MAX                                                                            \
        16 /* descriptors of one /json request: Envoy's rate_limits actions make a handful; all are         \
            * decided in one batch */
#define HTTP_API_ENTRIES_MAX 128 /* entries of all the descriptors of one /json request */
#define HTTP_API_REPLY_MAX                                                                                  \
        (4u * 1024u) /* bytes: the longest decision, reset or error reply: a reason of PROTO_REPLY_V2_MAX   \
                      * bytes or a 255-byte rule name, every byte escaped as \u00XX, and five numbers */
#define HTTP_API_EXPLAIN_MAX                                                                                \
        (4u * DIVVY_PROTO_REPLY_MAX) /* bytes: the longest EXPLAIN reply; the actor and the lists           \
                                      * are cut as the line protocol's (PROTO_ACTOR_TEXT_MAX,               \
                                      * PROTO_RULE_LIST_MAX), escaped for JSON at most 6 times */
#define HTTP_API_ENVOY_STATUS_MAX                                                                           \
        (6u * PROTO_LABEL_MAX + 256u) /* bytes: one /json status: a 255-byte name, every byte escaped as    \
                                       * \u00XX, and three numbers */

typedef enum HttpApiEndpoint {
        HTTP_API_TAKE,
        HTTP_API_PEEK,
        HTTP_API_CHARGE,
        HTTP_API_REFUND,
        HTTP_API_RESET,
        HTTP_API_EXPLAIN,
        HTTP_API_ENVOY, /* /json */
        _HTTP_API_ENDPOINT_MAX,
        _HTTP_API_ENDPOINT_INVALID = -EINVAL,
} HttpApiEndpoint;

/* The endpoint at path ("/v1/take", ..., "/json"), or _HTTP_API_ENDPOINT_INVALID. */
HttpApiEndpoint http_api_endpoint_from_path(const char *path);
/* The verb of an endpoint's requests (/json: TAKE; its descriptors may be PEEK or REFUND). */
ProtoVerb http_api_endpoint_verb(HttpApiEndpoint e);

typedef struct HttpApiDescriptor {
        size_t first_entry, n_entries; /* in HttpApiRequest.entries */
        uint64_t hits;                 /* its count, when has_hits */
        bool has_hits;
        bool negative; /* is_negative_hits: a refund */
} HttpApiDescriptor;

typedef struct HttpApiRequest {
        HttpApiEndpoint endpoint;
        /* /v1/...: */
        ProtoPair pairs[PROTO_PAIRS_MAX];
        size_t n_pairs;
        uint64_t count;
        bool has_count;
        /* /json: */
        ProtoSlice domain;
        ProtoPair entries[HTTP_API_ENTRIES_MAX];
        HttpApiDescriptor descriptors[HTTP_API_DESCRIPTORS_MAX];
        size_t n_descriptors;
        uint64_t hits_addend; /* the request's; 0: absent */
        const char *error;    /* static: why parsing failed */
} HttpApiRequest;

/* Parses body[0..len) (decoded in place: body is changed) for endpoint e into *ret. Returns 0,
 * or -EBADMSG with ret->error set. */
int http_api_parse(HttpApiEndpoint e, char *body, size_t len, HttpApiRequest *ret);

/* The engine's request for r (a /v1 request: i is 0) or for r's descriptor i (/json: the pairs
 * domain=<domain> and its entries; its verb TAKE, PEEK for 0 hits, or REFUND), into *ret.
 * Returns 0, or -EBADMSG with ret->error_code/error_reason set (a duplicate key, a descriptor
 * with an entry named "domain", too many pairs, a count out of range). */
int http_api_request_to_proto(const HttpApiRequest *r, size_t i, ProtoRequest *ret);

/* ---- replies: JSON, NUL-terminated, the length returned ---- */

/* {"allowed":true,"credit":7,"limit":10,"reset":42,"retry":0,"rule":"<name>"} (the line protocol's
 * TAKE/PEEK/CHARGE/REFUND fields) into buf (HTTP_API_REPLY_MAX bytes). */
size_t http_api_format_decision(char *buf, const AlgoResult *res, const char *rule_name);
/* {"reset":<counters deleted>} */
size_t http_api_format_reset(char *buf, uint64_t n);
/* {"error":"<code>","reason":"<reason>"} (HTTP_API_REPLY_MAX bytes; reason cut to fit). */
size_t http_api_format_error(char *buf, const char *code, const char *reason);
/* {"rule":..,"index":..,"policy":..,"actor":"<actor>"|null,"algorithm":..,"canaries":[..],
 * "continue":[..]} into buf (HTTP_API_EXPLAIN_MAX bytes). */
size_t http_api_format_explain(char *buf, const ProtoExplain *e);

/* A rule's name in replies and headers: its label, or "#<index>" (ProtoRuleRef's). buf:
 * PROTO_LABEL_MAX + 1 bytes. */
const char *http_api_rule_name(const ProtoRuleRef *r, char *buf);

/* envoyproxy/ratelimit's Unit for a window of seconds ("SECOND" .. "YEAR", its MONTH 30 days
 * and YEAR 365), or NULL when none is that long. */
const char *http_api_envoy_unit(uint64_t seconds);

/* One DescriptorStatus of /json's reply: the status gRPC's ShouldRateLimit answers (rls.h), as
 * protojson writes it (fields in number order, zero values left out):
 * {"code":"OK"|"OVER_LIMIT","currentLimit":{"requestsPerUnit":<limit>,"unit":"<unit>",
 * "name":"<name>"},"limitRemaining":<n>,"durationUntilReset":"<s>s"} (currentLimit when s has a
 * limit, its unit when its window is one) into buf (HTTP_API_ENVOY_STATUS_MAX bytes). */
size_t http_api_format_envoy_status(char *buf, const RlsStatus *s);
