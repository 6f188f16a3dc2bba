/* SPDX-License-Identifier: MIT */
/* listener.c: listening sockets, created or adopted, and their accept loop; see listener.h. */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "listener.h"

#include "core/number.h"
#include "log.h"

struct Listener {
        sd_event *event;
        sd_event_source *io;
        sd_event_source *pause; /* one-shot timer re-enabling io after EMFILE & co */
        int fd;
        bool is_tcp;
        bool admin;       /* its connections are admin connections */
        bool grpc;        /* its connections speak gRPC (--grpc) */
        bool unlink_path; /* a Unix socket file we created */
        char name[LISTEN_ADDRESS_MAX + 8];
        char path[sizeof(((struct sockaddr_un *) 0)->sun_path)];
        Server *server; /* borrowed: takes every connection accepted */
};

int listen_address_parse(const char *s, ListenAddress *ret) {
        ListenAddress a = {};
        const char *colon;
        size_t host_len;

        if (!s || strlen(s) >= LISTEN_ADDRESS_MAX)
                return -EINVAL;

        if (strncmp(s, LISTEN_ADMIN_PREFIX, strlen(LISTEN_ADMIN_PREFIX)) == 0) {
                s += strlen(LISTEN_ADMIN_PREFIX);
                a.admin = true;
        }

        if (strncmp(s, "unix:", 5) == 0) {
                s += 5;
                if (*s == '\0' || strlen(s) >= sizeof a.path)
                        return -EINVAL;
                a.kind = LISTEN_UNIX;
                strcpy(a.path, s);
                *ret = a;
                return 0;
        }

        if (strncmp(s, "tcp:", 4) != 0)
                return -EINVAL;
        s += 4;
        a.kind = LISTEN_TCP;

        if (*s == '[') {
                const char *close = strchr(s, ']');
                if (!close || close[1] != ':')
                        return -EINVAL;
                host_len = (size_t) (close - s - 1);
                if (host_len == 0 || host_len >= sizeof a.host || !memchr(s + 1, ':', host_len))
                        return -EINVAL; /* brackets are for IPv6 literals only */
                memcpy(a.host, s + 1, host_len);
                colon = close + 1;
        } else {
                colon = strrchr(s, ':');
                if (!colon)
                        return -EINVAL;
                host_len = (size_t) (colon - s);
                if (host_len == 0 || host_len >= sizeof a.host || memchr(s, ':', host_len))
                        return -EINVAL; /* bare IPv6 literals need brackets */
                memcpy(a.host, s, host_len);
        }
        a.host[host_len] = '\0';

        uint64_t port;
        if (parse_uint64(colon + 1, 1, 65535, &port) < 0)
                return -EINVAL;
        a.port = (uint16_t) port;

        *ret = a;
        return 0;
}

const char *listen_address_to_string(const ListenAddress *a, char *buf, size_t size) {
        const char *admin = a->admin ? LISTEN_ADMIN_PREFIX : "";

        if (a->kind == LISTEN_UNIX)
                snprintf(buf, size, "%sunix:%s", admin, a->path);
        else if (strchr(a->host, ':'))
                snprintf(buf, size, "%stcp:[%s]:%u", admin, a->host, (unsigned) a->port);
        else
                snprintf(buf, size, "%stcp:%s:%u", admin, a->host, (unsigned) a->port);
        return buf;
}

bool listen_fdname_is_admin(const char *name) {
        return name && strncmp(name, LISTEN_ADMIN_FDNAME, strlen(LISTEN_ADMIN_FDNAME)) == 0;
}

static int listener_pause_handler(sd_event_source *s, uint64_t usec, void *userdata) {
        Listener *l = userdata;

        (void) sd_event_source_set_enabled(l->io, SD_EVENT_ON);
        return 0;
}

/* Stops accepting for LISTEN_PAUSE_USEC: used when accept() fails for lack of
 * resources, where level-triggered readiness would otherwise spin. */
static void listener_pause(Listener *l) {
        int r;

        (void) sd_event_source_set_enabled(l->io, SD_EVENT_OFF);
        if (l->pause) {
                uint64_t now;
                (void) sd_event_now(l->event, CLOCK_MONOTONIC, &now);
                r = sd_event_source_set_time(l->pause, now + LISTEN_PAUSE_USEC);
                if (r >= 0)
                        r = sd_event_source_set_enabled(l->pause, SD_EVENT_ONESHOT);
        } else
                r = sd_event_add_time_relative(l->event, &l->pause, CLOCK_MONOTONIC, LISTEN_PAUSE_USEC,
                                               10 * 1000, listener_pause_handler, l);
        if (r < 0) {
                log_warning_errno(r, "%s: failed to arm pause timer, resuming at once: %m", l->name);
                (void) sd_event_source_set_enabled(l->io, SD_EVENT_ON);
        }
}

