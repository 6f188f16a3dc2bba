/* SPDX-License-Identifier: MIT */
#include "store/redis-store-internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/number.h"

static void sentinel_try(RedisStore *s, uint64_t now);
static void watch_event(Node *w, int error);
static void watch_master_reply(void *userdata, redisReply *r, int error);

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
        redis_node_backoff(p, now);
        s->discover_at = p->retry_at;
        redis_fail_parked(s, -ECONNREFUSED);
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
                        redis_dispatch_parked(s, now);
                        return;
                }
                redis_conn_disconnect(p->conn, -ECONNRESET);
        }
        if (p->have_addr && strcmp(addr->name, p->addr.name) != 0) {
                s->st.primary_switches++;
                p->backoff = s->o.backoff_min_usec;
                redis_breaker_close(s); /* its past is the old primary's */
        }
        p->addr = *addr;
        p->have_addr = true;
        snprintf(p->host, sizeof(p->host), "%s", host);
        p->port = port;
        s->primary_known = true;
        if (redis_node_connect(p, now) < 0) {
                s->primary_known = false;
                s->discover_at = p->retry_at;
                redis_fail_parked(s, -ECONNREFUSED);
                return;
        }
        redis_dispatch_parked(s, now);
}

static void sentinel_reply(void *userdata, redisReply *r, int error) {
        Node *sn = userdata;
        RedisStore *s = sn->s;
        uint64_t now = now_usec();
        RedisAddr addr;
        char err[256];
        uint64_t port;

        if (error < 0 || !r)
                return; /* redis_sentinel_event() tries the next */
        sn->connect_deadline = 0;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
            r->element[1]->type != REDIS_REPLY_STRING ||
            parse_uint64_n(r->element[1]->str, r->element[1]->len, 1, 65535, &port) < 0 ||
            redis_addr_from_host(&addr, r->element[0]->str, (int) port, true, err, sizeof(err)) < 0) {
                redis_set_error(s, "sentinel %s does not know master '%s'%s%s", sn->addr.name, s->url.master,
                                r->type == REDIS_REPLY_ERROR ? ": " : "",
                                r->type == REDIS_REPLY_ERROR ? r->str : "");
                redis_conn_disconnect(sn->conn, -ENOENT); /* -> the next sentinel */
                return;
        }
        if (is_demoted(s, addr.name, now)) {
                /* it has not heard of the failover yet */
                redis_set_error(s, "sentinel %s still names %s, which a failover left", sn->addr.name,
                                addr.name);
                sentinel_try(s, now);
                return;
        }
        s->sentinel_next = (s->sentinel_next + s->sentinel_tries - 1) % s->url.n_hosts; /* this one first */
        s->discovering = false;
        s->rechecking = false;
        s->recheck_at = now + s->o.sentinel_check_usec;
        primary_set(s, &addr, r->element[0]->str, (int) port, now);
}

/* The lookup connection closed: on an error during a lookup, ask the next sentinel (-ECANCELED
 * is the store's own close, which moves on itself). A subscription's: watch_event(). */
void redis_sentinel_event(void *userdata, int error) {
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
                redis_set_error(s, "sentinel %s", redis_conn_last_error(sn->conn));
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
                        if (redis_node_connect(sn, now) < 0)
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
        redis_set_error(s, "no sentinel knows a primary for '%s' (%s)", s->url.master, s->st.last_error);
        discover_failed(s, now);
}

/* A lookup because the primary is lost: calls wait for its answer. One already under way (the
 * periodic one) becomes it. */
void redis_sentinel_discover(RedisStore *s, uint64_t now) {
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
void redis_sentinel_recheck(RedisStore *s, uint64_t now) {
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
                redis_set_error(w->s, "sentinel %s: PSUBSCRIBE refused: %.200s", w->addr.name, r->str);
                redis_conn_disconnect(w->conn, -EPROTO);
                return;
        }
        redis_node_healthy(w);
}

/* Connects a subscription and queues SENTINEL MASTER, then its PSUBSCRIBEs. Returns 0 or -errno (it backs
 * off). */
int redis_sentinel_watch_connect(Node *w, uint64_t now) {
        RedisStore *s = w->s;
        size_t n = sizeof(watch_patterns) / sizeof(watch_patterns[0]);
        const char *master[3] = { "SENTINEL", "MASTER", s->url.master };
        size_t masterlen[3] = { 8, 6, strlen(s->url.master) };
        int r = redis_node_connect(w, now);

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
        redis_node_backoff(w, now_usec());
        redis_set_error(s, "sentinel %s (its failover events)", redis_conn_last_error(w->conn));
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
                redis_set_error(s, "sentinel %s: %s names '%s %s': %s", w->addr.name, event, host, port,
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
                redis_set_error(s, "sentinel %s: %s: no write to %s until the failover names a new primary",
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
void redis_sentinel_watch_message(void *userdata, redisReply *r, int error) {
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
                        redis_set_error(s, "sentinel %s: %s: the primary is used again", w->addr.name,
                                        ch->str);
                w->failing_over = false;
                return;
        }
        /* a step before the promotion (after +promoted-slave the leader's next steps name the
         * old primary, no longer in use) */
        watch_hold(w, ch->str, mhost, mport, now);
}

void redis_sentinel_watch_due(RedisStore *s, uint64_t now, uint64_t *next) {
        for (size_t i = 0; i < s->url.n_hosts; i++) {
                Node *w = s->watches[i];

                if (!w)
                        continue;
                if (w->failing_over && now >= w->failover_at + REDIS_STORE_FAILOVER_HOLD_MAX_USEC) {
                        w->failing_over = false;
                        redis_set_error(s,
                                        "sentinel %s: no end of the failover within %" PRIu64
                                        " s: the primary is used again",
                                        w->addr.name,
                                        (uint64_t) (REDIS_STORE_FAILOVER_HOLD_MAX_USEC / USEC_PER_SEC));
                }
                if (w->failing_over)
                        consider_deadline(next, w->failover_at + REDIS_STORE_FAILOVER_HOLD_MAX_USEC);
                if (redis_conn_state(w->conn) == REDIS_CONN_CLOSED) {
                        if (now >= w->retry_at && redis_sentinel_watch_connect(w, now) >= 0)
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
