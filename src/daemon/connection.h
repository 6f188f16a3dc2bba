/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * connection.c: one client connection's socket and buffers. An input buffer
 * (fixed, allocated at accept: one maximal line plus read slack) and an output
 * buffer (CONNECTION_OUT_INITIAL bytes on the heap; beyond that a mapping of its own,
 * grown by doubling, never beyond out_max rounded up to a page, and given back once every
 * byte of it is sent if larger than CONNECTION_OUT_KEEP); the syscalls that fill and
 * drain them, EINTR/EAGAIN handled; and the framing of the input into lines,
 * done once per line and remembered until the line is consumed. No policy: the
 * server decides what is read when, the batch (batch.h) what the lines mean.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/types.h>

#include "core/protocol.h"
#include "core/resp.h"

#define CONNECTION_READ_SLACK                                                                               \
        (16u * 1024u) /* bytes of input buffer beyond one maximal line: lets pipelining clients             \
                       * hand us many short requests per read() */
#define CONNECTION_IN_SIZE (PROTO_LINE_MAX + 2u + CONNECTION_READ_SLACK) /* +2: the "\r\n" */
#define CONNECTION_OUT_INITIAL                                                                              \
        (4u * 1024u) /* bytes: first output buffer; enough for a request/response client forever */
#define CONNECTION_OUT_KEEP                                                                                 \
        (32u * 1024u) /* bytes: a larger output buffer is unmapped once its client has caught up, so        \
                       * that a client that stopped reading for a while does not keep its backlog's         \
                       * memory; up to this it is kept (a batch reserves up to about 16 KiB of one          \
                       * pipelining connection: no mmap() per batch). A buffer beyond                       \
                       * CONNECTION_OUT_INITIAL is an anonymous mapping, grown by mremap(): it costs        \
                       * its size, and leaves no heap copies behind as it doubles */

#define CONNECTION_NAME_MAX 128 /* bytes of a RESP client's CLIENT SETNAME name */

/* The protocol a connection speaks, decided by its first byte (issue #17): '*' starts RESP,
 * anything else is the divvy line protocol. A divvy line never starts with '*' (it would be
 * an unknown command), so nothing a divvy client sends changes meaning. */
typedef enum ConnectionProto {
        CONNECTION_PROTO_UNDECIDED,
        CONNECTION_PROTO_LINE,
        CONNECTION_PROTO_GRPC, /* accepted on a --grpc listener: HTTP/2 from the first byte (#34) */
        CONNECTION_PROTO_RESP,
        _CONNECTION_PROTO_MAX,
} ConnectionProto;

/* What a RESP connection holds beyond a line connection's: allocated once, when its first
 * byte makes it one (never per request). */
typedef struct ConnectionResp {
        RespRequest req; /* the framed request at in_pos (argv points into the input) */
        size_t name_len;
        bool has_name;
        char name[CONNECTION_NAME_MAX]; /* CLIENT SETNAME */
        bool resp3;                     /* HELLO 3 (until HELLO 2): replies in RESP3's types */
        /* MULTI until EXEC or DISCARD: the queued requests' bytes, copied (frontend-resp.c) */
        bool multi, multi_aborted; /* an error while queueing: EXEC answers EXECABORT */
        unsigned multi_n;          /* requests queued */
        size_t multi_len;          /* their bytes in multi_buf */
        char *multi_buf;           /* RESP_MULTI_BYTES, allocated at the first MULTI */
} ConnectionResp;

typedef struct Connection Connection;
typedef struct GrpcConn GrpcConn; /* frontend-grpc.c's */

struct Connection {
        uint64_t id; /* for log messages */
        int fd;
        bool is_tcp;
        bool admin;           /* accepted on an admin listener: REFUND and RESET allowed (issue #15) */
        int epfd;             /* the server's epoll instance; registered there while events != 0 */
        uint32_t events;      /* the epoll mask currently requested */
        uint8_t proto;        /* ConnectionProto */
        bool resp_allowed;    /* a first byte '*' makes it RESP (else: the line protocol, --resp=off) */
        ConnectionResp *resp; /* CONNECTION_PROTO_RESP only */
        GrpcConn *grpc;       /* CONNECTION_PROTO_GRPC only (frontend-grpc.c; freed by the server) */
        bool grpc_work;       /* gRPC: calls waiting for a batch, or HTTP/2 frames to send */

