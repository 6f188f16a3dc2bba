/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * libdivvy: a small client for divvyd (and any server speaking version 1 of the divvy line
 * protocol: HIT), with calls for the verbs of version 2 (TAKE, PEEK, CHARGE, REFUND, RESET,
 * EXPLAIN) that divvyd adds. Installed as <divvy.h>; link with `pkg-config --libs libdivvy`.
 *
 * Conventions
 * - Every fallible function returns >= 0 on success or a negative errno-style code. After a
 *   failure divvy_last_error() describes it in one line (no trailing newline).
 * - A handle is thread-compatible, not thread-safe: use one handle per thread (or lock around
 *   it). The library has no global state, installs no signal handlers and never raises
 *   SIGPIPE (it sends with MSG_NOSIGNAL).
 * - The handle connects lazily, on the first request, and keeps the connection open.
 * - Every call that waits for the network is bounded by the handle's timeout (see
 *   divvy_set_timeout()); name resolution of a TCP host name (getaddrinfo()) is not.
 * - Nothing is allocated per request: the handle owns fixed buffers for its pipeline.
 *
 * Error codes (besides those documented per function)
 *   -EINVAL       a key or value the protocol cannot carry ('"', a control character other
 *                 than tab, invalid UTF-8, an empty key), or a bad argument; nothing was sent
 *   -E2BIG        more than DIVVY_PAIRS_MAX pairs or a request line over DIVVY_LINE_MAX bytes
 *   -EPROTO       the server answered "ERR <code> [reason]": see divvy_server_error_code() and
 *                 divvy_server_error_reason(). The server closes the connection after an ERR
 *   -ETIMEDOUT    the timeout passed; the connection is closed
 *   -EBADMSG      the server sent something that is not a divvy reply; the connection is closed
 *   -ECONNRESET   the connection broke after the request was sent: it MAY have been executed
 *   -ECANCELED    a pipelined request that the server did not execute because an earlier one
 *                 on the same connection got an ERR reply
 *   -EPROTONOSUPPORT  a version 2 call to a server that does not speak version 2 (divvy, an
 *                 older divvyd: it answers HELLO with "ERR unknown-command"); nothing executed
 *   other         connect()/socket errors (-ENOENT, -ECONNREFUSED, -EACCES, ...)
 *
 * Reconnecting: before a request is written on a connection with nothing pending, the handle
 * checks whether the server has closed the connection in the meantime (a restart, an idle
 * timeout) and if so reconnects once. A request already written is never sent again, since
 * the server may have executed it (a hit consumes quota): a connection that breaks while
 * replies are pending fails those requests with -ECONNRESET and the next request reconnects.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DIVVY_PORT_DEFAULT 8321 /* divvy's TCP port */
#define DIVVY_TIMEOUT_DEFAULT_USEC                                                                          \
        (5ULL * 1000000ULL)                 /* 5 s: a local daemon answers in microseconds; a stuck one     \
                                             * should not hang a cron job forever */
#define DIVVY_LINE_MAX  8192                /* bytes: longest request line divvyd accepts, without "\n" */
#define DIVVY_PAIRS_MAX 64                  /* key=value pairs per request divvyd accepts */
#define DIVVY_COUNT_MAX 9007199254740991ULL /* 2^53-1: the largest count of a version 2 verb */
#define DIVVY_NAME_MAX  256 /* bytes: a rule reference ("label" or "#index") or name, NUL included */
#define DIVVY_ACTOR_MAX 513 /* bytes: an EXPLAIN actor as the server sends it at most, NUL included */
#define DIVVY_RULE_LIST_MAX                                                                                 \
        1537 /* bytes: an EXPLAIN rule list ("a,#3,...") as the server sends it at most, NUL included */
#define DIVVY_PIPELINE_MAX                                                                                  \
        1024 /* requests: how many may be sent and not yet read on one handle; bounds the                   \
              * handle's ring of parsed results (24 KiB) */

typedef struct divvy divvy;

/* One key=value pair of an operation. Both are NUL-terminated UTF-8; the library quotes a
 * string when it must (spaces, tabs, '=', empty value; a key starting with '@' in a version 2
 * request, where an unquoted one would read as a client timestamp). */
typedef struct divvy_pair {
        const char *key;
        const char *value;
} divvy_pair;

