/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * redis-store.c: the Redis/Valkey backend of the counters (issue #16), a StoreSubmitFunc
 * backend (store.h) that completes later, from the daemon's event loop.
 * Its files (redis-store.c, redis-call.c, redis-sentinel.c): redis-store-internal.h.
 *
 * URLs: redis-url.h (redis_url_parse()). Host names in the URL are resolved ONCE, by
 * redis_store_open() (getaddrinfo() blocks: open runs before the loop); addresses learnt later (a
 * SENTINEL reply, CLUSTER SLOTS, MOVED/ASK) must be numeric, as Redis sends them unless told to
 * announce host names (then those nodes fail with a sentence saying so).
 * RedisStoreOptions.password overrides the URL's (so it need not be on a command line).
 *
 * What a batch becomes (redis_store_submit()): its hits are cut into CALLS, one EVALSHA of the
 * one script (redis-script.h) each: a call is a run of group-0 (canary, or lone) hits followed
 * by at most one run of hits sharing a non-zero group — exactly what the daemon's batch makes
 * of one request (canaries first, then the request's all-or-nothing group) — and at most
 * REDIS_STORE_CALL_HITS_MAX hits. The script applies a call's hits in order with store.c's
 * semantics (a non-zero group is all or nothing), so every hit is decided as the local store
 * decides it. In cluster mode a call whose keys fall in several hash slots is further split
 * into runs of consecutive hits of one slot, one call per run: atomicity (a group's all or
 * nothing) then holds per slot only. Keys: divvy 1.7's compat key for the rules
 * rule_divvy_keys() names (core/rules.h: fixed windows from the first hit) except in cluster
 * mode, divvyd's own key with the
 * {actor} hash tag otherwise (redis-script.h builds both). Every call of a batch is queued
 * first, then each connection is flushed once: ONE write per connection per batch.
 *
 * Completion: done(userdata, 0) once every call of the batch has its reply, or at the batch's
 * deadline (submission + timeout), whichever comes first; batches complete in submission
 * order (a batch that finished waits for the ones before it, which finish by their deadline).
 * done is called with 0 even when hits failed: each failed hit has hit->error < 0, and all
 * hits of one call fail together (so a group stays whole), for the daemon's onBackendError:
 *   -ETIMEDOUT      no reply by the deadline (the late reply is read and dropped)
 *   -ECONNREFUSED   no connection (down, waiting for the next reconnect) or the breaker is open
 *   -ECONNRESET, -EPIPE, ...  the connection failed with the call pending (its errno)
 *   -EACCES         AUTH refused; -EINVAL: SELECT refused (the connection is closed and retried)
 *   -EPROTO         a reply the script does not make, or a protocol error on the connection
 *   -EROFS          READONLY: the server is a replica (Sentinel: the primary is looked up again)
 *   -EAGAIN         CLUSTERDOWN, or TRYAGAIN until the next resend would be past the deadline
 *   -ELOOP          more than REDIS_STORE_REDIRECTS_MAX MOVED/ASK for one call
 *   -EIO            any other error reply (the script failed: OOM, a busy script, a key that
 *                   holds no counter: WRONGTYPE, a compat key's value not an integer; nothing
 *                   of the call is written then)
 *   -ECANCELED      redis_store_close() with the batch pending
 * A NOSCRIPT reply is not an error: the call is resent as EVAL with the script's text (which
 * caches it on the server) and its reply is the call's.
 *
 * Connections: a new connection sends AUTH/SELECT if configured, then SCRIPT LOAD (and, to a
 * Sentinel's primary, ROLE, which must say "master"), pipelined before the first call. A
 * connection that fails, or does not connect within the connect timeout, is retried after a
 * jittered exponential backoff (backoff_min .. backoff_max, doubled per failure, reset by a
 * reply); in between, calls to it fail at once with -ECONNREFUSED. A connection whose calls
 * time out breaker_threshold batches in a row is closed and reconnected (Sentinel: the primary
 * is looked up again). Circuit breaker: after breaker_threshold consecutive failed batches
 * (a hit failed for a connection error or a timeout, and no call of the batch had a reply: in
 * a cluster, a node down does not fail the batches the others answer) the breaker OPENS: every batch fails
 * at once with -ECONNREFUSED for a backoff interval (jittered, doubling up to backoff_max); then the store
 * probes on its own, from its timer, so that an idle daemon sees the server come back: a PING to each node
 * (single, Sentinel: the primary, looked up first if unknown; cluster: every node used so far), reconnecting
 * a closed one. The first reply closes the breaker; every PING failing, or none answered within
 * connect_timeout (those connections are then closed), opens it again for the next, doubled, interval. A
 * batch submitted when the interval is over before the timer ran is the probe instead: if none of its hits
 * fail it closes the breaker, otherwise it opens again. One probe at a time: batches are refused at once
 * while one is in flight (half-open). Sentinel: the sentinels are asked in turn (SENTINEL
 * get-master-addr-by-name), the one that answered first next time; the primary is looked up again when its
 * connection fails, on a READONLY reply, on a timeout streak, when ROLE does not say master, and every
 * sentinel_check_usec (the lookup connection stays open; the primary stays in use meanwhile).
 * The store also subscribes to every sentinel's failover events (one connection per sentinel, its own
 * backoff), as Redis's Sentinel client guidelines ask: from a failover's start (+try-failover, or any later
 * step: +elected-leader, +failover-state-*, +selected-slave, ...) until its new primary is named
 * (+promoted-slave or +switch-master) or it is aborted (-failover-abort-*, by the sentinel that started it),
 * the primary is HELD: no call is sent to it, each fails at once with -ECONNREFUSED (counted in
 * errors_refused, not by the breaker), so that nothing is written to a primary that a replica is replacing
 * (the replica is promoted with everything replicated so far). Each subscription asks SENTINEL MASTER
 * first, on the same connection: a failover already under way (flags failover_in_progress) holds too.
 * A new primary named by an event or a lookup takes the whole store at once: the old connection is
 * closed (its pending calls fail), the reconnect backoff and the breaker are reset, and the new primary
 * is connected at once. The primary a failover left
 * is DEMOTED: a lookup that still names it (a sentinel that has not heard yet) is not followed for
 * REDIS_STORE_DEMOTED_USEC, so the store never writes to it again while it may still call itself primary
 * (the sentinels demote a live old primary seconds later). A hold ends by itself after
 * REDIS_STORE_FAILOVER_HOLD_MAX_USEC (an end the store missed: a subscription lost). Cluster:
 * CLUSTER SLOTS from a seed (then from any connected node) gives the slot map; one connection per primary,
 * opened when a call needs it; MOVED updates the map, resends the call there and refreshes the whole map;
 * ASK sends ASKING + the call to the node named, once; TRYAGAIN (a call whose keys a slot migration
 * has split) resends after REDIS_STORE_TRYAGAIN_DELAY_USEC, doubled per retry up to
 * REDIS_STORE_TRYAGAIN_MAX_USEC, as long as the resend is due before the batch's deadline (then
 * the call fails -EAGAIN); CLUSTERDOWN fails the call (-EAGAIN) and refreshes the map.
 *
 * Event loop: the store never blocks and never touches sd-event. It asks the daemon to watch
 * its sockets and to arm one timer (RedisIo, redis-conn.h); the daemon calls
 * redis_store_on_io() and redis_store_on_timer(). Library-like: never logs; state, counters and
 * the last error sentence are in redis_store_get_stats(), for STATUS, metrics and the log.
 * One thread. No allocation per batch once the pools have grown to the load (hiredis allocates
 * the parsed replies).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/redis-conn.h"
