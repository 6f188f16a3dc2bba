/* SPDX-License-Identifier: MIT */
#include "redis-script.h"

#include <errno.h>
#include <string.h>

#include "core/number.h"
#include "core/rules.h"

/* redis-script-lua.inc, made from redis-script.lua by Makefile-store.am: REDIS_SCRIPT_TEXT
 * (the file as one string literal) and REDIS_SCRIPT_SHA1 */
#include "store/redis-script-lua.inc"

const char redis_script_text[] = REDIS_SCRIPT_TEXT;
const char redis_script_sha1[] = REDIS_SCRIPT_SHA1;

_Static_assert(sizeof(REDIS_SCRIPT_SHA1) == 41, "the script's SHA1 is 40 hex digits");
_Static_assert(ALGO_TAKE == 0 && ALGO_PEEK == 1 && ALGO_CHARGE == 2 && ALGO_REFUND == 3 && ALGO_RESET == 4,
               "redis-script.lua's op numbers (TAKE, PEEK, CHARGE, REFUND, RESET) are the AlgoOp's");

#define USEC_PER_SEC UINT64_C(1000000)

static uint64_t div_up(uint64_t a, uint64_t b) {
        return a / b + (a % b != 0);
}

/* The longest a counter of p takes to be full again from empty (no debt), in us: what its w0
 * can be beyond now. p is prepared (algo_params_prepare()). */
static uint64_t span_usec(const AlgoParams *p) {
        switch (p->algorithm) {
        case ALGORITHM_FIXED_WINDOW:
                return p->reset_seconds * USEC_PER_SEC;
        case ALGORITHM_SLIDING_WINDOW:
                return 2 * p->d0;
        case ALGORITHM_TOKEN_BUCKET:
                if (p->refill_seconds == 0)
                        return p->d1; /* tau */
                return p->d1 == 0 ? UINT64_MAX : div_up(p->burst, p->d1) * p->d0;
        default:
                return UINT64_MAX;
        }
}

/* Appends len bytes at *off (<= size); false if they do not fit with a NUL after them. */
static bool put(char *buf, size_t size, size_t *off, const char *s, size_t len) {
        if (len >= size - *off)
                return false;
        memcpy(buf + *off, s, len);
        *off += len;
        buf[*off] = '\0';
        return true;
}

static bool put_str(char *buf, size_t size, size_t *off, const char *s) {
        return put(buf, size, off, s, strlen(s));
}

/* Appends v in decimal (number_append_u64(): no snprintf on the per-hit path). */
static bool put_u64(char *buf, size_t size, size_t *off, uint64_t v) {
        char d[20];

        return put(buf, size, off, d, (size_t) (number_append_u64(d, v) - d));
}

int redis_script_hit_args(const StoreHit *h, bool compat, uint64_t now_usec, char *buf, size_t size,
                          const char **argv, size_t *argvlen) {
        AlgoParams fixed;
        const AlgoParams *p;
        uint64_t at, v[REDIS_SCRIPT_ARGS_PER_HIT];
        size_t off = 0;

        if (!h || (!buf && size > 0) || !argv || !argvlen)
                return -EINVAL;
        if (h->op < 0 || h->op >= _ALGO_OP_MAX)
                return -EINVAL;
        p = h->algo;
        if (!p) {
                /* divvy's fixed window: what store.c's apply_hit() makes of it */
                if (h->credit_limit == 0 || h->reset_seconds == 0)
                        return -EINVAL;
                if (h->credit_limit > ALGO_CREDIT_MAX || h->reset_seconds > ALGO_RESET_SECONDS_MAX)
                        return -ERANGE;
                fixed = (AlgoParams){ .algorithm = ALGORITHM_FIXED_WINDOW,
                                      .credit_limit = h->credit_limit,
                                      .reset_seconds = h->reset_seconds,
                                      .burst = h->credit_limit };
                p = &fixed;
        }
        if (p->algorithm < 0 || p->algorithm >= _ALGORITHM_MAX || p->credit_limit == 0 ||
            p->reset_seconds == 0)
                return -EINVAL;
        if (p->window < 0 || p->window >= _ALGO_WINDOW_MAX)
                return -EINVAL;
        if (compat && (p->algorithm != ALGORITHM_FIXED_WINDOW || p->window != ALGO_WINDOW_FIRST_HIT))
                return -EINVAL;
        if (p->credit_limit > ALGO_CREDIT_MAX || p->reset_seconds > ALGO_RESET_SECONDS_MAX ||
            p->burst > ALGO_CREDIT_MAX || span_usec(p) > REDIS_SCRIPT_SPAN_MAX)
                return -ERANGE;
        if (p->algorithm == ALGORITHM_TOKEN_BUCKET && (p->d0 == 0 || p->d1 == 0 || p->burst == 0))
                return -EINVAL; /* not prepared */
        if (p->algorithm == ALGORITHM_SLIDING_WINDOW && p->d0 == 0)
                return -EINVAL;
        at = h->at_usec ? h->at_usec : now_usec;
        if (at > REDIS_SCRIPT_NOW_MAX)
                return -ERANGE;

        v[0] = compat;
        v[1] = (uint64_t) p->algorithm;
        v[2] = (uint64_t) h->op;
        v[3] = h->count < REDIS_SCRIPT_COUNT_MAX ? h->count : REDIS_SCRIPT_COUNT_MAX;
        v[4] = p->credit_limit;
        v[5] = p->reset_seconds;
        v[6] = p->algorithm == ALGORITHM_TOKEN_BUCKET ? p->burst : p->credit_limit;
        v[7] = p->refill_seconds;
        v[8] = p->strict;
        v[9] = p->d0;
        v[10] = p->d1;
        v[11] = h->group;
        v[12] = at;
        v[13] = (uint64_t) p->window;

        for (size_t i = 0; i < REDIS_SCRIPT_ARGS_PER_HIT; i++) {
                size_t start = off;

                if (!put_u64(buf, size, &off, v[i]))
                        return -ENOBUFS;
                argv[i] = buf + start;
                argvlen[i] = off - start;
                off++; /* past the NUL */
        }
        return REDIS_SCRIPT_ARGS_PER_HIT;
}

