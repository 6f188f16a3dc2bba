/* SPDX-License-Identifier: MIT */
/* algorithm.c: the rate-limit algorithms with an injected clock. Hand-computed tables for the
 * edges (window ends to the microsecond, rounding of reset and retry, burst, debt, strict,
 * refills, refund caps, peek, parameter validation), then long random sequences (seeded)
 * compared op by op with simple independent models: the fixed window's HIT against the formula
 * store.c used before algorithm.c existed (copied verbatim), a sliding window kept as a count per
 * window with exact rational comparisons and retry/reset found by bisection, GCRA against a
 * leaky-bucket meter (water level and last update), and discrete refills against Smyte's
 * algorithm as its post writes it (value, lastUpdate). */

#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/algorithm.h"
#include "core/client-limits.h"
#include "core/protocol.h"
#include "check-run.h"

#define SEC       UINT64_C(1000000)
#define T0        (UINT64_C(1764000000) * SEC) /* a wall-clock start, 2025 */
#define NO_RETRY  INT64_MIN                    /* in tables: don't check retry */
#define ANY_RESET UINT64_MAX                   /* in tables: don't check reset */

typedef unsigned __int128 u128;

static AlgoParams params_window(Algorithm a, uint64_t limit, uint64_t reset, uint64_t burst, uint64_t refill,
                                bool strict, AlgoWindow window) {
        AlgoParams p = { .algorithm = a,
                         .credit_limit = limit,
                         .reset_seconds = reset,
                         .burst = burst,
                         .refill_seconds = refill,
                         .strict = strict,
                         .window = window };
        const char *why = NULL;

        ck_assert_msg(algo_params_prepare(&p, &why) == 0, "prepare: %s", why ? why : "?");
        return p;
}

static AlgoParams params(Algorithm a, uint64_t limit, uint64_t reset, uint64_t burst, uint64_t refill,
                         bool strict) {
        return params_window(a, limit, reset, burst, refill, strict, ALGO_WINDOW_FIRST_HIT);
}

/* ---- names ---------------------------------------------------------------------- */

START_TEST (test_names) {
        ck_assert_str_eq(algorithm_to_string(ALGORITHM_FIXED_WINDOW), "fixed-window");
        ck_assert_str_eq(algorithm_to_string(ALGORITHM_SLIDING_WINDOW), "sliding-window");
        ck_assert_str_eq(algorithm_to_string(ALGORITHM_TOKEN_BUCKET), "token-bucket");
        ck_assert_ptr_null(algorithm_to_string(_ALGORITHM_MAX));
        ck_assert_ptr_null(algorithm_to_string(_ALGORITHM_INVALID));
        for (Algorithm a = 0; a < _ALGORITHM_MAX; a++)
                ck_assert_int_eq(algorithm_from_string(algorithm_to_string(a)), a);
        ck_assert_int_eq(algorithm_from_string("gcra"), ALGORITHM_TOKEN_BUCKET);
        ck_assert_int_eq(algorithm_from_string("GCRA"), _ALGORITHM_INVALID);
        ck_assert_int_eq(algorithm_from_string("token-bucket "), _ALGORITHM_INVALID);
        ck_assert_int_eq(algorithm_from_string(""), _ALGORITHM_INVALID);
        ck_assert_int_eq(algorithm_from_string(NULL), _ALGORITHM_INVALID);
}
END_TEST

/* ---- algo_params_prepare ---------------------------------------------------------- */

static const struct {
        Algorithm algorithm;
        uint64_t limit, reset, burst, refill;
        bool strict;
        const char *reason; /* a substring of the reason; NULL: accepted */
        uint64_t burst_after, d0, d1;
} prepare_cases[] = {
        { ALGORITHM_FIXED_WINDOW, 10, 60, 0, 0, false, NULL, 10, 0, 0 },
        { ALGORITHM_FIXED_WINDOW, 10, 60, 10, 0, false, NULL, 10, 0, 0 }, /* burst = creditLimit: default */
        { ALGORITHM_FIXED_WINDOW, 10, 60, 11, 0, false, "burst applies only", 0, 0, 0 },
        { ALGORITHM_FIXED_WINDOW, 10, 60, 0, 6, false, "refillSeconds applies only", 0, 0, 0 },
        { ALGORITHM_FIXED_WINDOW, 10, 60, 0, 0, true, "strict applies only", 0, 0, 0 },
        { ALGORITHM_FIXED_WINDOW, 0, 60, 0, 0, false, "creditLimit must be between", 0, 0, 0 },
        { ALGORITHM_FIXED_WINDOW, ALGO_CREDIT_MAX, 60, 0, 0, false, NULL, ALGO_CREDIT_MAX, 0, 0 },
        { ALGORITHM_FIXED_WINDOW, ALGO_CREDIT_MAX + 1, 60, 0, 0, false, "creditLimit must be between", 0, 0,
          0 },
        { ALGORITHM_FIXED_WINDOW, 10, 0, 0, 0, false, "resetSeconds must be between", 0, 0, 0 },
        { ALGORITHM_FIXED_WINDOW, 10, ALGO_RESET_SECONDS_MAX, 0, 0, false, NULL, 10, 0, 0 },
        { ALGORITHM_FIXED_WINDOW, 10, ALGO_RESET_SECONDS_MAX + 1, 0, 0, false, "resetSeconds must be", 0, 0,
          0 },
        { (Algorithm) 3, 10, 60, 0, 0, false, "unknown algorithm", 0, 0, 0 },
        { ALGORITHM_SLIDING_WINDOW, 10, 60, 0, 0, false, NULL, 10, 60 * SEC, 0 },
        { ALGORITHM_SLIDING_WINDOW, UINT32_MAX, 60, 0, 0, false, NULL, UINT32_MAX, 60 * SEC, 0 },
        { ALGORITHM_SLIDING_WINDOW, UINT64_C(1) << 32, 60, 0, 0, false, "above 4294967295", 0, 0, 0 },
        { ALGORITHM_SLIDING_WINDOW, 10, 60, 20, 0, false, "burst applies only", 0, 0, 0 },
        /* token bucket: T = ceil(reset * 1e6 / limit), tau = burst * T */
        { ALGORITHM_TOKEN_BUCKET, 10, 60, 0, 0, false, NULL, 10, 6 * SEC, 60 * SEC },
        { ALGORITHM_TOKEN_BUCKET, 3, 1, 0, 0, false, NULL, 3, 333334, 1000002 }, /* rounded up */
        { ALGORITHM_TOKEN_BUCKET, 3, 1, 7, 0, false, NULL, 7, 333334, 7 * 333334 },
        { ALGORITHM_TOKEN_BUCKET, 1000000, 1, 0, 0, false, NULL, 1000000, 1, 1000000 }, /* T = 1 µs */
        { ALGORITHM_TOKEN_BUCKET, 1000001, 1, 0, 0, false, "interval under 1 microsecond", 0, 0, 0 },
        { ALGORITHM_TOKEN_BUCKET, 5000000000, 1, 0, 0, false, "interval under 1 microsecond", 0, 0, 0 },
        { ALGORITHM_TOKEN_BUCKET, 10, 60, ALGO_CREDIT_MAX + 1, 0, false, "burst must be between", 0, 0, 0 },
        /* the largest rate and reset: the default burst always fits (tau < 2 * reset) */
        { ALGORITHM_TOKEN_BUCKET, 2000000000000000, ALGO_RESET_SECONDS_MAX, 0, 0, false, NULL,
          2000000000000000, 2, 4000000000000000 },
        { ALGORITHM_TOKEN_BUCKET, ALGO_CREDIT_MAX, ALGO_RESET_SECONDS_MAX, 0, 0, false, "interval under", 0,
          0, 0 },
        { ALGORITHM_TOKEN_BUCKET, 1, ALGO_RESET_SECONDS_MAX, 3, 0, false, "more than 200 years", 0, 0, 0 },
        { ALGORITHM_TOKEN_BUCKET, 1, ALGO_RESET_SECONDS_MAX, 2, 0, false, NULL, 2,
          ALGO_RESET_SECONDS_MAX *SEC, 2 * ALGO_RESET_SECONDS_MAX *SEC }, /* exactly 200 years */
        { ALGORITHM_TOKEN_BUCKET, 1, ALGO_RESET_SECONDS_MAX, 1, 0, false, NULL, 1,
          ALGO_RESET_SECONDS_MAX *SEC, ALGO_RESET_SECONDS_MAX *SEC },
        { ALGORITHM_TOKEN_BUCKET, 1, 1, ALGO_CREDIT_MAX, 0, false, "more than 200 years", 0, 0, 0 },
        /* discrete refills: A = limit * refill / reset must be whole */
        { ALGORITHM_TOKEN_BUCKET, 10, 60, 0, 30, false, NULL, 10, 30 * SEC, 5 },
        { ALGORITHM_TOKEN_BUCKET, 10, 60, 0, 6, true, NULL, 10, 6 * SEC, 1 },
        { ALGORITHM_TOKEN_BUCKET, 10, 60, 0, 7, false, "does not divide", 0, 0, 0 },
        { ALGORITHM_TOKEN_BUCKET, 10, 60, 0, 3, false, "does not divide", 0, 0, 0 }, /* 1/2 credit */
        { ALGORITHM_TOKEN_BUCKET, 10, 60, 0, 120, false, NULL, 10, 120 * SEC, 20 },
        { ALGORITHM_TOKEN_BUCKET, 10, 60, 0, ALGO_RESET_SECONDS_MAX + 1, false, "refillSeconds must be", 0,
          0, 0 },
        { ALGORITHM_TOKEN_BUCKET, ALGO_CREDIT_MAX, ALGO_RESET_SECONDS_MAX / 2, 0, ALGO_RESET_SECONDS_MAX,
          false, "interval under", 0, 0, 0 },
        { ALGORITHM_TOKEN_BUCKET, 1, ALGO_RESET_SECONDS_MAX, 3, ALGO_RESET_SECONDS_MAX, false,
          "more than 200 years", 0, 0, 0 }, /* 3 refills of 1 every 100 years */
        { ALGORITHM_TOKEN_BUCKET, 1, ALGO_RESET_SECONDS_MAX, 2, ALGO_RESET_SECONDS_MAX, false, NULL, 2,
          ALGO_RESET_SECONDS_MAX *SEC, 1 },
        { ALGORITHM_TOKEN_BUCKET, 1, 1, 3, ALGO_RESET_SECONDS_MAX, false, NULL, 3,
          ALGO_RESET_SECONDS_MAX *SEC, ALGO_RESET_SECONDS_MAX }, /* one refill fills it */
        { ALGORITHM_TOKEN_BUCKET, 1000000, 1, 0, ALGO_RESET_SECONDS_MAX, false, NULL, 1000000,
          ALGO_RESET_SECONDS_MAX *SEC, 1000000 * ALGO_RESET_SECONDS_MAX }, /* the largest refill amount */
};

