/* SPDX-License-Identifier: MIT */
/* http.c: the libmicrohttpd endpoint; see http.h. */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "http.h"
#include "log.h"

#include "shared/clock.h"
#include "shared/macro.h"

#define HTTP_CONTENT_TYPE_METRICS "text/plain; version=0.0.4; charset=utf-8"
#define HTTP_CONTENT_TYPE_TEXT    "text/plain; charset=utf-8"

/* One connection libmicrohttpd has open: its socket_context. */
typedef struct HttpConn {
        int fd;              /* -EBADF: a free slot */
        bool shut;           /* shut down by us: libmicrohttpd closes it on its next turn */
        uint64_t start_usec; /* CLOCK_MONOTONIC: the connection's start, or its last answer's end */
} HttpConn;

struct Http {
        const Metrics *metrics; /* borrowed */
        char *metrics_path;
        struct MHD_Daemon *daemon;
        uint16_t port;
        /* conns: written by libmicrohttpd's thread (a connection's start, each answer, its close,
         * which it reports before it closes the socket) and http_expire() (the manager's) */
        pthread_mutex_t lock;
        HttpConn conns[HTTP_CONNECTIONS_MAX];
};

/* Under h->lock. Closes c: shutdown() wakes libmicrohttpd's poll() with an end of stream, and it
 * closes the connection (and tells http_notify_connection()) on its next turn. */
static void http_conn_shut(HttpConn *c) {
        (void) shutdown(c->fd, SHUT_RDWR);
        c->shut = true;
}

/* Under h->lock. Beyond HTTP_CONNECTIONS_EVICT open connections, closes the ones that have waited
 * longest for their answer, other than keep (the one that just arrived). */
static void http_make_room(Http *h, const HttpConn *keep) {
        unsigned open = 0;

        for (size_t i = 0; i < HTTP_CONNECTIONS_MAX; i++)
                open += h->conns[i].fd >= 0 && !h->conns[i].shut;
        for (; open > HTTP_CONNECTIONS_EVICT; open--) {
                HttpConn *oldest = NULL;

                for (size_t i = 0; i < HTTP_CONNECTIONS_MAX; i++) {
                        HttpConn *c = &h->conns[i];
                        if (c->fd >= 0 && !c->shut && c != keep &&
                            (!oldest || c->start_usec < oldest->start_usec))
                                oldest = c;
                }
                if (!oldest)
                        return;
                http_conn_shut(oldest);
        }
}

/* Runs on libmicrohttpd's thread: a connection starts or ends. */
static void http_notify_connection(void *cls, struct MHD_Connection *connection, void **socket_context,
                                   enum MHD_ConnectionNotificationCode toe) {
        Http *h = cls;
        HttpConn *c = NULL;

        pthread_mutex_lock(&h->lock);
        if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
                const union MHD_ConnectionInfo *info =
                        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);

                for (size_t i = 0; i < HTTP_CONNECTIONS_MAX && info; i++)
                        if (h->conns[i].fd < 0) {
                                c = &h->conns[i];
                                *c = (HttpConn){ .fd = info->connect_fd,
                                                 .start_usec = clock_usec(CLOCK_MONOTONIC) };
                                break;
                        }
                *socket_context = c; /* NULL: untracked (cannot happen: libmicrohttpd's limit is ours) */
                http_make_room(h, c);
        } else if (*socket_context) {
                c = *socket_context;
                c->fd = -EBADF;
                *socket_context = NULL;
        }
        pthread_mutex_unlock(&h->lock);
}

/* Runs on libmicrohttpd's thread: a request was answered (or failed); the next one's time
 * starts. */
static void http_request_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                                   enum MHD_RequestTerminationCode toe) {
        Http *h = cls;
        const union MHD_ConnectionInfo *info =
                MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        HttpConn *c = info ? info->socket_context : NULL;

        if (!c)
                return;
        pthread_mutex_lock(&h->lock);
        c->start_usec = clock_usec(CLOCK_MONOTONIC);
        pthread_mutex_unlock(&h->lock);
}

unsigned http_expire(Http *h, uint64_t now_usec) {
        unsigned n = 0;

        pthread_mutex_lock(&h->lock);
        for (size_t i = 0; i < HTTP_CONNECTIONS_MAX; i++) {
                HttpConn *c = &h->conns[i];

                if (c->fd >= 0 && !c->shut && now_usec - c->start_usec >= HTTP_REQUEST_USEC) {
                        http_conn_shut(c);
                        n++;
                }
        }
        pthread_mutex_unlock(&h->lock);
        if (n > 0)
                log_debug("HTTP: closed %u connections without an answer within %llu s", n,
                          (unsigned long long) (HTTP_REQUEST_USEC / 1000000));
        return n;
}

unsigned http_connections(Http *h) {
        unsigned n = 0;

        pthread_mutex_lock(&h->lock);
        for (size_t i = 0; i < HTTP_CONNECTIONS_MAX; i++)
                n += h->conns[i].fd >= 0 && !h->conns[i].shut;
        pthread_mutex_unlock(&h->lock);
        return n;
}

static enum MHD_Result respond(struct MHD_Connection *connection, unsigned status, const char *type,
                               void *body, size_t len, enum MHD_ResponseMemoryMode mode) {
        struct MHD_Response *response = MHD_create_response_from_buffer(len, body, mode);
        if (!response) {
                if (mode == MHD_RESPMEM_MUST_FREE)
                        free(body);
                return MHD_NO;
        }
        (void) MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, type);
        if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
                (void) MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
        enum MHD_Result r = MHD_queue_response(connection, status, response);
        MHD_destroy_response(response);
        return r;
}

