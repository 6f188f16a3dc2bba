/* SPDX-License-Identifier: MIT */
/* http-api-server.c: the HTTP API's transport, libmicrohttpd in the event loop; see http-api-server.h. */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "connection.h"
#include "frontend-http.h"
#include "http-api-server.h"
#include "http.h"
#include "log.h"

#include "shared/clock.h"

#define HTTP_API_LISTENERS_MAX 16 /* --http-api options and passed sockets: more is a mistake */
#define HTTP_API_TICK_USEC                                                                                  \
        (1000ULL * 1000ULL) /* 1 s: the deadline's check, and the longest libmicrohttpd waits for           \
                             * its own timeouts */
#define HTTP_API_CONTENT_TYPE "application/json"

typedef enum HttpApiState {
        HTTP_API_IDLE,      /* between requests */
        HTTP_API_RECEIVING, /* headers in, body arriving */
        HTTP_API_IN_ENGINE, /* suspended: scheduled into a batch */
        HTTP_API_ANSWERED,  /* resumed: reply set */
        HTTP_API_REFUSED,   /* answered without the engine: its response queued */
} HttpApiState;

/* One connection libmicrohttpd has open (its socket_context), with its buffers. */
typedef struct HttpApiServerConn {
        HttpApiServer *api;
        struct MHD_Connection *mhd;
        int fd;
        bool admin;
        bool shut;           /* shut down by us: libmicrohttpd closes it on its next turn */
        uint64_t start_usec; /* CLOCK_MONOTONIC: its start, or its last answer's end */
        HttpApiState state;
        bool too_large;
        bool orphaned;    /* closed while in the engine: freed by its batch's completion */
        Connection *conn; /* the engine's view of the request (no socket) */
        HttpExchange exchange;
        HttpReply reply;
        struct HttpApiServerConn *prev, *next;
} HttpApiServerConn;

struct HttpApiServer {
        sd_event *event;
        Server *server; /* borrowed */
        struct MHD_Daemon *daemon;
        sd_event_source *io;    /* libmicrohttpd's epoll fd */
        sd_event_source *timer; /* its timeouts, and the deadline */
        sd_event_source *defer; /* runs it again after a resume, or when it has work left */
        Listener *listeners[HTTP_API_LISTENERS_MAX];
        size_t n_listeners;
        int adding_fd; /* the socket MHD_add_connection() is adding, and its listener's kind */
        bool adding_admin;
        HttpApiServerConn *conns;
        unsigned n_conns;
};

static void http_api_server_kick(HttpApiServer *api) {
        (void) sd_event_source_set_enabled(api->defer, SD_EVENT_ONESHOT);
}

/* libmicrohttpd's turn: what is ready, its timeouts; then the next turn is armed. */
static void http_api_server_run(HttpApiServer *api) {
        MHD_UNSIGNED_LONG_LONG ms = 0;
        uint64_t usec = HTTP_API_TICK_USEC;

        (void) MHD_run(api->daemon);
        if (MHD_get_timeout(api->daemon, &ms) == MHD_YES) {
                if (ms == 0)
                        http_api_server_kick(api); /* work left: after the other sources */
                else if (ms * 1000 < usec)
                        usec = ms * 1000;
        }
        /* always armed: the deadline's check runs under any load */
        (void) sd_event_source_set_time_relative(api->timer, usec);
        (void) sd_event_source_set_enabled(api->timer, SD_EVENT_ONESHOT);
}

static void http_api_server_conn_shut(HttpApiServerConn *hc) {
        (void) shutdown(hc->fd, SHUT_RDWR);
        hc->shut = true;
}

/* Closes the connections whose request has not been answered in time (not one in the engine:
 * its batch answers it). */
static void http_api_server_expire(HttpApiServer *api, uint64_t now) {
        for (HttpApiServerConn *hc = api->conns; hc; hc = hc->next)
                if (!hc->shut && hc->state != HTTP_API_IN_ENGINE && hc->state != HTTP_API_ANSWERED &&
                    now - hc->start_usec >= HTTP_REQUEST_USEC) {
                        log_debug("HTTP API: closing a connection without a request answered within %llu s",
                                  (unsigned long long) (HTTP_REQUEST_USEC / 1000000));
                        http_api_server_conn_shut(hc);
                }
}

