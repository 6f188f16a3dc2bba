/* SPDX-License-Identifier: MIT */
#include "client-limits.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/resp.h"

/* The semantics are described in client-limits.h. Learned from redis-cell's README and
 * src/lib.rs (argument parsing, the reply, its rounding) and Smyte's README and
 * RateLimitHandler.cpp (arguments, defaults, the reply); no code is taken from either. */

typedef unsigned __int128 u128;

#define USEC_PER_SEC  UINT64_C(1000000)
#define USEC_PER_MSEC UINT64_C(1000)
#define QUOTE_MAX     64 /* bytes of an argument quoted in an error */

#define ID_MAGIC "divvyd-client-limit-v1" /* no rule id's encoding starts so ("divvyd-rule-id-v1") */

/* ---- helpers --------------------------------------------------------------------- */

/* Parses s as an int64: an optional sign and one or more decimal digits, nothing else (as
 * Rust's i64::from_str, redis-cell's parser; Smyte's folly::to also allows blanks around,
 * which no Redis client sends). Returns false if malformed or out of range. */
static bool parse_i64(ProtoSlice s, int64_t *ret) {
        size_t i = 0;
        bool neg = false;
        uint64_t v = 0, max;

        if (!s.ptr || s.len == 0)
                return false;
        if (s.ptr[0] == '+' || s.ptr[0] == '-') {
                neg = s.ptr[0] == '-';
                i = 1;
        }
        if (i == s.len)
                return false;
        max = neg ? (uint64_t) INT64_MAX + 1 : (uint64_t) INT64_MAX;
        for (; i < s.len; i++) {
                unsigned d;

                if (s.ptr[i] < '0' || s.ptr[i] > '9')
                        return false;
                d = (unsigned) (s.ptr[i] - '0');
                if (v > (max - d) / 10)
                        return false;
                v = v * 10 + d;
        }
        /* -(2^63) is INT64_MIN: computed without overflow */
        *ret = neg ? (v == (uint64_t) INT64_MAX + 1 ? INT64_MIN : -(int64_t) v) : (int64_t) v;
        return true;
}

static bool str_eq_nocase(const char *s, const char *word) {
        return s && resp_slice_eq((ProtoSlice){ s, strlen(s) }, word);
}

/* "<prefix><arg>" into buf, the argument cut to QUOTE_MAX bytes ("..." then) and every byte
 * outside printable ASCII made "?": an error reply is one line. */
static const char *quote_error(char buf[CLIENT_LIMIT_ERROR_MAX], const char *prefix, ProtoSlice arg) {
        size_t n = strlen(prefix), len = arg.ptr ? arg.len : 0;

        memcpy(buf, prefix, n);
        for (size_t i = 0; i < len && i < QUOTE_MAX; i++) {
                unsigned char c = (unsigned char) arg.ptr[i];

                buf[n++] = c >= 0x20 && c < 0x7f ? (char) c : '?';
        }
        if (len > QUOTE_MAX) {
                memcpy(buf + n, "...", 3);
                n += 3;
        }
        buf[n] = '\0';
        return buf;
}

static uint8_t *put_le64(uint8_t *p, uint64_t v) {
        for (unsigned i = 0; i < 8; i++)
                *p++ = (uint8_t) (v >> (8 * i));
        return p;
}

/* The counter's identity (client-limits.h): hash128() over
 *   "divvyd-client-limit-v1"   22 bytes, no NUL
 *   tag                        2 bytes, "cl" or "rl"
 *   hash128(key)               16 bytes (the key has no bound here: hashed first, fixed size)
 *   3 x u64le                  the parameters
 * A format of the store: change it and every client-limit counter starts afresh. */
static void compute_id(ClientLimit *cl, const char tag[2], uint64_t a, uint64_t b, uint64_t c) {
        uint8_t buf[sizeof(ID_MAGIC) - 1 + 2 + HASH128_SIZE + 3 * 8], *p = buf;

        memcpy(p, ID_MAGIC, sizeof(ID_MAGIC) - 1);
        p += sizeof(ID_MAGIC) - 1;
        memcpy(p, tag, 2);
        p += 2;
        hash128(cl->key.ptr, cl->key.len, p);
        p += HASH128_SIZE;
        p = put_le64(p, a);
        p = put_le64(p, b);
        p = put_le64(p, c);
        hash128(buf, (size_t) (p - buf), cl->id);
}

