/* SPDX-License-Identifier: MIT */
#include "client-limits.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/resp.h"

/* The semantics are described in client-limits.h. Learned from redis-cell's README,
 * src/lib.rs (argument parsing, errors, the reply's rounding), src/cell/mod.rs (the GCRA) and
 * src/cell/store.rs (the key's TTL), and from Smyte's README and RateLimitHandler.cpp
 * (arguments, defaults, the bucket, the reply), and from Redis's src/gcra.c, gcra.json and
 * tests/unit/gcra.tcl (GCRA); no code is taken from any. */

typedef unsigned __int128 u128;

#define USEC_PER_MSEC UINT64_C(1000)
#define QUOTE_MAX     64 /* bytes of an argument quoted in an error */

#define ID_MAGIC "divvyd-client-limit-v2" /* no rule id's encoding starts so ("divvyd-rule-id-v1") */

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
 *   "divvyd-client-limit-v2"   22 bytes, no NUL (v1: the layouts before the peers' own
 *                              arithmetic, and CL's parameters in the identity)
 *   tag                        2 bytes, "cl", "gc" (GCRA) or "rl"
 *   hash128(key)               16 bytes (the key has no bound here: hashed first, fixed size)
 *   3 x u64le                  the parameters (RL's; 0, 0, 0 for CL: the key alone)
 * The store's counter is this id with no actor (the key is hashed once, here). A format of the
 * store: change it and every client-limit counter starts afresh. */
static void compute_id_of(ProtoSlice key, const char tag[2], uint64_t a, uint64_t b, uint64_t c,
                          uint8_t id[CLIENT_LIMIT_ID_SIZE]) {
        uint8_t buf[sizeof(ID_MAGIC) - 1 + 2 + HASH128_SIZE + 3 * 8], *p = buf;

        memcpy(p, ID_MAGIC, sizeof(ID_MAGIC) - 1);
        p += sizeof(ID_MAGIC) - 1;
        memcpy(p, tag, 2);
        p += 2;
        hash128(key.ptr, key.len, p);
        p += HASH128_SIZE;
        p = put_le64(p, a);
        p = put_le64(p, b);
        p = put_le64(p, c);
        hash128(buf, (size_t) (p - buf), id);
}

static void compute_id(ClientLimit *cl, const char tag[2], uint64_t a, uint64_t b, uint64_t c) {
        compute_id_of(cl->key, tag, a, b, c, cl->id);
}

static ProtoSlice key_of(const ProtoSlice *arg) {
        return (ProtoSlice){ arg->ptr ? arg->ptr : "", arg->ptr ? arg->len : 0 };
}

/* ---- CL.THROTTLE ------------------------------------------------------------------ */

#define CELL "Cell error: " /* redis-cell's errors all start so */

/* redis-cell's arithmetic, emulated: Rust's wrapping i64 (a release build), f64 and its
 * saturating casts to i64, the time crate's Duration (whole seconds + nanoseconds, both
 * truncated toward zero) and OffsetDateTime (years -9999 to 9999, a panic beyond). */
typedef __int128 i128;

#define NSEC_PER_SEC     INT64_C(1000000000)
#define CELL_SECONDS_MIN INT64_C(-377705116800) /* -9999-01-01T00:00:00Z */
#define CELL_SECONDS_MAX INT64_C(253402300799)  /* 9999-12-31T23:59:59Z */
#define CELL_ERROR_EXPIRE                                                                                   \
        INT64_MIN /* AlgoResult.retry: redis-cell answers "Error while setting key expire" */
#define CELL_ERROR_PANIC (INT64_MIN + 1) /* AlgoResult.retry: redis-cell panics (the server dies) */

enum { CELL_T, CELL_DVT, CELL_INCREMENT, CELL_LIMIT };

#define GCRA_ERROR_OVERFLOW (INT64_MIN + 2) /* AlgoResult.retry: Redis's TOKENS overflow error */
#define GCRA_OVERFLOW_TOKENS                                                                                \
        "ERR GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and "        \
        "TOKENS would cause an overflow"
#define GCRA_OVERFLOW_BURST                                                                                 \
        "ERR GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and "        \
        "max_burst would cause an overflow"

static int64_t wrap_i64(i128 v) {
        return (int64_t) (uint64_t) (u128) v;
}

static int64_t f64_to_i64(double d) {
        if (d != d)
                return 0;
        if (d >= 9223372036854775807.0)
                return INT64_MAX;
        if (d <= -9223372036854775808.0)
                return INT64_MIN;
        return (int64_t) d;
}

static bool cell_time_ok(i128 ns) {
        return ns >= (i128) CELL_SECONDS_MIN * NSEC_PER_SEC &&
               ns < ((i128) CELL_SECONDS_MAX + 1) * NSEC_PER_SEC;
}

/* A Duration in ns as redis-cell's reply rounds it: as_seconds_f64() as i64, plus 1 if its
 * subsec_milliseconds() > 0. */
static int64_t cell_seconds(i128 ns) {
        int64_t whole = (int64_t) (ns / NSEC_PER_SEC), sub = (int64_t) (ns % NSEC_PER_SEC);
        int64_t s = f64_to_i64((double) whole + (double) sub / 1e9);

        return sub / 1000000 > 0 ? wrap_i64((i128) s + 1) : s;
}

int client_limit_parse_throttle(int argc, const ProtoSlice *argv, ClientLimit *ret, const char **ret_error) {
        int64_t v[4] = { 0, 0, 0, 1 }; /* quantity: 1 by default */
        int64_t t = 0;
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

        /* the emission interval: period in ns / count in f64, truncated; 0 is a zero rate (also
         * when count is so high that it rounds to 0 ns) */
        if (v[1] != 0 && v[2] != 0)
                t = f64_to_i64((double) ((i128) v[2] * NSEC_PER_SEC) / (double) v[1]);
        if (t == 0)
                return *ret_error = CELL "Zero rates are not supported", -EINVAL;

        ret->algo = (AlgoParams){
                .algorithm = ALGORITHM_TOKEN_BUCKET,
                .credit_limit = 1, /* for the store's checks: client_limit_apply() computes */
                .reset_seconds = 1,
                .peer = ALGO_PEER_CELL,
                .peer_args = { [CELL_T] = t,
                               [CELL_DVT] = wrap_i64((i128) t * wrap_i64((i128) v[0] + 1)),
                               [CELL_INCREMENT] = wrap_i64((i128) t * v[3]),
                               [CELL_LIMIT] = wrap_i64((i128) v[0] + 1) },
        };
        ret->interval_usec = t > 0 ? (uint64_t) t / 1000 : 0;
        /* the sign of quantity travels in count (two's complement): a refund writes as a take */
        ret->op = v[3] == 0 ? ALGO_PEEK : ALGO_TAKE;
        ret->count = (uint64_t) v[3];
        compute_id(ret, "cl", 0, 0, 0);
        return 0;
}

int client_limit_parse_del(int argc, const ProtoSlice *argv, ClientLimit *ret, const char **ret_error) {
        static const ProtoSlice any[4] = { { "", 0 }, { "0", 1 }, { "1", 1 }, { "1", 1 } };
        ProtoSlice args[4];
        const char *dummy;

        if (!ret_error)
                ret_error = &dummy;
        if (!ret || (argc > 0 && !argv))
                return *ret_error = "ERR invalid arguments", -EINVAL;
        if (argc != 1)
                return *ret_error = "ERR divvyd's DEL takes one key: a CL.THROTTLE cell or GCRA counter",
                       -EINVAL;
        /* the cell's identity is the key alone: any parameters name it */
        memcpy(args, any, sizeof(args));
        args[0] = argv[0];
        if (client_limit_parse_throttle(4, args, ret, ret_error) < 0)
                return -EINVAL;
        ret->op = ALGO_RESET;
        ret->count = 0;
        /* and the GCRA counter of the same key: in Redis both are the key DEL deletes */
        compute_id_of(ret->key, "gc", 0, 0, 0, ret->also_id);
        ret->has_also = true;
        return 0;
}

/* redis-cell's rate_limit() on the state st (w1 = the TAT in ns as redis-cell stores it, a u64;
 * w0 = the µs from which its Redis key has expired, 0 = no key). */
static void cell_apply(const AlgoParams *p, AlgoOp op, uint64_t now_usec, AlgoState *st, AlgoResult *res) {
        i128 t = p->peer_args[CELL_T], dvt = p->peer_args[CELL_DVT], inc = p->peer_args[CELL_INCREMENT];
        i128 now = (i128) now_usec * 1000, tat, new_tat, diff, ttl, next;
        i128 retry = -NSEC_PER_SEC; /* as redis-cell's Duration: -1 s unless limited and possible */
        bool present = st->w0 > now_usec, limited;
        int64_t remaining = 0;

        if (op == ALGO_PEEK)
                inc = 0;
        tat = present ? (i128) st->w1 : now;
        new_tat = (now > tat ? now : tat) + inc;
        if (!cell_time_ok(new_tat) || !cell_time_ok(new_tat - dvt)) {
                res->retry = CELL_ERROR_PANIC;
                return;
        }
        diff = now - (new_tat - dvt);
        limited = diff < 0;
        if (limited) {
                if (inc <= dvt)
                        retry = -diff;
                ttl = tat - now;
        } else {
                ttl = new_tat - now;
                if (op != ALGO_PEEK) {
                        /* written, then its expiry set: a TTL of -1 ms means none, below it is an
                         * error (after the write: the key stays, without expiry) */
                        int64_t ttl_ms = (int64_t) (ttl / 1000000);
                        uint64_t stored = (uint64_t) (u128) new_tat;

                        st->w1 = stored;
                        if (ttl_ms >= 0)
                                st->w0 = (now_usec / 1000 + (uint64_t) ttl_ms + 1) * 1000;
                        else /* never expires: like no key once the TAT has passed */
                                st->w0 = stored / 1000 + 1;
                        if (st->w0 > ALGO_W0_MAX)
                                st->w0 = ALGO_W0_MAX;
                        res->write = true;
                        if (ttl_ms < -1) {
                                res->retry = CELL_ERROR_EXPIRE;
                                return;
                        }
                }
        }
        next = dvt - ttl;
        if (next > -t) {
                int64_t us_next = (int64_t) (next / 1000), us_t = (int64_t) (t / 1000);

                remaining = f64_to_i64((double) us_next / (double) us_t);
        }
        res->allowed = !limited;
        res->credit = (uint64_t) remaining;
        res->limit = (uint64_t) p->peer_args[CELL_LIMIT];
        res->reset = (uint64_t) cell_seconds(ttl);
        res->retry = cell_seconds(retry);
}

const char *client_limit_throttle_error(const AlgoResult *res) {
        if (res->allowed)
                return NULL;
        if (res->retry == CELL_ERROR_EXPIRE)
                return CELL "Error while setting key expire";
        if (res->retry == CELL_ERROR_PANIC)
                return "ERR redis-cell panics on this call (a time beyond the years -9999 to 9999)";
        if (res->retry == GCRA_ERROR_OVERFLOW)
                return GCRA_OVERFLOW_TOKENS;
        return NULL;
}

size_t client_limit_format_throttle(const ClientLimit *cl, const AlgoResult *res,
                                    int64_t out[CLIENT_LIMIT_THROTTLE_REPLY_LEN]) {
        (void) cl;
        out[0] = res->allowed ? 0 : 1;
        out[1] = (int64_t) res->limit;
        out[2] = (int64_t) res->credit;
        out[3] = res->retry;
        out[4] = (int64_t) res->reset;
        return CLIENT_LIMIT_THROTTLE_REPLY_LEN;
}

/* ---- GCRA (Redis 8.8) --------------------------------------------------------------- */

enum { GCRA_T, GCRA_VARIANCE, GCRA_INCREMENT, GCRA_LIMIT };

/* s as Redis's string2ll() takes an integer: an optional '-', then "0" alone or digits not
 * starting with 0, within int64. */
static bool parse_redis_ll(ProtoSlice s, int64_t *ret) {
        size_t neg = s.ptr && s.len > 0 && s.ptr[0] == '-';

        if (!s.ptr || s.len == 0 || s.ptr[0] == '+' || (s.len > neg && s.ptr[neg] == '0' && s.len != 1))
                return false;
        return parse_i64(s, ret);
}

/* s as Redis's string2d() takes a double: the whole string, no leading blank, no NaN, no
 * overflow or underflow to 0 (fast_float's syntax: no hexadecimal). */
static bool parse_redis_double(ProtoSlice s, double *ret) {
        char buf[128], *end;

        if (!s.ptr || s.len == 0 || s.len >= sizeof(buf) || s.ptr[0] == ' ' ||
            (s.ptr[0] >= '\t' && s.ptr[0] <= '\r'))
                return false;
        memcpy(buf, s.ptr, s.len);
        buf[s.len] = '\0';
        if (strchr(buf, 'x') || strchr(buf, 'X'))
                return false;
        errno = 0;
        *ret = strtod(buf, &end);
        if ((size_t) (end - buf) != s.len || *ret != *ret ||
            (errno == ERANGE && (*ret == HUGE_VAL || *ret == -HUGE_VAL || *ret == 0)))
                return false;
        return true;
}

int client_limit_parse_gcra(int argc, const ProtoSlice *argv, ClientLimit *ret, const char **ret_error) {
        int64_t burst, per_period, tokens = 1, t;
        double period;
        const char *dummy;

        if (!ret_error)
                ret_error = &dummy;
        if (!ret || (argc > 0 && !argv))
                return *ret_error = "ERR invalid arguments", -EINVAL;
        if (argc < 4 || argc > 6)
                return *ret_error = "ERR wrong number of arguments for 'gcra' command", -EINVAL;
        *ret = (ClientLimit){ .kind = CLIENT_LIMIT_GCRA, .key = key_of(&argv[0]) };
        if (!parse_redis_ll(argv[1], &burst) || burst < 0)
                return *ret_error = "ERR value is out of range, must be positive", -EINVAL;
        if (burst < INT64_MAX)
                burst++;
        if (!parse_redis_ll(argv[2], &per_period))
                return *ret_error = "ERR value is not an integer or out of range", -EINVAL;
        if (per_period < 1)
                return *ret_error =
                               "ERR value is out of range, value must between 1 and 9223372036854775807",
                       -EINVAL;
        if (!parse_redis_double(argv[3], &period))
                return *ret_error = "ERR value is not a valid float", -EINVAL;
        if (period <= 0 || period >= 1e12)
                return *ret_error = "ERR period must be > 0 and < 1e12", -EINVAL;
        if (argc >= 5) {
                if (!resp_slice_eq(argv[4], "tokens"))
                        return *ret_error = "ERR syntax error", -EINVAL;
                if (argc == 5)
                        return *ret_error = "ERR Missing TOKENS value", -EINVAL;
                if (!parse_redis_ll(argv[5], &tokens))
                        return *ret_error = "ERR value is not an integer or out of range", -EINVAL;
                if (tokens < 1)
                        return *ret_error = "ERR value is out of range, value must between 1 and "
                                            "9223372036854775807",
                               -EINVAL;
        }
        /* T in whole µs, rounded half up as Redis's cast of (x + 0.5); at least 1 */
        t = (int64_t) (period * 1000000. / (double) per_period + 0.5);
        if (t == 0)
                t = 1;
        if (t > INT64_MAX / tokens)
                return *ret_error = GCRA_OVERFLOW_TOKENS, -EINVAL;
        if (t > INT64_MAX / burst)
                return *ret_error = GCRA_OVERFLOW_BURST, -EINVAL;
        ret->algo = (AlgoParams){
                .algorithm = ALGORITHM_TOKEN_BUCKET,
                .credit_limit = 1, /* for the store's checks: client_limit_apply() computes */
                .reset_seconds = 1,
                .peer = ALGO_PEER_REDIS,
                .peer_args = { [GCRA_T] = t,
                               [GCRA_VARIANCE] = t * burst,
                               [GCRA_INCREMENT] = t * tokens,
                               [GCRA_LIMIT] = burst },
        };
        ret->interval_usec = (uint64_t) t;
        ret->op = ALGO_TAKE;
        ret->count = (uint64_t) tokens;
        compute_id(ret, "gc", 0, 0, 0);
        return 0;
}

/* Whole seconds rounded up from µs, as Redis's ceil(us / 1000000.) (equal below 2^53 µs, 285
 * years; C's division truncates toward zero, which rounds a negative quotient up). */
static int64_t gcra_seconds(int64_t us) {
        return us > 0 ? us / 1000000 + (us % 1000000 != 0) : us / 1000000;
}

/* Redis's gcraCommand() on the state st (w1 = the TAT in µs, Redis's string value; w0 = the µs
 * from which its key has expired: PXAT = the TAT in ms rounded up, live while now <= PXAT). */
static void redis_gcra_apply(const AlgoParams *p, uint64_t now_usec, AlgoState *st, AlgoResult *res) {
        int64_t t = p->peer_args[GCRA_T], variance = p->peer_args[GCRA_VARIANCE],
                inc = p->peer_args[GCRA_INCREMENT];
        int64_t now = (int64_t) (now_usec < ALGO_NOW_MAX ? now_usec : ALGO_NOW_MAX) / 1000 * 1000;
        int64_t tat = st->w0 > (uint64_t) now && st->w1 > 0 && st->w1 <= INT64_MAX ? (int64_t) st->w1 : now;
        int64_t base = now > tat ? now : tat, new_tat, ttl, remaining = 0, retry = -1;
        i128 diff, next;

        *res = (AlgoResult){ .limit = (uint64_t) p->peer_args[GCRA_LIMIT] };
        if (INT64_MAX - base < inc) {
                res->retry = GCRA_ERROR_OVERFLOW;
                return;
        }
        new_tat = base + inc;
        diff = (i128) now - ((i128) new_tat - variance);
        if (diff < 0) {
                /* a take larger than max_burst + 1 never fits: no retry */
                if (inc <= variance)
                        retry = gcra_seconds(wrap_i64(-diff));
                ttl = tat - now;
        } else {
                uint64_t pxat_ms = ((uint64_t) new_tat + 999) / 1000;

                ttl = new_tat - now;
                st->w1 = (uint64_t) new_tat;
                st->w0 = (pxat_ms + 1) * 1000;
                if (st->w0 > ALGO_W0_MAX)
                        st->w0 = ALGO_W0_MAX;
                res->write = true;
                res->allowed = true;
        }
        next = (i128) variance - ttl;
        if (next > -(i128) t)
                remaining = wrap_i64(next / t);
        res->credit = (uint64_t) remaining;
        res->reset = (uint64_t) gcra_seconds(ttl);
        res->retry = retry;
}

/* ---- RL.REDUCE, RL.GET, RL.PREDUCE, RL.PGET --------------------------------------- */

#define SMYTE_SYNTAX  "Syntax error"
#define SMYTE_INTEGER "Value is not an integer or out of range"

enum { SMYTE_MAX, SMYTE_AMOUNT, SMYTE_REFILL_MS, SMYTE_FULL_MS, SMYTE_WALL_MS };

#define SMYTE_DEFICIT_BITS 53 /* w1's low bits: the deficit, at most max <= 2^53-1 */

int client_limit_parse_reduce(const char *cmd, int argc, const ProtoSlice *argv, ClientLimit *ret,
                              const char **ret_error) {
        bool reduce, ms;
        int64_t max, refill, amount, take, at = 0;
        bool strict = false, has_at = false;
        uint64_t refill_ms, refills, unit_ms;
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
                snprintf(ret->error, sizeof(ret->error),
                         "Wrong number of arguments for '%s' command" /* Smyte's */,
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

        /* Smyte's refill time: an int32 of seconds or ms, in ms; what our state can hold: max
         * within 53 bits, a full refill from empty within 200 years */
        if ((uint64_t) max > ALGO_CREDIT_MAX)
                return *ret_error = "ERR max must be at most 9007199254740991", -EINVAL;
        refill_ms = (uint64_t) refill * unit_ms;
        refills = (uint64_t) max / (uint64_t) amount + ((uint64_t) max % (uint64_t) amount != 0);
        if ((u128) refills * refill_ms * USEC_PER_MSEC > ALGO_FILL_USEC_MAX)
                return *ret_error = "ERR max tokens take more than 200 years to refill", -EINVAL;

        ret->algo = (AlgoParams){
                .algorithm = ALGORITHM_TOKEN_BUCKET,
                .credit_limit = 1, /* for the store's checks: client_limit_apply() computes */
                .reset_seconds = 1,
                .strict = strict,
                .peer = ALGO_PEER_SMYTE,
                .peer_args = { [SMYTE_MAX] = max,
                               [SMYTE_AMOUNT] = amount,
                               [SMYTE_REFILL_MS] = (int64_t) refill_ms,
                               [SMYTE_FULL_MS] = (int64_t) (refills * refill_ms) },
        };
        ret->op = take > 0 ? ALGO_TAKE : ALGO_PEEK; /* Smyte writes nothing for TAKE 0 */
        ret->count = (uint64_t) take;
        if (has_at) /* in µs, 0 meaning none: AT 0 is 1 µs (still ms 0) */
                ret->at_usec = at == 0 ? 1
                               : (uint64_t) at > UINT64_MAX / 1000 / unit_ms
                                       ? UINT64_MAX / 1000 * 1000
                                       : (uint64_t) at * unit_ms * USEC_PER_MSEC;
        compute_id(ret, "rl", (uint64_t) max, (uint64_t) amount, refill_ms);
        return 0;
}

/* w1's top 11 bits: how far (in s, rounded up to m << e, e 5 bits, m 6 bits) the counter's time
 * line (AT) was behind the wall clock when it was written, so that w0, the wall-clock time
 * from which the store may delete it, is that much later than its expiry on its own time line:
 * a replay of past events keeps its buckets as long as they live on the replayed time line. */
static uint64_t shift_decode(uint64_t code) {
        return (code & 63) << (code >> 6);
}

static uint64_t shift_encode(uint64_t seconds) {
        unsigned e = 0;

        while (e < 31 && seconds > (UINT64_C(63) << e))
                e++;
        if (seconds > (UINT64_C(63) << e))
                return (UINT64_C(31) << 6) | 63; /* 4300 years: more than any w0 */
        return ((uint64_t) e << 6) | ((seconds + (UINT64_C(1) << e) - 1) >> e);
}

/* Smyte's bucket on the state st: w1 = the shift (above) << 53 | max - the tokens in it (its
 * deficit); w0 = its last refill mark + SMYTE_FULL_MS (the time a refill from empty takes) +
 * the shift, in µs; 0 = no bucket. Kept until then, full or not, so that a full bucket keeps its
 * refill schedule as Smyte's stored one does (Smyte's compaction drops a bucket idle as long). */
static void smyte_apply(const AlgoParams *p, AlgoOp op, uint64_t count, uint64_t now_usec, AlgoState *st,
                        AlgoResult *res) {
        uint64_t max = (uint64_t) p->peer_args[SMYTE_MAX], amount = (uint64_t) p->peer_args[SMYTE_AMOUNT];
        uint64_t refill = (uint64_t) p->peer_args[SMYTE_REFILL_MS],
                 full = (uint64_t) p->peer_args[SMYTE_FULL_MS];
        uint64_t now =
                (now_usec < ALGO_NOW_MAX ? now_usec : ALGO_NOW_MAX) / USEC_PER_MSEC; /* as algo_apply() */
        uint64_t wall = (uint64_t) p->peer_args[SMYTE_WALL_MS];
        uint64_t have, refilled, left, shift_ms, code;
        uint64_t deficit = st->w1 & ((UINT64_C(1) << SMYTE_DEFICIT_BITS) - 1);

        shift_ms = shift_decode(st->w1 >> SMYTE_DEFICIT_BITS) * 1000;
        if (st->w0 == 0 || st->w0 / USEC_PER_MSEC < full + shift_ms) {
                have = max;
                refilled = now;
        } else {
                uint64_t last = st->w0 / USEC_PER_MSEC - full - shift_ms;
                uint64_t n = now > last ? (now - last) / refill : 0;
                u128 sum = (u128) n * amount + (max - (deficit < max ? deficit : max));

                have = sum < max ? (uint64_t) sum : max;
                refilled = last + n * refill;
        }
        res->allowed = count <= have;
        res->credit = have; /* Smyte's reply: the tokens before the take */
        res->limit = max;
        if (op != ALGO_TAKE || count == 0)
                return;
        left = count < have ? have - count : 0; /* a larger take drains the bucket */
        if (p->strict && left == 0)
                refilled = now; /* the refill clock restarts */
        code = shift_encode(wall > now ? (wall - now + 999) / 1000 : 0);
        st->w1 = code << SMYTE_DEFICIT_BITS | (max - left);
        st->w0 = (refilled + full + shift_decode(code) * 1000) * USEC_PER_MSEC;
        if (st->w0 > ALGO_W0_MAX)
                st->w0 = ALGO_W0_MAX;
        res->write = true;
}

void client_limit_set_wall_clock(ClientLimit *cl, uint64_t wall_usec) {
        if (cl->algo.peer == ALGO_PEER_SMYTE)
                cl->algo.peer_args[SMYTE_WALL_MS] = (int64_t) (wall_usec / USEC_PER_MSEC);
}

void client_limit_apply(const AlgoParams *p, AlgoOp op, uint64_t n, uint64_t now_usec, AlgoState *st,
                        AlgoResult *res) {
        if (p->peer == ALGO_PEER_CELL)
                cell_apply(p, op, now_usec, st, res);
        else if (p->peer == ALGO_PEER_SMYTE)
                smyte_apply(p, op, n, now_usec, st, res);
        else if (p->peer == ALGO_PEER_REDIS)
                redis_gcra_apply(p, now_usec, st, res);
}

int64_t client_limit_reduce_reply(const ClientLimit *cl, const AlgoResult *res) {
        if (cl->op == ALGO_RESET) /* DEL: one key, whether its cell, its GCRA counter or both lived */
                return res->credit > 0;
        return res->credit > (uint64_t) INT64_MAX ? INT64_MAX : (int64_t) res->credit;
}
