/* SPDX-License-Identifier: MIT */

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "store-fallback.h"

/* One batch in flight: the primary's hits, and the copies of those sent to the local store. */
typedef struct FallbackBatch {
        StoreFallback *owner;
        bool busy;
        StoreHit *hits; /* the caller's */
        size_t n;
        uint64_t now_usec;
        StoreDoneFunc done;
        void *userdata;
        StoreHit *local_hits; /* max_hits: copies of the hits the local store decides */
        size_t *local_index;  /* max_hits: local_hits[i] is hits[local_index[i]] */
        size_t n_local;
} FallbackBatch;

struct StoreFallback {
        StoreFallbackOptions o;
        FallbackBatch *batches; /* max_batches */
        StoreFallbackStats stats;
};

StoreFallback *store_fallback_free(StoreFallback *f) {
        if (!f)
                return NULL;
        for (size_t i = 0; f->batches && i < f->o.max_batches; i++) {
                free(f->batches[i].local_hits);
                free(f->batches[i].local_index);
        }
        free(f->batches);
        free(f);
        return NULL;
}

int store_fallback_new(const StoreFallbackOptions *o, StoreFallback **ret) {
        StoreFallback *f;

        if (!o || !ret || !o->primary || o->max_batches == 0 || o->max_hits == 0 ||
            o->default_policy <= RULE_ON_ERROR_DEFAULT || o->default_policy >= _RULE_ON_ERROR_MAX)
                return -EINVAL;
        f = calloc(1, sizeof *f);
        if (!f)
                return -ENOMEM;
        f->o = *o;
        f->batches = calloc(o->max_batches, sizeof *f->batches);
        if (!f->batches) {
                store_fallback_free(f);
                return -ENOMEM;
        }
        for (size_t i = 0; i < o->max_batches; i++) {
                FallbackBatch *b = f->batches + i;
                b->owner = f;
                b->local_hits = calloc(o->max_hits, sizeof *b->local_hits);
                b->local_index = calloc(o->max_hits, sizeof *b->local_index);
                if (!b->local_hits || !b->local_index) {
                        store_fallback_free(f);
                        return -ENOMEM;
                }
        }
        *ret = f;
        return 0;
}

RuleOnError store_fallback_policy(const StoreFallback *f, const Rule *rule) {
        RuleOnError p = rule ? rule->on_backend_error : RULE_ON_ERROR_DEFAULT;

        if (p <= RULE_ON_ERROR_DEFAULT || p >= _RULE_ON_ERROR_MAX)
                p = f->o.default_policy;
        if (p == RULE_ON_ERROR_LOCAL && !f->o.local)
                p = RULE_ON_ERROR_DENY;
        return p;
}

static void fallback_finish(FallbackBatch *b) {
        StoreDoneFunc done = b->done;
        void *userdata = b->userdata;

        b->busy = false;
        done(userdata, 0);
}

/* allow or deny: the decision without a counter. */
static void fallback_decide(StoreHit *h, bool allow) {
        uint64_t capacity = h->algo && h->algo->burst ? h->algo->burst : h->credit_limit;

        h->error = 0;
        h->res = (AlgoResult){
                .allowed = allow,
                .limit = capacity,
                .credit = allow ? capacity : 0,
                .reset = h->reset_seconds,
                .retry = allow ? 0 : (int64_t) h->reset_seconds,
        };
}

static void fallback_local_done(void *userdata, int error) {
        FallbackBatch *b = userdata;

        for (size_t i = 0; i < b->n_local; i++) {
                StoreHit *h = b->hits + b->local_index[i];
                const StoreHit *l = b->local_hits + i;

                h->error = error < 0 ? error : l->error;
                h->res = l->res;
                if (h->error < 0)
                        b->owner->stats.local_errors++;
        }
        fallback_finish(b);
}

static void fallback_primary_done(void *userdata, int error) {
        FallbackBatch *b = userdata;
        StoreFallback *f = b->owner;
        int r;

        b->n_local = 0;
        for (size_t i = 0; i < b->n; i++) {
                StoreHit *h = b->hits + i;
                RuleOnError p;

                if (error < 0)
                        h->error = error;
                if (h->error >= 0)
                        continue;
                f->stats.failed_hits++;
                p = store_fallback_policy(f, h->rule);
                if (p != RULE_ON_ERROR_LOCAL && (h->op == ALGO_REFUND || h->op == ALGO_RESET))
                        continue; /* not a decision: the error stands */
                f->stats.fallbacks[p]++;
                h->fallback = true;
                if (p == RULE_ON_ERROR_LOCAL) {
                        b->local_hits[b->n_local] = *h;
                        b->local_hits[b->n_local].error = 0;
                        b->local_index[b->n_local++] = i;
                } else
                        fallback_decide(h, p == RULE_ON_ERROR_ALLOW);
        }
        if (b->n_local == 0) {
                fallback_finish(b);
                return;
        }
        r = f->o.local(f->o.local_backend, b->local_hits, b->n_local, b->now_usec, fallback_local_done, b);
        if (r < 0)
                fallback_local_done(b, r);
}

int store_fallback_submit(void *fallback, StoreHit *hits, size_t n, uint64_t now_usec, StoreDoneFunc done,
                          void *userdata) {
        StoreFallback *f = fallback;
        FallbackBatch *b = NULL;
        int r;

        if (!f || !done || (n > 0 && !hits) || n > f->o.max_hits)
                return -EINVAL;
        for (size_t i = 0; i < f->o.max_batches && !b; i++)
                if (!f->batches[i].busy)
                        b = f->batches + i;
        if (!b)
                return -EBUSY;
        *b = (FallbackBatch){
                .owner = f,
                .busy = true,
                .hits = hits,
                .n = n,
                .now_usec = now_usec,
                .done = done,
                .userdata = userdata,
                .local_hits = b->local_hits,
                .local_index = b->local_index,
        };
        for (size_t i = 0; i < n; i++)
                hits[i].error = 0;
        r = f->o.primary(f->o.primary_backend, hits, n, now_usec, fallback_primary_done, b);
        if (r < 0)
                fallback_primary_done(b, r); /* not taken: every hit is decided by its policy */
        return 0;
}

void store_fallback_get_stats(const StoreFallback *f, StoreFallbackStats *ret) {
        *ret = f->stats;
}
