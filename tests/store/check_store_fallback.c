/* SPDX-License-Identifier: MIT */

/* store-fallback.c: a failed hit of the primary (the Redis store) is decided by its rule's
 * onBackendError, or the default; "local" goes to the local backend, in one batch, groups
 * whole; REFUND and RESET keep their error unless local. The primary and the local backend are
 * doubles that record what they get and complete at once or later. */

#include <check.h>
#include <errno.h>
#include <string.h>

#include "store/store-fallback.h"
#include "check-run.h"

#define MAX_HITS 16

/* The primary double: fails the hits whose index is set in fail_mask (error fail_error), or
 * the whole batch (batch_error), or refuses it (submit_error); completes at once or when
 * primary_complete() is called. */
typedef struct Primary {
        unsigned fail_mask;
        int fail_error, batch_error, submit_error;
        bool later;
        StoreHit *hits;
        size_t n;
        StoreDoneFunc done;
        void *userdata;
        unsigned calls;
} Primary;

static void primary_answer(Primary *p) {
        for (size_t i = 0; i < p->n; i++) {
                StoreHit *h = p->hits + i;
                if (p->fail_mask & (1u << i)) {
                        h->error = p->fail_error;
                        h->res.allowed = true; /* garbage a fallback must overwrite */
                        h->res.credit = 777;
                        continue;
                }
                h->error = 0;
                h->res.allowed = true;
                h->res.credit = 100 + i;
                h->res.limit = h->credit_limit;
                h->res.reset = 5;
                h->res.retry = 0;
        }
}

static int primary_submit(void *backend, StoreHit *hits, size_t n, uint64_t now_usec, StoreDoneFunc done,
                          void *userdata) {
        Primary *p = backend;
        (void) now_usec;
        p->calls++;
        if (p->submit_error)
                return p->submit_error;
        p->hits = hits;
        p->n = n;
        p->done = done;
        p->userdata = userdata;
        if (!p->later) {
                primary_answer(p);
                done(userdata, p->batch_error);
        }
        return 0;
}

static void primary_complete(Primary *p) {
        primary_answer(p);
        p->done(p->userdata, p->batch_error);
}

/* The local double: records the hits it gets (copies), answers each allowed with credit 42
 * (or fails with error), at once. */
typedef struct Local {
        StoreHit got[MAX_HITS];
        size_t n;
        unsigned calls;
        int error;
} Local;

static int local_submit(void *backend, StoreHit *hits, size_t n, uint64_t now_usec, StoreDoneFunc done,
                        void *userdata) {
        Local *l = backend;
        (void) now_usec;
        l->calls++;
        l->n = n;
        memcpy(l->got, hits, n * sizeof *hits);
        for (size_t i = 0; i < n; i++) {
                hits[i].res.allowed = !l->error;
                hits[i].res.credit = 42;
                hits[i].res.limit = hits[i].credit_limit;
                hits[i].res.reset = 9;
                hits[i].res.retry = 0;
                hits[i].error = l->error;
        }
        done(userdata, l->error);
        return 0;
}

static int done_calls, done_error;
static void on_done(void *userdata, int error) {
        (void) userdata;
        done_calls++;
        done_error = error;
}

static Rule rule_allow = { .on_backend_error = RULE_ON_ERROR_ALLOW };
static Rule rule_deny = { .on_backend_error = RULE_ON_ERROR_DENY };
static Rule rule_local = { .on_backend_error = RULE_ON_ERROR_LOCAL };
static Rule rule_default = { .on_backend_error = RULE_ON_ERROR_DEFAULT };

static StoreHit hit(const Rule *rule, StoreOp op, uint32_t group) {
        return (StoreHit){
                .rule = rule, .credit_limit = 10, .reset_seconds = 60, .op = op, .count = 1, .group = group
        };
}

static StoreFallback *make(Primary *p, Local *l, RuleOnError def) {
        StoreFallback *f = NULL;
        StoreFallbackOptions o = {
                .primary = primary_submit,
                .primary_backend = p,
                .local = l ? local_submit : NULL,
                .local_backend = l,
                .default_policy = def,
                .max_batches = 2,
                .max_hits = MAX_HITS,
        };
        ck_assert_int_eq(store_fallback_new(&o, &f), 0);
        done_calls = 0;
        done_error = 1;
        return f;
}

