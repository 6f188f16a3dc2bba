/* SPDX-License-Identifier: MIT */
#include "store/redis-store-internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/number.h"
#include "store/redis-cluster.h"
#include "store/redis-script.h"

#define KEY_MAX_GUESS 256 /* bytes: scratch reserved per key before a build (it grows if short) */

static void node_event(void *userdata, int error);
static void call_reply(void *userdata, redisReply *r, int error);
static void cluster_redirect(Call *c, Node *n, redisReply *r, uint64_t now);
static int cluster_nodes_sync(RedisStore *s);

/* ---- nodes ---- */

/* The arguments may point into last_error itself ("... (last: %s)", s->st.last_error): format
 * into a copy first, vsnprintf()'s source and destination must not overlap. */
void redis_set_error(RedisStore *s, const char *fmt, ...) {
        char buf[sizeof(s->st.last_error)];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        memcpy(s->st.last_error, buf, sizeof(buf));
}

static bool is_connection_error(int e) {
        return e != -EIO && e != -EPROTO && e != -EROFS && e != -EAGAIN && e != -ELOOP && e != -ECANCELED &&
               e != -ENOBUFS && e != -ENOMEM && e != -ERANGE && e != -EINVAL;
}

Node *redis_node_new(RedisStore *s, RedisConnEventFunc on_sentinel_event) {
        bool sentinel = on_sentinel_event != NULL;
        RedisConnOptions o = {
                .user = s->o.user && s->o.user[0] ? s->o.user : NULL,
                .password = s->o.password && s->o.password[0] ? s->o.password : NULL,
                .db = s->url.db,
        };
        Node *n = calloc(1, sizeof(*n));

        if (!n)
                return NULL;
        n->s = s;
        n->sentinel = sentinel;
        n->backoff = s->o.backoff_min_usec;
        if (sentinel)
                o = (RedisConnOptions){ 0 };
        if (redis_conn_new(s->io, &o, sentinel ? on_sentinel_event : node_event, n, &n->conn) < 0) {
                free(n);
                return NULL;
        }
        return n;
}

Node *redis_node_free(Node *n) {
        if (!n)
                return NULL;
        redis_conn_free(n->conn);
        free(n);
        return NULL;
}

/* A failed node: closed, reconnect not before its backoff. */
void redis_node_backoff(Node *n, uint64_t now) {
        RedisStore *s = n->s;

        n->retry_at = now + jitter(s, n->backoff);
        n->backoff = n->backoff * 2 > s->o.backoff_max_usec ? s->o.backoff_max_usec : n->backoff * 2;
        n->connect_deadline = 0;
        n->healthy = false;
        n->failed = true;
}

void redis_node_healthy(Node *n) {
        n->healthy = true;
        n->failed = false;
        n->connect_deadline = 0;
        n->backoff = n->s->o.backoff_min_usec;
        n->timeout_streak = 0;
}

static void script_load_reply(void *userdata, redisReply *r, int error) {
        Node *n = userdata;

        if (error < 0 || !r)
                return;
        if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "LOADING", 7) == 0) {
                /* Restarted, reading its dataset: it answers every command so until done. It is
                 * not up: closed (the calls queued behind fail as refused) and retried with the
                 * backoff, as a server that does not accept yet. */
                redis_conn_disconnect(n->conn, -ECONNREFUSED);
                redis_set_error(n->s, "%s: %.200s", n->addr.name, r->str);
                return;
        }
        if (r->type == REDIS_REPLY_ERROR)
                redis_set_error(n->s, "%s: SCRIPT LOAD failed: %.200s", n->addr.name, r->str);
        else if (r->type != REDIS_REPLY_STRING || strcmp(r->str, redis_script_sha1) != 0)
                redis_set_error(n->s, "%s: SCRIPT LOAD returned another SHA1 than %s", n->addr.name,
                                redis_script_sha1);
        if (n->s->url.mode != REDIS_MODE_SENTINEL)
                redis_node_healthy(n); /* it answers (an error reply too: NOSCRIPT recovers) */
}