static int listener_io_handler(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Listener *l = userdata;

        for (unsigned i = 0; i < LISTEN_ACCEPT_BATCH; i++) {
                int cfd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (cfd < 0) {
                        switch (errno) {
                        case EAGAIN:
#if EAGAIN != EWOULDBLOCK
                        case EWOULDBLOCK:
#endif
                                return 0;
                        case EINTR:
                        case ECONNABORTED:
                        case EPROTO:
                        case EPERM:
                        case ENETDOWN:
                        case ENOPROTOOPT:
                        case EHOSTDOWN:
                        case ENONET:
                        case EHOSTUNREACH:
                        case EOPNOTSUPP:
                        case ENETUNREACH:
                                /* The connection died before we got it; try the next one. */
                                continue;
                        case EMFILE:
                        case ENFILE:
                        case ENOBUFS:
                        case ENOMEM:
                                log_warning_errno(errno, "%s: cannot accept connections, pausing: %m",
                                                  l->name);
                                listener_pause(l);
                                return 0;
                        default:
                                log_error_errno(errno, "%s: accept failed, pausing: %m", l->name);
                                listener_pause(l);
                                return 0;
                        }
                }
                if (l->grpc)
                        server_accept_grpc(cfd, l->is_tcp, l->admin, l->server);
                else
                        server_accept(cfd, l->is_tcp, l->admin, l->server);
        }
        return 0;
}

static int listener_alloc(sd_event *e, Server *server, Listener **ret) {
        Listener *l = calloc(1, sizeof *l);
        if (!l)
                return -ENOMEM;
        l->event = sd_event_ref(e);
        l->fd = -EBADF;
        l->server = server;
        *ret = l;
        return 0;
}

static int listener_start(Listener *l) {
        return sd_event_add_io(l->event, &l->io, l->fd, EPOLLIN, listener_io_handler, l);
}

Listener *listener_free(Listener *l) {
        if (!l)
                return NULL;
        sd_event_source_disable_unref(l->io);
        sd_event_source_disable_unref(l->pause);
        if (l->fd >= 0)
                close(l->fd);
        if (l->unlink_path)
                (void) unlink(l->path);
        sd_event_unref(l->event);
        free(l);
        return NULL;
}

const char *listener_name(const Listener *l) {
        return l->name;
}

bool listener_is_admin(const Listener *l) {
        return l->admin;
}

/* An admin listener on TCP has no mode: every user of this host (and anyone who can reach its
 * address) may REFUND and RESET any counter. Said once, when it starts listening. */
static void listener_warn_admin_tcp(const Listener *l) {
        if (l->admin && l->is_tcp)
                log_warning("%s: an admin listener on TCP lets every local user REFUND and RESET any "
                            "counter (and anyone who can reach its address); an admin:unix: socket's "
                            "mode (--admin-unix-mode) says who may",
                            l->name);
}

/* A Unix socket file left behind by a previous run is removed only if nobody
 * listens on it; anything else at that path is left alone. Returns 0 (path free
 * now) or -errno with a reason in errbuf. */
static int unix_socket_clear_stale(const char *path, char *errbuf, size_t errbuf_size) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct stat st;
        int fd, r;

        if (lstat(path, &st) < 0) {
                if (errno == ENOENT)
                        return 0;
                r = -errno;
                snprintf(errbuf, errbuf_size, "cannot stat %s: %s", path, strerror(-r));
                return r;
        }
        if (!S_ISSOCK(st.st_mode)) {
                snprintf(errbuf, errbuf_size, "%s exists and is not a socket; not removing it", path);
                return -EEXIST;
        }

        /* Non-blocking: a live socket whose owner does not accept and whose backlog is full
         * would block a blocking connect() forever; EAGAIN says someone listens there. */
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                r = -errno;
                snprintf(errbuf, errbuf_size, "socket(): %s", strerror(-r));
                return r;
        }
        strcpy(sa.sun_path, path);
        r = connect(fd, (struct sockaddr *) &sa, sizeof sa);
        if (r == 0 || errno == EAGAIN) {
                close(fd);
                snprintf(errbuf, errbuf_size, "%s is in use by another process", path);
                return -EADDRINUSE;
        }
        r = -errno;
        close(fd);
        if (r != -ECONNREFUSED) {
                snprintf(errbuf, errbuf_size, "cannot probe existing socket %s: %s", path, strerror(-r));
                return r;
        }
        if (unlink(path) < 0 && errno != ENOENT) {
                r = -errno;
                snprintf(errbuf, errbuf_size, "cannot remove stale socket %s: %s", path, strerror(-r));
                return r;
        }
        return 0;
}

