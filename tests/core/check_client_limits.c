/* SPDX-License-Identifier: MIT */
/* client-limits.c: redis-cell's CL.THROTTLE and Smyte's RL.* commands, parsed and answered
 * with the peers' own arithmetic and an injected clock. The peers' own test expectations are
 * data (tests/data/peers/redis-cell.tsv, smyte.tsv), replayed here through parse, apply and
 * format (and by tests/integration/test_peers.py through RESP); the rest are worked examples
 * of the two projects' documentation and values derived from their code. A tiny store
 * (counters keyed by identity and key, swept by the wall clock) stands in for the daemon's. */

#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/client-limits.h"
#include "core/resp.h"
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

/* The store's sweeper at wall-clock now: counters with w0 <= now are deleted. */
static void counters_sweep(uint64_t now) {
        for (size_t i = 0; i < n_counters; i++)
                if (counters[i].st.w0 <= now)
                        counters[i].st = (AlgoState){ 0, 0 };
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

/* CL.THROTTLE <args> at now: its error reply's text, or NULL */
static const char *throttle_error(const char *args, uint64_t now) {
        Args a;
        ClientLimit cl;
        const char *err = NULL;
        AlgoResult res;

        split(&a, args);
        if (client_limit_parse_throttle(a.n, a.v, &cl, &err) < 0)
                return err;
        res = apply(&cl, now);
        return client_limit_throttle_error(&res);
}

START_TEST (test_cell_peek_and_refund) {
        /* values from redis-cell's arithmetic (T 2 s, tolerance 32 s) */
        counters_reset();
        /* quantity 0 peeks: a fresh key stays fresh */
        ck_assert_reply("k 15 30 60 0", T0, 0, 16, 16, -1, 0);
        ck_assert_reply("k 15 30 60 0", T0, 0, 16, 16, -1, 0);
        ck_assert_reply("k 15 30 60 3", T0, 0, 16, 13, -1, 6);
        ck_assert_reply("k 15 30 60 0", T0 + SEC, 0, 16, 13, -1, 5);
        /* a negative quantity moves the TAT back by as many intervals */
        ck_assert_reply("k 15 30 60 -1", T0 + SEC, 0, 16, 14, -1, 3);
        /* past full: the TAT is written 196 s in the past, and setting the key's TTL (negative)
         * fails: redis-cell answers an error; the key then counts as fresh */
        ck_assert_str_eq(throttle_error("k 15 30 60 -100", T0 + SEC),
                         "Cell error: Error while setting key expire");
        ck_assert_reply("k 15 30 60 0", T0 + SEC, 0, 16, 16, -1, 0);
        /* a refund that ends within 1 ms of now is fine (a TTL of 0 or -1 ms) */
        ck_assert_reply("k 15 30 60 1", T0 + SEC, 0, 16, 15, -1, 2);
        ck_assert_reply("k 15 30 60 -1", T0 + SEC + 500, 0, 16, 16, -1, 0);
        /* 2 s * -2^63 wraps to 0 in Rust's i64: a take of nothing */
        ck_assert_reply("k 15 30 60 -9223372036854775808", T0 + SEC, 0, 16, 16, -1, 0);
        ck_assert_reply("k 15 30 60 16", T0 + SEC, 0, 16, 0, -1, 32);
}
END_TEST

/* reset_after and retry_after as redis-cell rounds them from the exact TAT (ns): whole seconds,
 * plus 1 if the millisecond part is > 0, over random calls at fractions of seconds. */
static int64_t cell_round(int64_t ns) {
        return ns / 1000000000 + (ns % 1000000000 >= 1000000);
}

START_TEST (test_cell_rounding) {
        static const char *const params[] = { "k 2 3 1", "k 9 7 3", "k 0 1 1", "k 4 1 1", "k 30 10 7" };
        uint64_t seed = 12345;
        char args[64];

        for (size_t p = 0; p < sizeof(params) / sizeof(params[0]); p++) {
                uint64_t now = T0;
                int denied = 0;

                counters_reset();
                for (int i = 0; i < 3000; i++) {
                        Args a;
                        ClientLimit cl;
                        const char *err;
                        AlgoResult res;
                        AlgoState before;
                        int64_t out[5];
                        uint64_t q, tat;

                        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                        now += (seed >> 33) % (700 * MS);
                        q = 1 + (seed >> 20) % 3;
                        snprintf(args, sizeof(args), "%s %" PRIu64, params[p], q);
                        split(&a, args);
                        ck_assert_int_eq(client_limit_parse_throttle(a.n, a.v, &cl, &err), 0);
                        before = *counter_of(&cl);
                        res = apply(&cl, now);
                        ck_assert_ptr_null(client_limit_throttle_error(&res));
                        client_limit_format_throttle(&cl, &res, out);
                        if (res.allowed)
                                continue;
                        denied++;
                        /* denied, the reset is TAT - now; retry, TAT + q * T - (burst + 1) * T - now */
                        tat = before.w0 > now ? before.w1 : now * 1000;
                        ck_assert_msg(out[4] == cell_round((int64_t) (tat - now * 1000)),
                                      "%s at %d: reset_after %" PRId64, args, i, out[4]);
                        if (out[3] >= 0) {
                                unsigned burst, count, period;
                                uint64_t t;

                                ck_assert_int_eq(sscanf(params[p], "k %u %u %u", &burst, &count, &period),
                                                 3);
                                t = (uint64_t) ((double) period * 1e9 / count);
                                ck_assert_int_eq(
                                        out[3],
                                        cell_round((int64_t) (tat + q * t - (burst + 1) * t - now * 1000)));
                        }
                }
                ck_assert_int_gt(denied, 100);
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
        ck_assert_int_eq(cl.algo.peer, ALGO_PEER_CELL);
        ck_assert_int_eq(cl.op, ALGO_TAKE);
        ck_assert_uint_eq(cl.count, 1);
        ck_assert_uint_eq(cl.at_usec, 0);
        ck_assert_uint_eq(cl.interval_usec, 2 * SEC);

        /* integers as Rust's i64 parser takes them: a sign, leading zeros */
        ck_assert_int_eq(client_limit_parse_throttle(5, split(&a, "k +0 0010 +01 -0")->v, &cl, &err), 0);
        ck_assert_int_eq(cl.op, ALGO_PEEK);
        ck_assert_uint_eq(cl.count, 0);
        ck_assert_int_eq(client_limit_parse_throttle(5, split(&a, "k 1 1 1 -7")->v, &cl, &err), 0);
        ck_assert_int_eq(cl.op, ALGO_TAKE);
        ck_assert_uint_eq(cl.count, (uint64_t) -7);

        /* the emission interval in ns, truncated as redis-cell's f64 division: up to 10^9/s */
        ck_assert_int_eq(client_limit_parse_throttle(4, split(&a, "k 0 3 1")->v, &cl, &err), 0);
        ck_assert_uint_eq(cl.interval_usec, 333333);
        ck_assert_int_eq(client_limit_parse_throttle(4, split(&a, "k 0 1000000000 1")->v, &cl, &err), 0);
        ck_assert_int_eq(client_limit_parse_throttle(4, split(&a, "k 0 999999 1")->v, &cl, &err), 0);
        ck_assert_uint_eq(cl.interval_usec, 1);

        /* an empty key is a key (redis-cell's too), with a non-NULL actor */
        {
                ProtoSlice v[4] = { { NULL, 0 }, { "1", 1 }, { "1", 1 }, { "1", 1 } };
                ck_assert_int_eq(client_limit_parse_throttle(4, v, &cl, &err), 0);
                ck_assert_ptr_nonnull(cl.key.ptr);
                ck_assert_uint_eq(cl.key.len, 0);
        }
}
END_TEST

START_TEST (test_cell_rates) {
        /* 999,999 per second: T = 1000 ns (1000.001 truncated), as redis-cell: 1000 takes pass
         * in one instant with max_burst 999 and the next one 1 µs later */
        counters_reset();
        for (int i = 0; i < 1000; i++) /* reset_after: under 1 ms is 0 s */
                ck_assert_reply("r 999 999999 1", T0, 0, 1000, 999 - i, -1, i == 999);
        ck_assert_reply("r 999 999999 1", T0, 1, 1000, 0, 0, 1);
        ck_assert_reply("r 999 999999 1", T0 + 1, 0, 1000, 0, -1, 1);
        /* negative and huge parameters, answered as redis-cell's arithmetic answers them */
        counters_reset();
        ck_assert_reply("n 15 -30 60", T0, 1, 16, 0, -1, 0); /* T -2 s: never passes */
        ck_assert_reply("m -1 30 60", T0, 1, 0, 0, -1, 0);   /* limit 0 */
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
        { "k 15 1000000001 1", "Cell error: Zero rates are not supported" }, /* T rounds to 0 ns */
        { "k 15 -9223372036854775808 1", "Cell error: Zero rates are not supported" },
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
        SAME(x, y); /* the key alone is the cell, as in redis-cell */
        id_of(true, NULL, "user123 15 31 60", y);
        SAME(x, y);
        id_of(true, NULL, "user123 14 30 60", y);
        SAME(x, y);
        id_of(true, NULL, "user124 15 30 60", y);
        DIFFERENT(x, y);
        {
                Args a;
                ClientLimit cl;
                const char *err = NULL;

                /* DEL names the cell by its key alone */
                ck_assert_int_eq(client_limit_parse_del(1, split(&a, "user123")->v, &cl, &err), 0);
                SAME(x, cl.id);
                ck_assert(cl.op == ALGO_RESET && cl.key.len == 7);
                /* and the key's GCRA counter, as GCRA names it */
                {
                        ClientLimit g;
                        ck_assert_int_eq(
                                client_limit_parse_gcra(4, split(&a, "user123 15 30 60")->v, &g, &err), 0);
                        ck_assert(cl.has_also);
                        SAME(cl.also_id, g.id);
                        DIFFERENT(cl.also_id, cl.id);
                        ck_assert_int_eq(client_limit_reduce_reply(&cl, &(AlgoResult){ .credit = 2 }), 1);
                        ck_assert_int_eq(client_limit_reduce_reply(&cl, &(AlgoResult){ .credit = 0 }), 0);
                }
                ck_assert_int_eq(client_limit_parse_del(2, split(&a, "user123 k2")->v, &cl, &err), -EINVAL);
                ck_assert_str_eq(err, "ERR divvyd's DEL takes one key: a CL.THROTTLE cell or GCRA counter");
                ck_assert_int_eq(client_limit_parse_del(0, NULL, &cl, &err), -EINVAL);
        }
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

START_TEST (test_smyte_drain) {
        /* a take larger than what is left drains the bucket (Smyte's max(left - take, 0)) */
        counters_reset();
        ck_assert_int_eq(rl("RL.REDUCE", "k 5 60 TAKE 3", T0), 5);
        ck_assert_int_eq(rl("RL.REDUCE", "k 5 60 TAKE 3", T0), 2);
        ck_assert_int_eq(rl("RL.GET", "k 5 60", T0), 0);
        /* above max too: one refill of 5 at 60 s, all taken */
        ck_assert_int_eq(rl("RL.REDUCE", "k 5 60 TAKE 6", T0 + 60 * SEC), 5);
        ck_assert_int_eq(rl("RL.GET", "k 5 60", T0 + 60 * SEC), 0);
        /* TAKE 0 peeks (apply() checks that nothing is written) */
        ck_assert_int_eq(rl("RL.REDUCE", "k 5 60 TAKE 0", T0 + 120 * SEC), 5);
        ck_assert_int_eq(rl("RL.REDUCE", "k 5 60", T0 + 120 * SEC), 5);
        ck_assert_int_eq(rl("RL.REDUCE", "k 5 60 TAKE 0", T0 + 120 * SEC), 4);
}
END_TEST

START_TEST (test_smyte_schedule) {
        /* a bucket refilled to full keeps its schedule: refills at 0 + k * 60 s */
        counters_reset();
        ck_assert_int_eq(rl("RL.REDUCE", "f 2 60", T0), 2);
        ck_assert_int_eq(rl("RL.GET", "f 2 60", T0 + 200 * SEC), 2);
        ck_assert_int_eq(rl("RL.REDUCE", "f 2 60 TAKE 2", T0 + 200 * SEC), 2);
        ck_assert_int_eq(rl("RL.GET", "f 2 60", T0 + 239 * SEC), 0);
        ck_assert_int_eq(rl("RL.GET", "f 2 60", T0 + 240 * SEC), 2);
        /* sub-second refills: 1 token every 500 ms */
        ck_assert_int_eq(rl("RL.PREDUCE", "h 2 500 REFILL 1 TAKE 2", T0), 2);
        ck_assert_int_eq(rl("RL.PGET", "h 2 500 REFILL 1", T0 + 499 * MS), 0);
        ck_assert_int_eq(rl("RL.PGET", "h 2 500 REFILL 1", T0 + 500 * MS), 1);
        ck_assert_int_eq(rl("RL.PGET", "h 2 500 REFILL 1", T0 + 1000 * MS), 2);
        /* a client time before the last refill refills nothing (and moves nothing back) */
        ck_assert_int_eq(rl("RL.PREDUCE", "b 3 1000 AT 5000", 0), 3);
        ck_assert_int_eq(rl("RL.PREDUCE", "b 3 1000 AT 1000", 0), 2);
        ck_assert_int_eq(rl("RL.PGET", "b 3 1000 AT 5999", 0), 1);
        ck_assert_int_eq(rl("RL.PGET", "b 3 1000 AT 6000", 0), 3);
}
END_TEST

START_TEST (test_smyte_strict) {
        /* max 10, 3 every 5 s. STRICT: a take that leaves the bucket at 0 restarts the refill
         * clock, so a client that keeps asking gets nothing until it waits a whole refilltime. */
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
        /* an allowed take that leaves 0 restarts it too */
        ck_assert_int_eq(rl("rl.reduce", "a 10 5 refill 3 take 9 at 100", 0), 10);
        ck_assert_int_eq(rl("rl.reduce", "a 10 5 refill 3 strict at 103", 0), 1);
        ck_assert_int_eq(rl("rl.get", "a 10 5 refill 3 at 105", 0), 0);
        ck_assert_int_eq(rl("rl.get", "a 10 5 refill 3 at 108", 0), 3);
        ck_assert_int_eq(rl("rl.reduce", "b 10 5 refill 3 take 9 at 100", 0), 10);
        ck_assert_int_eq(rl("rl.reduce", "b 10 5 refill 3 at 103", 0), 1);
        ck_assert_int_eq(rl("rl.get", "b 10 5 refill 3 at 105", 0), 3);
}
END_TEST

START_TEST (test_smyte_replay_kept) {
        /* A replay of past events (AT 2 s, 1970) while the wall clock is T0: the bucket is kept
         * on the wall clock as long as it lives on its own time line, then swept. */
        Args a;
        ClientLimit cl;
        const char *err = NULL;
        AlgoResult res;
        AlgoState *st;

        counters_reset();
        split(&a, "a 10 5 refill 3 take 10 at 2");
        ck_assert_int_eq(client_limit_parse_reduce("rl.reduce", a.n, a.v, &cl, &err), 0);
        client_limit_set_wall_clock(&cl, T0);
        res = apply(&cl, T0);
        ck_assert(res.allowed && res.write);
        st = counter_of(&cl);
        /* kept until a refill from empty (4 refills of 5 s) after its last refill mark (2 s)
         * on its time line, 20 s after the take, which was T0 - 2 s behind the wall clock */
        ck_assert_uint_ge(st->w0, T0 + 20 * SEC);
        ck_assert_uint_le(st->w0, T0 + 20 * SEC + (T0 / SEC) / 32 * SEC + SEC);
        counters_sweep(T0 + 9 * SEC);
        ck_assert_int_eq(rl("rl.get", "a 10 5 refill 3 at 6", T0), 0);
        ck_assert_int_eq(rl("rl.get", "a 10 5 refill 3 at 7", T0), 3);
        /* without the wall clock (the time line is the wall clock), w0 is its own time line's */
        counters_reset();
        split(&a, "b 10 5 refill 3 take 10 at 2");
        ck_assert_int_eq(client_limit_parse_reduce("rl.reduce", a.n, a.v, &cl, &err), 0);
        res = apply(&cl, T0);
        ck_assert_uint_eq(counter_of(&cl)->w0, 22 * SEC);
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
        /* RateLimitHandlerTest's ParseRateLimitArgsWithOutErrors (replies: smyte.tsv) */
        { "rl.get", "abc 10 60", 10, 60, 10, ALGO_PEEK, 0, false, 0 },
        { "rl.pget", "abc 10 500", 10, 0, 10, ALGO_PEEK, 0, false, 0 },
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
                ck_assert_int_eq(cl.algo.peer, ALGO_PEER_SMYTE);
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
        /* the number of arguments (Smyte's: 3 to 10, 8 for the GETs) */
        { "rl.reduce", "k 10", "Wrong number of arguments for 'rl.reduce' command" },
        { "RL.PGET", "k 10 60 AT 1 AT 2 STRICT STRICT", "Wrong number of arguments for 'rl.pget' command" },
        { "rl.preduce", "k 10 60000 AT 1 AT 2 AT 3 STRICT STRICT",
          "Wrong number of arguments for 'rl.preduce' command" },
        { "rl.get", "k", "Wrong number of arguments for 'rl.get' command" },
        { "rl.sessionize", "k 10 60", "ERR unknown command" },
        { "rl.reduc", "k 10 60", "ERR unknown command" },
        /* what divvyd's state cannot hold */
        { "rl.reduce", "k 9007199254740992 60", "ERR max must be at most 9007199254740991" },
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

        /* a StoreHit's outputs, as the daemon passes them: redis-cell's reply as computed */
        ck_assert_int_eq(client_limit_parse_throttle(4, split(&a, "k 15 30 60")->v, &cl, &err), 0);
        res = (AlgoResult){ .allowed = true, .credit = 15, .limit = 16, .reset = 2, .retry = -1 };
        ck_assert_ptr_null(client_limit_throttle_error(&res));
        client_limit_format_throttle(&cl, &res, out);
        ck_assert(out[0] == 0 && out[1] == 16 && out[2] == 15 && out[3] == -1 && out[4] == 2);
        res = (AlgoResult){ .allowed = false, .credit = 0, .limit = 16, .reset = 32, .retry = 2 };
        client_limit_format_throttle(&cl, &res, out);
        ck_assert(out[0] == 1 && out[1] == 16 && out[2] == 0 && out[3] == 2 && out[4] == 32);
        res = (AlgoResult){
                .allowed = true, .credit = 17, .limit = 16, .reset = (uint64_t) -2, .retry = -1
        };
        client_limit_format_throttle(&cl, &res, out);
        ck_assert(out[2] == 17 && out[4] == -2);

        ck_assert_int_eq(
                client_limit_parse_reduce("rl.reduce", 5, split(&a, "k 10 60 TAKE 4")->v, &cl, &err), 0);
        res = (AlgoResult){ .allowed = true, .credit = 10, .limit = 10 };
        ck_assert_int_eq(client_limit_reduce_reply(&cl, &res), 10);
        res = (AlgoResult){ .allowed = false, .credit = 3, .limit = 10 };
        ck_assert_int_eq(client_limit_reduce_reply(&cl, &res), 3);
}
END_TEST

/* ---- the peers' own test expectations, as data ------------------------------------- */

/* Replays tests/data/peers/<name>: every line through parse, apply (on the tiny store, swept by
 * the wall clock before each call) and format, its reply as the table writes it. */
static void replay_table(const char *name) {
        const char *top = getenv("top_srcdir");
        char path[512], line[1024], prev[64] = "", reply[512];
        FILE *f;
        int cases = 0, lines = 0;

        snprintf(path, sizeof(path), "%s/tests/data/peers/%s", top ? top : ".", name);
        f = fopen(path, "re");
        ck_assert_msg(f, "%s", path);
        while (fgets(line, sizeof(line), f)) {
                char *c = strtok(line, "\t\n"), *clock = strtok(NULL, "\t\n");
                char *cmd = strtok(NULL, "\t\n"), *expect = strtok(NULL, "\t\n");
                char keyed[600], *sp;
                uint64_t now = T0;
                Args a;
                ClientLimit cl;
                const char *err = NULL;
                AlgoResult res;

                if (!c || c[0] == '#')
                        continue;
                ck_assert_msg(clock && cmd && expect, "%s: a line of 4 columns", name);
                if (strcmp(c, prev) != 0) {
                        counters_reset();
                        snprintf(prev, sizeof(prev), "%s", c);
                        cases++;
                }
                lines++;
                if (strcmp(clock, "-") != 0) /* ms, maybe with a fraction */
                        now = T0 + (uint64_t) (strtod(clock, NULL) * (double) MS + 0.5);
                /* the key made the case's own: "<case>:<key>" */
                sp = strchr(cmd, ' ');
                ck_assert_ptr_nonnull(sp);
                *sp = '\0';
                snprintf(keyed, sizeof(keyed), "%s:%s", c, sp + 1);
                split(&a, keyed);
                counters_sweep(now);
                if (strcmp(cmd, "CL.THROTTLE") == 0 || strcmp(cmd, "GCRA") == 0) {
                        int64_t out[5];
                        int r = strcmp(cmd, "GCRA") == 0 ? client_limit_parse_gcra(a.n, a.v, &cl, &err)
                                                         : client_limit_parse_throttle(a.n, a.v, &cl, &err);

                        if (r < 0) {
                                snprintf(reply, sizeof(reply), "-%s", err);
                        } else {
                                res = apply(&cl, now);
                                if (client_limit_throttle_error(&res))
                                        snprintf(reply, sizeof(reply), "-%s",
                                                 client_limit_throttle_error(&res));
                                else {
                                        client_limit_format_throttle(&cl, &res, out);
                                        snprintf(reply, sizeof(reply),
                                                 "%" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64,
                                                 out[0], out[1], out[2], out[3], out[4]);
                                }
                        }
                } else if (client_limit_parse_reduce(cmd, a.n, a.v, &cl, &err) < 0) {
                        snprintf(reply, sizeof(reply), "-%s", err);
                } else {
                        client_limit_set_wall_clock(&cl, now);
                        res = apply(&cl, now);
                        snprintf(reply, sizeof(reply), "%" PRId64, client_limit_reduce_reply(&cl, &res));
                }
                ck_assert_msg(strcmp(reply, expect) == 0, "%s: %s %s at %s: \"%s\", expected \"%s\"", name,
                              c, cmd, clock, reply, expect);
        }
        fclose(f);
        ck_assert_int_gt(cases, 1);
        ck_assert_int_gt(lines, 10);
}

START_TEST (test_peers_redis_cell) {
        replay_table("redis-cell.tsv");
}
END_TEST

START_TEST (test_peers_redis_cell_derived) {
        replay_table("redis-cell-derived.tsv");
}
END_TEST

/* gcra.tcl's calls the tables cannot write: GCRA without a key, and huge counts */
START_TEST (test_gcra_arity) {
        ClientLimit cl;
        const char *err = NULL;
        ProtoSlice argv[7] = { { "k", 1 },      { "1", 1 }, { "1", 1 }, { "1", 1 },
                               { "TOKENS", 6 }, { "1", 1 }, { "x", 1 } };

        ck_assert_int_eq(client_limit_parse_gcra(0, NULL, &cl, &err), -EINVAL);
        ck_assert_str_eq(err, "ERR wrong number of arguments for 'gcra' command");
        ck_assert_int_eq(client_limit_parse_gcra(7, argv, &cl, &err), -EINVAL);
        ck_assert_str_eq(err, "ERR wrong number of arguments for 'gcra' command");
        ck_assert_int_eq(client_limit_parse_gcra(6, argv, &cl, &err), 0);
        ck_assert_uint_eq(cl.kind, CLIENT_LIMIT_GCRA);
        ck_assert_uint_eq(cl.count, 1);
        ck_assert_uint_eq(cl.interval_usec, 1000000);
        argv[4] = (ProtoSlice){ "tokenz", 6 };
        ck_assert_int_eq(client_limit_parse_gcra(6, argv, &cl, &err), -EINVAL);
        ck_assert_str_eq(err, "ERR syntax error");
}
END_TEST

START_TEST (test_peers_redis_gcra) {
        replay_table("redis-gcra.tsv");
}
END_TEST

START_TEST (test_peers_throttled) {
        replay_table("throttled.tsv");
}
END_TEST

START_TEST (test_peers_smyte) {
        replay_table("smyte.tsv");
}
END_TEST

START_TEST (test_peers_smyte_derived) {
        replay_table("smyte-derived.tsv");
}
END_TEST

static Suite *client_limits_suite(void) {
        Suite *s = suite_create("client-limits");
        TCase *tc = tcase_create("cell");

        tcase_add_test(tc, test_cell_readme);
        tcase_add_test(tc, test_cell_until_limited);
        tcase_add_test(tc, test_cell_peek_and_refund);
        tcase_add_test(tc, test_cell_rounding);
        tcase_add_test(tc, test_cell_parse);
        tcase_add_test(tc, test_cell_rates);
        tcase_add_test(tc, test_cell_errors);
        tcase_add_test(tc, test_cell_errors_quoted);
        suite_add_tcase(s, tc);
        tc = tcase_create("smyte");
        tcase_add_test(tc, test_smyte_readme);
        tcase_add_test(tc, test_smyte_drain);
        tcase_add_test(tc, test_smyte_schedule);
        tcase_add_test(tc, test_smyte_strict);
        tcase_add_test(tc, test_smyte_replay_kept);
        tcase_add_test(tc, test_smyte_parse);
        tcase_add_test(tc, test_smyte_errors);
        suite_add_tcase(s, tc);
        tc = tcase_create("common");
        tcase_add_test(tc, test_identity);
        tcase_add_test(tc, test_format);
        suite_add_tcase(s, tc);
        tc = tcase_create("peers");
        tcase_add_test(tc, test_peers_redis_cell);
        tcase_add_test(tc, test_peers_redis_cell_derived);
        tcase_add_test(tc, test_gcra_arity);
        tcase_add_test(tc, test_peers_redis_gcra);
        tcase_add_test(tc, test_peers_throttled);
        tcase_add_test(tc, test_peers_smyte);
        tcase_add_test(tc, test_peers_smyte_derived);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        return check_run_suite(client_limits_suite());
}