static void role_reply(void *userdata, redisReply *r, int error) {
        Node *n = userdata;
        RedisStore *s = n->s;

        if (error < 0 || !r)
                return;
        if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->type == REDIS_REPLY_STRING &&
            strcmp(r->element[0]->str, "master") == 0) {
                redis_node_healthy(n);
                return;
        }
        redis_set_error(s, "%s: not a primary (ROLE: %.40s): asking the sentinels again", n->addr.name,
                        r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                                        r->element[0]->type == REDIS_REPLY_STRING
                                ? r->element[0]->str
                                : "?");
        redis_conn_disconnect(n->conn, -EROFS);
}

/* Starts connecting n (its address known): the handshake, SCRIPT LOAD (ROLE for a Sentinel's
 * primary). Returns 0 or -errno (n backs off). */
int redis_node_connect(Node *n, uint64_t now) {
        RedisStore *s = n->s;
        const char *load[3] = { "SCRIPT", "LOAD", redis_script_text };
        size_t loadlen[3] = { 6, 4, strlen(redis_script_text) };
        int r;

        if (n->attempted)
                s->st.reconnects++;
        n->attempted = true;
        n->healthy = false;
        r = redis_conn_connect(n->conn, &n->addr);
        if (r < 0) {
                redis_set_error(s, "%s", redis_conn_last_error(n->conn));
                redis_node_backoff(n, now);
                return r;
        }
        n->connect_deadline = now + s->o.connect_timeout_usec;
        if (!n->sentinel) {
                r = redis_conn_command(n->conn, 3, load, loadlen, script_load_reply, n, NULL);
                if (r >= 0 && s->url.mode == REDIS_MODE_SENTINEL)
                        r = redis_conn_command(n->conn, 1, (const char *[]){ "ROLE" }, (size_t[]){ 4 },
                                               role_reply, n, NULL);
                if (r < 0) {
                        redis_conn_disconnect(n->conn, r);
                        return r;
                }
        }
        n->dirty = true;
        return 0;
}

/* ---- calls ---- */

static void park(Call *c, uint64_t not_before) {
        RedisStore *s = c->s;

        c->parked = true;
        c->not_before = not_before;
        c->park_next = NULL;
        if (s->parked_tail)
                s->parked_tail->park_next = c;
        else
                s->parked = c;
        s->parked_tail = c;
}

void redis_call_unpark(Call *c) {
        RedisStore *s = c->s;
        Call *prev = NULL;

        for (Call *i = s->parked; i; prev = i, i = i->park_next)
                if (i == c) {
                        if (prev)
                                prev->park_next = c->park_next;
                        else
                                s->parked = c->park_next;
                        if (s->parked_tail == c)
                                s->parked_tail = prev;
                        break;
                }
        c->parked = false;
        c->park_next = NULL;
}

/* Takes the first call off list (a parked list taken whole from the store), NULL at its end. */
static Call *parked_pop(Call **list) {
        Call *c = *list;

        if (c) {
                *list = c->park_next;
                c->parked = false;
                c->park_next = NULL;
        }
        return c;
}

/* Sends every parked call that may go now (in order); those still without a route park again. */
void redis_dispatch_parked(RedisStore *s, uint64_t now) {
        Call *list = s->parked, *c;

        s->parked = s->parked_tail = NULL;
        while ((c = parked_pop(&list))) {
                if (c->not_before > now)
                        park(c, c->not_before);
                else
                        redis_call_send(c, now);
        }
}

void redis_fail_parked(RedisStore *s, int error) {
        Call *list = s->parked, *c;

        s->parked = s->parked_tail = NULL;
        while ((c = parked_pop(&list)))
                redis_call_finish(c, error);
}

static bool hit_compat(const RedisStore *s, const StoreHit *h) {
        return s->url.mode != REDIS_MODE_CLUSTER && h->rule && rule_divvy_keys(h->rule);
}

