/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * http.c: the Prometheus endpoint, on libmicrohttpd with its own polling thread.
 * The thread only reads the Metrics object (relaxed atomics, see metrics.h), so a
 * scrape never makes the serving loop wait. Slow or stuck clients cannot starve it:
 * each request must be answered within HTTP_REQUEST_USEC of the connection's start
 * (or of the answer before it), or http_expire() closes the connection; and beyond
 * HTTP_CONNECTIONS_EVICT connections a new one closes the one that has waited
 * longest, so that a /healthz probe finds room while others trickle bytes.
 *
 * GET/HEAD <metrics_path>: the text exposition format 0.0.4;
 * GET/HEAD /healthz: 200 "ok" while serving (metrics_serving()), 503 otherwise;
 * any other path: 404; any other method: 405.
 */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "metrics.h"

#define HTTP_ADDRESS_DEFAULT "127.0.0.1" /* metrics are not for the whole network unless asked */
#define HTTP_CONNECTIONS_MAX                                                                                \
        64 /* concurrent connections: scrapers, probes, and room for both beside slow clients */
#define HTTP_CONNECTIONS_EVICT                                                                              \
        (HTTP_CONNECTIONS_MAX - 4) /* beyond this many, a new connection closes the one waiting longest     \
                                    * for its answer; 4 left for the closed ones not yet reaped */
#define HTTP_TIMEOUT_SEC 10 /* s: connections silent this long are closed (libmicrohttpd's own timer) */
#define HTTP_REQUEST_USEC                                                                                   \
        (5ULL * 1000ULL * 1000ULL) /* 5 s: a request must be answered this long after the connection's      \
                                    * start or the previous answer; a client trickling header bytes         \
                                    * (never silent for HTTP_TIMEOUT_SEC) is closed then */
#define HTTP_PATH_MAX    1024      /* bytes: longest metrics path we accept */
#define HTTP_HEALTH_PATH "/healthz"

typedef struct HttpSettings {
        const char *address;      /* numeric IPv4 or IPv6 address; NULL: HTTP_ADDRESS_DEFAULT */
        uint16_t port;            /* 0: any free port (see http_port()) */
        const char *metrics_path; /* must start with "/" */
} HttpSettings;

typedef struct Http Http;

/* Binds and starts the server thread. m is borrowed and must outlive the Http. On
 * failure returns -errno with a sentence in errbuf: -EINVAL bad address or path,
 * -EADDRINUSE / -EACCES / ... when the daemon could not start. */
int http_new(const HttpSettings *settings, const Metrics *m, Http **ret, char *errbuf, size_t errbuf_size);
/* Stops the thread (waiting for a scrape in progress), closes. Accepts NULL. */
Http *http_free(Http *h);
static inline void http_freep(Http **h) {
        if (*h)
                http_free(*h);
}

/* The port actually bound. */
uint16_t http_port(const Http *h);

/* Closes (shuts down; libmicrohttpd's thread then closes it) every connection whose request
 * has not been answered within HTTP_REQUEST_USEC before now_usec (CLOCK_MONOTONIC). Called
 * from the manager's periodic timer; safe beside libmicrohttpd's thread. Returns how many it
 * closed. */
unsigned http_expire(Http *h, uint64_t now_usec);

/* libmicrohttpd's logger (MHD_OPTION_EXTERNAL_LOGGER) of both HTTP endpoints: its messages are
 * about one client's request, logged at debug level only, after the prefix cls (a string). */
__attribute__((format(printf, 2, 0))) void http_log_mhd(void *cls, const char *format, va_list ap);

/* Connections open now (not yet closed by http_expire() or to make room); for the tests. */
unsigned http_connections(Http *h);
