/* SPDX-License-Identifier: MIT */
#include "algorithm.h"

#include "core/client-limits.h"

#include <stddef.h>
#include <string.h>

/* Pure integer arithmetic: products that may exceed 64 bits are taken in 128 bits (u128), and
 * every rounding goes the way that cannot raise a rate (intervals and estimates up, credits
 * down). The layouts of the state words are described in algorithm.h. */

typedef unsigned __int128 u128;

#define USEC_PER_SEC UINT64_C(1000000)

static const char *const algorithm_table[_ALGORITHM_MAX] = {
        [ALGORITHM_FIXED_WINDOW] = "fixed-window",
        [ALGORITHM_SLIDING_WINDOW] = "sliding-window",
        [ALGORITHM_TOKEN_BUCKET] = "token-bucket",
};

const char *algorithm_to_string(Algorithm a) {
        if (a < 0 || a >= _ALGORITHM_MAX)
                return NULL;
        return algorithm_table[a];
}

Algorithm algorithm_from_string(const char *s) {
        if (!s)
                return _ALGORITHM_INVALID;
        for (Algorithm a = 0; a < _ALGORITHM_MAX; a++)
                if (strcmp(s, algorithm_table[a]) == 0)
                        return a;
        if (strcmp(s, "gcra") == 0)
                return ALGORITHM_TOKEN_BUCKET;
        return _ALGORITHM_INVALID;
}

static const char *const algo_window_table[_ALGO_WINDOW_MAX] = {
        [ALGO_WINDOW_FIRST_HIT] = "first-hit",
        [ALGO_WINDOW_ALIGNED] = "aligned",
};

const char *algo_window_to_string(AlgoWindow w) {
        if (w < 0 || w >= _ALGO_WINDOW_MAX)
                return NULL;
        return algo_window_table[w];
}

AlgoWindow algo_window_from_string(const char *s) {
        if (!s)
                return _ALGO_WINDOW_INVALID;
        for (AlgoWindow w = 0; w < _ALGO_WINDOW_MAX; w++)
                if (strcmp(s, algo_window_table[w]) == 0)
                        return w;
        return _ALGO_WINDOW_INVALID;
}

/* a / b rounded up (b > 0). */
static uint64_t div_up(uint64_t a, uint64_t b) {
        return a / b + (a % b != 0);
}

/* Derived parameters (d0, d1), per algorithm:
 * - fixed window: unused (0, 0): it computes exactly as the store did.
 * - sliding window: d0 = resetSeconds in µs.
 * - token bucket, continuous: d0 = T, the emission interval in µs; d1 = tau = burst * T.
 * - token bucket, discrete: d0 = refillSeconds in µs; d1 = A, the credits per refill. */

