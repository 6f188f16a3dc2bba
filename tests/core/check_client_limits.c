/* SPDX-License-Identifier: MIT */
/* client-limits.c: redis-cell's CL.THROTTLE and Smyte's RL.* commands, parsed and answered by
 * divvyd's token bucket with an injected clock. The worked examples are those of the two
 * projects' documentation and tests (redis-cell's README and its rate limiter's case table,
 * Smyte's README and RateLimitHandlerTest's sequences), with divvyd's answer noted where it
 * differs on purpose (Smyte drains the bucket on a take larger than what is left: divvyd takes
 * nothing). A tiny store (counters keyed by identity and key) stands in for the daemon's. */

#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/client-limits.h"
#include "check-run.h"

#define SEC UINT64_C(1000000)
#define MS  UINT64_C(1000)
#define T0  (UINT64_C(1764000000) * SEC) /* a wall-clock start, 2025 */

/* ---- a command line, split on spaces (the tests' keys have none) ------------------- */

#define ARGS_MAX 16

typedef struct Args {
        char buf[512];
        ProtoSlice v[ARGS_MAX];
        int n;
} Args;

static Args *split(Args *a, const char *line) {
        char *p;

        ck_assert_uint_lt(strlen(line), sizeof(a->buf));
        strcpy(a->buf, line);
        a->n = 0;
        for (p = strtok(a->buf, " "); p; p = strtok(NULL, " ")) {
                ck_assert_int_lt(a->n, ARGS_MAX);
                a->v[a->n++] = (ProtoSlice){ p, strlen(p) };
        }
        return a;
}

/* ---- the daemon's part: counters by (identity, key), each applied by algo_apply() -------- */

typedef struct Counter {
        uint8_t id[CLIENT_LIMIT_ID_SIZE];
        char key[64];
        AlgoState st;
} Counter;

static Counter counters[16];
static size_t n_counters;

static AlgoState *counter_of(const ClientLimit *cl) {
        ck_assert_uint_lt(cl->key.len, sizeof(counters[0].key));
        for (size_t i = 0; i < n_counters; i++)
                if (memcmp(counters[i].id, cl->id, CLIENT_LIMIT_ID_SIZE) == 0 &&
                    strlen(counters[i].key) == cl->key.len &&
                    memcmp(counters[i].key, cl->key.ptr, cl->key.len) == 0)
                        return &counters[i].st;
        ck_assert_uint_lt(n_counters, sizeof(counters) / sizeof(counters[0]));
        memcpy(counters[n_counters].id, cl->id, CLIENT_LIMIT_ID_SIZE);
        memcpy(counters[n_counters].key, cl->key.ptr, cl->key.len);
        counters[n_counters].key[cl->key.len] = '\0';
        counters[n_counters].st = (AlgoState){ 0, 0 };
        return &counters[n_counters++].st;
}

static void counters_reset(void) {
        n_counters = 0;
        memset(counters, 0, sizeof(counters));
}

/* One call: parse, apply at now (or the client's AT), return the result; *cl kept. */
static AlgoResult apply(ClientLimit *cl, uint64_t now) {
        AlgoState *st = counter_of(cl), before = *st;
        AlgoResult res;

        algo_apply(&cl->algo, cl->op, cl->count, cl->at_usec ? cl->at_usec : now, st, &res);
        if (cl->op == ALGO_PEEK)
                ck_assert(st->w0 == before.w0 && st->w1 == before.w1 && !res.write);
        return res;
}

/* CL.THROTTLE <args> at now: its five integers into out. */
static void throttle(const char *args, uint64_t now, int64_t out[5]) {
        Args a;
        ClientLimit cl;
        const char *err = NULL;
        AlgoResult res;

        split(&a, args);
        ck_assert_msg(client_limit_parse_throttle(a.n, a.v, &cl, &err) == 0, "%s: %s", args, err);
        res = apply(&cl, now);
        ck_assert_uint_eq(client_limit_format_throttle(&cl, &res, out), 5);
}

/* RL.<cmd> <args> at now: the integer reply. */
static int64_t rl(const char *cmd, const char *args, uint64_t now) {
        Args a;
        ClientLimit cl;
        const char *err = NULL;
        AlgoResult res;

        split(&a, args);
        ck_assert_msg(client_limit_parse_reduce(cmd, a.n, a.v, &cl, &err) == 0, "%s %s: %s", cmd, args, err);
        res = apply(&cl, now);
        return client_limit_reduce_reply(&cl, &res);
}

#define ck_assert_reply(args, now, a, b, c, d, e)                                                           \
        do {                                                                                                \
                int64_t _o[5];                                                                              \
                throttle(args, now, _o);                                                                    \
                ck_assert_msg(_o[0] == (a) && _o[1] == (b) && _o[2] == (c) && _o[3] == (d) && _o[4] == (e), \
                              "CL.THROTTLE %s at +%" PRIu64 " ms: %" PRId64 " %" PRId64 " %" PRId64         \
                              " %" PRId64 " %" PRId64 ", expected %d %d %d %d %d",                          \
                              args, ((now) -T0) / MS, _o[0], _o[1], _o[2], _o[3], _o[4], a, b, c, d, e);    \
        } while (0)

/* ---- CL.THROTTLE: redis-cell's worked examples ------------------------------------ */

