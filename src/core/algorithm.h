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

typedef enum Algorithm {
        ALGORITHM_FIXED_WINDOW = 0,   /* divvy's: the default */
        ALGORITHM_SLIDING_WINDOW = 1, /* two-window weighted estimate, anchored at the first hit */
        ALGORITHM_TOKEN_BUCKET = 2,   /* continuous refill computed as GCRA; "gcra" is a synonym */
        _ALGORITHM_MAX,
        _ALGORITHM_INVALID = -EINVAL,
} Algorithm;

const char *algorithm_to_string(Algorithm a);   /* "fixed-window", "sliding-window", "token-bucket" */
Algorithm algorithm_from_string(const char *s); /* also "gcra"; exact case */

typedef struct AlgoParams {
        Algorithm algorithm;
        uint64_t credit_limit;   /* > 0 */
        uint64_t reset_seconds;  /* > 0 */
        uint64_t burst;          /* token bucket: capacity; 0 = creditLimit (set by algo_params_prepare()) */
        uint64_t refill_seconds; /* token bucket: 0 = continuous refill; else discrete refills */
        bool strict;             /* token bucket: a hit on an empty bucket restarts its refill clock */
        uint64_t d0, d1;         /* derived by algo_params_prepare(); private to algorithm.c */
} AlgoParams;

/* Validates p and derives what algo_apply() needs. Returns 0, or -EINVAL with *ret_reason a
 * static sentence without file or line (the caller adds them). */
int algo_params_prepare(AlgoParams *p, const char **ret_reason);

typedef enum AlgoOp {
        ALGO_TAKE,   /* consume n iff it fits (HIT is TAKE 1) */
        ALGO_PEEK,   /* the decision TAKE n would make; writes nothing */
        ALGO_CHARGE, /* consume n unconditionally; windows clamp at 0, a token bucket goes into debt */
        ALGO_REFUND, /* give back up to n, capped at capacity; never creates or extends a window */
        _ALGO_OP_MAX,
} AlgoOp;

typedef struct AlgoState {
        uint64_t w0; /* wall-clock µs from which the counter equals an absent one; 0 = absent */
        uint64_t w1; /* the algorithm's own word */
} AlgoState;

typedef struct AlgoResult {
        bool allowed;
        bool write;      /* *st changed: the caller stores and journals it */
        uint64_t credit; /* whole credits left after the op, never negative */
        uint64_t limit;  /* the capacity: creditLimit, or burst for a token bucket */
        uint64_t reset;  /* s, rounded up: allowed, until full again; denied, until the op would pass (>= 1) */
        int64_t retry;   /* s: 0 allowed; >= 1 denied; -1 can never pass (n above the capacity) */
} AlgoResult;

/* Applies op with count n at wall-clock now_usec to *st (in and out). */
void algo_apply(const AlgoParams *p, AlgoOp op, uint64_t n, uint64_t now_usec, AlgoState *st,
                AlgoResult *res);
