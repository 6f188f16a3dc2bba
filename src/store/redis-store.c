/* SPDX-License-Identifier: MIT */
#include "store/redis-store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shared/clock.h"
#include "store/redis-cluster.h"
#include "store/redis-store-internal.h"

const char *redis_store_state_to_string(RedisStoreState s) {
        static const char *const names[_REDIS_STORE_STATE_MAX] = {
                [REDIS_STORE_CONNECTING] = "connecting",
                [REDIS_STORE_CONNECTED] = "connected",
                [REDIS_STORE_DOWN] = "down",
                [REDIS_STORE_BREAKER_OPEN] = "breaker-open",
                [REDIS_STORE_FAILING_OVER] = "failing-over",
        };

        return s >= 0 && s < _REDIS_STORE_STATE_MAX ? names[s] : NULL;
}

/* ---- the FIFO ---- */

static void redis_batch_release(RedisStore *s, RedisBatch *b) {
        Call *c = b->calls, *next;

        for (; c; c = next) {
                next = c->batch_next;
                c->batch_next = s->free_calls;
                s->free_calls = c;
        }
        b->calls = NULL;
        b->next = s->free_batches;
        s->free_batches = b;
}

/* ---- the circuit breaker ---- */

/* Opens (or opens again) the breaker for a jittered backoff, doubled for the next time. */
static void breaker_open(RedisStore *s, uint64_t now) {
        redis_probe_cancel(s);
        s->breaker = BREAKER_OPEN;
        s->breaker_until = now + jitter(s, s->breaker_backoff);
        s->breaker_backoff = s->breaker_backoff * 2 > s->o.backoff_max_usec ? s->o.backoff_max_usec
                                                                            : s->breaker_backoff * 2;
        s->st.breaker_opens++;
}

static void probe_failed(RedisStore *s, uint64_t now) {
        breaker_open(s, now);
        redis_set_error(s, "circuit breaker open again: no node answered PING (last: %s)", s->st.last_error);
}

/* A reply (any, an error reply too: the server answers) closes the breaker; when every PING of
 * the probe has failed it opens again. */
static void ping_reply(void *userdata, redisReply *r, int error) {
        Node *n = userdata;
        RedisStore *s = n->s;

        if (s->closing || !n->pinging)
                return;
        n->pinging = false;
        if (error == 0 && r) {
                if (s->url.mode != REDIS_MODE_SENTINEL)
                        redis_node_healthy(
                                n); /* a Sentinel's primary: ROLE, before it on a new connection */
                redis_breaker_close(s);
                return;
        }
        if (--s->probe_pings == 0)
                probe_failed(s, now_usec());
}

/* The open period is over and no batch came to be the probe: the store probes on its own, so an
 * idle daemon sees Redis come back. A PING to each node a call may need (single, Sentinel: the
 * primary; cluster: every node used so far), connected first if it is closed (its reconnect
 * backoff does not apply: the breaker's paces the probes). Nothing could be sent: open again. */
static void probe_start(RedisStore *s, uint64_t now) {
        unsigned sent = 0;

        if (s->url.mode == REDIS_MODE_SENTINEL && !s->primary_known) {
                if (!s->discovering && now >= s->discover_at) /* not before its own backoff */
                        redis_sentinel_discover(s, now);
                if (s->discovering)
                        return; /* the sentinels' answer (an io event) runs this again */
                if (!s->primary_known) {
                        probe_failed(s, now);
                        return;
                }
        }
        for (size_t i = 0; i < s->n_nodes; i++) {
                Node *n = s->nodes[i];

                if (!n || !n->have_addr || n->pinging || !node_in_use(s, n) ||
                    (s->url.mode == REDIS_MODE_CLUSTER && !n->attempted))
                        continue;
                if (redis_conn_state(n->conn) == REDIS_CONN_CLOSED && redis_node_connect(n, now) < 0)
                        continue;
                if (redis_conn_command(n->conn, 1, (const char *[]){ "PING" }, (size_t[]){ 4 }, ping_reply,
                                       n, &n->ping_seq) < 0)
                        continue;
                n->pinging = true;
                n->dirty = true;
                sent++;
        }
        if (sent == 0) {
                probe_failed(s, now);
                return;
        }
        s->breaker = BREAKER_HALF_OPEN; /* batches are refused until it is decided */
        s->probe_pings = sent;
        s->probe_deadline = now + s->o.connect_timeout_usec;
        s->st.breaker_probes++;
}