START_TEST (test_cell_readme) {
        counters_reset();
        /* README: "CL.THROTTLE user123 15 30 60" on a fresh key -> 0 16 15 -1 2 */
        ck_assert_reply("user123 15 30 60", T0, 0, 16, 15, -1, 2);
        /* the README's "1" is the default quantity */
        ck_assert_reply("user123 15 30 60 1", T0, 0, 16, 14, -1, 4);
}
END_TEST

START_TEST (test_cell_until_limited) {
        /* One instant: 16 pass (max_burst + 1), each adding T = 2 s until full; the 17th is
         * limited, retry after one interval, full after 32 s; after 2 s one more passes. */
        counters_reset();
        for (int i = 1; i <= 16; i++)
                ck_assert_reply("user123 15 30 60", T0, 0, 16, 16 - i, -1, 2 * i);
        ck_assert_reply("user123 15 30 60", T0, 1, 16, 0, 2, 32);
        ck_assert_reply("user123 15 30 60", T0 + 1 * SEC, 1, 16, 0, 1, 31);
        ck_assert_reply("user123 15 30 60", T0 + 2 * SEC, 0, 16, 0, -1, 32);
        /* a quantity above the limit can never pass: limited, retry -1 */
        ck_assert_reply("user123 15 30 60 17", T0 + 2 * SEC, 1, 16, 0, -1, 32);
}
END_TEST

/* redis-cell's own case table for its rate limiter (max_burst 4, 1 per second), the
 * durations rounded as CL.THROTTLE replies them (3.9 s -> 4). */
static const struct {
        uint64_t at_ms;
        int quantity;
        int limited, remaining, retry, reset;
} cell_cases[] = {
        { 0, 6, 1, 5, -1, 0 }, /* above the limit: never, the bucket untouched */
        { 0, 1, 0, 4, -1, 1 },    { 0, 1, 0, 3, -1, 2 },    { 0, 1, 0, 2, -1, 3 },
        { 0, 1, 0, 1, -1, 4 },    { 0, 1, 0, 0, -1, 5 },    { 0, 1, 1, 0, 1, 5 },
        { 3000, 1, 0, 2, -1, 3 }, { 3100, 1, 0, 1, -1, 4 }, { 4000, 1, 0, 1, -1, 4 },
        { 8000, 1, 0, 4, -1, 1 }, { 9500, 1, 0, 4, -1, 1 }, { 9500, 0, 0, 4, -1, 1 }, /* peek */
        { 9500, 2, 0, 2, -1, 3 }, { 9500, 5, 1, 2, 3, 3 },
};

START_TEST (test_cell_case_table) {
        char args[64];

        counters_reset();
        for (size_t i = 0; i < sizeof(cell_cases) / sizeof(cell_cases[0]); i++) {
                snprintf(args, sizeof(args), "foo 4 1 1 %d", cell_cases[i].quantity);
                ck_assert_reply(args, T0 + cell_cases[i].at_ms * MS, cell_cases[i].limited, 5,
                                cell_cases[i].remaining, cell_cases[i].retry, cell_cases[i].reset);
        }
}
END_TEST

START_TEST (test_cell_peek_and_refund) {
        counters_reset();
        /* quantity 0 peeks: a fresh key stays fresh */
        ck_assert_reply("k 15 30 60 0", T0, 0, 16, 16, -1, 0);
        ck_assert_reply("k 15 30 60 0", T0, 0, 16, 16, -1, 0);
        ck_assert_reply("k 15 30 60 3", T0, 0, 16, 13, -1, 6);
        ck_assert_reply("k 15 30 60 0", T0 + SEC, 0, 16, 13, -1, 5);
        /* a negative quantity gives back (redis-cell's users' -1), capped at the capacity */
        ck_assert_reply("k 15 30 60 -1", T0 + SEC, 0, 16, 14, -1, 3);
        ck_assert_reply("k 15 30 60 -100", T0 + SEC, 0, 16, 16, -1, 0);
        ck_assert_reply("k 15 30 60 -9223372036854775808", T0 + SEC, 0, 16, 16, -1, 0);
        ck_assert_reply("k 15 30 60 16", T0 + SEC, 0, 16, 0, -1, 32);
}
END_TEST

/* A denied take's reset_after is derived (client-limits.c): check it against the true time
 * until full, read from the state, over random calls with intervals of fractions of seconds. */
START_TEST (test_cell_reset_after_bound) {
        static const char *const params[] = { "k 2 3 1", "k 9 7 3", "k 0 1 1", "k 4 1 1", "k 30 10 7" };
        uint64_t seed = 12345;
        char args[64];

        for (size_t p = 0; p < sizeof(params) / sizeof(params[0]); p++) {
                uint64_t now = T0;
                int denied = 0, exact = 0;

                counters_reset();
                for (int i = 0; i < 3000; i++) {
                        Args a;
                        ClientLimit cl;
                        const char *err;
                        AlgoResult res;
                        int64_t out[5];
                        uint64_t q, full;

                        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                        now += (seed >> 33) % (700 * MS);
                        q = 1 + (seed >> 20) % 3;
                        snprintf(args, sizeof(args), "%s %" PRIu64, params[p], q);
                        split(&a, args);
                        ck_assert_int_eq(client_limit_parse_throttle(a.n, a.v, &cl, &err), 0);
                        res = apply(&cl, now);
                        client_limit_format_throttle(&cl, &res, out);
                        if (res.allowed || out[3] < 0)
                                continue;
                        denied++;
                        full = counter_of(&cl)->w0 > now ? counter_of(&cl)->w0 - now : 0;
                        full = full / SEC + (full % SEC != 0);
                        ck_assert_msg((uint64_t) out[4] >= full && (uint64_t) out[4] <= full + 1,
                                      "%s at %d: reset_after %" PRId64 ", full in %" PRIu64, args, i, out[4],
                                      full);
                        exact += (uint64_t) out[4] == full;
                        ck_assert_int_eq(out[3], res.retry);
                }
                ck_assert_int_gt(denied, 100);
                ck_assert_int_gt(exact, denied / 2); /* mostly exact */
        }
}
END_TEST