/* algo_params_prepare() after our own checks, which refuse in the command's words everything it
 * refuses: a failure here is a bug, reported with its reason rather than hidden. */
static int prepare(ClientLimit *cl, const char *prefix, const char **ret_error) {
        const char *reason = NULL;

        if (algo_params_prepare(&cl->algo, &reason) < 0) {
                snprintf(cl->error, sizeof(cl->error), "%s%s", prefix,
                         reason ? reason : "invalid parameters");
                *ret_error = cl->error;
                return -EINVAL;
        }
        return 0;
}

static ProtoSlice key_of(const ProtoSlice *arg) {
        return (ProtoSlice){ arg->ptr ? arg->ptr : "", arg->ptr ? arg->len : 0 };
}

/* ---- CL.THROTTLE ------------------------------------------------------------------ */

#define CELL "Cell error: " /* redis-cell's errors all start so */

int client_limit_parse_throttle(int argc, const ProtoSlice *argv, ClientLimit *ret, const char **ret_error) {
        int64_t v[4] = { 0, 0, 0, 1 }; /* quantity: 1 by default */
        uint64_t burst, count, period, t;
        const char *dummy;

        if (!ret_error)
                ret_error = &dummy;
        if (!ret || (argc > 0 && !argv))
                return *ret_error = "ERR invalid arguments", -EINVAL;
        if (argc != 4 && argc != 5)
                return *ret_error = CELL "Usage: cl.throttle <key> <max_burst> <count per period> <period> "
                                         "[<quantity>]",
                       -EINVAL;

        *ret = (ClientLimit){ .kind = CLIENT_LIMIT_THROTTLE, .key = key_of(&argv[0]) };
        for (int i = 1; i < argc; i++)
                if (!parse_i64(argv[i], &v[i - 1]))
                        return *ret_error =
                                       quote_error(ret->error, CELL "Couldn't parse as integer: ", argv[i]),
                               -EINVAL;

        /* redis-cell: a zero count or period is a zero rate. A negative one (redis-cell computes
         * nonsense from it) and a negative max_burst (a limit of 0 or less) are refused. */
        if (v[1] == 0 || v[2] == 0)
                return *ret_error = CELL "Zero rates are not supported", -EINVAL;
        if (v[1] < 0 || v[2] < 0)
                return *ret_error = CELL "Negative rates are not supported", -EINVAL;
        if (v[0] < 0)
                return *ret_error = CELL "max_burst must not be negative", -EINVAL;
        if ((uint64_t) v[0] >= ALGO_CREDIT_MAX)
                return *ret_error = CELL "max_burst must be at most 9007199254740990", -EINVAL;
        if ((uint64_t) v[1] > ALGO_CREDIT_MAX)
                return *ret_error = CELL "count must be at most 9007199254740991", -EINVAL;
        if ((uint64_t) v[2] > ALGO_RESET_SECONDS_MAX)
                return *ret_error = CELL "period must be at most 3155760000 seconds (100 years)", -EINVAL;

        burst = (uint64_t) v[0] + 1;
        count = (uint64_t) v[1];
        period = (uint64_t) v[2];
        /* redis-cell refuses only an interval under 1 ns; divvyd's clock is in µs */
        if (count > period * USEC_PER_SEC)
                return *ret_error = CELL "Rates above 1000000 per second are not supported", -EINVAL;
        t = period * USEC_PER_SEC / count + (period * USEC_PER_SEC % count != 0); /* as algorithm.c */
        if ((u128) burst * t > ALGO_FILL_USEC_MAX)
                return *ret_error = CELL "max_burst + 1 tokens take more than 200 years to refill at count "
                                         "per period",
                       -EINVAL;

        ret->algo = (AlgoParams){
                .algorithm = ALGORITHM_TOKEN_BUCKET,
                .credit_limit = count,
                .reset_seconds = period,
                .burst = burst,
        };
        if (prepare(ret, CELL, ret_error) < 0)
                return -EINVAL;
        ret->interval_usec = t;

        if (v[3] > 0) {
                ret->op = ALGO_TAKE;
                ret->count = (uint64_t) v[3];
        } else if (v[3] == 0) {
                ret->op = ALGO_PEEK;
                ret->count = 0;
        } else {
                /* what redis-cell's users do with -1: give a token back */
                ret->op = ALGO_REFUND;
                ret->count = v[3] == INT64_MIN ? (uint64_t) INT64_MAX + 1 : (uint64_t) -v[3];
        }
        compute_id(ret, "cl", (uint64_t) v[0], count, period);
        return 0;
}