START_TEST (test_prepare) {
        const __typeof__(prepare_cases[0]) *c = prepare_cases + _i;
        AlgoParams p = { .algorithm = c->algorithm,
                         .credit_limit = c->limit,
                         .reset_seconds = c->reset,
                         .burst = c->burst,
                         .refill_seconds = c->refill,
                         .strict = c->strict };
        const char *why = NULL;
        int r = algo_params_prepare(&p, &why);

        if (c->reason) {
                ck_assert_int_eq(r, -EINVAL);
                ck_assert_ptr_nonnull(why);
                ck_assert_msg(strstr(why, c->reason), "case %d: \"%s\", expected \"%s\"", _i, why,
                              c->reason);
                ck_assert_msg(!strstr(why, ":"), "a reason carries no file:line: %s", why);
                return;
        }
        ck_assert_msg(r == 0, "case %d refused: %s", _i, why ? why : "?");
        ck_assert_uint_eq(p.burst, c->burst_after);
        ck_assert_uint_eq(p.d0, c->d0);
        ck_assert_uint_eq(p.d1, c->d1);
        /* idempotent: a prepared AlgoParams prepares again to the same */
        AlgoParams q = p;
        ck_assert_int_eq(algo_params_prepare(&q, &why), 0);
        ck_assert(memcmp(&p, &q, sizeof p) == 0);
}
END_TEST

/* window (issue #34): aligned on the windowed algorithms only; a value out of the enum is refused. */
START_TEST (test_prepare_window) {
        static const Algorithm windowed[] = { ALGORITHM_FIXED_WINDOW, ALGORITHM_SLIDING_WINDOW };
        AlgoParams p;
        const char *why = NULL;

        for (size_t i = 0; i < sizeof windowed / sizeof windowed[0]; i++) {
                p = (AlgoParams){ .algorithm = windowed[i],
                                  .credit_limit = 5,
                                  .reset_seconds = 60,
                                  .window = ALGO_WINDOW_ALIGNED };
                ck_assert_int_eq(algo_params_prepare(&p, &why), 0);
                ck_assert_int_eq(p.window, ALGO_WINDOW_ALIGNED);
        }
        for (uint64_t refill = 0; refill <= 12; refill += 12) {
                p = (AlgoParams){ .algorithm = ALGORITHM_TOKEN_BUCKET,
                                  .credit_limit = 5,
                                  .reset_seconds = 60,
                                  .refill_seconds = refill,
                                  .window = ALGO_WINDOW_ALIGNED };
                ck_assert_int_eq(algo_params_prepare(&p, &why), -EINVAL);
                ck_assert_str_eq(why,
                                 "window aligned applies only to algorithms fixed-window and sliding-window "
                                 "(a token bucket has no windows)");
                p.window = ALGO_WINDOW_FIRST_HIT;
                ck_assert_int_eq(algo_params_prepare(&p, &why), 0);
        }
        p = (AlgoParams){ .algorithm = ALGORITHM_FIXED_WINDOW,
                          .credit_limit = 5,
                          .reset_seconds = 60,
                          .window = _ALGO_WINDOW_MAX };
        ck_assert_int_eq(algo_params_prepare(&p, &why), -EINVAL);
        ck_assert_str_eq(why, "unknown window");
}
END_TEST

/* The aligned fixed window at the edges of time: the last window before ALGO_W0_MAX is cut
 * there, as a first-hit window is, and a window of 100 years is aligned to the epoch. */
START_TEST (test_aligned_edges) {
        AlgoParams p = params_window(ALGORITHM_FIXED_WINDOW, 2, ALGO_RESET_SECONDS_MAX, 0, 0, false,
                                     ALGO_WINDOW_ALIGNED);
        uint64_t span = ALGO_RESET_SECONDS_MAX * SEC;
        AlgoState st = { 0, 0 };
        AlgoResult res;

        algo_apply(&p, ALGO_TAKE, 1, T0, &st, &res);
        ck_assert(res.allowed);
        ck_assert_uint_eq(st.w0, span); /* 1970 + 100 years */
        ck_assert_uint_eq(res.reset, (span - T0) / SEC);
        st = (AlgoState){ 0, 0 };
        algo_apply(&p, ALGO_TAKE, 1, ALGO_W0_MAX - 5, &st, &res);
        ck_assert(res.allowed);
        ck_assert_uint_eq(st.w0, ALGO_W0_MAX);
        ck_assert_uint_eq(res.reset, 1);
        /* a day, as envoyproxy/ratelimit's DAY: midnight UTC to midnight UTC */
        p = params_window(ALGORITHM_FIXED_WINDOW, 2, 86400, 0, 0, false, ALGO_WINDOW_ALIGNED);
        st = (AlgoState){ 0, 0 };
        algo_apply(&p, ALGO_TAKE, 1, T0 + 3600 * SEC, &st, &res);
        ck_assert_uint_eq(st.w0 % (86400 * SEC), 0);
        ck_assert_uint_eq(st.w0, (T0 / (86400 * SEC) + 1) * 86400 * SEC);
}
END_TEST

START_TEST (test_prepare_null) {
        ck_assert_int_eq(algo_params_prepare(NULL, NULL), -EINVAL);
        AlgoParams p = { .algorithm = ALGORITHM_FIXED_WINDOW };
        ck_assert_int_eq(algo_params_prepare(&p, NULL), -EINVAL); /* no reason pointer: fine */
}
END_TEST

/* ---- hand-computed steps ------------------------------------------------------------ */

typedef struct Step {
        int64_t at; /* µs after T0 */
        AlgoOp op;
        uint64_t n;
        bool allowed;
        uint64_t credit;
        uint64_t reset; /* ANY_RESET: not checked */
        int64_t retry;  /* NO_RETRY: not checked */
} Step;

#define END_STEPS                                                                                           \
        { -1, 0, 0, false, 0, 0, 0 }

typedef struct Scenario {
        const char *name;
        Algorithm algorithm;
        uint64_t limit, reset, burst, refill;
        bool strict;
        Step steps[16];
        AlgoWindow window;
} Scenario;

