/* SPDX-License-Identifier: MIT */

/*
 * The Redis store's script (src/store/redis-script.lua) against a real redis-server started
 * here (skipped with 77 if none is installed): divvy 1.7's keys and answers (its pipe.lua run
 * side by side), and exactness against core/algorithm.c's algo_apply() with store.c's group
 * rule as a model, on seeded random batches with client timestamps.
 */

#include <check.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/algorithm.h"
#include "core/rules.h"
#include "store/redis-script.h"
#include "check-run.h"

#define SEC        UINT64_C(1000000) /* usec per second */
#define BATCH_MAX  8                 /* hits per script call in these tests */
#define KEY_MAX    256               /* bytes of a key */
#define KEYS_MODEL 3                 /* keys per configuration in the random test */
#define BATCHES    3000              /* random batches per configuration */
#define SEED       UINT64_C(0x5eed16)

/* ck_assert() logs a mark point per call: hot loops use this, which reports only failures */
#define expect(expr, ...)                                                                                   \
        do {                                                                                                \
                if (!(expr))                                                                                \
                        ck_abort_msg(__VA_ARGS__);                                                          \
        } while (0)

static char tmpdir[] = "/tmp/check-redis-script-XXXXXX";
static char sock_path[108]; /* sun_path */
static pid_t server_pid;

/* divvy 1.7's scripts/pipe.lua, verbatim but for comments: the reference of a compat HIT */
static const char pipe_lua[] = "local ans = redis.call('GET', KEYS[1])\n"
                               "local allowed\n"
                               "local remain\n"
                               "if not ans then\n"
                               "    allowed = 1\n"
                               "    redis.call('SETEX', KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]))\n"
                               "    remain = tonumber(ARGV[2])\n"
                               "elseif tonumber(ans) > 0 then\n"
                               "    allowed = 1\n"
                               "    remain = redis.call('DECR', KEYS[1])\n"
                               "else\n"
                               "    allowed = 0\n"
                               "    remain = 0\n"
                               "end\n"
                               "local ttl = redis.call('TTL', KEYS[1])\n"
                               "return {allowed, remain, ttl}\n";

/* ---- the server ---- */

static bool find_program(const char *name) {
        const char *path = getenv("PATH");
        char buf[4096];

        while (path && *path) {
                size_t len = strcspn(path, ":");

                snprintf(buf, sizeof buf, "%.*s/%s", (int) len, path, name);
                if (access(buf, X_OK) == 0)
                        return true;
                path += len + (path[len] == ':');
        }
        return false;
}

static redisContext *connect_server(void) {
        redisContext *c = redisConnectUnix(sock_path);

        if (c && c->err) {
                redisFree(c);
                return NULL;
        }
        return c;
}

/* Starts redis-server on a Unix socket in tmpdir; 0, 77 if not installed, or 1. */
static int server_start(void) {
        char log[512];
        redisContext *c = NULL;

        if (!find_program("redis-server")) {
                fprintf(stderr, "redis-server is not installed (apt install redis-server): skipped\n");
                return 77;
        }
        if (!mkdtemp(tmpdir)) {
                perror("mkdtemp");
                return 1;
        }
        snprintf(sock_path, sizeof sock_path, "%s/r.sock", tmpdir);
        snprintf(log, sizeof log, "%s/redis.log", tmpdir);
        server_pid = fork();
        if (server_pid < 0)
                return 1;
        if (server_pid == 0) {
                if (!freopen(log, "w", stdout) || !freopen(log, "a", stderr))
                        _exit(127);
                execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", sock_path, "--save",
                       "", "--appendonly", "no", "--daemonize", "no", "--dir", tmpdir, (char *) NULL);
                _exit(127);
        }
        for (int i = 0; i < 200 && !c; i++) { /* at most 10 s */
                int status;

                if (waitpid(server_pid, &status, WNOHANG) == server_pid) {
                        fprintf(stderr, "redis-server exited (see %s)\n", log);
                        server_pid = 0;
                        return 1;
                }
                c = connect_server();
                if (!c)
                        nanosleep(&(struct timespec){ .tv_nsec = 50 * 1000 * 1000 }, NULL);
        }
        if (!c) {
                fprintf(stderr, "redis-server did not listen on %s within 10 s\n", sock_path);
                return 1;
        }
        redisFree(c);
        return 0;
}

static void server_stop(void) {
        char path[512];

        if (server_pid > 0) {
                kill(server_pid, SIGTERM);
                waitpid(server_pid, NULL, 0);
                server_pid = 0;
        }
        unlink(sock_path);
        snprintf(path, sizeof path, "%s/redis.log", tmpdir);
        unlink(path);
        rmdir(tmpdir);
}

static redisContext *conn(void) {
        redisContext *c = connect_server();
        redisReply *r;

        ck_assert_msg(c, "cannot connect to %s", sock_path);
        r = redisCommand(c, "SCRIPT LOAD %s", redis_script_text);
        ck_assert_ptr_nonnull(r);
        ck_assert_msg(r->type == REDIS_REPLY_STRING, "SCRIPT LOAD: %s", r->str ? r->str : "?");
        ck_assert_str_eq(r->str, redis_script_sha1); /* the SHA1 made at build time is the script's */
        freeReplyObject(r);
        return c;
}

/* ---- running the script ---- */

typedef struct Call {
        StoreHit hits[BATCH_MAX];
        bool compat[BATCH_MAX];
        char keys[BATCH_MAX][KEY_MAX];
        size_t n;
} Call;

/* Runs the call at now (0: the server's time); returns redis_script_decode()'s result, or the
 * error reply's text in err. */
static int run(redisContext *c, Call *call, uint64_t now, char *err, size_t err_size) {
        const char *argv[3 + BATCH_MAX + 1 + BATCH_MAX * REDIS_SCRIPT_ARGS_PER_HIT];
        size_t argvlen[sizeof argv / sizeof argv[0]];
        char bufs[BATCH_MAX][REDIS_SCRIPT_HIT_ARGS_SIZE], nkeys[8], snow[24];
        size_t argc = 0;
        redisReply *r;
        int k;

        argv[argc] = "EVALSHA";
        argvlen[argc++] = 7;
        argv[argc] = redis_script_sha1;
        argvlen[argc++] = 40;
        argvlen[argc] = (size_t) snprintf(nkeys, sizeof nkeys, "%zu", call->n);
        argv[argc++] = nkeys;
        for (size_t i = 0; i < call->n; i++) {
                argv[argc] = call->keys[i];
                argvlen[argc++] = strlen(call->keys[i]);
        }
        argvlen[argc] = (size_t) snprintf(snow, sizeof snow, "%" PRIu64, now);
        argv[argc++] = snow;
        for (size_t i = 0; i < call->n; i++) {
                k = redis_script_hit_args(call->hits + i, call->compat[i], now, bufs[i], sizeof bufs[i],
                                          argv + argc, argvlen + argc);
                ck_assert_int_eq(k, REDIS_SCRIPT_ARGS_PER_HIT);
                argc += (size_t) k;
        }
        r = redisCommandArgv(c, (int) argc, argv, argvlen);
        ck_assert_msg(r, "EVALSHA: %s", c->errstr);
        if (r->type == REDIS_REPLY_ERROR) {
                snprintf(err, err_size, "%s", r->str);
                freeReplyObject(r);
                return -EIO;
        }
        k = redis_script_decode(r, call->hits, call->n);
        freeReplyObject(r);
        return k;
}

static void run_ok(redisContext *c, Call *call, uint64_t now) {
        char err[256] = "";
        int r = run(c, call, now, err, sizeof err);

        ck_assert_msg(r == 0, "script: %d %s", r, err);
}

static char *get(redisContext *c, const char *key, char *buf, size_t size) {
        redisReply *r = redisCommand(c, "GET %s", key);

        ck_assert_ptr_nonnull(r);
        ck_assert(r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL);
        if (r->type == REDIS_REPLY_NIL)
                buf = NULL;
        else
                snprintf(buf, size, "%s", r->str);
        freeReplyObject(r);
        return buf;
}

