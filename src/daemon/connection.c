/* SPDX-License-Identifier: MIT */
/* connection.c: a client connection's buffers and socket calls; see connection.h. */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "connection.h"

static size_t page_round(size_t n) {
        size_t page = (size_t) sysconf(_SC_PAGESIZE);

        return (n + page - 1) / page * page;
}

/* Gives a mapped output buffer back (every byte of it is sent): out is the heap's again. */
static void connection_unmap_output(Connection *c) {
        if (!c->out_mapped)
                return;
        (void) munmap(c->out, c->out_size);
        c->out = c->out_heap;
        c->out_size = c->out_max < CONNECTION_OUT_INITIAL ? c->out_max : CONNECTION_OUT_INITIAL;
        c->out_mapped = false;
}

/* Grows the output buffer to size bytes, rounded up to a page, as a mapping of its own: a new
 * one (out_heap stays allocated, for when it is given back) or the same one remapped, which
 * copies nothing. Returns 0 or -ENOMEM. */
static int connection_map_output(Connection *c, size_t size) {
        char *p;

        size = page_round(size);
        if (c->out_mapped)
                p = mremap(c->out, c->out_size, size, MREMAP_MAYMOVE);
        else
                p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
                return -ENOMEM;
        if (!c->out_mapped)
                memcpy(p, c->out, c->out_len);
        c->out = p;
        c->out_size = size;
        c->out_mapped = true;
        return 0;
}

int connection_new(int fd, bool is_tcp, size_t out_max, Connection **ret) {
        Connection *c;

        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->fd = -EBADF;
        c->epfd = -EBADF;
        c->in = malloc(CONNECTION_IN_SIZE);
        c->out_size = out_max < CONNECTION_OUT_INITIAL ? out_max : CONNECTION_OUT_INITIAL;
        c->out = c->out_heap = malloc(c->out_size);
        if (!c->in || !c->out) {
                connection_free(c);
                return -ENOMEM;
        }
        c->out_max = out_max;
        c->fd = fd;
        c->is_tcp = is_tcp;
        *ret = c;
        return 0;
}

Connection *connection_free(Connection *c) {
        if (!c)
                return NULL;
        if (c->events != 0 && c->epfd >= 0)
                (void) epoll_ctl(c->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        if (c->fd >= 0)
                close(c->fd);
        free(c->in);
        connection_unmap_output(c);
        free(c->out_heap);
        if (c->resp)
                free(c->resp->multi_buf);
        free(c->resp);
        free(c);
        return NULL;
}

ssize_t connection_read(Connection *c) {
        size_t total = 0;

        while (!c->eof && c->in_len < CONNECTION_IN_SIZE) {
                size_t room = CONNECTION_IN_SIZE - c->in_len;
                ssize_t n = read(c->fd, c->in + c->in_len, room);
                if (n > 0) {
                        if (c->framed && c->frame_result == 0)
                                c->framed = false; /* the incomplete line may be complete now */
                        c->in_len += (size_t) n;
                        total += (size_t) n;
                        if ((size_t) n < room && !c->peer_shut)
                                break; /* drained: saves the read() that would say EAGAIN */
                } else if (n == 0)
                        c->eof = true;
                else if (errno == EINTR)
                        continue;
                else if (errno == EAGAIN || errno == EWOULDBLOCK)
                        break;
                else {
                        c->eof = true;
                        return -errno;
                }
        }
        return (ssize_t) total;
}

int connection_discard_input(Connection *c) {
        char buf[4096];

        for (unsigned i = 0; i < 64; i++) { /* bounded: a flood cannot keep us here */
                ssize_t n = read(c->fd, buf, sizeof buf);
                if (n == 0)
                        return 1;
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN || errno == EWOULDBLOCK)
                                return 0;
                        return -errno;
                }
        }
        return 2;
}

int connection_flush(Connection *c) {
        while (c->out_pos < c->out_len) {
                ssize_t n = send(c->fd, c->out + c->out_pos, c->out_len - c->out_pos,
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN || errno == EWOULDBLOCK)
                                return 1;
                        return -errno;
                }
                c->out_pos += (size_t) n;
                if (c->out_pos < c->out_len)
                        return 1; /* short write: the socket buffer is full, wait for EPOLLOUT */
        }
        c->out_pos = c->out_len = 0;
        /* Caught up: a backlog's memory goes back. Not under a batch in flight: it reserved
         * room in this buffer for replies it formats when the store completes. */
        if (c->out_size > CONNECTION_OUT_KEEP && !c->in_flight)
                connection_unmap_output(c);
        return 0;
}