/* ---- CL.THROTTLE: parsing and the mapping ----------------------------------------- */

START_TEST (test_cell_parse) {
        Args a;
        ClientLimit cl;
        const char *err = NULL;

        ck_assert_int_eq(client_limit_parse_throttle(4, split(&a, "user123 15 30 60")->v, &cl, &err), 0);
        ck_assert_int_eq(cl.kind, CLIENT_LIMIT_THROTTLE);
        ck_assert(cl.key.ptr == a.v[0].ptr && cl.key.len == 7);
        ck_assert_int_eq(cl.algo.algorithm, ALGORITHM_TOKEN_BUCKET);
        ck_assert_uint_eq(cl.algo.burst, 16);
        ck_assert_uint_eq(cl.algo.credit_limit, 30);
        ck_assert_uint_eq(cl.algo.reset_seconds, 60);
        ck_assert_uint_eq(cl.algo.refill_seconds, 0);
        ck_assert(!cl.algo.strict);
        ck_assert_int_eq(cl.op, ALGO_TAKE);
        ck_assert_uint_eq(cl.count, 1);
        ck_assert_uint_eq(cl.at_usec, 0);
        ck_assert_uint_eq(cl.interval_usec, 2 * SEC);

        /* integers as Rust's i64 parser takes them: a sign, leading zeros */
        ck_assert_int_eq(client_limit_parse_throttle(5, split(&a, "k +0 0010 +01 -0")->v, &cl, &err), 0);
        ck_assert_uint_eq(cl.algo.burst, 1);
        ck_assert_uint_eq(cl.algo.credit_limit, 10);
        ck_assert_uint_eq(cl.algo.reset_seconds, 1);
        ck_assert_int_eq(cl.op, ALGO_PEEK);
        ck_assert_uint_eq(cl.count, 0);
        ck_assert_int_eq(client_limit_parse_throttle(5, split(&a, "k 1 1 1 -7")->v, &cl, &err), 0);
        ck_assert_int_eq(cl.op, ALGO_REFUND);
        ck_assert_uint_eq(cl.count, 7);
        ck_assert_int_eq(
                client_limit_parse_throttle(5, split(&a, "k 1 1 1 9223372036854775807")->v, &cl, &err), 0);
        ck_assert_uint_eq(cl.count, INT64_MAX);

        /* the edges divvyd's bucket holds */
        ck_assert_int_eq(
                client_limit_parse_throttle(4, split(&a, "k 6311519999999999 1000000 1")->v, &cl, &err),
                0); /* 200 years to fill at 1 per µs */
        ck_assert_int_eq(
                client_limit_parse_throttle(4, split(&a, "k 0 3155760000000000 3155760000")->v, &cl, &err),
                0);
        ck_assert_int_eq(client_limit_parse_throttle(4, split(&a, "k 1 1 3155760000")->v, &cl, &err), 0);
        ck_assert_int_eq(client_limit_parse_throttle(4, split(&a, "k 0 1000000 1")->v, &cl, &err), 0);
        ck_assert_uint_eq(cl.interval_usec, 1);
        ck_assert_int_eq(client_limit_parse_throttle(4, split(&a, "k 0 3 1")->v, &cl, &err), 0);
        ck_assert_uint_eq(cl.interval_usec, 333334); /* rounded up: the rate never rises */

        /* an empty key is a key (redis-cell's too), with a non-NULL actor */
        {
                ProtoSlice v[4] = { { NULL, 0 }, { "1", 1 }, { "1", 1 }, { "1", 1 } };
                ck_assert_int_eq(client_limit_parse_throttle(4, v, &cl, &err), 0);
                ck_assert_ptr_nonnull(cl.key.ptr);
                ck_assert_uint_eq(cl.key.len, 0);
        }
}
END_TEST

