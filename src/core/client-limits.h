/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * client-limits.c: the commands whose CLIENT gives the limit with every call (issues #17, #33),
 * with the peers' own semantics and arithmetic: redis-cell's and Smyte's ratelimit's. Pure: it
 * parses the arguments of one command (RESP bulk strings, the command name excluded), says
 * which counter and which operation, applies the peer's algorithm to the counter's two-word
 * state (algo_apply() hands ALGO_PEER_* parameters to client_limit_apply()) and formats the
 * reply. No I/O, no allocation, no clock. divvyd's own token bucket and windows (rules) are
 * not involved: their semantics stay as documented.
 *
 *   CL.THROTTLE key max_burst count period [quantity]        (redis-cell)
 *     redis-cell's GCRA, computed as redis-cell computes it: emission interval T = period in ns
 *     / count (f64, truncated: up to 10^9 per second), delay variation tolerance T *
 *     (max_burst + 1), the theoretical arrival time (TAT) in ns; quantity > 0 takes, 0 peeks,
 *     < 0 moves the TAT back (a refund, past full too). Rust's wrapping i64 and saturating f64
 *     casts are followed for negative and huge parameters; what panics in redis-cell (a time
 *     beyond the years -9999 to 9999) is an error here. The key alone is the cell: a call with
 *     other parameters reads the same TAT, as in redis-cell. Reply: the five integers, times
 *     rounded as redis-cell rounds them (whole seconds, plus 1 if the millisecond part is > 0).
 *   GCRA key max_burst tokens_per_period period [TOKENS count]        (Redis 8.8)
 *     Redis's GCRA command, computed as Redis computes it: the clock in whole ms, emission
 *     interval T = period (seconds, a double) in µs / tokens_per_period rounded half up (at
 *     least 1 µs), tolerance T * (max_burst + 1), the TAT in µs; count (default 1) >= 1.
 *     The key alone is the counter, in a namespace of its own (a CL.THROTTLE cell of the same
 *     key is another counter). Reply: limited, max_burst + 1, remaining, retry_after (-1 if
 *     allowed, or if count can never fit), reset_after: whole seconds rounded up. Errors in
 *     Redis's words.
 *   RL.REDUCE key max refilltime [REFILL amount] [TAKE tokens] [AT timestamp] [STRICT]
 *   RL.GET key max refilltime [REFILL amount] [AT timestamp] [STRICT]        (Smyte)
 *   RL.PREDUCE, RL.PGET: the same with refilltime and AT in milliseconds.
 *     Smyte's bucket: max tokens, full at first, amount (default max) tokens added every
 *     refilltime after its last refill mark (the schedule is kept, also once full); a take
 *     (TAKE, default 1; RL.GET 0) larger than what is left drains it; STRICT restarts the refill
 *     clock when a take leaves it at 0; AT is the client's time (s or ms since the epoch; a
 *     time earlier than the last refill refills nothing). Options are case-insensitive, in any
 *     order, the last of a repeated one wins. Reply: the tokens before the take.
 *
 * The counter's identity: CL: the key alone (redis-cell's Redis key); RL: the key and max,
 * amount, refilltime in ms (Smyte's RocksDB key, so RL.REDUCE k 2 60 and RL.PREDUCE k 2 60000
 * share a bucket). It is hash128() of a tag of its own ("divvyd-client-limit-v2", which no rule
 * id's encoding starts with), "cl" or "rl", hash128(key) and the parameters (0s for CL). This
 * encoding is part of the store's format, like rule ids (rules.c): counters of an older
 * encoding ("-v1") are not read again and expire on their own.
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

typedef enum ClientLimitKind {
        CLIENT_LIMIT_THROTTLE, /* redis-cell's CL.THROTTLE: continuous token bucket (GCRA) */
        CLIENT_LIMIT_REDUCE,   /* Smyte's RL.REDUCE, RL.GET, RL.PREDUCE, RL.PGET: discrete refills */
        CLIENT_LIMIT_GCRA,     /* Redis's GCRA (8.8): GCRA in whole µs, its own counters */
} ClientLimitKind;

/*
 * One parsed call: what the daemon needs to build its StoreHit, and what the reply formatters
 * need. The StoreHit (store.h) is:
 *   rule_id = id, actor = NULL (id names the counter: the key is hashed into it once, here),
 *   credit_limit = algo.credit_limit, reset_seconds = algo.reset_seconds, algo = &algo,
 *   op = op, count = count, group = 0, at_usec = at_usec.
 * key points into argv: the ClientLimit is valid as long as the arguments are.
 */
typedef struct ClientLimit {
        ClientLimitKind kind;
        uint8_t id[CLIENT_LIMIT_ID_SIZE]; /* the counter's identity (see above) */
        ProtoSlice key;                   /* the client's key: the counter's actor */
        AlgoParams algo;                  /* the peer's (.peer), not prepared: client_limit_apply() */
        AlgoOp op; /* ALGO_TAKE or ALGO_PEEK; DEL: ALGO_RESET (the store deletes the cell) */
        /* RL: tokens to take; CL: quantity as a two's complement int64 (< 0: a refund) */
        uint64_t count;
        /* RL's AT in µs since the epoch (AT 0 is 1 µs: 0 means none; saturated), or 0: the
         * daemon's clock. The client's time line, as Smyte takes it: not subject to
         * --client-time-max-age, nor made now when later (algo_apply()'s ALGO_NOW_MAX bounds it). */
        uint64_t at_usec;
        uint64_t interval_usec; /* CL: the emission interval T in whole µs (truncated); RL: 0 */
        /* DEL: a second counter the same call deletes, the key's GCRA counter (the store's hit
         * on it as on id) */
        uint8_t also_id[CLIENT_LIMIT_ID_SIZE];
        bool has_also;
        char error[CLIENT_LIMIT_ERROR_MAX]; /* storage of *ret_error for some errors */
} ClientLimit;

/* Parses CL.THROTTLE's arguments (argv[0] = key; argc 4 or 5) into *ret. Integers are as
 * redis-cell takes them (optional sign, decimal digits, within int64). Returns 0, or -EINVAL
 * with *ret_error the error reply's text (without RESP's "-" and CRLF; printable ASCII, never a
 * CR or LF) in redis-cell's words: "Cell error: Usage: ...", "Cell error: Couldn't parse as
 * integer: <arg>", "Cell error: Zero rates are not supported" (count or period 0, or above 10^9
 * per second), pointing to a static string or into ret->error. */
int client_limit_parse_throttle(int argc, const ProtoSlice *argv, ClientLimit *ret, const char **ret_error);

/* Parses DEL's arguments (argv[0] = key; argc 1) into *ret: the CL.THROTTLE cell of that key
 * (id) and its GCRA counter (also_id, has_also set), with op ALGO_RESET; the store deletes
 * both (a hit each) and the sum of their credit outputs (1 for a live counter deleted) makes
 * DEL's integer reply, 1 or 0 (client_limit_reduce_reply()). Returns 0, or -EINVAL with
 * *ret_error as for client_limit_parse_throttle(). */
int client_limit_parse_del(int argc, const ProtoSlice *argv, ClientLimit *ret, const char **ret_error);

/* Parses GCRA's arguments (argv[0] = key; argc 4 or 6) into *ret. Returns 0, or -EINVAL with
 * *ret_error as for client_limit_parse_throttle(), in Redis's words ("ERR wrong number of
 * arguments for 'gcra' command", "ERR value is out of range, must be positive", "ERR period must
 * be > 0 and < 1e12", ...). */
int client_limit_parse_gcra(int argc, const ProtoSlice *argv, ClientLimit *ret, const char **ret_error);

/* Parses RL.REDUCE's, RL.GET's, RL.PREDUCE's or RL.PGET's arguments (cmd: the command's name,
 * NUL-terminated, any case; argv[0] = key; argc 3 to 10, 8 for the GETs, as Smyte) into *ret.
 * Returns 0, or -EINVAL with *ret_error as for client_limit_parse_throttle(), in Smyte's words
 * where Smyte refuses ("Syntax error", "Value is not an integer or out of range", "Wrong number
 * of arguments for 'rl.reduce' command"), else with "ERR " and divvyd's: max above 2^53-1, a
 * bucket that takes more than 200 years to refill from empty, an unknown cmd. */
int client_limit_parse_reduce(const char *cmd, int argc, const ProtoSlice *argv, ClientLimit *ret,
                              const char **ret_error);

/* The peer's algorithm (p->peer) for op (ALGO_TAKE n, ALGO_PEEK) at now_usec on *st; algo_apply()
 * calls it. res: CL: allowed, credit = remaining, limit, reset = reset_after and retry =
 * retry_after as redis-cell replies them (negative ones as two's complement), or an error
 * (client_limit_throttle_error()); RL: allowed (the take fitted), credit = the tokens before
 * the take (the reply), limit = max. */
void client_limit_apply(const AlgoParams *p, AlgoOp op, uint64_t n, uint64_t now_usec, AlgoState *st,
                        AlgoResult *res);

/* The wall clock now, for RL's AT (the daemon sets it after parsing): a bucket on a time line
 * behind the wall clock (a replay of past events) is kept by the store as long as it lives on
 * that time line. Without it (0), the time line is taken as the wall clock. */
void client_limit_set_wall_clock(ClientLimit *cl, uint64_t wall_usec);

/* NULL, or the error redis-cell answers a CL.THROTTLE (or Redis a GCRA) whose result is res with (the text,
 * as for client_limit_parse_throttle()). Check it before client_limit_format_throttle(). */
const char *client_limit_throttle_error(const AlgoResult *res);

/* Formats CL.THROTTLE's (and GCRA's) reply from the result of cl's operation into out: limited (0 or 1),
 * limit (max_burst + 1), remaining, retry_after, reset_after. res is client_limit_apply()'s
 * result or a StoreHit's outputs (allowed, credit, limit, reset = reset_left, retry). Returns
 * CLIENT_LIMIT_THROTTLE_REPLY_LEN. */
size_t client_limit_format_throttle(const ClientLimit *cl, const AlgoResult *res,
                                    int64_t out[CLIENT_LIMIT_THROTTLE_REPLY_LEN]);

/* RL.*'s reply from the result of cl's operation (as above): the tokens in the bucket BEFORE
 * this call took any (Smyte's clients compare it with their cost: >= cost means allowed); DEL's
 * (ALGO_RESET): 1 if res->credit counts a live counter deleted, else 0. */
int64_t client_limit_reduce_reply(const ClientLimit *cl, const AlgoResult *res);