static long long integer(redisContext *c, const char *fmt, const char *key) {
        redisReply *r = redisCommand(c, fmt, key);
        long long v;

        ck_assert_ptr_nonnull(r);
        ck_assert_int_eq(r->type, REDIS_REPLY_INTEGER);
        v = r->integer;
        freeReplyObject(r);
        return v;
}

/* now: the server's clock in us (the test's times stay after it: Redis expires keys by it) */
static uint64_t server_now(redisContext *c) {
        redisReply *r = redisCommand(c, "TIME");
        uint64_t now;

        ck_assert(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
        now = strtoull(r->element[0]->str, NULL, 10) * SEC + strtoull(r->element[1]->str, NULL, 10);
        freeReplyObject(r);
        return now;
}

static StoreHit hit_of(const AlgoParams *p, AlgoOp op, uint64_t count, uint32_t group) {
        return (StoreHit){ .credit_limit = p->credit_limit,
                           .reset_seconds = p->reset_seconds,
                           .algo = p,
                           .op = op,
                           .count = count,
                           .group = group };
}

static AlgoParams prepared(Algorithm a, uint64_t limit, uint64_t reset, uint64_t burst, uint64_t refill,
                           bool strict) {
        AlgoParams p = { .algorithm = a,
                         .credit_limit = limit,
                         .reset_seconds = reset,
                         .burst = burst,
                         .refill_seconds = refill,
                         .strict = strict };
        const char *why = NULL;

        ck_assert_msg(algo_params_prepare(&p, &why) == 0, "%s", why);
        return p;
}

/* ---- exactness: random batches against algo_apply() and store.c's groups ---- */

typedef struct Config {
        Algorithm algorithm;
        uint64_t limit, reset, burst, refill;
        bool strict;
        AlgoWindow window;
} Config;

static const Config configs[] = {
        { ALGORITHM_FIXED_WINDOW, 10, 60, 0, 0, false },
        { ALGORITHM_FIXED_WINDOW, 1, 1, 0, 0, false },
        { ALGORITHM_FIXED_WINDOW, UINT64_C(1000000000000000), 100000000, 0, 0, false }, /* 3 years */
        { ALGORITHM_FIXED_WINDOW, 1000, ALGO_RESET_SECONDS_MAX, 0, 0, false },          /* 100 years */
        { ALGORITHM_SLIDING_WINDOW, 10, 60, 0, 0, false },
        { ALGORITHM_SLIDING_WINDOW, 7, 1, 0, 0, false },
        { ALGORITHM_SLIDING_WINDOW, UINT32_MAX, 3600, 0, 0, false },
        { ALGORITHM_SLIDING_WINDOW, 1000, 2000000000, 0, 0, false },       /* 63 years */
        { ALGORITHM_SLIDING_WINDOW, UINT32_MAX, 2251799813, 0, 0, false }, /* the longest */
        { ALGORITHM_TOKEN_BUCKET, 10, 60, 0, 0, false },
        { ALGORITHM_TOKEN_BUCKET, 100, 3600, 5, 0, false },
        { ALGORITHM_TOKEN_BUCKET, 100, 3600, 5, 0, true },
        { ALGORITHM_TOKEN_BUCKET, 7, 100, 0, 0, true },
        { ALGORITHM_TOKEN_BUCKET, UINT64_C(1000000000000000), 1000000000, 0, 0, false }, /* T = 1 us */
        { ALGORITHM_TOKEN_BUCKET, 3, 7, 1000, 0, false },
        { ALGORITHM_TOKEN_BUCKET, 10, 60, 0, 6, false },
        { ALGORITHM_TOKEN_BUCKET, 1000, 3600, 25, 36, false },
        { ALGORITHM_TOKEN_BUCKET, 1000, 3600, 25, 36, true },
        { ALGORITHM_TOKEN_BUCKET, 6, 60, 100, 30, false },
        { ALGORITHM_TOKEN_BUCKET, UINT64_C(1000000000000), 10000000, 0, 100000, false }, /* A = 1e10 */
        /* windows aligned to the clock (issue #34) */
        { ALGORITHM_FIXED_WINDOW, 10, 60, 0, 0, false, ALGO_WINDOW_ALIGNED },
        { ALGORITHM_FIXED_WINDOW, 1, 1, 0, 0, false, ALGO_WINDOW_ALIGNED },
        { ALGORITHM_FIXED_WINDOW, 1000, 86400, 0, 0, false, ALGO_WINDOW_ALIGNED },
        { ALGORITHM_FIXED_WINDOW, 1000, ALGO_RESET_SECONDS_MAX, 0, 0, false, ALGO_WINDOW_ALIGNED },
        { ALGORITHM_SLIDING_WINDOW, 10, 60, 0, 0, false, ALGO_WINDOW_ALIGNED },
        { ALGORITHM_SLIDING_WINDOW, 7, 1, 0, 0, false, ALGO_WINDOW_ALIGNED },
        { ALGORITHM_SLIDING_WINDOW, UINT32_MAX, 2251799813, 0, 0, false, ALGO_WINDOW_ALIGNED },
};

static uint64_t rng_state;

static uint64_t rng(void) { /* splitmix64 */
        uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));

        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        return z ^ (z >> 31);
}

static uint64_t below(uint64_t n) { /* [0, n) */
        return n ? rng() % n : 0;
}

/* store.c's apply_hits() on the model: st[key[i]] per hit, groups all or nothing */
static void model_batch(const AlgoParams *p, AlgoState *st, const int *key, StoreHit *hits, size_t n,
                        uint64_t now, uint64_t *ret_w0_max) {
        AlgoState saved[KEYS_MODEL];
        bool ok = true;

        for (size_t i = 0; i < n; i++) {
                StoreHit *h = hits + i;
                uint64_t at = h->at_usec ? h->at_usec : now;
                AlgoState *s = st + key[i];
                AlgoResult res;

                if (h->group != 0 && (i == 0 || hits[i - 1].group != h->group)) {
                        memcpy(saved, st, sizeof saved);
                        ok = true;
                }
                algo_apply(p, h->op, h->count, at, s, &res);
                h->res.allowed = res.allowed;
                h->res.credit = res.credit;
                h->res.reset = res.reset;
                h->res.limit = res.limit;
                h->res.retry = res.retry;
                if (s->w0 > *ret_w0_max)
                        *ret_w0_max = s->w0;
                if (h->group == 0)
                        continue;
                ok = ok && h->res.allowed;
                if (!ok && (i + 1 == n || hits[i + 1].group != h->group))
                        memcpy(st, saved, sizeof saved);
        }
}

static bool same_result(const AlgoParams *p, const AlgoState *st, uint64_t n, uint64_t a, uint64_t b) {
        AlgoState sa = *st, sb = *st;
        AlgoResult ra, rb;

        algo_apply(p, ALGO_PEEK, n, a, &sa, &ra);
        algo_apply(p, ALGO_PEEK, n, b, &sb, &rb);
        return ra.allowed == rb.allowed && ra.credit == rb.credit && ra.reset == rb.reset &&
               ra.retry == rb.retry;
}

/* A time t > now (or t - 1) where a PEEK of n on st answers otherwise than at t - 1: found by
 * bisection on [now, now + 2 * span]; now if the answer never changes there. */
static uint64_t edge(const AlgoParams *p, const AlgoState *st, uint64_t now, uint64_t span, uint64_t n) {
        uint64_t lo = now, hi = now + 2 * span;

        if (hi > REDIS_SCRIPT_NOW_MAX - SEC || same_result(p, st, n, lo, hi))
                return now;
        while (hi - lo > 1) {
                uint64_t mid = lo + (hi - lo) / 2;

                if (same_result(p, st, n, lo, mid))
                        lo = mid;
                else
                        hi = mid;
        }
        return hi - below(2);
}