#include "store/redis-url.h"
#include "store/store.h"

#define REDIS_STORE_TIMEOUT_DEFAULT_USEC (50ULL * 1000ULL) /* 50 ms: a batch's deadline after submission */
#define REDIS_STORE_CONNECT_TIMEOUT_DEFAULT_USEC                                                            \
        (1000ULL * 1000ULL) /* 1 s: a connect (and its first reply) this slow is a failure */
#define REDIS_STORE_BACKOFF_MIN_DEFAULT_USEC (100ULL * 1000ULL) /* 100 ms: first reconnect */
#define REDIS_STORE_BACKOFF_MAX_DEFAULT_USEC                                                                \
        (5ULL * 1000ULL * 1000ULL) /* 5 s: reconnects, doubling, up to */
#define REDIS_STORE_BREAKER_THRESHOLD_DEFAULT                                                               \
        5 /* consecutive failed batches that open the breaker (issue #16's design) */
#define REDIS_STORE_CALL_HITS_MAX                                                                           \
        64 /* hits of one script call: a request has at most RULES_MATCH_MAX-ish hits; lone hits of         \
            * several requests share a call up to this */
#define REDIS_STORE_REDIRECTS_MAX       5 /* MOVED/ASK followed for one call (a resharding moves a slot once) */
#define REDIS_STORE_TRYAGAIN_MAX_USEC   (100ULL * 1000)  /* 100 ms: the longest TRYAGAIN delay */
#define REDIS_STORE_TRYAGAIN_DELAY_USEC (5ULL * 1000ULL) /* 5 ms: a slot migration's keys move quickly */
#define REDIS_STORE_SENTINEL_CHECK_USEC                                                                     \
        (1000ULL * 1000ULL) /* 1 s: the sentinels asked again, the safety net under their events */