static int scratch_grow(RedisStore *s, size_t want) {
        char *p;

        if (want <= s->scratch_cap)
                return 0;
        p = realloc(s->scratch, want);
        if (!p)
                return -ENOMEM;
        s->scratch = p;
        s->scratch_cap = want;
        return 0;
}

static int argv_grow(RedisStore *s, size_t argc) {
        const char **a;
        size_t *l;

        if (argc <= s->argv_cap)
                return 0;
        a = realloc(s->argv, argc * sizeof(*a));
        if (!a)
                return -ENOMEM;
        s->argv = a;
        l = realloc(s->argvlen, argc * sizeof(*l));
        if (!l)
                return -ENOMEM;
        s->argvlen = l;
        s->argv_cap = argc;
        return 0;
}

/* The key of hit h into buf; its length or -ENOBUFS/-EINVAL. */
static int hit_key(const RedisStore *s, const StoreHit *h, char *buf, size_t size) {
        return hit_compat(s, h) ? redis_key_compat(h, buf, size) : redis_key_own(h, buf, size);
}

/* The cluster slot of h's key (0 if it cannot be built: the call then fails as it is built). */
uint16_t redis_hit_slot(RedisStore *s, const StoreHit *h) {
        int len;

        if (scratch_grow(s, h->actor_len + 128) < 0)
                return 0;
        len = redis_key_own(h, s->scratch, s->scratch_cap);
        return len >= 0 ? cluster_key_slot(s->scratch, (size_t) len) : 0;
}

/* Builds c's EVALSHA (or EVAL) into s->argv; returns argc or -errno. */
static int call_build(RedisStore *s, const Call *c) {
        const StoreHit *hits = c->batch->hits + c->first;
        size_t argc = 4 + c->n + c->n * REDIS_SCRIPT_ARGS_PER_HIT, off, k;
        int r;

        r = argv_grow(s, argc);
        if (r < 0)
                return r;
        for (;;) {
                size_t need = 32 + c->n * (KEY_MAX_GUESS + REDIS_SCRIPT_HIT_ARGS_SIZE);
                bool again = false;

                r = scratch_grow(s, need);
                if (r < 0)
                        return r;
                off = 0;
                k = 0;
                s->argv[k] = c->eval ? "EVAL" : "EVALSHA";
                s->argvlen[k++] = c->eval ? 4 : 7;
                s->argv[k] = c->eval ? redis_script_text : redis_script_sha1;
                s->argvlen[k++] = strlen(s->argv[1]);
                s->argv[k] = s->scratch + off;
                s->argvlen[k++] = (size_t) (number_append_u64(s->scratch + off, c->n) - (s->scratch + off));
                off += 24;
                for (size_t i = 0; i < c->n; i++) {
                        r = hit_key(s, &hits[i], s->scratch + off, s->scratch_cap - off);
                        if (r == -ENOBUFS) {
                                again = true;
                                break;
                        }
                        if (r < 0)
                                return r;
                        s->argv[k] = s->scratch + off;
                        s->argvlen[k++] = (size_t) r;
                        off += (size_t) r + 1;
                }
                if (again) {
                        r = scratch_grow(s, s->scratch_cap * 2 + 4096);
                        if (r < 0)
                                return r;
                        continue;
                }
                s->argv[k] = "0"; /* now: the server's TIME */
                s->argvlen[k++] = 1;
                for (size_t i = 0; i < c->n; i++) {
                        if (s->scratch_cap - off < REDIS_SCRIPT_HIT_ARGS_SIZE) {
                                again = true;
                                break;
                        }
                        r = redis_script_hit_args(&hits[i], hit_compat(s, &hits[i]), 0, s->scratch + off,
                                                  REDIS_SCRIPT_HIT_ARGS_SIZE, s->argv + k, s->argvlen + k);
                        if (r < 0)
                                return r;
                        k += REDIS_SCRIPT_ARGS_PER_HIT;
                        off += REDIS_SCRIPT_HIT_ARGS_SIZE;
                }
                if (again) {
                        r = scratch_grow(s, s->scratch_cap * 2 + 4096);
                        if (r < 0)
                                return r;
                        continue;
                }
                return (int) k;
        }
}