static uint64_t pick_count(uint64_t cap) {
        switch (below(10)) {
        case 0:
        case 1:
        case 2:
                return 1;
        case 3:
                return below(4);
        case 4:
                return below(cap + 1);
        case 5:
                return below(cap / 3 + 1);
        case 6:
                return cap > 2 ? cap - below(3) : cap;
        case 7:
                return cap + 1 + below(2);
        case 8:
                return below(2) ? UINT64_MAX : (UINT64_C(1) << 53) + below(3);
        default:
                return 1 + below(cap < 8 ? cap : 8);
        }
}

static AlgoOp pick_op(void) {
        uint64_t x = below(100);

        return x < 50   ? ALGO_TAKE
               : x < 63 ? ALGO_PEEK
               : x < 80 ? ALGO_CHARGE
               : x < 95 ? ALGO_REFUND
                        : ALGO_RESET;
}

static void parse_state(const char *v, Algorithm a, AlgoState *ret) {
        unsigned tag;
        uint64_t w0, x, y = 0;
        int k = sscanf(v, "%u:%" SCNu64 ":%" SCNu64 ":%" SCNu64, &tag, &w0, &x, &y);

        ck_assert_msg(k == (a == ALGORITHM_SLIDING_WINDOW ? 4 : 3) && tag == (unsigned) a, "value %s", v);
        *ret = (AlgoState){ .w0 = w0, .w1 = a == ALGORITHM_SLIDING_WINDOW ? x << 32 | y : x };
}

START_TEST (test_exact_random) {
        const Config *cf = configs + _i;
        AlgoParams p = prepared(cf->algorithm, cf->limit, cf->reset, cf->burst, cf->refill, cf->strict);

        p.window = cf->window; /* nothing of it is prepared */
        redisContext *c = conn();
        char keys[KEYS_MODEL][KEY_MAX], val[128];
        AlgoState st[KEYS_MODEL] = { 0 };
        uint64_t start, now, span, unit;
        unsigned ops = 0, allowed = 0, denied = 0, writes = 0;

        rng_state = SEED + (uint64_t) _i;
        span = p.algorithm == ALGORITHM_TOKEN_BUCKET
                       ? (p.refill_seconds ? (p.burst + p.d1 - 1) / p.d1 * p.d0 : p.d1)
                       : p.reset_seconds * SEC;
        unit = span / p.burst + 1; /* about one credit's time */
        for (int k = 0; k < KEYS_MODEL; k++) {
                snprintf(keys[k], KEY_MAX, "divvyd:{exact%d}:%d", _i, k);
                freeReplyObject(redisCommand(c, "DEL %s", keys[k]));
        }
        start = now = server_now(c) + 86400 * SEC; /* after the server's clock: see server_now() */

        for (int b = 0; b < BATCHES; b++) {
                Call call = { .n = below(10) < 7 ? 1 : 2 + below(3) };
                StoreHit want[BATCH_MAX];
                AlgoState next[KEYS_MODEL];
                int key[BATCH_MAX];
                uint64_t x = below(100), dt;

                /* time: mostly small steps, sometimes a window or more, sometimes back, sometimes
                 * right at a counter's w0 */
                dt = x < 30   ? below(1000)
                     : x < 60 ? below(3 * unit)
                     : x < 85 ? below(span / 2 + 1)
                              : below(3 * span);
                if (x >= 95 && now - start > 0)
                        now -= below(now - start < span ? now - start : span);
                else if (x >= 90 && st[b % KEYS_MODEL].w0 > start + 1)
                        now = st[b % KEYS_MODEL].w0 - 1 + below(3);
                else
                        now += dt;
                if (x >= 80 && x < 90) /* a second's edge of some result: where us rounding shows */
                        now = edge(&p, st + b % KEYS_MODEL, now, span, pick_count(p.burst));
                if (now > REDIS_SCRIPT_NOW_MAX - SEC)
                        now = start + below(span < REDIS_SCRIPT_NOW_MAX - SEC - start
                                                    ? span
                                                    : REDIS_SCRIPT_NOW_MAX - SEC - start);

                for (size_t i = 0; i < call.n; i++) {
                        uint32_t g = below(3) ? 0 : 1 + (uint32_t) below(2);

                        key[i] = (int) below(KEYS_MODEL);
                        call.hits[i] = hit_of(&p, pick_op(), pick_count(p.burst), g);
                        if (below(10) == 0)
                                call.hits[i].at_usec = now + below(unit < SEC ? unit : SEC);
                        snprintf(call.keys[i], KEY_MAX, "%s", keys[key[i]]);
                }
                /* stay where the script is exact: no debt beyond REDIS_SCRIPT_W0_MAX (redis-script.h) */
                for (int tries = 0;; tries++) {
                        uint64_t w0_max = 0;

                        memcpy(want, call.hits, sizeof want);
                        memcpy(next, st, sizeof next);
                        model_batch(&p, next, key, want, call.n, now, &w0_max);
                        if (w0_max <= REDIS_SCRIPT_W0_MAX)
                                break;
                        ck_assert_int_lt(tries, 2);
                        for (size_t i = 0; i < call.n; i++)
                                if (call.hits[i].op == ALGO_CHARGE)
                                        call.hits[i].op = ALGO_PEEK;
                }

                run_ok(c, &call, now);
                for (size_t i = 0; i < call.n; i++) {
                        const StoreHit *g = call.hits + i, *w = want + i;

                        expect(g->res.allowed == w->res.allowed && g->res.credit == w->res.credit &&
                                       g->res.reset == w->res.reset && g->res.limit == w->res.limit &&
                                       g->res.retry == w->res.retry,
                               "config %d batch %d hit %zu/%zu (key %d, op %d, count %" PRIu64
                               ", group %" PRIu32 ", now %" PRIu64 " = start + %" PRIu64
                               "): script %d %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRId64
                               ", algo_apply %d %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRId64
                               " (state before w0 %" PRIu64 " w1 %" PRIu64 ")",
                               _i, b, i, call.n, key[i], g->op, g->count, g->group, now, now - start,
                               g->res.allowed, g->res.credit, g->res.reset, g->res.limit, g->res.retry,
                               w->res.allowed, w->res.credit, w->res.reset, w->res.limit, w->res.retry,
                               st[key[i]].w0, st[key[i]].w1);
                        ops++;
                        allowed += w->res.allowed;
                        denied += !w->res.allowed;
                }
                for (int k = 0; k < KEYS_MODEL; k++) {
                        AlgoState got = { 0, 0 };

                        writes += next[k].w0 != st[k].w0 || next[k].w1 != st[k].w1;
                        if (get(c, keys[k], val, sizeof val))
                                parse_state(val, p.algorithm, &got);
                        expect(got.w0 == next[k].w0 && got.w1 == next[k].w1,
                               "config %d batch %d key %d: stored w0 %" PRIu64 " w1 %" PRIu64
                               ", algo_apply w0 %" PRIu64 " w1 %" PRIu64,
                               _i, b, k, got.w0, got.w1, next[k].w0, next[k].w1);
                }
                memcpy(st, next, sizeof st);
        }
        /* the random walk went everywhere it should */
        ck_assert_uint_gt(allowed, ops / 20);
        ck_assert_uint_gt(denied, ops / 50);
        ck_assert_uint_gt(writes, BATCHES / 10);
        redisFree(c);
}
END_TEST

/* The script's mul_div() (its limbs) against 128-bit C: its functions run by EVAL with a
 * different ending (the text up to "---- the batch" defines them and touches no key). */