        char *in;      /* CONNECTION_IN_SIZE bytes */
        size_t in_len; /* bytes received */
        size_t in_pos; /* bytes consumed by the current batch (compacted after it) */
        /* proto_next_line() of the input at in_pos, kept until in_pos moves (and, for an
         * incomplete line, until more input arrives): every line is framed once. */
        bool framed;
        int frame_result;      /* 1, 0 or -EMSGSIZE; RESP: resp_parse()'s, or -ENOMEM */
        size_t frame_line_len; /* frame_result 1: the line's length without "\n" or "\r\n" */
        size_t frame_consumed; /* frame_result 1: its length with them (RESP: the request's bytes) */
        char *out;             /* out_size bytes */
        size_t out_size;
        bool out_mapped; /* out is a mapping of out_size bytes, not out_heap */
        char *out_heap;  /* the first output buffer (CONNECTION_OUT_INITIAL bytes, or out_max if less) */
        size_t out_max;  /* growth cap */
        size_t out_len;  /* bytes of replies */
        size_t out_pos;  /* bytes of them sent */

        uint64_t last_activity_usec; /* CLOCK_MONOTONIC: last read or write progress */
        uint64_t request_start_usec; /* CLOCK_MONOTONIC: since then the input held bytes of a request
                                      * not yet answered (0: none); the request timeout runs from it */
        uint64_t linger_until_usec;  /* CLOCK_MONOTONIC: lingering connections close then */

        bool eof;       /* the peer sent FIN (or the read side failed): no more input */
        bool closing;   /* no more requests (after an ERR, or stopping): close once flushed */
        bool lingering; /* flushed and shut down for writing; discarding input until EOF */
        bool on_ready;  /* on the server's ready list */
        bool blocked;   /* not taking requests: unsent output is over the output limit */
        bool err_sent;  /* an ERR reply was formatted: nothing after it is answered */
        bool peer_shut; /* EPOLLRDHUP/EPOLLHUP/EPOLLERR seen: connection_read() reads to EOF */
        /* In a batch that a store completes later (server.c): the batch points into its input, so
         * it is not read, compacted, taken into another batch, or closed until then. Its EPOLLIN
         * stays registered (edge-triggered): an event that arrives meanwhile is held in
         * held_revents and handled when the batch completes, so that a batch in flight costs no
         * epoll_ctl() (two per connection and batch, 13 % of the event loop with sync=always). */
        bool in_flight;
        uint32_t held_revents;
        bool close_deferred; /* closed while in flight: closes once its batch completes */

        Connection *prev, *next;             /* the server's list of all connections */
        Connection *ready_prev, *ready_next; /* the server's ready list */
};

/* Allocates a connection owning fd (closed by connection_free()), with its input
 * buffer and a CONNECTION_OUT_INITIAL output buffer; out_max caps the latter. Does
 * not register it with an event loop. Returns 0 or -ENOMEM (fd is not closed then). */
int connection_new(int fd, bool is_tcp, size_t out_max, Connection **ret);

/* Removes the fd from epfd (if registered), closes it, frees the buffers. Accepts NULL. */
Connection *connection_free(Connection *c);

/* Reads until EAGAIN, EOF, a full input buffer, or a short read (the socket's queue is
 * empty then, and new data raises a new edge; unless peer_shut is set: then a FIN may be
 * queued behind the data, which raises no edge of its own). Returns the bytes read (0 if none);
 * sets c->eof at end of stream. Returns -errno on a read error other than EAGAIN/EINTR
 * (ECONNRESET and friends: the caller closes). */
ssize_t connection_read(Connection *c);

