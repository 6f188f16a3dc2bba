/* SPDX-License-Identifier: MIT */
#include "store/redis-conn.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/number.h"

/* One command awaiting its reply. */
typedef struct Pending {
        RedisReplyFunc cb; /* NULL: abandoned, or nobody wants the reply */
        void *userdata;
} Pending;

struct RedisConn {
        const RedisIo *io;
        RedisConnEventFunc on_event;
        void *userdata;
        RedisReplyFunc on_push; /* pub/sub messages (redis_conn_set_push()); NULL: none */
        void *push_userdata;
        char *user, *password;
        int db;

        int fd;
        uint64_t gen; /* bumped by every close: a loop over one socket stops when it changes */
        RedisConnState state;
        uint32_t watched; /* events last passed to io->watch() */
        RedisAddr addr;
        char error[REDIS_ADDR_NAME_MAX + 256];

        redisReader *reader;

        char *out; /* output: [out_off, out_len) not written yet */
        size_t out_off, out_len, out_cap;

        Pending *ring; /* the FIFO: ring[(head + i) % cap], i < n; the oldest is seq head_seq */
        size_t head, n, cap;
        uint64_t head_seq;
        uint64_t replies; /* read, abandoned ones too (not the commands a close failed) */
};

int redis_addr_from_host(RedisAddr *ret, const char *host, int port, bool numeric_only, char *errbuf,
                         size_t size) {
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res = NULL;
        char service[16];
        int r;

        if (port <= 0 || port > 65535) {
                if (errbuf)
                        snprintf(errbuf, size, "bad port %d for host '%s'", port, host);
                return -EINVAL;
        }
        if (numeric_only)
                hints.ai_flags |= AI_NUMERICHOST;
        snprintf(service, sizeof(service), "%d", port);
        hints.ai_flags |= AI_NUMERICSERV;
        r = getaddrinfo(host, service, &hints, &res);
        if (r != 0 || !res) {
                if (errbuf)
                        snprintf(errbuf, size, "cannot resolve '%s'%s: %s", host,
                                 numeric_only ? " (only numeric addresses here)" : "",
                                 r != 0 ? gai_strerror(r) : "no address");
                return -EADDRNOTAVAIL;
        }
        memset(ret, 0, sizeof(*ret));
        memcpy(&ret->sa, res->ai_addr, res->ai_addrlen);
        ret->len = res->ai_addrlen;
        if (res->ai_family == AF_INET6)
                snprintf(ret->name, sizeof(ret->name), "[%s]:%d", host, port);
        else
                snprintf(ret->name, sizeof(ret->name), "%s:%d", host, port);
        freeaddrinfo(res);
        return 0;
}

int redis_addr_from_unix(RedisAddr *ret, const char *path) {
        struct sockaddr_un *un = (struct sockaddr_un *) &ret->sa;
        size_t len = strlen(path);

        if (len == 0 || len >= sizeof(un->sun_path) || len >= sizeof(ret->name))
                return -ENAMETOOLONG;
        memset(ret, 0, sizeof(*ret));
        un->sun_family = AF_UNIX;
        memcpy(un->sun_path, path, len + 1);
        ret->len = (socklen_t) (offsetof(struct sockaddr_un, sun_path) + len + 1);
        memcpy(ret->name, path, len + 1);
        return 0;
}

int redis_conn_new(const RedisIo *io, const RedisConnOptions *o, RedisConnEventFunc on_event, void *userdata,
                   RedisConn **ret) {
        RedisConn *c = calloc(1, sizeof(*c));

        if (!c)
                return -ENOMEM;
        c->io = io;
        c->on_event = on_event;
        c->userdata = userdata;
        c->fd = -1;
        c->db = o ? o->db : 0;
        if (o && o->user && !(c->user = strdup(o->user)))
                goto fail;
        if (o && o->password && !(c->password = strdup(o->password)))
                goto fail;
        *ret = c;
        return 0;
fail:
        redis_conn_free(c);
        return -ENOMEM;
}

RedisConn *redis_conn_free(RedisConn *c) {
        if (!c)
                return NULL;
        redis_conn_disconnect(c, -ECANCELED);
        free(c->out);
        free(c->ring);
        if (c->password)
                explicit_bzero(c->password, strlen(c->password));
        free(c->password);
        free(c->user);
        free(c);
        return NULL;
}