/* Beyond HTTP_API_CONNECTIONS_EVICT, closes the connections waiting longest, other than keep. */
static void http_api_server_make_room(HttpApiServer *api, const HttpApiServerConn *keep) {
        unsigned open = 0;

        for (HttpApiServerConn *hc = api->conns; hc; hc = hc->next)
                open += !hc->shut;
        for (; open > HTTP_API_CONNECTIONS_EVICT; open--) {
                HttpApiServerConn *oldest = NULL;

                for (HttpApiServerConn *hc = api->conns; hc; hc = hc->next)
                        if (!hc->shut && hc != keep && hc->state != HTTP_API_IN_ENGINE &&
                            (!oldest || hc->start_usec < oldest->start_usec))
                                oldest = hc;
                if (!oldest)
                        return;
                http_api_server_conn_shut(oldest);
        }
}

static int http_api_server_io_handler(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        http_api_server_run(userdata);
        return 0;
}

static int http_api_server_timer_handler(sd_event_source *s, uint64_t usec, void *userdata) {
        HttpApiServer *api = userdata;

        http_api_server_expire(api, clock_usec(CLOCK_MONOTONIC));
        http_api_server_run(api);
        return 0;
}

static int http_api_server_defer_handler(sd_event_source *s, void *userdata) {
        http_api_server_run(userdata);
        return 0;
}

static HttpApiServerConn *http_api_server_conn_free(HttpApiServerConn *hc) {
        if (!hc)
                return NULL;
        connection_free(hc->conn);
        free(hc);
        return NULL;
}

/* The engine answered hc's request (server.c calls this from the batch's completion). */
static void http_api_server_request_done(Connection *c, void *userdata) {
        HttpExchange *x = userdata;
        HttpApiServerConn *hc = x->owner;

        if (hc->orphaned) {
                http_api_server_conn_free(hc); /* its connection closed meanwhile */
                return;
        }
        if (!hc->exchange.taken) {
                server_schedule(hc->api->server, c); /* no room in that batch: the next one */
                return;
        }
        frontend_http_reply(c, &hc->reply);
        hc->state = HTTP_API_ANSWERED;
        MHD_resume_connection(hc->mhd);
        http_api_server_kick(hc->api);
}

static void http_api_server_notify_connection(void *cls, struct MHD_Connection *connection,
                                              void **socket_context,
                                              enum MHD_ConnectionNotificationCode toe) {
        HttpApiServer *api = cls;
        HttpApiServerConn *hc;

        if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
                const union MHD_ConnectionInfo *info =
                        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);

                *socket_context = NULL;
                hc = calloc(1, sizeof *hc);
                if (!hc || connection_new(-EBADF, false, HTTP_API_OUT_MAX, &hc->conn) < 0) {
                        http_api_server_conn_free(hc);
                        log_warning("HTTP API: out of memory for a connection, refusing it");
                        return; /* the handler answers MHD_NO: closed */
                }
                hc->api = api;
                hc->mhd = connection;
                hc->fd = info ? info->connect_fd : -EBADF;
                hc->admin = hc->fd >= 0 && hc->fd == api->adding_fd && api->adding_admin;
                hc->start_usec = clock_usec(CLOCK_MONOTONIC);
                hc->conn->proto = CONNECTION_PROTO_HTTP;
                hc->conn->admin = hc->admin;
                hc->conn->done = http_api_server_request_done;
                hc->conn->userdata = &hc->exchange;
                hc->conn->id = (uint64_t) hc->fd;
                hc->next = api->conns;
                if (api->conns)
                        api->conns->prev = hc;
                api->conns = hc;
                api->n_conns++;
                *socket_context = hc;
                http_api_server_make_room(api, hc);
                return;
        }
        hc = *socket_context;
        if (!hc)
                return;
        if (hc->prev)
                hc->prev->next = hc->next;
        else
                api->conns = hc->next;
        if (hc->next)
                hc->next->prev = hc->prev;
        api->n_conns--;
        *socket_context = NULL;
        if (hc->state == HTTP_API_IN_ENGINE) {
                /* libmicrohttpd closes no suspended connection, but if it did, the engine still
                 * holds hc->conn: freed when its batch is done with it */
                hc->orphaned = true;
                return;
        }
        http_api_server_conn_free(hc);
}