int algo_params_prepare(AlgoParams *p, const char **ret_reason) {
        const char *reason = NULL;

        if (!p)
                return -EINVAL;
        if (p->algorithm < 0 || p->algorithm >= _ALGORITHM_MAX)
                reason = "unknown algorithm";
        else if (p->credit_limit == 0 || p->credit_limit > ALGO_CREDIT_MAX)
                reason = "creditLimit must be between 1 and 9007199254740991";
        else if (p->reset_seconds == 0 || p->reset_seconds > ALGO_RESET_SECONDS_MAX)
                reason = "resetSeconds must be between 1 and 3155760000 (100 years)";
        else if (p->window < 0 || p->window >= _ALGO_WINDOW_MAX)
                reason = "unknown window";
        else if (p->window != ALGO_WINDOW_FIRST_HIT && p->algorithm == ALGORITHM_TOKEN_BUCKET)
                reason =
                        "window aligned applies only to algorithms fixed-window and sliding-window (a token "
                        "bucket has no windows)";
        else if (p->algorithm != ALGORITHM_TOKEN_BUCKET) {
                if (p->burst != 0 && p->burst != p->credit_limit)
                        reason = "burst applies only to algorithm token-bucket";
                else if (p->refill_seconds != 0)
                        reason = "refillSeconds applies only to algorithm token-bucket";
                else if (p->strict)
                        reason = "strict applies only to algorithm token-bucket";
                else if (p->algorithm == ALGORITHM_SLIDING_WINDOW && p->credit_limit > UINT32_MAX)
                        reason = "creditLimit above 4294967295 is not supported by algorithm sliding-window";
                if (!reason) {
                        p->burst = p->credit_limit;
                        p->d0 = p->algorithm == ALGORITHM_SLIDING_WINDOW ? p->reset_seconds * USEC_PER_SEC
                                                                         : 0;
                        p->d1 = 0;
                }
        } else {
                uint64_t burst = p->burst ? p->burst : p->credit_limit;
                uint64_t reset_usec = p->reset_seconds * USEC_PER_SEC; /* < 2^52 */

                if (burst > ALGO_CREDIT_MAX)
                        reason = "burst must be between 1 and 9007199254740991";
                else if (p->credit_limit > reset_usec)
                        reason = "creditLimit per resetSeconds gives an interval under 1 microsecond "
                                 "(at most 1000000 credits per second)";
                else if (p->refill_seconds == 0) {
                        /* T rounded up: the rate never rises. burst * T < 2^53 * 2^52. */
                        uint64_t t = div_up(reset_usec, p->credit_limit);
                        u128 tau = (u128) burst * t;

                        if (tau > ALGO_FILL_USEC_MAX)
                                reason = "burst takes more than 200 years to refill at creditLimit per "
                                         "resetSeconds";
                        else {
                                p->d0 = t;
                                p->d1 = (uint64_t) tau;
                        }
                } else if (p->refill_seconds > ALGO_RESET_SECONDS_MAX)
                        reason = "refillSeconds must be between 1 and 3155760000 (100 years)";
                else {
                        u128 product = (u128) p->credit_limit * p->refill_seconds; /* < 2^85 */
                        u128 amount = product / p->reset_seconds;
                        uint64_t step = p->refill_seconds * USEC_PER_SEC;

                        /* amount <= 1e6 * refillSeconds < 2^52, as creditLimit <= 1e6 * resetSeconds */
                        if (product % p->reset_seconds != 0)
                                reason = "refillSeconds does not divide resetSeconds into whole credits "
                                         "(creditLimit * refillSeconds / resetSeconds must be an integer)";
                        else if ((u128) ((burst + (uint64_t) amount - 1) / (uint64_t) amount) * step >
                                 ALGO_FILL_USEC_MAX)
                                reason = "burst takes more than 200 years to refill at creditLimit per "
                                         "resetSeconds";
                        else {
                                p->d0 = step;
                                p->d1 = (uint64_t) amount;
                        }
                }
                if (!reason)
                        p->burst = burst;
        }

        if (reason) {
                if (ret_reason)
                        *ret_reason = reason;
                return -EINVAL;
        }
        return 0;
}

static uint64_t usec_to_sec_up(uint64_t d) {
        return div_up(d, USEC_PER_SEC);
}

/* A denial's retry in seconds from a wait in µs: >= 1 even if the wait rounds to nothing. */
static int64_t retry_of(uint64_t wait_usec) {
        uint64_t s = usec_to_sec_up(wait_usec);

        return s > 0 ? (int64_t) s : 1;
}

static uint64_t min_u64(uint64_t a, uint64_t b) {
        return a < b ? a : b;
}

static void result_set(AlgoResult *res, bool allowed, uint64_t credit, uint64_t limit, uint64_t reset,
                       int64_t retry) {
        *res = (AlgoResult){
                .allowed = allowed,
                .credit = credit,
                .limit = limit,
                .reset = reset,
                .retry = retry,
        };
}

/* ---- fixed window: exactly what store.c's store_apply() computed for a HIT ---- */