static const Scenario scenarios[] = {
        /* window aligned (issue #34), 3 per 10 s: T0 is a multiple of 10 s, so the windows are
         * [T0, T0 + 10 s), [T0 + 10 s, T0 + 20 s), ... whenever the first hit comes */
        { "fixed aligned: windows at multiples of resetSeconds",
          ALGORITHM_FIXED_WINDOW,
          3,
          10,
          0,
          0,
          false,
          { { 4000000, ALGO_PEEK, 1, true, 2, 6, 0 }, /* the window that would open ends at T0 + 10 s */
            { 4000000, ALGO_TAKE, 1, true, 2, 6, 0 }, /* not 10 s after the first hit */
            { 4000001, ALGO_TAKE, 1, true, 1, 6, 0 }, /* 5.999999 s left: rounded up */
            { 9000000, ALGO_TAKE, 1, true, 0, 1, 0 },
            { 9500000, ALGO_TAKE, 1, false, 0, 1, 1 },  /* retry: until the aligned end */
            { 10000000, ALGO_TAKE, 1, true, 2, 10, 0 }, /* at the boundary: a whole new window */
            { 19999999, ALGO_PEEK, 2, true, 0, 1, 0 },
            { 23000000, ALGO_CHARGE, 5, false, 0, 7, 7 }, /* a charge opens the aligned window too */
            { 25000000, ALGO_REFUND, 1, true, 1, 5, 0 },
            { 29999999, ALGO_TAKE, 2, false, 1, 1, 1 },
            { 30000000, ALGO_TAKE, 3, true, 0, 10, 0 },
            END_STEPS },
          ALGO_WINDOW_ALIGNED },
        { "sliding aligned: windows at multiples of resetSeconds",
          ALGORITHM_SLIDING_WINDOW,
          10,
          10,
          0,
          0,
          false,
          { { 4000000, ALGO_TAKE, 4, true, 6, 16, 0 },  /* window [T0, T0 + 10 s): full again at + 20 s */
            { 12000000, ALGO_PEEK, 6, true, 0, 18, 0 }, /* 4 * 8 / 10 = 3.2, rounded up: 4 */
            { 12000000, ALGO_TAKE, 7, false, 6, 1, 1 }, /* 4 * (20 - t) / 10 <= 3: t >= 12.5 s */
            { 12500000, ALGO_PEEK, 7, true, 0, 18, 0 },
            { 25000000, ALGO_TAKE, 1, true, 9, 15, 0 }, /* [T0 + 20 s, + 30 s): full again at + 40 s */
            END_STEPS },
          ALGO_WINDOW_ALIGNED },
        /* divvy's fixed window, 3 per 10 s */
        { "fixed: first hit, window end to the µs",
          ALGORITHM_FIXED_WINDOW,
          3,
          10,
          0,
          0,
          false,
          { { 0, ALGO_TAKE, 1, true, 2, 10, 0 },
            { 1, ALGO_TAKE, 1, true, 1, 10, 0 },        /* 9.999999 s left: rounded up */
            { 1000000, ALGO_TAKE, 1, true, 0, 9, 0 },   /* 9 s exactly */
            { 1000001, ALGO_TAKE, 1, false, 0, 9, 9 },  /* denied: credit 0, retry = reset */
            { 9999999, ALGO_TAKE, 1, false, 0, 1, 1 },  /* 1 µs before the end: >= 1 */
            { 10000000, ALGO_TAKE, 1, true, 2, 10, 0 }, /* exactly at the end: a fresh window */
            END_STEPS } },
        { "fixed: take n, peek, charge, refund",
          ALGORITHM_FIXED_WINDOW,
          5,
          60,
          0,
          0,
          false,
          { { 0, ALGO_PEEK, 5, true, 0, 60, 0 },        /* a fresh window shows limit - n */
            { 0, ALGO_PEEK, 6, false, 5, 0, -1 },       /* n > limit: never */
            { 0, ALGO_PEEK, 0, true, 5, 0, 0 },         /* absent, nothing taken: full */
            { 0, ALGO_REFUND, 3, true, 5, 0, 0 },       /* absent: a no-op, no window created */
            { 0, ALGO_TAKE, 3, true, 2, 60, 0 },        /* the window starts here */
            { 500000, ALGO_TAKE, 3, false, 2, 60, 60 }, /* more than left: nothing taken */
            { 500000, ALGO_PEEK, 2, true, 0, 60, 0 },
            { 500000, ALGO_CHARGE, 4, false, 0, 60, 60 }, /* clamps at 0 */
            { 1000000, ALGO_REFUND, 2, true, 2, 59, 0 },
            { 1000000, ALGO_REFUND, 10, true, 5, 59, 0 }, /* capped at the limit */
            { 1000000, ALGO_TAKE, 5, true, 0, 59, 0 },    /* the window did not move */
            { 60000000, ALGO_CHARGE, 2, true, 3, 60, 0 }, /* creates a window */
            { 120000000, ALGO_REFUND, 1, true, 5, 0, 0 }, /* expired: no-op */
            END_STEPS } },
        /* sliding window: 10 per 10 s, windows anchored at the first hit (T0) */
        { "sliding: weighted estimate, rounded up",
          ALGORITHM_SLIDING_WINDOW,
          10,
          10,
          0,
          0,
          false,
          { { 0, ALGO_TAKE, 4, true, 6, 20, 0 }, /* full again once the next window is over */
            { 9000000, ALGO_TAKE, 6, true, 0, 11, 0 },
            { 9000000, ALGO_TAKE, 1, false, 0, 2, 2 },  /* next window: 10 * (10 - e) / 10 <= 9: e >= 1 */
            { 10000000, ALGO_PEEK, 1, false, 0, 1, 1 }, /* e = 0: estimate 10 */
            { 10000001, ALGO_TAKE, 1, false, 0, 1,
              1 }, /* 10 * 9.999999 / 10 rounds up to 10: no extra hit */
            { 10500000, ALGO_PEEK, 2, false, 0, 2, 2 },  /* 10 * (10 - e) / 10 <= 8: e >= 2 s */
            { 11000000, ALGO_TAKE, 1, true, 0, 19, 0 },  /* 9 + 1; full once the window after is over */
            { 15500000, ALGO_PEEK, 2, true, 2, 15, 0 },  /* ceil(4.5) + 1 = 6: 4 left */
            { 29999999, ALGO_PEEK, 10, false, 9, 1, 1 }, /* prev 1 weighted 1e-7: estimate 1 */
            { 30000000, ALGO_PEEK, 10, true, 0, 20, 0 }, /* w0 reached: absent */
            END_STEPS } },
        { "sliding: charge clamps, refund",
          ALGORITHM_SLIDING_WINDOW,
          4,
          2,
          0,
          0,
          false,
          { { 0, ALGO_CHARGE, 9, false, 0, 4,
              3 }, /* clamps: 4 counted; TAKE 1 once 1/4 of the next window is past */
            { 1000000, ALGO_REFUND, 1, true, 1, 3, 0 },
            { 2000000, ALGO_REFUND, 1, true, 2, 2,
              0 }, /* from the previous window, cur 0: full at its end */
            { 2000000, ALGO_REFUND, 5, true, 4, 0, 0 }, /* emptied: absent */
            { 2000000, ALGO_REFUND, 5, true, 4, 0, 0 },
            END_STEPS } },
        /* token bucket as GCRA: 10 per 10 s: T = 1 s, tau = burst * T */
        { "gcra: exactly burst at once",
          ALGORITHM_TOKEN_BUCKET,
          10,
          10,
          0,
          0,
          false,
          { { 0, ALGO_TAKE, 9, true, 1, 9, 0 },
            { 0, ALGO_TAKE, 1, true, 0, 10, 0 },
            { 0, ALGO_TAKE, 1, false, 0, 1, 1 },
            { 999999, ALGO_TAKE, 1, false, 0, 1, 1 }, /* 1 µs short */
            { 1000000, ALGO_TAKE, 1, true, 0, 10, 0 },
            { 1000000, ALGO_TAKE, 11, false, 0, 10, -1 }, /* above burst: never */
            { 20000000, ALGO_PEEK, 10, true, 0, 10, 0 },  /* full again */
            END_STEPS } },
        { "gcra: burst larger than the rate",
          ALGORITHM_TOKEN_BUCKET,
          1,
          2,
          3,
          0,
          false,
          { { 0, ALGO_TAKE, 3, true, 0, 6, 0 }, /* T = 2 s */
            { 1, ALGO_TAKE, 1, false, 0, 2, 2 },
            { 2000000, ALGO_TAKE, 1, true, 0, 6, 0 },
            END_STEPS } },
        { "gcra: debt after charge",
          ALGORITHM_TOKEN_BUCKET,
          10,
          10,
          0,
          0,
          false,
          { { 0, ALGO_CHARGE, 5, true, 5, 5, 0 },
            { 0, ALGO_CHARGE, 12, false, 0, 17, 8 },         /* 7 s of debt: TAKE 1 waits 8 s */
            { 0, ALGO_CHARGE, 25, false, 0, 20, 11 },        /* capped: 10 credits (one burst) of debt */
            { 5000000, ALGO_CHARGE, 100, false, 0, 20, 11 }, /* capped from now: full at 25 s */
            { 5000000, ALGO_PEEK, 1, false, 0, 11, 11 },
            { 15000000, ALGO_TAKE, 1, false, 0, 1, 1 },
            { 16000000, ALGO_TAKE, 1, true, 0, 10, 0 },
            { 16000000, ALGO_REFUND, 3, true, 3, 7, 0 },
            { 16000000, ALGO_REFUND, 100, true, 10, 0, 0 }, /* never below now: full */
            { 16000000, ALGO_CHARGE, 4, true, 6, 4, 0 },
            END_STEPS } },
        { "gcra: strict restarts the refill clock",
          ALGORITHM_TOKEN_BUCKET,
          1,
          10,
          0,
          0,
          true,
          { { 0, ALGO_TAKE, 1, true, 0, 10, 0 },
            { 5000000, ALGO_PEEK, 1, false, 0, 5, 5 },    /* a peek restarts nothing */
            { 5000000, ALGO_TAKE, 1, false, 0, 10, 10 },  /* restarted: 10 s from now */
            { 14999999, ALGO_TAKE, 1, false, 0, 10, 10 }, /* full at 24.999999 s */
            { 24999998, ALGO_TAKE, 1, false, 0, 10, 10 }, /* 1 µs short: 10 s more */
            { 34999998, ALGO_TAKE, 1, true, 0, 10, 0 },
            END_STEPS } },
        { "gcra: not strict",
          ALGORITHM_TOKEN_BUCKET,
          1,
          10,
          0,
          0,
          false,
          { { 0, ALGO_TAKE, 1, true, 0, 10, 0 },
            { 5000000, ALGO_TAKE, 1, false, 0, 5, 5 },
            { 9999999, ALGO_TAKE, 1, false, 0, 1, 1 },
            { 10000000, ALGO_TAKE, 1, true, 0, 10, 0 },
            END_STEPS } },
        { "gcra: interval rounded up",
          ALGORITHM_TOKEN_BUCKET,
          3,
          1,
          0,
          0,
          false,
          { { 0, ALGO_TAKE, 3, true, 0, 2, 0 },        /* TAT = 1.000002 s: 2 s rounded up */
            { 1000000, ALGO_TAKE, 3, false, 2, 1, 1 }, /* 2 µs short of 3 credits */
            { 1000002, ALGO_TAKE, 3, true, 0, 2, 0 },
            END_STEPS } },
        /* discrete refills: 10 per 60 s as 5 every 30 s */
        { "refills: 5 every 30 s",
          ALGORITHM_TOKEN_BUCKET,
          10,
          60,
          0,
          30,
          false,
          { { 0, ALGO_TAKE, 10, true, 0, 60, 0 },
            { 29999999, ALGO_TAKE, 1, false, 0, 1, 1 },
            { 30000000, ALGO_PEEK, 5, true, 0, 60, 0 }, /* one refill: 5 */
            { 30000000, ALGO_TAKE, 6, false, 5, 30, 30 },
            { 59999999, ALGO_TAKE, 2, true, 3, 31, 0 },       /* full at 90 s */
            { 60000000, ALGO_TAKE, 1, true, 7, 30, 0 },       /* refill at 60 s: 8, minus 1; full at 90 s */
            { 60000000, ALGO_CHARGE, 12, false, 0, 90, 60 },  /* deficit 3 + 12: 5 of debt */
            { 60000000, ALGO_CHARGE, 20, false, 0, 120, 90 }, /* deficit capped at 20: 10 of debt */
            { 60000000, ALGO_PEEK, 0, false, 0, 60, 60 },     /* in debt until 2 refills */
            { 60000000, ALGO_REFUND, 4, true, 0, 120, 0 },
            { 60000000, ALGO_REFUND, 40, true, 10, 0, 0 },
            END_STEPS } },
        { "refills: strict",
          ALGORITHM_TOKEN_BUCKET,
          10,
          60,
          0,
          30,
          true,
          { { 0, ALGO_TAKE, 10, true, 0, 60, 0 },
            { 29000000, ALGO_TAKE, 1, false, 0, 30, 30 }, /* the clock restarts at 29 s */
            { 30000000, ALGO_TAKE, 1, false, 0, 30, 30 }, /* and at 30 s */
            { 59999999, ALGO_PEEK, 1, false, 0, 1, 1 },   /* a peek restarts nothing */
            { 60000000, ALGO_TAKE, 1, true, 4, 60, 0 },
            END_STEPS } },
};