static enum MHD_Result respond_static(struct MHD_Connection *connection, unsigned status, const char *body) {
        return respond(connection, status, HTTP_CONTENT_TYPE_TEXT, (void *) body, strlen(body),
                       MHD_RESPMEM_PERSISTENT);
}

/* Runs on libmicrohttpd's thread. */
static enum MHD_Result http_handler(void *cls, struct MHD_Connection *connection, const char *url,
                                    const char *method, const char *version, const char *upload_data,
                                    size_t *upload_data_size, void **con_cls) {
        Http *h = cls;

        if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
                return respond_static(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n");

        if (strcmp(url, h->metrics_path) == 0) {
                char *text = NULL;
                size_t len = 0;
                if (metrics_render(h->metrics, &text, &len) < 0)
                        return respond_static(connection, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
                return respond(connection, MHD_HTTP_OK, HTTP_CONTENT_TYPE_METRICS, text, len,
                               MHD_RESPMEM_MUST_FREE);
        }
        if (strcmp(url, HTTP_HEALTH_PATH) == 0) {
                if (metrics_serving(h->metrics))
                        return respond_static(connection, MHD_HTTP_OK, "ok\n");
                return respond_static(connection, MHD_HTTP_SERVICE_UNAVAILABLE, "not serving\n");
        }
        return respond_static(connection, MHD_HTTP_NOT_FOUND, "not found\n");
}

/* libmicrohttpd hands us its own printf-style format strings. Its messages are almost all
 * about one client's request (malformed, too big, cut off, over the connection limit), one
 * line per connection: client misbehaviour, logged at debug level only (docs/running.md "Running
 * divvyd", Logging), so that whoever reaches the port cannot fill the log. Failing to start
 * is reported by http_new()'s own message. cls: the prefix ("HTTP"). */
void http_log_mhd(void *cls, const char *format, va_list ap) {
        char buf[512];

        if (log_get_max_level() < LOG_DEBUG)
                return;
        vsnprintf(buf, sizeof buf, format, ap);
        buf[strcspn(buf, "\n")] = '\0';
        log_debug("%s: %s", (const char *) cls, buf);
}

int http_new(const HttpSettings *settings, const Metrics *m, Http **ret, char *errbuf, size_t errbuf_size) {
        const char *address = settings->address ? settings->address : HTTP_ADDRESS_DEFAULT;
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(settings->port) };
        struct sockaddr_in6 sin6 = { .sin6_family = AF_INET6, .sin6_port = htons(settings->port) };
        const struct sockaddr *sa;
        unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG;

        if (inet_pton(AF_INET, address, &sin.sin_addr) == 1)
                sa = (const struct sockaddr *) &sin;
        else if (inet_pton(AF_INET6, address, &sin6.sin6_addr) == 1) {
                sa = (const struct sockaddr *) &sin6;
                flags |= MHD_USE_IPv6;
        } else {
                if (errbuf)
                        snprintf(errbuf, errbuf_size,
                                 "HTTP address \"%s\" is not a numeric IPv4 or IPv6 address", address);
                return -EINVAL;
        }
        if (!settings->metrics_path || settings->metrics_path[0] != '/' ||
            strlen(settings->metrics_path) > HTTP_PATH_MAX) {
                if (errbuf)
                        snprintf(errbuf, errbuf_size,
                                 "metrics path must start with \"/\" (and be at most %d bytes)",
                                 HTTP_PATH_MAX);
                return -EINVAL;
        }

        _cleanup_(http_freep) Http *h = calloc(1, sizeof *h);
        if (!h)
                return -ENOMEM;
        h->metrics = m;
        pthread_mutex_init(&h->lock, NULL);
        for (size_t i = 0; i < HTTP_CONNECTIONS_MAX; i++)
                h->conns[i].fd = -EBADF;
        h->metrics_path = strdup(settings->metrics_path);
        if (!h->metrics_path)
                return -ENOMEM;

        errno = 0;
        h->daemon = MHD_start_daemon(
                flags, settings->port, NULL, NULL, http_handler, h,
                /* first, so that every message goes through it */
                MHD_OPTION_EXTERNAL_LOGGER, http_log_mhd, (void *) "HTTP", MHD_OPTION_SOCK_ADDR, sa,
                MHD_OPTION_CONNECTION_LIMIT, (unsigned) HTTP_CONNECTIONS_MAX, MHD_OPTION_CONNECTION_TIMEOUT,
                (unsigned) HTTP_TIMEOUT_SEC, MHD_OPTION_NOTIFY_CONNECTION, http_notify_connection, h,
                MHD_OPTION_NOTIFY_COMPLETED, http_request_completed, h, MHD_OPTION_END);
        if (!h->daemon) {
                int r = errno > 0 ? -errno : -EADDRNOTAVAIL;
                if (errbuf)
                        snprintf(errbuf, errbuf_size, "cannot serve HTTP on %s port %u: %s", address,
                                 settings->port, strerror(-r));
                return r;
        }
        const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
        h->port = info ? info->port : settings->port;
        *ret = h;
        h = NULL;
        return 0;
}

Http *http_free(Http *h) {
        if (!h)
                return NULL;
        if (h->daemon)
                MHD_stop_daemon(h->daemon);
        pthread_mutex_destroy(&h->lock);
        free(h->metrics_path);
        free(h);
        return NULL;
}

uint16_t http_port(const Http *h) {
        return h->port;
}
