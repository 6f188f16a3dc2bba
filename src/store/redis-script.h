/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * redis-script.c: the ONE Lua script the Redis/Valkey store runs per batch (redis-script.lua,
 * embedded at build time), its ARGV encoding, its reply decoding, and the counter keys
 * (issue #16). Pure: no I/O, no allocation.
 *
 * Call: EVALSHA <redis_script_sha1> <n> key1..keyN <now_usec or 0> <hit 1's args> ... <hit N's>
 * with one key per hit (redis_key_compat() or redis_key_own()), now_usec 0 meaning the
 * server's TIME, and REDIS_SCRIPT_ARGS_PER_HIT args per hit from redis_script_hit_args():
 *   compat algorithm op count creditLimit resetSeconds burst refillSeconds strict d0 d1 group
 *   at_usec window
 * (decimal; op is the AlgoOp, core/algorithm.h; at_usec 0: the call's now; window the
 * AlgoWindow). The reply is an array of
 * REDIS_SCRIPT_RESULTS_PER_HIT integers per hit: allowed (0/1) credit reset limit retry.
 *
 * Semantics: for divvyd's own keys, each hit exactly as core/algorithm.c's algo_apply() on the
 * counter and store.c's apply_hits() for the batch (hits in order see each other's changes;
 * consecutive hits with the same non-zero group are all or nothing; RESET deletes and reports
 * credit 1 if a live counter was deleted), as long as the inputs stay in the range below,
 * which redis_script_hit_args() enforces (-ERANGE). Lua's numbers are doubles: the script is
 * exact for integers below 2^53, so:
 *   - the hit's time is at most REDIS_SCRIPT_NOW_MAX (2^52 us, year 2112; the script refuses a
 *     later server TIME);
 *   - a counter's span (the longest it can take to be full again without debt: fixed window
 *     resetSeconds, sliding window 2 * resetSeconds, token bucket burst * T or the discrete
 *     refills of a full burst) is at most REDIS_SCRIPT_SPAN_MAX (2^52 - 1 us, 142 years):
 *     this refuses sliding windows of more than 2251799813 s (71 years) and token buckets
 *     whose burst takes more than 142 years to refill; the rules accept up to 100 and 200;
 *   - a count above 2^53 is sent as 2^53 (the same decision for every op: above any capacity);
 *   - DIFFERENCE: the script caps a token bucket's debt also at w0 = REDIS_SCRIPT_W0_MAX
 *     (2^53 - 1 us, year 2255), where algo_apply() caps it at one burst only (w0 <= now + 2 *
 *     tau, ALGO_DEBT_MAX_BURSTS): only a bucket whose burst takes more than (2^53 - now) / 2
 *     us to refill (114 years in 2026) reaches it, and then reset and retry count to 2255
 *     instead of now + 2 * tau.
 * For divvy 1.7's keys (compat, fixed-window rules of windows from the first hit only) the
 * script keeps divvy's layout: the
 * credit left as an integer string with a TTL set once by SETEX at the window's start; a HIT
 * answers exactly as divvy's scripts/pipe.lua (reset = Redis's TTL, which rounds to the
 * nearest second; retry = that TTL but at least 1 when denied; a key without a TTL reads
 * reset 0); TAKE/PEEK/CHARGE/REFUND mean what algo_apply() does on a fixed window, in whole
 * credits and TTL seconds (DECRBY, INCRBY capped at creditLimit, TTL kept); RESET is DEL.
 */

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#define REDIS_SCRIPT_ARGS_PER_HIT    14 /* ARGV entries per hit (after the one now_usec) */
#define REDIS_SCRIPT_RESULTS_PER_HIT 5  /* reply integers per hit */
#define REDIS_SCRIPT_HIT_ARGS_SIZE                                                                          \
        (REDIS_SCRIPT_ARGS_PER_HIT * 21) /* bytes: buf for one hit's args (20 digits + NUL each) */
#define REDIS_SCRIPT_NOW_MAX    (UINT64_C(1) << 52)       /* us: latest hit time the script takes */
#define REDIS_SCRIPT_SPAN_MAX   ((UINT64_C(1) << 52) - 1) /* us: longest counter span (see above) */
#define REDIS_SCRIPT_W0_MAX     ((UINT64_C(1) << 53) - 1) /* us: the script's cap of w0 (debt) */
#define REDIS_SCRIPT_COUNT_MAX  (UINT64_C(1) << 53)       /* a larger count is sent as this */
#define REDIS_KEY_COMPAT_PREFIX "divvy:"
#define REDIS_KEY_OWN_PREFIX    "divvyd:{"

extern const char redis_script_text[]; /* the Lua source, NUL-terminated */
extern const char redis_script_sha1[]; /* its SHA1, 40 lowercase hex digits (computed at build) */

/* Writes hit h's REDIS_SCRIPT_ARGS_PER_HIT ARGV entries as NUL-terminated decimal strings into
 * buf (REDIS_SCRIPT_HIT_ARGS_SIZE bytes always suffice) and points argv[i]/argvlen[i] at them.
 * compat: divvy 1.7's layout on this key (fixed-window rules only, windows from the first hit).
 * now_usec: the batch's time (0: the server's TIME), sent for a hit without its own at_usec.
 * Returns REDIS_SCRIPT_ARGS_PER_HIT, -ENOBUFS if buf is too small, -EINVAL for an invalid hit
 * (no limit, unknown op, algorithm or window, compat on another algorithm or an aligned
 * window), -ERANGE for a hit outside the script's range (see above). */
int redis_script_hit_args(const StoreHit *h, bool compat, uint64_t now_usec, char *buf, size_t size,
                          const char **argv, size_t *argvlen);

/* Decodes the script's reply for hits[0..n): sets res (allowed, credit, reset, limit, retry) and
 * error 0 of each. Returns 0, or -EPROTO (hits untouched) if r is not an array of
 * n * REDIS_SCRIPT_RESULTS_PER_HIT integers in their ranges (an error reply included: the
 * caller looks at r->type first for NOSCRIPT and cluster redirects). */
int redis_script_decode(const redisReply *r, StoreHit *hits, size_t n);

/* divvy 1.7's key of h: "divvy:<bucket>:<actor>:<creditLimit>:<resetSeconds>", bucket =
 * h->rule->divvy_bucket (its patterns as key=value joined by one space, values as written, the
 * keys in Node's order: UTF-16 code units, not bytes); actor empty when h has none;
 * creditLimit and resetSeconds are the rule's. Nothing is escaped, as in divvy: an actor
 * holding ':' can make the key of another rule's (config_check_divvy_keys() finds the rules
 * that can meet). Needs h->rule
 * (-EINVAL if NULL: the tests of the local store leave it NULL). Writes a NUL-terminated key
 * into buf; returns its length, or -ENOBUFS. */
int redis_key_compat(const StoreHit *h, char *buf, size_t size);

/* divvyd's own key of h: "divvyd:{<actor>}:<rule id as 32 lowercase hex>" (the hash tag puts
 * an actor's counters in one cluster slot; an empty actor gives "{}", which Redis Cluster does
 * not take as a tag: the whole key is hashed). Needs h->rule_id, not h->rule. Writes a
 * NUL-terminated key into buf; returns its length, or -ENOBUFS. */
int redis_key_own(const StoreHit *h, char *buf, size_t size);