START_TEST (test_scenario) {
        const Scenario *sc = scenarios + _i;
        AlgoParams p = params_window(sc->algorithm, sc->limit, sc->reset, sc->burst, sc->refill, sc->strict,
                                     sc->window);
        AlgoState st = { 0, 0 };

        for (size_t k = 0; sc->steps[k].at >= 0; k++) {
                const Step *s = sc->steps + k;
                AlgoState before = st;
                AlgoResult res;

                algo_apply(&p, s->op, s->n, T0 + (uint64_t) s->at, &st, &res);
                ck_assert_msg(res.allowed == s->allowed && res.credit == s->credit &&
                                      (s->reset == ANY_RESET || res.reset == s->reset) &&
                                      (s->retry == NO_RETRY || res.retry == s->retry),
                              "%s, step %zu: allowed %d credit %" PRIu64 " reset %" PRIu64 " retry %" PRId64
                              ", expected %d %" PRIu64 " %" PRIu64 " %" PRId64,
                              sc->name, k, res.allowed, res.credit, res.reset, res.retry, s->allowed,
                              s->credit, s->reset, s->retry);
                ck_assert_uint_eq(res.limit, p.burst);
                if (s->op == ALGO_PEEK) {
                        ck_assert(!res.write);
                        ck_assert(st.w0 == before.w0 && st.w1 == before.w1);
                } else if (s->op == ALGO_CHARGE)
                        ck_assert(res.write);
                else
                        ck_assert(res.write == (st.w0 != before.w0 || st.w1 != before.w1));
        }
}
END_TEST

/* ---- the fixed window's HIT is the old store formula -------------------------------------- */

/* store.c before algorithm.c, verbatim but for the table plumbing. */
#define TABLE_W0_MAX ((UINT64_C(1) << 56) - 1)
static uint64_t old_seconds_left(uint64_t expiry_usec, uint64_t now_usec) {
        uint64_t d = expiry_usec - now_usec;

        return d / SEC + (d % SEC != 0);
}
static uint64_t old_window_end(uint64_t now_usec, uint64_t reset_seconds) {
        uint64_t d = reset_seconds > UINT64_MAX / SEC ? UINT64_MAX : reset_seconds * SEC;
        uint64_t end = now_usec > UINT64_MAX - d ? UINT64_MAX : now_usec + d;

        return end < TABLE_W0_MAX ? end : TABLE_W0_MAX;
}
static void old_hit(bool created, AlgoState *st, uint64_t limit, uint64_t reset, uint64_t now_usec,
                    bool *allowed, uint64_t *credit, uint64_t *reset_left) {
        if (created || st->w0 <= now_usec) {
                *st = (AlgoState){ .w0 = old_window_end(now_usec, reset), .w1 = limit - 1 };
        } else if (st->w1 > 0)
                st->w1--;
        else {
                *allowed = false;
                *credit = 0;
                *reset_left = old_seconds_left(st->w0, now_usec);
                return;
        }
        *allowed = true;
        *credit = st->w1;
        *reset_left = old_seconds_left(st->w0, now_usec);
}

static uint64_t rnd(uint64_t *s) {
        /* xorshift64*: reproducible from the seed */
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        return *s * UINT64_C(2685821657736338717);
}

static uint64_t rnd_below(uint64_t *s, uint64_t n) {
        return n ? rnd(s) % n : 0;
}

START_TEST (test_fixed_hit_is_old_formula) {
        static const uint64_t limits[] = { 1, 2, 3, 7, 1000, ALGO_CREDIT_MAX };
        static const uint64_t resets[] = { 1, 2, 60, 86400, ALGO_RESET_SECONDS_MAX };
        uint64_t seed = 0x5eed0000 + (uint64_t) _i, checked = 0;

        for (size_t li = 0; li < sizeof limits / sizeof limits[0]; li++)
                for (size_t ri = 0; ri < sizeof resets / sizeof resets[0]; ri++) {
                        uint64_t limit = limits[li], reset = resets[ri];
                        AlgoParams p = params(ALGORITHM_FIXED_WINDOW, limit, reset, 0, 0, false);
                        /* mostly today, sometimes near the table's largest w0 or beyond it */
                        uint64_t now = _i == 3 ? TABLE_W0_MAX - rnd_below(&seed, 3 * reset * SEC)
                                               : T0 + rnd_below(&seed, 1000 * SEC);
                        AlgoState st = { 0, 0 }, old = { 0, 0 };
                        bool created = true;

                        for (int k = 0; k < 400; k++) {
                                bool a_old = false;
                                uint64_t c_old = 0, r_old = 0;
                                AlgoResult res;

                                switch (rnd_below(&seed, 6)) {
                                case 0:
                                        break;
                                case 1:
                                        now += rnd_below(&seed, 3 * reset * SEC / limit + 2);
                                        break;
                                case 2: /* the window's end, to the µs */
                                        if (st.w0 > 0)
                                                now = st.w0 - 1 + rnd_below(&seed, 3);
                                        break;
                                case 3:
                                        now += rnd_below(&seed, 2 * reset * SEC);
                                        break;
                                default:
                                        now += rnd_below(&seed, 1000);
                                }
                                old_hit(created, &old, limit, reset, now, &a_old, &c_old, &r_old);
                                algo_apply(&p, ALGO_TAKE, 1, now, &st, &res);
                                created = false;
                                ck_assert_msg(res.allowed == a_old && res.credit == c_old &&
                                                      res.reset == r_old,
                                              "limit %" PRIu64 " reset %" PRIu64 " now %" PRIu64
                                              ": %d %" PRIu64 " %" PRIu64 ", old %d %" PRIu64 " %" PRIu64,
                                              limit, reset, now, res.allowed, res.credit, res.reset, a_old,
                                              c_old, r_old);
                                ck_assert(st.w0 == old.w0 && st.w1 == old.w1);
                                ck_assert_msg(res.write == a_old,
                                              "write %d allowed %d limit %" PRIu64 " reset %" PRIu64 " k %d",
                                              res.write, a_old, limit, reset,
                                              k); /* denied: nothing to journal */
                                ck_assert_int_eq(res.retry, a_old ? 0 : (int64_t) r_old);
                                ck_assert_uint_eq(res.limit, limit);
                                checked++;
                        }
                }
        ck_assert_uint_eq(checked, 6 * 5 * 400);
}
END_TEST

/* ---- independent models ------------------------------------------------------------------ */

typedef struct Expect {
        bool allowed;
        uint64_t credit, reset;
        int64_t retry;
} Expect;

static uint64_t up(uint64_t usec) {
        return usec / SEC + (usec % SEC != 0);
}

static int64_t retry_up(uint64_t usec) {
        return (int64_t) (up(usec) ? up(usec) : 1);
}

/* Fixed window for every op: the window's end and its credit. */
typedef struct FixedModel {
        bool live;
        uint64_t end, credit;
} FixedModel;

