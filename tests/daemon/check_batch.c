/* SPDX-License-Identifier: MIT */
/* batch.c, the engine: requests taken from connections (socketpairs), matched, applied to a
 * real store, answered in order at the end of each connection's output, and counted in the
 * metrics; the version 2 verbs with continue, canary and trivial rules combined, and the
 * admin restriction. No event loop: the tests call batch_take() and batch_finish() as the
 * server does; a fake backend that completes when the test says so stands for a store that
 * completes later. */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "build-config.h"
#include "batch-test-util.h"
#include "daemon/frontend.h"
#include "check-run.h"

static const char RULES[] = "[a=1]\ncreditLimit = 2\nresetSeconds = 60\nlabel = a\n"
                            "[c=* ip=*]\ncreditLimit = 1\nresetSeconds = 60\nmatchPolicy = canary\n"
                            "actorField = ip\n"
                            "[e=1]\ncreditLimit = 0\nresetSeconds = 60\nmatchPolicy = canary\n"
                            "[g=1]\ncreditLimit = 7\nresetSeconds = 0\nmatchPolicy = canary\n"
                            "[d=1]\ncreditLimit = 0\nresetSeconds = 60\n"
                            "[f=*]\ncreditLimit = 5\nresetSeconds = 60\nactorField = f\n"
                            /* two limits at once (all or nothing), and an always-deny one */
                            "[m=1 u=*]\ncreditLimit = 3\nresetSeconds = 60\nactorField = u\n"
                            "matchPolicy = continue\nlabel = per-user\n"
                            "[m=1 n=1]\ncreditLimit = 0\nresetSeconds = 60\nmatchPolicy = continue\n"
                            "[m=1]\ncreditLimit = 5\nresetSeconds = 60\nlabel = per-path\n"
                            "[default]\ncreditLimit = 5\nresetSeconds = 0\n";

static void setup(void) {
        batch_test_setup(RULES, false);
}

START_TEST (test_replies_in_order) {
        input(0, "HIT a=1\nHIT x=1\nHIT a=1\nHIT a=1\n");
        input(1, "HIT a=1\nHIT d=1\n");
        ck_assert(batch_has_room(batch));
        batch_take(batch, conns[0]);
        batch_take(batch, conns[1]);
        ck_assert_uint_eq(finish(), 6);
        /* One store transaction, in request order: connection 0 first. */
        ck_assert_str_eq(output(0), "OK true 1 60\nOK true 5 0\nOK true 0 60\nOK false 0 60\n");
        ck_assert_str_eq(output(1), "OK false 0 60\nOK false 0 -1\n");
        ck_assert_uint_eq(conns[0]->in_pos, conns[0]->in_len); /* consumed, not yet compacted */
        ck_assert(!conns[0]->closing);

        ck_assert_uint_eq(metrics_hits_total(metrics, METRICS_STATUS_ACCEPTED), 3);
        ck_assert_uint_eq(metrics_hits_total(metrics, METRICS_STATUS_REJECTED), 3);
        ck_assert_uint_eq(metrics_label_hits(metrics, 1, METRICS_STATUS_REJECTED), 2); /* "a" */

        /* An empty batch answers nothing. */
        ck_assert_uint_eq(finish(), 0);
}
END_TEST

START_TEST (test_canaries) {
        /* A canary with a counter, one that always denies and one that always allows: each counted
         * with its request's OK reply, none deciding it. */
        input(0, "HIT c=1 ip=x e=1 g=1\nHIT c=1 ip=x\n");
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 2);
        ck_assert_str_eq(output(0), "OK true 5 0\nOK true 5 0\n");
        ck_assert_uint_eq(metrics_hits_total(metrics, METRICS_STATUS_CANARY_ACCEPTED), 2);
        ck_assert_uint_eq(metrics_hits_total(metrics, METRICS_STATUS_CANARY_REJECTED), 2);
        ck_assert_uint_eq(metrics_hits_total(metrics, METRICS_STATUS_ACCEPTED), 2);
}
END_TEST

START_TEST (test_error_stops_connection) {
        input(0, "HIT a=1\nBOGUS\nHIT a=1\n");
        input(1, "HIT a=1\n");
        batch_take(batch, conns[0]);
        batch_take(batch, conns[1]);
        ck_assert_uint_eq(finish(), 3);
        ck_assert_str_eq(output(0), "OK true 1 60\nERR unknown-command \"unknown command\"\n");
        ck_assert(conns[0]->closing && conns[0]->err_sent);
        ck_assert_uint_eq(conns[0]->in_pos, conns[0]->in_len); /* the line after it is dropped */
        ck_assert_str_eq(output(1), "OK true 0 60\n");
        ck_assert(!conns[1]->closing);
        ck_assert_uint_eq(metrics_errors(metrics, PROTO_ERROR_UNKNOWN_COMMAND), 1);
}
END_TEST