static const struct {
        const char *args;
        const char *error;
} cell_errors[] = {
        { "k 15 30",
          "Cell error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]" },
        { "k 15 30 60 1 1",
          "Cell error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]" },
        { "k abc 30 60", "Cell error: Couldn't parse as integer: abc" },
        { "k 15 3x0 60", "Cell error: Couldn't parse as integer: 3x0" },
        { "k 15 30 60 1.5", "Cell error: Couldn't parse as integer: 1.5" },
        { "k 15 30 + 1", "Cell error: Couldn't parse as integer: +" },
        { "k 15 30 -", "Cell error: Couldn't parse as integer: -" },
        { "k 15 30 0x10", "Cell error: Couldn't parse as integer: 0x10" },
        { "k 15 30 9223372036854775808", "Cell error: Couldn't parse as integer: 9223372036854775808" },
        { "k 15 30 60 -9223372036854775809", "Cell error: Couldn't parse as integer: -9223372036854775809" },
        { "k 15 0 60", "Cell error: Zero rates are not supported" },
        { "k 15 30 0", "Cell error: Zero rates are not supported" },
        { "k 15 0 -1", "Cell error: Zero rates are not supported" },
        { "k 15 -30 60", "Cell error: Negative rates are not supported" },
        { "k 15 30 -60", "Cell error: Negative rates are not supported" },
        { "k -1 30 60", "Cell error: max_burst must not be negative" },
        { "k -9223372036854775808 30 60", "Cell error: max_burst must not be negative" },
        { "k 9007199254740991 30 60", "Cell error: max_burst must be at most 9007199254740990" },
        { "k 15 9007199254740992 60", "Cell error: count must be at most 9007199254740991" },
        { "k 15 30 3155760001", "Cell error: period must be at most 3155760000 seconds (100 years)" },
        { "k 15 1000001 1", "Cell error: Rates above 1000000 per second are not supported" },
        { "k 15 2000001 2", "Cell error: Rates above 1000000 per second are not supported" },
        { "k 6311520000000000 1000000 1",
          "Cell error: max_burst + 1 tokens take more than 200 years to refill "
          "at count per period" },
        { "k 2 1 3155760000", "Cell error: max_burst + 1 tokens take more than 200 years to refill at count "
                              "per period" },
};

START_TEST (test_cell_errors) {
        Args a;
        ClientLimit cl;
        const char *err = NULL;

        for (size_t i = 0; i < sizeof(cell_errors) / sizeof(cell_errors[0]); i++) {
                split(&a, cell_errors[i].args);
                err = NULL;
                ck_assert_msg(client_limit_parse_throttle(a.n, a.v, &cl, &err) == -EINVAL, "%s",
                              cell_errors[i].args);
                ck_assert_msg(err && strcmp(err, cell_errors[i].error) == 0, "%s: \"%s\"",
                              cell_errors[i].args, err ? err : "(null)");
        }
        /* argc 0 */
        ck_assert_int_eq(client_limit_parse_throttle(0, NULL, &cl, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "Usage"));
        /* a NULL ret_error is fine */
        ck_assert_int_eq(client_limit_parse_throttle(4, split(&a, "k 15 0 60")->v, &cl, NULL), -EINVAL);
}
END_TEST

START_TEST (test_cell_errors_quoted) {
        /* an argument quoted in an error stays one printable line, cut to 64 bytes */
        char big[200];
        ProtoSlice v[4] = { { "k", 1 }, { "1\r\n2\0", 5 }, { "1", 1 }, { "1", 1 } };
        ClientLimit cl;
        const char *err = NULL;

        ck_assert_int_eq(client_limit_parse_throttle(4, v, &cl, &err), -EINVAL);
        ck_assert_str_eq(err, "Cell error: Couldn't parse as integer: 1??2?");
        memset(big, '7', sizeof(big));
        big[0] = 'x';
        v[1] = (ProtoSlice){ big, sizeof(big) };
        ck_assert_int_eq(client_limit_parse_throttle(4, v, &cl, &err), -EINVAL);
        ck_assert_uint_eq(strlen(err), strlen("Cell error: Couldn't parse as integer: ") + 64 + 3);
        ck_assert_str_eq(err + strlen(err) - 4, "7...");
        v[1] = (ProtoSlice){ NULL, 0 };
        ck_assert_int_eq(client_limit_parse_throttle(4, v, &cl, &err), -EINVAL);
        ck_assert_str_eq(err, "Cell error: Couldn't parse as integer: ");
}
END_TEST

/* ---- counter identity -------------------------------------------------------------- */

static void id_of(bool cell, const char *cmd, const char *args, uint8_t id[CLIENT_LIMIT_ID_SIZE]) {
        Args a;
        ClientLimit cl;
        const char *err = NULL;

        split(&a, args);
        if (cell)
                ck_assert_int_eq(client_limit_parse_throttle(a.n, a.v, &cl, &err), 0);
        else
                ck_assert_msg(client_limit_parse_reduce(cmd, a.n, a.v, &cl, &err) == 0, "%s", err);
        memcpy(id, cl.id, CLIENT_LIMIT_ID_SIZE);
}

#define SAME(a, b)      ck_assert(memcmp(a, b, CLIENT_LIMIT_ID_SIZE) == 0)
#define DIFFERENT(a, b) ck_assert(memcmp(a, b, CLIENT_LIMIT_ID_SIZE) != 0)

START_TEST (test_identity) {
        uint8_t x[16], y[16];

        id_of(true, NULL, "user123 15 30 60", x);
        id_of(true, NULL, "user123 15 30 60 5", y);
        SAME(x, y); /* quantity is per call */
        id_of(true, NULL, "user123 15 30 60 -1", y);
        SAME(x, y);
        id_of(true, NULL, "user123 15 30 61", y);
        DIFFERENT(x, y);
        id_of(true, NULL, "user123 15 31 60", y);
        DIFFERENT(x, y);
        id_of(true, NULL, "user123 14 30 60", y);
        DIFFERENT(x, y);
        id_of(true, NULL, "user124 15 30 60", y);
        DIFFERENT(x, y);
        id_of(false, "RL.REDUCE", "user123 15 30 REFILL 60", y);
        DIFFERENT(x, y); /* the namespaces */

        id_of(false, "rl.reduce", "k 2 60", x);
        id_of(false, "RL.PREDUCE", "k 2 60000", y);
        SAME(x, y); /* Smyte keys by refill time in ms */
        id_of(false, "rl.get", "k 2 60 STRICT AT 5", y);
        SAME(x, y);
        id_of(false, "rl.reduce", "k 2 60 TAKE 2 REFILL 2", y);
        SAME(x, y); /* REFILL defaults to max */
        id_of(false, "rl.reduce", "k 2 60 REFILL 1", y);
        DIFFERENT(x, y);
        id_of(false, "rl.reduce", "k 3 60", y);
        DIFFERENT(x, y);
        id_of(false, "rl.reduce", "k 2 61", y);
        DIFFERENT(x, y);
        id_of(false, "rl.reduce", "k2 2 60", y);
        DIFFERENT(x, y);
}
END_TEST