static int listener_open_unix(Listener *l, const ListenAddress *a, mode_t unix_mode, char *errbuf,
                              size_t errbuf_size) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int r;

        r = unix_socket_clear_stale(a->path, errbuf, errbuf_size);
        if (r < 0)
                return r;

        l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (l->fd < 0)
                goto fail;
        strcpy(sa.sun_path, a->path);
        if (bind(l->fd, (struct sockaddr *) &sa, sizeof sa) < 0)
                goto fail;
        strcpy(l->path, a->path);
        l->unlink_path = true;
        if (chmod(a->path, unix_mode) < 0)
                goto fail;
        if (listen(l->fd, LISTEN_BACKLOG) < 0)
                goto fail;
        return 0;
fail:
        r = -errno;
        snprintf(errbuf, errbuf_size, "%s: %s", a->path, strerror(-r));
        return r;
}

static int listener_open_tcp(Listener *l, const ListenAddress *a, char *errbuf, size_t errbuf_size) {
        struct addrinfo hints = {
                .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
                .ai_family = AF_UNSPEC,
                .ai_socktype = SOCK_STREAM,
        };
        struct addrinfo *res = NULL;
        char port[8];
        int r, one = 1;

        snprintf(port, sizeof port, "%u", (unsigned) a->port);
        r = getaddrinfo(a->host, port, &hints, &res);
        if (r != 0) {
                snprintf(errbuf, errbuf_size, "cannot resolve '%s': %s", a->host, gai_strerror(r));
                return -EADDRNOTAVAIL;
        }

        /* The first address only: a name resolving to several would otherwise make
         * one --listen open sockets the operator did not ask for. */
        l->fd = socket(res->ai_family, res->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, res->ai_protocol);
        if (l->fd < 0)
                goto fail;
        if (setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
                goto fail;
        if (res->ai_family == AF_INET6)
                /* "[::]" means IPv6 and IPv4 alike, whatever the sysctl says; fine to fail. */
                (void) setsockopt(l->fd, IPPROTO_IPV6, IPV6_V6ONLY, &(int){ 0 }, sizeof(int));
        if (bind(l->fd, res->ai_addr, res->ai_addrlen) < 0)
                goto fail;
        if (listen(l->fd, LISTEN_BACKLOG) < 0)
                goto fail;
        freeaddrinfo(res);
        l->is_tcp = true;
        return 0;
fail:
        r = -errno;
        freeaddrinfo(res);
        snprintf(errbuf, errbuf_size, "%s", strerror(-r));
        return r;
}

int listener_new(sd_event *e, const ListenAddress *a, mode_t unix_mode, Server *server, Listener **ret,
                 char *errbuf, size_t errbuf_size) {
        Listener *l = NULL;
        int r;

        r = listener_alloc(e, server, &l);
        if (r < 0) {
                snprintf(errbuf, errbuf_size, "out of memory");
                return r;
        }
        listen_address_to_string(a, l->name, sizeof l->name);
        l->admin = a->admin;
        l->grpc = a->grpc;
        if (l->grpc)
                strcat(l->name, " [grpc]"); /* name has room for it beyond LISTEN_ADDRESS_MAX */

        if (a->kind == LISTEN_UNIX)
                r = listener_open_unix(l, a, unix_mode, errbuf, errbuf_size);
        else
                r = listener_open_tcp(l, a, errbuf, errbuf_size);
        if (r >= 0) {
                r = listener_start(l);
                if (r < 0)
                        snprintf(errbuf, errbuf_size, "cannot watch socket: %s", strerror(-r));
        }
        if (r < 0) {
                listener_free(l);
                return r;
        }
        listener_warn_admin_tcp(l);
        *ret = l;
        return 0;
}

int listener_adopt(sd_event *e, int fd, const char *name, Server *server, Listener **ret) {
        Listener *l = NULL;
        int r, flags;

        r = sd_is_socket(fd, AF_UNSPEC, SOCK_STREAM, 1);
        if (r < 0)
                return r;
        if (r == 0)
                return -ENOTSOCK;

        flags = fcntl(fd, F_GETFL);
        if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
                return -errno;
        flags = fcntl(fd, F_GETFD);
        if (flags < 0 || fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0)
                return -errno;

        r = listener_alloc(e, server, &l);
        if (r < 0)
                return r;
        l->fd = fd;
        l->is_tcp = sd_is_socket_inet(fd, AF_UNSPEC, SOCK_STREAM, 1, 0) > 0;
        l->admin = listen_fdname_is_admin(name);
        l->grpc = listen_fdname_is_grpc(name);
        snprintf(l->name, sizeof l->name, "fd %d (%s)%s%s", fd, name ? name : "unnamed",
                 l->admin ? " [admin]" : "", l->grpc ? " [grpc]" : "");

        r = listener_start(l);
        if (r < 0) {
                l->fd = -EBADF; /* the caller still owns fd on failure */
                listener_free(l);
                return r;
        }
        listener_warn_admin_tcp(l);
        *ret = l;
        return 0;
}

bool listen_fdname_is_grpc(const char *name) {
        return name && strstr(name, LISTEN_GRPC_FDNAME);
}