START_TEST (test_lines_per_connection) {
        /* One connection gives at most BATCH_LINES_PER_CONNECTION requests to a batch. */
        static char in[(BATCH_LINES_PER_CONNECTION + 5) * 8 + 1];
        size_t len = 0;

        for (unsigned i = 0; i < BATCH_LINES_PER_CONNECTION + 5; i++)
                len += (size_t) snprintf(in + len, sizeof in - len, "HIT x=1\n");
        input(0, in);
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), BATCH_LINES_PER_CONNECTION);
        ck_assert(connection_has_request(conns[0]));
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 5);
        ck_assert(!connection_has_request(conns[0]));
}
END_TEST

START_TEST (test_output_limit_blocks) {
        /* Unsent replies at the limit: the connection is not taken from, and says why. */
        char *p = connection_reserve(conns[0], 4096);
        ck_assert_ptr_nonnull(p);
        memset(p, 'r', 4096);
        conns[0]->out_len += 4096;
        input(0, "HIT x=1\n");
        batch_take(batch, conns[0]);
        ck_assert(conns[0]->blocked);
        ck_assert_uint_eq(finish(), 0);
        ck_assert(connection_has_request(conns[0]));
}
END_TEST

/* The journal's preallocation, failing while disk_full (a full filesystem). */
static bool disk_full;
static int allocate_hook(int fd, off_t len) {
        return disk_full ? ENOSPC : posix_fallocate(fd, 0, len);
}

/* Swaps the store for one on a "full disk": filled until its journal needs a segment that
 * cannot be made, so that a new counter of rule [f=*] no longer fits; returns that counter's
 * actor in actor. (Version 1 filled its LMDB map; version 2 keeps counters in memory and
 * fails a batch only when its journal cannot be written, which is this.) */
static void fill_store(char actor[static 32]) {
        StoreOptions o = { .sync = STORE_SYNC_NONE,
                           .journal_segment_size = 16 * 1024,
                           .journal_allocate = allocate_hook,
                           .now_usec = NOW_USEC };
        const Rule *f = &rules->rules[5];
        char err[256] = "", path[96];
        int r = 0;

        ck_assert_str_eq(f->actor_field, "f");
        snprintf(path, sizeof path, "%s/tiny", tmpdir);
        o.path = path;
        store = store_close(store);
        ck_assert_msg(store_open(&o, &store, err, sizeof err) == 0, "store_open: %s", err);
        disk_full = true;
        for (unsigned i = 0; r == 0; i++) {
                ck_assert_uint_lt(i, 1000000);
                snprintf(actor, 32, "actor-%u", i);
                StoreHit h = { .rule_id = f->id,
                               .actor = actor,
                               .actor_len = strlen(actor),
                               .credit_limit = f->credit_limit,
                               .reset_seconds = f->reset_seconds,
                               .count = 1 };
                r = store_apply(store, &h, 1, NOW_USEC);
        }
        ck_assert_int_eq(r, -ENOSPC);
        batch_set_store(batch, store);
}

START_TEST (test_store_error_once) {
        /* A failing store answers every request that needed it with the same ERR, once per
         * connection (nothing after an ERR); a request that needed no counter is answered OK. */
        char actor[32], in[128];

        fill_store(actor);
        snprintf(in, sizeof in, "HIT f=%s\nHIT f=%s\n", actor, actor);
        input(0, in);
        input(1, "HIT x=1\n");
        snprintf(in, sizeof in, "HIT e=1 f=%s\n", actor);
        input(2, in);
        batch_take(batch, conns[0]);
        batch_take(batch, conns[1]);
        batch_take(batch, conns[2]);
        ck_assert_uint_eq(finish(), 3);
        ck_assert_str_eq(output(0), "ERR unknown \"store full\"\n");
        ck_assert_str_eq(output(1), "OK true 5 0\n");
        ck_assert_str_eq(output(2), "ERR unknown \"store full\"\n");
        ck_assert_uint_eq(batch_store_errors(batch), 1);
        ck_assert_uint_eq(metrics_errors(metrics, PROTO_ERROR_UNKNOWN), 2);
        /* The canary of an ERR'd request is not counted. */
        ck_assert_uint_eq(metrics_hits_total(metrics, METRICS_STATUS_CANARY_REJECTED), 0);
}
END_TEST