size_t client_limit_format_throttle(const ClientLimit *cl, const AlgoResult *res,
                                    int64_t out[CLIENT_LIMIT_THROTTLE_REPLY_LEN]) {
        int64_t retry = -1;
        uint64_t reset = res->reset;

        if (!res->allowed && res->retry > 0) {
                /* Denied, and it would pass after retry s: the result's reset is that wait; the
                 * bucket is full x µs from now. x = wait + (burst - n) * T (the take passes once
                 * x + n * T <= burst * T), with wait in ((retry - 1) s, retry s]; and remaining
                 * r = floor((burst * T - x) / T), so x <= (burst - r) * T. Both bounds are upper
                 * ones: the lower is the answer, rounded up. */
                uint64_t t = cl->interval_usec, burst = cl->algo.burst, n = cl->count, r = res->credit;
                u128 by_retry = (u128) (uint64_t) res->retry * USEC_PER_SEC + (u128) (burst - n) * t;
                u128 by_remaining = (u128) (burst - (r < burst ? r : burst)) * t;
                u128 x = by_retry < by_remaining ? by_retry : by_remaining;

                retry = res->retry;
                reset = (uint64_t) (x / USEC_PER_SEC + (x % USEC_PER_SEC != 0));
        }
        out[0] = res->allowed ? 0 : 1;
        out[1] = (int64_t) res->limit;
        out[2] = (int64_t) res->credit;
        out[3] = retry;
        out[4] = (int64_t) reset;
        return CLIENT_LIMIT_THROTTLE_REPLY_LEN;
}

/* ---- RL.REDUCE, RL.GET, RL.PREDUCE, RL.PGET --------------------------------------- */

#define SMYTE_SYNTAX  "Syntax error"
#define SMYTE_INTEGER "Value is not an integer or out of range"