START_TEST (test_no_failure_passes_through) {
        Primary p = { 0 };
        Local l = { 0 };
        StoreFallback *f = make(&p, &l, RULE_ON_ERROR_DENY);
        StoreHit h[2] = { hit(&rule_deny, STORE_HIT, 0), hit(&rule_local, STORE_HIT, 0) };
        StoreFallbackStats st;

        ck_assert_int_eq(store_fallback_submit(f, h, 2, 1, on_done, NULL), 0);
        ck_assert_int_eq(done_calls, 1);
        ck_assert_int_eq(done_error, 0);
        ck_assert_uint_eq(h[0].res.credit, 100);
        ck_assert_uint_eq(h[1].res.credit, 101);
        ck_assert_uint_eq(l.calls, 0);
        store_fallback_get_stats(f, &st);
        ck_assert_uint_eq(st.failed_hits, 0);
        store_fallback_free(f);
}
END_TEST

START_TEST (test_allow_and_deny) {
        Primary p = { .fail_mask = 0x3, .fail_error = -ETIMEDOUT };
        Local l = { 0 };
        StoreFallback *f = make(&p, &l, RULE_ON_ERROR_LOCAL);
        StoreHit h[3] = { hit(&rule_allow, STORE_HIT, 0), hit(&rule_deny, STORE_TAKE, 0),
                          hit(&rule_deny, STORE_HIT, 0) };
        StoreFallbackStats st;

        ck_assert_int_eq(store_fallback_submit(f, h, 3, 1, on_done, NULL), 0);
        ck_assert_int_eq(done_calls, 1);
        ck_assert_int_eq(done_error, 0);
        ck_assert_int_eq(h[0].error, 0);
        ck_assert(h[0].res.allowed);
        ck_assert_uint_eq(h[0].res.credit, 10);
        ck_assert_uint_eq(h[0].res.limit, 10);
        ck_assert_uint_eq(h[0].res.reset, 60);
        ck_assert_int_eq(h[0].res.retry, 0);
        ck_assert_int_eq(h[1].error, 0);
        ck_assert(!h[1].res.allowed);
        ck_assert_uint_eq(h[1].res.credit, 0);
        ck_assert_uint_eq(h[1].res.reset, 60);
        ck_assert_int_eq(h[1].res.retry, 60);
        ck_assert_uint_eq(h[2].res.credit, 102); /* answered by the primary: untouched */
        ck_assert_uint_eq(l.calls, 0);
        store_fallback_get_stats(f, &st);
        ck_assert_uint_eq(st.failed_hits, 2);
        ck_assert_uint_eq(st.fallbacks[RULE_ON_ERROR_ALLOW], 1);
        ck_assert_uint_eq(st.fallbacks[RULE_ON_ERROR_DENY], 1);
        ck_assert_uint_eq(st.fallbacks[RULE_ON_ERROR_LOCAL], 0);
        store_fallback_free(f);
}
END_TEST

START_TEST (test_token_bucket_capacity_is_burst) {
        Primary p = { .fail_mask = 0x1, .fail_error = -ECONNREFUSED };
        StoreFallback *f = make(&p, NULL, RULE_ON_ERROR_ALLOW);
        AlgoParams a = {
                .algorithm = ALGORITHM_TOKEN_BUCKET, .credit_limit = 10, .reset_seconds = 60, .burst = 25
        };
        StoreHit h = hit(NULL, STORE_HIT, 0);

        h.algo = &a;
        ck_assert_int_eq(store_fallback_submit(f, &h, 1, 1, on_done, NULL), 0);
        ck_assert(h.res.allowed);
        ck_assert_uint_eq(h.res.credit, 25);
        ck_assert_uint_eq(h.res.limit, 25);
        store_fallback_free(f);
}
END_TEST

