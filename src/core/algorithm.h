/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * algorithm.c: the rate-limit algorithms a rule can use (issue #15), as pure integer
 * arithmetic on a counter's two-word state with the time passed in: no I/O, no clock, no
 * allocation. The store keeps the state (store/counter.h: the same two words and tag); the
 * rules validate the parameters at load with algo_params_prepare().
 *
 * creditLimit and resetSeconds keep their meaning for every algorithm: the sustained rate,
 * creditLimit credits per resetSeconds. Rounding never raises a rate.
 */

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

/* 2^53-1: the largest creditLimit and burst (= rules.h RULE_CREDIT_LIMIT_MAX) */
#define ALGO_CREDIT_MAX UINT64_C(9007199254740991)
/* 100 years: the largest resetSeconds and refillSeconds (= rules.h RULE_RESET_SECONDS_MAX) */
#define ALGO_RESET_SECONDS_MAX UINT64_C(3155760000)
/* µs (200 years): the longest a token bucket may take to fill from empty; the default burst
 * (creditLimit) always fits, as burst * T < 2 * resetSeconds */
#define ALGO_FILL_USEC_MAX (UINT64_C(2) * ALGO_RESET_SECONDS_MAX * UINT64_C(1000000))
/* µs (year 4253): the largest w0 ever written (= the store's TABLE_W0_MAX) */
#define ALGO_W0_MAX ((UINT64_C(1) << 56) - 1)
/* µs (year 3111): sliding window and token bucket take a later now_usec as this one, which keeps
 * every w0 they compute below ALGO_W0_MAX */
#define ALGO_NOW_MAX (UINT64_C(1) << 55)
/* capacities: the most debt a CHARGE leaves in a token bucket, whatever its count (up to
 * PROTO_COUNT_MAX from any client): credits go at most burst below empty, so the bucket is full
 * again within twice the time it takes to refill burst, and a TAKE 1 passes within the time to
 * refill burst + 1 credits. Fits: 2 * burst < 2^54 credits, 2 * tau <= 400 years < ALGO_W0_MAX
 * - ALGO_NOW_MAX µs. */
#define ALGO_DEBT_MAX_BURSTS 1

typedef enum Algorithm {
        ALGORITHM_FIXED_WINDOW = 0,   /* divvy's: the default */
        ALGORITHM_SLIDING_WINDOW = 1, /* two-window weighted estimate, anchored at the first hit */
        ALGORITHM_TOKEN_BUCKET = 2,   /* continuous refill computed as GCRA; "gcra" is a synonym */
        _ALGORITHM_MAX,
        _ALGORITHM_INVALID = -EINVAL,
} Algorithm;

const char *algorithm_to_string(Algorithm a);   /* "fixed-window", "sliding-window", "token-bucket" */
Algorithm algorithm_from_string(const char *s); /* also "gcra"; exact case */

/* Where a window starts (the rule attribute window): the windowed algorithms only (fixed and
 * sliding window; a token bucket has no windows). */
typedef enum AlgoWindow {
        ALGO_WINDOW_FIRST_HIT = 0, /* "first-hit": a counter's window starts at its first hit (divvy's) */
        ALGO_WINDOW_ALIGNED,       /* "aligned": every window starts at a multiple of resetSeconds since the
                                    * Unix epoch (envoyproxy/ratelimit's windows) */
        _ALGO_WINDOW_MAX,
        _ALGO_WINDOW_INVALID = -EINVAL,
} AlgoWindow;

const char *algo_window_to_string(AlgoWindow w);   /* "first-hit", "aligned" */
AlgoWindow algo_window_from_string(const char *s); /* exact case */

/* The peers' own arithmetic (client-limits.c), for CL.THROTTLE and RL.*: their counters are
 * token-bucket counters of the store whose state algo_apply() leaves to client_limit_apply(). */
typedef enum AlgoPeer {
        ALGO_PEER_NONE = 0, /* divvyd's own algorithms: every rule */
        ALGO_PEER_CELL,     /* redis-cell's GCRA */
        ALGO_PEER_SMYTE,    /* Smyte's bucket */
        ALGO_PEER_REDIS,    /* Redis's GCRA command */
} AlgoPeer;

typedef struct AlgoParams {
        Algorithm algorithm;
        uint64_t credit_limit;   /* > 0 */
        uint64_t reset_seconds;  /* > 0 */
        uint64_t burst;          /* token bucket: capacity; 0 = creditLimit (set by algo_params_prepare()) */
        uint64_t refill_seconds; /* token bucket: 0 = continuous refill; else discrete refills */
        bool strict;             /* token bucket: a hit on an empty bucket restarts its refill clock */
        AlgoWindow window;       /* fixed and sliding window: where a window starts (0: first hit) */
        uint64_t d0, d1;         /* derived by algo_params_prepare(); private to algorithm.c */
        AlgoPeer peer;           /* ALGO_PEER_NONE, or client-limits.c applies (not prepared) */
        int64_t peer_args[5];    /* private to client-limits.c */
} AlgoParams;

/* Validates p and derives what algo_apply() needs. Returns 0, or -EINVAL with *ret_reason a
 * static sentence without file or line (the caller adds them). */
int algo_params_prepare(AlgoParams *p, const char **ret_reason);

/* What a hit does to its counter: the one operation type of the store (StoreHit.op), the engine
 * and the redis store's script (redis-script.lua's op numbers are these). divvy's HIT is TAKE 1,
 * the zero value; the verb, and so the reply's shape, is the front-end's. */
typedef enum AlgoOp {
        ALGO_TAKE = 0, /* consume n iff it fits (HIT is TAKE 1) */
        ALGO_PEEK,     /* the decision TAKE n would make; writes nothing */
        ALGO_CHARGE,   /* consume n unconditionally; windows clamp at 0, a token bucket goes into debt,
                        * at most ALGO_DEBT_MAX_BURSTS * burst credits below empty */
        ALGO_REFUND,   /* give back up to n, capped at capacity; never creates or extends a window */
        ALGO_RESET,    /* delete the counter: *st becomes absent; n is not read */
        _ALGO_OP_MAX,
} AlgoOp;

/*
 * State layouts (w0 is always the wall-clock µs from which the counter equals an absent one, so
 * a counter with w0 <= now is absent for every algorithm and may be deleted; w0 = 0, w1 = 0 is
 * the absent state, and an op that empties a counter writes it):
 * - fixed window: w0 = the window's end, w1 = the credit left (divvy's layout, unchanged). The
 *   window starts at the hit that finds the counter absent, or with window aligned at the last
 *   multiple of resetSeconds since the epoch (so it ends at the next one).
 * - sliding window: w0 = the end of the window after the current one, w1 = (previous window's
 *   count << 32) | current window's count. Windows last resetSeconds, anchored at the first hit,
 *   or with window aligned at the multiples of resetSeconds since the epoch.
 *   When the current window is empty the state is written one window earlier (w0 = the current
 *   window's end, w1 = the previous count as the "current" one): the same counter for every
 *   later time, and w0 stays the exact time it becomes empty.
 * - token bucket, continuous (refillSeconds 0): w0 = the GCRA theoretical arrival time TAT
 *   (the time the bucket is full again; beyond now + burst * T it is debt), w1 = 0.
 * - token bucket, discrete (refillSeconds > 0): w1 = the deficit d >= 1 in credits (burst - the
 *   credits left; above burst it is debt), w0 = u + ceil(d / A) * refillSeconds where u is the
 *   time of the last refill (the refill clock) and A = creditLimit * refillSeconds / resetSeconds
 *   the credits per refill: w0 is the time the bucket is full, and u is recovered from it.
 * A CHARGE leaves at most ALGO_DEBT_MAX_BURSTS capacities of debt: TAT <= now + 2 * tau, d <= 2 *
 * burst (unless the state already held more, after a clock stepped back: a CHARGE never gives
 * credits back). w0 <= ALGO_W0_MAX always.
 */
typedef struct AlgoState {
        uint64_t w0; /* wall-clock µs from which the counter equals an absent one; 0 = absent */
        uint64_t w1; /* the algorithm's own word */
} AlgoState;

typedef struct AlgoResult {
        bool allowed;
        bool write;      /* *st changed: the caller stores and journals it */
        uint64_t credit; /* whole credits left after the op, never negative */
        uint64_t limit;  /* the capacity: creditLimit, or burst for a token bucket */
        uint64_t
                reset; /* s, rounded up: allowed, until full again; denied, until the op would pass (>= 1) */
        int64_t retry; /* s: 0 allowed; >= 1 denied; -1 can never pass (n above the capacity) */
} AlgoResult;

/* Applies op with count n at wall-clock now_usec to *st (in and out). p must have passed
 * algo_params_prepare(). TAKE, PEEK and REFUND set write only when *st changed (PEEK never
 * writes: *st is left untouched); CHARGE always writes. Results per op:
 * - TAKE/PEEK: as in AlgoResult; n above the capacity: denied with retry -1 and reset the
 *   seconds until full. A strict token bucket's denied TAKE restarts its refill clock (and
 *   writes); PEEK restarts nothing, so its retry is the wait as it stands.
 * - CHARGE: applied whether or not it fits; allowed says whether it fit; reset is the seconds
 *   until full again; retry is 0 if it fit, else the seconds (>= 1) until a TAKE 1 would pass.
 * - REFUND: allowed; an absent or expired counter is left absent (write false, credit = limit).
 * - RESET: *st becomes absent (write iff it was not); allowed, credit 1 if the counter was live
 *   (w0 > now_usec) else 0, limit creditLimit, reset and retry 0. The peers' counters alike. */
void algo_apply(const AlgoParams *p, AlgoOp op, uint64_t n, uint64_t now_usec, AlgoState *st,
                AlgoResult *res);