/* No reply to the probe's PINGs by its deadline: those connections are hung; they are closed
 * (and made again by the next probe) and the breaker opens again. */
static void probe_expire(RedisStore *s, uint64_t now) {
        for (size_t i = 0; i < s->n_nodes; i++) {
                Node *n = s->nodes[i];

                if (!n || !n->pinging)
                        continue;
                (void) redis_conn_abandon(n->conn, n->ping_seq);
                n->pinging = false;
                redis_conn_disconnect(n->conn, -ETIMEDOUT);
                redis_set_error(s, "%s: no reply to PING within %" PRIu64 " ms", n->addr.name,
                                s->o.connect_timeout_usec / 1000);
        }
        s->probe_pings = 0;
        probe_failed(s, now);
}

static void breaker_account(RedisStore *s, const RedisBatch *b, uint64_t now) {
        if (b->refused)
                return;
        if (b->held && !b->answered) {
                /* the sentinels moving the primary: no evidence of a failure (a probe: the next) */
                if (b->probe)
                        s->breaker = BREAKER_OPEN;
                return;
        }
        /* A batch a server answered is no failure of the store, though some of its hits failed:
         * in a cluster, one node down must not open the breaker on the others' hits (every batch
         * under load has one for it). */
        if (!b->failed || b->answered) {
                s->fail_streak = 0;
                if (b->probe || s->breaker != BREAKER_CLOSED)
                        redis_breaker_close(s);
                return;
        }
        /* Batches that were in flight together when one failure struck (a stall, a dropped
         * connection) are one failure: only a batch submitted after the last counted one had
         * failed is new evidence, so a hiccup shorter than the timeout never opens it. */
        if (s->fail_streak > 0 && b->submitted < s->fail_at && !b->probe)
                return;
        s->fail_streak++;
        s->fail_at = now;
        if ((s->breaker == BREAKER_CLOSED && s->fail_streak >= s->o.breaker_threshold) || b->probe) {
                breaker_open(s, now);
                redis_set_error(s, "circuit breaker open after %u failed batches (last: %s)", s->fail_streak,
                                s->st.last_error);
        }
}

/* Completes, in order, the batches at the head that have every call done. */
static void complete_ready(RedisStore *s) {
        uint64_t now;

        if (s->completing)
                return;
        s->completing = true;
        now = now_usec();
        while (s->head && s->head->calls_left == 0) {
                RedisBatch *b = s->head;
                StoreDoneFunc done = b->done;
                void *userdata = b->userdata;

                s->head = b->next;
                if (!s->head)
                        s->tail = NULL;
                s->st.batches_pending--;
                breaker_account(s, b, now);
                redis_batch_release(s, b);
                done(userdata, 0);
        }
        s->completing = false;
}

/* Batches past their deadline: their unanswered calls fail with -ETIMEDOUT. */
static void expire_batches(RedisStore *s, uint64_t now) {
        for (RedisBatch *b = s->head; b && b->deadline <= now; b = b->next) {
                if (b->calls_left == 0)
                        continue;
                for (Call *c = b->calls; c; c = c->batch_next) {
                        Node *n = c->node;

                        if (c->done)
                                continue;
                        if (c->parked)
                                redis_call_unpark(c);
                        if (n) {
                                (void) redis_conn_abandon(n->conn, c->conn_seq);
                                if (n->timeout_streak > 0 &&
                                    redis_conn_replies(n->conn) != n->streak_replies)
                                        n->timeout_streak = 0; /* it answered since: slow, alive */
                                if (n->timeout_streak == 0 || b->submitted >= n->streak_at) {
                                        n->streak_at = now;
                                        n->streak_replies = redis_conn_replies(n->conn);
                                        n->timeout_streak++;
                                }
                                if (n->timeout_streak >= s->o.breaker_threshold) {
                                        redis_set_error(s,
                                                        "%s: %u batches in a row timed out without a reply: "
                                                        "reconnecting",
                                                        n->addr.name, n->timeout_streak);
                                        n->timeout_streak = 0;
                                        redis_call_finish(c, -ETIMEDOUT);
                                        redis_conn_disconnect(n->conn, -ETIMEDOUT);
                                        continue;
                                }
                        }
                        redis_call_finish(c, -ETIMEDOUT);
                }
                redis_set_error(s, "a batch had no reply within %" PRIu64 " ms", s->o.timeout_usec / 1000);
        }
}