static uint64_t fw_seconds_left(uint64_t expiry_usec, uint64_t now_usec) {
        /* caller guarantees now < expiry: the result is >= 1 */
        return usec_to_sec_up(expiry_usec - now_usec);
}

/* The end of the window a hit at now_usec opens: resetSeconds after it, or with window aligned
 * at the next multiple of resetSeconds since the epoch (the window holding now ends there). */
static uint64_t fw_window_end(const AlgoParams *p, uint64_t now_usec) {
        uint64_t d =
                p->reset_seconds > UINT64_MAX / USEC_PER_SEC ? UINT64_MAX : p->reset_seconds * USEC_PER_SEC;
        uint64_t start = p->window == ALGO_WINDOW_ALIGNED ? now_usec - now_usec % d : now_usec;
        uint64_t end = start > UINT64_MAX - d ? UINT64_MAX : start + d;

        return end < ALGO_W0_MAX ? end : ALGO_W0_MAX;
}

static void fixed_apply(const AlgoParams *p, AlgoOp op, uint64_t n, uint64_t now, AlgoState *st,
                        AlgoResult *res) {
        uint64_t limit = p->credit_limit;
        bool live = st->w0 > now; /* else absent or expired: a fresh window */
        AlgoState s = *st;
        uint64_t left;

        switch (op) {
        case ALGO_TAKE:
        case ALGO_PEEK:
                if (!live) {
                        if (n > limit)
                                result_set(res, false, limit, limit, 0, -1);
                        else if (n == 0)
                                result_set(res, true, limit, limit, 0, 0);
                        else {
                                s = (AlgoState){ .w0 = fw_window_end(p, now), .w1 = limit - n };
                                result_set(res, true, s.w1, limit, fw_seconds_left(s.w0, now), 0);
                        }
                } else {
                        left = fw_seconds_left(s.w0, now);
                        if (n > limit)
                                result_set(res, false, s.w1, limit, left, -1);
                        else if (n <= s.w1) {
                                s.w1 -= n;
                                result_set(res, true, s.w1, limit, left, 0);
                        } else
                                result_set(res, false, s.w1, limit, left, (int64_t) left);
                }
                /* every allowed hit is written, as the store always journaled it (even when a
                 * window clamped at ALGO_W0_MAX comes out the same) */
                if (op == ALGO_TAKE && res->allowed && n > 0) {
                        *st = s;
                        res->write = true;
                }
                return;
        case ALGO_CHARGE: {
                bool fit;

                if (!live)
                        s = (AlgoState){ .w0 = fw_window_end(p, now), .w1 = limit };
                fit = n <= s.w1;
                s.w1 -= min_u64(n, s.w1);
                left = fw_seconds_left(s.w0, now);
                result_set(res, fit, s.w1, limit, left, fit ? 0 : (int64_t) left);
                *st = s;
                res->write = true;
                return;
        }
        case ALGO_REFUND:
                if (!live) {
                        result_set(res, true, limit, limit, 0, 0);
                        return;
                }
                if (s.w1 < limit)
                        s.w1 += min_u64(n, limit - s.w1);
                result_set(res, true, s.w1, limit, fw_seconds_left(s.w0, now), 0);
                if (s.w1 != st->w1) {
                        *st = s;
                        res->write = true;
                }
                return;
        default:
                return;
        }
}

/* ---- sliding window ---- */

/* a * b / c rounded down (or up), c > 0, the result known to fit 64 bits; 64-bit division when
 * the product fits (the common case: a 128-bit division is a library call) */
static uint64_t mul_div(uint64_t a, uint64_t b, uint64_t c, bool round_up) {
        u128 x = (u128) a * b;

        if ((uint64_t) (x >> 64) == 0) {
                uint64_t y = (uint64_t) x;
                return y / c + (round_up && y % c != 0);
        }
        return (uint64_t) (x / c + (round_up && x % c != 0));
}

typedef struct Sliding {
        uint64_t prev, cur; /* counts of the previous and the current window */
        uint64_t end;       /* µs: the current window's end */
} Sliding;

