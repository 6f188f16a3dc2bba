/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * What the Redis store's files share (not for other files: they use redis-store.h). The store
 * is three files, which call each other one way only (tests/check-layout.sh):
 *   redis-store.c     the API (submit, io, timer, stats, open, close), the FIFO of batches,
 *                     the circuit breaker and its probe, the periodic work;
 *   redis-sentinel.c  Sentinel: the lookup of the primary, its failover events and holds;
 *   redis-call.c      the nodes (connections and their handshake) and the script calls: built,
 *                     routed (the one server, the Sentinel's primary, or the cluster's slot
 *                     map, refreshed from CLUSTER SLOTS, and its redirects), sent, decoded.
 * redis-store.c calls both others, redis-sentinel.c calls redis-call.c, and redis-call.c calls
 * neither (a Sentinel's connection events reach redis-sentinel.c through the callback
 * redis_node_new() is given).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "shared/clock.h"
#include "store/redis-cluster.h"
#include "store/redis-conn.h"
#include "store/redis-store.h"

typedef struct RedisBatch RedisBatch;
typedef struct Node Node;

/* One script call: hits[first, first + n) of its batch. */
typedef struct Call {
        RedisStore *s;
        RedisBatch *batch;
        struct Call *batch_next; /* the batch's calls */
        struct Call *park_next;  /* the parked list (no route yet, or a TRYAGAIN delay) */
        size_t first, n;
        Node *node;        /* where it was sent (its reply is awaited); NULL: not in flight */
        uint64_t conn_seq; /* its command on node->conn (redis_conn_abandon()) */
        uint64_t sent_usec;
        uint64_t not_before; /* parked: not before (TRYAGAIN); 0: as soon as routed */
        int ask_node;        /* cluster: ASK's node index, for the next send only; -1: none */
        uint16_t slot;       /* cluster: its keys' slot */
        uint8_t redirects, tryagain;
        bool eval;   /* send EVAL with the text (after NOSCRIPT) */
        bool parked; /* on the parked list */
        bool done;
} Call;

struct RedisBatch {
        RedisBatch *next; /* the FIFO, or the free list */
        StoreHit *hits;   /* its calls' hits[first, first + n) */
        StoreDoneFunc done;
        void *userdata;
        uint64_t submitted; /* µs, CLOCK_MONOTONIC */
        uint64_t deadline;
        Call *calls;
        size_t calls_left;
        bool failed;   /* a hit failed for a connection error or a timeout (the breaker's) */
        bool answered; /* a call had a reply (an error reply too): the store answers */
        bool refused;  /* refused at once by the breaker (not counted by it) */
        bool probe;    /* the half-open breaker's probe */
        bool held;     /* Sentinel: a call failed at once, the primary held by a failover */
};

struct Node {
        RedisStore *s;
        RedisConn *conn;
        RedisAddr addr;
        char host[REDIS_URL_HOST_MAX + 1]; /* as in the URL or the map (cluster's default host) */
        int port;
        bool have_addr;
        bool sentinel;             /* a sentinel, asked where the primary is */
        bool attempted;            /* a connect was tried (later ones count as reconnects) */
        bool healthy;              /* a reply came since the connect */
        bool failed;               /* closed by a failure, no reply since: reconnecting is an outage */
        bool dirty;                /* commands queued since the last flush */
        bool serving;              /* cluster: the map names it for a slot (cluster_mark_serving()) */
        bool pinging;              /* the breaker's own probe (a PING) awaits its reply here */
        bool watch;                /* Sentinel: a subscription to a sentinel's failover events */
        bool failing_over;         /* watch: its sentinel fails our primary over (the store holds it) */
        uint64_t failover_at;      /* watch: since when (the hold's bound) */
        uint64_t ping_seq;         /* its command on conn (redis_conn_abandon()) */
        uint64_t connect_deadline; /* connecting, no reply yet: give up then (0: none) */
        uint64_t retry_at;         /* closed after a failure: no connect before */
        uint64_t backoff;
        /* Batches in a row with a call timed out on this node, each submitted after the last
         * counted one had timed out (batches in flight together during one stall count once),
         * with no reply in between (a late reply shows a slow server, not a dead one): at
         * breaker_threshold the connection is closed and made again. */
        unsigned timeout_streak;
        uint64_t streak_replies;               /* redis_conn_replies() when the streak last grew */
        uint64_t streak_at;                    /* µs: when it last grew */
        char error[REDIS_ADDR_NAME_MAX + 256]; /* why it cannot be used (no address) */
};