#define REDIS_STORE_FAILOVER_HOLD_MAX_USEC                                                                  \
        (30ULL * 1000ULL * 1000ULL) /* 30 s: a hold whose end was missed ends; an unelected attempt aborts  \
                                     * within 10 s, a promotion within failover-timeout */
#define REDIS_STORE_DEMOTED_USEC                                                                            \
        (30ULL * 1000ULL * 1000ULL) /* 30 s: sentinels learn a new primary from each other's hellos (every  \
                                     * 2 s); one still naming the old primary after this is right */
typedef struct RedisStoreOptions {
        const char *url;               /* see above; required */
        const char *user;              /* non-NULL: overrides the URL's user */
        const char *password;          /* non-NULL: overrides the URL's password (a file's or the
                                        * environment's, read by the daemon) */
        uint64_t timeout_usec;         /* a batch's deadline; 0: REDIS_STORE_TIMEOUT_DEFAULT_USEC */
        uint64_t connect_timeout_usec; /* 0: REDIS_STORE_CONNECT_TIMEOUT_DEFAULT_USEC */
        uint64_t backoff_min_usec;     /* 0: REDIS_STORE_BACKOFF_MIN_DEFAULT_USEC */
        uint64_t backoff_max_usec;     /* 0: REDIS_STORE_BACKOFF_MAX_DEFAULT_USEC */
        unsigned breaker_threshold;    /* 0: REDIS_STORE_BREAKER_THRESHOLD_DEFAULT */
        uint64_t sentinel_check_usec;  /* Sentinel: the periodic lookup's interval; 0:
                                        * REDIS_STORE_SENTINEL_CHECK_USEC */
} RedisStoreOptions;

typedef enum RedisStoreState {
        REDIS_STORE_CONNECTING,   /* no usable connection yet: connecting, or asking the sentinels
                                   * / the cluster where to go; batches wait (up to their deadline) */
        REDIS_STORE_CONNECTED,    /* the primary (cluster: every node used that serves a slot) answers */
        REDIS_STORE_DOWN,         /* the connection failed; waiting for the next reconnect */
        REDIS_STORE_BREAKER_OPEN, /* the breaker is open (or half-open, its probe in flight) */
        REDIS_STORE_FAILING_OVER, /* Sentinel: the primary is held, its failover under way */
        _REDIS_STORE_STATE_MAX,
        _REDIS_STORE_STATE_INVALID = -EINVAL,
} RedisStoreState;

const char *redis_store_state_to_string(RedisStoreState s); /* "connecting", "connected", "down",
                                                             * "breaker-open", "failing-over" */