static void flush_dirty(RedisStore *s) {
        for (size_t i = 0; i < s->n_nodes; i++) {
                Node *n = s->nodes[i];

                if (n && n->dirty) {
                        n->dirty = false;
                        (void) redis_conn_flush(n->conn);
                }
        }
        if (s->sentinel && s->sentinel->dirty) {
                s->sentinel->dirty = false;
                (void) redis_conn_flush(s->sentinel->conn);
        }
        for (size_t i = 0; i < s->url.n_hosts; i++) {
                Node *w = s->watches[i];

                if (w && w->dirty) {
                        w->dirty = false;
                        (void) redis_conn_flush(w->conn);
                }
        }
}

/* Periodic work due at now; arms the timer for the next. */
static void run_due(RedisStore *s, uint64_t now) {
        uint64_t next = 0;

        expire_batches(s, now);
        for (size_t i = 0; i < s->n_nodes; i++) {
                Node *n = s->nodes[i];

                if (!n)
                        continue;
                if (n->connect_deadline && now >= n->connect_deadline &&
                    redis_conn_state(n->conn) != REDIS_CONN_CLOSED && !n->healthy) {
                        n->connect_deadline = 0;
                        redis_conn_disconnect(n->conn, -ETIMEDOUT);
                }
        }
        if (s->sentinel && s->sentinel->connect_deadline && now >= s->sentinel->connect_deadline &&
            redis_conn_state(s->sentinel->conn) != REDIS_CONN_CLOSED) {
                s->sentinel->connect_deadline = 0;
                redis_conn_disconnect(s->sentinel->conn, -ETIMEDOUT);
        }

        switch (s->url.mode) {
        case REDIS_MODE_SINGLE:
                /* reconnect proactively: the next batch finds a connection */
                if (redis_conn_state(s->nodes[0]->conn) == REDIS_CONN_CLOSED && now >= s->nodes[0]->retry_at)
                        (void) redis_node_connect(s->nodes[0], now);
                break;
        case REDIS_MODE_SENTINEL:
                if (!s->primary_known && !s->discovering && now >= s->discover_at)
                        redis_sentinel_discover(s, now);
                else if (s->primary_known && !s->discovering && now >= s->recheck_at)
                        redis_sentinel_recheck(s, now);
                break;
        case REDIS_MODE_CLUSTER:
                if (!s->have_map || s->map_stale)
                        redis_map_refresh(s, now);
                /* a node lost to a failure is reconnected on its own, as a single server is: else
                 * an idle daemon would call the store down until a call went there */
                for (size_t i = 0; i < s->n_nodes; i++) {
                        Node *n = s->nodes[i];

                        if (n && n->failed && n->have_addr && node_in_use(s, n) && now >= n->retry_at &&
                            redis_conn_state(n->conn) == REDIS_CONN_CLOSED)
                                (void) redis_node_connect(n, now);
                }
                break;
        default:
                break;
        }
        if (s->probe_pings > 0 && now >= s->probe_deadline)
                probe_expire(s, now);
        if (s->breaker == BREAKER_OPEN && now >= s->breaker_until)
                probe_start(s, now);
        if (s->parked)
                redis_dispatch_parked(s, now);
        expire_batches(s, now); /* what the above failed at once completes now */
        flush_dirty(s);
        complete_ready(s);

        /* the next deadline */
        for (RedisBatch *b = s->head; b; b = b->next)
                if (b->calls_left > 0) {
                        consider_deadline(&next, b->deadline);
                        break;
                }
        for (size_t i = 0; i < s->n_nodes; i++) {
                Node *n = s->nodes[i];

                if (!n)
                        continue;
                if (redis_conn_state(n->conn) != REDIS_CONN_CLOSED && !n->healthy)
                        consider_deadline(&next, n->connect_deadline);
                if ((s->url.mode == REDIS_MODE_SINGLE || (s->url.mode == REDIS_MODE_CLUSTER && n->failed &&
                                                          n->have_addr && node_in_use(s, n))) &&
                    redis_conn_state(n->conn) == REDIS_CONN_CLOSED)
                        consider_deadline(&next, n->retry_at > now ? n->retry_at : now + 1);
        }
        if (s->sentinel && redis_conn_state(s->sentinel->conn) != REDIS_CONN_CLOSED)
                consider_deadline(&next, s->sentinel->connect_deadline);
        if (s->url.mode == REDIS_MODE_SENTINEL && !s->primary_known && !s->discovering)
                consider_deadline(&next, s->discover_at > now ? s->discover_at : now + 1);
        if (s->url.mode == REDIS_MODE_SENTINEL && s->primary_known && !s->discovering)
                consider_deadline(&next, s->recheck_at > now ? s->recheck_at : now + 1);
        redis_sentinel_watch_due(s, now, &next);
        if (s->url.mode == REDIS_MODE_CLUSTER && (!s->have_map || s->map_stale) && !s->map_pending)
                consider_deadline(&next, s->map_retry_at > now ? s->map_retry_at : now + 1);
        for (Call *c = s->parked; c; c = c->park_next)
                consider_deadline(&next, c->not_before > now ? c->not_before : 0);
        /* the breaker's own probe when the open period is over (still open here with that
         * passed: a Sentinel lookup is on its way, its reply brings us back), its deadline */
        if (s->breaker == BREAKER_OPEN && s->breaker_until > now)
                consider_deadline(&next, s->breaker_until);
        if (s->probe_pings > 0)
                consider_deadline(&next, s->probe_deadline);
        if (next != s->armed) {
                s->armed = next;
                (void) s->io->timer(s->io->userdata, next);
        }
}