static Sliding sw_load(const AlgoState *st, uint64_t now, uint64_t r, AlgoWindow window) {
        uint64_t e2;

        if (st->w0 <= now) /* absent or expired: a window anchored now, or the aligned one holding now */
                return (Sliding){ .end = (window == ALGO_WINDOW_ALIGNED ? now - now % r : now) + r };
        /* st->w0 - 2r is the stored current window's start; e2 = now's offset from it, in
         * [0, 2r) (a clock that went back before it counts as its start). */
        e2 = now + 2 * r >= st->w0 ? now + 2 * r - st->w0 : 0;
        if (e2 >= r)
                return (Sliding){ .prev = st->w1 & UINT32_MAX, .cur = 0, .end = st->w0 };
        return (Sliding){ .prev = st->w1 >> 32, .cur = st->w1 & UINT32_MAX, .end = st->w0 - r };
}

static AlgoState sw_store(const Sliding *s, uint64_t r) {
        if (s->cur > 0)
                return (AlgoState){ .w0 = s->end + r, .w1 = s->prev << 32 | s->cur };
        if (s->prev > 0) /* written one window earlier: see algorithm.h */
                return (AlgoState){ .w0 = s->end, .w1 = s->prev };
        return (AlgoState){ 0, 0 };
}

/* The weighted estimate at now, rounded up: prev * (time left in the current window) / r + cur. */
static uint64_t sw_estimate(const Sliding *s, uint64_t now, uint64_t r) {
        uint64_t left = s->end > now ? min_u64(s->end - now, r) : 0;

        return mul_div(s->prev, left, r, true) + s->cur;
}

/* µs from now until an op of n (<= limit) would pass (0: now). */
static uint64_t sw_wait(const Sliding *s, uint64_t now, uint64_t r, uint64_t limit, uint64_t n) {
        uint64_t m = limit - n, t;

        if (sw_estimate(s, now, r) <= m)
                return 0;
        if (s->cur > m) /* only in the next window, once the current count's weight drops enough */
                t = s->end + r - mul_div(m, r, s->cur, false);
        else /* in the current window: prev * (end - t) <= (m - cur) * r */
                t = s->end - mul_div(m - s->cur, r, s->prev, false);
        return t > now ? t - now : 0;
}

static uint64_t until_full(const AlgoState *st, uint64_t now) {
        return st->w0 > now ? usec_to_sec_up(st->w0 - now) : 0;
}

static void sliding_apply(const AlgoParams *p, AlgoOp op, uint64_t n, uint64_t now, AlgoState *st,
                          AlgoResult *res) {
        uint64_t limit = p->credit_limit, r = p->d0;
        Sliding s = sw_load(st, now, r, p->window);
        uint64_t est = sw_estimate(&s, now, r);
        uint64_t credit = est < limit ? limit - est : 0;
        AlgoState ns;

        switch (op) {
        case ALGO_TAKE:
        case ALGO_PEEK:
                if (n > limit) {
                        result_set(res, false, credit, limit, until_full(st, now), -1);
                        return;
                }
                if (n <= credit) {
                        s.cur += n;
                        ns = sw_store(&s, r);
                        result_set(res, true, credit - n, limit, until_full(&ns, now), 0);
                        if (op == ALGO_TAKE && (ns.w0 != st->w0 || ns.w1 != st->w1)) {
                                *st = ns;
                                res->write = true;
                        }
                } else {
                        int64_t wait = retry_of(sw_wait(&s, now, r, limit, n));

                        result_set(res, false, credit, limit, (uint64_t) wait, wait);
                }
                return;
        case ALGO_CHARGE: {
                bool fit = n <= credit;

                s.cur += min_u64(n, credit); /* clamps at 0 credit: cur stays <= limit */
                ns = sw_store(&s, r);
                result_set(res, fit, credit - min_u64(n, credit), limit, until_full(&ns, now),
                           fit ? 0 : retry_of(sw_wait(&s, now, r, limit, 1)));
                *st = ns;
                res->write = true;
                return;
        }
        case ALGO_REFUND: {
                uint64_t back = min_u64(n, s.cur);

                if (st->w0 <= now) {
                        result_set(res, true, limit, limit, 0, 0);
                        return;
                }
                /* The current window first, then the previous one: the credit rises by at most n. */
                s.cur -= back;
                s.prev -= min_u64(n - back, s.prev);
                ns = sw_store(&s, r);
                est = sw_estimate(&s, now, r);
                result_set(res, true, est < limit ? limit - est : 0, limit, until_full(&ns, now), 0);
                if (ns.w0 != st->w0 || ns.w1 != st->w1) {
                        *st = ns;
                        res->write = true;
                }
                return;
        }
        default:
                return;
        }
}