typedef struct RedisStoreStats {
        RedisStoreState state;
        RedisMode mode;
        char address[REDIS_ADDR_NAME_MAX]; /* the primary (single, sentinel) or the last node a call
                                            * was sent to (cluster); "" if none yet */
        uint64_t batches;                  /* submitted */
        uint64_t calls;                    /* script calls sent (resends not counted) */
        uint64_t hits;                     /* hits submitted */
        uint64_t hits_failed;              /* hits completed with an error */
        uint64_t errors_timeout;           /* calls failed -ETIMEDOUT */
        uint64_t errors_connection;        /* calls failed by a connection error */
        uint64_t errors_refused;           /* calls failed -ECONNREFUSED at once (down, breaker, a
                                            * failover's hold) */
        uint64_t errors_protocol;          /* calls failed -EPROTO */
        uint64_t errors_server;    /* calls failed by an error reply (-EIO, -EROFS, -EAGAIN, -ELOOP) */
        uint64_t noscript_reloads; /* NOSCRIPT replies recovered by EVAL */
        uint64_t redirects_moved;  /* MOVED followed */
        uint64_t redirects_ask;    /* ASK followed */
        uint64_t tryagain;         /* TRYAGAIN retried */
        uint64_t reconnects;       /* connection attempts after the first of each server */
        uint64_t discoveries;      /* SENTINEL lookups and CLUSTER SLOTS refreshes done */
        uint64_t primary_switches; /* Sentinel: times the store moved to another primary */
        uint64_t breaker_opens;    /* times the breaker opened (or opened again after a probe) */
        uint64_t breaker_probes;   /* probes the store sent on its own (PINGs, no batch waiting) */
        uint64_t rtt_sum_usec, rtt_count, rtt_max_usec; /* calls sent -> reply, successful calls */
        uint64_t batches_pending;                       /* submitted, not yet completed */
        char last_error[512]; /* the sentence of the last failure ("" : none yet) */
} RedisStoreStats;

typedef struct RedisStore RedisStore;

/* Parses o->url, resolves its host names (blocking: before the event loop runs), and starts
 * connecting (non-blocking: io->watch and io->timer are called). io must outlive the store.
 * Returns 0, or -errno with a sentence in errbuf: -EINVAL (URL or options), -EADDRNOTAVAIL (a
 * host does not resolve), -ENOMEM. A server that is down is NOT an error here: the store starts
 * DOWN (or CONNECTING) and retries. */
int redis_store_open(const RedisStoreOptions *o, const RedisIo *io, RedisStore **ret, char *errbuf,
                     size_t size);

/* Fails every pending batch's unanswered hits with -ECANCELED, completing them (done, in order),
 * closes the sockets (io->watch(fd, 0) for each), frees. Accepts NULL; returns NULL. Must not be
 * called from a done callback. */
RedisStore *redis_store_close(RedisStore *s);

/* The StoreSubmitFunc (store.h): backend is the RedisStore. Takes the batch (hits[0..n) and what
 * they point to stay untouched until done), queues its calls and writes them (one write per
 * connection), and returns 0; done(userdata, 0) is called later from redis_store_on_io() or
 * redis_store_on_timer() (or from this call, if nothing is in flight before it and every call
 * failed at once: breaker open, no connection; or n == 0). now_usec (the wall clock) is not
 * used: the script reads the server's TIME, one clock for the fleet, unless a hit carries its
 * own at_usec. Returns -ENOMEM if the batch could not be taken (done is then not called). */
int redis_store_submit(void *backend, StoreHit *hits, size_t n, uint64_t now_usec, StoreDoneFunc done,
                       void *userdata);

/* fd (one the store asked io->watch() for) is ready with revents (EPOLLIN/OUT/ERR/HUP). Returns 0
 * (errors are the hits', and in the stats), or -ENOENT if fd is not the store's. */
int redis_store_on_io(RedisStore *s, int fd, uint32_t revents);

/* The timer the store armed has passed (now_mono_usec: CLOCK_MONOTONIC). Times out batches,
 * starts reconnects, sends TRYAGAIN retries, moves the breaker on (its own probe when the open
 * period is over, that probe's deadline); re-arms the timer. Returns 0. */
int redis_store_on_timer(RedisStore *s, uint64_t now_mono_usec);

int redis_store_get_stats(const RedisStore *s, RedisStoreStats *ret);
/* RedisStoreStats.primary_switches alone, as cheap as redis_store_state(). */
uint64_t redis_store_primary_switches(const RedisStore *s);
/* The state alone (RedisStoreStats.state), without copying the counters: cheap enough for
 * every event of the store's sockets. */
RedisStoreState redis_store_state(const RedisStore *s);