/* The node a call goes to now: NULL with *ret_park (no route yet: wait) or *ret_error. */
static Node *call_route(Call *c, bool *ret_park, int *ret_error) {
        RedisStore *s = c->s;
        int idx;

        *ret_park = false;
        *ret_error = 0;
        switch (s->url.mode) {
        case REDIS_MODE_SENTINEL:
                if (failover_held(s)) {
                        c->batch->held = true;
                        *ret_error = -ECONNREFUSED;
                        return NULL;
                }
                if (!s->primary_known) {
                        if (s->discovering) {
                                *ret_park = true;
                                return NULL;
                        }
                        *ret_error = -ECONNREFUSED;
                        return NULL;
                }
                return s->nodes[0];
        case REDIS_MODE_CLUSTER:
                if (c->ask_node >= 0)
                        idx = c->ask_node;
                else {
                        if (!s->have_map) {
                                *ret_park = true;
                                return NULL;
                        }
                        idx = cluster_map_lookup(&s->map, c->slot);
                        if (idx < 0) {
                                /* a slot no node serves: the map may be old */
                                s->map_stale = true;
                                *ret_error = -EAGAIN;
                                return NULL;
                        }
                }
                if ((size_t) idx >= s->n_nodes || !s->nodes[idx]) {
                        *ret_error = -ECONNREFUSED;
                        return NULL;
                }
                return s->nodes[idx];
        default:
                return s->nodes[0];
        }
}

/* Sends (or parks, or fails) c. */
void redis_call_send(Call *c, uint64_t now) {
        RedisStore *s = c->s;
        bool wait;
        int error, argc, r;
        Node *n;

        if (s->url.mode == REDIS_MODE_CLUSTER)
                (void) cluster_nodes_sync(s);
        n = call_route(c, &wait, &error);
        if (wait) {
                park(c, 0);
                return;
        }
        if (!n) {
                redis_call_finish(c, error);
                return;
        }
        if (redis_conn_state(n->conn) == REDIS_CONN_CLOSED) {
                if (!n->have_addr) {
                        redis_set_error(s, "%s", n->error);
                        redis_call_finish(c, -ECONNREFUSED);
                        return;
                }
                if (now < n->retry_at || redis_node_connect(n, now) < 0) {
                        redis_call_finish(c, -ECONNREFUSED);
                        return;
                }
        }
        argc = call_build(s, c);
        if (argc < 0) {
                redis_set_error(s, "cannot build a script call: %s", strerror(-argc));
                redis_call_finish(c, argc);
                return;
        }
        if (c->ask_node >= 0) {
                r = redis_conn_command(n->conn, 1, (const char *[]){ "ASKING" }, (size_t[]){ 6 }, NULL, NULL,
                                       NULL);
                c->ask_node = -1;
                if (r < 0) {
                        redis_call_finish(c, r);
                        return;
                }
        }
        r = redis_conn_command(n->conn, argc, s->argv, s->argvlen, call_reply, c, &c->conn_seq);
        if (r < 0) {
                redis_set_error(s, "%s: cannot queue a call: %s", n->addr.name, strerror(-r));
                redis_call_finish(c, r == -ENOTCONN ? -ECONNREFUSED : r);
                return;
        }
        c->node = n;
        c->sent_usec = now;
        n->dirty = true;
        s->last_node = n;
}