/* ---- RL.*: Smyte's worked examples ------------------------------------------------ */

START_TEST (test_smyte_readme) {
        counters_reset();
        /* README: RL.REDUCE twoPerMin 2 60 -> 2, 1, 0 */
        ck_assert_int_eq(rl("RL.REDUCE", "twoPerMin 2 60", T0), 2);
        ck_assert_int_eq(rl("RL.REDUCE", "twoPerMin 2 60", T0 + 1 * SEC), 1);
        ck_assert_int_eq(rl("RL.REDUCE", "twoPerMin 2 60", T0 + 2 * SEC), 0);
        ck_assert_int_eq(rl("RL.REDUCE", "twoPerMin 2 60", T0 + 59 * SEC), 0);
        /* every refilltime (from the first take) REFILL tokens, by default max */
        ck_assert_int_eq(rl("RL.GET", "twoPerMin 2 60", T0 + 60 * SEC), 2);
        ck_assert_int_eq(rl("RL.REDUCE", "twoPerMin 2 60", T0 + 60 * SEC), 2);
        /* the millisecond variant names the same bucket */
        ck_assert_int_eq(rl("RL.PGET", "twoPerMin 2 60000", T0 + 60 * SEC), 1);
        ck_assert_int_eq(rl("RL.PREDUCE", "twoPerMin 2 60000", T0 + 60 * SEC), 1);
        ck_assert_int_eq(rl("RL.PREDUCE", "twoPerMin 2 60000", T0 + 60 * SEC), 0);
}
END_TEST

START_TEST (test_smyte_sequence) {
        /* RateLimitHandlerTest's GetReduceCommands, with client times (AT). */
        counters_reset();
        ck_assert_int_eq(rl("rl.reduce", "a 10 5 refill 3 at 2", 0), 10);
        ck_assert_int_eq(rl("rl.preduce", "a 10 5000 at 2000 refill 3", 0), 9);
        ck_assert_int_eq(rl("rl.get", "a 10 5 at 2 refill 3", 0), 8);
        ck_assert_int_eq(rl("rl.pget", "a 10 5000 refill 3 at 2000", 0), 8);
        ck_assert_int_eq(rl("rl.reduce", "a 10 5 at 2 refill 3 take 5", 0), 8);
        /* 3 left: a take of 5 answers 3 (the client sees 3 < 5: denied)... */
        ck_assert_int_eq(rl("rl.preduce", "a 10 5000 refill 3 take 5 at 2000", 0), 3);
        /* ... and here divvyd parts from Smyte on purpose: Smyte drained the bucket (its GET
         * answers 0), divvyd took nothing (3 are left) */
        ck_assert_int_eq(rl("rl.get", "a 10 5 at 2 refill 3", 0), 3);
        /* one refill of 3 at 7 (refilltime 5 after the first take at 2): Smyte's 0 + 3, ours 3 + 3 */
        ck_assert_int_eq(rl("rl.get", "a 10 5 at 8 refill 3", 0), 6);
        ck_assert_int_eq(rl("rl.reduce", "a 10 5 at 8 take 2 refill 3", 0), 6);
        ck_assert_int_eq(rl("rl.preduce", "a 10 5000 at 8000 refill 3", 0), 4);
        ck_assert_int_eq(rl("rl.preduce", "a 10 5000 at 9000 refill 3", 0), 3);
        /* the next refill at 12 */
        ck_assert_int_eq(rl("rl.get", "a 10 5 at 11 refill 3", 0), 2);
        ck_assert_int_eq(rl("rl.get", "a 10 5 at 13 refill 3", 0), 5);
}
END_TEST

START_TEST (test_smyte_adjust_amount) {
        /* RateLimitHandlerTest's AdjustAmount: max 1000, refill 100 every 60 s, 100 left with the
         * last refill at 2 s: none by 53 s, two by 123 s, full by 1312 s. */
        counters_reset();
        ck_assert_int_eq(rl("RL.REDUCE", "k 1000 60 REFILL 100 TAKE 900 AT 2", 0), 1000);
        ck_assert_int_eq(rl("RL.GET", "k 1000 60 REFILL 100 AT 53", 0), 100);
        ck_assert_int_eq(rl("RL.GET", "k 1000 60 REFILL 100 AT 123", 0), 300);
        ck_assert_int_eq(rl("RL.PGET", "k 1000 60000 REFILL 100 AT 1312000", 0), 1000);
}
END_TEST