char *connection_reserve(Connection *c, size_t n) {
        size_t unsent = connection_unsent(c);

        if (c->out_size - c->out_len >= n)
                return c->out + c->out_len;

        if (c->out_pos > 0) {
                memmove(c->out, c->out + c->out_pos, unsent);
                c->out_pos = 0;
                c->out_len = unsent;
                if (c->out_size - c->out_len >= n)
                        return c->out + c->out_len;
        }

        if (n > c->out_max - c->out_len)
                return NULL;
        size_t size = c->out_size;
        while (size - c->out_len < n)
                size = size > c->out_max / 2 ? c->out_max : size * 2;
        if (connection_map_output(c, size) < 0)
                return NULL;
        return c->out + c->out_len;
}

void connection_compact_input(Connection *c) {
        if (c->in_pos == 0)
                return;
        /* The framing is relative to in_pos: it stays valid; but a framed RESP request's argv
         * points into the buffer, so it is framed again. */
        memmove(c->in, c->in + c->in_pos, c->in_len - c->in_pos);
        if (c->proto == CONNECTION_PROTO_RESP)
                c->framed = false;
        c->in_len -= c->in_pos;
        c->in_pos = 0;
}

/* A connection not yet known to be a line connection: decides by its first byte, then frames
 * a RESP request. */
static void connection_frame_resp(Connection *c) {
        if (c->proto == CONNECTION_PROTO_UNDECIDED) {
                if (c->in_len <= c->in_pos) {
                        c->frame_result = 0;
                        c->framed = true;
                        return;
                }
                if (c->in[c->in_pos] != '*' || !c->resp_allowed) {
                        c->proto = CONNECTION_PROTO_LINE;
                        connection_frame(c);
                        return;
                }
                c->proto = CONNECTION_PROTO_RESP;
                c->resp = calloc(1, sizeof *c->resp);
        }
        c->framed = true;
        if (!c->resp) {
                c->frame_result = -ENOMEM;
                return;
        }
        c->frame_result = resp_parse(c->in + c->in_pos, c->in_len - c->in_pos, RESP_ARGS_MAX,
                                     RESP_REQUEST_MAX, &c->resp->req);
        c->frame_consumed = c->resp->req.consumed;
}

void connection_frame(Connection *c) {
        ProtoSlice line = {};

        if (c->proto == CONNECTION_PROTO_GRPC) {
                /* HTTP/2 frames: the front-end hands every byte to nghttp2 */
                c->frame_result = c->in_len > c->in_pos || c->grpc_work;
                c->framed = true;
                return;
        }

        if (c->proto != CONNECTION_PROTO_LINE) {
                connection_frame_resp(c);
                return;
        }

        c->frame_result = proto_next_line(c->in + c->in_pos, c->in_len - c->in_pos, PROTO_LINE_MAX, &line,
                                          &c->frame_consumed);
        c->frame_line_len = line.len;
        c->framed = true;
}

bool connection_has_request(Connection *c) {
        ProtoSlice line;
        size_t consumed;

        if (c->proto == CONNECTION_PROTO_GRPC)
                return c->in_len > c->in_pos || c->grpc_work;
        if (c->in_len <= c->in_pos)
                return false;
        if (c->eof)
                return true;
        if (c->proto != CONNECTION_PROTO_LINE)
                return connection_next_resp(c) != 0;
        return connection_next_line(c, &line, &consumed) != 0;
}

void connection_drop_input(Connection *c) {
        c->in_pos = c->in_len = 0;
        c->framed = false;
}

/* Registers events (0: none) with the server's epoll, whatever was registered before. */
static int events_ctl(Connection *c, uint32_t events) {
        struct epoll_event ev = { .events = events | CONNECTION_EPOLL_FLAGS, .data.ptr = c };
        int r;

        if (events == 0)
                r = epoll_ctl(c->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        else
                /* MOD re-checks readiness, which re-arms the edge */
                r = epoll_ctl(c->epfd, c->events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c->fd, &ev);
        if (r < 0)
                return -errno;
        c->events = events;
        return 0;
}

int connection_set_events(Connection *c, uint32_t events) {
        return events == c->events ? 0 : events_ctl(c, events);
}

int connection_rearm(Connection *c) {
        /* the same events again: input still queued raises a new edge */
        return c->events == 0 ? 0 : events_ctl(c, c->events);
}