/* ---- the API ---- */

int redis_store_submit(void *backend, StoreHit *hits, size_t n, uint64_t now_wall, StoreDoneFunc done,
                       void *userdata) {
        RedisStore *s = backend;
        uint64_t now = now_usec();
        RedisBatch *b;
        Call **link;
        bool refuse = false;

        (void) now_wall;
        b = s->free_batches;
        if (b)
                s->free_batches = b->next;
        else if (!(b = malloc(sizeof(*b))))
                return -ENOMEM;
        *b = (RedisBatch){ .hits = hits,
                           .done = done,
                           .userdata = userdata,
                           .submitted = now,
                           .deadline = now + s->o.timeout_usec };
        s->st.batches++;
        s->st.hits += n;

        if (s->breaker == BREAKER_OPEN && now >= s->breaker_until) {
                s->breaker = BREAKER_HALF_OPEN;
                b->probe = true;
        } else if (s->breaker != BREAKER_CLOSED)
                refuse = true;

        for (size_t i = 0; i < n; i++)
                hits[i].error = 0;
        link = &b->calls;
        for (size_t i = 0; i < n;) {
                size_t start = i, end;

                while (i < n && hits[i].group == 0 && i - start < REDIS_STORE_CALL_HITS_MAX)
                        i++;
                if (i < n && hits[i].group != 0 && i - start < REDIS_STORE_CALL_HITS_MAX) {
                        uint32_t g = hits[i].group;

                        while (i < n && hits[i].group == g)
                                i++; /* a group is never cut */
                }
                end = i;
                /* cluster: one call per run of one slot */
                for (size_t j = start; j < end;) {
                        size_t k = j + 1;
                        uint16_t slot = 0;
                        Call *c;

                        if (s->url.mode == REDIS_MODE_CLUSTER) {
                                slot = redis_hit_slot(s, &hits[j]);
                                while (k < end && redis_hit_slot(s, &hits[k]) == slot)
                                        k++;
                        } else
                                k = end;
                        c = s->free_calls;
                        if (c)
                                s->free_calls = c->batch_next;
                        else if (!(c = malloc(sizeof(*c)))) {
                                /* the calls so far go back; the batch is not taken */
                                *link = NULL;
                                redis_batch_release(s, b);
                                return -ENOMEM;
                        }
                        *c = (Call){
                                .s = s, .batch = b, .first = j, .n = k - j, .slot = slot, .ask_node = -1
                        };
                        *link = c;
                        link = &c->batch_next;
                        b->calls_left++;
                        j = k;
                }
        }
        *link = NULL;

        if (s->tail)
                s->tail->next = b;
        else
                s->head = b;
        s->tail = b;
        s->st.batches_pending++;
        for (Call *c = b->calls; c; c = c->batch_next) {
                if (refuse) {
                        redis_call_finish(c, -ECONNREFUSED);
                        continue;
                }
                s->st.calls++;
                redis_call_send(c, now);
        }
        if (refuse)
                b->refused = true;
        run_due(s, now);
        return 0;
}