/* ---- token bucket, continuous: GCRA ---- */

static uint64_t tat_add(uint64_t tat, uint64_t n, uint64_t t) {
        u128 v = (u128) tat + (u128) n * t;

        return v < ALGO_W0_MAX ? (uint64_t) v : ALGO_W0_MAX;
}

/* Whole credits left with the bucket full at tat: floor((tau - (tat - now)) / T), never negative. */
static uint64_t gcra_credit(uint64_t tat, uint64_t now, uint64_t t, uint64_t tau) {
        uint64_t x = tat > now ? tat - now : 0;

        return x < tau ? (tau - x) / t : 0;
}

/* µs from now until an op of n (<= burst) would pass with the bucket full at tat (>= now). */
static uint64_t gcra_wait(uint64_t tat, uint64_t now, uint64_t t, uint64_t tau, uint64_t n) {
        u128 allow_at = (u128) tat + (u128) n * t; /* then minus tau: the essay's TAT' - (tau) */

        return allow_at > (u128) now + tau ? (uint64_t) (allow_at - tau - now) : 0;
}

static void gcra_apply(const AlgoParams *p, AlgoOp op, uint64_t n, uint64_t now, AlgoState *st,
                       AlgoResult *res) {
        uint64_t t = p->d0, tau = p->d1, burst = p->burst;
        uint64_t tat = st->w0 > now ? st->w0 : now;
        AlgoState ns;

        switch (op) {
        case ALGO_TAKE:
        case ALGO_PEEK:
                if (n > burst) {
                        result_set(res, false, gcra_credit(tat, now, t, tau), burst, until_full(st, now),
                                   -1);
                        return;
                }
                if (gcra_wait(tat, now, t, tau, n) == 0) {
                        /* allowed iff TAT' - now <= tau: exactly burst hits pass at once on a full bucket */
                        uint64_t ntat = tat + n * t; /* <= now + tau */

                        ns = ntat > now ? (AlgoState){ .w0 = ntat, .w1 = 0 } : (AlgoState){ 0, 0 };
                        result_set(res, true, gcra_credit(ntat, now, t, tau), burst, until_full(&ns, now),
                                   0);
                } else {
                        int64_t wait;

                        ns = *st;
                        if (p->strict && op == ALGO_TAKE) {
                                /* restart the refill clock: the progress towards the next whole
                                 * credit is lost (tat > now here, as n <= burst) */
                                uint64_t x = tat - now;

                                tat = tat_add(now, x / t + (x % t != 0), t);
                                ns = (AlgoState){ .w0 = tat, .w1 = 0 };
                        }
                        wait = retry_of(gcra_wait(tat, now, t, tau, n));
                        result_set(res, false, gcra_credit(tat, now, t, tau), burst, (uint64_t) wait, wait);
                }
                if (op == ALGO_TAKE && (ns.w0 != st->w0 || ns.w1 != st->w1)) {
                        *st = ns;
                        res->write = true;
                }
                return;
        case ALGO_CHARGE: {
                bool fit = n <= burst && gcra_wait(tat, now, t, tau, n) == 0;
                uint64_t ntat = tat_add(tat, n, t);                     /* beyond now + tau: debt */
                uint64_t most = now + (1 + ALGO_DEBT_MAX_BURSTS) * tau; /* < ALGO_W0_MAX (algorithm.h) */

                if (ntat > most) /* the debt is bounded, but a CHARGE never lowers TAT */
                        ntat = tat > most ? tat : most;

                ns = ntat > now ? (AlgoState){ .w0 = ntat, .w1 = 0 } : (AlgoState){ 0, 0 };
                result_set(res, fit, gcra_credit(ntat, now, t, tau), burst, until_full(&ns, now),
                           fit ? 0 : retry_of(gcra_wait(ntat, now, t, tau, 1)));
                *st = ns;
                res->write = true;
                return;
        }
        case ALGO_REFUND: {
                u128 back = (u128) n * t;
                uint64_t ntat;

                if (st->w0 <= now) {
                        result_set(res, true, burst, burst, 0, 0);
                        return;
                }
                ntat = back < st->w0 - now ? st->w0 - (uint64_t) back : now; /* never below now: full */
                ns = ntat > now ? (AlgoState){ .w0 = ntat, .w1 = 0 } : (AlgoState){ 0, 0 };
                result_set(res, true, gcra_credit(ntat, now, t, tau), burst, until_full(&ns, now), 0);
                if (ns.w0 != st->w0 || ns.w1 != st->w1) {
                        *st = ns;
                        res->write = true;
                }
                return;
        }
        default:
                return;
        }
}

