/* SPDX-License-Identifier: MIT */
/* statsd.c: the UDP/TCP sender of the statsd lines; see statsd.h. */

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "statsd.h"

#include "shared/clock.h"
#include "shared/macro.h"

#define STATSD_TIMER_ACCURACY_USEC (10ULL * 1000ULL) /* 10 ms: slack for the flush timer */
#define STATSD_WARN_INTERVAL_USEC                                                                           \
        (60ULL * 1000ULL * 1000ULL) /* 60 s: at most one "send failed" warning per minute */
/* A TCP connection that stayed up this long was a working one: when it breaks, the backoff
 * starts over. A shorter one (a collector, or a proxy in front of a dead one, that accepts
 * and closes at once) keeps doubling it. */
#define STATSD_STABLE_USEC STATSD_BACKOFF_MAX_USEC

/* ---- the sender --------------------------------------------------------- */

struct Statsd {
        sd_event *event;
        Metrics *metrics; /* borrowed */
        StatsdAggregator *aggregator;
        uint64_t interval_usec;
        bool tcp;
        struct sockaddr_storage addr;
        socklen_t addr_len;
        char name[256]; /* "host:port", for messages */

        int fd;
        sd_event_source *timer;
        /* TCP */
        sd_event_source *io;
        sd_event_source *reconnect;
        bool connected;          /* TCP: handshake done */
        uint64_t connected_usec; /* TCP: CLOCK_MONOTONIC of the handshake */
        uint64_t backoff_usec;
        char *out; /* STATSD_TCP_BUFFER_MAX */
        size_t out_len;
        uint64_t warned_usec; /* CLOCK_MONOTONIC of the last "send failed" warning */
};

static void statsd_tcp_close(Statsd *s, int error);

static void statsd_count_dropped(Statsd *s, size_t n_lines) {
        if (n_lines > 0)
                metrics_add_statsd_dropped(s->metrics, n_lines);
}

static size_t count_lines(const char *buf, size_t len) {
        size_t n = 0;
        for (size_t i = 0; i < len; i++)
                if (buf[i] == '\n')
                        n++;
        return n;
}

static int statsd_tcp_update_events(Statsd *s) {
        uint32_t events = EPOLLIN | EPOLLRDHUP;
        if (!s->connected || s->out_len > 0)
                events |= EPOLLOUT;
        return sd_event_source_set_io_events(s->io, events);
}

static void statsd_tcp_write(Statsd *s) {
        while (s->connected && s->out_len > 0) {
                ssize_t n = send(s->fd, s->out, s->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN || errno == EWOULDBLOCK)
                                break;
                        statsd_tcp_close(s, -errno);
                        return;
                }
                memmove(s->out, s->out + n, s->out_len - (size_t) n);
                s->out_len -= (size_t) n;
        }
        if (s->io)
                (void) statsd_tcp_update_events(s);
}

static int statsd_io_handler(sd_event_source *es, int fd, uint32_t revents, void *userdata) {
        Statsd *s = userdata;

        if (!s->connected) {
                int error = 0;
                socklen_t len = sizeof error;
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) < 0)
                        error = errno;
                if (error != 0 || (revents & (EPOLLERR | EPOLLHUP))) {
                        statsd_tcp_close(s, -(error ? error : ECONNREFUSED));
                        return 0;
                }
                if (!(revents & EPOLLOUT))
                        return 0;
                s->connected = true;
                /* The backoff is not reset here: only once the connection has lasted. */
                if (sd_event_now(s->event, CLOCK_MONOTONIC, &s->connected_usec) < 0)
                        s->connected_usec = 0;
                log_info("Connected to statsd at %s.", s->name);
        }

        if (revents & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
                /* statsd never talks back: anything readable is EOF or an error; what a peer
                 * sends anyway is thrown away, at most STATSD_DISCARD_MAX bytes per wake-up
                 * (the source is level-triggered: the rest comes at the next turn of the loop),
                 * so that a peer that never stops sending cannot hold the loop. */
                char buf[4096];
                ssize_t n;
                size_t taken = 0;
                do
                        n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
                while (n > 0 && (taken += (size_t) n) < STATSD_DISCARD_MAX);
                if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                        statsd_tcp_close(s, n == 0 ? -ECONNRESET : -errno);
                        return 0;
                }
        }
        statsd_tcp_write(s);
        return 0;
}

static int statsd_reconnect_handler(sd_event_source *es, uint64_t usec, void *userdata);