int redis_store_on_io(RedisStore *s, int fd, uint32_t revents) {
        Node *hit = NULL;

        for (size_t i = 0; i < s->n_nodes && !hit; i++)
                if (s->nodes[i] && redis_conn_fd(s->nodes[i]->conn) == fd)
                        hit = s->nodes[i];
        if (!hit && s->sentinel && redis_conn_fd(s->sentinel->conn) == fd)
                hit = s->sentinel;
        for (size_t i = 0; i < s->url.n_hosts && !hit; i++)
                if (s->watches[i] && redis_conn_fd(s->watches[i]->conn) == fd)
                        hit = s->watches[i];
        if (!hit)
                return -ENOENT;
        (void) redis_conn_on_io(hit->conn, revents);
        run_due(s, now_usec());
        return 0;
}

int redis_store_on_timer(RedisStore *s, uint64_t now_mono_usec) {
        s->armed = 0;
        run_due(s, now_mono_usec);
        return 0;
}

RedisStoreState redis_store_state(const RedisStore *s) {
        bool any_healthy = false, any_connecting = false, any_down = false;

        if (s->url.mode == REDIS_MODE_SENTINEL && failover_held(s))
                return REDIS_STORE_FAILING_OVER;
        if (s->breaker != BREAKER_CLOSED)
                return REDIS_STORE_BREAKER_OPEN;
        for (size_t i = 0; i < s->n_nodes; i++) {
                const Node *n = s->nodes[i];

                if (!n || (!n->attempted && s->url.mode == REDIS_MODE_CLUSTER) || !node_in_use(s, n))
                        continue;
                if (n->healthy)
                        any_healthy = true;
                else if (redis_conn_state(n->conn) != REDIS_CONN_CLOSED) {
                        /* A node's first connection (a cluster node's first call) is no outage:
                         * its calls wait for it. A reconnect after a failure is one. */
                        if (n->failed)
                                any_connecting = true;
                } else
                        any_down = true;
        }
        if ((s->discovering && !s->rechecking) ||
            (s->url.mode == REDIS_MODE_CLUSTER && !s->have_map && !any_down))
                any_connecting = true;
        return any_down                                                  ? REDIS_STORE_DOWN
               : any_connecting                                          ? REDIS_STORE_CONNECTING
               : any_healthy                                             ? REDIS_STORE_CONNECTED
               : s->url.mode == REDIS_MODE_SENTINEL && !s->primary_known ? REDIS_STORE_DOWN
                                                                         : REDIS_STORE_CONNECTING;
}

uint64_t redis_store_primary_switches(const RedisStore *s) {
        return s->st.primary_switches;
}