START_TEST (test_mul_div) {
        static const char tail[] = "local out = {}\n"
                                   "for i = 1, #ARGV, 4 do\n"
                                   "  out[#out + 1] = mul_div(tonumber(ARGV[i]), tonumber(ARGV[i + 1]),\n"
                                   "    tonumber(ARGV[i + 2]), ARGV[i + 3] == '1')\n"
                                   "end\n"
                                   "return out\n";
        const char *end = strstr(redis_script_text, "\n---- the batch");
        size_t head = (size_t) (end - redis_script_text) + 1;
        char *text = malloc(head + sizeof tail);
        enum { CASES = 500 };
        const char *argv[3 + 4 * CASES];
        size_t argvlen[3 + 4 * CASES];
        char nums[4 * CASES][24];
        uint64_t want[CASES];
        redisContext *c = conn();

        ck_assert_ptr_nonnull(end);
        ck_assert_ptr_nonnull(text);
        memcpy(text, redis_script_text, head);
        memcpy(text + head, tail, sizeof tail);
        rng_state = SEED;
        for (int round = 0; round < 40; round++) {
                redisReply *r;

                argv[0] = "EVAL";
                argv[1] = text;
                argv[2] = "0";
                for (int i = 0; i < CASES; i++) {
                        uint64_t a, b, cc, q, k;
                        bool up = below(2);
                        unsigned __int128 x;

                        switch (below(4)) {
                        case 0: /* the estimate: prev * left / r, left <= r */
                                a = below(UINT64_C(1) << 32);
                                cc = 1 + below(UINT64_C(1) << 52);
                                b = below(cc + 1);
                                break;
                        case 1: /* exact quotients: a * (q * k) / (a * k) */
                                a = 1 + below(UINT64_C(1) << 32);
                                k = 1 + below((UINT64_C(1) << 52) / a);
                                cc = a * k;
                                q = below((UINT64_C(1) << 52) / k);
                                b = q * k;
                                break;
                        case 2: /* one off an exact quotient */
                                a = 1 + below(UINT64_C(1) << 32);
                                k = 2 + below((UINT64_C(1) << 52) / a);
                                cc = a * k;
                                q = below((UINT64_C(1) << 52) / k);
                                b = q * k + (below(2) ? 1 : k - 1);
                                if (b > cc)
                                        b = cc;
                                break;
                        default: /* m * r / cur, m < cur */
                                cc = 1 + below(UINT64_C(1) << 32);
                                a = below(cc);
                                b = 1 + below(UINT64_C(1) << 52);
                                break;
                        }
                        x = (unsigned __int128) a * b;
                        want[i] = (uint64_t) (x / cc + (up && x % cc != 0));
                        snprintf(nums[4 * i], 24, "%" PRIu64, a);
                        snprintf(nums[4 * i + 1], 24, "%" PRIu64, b);
                        snprintf(nums[4 * i + 2], 24, "%" PRIu64, cc);
                        snprintf(nums[4 * i + 3], 24, "%d", up);
                }
                for (int i = 0; i < 4 * CASES; i++)
                        argv[3 + i] = nums[i];
                for (int i = 0; i < 3 + 4 * CASES; i++)
                        argvlen[i] = strlen(argv[i]);
                r = redisCommandArgv(c, 3 + 4 * CASES, argv, argvlen);
                ck_assert_msg(r && r->type == REDIS_REPLY_ARRAY && r->elements == CASES, "EVAL: %s",
                              r && r->str ? r->str : "?");
                for (int i = 0; i < CASES; i++)
                        expect(r->element[i]->type == REDIS_REPLY_INTEGER &&
                                       (uint64_t) r->element[i]->integer == want[i],
                               "mul_div(%s, %s, %s, %s) = %lld, want %" PRIu64, nums[4 * i], nums[4 * i + 1],
                               nums[4 * i + 2], nums[4 * i + 3], r->element[i]->integer, want[i]);
                freeReplyObject(r);
        }
        free(text);
        redisFree(c);
}
END_TEST

/* ---- divvy 1.7's keys ---- */

/* Adds a rule of "key=value" pairs (NULL-terminated) to rs as a config's loader does; returns
 * its index. */
static size_t add_rule(RuleSet *rs, const char *const *pairs, const char *limit, const char *reset,
                       const char *actor_field) {
        RuleDraft d;

        rule_draft_init(&d, 1);
        for (size_t i = 0; pairs[i]; i++) {
                const char *eq = strchr(pairs[i], '=');
                ck_assert_ptr_nonnull(eq);
                ck_assert_int_eq(rule_draft_add_pattern(&d, pairs[i], (size_t) (eq - pairs[i]), eq + 1,
                                                        strlen(eq + 1)),
                                 0);
        }
        d.is_default = pairs[0] == NULL;
        ck_assert_int_eq(rule_draft_set(&d, "creditLimit", limit, 1), 0);
        ck_assert_int_eq(rule_draft_set(&d, "resetSeconds", reset, 1), 0);
        if (actor_field)
                ck_assert_int_eq(rule_draft_set(&d, "actorField", actor_field, 1), 0);
        ck_assert_int_eq(ruleset_add(rs, &d, NULL), 0);
        return rs->n_rules - 1;
}

START_TEST (test_keys) {
        static const char *const ops[] = { "x=*", "path=/ping*", "method=GET", NULL }, *const none[] = {
                NULL
        };
        static const uint8_t id[RULE_ID_SIZE] = { 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
                                                  0x08, 0x09, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff };
        RuleSet *rs = NULL;
        ck_assert_int_eq(ruleset_new("t.ini", &rs), 0);
        size_t ri = add_rule(rs, ops, "10", "60", "ip"), ei = add_rule(rs, none, "1", "86400", NULL);
        const Rule *rule = &rs->rules[ri], *empty = &rs->rules[ei];
        StoreHit h = { .rule = rule,
                       .rule_id = id,
                       .actor = "1.2.3.4",
                       .actor_len = 7,
                       .credit_limit = 10,
                       .reset_seconds = 60 };
        char buf[KEY_MAX];
        const char *want = "divvy:method=GET path=/ping* x=*:1.2.3.4:10:60";

        ck_assert_int_eq(redis_key_compat(&h, buf, sizeof buf), (int) strlen(want));
        ck_assert_str_eq(buf, want);
        ck_assert_int_eq(redis_key_compat(&h, buf, strlen(want) + 1), (int) strlen(want));
        ck_assert_int_eq(redis_key_compat(&h, buf, strlen(want)), -ENOBUFS);
        ck_assert_int_eq(redis_key_own(&h, buf, sizeof buf), 8 + 7 + 2 + 32);
        ck_assert_str_eq(buf, "divvyd:{1.2.3.4}:00010203040506070809aabbccddeeff");
        ck_assert_int_eq(redis_key_own(&h, buf, 49), -ENOBUFS);
        ck_assert_int_eq(redis_key_own(&h, buf, 50), 49);

        /* no actorField: the actor is empty; no operation: the bucket is empty */
        h = (StoreHit){ .rule = empty, .rule_id = id, .credit_limit = 1, .reset_seconds = 86400 };
        ck_assert_int_eq(redis_key_compat(&h, buf, sizeof buf), 15);
        ck_assert_str_eq(buf, "divvy:::1:86400");
        ck_assert_int_eq(redis_key_own(&h, buf, sizeof buf), 42);
        ck_assert_str_eq(buf, "divvyd:{}:00010203040506070809aabbccddeeff");
        h.actor = "a b";
        h.actor_len = 3;
        h.rule = rule;
        ck_assert_int_eq(redis_key_compat(&h, buf, sizeof buf), 42);
        ck_assert_str_eq(buf, "divvy:method=GET path=/ping* x=*:a b:10:60");
        /* the local store's tests leave the rule NULL: the compat key needs it */
        h.rule = NULL;
        ck_assert_int_eq(redis_key_compat(&h, buf, sizeof buf), -EINVAL);
        ck_assert_int_eq(redis_key_own(&h, buf, sizeof buf), 45);
        ruleset_free(rs);
}
END_TEST

/* divvyd's own keys cannot meet: the actor sits between a fixed prefix and a fixed-length
 * suffix (the rule id, a hash of everything else of the counter's identity, length-prefixed),
 * so a key names one actor and one rule id, whatever the actor holds. The pair divvy's keys
 * confuse ([path=/x] "y:alice", [path=/x:y] "alice") included. */