typedef enum Breaker { BREAKER_CLOSED, BREAKER_OPEN, BREAKER_HALF_OPEN } Breaker;

struct RedisStore {
        RedisStoreOptions o; /* defaults filled in; url, user, password point into url/own */
        RedisUrl url;
        const RedisIo *io;
        uint64_t armed; /* the timer last asked for */

        Node **nodes; /* single, sentinel: [0] the primary; cluster: by the map's node index */
        size_t n_nodes, nodes_cap;

        /* Sentinel */
        Node *sentinel; /* the connection asking (its addr changes in turn) */
        RedisAddr sentinel_addrs[REDIS_URL_HOSTS_MAX];
        size_t sentinel_next, sentinel_tries;
        bool discovering;
        bool rechecking; /* the lookup in flight is the periodic one: the primary stays in use */
        bool primary_known;
        uint64_t discover_at; /* the next lookup (after a failure or a lost primary); 0: none due */
        uint64_t recheck_at;  /* the next periodic lookup */
        Node *watches[REDIS_URL_HOSTS_MAX]; /* one subscription per sentinel (url.n_hosts) */
        char demoted[REDIS_ADDR_NAME_MAX];  /* the primary a failover left ("" : none) */
        uint64_t demoted_until;             /* not followed again before */

        /* Cluster */
        ClusterMap map;
        bool have_map;
        bool map_pending; /* a CLUSTER SLOTS is in flight */
        bool map_stale;   /* refresh when possible */
        uint64_t map_retry_at;
        size_t map_next; /* the node to ask next */

        /* Batches: FIFO; free lists of batches and calls. */
        RedisBatch *head, *tail, *free_batches;
        Call *free_calls;
        Call *parked, *parked_tail;
        bool completing;
        bool closing; /* redis_store_close(): connection events change nothing */

        /* scratch for building a call's arguments */
        char *scratch;
        size_t scratch_cap;
        const char **argv;
        size_t *argvlen;
        size_t argv_cap;

        Breaker breaker;
        unsigned fail_streak;
        uint64_t fail_at; /* µs: when the streak last grew */
        uint64_t breaker_until;
        uint64_t breaker_backoff;
        /* The breaker's own probe, so that an idle daemon sees Redis come back: once the open
         * period is over and no batch came to be the probe, a PING to each node (breaker HALF_OPEN
         * meanwhile; batches are refused as during any probe). */
        unsigned probe_pings;    /* its PINGs still unanswered (0: no probe under way) */
        uint64_t probe_deadline; /* no reply by then: the probe failed */
        uint64_t rng;

        const Node *last_node; /* the last a call was sent to (cluster: the stats' address) */
        RedisStoreStats st;
};

/* ---- small helpers ---- */

static inline uint64_t now_usec(void) {
        return clock_usec(CLOCK_MONOTONIC);
}

/* d jittered into [d/2, d]: a fleet's reconnects do not arrive together. */
static inline uint64_t jitter(RedisStore *s, uint64_t d) {
        uint64_t x = s->rng;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s->rng = x;
        return d / 2 + (d / 2 > 0 ? x % (d / 2 + 1) : 0);
}

/* *next becomes t if t is earlier (0: no deadline, on either side). */
static inline void consider_deadline(uint64_t *next, uint64_t t) {
        if (t != 0 && (*next == 0 || t < *next))
                *next = t;
}

