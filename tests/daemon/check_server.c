/* SPDX-License-Identifier: MIT */
/* server.c and its batch engine (batch.c) driven over socketpairs with a real store and
 * real rules (no network, no sleeps: the loop is run step by step). */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "daemon/batch.h"
#include "daemon/server.h"
#include "store/store.h"
#include "check-run.h"

/* ---- the server over a socketpair ---- */

static const char RULES[] = "[a=1]\n"
                            "creditLimit = 2\n"
                            "resetSeconds = 60\n"
                            "\n"
                            "[c=* ip=*]\n"
                            "creditLimit = 1\n"
                            "resetSeconds = 60\n"
                            "matchPolicy = canary\n"
                            "actorField = ip\n"
                            "\n"
                            "[c=*]\n"
                            "creditLimit = 3\n"
                            "resetSeconds = 60\n"
                            "\n"
                            "[d=1]\n"
                            "creditLimit = 0\n"
                            "resetSeconds = 60\n"
                            "\n"
                            "[e=1]\n"
                            "creditLimit = 0\n"
                            "resetSeconds = 60\n"
                            "matchPolicy = canary\n"
                            "\n"
                            "[f=*]\n"
                            "creditLimit = 5\n"
                            "resetSeconds = 60\n"
                            "actorField = f\n"
                            "\n"
                            "[default]\n"
                            "creditLimit = 5\n"
                            "resetSeconds = 0\n";

static char tmpdir[64];
static sd_event *event;
static Store *store;
static RuleSet *rules;
static Server *server;
static Metrics *metrics;

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(path);
}