static Expect fixed_model(FixedModel *m, uint64_t limit, uint64_t reset, bool aligned, AlgoOp op, uint64_t n,
                          uint64_t now) {
        FixedModel w = *m;
        uint64_t end = (aligned ? now / (reset * SEC) * (reset * SEC) : now) + reset * SEC;
        Expect e;

        if (!w.live || w.end <= now)
                w = (FixedModel){ .live = false, .credit = limit };
        if (op == ALGO_REFUND) {
                if (!w.live)
                        return (Expect){ true, limit, 0, 0 };
                w.credit = n > limit - w.credit ? limit : w.credit + n;
                *m = w;
                return (Expect){ true, w.credit, up(w.end - now), 0 };
        }
        if (op == ALGO_CHARGE) {
                bool fit;

                if (!w.live)
                        w = (FixedModel){ .live = true, .end = end, .credit = limit };
                fit = n <= w.credit;
                w.credit = fit ? w.credit - n : 0;
                *m = w;
                return (Expect){ fit, w.credit, up(w.end - now), fit ? 0 : (int64_t) up(w.end - now) };
        }
        if (n > limit)
                return (Expect){ false, w.credit, w.live ? up(w.end - now) : 0, -1 };
        if (n == 0)
                return (Expect){ true, w.credit, w.live ? up(w.end - now) : 0, 0 };
        if (!w.live)
                w = (FixedModel){ .live = true, .end = end, .credit = limit };
        if (n > w.credit)
                return (Expect){ false, w.credit, up(w.end - now), (int64_t) up(w.end - now) };
        w.credit -= n;
        e = (Expect){ true, w.credit, up(w.end - now), 0 };
        if (op == ALGO_TAKE)
                *m = w;
        return e;
}

/* Sliding window: a count per window since the anchor; exact comparisons in units of 1/r. */
#define SW_WINDOWS 1024
typedef struct SlidingModel {
        bool live;
        uint64_t anchor;
        uint64_t count[SW_WINDOWS];
} SlidingModel;

static uint64_t sm_index(const SlidingModel *m, uint64_t t, uint64_t r) {
        uint64_t i = (t - m->anchor) / r;

        ck_assert_uint_lt(i, SW_WINDOWS);
        return i;
}

/* estimate * r at t: prev * (r - elapsed) + cur * r */
static u128 sm_scaled(const SlidingModel *m, uint64_t t, uint64_t r) {
        uint64_t i = sm_index(m, t, r), e = (t - m->anchor) % r;

        return (u128) (i > 0 ? m->count[i - 1] : 0) * (r - e) + (u128) m->count[i] * r;
}

static bool sm_passes(const SlidingModel *m, uint64_t t, uint64_t r, uint64_t limit, uint64_t n) {
        return sm_scaled(m, t, r) + (u128) n * r <= (u128) limit * r;
}

static uint64_t sm_credit(const SlidingModel *m, uint64_t t, uint64_t r, uint64_t limit) {
        u128 s = sm_scaled(m, t, r), l = (u128) limit * r;

        return s >= l ? 0 : (uint64_t) ((l - s) / r);
}

/* the first t >= now where f holds, by bisection over [now, now + 2r] (monotone without hits) */
static uint64_t sm_first(const SlidingModel *m, uint64_t now, uint64_t r, uint64_t limit, uint64_t n,
                         bool zero) {
        uint64_t lo = now, hi = now + 2 * r;

#define HOLDS(t) (zero ? sm_scaled(m, (t), r) == 0 : sm_passes(m, (t), r, limit, n))
        ck_assert(HOLDS(hi));
        if (HOLDS(lo))
                return lo;
        while (hi - lo > 1) {
                uint64_t mid = lo + (hi - lo) / 2;

                if (HOLDS(mid))
                        hi = mid;
                else
                        lo = mid;
        }
#undef HOLDS
        return hi;
}

static Expect sliding_model(SlidingModel *m, uint64_t limit, uint64_t reset, bool aligned, AlgoOp op,
                            uint64_t n, uint64_t now) {
        uint64_t r = reset * SEC, i, credit;
        SlidingModel *w = m;
        Expect e;
        static SlidingModel copy;

        if (m->live && sm_scaled(m, now, r) == 0)
                m->live = false;
        if (!m->live) {
                if (op == ALGO_REFUND)
                        return (Expect){ true, limit, 0, 0 };
                memset(m, 0, sizeof *m);
                m->anchor = aligned ? now / r * r : now;
        }
        if (op == ALGO_PEEK) {
                copy = *m;
                w = &copy;
        }
        i = sm_index(w, now, r);
        credit = sm_credit(w, now, r, limit);
        switch (op) {
        case ALGO_TAKE:
        case ALGO_PEEK:
                if (n > limit)
                        e = (Expect){ false, credit, up(sm_first(w, now, r, limit, 0, true) - now), -1 };
                else if (sm_passes(w, now, r, limit, n)) {
                        w->count[i] += n;
                        e = (Expect){ true, sm_credit(w, now, r, limit),
                                      up(sm_first(w, now, r, limit, 0, true) - now), 0 };
                } else {
                        uint64_t t = sm_first(w, now, r, limit, n, false);
                        e = (Expect){ false, credit, up(t - now), retry_up(t - now) };
                }
                break;
        case ALGO_CHARGE: {
                uint64_t add = n < credit ? n : credit;

                w->count[i] += add;
                e = (Expect){ n <= credit, credit - add, up(sm_first(w, now, r, limit, 0, true) - now),
                              n <= credit ? 0 : retry_up(sm_first(w, now, r, limit, 1, false) - now) };
                break;
        }
        default: { /* REFUND */
                uint64_t back = n < w->count[i] ? n : w->count[i];

                w->count[i] -= back;
                if (i > 0)
                        w->count[i - 1] -= n - back < w->count[i - 1] ? n - back : w->count[i - 1];
                e = (Expect){ true, sm_credit(w, now, r, limit),
                              up(sm_first(w, now, r, limit, 0, true) - now), 0 };
        }
        }
        if (w == m) {
                m->live = sm_scaled(m, now, r) > 0;
        } else if (!m->live) {
                /* peek on an absent counter leaves it absent */
        }
        return e;
}

/* GCRA as a leaky-bucket meter: water in µs (T per credit) drains at 1 µs per µs; tau = burst * T. */
typedef struct MeterModel {
        uint64_t level, at;
} MeterModel;

static Expect meter_model(MeterModel *m, uint64_t t, uint64_t burst, bool strict, AlgoOp op, uint64_t n,
                          uint64_t now) {
        uint64_t tau = burst * t;
        uint64_t lv = m->level > now - m->at ? m->level - (now - m->at) : 0;
        Expect e;

#define CREDIT(l) ((l) < tau ? (tau - (l)) / t : 0)
        switch (op) {
        case ALGO_TAKE:
        case ALGO_PEEK:
                if (n > burst)
                        return (Expect){ false, CREDIT(lv), up(lv), -1 };
                if (lv + n * t <= tau) {
                        e = (Expect){ true, CREDIT(lv + n * t), up(lv + n * t), 0 };
                        if (op == ALGO_TAKE)
                                *m = (MeterModel){ lv + n * t, now };
                        return e;
                }
                if (strict && op == ALGO_TAKE) {
                        /* the water rounds up to whole credits: the partial drain is lost */
                        lv = (lv + t - 1) / t * t;
                        *m = (MeterModel){ lv, now };
                }
                return (Expect){ false, CREDIT(lv), up(lv + n * t - tau), retry_up(lv + n * t - tau) };
        case ALGO_CHARGE: {
                bool fit = n <= burst && lv + n * t <= tau;
                uint64_t most = (1 + ALGO_DEBT_MAX_BURSTS) * tau; /* at most burst of debt */

                lv = lv + n * t <= most ? lv + n * t : lv > most ? lv : most;
                *m = (MeterModel){ lv, now };
                return (Expect){ fit, CREDIT(lv), up(lv), fit ? 0 : retry_up(lv + t - tau) };
        }
        default:
                if (lv == 0)
                        return (Expect){ true, burst, 0, 0 };
                lv = n * t >= lv ? 0 : lv - n * t;
                *m = (MeterModel){ lv, now };
                return (Expect){ true, CREDIT(lv), up(lv), 0 };
        }
#undef CREDIT
}

/* Smyte's bucket (value, lastUpdate), but a full bucket is dropped: the next op creates one anew,
 * as Smyte does for a bucket that does not exist. value < 0 is debt. */
typedef struct SmyteModel {
        bool exists;
        int64_t value;
        uint64_t last;
} SmyteModel;

static uint64_t smyte_until_full(const SmyteModel *b, int64_t burst, uint64_t amount, uint64_t step,
                                 uint64_t now) {
        uint64_t missing;

        if (!b->exists || b->value >= burst)
                return 0;
        missing = (uint64_t) (burst - b->value);
        return up(b->last + (missing + amount - 1) / amount * step - now);
}

