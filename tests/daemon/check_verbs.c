/* SPDX-License-Identifier: MIT */
/* batch.c with the version 2 verbs (issue #15): continue, canary and trivial rules combined,
 * every verb, the admin restriction. Table-driven: each case is a config, the lines one
 * connection sends (in one batch, at a fixed time, on a fresh store) and the exact output,
 * each value worked out by hand in the comments. */

#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "build-config.h"
#include "daemon/batch.h"
#include "daemon/frontends.h"
#include "metrics-test-util.h"
#include "check-run.h"

/* Every rule is 60 s; a token bucket of 5 per 60 s has an interval of 12 s. */
static const char RULES[] =
        "[p=cont u=*]\ncreditLimit = 2\nresetSeconds = 60\nactorField = u\nmatchPolicy = continue\n"
        "label = cu\n"
        "[p=cont]\ncreditLimit = 3\nresetSeconds = 60\nlabel = cs\n"
        "[p=can u=*]\ncreditLimit = 1\nresetSeconds = 60\nactorField = u\nmatchPolicy = canary\n"
        "label = k\n"
        "[u=* p=can]\ncreditLimit = 5\nresetSeconds = 60\nactorField = u\nalgorithm = token-bucket\n"
        "label = kt\n"
        "[p=deny]\ncreditLimit = 0\nresetSeconds = 60\nmatchPolicy = continue\nlabel = z\n"
        "[p=allow]\ncreditLimit = 9\nresetSeconds = 0\nmatchPolicy = continue\nlabel = y\n"
        "[default]\ncreditLimit = 4\nresetSeconds = 60\n";

#define NOW_USEC (1700000000ULL * 1000000ULL)
#define VERBS    "verbs=HIT,HELLO,TAKE,PEEK,CHARGE,REFUND,RESET,EXPLAIN"

typedef struct Case {
        const char *name;
        bool admin;
        const char *input;
        const char *output;
} Case;