/* A backend that completes when the test says so (a remote store answering later). */
typedef struct Deferred {
        StoreHit *hits;
        size_t n;
        StoreDoneFunc done;
        void *userdata;
        unsigned submits;
} Deferred;

static int deferred_submit(void *backend, StoreHit *hits, size_t n, uint64_t now_usec, StoreDoneFunc done,
                           void *userdata) {
        Deferred *d = backend;

        (void) now_usec;
        d->hits = hits;
        d->n = n;
        d->done = done;
        d->userdata = userdata;
        d->submits++;
        return 0;
}

START_TEST (test_completes_later) {
        Deferred d = {};
        unsigned before = done_calls;

        batch_set_backend(batch, deferred_submit, &d);
        input(0, "HIT a=1\nHIT x=1\nHIT a=1\n");
        input(1, "HIT f=z\n");
        batch_take(batch, conns[0]);
        batch_take(batch, conns[1]);
        ck_assert_int_eq(batch_finish(batch, NOW_USEC), 1); /* pending */
        ck_assert(batch_pending(batch));
        ck_assert_uint_eq(d.submits, 1);
        ck_assert_uint_eq(d.n, 3); /* one call for the batch's every hit */
        ck_assert_uint_eq(done_calls, before);
        ck_assert_str_eq(output(0), ""); /* no reply before the store completes */
        ck_assert_str_eq(output(1), "");
        ck_assert_int_eq(batch_finish(batch, NOW_USEC), -EBUSY);

        /* the store's answers, then its completion: the replies in request order */
        d.hits[0] = (StoreHit){ .res = { .allowed = true, .credit = 1, .reset = 60 } };
        d.hits[1] = (StoreHit){ .res = { .allowed = false, .credit = 0, .reset = 59 } };
        d.hits[2] = (StoreHit){ .res = { .allowed = true, .credit = 4, .reset = 60 } };
        d.done(d.userdata, 0);
        ck_assert(!batch_pending(batch));
        ck_assert_uint_eq(done_calls, before + 1);
        ck_assert_uint_eq(answered, 4);
        ck_assert_str_eq(output(0), "OK true 1 60\nOK true 5 0\nOK false 0 59\n");
        ck_assert_str_eq(output(1), "OK true 4 60\n");

        /* a failure completes with the error, as the local store's would */
        input(2, "HIT a=1\n");
        batch_take(batch, conns[2]);
        ck_assert_int_eq(batch_finish(batch, NOW_USEC), 1);
        d.done(d.userdata, -EIO);
        ck_assert_str_eq(output(2), "ERR unknown \"store error: Input/output error\"\n");
}
END_TEST

START_TEST (test_hit_error_answers_its_request_only) {
        /* A backend that completes the batch but fails one hit (the Redis store's fallback
         * when the local store fails too): that request alone is answered ERR; the hit
         * records the rule it came from. */
        Deferred d = {};

        batch_set_backend(batch, deferred_submit, &d);
        input(0, "HIT a=1\n");
        input(1, "HIT f=z\n");
        batch_take(batch, conns[0]);
        batch_take(batch, conns[1]);
        ck_assert_int_eq(batch_finish(batch, NOW_USEC), 1);
        ck_assert_uint_eq(d.n, 2);
        ck_assert_ptr_nonnull(d.hits[0].rule);
        ck_assert_uint_eq(d.hits[0].rule->credit_limit, 2);
        ck_assert_uint_eq(d.hits[1].rule->credit_limit, 5);
        d.hits[0] = (StoreHit){ .error = -ENOSPC };
        d.hits[1] = (StoreHit){ .res = { .allowed = true, .credit = 4, .reset = 60 } };
        d.done(d.userdata, 0);
        ck_assert_str_eq(output(0), "ERR unknown \"store full\"\n");
        ck_assert_str_eq(output(1), "OK true 4 60\n");
        ck_assert_uint_eq(batch_store_errors(batch), 1);
}
END_TEST

/* One batch of connection 0's lines; its replies. */
static const char *batch_of(const char *lines) {
        input(0, lines);
        batch_take(batch, conns[0]);
        (void) finish();
        return output(0);
}

/* A request's enforcing rules (a continue rule per user, the stop rule per path) are one
 * all-or-nothing group, and the binding one is the rule with the least credit left. */