static Expect smyte_model(SmyteModel *m, uint64_t burst_u, uint64_t amount, uint64_t step, bool strict,
                          AlgoOp op, uint64_t n_u, uint64_t now) {
        int64_t burst = (int64_t) burst_u, n = (int64_t) n_u;
        SmyteModel b = *m;
        Expect e;

        if (b.exists) { /* refill */
                uint64_t count = (now - b.last) / step;

                b.value = b.value + (int64_t) (count * amount) < burst ? b.value + (int64_t) (count * amount)
                                                                       : burst;
                b.last += count * step;
                if (b.value >= burst)
                        b.exists = false;
        }
        if (!b.exists) {
                if (op == ALGO_REFUND) {
                        *m = b;
                        return (Expect){ true, burst_u, 0, 0 };
                }
                b = (SmyteModel){ .exists = true, .value = burst, .last = now };
        }
#define CREDIT (b.value > 0 ? (uint64_t) b.value : 0)
        switch (op) {
        case ALGO_TAKE:
        case ALGO_PEEK:
                if (n > burst)
                        e = (Expect){ false, CREDIT, smyte_until_full(&b, burst, amount, step, now), -1 };
                else if (n <= b.value) {
                        b.value -= n;
                        e = (Expect){ true, CREDIT, smyte_until_full(&b, burst, amount, step, now), 0 };
                } else {
                        uint64_t j, t;

                        if (strict && op == ALGO_TAKE)
                                b.last = now; /* STRICT: lastUpdate even though the quota is empty */
                        j = ((uint64_t) (n - b.value) + amount - 1) / amount;
                        t = b.last + j * step;
                        e = (Expect){ false, CREDIT, up(t - now), retry_up(t - now) };
                }
                break;
        case ALGO_CHARGE: {
                bool fit = n <= b.value;
                int64_t least = -(int64_t) ALGO_DEBT_MAX_BURSTS * burst; /* at most burst of debt */

                b.value = b.value - n >= least ? b.value - n : b.value < least ? b.value : least;
                e = (Expect){ fit, CREDIT, smyte_until_full(&b, burst, amount, step, now), 0 };
                if (!fit) {
                        uint64_t j = ((uint64_t) (1 - b.value) + amount - 1) / amount;

                        e.retry = retry_up(b.last + j * step - now);
                }
                break;
        }
        default:
                b.value = n > burst - b.value ? burst : b.value + n;
                e = (Expect){ true, CREDIT, smyte_until_full(&b, burst, amount, step, now), 0 };
        }
#undef CREDIT
        if (b.value >= burst)
                b.exists = false;
        if (op != ALGO_PEEK)
                *m = b;
        return e;
}

/* ---- random sequences against the models ---------------------------------------------------- */

typedef struct RandomCase {
        Algorithm algorithm;
        uint64_t limit, reset, burst, refill;
        bool strict;
        AlgoWindow window;
} RandomCase;

static const RandomCase random_cases[] = {
        { ALGORITHM_FIXED_WINDOW, 1, 1, 0, 0, false },
        { ALGORITHM_FIXED_WINDOW, 5, 3, 0, 0, false },
        { ALGORITHM_FIXED_WINDOW, 100, 60, 0, 0, false },
        { ALGORITHM_SLIDING_WINDOW, 1, 1, 0, 0, false },
        { ALGORITHM_SLIDING_WINDOW, 3, 2, 0, 0, false },
        { ALGORITHM_SLIDING_WINDOW, 10, 7, 0, 0, false },
        { ALGORITHM_SLIDING_WINDOW, 1000, 60, 0, 0, false },
        { ALGORITHM_SLIDING_WINDOW, UINT32_MAX, 3, 0, 0, false },
        { ALGORITHM_TOKEN_BUCKET, 1, 1, 0, 0, false },
        { ALGORITHM_TOKEN_BUCKET, 3, 1, 0, 0, false },
        { ALGORITHM_TOKEN_BUCKET, 10, 60, 0, 0, false },
        { ALGORITHM_TOKEN_BUCKET, 10, 60, 0, 0, true },
        { ALGORITHM_TOKEN_BUCKET, 7, 3, 20, 0, false },
        { ALGORITHM_TOKEN_BUCKET, 7, 3, 2, 0, true },
        { ALGORITHM_TOKEN_BUCKET, 1000000, 1, 0, 0, false },
        { ALGORITHM_TOKEN_BUCKET, 1000000, 1, 0, 0, true },
        { ALGORITHM_TOKEN_BUCKET, 10, 60, 0, 6, false },
        { ALGORITHM_TOKEN_BUCKET, 10, 60, 0, 30, false },
        { ALGORITHM_TOKEN_BUCKET, 10, 60, 0, 30, true },
        { ALGORITHM_TOKEN_BUCKET, 4, 2, 3, 1, false },
        { ALGORITHM_TOKEN_BUCKET, 4, 2, 9, 1, true },
        { ALGORITHM_TOKEN_BUCKET, 1, 1, 1, 2, false },
        { ALGORITHM_TOKEN_BUCKET, 100, 10, 0, 5, true },
        /* windows aligned to the clock (issue #34) */
        { ALGORITHM_FIXED_WINDOW, 1, 1, 0, 0, false, ALGO_WINDOW_ALIGNED },
        { ALGORITHM_FIXED_WINDOW, 5, 3, 0, 0, false, ALGO_WINDOW_ALIGNED },
        { ALGORITHM_FIXED_WINDOW, 100, 60, 0, 0, false, ALGO_WINDOW_ALIGNED },
        { ALGORITHM_FIXED_WINDOW, 7, 86400, 0, 0, false, ALGO_WINDOW_ALIGNED },
        { ALGORITHM_SLIDING_WINDOW, 1, 1, 0, 0, false, ALGO_WINDOW_ALIGNED },
        { ALGORITHM_SLIDING_WINDOW, 3, 2, 0, 0, false, ALGO_WINDOW_ALIGNED },
        { ALGORITHM_SLIDING_WINDOW, 10, 7, 0, 0, false, ALGO_WINDOW_ALIGNED },
        { ALGORITHM_SLIDING_WINDOW, 1000, 60, 0, 0, false, ALGO_WINDOW_ALIGNED },
};

static const char *const op_names[] = { "TAKE", "PEEK", "CHARGE", "REFUND" };

START_TEST (test_random_against_model) {
        const RandomCase *c = random_cases + _i;
        AlgoParams p =
                params_window(c->algorithm, c->limit, c->reset, c->burst, c->refill, c->strict, c->window);
        uint64_t r = c->reset * SEC, cap = p.burst;
        uint64_t t = p.algorithm == ALGORITHM_TOKEN_BUCKET && !c->refill ? p.d0 : 0;
        static SlidingModel sm;

        for (uint64_t seed0 = 1; seed0 <= 12; seed0++) {
                uint64_t seed = seed0 * 0x9e3779b97f4a7c15ULL + (uint64_t) _i,
                         now = T0 + rnd_below(&seed, r);
                FixedModel fm = { 0 };
                MeterModel mm = { 0, now };
                SmyteModel bm = { 0 };
                AlgoState st = { 0, 0 };
                uint64_t start = now;

                memset(&sm, 0, sizeof sm);
                for (int k = 0; k < 300; k++) {
                        AlgoOp op;
                        uint64_t n, x = rnd_below(&seed, 20);
                        AlgoState before;
                        AlgoResult res;
                        Expect e;

                        /* time: still, a little, a lot, or the state's own edges to the µs */
                        if (x < 4)
                                ;
                        else if (x < 10)
                                now += rnd_below(&seed, r / (cap < 8 ? cap : 8) + 2);
                        else if (x < 13)
                                now += rnd_below(&seed, 2 * r + 2);
                        else if (x < 16 && st.w0 > now)
                                now = st.w0 - 1 + rnd_below(&seed, 3);
                        else if (x < 18 && p.algorithm == ALGORITHM_SLIDING_WINDOW && sm.live)
                                now = sm.anchor + ((now - sm.anchor) / r + 1) * r - 1 + rnd_below(&seed, 3);
                        else if (x < 18 && t)
                                now += t - 1 + rnd_below(&seed, 3);
                        else if (x < 18 && c->refill && bm.exists)
                                now = bm.last + p.d0 - 1 + rnd_below(&seed, 3);
                        if (p.algorithm == ALGORITHM_SLIDING_WINDOW && now - start > (SW_WINDOWS - 8) * r) {
                                /* bound the model's array: start over after a silence of 2 windows */
                                now += 2 * r;
                                start = now;
                                memset(&sm, 0, sizeof sm);
                                st = (AlgoState){ 0, 0 };
                        }

                        x = rnd_below(&seed, 20);
                        op = x < 9 ? ALGO_TAKE : x < 13 ? ALGO_PEEK : x < 17 ? ALGO_CHARGE : ALGO_REFUND;
                        x = rnd_below(&seed, 10);
                        n = x < 5   ? 1
                            : x < 8 ? rnd_below(&seed, cap + 2)
                            : x < 9 ? cap
                                    : rnd_below(&seed, 3 * cap + 2);
                        if (op != ALGO_PEEK && n == 0)
                                n = 1;

                        switch (p.algorithm) {
                        case ALGORITHM_FIXED_WINDOW:
                                e = fixed_model(&fm, c->limit, c->reset, c->window == ALGO_WINDOW_ALIGNED,
                                                op, n, now);
                                break;
                        case ALGORITHM_SLIDING_WINDOW:
                                e = sliding_model(&sm, c->limit, c->reset, c->window == ALGO_WINDOW_ALIGNED,
                                                  op, n, now);
                                break;
                        default:
                                if (c->refill)
                                        e = smyte_model(&bm, cap, p.d1, p.d0, c->strict, op, n, now);
                                else
                                        e = meter_model(&mm, t, cap, c->strict, op, n, now);
                        }
                        before = st;
                        algo_apply(&p, op, n, now, &st, &res);
                        ck_assert_msg(res.allowed == e.allowed && res.credit == e.credit &&
                                              res.reset == e.reset && res.retry == e.retry,
                                      "case %d seed %" PRIu64 " step %d: %s %" PRIu64 " at +%" PRIu64
                                      " us: got %d credit %" PRIu64 " reset %" PRIu64 " retry %" PRId64
                                      ", model %d %" PRIu64 " %" PRIu64 " %" PRId64,
                                      _i, seed0, k, op_names[op], n, now - T0, res.allowed, res.credit,
                                      res.reset, res.retry, e.allowed, e.credit, e.reset, e.retry);
                        ck_assert_uint_eq(res.limit, cap);
                        if (op == ALGO_PEEK)
                                ck_assert(!res.write && st.w0 == before.w0 && st.w1 == before.w1);
                        else if (op == ALGO_CHARGE)
                                ck_assert(res.write);
                        else
                                ck_assert(res.write == (st.w0 != before.w0 || st.w1 != before.w1));
                        /* w0 is "deletable from": there the counter answers as an absent one, and
                         * (but for the fixed window, whose refunds may fill it early) not before */
                        ck_assert_uint_le(st.w0, ALGO_W0_MAX);
                        if (st.w0 > now) {
                                AlgoState probe = st, absent = { 0, 0 };
                                AlgoResult a, b;

                                algo_apply(&p, ALGO_PEEK, cap, st.w0, &probe, &a);
                                algo_apply(&p, ALGO_PEEK, cap, st.w0, &absent, &b);
                                ck_assert(a.allowed && b.allowed && a.credit == b.credit &&
                                          a.reset == b.reset);
                                algo_apply(&p, ALGO_PEEK, cap, st.w0 - 1, &probe, &a);
                                if (p.algorithm != ALGORITHM_FIXED_WINDOW)
                                        ck_assert(!a.allowed);
                        }
                }
        }
}
END_TEST