/* The answer to one hit: "OK <allowed> <credit> <reset>". */
typedef struct divvy_result {
        bool allowed;          /* quota was available (and was consumed) */
        uint64_t credit;       /* credit left after this hit */
        int64_t reset_seconds; /* seconds until the window resets; 0 for an always-allow rule,
                                * -1 for an always-deny rule (it never resets) */
} divvy_result;

/* The answer to TAKE, PEEK, CHARGE or REFUND (protocol version 2). */
typedef struct divvy_decision {
        bool allowed;              /* TAKE: consumed; PEEK: TAKE would pass; CHARGE: it fit; REFUND: true */
        uint64_t credit;           /* whole credits left */
        uint64_t limit;            /* the binding rule's capacity */
        uint64_t reset_seconds;    /* allowed: until full again; denied: until this request would pass */
        int64_t retry_seconds;     /* 0 when allowed, >= 1 when denied: the retry-after; -1: never
                                    * passes under this config (count above capacity, always-deny) */
        char rule[DIVVY_NAME_MAX]; /* the binding rule: its label, or "#<index>" */
} divvy_decision;

/* The answer to EXPLAIN: the rules a request matches. */
typedef struct divvy_explanation {
        char rule[DIVVY_NAME_MAX];           /* the final (stop) rule: label or "#<index>" */
        uint64_t index;                      /* its 0-based position in the config */
        char policy[DIVVY_NAME_MAX];         /* "stop" */
        char algorithm[DIVVY_NAME_MAX];      /* "fixed-window", "sliding-window", "token-bucket" */
        bool has_actor;                      /* false: the rule has no actorField (one global counter) */
        char actor[DIVVY_ACTOR_MAX];         /* the actor, unescaped ("" when the request lacks the field) */
        size_t actor_len;                    /* bytes in actor (it may hold a tab) */
        bool actor_cut;                      /* the server cut a long actor: actor is its beginning */
        char canaries[DIVVY_RULE_LIST_MAX];  /* matching canary rules, comma-separated, "" if none;
                                              * a last element "..." means the server cut the list */
        char continues[DIVVY_RULE_LIST_MAX]; /* matching matchPolicy=continue rules, same form */
} divvy_explanation;

/* Creates a handle for address; does not connect. Address forms:
 *   "unix:/run/divvyd/divvyd.sock"  or  "/run/divvyd/divvyd.sock" (any string starting with '/')
 *   "tcp:127.0.0.1:8321", "tcp:[::1]:8321", "tcp:localhost"   (port defaults to 8321)
 *   "127.0.0.1:8321", "[::1]:8321", "divvy.internal:8321", "localhost"
 * Returns 0 and sets *ret, -EINVAL for a malformed address, -ENAMETOOLONG for a Unix socket
 * path that does not fit sockaddr_un, -ENOMEM. */
int divvy_new(const char *address, divvy **ret);

/* Closes the connection and frees the handle. Accepts NULL; returns NULL. Pending results
 * are dropped. */
divvy *divvy_free(divvy *d);

/* Sets the timeout for each later call (connect, send, and each wait for a reply; a version 2
 * call's HELLO and request share one), in microseconds; 0 means wait forever. Default
 * DIVVY_TIMEOUT_DEFAULT_USEC. */
int divvy_set_timeout(divvy *d, uint64_t usec);

/* Connects now if not connected (otherwise requests connect lazily). Returns 0 or the
 * connect error. */
int divvy_connect(divvy *d);

/* Checks that the server is alive and serving, not merely that its socket accepts
 * connections (the kernel accepts them even for a stopped process): opens a fresh connection,
 * half-closes it and waits, bounded by the timeout, for the server to close it in turn
 * without a reply. Any previous connection of the handle is closed first; -EBUSY if results
 * are pending. Returns 0, -ETIMEDOUT, -EPROTO (e.g. "too many connections") or the connect
 * error. Executes nothing on the server. */
int divvy_ping(divvy *d);

/* One hit: sends "HIT key=value ..." and waits for its reply. Returns 0 with *ret filled
 * (whether allowed or denied), or a negative code (see above); -EBUSY if pipelined results
 * are pending (read them first). n_pairs may be 0 (the default rule decides). */
int divvy_hit(divvy *d, const divvy_pair *pairs, size_t n_pairs, divvy_result *ret);

