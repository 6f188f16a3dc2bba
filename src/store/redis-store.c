/* SPDX-License-Identifier: MIT */
#include "store/redis-store.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/number.h"
#include "shared/clock.h"
#include "shared/macro.h"
#include "store/redis-cluster.h"
#include "store/redis-script.h"

#define KEY_MAX_GUESS 256 /* bytes: scratch reserved per key before a build (it grows if short) */

typedef struct Batch Batch;
typedef struct Node Node;

/* One script call: hits[first, first + n) of its batch. */
typedef struct Call {
        RedisStore *s;
        Batch *batch;
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

struct Batch {
        Batch *next;    /* the FIFO, or the free list */
        StoreHit *hits; /* its calls' hits[first, first + n) */
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
        Batch *head, *tail, *free_batches;
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

/* ---- URLs ---- */

static const struct {
        const char *prefix;
        RedisMode mode;
        bool unix_socket;
} schemes[] = {
        { "redis://", REDIS_MODE_SINGLE, false },
        { "redis+unix://", REDIS_MODE_SINGLE, true },
        { "redis+sentinel://", REDIS_MODE_SENTINEL, false },
        { "redis+cluster://", REDIS_MODE_CLUSTER, false },
};

bool redis_url_is_redis(const char *s) {
        for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
                if (strncmp(s, schemes[i].prefix, strlen(schemes[i].prefix)) == 0)
                        return true;
        return false;
}

/* Copies s[0..len) percent-decoded into out (size bytes); -EINVAL on a bad escape or too long. */
static int url_decode(const char *s, size_t len, char *out, size_t size) {
        size_t k = 0;

        for (size_t i = 0; i < len; i++) {
                char c = s[i];

                if (c == '%') {
                        int h, l;

                        if (i + 2 >= len)
                                return -EINVAL;
                        h = hex_digit_value(s[i + 1]);
                        l = hex_digit_value(s[i + 2]);
                        if (h < 0 || l < 0)
                                return -EINVAL;
                        c = (char) (h * 16 + l);
                        if (c == '\0')
                                return -EINVAL;
                        i += 2;
                }
                if (k + 1 >= size)
                        return -EINVAL;
                out[k++] = c;
        }
        out[k] = '\0';
        return 0;
}

#define URL_FAIL(...)                                                                                       \
        do {                                                                                                \
                if (errbuf)                                                                                 \
                        snprintf(errbuf, size, __VA_ARGS__);                                                \
                return -EINVAL;                                                                             \
        } while (0)

/* One "host[:port]" or "[v6][:port]" of s[0..len). */
static int parse_host(const char *s, size_t len, int default_port, RedisUrlHost *h, char *errbuf,
                      size_t size) {
        const char *host = s, *colon = NULL;
        size_t host_len;
        uint64_t port = (uint64_t) default_port;

        if (len > 0 && s[0] == '[') {
                const char *end = memchr(s, ']', len);

                if (!end)
                        URL_FAIL("'%.*s': no ']' after an IPv6 address", (int) len, s);
                host = s + 1;
                host_len = (size_t) (end - host);
                if ((size_t) (end + 1 - s) < len) {
                        if (end[1] != ':')
                                URL_FAIL("'%.*s': ':port' expected after ']'", (int) len, s);
                        colon = end + 1;
                }
        } else {
                colon = memchr(s, ':', len);
                host_len = colon ? (size_t) (colon - s) : len;
        }
        if (host_len == 0)
                URL_FAIL("'%.*s': empty host", (int) len, s);
        if (host_len > REDIS_URL_HOST_MAX)
                URL_FAIL("host too long (%zu bytes, at most %d)", host_len, REDIS_URL_HOST_MAX);
        if (colon && parse_uint64_n(colon + 1, (size_t) (s + len - colon - 1), 1, 65535, &port) < 0)
                URL_FAIL("'%.*s': bad port (1..65535)", (int) len, s);
        memcpy(h->host, host, host_len);
        h->host[host_len] = '\0';
        h->port = (int) port;
        return 0;
}

int redis_url_parse(const char *url, RedisUrl *ret, char *errbuf, size_t size) {
        RedisUrl u = { 0 };
        const char *p = NULL, *end, *at, *slash, *query, *hosts_end;
        bool unix_socket = false;
        int default_port = REDIS_DEFAULT_PORT, r;

        if (!url)
                URL_FAIL("no URL");
        for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
                if (strncmp(url, schemes[i].prefix, strlen(schemes[i].prefix)) == 0) {
                        p = url + strlen(schemes[i].prefix);
                        u.mode = schemes[i].mode;
                        unix_socket = schemes[i].unix_socket;
                }
        if (!p)
                URL_FAIL("'%s': unknown scheme (redis://, redis+unix://, redis+sentinel://, "
                         "redis+cluster://)",
                         url);
        end = p + strlen(p);
        query = strchr(p, '?');
        if (!query)
                query = end;

        /* ?db=N (unix, sentinel) */
        if (query < end) {
                uint64_t db;

                if (strncmp(query, "?db=", 4) != 0 || u.mode == REDIS_MODE_CLUSTER ||
                    (!unix_socket && u.mode == REDIS_MODE_SINGLE))
                        URL_FAIL("'%s': unknown query '%s' (only ?db=N, for redis+unix and redis+sentinel)",
                                 url, query);
                r = parse_uint64_n(query + 4, (size_t) (end - query - 4), 0, INT_MAX, &db);
                if (r < 0)
                        URL_FAIL("'%s': bad db number '%s'", url, query + 4);
                u.db = (int) db;
        }

        if (unix_socket) {
                size_t len = (size_t) (query - p);

                if (len == 0 || p[0] != '/')
                        URL_FAIL("'%s': redis+unix:// needs an absolute path (redis+unix:///run/redis.sock)",
                                 url);
                if (len >= sizeof(u.unix_path))
                        URL_FAIL("'%s': socket path too long (at most %zu bytes)", url,
                                 sizeof(u.unix_path) - 1);
                memcpy(u.unix_path, p, len);
                u.unix_path[len] = '\0';
                *ret = u;
                return 0;
        }

        /* [user:password@] */
        at = memchr(p, '@', (size_t) (query - p));
        if (at) {
                const char *colon = memchr(p, ':', (size_t) (at - p));

                if (colon) {
                        if (url_decode(p, (size_t) (colon - p), u.user, sizeof(u.user)) < 0 ||
                            url_decode(colon + 1, (size_t) (at - colon - 1), u.password,
                                       sizeof(u.password)) < 0)
                                URL_FAIL("'%s': bad user or password (percent-encoding, length)", url);
                } else if (url_decode(p, (size_t) (at - p), u.password, sizeof(u.password)) < 0)
                        URL_FAIL("'%s': bad password (percent-encoding, length)", url);
                p = at + 1;
        }

        /* hosts, then /db or /mastername */
        slash = memchr(p, '/', (size_t) (query - p));
        hosts_end = slash ? slash : query;
        if (u.mode == REDIS_MODE_SENTINEL)
                default_port = REDIS_SENTINEL_DEFAULT_PORT;
        for (const char *h = p; h <= hosts_end;) {
                const char *comma = memchr(h, ',', (size_t) (hosts_end - h));
                const char *e = comma ? comma : hosts_end;

                if (u.n_hosts == REDIS_URL_HOSTS_MAX)
                        URL_FAIL("'%s': more than %d hosts", url, REDIS_URL_HOSTS_MAX);
                r = parse_host(h, (size_t) (e - h), default_port, &u.hosts[u.n_hosts], errbuf, size);
                if (r < 0)
                        return r;
                u.n_hosts++;
                if (!comma)
                        break;
                h = comma + 1;
        }
        if (u.n_hosts > 1 && u.mode == REDIS_MODE_SINGLE)
                URL_FAIL(
                        "'%s': redis:// takes one host (redis+sentinel:// or redis+cluster:// take several)",
                        url);
        if (u.mode == REDIS_MODE_SENTINEL) {
                size_t len = slash ? (size_t) (query - slash - 1) : 0;

                if (len == 0)
                        URL_FAIL("'%s': the master's name is missing (redis+sentinel://host:port/mymaster)",
                                 url);
                if (len > REDIS_URL_NAME_MAX)
                        URL_FAIL("'%s': master name too long (at most %d bytes)", url, REDIS_URL_NAME_MAX);
                memcpy(u.master, slash + 1, len);
                u.master[len] = '\0';
        } else if (u.mode == REDIS_MODE_CLUSTER) {
                if (slash && slash + 1 < query)
                        URL_FAIL("'%s': a cluster has no database number (only db 0)", url);
        } else if (slash && slash + 1 < query) {
                uint64_t db;

                if (parse_uint64_n(slash + 1, (size_t) (query - slash - 1), 0, INT_MAX, &db) < 0)
                        URL_FAIL("'%s': bad db number '%.*s'", url, (int) (query - slash - 1), slash + 1);
                u.db = (int) db;
        }
        *ret = u;
        return 0;
}

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

/* ---- small helpers ---- */

static uint64_t now_usec(void) {
        return clock_usec(CLOCK_MONOTONIC);
}

/* d jittered into [d/2, d]: a fleet's reconnects do not arrive together. */
static uint64_t jitter(RedisStore *s, uint64_t d) {
        uint64_t x = s->rng;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s->rng = x;
        return d / 2 + (d / 2 > 0 ? x % (d / 2 + 1) : 0);
}

static void set_error(RedisStore *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The arguments may point into last_error itself ("... (last: %s)", s->st.last_error): format
 * into a copy first, vsnprintf()'s source and destination must not overlap. */
static void set_error(RedisStore *s, const char *fmt, ...) {
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

/* ---- nodes ---- */

static void node_event(void *userdata, int error);
static void sentinel_event(void *userdata, int error);

static Node *node_new(RedisStore *s, bool sentinel) {
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
        if (redis_conn_new(s->io, &o, sentinel ? sentinel_event : node_event, n, &n->conn) < 0) {
                free(n);
                return NULL;
        }
        return n;
}

static Node *node_free(Node *n) {
        if (!n)
                return NULL;
        redis_conn_free(n->conn);
        free(n);
        return NULL;
}

/* A failed node: closed, reconnect not before its backoff. */
static void node_backoff(Node *n, uint64_t now) {
        RedisStore *s = n->s;

        n->retry_at = now + jitter(s, n->backoff);
        n->backoff = n->backoff * 2 > s->o.backoff_max_usec ? s->o.backoff_max_usec : n->backoff * 2;
        n->connect_deadline = 0;
        n->healthy = false;
        n->failed = true;
}

static void node_healthy(Node *n) {
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
                set_error(n->s, "%s: %.200s", n->addr.name, r->str);
                return;
        }
        if (r->type == REDIS_REPLY_ERROR)
                set_error(n->s, "%s: SCRIPT LOAD failed: %.200s", n->addr.name, r->str);
        else if (r->type != REDIS_REPLY_STRING || strcmp(r->str, redis_script_sha1) != 0)
                set_error(n->s, "%s: SCRIPT LOAD returned another SHA1 than %s", n->addr.name,
                          redis_script_sha1);
        if (n->s->url.mode != REDIS_MODE_SENTINEL)
                node_healthy(n); /* it answers (an error reply too: NOSCRIPT recovers) */
}

static void role_reply(void *userdata, redisReply *r, int error) {
        Node *n = userdata;
        RedisStore *s = n->s;

        if (error < 0 || !r)
                return;
        if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->type == REDIS_REPLY_STRING &&
            strcmp(r->element[0]->str, "master") == 0) {
                node_healthy(n);
                return;
        }
        set_error(s, "%s: not a primary (ROLE: %.40s): asking the sentinels again", n->addr.name,
                  r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                                  r->element[0]->type == REDIS_REPLY_STRING
                          ? r->element[0]->str
                          : "?");
        redis_conn_disconnect(n->conn, -EROFS);
}

/* Starts connecting n (its address known): the handshake, SCRIPT LOAD (ROLE for a Sentinel's
 * primary). Returns 0 or -errno (n backs off). */
static int node_connect(Node *n, uint64_t now) {
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
                set_error(s, "%s", redis_conn_last_error(n->conn));
                node_backoff(n, now);
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

/* ---- calls and batches ---- */

static void call_finish(Call *c, int error);
static void call_send(Call *c, uint64_t now);
static void map_refresh(RedisStore *s, uint64_t now);
static void discover_start(RedisStore *s, uint64_t now);

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

static void unpark(Call *c) {
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

/* Sends every parked call that may go now (in order); those still without a route park again. */
static void dispatch_parked(RedisStore *s, uint64_t now) {
        Call *list = s->parked, *next;

        s->parked = s->parked_tail = NULL;
        for (Call *c = list; c; c = next) {
                next = c->park_next;
                c->parked = false;
                c->park_next = NULL;
                if (c->not_before > now)
                        park(c, c->not_before);
                else
                        call_send(c, now);
        }
}

static void fail_parked(RedisStore *s, int error) {
        Call *list = s->parked, *next;

        s->parked = s->parked_tail = NULL;
        for (Call *c = list; c; c = next) {
                next = c->park_next;
                c->parked = false;
                c->park_next = NULL;
                call_finish(c, error);
        }
}

static bool hit_compat(const RedisStore *s, const StoreHit *h) {
        return s->url.mode != REDIS_MODE_CLUSTER && h->rule &&
               (!h->algo || h->algo->algorithm == ALGORITHM_FIXED_WINDOW);
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
static uint16_t hit_slot(RedisStore *s, const StoreHit *h) {
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

static void call_reply(void *userdata, redisReply *r, int error);

/* Sentinel: whether a sentinel is failing our primary over (no call may go to it). */
static bool failover_held(const RedisStore *s) {
        for (size_t i = 0; i < s->url.n_hosts; i++)
                if (s->watches[i] && s->watches[i]->failing_over)
                        return true;
        return false;
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

static int cluster_nodes_sync(RedisStore *s);

/* Sends (or parks, or fails) c. */
static void call_send(Call *c, uint64_t now) {
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
                call_finish(c, error);
                return;
        }
        if (redis_conn_state(n->conn) == REDIS_CONN_CLOSED) {
                if (!n->have_addr) {
                        set_error(s, "%s", n->error);
                        call_finish(c, -ECONNREFUSED);
                        return;
                }
                if (now < n->retry_at || node_connect(n, now) < 0) {
                        call_finish(c, -ECONNREFUSED);
                        return;
                }
        }
        argc = call_build(s, c);
        if (argc < 0) {
                set_error(s, "cannot build a script call: %s", strerror(-argc));
                call_finish(c, argc);
                return;
        }
        if (c->ask_node >= 0) {
                r = redis_conn_command(n->conn, 1, (const char *[]){ "ASKING" }, (size_t[]){ 6 }, NULL, NULL,
                                       NULL);
                c->ask_node = -1;
                if (r < 0) {
                        call_finish(c, r);
                        return;
                }
        }
        r = redis_conn_command(n->conn, argc, s->argv, s->argvlen, call_reply, c, &c->conn_seq);
        if (r < 0) {
                set_error(s, "%s: cannot queue a call: %s", n->addr.name, strerror(-r));
                call_finish(c, r == -ENOTCONN ? -ECONNREFUSED : r);
                return;
        }
        c->node = n;
        c->sent_usec = now;
        n->dirty = true;
        s->last_node = n;
}

/* The call has its outcome: error 0 (hits decoded) or < 0 (every hit fails with it). */
static void call_finish(Call *c, int error) {
        RedisStore *s = c->s;
        Batch *b = c->batch;

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

static void cluster_redirect(Call *c, Node *n, redisReply *r, uint64_t now);

static void call_reply(void *userdata, redisReply *r, int error) {
        Call *c = userdata;
        RedisStore *s = c->s;
        Node *n = c->node;
        uint64_t now = now_usec();
        int k;

        if (error < 0) {
                set_error(s, "%s", n ? redis_conn_last_error(n->conn) : "connection failed");
                call_finish(c, error);
                return;
        }
        if (n)
                node_healthy(n);
        c->batch->answered = true;
        if (r->type == REDIS_REPLY_ERROR) {
                if (strncmp(r->str, "NOSCRIPT", 8) == 0 && !c->eval) {
                        s->st.noscript_reloads++;
                        c->eval = true;
                        c->node = NULL;
                        call_send(c, now);
                        return;
                }
                if (s->url.mode == REDIS_MODE_CLUSTER && n) {
                        cluster_redirect(c, n, r, now);
                        return;
                }
                if (strncmp(r->str, "READONLY", 8) == 0) {
                        set_error(s, "%s: READONLY (a replica): %s", n ? n->addr.name : "?",
                                  s->url.mode == REDIS_MODE_SENTINEL ? "asking the sentinels again"
                                                                     : "is the URL a primary's?");
                        call_finish(c, -EROFS);
                        if (n && s->url.mode == REDIS_MODE_SENTINEL)
                                redis_conn_disconnect(n->conn, -EROFS);
                        return;
                }
                set_error(s, "%s: %.300s", n ? n->addr.name : "?", r->str);
                call_finish(c, -EIO);
                return;
        }
        k = redis_script_decode(r, c->batch->hits + c->first, c->n);
        if (k < 0) {
                set_error(s, "%s: the script's reply does not decode", n ? n->addr.name : "?");
                call_finish(c, -EPROTO);
                return;
        }
        if (now > c->sent_usec) {
                uint64_t rtt = now - c->sent_usec;

                s->st.rtt_sum_usec += rtt;
                s->st.rtt_count++;
                if (rtt > s->st.rtt_max_usec)
                        s->st.rtt_max_usec = rtt;
        }
        call_finish(c, 0);
}

/* ---- cluster ---- */

/* Makes s->nodes as long as the map's node list, a Node (not yet connected) per new entry. */
static int cluster_nodes_sync(RedisStore *s) {
        if (s->map.n_nodes > s->nodes_cap) {
                size_t cap = s->map.n_nodes * 2;
                Node **p = realloc(s->nodes, cap * sizeof(*p));

                if (!p)
                        return -ENOMEM;
                memset(p + s->nodes_cap, 0, (cap - s->nodes_cap) * sizeof(*p));
                s->nodes = p;
                s->nodes_cap = cap;
        }
        for (size_t i = s->n_nodes; i < s->map.n_nodes; i++) {
                Node *n = node_new(s, false);
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

/* A node a call may need: every node before the first map, then those serving a slot. */
static bool node_in_use(const RedisStore *s, const Node *n) {
        return s->url.mode != REDIS_MODE_CLUSTER || !s->have_map || n->serving;
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
        node_healthy(n);
        k = cluster_map_from_slots_reply(&s->map, r, n->host);
        if (k < 0) {
                set_error(s, "%s: CLUSTER SLOTS: %s", n->addr.name,
                          r->type == REDIS_REPLY_ERROR ? r->str : "a reply that does not parse");
                s->map_stale = true;
                s->map_retry_at = now + s->o.backoff_max_usec;
                fail_parked(s, -EPROTO);
                return;
        }
        s->have_map = true;
        s->map_stale = false;
        if (cluster_nodes_sync(s) < 0)
                set_error(s, "out of memory for the cluster's nodes");
        cluster_mark_serving(s);
        dispatch_parked(s, now);
}

/* Asks a node for CLUSTER SLOTS (a connected one if any, else the next that may connect). */
static void map_refresh(RedisStore *s, uint64_t now) {
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
                if (now >= n->retry_at && node_connect(n, now) >= 0) {
                        pick = n;
                        s->map_next = (s->map_next + i + 1) % s->n_nodes;
                }
        }
        if (!pick) {
                s->map_retry_at = now + jitter(s, s->o.backoff_min_usec);
                if (!s->have_map)
                        fail_parked(s, -ECONNREFUSED);
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
                        set_error(s, "%s: more than %d redirects for one call (%.100s)", n->addr.name,
                                  REDIS_STORE_REDIRECTS_MAX, r->str);
                        call_finish(c, -ELOOP);
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
                        call_finish(c, -EIO);
                        return;
                }
                if (kind == CLUSTER_REDIRECT_MOVED && (size_t) idx < s->n_nodes && s->nodes[idx])
                        s->nodes[idx]->serving = true;
                c->node = NULL;
                call_send(c, now);
                return;
        case CLUSTER_REDIRECT_TRYAGAIN:
                /* The migration may take longer than a few retries: resend until the batch's
                 * deadline, less often as it goes on. */
                delay = c->tryagain >= 8 ? REDIS_STORE_TRYAGAIN_MAX_USEC
                                         : REDIS_STORE_TRYAGAIN_DELAY_USEC << c->tryagain;
                if (delay > REDIS_STORE_TRYAGAIN_MAX_USEC)
                        delay = REDIS_STORE_TRYAGAIN_MAX_USEC;
                if (now + delay >= c->batch->deadline) {
                        set_error(s, "%s: %.200s (until the batch's deadline)", n->addr.name, r->str);
                        call_finish(c, -EAGAIN);
                        return;
                }
                if (c->tryagain < UINT8_MAX)
                        c->tryagain++;
                s->st.tryagain++;
                c->node = NULL;
                park(c, now + delay);
                return;
        case CLUSTER_REDIRECT_CLUSTERDOWN:
                set_error(s, "%s: %.200s", n->addr.name, r->str);
                s->map_stale = true;
                call_finish(c, -EAGAIN);
                return;
        default:
                if (kind < 0)
                        set_error(s, "%s: a redirect that does not parse: %.200s", n->addr.name, r->str);
                else
                        set_error(s, "%s: %.300s", n->addr.name, r->str);
                call_finish(c, kind < 0 ? -EPROTO : -EIO);
                return;
        }
}

/* ---- sentinel ---- */

static void sentinel_try(RedisStore *s, uint64_t now);
static void breaker_close(RedisStore *s);

/* Every sentinel was asked and none named a primary to use. The periodic lookup leaves the
 * primary as it is, and so does a lookup overtaken by a failover's event (which named one); a
 * lookup for a lost primary backs off. */
static void discover_failed(RedisStore *s, uint64_t now) {
        Node *p = s->nodes[0];

        s->discovering = false;
        s->recheck_at = now + s->o.sentinel_check_usec;
        if (s->rechecking || s->primary_known) {
                s->rechecking = false;
                return;
        }
        node_backoff(p, now);
        s->discover_at = p->retry_at;
        fail_parked(s, -ECONNREFUSED);
}

/* Whether name is the primary a failover left, not to be followed again yet. */
static bool is_demoted(const RedisStore *s, const char *name, uint64_t now) {
        return s->demoted[0] && now < s->demoted_until && strcmp(s->demoted, name) == 0;
}

/* Makes addr (host, port) the primary. Another than the one in use takes the whole store at once:
 * the old connection is closed (its pending calls fail), the backoff and the breaker are reset,
 * and the new one is connected now. Then the calls waiting for a primary go. */
static void primary_set(RedisStore *s, const RedisAddr *addr, const char *host, int port, uint64_t now) {
        Node *p = s->nodes[0];

        if (redis_conn_state(p->conn) != REDIS_CONN_CLOSED) {
                if (strcmp(addr->name, p->addr.name) == 0) {
                        s->primary_known = true;
                        dispatch_parked(s, now);
                        return;
                }
                redis_conn_disconnect(p->conn, -ECONNRESET);
        }
        if (p->have_addr && strcmp(addr->name, p->addr.name) != 0) {
                s->st.primary_switches++;
                p->backoff = s->o.backoff_min_usec;
                breaker_close(s); /* its past is the old primary's */
        }
        p->addr = *addr;
        p->have_addr = true;
        snprintf(p->host, sizeof(p->host), "%s", host);
        p->port = port;
        s->primary_known = true;
        if (node_connect(p, now) < 0) {
                s->primary_known = false;
                s->discover_at = p->retry_at;
                fail_parked(s, -ECONNREFUSED);
                return;
        }
        dispatch_parked(s, now);
}

static void sentinel_reply(void *userdata, redisReply *r, int error) {
        Node *sn = userdata;
        RedisStore *s = sn->s;
        uint64_t now = now_usec();
        RedisAddr addr;
        char err[256];
        uint64_t port;

        if (error < 0 || !r)
                return; /* sentinel_event() tries the next */
        sn->connect_deadline = 0;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
            r->element[1]->type != REDIS_REPLY_STRING ||
            parse_uint64_n(r->element[1]->str, r->element[1]->len, 1, 65535, &port) < 0 ||
            redis_addr_from_host(&addr, r->element[0]->str, (int) port, true, err, sizeof(err)) < 0) {
                set_error(s, "sentinel %s does not know master '%s'%s%s", sn->addr.name, s->url.master,
                          r->type == REDIS_REPLY_ERROR ? ": " : "",
                          r->type == REDIS_REPLY_ERROR ? r->str : "");
                redis_conn_disconnect(sn->conn, -ENOENT); /* -> the next sentinel */
                return;
        }
        if (is_demoted(s, addr.name, now)) {
                /* it has not heard of the failover yet */
                set_error(s, "sentinel %s still names %s, which a failover left", sn->addr.name, addr.name);
                sentinel_try(s, now);
                return;
        }
        s->sentinel_next = (s->sentinel_next + s->sentinel_tries - 1) % s->url.n_hosts; /* this one first */
        s->discovering = false;
        s->rechecking = false;
        s->recheck_at = now + s->o.sentinel_check_usec;
        primary_set(s, &addr, r->element[0]->str, (int) port, now);
}

static void watch_event(Node *w, int error);

/* The lookup connection closed: on an error during a lookup, ask the next sentinel (-ECANCELED
 * is the store's own close, which moves on itself). A subscription's: watch_event(). */
static void sentinel_event(void *userdata, int error) {
        Node *sn = userdata;
        RedisStore *s = sn->s;

        if (sn->watch) {
                watch_event(sn, error);
                return;
        }
        if (error == 0 || error == -ECANCELED || !s->discovering || s->closing)
                return;
        sn->connect_deadline = 0;
        if (error != -ENOENT)
                set_error(s, "sentinel %s", redis_conn_last_error(sn->conn));
        sentinel_try(s, now_usec());
}

/* Asks the next sentinel not asked yet in this lookup, on the lookup connection (kept open
 * between lookups, moved when the sentinel changes); none left: discover_failed(). */
static void sentinel_try(RedisStore *s, uint64_t now) {
        Node *sn = s->sentinel;
        const char *argv[3] = { "SENTINEL", "get-master-addr-by-name", s->url.master };
        size_t argvlen[3] = { 8, 23, strlen(s->url.master) };

        while (s->sentinel_tries < s->url.n_hosts) {
                const RedisAddr *a =
                        &s->sentinel_addrs[(s->sentinel_next + s->sentinel_tries) % s->url.n_hosts];

                s->sentinel_tries++;
                if (redis_conn_state(sn->conn) != REDIS_CONN_CLOSED && strcmp(sn->addr.name, a->name) != 0)
                        redis_conn_disconnect(sn->conn, -ECANCELED);
                if (redis_conn_state(sn->conn) == REDIS_CONN_CLOSED) {
                        sn->addr = *a;
                        if (node_connect(sn, now) < 0)
                                continue;
                }
                if (redis_conn_command(sn->conn, 3, argv, argvlen, sentinel_reply, sn, NULL) < 0) {
                        redis_conn_disconnect(sn->conn, -ECANCELED);
                        continue;
                }
                sn->connect_deadline = now + s->o.connect_timeout_usec; /* its reply's */
                sn->dirty = true;
                return;
        }
        set_error(s, "no sentinel knows a primary for '%s' (%s)", s->url.master, s->st.last_error);
        discover_failed(s, now);
}

/* A lookup because the primary is lost: calls wait for its answer. One already under way (the
 * periodic one) becomes it. */
static void discover_start(RedisStore *s, uint64_t now) {
        s->primary_known = false;
        if (s->discovering) {
                s->rechecking = false;
                return;
        }
        s->discovering = true;
        s->discover_at = 0;
        s->sentinel_tries = 0;
        s->st.discoveries++;
        sentinel_try(s, now);
}

/* The periodic lookup, the safety net under the events: the primary stays in use meanwhile. */
static void recheck_start(RedisStore *s, uint64_t now) {
        s->discovering = true;
        s->rechecking = true;
        s->sentinel_tries = 0;
        s->st.discoveries++;
        sentinel_try(s, now);
}

/* The failover events a subscription asks for (PSUBSCRIBE, one pattern per command so that each
 * confirmation answers its own): a failover's steps until its new primary is promoted, the
 * promotion and the announcement, and its aborts. */
static const char *const watch_patterns[] = {
        "+try-failover",   "+elected-leader", "+failover-state-*", "+selected-slave",
        "+promoted-slave", "+switch-master",  "-failover-abort-*",
};

static void watch_subscribed(void *userdata, redisReply *r, int error) {
        Node *w = userdata;

        if (error < 0 || !r)
                return;
        if (r->type == REDIS_REPLY_ERROR) {
                set_error(w->s, "sentinel %s: PSUBSCRIBE refused: %.200s", w->addr.name, r->str);
                redis_conn_disconnect(w->conn, -EPROTO);
                return;
        }
        node_healthy(w);
}

static void watch_master_reply(void *userdata, redisReply *r, int error);

/* Connects a subscription and queues SENTINEL MASTER, then its PSUBSCRIBEs. Returns 0 or -errno (it backs
 * off). */
static int watch_connect(Node *w, uint64_t now) {
        RedisStore *s = w->s;
        size_t n = sizeof(watch_patterns) / sizeof(watch_patterns[0]);
        const char *master[3] = { "SENTINEL", "MASTER", s->url.master };
        size_t masterlen[3] = { 8, 6, strlen(s->url.master) };
        int r = node_connect(w, now);

        if (r >= 0) {
                r = redis_conn_command(w->conn, 3, master, masterlen, watch_master_reply, w, NULL);
                if (r < 0)
                        redis_conn_disconnect(w->conn, r);
        }
        for (size_t i = 0; r >= 0 && i < n; i++) {
                const char *argv[2] = { "PSUBSCRIBE", watch_patterns[i] };
                size_t argvlen[2] = { 10, strlen(watch_patterns[i]) };

                r = redis_conn_command(w->conn, 2, argv, argvlen, i + 1 == n ? watch_subscribed : NULL, w,
                                       NULL);
                if (r < 0)
                        redis_conn_disconnect(w->conn, r);
        }
        return r;
}

/* A subscription closed: it backs off, and what its sentinel said of a failover is forgotten. */
static void watch_event(Node *w, int error) {
        RedisStore *s = w->s;

        if (error == 0 || s->closing)
                return;
        w->failing_over = false;
        node_backoff(w, now_usec());
        set_error(s, "sentinel %s (its failover events)", redis_conn_last_error(w->conn));
}

/* Ends every hold. */
static void failover_unhold(RedisStore *s) {
        for (size_t i = 0; i < s->url.n_hosts; i++)
                if (s->watches[i])
                        s->watches[i]->failing_over = false;
}

/* A failover named its new primary (host, port) in place of the old one: the store moves there at
 * once, and the old one is demoted. */
static void failover_follow(RedisStore *s, const Node *w, const char *event, const char *host,
                            const char *port, const char *old_host, const char *old_port, uint64_t now) {
        RedisAddr addr, old;
        uint64_t p, op;
        char err[256];

        if (parse_uint64_n(port, strlen(port), 1, 65535, &p) < 0 ||
            redis_addr_from_host(&addr, host, (int) p, true, err, sizeof(err)) < 0) {
                set_error(s, "sentinel %s: %s names '%s %s': %s", w->addr.name, event, host, port,
                          "not a numeric address");
                return;
        }
        failover_unhold(s);
        if (parse_uint64_n(old_port, strlen(old_port), 1, 65535, &op) >= 0 &&
            redis_addr_from_host(&old, old_host, (int) op, true, NULL, 0) >= 0 &&
            strcmp(old.name, addr.name) != 0) {
                snprintf(s->demoted, sizeof(s->demoted), "%s", old.name);
                s->demoted_until = now + REDIS_STORE_DEMOTED_USEC;
        }
        if (strcmp(s->demoted, addr.name) == 0)
                s->demoted[0] = '\0';
        primary_set(s, &addr, host, (int) p, now);
}

/* w's sentinel is failing over the primary at mhost:mport (strings): held if it is the one in use
 * (or none is known yet: the lookup names it). */
static void watch_hold(Node *w, const char *why, const char *mhost, const char *mport, uint64_t now) {
        RedisStore *s = w->s;
        const Node *p = s->nodes[0];
        RedisAddr maddr;
        uint64_t mp;

        if (parse_uint64_n(mport, strlen(mport), 1, 65535, &mp) < 0 ||
            redis_addr_from_host(&maddr, mhost, (int) mp, true, NULL, 0) < 0 ||
            (p->have_addr && strcmp(maddr.name, p->addr.name) != 0))
                return;
        if (!w->failing_over) {
                w->failing_over = true;
                w->failover_at = now;
                set_error(s, "sentinel %s: %s: no write to %s until the failover names a new primary",
                          w->addr.name, why, maddr.name);
        }
}

/* SENTINEL MASTER's reply, sent before the subscriptions on the same connection: a failover that
 * started before them (a divvyd started, or a subscription made again, in its middle) holds
 * too. The reply is a flat list of names and values. */
static void watch_master_reply(void *userdata, redisReply *r, int error) {
        Node *w = userdata;
        const char *ip = NULL, *port = NULL;
        bool failing_over = false;

        if (error < 0 || !r || r->type != REDIS_REPLY_ARRAY)
                return;
        for (size_t i = 0; i + 1 < r->elements; i += 2) {
                const redisReply *k = r->element[i], *v = r->element[i + 1];

                if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
                        continue;
                if (strcmp(k->str, "ip") == 0)
                        ip = v->str;
                else if (strcmp(k->str, "port") == 0)
                        port = v->str;
                else if (strcmp(k->str, "flags") == 0)
                        failing_over = strstr(v->str, "failover_in_progress") != NULL;
        }
        if (failing_over && ip && port)
                watch_hold(w, "a failover under way (SENTINEL MASTER)", ip, port, now_usec());
}

#define WATCH_TOKENS_MAX 8 /* words of an event's payload read: "slave a:p a p @ master a p" */

/* A sentinel's event (a pmessage: pattern, channel, payload). Only our master's count. Payloads:
 *   +switch-master  <master> <old ip> <old port> <new ip> <new port>
 *   anything else   <type> <name> <ip> <port> [@ <master> <master ip> <master port>]
 * A step of a failover of the primary in use holds it; its promotion or announcement moves the
 * store; an abort ends the hold of the sentinel that started it. */
static void watch_message(void *userdata, redisReply *r, int error) {
        Node *w = userdata;
        RedisStore *s = w->s;
        const redisReply *ch, *msg;
        char buf[512], *tok[WATCH_TOKENS_MAX], *save = NULL, *t;
        const char *master, *mhost, *mport;
        size_t n = 0;
        uint64_t now;

        if (error < 0 || !r || s->closing)
                return;
        ch = r->element[r->elements - 2];
        msg = r->element[r->elements - 1];
        if (ch->type != REDIS_REPLY_STRING || msg->type != REDIS_REPLY_STRING || msg->len >= sizeof(buf))
                return;
        memcpy(buf, msg->str, msg->len);
        buf[msg->len] = '\0';
        for (t = strtok_r(buf, " ", &save); t && n < WATCH_TOKENS_MAX; t = strtok_r(NULL, " ", &save))
                tok[n++] = t;
        now = now_usec();
        if (strcmp(ch->str, "+switch-master") == 0) {
                if (n >= 5 && strcmp(tok[0], s->url.master) == 0)
                        failover_follow(s, w, ch->str, tok[3], tok[4], tok[1], tok[2], now);
                return;
        }
        if (n < 4)
                return;
        if (n == 8 && strcmp(tok[4], "@") == 0) {
                master = tok[5];
                mhost = tok[6];
                mport = tok[7];
        } else {
                master = tok[1];
                mhost = tok[2];
                mport = tok[3];
        }
        if (strcmp(master, s->url.master) != 0)
                return;
        if (strcmp(ch->str, "+promoted-slave") == 0) {
                failover_follow(s, w, ch->str, tok[2], tok[3], mhost, mport, now);
                return;
        }
        if (strncmp(ch->str, "-failover-abort-", 16) == 0) {
                if (w->failing_over)
                        set_error(s, "sentinel %s: %s: the primary is used again", w->addr.name, ch->str);
                w->failing_over = false;
                return;
        }
        /* a step before the promotion (after +promoted-slave the leader's next steps name the
         * old primary, no longer in use) */
        watch_hold(w, ch->str, mhost, mport, now);
}

/* The subscriptions' periodic work: connects (after their backoff), connect deadlines, the holds'
 * bound. */
static void watch_due(RedisStore *s, uint64_t now, uint64_t *next);

/* A data node's connection opened (0) or closed (< 0; its pending calls have failed). */
static void node_event(void *userdata, int error) {
        Node *n = userdata;
        RedisStore *s = n->s;
        uint64_t now;

        if (error == 0 || s->closing)
                return;
        now = now_usec();
        set_error(s, "%s", redis_conn_last_error(n->conn));
        node_backoff(n, now);
        if (s->url.mode == REDIS_MODE_SENTINEL && n == s->nodes[0]) {
                s->primary_known = false;
                s->discover_at = n->retry_at;
        } else if (s->url.mode == REDIS_MODE_CLUSTER)
                s->map_stale = true;
}

/* ---- the FIFO ---- */

static void batch_release(RedisStore *s, Batch *b) {
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

/* Ends the breaker's own probe, if one is in flight: the PINGs still unanswered are abandoned
 * (their replies are read and dropped). */
static void probe_cancel(RedisStore *s) {
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

static void breaker_close(RedisStore *s) {
        probe_cancel(s);
        s->fail_streak = 0;
        s->breaker = BREAKER_CLOSED;
        s->breaker_backoff = s->o.backoff_min_usec;
}

/* Opens (or opens again) the breaker for a jittered backoff, doubled for the next time. */
static void breaker_open(RedisStore *s, uint64_t now) {
        probe_cancel(s);
        s->breaker = BREAKER_OPEN;
        s->breaker_until = now + jitter(s, s->breaker_backoff);
        s->breaker_backoff = s->breaker_backoff * 2 > s->o.backoff_max_usec ? s->o.backoff_max_usec
                                                                            : s->breaker_backoff * 2;
        s->st.breaker_opens++;
}

static void probe_failed(RedisStore *s, uint64_t now) {
        breaker_open(s, now);
        set_error(s, "circuit breaker open again: no node answered PING (last: %s)", s->st.last_error);
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
                        node_healthy(n); /* a Sentinel's primary: ROLE, before it on a new connection */
                breaker_close(s);
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
                        discover_start(s, now);
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
                if (redis_conn_state(n->conn) == REDIS_CONN_CLOSED && node_connect(n, now) < 0)
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
                set_error(s, "%s: no reply to PING within %" PRIu64 " ms", n->addr.name,
                          s->o.connect_timeout_usec / 1000);
        }
        s->probe_pings = 0;
        probe_failed(s, now);
}

static void breaker_account(RedisStore *s, const Batch *b, uint64_t now) {
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
                        breaker_close(s);
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
                set_error(s, "circuit breaker open after %u failed batches (last: %s)", s->fail_streak,
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
                Batch *b = s->head;
                StoreDoneFunc done = b->done;
                void *userdata = b->userdata;

                s->head = b->next;
                if (!s->head)
                        s->tail = NULL;
                s->st.batches_pending--;
                breaker_account(s, b, now);
                batch_release(s, b);
                done(userdata, 0);
        }
        s->completing = false;
}

/* Batches past their deadline: their unanswered calls fail with -ETIMEDOUT. */
static void expire_batches(RedisStore *s, uint64_t now) {
        for (Batch *b = s->head; b && b->deadline <= now; b = b->next) {
                if (b->calls_left == 0)
                        continue;
                for (Call *c = b->calls; c; c = c->batch_next) {
                        Node *n = c->node;

                        if (c->done)
                                continue;
                        if (c->parked)
                                unpark(c);
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
                                        set_error(s,
                                                  "%s: %u batches in a row timed out without a reply: "
                                                  "reconnecting",
                                                  n->addr.name, n->timeout_streak);
                                        n->timeout_streak = 0;
                                        call_finish(c, -ETIMEDOUT);
                                        redis_conn_disconnect(n->conn, -ETIMEDOUT);
                                        continue;
                                }
                        }
                        call_finish(c, -ETIMEDOUT);
                }
                set_error(s, "a batch had no reply within %" PRIu64 " ms", s->o.timeout_usec / 1000);
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

static void consider_deadline(uint64_t *next, uint64_t t) {
        if (t != 0 && (*next == 0 || t < *next))
                *next = t;
}

static void watch_due(RedisStore *s, uint64_t now, uint64_t *next) {
        for (size_t i = 0; i < s->url.n_hosts; i++) {
                Node *w = s->watches[i];

                if (!w)
                        continue;
                if (w->failing_over && now >= w->failover_at + REDIS_STORE_FAILOVER_HOLD_MAX_USEC) {
                        w->failing_over = false;
                        set_error(s,
                                  "sentinel %s: no end of the failover within %" PRIu64
                                  " s: the primary is used again",
                                  w->addr.name,
                                  (uint64_t) (REDIS_STORE_FAILOVER_HOLD_MAX_USEC / USEC_PER_SEC));
                }
                if (w->failing_over)
                        consider_deadline(next, w->failover_at + REDIS_STORE_FAILOVER_HOLD_MAX_USEC);
                if (redis_conn_state(w->conn) == REDIS_CONN_CLOSED) {
                        if (now >= w->retry_at && watch_connect(w, now) >= 0)
                                consider_deadline(next, w->connect_deadline);
                        else
                                consider_deadline(next, w->retry_at > now ? w->retry_at : now + 1);
                } else if (!w->healthy) {
                        if (w->connect_deadline && now >= w->connect_deadline) {
                                w->connect_deadline = 0;
                                redis_conn_disconnect(w->conn, -ETIMEDOUT);
                                consider_deadline(next, w->retry_at);
                        } else
                                consider_deadline(next, w->connect_deadline);
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
                        (void) node_connect(s->nodes[0], now);
                break;
        case REDIS_MODE_SENTINEL:
                if (!s->primary_known && !s->discovering && now >= s->discover_at)
                        discover_start(s, now);
                else if (s->primary_known && !s->discovering && now >= s->recheck_at)
                        recheck_start(s, now);
                break;
        case REDIS_MODE_CLUSTER:
                if (!s->have_map || s->map_stale)
                        map_refresh(s, now);
                /* a node lost to a failure is reconnected on its own, as a single server is: else
                 * an idle daemon would call the store down until a call went there */
                for (size_t i = 0; i < s->n_nodes; i++) {
                        Node *n = s->nodes[i];

                        if (n && n->failed && n->have_addr && node_in_use(s, n) && now >= n->retry_at &&
                            redis_conn_state(n->conn) == REDIS_CONN_CLOSED)
                                (void) node_connect(n, now);
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
                dispatch_parked(s, now);
        expire_batches(s, now); /* what the above failed at once completes now */
        flush_dirty(s);
        complete_ready(s);

        /* the next deadline */
        for (Batch *b = s->head; b; b = b->next)
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
        watch_due(s, now, &next);
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
        Batch *b;
        Call **link;
        bool refuse = false;

        (void) now_wall;
        b = s->free_batches;
        if (b)
                s->free_batches = b->next;
        else if (!(b = malloc(sizeof(*b))))
                return -ENOMEM;
        *b = (Batch){ .hits = hits,
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
                                slot = hit_slot(s, &hits[j]);
                                while (k < end && hit_slot(s, &hits[k]) == slot)
                                        k++;
                        } else
                                k = end;
                        c = s->free_calls;
                        if (c)
                                s->free_calls = c->batch_next;
                        else if (!(c = malloc(sizeof(*c)))) {
                                /* the calls so far go back; the batch is not taken */
                                *link = NULL;
                                batch_release(s, b);
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
                        call_finish(c, -ECONNREFUSED);
                        continue;
                }
                s->st.calls++;
                call_send(c, now);
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
        for (Batch *b = s->head; b; b = b->next)
                for (Call *c = b->calls; c; c = c->batch_next) {
                        if (c->done)
                                continue;
                        if (c->parked)
                                unpark(c);
                        if (c->node)
                                (void) redis_conn_abandon(c->node->conn, c->conn_seq);
                        call_finish(c, -ECANCELED);
                }
        s->completing = false;
        complete_ready(s);
        s->closing = true;
        for (size_t i = 0; i < s->n_nodes; i++)
                node_free(s->nodes[i]);
        free(s->nodes);
        node_free(s->sentinel);
        for (size_t i = 0; i < REDIS_URL_HOSTS_MAX; i++)
                node_free(s->watches[i]);
        if (s->armed)
                (void) s->io->timer(s->io->userdata, 0);
        while (s->free_batches) {
                Batch *b = s->free_batches;

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
        if (s->n_nodes == s->nodes_cap) {
                size_t cap = s->nodes_cap ? s->nodes_cap * 2 : 4;
                Node **p = realloc(s->nodes, cap * sizeof(*p));

                if (!p)
                        return -ENOMEM;
                memset(p + s->nodes_cap, 0, (cap - s->nodes_cap) * sizeof(*p));
                s->nodes = p;
                s->nodes_cap = cap;
        }
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
                Node *n = node_new(s, false);

                if (!n || add_node(s, n) < 0) {
                        node_free(n);
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
                (void) node_connect(n, now); /* a server down is retried, not an error */
                break;
        }
        case REDIS_MODE_SENTINEL: {
                Node *p = node_new(s, false);

                if (!p || add_node(s, p) < 0) {
                        node_free(p);
                        r = -ENOMEM;
                        goto fail;
                }
                s->sentinel = node_new(s, true);
                if (!s->sentinel) {
                        r = -ENOMEM;
                        goto fail;
                }
                for (size_t i = 0; i < s->url.n_hosts; i++) {
                        r = redis_addr_from_host(&s->sentinel_addrs[i], s->url.hosts[i].host,
                                                 s->url.hosts[i].port, false, errbuf, size);
                        if (r < 0)
                                goto fail;
                        s->watches[i] = node_new(s, true);
                        if (!s->watches[i]) {
                                r = -ENOMEM;
                                goto fail;
                        }
                        s->watches[i]->watch = true;
                        s->watches[i]->addr = s->sentinel_addrs[i];
                        s->watches[i]->have_addr = true;
                        redis_conn_set_push(s->watches[i]->conn, watch_message, s->watches[i]);
                        (void) watch_connect(s->watches[i], now); /* a sentinel down is retried */
                }
                discover_start(s, now);
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
                        n = node_new(s, false);
                        if (!n || add_node(s, n) < 0) {
                                node_free(n);
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
                map_refresh(s, now);
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