START_TEST (test_own_keys_unambiguous) {
        static const char *const actors[] = { "alice", "y:alice", "",
                                              ":",     "}",       "{",
                                              "}:",    "{}",      "a}:00010203040506070809aabbccddeeff",
                                              "a}" };
        enum { N_ACTORS = sizeof actors / sizeof actors[0], N_IDS = 3 };
        uint8_t ids[N_IDS][RULE_ID_SIZE];
        char keys[N_ACTORS * N_IDS][KEY_MAX];

        for (size_t k = 0; k < N_IDS; k++)
                for (size_t i = 0; i < RULE_ID_SIZE; i++)
                        ids[k][i] = (uint8_t) (k == 2 ? (i == 0 ? 0 : 0xff) : k * 17 + i);
        for (size_t a = 0; a < N_ACTORS; a++)
                for (size_t k = 0; k < N_IDS; k++) {
                        StoreHit h = { .rule_id = ids[k],
                                       .actor = actors[a],
                                       .actor_len = strlen(actors[a]) };
                        char *key = keys[a * N_IDS + k];
                        int len = redis_key_own(&h, key, KEY_MAX);
                        size_t pre = strlen(REDIS_KEY_OWN_PREFIX), tail = 2 + 2 * RULE_ID_SIZE;

                        ck_assert_int_eq(len, (int) (pre + strlen(actors[a]) + tail));
                        /* read back: the prefix, the actor, "}:" and the id */
                        ck_assert_int_eq(memcmp(key, REDIS_KEY_OWN_PREFIX, pre), 0);
                        ck_assert_int_eq(memcmp(key + pre, actors[a], strlen(actors[a])), 0);
                        ck_assert_int_eq(memcmp(key + (size_t) len - tail, "}:", 2), 0);
                        for (size_t i = 0; i < RULE_ID_SIZE; i++) {
                                unsigned byte;
                                ck_assert_int_eq(sscanf(key + (size_t) len - tail + 2 + 2 * i, "%2x", &byte),
                                                 1);
                                ck_assert_uint_eq(byte, ids[k][i]);
                        }
                }
        for (size_t i = 0; i < N_ACTORS * N_IDS; i++)
                for (size_t j = i + 1; j < N_ACTORS * N_IDS; j++)
                        ck_assert_str_ne(keys[i], keys[j]);
}
END_TEST

/* Keys printed by Node divvy 1.7.1 itself (its src/backend.js Backend.hit(), on a Redis client
 * that records EVALSHA's key): the operation's keys in JavaScript's sort() order, UTF-16 code
 * units, where the code points above U+FFFF come before U+E000..U+FFFF. */
static const struct {
        const char *pairs[8];
        const char *actor, *limit, *reset;
        const char *want;
} node_keys[] = {
        /* [😀=2 ！=x]: divvyd wrote "！=x 😀=2", its own counter beside Node's */
        { { "\xef\xbc\x81=x", "\xf0\x9f\x98\x80=2" },
          "",
          "5",
          "60",
          "divvy:\xf0\x9f\x98\x80=2 \xef\xbc\x81=x::5:60" },
        { { "x=*", "method=GET", "path=/ping*" },
          "1.2.3.4",
          "10",
          "60",
          "divvy:method=GET path=/ping* x=*:1.2.3.4:10:60" },
        /* U+E000, U+FFFF after U+10000, U+10FFFF; é and z before them */
        { { "\xee\x80\x80=a", "\xef\xbf\xbf=e", "\xf4\x8f\xbf\xbf=f", "\xf0\x90\x80\x80=b", "\xc3\xa9=d",
            "z=c" },
          "u",
          "3",
          "3600",
          "divvy:z=c \xc3\xa9=d \xf0\x90\x80\x80=b \xf4\x8f\xbf\xbf=f \xee\x80\x80=a "
          "\xef\xbf\xbf=e:u:3:3600" },
        /* U+FF41 (ａ) after U+1D49C (𝒜) */
        { { "\xef\xbd\x81=1", "\xf0\x9d\x92\x9c=2", "a=3" },
          "x",
          "1",
          "1",
          "divvy:a=3 \xf0\x9d\x92\x9c=2 \xef\xbd\x81=1:x:1:1" },
};

START_TEST (test_keys_in_node_order) {
        RuleSet *rs = NULL;
        char buf[KEY_MAX];

        ck_assert_int_eq(ruleset_new("t.ini", &rs), 0);
        size_t ri = add_rule(rs, node_keys[_i].pairs, node_keys[_i].limit, node_keys[_i].reset,
                             node_keys[_i].actor[0] ? "user" : NULL);
        StoreHit h = { .rule = &rs->rules[ri],
                       .rule_id = rs->rules[ri].id,
                       .actor = node_keys[_i].actor,
                       .actor_len = strlen(node_keys[_i].actor) };

        ck_assert_int_eq(redis_key_compat(&h, buf, sizeof buf), (int) strlen(node_keys[_i].want));
        ck_assert_str_eq(buf, node_keys[_i].want);
        ruleset_free(rs);
}
END_TEST

/* A compat HIT answers what divvy's pipe.lua answers on a twin key, step by step. */
START_TEST (test_compat_hit_is_pipe_lua) {
        redisContext *c = conn();
        const uint64_t limits[] = { 1, 3, 10 };

        for (size_t li = 0; li < 3; li++) {
                uint64_t limit = limits[li], reset = 60;
                Call call = { .n = 1 };
                char ref[KEY_MAX], v1[64], v2[64];

                call.hits[0] = (StoreHit){
                        .credit_limit = limit, .reset_seconds = reset, .op = ALGO_TAKE, .count = 1
                };
                call.compat[0] = true;
                snprintf(call.keys[0], KEY_MAX, "divvy:method=GET:a:%" PRIu64 ":%" PRIu64, limit, reset);
                snprintf(ref, sizeof ref, "ref:%" PRIu64, limit);
                freeReplyObject(redisCommand(c, "DEL %s %s", call.keys[0], ref));
                for (uint64_t k = 0; k < limit + 3; k++) {
                        redisReply *r;

                        if (k == 1) { /* time passes: a TTL set once keeps running down */
                                freeReplyObject(redisCommand(c, "EXPIRE %s 30", call.keys[0]));
                                freeReplyObject(redisCommand(c, "EXPIRE %s 30", ref));
                        }
                        run_ok(c, &call, 0);
                        r = redisCommand(c, "EVAL %s 1 %s %" PRIu64 " %" PRIu64, pipe_lua, ref, reset,
                                         limit - 1);
                        ck_assert(r && r->type == REDIS_REPLY_ARRAY && r->elements == 3);
                        ck_assert_int_eq(call.hits[0].res.allowed, r->element[0]->integer);
                        ck_assert_int_eq((long long) call.hits[0].res.credit, r->element[1]->integer);
                        ck_assert_int_eq((long long) call.hits[0].res.reset, r->element[2]->integer);
                        ck_assert_int_eq(call.hits[0].res.reset, k == 0 ? reset : 30);
                        ck_assert_int_eq(call.hits[0].res.limit, limit);
                        ck_assert_int_eq(call.hits[0].res.retry, call.hits[0].res.allowed ? 0 : 30);
                        ck_assert_int_eq(call.hits[0].res.allowed, k < limit);
                        freeReplyObject(r);
                        ck_assert_str_eq(get(c, call.keys[0], v1, sizeof v1), get(c, ref, v2, sizeof v2));
                        ck_assert_int_eq(integer(c, "TTL %s", call.keys[0]), integer(c, "TTL %s", ref));
                }
        }
        redisFree(c);
}
END_TEST

static void compat_do(redisContext *c, const char *key, AlgoOp op, uint64_t count, int allowed,
                      uint64_t credit, uint64_t reset, int64_t retry, const char *value, long long ttl) {
        Call call = { .n = 1 };
        char v[64];

        call.hits[0] = (StoreHit){ .credit_limit = 5, .reset_seconds = 100, .op = op, .count = count };
        call.compat[0] = true;
        snprintf(call.keys[0], KEY_MAX, "%s", key);
        run_ok(c, &call, 0);
        ck_assert_msg(call.hits[0].res.allowed == allowed && call.hits[0].res.credit == credit &&
                              call.hits[0].res.reset == reset && call.hits[0].res.retry == retry &&
                              call.hits[0].res.limit == 5,
                      "op %d count %" PRIu64 ": %d %" PRIu64 " %" PRIu64 " %" PRId64, op, count,
                      call.hits[0].res.allowed, call.hits[0].res.credit, call.hits[0].res.reset,
                      call.hits[0].res.retry);
        if (value)
                ck_assert_str_eq(get(c, key, v, sizeof v), value);
        else
                ck_assert_ptr_null(get(c, key, v, sizeof v));
        ck_assert_int_eq(integer(c, "TTL %s", key), ttl);
}