static int conn_watch(RedisConn *c) {
        uint32_t events = 0;

        if (c->fd < 0)
                return 0;
        events = EPOLLIN;
        if (c->state == REDIS_CONN_CONNECTING || c->out_off < c->out_len)
                events |= EPOLLOUT;
        if (events == c->watched)
                return 0;
        c->watched = events;
        return c->io->watch(c->io->userdata, c->fd, events);
}

/* Closes with error; what: the sentence for redis_conn_last_error() (NULL: error's). */
static void conn_close(RedisConn *c, int error, const char *what) {
        int fd = c->fd;

        if (fd < 0)
                return;
        /* Closed first, so that a callback sees a CLOSED connection and cannot queue on it. */
        if (c->watched != 0)
                (void) c->io->watch(c->io->userdata, fd, 0);
        c->watched = 0;
        (void) close(fd);
        c->fd = -1;
        c->gen++;
        c->state = REDIS_CONN_CLOSED;
        c->out_off = c->out_len = 0;
        if (c->reader) {
                redisReaderFree(c->reader);
                c->reader = NULL;
        }
        snprintf(c->error, sizeof(c->error), "%s: %s", c->addr.name, what ? what : strerror(-error));
        /* Each entry is taken off the FIFO before its callback runs: a callback that
         * disconnects again (nothing to do) or a nested call never sees it twice. */
        while (c->n > 0) {
                Pending p = c->ring[c->head];

                c->head = (c->head + 1) % c->cap;
                c->n--;
                c->head_seq++;
                if (p.cb)
                        p.cb(p.userdata, NULL, error);
        }
        if (c->on_event)
                c->on_event(c->userdata, error);
}

void redis_conn_disconnect(RedisConn *c, int error) {
        conn_close(c, error, NULL);
}

static int out_reserve(RedisConn *c, size_t more) {
        size_t need, cap;
        char *p;

        if (c->out_off > 0 && c->out_off == c->out_len)
                c->out_off = c->out_len = 0;
        need = c->out_len + more;
        if (need <= c->out_cap)
                return 0;
        if (c->out_off > 0) { /* compact before growing */
                memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
                c->out_len -= c->out_off;
                c->out_off = 0;
                need = c->out_len + more;
                if (need <= c->out_cap)
                        return 0;
        }
        if (need > REDIS_CONN_OUT_MAX)
                return -ENOBUFS;
        cap = c->out_cap ? c->out_cap : 4096;
        while (cap < need)
                cap *= 2;
        p = realloc(c->out, cap);
        if (!p)
                return -ENOMEM;
        c->out = p;
        c->out_cap = cap;
        return 0;
}

static int ring_push(RedisConn *c, RedisReplyFunc cb, void *userdata, uint64_t *ret_seq) {
        if (c->n >= REDIS_CONN_PENDING_MAX)
                return -ENOBUFS;
        if (c->n == c->cap) {
                size_t cap = c->cap ? c->cap * 2 : 64;
                Pending *p = malloc(cap * sizeof(*p));

                if (!p)
                        return -ENOMEM;
                for (size_t i = 0; i < c->n; i++)
                        p[i] = c->ring[(c->head + i) % c->cap];
                free(c->ring);
                c->ring = p;
                c->cap = cap;
                c->head = 0;
        }
        c->ring[(c->head + c->n) % c->cap] = (Pending){ .cb = cb, .userdata = userdata };
        if (ret_seq)
                *ret_seq = c->head_seq + c->n;
        c->n++;
        return 0;
}

int redis_conn_command(RedisConn *c, int argc, const char *const *argv, const size_t *argvlen,
                       RedisReplyFunc cb, void *userdata, uint64_t *ret_seq) {
        size_t need = 1 + 20 + 2, len;
        char *p;
        int r;

        if (c->fd < 0)
                return -ENOTCONN;
        if (argc <= 0)
                return -EINVAL;
        for (int i = 0; i < argc; i++)
                need += 1 + 20 + 2 + argvlen[i] + 2;
        r = out_reserve(c, need);
        if (r < 0)
                return r;
        r = ring_push(c, cb, userdata, ret_seq);
        if (r < 0)
                return r;
        p = c->out + c->out_len;
        *p++ = '*';
        p = number_append_u64(p, (uint64_t) argc);
        *p++ = '\r';
        *p++ = '\n';
        for (int i = 0; i < argc; i++) {
                len = argvlen[i];
                *p++ = '$';
                p = number_append_u64(p, len);
                *p++ = '\r';
                *p++ = '\n';
                if (len > 0)
                        memcpy(p, argv[i], len);
                p += len;
                *p++ = '\r';
                *p++ = '\n';
        }
        c->out_len = (size_t) (p - c->out);
        return 0;
}