static int statsd_tcp_connect(Statsd *s) {
        int r;

        s->fd = socket(s->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (s->fd < 0)
                return -errno;
        if (connect(s->fd, (struct sockaddr *) &s->addr, s->addr_len) < 0 && errno != EINPROGRESS) {
                r = -errno;
                statsd_tcp_close(s, r);
                return 0; /* retried by the backoff timer */
        }
        s->connected = false;
        r = sd_event_add_io(s->event, &s->io, s->fd, EPOLLOUT | EPOLLIN | EPOLLRDHUP, statsd_io_handler, s);
        if (r < 0) {
                close(s->fd);
                s->fd = -1;
                return r;
        }
        return 0;
}

/* Drops the connection and what it had not sent, and schedules a reconnect. */
static void statsd_tcp_close(Statsd *s, int error) {
        uint64_t now = 0;
        bool have_now = s->event && sd_event_now(s->event, CLOCK_MONOTONIC, &now) >= 0;

        if (s->connected && have_now && now - s->connected_usec >= STATSD_STABLE_USEC)
                s->backoff_usec = 0;
        /* Warn when a working connection breaks or the first attempt fails; the retries that
         * follow only at debug level. */
        bool warn = s->connected || s->backoff_usec == 0;
        s->backoff_usec = s->backoff_usec == 0 ? STATSD_BACKOFF_MIN_USEC : s->backoff_usec * 2;
        if (s->backoff_usec > STATSD_BACKOFF_MAX_USEC)
                s->backoff_usec = STATSD_BACKOFF_MAX_USEC;
        log_full_errno(warn ? LOG_WARNING : LOG_DEBUG, error,
                       "statsd connection to %s failed, retrying in %" PRIu64 " ms: %m", s->name,
                       s->backoff_usec / 1000);
        s->io = sd_event_source_disable_unref(s->io);
        if (s->fd >= 0)
                close(s->fd);
        s->fd = -1;
        s->connected = false;
        statsd_count_dropped(s, count_lines(s->out, s->out_len));
        s->out_len = 0;

        if (!have_now)
                return;
        if (s->reconnect) {
                (void) sd_event_source_set_time(s->reconnect, now + s->backoff_usec);
                (void) sd_event_source_set_enabled(s->reconnect, SD_EVENT_ONESHOT);
        } else
                (void) sd_event_add_time(s->event, &s->reconnect, CLOCK_MONOTONIC, now + s->backoff_usec,
                                         STATSD_TIMER_ACCURACY_USEC, statsd_reconnect_handler, s);
}

static int statsd_reconnect_handler(sd_event_source *es, uint64_t usec, void *userdata) {
        Statsd *s = userdata;
        if (s->fd < 0) {
                int r = statsd_tcp_connect(s);
                if (r < 0)
                        statsd_tcp_close(s, r);
        }
        return 0;
}

static void statsd_emit(const char *payload, size_t len, size_t n_lines, void *userdata) {
        Statsd *s = userdata;

        if (s->tcp) {
                /* Buffered while connecting, so the first interval is not lost; dropped
                 * while disconnected or when the buffer is full. */
                if (s->fd < 0 || s->out_len + len + 1 > STATSD_TCP_BUFFER_MAX) {
                        statsd_count_dropped(s, n_lines);
                        return;
                }
                memcpy(s->out + s->out_len, payload, len);
                s->out[s->out_len + len] = '\n';
                s->out_len += len + 1;
                return;
        }

        ssize_t n;
        do
                n = send(s->fd, payload, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        if (n < 0) {
                /* ECONNREFUSED: an earlier datagram met a closed port; EAGAIN: the socket
                 * buffer is full. Either way this datagram is gone. */
                int error = -errno;
                uint64_t now = clock_usec(CLOCK_MONOTONIC);
                /* A closed port fails every other datagram (the ICMP error of one is reported
                 * by the next send): warn once a minute, not at every flush. */
                if (s->warned_usec == 0 || now - s->warned_usec >= STATSD_WARN_INTERVAL_USEC) {
                        log_warning_errno(error, "statsd send to %s failed, dropping metrics: %m", s->name);
                        s->warned_usec = now;
                } else
                        log_debug_errno(error, "statsd send to %s failed, dropping metrics: %m", s->name);
                statsd_count_dropped(s, n_lines);
        }
}

int statsd_flush(Statsd *s) {
        StatsdPacker p;

        statsd_packer_init(&p, STATSD_PAYLOAD_MAX, statsd_emit, s);
        int n = statsd_aggregator_collect(s->aggregator, s->metrics, &p);
        statsd_packer_finish(&p);
        statsd_count_dropped(s, p.n_oversized);
        if (s->tcp)
                statsd_tcp_write(s);
        return n;
}

static int statsd_timer_handler(sd_event_source *es, uint64_t usec, void *userdata) {
        Statsd *s = userdata;
        (void) statsd_flush(s);
        (void) sd_event_source_set_time(es, usec + s->interval_usec);
        return 0;
}

/* Resolves the host into s->addr. Returns 0, or -EADDRNOTAVAIL with a sentence in errbuf. */
static int statsd_resolve(Statsd *s, const StatsdSettings *settings, char *errbuf, size_t errbuf_size) {
        struct addrinfo hints = { .ai_socktype = settings->tcp ? SOCK_STREAM : SOCK_DGRAM }, *ai = NULL;
        char port[8];
        int r;

        snprintf(port, sizeof port, "%u", settings->port);
        r = getaddrinfo(settings->host, port, &hints, &ai);
        if (r != 0) {
                if (errbuf)
                        snprintf(errbuf, errbuf_size, "cannot resolve statsd host \"%s\": %s",
                                 settings->host, r == EAI_SYSTEM ? strerror(errno) : gai_strerror(r));
                return -EADDRNOTAVAIL;
        }
        memcpy(&s->addr, ai->ai_addr, ai->ai_addrlen);
        s->addr_len = ai->ai_addrlen;
        freeaddrinfo(ai);
        return 0;
}

/* Opens the socket (UDP) or starts connecting (TCP), and arms the flush timer if there is
 * an event loop. Returns 0 or -errno. */
static int statsd_start(Statsd *s) {
        int r;

        if (s->tcp) {
                s->out = malloc(STATSD_TCP_BUFFER_MAX);
                if (!s->out)
                        return -ENOMEM;
                if (!s->event)
                        return -EINVAL;
                r = statsd_tcp_connect(s);
                if (r < 0)
                        return r;
        } else {
                s->fd = socket(s->addr.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (s->fd < 0)
                        return -errno;
                /* Connected, so that an ICMP port unreachable comes back as ECONNREFUSED
                 * instead of going unnoticed. */
                if (connect(s->fd, (struct sockaddr *) &s->addr, s->addr_len) < 0)
                        return -errno;
        }

        if (!s->event)
                return 0;
        uint64_t now;
        r = sd_event_now(s->event, CLOCK_MONOTONIC, &now);
        if (r >= 0)
                r = sd_event_add_time(s->event, &s->timer, CLOCK_MONOTONIC, now + s->interval_usec,
                                      STATSD_TIMER_ACCURACY_USEC, statsd_timer_handler, s);
        if (r >= 0)
                r = sd_event_source_set_enabled(s->timer, SD_EVENT_ON);
        return r;
}

int statsd_new(sd_event *e, const StatsdSettings *settings, Metrics *m, Statsd **ret, char *errbuf,
               size_t errbuf_size) {
        int r;

        if (!settings->host || !*settings->host || settings->port == 0) {
                if (errbuf)
                        snprintf(errbuf, errbuf_size, "statsd needs a host and a port");
                return -EINVAL;
        }

        _cleanup_(statsd_freep) Statsd *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->fd = -1;
        s->metrics = m;
        s->tcp = settings->tcp;
        s->interval_usec = settings->interval_usec ? settings->interval_usec : STATSD_INTERVAL_DEFAULT_USEC;
        snprintf(s->name, sizeof s->name, "%s:%u", settings->host, settings->port);

        r = statsd_aggregator_new(settings->prefix, &s->aggregator);
        if (r < 0) {
                if (errbuf)
                        snprintf(errbuf, errbuf_size, "statsd prefix is longer than %d bytes",
                                 STATSD_PREFIX_MAX);
                return r;
        }
        r = statsd_resolve(s, settings, errbuf, errbuf_size);
        if (r < 0)
                return r;
        if (e)
                s->event = sd_event_ref(e);
        r = statsd_start(s);
        if (r < 0) {
                if (errbuf)
                        snprintf(errbuf, errbuf_size, "cannot set up statsd to %s: %s", s->name,
                                 strerror(-r));
                return r;
        }

        *ret = s;
        s = NULL;
        return 0;
}

Statsd *statsd_free(Statsd *s) {
        if (!s)
                return NULL;
        if (s->fd >= 0 && s->aggregator && (!s->tcp || s->connected))
                (void) statsd_flush(s);
        s->timer = sd_event_source_disable_unref(s->timer);
        s->io = sd_event_source_disable_unref(s->io);
        s->reconnect = sd_event_source_disable_unref(s->reconnect);
        if (s->fd >= 0)
                close(s->fd);
        statsd_aggregator_free(s->aggregator);
        free(s->out);
        sd_event_unref(s->event);
        free(s);
        return NULL;
}