/* Pipelining. divvy_send_hit() queues one request (validated and formatted like divvy_hit())
 * and writes queued requests out when its buffer fills; divvy_flush() writes every queued
 * request; divvy_read_result() flushes, then returns the result of the oldest request not yet
 * read, in the order they were sent. While waiting to write, replies that arrive are kept
 * (at most DIVVY_PIPELINE_MAX), so neither side can block the other.
 *
 * divvy_send_hit() returns -ENOBUFS when DIVVY_PIPELINE_MAX results are pending: read some.
 * divvy_read_result() returns -ENOMSG when no result is pending. Once a request failed with
 * -EPROTO, -ECONNRESET, -ETIMEDOUT or -EBADMSG, every later pending request fails too
 * (-ECANCELED after an ERR, which the server answers by not executing the rest; otherwise the
 * same code, and those requests may have been executed), so a loop reading n results always
 * reads n. divvy_pending() is the number of results not read yet. */
int divvy_send_hit(divvy *d, const divvy_pair *pairs, size_t n_pairs);
int divvy_flush(divvy *d);
int divvy_read_result(divvy *d, divvy_result *ret);
size_t divvy_pending(const divvy *d);

/* ---- protocol version 2 ----------------------------------------------------------------------
 * Each call is synchronous like divvy_hit() (-EBUSY while pipelined results are pending) and
 * takes the pairs of the operation as divvy_hit() does. Before the first one on a connection
 * the library sends HELLO, in the same write as the request, and remembers the answer for the
 * connection: a server that does not know HELLO answers "ERR unknown-command" and closes, the
 * request is not executed, and the call returns -EPROTONOSUPPORT. Fields of a reply that the
 * library does not know are ignored. A count outside its range is -EINVAL (nothing sent). */

/* Sends HELLO now (on a new connection if needed) and returns the server's protocol version
 * (>= 2), or -EPROTONOSUPPORT, or another error. */
int divvy_hello(divvy *d);

/* After a successful HELLO: the server's "server=" field ("divvyd/0.3.0"), else "". */
const char *divvy_server_name(const divvy *d);

/* TAKE n (1 <= n <= DIVVY_COUNT_MAX): consumes n credits iff every enforcing rule allows. */
int divvy_take(divvy *d, uint64_t n, const divvy_pair *pairs, size_t n_pairs, divvy_decision *ret);

/* PEEK n (0 <= n <= DIVVY_COUNT_MAX; 1 is TAKE's default): TAKE's decision, nothing written. */
int divvy_peek(divvy *d, uint64_t n, const divvy_pair *pairs, size_t n_pairs, divvy_decision *ret);

/* CHARGE n (n >= 1): consumes n unconditionally (a cost known only afterwards); allowed says
 * whether it fit. */
int divvy_charge(divvy *d, uint64_t n, const divvy_pair *pairs, size_t n_pairs, divvy_decision *ret);

/* REFUND n (n >= 1): gives back up to n credits. divvyd accepts it on admin listeners only:
 * elsewhere -EPROTO with divvy_server_error_code() "forbidden". */
int divvy_refund(divvy *d, uint64_t n, const divvy_pair *pairs, size_t n_pairs, divvy_decision *ret);

/* RESET: deletes the counters TAKE would charge; *ret_n (may be NULL) = how many. Admin
 * listeners only, like REFUND. */
int divvy_reset(divvy *d, const divvy_pair *pairs, size_t n_pairs, uint64_t *ret_n);

/* EXPLAIN: the rules the operation matches, without side effects. */
int divvy_explain(divvy *d, const divvy_pair *pairs, size_t n_pairs, divvy_explanation *ret);

/* The message of the last failure on this handle ("" if none). Owned by the handle, valid
 * until the next call on it. */
const char *divvy_last_error(const divvy *d);

/* After -EPROTO: the server's error code ("unknown-command", "unknown", ...) and its reason
 * without quotes ("" if it gave none). Owned by the handle; "" before any ERR reply. */
const char *divvy_server_error_code(const divvy *d);
const char *divvy_server_error_reason(const divvy *d);

/* Returns true if the string can be sent as a key (non-empty) or value, i.e. divvy_hit() would
 * not refuse it with -EINVAL. */
bool divvy_string_is_valid(const char *s, bool is_key);

/* The library version, e.g. "0.1.0". */
const char *divvy_version(void);

#ifdef __cplusplus
}
#endif