static const Case cases[] = {
        {
                "continue: both must allow, the smallest credit binds, a denial charges nothing",
                false,
                "HIT p=cont u=a\n"   /* cu 2->1, cs 3->2: cu binds */
                "HIT p=cont u=a\n"   /* cu 0, cs 1 */
                "HIT p=cont u=a\n"   /* cu denies: cs not charged */
                "HIT p=cont u=b\n"   /* cu(b) 1, cs 0: cs binds */
                "HIT p=cont u=c\n"   /* cs denies, cu(c) would allow: not charged */
                "PEEK p=cont u=c\n", /* cu(c) would be 1 (untouched), cs 0: cs binds */
                "OK true 1 60\nOK true 0 60\nOK false 0 60\nOK true 0 60\nOK false 0 60\n"
                "OK allowed=false credit=0 limit=3 reset=60 retry=60 rule=cs\n",
        },
        {
                "TAKE n: all or nothing across the continue and stop rules",
                false,
                "TAKE 2 p=cont u=a\n"  /* cu 0, cs 1 */
                "TAKE 2 p=cont u=b\n"  /* cu(b) would be 0 but cs has 1: nothing charged */
                "TAKE 1 p=cont u=b\n", /* cu(b) 1, cs 0 */
                "OK allowed=true credit=0 limit=2 reset=60 retry=0 rule=cu\n"
                "OK allowed=false credit=1 limit=3 reset=60 retry=60 rule=cs\n"
                "OK allowed=true credit=0 limit=3 reset=60 retry=0 rule=cs\n",
        },
        {
                "a canary is charged on its own and never decides; TAKE charges it, PEEK does not",
                false,
                "HIT p=can u=a\n"     /* k 1->0 allowed; kt 4, full again in 12 s */
                "HIT p=can u=a\n"     /* k denies (a canary: ignored); kt 3, 24 s */
                "PEEK 3 p=can u=a\n"  /* kt would be 0 */
                "TAKE 2 p=can u=a\n"  /* kt 1, 48 s */
                "PEEK 2 p=can u=a\n", /* kt has 1: the second credit comes 12 s later */
                "OK true 4 12\nOK true 3 24\n"
                "OK allowed=true credit=0 limit=5 reset=60 retry=0 rule=kt\n"
                "OK allowed=true credit=1 limit=5 reset=48 retry=0 rule=kt\n"
                "OK allowed=false credit=1 limit=5 reset=12 retry=12 rule=kt\n",
        },
        {
                "an always-deny continue rule denies and charges nothing; an always-allow one binds "
                "with its creditLimit only when it is the smallest",
                false,
                "HIT p=deny\n"
                "TAKE 1 p=deny\n"
                "HIT p=other\n" /* the default's counter was not charged: 4 -> 3 */
                "HIT p=allow\n" /* y allows with 9, the default has 2: it binds */
                "TAKE 1 p=allow\n",
                "OK false 0 -1\n"
                "OK allowed=false credit=0 limit=0 reset=0 retry=-1 rule=z\n"
                "OK true 3 60\nOK true 2 60\n"
                "OK allowed=true credit=1 limit=4 reset=60 retry=0 rule=#6\n",
        },
        {
                "CHARGE consumes unconditionally and says whether it fit",
                false,
                "CHARGE 2 p=cont u=a\n" /* cu 0, cs 1: fits */
                "CHARGE 2 p=cont u=a\n" /* cu clamps at 0 (did not fit), cs clamps at 0 */
                "PEEK 0 p=cont u=a\n",  /* both at 0: 0 credits fit */
                "OK allowed=true credit=0 limit=2 reset=60 retry=0 rule=cu\n"
                "OK allowed=false credit=0 limit=3 reset=60 retry=60 rule=cs\n"
                "OK allowed=true credit=0 limit=3 reset=60 retry=0 rule=cs\n",
        },
        {
                "REFUND off an admin listener: an error, nothing after it answered",
                false,
                "HIT p=cont u=a\nREFUND 1 p=cont u=a\nHIT p=cont u=a\n",
                "OK true 1 60\nERR forbidden \"REFUND needs an admin listener\"\n",
        },
        {
                "RESET off an admin listener",
                false,
                "RESET p=cont u=a\n",
                "ERR forbidden \"RESET needs an admin listener\"\n",
        },
        {
                "REFUND and RESET on an admin listener",
                true,
                "TAKE 2 p=cont u=a\n"   /* cu 0, cs 1 */
                "REFUND 5 p=cont u=a\n" /* capped: cu 2, cs 3 */
                "REFUND 1 p=cont u=z\n" /* cu(z) absent, so full (2, nothing to wait for), and no
                                         * counter created; cs stays 3: cu binds */
                "RESET p=cont u=a\n"    /* deletes cu(a) and cs */
                "RESET p=cont u=a\n"
                "RESET p=cont u=z\n",
                "OK allowed=true credit=0 limit=2 reset=60 retry=0 rule=cu\n"
                "OK allowed=true credit=2 limit=2 reset=60 retry=0 rule=cu\n"
                "OK allowed=true credit=2 limit=2 reset=0 retry=0 rule=cu\n"
                "OK reset=2\nOK reset=0\nOK reset=0\n",
        },
        {
                "HELLO and EXPLAIN touch no counter",
                false,
                "HELLO\n"
                "EXPLAIN p=cont u=a\n"
                "EXPLAIN u=q p=can\n"
                "EXPLAIN p=nothing\n"
                "HIT p=cont u=a\n",
                "OK proto=2 server=divvyd/" PACKAGE_VERSION " " VERBS "\n"
                "OK rule=cs index=1 policy=stop actor=- algorithm=fixed-window canaries=- continue=cu\n"
                "OK rule=kt index=3 policy=stop actor=\"q\" algorithm=token-bucket canaries=k continue=-\n"
                "OK rule=#6 index=6 policy=stop actor=- algorithm=fixed-window canaries=- continue=-\n"
                "OK true 1 60\n",
        },
        {
                "bad counts are errors of their own",
                false,
                "TAKE p=cont\n",
                "ERR bad-count",
        },
        {
                "a denial that can never pass (retry -1) binds over a finite wait; between two, the first",
                false,
                "TAKE 2 p=cont u=d\n" /* cu 0, cs 1 */
                "PEEK 3 p=cont u=d\n" /* cu: 3 > its capacity 2 (-1), cs waits: cu binds */
                "PEEK 5 p=deny\n",    /* z always denies (-1), the default: 5 > 4 (-1): z binds */
                "OK allowed=true credit=0 limit=2 reset=60 retry=0 rule=cu\n"
                "OK allowed=false credit=0 limit=2 reset=60 retry=-1 rule=cu\n"
                "OK allowed=false credit=0 limit=0 reset=0 retry=-1 rule=z\n",
        },
};