START_TEST (test_continue_rules_by_value) {
        /* per-user 2, per-path 4: the per-user rule binds */
        ck_assert_str_eq(batch_of("HIT m=1 u=a\n"), "OK true 2 60\n");
        ck_assert_str_eq(batch_of("HIT m=1 u=a\nHIT m=1 u=a\n"), "OK true 1 60\nOK true 0 60\n");
        /* per-user (a) is out: denied, and the per-path counter is not charged either */
        ck_assert_str_eq(batch_of("HIT m=1 u=a\n"), "OK false 0 60\n");
        /* per-path has 5 - 3 = 2 left: b's first HIT leaves 1 there, 2 per user */
        ck_assert_str_eq(batch_of("HIT m=1 u=b\n"), "OK true 1 60\n");
}
END_TEST

/* An always-deny continue rule decides its request without charging the other rules. */
START_TEST (test_always_deny_charges_nothing) {
        ck_assert_str_eq(batch_of("HIT m=1 n=1 u=c\nHIT m=1 n=1 u=c\n"), "OK false 0 -1\nOK false 0 -1\n");
        /* neither per-user (c) nor per-path was charged */
        ck_assert_str_eq(batch_of("HIT m=1 u=c\n"), "OK true 2 60\n");
        ck_assert_str_eq(batch_of("HIT m=1 u=d\n"), "OK true 2 60\n"); /* per-path 3, per-user 2 */
}
END_TEST

/* Between two denying rules the one that can never pass (retry -1) binds, whichever comes
 * first. */
START_TEST (test_never_binds_over_later) {
        /* per-path out (5 HITs of five users), then TAKE 4: per-user can never give 4 of 3
         * (-1), per-path has nothing now (60 s) */
        ck_assert_str_eq(batch_of("HIT m=1 u=p\nHIT m=1 u=q\nHIT m=1 u=r\nHIT m=1 u=s\nHIT m=1 u=t\n"),
                         "OK true 2 60\nOK true 2 60\nOK true 2 60\nOK true 1 60\nOK true 0 60\n");
        ck_assert_str_eq(batch_of("TAKE 4 m=1 u=x\n"),
                         "OK allowed=false credit=3 limit=3 reset=0 retry=-1 rule=per-user\n");
}
END_TEST

/* ---- a group across slots (batch_group_close(): gRPC's descriptors, issue #34) ---- */

static void group_refill(Batch *b, BatchSlot *slot, void *userdata) {
        const char **pairs = userdata;

        ck_assert_int_eq(
                proto_parse_pairs(pairs[slot->n], strlen(pairs[slot->n]), PROTO_PAIRS_MAX, batch_request(b)),
                0);
}

/* The HITs of pairs[0..n), taken as one all-or-nothing group into one batch (on connection 0,
 * answered in the line protocol); their replies. */
static const char *group_of_verb(const char **pairs, size_t n, ProtoVerb verb) {
        BatchSlot *first = NULL;
        uint32_t group = batch_group_id(batch);

        ck_assert(batch_room_for(batch, n));
        ck_assert_ptr_nonnull(connection_reserve(conns[0], n * PROTO_REPLY_MAX));
        for (size_t i = 0; i < n; i++) {
                BatchSlot *slot;

                group_refill(batch, &(BatchSlot){ .n = i }, pairs);
                slot = batch_slot_add(batch, conns[0], (ProtoSlice){ pairs[i], strlen(pairs[i]) });
                slot->verb = verb;
                slot->count = 1;
                slot->group = group;
                slot->n = i;
                first = first ? first : slot;
                batch_match(batch, slot);
        }
        batch_group_close(batch, first, n, group_refill, pairs);
        ck_assert_uint_eq(finish(), n);
        return output(0);
}

static const char *group_of(const char **pairs, size_t n) {
        return group_of_verb(pairs, n, PROTO_VERB_HIT);
}

/* Consecutive slots are one group: nothing is charged unless every one is allowed; each
 * answers its own decision as if alone. */