/* TAKE, PEEK, CHARGE, REFUND, RESET on divvy's layout (limit 5 per 100 s) */
START_TEST (test_compat_ops) {
        redisContext *c = conn();
        const char *k = "divvy:op=x::5:100";

        freeReplyObject(redisCommand(c, "DEL %s", k));
        compat_do(c, k, ALGO_REFUND, 3, 1, 5, 0, 0, NULL, -2);   /* never creates */
        compat_do(c, k, ALGO_PEEK, 2, 1, 3, 100, 0, NULL, -2);   /* decides, writes nothing */
        compat_do(c, k, ALGO_TAKE, 6, 0, 5, 0, -1, NULL, -2);    /* above the limit: never */
        compat_do(c, k, ALGO_TAKE, 0, 1, 5, 0, 0, NULL, -2);     /* nothing to take */
        compat_do(c, k, ALGO_TAKE, 2, 1, 3, 100, 0, "3", 100);   /* SETEX 100 3 */
        freeReplyObject(redisCommand(c, "EXPIRE %s 40", k));     /* time passes */
        compat_do(c, k, ALGO_TAKE, 2, 1, 1, 40, 0, "1", 40);     /* DECRBY, TTL kept */
        compat_do(c, k, ALGO_TAKE, 2, 0, 1, 40, 40, "1", 40);    /* does not fit */
        compat_do(c, k, ALGO_PEEK, 1, 1, 0, 40, 0, "1", 40);     /* fits, not taken */
        compat_do(c, k, ALGO_TAKE, 6, 0, 1, 40, -1, "1", 40);    /* never */
        compat_do(c, k, ALGO_REFUND, 3, 1, 4, 40, 0, "4", 40);   /* INCRBY */
        compat_do(c, k, ALGO_REFUND, 9, 1, 5, 40, 0, "5", 40);   /* capped at creditLimit */
        compat_do(c, k, ALGO_CHARGE, 7, 0, 0, 40, 40, "0", 40);  /* clamps at 0 */
        compat_do(c, k, ALGO_TAKE, 1, 0, 0, 40, 40, "0", 40);    /* denied, as pipe.lua */
        compat_do(c, k, ALGO_CHARGE, 0, 1, 0, 40, 0, "0", 40);   /* fits */
        compat_do(c, k, ALGO_RESET, 0, 1, 1, 0, 0, NULL, -2);    /* DEL: deleted one */
        compat_do(c, k, ALGO_RESET, 0, 1, 0, 0, 0, NULL, -2);    /* nothing to delete */
        compat_do(c, k, ALGO_CHARGE, 2, 1, 3, 100, 0, "3", 100); /* creates the window */
        freeReplyObject(redisCommand(c, "DEL %s", k));
        compat_do(c, k, ALGO_CHARGE, 9, 0, 0, 100, 100, "0", 100);
        compat_do(c, k, ALGO_TAKE, 1, 0, 0, 100, 100, "0", 100);
        redisFree(c);
}
END_TEST

/* A key that is not a counter: a hash (WRONGTYPE) or a compat key holding no integer ("abc",
 * "2.5", a number too long to be exact) is an error reply, and the call writes NOTHING: not
 * even the keys of the hits before it (a script is not rolled back). */
START_TEST (test_not_a_counter) {
        static const char *const values[] = { "abc", "2.5", "1234567890123456", "" };
        redisContext *c = conn();
        const char *a = "divvy:op=nac::5:100", *b = "divvy:op=nac2::5:100";
        char err[256], v[64];

        for (size_t i = 0; i <= sizeof values / sizeof values[0]; i++) {
                Call call = { .n = 2 };

                freeReplyObject(redisCommand(c, "DEL %s %s", a, b));
                if (i < sizeof values / sizeof values[0])
                        freeReplyObject(redisCommand(c, "SET %s %s EX 100", b, values[i]));
                else
                        freeReplyObject(redisCommand(c, "HSET %s f 1", b));
                for (size_t k = 0; k < 2; k++) {
                        call.hits[k] = (StoreHit){ .credit_limit = 5, .reset_seconds = 100, .count = 1 };
                        call.compat[k] = true;
                }
                call.hits[0].op = ALGO_TAKE;   /* would SETEX a */
                call.hits[1].op = ALGO_REFUND; /* would INCRBY b */
                snprintf(call.keys[0], KEY_MAX, "%s", a);
                snprintf(call.keys[1], KEY_MAX, "%s", b);
                err[0] = '\0';
                ck_assert_int_eq(run(c, &call, 0, err, sizeof err), -EIO);
                ck_assert_msg(strstr(err, i < sizeof values / sizeof values[0]
                                                  ? "not hold an integer counter"
                                                  : "WRONGTYPE"),
                              "%zu: %s", i, err);
                ck_assert_msg(!get(c, a, v, sizeof v), "%zu: %s written: %s", i, a, v);
        }
        freeReplyObject(redisCommand(c, "DEL %s %s", a, b));
        redisFree(c);
}
END_TEST

/* ---- groups, and two hits on one key ---- */

static char *state(redisContext *c, const char *key, char *buf) {
        char *v = get(c, key, buf, 64);

        if (!v)
                snprintf(buf, 64, "(absent)");
        return buf;
}

START_TEST (test_groups) {
        AlgoParams p = prepared(ALGORITHM_SLIDING_WINDOW, 2, 60, 0, 0, false);
        redisContext *c = conn();
        uint64_t now = server_now(c) + 86400 * SEC;
        char v[64], before_a[64], before_c[64], want[64];
        Call call;

        freeReplyObject(redisCommand(c, "DEL g:a g:b g:c g:d g:e"));
        /* b has one credit left */
        call = (Call){ .n = 1, .hits = { hit_of(&p, ALGO_TAKE, 1, 0) }, .keys = { "g:b" } };
        run_ok(c, &call, now);
        snprintf(want, sizeof want, "1:%" PRIu64 ":0:1", now + 120 * SEC);
        ck_assert_str_eq(state(c, "g:b", v), want);

        /* a group with one denied hit: each reports its own decision, none is written */
        call = (Call){ .n = 2,
                       .hits = { hit_of(&p, ALGO_TAKE, 1, 7), hit_of(&p, ALGO_TAKE, 2, 7) },
                       .keys = { "g:a", "g:b" } };
        run_ok(c, &call, now);
        ck_assert(call.hits[0].res.allowed && call.hits[0].res.credit == 1);
        ck_assert(!call.hits[1].res.allowed && call.hits[1].res.credit == 1 && call.hits[1].res.retry > 0);
        ck_assert_str_eq(state(c, "g:a", v), "(absent)");
        ck_assert_str_eq(state(c, "g:b", v), want);

        /* every one allowed: all written */
        call.hits[1].count = 1;
        run_ok(c, &call, now);
        ck_assert(call.hits[0].res.allowed && call.hits[1].res.allowed && call.hits[1].res.credit == 0);
        ck_assert_str_eq(state(c, "g:a", v), want);
        snprintf(want, sizeof want, "1:%" PRIu64 ":0:2", now + 120 * SEC);
        ck_assert_str_eq(state(c, "g:b", v), want);

        /* a canary (group 0) stands alone: written though the group after it is denied ... */
        state(c, "g:a", before_a);
        call = (Call){ .n = 3,
                       .hits = { hit_of(&p, ALGO_TAKE, 1, 0), hit_of(&p, ALGO_REFUND, 1, 3),
                                 hit_of(&p, ALGO_TAKE, 1, 3) },
                       .keys = { "g:c", "g:a", "g:b" } };
        run_ok(c, &call, now);
        ck_assert(call.hits[0].res.allowed && call.hits[1].res.allowed && !call.hits[2].res.allowed);
        ck_assert_str_ne(state(c, "g:c", v), "(absent)");
        ck_assert_str_eq(state(c, "g:a", v), before_a); /* the refund was undone */
        /* ... and a denied canary does not hold the group back */
        state(c, "g:c", before_c);
        call = (Call){ .n = 2,
                       .hits = { hit_of(&p, ALGO_TAKE, 2, 0), hit_of(&p, ALGO_REFUND, 1, 3) },
                       .keys = { "g:c", "g:a" } };
        run_ok(c, &call, now);
        ck_assert(!call.hits[0].res.allowed && call.hits[1].res.allowed);
        ck_assert_str_eq(state(c, "g:c", v), before_c);
        ck_assert_str_eq(state(c, "g:a", v), "(absent)"); /* refunded to empty: deleted */

        /* two hits on one key see each other: alone ... */
        call = (Call){ .n = 3,
                       .hits = { hit_of(&p, ALGO_TAKE, 1, 0), hit_of(&p, ALGO_TAKE, 1, 0),
                                 hit_of(&p, ALGO_TAKE, 1, 0) },
                       .keys = { "g:d", "g:d", "g:d" } };
        run_ok(c, &call, now);
        ck_assert(call.hits[0].res.allowed && call.hits[0].res.credit == 1);
        ck_assert(call.hits[1].res.allowed && call.hits[1].res.credit == 0);
        ck_assert(!call.hits[2].res.allowed && call.hits[2].res.credit == 0);
        snprintf(want, sizeof want, "1:%" PRIu64 ":0:2", now + 120 * SEC);
        ck_assert_str_eq(state(c, "g:d", v), want);
        /* ... and in a group: the second denied, so the first is undone too */
        call = (Call){ .n = 2,
                       .hits = { hit_of(&p, ALGO_TAKE, 2, 1), hit_of(&p, ALGO_TAKE, 1, 1) },
                       .keys = { "g:e", "g:e" } };
        run_ok(c, &call, now);
        ck_assert(call.hits[0].res.allowed && call.hits[0].res.credit == 0);
        ck_assert(!call.hits[1].res.allowed && call.hits[1].res.credit == 0);
        ck_assert_str_eq(state(c, "g:e", v), "(absent)");
        call.hits[0].count = 1;
        run_ok(c, &call, now);
        ck_assert(call.hits[0].res.allowed && call.hits[1].res.allowed && call.hits[1].res.credit == 0);
        ck_assert_str_eq(state(c, "g:e", v), want);
        redisFree(c);
}
END_TEST