/* ---- token bucket, discrete refills (Smyte's) ---- */

typedef struct Bucket {
        uint64_t deficit;  /* credits: burst - credits left; above burst it is debt */
        uint64_t refilled; /* µs: the refill clock, the time of the last refill */
} Bucket;

static Bucket tb_load(const AlgoState *st, uint64_t now, uint64_t step, uint64_t amount) {
        Bucket b;
        u128 back;
        uint64_t k;

        if (st->w0 <= now || st->w1 == 0)
                return (Bucket){ .deficit = 0, .refilled = now };
        b.deficit = st->w1;
        back = (u128) div_up(b.deficit, amount) * step;
        b.refilled = back < st->w0 ? st->w0 - (uint64_t) back : 0;
        if (now > b.refilled) {
                /* the refills since: k * amount < deficit, as now < w0 */
                k = (now - b.refilled) / step;
                b.deficit -= min_u64((uint64_t) min_u64(k, UINT64_MAX / amount) * amount, b.deficit);
                b.refilled += k * step;
        }
        return b;
}

static AlgoState tb_store(Bucket *b, uint64_t step, uint64_t amount) {
        uint64_t steps;

        if (b->deficit == 0)
                return (AlgoState){ 0, 0 };
        /* debt capped so that w0 <= ALGO_W0_MAX */
        steps = (ALGO_W0_MAX - b->refilled) / step;
        if (div_up(b->deficit, amount) > steps)
                b->deficit = steps * amount;
        return (AlgoState){ .w0 = b->refilled + div_up(b->deficit, amount) * step, .w1 = b->deficit };
}

/* µs from now until an op of n (<= burst) would pass. */
static uint64_t tb_wait(const Bucket *b, uint64_t now, uint64_t burst, uint64_t step, uint64_t amount,
                        uint64_t n) {
        uint64_t room = burst - n, t;

        if (b->deficit <= room)
                return 0;
        t = b->refilled + div_up(b->deficit - room, amount) * step;
        return t > now ? t - now : 0;
}