/* The call has its outcome: error 0 (hits decoded) or < 0 (every hit fails with it). */
void redis_call_finish(Call *c, int error) {
        RedisStore *s = c->s;
        RedisBatch *b = c->batch;

        if (c->done)
                return;
        c->done = true;
        c->node = NULL;
        if (error < 0) {
                for (size_t i = 0; i < c->n; i++)
                        b->hits[c->first + i].error = error;
                s->st.hits_failed += c->n;
                if (error == -ETIMEDOUT)
                        s->st.errors_timeout++;
                else if (error == -ECONNREFUSED && !c->sent_usec)
                        s->st.errors_refused++;
                else if (error == -EPROTO)
                        s->st.errors_protocol++;
                else if (is_connection_error(error))
                        s->st.errors_connection++;
                else
                        s->st.errors_server++;
                if (is_connection_error(error) || error == -ETIMEDOUT)
                        b->failed = true;
        }
        b->calls_left--;
}

static void call_reply(void *userdata, redisReply *r, int error) {
        Call *c = userdata;
        RedisStore *s = c->s;
        Node *n = c->node;
        uint64_t now = now_usec();
        int k;

        if (error < 0) {
                redis_set_error(s, "%s", n ? redis_conn_last_error(n->conn) : "connection failed");
                redis_call_finish(c, error);
                return;
        }
        if (n)
                redis_node_healthy(n);
        c->batch->answered = true;
        if (r->type == REDIS_REPLY_ERROR) {
                if (strncmp(r->str, "NOSCRIPT", 8) == 0 && !c->eval) {
                        s->st.noscript_reloads++;
                        c->eval = true;
                        c->node = NULL;
                        redis_call_send(c, now);
                        return;
                }
                if (s->url.mode == REDIS_MODE_CLUSTER && n) {
                        cluster_redirect(c, n, r, now);
                        return;
                }
                if (strncmp(r->str, "READONLY", 8) == 0) {
                        redis_set_error(s, "%s: READONLY (a replica): %s", n ? n->addr.name : "?",
                                        s->url.mode == REDIS_MODE_SENTINEL ? "asking the sentinels again"
                                                                           : "is the URL a primary's?");
                        redis_call_finish(c, -EROFS);
                        if (n && s->url.mode == REDIS_MODE_SENTINEL)
                                redis_conn_disconnect(n->conn, -EROFS);
                        return;
                }
                redis_set_error(s, "%s: %.300s", n ? n->addr.name : "?", r->str);
                redis_call_finish(c, -EIO);
                return;
        }
        k = redis_script_decode(r, c->batch->hits + c->first, c->n);
        if (k < 0) {
                redis_set_error(s, "%s: the script's reply does not decode", n ? n->addr.name : "?");
                redis_call_finish(c, -EPROTO);
                return;
        }
        if (now > c->sent_usec) {
                uint64_t rtt = now - c->sent_usec;

                s->st.rtt_sum_usec += rtt;
                s->st.rtt_count++;
                if (rtt > s->st.rtt_max_usec)
                        s->st.rtt_max_usec = rtt;
        }
        redis_call_finish(c, 0);
}

int redis_nodes_grow(RedisStore *s, size_t cap) {
        Node **p = realloc(s->nodes, cap * sizeof(*p));

        if (!p)
                return -ENOMEM;
        memset(p + s->nodes_cap, 0, (cap - s->nodes_cap) * sizeof(*p));
        s->nodes = p;
        s->nodes_cap = cap;
        return 0;
}

/* ---- cluster ---- */

/* Makes s->nodes as long as the map's node list, a Node (not yet connected) per new entry. */
static int cluster_nodes_sync(RedisStore *s) {
        if (s->map.n_nodes > s->nodes_cap && redis_nodes_grow(s, s->map.n_nodes * 2) < 0)
                return -ENOMEM;
        for (size_t i = s->n_nodes; i < s->map.n_nodes; i++) {
                Node *n = redis_node_new(s, NULL);
                int r;

                if (!n)
                        return -ENOMEM;
                snprintf(n->host, sizeof(n->host), "%s", s->map.nodes[i].host);
                n->port = s->map.nodes[i].port;
                r = redis_addr_from_host(&n->addr, n->host, n->port, true, n->error, sizeof(n->error));
                n->have_addr = r >= 0;
                s->nodes[i] = n;
                s->n_nodes = i + 1;
        }
        return 0;
}

