/* SPDX-License-Identifier: MIT */
#pragma once

/* What both request syntaxes share (protocol.c's lines and resp.c's arrays): the reasons of
 * their protocol errors and the parsers of a count and a timestamp, so a client gets the same
 * answer and the same reason either way. Core only. */

#include <stddef.h>
#include <stdint.h>

#include "protocol.h"

/* Sets req's error (no pairs) and returns -EBADMSG. */
int proto_request_fail(ProtoRequest *req, ProtoErrorCode code, const char *reason);

/* The count tok[0..len), a token already cut out: decimal digits, no leading zero, at most
 * PROTO_COUNT_MAX, at least 1 but for PEEK. Sets req->count and has_count; returns 0, or
 * -EBADMSG after proto_request_fail(). */
int proto_parse_count_token(const uint8_t *tok, size_t len, ProtoRequest *req);

/* The timestamp tok[0..len), a token already cut out that starts with '@':
 * @<seconds>[.<up to 6 digits>], for TAKE, PEEK and CHARGE only. Sets req->at_usec and
 * has_at; returns 0, or -EBADMSG after proto_request_fail(). */
int proto_parse_time_token(const uint8_t *tok, size_t len, ProtoRequest *req);

#define REASON_COUNT_MISSING "missing count (TAKE, CHARGE and REFUND need one)"
#define REASON_COUNT_ZERO    "count must be at least 1"
#define REASON_COUNT_DIGITS  "count must be decimal digits"
#define REASON_COUNT_ZEROS   "count has a leading zero"
#define REASON_COUNT_BIG     "count above 9007199254740991"
#define REASON_COUNT_NONE    "HELLO, RESET and EXPLAIN take no count"
#define REASON_TIME_VERB     "only TAKE, PEEK and CHARGE take a timestamp"
#define REASON_TIME_FORMAT   "a timestamp is @<seconds>[.<up to 6 digits>]"