/* Reads and throws away until EAGAIN or EOF (for lingering connections), at most 64 reads.
 * Returns 1 at EOF, 0 at EAGAIN, 2 when it stopped at that bound with input perhaps left (no
 * new edge will tell: the caller re-arms with connection_rearm()), -errno on error. */
int connection_discard_input(Connection *c);

/* Sends the unsent output with one send(). Returns 0 when everything is sent (a buffer larger
 * than CONNECTION_OUT_KEEP is then given back, unless in_flight: out is out_heap again, and
 * the room reserved with connection_reserve() is gone), 1 when some is
 * left (the socket is full), -errno on error (EPIPE, ECONNRESET: peer gone). */
int connection_flush(Connection *c);

/* Makes room for n more bytes of output (moves unsent bytes to the front, grows up to
 * out_max, rounded up to a page once mapped). Returns a pointer to write at, or NULL if n
 * bytes do not fit (or no memory). */
char *connection_reserve(Connection *c, size_t n);

/* Drops consumed input (in_pos bytes) from the front of the buffer. */
void connection_compact_input(Connection *c);

/* Frames the input at in_pos into c->frame_*; connection_next_line() calls it when needed. */
void connection_frame(Connection *c);

/* The next line of input, at in_pos: what proto_next_line() returns for it (1 with
 * *ret_line pointing into the input buffer and *ret_consumed, 0 for no complete line
 * yet, -EMSGSIZE for an over-long one), framed only the first time it is asked for.
 * Inline: it runs for every request. */
static inline int connection_next_line(Connection *c, ProtoSlice *ret_line, size_t *ret_consumed) {
        /* (the batch asks a RESP connection with connection_next_resp() instead) */
        if (!c->framed)
                connection_frame(c);
        if (c->frame_result > 0) {
                *ret_line = (ProtoSlice){ .ptr = c->in + c->in_pos, .len = c->frame_line_len };
                *ret_consumed = c->frame_consumed;
        }
        return c->frame_result;
}

/* The next RESP request of a RESP connection, at in_pos: resp_parse()'s result (1 with
 * c->resp->req and frame_consumed set, 0, or an error with c->resp->req.error; -ENOMEM if
 * the connection could not turn RESP), parsed only the first time it is asked for. */
static inline int connection_next_resp(Connection *c) {
        if (!c->framed)
                connection_frame(c);
        return c->frame_result;
}

/* True if the input holds a request to answer: a complete line, an over-long one to
 * refuse, or (after EOF) an unterminated last line. */
bool connection_has_request(Connection *c);

/* Marks n bytes of input at in_pos consumed. */
static inline void connection_consume_input(Connection *c, size_t n) {
        c->in_pos += n;
        c->framed = false;
}

/* Throws away all input received (after an ERR, or when lingering). */
void connection_drop_input(Connection *c);

static inline size_t connection_unsent(const Connection *c) {
        return c->out_len - c->out_pos;
}

/* Sets the epoll events (EPOLLIN/EPOLLOUT; 0 removes the connection from c->epfd, so that
 * an EPOLLHUP cannot spin it). Returns 0 or -errno.
 * The registration is edge-triggered (EPOLLET is added here and at registration): level-triggered,
 * every loop iteration's epoll_wait() would return every connection with unread input again
 * (sd-event dispatches one source per iteration), which made 10,000 busy connections cost
 * O(n^2), seconds per batch. So whoever handles EPOLLIN reads until EAGAIN (connection_read()
 * does, or to a short read: see there) or drops EPOLLIN from the mask; setting it again
 * re-arms the edge. EPOLLRDHUP tells a peer's FIN that arrived with its last data. */
#define CONNECTION_EPOLL_FLAGS (EPOLLET | EPOLLRDHUP)
int connection_set_events(Connection *c, uint32_t events);

/* Re-registers the same events (if any), so that input left unread raises a new edge: for a
 * reader that stopped at a bound of its own rather than at EAGAIN. Returns 0 or -errno. */
int connection_rearm(Connection *c);