/* Which nodes serve a slot now: only they make the store down when they are (a node that died
 * and gave its slots to another, a failover or a removal, is no outage), only they are
 * reconnected on their own and probed. */
static void cluster_mark_serving(RedisStore *s) {
        for (size_t i = 0; i < s->n_nodes; i++)
                if (s->nodes[i])
                        s->nodes[i]->serving = false;
        for (size_t slot = 0; slot < CLUSTER_SLOTS; slot++) {
                uint16_t idx = s->map.slot_node[slot];

                if (idx != CLUSTER_NODE_NONE && idx < s->n_nodes && s->nodes[idx])
                        s->nodes[idx]->serving = true;
        }
}

static void slots_reply(void *userdata, redisReply *r, int error) {
        Node *n = userdata;
        RedisStore *s = n->s;
        uint64_t now = now_usec();
        int k;

        s->map_pending = false;
        if (error < 0 || !r) {
                s->map_stale = true;
                s->map_retry_at = now + jitter(s, s->o.backoff_min_usec);
                return;
        }
        redis_node_healthy(n);
        k = cluster_map_from_slots_reply(&s->map, r, n->host);
        if (k < 0) {
                redis_set_error(s, "%s: CLUSTER SLOTS: %s", n->addr.name,
                                r->type == REDIS_REPLY_ERROR ? r->str : "a reply that does not parse");
                s->map_stale = true;
                s->map_retry_at = now + s->o.backoff_max_usec;
                redis_fail_parked(s, -EPROTO);
                return;
        }
        s->have_map = true;
        s->map_stale = false;
        if (cluster_nodes_sync(s) < 0)
                redis_set_error(s, "out of memory for the cluster's nodes");
        cluster_mark_serving(s);
        redis_dispatch_parked(s, now);
}

/* Asks a node for CLUSTER SLOTS (a connected one if any, else the next that may connect). */
void redis_map_refresh(RedisStore *s, uint64_t now) {
        Node *pick = NULL;
        int r;

        if (s->map_pending || now < s->map_retry_at)
                return;
        for (size_t i = 0; i < s->n_nodes && !pick; i++)
                if (s->nodes[i] && s->nodes[i]->healthy &&
                    redis_conn_state(s->nodes[i]->conn) == REDIS_CONN_CONNECTED)
                        pick = s->nodes[i];
        for (size_t i = 0; i < s->n_nodes && !pick; i++) {
                Node *n = s->nodes[(s->map_next + i) % s->n_nodes];

                if (!n || !n->have_addr)
                        continue;
                if (redis_conn_state(n->conn) != REDIS_CONN_CLOSED) {
                        pick = n;
                        break;
                }
                if (now >= n->retry_at && redis_node_connect(n, now) >= 0) {
                        pick = n;
                        s->map_next = (s->map_next + i + 1) % s->n_nodes;
                }
        }
        if (!pick) {
                s->map_retry_at = now + jitter(s, s->o.backoff_min_usec);
                if (!s->have_map)
                        redis_fail_parked(s, -ECONNREFUSED);
                return;
        }
        r = redis_conn_command(pick->conn, 2, (const char *[]){ "CLUSTER", "SLOTS" }, (size_t[]){ 7, 5 },
                               slots_reply, pick, NULL);
        if (r < 0)
                return;
        pick->dirty = true;
        s->map_pending = true;
        s->st.discoveries++;
}