static void http_api_server_request_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                                              enum MHD_RequestTerminationCode toe) {
        HttpApiServerConn *hc = *con_cls;

        if (!hc)
                return;
        hc->state = HTTP_API_IDLE;
        hc->start_usec = clock_usec(CLOCK_MONOTONIC);
        *con_cls = NULL;
}

static enum MHD_Result http_api_server_queue(struct MHD_Connection *connection, HttpApiServerConn *hc) {
        const HttpReply *rep = &hc->reply;
        Metrics *metrics = server_metrics(hc->api->server);
        struct MHD_Response *response;
        enum MHD_Result r;

        if (metrics)
                metrics_count_http_api(metrics, rep->status);
        /* The body stays in hc->reply until the next request on this connection, which starts
         * only once this response is sent. */
        response =
                MHD_create_response_from_buffer(rep->body_len, (void *) rep->body, MHD_RESPMEM_PERSISTENT);
        if (!response)
                return MHD_NO;
        (void) MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, HTTP_API_CONTENT_TYPE);
        if (rep->has_limit) {
                (void) MHD_add_response_header(response, "RateLimit-Policy", rep->policy);
                (void) MHD_add_response_header(response, "RateLimit", rep->limit);
        }
        if (rep->has_retry_after)
                (void) MHD_add_response_header(response, MHD_HTTP_HEADER_RETRY_AFTER, rep->retry_after);
        if (rep->status == MHD_HTTP_METHOD_NOT_ALLOWED)
                (void) MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, "POST");
        r = MHD_queue_response(connection, rep->status, response);
        MHD_destroy_response(response);
        return r;
}

/* An error answered without the engine (nothing charged): the status and a JSON reason. */
static enum MHD_Result http_api_server_refuse(struct MHD_Connection *connection, HttpApiServerConn *hc,
                                              unsigned status, const char *code, const char *reason) {
        hc->reply.status = status;
        hc->reply.has_limit = hc->reply.has_retry_after = false;
        hc->reply.body_len = http_api_format_error(hc->reply.body, code, reason);
        hc->state = HTTP_API_REFUSED;
        return http_api_server_queue(connection, hc);
}

/* Content-Type application/json, parameters (charset) allowed. */
static bool http_api_server_is_json(const char *type) {
        size_t n = strlen(HTTP_API_CONTENT_TYPE);

        return type && strncasecmp(type, HTTP_API_CONTENT_TYPE, n) == 0 &&
               (type[n] == '\0' || type[n] == ';' || type[n] == ' ');
}

/* A request's headers are in: its endpoint, method, type and length checked. */
static enum MHD_Result http_api_server_begin(struct MHD_Connection *connection, HttpApiServerConn *hc,
                                             const char *url, const char *method) {
        const char *type =
                MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        const char *length =
                MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        HttpApiEndpoint e = http_api_endpoint_from_path(url);
        Connection *c = hc->conn;

        c->in_len = c->in_pos = c->out_len = c->out_pos = 0;
        c->closing = c->err_sent = false;
        hc->too_large = false;
        hc->exchange = (HttpExchange){ .owner = hc, .endpoint = e };
        if (e < 0)
                return http_api_server_refuse(
                        connection, hc, MHD_HTTP_NOT_FOUND, "not-found",
                        "no such endpoint (POST /v1/take, /v1/peek, /v1/charge, /v1/refund, "
                        "/v1/reset, /v1/explain, /json)");
        if (strcmp(method, MHD_HTTP_METHOD_POST) != 0)
                return http_api_server_refuse(connection, hc, MHD_HTTP_METHOD_NOT_ALLOWED,
                                              "method-not-allowed", "use POST");
        /* envoyproxy/ratelimit's /json reads any type (its example sends curl's default) */
        if (e != HTTP_API_ENVOY && !http_api_server_is_json(type))
                return http_api_server_refuse(connection, hc, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                                              "unsupported-media-type",
                                              "the body must be Content-Type: application/json");
        if (length && strtoull(length, NULL, 10) > HTTP_API_BODY_MAX)
                return http_api_server_refuse(connection, hc, MHD_HTTP_CONTENT_TOO_LARGE, "too-large",
                                              "the body is larger than 16384 bytes");
        hc->state = HTTP_API_RECEIVING;
        return MHD_YES;
}