/* Sentinel: whether a sentinel is failing our primary over (no call may go to it). */
static inline bool failover_held(const RedisStore *s) {
        for (size_t i = 0; i < s->url.n_hosts; i++)
                if (s->watches[i] && s->watches[i]->failing_over)
                        return true;
        return false;
}

/* A node a call may need: every node before the first map, then those serving a slot. */
static inline bool node_in_use(const RedisStore *s, const Node *n) {
        return s->url.mode != REDIS_MODE_CLUSTER || !s->have_map || n->serving;
}

/* ---- redis-call.c ---- */

/* The store's last error sentence (RedisStoreStats.last_error); the arguments may point into it. */
void redis_set_error(RedisStore *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A node (not connected): a data node if on_sentinel_event is NULL, else a connection to a
 * sentinel whose connection events go to on_sentinel_event. NULL if out of memory. */
Node *redis_node_new(RedisStore *s, RedisConnEventFunc on_sentinel_event);
Node *redis_node_free(Node *n); /* accepts NULL; returns NULL */
/* A failed node: closed, reconnect not before its backoff. */
void redis_node_backoff(Node *n, uint64_t now);
/* A reply came: its backoff and timeout streak start again. */
void redis_node_healthy(Node *n);
/* Starts connecting n (its address known): the handshake, SCRIPT LOAD (ROLE for a Sentinel's
 * primary). Returns 0 or -errno (n backs off). */
int redis_node_connect(Node *n, uint64_t now);

/* Grows s->nodes to cap (> nodes_cap) entries, the new ones NULL. Returns 0 or -ENOMEM. */
int redis_nodes_grow(RedisStore *s, size_t cap);

/* Sends (or parks, or fails) c. */
void redis_call_send(Call *c, uint64_t now);
/* The call has its outcome: error 0 (hits decoded) or < 0 (every hit fails with it). */
void redis_call_finish(Call *c, int error);
/* Takes c off the parked list. */
void redis_call_unpark(Call *c);
/* Sends every parked call that may go now (in order); those still without a route park again. */
void redis_dispatch_parked(RedisStore *s, uint64_t now);
/* Fails every parked call with error. */
void redis_fail_parked(RedisStore *s, int error);
/* The cluster slot of h's key (0 if it cannot be built: the call then fails as it is built). */
uint16_t redis_hit_slot(RedisStore *s, const StoreHit *h);
/* Cluster: asks a node for CLUSTER SLOTS (a connected one if any, else the next that may
 * connect). */
void redis_map_refresh(RedisStore *s, uint64_t now);

/* Ends the breaker's own probe, if one is in flight: the PINGs still unanswered are abandoned
 * (their replies are read and dropped). */
void redis_probe_cancel(RedisStore *s);
/* Closes the breaker (and ends its probe): batches go through again. */
void redis_breaker_close(RedisStore *s);

/* ---- redis-sentinel.c ---- */

/* A sentinel connection's event (redis_node_new()'s on_sentinel_event): the lookup's, or a
 * subscription's. */
void redis_sentinel_event(void *userdata, int error);
/* A lookup because the primary is lost: calls wait for its answer. One already under way (the
 * periodic one) becomes it. */
void redis_sentinel_discover(RedisStore *s, uint64_t now);
/* The periodic lookup, the safety net under the events: the primary stays in use meanwhile. */
void redis_sentinel_recheck(RedisStore *s, uint64_t now);
/* Connects a subscription and queues SENTINEL MASTER, then its PSUBSCRIBEs. Returns 0 or -errno
 * (it backs off). */
int redis_sentinel_watch_connect(Node *w, uint64_t now);
/* A subscription's pushed message (redis_conn_set_push()'s callback; userdata: the Node). */
void redis_sentinel_watch_message(void *userdata, redisReply *r, int error);
/* The subscriptions' periodic work: connects (after their backoff), connect deadlines, the holds'
 * bound. */
void redis_sentinel_watch_due(RedisStore *s, uint64_t now, uint64_t *next);