static void bucket_apply(const AlgoParams *p, AlgoOp op, uint64_t n, uint64_t now, AlgoState *st,
                         AlgoResult *res) {
        uint64_t step = p->d0, amount = p->d1, burst = p->burst;
        Bucket b = tb_load(st, now, step, amount);
        uint64_t credit = b.deficit < burst ? burst - b.deficit : 0; /* 0 in debt */
        AlgoState ns;

        switch (op) {
        case ALGO_TAKE:
        case ALGO_PEEK:
                if (n > burst) {
                        result_set(res, false, credit, burst, until_full(st, now), -1);
                        return;
                }
                if (b.deficit <= burst - n) { /* in debt, even n = 0 does not fit, as with GCRA */
                        b.deficit += n;
                        ns = tb_store(&b, step, amount);
                        result_set(res, true, credit - n, burst, until_full(&ns, now), 0);
                } else {
                        int64_t wait;

                        ns = *st;
                        if (p->strict && op == ALGO_TAKE) {
                                b.refilled = now; /* Smyte's STRICT: lastUpdate = now */
                                ns = tb_store(&b, step, amount);
                        }
                        wait = retry_of(tb_wait(&b, now, burst, step, amount, n));
                        result_set(res, false, credit, burst, (uint64_t) wait, wait);
                }
                if (op == ALGO_TAKE && (ns.w0 != st->w0 || ns.w1 != st->w1)) {
                        *st = ns;
                        res->write = true;
                }
                return;
        case ALGO_CHARGE: {
                bool fit = n <= burst && b.deficit <= burst - n;
                uint64_t most = (1 + ALGO_DEBT_MAX_BURSTS) * burst; /* < 2^54 */

                /* the debt is bounded, but a CHARGE never lowers the deficit */
                if (n > most || b.deficit > most - n)
                        b.deficit = b.deficit > most ? b.deficit : most;
                else
                        b.deficit += n;
                ns = tb_store(&b, step, amount);
                result_set(res, fit, b.deficit < burst ? burst - b.deficit : 0, burst, until_full(&ns, now),
                           fit ? 0 : retry_of(tb_wait(&b, now, burst, step, amount, 1)));
                *st = ns;
                res->write = true;
                return;
        }
        case ALGO_REFUND:
                if (st->w0 <= now) {
                        result_set(res, true, burst, burst, 0, 0);
                        return;
                }
                b.deficit -= min_u64(n, b.deficit);
                ns = tb_store(&b, step, amount);
                result_set(res, true, b.deficit < burst ? burst - b.deficit : 0, burst, until_full(&ns, now),
                           0);
                if (ns.w0 != st->w0 || ns.w1 != st->w1) {
                        *st = ns;
                        res->write = true;
                }
                return;
        default:
                return;
        }
}

void algo_apply(const AlgoParams *p, AlgoOp op, uint64_t n, uint64_t now_usec, AlgoState *st,
                AlgoResult *res) {
        *res = (AlgoResult){ 0 };
        if (!p || !st || op < 0 || op >= _ALGO_OP_MAX)
                return;
        if (op == ALGO_RESET) {
                *res = (AlgoResult){ .allowed = true,
                                     .write = st->w0 != 0 || st->w1 != 0,
                                     .credit = st->w0 > now_usec,
                                     .limit = p->credit_limit };
                *st = (AlgoState){ 0, 0 };
                return;
        }
        if (p->peer != ALGO_PEER_NONE) {
                client_limit_apply(p, op, n, now_usec, st, res);
                return;
        }
        if (p->algorithm == ALGORITHM_FIXED_WINDOW) {
                fixed_apply(p, op, n, now_usec, st, res);
                return;
        }
        now_usec = min_u64(now_usec, ALGO_NOW_MAX);
        if (p->algorithm == ALGORITHM_SLIDING_WINDOW)
                sliding_apply(p, op, n, now_usec, st, res);
        else if (p->algorithm == ALGORITHM_TOKEN_BUCKET && p->refill_seconds == 0)
                gcra_apply(p, op, n, now_usec, st, res);
        else if (p->algorithm == ALGORITHM_TOKEN_BUCKET)
                bucket_apply(p, op, n, now_usec, st, res);
}