START_TEST (test_smyte_take_too_many) {
        /* Smyte's defect, not copied: a take larger than what is left takes nothing */
        counters_reset();
        ck_assert_int_eq(rl("RL.REDUCE", "k 5 60 TAKE 3", T0), 5);
        ck_assert_int_eq(rl("RL.REDUCE", "k 5 60 TAKE 3", T0), 2);
        ck_assert_int_eq(rl("RL.GET", "k 5 60", T0), 2);
        ck_assert_int_eq(rl("RL.REDUCE", "k 5 60 TAKE 2", T0), 2);
        ck_assert_int_eq(rl("RL.GET", "k 5 60", T0), 0);
        /* above max: never, the bucket untouched */
        ck_assert_int_eq(rl("RL.REDUCE", "k 5 60 TAKE 6", T0 + 60 * SEC), 5);
        ck_assert_int_eq(rl("RL.GET", "k 5 60", T0 + 60 * SEC), 5);
        /* TAKE 0 peeks (apply() checks that nothing is written) */
        ck_assert_int_eq(rl("RL.REDUCE", "k 5 60 TAKE 0", T0 + 60 * SEC), 5);
        ck_assert_int_eq(rl("RL.REDUCE", "k 5 60", T0 + 60 * SEC), 5);
        ck_assert_int_eq(rl("RL.REDUCE", "k 5 60 TAKE 0", T0 + 60 * SEC), 4);
}
END_TEST

START_TEST (test_smyte_strict) {
        /* max 10, 3 every 5 s, emptied at 0 s. STRICT: a denied take restarts the refill clock, so
         * a client that keeps asking gets nothing until it waits a whole refilltime. */
        counters_reset();
        ck_assert_int_eq(rl("rl.reduce", "s 10 5 refill 3 take 10 strict at 100", 0), 10);
        ck_assert_int_eq(rl("rl.reduce", "s 10 5 refill 3 strict at 104", 0), 0);
        ck_assert_int_eq(rl("rl.reduce", "s 10 5 refill 3 strict at 108", 0), 0);
        ck_assert_int_eq(rl("rl.reduce", "s 10 5 refill 3 strict at 112", 0), 0);
        /* a GET restarts nothing, even with STRICT */
        ck_assert_int_eq(rl("rl.get", "s 10 5 refill 3 strict at 116", 0), 0);
        ck_assert_int_eq(rl("rl.reduce", "s 10 5 refill 3 strict at 117", 0), 3);
        /* the same calls without STRICT: the refill at 105 */
        ck_assert_int_eq(rl("rl.reduce", "n 10 5 refill 3 take 10 at 100", 0), 10);
        ck_assert_int_eq(rl("rl.reduce", "n 10 5 refill 3 at 104", 0), 0);
        ck_assert_int_eq(rl("rl.reduce", "n 10 5 refill 3 at 108", 0), 3);
}
END_TEST

/* ---- RL.*: parsing ----------------------------------------------------------------- */

static const struct {
        const char *cmd, *args;
        uint64_t max, refill_s, amount;
        AlgoOp op;
        uint64_t count;
        bool strict;
        uint64_t at_usec;
} rl_parse_cases[] = {
        /* RateLimitHandlerTest's ParseRateLimitArgsWithOutErrors, where divvyd takes them (it
         * refills in whole seconds: Smyte's "rl.pget abc 10 500" is refused below) */
        { "rl.get", "abc 10 60", 10, 60, 10, ALGO_PEEK, 0, false, 0 },
        { "rl.reduce", "abc 10 500 REFILL 5 take 2 at 1005", 10, 500, 5, ALGO_TAKE, 2, false, 1005 * SEC },
        { "rl.preduce", "abc 20 5000 at 1005 take 2", 20, 5, 20, ALGO_TAKE, 2, false, 1005 * MS },
        { "rl.get", "abc 10 700 REFILL 3 at 2005", 10, 700, 3, ALGO_PEEK, 0, false, 2005 * SEC },
        { "rl.pget", "abc 20 7000 at 3005", 20, 7, 20, ALGO_PEEK, 0, false, 3005 * MS },
        { "rl.preduce", "abc 20 7000 STRICT at 3005 REFILL 4", 20, 7, 4, ALGO_TAKE, 1, true, 3005 * MS },
        { "rl.preduce", "abc 20 700000 at 3005000 REFILL 4 TAKE 3 STRICT", 20, 700, 4, ALGO_TAKE, 3, true,
          3005 * SEC },
        /* any case, last option wins, TAKE 0 peeks, AT 0 is the epoch (not "none") */
        { "RL.Reduce", "k 5 60 Refill 2 rEfIlL 3 take 0", 5, 60, 3, ALGO_PEEK, 0, false, 0 },
        { "RL.REDUCE", "k 5 60 TAKE 0 take 4", 5, 60, 5, ALGO_TAKE, 4, false, 0 },
        { "rl.REDUCE", "k 5 60 At 7 AT 0", 5, 60, 5, ALGO_TAKE, 1, false, 1 },
        { "RL.REDUCE", "k 5 60 STRICT strict", 5, 60, 5, ALGO_TAKE, 1, true, 0 },
        { "rl.reduce", "k +5 060 TAKE +2", 5, 60, 5, ALGO_TAKE, 2, false, 0 },
        /* the edges */
        { "rl.reduce", "k 1000000 1", 1000000, 1, 1000000, ALGO_TAKE, 1, false, 0 },
        { "rl.reduce", "k 4294967294000000 2147483647 REFILL 2147483647000000", 4294967294000000ULL,
          2147483647, 2147483647000000ULL, ALGO_TAKE, 1, false, 0 }, /* 2 refills of 68 years */
        { "rl.reduce", "k 10 2147483647", 10, 2147483647, 10, ALGO_TAKE, 1, false, 0 },
        { "rl.reduce", "k 1 1 TAKE 9223372036854775807", 1, 1, 1, ALGO_TAKE, INT64_MAX, false, 0 },
        { "rl.reduce", "k 10 1 REFILL 1000000", 10, 1, 1000000, ALGO_TAKE, 1, false, 0 },
        { "rl.preduce", "k 10 1000 AT 99999999999000", 10, 1, 10, ALGO_TAKE, 1, false, 99999999999 * SEC },
        { "rl.reduce", "k 10 1 AT 99999999999", 10, 1, 10, ALGO_TAKE, 1, false, 99999999999 * SEC },
};

