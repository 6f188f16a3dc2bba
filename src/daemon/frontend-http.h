/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * frontend-http.c: the HTTP API's front-end (docs/http-api.md). Its "connection" is one HTTP
 * request that http-api-server.c received whole: a Connection without a socket whose input is the
 * JSON body and whose userdata is its HttpExchange, scheduled into the next batch with
 * server_schedule(). take() parses the body (core/http-api.h) into one request (/v1/...) or
 * one per descriptor (/json), all in the same batch; the engine admits, matches, decides and
 * counts them as any protocol's. format_decision() and format_error() write one fixed record per
 * request into the connection's output; once the batch answered the exchange,
 * frontend_http_reply() turns the records into the HTTP status, the RateLimit, RateLimit-Policy
 * and Retry-After fields, and the JSON body.
 */

#include "frontend.h"
#include "core/http-api.h"
#include "core/ratelimit-headers.h"

#define HTTP_REPLY_BODY_MAX                                                                                 \
        (HTTP_API_EXPLAIN_MAX > 64 + HTTP_API_DESCRIPTORS_MAX * (HTTP_API_ENVOY_STATUS_MAX + 1)             \
                 ? HTTP_API_EXPLAIN_MAX                                                                     \
                 : 64 + HTTP_API_DESCRIPTORS_MAX * (HTTP_API_ENVOY_STATUS_MAX + 1)) /* bytes */

/* One HTTP request's part in the engine: its Connection's userdata. */
typedef struct HttpExchange {
        void *owner; /* the transport's (http-api-server.c: its connection) */
        HttpApiEndpoint endpoint;
        HttpApiRequest req; /* parsed by take(): its pairs point into the connection's input */
        bool parsed;        /* req is parsed (once: the body is decoded in place) */
        int parse_result;   /* http_api_parse()'s */
        bool taken;         /* a batch took it (set by take(); the transport clears it) */
} HttpExchange;

/* What the HTTP response says. */
typedef struct HttpReply {
        unsigned status;
        bool has_limit; /* policy and limit are set */
        char policy[RATELIMIT_HEADER_MAX];
        char limit[RATELIMIT_HEADER_MAX];
        bool has_retry_after;
        char retry_after[21];
        size_t body_len;
        char body[HTTP_REPLY_BODY_MAX]; /* JSON, NUL-terminated */
} HttpReply;

extern const Frontend frontend_http;

/* The reply to c's exchange from the records its batch formatted into c's output (c->out_len
 * bytes; none: the engine took nothing, e.g. the daemon is stopping: 503). */
void frontend_http_reply(const Connection *c, HttpReply *ret);