/* ---- one call mixing both kinds of keys; the server's clock; foreign values ---- */

START_TEST (test_mixed_and_server_time) {
        AlgoParams p = prepared(ALGORITHM_TOKEN_BUCKET, 10, 60, 0, 0, false);
        AlgoParams fw = prepared(ALGORITHM_FIXED_WINDOW, 10, 60, 0, 0, false);
        redisContext *c = conn();
        uint64_t before, after;
        AlgoState got;
        char v[64];
        Call call = { .n = 3,
                      .hits = { hit_of(&p, ALGO_TAKE, 3, 0),
                                { .credit_limit = 4, .reset_seconds = 30, .op = ALGO_TAKE, .count = 1 },
                                hit_of(&fw, ALGO_TAKE, 3, 0) },
                      .compat = { false, true, false },
                      .keys = { "m:tb", "divvy:m::4:30", "m:fw" } };

        freeReplyObject(redisCommand(c, "DEL m:tb divvy:m::4:30 m:fw"));
        before = server_now(c);
        run_ok(c, &call, 0); /* now = the server's TIME */
        after = server_now(c);
        ck_assert(call.hits[0].res.allowed && call.hits[0].res.credit == 7 && call.hits[0].res.reset == 18);
        ck_assert(call.hits[1].res.allowed && call.hits[1].res.credit == 3 && call.hits[1].res.reset == 30);
        ck_assert(call.hits[2].res.allowed && call.hits[2].res.credit == 7 && call.hits[2].res.reset == 60);
        parse_state(get(c, "m:tb", v, sizeof v), ALGORITHM_TOKEN_BUCKET, &got);
        ck_assert(got.w0 >= before + 18 * SEC && got.w0 <= after + 18 * SEC && got.w1 == 0);
        parse_state(get(c, "m:fw", v, sizeof v), ALGORITHM_FIXED_WINDOW, &got);
        ck_assert(got.w0 >= before + 60 * SEC && got.w0 <= after + 60 * SEC && got.w1 == 7);
        ck_assert_int_le(integer(c, "PTTL %s", "m:fw"), 60001); /* ceil(w0 / 1000) ms */
        ck_assert_int_ge(integer(c, "PTTL %s", "m:fw"), 59000);
        ck_assert_str_eq(get(c, "divvy:m::4:30", v, sizeof v), "3");

        /* a counter of another algorithm (the rule changed) counts as absent; RESET deletes it
         * but reports no live counter */
        call = (Call){ .n = 2,
                       .hits = { hit_of(&fw, ALGO_PEEK, 10, 0), hit_of(&fw, ALGO_RESET, 0, 0) },
                       .keys = { "m:tb", "m:tb" } };
        run_ok(c, &call, 0);
        ck_assert(call.hits[0].res.allowed && call.hits[0].res.credit == 0 && call.hits[0].res.reset == 60);
        ck_assert(call.hits[1].res.allowed && call.hits[1].res.credit == 0 && call.hits[1].res.limit == 10);
        ck_assert_ptr_null(get(c, "m:tb", v, sizeof v));
        redisFree(c);
}
END_TEST

/* A CHARGE leaves at most one burst of debt, in the script as in algo_apply() (ALGO_DEBT_MAX_BURSTS);
 * the one documented difference: the script caps w0 also at 2^53 - 1 us, which only a bucket whose
 * burst takes about 100 years to refill reaches. */
START_TEST (test_debt_cap) {
        AlgoParams p = prepared(ALGORITHM_TOKEN_BUCKET, 10, 10, 0, 0, false); /* T = 1 s, tau = 10 s */
        /* T = 3155760 s, tau = 1427 T just under REDIS_SCRIPT_SPAN_MAX */
        AlgoParams huge = prepared(ALGORITHM_TOKEN_BUCKET, 1000, ALGO_RESET_SECONDS_MAX, 1427, 0, false);
        redisContext *c = conn();
        uint64_t now = server_now(c) + 86400 * SEC;
        AlgoState st = { 0, 0 }, got;
        AlgoResult res;
        char v[64];
        Call call = { .n = 1,
                      .hits = { hit_of(&p, ALGO_CHARGE, UINT64_C(1) << 40, 0) },
                      .keys = { "d:tb" } };

        freeReplyObject(redisCommand(c, "DEL d:tb"));
        run_ok(c, &call, now);
        algo_apply(&p, ALGO_CHARGE, UINT64_C(1) << 40, now, &st, &res);
        ck_assert_uint_eq(st.w0, now + 20 * SEC);
        parse_state(get(c, "d:tb", v, sizeof v), ALGORITHM_TOKEN_BUCKET, &got);
        ck_assert_uint_eq(got.w0, st.w0);
        ck_assert(!call.hits[0].res.allowed && call.hits[0].res.credit == 0 && res.credit == 0);
        ck_assert(call.hits[0].res.reset == 20 && res.reset == 20);
        ck_assert(call.hits[0].res.retry == 11 && res.retry == 11);

        st = (AlgoState){ 0, 0 };
        call = (Call){ .n = 1, .hits = { hit_of(&huge, ALGO_CHARGE, UINT64_MAX, 0) }, .keys = { "d:tb" } };
        freeReplyObject(redisCommand(c, "DEL d:tb"));
        run_ok(c, &call, now);
        algo_apply(&huge, ALGO_CHARGE, UINT64_MAX, now, &st, &res);
        ck_assert_uint_eq(st.w0, now + 2 * huge.d1);
        parse_state(get(c, "d:tb", v, sizeof v), ALGORITHM_TOKEN_BUCKET, &got);
        ck_assert_uint_eq(got.w0, REDIS_SCRIPT_W0_MAX);
        ck_assert(!call.hits[0].res.allowed && call.hits[0].res.credit == 0 && res.credit == 0);
        ck_assert_uint_eq(call.hits[0].res.reset, (REDIS_SCRIPT_W0_MAX - now + SEC - 1) / SEC);
        ck_assert_uint_eq(res.reset, (2 * huge.d1 + SEC - 1) / SEC);

        /* discrete refills: the deficit is capped at two bursts */
        for (int i = 0; i < 2; i++) {
                AlgoParams d = prepared(ALGORITHM_TOKEN_BUCKET, 10, 60, 0, 6, false); /* 1 per 6 s */
                uint64_t n = i ? UINT64_MAX : UINT64_C(1) << 52;

                st = (AlgoState){ 0, 0 };
                call = (Call){ .n = 1, .hits = { hit_of(&d, ALGO_CHARGE, n, 0) }, .keys = { "d:tb" } };
                freeReplyObject(redisCommand(c, "DEL d:tb"));
                run_ok(c, &call, now);
                algo_apply(&d, ALGO_CHARGE, n, now, &st, &res);
                parse_state(get(c, "d:tb", v, sizeof v), ALGORITHM_TOKEN_BUCKET, &got);
                ck_assert_uint_eq(got.w0, now + 20 * 6 * SEC);
                ck_assert_uint_eq(got.w1, 20);
                ck_assert(got.w0 == st.w0 && got.w1 == st.w1);
                ck_assert(!call.hits[0].res.allowed && call.hits[0].res.credit == 0);
                ck_assert(call.hits[0].res.retry == 66 && res.retry == 66); /* 11 refills */
        }
        redisFree(c);
}
END_TEST