START_TEST (test_smyte_parse) {
        for (size_t i = 0; i < sizeof(rl_parse_cases) / sizeof(rl_parse_cases[0]); i++) {
                Args a;
                ClientLimit cl;
                const char *err = NULL;

                split(&a, rl_parse_cases[i].args);
                ck_assert_msg(client_limit_parse_reduce(rl_parse_cases[i].cmd, a.n, a.v, &cl, &err) == 0,
                              "%s %s: %s", rl_parse_cases[i].cmd, rl_parse_cases[i].args, err);
                ck_assert_int_eq(cl.kind, CLIENT_LIMIT_REDUCE);
                ck_assert(cl.key.ptr == a.v[0].ptr && cl.key.len == a.v[0].len);
                ck_assert_int_eq(cl.algo.algorithm, ALGORITHM_TOKEN_BUCKET);
                ck_assert_uint_eq(cl.algo.burst, rl_parse_cases[i].max);
                ck_assert_uint_eq(cl.algo.refill_seconds, rl_parse_cases[i].refill_s);
                /* amount per refill: creditLimit amount per resetSeconds refilltime */
                ck_assert_uint_eq(cl.algo.credit_limit, rl_parse_cases[i].amount);
                ck_assert_uint_eq(cl.algo.reset_seconds, rl_parse_cases[i].refill_s);
                ck_assert_int_eq(cl.op, rl_parse_cases[i].op);
                ck_assert_uint_eq(cl.count, rl_parse_cases[i].count);
                ck_assert_int_eq(cl.algo.strict, rl_parse_cases[i].strict);
                ck_assert_uint_eq(cl.at_usec, rl_parse_cases[i].at_usec);
                ck_assert_uint_eq(cl.interval_usec, 0);
        }
}
END_TEST

static const struct {
        const char *cmd, *args, *error;
} rl_errors[] = {
        /* RateLimitHandlerTest's ParseRateLimitArgsWithErrors */
        { "rl.get", "abc 10 abc", "Value is not an integer or out of range" },
        { "rl.pget", "abc 0 60", "Value is not an integer or out of range" },
        { "rl.reduce", "abc 10 60 refill strict 1", "Value is not an integer or out of range" },
        { "rl.pget", "abc 0 60 take 2", "Syntax error" },
        { "rl.reduce", "abc 10 60 refill", "Syntax error" },
        { "rl.preduce", "abc 10 60 refill 1 strict abc", "Syntax error" },
        /* more of Smyte's rules */
        { "rl.reduce", "k x 60", "Value is not an integer or out of range" },
        { "rl.reduce", "k 10 60 foo 1", "Syntax error" },
        { "rl.reduce", "k 10 60 foo bar", "Value is not an integer or out of range" },
        { "rl.get", "k 10 60 TAKE 1", "Syntax error" },
        { "rl.reduce", "k 10 2147483648", "Value is not an integer or out of range" }, /* an int32 */
        { "rl.reduce", "k 10 -2147483649", "Value is not an integer or out of range" },
        { "rl.reduce", "k 10 0", "Value is not an integer or out of range" },
        { "rl.reduce", "k 10 -1", "Value is not an integer or out of range" },
        { "rl.reduce", "k 0 60", "Value is not an integer or out of range" },
        { "rl.reduce", "k 10 60 REFILL 0", "Value is not an integer or out of range" },
        { "rl.reduce", "k 10 60 TAKE -1", "Value is not an integer or out of range" },
        { "rl.reduce", "k 10 60 AT -1", "Value is not an integer or out of range" },
        { "rl.reduce", "k 10 60 AT 9223372036854775808", "Value is not an integer or out of range" },
        { "rl.reduce", "k 10 60 AT 100000000000", "Value is not an integer or out of range" },
        { "rl.preduce", "k 10 60000 AT 99999999999001", "Value is not an integer or out of range" },
        /* the number of arguments (Smyte's: 3 to 10, 8 for the GETs) */
        { "rl.reduce", "k 10", "ERR wrong number of arguments for 'rl.reduce' command" },
        { "RL.PGET", "k 10 60 AT 1 AT 2 STRICT STRICT",
          "ERR wrong number of arguments for 'rl.pget' command" },
        { "rl.preduce", "k 10 60000 AT 1 AT 2 AT 3 STRICT STRICT",
          "ERR wrong number of arguments for 'rl.preduce' command" },
        { "rl.get", "k", "ERR wrong number of arguments for 'rl.get' command" },
        { "rl.sessionize", "k 10 60", "ERR unknown command" },
        { "rl.reduc", "k 10 60", "ERR unknown command" },
        /* what divvyd's bucket cannot hold */
        { "rl.preduce", "k 10 1500",
          "ERR divvyd refills in whole seconds: the refilltime of RL.PREDUCE and "
          "RL.PGET must be a multiple of 1000" },
        { "rl.pget", "k 10 999",
          "ERR divvyd refills in whole seconds: the refilltime of RL.PREDUCE and RL.PGET "
          "must be a multiple of 1000" },
        { "rl.reduce", "k 9007199254740992 60", "ERR max must be at most 9007199254740991" },
        { "rl.reduce", "k 10 60 REFILL 9007199254740992", "ERR REFILL must be at most 9007199254740991" },
        { "rl.reduce", "k 1000001 1",
          "ERR REFILL (default: max) above 1000000 tokens per second of refilltime is "
          "not supported" },
        { "rl.reduce", "k 10 1 REFILL 1000001",
          "ERR REFILL (default: max) above 1000000 tokens per second of "
          "refilltime is not supported" },
        { "rl.reduce", "k 100 2000000000 REFILL 1", "ERR max tokens take more than 200 years to refill" },
};

