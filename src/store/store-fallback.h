/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * store-fallback.c: what a hit gets when the remote store (Redis/Valkey, issue #16) cannot
 * answer it. A backend of the StoreSubmitFunc shape that wraps two others: every batch goes
 * to the primary (the Redis store); once it completes, each hit it failed (hit->error < 0:
 * a timeout, a connection down, the circuit breaker open) is decided by its rule's
 * onBackendError (Rule.on_backend_error, or the default given here):
 *
 *   allow  allowed, credit = the capacity (creditLimit, or a token bucket's burst),
 *          reset = resetSeconds, retry 0;
 *   deny   denied, credit 0, reset = retry = resetSeconds;
 *   local  the hits are submitted to the local backend (this host's LMDB store, so the limit
 *          becomes per host), as one batch per primary batch, groups kept whole (a failed
 *          request's hits all fail together: the primary runs a request as one call).
 *
 * REFUND and RESET are not decisions: under allow or deny they keep the primary's error
 * (the admin sees it); under local the local store applies them. With these policies a HIT
 * is answered from a hit without an error unless the local store fails too.
 *
 * Library-like: no logging; counters in store_fallback_get_stats(). No allocation after
 * store_fallback_new(): max_batches contexts of max_hits hits each are made up front.
 */

#include <stddef.h>
#include <stdint.h>

#include "store.h"

typedef struct StoreFallbackOptions {
        StoreSubmitFunc primary; /* the remote store */
        void *primary_backend;
        StoreSubmitFunc local; /* the local store; NULL: "local" acts as "deny" */
        void *local_backend;
        RuleOnError default_policy; /* for rules without onBackendError (not DEFAULT) */
        size_t max_batches;         /* batches in flight at once (the server's SERVER_BATCHES) */
        size_t max_hits;            /* hits in one batch (BATCH_HITS_MAX) */
} StoreFallbackOptions;

typedef struct StoreFallbackStats {
        uint64_t failed_hits;                   /* hits the primary could not answer */
        uint64_t fallbacks[_RULE_ON_ERROR_MAX]; /* of them, decided by each policy (DEFAULT unused) */
        uint64_t local_errors;                  /* hits the local store failed too */
} StoreFallbackStats;

typedef struct StoreFallback StoreFallback;

int store_fallback_new(const StoreFallbackOptions *o, StoreFallback **ret);
StoreFallback *store_fallback_free(StoreFallback *f); /* accepts NULL; no batch may be in flight */

/* StoreSubmitFunc: as the primary's, plus the policies above. -EBUSY if max_batches are in
 * flight (the server never submits more). */
int store_fallback_submit(void *fallback, StoreHit *hits, size_t n, uint64_t now_usec, StoreDoneFunc done,
                          void *userdata);

void store_fallback_get_stats(const StoreFallback *f, StoreFallbackStats *ret);

/* The policy that decides a failed hit of rule (NULL: the default). */
RuleOnError store_fallback_policy(const StoreFallback *f, const Rule *rule);