int redis_store_get_stats(const RedisStore *s, RedisStoreStats *ret) {
        *ret = s->st;
        ret->mode = s->url.mode;
        ret->state = redis_store_state(s);
        if (s->url.mode != REDIS_MODE_CLUSTER && s->n_nodes > 0 && s->nodes[0]->have_addr)
                snprintf(ret->address, sizeof(ret->address), "%s", s->nodes[0]->addr.name);
        else if (s->url.mode == REDIS_MODE_CLUSTER) {
                const Node *n = s->last_node;

                if (n && !n->healthy)
                        n = NULL; /* it died since (and may serve nothing now): one that answers */
                for (size_t i = 0; i < s->n_nodes && !n; i++)
                        if (s->nodes[i] && s->nodes[i]->healthy)
                                n = s->nodes[i]; /* no call yet: the node that answered */
                if (n)
                        snprintf(ret->address, sizeof(ret->address), "%s", n->addr.name);
        }
        return 0;
}

RedisStore *redis_store_close(RedisStore *s) {
        if (!s)
                return NULL;
        /* every pending call fails, in order, and every batch completes */
        for (RedisBatch *b = s->head; b; b = b->next)
                for (Call *c = b->calls; c; c = c->batch_next) {
                        if (c->done)
                                continue;
                        if (c->parked)
                                redis_call_unpark(c);
                        if (c->node)
                                (void) redis_conn_abandon(c->node->conn, c->conn_seq);
                        redis_call_finish(c, -ECANCELED);
                }
        s->completing = false;
        complete_ready(s);
        s->closing = true;
        for (size_t i = 0; i < s->n_nodes; i++)
                redis_node_free(s->nodes[i]);
        free(s->nodes);
        redis_node_free(s->sentinel);
        for (size_t i = 0; i < REDIS_URL_HOSTS_MAX; i++)
                redis_node_free(s->watches[i]);
        if (s->armed)
                (void) s->io->timer(s->io->userdata, 0);
        while (s->free_batches) {
                RedisBatch *b = s->free_batches;

                s->free_batches = b->next;
                free(b);
        }
        while (s->free_calls) {
                Call *c = s->free_calls;

                s->free_calls = c->batch_next;
                free(c);
        }
        cluster_map_clear(&s->map);
        free(s->scratch);
        free(s->argv);
        free(s->argvlen);
        explicit_bzero(&s->url, sizeof(s->url));
        free(s);
        return NULL;
}

static int add_node(RedisStore *s, Node *n) {
        if (s->n_nodes == s->nodes_cap && redis_nodes_grow(s, s->nodes_cap ? s->nodes_cap * 2 : 4) < 0)
                return -ENOMEM;
        s->nodes[s->n_nodes++] = n;
        return 0;
}