START_TEST (test_smyte_errors) {
        for (size_t i = 0; i < sizeof(rl_errors) / sizeof(rl_errors[0]); i++) {
                Args a;
                ClientLimit cl;
                const char *err = NULL;

                split(&a, rl_errors[i].args);
                ck_assert_msg(client_limit_parse_reduce(rl_errors[i].cmd, a.n, a.v, &cl, &err) == -EINVAL,
                              "%s %s", rl_errors[i].cmd, rl_errors[i].args);
                ck_assert_msg(err && strcmp(err, rl_errors[i].error) == 0, "%s %s: \"%s\"", rl_errors[i].cmd,
                              rl_errors[i].args, err ? err : "(null)");
        }
}
END_TEST

/* ---- the reply formatters on their own -------------------------------------------- */

START_TEST (test_format) {
        Args a;
        ClientLimit cl;
        const char *err;
        int64_t out[5];
        AlgoResult res;

        /* a StoreHit's outputs, as the daemon passes them */
        ck_assert_int_eq(client_limit_parse_throttle(4, split(&a, "k 15 30 60")->v, &cl, &err), 0);
        res = (AlgoResult){ .allowed = true, .credit = 15, .limit = 16, .reset = 2, .retry = 0 };
        client_limit_format_throttle(&cl, &res, out);
        ck_assert(out[0] == 0 && out[1] == 16 && out[2] == 15 && out[3] == -1 && out[4] == 2);
        res = (AlgoResult){ .allowed = false, .credit = 0, .limit = 16, .reset = 2, .retry = 2 };
        client_limit_format_throttle(&cl, &res, out);
        ck_assert(out[0] == 1 && out[1] == 16 && out[2] == 0 && out[3] == 2 && out[4] == 32);
        res = (AlgoResult){ .allowed = false, .credit = 3, .limit = 16, .reset = 7, .retry = -1 };
        client_limit_format_throttle(&cl, &res, out);
        ck_assert(out[0] == 1 && out[2] == 3 && out[3] == -1 && out[4] == 7);

        ck_assert_int_eq(
                client_limit_parse_reduce("rl.reduce", 5, split(&a, "k 10 60 TAKE 4")->v, &cl, &err), 0);
        res = (AlgoResult){ .allowed = true, .credit = 6, .limit = 10 };
        ck_assert_int_eq(client_limit_reduce_reply(&cl, &res), 10);
        res = (AlgoResult){ .allowed = false, .credit = 3, .limit = 10, .retry = 60 };
        ck_assert_int_eq(client_limit_reduce_reply(&cl, &res), 3);
        ck_assert_int_eq(client_limit_parse_reduce("rl.get", 3, split(&a, "k 10 60")->v, &cl, &err), 0);
        res = (AlgoResult){ .allowed = true, .credit = 6, .limit = 10 };
        ck_assert_int_eq(client_limit_reduce_reply(&cl, &res), 6);
}
END_TEST

static Suite *client_limits_suite(void) {
        Suite *s = suite_create("client-limits");
        TCase *tc = tcase_create("cell");

        tcase_add_test(tc, test_cell_readme);
        tcase_add_test(tc, test_cell_until_limited);
        tcase_add_test(tc, test_cell_case_table);
        tcase_add_test(tc, test_cell_peek_and_refund);
        tcase_add_test(tc, test_cell_reset_after_bound);
        tcase_add_test(tc, test_cell_parse);
        tcase_add_test(tc, test_cell_errors);
        tcase_add_test(tc, test_cell_errors_quoted);
        suite_add_tcase(s, tc);
        tc = tcase_create("smyte");
        tcase_add_test(tc, test_smyte_readme);
        tcase_add_test(tc, test_smyte_sequence);
        tcase_add_test(tc, test_smyte_adjust_amount);
        tcase_add_test(tc, test_smyte_take_too_many);
        tcase_add_test(tc, test_smyte_strict);
        tcase_add_test(tc, test_smyte_parse);
        tcase_add_test(tc, test_smyte_errors);
        suite_add_tcase(s, tc);
        tc = tcase_create("common");
        tcase_add_test(tc, test_identity);
        tcase_add_test(tc, test_format);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        return check_run_suite(client_limits_suite());
}
