/* SPDX-License-Identifier: MIT */
#pragma once

/* The reasons of the protocol errors both request syntaxes share (protocol.c's lines and
 * resp.c's arrays): one text, so a client sees the same reason either way. Core only. */

#define REASON_COUNT_MISSING "missing count (TAKE, CHARGE and REFUND need one)"
#define REASON_COUNT_ZERO    "count must be at least 1"
#define REASON_COUNT_DIGITS  "count must be decimal digits"
#define REASON_COUNT_ZEROS   "count has a leading zero"
#define REASON_COUNT_BIG     "count above 9007199254740991"
#define REASON_COUNT_NONE    "HELLO, RESET and EXPLAIN take no count"
#define REASON_TIME_VERB     "only TAKE, PEEK and CHARGE take a timestamp"
#define REASON_TIME_FORMAT   "a timestamp is @<seconds>[.<up to 6 digits>]"