START_TEST (test_group_across_slots) {
        const char *two[] = { "f=g1", "a=1" };
        const char *deny[] = { "f=g2", "d=1" };
        /* a canary in the second slot: its hit must not cut the group in two */
        const char *canary[] = { "a=1", "c=1 ip=i3 f=g3" };

        ck_assert_str_eq(group_of(two, 2), "OK true 4 60\nOK true 1 60\n");
        ck_assert_str_eq(group_of(two, 2), "OK true 3 60\nOK true 0 60\n");
        /* a is out: f=g1 answers as if charged, and is not */
        ck_assert_str_eq(group_of(two, 2), "OK true 2 60\nOK false 0 60\n");
        ck_assert_str_eq(batch_of("HIT f=g1\n"), "OK true 2 60\n");
        /* a rule that always denies: nothing charged; the other answers as if alone (a PEEK) */
        ck_assert_str_eq(group_of(deny, 2), "OK true 4 60\nOK false 0 -1\n");
        ck_assert_str_eq(batch_of("HIT f=g2\n"), "OK true 4 60\n");
        ck_assert_str_eq(group_of(canary, 2), "OK false 0 60\nOK true 4 60\n");
        ck_assert_str_eq(batch_of("HIT f=g3\n"), "OK true 4 60\n");
        /* the canary counted on its own, once */
        ck_assert_uint_eq(metrics_hits_total(metrics, METRICS_STATUS_CANARY_ACCEPTED), 1);
        ck_assert_str_eq(batch_of("HIT c=1 ip=i3\n"), "OK true 5 0\n");
        ck_assert_uint_eq(metrics_hits_total(metrics, METRICS_STATUS_CANARY_REJECTED), 1);
        /* TAKE: the credits counted are the ones charged */
        const char *take[] = { "f=g4", "f=g5" }, *take_denied[] = { "f=g4", "a=1" };
        group_of_verb(take, 2, PROTO_VERB_TAKE);
        ck_assert_uint_eq(metrics_verb_credits(metrics, PROTO_VERB_TAKE), 2);
        group_of_verb(take_denied, 2, PROTO_VERB_TAKE);
        ck_assert_uint_eq(metrics_verb_credits(metrics, PROTO_VERB_TAKE), 2);
        ck_assert_str_eq(batch_of("HIT f=g4\n"), "OK true 3 60\n");
}
END_TEST

/* ---- the version 2 verbs (issue #15) ----
 * Continue, canary and trivial rules combined, every verb, the admin restriction.
 * Table-driven: each case is a config, the lines one connection sends (in one batch, at a
 * fixed time, on a fresh store) and the exact output, each value worked out by hand in the
 * comments. */

/* Every rule is 60 s; a token bucket of 5 per 60 s has an interval of 12 s. */
static const char VERB_RULES[] =
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

#define VERBS "verbs=HIT,HELLO,TAKE,PEEK,CHARGE,REFUND,RESET,EXPLAIN"

typedef struct VerbCase {
        const char *name;
        bool admin;
        const char *input;
        const char *output;
} VerbCase;

static const VerbCase verb_cases[] = {
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

static void verbs_setup(void) {
        batch_test_setup(VERB_RULES, false);
}

/* The case's lines from connection 0, one batch; its replies. */
static const char *run_case(const VerbCase *c) {
        conns[0]->admin = c->admin;
        input(0, c->input);
        batch_take(batch, conns[0]);
        ck_assert_int_eq(batch_finish(batch, NOW_USEC), 0);
        return output(0);
}

START_TEST (test_verb_case) {
        const VerbCase *c = &verb_cases[_i];
        const char *out = run_case(c);

        if (strncmp(c->output, "ERR ", 4) == 0 && !strchr(c->output, '\n'))
                ck_assert_msg(strncmp(out, c->output, strlen(c->output)) == 0, "%s:\n%s", c->name, out);
        else
                ck_assert_msg(strcmp(out, c->output) == 0, "%s:\ngot:\n%swant:\n%s", c->name, out,
                              c->output);
}
END_TEST

START_TEST (test_verb_metrics) {
        /* the canary case: divvy's metrics for HIT and TAKE's canaries, divvyd's for the verbs */
        run_case(&verb_cases[2]);
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
        Suite *s = suite_create("batch");
        TCase *tc = tcase_create("batch");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_replies_in_order);
        tcase_add_test(tc, test_canaries);
        tcase_add_test(tc, test_error_stops_connection);
        tcase_add_test(tc, test_lines_per_connection);
        tcase_add_test(tc, test_output_limit_blocks);
        tcase_add_test(tc, test_store_error_once);
        tcase_add_test(tc, test_completes_later);
        tcase_add_test(tc, test_hit_error_answers_its_request_only);
        tcase_add_test(tc, test_continue_rules_by_value);
        tcase_add_test(tc, test_always_deny_charges_nothing);
        tcase_add_test(tc, test_never_binds_over_later);
        tcase_add_test(tc, test_group_across_slots);
        suite_add_tcase(s, tc);

        tc = tcase_create("verbs");
        tcase_add_checked_fixture(tc, verbs_setup, teardown);
        tcase_add_loop_test(tc, test_verb_case, 0, (int) (sizeof verb_cases / sizeof verb_cases[0]));
        tcase_add_test(tc, test_verb_metrics);
        suite_add_tcase(s, tc);

        return check_run_suite(s);
}