static char tmpdir[64];
static Store *store;
static RuleSet *rules;
static Metrics *metrics;
static Batch *batch;
static Connection *conn;
static int peer;

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(path);
}

static void setup(void) {
        char err[256] = "";
        StoreOptions o = { .sync = STORE_SYNC_NONE };
        int sv[2];

        strcpy(tmpdir, "/tmp/check-verbs-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(tmpdir));
        o.path = tmpdir;
        ck_assert_msg(store_open(&o, &store, err, sizeof err) == 0, "store_open: %s", err);
        rules = load_ini(RULES);
        ck_assert_int_eq(metrics_new(&metrics), 0);
        ck_assert_int_eq(metrics_set_rules(metrics, rules), 0);
        ck_assert_int_eq(batch_new(&(BatchSettings){ .output_limit = 64 * 1024 }, &batch), 0);
        frontends_attach(batch);
        batch_set_rules(batch, rules);
        batch_set_store(batch, store);
        batch_set_metrics(batch, metrics);
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
        ck_assert_int_eq(connection_new(sv[0], false, 64 * 1024, &conn), 0);
        peer = sv[1];
}

static void teardown(void) {
        conn = connection_free(conn);
        close(peer);
        batch = batch_free(batch);
        metrics = metrics_free(metrics);
        store = store_close(store);
        rules = ruleset_free(rules);
        (void) nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *run(const Case *c) {
        static char buf[64 * 1024];
        size_t n = strlen(c->input);

        conn->admin = c->admin;
        ck_assert_int_eq(send(peer, c->input, n, MSG_NOSIGNAL), (ssize_t) n);
        ck_assert_int_eq(connection_read(conn), (ssize_t) n);
        batch_take(batch, conn);
        ck_assert_int_eq(batch_finish(batch, NOW_USEC), 0);
        n = connection_unsent(conn);
        ck_assert_uint_lt(n, sizeof buf);
        memcpy(buf, conn->out + conn->out_pos, n);
        buf[n] = '\0';
        return buf;
}

START_TEST (test_case) {
        const Case *c = &cases[_i];
        const char *out = run(c);

        if (strncmp(c->output, "ERR ", 4) == 0 && !strchr(c->output, '\n'))
                ck_assert_msg(strncmp(out, c->output, strlen(c->output)) == 0, "%s:\n%s", c->name, out);
        else
                ck_assert_msg(strcmp(out, c->output) == 0, "%s:\ngot:\n%swant:\n%s", c->name, out,
                              c->output);
}
END_TEST

START_TEST (test_metrics) {
        /* the canary case: divvy's metrics for HIT and TAKE's canaries, divvyd's for the verbs */
        run(&cases[2]);
        ck_assert_uint_eq(metrics_hits_total(metrics, METRICS_STATUS_ACCEPTED), 2); /* kt, HIT */
        ck_assert_uint_eq(metrics_hits_total(metrics, METRICS_STATUS_CANARY_ACCEPTED), 1);
        ck_assert_uint_eq(metrics_hits_total(metrics, METRICS_STATUS_CANARY_REJECTED), 2);
        ck_assert_uint_eq(metrics_verb_decisions(metrics, PROTO_VERB_PEEK, true), 1);
        ck_assert_uint_eq(metrics_verb_decisions(metrics, PROTO_VERB_PEEK, false), 1);
        ck_assert_uint_eq(metrics_verb_decisions(metrics, PROTO_VERB_TAKE, true), 1);
        ck_assert_uint_eq(metrics_verb_credits(metrics, PROTO_VERB_TAKE), 2);

        char *text = NULL;
        size_t len;
        ck_assert_int_eq(metrics_render(metrics, &text, &len), 0);
        ck_assert_line(text, "divvyd_requests_total{verb=\"take\",decision=\"allowed\"} 1");
        ck_assert_line(text, "divvyd_requests_total{verb=\"peek\",decision=\"denied\"} 1");
        ck_assert_line(text, "divvyd_credits_consumed_total{verb=\"take\"} 2");
        ck_assert_no_line(text, "divvy_errors_total{code=\"forbidden\"} 0");
        free(text);
}
END_TEST

int main(void) {
        Suite *s = suite_create("verbs");
        TCase *tc = tcase_create("cases");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_loop_test(tc, test_case, 0, (int) (sizeof cases / sizeof cases[0]));
        tcase_add_test(tc, test_metrics);
        suite_add_tcase(s, tc);
        return check_run_suite(s);
}