int redis_conn_abandon(RedisConn *c, uint64_t seq) {
        if (seq < c->head_seq || seq - c->head_seq >= c->n)
                return -ENOENT;
        c->ring[(c->head + (size_t) (seq - c->head_seq)) % c->cap].cb = NULL;
        return 0;
}

int redis_conn_flush(RedisConn *c) {
        if (c->fd < 0)
                return -ENOTCONN;
        if (c->state != REDIS_CONN_CONNECTED)
                return conn_watch(c);
        while (c->out_off < c->out_len) {
                ssize_t k = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);

                if (k < 0) {
                        int e = errno;

                        if (e == EINTR)
                                continue;
                        if (e == EAGAIN || e == EWOULDBLOCK)
                                break;
                        redis_conn_disconnect(c, -e);
                        return -e;
                }
                c->out_off += (size_t) k;
        }
        if (c->out_off == c->out_len)
                c->out_off = c->out_len = 0;
        return conn_watch(c);
}

/* The handshake's replies (AUTH, SELECT): an error reply closes the connection. */
static void handshake_reply(void *userdata, redisReply *reply, int error, int fail_error, const char *what) {
        RedisConn *c = userdata;
        char msg[200];

        if (error < 0 || !reply || reply->type != REDIS_REPLY_ERROR)
                return;
        snprintf(msg, sizeof(msg), "%s refused: %.*s", what, (int) (reply->len < 150 ? reply->len : 150),
                 reply->str);
        conn_close(c, fail_error, msg);
}

static void auth_reply(void *userdata, redisReply *reply, int error) {
        handshake_reply(userdata, reply, error, -EACCES, "AUTH");
}

static void select_reply(void *userdata, redisReply *reply, int error) {
        handshake_reply(userdata, reply, error, -EINVAL, "SELECT");
}

