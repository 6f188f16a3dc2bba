/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * http-api-server.c: the HTTP decision API's transport (docs/http-api.md): its own listeners
 * (--http-api=ADDR, or sockets passed by systemd named "http-api" / "admin-http-api"), apart
 * from the Prometheus endpoint (http.c) so that exposing one does not expose the other, and
 * libmicrohttpd for HTTP/1.1 framing, keep-alive and chunked bodies.
 *
 * libmicrohttpd runs in divvyd's event loop, not in a thread of its own: started with
 * MHD_USE_EPOLL and no internal thread, its epoll fd is an io source of the loop and its
 * timeouts a timer, and MHD_run() does its work there. The listeners are divvyd's own
 * (listener.c: created or adopted alike, admin or not by the same "admin:" prefix and names
 * as the divvy listeners) and hand each accepted socket to MHD_add_connection(); libmicrohttpd
 * listens on nothing. Why not a thread handing requests to the loop through an eventfd: the
 * engine, its batches and the store are the loop's, so a thread would only add a queue, a lock
 * and a wake-up per request, and a second owner for every HTTP connection's state. Here a
 * request whose body has arrived is suspended (MHD_ALLOW_SUSPEND_RESUME), its body becomes the
 * input of a Connection without a socket that server_schedule() puts into the next batch
 * beside the socket connections; the engine answers it through frontend-http.c, and the batch's
 * completion resumes it with its response. Nothing blocks the loop: libmicrohttpd's sockets are
 * non-blocking and every call of it returns at EAGAIN.
 *
 * Bounds, as the metrics endpoint's (http.h): HTTP_API_CONNECTIONS_MAX connections (beyond
 * HTTP_API_CONNECTIONS_EVICT a new one closes the one waiting longest), each request answered
 * within HTTP_REQUEST_USEC of the connection's start or the previous answer (checked every
 * second; a request in the engine is answered by its batch), connections silent for
 * HTTP_TIMEOUT_SEC closed by libmicrohttpd, bodies of at most HTTP_API_BODY_MAX bytes (413).
 * Per connection (not per request), one buffer set: its Connection and its reply.
 */

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <systemd/sd-event.h>

#include "listener.h"
#include "server.h"

#define HTTP_API_CONNECTIONS_MAX 64 /* concurrent connections, as the metrics endpoint's */
#define HTTP_API_CONNECTIONS_EVICT                                                                          \
        (HTTP_API_CONNECTIONS_MAX - 4) /* beyond this many, a new connection closes the one waiting         \
                                        * longest (not one in the engine) */
#define HTTP_API_OUT_MAX                                                                                    \
        (64u * 1024u) /* bytes: a connection's engine output (one record per request; an EXPLAIN's          \
                       * JSON is the longest) */

typedef struct HttpApiServer HttpApiServer;

/* Starts libmicrohttpd in e's loop; requests go to server (borrowed, must outlive it). No
 * listener yet. Returns 0 or -errno. */
int http_api_server_new(sd_event *e, Server *server, HttpApiServer **ret);
/* Answers the requests still waiting for the engine 503, closes every connection and
 * listener. Call it once no batch is in flight. Accepts NULL. */
HttpApiServer *http_api_server_free(HttpApiServer *api);

/* A listener on a (--http-api; a->admin: REFUND and RESET allowed), unix_mode as
 * listener_new(). Returns 0 or -errno with a sentence in errbuf. */
int http_api_server_listen(HttpApiServer *api, const ListenAddress *a, mode_t unix_mode, char *errbuf,
                           size_t errbuf_size);
/* Adopts a socket passed by systemd (named LISTEN_HTTP_API_FDNAME, "admin-..." for an admin
 * one). Returns 0 or -errno (fd still the caller's on failure). */
int http_api_server_adopt(HttpApiServer *api, int fd, const char *name);
/* Closes the listeners (stopping): the connections open are served until the loop ends. */
void http_api_server_stop(HttpApiServer *api);

/* Connections open now; for the tests. */
unsigned http_api_server_connections(const HttpApiServer *api);