START_TEST (test_default_policy) {
        Primary p = { .fail_mask = 0x3, .fail_error = -ETIMEDOUT };
        StoreFallback *f = make(&p, NULL, RULE_ON_ERROR_DENY);
        StoreHit h[2] = { hit(&rule_default, STORE_HIT, 0), hit(NULL, STORE_HIT, 0) };

        ck_assert_int_eq(store_fallback_submit(f, h, 2, 1, on_done, NULL), 0);
        ck_assert(!h[0].res.allowed);
        ck_assert(!h[1].res.allowed);
        ck_assert_int_eq(h[0].res.retry, 60);
        ck_assert_int_eq(store_fallback_policy(f, &rule_allow), RULE_ON_ERROR_ALLOW);
        ck_assert_int_eq(store_fallback_policy(f, &rule_default), RULE_ON_ERROR_DENY);
        ck_assert_int_eq(store_fallback_policy(f, NULL), RULE_ON_ERROR_DENY);
        /* without a local backend, local acts as deny */
        ck_assert_int_eq(store_fallback_policy(f, &rule_local), RULE_ON_ERROR_DENY);
        store_fallback_free(f);
}
END_TEST

START_TEST (test_local_gets_failed_hits_in_order) {
        Primary p = { .fail_mask = 0xd, .fail_error = -ETIMEDOUT }; /* hits 0, 2, 3 */
        Local l = { 0 };
        StoreFallback *f = make(&p, &l, RULE_ON_ERROR_ALLOW);
        StoreHit h[4] = { hit(&rule_local, STORE_HIT, 0), hit(&rule_local, STORE_HIT, 0),
                          hit(&rule_local, STORE_TAKE, 7), hit(&rule_local, STORE_TAKE, 7) };
        StoreFallbackStats st;

        h[2].count = 3;
        ck_assert_int_eq(store_fallback_submit(f, h, 4, 1, on_done, NULL), 0);
        ck_assert_int_eq(done_calls, 1);
        ck_assert_uint_eq(l.calls, 1);
        ck_assert_uint_eq(l.n, 3);
        ck_assert_ptr_eq(l.got[0].rule, &rule_local);
        ck_assert_int_eq(l.got[0].error, 0); /* the primary's error is not passed on */
        ck_assert_uint_eq(l.got[1].count, 3);
        ck_assert_uint_eq(l.got[1].group, 7);
        ck_assert_uint_eq(l.got[2].group, 7);
        ck_assert_uint_eq(h[0].res.credit, 42);
        ck_assert_uint_eq(h[0].res.reset, 9);
        ck_assert_uint_eq(h[1].res.credit, 101);
        ck_assert_uint_eq(h[2].res.credit, 42);
        ck_assert_uint_eq(h[3].res.credit, 42);
        ck_assert_int_eq(h[3].error, 0);
        store_fallback_get_stats(f, &st);
        ck_assert_uint_eq(st.fallbacks[RULE_ON_ERROR_LOCAL], 3);
        store_fallback_free(f);
}
END_TEST

START_TEST (test_local_failure_is_an_error) {
        Primary p = { .fail_mask = 0x1, .fail_error = -ETIMEDOUT };
        Local l = { .error = -ENOSPC };
        StoreFallback *f = make(&p, &l, RULE_ON_ERROR_LOCAL);
        StoreHit h = hit(&rule_default, STORE_HIT, 0);
        StoreFallbackStats st;

        ck_assert_int_eq(store_fallback_submit(f, &h, 1, 1, on_done, NULL), 0);
        ck_assert_int_eq(h.error, -ENOSPC);
        store_fallback_get_stats(f, &st);
        ck_assert_uint_eq(st.local_errors, 1);
        store_fallback_free(f);
}
END_TEST

START_TEST (test_refund_reset_keep_error) {
        Primary p = { .fail_mask = 0x7, .fail_error = -ETIMEDOUT };
        Local l = { 0 };
        StoreFallback *f = make(&p, &l, RULE_ON_ERROR_ALLOW);
        StoreHit h[3] = { hit(&rule_allow, STORE_REFUND, 0), hit(&rule_deny, STORE_RESET, 0),
                          hit(&rule_local, STORE_RESET, 0) };

        ck_assert_int_eq(store_fallback_submit(f, h, 3, 1, on_done, NULL), 0);
        ck_assert_int_eq(h[0].error, -ETIMEDOUT);
        ck_assert_int_eq(h[1].error, -ETIMEDOUT);
        ck_assert_int_eq(h[2].error, 0); /* local applies it */
        ck_assert_uint_eq(l.n, 1);
        store_fallback_free(f);
}
END_TEST