int redis_conn_connect(RedisConn *c, const RedisAddr *addr) {
        int fd, r;

        if (c->fd >= 0)
                return -EBUSY;
        c->addr = *addr;
        c->error[0] = '\0';
        c->reader = redisReaderCreate();
        if (!c->reader)
                return -ENOMEM;
        c->reader->maxbuf = REDIS_CONN_READER_MAXBUF;
        fd = socket(addr->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                r = -errno;
                goto fail;
        }
        if (addr->sa.ss_family != AF_UNIX) {
                int one = 1;

                (void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }
        if (connect(fd, (const struct sockaddr *) &addr->sa, addr->len) < 0) {
                r = -errno;
                if (r != -EINPROGRESS) {
                        (void) close(fd);
                        if (r == -EAGAIN) /* a Unix socket's full backlog */
                                r = -ECONNREFUSED;
                        goto fail;
                }
        }
        /* Connecting even if connect() completed at once (a Unix socket): EPOLLOUT reports it
         * like any other, so the event callback never runs inside this call. */
        c->state = REDIS_CONN_CONNECTING;
        c->fd = fd;
        c->watched = 0;
        c->out_off = c->out_len = 0;

        if (c->password) {
                const char *argv[3] = { "AUTH", c->user ? c->user : c->password, c->password };
                size_t argvlen[3] = { 4, strlen(argv[1]), strlen(c->password) };

                r = redis_conn_command(c, c->user ? 3 : 2, argv, argvlen, auth_reply, c, NULL);
                if (r < 0)
                        goto fail_fd;
        }
        if (c->db > 0) {
                char db[16];
                const char *argv[2] = { "SELECT", db };
                size_t argvlen[2] = { 6, (size_t) snprintf(db, sizeof(db), "%d", c->db) };

                r = redis_conn_command(c, 2, argv, argvlen, select_reply, c, NULL);
                if (r < 0)
                        goto fail_fd;
        }
        r = conn_watch(c);
        if (r < 0)
                goto fail_fd;
        return 0;
fail_fd:
        /* Nothing of the caller's is queued yet: close quietly. */
        if (c->watched)
                (void) c->io->watch(c->io->userdata, c->fd, 0);
        (void) close(c->fd);
        c->fd = -1;
        c->n = 0;
        c->state = REDIS_CONN_CLOSED;
fail:
        if (c->reader) {
                redisReaderFree(c->reader);
                c->reader = NULL;
        }
        snprintf(c->error, sizeof(c->error), "%s: %s", addr->name, strerror(-r));
        return r;
}

void redis_conn_set_push(RedisConn *c, RedisReplyFunc cb, void *userdata) {
        c->on_push = cb;
        c->push_userdata = userdata;
}

/* A pub/sub message: "message" or "pmessage" and its strings (a confirmation is not one). */
static bool reply_is_push(const redisReply *r) {
        const redisReply *kind;

        if (r->type != REDIS_REPLY_ARRAY || r->elements < 3)
                return false;
        kind = r->element[0];
        if (kind->type != REDIS_REPLY_STRING)
                return false;
        return (kind->len == 7 && memcmp(kind->str, "message", 7) == 0 && r->elements == 3) ||
               (kind->len == 8 && memcmp(kind->str, "pmessage", 8) == 0 && r->elements == 4);
}

static void conn_dispatch(RedisConn *c) {
        uint64_t gen = c->gen;

        /* a callback may close the connection, and even connect it again */
        while (c->fd >= 0 && c->gen == gen) {
                void *reply = NULL;
                Pending p;

                if (redisReaderGetReply(c->reader, &reply) != REDIS_OK) {
                        char msg[160];

                        snprintf(msg, sizeof(msg), "protocol error: %s", c->reader->errstr);
                        conn_close(c, -EPROTO, msg);
                        return;
                }
                if (!reply)
                        return;
                if (c->on_push && reply_is_push(reply)) {
                        c->replies++;
                        c->on_push(c->push_userdata, reply, 0);
                        freeReplyObject(reply);
                        continue;
                }
                if (c->n == 0) {
                        freeReplyObject(reply);
                        conn_close(c, -EPROTO, "protocol error: a reply to no command");
                        return;
                }
                p = c->ring[c->head];
                c->head = (c->head + 1) % c->cap;
                c->n--;
                c->head_seq++;
                c->replies++;
                if (p.cb)
                        p.cb(p.userdata, reply, 0);
                freeReplyObject(reply);
        }
}

int redis_conn_on_io(RedisConn *c, uint32_t revents) {
        char buf[REDIS_CONN_READ_CHUNK];
        uint64_t gen = c->gen;

        if (c->fd < 0)
                return 0;
        if (c->state == REDIS_CONN_CONNECTING) {
                int err = 0;
                socklen_t len = sizeof(err);

                if (!(revents & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
                        return 0;
                if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
                        err = errno;
                if (err == 0 && (revents & (EPOLLERR | EPOLLHUP)) && !(revents & EPOLLOUT))
                        err = ECONNREFUSED;
                if (err != 0) {
                        redis_conn_disconnect(c, -err);
                        return -err;
                }
                c->state = REDIS_CONN_CONNECTED;
                if (c->on_event)
                        c->on_event(c->userdata, 0);
                if (c->gen != gen)
                        return -ECANCELED;
        }
        if (revents & EPOLLOUT) {
                int r = redis_conn_flush(c);

                if (r < 0)
                        return r;
                if (c->gen != gen)
                        return -ECANCELED;
        }
        if (!(revents & (EPOLLIN | EPOLLERR | EPOLLHUP)))
                return 0;
        for (unsigned i = 0; i < REDIS_CONN_READS_MAX && c->gen == gen; i++) {
                ssize_t k = recv(c->fd, buf, sizeof(buf), 0);

                if (k < 0) {
                        int e = errno;

                        if (e == EINTR)
                                continue;
                        if (e == EAGAIN || e == EWOULDBLOCK)
                                break;
                        redis_conn_disconnect(c, -e);
                        return -e;
                }
                if (k == 0) {
                        conn_close(c, -ECONNRESET, "connection closed by the server");
                        return -ECONNRESET;
                }
                if (redisReaderFeed(c->reader, buf, (size_t) k) != REDIS_OK) {
                        conn_close(c, -ENOMEM, "out of memory reading a reply");
                        return -ENOMEM;
                }
                conn_dispatch(c);
                if ((size_t) k < sizeof(buf))
                        break;
        }
        return c->gen == gen ? 0 : -ECONNRESET;
}

RedisConnState redis_conn_state(const RedisConn *c) {
        return c->state;
}

int redis_conn_fd(const RedisConn *c) {
        return c->fd;
}

size_t redis_conn_pending(const RedisConn *c) {
        return c->n;
}

uint64_t redis_conn_replies(const RedisConn *c) {
        return c->replies;
}

const char *redis_conn_address(const RedisConn *c) {
        return c->addr.name;
}

const char *redis_conn_last_error(const RedisConn *c) {
        return c->error;
}