/* ---- overflow edges ------------------------------------------------------------------------ */

START_TEST (test_overflow_edges) {
        AlgoParams gcra = params(ALGORITHM_TOKEN_BUCKET, 1, ALGO_RESET_SECONDS_MAX, 0, 0, false);
        AlgoParams disc = params(ALGORITHM_TOKEN_BUCKET, 2, 1, 0, 1, true);
        AlgoParams sw = params(ALGORITHM_SLIDING_WINDOW, UINT32_MAX, ALGO_RESET_SECONDS_MAX, 0, 0, false);
        AlgoParams fw = params(ALGORITHM_FIXED_WINDOW, ALGO_CREDIT_MAX, ALGO_RESET_SECONDS_MAX, 0, 0, false);
        AlgoState st = { 0, 0 };
        AlgoResult res;

        /* a huge CHARGE: one burst of debt (full again after 2 * tau), no wrap */
        algo_apply(&gcra, ALGO_CHARGE, UINT64_MAX, T0, &st, &res);
        ck_assert(!res.allowed && res.write);
        ck_assert_uint_eq(st.w0, T0 + 2 * gcra.d1);
        ck_assert_uint_eq(res.reset, 2 * ALGO_RESET_SECONDS_MAX);
        ck_assert_int_ge(res.retry, 1);
        algo_apply(&gcra, ALGO_TAKE, 1, T0 + 1, &st, &res);
        ck_assert(!res.allowed);
        algo_apply(&gcra, ALGO_REFUND, UINT64_MAX, T0 + 1, &st, &res);
        ck_assert(res.allowed && res.credit == 1 && st.w0 == 0);

        st = (AlgoState){ 0, 0 };
        algo_apply(&disc, ALGO_CHARGE, UINT64_MAX, T0, &st, &res);
        ck_assert(res.write && st.w0 == T0 + 2 * SEC && st.w1 == 4); /* 2 credits of debt */
        ck_assert_uint_eq(res.credit, 0);
        algo_apply(&disc, ALGO_TAKE, 1, T0 + SEC, &st, &res);
        ck_assert(!res.allowed && res.retry == 1);
        algo_apply(&disc, ALGO_REFUND, UINT64_MAX, T0 + SEC, &st, &res);
        ck_assert(res.allowed && res.credit == 2 && st.w0 == 0 && st.w1 == 0);

        /* the sliding window's largest counts and windows */
        st = (AlgoState){ 0, 0 };
        algo_apply(&sw, ALGO_TAKE, UINT32_MAX, T0, &st, &res);
        ck_assert(res.allowed && res.credit == 0);
        algo_apply(&sw, ALGO_TAKE, 1, T0 + ALGO_RESET_SECONDS_MAX * SEC + 1, &st, &res);
        ck_assert(!res.allowed);
        ck_assert_int_eq(res.retry, 1); /* weight of 2^32-1 must drop by one: a few µs */
        algo_apply(&sw, ALGO_CHARGE, UINT64_MAX, T0 + ALGO_RESET_SECONDS_MAX * SEC + 1, &st, &res);
        ck_assert(!res.allowed && res.credit == 0);

        /* a fixed window near the end of time clamps like the store did */
        st = (AlgoState){ 0, 0 };
        algo_apply(&fw, ALGO_TAKE, ALGO_CREDIT_MAX, ALGO_W0_MAX - 5 * SEC, &st, &res);
        ck_assert(res.allowed && st.w0 == ALGO_W0_MAX && res.reset == 5);

        /* now beyond ALGO_NOW_MAX is taken as ALGO_NOW_MAX */
        st = (AlgoState){ 0, 0 };
        algo_apply(&gcra, ALGO_TAKE, 1, UINT64_MAX, &st, &res);
        ck_assert(res.allowed && st.w0 == ALGO_NOW_MAX + gcra.d0);
}
END_TEST

/* ---- the debt a CHARGE leaves is bounded by the rule --------------------------------------- */

/* The largest count a client may send (PROTO_COUNT_MAX, and beyond it UINT64_MAX) after any start:
 * the retry of a TAKE 1 and the time until full stay within the bound algorithm.h states (fixed
 * window: resetSeconds; sliding: 2 * resetSeconds; token bucket: refilling burst + 1 credits, and
 * full within twice the time to refill burst), and a CHARGE from a fresh counter reaches it. */
typedef struct ChargeCase {
        const char *name;
        Algorithm algorithm;
        uint64_t limit, reset, burst, refill;
        bool strict;
        int64_t fresh_retry; /* s: after CHARGE PROTO_COUNT_MAX on an absent counter */
        uint64_t fresh_reset;
        int64_t max_retry; /* s: the bound, from any state */
        uint64_t max_reset;
} ChargeCase;

static const ChargeCase charge_cases[] = {
        { "fixed 5/300", ALGORITHM_FIXED_WINDOW, 5, 300, 0, 0, false, 300, 300, 300, 300 },
        /* the next window, once the charged one weighs 4 of 5: 300 + 300 / 5 */
        { "sliding 5/300", ALGORITHM_SLIDING_WINDOW, 5, 300, 0, 0, false, 360, 600, 600, 600 },
        { "sliding 1/1", ALGORITHM_SLIDING_WINDOW, 1, 1, 0, 0, false, 2, 2, 2, 2 },
        /* issue #30's rule: T = 60 s; one burst of debt, TAKE 1 after 6 credits */
        { "gcra 5/300", ALGORITHM_TOKEN_BUCKET, 5, 300, 0, 0, false, 360, 600, 360, 600 },
        { "gcra 5/300 strict", ALGORITHM_TOKEN_BUCKET, 5, 300, 0, 0, true, 360, 600, 360, 600 },
        /* T = 428572 µs: 21 T = 9.000012 s, 40 T = 17.14288 s */
        { "gcra 7/3 burst 20", ALGORITHM_TOKEN_BUCKET, 7, 3, 20, 0, false, 10, 18, 10, 18 },
        { "gcra 1 per 100 years", ALGORITHM_TOKEN_BUCKET, 1, ALGO_RESET_SECONDS_MAX, 0, 0, false,
          2 * (int64_t) ALGO_RESET_SECONDS_MAX, 2 * ALGO_RESET_SECONDS_MAX,
          2 * (int64_t) ALGO_RESET_SECONDS_MAX, 2 * ALGO_RESET_SECONDS_MAX },
        /* 5 every 30 s: TAKE 1 after ceil(11 / 5) refills, full after 20 / 5 */
        { "refills 10/60 every 30", ALGORITHM_TOKEN_BUCKET, 10, 60, 0, 30, false, 90, 120, 90, 120 },
        /* 2 every 1 s: ceil(10 / 2), 18 / 2 */
        { "refills 4/2 burst 9 strict", ALGORITHM_TOKEN_BUCKET, 4, 2, 9, 1, true, 5, 9, 5, 9 },
        { "refills 1/1 burst 1", ALGORITHM_TOKEN_BUCKET, 1, 1, 1, 1, false, 2, 2, 2, 2 },
};