int redis_store_open(const RedisStoreOptions *o, const RedisIo *io, RedisStore **ret, char *errbuf,
                     size_t size) {
        RedisStore *s;
        uint64_t now = now_usec();
        int r;

        if (!o || !io || !io->watch || !io->timer) {
                if (errbuf)
                        snprintf(errbuf, size, "no options or event loop for the Redis store");
                return -EINVAL;
        }
        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        cluster_map_init(&s->map);
        s->io = io;
        s->o = *o;
        r = redis_url_parse(o->url, &s->url, errbuf, size);
        if (r < 0)
                goto fail;
        if (o->user)
                snprintf(s->url.user, sizeof(s->url.user), "%s", o->user);
        if (o->password)
                snprintf(s->url.password, sizeof(s->url.password), "%s", o->password);
        s->o.url = NULL;
        s->o.user = s->url.user;
        s->o.password = s->url.password;
        if (!s->o.timeout_usec)
                s->o.timeout_usec = REDIS_STORE_TIMEOUT_DEFAULT_USEC;
        if (!s->o.connect_timeout_usec)
                s->o.connect_timeout_usec = REDIS_STORE_CONNECT_TIMEOUT_DEFAULT_USEC;
        if (!s->o.backoff_min_usec)
                s->o.backoff_min_usec = REDIS_STORE_BACKOFF_MIN_DEFAULT_USEC;
        if (!s->o.backoff_max_usec)
                s->o.backoff_max_usec = REDIS_STORE_BACKOFF_MAX_DEFAULT_USEC;
        if (s->o.backoff_max_usec < s->o.backoff_min_usec)
                s->o.backoff_max_usec = s->o.backoff_min_usec;
        if (!s->o.breaker_threshold)
                s->o.breaker_threshold = REDIS_STORE_BREAKER_THRESHOLD_DEFAULT;
        if (!s->o.sentinel_check_usec)
                s->o.sentinel_check_usec = REDIS_STORE_SENTINEL_CHECK_USEC;
        s->breaker_backoff = s->o.backoff_min_usec;
        s->rng = (now ^ ((uint64_t) getpid() << 32) ^ (uint64_t) (uintptr_t) s) | 1;

        switch (s->url.mode) {
        case REDIS_MODE_SINGLE: {
                Node *n = redis_node_new(s, NULL);

                if (!n || add_node(s, n) < 0) {
                        redis_node_free(n);
                        r = -ENOMEM;
                        goto fail;
                }
                if (s->url.unix_path[0])
                        r = redis_addr_from_unix(&n->addr, s->url.unix_path);
                else
                        r = redis_addr_from_host(&n->addr, s->url.hosts[0].host, s->url.hosts[0].port, false,
                                                 errbuf, size);
                if (r < 0) {
                        if (errbuf && r == -ENAMETOOLONG)
                                snprintf(errbuf, size, "socket path too long: %s", s->url.unix_path);
                        goto fail;
                }
                n->have_addr = true;
                (void) redis_node_connect(n, now); /* a server down is retried, not an error */
                break;
        }
        case REDIS_MODE_SENTINEL: {
                Node *p = redis_node_new(s, NULL);

                if (!p || add_node(s, p) < 0) {
                        redis_node_free(p);
                        r = -ENOMEM;
                        goto fail;
                }
                s->sentinel = redis_node_new(s, redis_sentinel_event);
                if (!s->sentinel) {
                        r = -ENOMEM;
                        goto fail;
                }
                for (size_t i = 0; i < s->url.n_hosts; i++) {
                        r = redis_addr_from_host(&s->sentinel_addrs[i], s->url.hosts[i].host,
                                                 s->url.hosts[i].port, false, errbuf, size);
                        if (r < 0)
                                goto fail;
                        s->watches[i] = redis_node_new(s, redis_sentinel_event);
                        if (!s->watches[i]) {
                                r = -ENOMEM;
                                goto fail;
                        }
                        s->watches[i]->watch = true;
                        s->watches[i]->addr = s->sentinel_addrs[i];
                        s->watches[i]->have_addr = true;
                        redis_conn_set_push(s->watches[i]->conn, redis_sentinel_watch_message,
                                            s->watches[i]);
                        (void) redis_sentinel_watch_connect(s->watches[i],
                                                            now); /* a sentinel down is retried */
                }
                redis_sentinel_discover(s, now);
                break;
        }
        case REDIS_MODE_CLUSTER:
                for (size_t i = 0; i < s->url.n_hosts; i++) {
                        Node *n;

                        r = cluster_map_node_add(&s->map, s->url.hosts[i].host, strlen(s->url.hosts[i].host),
                                                 (uint16_t) s->url.hosts[i].port);
                        if (r < 0)
                                goto fail;
                        if ((size_t) r < s->n_nodes)
                                continue; /* the same seed twice */
                        n = redis_node_new(s, NULL);
                        if (!n || add_node(s, n) < 0) {
                                redis_node_free(n);
                                r = -ENOMEM;
                                goto fail;
                        }
                        snprintf(n->host, sizeof(n->host), "%s", s->url.hosts[i].host);
                        n->port = s->url.hosts[i].port;
                        r = redis_addr_from_host(&n->addr, n->host, n->port, false, errbuf, size);
                        if (r < 0)
                                goto fail;
                        n->have_addr = true;
                }
                redis_map_refresh(s, now);
                break;
        default:
                r = -EINVAL;
                goto fail;
        }
        flush_dirty(s);
        run_due(s, now);
        *ret = s;
        return 0;
fail:
        redis_store_close(s);
        return r;
}