static enum MHD_Result http_api_server_handler(void *cls, struct MHD_Connection *connection, const char *url,
                                               const char *method, const char *version,
                                               const char *upload_data, size_t *upload_data_size,
                                               void **con_cls) {
        const union MHD_ConnectionInfo *info =
                MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        HttpApiServerConn *hc = info ? info->socket_context : NULL;

        if (!hc)
                return MHD_NO;
        if (!*con_cls) {
                *con_cls = hc;
                return http_api_server_begin(connection, hc, url, method);
        }
        switch (hc->state) {
        case HTTP_API_RECEIVING: {
                Connection *c = hc->conn;

                if (*upload_data_size > 0) {
                        if (*upload_data_size > HTTP_API_BODY_MAX - c->in_len)
                                hc->too_large = true; /* read on, answered 413 at its end */
                        else {
                                memcpy(c->in + c->in_len, upload_data, *upload_data_size);
                                c->in_len += *upload_data_size;
                        }
                        *upload_data_size = 0;
                        return MHD_YES;
                }
                if (hc->too_large)
                        return http_api_server_refuse(connection, hc, MHD_HTTP_CONTENT_TOO_LARGE,
                                                      "too-large", "the body is larger than 16384 bytes");
                hc->state = HTTP_API_IN_ENGINE;
                MHD_suspend_connection(connection);
                server_schedule(hc->api->server, c);
                return MHD_YES;
        }
        case HTTP_API_ANSWERED:
                return http_api_server_queue(connection, hc);
        case HTTP_API_REFUSED:
                *upload_data_size = 0; /* a refused request's body, read and dropped */
                return MHD_YES;
        default:
                return MHD_NO;
        }
}

int http_api_server_new(sd_event *e, Server *server, HttpApiServer **ret) {
        const union MHD_DaemonInfo *info;
        HttpApiServer *api;
        int r;

        api = calloc(1, sizeof *api);
        if (!api)
                return -ENOMEM;
        api->event = sd_event_ref(e);
        api->server = server;
        api->adding_fd = -EBADF;
        api->daemon = MHD_start_daemon(
                MHD_USE_EPOLL | MHD_USE_NO_LISTEN_SOCKET | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0,
                NULL, NULL, http_api_server_handler, api, MHD_OPTION_EXTERNAL_LOGGER, http_log_mhd,
                (void *) "HTTP API", MHD_OPTION_CONNECTION_LIMIT, (unsigned) HTTP_API_CONNECTIONS_MAX,
                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned) HTTP_TIMEOUT_SEC, MHD_OPTION_NOTIFY_CONNECTION,
                http_api_server_notify_connection, api, MHD_OPTION_NOTIFY_COMPLETED,
                http_api_server_request_completed, api, MHD_OPTION_END);
        if (!api->daemon) {
                http_api_server_free(api);
                return -EIO;
        }
        info = MHD_get_daemon_info(api->daemon, MHD_DAEMON_INFO_EPOLL_FD);
        r = info ? sd_event_add_io(e, &api->io, info->epoll_fd, EPOLLIN, http_api_server_io_handler, api)
                 : -EIO;
        if (r >= 0)
                r = sd_event_add_time_relative(e, &api->timer, CLOCK_MONOTONIC, HTTP_API_TICK_USEC,
                                               50 * 1000, http_api_server_timer_handler, api);
        if (r >= 0)
                r = sd_event_add_defer(e, &api->defer, http_api_server_defer_handler, api);
        if (r >= 0)
                r = sd_event_source_set_enabled(api->defer, SD_EVENT_OFF);
        if (r < 0) {
                http_api_server_free(api);
                return r;
        }
        *ret = api;
        return 0;
}