START_TEST (test_charge_bounded) {
        const ChargeCase *c = charge_cases + _i;
        AlgoParams p = params(c->algorithm, c->limit, c->reset, c->burst, c->refill, c->strict);
        /* the state before: absent, emptied, half used, in debt, charged to the bound */
        static const struct {
                AlgoOp op;
                int scale; /* count: 0 none, 1 burst, 2 burst / 2, 3 burst + 1, 4 PROTO_COUNT_MAX */
        } starts[] = {
                { ALGO_TAKE, 0 }, { ALGO_TAKE, 1 }, { ALGO_TAKE, 2 }, { ALGO_CHARGE, 3 }, { ALGO_CHARGE, 4 }
        };
        static const uint64_t later[] = { 0, 1, 999999, 17 * SEC + 3 };

        for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++)
                for (size_t j = 0; j < sizeof later / sizeof later[0]; j++)
                        for (int huge = 0; huge < 2; huge++) {
                                uint64_t counts[] = { 0, p.burst, p.burst / 2, p.burst + 1,
                                                      PROTO_COUNT_MAX };
                                uint64_t now = T0 + later[j], n = huge ? UINT64_MAX : PROTO_COUNT_MAX;
                                AlgoState st = { 0, 0 }, probe;
                                AlgoResult res, peek;

                                if (starts[i].scale > 0)
                                        algo_apply(&p, starts[i].op, counts[starts[i].scale], T0, &st, &res);
                                algo_apply(&p, ALGO_CHARGE, n, now, &st, &res);
                                ck_assert_msg(!res.allowed && res.credit == 0 && res.retry >= 1 &&
                                                      res.retry <= c->max_retry && res.reset <= c->max_reset,
                                              "%s, start %zu, +%" PRIu64 " us, count %" PRIu64
                                              ": retry %" PRId64 " reset %" PRIu64 ", bound %" PRId64
                                              " %" PRIu64,
                                              c->name, i, later[j], n, res.retry, res.reset, c->max_retry,
                                              c->max_reset);
                                if (starts[i].scale == 0)
                                        ck_assert_msg(res.retry == c->fresh_retry &&
                                                              res.reset == c->fresh_reset,
                                                      "%s, fresh: retry %" PRId64 " reset %" PRIu64, c->name,
                                                      res.retry, res.reset);
                                ck_assert_uint_le(st.w0, now + c->max_reset * SEC);

                                /* the reply's retry is the wait as it stands: PEEK agrees */
                                probe = st;
                                algo_apply(&p, ALGO_PEEK, 1, now, &probe, &peek);
                                ck_assert(!peek.allowed && peek.retry == res.retry);

                                /* a TAKE 1 passes once the retry has passed */
                                algo_apply(&p, ALGO_TAKE, 1, now + (uint64_t) res.retry * SEC, &st, &res);
                                ck_assert_msg(res.allowed, "%s, start %zu: TAKE 1 after the retry denied",
                                              c->name, i);
                        }
}
END_TEST

/* CL.THROTTLE and RL.* never CHARGE: they follow their peers' arithmetic (redis-cell's wrapping
 * i64, Smyte's drain to 0), so no client-limit call leaves debt; a STRICT take that leaves 0
 * restarts the refill clock only. */
#define S(x) ((ProtoSlice){ x, sizeof(x) - 1 })
START_TEST (test_client_limits_leave_no_debt) {
        const ProtoSlice cl[] = { S("k"), S("4"), S("5"), S("300"), S("9223372036854775807") };
        const ProtoSlice rl[] = {
                S("k"), S("5"), S("60"), S("TAKE"), S("9223372036854775807"), S("STRICT")
        };
        const ProtoSlice rl1[] = { S("k"), S("5"), S("60"), S("STRICT") };
        ClientLimit a, b, one;
        AlgoState st = { 0, 0 };
        AlgoResult res;

        ck_assert_int_eq(client_limit_parse_throttle(5, cl, &a, NULL), 0);
        ck_assert_int_eq(a.op, ALGO_TAKE);
        algo_apply(&a.algo, a.op, a.count, T0, &st, &res);
        /* redis-cell's i64 wraps 60 s * (2^63 - 1) to -60 s: a refund past full, its TTL refused */
        ck_assert(!res.allowed && client_limit_throttle_error(&res) && st.w0 <= T0);
        st = (AlgoState){ 0, 0 };

        ck_assert_int_eq(client_limit_parse_reduce("RL.REDUCE", 6, rl, &b, NULL), 0);
        ck_assert_int_eq(client_limit_parse_reduce("RL.REDUCE", 4, rl1, &one, NULL), 0);
        for (int i = 0; i < 5; i++) { /* empty the bucket */
                algo_apply(&one.algo, one.op, one.count, T0, &st, &res);
                ck_assert(res.allowed);
        }
        algo_apply(&b.algo, b.op, b.count, T0, &st, &res);
        ck_assert(!res.allowed && res.credit == 0); /* Smyte's drain of an empty bucket */
        /* STRICT, hammered: each denial waits one refill from now, never more */
        for (uint64_t t = T0; t < T0 + 600 * SEC; t += 7 * SEC) {
                algo_apply(&one.algo, one.op, one.count, t, &st, &res);
                ck_assert(!res.allowed && st.w0 <= t + 60 * SEC);
        }
}
END_TEST
#undef S

/* RESET deletes whatever the algorithm: the state becomes absent; credit 1 only if the counter
 * was live (w0 > now), write only if there was a state to delete; n is not read. */
START_TEST (test_reset) {
        const AlgoParams ps[] = {
                params(ALGORITHM_FIXED_WINDOW, 5, 10, 0, 0, false),
                params(ALGORITHM_SLIDING_WINDOW, 5, 10, 0, 0, false),
                params(ALGORITHM_TOKEN_BUCKET, 5, 10, 0, 0, false),
                params(ALGORITHM_TOKEN_BUCKET, 5, 10, 0, 2, true),
        };

        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
                AlgoState st = { 0, 0 };
                AlgoResult res;

                algo_apply(&ps[i], ALGO_TAKE, 2, T0, &st, &res);
                ck_assert(res.write && st.w0 > T0);
                algo_apply(&ps[i], ALGO_RESET, 99, T0 + 1, &st, &res);
                ck_assert(res.allowed && res.write);
                ck_assert_uint_eq(res.credit, 1); /* a live counter was deleted */
                ck_assert_uint_eq(res.limit, 5);
                ck_assert(res.reset == 0 && res.retry == 0);
                ck_assert(st.w0 == 0 && st.w1 == 0);
                algo_apply(&ps[i], ALGO_RESET, 0, T0 + 1, &st, &res); /* nothing left */
                ck_assert(res.allowed && !res.write && res.credit == 0);
                /* expired: deleted (written), but not reported as a live one */
                algo_apply(&ps[i], ALGO_TAKE, 1, T0, &st, &res);
                algo_apply(&ps[i], ALGO_RESET, 0, st.w0, &st, &res);
                ck_assert(res.allowed && res.write && res.credit == 0);
                ck_assert(st.w0 == 0 && st.w1 == 0);
                /* a full bucket is as good as absent again: TAKE 5 passes */
                algo_apply(&ps[i], ALGO_TAKE, 5, T0 + 2, &st, &res);
                ck_assert(res.allowed);
        }
}
END_TEST

START_TEST (test_clock_back) {
        /* a wall clock stepped back: never a wrap, never a shorter wait than at the window start */
        AlgoParams sw = params(ALGORITHM_SLIDING_WINDOW, 2, 10, 0, 0, false);
        AlgoParams gcra = params(ALGORITHM_TOKEN_BUCKET, 2, 10, 0, 0, false);
        AlgoParams disc = params(ALGORITHM_TOKEN_BUCKET, 2, 10, 0, 5, false);
        AlgoState st = { 0, 0 };
        AlgoResult res;

        algo_apply(&sw, ALGO_TAKE, 2, T0, &st, &res);
        algo_apply(&sw, ALGO_TAKE, 1, T0 - 60 * SEC, &st, &res);
        ck_assert(!res.allowed && res.credit == 0);
        ck_assert_uint_eq(res.reset, 75); /* TAKE 1 passes at T0 + 15 s, as it would have from T0 */
        st = (AlgoState){ 0, 0 };
        sw = params(ALGORITHM_SLIDING_WINDOW, 3, 10, 0, 0, false);
        algo_apply(&sw, ALGO_TAKE, 2, T0, &st, &res);
        algo_apply(&sw, ALGO_TAKE, 1, T0 - 60 * SEC, &st, &res);
        ck_assert(res.allowed && res.credit == 0);
        ck_assert_uint_eq(st.w0, T0 + 20 * SEC); /* counted in the window that started at T0 */
        ck_assert_uint_eq(res.reset, 80);

        st = (AlgoState){ 0, 0 };
        algo_apply(&gcra, ALGO_TAKE, 2, T0, &st, &res);
        algo_apply(&gcra, ALGO_TAKE, 1, T0 - 60 * SEC, &st, &res);
        ck_assert(!res.allowed && res.credit == 0 && res.retry == 65);

        st = (AlgoState){ 0, 0 };
        algo_apply(&disc, ALGO_TAKE, 2, T0, &st, &res);
        algo_apply(&disc, ALGO_TAKE, 1, T0 - 60 * SEC, &st, &res);
        ck_assert(!res.allowed && res.credit == 0 && res.retry == 65);
}
END_TEST

int main(void) {
        Suite *s = suite_create("algorithm");
        TCase *tc = tcase_create("tables");

        tcase_add_test(tc, test_names);
        tcase_add_loop_test(tc, test_prepare, 0, sizeof prepare_cases / sizeof prepare_cases[0]);
        tcase_add_test(tc, test_prepare_null);
        tcase_add_test(tc, test_prepare_window);
        tcase_add_test(tc, test_aligned_edges);
        tcase_add_loop_test(tc, test_scenario, 0, sizeof scenarios / sizeof scenarios[0]);
        tcase_add_test(tc, test_overflow_edges);
        tcase_add_loop_test(tc, test_charge_bounded, 0, sizeof charge_cases / sizeof charge_cases[0]);
        tcase_add_test(tc, test_client_limits_leave_no_debt);
        tcase_add_test(tc, test_clock_back);
        tcase_add_test(tc, test_reset);
        suite_add_tcase(s, tc);

        tc = tcase_create("models");
        tcase_set_timeout(tc, 60);
        tcase_add_loop_test(tc, test_fixed_hit_is_old_formula, 0, 4);
        tcase_add_loop_test(tc, test_random_against_model, 0, sizeof random_cases / sizeof random_cases[0]);
        suite_add_tcase(s, tc);

        return check_run_suite(s);
}
