/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * http.c: the Prometheus endpoint, on libmicrohttpd with its own polling thread.
 * The thread only reads the Metrics object (relaxed atomics, see metrics.h), so a
 * scrape never makes the serving loop wait, and a slow or stuck scraper holds at
 * most HTTP_CONNECTIONS_MAX connections for HTTP_TIMEOUT_SEC each.
 *
 * GET/HEAD <metrics_path>: the text exposition format 0.0.4;
 * GET/HEAD /healthz: 200 "ok" while serving (metrics_serving()), 503 otherwise;
 * any other path: 404; any other method: 405.
 */

#include <stddef.h>
#include <stdint.h>

#include "metrics.h"

#define HTTP_ADDRESS_DEFAULT "127.0.0.1" /* metrics are not for the whole network unless asked */
#define HTTP_CONNECTIONS_MAX 16          /* concurrent scrapers: Prometheus needs one or two */
#define HTTP_TIMEOUT_SEC     10          /* s: idle connections are closed after this */
#define HTTP_PATH_MAX        1024        /* bytes: longest metrics path we accept */
#define HTTP_HEALTH_PATH     "/healthz"

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