/* ---- the C side alone ---- */

START_TEST (test_args_and_decode) {
        AlgoParams sw = prepared(ALGORITHM_SLIDING_WINDOW, 10, 2251799814, 0, 0, false);
        AlgoParams tb = prepared(ALGORITHM_TOKEN_BUCKET, 100, 3600, 5, 36, true);
        StoreHit h = hit_of(&tb, ALGO_CHARGE, UINT64_MAX, 42), hits[2];
        const char *argv[REDIS_SCRIPT_ARGS_PER_HIT];
        size_t argvlen[REDIS_SCRIPT_ARGS_PER_HIT];
        char buf[REDIS_SCRIPT_HIT_ARGS_SIZE], joined[512] = "";
        redisReply *el[10], arr = { .type = REDIS_REPLY_ARRAY, .elements = 10, .element = el };
        redisReply ints[10];

        ck_assert_int_eq(redis_script_hit_args(&h, false, 123, buf, sizeof buf, argv, argvlen),
                         REDIS_SCRIPT_ARGS_PER_HIT);
        for (int i = 0; i < REDIS_SCRIPT_ARGS_PER_HIT; i++) {
                ck_assert_uint_eq(strlen(argv[i]), argvlen[i]);
                strcat(joined, argv[i]);
                strcat(joined, " ");
        }
        /* compat algorithm op count limit reset burst refill strict d0 d1 group at window */
        ck_assert_str_eq(joined, "0 2 2 9007199254740992 100 3600 5 36 1 36000000 1 42 123 0 ");
        h.at_usec = 77;
        ck_assert_int_eq(redis_script_hit_args(&h, false, 0, buf, sizeof buf, argv, argvlen), 14);
        ck_assert_str_eq(argv[12], "77");
        ck_assert_int_eq(redis_script_hit_args(&h, false, 0, buf, 20, argv, argvlen), -ENOBUFS);
        ck_assert_int_eq(redis_script_hit_args(&h, true, 0, buf, sizeof buf, argv, argvlen), -EINVAL);
        h.at_usec = REDIS_SCRIPT_NOW_MAX + 1;
        ck_assert_int_eq(redis_script_hit_args(&h, false, 0, buf, sizeof buf, argv, argvlen), -ERANGE);
        h = hit_of(&sw, ALGO_TAKE, 1, 0); /* a sliding window of more than 2^51 us */
        ck_assert_int_eq(redis_script_hit_args(&h, false, 0, buf, sizeof buf, argv, argvlen), -ERANGE);
        h = (StoreHit){ .credit_limit = 3, .reset_seconds = 60 }; /* no algo: divvy's fixed window */
        ck_assert_int_eq(redis_script_hit_args(&h, true, 5, buf, sizeof buf, argv, argvlen), 14);
        ck_assert_str_eq(argv[0], "1");
        ck_assert_str_eq(argv[4], "3");
        ck_assert_str_eq(argv[6], "3");
        ck_assert_str_eq(argv[13], "0");
        /* an aligned window (issue #34): its number last; never on divvy 1.7's keys */
        AlgoParams fa = prepared(ALGORITHM_FIXED_WINDOW, 10, 60, 0, 0, false);
        fa.window = ALGO_WINDOW_ALIGNED;
        h = hit_of(&fa, ALGO_TAKE, 1, 0);
        ck_assert_int_eq(redis_script_hit_args(&h, false, 5, buf, sizeof buf, argv, argvlen), 14);
        ck_assert_str_eq(argv[13], "1");
        ck_assert_int_eq(redis_script_hit_args(&h, true, 5, buf, sizeof buf, argv, argvlen), -EINVAL);
        fa.window = _ALGO_WINDOW_MAX;
        ck_assert_int_eq(redis_script_hit_args(&h, false, 5, buf, sizeof buf, argv, argvlen), -EINVAL);

        for (int i = 0; i < 10; i++) {
                ints[i] =
                        (redisReply){ .type = REDIS_REPLY_INTEGER, .integer = i % 5 == 4 ? -1 : i % 5 == 0 };
                el[i] = ints + i;
        }
        ints[6].integer = 9;
        ck_assert_int_eq(redis_script_decode(&arr, hits, 2), 0);
        ck_assert(hits[0].res.allowed && hits[0].res.retry == -1 && hits[1].res.credit == 9 &&
                  hits[1].error == 0);
        ck_assert_int_eq(redis_script_decode(&arr, hits, 1), -EPROTO);
        ints[5].integer = 2; /* allowed is 0 or 1 */
        ck_assert_int_eq(redis_script_decode(&arr, hits, 2), -EPROTO);
        ints[5].integer = 0;
        ints[9].integer = -2;
        ck_assert_int_eq(redis_script_decode(&arr, hits, 2), -EPROTO);
        ints[9].integer = 0;
        ints[3].type = REDIS_REPLY_STRING;
        ck_assert_int_eq(redis_script_decode(&arr, hits, 2), -EPROTO);
        arr.type = REDIS_REPLY_ERROR;
        ck_assert_int_eq(redis_script_decode(&arr, hits, 2), -EPROTO);
}
END_TEST

static Suite *redis_script_suite(void) {
        Suite *s = suite_create("redis_script");
        TCase *tc = tcase_create("script");

        tcase_add_test(tc, test_args_and_decode);
        tcase_add_test(tc, test_keys);
        tcase_add_test(tc, test_own_keys_unambiguous);
        tcase_add_loop_test(tc, test_keys_in_node_order, 0, (int) (sizeof node_keys / sizeof node_keys[0]));
        tcase_add_test(tc, test_mul_div);
        tcase_add_test(tc, test_compat_hit_is_pipe_lua);
        tcase_add_test(tc, test_compat_ops);
        tcase_add_test(tc, test_not_a_counter);
        tcase_add_test(tc, test_groups);
        tcase_add_test(tc, test_mixed_and_server_time);
        tcase_add_test(tc, test_debt_cap);
        suite_add_tcase(s, tc);

        tc = tcase_create("exact");
        tcase_set_timeout(tc, 300); /* seconds: 3000 batches of up to 4 hits per configuration */
        tcase_add_loop_test(tc, test_exact_random, 0, (int) (sizeof configs / sizeof configs[0]));
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        int r = server_start();

        if (r != 0) {
                server_stop();
                return r;
        }
        r = check_run_suite(redis_script_suite());
        server_stop();
        return r;
}