void http_api_server_stop(HttpApiServer *api) {
        if (!api)
                return;
        for (size_t i = 0; i < api->n_listeners; i++)
                listener_free(api->listeners[i]);
        api->n_listeners = 0;
}

HttpApiServer *http_api_server_free(HttpApiServer *api) {
        if (!api)
                return NULL;
        http_api_server_stop(api);
        if (api->daemon) {
                /* libmicrohttpd refuses to stop with a connection suspended: the requests still
                 * waiting for a batch are answered first. */
                for (HttpApiServerConn *hc = api->conns; hc; hc = hc->next)
                        if (hc->state == HTTP_API_IN_ENGINE) {
                                server_unschedule(api->server, hc->conn);
                                hc->exchange.taken = true;
                                hc->conn->out_len = 0; /* 503: not answered */
                                http_api_server_request_done(hc->conn, &hc->exchange);
                        }
                (void) MHD_run(api->daemon);
                MHD_stop_daemon(api->daemon);
        }
        sd_event_source_disable_unref(api->io);
        sd_event_source_disable_unref(api->timer);
        sd_event_source_disable_unref(api->defer);
        sd_event_unref(api->event);
        free(api);
        return NULL;
}

/* A connection a listener accepted: libmicrohttpd's from now on (it closes it, also on failure). */
static void http_api_server_accept(int fd, bool is_tcp, bool admin, void *userdata) {
        HttpApiServer *api = userdata;
        struct sockaddr_storage ss = { .ss_family = AF_UNIX };
        socklen_t len = sizeof ss;

        if (getpeername(fd, (struct sockaddr *) &ss, &len) < 0 || len < sizeof(sa_family_t)) {
                ss.ss_family = AF_UNIX;
                len = sizeof(sa_family_t);
        }
        /* A burst of connections is accepted in one go: the ones http_api_server_make_room()
         * shut for the earlier ones still count in libmicrohttpd's limit until its next turn. */
        if (api->n_conns >= HTTP_API_CONNECTIONS_EVICT)
                (void) MHD_run(api->daemon);
        api->adding_fd = fd;
        api->adding_admin = admin;
        if (MHD_add_connection(api->daemon, fd, (const struct sockaddr *) &ss, len) != MHD_YES)
                log_debug_errno(errno, "HTTP API: connection refused (%u open): %m", api->n_conns);
        api->adding_fd = -EBADF;
        http_api_server_kick(api);
}

static int http_api_server_add_listener(HttpApiServer *api, Listener *l) {
        if (api->n_listeners >= HTTP_API_LISTENERS_MAX) {
                listener_free(l);
                return -E2BIG;
        }
        listener_set_accept(l, http_api_server_accept, api);
        api->listeners[api->n_listeners++] = l;
        return 0;
}

int http_api_server_listen(HttpApiServer *api, const ListenAddress *a, mode_t unix_mode, char *errbuf,
                           size_t errbuf_size) {
        Listener *l = NULL;
        int r;

        r = listener_new(api->event, a, unix_mode, NULL, &l, errbuf, errbuf_size);
        if (r < 0)
                return r;
        r = http_api_server_add_listener(api, l);
        if (r < 0)
                snprintf(errbuf, errbuf_size, "more than %d HTTP API listeners", HTTP_API_LISTENERS_MAX);
        return r;
}

int http_api_server_adopt(HttpApiServer *api, int fd, const char *name) {
        Listener *l = NULL;
        int r;

        if (api->n_listeners >= HTTP_API_LISTENERS_MAX)
                return -E2BIG;
        r = listener_adopt(api->event, fd, name, NULL, &l);
        if (r < 0)
                return r;
        return http_api_server_add_listener(api, l);
}

unsigned http_api_server_connections(const HttpApiServer *api) {
        unsigned n = 0;

        for (const HttpApiServerConn *hc = api->conns; hc; hc = hc->next)
                n += !hc->shut;
        return n;
}
