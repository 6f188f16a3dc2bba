/* SPDX-License-Identifier: MIT */
#pragma once

/* Shared by the tests of the engine and its front-ends (check_batch, check_frontend_resp): a real store in a
 * temporary directory, the rules, metrics and batch over it, and BATCH_TEST_CONNS connections on
 * socketpairs; input as the server would have read it, and the replies a connection has to
 * send. No event loop: the tests call batch_take() and batch_finish() as the server does. */

#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/batch.h"
#include "daemon/frontends.h"
#include "metrics-test-util.h"

#define NOW_USEC         (1700000000ULL * 1000000ULL)
#define BATCH_TEST_CONNS 4

static char tmpdir[64];
static Store *store;
static RuleSet *rules;
static Metrics *metrics;
static Batch *batch;
static Connection *conns[BATCH_TEST_CONNS];
static int peers[BATCH_TEST_CONNS];

static size_t answered;
static unsigned done_calls;

static void on_done(Batch *b, size_t n_answered, void *userdata) {
        (void) b;
        (void) userdata;
        answered = n_answered;
        done_calls++;
}

/* batch_finish() with the local store: completes before it returns. */
static inline size_t finish(void) {
        unsigned before = done_calls;

        ck_assert_int_eq(batch_finish(batch, NOW_USEC), 0);
        ck_assert_uint_eq(done_calls, before + 1);
        return answered;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void) st;
        (void) flag;
        (void) ftw;
        return remove(path);
}

/* The fixture's setup, over the rules in rules_ini; resp_allowed as --resp says. */
static inline void batch_test_setup(const char *rules_ini, bool resp_allowed) {
        char err[256] = "";
        StoreOptions o = { .sync = STORE_SYNC_NONE };

        strcpy(tmpdir, "/tmp/check-batch-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(tmpdir));
        o.path = tmpdir;
        ck_assert_msg(store_open(&o, &store, err, sizeof err) == 0, "store_open: %s", err);
        rules = load_ini(rules_ini);
        ck_assert_int_eq(metrics_new(&metrics), 0);
        ck_assert_int_eq(metrics_set_rules(metrics, rules), 0);
        ck_assert_int_eq(batch_new(&(BatchSettings){ .output_limit = 4096 }, &batch), 0);
        frontends_attach(batch);
        batch_set_rules(batch, rules);
        batch_set_store(batch, store);
        batch_set_metrics(batch, metrics);
        batch_set_done(batch, on_done, NULL);
        for (unsigned i = 0; i < BATCH_TEST_CONNS; i++) {
                int sv[2];
                ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
                ck_assert_int_eq(connection_new(sv[0], false, 64 * 1024, &conns[i]), 0);
                conns[i]->id = i + 1;
                conns[i]->resp_allowed = resp_allowed;
                peers[i] = sv[1];
        }
}

static inline void teardown(void) {
        for (unsigned i = 0; i < BATCH_TEST_CONNS; i++) {
                conns[i] = connection_free(conns[i]);
                close(peers[i]);
        }
        batch = batch_free(batch);
        metrics = metrics_free(metrics);
        store = store_close(store);
        rules = ruleset_free(rules);
        (void) nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Input of n bytes for connection i, as the server would have read it. */
static inline void input_n(unsigned i, const char *s, size_t n) {
        ck_assert_int_eq(send(peers[i], s, n, MSG_NOSIGNAL), (ssize_t) n);
        ck_assert_int_eq(connection_read(conns[i]), (ssize_t) n);
}

static inline void input(unsigned i, const char *s) {
        input_n(i, s, strlen(s));
}

/* Connection i's replies since the last call, NUL-terminated (static); taken as if sent. */
static inline const char *output(unsigned i) {
        static char buf[64 * 1024];
        size_t n = connection_unsent(conns[i]);
        ck_assert_uint_lt(n, sizeof buf);
        memcpy(buf, conns[i]->out + conns[i]->out_pos, n);
        buf[n] = '\0';
        conns[i]->out_pos = conns[i]->out_len = 0; /* as if sent */
        return buf;
}