int redis_script_decode(const redisReply *r, StoreHit *hits, size_t n) {
        if (!r || (!hits && n > 0) || r->type != REDIS_REPLY_ARRAY ||
            r->elements != n * REDIS_SCRIPT_RESULTS_PER_HIT)
                return -EPROTO;
        for (size_t i = 0; i < r->elements; i++) {
                const redisReply *e = r->element[i];
                long long min = i % REDIS_SCRIPT_RESULTS_PER_HIT == 4 ? -1 : 0;

                if (!e || e->type != REDIS_REPLY_INTEGER || e->integer < min)
                        return -EPROTO;
                if (i % REDIS_SCRIPT_RESULTS_PER_HIT == 0 && e->integer > 1)
                        return -EPROTO;
        }
        for (size_t i = 0; i < n; i++) {
                redisReply *const *e = r->element + i * REDIS_SCRIPT_RESULTS_PER_HIT;

                hits[i].error = 0;
                hits[i].res = (AlgoResult){
                        .allowed = e[0]->integer == 1,
                        .credit = (uint64_t) e[1]->integer,
                        .reset = (uint64_t) e[2]->integer,
                        .limit = (uint64_t) e[3]->integer,
                        .retry = (int64_t) e[4]->integer,
                };
        }
        return 0;
}

int redis_key_compat(const StoreHit *h, char *buf, size_t size) {
        size_t off = 0;
        bool ok;

        if (!h || !h->rule || (!buf && size > 0) || (!h->actor && h->actor_len > 0))
                return -EINVAL;
        if (size == 0)
                return -ENOBUFS;
        ok = put_str(buf, size, &off, REDIS_KEY_COMPAT_PREFIX) &&
             put(buf, size, &off, h->rule->divvy_bucket ? h->rule->divvy_bucket : "",
                 h->rule->divvy_bucket_len) &&
             put(buf, size, &off, ":", 1) && put(buf, size, &off, h->actor ? h->actor : "", h->actor_len) &&
             put(buf, size, &off, ":", 1) && put_u64(buf, size, &off, h->rule->credit_limit) &&
             put(buf, size, &off, ":", 1) && put_u64(buf, size, &off, h->rule->reset_seconds);
        return ok ? (int) off : -ENOBUFS;
}

int redis_key_own(const StoreHit *h, char *buf, size_t size) {
        static const char hex[] = "0123456789abcdef";
        char id[2 * RULE_ID_SIZE];
        size_t off = 0;
        bool ok;

        if (!h || !h->rule_id || (!buf && size > 0) || (!h->actor && h->actor_len > 0))
                return -EINVAL;
        if (size == 0)
                return -ENOBUFS;
        for (size_t i = 0; i < RULE_ID_SIZE; i++) {
                id[2 * i] = hex[h->rule_id[i] >> 4];
                id[2 * i + 1] = hex[h->rule_id[i] & 15];
        }
        ok = put_str(buf, size, &off, REDIS_KEY_OWN_PREFIX) &&
             put(buf, size, &off, h->actor ? h->actor : "", h->actor_len) && put(buf, size, &off, "}:", 2) &&
             put(buf, size, &off, id, sizeof(id));
        return ok ? (int) off : -ENOBUFS;
}