int client_limit_parse_reduce(const char *cmd, int argc, const ProtoSlice *argv, ClientLimit *ret,
                              const char **ret_error) {
        bool reduce, ms;
        int64_t max, refill, amount, take, at = 0;
        bool strict = false, has_at = false;
        uint64_t refill_ms, refill_s, unit_ms;
        const char *dummy;

        if (!ret_error)
                ret_error = &dummy;
        if (!ret || (argc > 0 && !argv))
                return *ret_error = "ERR invalid arguments", -EINVAL;
        if (str_eq_nocase(cmd, "rl.reduce"))
                reduce = true, ms = false;
        else if (str_eq_nocase(cmd, "rl.get"))
                reduce = false, ms = false;
        else if (str_eq_nocase(cmd, "rl.preduce"))
                reduce = true, ms = true;
        else if (str_eq_nocase(cmd, "rl.pget"))
                reduce = false, ms = true;
        else
                return *ret_error = "ERR unknown command", -EINVAL;
        unit_ms = ms ? 1 : 1000;

        *ret = (ClientLimit){ .kind = CLIENT_LIMIT_REDUCE };
        if (argc < 3 || argc > (reduce ? 10 : 8)) {
                snprintf(ret->error, sizeof(ret->error), "ERR wrong number of arguments for '%s' command",
                         reduce ? (ms ? "rl.preduce" : "rl.reduce") : (ms ? "rl.pget" : "rl.get"));
                return *ret_error = ret->error, -EINVAL;
        }
        ret->key = key_of(&argv[0]);

        /* Smyte's order: max, then refilltime (an int32), then the options, then the ranges. */
        if (!parse_i64(argv[1], &max) || !parse_i64(argv[2], &refill) || refill < INT32_MIN ||
            refill > INT32_MAX)
                return *ret_error = SMYTE_INTEGER, -EINVAL;
        amount = max;
        take = reduce ? 1 : 0;
        for (int i = 3; i < argc;) {
                int64_t value;

                if (resp_slice_eq(argv[i], "strict")) {
                        strict = true;
                        i++;
                        continue;
                }
                if (i + 1 >= argc)
                        return *ret_error = SMYTE_SYNTAX, -EINVAL;
                /* Smyte reads the value before it looks at the option's name */
                if (!parse_i64(argv[i + 1], &value))
                        return *ret_error = SMYTE_INTEGER, -EINVAL;
                if (resp_slice_eq(argv[i], "refill"))
                        amount = value;
                else if (resp_slice_eq(argv[i], "take") && reduce)
                        take = value;
                else if (resp_slice_eq(argv[i], "at"))
                        at = value, has_at = true;
                else /* TAKE in a GET too */
                        return *ret_error = SMYTE_SYNTAX, -EINVAL;
                i += 2;
        }
        if (max < 1 || refill < 1 || amount < 1 || take < 0 || at < 0)
                return *ret_error = SMYTE_INTEGER, -EINVAL;

        /* What divvyd's token bucket can hold */
        refill_ms = (uint64_t) refill * unit_ms;
        if (refill_ms % 1000 != 0)
                return *ret_error = "ERR divvyd refills in whole seconds: the refilltime of RL.PREDUCE and "
                                    "RL.PGET must be a multiple of 1000",
                       -EINVAL;
        refill_s = refill_ms / 1000;
        if ((uint64_t) max > ALGO_CREDIT_MAX)
                return *ret_error = "ERR max must be at most 9007199254740991", -EINVAL;
        if ((uint64_t) amount > ALGO_CREDIT_MAX)
                return *ret_error = "ERR REFILL must be at most 9007199254740991", -EINVAL;
        if ((uint64_t) amount > refill_s * USEC_PER_SEC)
                return *ret_error =
                               "ERR REFILL (default: max) above 1000000 tokens per second of refilltime "
                               "is not supported",
                       -EINVAL;
        if ((u128) ((uint64_t) max / (uint64_t) amount + ((uint64_t) max % (uint64_t) amount != 0)) *
                    (refill_s * USEC_PER_SEC) >
            ALGO_FILL_USEC_MAX)
                return *ret_error = "ERR max tokens take more than 200 years to refill", -EINVAL;
        if ((uint64_t) at > CLIENT_LIMIT_AT_MAX * (1000 / unit_ms))
                return *ret_error = SMYTE_INTEGER, -EINVAL;

        /* amount tokens every refill_s seconds: creditLimit amount per resetSeconds refill_s, so
         * that the credits per refill, creditLimit * refillSeconds / resetSeconds, are amount */
        ret->algo = (AlgoParams){
                .algorithm = ALGORITHM_TOKEN_BUCKET,
                .credit_limit = (uint64_t) amount,
                .reset_seconds = refill_s,
                .burst = (uint64_t) max,
                .refill_seconds = refill_s,
                .strict = strict,
        };
        if (prepare(ret, "ERR ", ret_error) < 0)
                return -EINVAL;

        ret->op = take > 0 ? ALGO_TAKE : ALGO_PEEK; /* Smyte writes nothing for TAKE 0 */
        ret->count = (uint64_t) take;
        if (has_at)
                ret->at_usec = at == 0 ? 1 : (uint64_t) at * unit_ms * USEC_PER_MSEC;
        compute_id(ret, "rl", (uint64_t) max, (uint64_t) amount, refill_ms);
        return 0;
}

int64_t client_limit_reduce_reply(const ClientLimit *cl, const AlgoResult *res) {
        /* an allowed take left credit: there were credit + count; a denied one took nothing */
        uint64_t before = res->credit + (res->allowed && cl->op == ALGO_TAKE ? cl->count : 0);

        return before > (uint64_t) INT64_MAX ? INT64_MAX : (int64_t) before;
}
