/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * client-limits.c: the commands whose CLIENT gives the limit with every call (issue #17), as
 * redis-cell and Smyte's ratelimit define them, mapped onto divvyd's token bucket
 * (algorithm.h). Pure: it parses the arguments of one command (RESP bulk strings, the command
 * name excluded), says which counter and which operation, and formats the reply from the
 * operation's result. No I/O, no allocation, no clock.
 *
 *   CL.THROTTLE key max_burst count period [quantity]        (redis-cell)
 *     A continuous token bucket (GCRA) of burst max_burst + 1 refilled at count per period
 *     seconds. quantity (default 1): > 0 TAKE quantity, 0 PEEK, < 0 REFUND -quantity (what
 *     redis-cell's users do with -1 to give a token back; divvyd caps it at the capacity).
 *     Reply: client_limit_format_throttle().
 *   RL.REDUCE key max refilltime [REFILL amount] [TAKE tokens] [AT timestamp] [STRICT]
 *   RL.GET key max refilltime [REFILL amount] [AT timestamp] [STRICT]        (Smyte)
 *   RL.PREDUCE, RL.PGET: the same with refilltime and AT in milliseconds.
 *     A bucket of max tokens, full at first, refilled with amount (default max) tokens every
 *     refilltime seconds after its first take (divvyd's discrete refills); TAKE (default 1,
 *     RL.GET 0) takes tokens iff they are all there (Smyte would drain the bucket on a larger
 *     take: divvyd takes nothing); TAKE 0 peeks; AT is the client's Unix time; STRICT restarts
 *     the refill clock on a denied take. Options are case-insensitive, in any order, the last
 *     of a repeated one wins. Reply: client_limit_reduce_reply().
 *
 * The counter's identity: the parameters that shape the bucket are part of it (Smyte keys its
 * buckets by key, max, refill amount and refill time; divvyd's state layout depends on them
 * too), so two calls on one key with other parameters count in different counters. It is
 * hash128() of a tag of its own ("divvyd-client-limit-v1", which no rule id's encoding starts
 * with), "cl" or "rl", hash128(key) and the parameters (CL: max_burst, count, period; RL: max,
 * amount, refilltime in ms, so RL.REDUCE k 2 60 and RL.PREDUCE k 2 60000 share a bucket, as in
 * Smyte). quantity, TAKE, AT and STRICT are per call and not part of it. This encoding is part
 * of the store's format, like rule ids (rules.c).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/algorithm.h"
#include "core/hash.h"
#include "core/protocol.h"

#define CLIENT_LIMIT_ID_SIZE HASH128_SIZE /* bytes: = RULE_ID_SIZE, StoreHit.rule_id */
#define CLIENT_LIMIT_ERROR_MAX                                                                              \
        160 /* bytes: ClientLimit.error, for the errors that quote an argument (cut to 64 bytes) */
#define CLIENT_LIMIT_THROTTLE_REPLY_LEN 5 /* integers in CL.THROTTLE's reply */
#define CLIENT_LIMIT_AT_MAX                                                                                 \
        UINT64_C(99999999999) /* s: the latest AT (year 5138), as the line protocol's 11-digit "@time" */

typedef enum ClientLimitKind {
        CLIENT_LIMIT_THROTTLE, /* redis-cell's CL.THROTTLE: continuous token bucket (GCRA) */
        CLIENT_LIMIT_REDUCE,   /* Smyte's RL.REDUCE, RL.GET, RL.PREDUCE, RL.PGET: discrete refills */
} ClientLimitKind;

/*
 * One parsed call: what the daemon needs to build its StoreHit, and what the reply formatters
 * need. The StoreHit (store.h) is:
 *   rule_id = id, actor = key.ptr (never NULL, even for an empty key), actor_len = key.len,
 *   credit_limit = algo.credit_limit, reset_seconds = algo.reset_seconds, algo = &algo,
 *   op = ALGO_TAKE -> STORE_TAKE, ALGO_PEEK -> STORE_PEEK, ALGO_REFUND -> STORE_REFUND,
 *   count = count, group = 0, at_usec = at_usec.
 * key points into argv: the ClientLimit is valid as long as the arguments are.
 */
typedef struct ClientLimit {
        ClientLimitKind kind;
        uint8_t id[CLIENT_LIMIT_ID_SIZE]; /* the counter's identity (see above) */
        ProtoSlice key;                   /* the client's key: the counter's actor */
        AlgoParams algo;                  /* a token bucket, prepared by algo_params_prepare() */
        AlgoOp op;                        /* ALGO_TAKE, ALGO_PEEK or ALGO_REFUND */
        uint64_t count;                   /* credits to take, peek at (0 or more) or refund */
        /* RL's AT in wall-clock µs (AT 0 is 1 µs: 0 means none), or 0: the daemon's clock. The
         * daemon applies its --client-time-max-age rules as to the line protocol's "@time". */
        uint64_t at_usec;
        uint64_t interval_usec; /* CL: the emission interval T (period / count in µs, rounded up as
                                 * algorithm.c does); RL: 0 */
        char error[CLIENT_LIMIT_ERROR_MAX]; /* storage of *ret_error for some errors */
} ClientLimit;

/* Parses CL.THROTTLE's arguments (argv[0] = key; argc 4 or 5) into *ret. Integers are as
 * redis-cell takes them (optional sign, decimal digits, within int64). Returns 0, or -EINVAL
 * with *ret_error the error reply's text (without RESP's "-" and CRLF; printable ASCII, never a
 * CR or LF) as redis-cell words it ("Cell error: Zero rates are not supported", ...), pointing
 * to a static string or into ret->error. Refused beyond redis-cell: a negative max_burst, count
 * or period, and what divvyd's token bucket cannot hold (count above 2^53-1, period above 100
 * years, more than 1000000 per second, a bucket that takes more than 200 years to refill). */
int client_limit_parse_throttle(int argc, const ProtoSlice *argv, ClientLimit *ret, const char **ret_error);

/* Parses RL.REDUCE's, RL.GET's, RL.PREDUCE's or RL.PGET's arguments (cmd: the command's name,
 * NUL-terminated, any case; argv[0] = key; argc 3 to 10, 8 for the GETs, as Smyte) into *ret.
 * Returns 0, or -EINVAL with *ret_error as for client_limit_parse_throttle(), in Smyte's words
 * where Smyte refuses ("Syntax error", "Value is not an integer or out of range"), else with
 * "ERR " and divvyd's: refilltime of RL.P* not whole seconds, max or amount above 2^53-1,
 * amount above 1000000 per second of refilltime, AT after CLIENT_LIMIT_AT_MAX, a bucket that
 * takes more than 200 years to refill, an unknown cmd. */
int client_limit_parse_reduce(const char *cmd, int argc, const ProtoSlice *argv, ClientLimit *ret,
                              const char **ret_error);

/* Formats CL.THROTTLE's reply from the result of cl's operation into out: limited (0 or 1),
 * limit (max_burst + 1), remaining, retry_after (s; -1 when allowed, and when quantity is above
 * the limit: it can never pass), reset_after (s until the bucket is full again). res is
 * algo_apply()'s result (a StoreHit's res). Seconds are rounded up from microseconds (redis-cell rounds up
 * from milliseconds, dropping a sub-millisecond rest: the two differ only by such a rest). A denied take's
 * reset_after is derived from its retry and remaining, as the result says when the take would
 * pass, not when the bucket is full: exact when (limit - quantity) * T is whole seconds or the
 * time until full is whole emission intervals (every take so far at one instant), else never
 * below the true value and at most 1 s above it. Returns CLIENT_LIMIT_THROTTLE_REPLY_LEN. */
size_t client_limit_format_throttle(const ClientLimit *cl, const AlgoResult *res,
                                    int64_t out[CLIENT_LIMIT_THROTTLE_REPLY_LEN]);

/* RL.*'s reply from the result of cl's operation (as above): the tokens in the bucket BEFORE
 * this call took any (Smyte's clients compare it with their cost: >= cost means allowed). */
int64_t client_limit_reduce_reply(const ClientLimit *cl, const AlgoResult *res);
