/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * redis-conn.c: ONE non-blocking connection to a Redis/Valkey server (issue #16), the part of
 * the Redis store that owns a socket. hiredis is used only as the reply parser (redisReader);
 * commands are encoded here, straight into the output buffer (RESP is "*argc\r\n" then
 * "$len\r\nbytes\r\n" per argument: no allocation per command, unlike redisFormatCommandArgv()).
 *
 * Life: redis_conn_new() (no socket) -> redis_conn_connect() (a non-blocking connect(); the
 * handshake, AUTH then SELECT, is queued first) -> commands, each with a callback, queued in
 * FIFO order and written out by redis_conn_flush() (one write() for everything queued: the
 * pipeline) -> replies read by redis_conn_on_io(), matched to the FIFO in order ->
 * redis_conn_disconnect() (or any socket or protocol error): every pending callback gets the
 * error, the socket is closed, and the object can connect again. Reconnecting is the caller's
 * decision (the store's backoff).
 *
 * The event loop is the caller's: the connection tells it what to watch through RedisIo
 * (EPOLLIN always while it has a socket, EPOLLOUT while connecting or while output is
 * buffered; 0 just before the descriptor is closed) and the caller hands readiness back with
 * redis_conn_on_io(). Nothing here blocks, sleeps, logs, or keeps time: deadlines are the
 * store's.
 *
 * Callbacks run from redis_conn_on_io() or redis_conn_disconnect(). In a callback the caller
 * may queue new commands on this or another connection and may disconnect this one; it must
 * not free a connection (redis_conn_free()) from inside a callback.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <hiredis/hiredis.h>

/* What the daemon's event loop offers the Redis store (and its connections). The store never
 * touches sd-event: the daemon implements these two and calls redis_store_on_io() and
 * redis_store_on_timer() from its sources. Both return 0 or -errno. */
typedef struct RedisIo {
        void *userdata;
        /* Watch fd for events (EPOLLIN | EPOLLOUT), replacing what was watched; a new fd is
         * added on its first call. 0: stop watching, the fd is about to be closed. */
        int (*watch)(void *userdata, int fd, uint32_t events);
        /* The store's next deadline, CLOCK_MONOTONIC µs (0: none). One timer, re-armed on
         * every call; the daemon calls redis_store_on_timer() once it has passed. */
        int (*timer)(void *userdata, uint64_t at_usec);
} RedisIo;

#define REDIS_ADDR_NAME_MAX   300   /* bytes: "[v6 address]:port" or a Unix socket path, for messages */
#define REDIS_CONN_READ_CHUNK 16384 /* bytes read per read() call */
#define REDIS_CONN_READS_MAX  64    /* read() calls per redis_conn_on_io(): others get their turn */
#define REDIS_CONN_OUT_MAX                                                                                  \
        (64U << 20)                       /* bytes: output a connection may buffer (a dead                  \
                                           * server that still accepts TCP fills it) */
#define REDIS_CONN_PENDING_MAX (1U << 20) /* commands awaiting a reply on one connection */
#define REDIS_CONN_READER_MAXBUF                                                                            \
        (64U * 1024U) /* bytes: the reader's idle buffer is shrunk past this (hiredis's default is 16 KiB,  \
                       * too little for a pipelined batch's replies) */

/* A resolved server address: an IPv4/IPv6 TCP endpoint or a Unix socket path. */
typedef struct RedisAddr {
        struct sockaddr_storage sa;
        socklen_t len;
        char name[REDIS_ADDR_NAME_MAX]; /* "127.0.0.1:6379", "[::1]:6379" or "/run/redis.sock" */
} RedisAddr;

/* Resolves host:port into ret. numeric_only: AI_NUMERICHOST, never a DNS query (the event loop's
 * case: addresses from SENTINEL or CLUSTER SLOTS replies); otherwise getaddrinfo() may block,
 * so the store calls it only from redis_store_open(), before the loop runs. Returns 0, or
 * -EINVAL (bad port), -EADDRNOTAVAIL (not resolvable; a sentence in errbuf). */
int redis_addr_from_host(RedisAddr *ret, const char *host, int port, bool numeric_only, char *errbuf,
                         size_t size);
/* A Unix socket path (-ENAMETOOLONG if it does not fit sun_path). */
int redis_addr_from_unix(RedisAddr *ret, const char *path);

/* Called with the reply (owned by the connection, freed when the callback returns) and
 * error 0; or with
 * reply NULL and error -errno when the command will never have a reply: -ECONNRESET and other
 * socket errors, -EPROTO (a reply that does not parse, or one nobody asked for), -ECANCELED
 * (redis_conn_disconnect() by the caller, the error it passes), -EACCES (AUTH refused), -EINVAL
 * (SELECT refused). An error REPLY (REDIS_REPLY_ERROR) is a reply: error is 0. */
typedef void (*RedisReplyFunc)(void *userdata, redisReply *reply, int error);

/* Told when the socket is connected (error 0) or closed (error -errno, after the pending
 * callbacks got it). Runs from the same places as the reply callbacks. */
typedef void (*RedisConnEventFunc)(void *userdata, int error);

typedef struct RedisConnOptions {
        const char *user;     /* AUTH user (Redis 6 ACL); NULL: AUTH password alone */
        const char *password; /* NULL: no AUTH */
        int db;               /* SELECT db after AUTH; 0: none */
} RedisConnOptions;

typedef enum RedisConnState {
        REDIS_CONN_CLOSED,     /* no socket */
        REDIS_CONN_CONNECTING, /* connect() in progress; commands are buffered */
        REDIS_CONN_CONNECTED,  /* the socket is up (the handshake may still be pending) */
} RedisConnState;

typedef struct RedisConn RedisConn;

/* A connection without a socket. io is borrowed (it must outlive the connection); options'
 * strings are copied. Returns 0 or -ENOMEM. */
int redis_conn_new(const RedisIo *io, const RedisConnOptions *o, RedisConnEventFunc on_event, void *userdata,
                   RedisConn **ret);
/* Fails pending commands with -ECANCELED (their callbacks run), closes the socket, frees. NULL ok. */
RedisConn *redis_conn_free(RedisConn *c);

/* Starts a non-blocking connect() to addr (the connection must be CLOSED) and queues the
 * handshake. Returns 0: CONNECTING, even when connect() completed at once (the first EPOLLOUT
 * then makes it CONNECTED and the event callback runs, never inside this call); or
 * -errno if connect() failed at once (a Unix socket that does not exist: -ENOENT or
 * -ECONNREFUSED); then the connection stays CLOSED and no callback runs. */
int redis_conn_connect(RedisConn *c, const RedisAddr *addr);

/* Queues one command (argv[0..argc), each argvlen bytes, binary-safe) with its callback
 * (NULL: the reply is dropped). The bytes go out on the next redis_conn_flush() (or when the
 * connect completes). Sets *ret_seq (if non-NULL) to the command's sequence number, for
 * redis_conn_abandon(). Returns 0, -ENOTCONN (CLOSED), -ENOBUFS (REDIS_CONN_OUT_MAX or
 * REDIS_CONN_PENDING_MAX reached), -ENOMEM. On failure nothing was queued and cb is not called. */
int redis_conn_command(RedisConn *c, int argc, const char *const *argv, const size_t *argvlen,
                       RedisReplyFunc cb, void *userdata, uint64_t *ret_seq);

/* Writes what is buffered, as much as the socket takes now (one write() in the common case);
 * the rest waits for EPOLLOUT. A write error disconnects (callbacks run) and returns -errno. */
int redis_conn_flush(RedisConn *c);

/* The command seq will not have its callback called: its reply is read and dropped when it
 * comes. Returns 0, or -ENOENT if seq is not pending. */
int redis_conn_abandon(RedisConn *c, uint64_t seq);

/* Handles readiness of the connection's fd (EPOLLIN/OUT/ERR/HUP): finishes a connect, writes
 * buffered output, reads and dispatches replies (at most REDIS_CONN_READS_MAX reads). Returns 0,
 * or -errno if the connection was closed by an error (the callbacks have run). */
int redis_conn_on_io(RedisConn *c, uint32_t revents);

/* Makes c a subscriber's connection (SUBSCRIBE, PSUBSCRIBE): from now on a reply that is a
 * pub/sub message (an array "message", channel, payload or "pmessage", pattern, channel,
 * payload), which the server sends unasked, goes to cb (error 0) instead of the FIFO; every
 * other reply (a subscription's confirmation, one per channel or pattern: queue one channel
 * per command so that each has its entry) still answers the oldest command. */
void redis_conn_set_push(RedisConn *c, RedisReplyFunc cb, void *userdata);

/* Fails every pending command with error (< 0; callbacks run, oldest first), tells the event
 * callback, closes the socket. Nothing happens on a CLOSED connection. */
void redis_conn_disconnect(RedisConn *c, int error);

RedisConnState redis_conn_state(const RedisConn *c);
int redis_conn_fd(const RedisConn *c);         /* -1 when CLOSED */
size_t redis_conn_pending(const RedisConn *c); /* commands awaiting a reply (abandoned too) */
/* Replies read so far (abandoned ones too): that it moved shows a slow server is alive. */
uint64_t redis_conn_replies(const RedisConn *c);
const char *redis_conn_address(const RedisConn *c);    /* the last redis_conn_connect()'s, or "" */
const char *redis_conn_last_error(const RedisConn *c); /* the sentence of the last close, or "" */