static void cluster_redirect(Call *c, Node *n, redisReply *r, uint64_t now) {
        RedisStore *s = c->s;
        ClusterNode target;
        uint64_t delay;
        uint16_t slot;
        int kind, idx;

        kind = cluster_parse_redirect(r->str, r->len, n->host, &slot, &target);
        switch (kind) {
        case CLUSTER_REDIRECT_MOVED:
        case CLUSTER_REDIRECT_ASK:
                if (++c->redirects > REDIS_STORE_REDIRECTS_MAX) {
                        redis_set_error(s, "%s: more than %d redirects for one call (%.100s)", n->addr.name,
                                        REDIS_STORE_REDIRECTS_MAX, r->str);
                        redis_call_finish(c, -ELOOP);
                        return;
                }
                if (kind == CLUSTER_REDIRECT_MOVED) {
                        idx = cluster_map_set_slot(&s->map, slot, &target);
                        s->st.redirects_moved++;
                        s->map_stale = true;
                } else {
                        idx = cluster_map_node_add(&s->map, target.host, strlen(target.host), target.port);
                        s->st.redirects_ask++;
                        c->ask_node = idx;
                }
                if (idx < 0 || cluster_nodes_sync(s) < 0) {
                        redis_call_finish(c, -EIO);
                        return;
                }
                if (kind == CLUSTER_REDIRECT_MOVED && (size_t) idx < s->n_nodes && s->nodes[idx])
                        s->nodes[idx]->serving = true;
                c->node = NULL;
                redis_call_send(c, now);
                return;
        case CLUSTER_REDIRECT_TRYAGAIN:
                /* The migration may take longer than a few retries: resend until the batch's
                 * deadline, less often as it goes on. */
                delay = c->tryagain >= 8 ? REDIS_STORE_TRYAGAIN_MAX_USEC
                                         : REDIS_STORE_TRYAGAIN_DELAY_USEC << c->tryagain;
                if (delay > REDIS_STORE_TRYAGAIN_MAX_USEC)
                        delay = REDIS_STORE_TRYAGAIN_MAX_USEC;
                if (now + delay >= c->batch->deadline) {
                        redis_set_error(s, "%s: %.200s (until the batch's deadline)", n->addr.name, r->str);
                        redis_call_finish(c, -EAGAIN);
                        return;
                }
                if (c->tryagain < UINT8_MAX)
                        c->tryagain++;
                s->st.tryagain++;
                c->node = NULL;
                park(c, now + delay);
                return;
        case CLUSTER_REDIRECT_CLUSTERDOWN:
                redis_set_error(s, "%s: %.200s", n->addr.name, r->str);
                s->map_stale = true;
                redis_call_finish(c, -EAGAIN);
                return;
        default:
                if (kind < 0)
                        redis_set_error(s, "%s: a redirect that does not parse: %.200s", n->addr.name,
                                        r->str);
                else
                        redis_set_error(s, "%s: %.300s", n->addr.name, r->str);
                redis_call_finish(c, kind < 0 ? -EPROTO : -EIO);
                return;
        }
}

/* ---- connection events ---- */

/* A data node's connection opened (0) or closed (< 0; its pending calls have failed). */
static void node_event(void *userdata, int error) {
        Node *n = userdata;
        RedisStore *s = n->s;
        uint64_t now;

        if (error == 0 || s->closing)
                return;
        now = now_usec();
        redis_set_error(s, "%s", redis_conn_last_error(n->conn));
        redis_node_backoff(n, now);
        if (s->url.mode == REDIS_MODE_SENTINEL && n == s->nodes[0]) {
                s->primary_known = false;
                s->discover_at = n->retry_at;
        } else if (s->url.mode == REDIS_MODE_CLUSTER)
                s->map_stale = true;
}

/* ---- the breaker's probe ---- */

/* Ends the breaker's own probe, if one is in flight: the PINGs still unanswered are abandoned
 * (their replies are read and dropped). */
void redis_probe_cancel(RedisStore *s) {
        if (s->probe_pings == 0)
                return;
        for (size_t i = 0; i < s->n_nodes; i++) {
                Node *n = s->nodes[i];

                if (n && n->pinging) {
                        (void) redis_conn_abandon(n->conn, n->ping_seq);
                        n->pinging = false;
                }
        }
        s->probe_pings = 0;
}

void redis_breaker_close(RedisStore *s) {
        redis_probe_cancel(s);
        s->fail_streak = 0;
        s->breaker = BREAKER_CLOSED;
        s->breaker_backoff = s->o.backoff_min_usec;
}