static void server_setup(void) {
        char err[256] = "";
        StoreOptions o = { .sync = STORE_SYNC_NONE };
        ServerSettings settings = { .max_connections = 8, .output_limit = 4096 };
        Diag diag;

        strcpy(tmpdir, "/tmp/check-server-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(tmpdir));
        o.path = tmpdir;
        ck_assert_msg(store_open(&o, &store, err, sizeof err) == 0, "store_open: %s", err);

        diag_init(&diag, "rules.ini");
        ck_assert_int_eq(ruleset_new("rules.ini", &rules), 0);
        ck_assert_int_eq(config_ini_parse(RULES, sizeof RULES - 1, rules, &diag), 0);
        ck_assert_int_eq(ruleset_finalize(rules, &diag), 0);
        diag_done(&diag);

        ck_assert_int_eq(sd_event_new(&event), 0);
        ck_assert_int_eq(server_new(event, &settings, &server), 0);
        server_set_rules(server, rules);
        server_set_store(server, store);
        ck_assert_int_eq(metrics_new(&metrics), 0);
        ck_assert_int_eq(metrics_set_rules(metrics, rules), 0);
        server_set_metrics(server, metrics);
}

/* The outcomes are counted in the metrics only. */
static uint64_t hits(MetricsStatus status) {
        return metrics_hits_total(metrics, status);
}

static void server_teardown(void) {
        server = server_free(server);
        metrics = metrics_free(metrics);
        event = sd_event_unref(event);
        store = store_close(store);
        rules = ruleset_free(rules);
        (void) nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Opens a client connection to the server; returns the client's end. */
static int client_connect(void) {
        int sv[2];

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
        server_accept(sv[0], false, false, server);
        return sv[1];
}

static void send_all(int fd, const char *data, size_t len) {
        for (size_t done = 0; done < len;) {
                ssize_t n = send(fd, data + done, len - done, MSG_NOSIGNAL);
                if (n < 0 && errno == EAGAIN) {
                        ck_assert_int_ge(sd_event_run(event, 0), 0); /* let the server drain */
                        continue;
                }
                ck_assert_int_gt(n, 0);
                done += (size_t) n;
        }
}

/* Runs the loop until the server closes fd's peer; returns everything it sent
 * (NUL-terminated, caller frees). Bounded: fails after a few thousand steps. */
static char *collect_until_eof(int fd) {
        size_t size = 1 << 16, len = 0;
        char *out = malloc(size);

        ck_assert_ptr_nonnull(out);
        for (unsigned i = 0; i < 5000; i++) {
                ck_assert_int_ge(sd_event_run(event, 1000), 0);
                for (;;) {
                        if (len + 4096 > size) {
                                size *= 2;
                                out = realloc(out, size);
                                ck_assert_ptr_nonnull(out);
                        }
                        ssize_t n = recv(fd, out + len, size - len - 1, MSG_DONTWAIT);
                        if (n == 0) {
                                out[len] = '\0';
                                return out;
                        }
                        if (n < 0) {
                                ck_assert_int_eq(errno, EAGAIN);
                                break;
                        }
                        len += (size_t) n;
                }
        }
        ck_abort_msg("server did not close the connection");
        return NULL;
}

static const struct {
        const char *name;
        const char *input;
        const char *output;
} conversations[] = {
        { "counting", "HIT a=1\nHIT a=1\nHIT a=1\n", "OK true 1 60\nOK true 0 60\nOK false 0 60\n" },
        { "crlf and unterminated last line", "HIT a=1\r\nHIT a=1", "OK true 1 60\nOK true 0 60\n" },
        { "always allow, always deny", "HIT x=1\nHIT d=1\n", "OK true 5 0\nOK false 0 -1\n" },
        { "canary counted, does not decide", "HIT c=1 ip=a\nHIT c=1 ip=a\nHIT c=1 ip=b\nHIT c=1 ip=b\n",
          "OK true 2 60\nOK true 1 60\nOK true 0 60\nOK false 0 60\n" },
        { "error stops the pipeline", "HIT a=1\nBOGUS\nHIT a=1\n",
          "OK true 1 60\nERR unknown-command \"unknown command\"\n" },
        { "line too long", NULL, "OK true 5 0\nERR unknown \"line too long\"\n" },
        { "empty input", "", "" },
};

START_TEST (test_conversation) {
        static char long_input[PROTO_LINE_MAX + 64];
        const char *input = conversations[_i].input;
        int fd = client_connect();

        if (!input) {
                strcpy(long_input, "HIT x=1\nHIT x=");
                memset(long_input + strlen(long_input), 'v', PROTO_LINE_MAX);
                input = long_input;
        }
        send_all(fd, input, strlen(input));
        ck_assert_int_eq(shutdown(fd, SHUT_WR), 0); /* a half-close still gets every reply */

        char *out = collect_until_eof(fd);
        ck_assert_msg(strcmp(out, conversations[_i].output) == 0, "%s: got \"%s\"", conversations[_i].name,
                      out);
        free(out);
        close(fd);
        ck_assert_uint_eq(server_counters(server)->connections_current, 0);
}
END_TEST

START_TEST (test_pipelining_spans_batches) {
        /* More requests than one connection may put in a batch, and more replies than
         * the output limit: all answered, in order. */
        enum { N = 3 * BATCH_LINES_PER_CONNECTION + 7 };
        static char input[N * 16], expected[N * 16];
        size_t in_len = 0, exp_len = 0;
        int fd = client_connect();

        for (unsigned i = 0; i < N; i++) {
                in_len += (size_t) sprintf(input + in_len, "HIT n=%u\n", i);
                exp_len += (size_t) sprintf(expected + exp_len, "OK true 5 0\n");
        }
        send_all(fd, input, in_len);
        ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);

        char *out = collect_until_eof(fd);
        ck_assert_str_eq(out, expected);
        free(out);
        close(fd);
        ck_assert_uint_ge(server_counters(server)->batches, 4);
        ck_assert_uint_eq(hits(METRICS_STATUS_ACCEPTED), N);
}
END_TEST

START_TEST (test_two_clients_share_counters) {
        int a = client_connect(), b = client_connect();

        send_all(a, "HIT a=1\n", 8);
        send_all(b, "HIT a=1\nHIT a=1\n", 16);
        shutdown(a, SHUT_WR);
        shutdown(b, SHUT_WR);

        char *out_a = collect_until_eof(a), *out_b = collect_until_eof(b);
        /* Three hits on a limit of 2, in one batch or two: exactly one is refused. */
        size_t total = strlen(out_a) + strlen(out_b);
        ck_assert_uint_eq(total, strlen("OK true 1 60\n"
                                        "OK true 0 60\n"
                                        "OK false 0 60\n"));
        ck_assert_uint_eq(hits(METRICS_STATUS_ACCEPTED), 2);
        ck_assert_uint_eq(hits(METRICS_STATUS_REJECTED), 1);
        free(out_a);
        free(out_b);
        close(a);
        close(b);
}
END_TEST

START_TEST (test_too_many_connections) {
        int fds[9];

        for (unsigned i = 0; i < 8; i++)
                fds[i] = client_connect();
        fds[8] = client_connect();

        char *out = collect_until_eof(fds[8]);
        ck_assert_str_eq(out, "ERR unknown \"too many connections\"\n");
        free(out);
        ck_assert_uint_eq(server_counters(server)->connections_current, 8);
        ck_assert_uint_eq(server_counters(server)->connections_rejected, 1);

        /* The others still work. */
        send_all(fds[0], "HIT x=1\n", 8);
        shutdown(fds[0], SHUT_WR);
        out = collect_until_eof(fds[0]);
        ck_assert_str_eq(out, "OK true 5 0\n");
        free(out);
        for (unsigned i = 0; i < 9; i++)
                close(fds[i]);
}
END_TEST

/* The journal's preallocation, failing while disk_full (a full filesystem). */
static bool disk_full;
static int allocate_hook(int fd, off_t len) {
        return disk_full ? ENOSPC : posix_fallocate(fd, 0, len);
}

/* Swaps the fixture's store for one on a full disk, its journal's segments full; returns in
 * actor a value of f whose counter the store cannot create ("HIT f=<actor>" is answered ERR).
 * (Version 1's map filled up; version 2 fails a batch when its journal cannot be written.) */
static void use_full_store(char actor[static 32]) {
        static const char probe[] = "HIT f=x";
        char err[256] = "", path[96], keys[100][32];
        const Rule *matched[RULES_MATCH_MAX];
        StoreOptions o = { .sync = STORE_SYNC_NONE,
                           .journal_segment_size = 16 * 1024,
                           .journal_allocate = allocate_hook };
        ProtoRequest req;
        struct timespec ts;
        unsigned n = 100;
        int r = 0;

        ck_assert_int_eq(proto_parse_line(probe, strlen(probe), PROTO_PAIRS_MAX, &req), 0);
        const Rule *rule = matched[ruleset_match(rules, &req, matched) - 1];
        ck_assert_uint_eq(rule->reset_seconds, 60);
        ck_assert_int_eq(clock_gettime(CLOCK_REALTIME, &ts), 0);
        uint64_t now_usec = (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;

        store = store_close(store);
        snprintf(path, sizeof path, "%s/full", tmpdir);
        o.path = path;
        ck_assert_msg(store_open(&o, &store, err, sizeof err) == 0, "store_open: %s", err);
        disk_full = true;
        /* New counters in batches of 100, then one at a time, until one does not fit: the
         * store is left as it was, so the same counter fails again. */
        for (unsigned i = 0; i < 100000; i++) {
                StoreHit b[100];
                for (unsigned j = 0; j < n; j++) {
                        snprintf(keys[j], sizeof keys[j], "z%u-%u", i, j);
                        b[j] = (StoreHit){ .rule_id = rule->id,
                                           .actor = keys[j],
                                           .actor_len = strlen(keys[j]),
                                           .credit_limit = 5,
                                           .reset_seconds = 60,
                                           .count = 1 };
                }
                r = store_apply(store, b, n, now_usec);
                if (r < 0 && n == 1)
                        break;
                if (r < 0)
                        n = 1;
        }
        ck_assert_int_eq(r, -ENOSPC);
        strcpy(actor, keys[0]);
        server_set_store(server, store);
}

START_TEST (test_store_error_counts_nothing_answered_ok) {
        /* A request answered ERR (the store failed), and a request after it skipped: neither
         * counts its canaries that need no counter, and only the ERR is a request answered. */
        char actor[32], input[128];

        use_full_store(actor);
        for (unsigned i = 0; i < 2; i++) {
                int fd = client_connect();

                snprintf(input, sizeof input, i == 0 ? "HIT e=1 f=%s\n" : "HIT f=%s\nHIT e=1\n", actor);
                send_all(fd, input, strlen(input));
                ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
                char *out = collect_until_eof(fd);
                ck_assert_msg(strncmp(out, "ERR unknown ", 12) == 0 &&
                                      strchr(out, '\n') == out + strlen(out) - 1,
                              "got \"%s\"", out);
                free(out);
                close(fd);
                ck_assert_uint_eq(hits(METRICS_STATUS_CANARY_REJECTED), 0);
                ck_assert_uint_eq(server_counters(server)->batch_requests, i + 1);
        }
}
END_TEST

START_TEST (test_canary_without_counter_counted) {
        /* A canary that needs no counter counts with its request's OK reply. (Not for an ERR or
         * a skipped request: that needs a failing store, which this fixture cannot make at will.) */
        int fd = client_connect();
        send_all(fd, "HIT e=1\n", 8);
        ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
        char *out = collect_until_eof(fd);
        ck_assert_str_eq(out, "OK true 5 0\n");
        free(out);
        close(fd);
        ck_assert_uint_eq(hits(METRICS_STATUS_CANARY_REJECTED), 1);
        ck_assert_uint_eq(server_counters(server)->batch_requests, 1);
}
END_TEST

/* A store backend that completes later: it applies each batch to the real store at once, but
 * calls done from a defer source, i.e. in a later iteration of the loop (as a remote store
 * answering over a socket would), the newest batch first (out of order). */
typedef struct Deferred {
        sd_event_source *source;
        struct {
                StoreDoneFunc done;
                void *userdata;
                int error;
        } held[SERVER_BATCHES];
        size_t n, max_n;
        unsigned submits;
} Deferred;

static int deferred_fire(sd_event_source *es, void *userdata) {
        Deferred *d = userdata;

        (void) es;
        while (d->n > 0) {
                d->n--;
                d->held[d->n].done(d->held[d->n].userdata, d->held[d->n].error);
        }
        return 0;
}

static int deferred_submit(void *backend, StoreHit *hits, size_t n, uint64_t now_usec, StoreDoneFunc done,
                           void *userdata) {
        Deferred *d = backend;

        ck_assert_uint_lt(d->n, SERVER_BATCHES); /* the server never has more in flight */
        d->held[d->n].error = store_apply(store, hits, n, now_usec);
        d->held[d->n].done = done;
        d->held[d->n].userdata = userdata;
        d->n++;
        if (d->n > d->max_n)
                d->max_n = d->n;
        d->submits++;
        return sd_event_source_set_enabled(d->source, SD_EVENT_ONESHOT);
}

START_TEST (test_store_completes_later) {
        /* Two pipelining clients over many batches: every reply in order, per connection, the
         * counters shared. */
        enum { N = 2 * BATCH_LINES_PER_CONNECTION + 3 };
        static char input[N * 16];
        size_t in_len = 0;
        Deferred d = {};
        int a, b;

        ck_assert_int_eq(sd_event_add_defer(event, &d.source, deferred_fire, &d), 0);
        ck_assert_int_eq(sd_event_source_set_enabled(d.source, SD_EVENT_OFF), 0);
        server_set_backend(server, deferred_submit, &d);
        a = client_connect();
        b = client_connect();
        for (unsigned i = 0; i < N; i++) {
                in_len += (size_t) sprintf(input + in_len, "HIT f=k%u\n", i % 7);
        }
        send_all(a, input, in_len);
        send_all(b, "HIT a=1\nHIT a=1\nHIT a=1\nBOGUS\nHIT a=1\n", 36);
        ck_assert_int_eq(shutdown(a, SHUT_WR), 0);
        ck_assert_int_eq(shutdown(b, SHUT_WR), 0);

        char *out_b = collect_until_eof(b);
        char *out_a = collect_until_eof(a);
        ck_assert_str_eq(out_b, "OK true 1 60\nOK true 0 60\nOK false 0 60\n"
                                "ERR unknown-command \"unknown command\"\n");
        /* a's replies: for each of the 7 actors, credit 4, 3, ... then refused, in order */
        unsigned seen[7] = {};
        char *line = out_a;
        for (unsigned i = 0; i < N; i++) {
                char want[32];
                unsigned k = seen[i % 7]++;
                char *end = strchr(line, '\n');

                ck_assert_ptr_nonnull(end);
                snprintf(want, sizeof want, k < 5 ? "OK true %u 60" : "OK false 0 60", 4 - k);
                ck_assert_int_eq((int) (end - line), (int) strlen(want));
                ck_assert(strncmp(line, want, strlen(want)) == 0);
                line = end + 1;
        }
        ck_assert_str_eq(line, "");
        ck_assert_uint_ge(d.submits, 3);
        ck_assert(!server_batch_pending(server));
        free(out_a);
        free(out_b);
        close(a);
        close(b);
        server_set_store(server, store);
        sd_event_source_disable_unref(d.source);
}
END_TEST

/* A backend that holds every batch until the test completes it, in any order. */
typedef struct Held {
        size_t n_hits;
        StoreDoneFunc done;
        void *userdata;
        int error;
} Held;
typedef struct Queue {
        Held held[SERVER_BATCHES + 1];
        size_t n;
} Queue;

static int queue_submit(void *backend, StoreHit *hits, size_t n, uint64_t now_usec, StoreDoneFunc done,
                        void *userdata) {
        Queue *q = backend;

        ck_assert_uint_lt(q->n, SERVER_BATCHES);
        q->held[q->n++] = (Held){ .n_hits = n,
                                  .done = done,
                                  .userdata = userdata,
                                  .error = store_apply(store, hits, n, now_usec) };
        return 0;
}

static void queue_complete(Queue *q, size_t i) {
        Held h = q->held[i];

        ck_assert_uint_lt(i, q->n);
        memmove(q->held + i, q->held + i + 1, (q->n - i - 1) * sizeof *q->held);
        q->n--;
        h.done(h.userdata, h.error);
}

/* Runs the loop until it has nothing to do (bounded). */
static void pump(void) {
        for (unsigned i = 0; i < 50; i++)
                if (sd_event_run(event, 0) == 0)
                        break;
}

/* What the server sent fd so far (no EOF), compared. */
static void expect_recv(int fd, const char *want) {
        char buf[4096];
        ssize_t n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);

        if (n < 0) {
                ck_assert_int_eq(errno, EAGAIN);
                n = 0;
        } else
                ck_assert_int_gt(n, 0); /* not closed */
        buf[n] = 0;
        ck_assert_str_eq(buf, want);
}

START_TEST (test_batches_in_flight) {
        /* Several batches in flight, completed out of order: each connection is in one batch at
         * a time (its later requests wait, unread, for its batch), replies stay in order per
         * connection, the other connections go on being batched. */
        Queue q = {};
        int a, b, c;

        server_set_backend(server, queue_submit, &q);
        a = client_connect();
        b = client_connect();
        c = client_connect();
        send_all(a, "HIT f=a\nHIT f=a\n", 16);
        pump();
        ck_assert_uint_eq(q.n, 1);
        ck_assert_uint_eq(q.held[0].n_hits, 2);
        ck_assert(server_batch_pending(server));
        send_all(a, "HIT f=a\n", 8);
        send_all(b, "HIT f=b\n", 8);
        pump();
        ck_assert_uint_eq(q.n, 2);
        ck_assert_uint_eq(q.held[1].n_hits, 1); /* b's only: a is in flight */
        send_all(c, "HIT f=c\nHIT f=c\nHIT f=c\n", 24);
        pump();
        ck_assert_uint_eq(q.n, 3);
        ck_assert_uint_eq(q.held[2].n_hits, 3);

        queue_complete(&q, 2); /* c's first */
        pump();
        expect_recv(c, "OK true 4 60\nOK true 3 60\nOK true 2 60\n");
        expect_recv(a, "");
        queue_complete(&q, 1); /* b's */
        pump();
        expect_recv(b, "OK true 4 60\n");
        ck_assert_uint_eq(q.n, 1); /* a's third request still waits for its first batch */
        queue_complete(&q, 0);
        pump();
        expect_recv(a, "OK true 4 60\nOK true 3 60\n");
        ck_assert_uint_eq(q.n, 1); /* now taken */
        ck_assert_uint_eq(q.held[0].n_hits, 1);
        queue_complete(&q, 0);
        pump();
        expect_recv(a, "OK true 2 60\n");
        ck_assert(!server_batch_pending(server));
        ck_assert_uint_eq(server_counters(server)->batches, 4);
        close(a);
        close(b);
        close(c);
        server_set_store(server, store);
}
END_TEST

START_TEST (test_stop_waits_for_batch_in_flight) {
        /* Stopping (and a peer gone meanwhile) does not close a connection under its batch: it
         * is answered, then closed. */
        Queue q = {};
        char buf[256];
        ssize_t n;
        int a;

        server_set_backend(server, queue_submit, &q);
        a = client_connect();
        send_all(a, "HIT f=s\nHIT f=s\n", 16);
        ck_assert_int_eq(shutdown(a, SHUT_WR), 0);
        pump();
        ck_assert_uint_eq(q.n, 1);
        server_stop(server);
        pump();
        expect_recv(a, ""); /* not closed */
        ck_assert_uint_eq(server_counters(server)->connections_current, 1);
        queue_complete(&q, 0);
        n = recv(a, buf, sizeof buf - 1, MSG_DONTWAIT);
        ck_assert_int_gt(n, 0);
        buf[n] = 0;
        ck_assert_str_eq(buf, "OK true 4 60\nOK true 3 60\n");
        ck_assert_int_eq(recv(a, buf, sizeof buf, MSG_DONTWAIT), 0); /* then closed */
        ck_assert_uint_eq(server_counters(server)->connections_current, 0);
        close(a);
        server_set_store(server, store);
}
END_TEST

START_TEST (test_stop_closes_idle_drains_pipeline) {
        /* At stop, connections with nothing to answer (a pooled one after its reply, one that
         * never sent anything) are closed at once, without waiting for their peers' EOF; a
         * pipeline the client sent just before the stop, still unread in the socket, is read
         * and every request of it answered before the EOF. */
        char buf[256];
        char *out;
        int a, b, p;

        a = client_connect();
        send_all(a, "HIT f=i\n", 8);
        pump();
        expect_recv(a, "OK true 4 60\n");
        b = client_connect();
        p = client_connect();
        send_all(p, "HIT f=p\nHIT f=p\nHIT f=p\n", 24); /* not yet read: the loop has not run */

        server_stop(server);
        ck_assert_uint_eq(server_counters(server)->connections_closed_at_stop, 2);
        ck_assert_uint_eq(server_counters(server)->connections_current, 1);
        ck_assert_int_eq(recv(a, buf, sizeof buf, MSG_DONTWAIT), 0);
        ck_assert_int_eq(recv(b, buf, sizeof buf, MSG_DONTWAIT), 0);

        out = collect_until_eof(p);
        ck_assert_str_eq(out, "OK true 4 60\nOK true 3 60\nOK true 2 60\n");
        free(out);
        close(p);
        pump();
        ck_assert_uint_eq(server_counters(server)->connections_current, 0);
        ck_assert_uint_eq(server_counters(server)->connections_closed_at_stop, 2);
        close(a);
        close(b);
}
END_TEST

START_TEST (test_request_timeout) {
        /* A connection holding the start of a request that does not arrive whole is closed at
         * the request timeout (here 1 us: at the first housekeeping), whatever the idle timeout
         * (off here); connections with no partial request, idle or answered, stay open. */
        ServerSettings settings = { .max_connections = 8, .output_limit = 4096, .request_timeout_usec = 1 };
        char buf[64];
        bool closed = false;
        int trickle, idle, answered;

        server = server_free(server);
        ck_assert_int_eq(server_new(event, &settings, &server), 0);
        server_set_rules(server, rules);
        server_set_store(server, store);
        server_set_metrics(server, metrics);

        idle = client_connect();
        answered = client_connect();
        send_all(answered, "HIT f=r\n", 8);
        pump();
        expect_recv(answered, "OK true 4 60\n");
        trickle = client_connect();
        send_all(trickle, "HIT f=", 6);
        /* bounded: the housekeeping timer fires every SERVER_HOUSEKEEPING_USEC */
        for (unsigned i = 0; i < 100 && !closed; i++) {
                ck_assert_int_ge(sd_event_run(event, 100 * 1000), 0);
                closed = recv(trickle, buf, sizeof buf, MSG_DONTWAIT) == 0;
        }
        ck_assert_msg(closed, "the partial request's connection was not closed");
        ck_assert_uint_eq(server_counters(server)->connections_current, 2);
        send_all(answered, "HIT f=r\n", 8);
        pump();
        expect_recv(answered, "OK true 3 60\n");
        close(trickle);
        close(idle);
        close(answered);
}
END_TEST

START_TEST (test_close_deferred_while_in_flight) {
        /* A peer that leaves while its connection is in a batch in flight: the write of its
         * earlier replies fails, but the connection (whose input the batch points into) closes
         * only once the batch completes. */
        static char input[640 * 16];
        size_t in_len = 0;
        Queue q = {};
        int sv[2];

        server_set_backend(server, queue_submit, &q);
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
        /* a small send buffer: the replies of a few batches fill it while the peer reads nothing */
        ck_assert_int_eq(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &(int){ 1 }, sizeof(int)), 0);
        server_accept(sv[0], false, false, server);
        for (unsigned i = 0; i < 640; i++)
                in_len += (size_t) sprintf(input + in_len, "HIT f=q%u\n", i);
        send_all(sv[1], input, in_len);
        pump();
        for (unsigned i = 0; i < 6; i++) {
                ck_assert_uint_eq(q.n, 1);
                queue_complete(&q, 0);
                pump();
        }
        ck_assert_uint_eq(q.n, 1); /* the 7th batch in flight, replies unsent behind it */
        close(sv[1]);
        pump();
        ck_assert_uint_eq(server_counters(server)->connections_current, 1);
        queue_complete(&q, 0);
        pump();
        ck_assert_uint_eq(server_counters(server)->connections_current, 0);
        ck_assert_uint_eq(q.n, 0);
        server_set_store(server, store);
}
END_TEST

int main(void) {
        Suite *s = suite_create("server");
        TCase *tc;

        tc = tcase_create("server");
        tcase_add_checked_fixture(tc, server_setup, server_teardown);
        tcase_add_loop_test(tc, test_conversation, 0, sizeof conversations / sizeof conversations[0]);
        tcase_add_test(tc, test_pipelining_spans_batches);
        tcase_add_test(tc, test_two_clients_share_counters);
        tcase_add_test(tc, test_too_many_connections);
        tcase_add_test(tc, test_canary_without_counter_counted);
        tcase_add_test(tc, test_store_error_counts_nothing_answered_ok);
        tcase_add_test(tc, test_store_completes_later);
        tcase_add_test(tc, test_batches_in_flight);
        tcase_add_test(tc, test_stop_waits_for_batch_in_flight);
        tcase_add_test(tc, test_close_deferred_while_in_flight);
        tcase_add_test(tc, test_stop_closes_idle_drains_pipeline);
        tcase_add_test(tc, test_request_timeout);
        suite_add_tcase(s, tc);

        return check_run_suite(s);
}