START_TEST (test_whole_batch_error_and_refusal) {
        Primary p = { .batch_error = -EIO };
        StoreFallback *f = make(&p, NULL, RULE_ON_ERROR_ALLOW);
        StoreHit h[2] = { hit(NULL, STORE_HIT, 0), hit(&rule_deny, STORE_HIT, 0) };

        ck_assert_int_eq(store_fallback_submit(f, h, 2, 1, on_done, NULL), 0);
        ck_assert_int_eq(done_error, 0);
        ck_assert(h[0].res.allowed);
        ck_assert(!h[1].res.allowed);
        ck_assert_int_eq(h[0].error, 0);

        p = (Primary){ .submit_error = -ENOTCONN };
        h[0] = hit(NULL, STORE_HIT, 0);
        done_calls = 0;
        ck_assert_int_eq(store_fallback_submit(f, h, 1, 1, on_done, NULL), 0);
        ck_assert_int_eq(done_calls, 1);
        ck_assert(h[0].res.allowed);
        ck_assert_uint_eq(h[0].res.credit, 10);
        store_fallback_free(f);
}
END_TEST

START_TEST (test_later_completion_and_busy) {
        Primary p = { .later = true, .fail_mask = 0x1, .fail_error = -ETIMEDOUT };
        Local l = { 0 };
        StoreFallback *f = make(&p, &l, RULE_ON_ERROR_LOCAL);
        StoreHit a = hit(NULL, STORE_HIT, 0), b = hit(NULL, STORE_HIT, 0), c = hit(NULL, STORE_HIT, 0);

        ck_assert_int_eq(store_fallback_submit(f, &a, 1, 1, on_done, NULL), 0);
        ck_assert_int_eq(store_fallback_submit(f, &b, 1, 1, on_done, NULL), 0);
        ck_assert_int_eq(done_calls, 0);
        /* two in flight: a third is refused, nothing called */
        ck_assert_int_eq(store_fallback_submit(f, &c, 1, 1, on_done, NULL), -EBUSY);
        primary_complete(&p); /* completes b (the last submitted) */
        ck_assert_int_eq(done_calls, 1);
        ck_assert_uint_eq(b.res.credit, 42);
        ck_assert_int_eq(store_fallback_submit(f, &c, 1, 1, on_done, NULL), 0);
        store_fallback_free(f);
}
END_TEST

START_TEST (test_bad_options) {
        Primary p = { 0 };
        StoreFallback *f = NULL;
        StoreFallbackOptions o = { .primary = primary_submit,
                                   .primary_backend = &p,
                                   .default_policy = RULE_ON_ERROR_DEFAULT,
                                   .max_batches = 1,
                                   .max_hits = 1 };

        ck_assert_int_eq(store_fallback_new(&o, &f), -EINVAL);
        o.default_policy = RULE_ON_ERROR_ALLOW;
        o.max_hits = 0;
        ck_assert_int_eq(store_fallback_new(&o, &f), -EINVAL);
        o.max_hits = 1;
        ck_assert_int_eq(store_fallback_new(&o, &f), 0);
        StoreHit h[2] = { hit(NULL, STORE_HIT, 0), hit(NULL, STORE_HIT, 0) };
        ck_assert_int_eq(store_fallback_submit(f, h, 2, 1, on_done, NULL), -EINVAL);
        store_fallback_free(f);
}
END_TEST

static Suite *fallback_suite(void) {
        Suite *s = suite_create("store-fallback");
        TCase *tc = tcase_create("policy");

        tcase_add_test(tc, test_no_failure_passes_through);
        tcase_add_test(tc, test_allow_and_deny);
        tcase_add_test(tc, test_token_bucket_capacity_is_burst);
        tcase_add_test(tc, test_default_policy);
        tcase_add_test(tc, test_local_gets_failed_hits_in_order);
        tcase_add_test(tc, test_local_failure_is_an_error);
        tcase_add_test(tc, test_refund_reset_keep_error);
        tcase_add_test(tc, test_whole_batch_error_and_refusal);
        tcase_add_test(tc, test_later_completion_and_busy);
        tcase_add_test(tc, test_bad_options);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        return check_run_suite(fallback_suite());
}
