/* SPDX-License-Identifier: MIT */
/* server.c: the connections' lifecycle; see server.h. */

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "batch.h"
#include "frontends.h"
#include "frontend-grpc.h"
#include "connection.h"
#include "log.h"
#include "server.h"

#include "shared/clock.h"

#define SERVER_EPOLL_EVENTS 256 /* connection events taken per loop iteration: bounds the stack array */
#define SERVER_DEFER_PRIORITY                                                                               \
        (SD_EVENT_PRIORITY_NORMAL + 10) /* below socket IO: every ready socket is read before a batch */

typedef struct Server Server;

/* One batch of the pool, and the connections it took (in order, each once). */
typedef struct ServerBatch {
        Server *server;
        Batch *batch;
        Connection **conns; /* BATCH_REQUESTS_MAX: the connections a batch took, with or without a
                             * request */
        size_t n_conns;
        bool in_flight; /* pending in a store that completes later */
} ServerBatch;

struct Server {
        sd_event *event;
        int epfd;                      /* every connection, edge-triggered (see connection.h) */
        sd_event_source *epoll_source; /* epfd in the loop: one dispatch serves every ready connection */
        bool batch_follows; /* in server_epoll_handler(): a batch runs next, no need to arm the defer source
                             */
        bool defer_armed;   /* the defer source is enabled (saves sd-event calls that change nothing) */
        sd_event_source *defer;        /* runs the batches (server_run_batch()) */
        sd_event_source *housekeeping; /* idle and linger timeouts */
        ServerSettings settings;
        ServerBatch batches[SERVER_BATCHES]; /* every request read is answered by one of them */
        size_t n_in_flight;                  /* batches pending in a store that completes later */

        bool hold;                    /* server_hold_batches(): no new batch */
        void (*idle)(void *userdata); /* held, none in flight: run once from the idle source */
        void *idle_userdata;
        sd_event_source *idle_source; /* defer: calls idle outside the store's completion */

        Connection *connections; /* all of them */
        Connection *ready_head, *ready_tail;
        size_t n_lingering;
        uint64_t next_id;
        bool stopping;

        ServerCounters counters;
        Metrics *metrics; /* borrowed; may be NULL */
};

static void server_run_batch(Server *s);
static void server_arm_housekeeping(Server *s);

static void server_metrics_connections(Server *s) {
        if (s->metrics)
                metrics_set_connections(s->metrics, s->counters.connections_current);
}

static uint64_t server_now(Server *s, clockid_t clock) {
        uint64_t now = 0;
        (void) sd_event_now(s->event, clock, &now);
        return now;
}

static void ready_remove(Server *s, Connection *c) {
        if (!c->on_ready)
                return;
        if (c->ready_prev)
                c->ready_prev->ready_next = c->ready_next;
        else
                s->ready_head = c->ready_next;
        if (c->ready_next)
                c->ready_next->ready_prev = c->ready_prev;
        else
                s->ready_tail = c->ready_prev;
        c->ready_prev = c->ready_next = NULL;
        c->on_ready = false;
}

static void ready_append(Server *s, Connection *c) {
        int r;

        if (c->on_ready)
                return;
        c->ready_prev = s->ready_tail;
        c->ready_next = NULL;
        if (s->ready_tail)
                s->ready_tail->ready_next = c;
        else
                s->ready_head = c;
        s->ready_tail = c;
        c->on_ready = true;

        if (s->batch_follows || s->defer_armed)
                return;
        r = sd_event_source_set_enabled(s->defer, SD_EVENT_ONESHOT);
        if (r >= 0)
                s->defer_armed = true;
        if (r < 0)
                /* Cannot happen for a defer source; if it did, the next arm retries. */
                log_error_errno(r, "Failed to schedule a batch: %m");
}

static void server_update_events(Server *s, Connection *c);

static void server_close_now(Server *s, Connection *c) {
        ready_remove(s, c);
        if (c->lingering)
                s->n_lingering--;
        if (c->prev)
                c->prev->next = c->next;
        else
                s->connections = c->next;
        if (c->next)
                c->next->prev = c->prev;
        s->counters.connections_current--;
        server_metrics_connections(s);
        frontend_grpc_detach(c);
        connection_free(c);

        if (s->stopping && !s->connections)
                (void) sd_event_exit(s->event, 0);
}

/* Closes c, or, while a batch in flight points into it, once that batch completes. */
static void server_close(Server *s, Connection *c) {
        if (c->in_flight) {
                c->close_deferred = true;
                (void) connection_set_events(c, 0); /* nothing more to hear from it */
                return;
        }
        server_close_now(s, c);
}

static void server_update_events(Server *s, Connection *c) {
        uint32_t events = 0;
        int r;

        if (c->close_deferred || c->done)
                return; /* (no socket) */
        if (c->lingering)
                events = EPOLLIN;
        else if (!c->eof && !c->closing && (!s->stopping || frontend_grpc_incomplete_since(c) != 0) &&
                 !c->blocked && c->in_len < CONNECTION_IN_SIZE)
                events = EPOLLIN; /* at stop, a gRPC call's rest (server_maybe_finish()) */
        if (connection_unsent(c) > 0)
                events |= EPOLLOUT;

        r = connection_set_events(c, events);
        if (r < 0) {
                log_warning_errno(r, "Connection %" PRIu64 ": failed to update event mask, closing: %m",
                                  c->id);
                server_close(s, c);
        }
}

static void server_queue(Server *s, Connection *c) {
        if (c->on_ready || c->closing || c->blocked || c->lingering || c->in_flight)
                return;
        if (connection_has_request(c))
                ready_append(s, c);
}

/* Closes c if it has nothing left to do: its peer is done (EOF) and every request is
 * answered and sent, or it must close (after an ERR, or when stopping). A peer that
 * may still be sending gets a half-close and lingers until its EOF, so that our last
 * replies are not destroyed by a reset. Returns true if c was closed. */
static bool server_maybe_finish(Server *s, Connection *c) {
        int r;

        if (c->lingering || c->on_ready || c->blocked || c->in_flight || connection_unsent(c) > 0)
                return false;
        if (!c->closing && !s->stopping && !(c->eof && !connection_has_request(c)))
                return false;
        /* at stop, a gRPC call begun before its GOAWAY is still answered (its message may be
         * on its way; the drain's limit and --request-timeout bound the wait) */
        if (!c->closing && !c->eof && frontend_grpc_incomplete_since(c) != 0)
                return false;

        if (c->eof) {
                server_close(s, c);
                return true;
        }

        if (shutdown(c->fd, SHUT_WR) < 0) {
                log_debug_errno(errno, "Connection %" PRIu64 ": shutdown failed, closing: %m", c->id);
                server_close(s, c);
                return true;
        }
        c->lingering = true;
        c->linger_until_usec = server_now(s, CLOCK_MONOTONIC) + SERVER_LINGER_USEC;
        connection_drop_input(c);
        s->n_lingering++;
        r = connection_set_events(c, EPOLLIN);
        if (r < 0) {
                server_close(s, c);
                return true;
        }
        server_arm_housekeeping(s);
        return false;
}

/* Sends pending output. Returns 0 or 1 (see connection_flush()), or -errno after
 * closing c (peer gone). */
static int server_flush(Server *s, Connection *c) {
        size_t before = connection_unsent(c);
        int r;

        if (before == 0)
                return 0;
        r = connection_flush(c);
        if (r < 0) {
                /* EPIPE, ECONNRESET: the client left; nothing to tell anyone. */
                log_debug_errno(r, "Connection %" PRIu64 ": write failed, closing: %m", c->id);
                server_close(s, c);
                return r;
        }
        if (connection_unsent(c) < before)
                c->last_activity_usec = server_now(s, CLOCK_MONOTONIC);
        if (c->blocked && connection_unsent(c) < s->settings.output_limit) {
                c->blocked = false;
                server_queue(s, c);
        }
        return r;
}

/* One connection's epoll event. Closes nothing but c. */
static void server_connection_event(Server *s, Connection *c, uint32_t revents) {
        ssize_t n;
        int r;

        if (c->close_deferred)
                return;
        if (c->lingering) {
                r = connection_discard_input(c);
                if (r == 2)
                        /* Stopped at its bound with input left: edge-triggered, nothing would wake
                         * us for the rest (or the EOF behind it) until the linger timeout, which
                         * then closes on unread input, a reset. Let the loop come back to it. */
                        r = connection_rearm(c);
                if (r != 0)
                        server_close(s, c);
                return;
        }

        if ((revents & (EPOLLOUT | EPOLLHUP | EPOLLERR)) && connection_unsent(c) > 0) {
                if (server_flush(s, c) < 0)
                        return;
        }

        if (revents & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                c->peer_shut = true;
        if (c->in_flight)
                /* its batch points into the input: read once it completes (server_after_batch()) */
                c->held_revents |= revents & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR);
        else if ((revents & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && (c->events & EPOLLIN)) {
                n = connection_read(c);
                if (n < 0) {
                        log_debug_errno((int) n, "Connection %" PRIu64 ": read failed, closing: %m", c->id);
                        server_close(s, c);
                        return;
                }
                if (n > 0) {
                        c->last_activity_usec = server_now(s, CLOCK_MONOTONIC);
                        if (c->request_start_usec == 0)
                                c->request_start_usec = c->last_activity_usec;
                }
                server_queue(s, c);
        }

        if (server_maybe_finish(s, c))
                return;
        if (!c->lingering)
                server_update_events(s, c);
}

/* The connections have an epoll instance of their own, so that one sd-event dispatch (and
 * one epoll_wait() of ours) serves every ready connection: sd-event dispatches one source
 * per loop iteration and calls epoll_wait() for each, which as one source per connection
 * cost every request a syscall. The batch runs here too, right after the reads, rather
 * than from the defer source in yet another iteration; that one only takes leftovers. */
static int server_epoll_handler(sd_event_source *es, int fd, uint32_t revents, void *userdata) {
        struct epoll_event events[SERVER_EPOLL_EVENTS];
        Server *s = userdata;
        int n;

        n = epoll_wait(s->epfd, events, SERVER_EPOLL_EVENTS, 0);
        if (n < 0) {
                if (errno != EINTR && errno != EAGAIN)
                        log_warning_errno(errno, "epoll_wait() on the connections failed, retrying: %m");
                return 0;
        }
        /* Each connection appears once, and its handling closes no other one. */
        s->batch_follows = true;
        for (int i = 0; i < n; i++)
                server_connection_event(s, events[i].data.ptr, events[i].events);
        s->batch_follows = false;
        if (s->ready_head)
                server_run_batch(s);
        return 0;
}

static void server_accept_as(int fd, bool is_tcp, bool admin, bool grpc, Server *s);

void server_accept(int fd, bool is_tcp, bool admin, Server *s) {
        server_accept_as(fd, is_tcp, admin, false, s);
}

void server_accept_grpc(int fd, bool is_tcp, bool admin, Server *s) {
        server_accept_as(fd, is_tcp, admin, true, s);
}

static void server_accept_as(int fd, bool is_tcp, bool admin, bool grpc, Server *s) {
        Connection *c = NULL;
        int r;

        if (s->stopping) {
                close(fd);
                return;
        }

        if (s->counters.connections_current >= s->settings.max_connections) {
                char buf[PROTO_REPLY_MAX];
                size_t len = proto_format_error(buf, PROTO_ERROR_UNKNOWN, "too many connections");

                /* Best effort: a fresh socket has room for one short line (an HTTP/2 peer gets
                 * none: it reads the close) */
                if (!grpc)
                        (void) send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
                (void) shutdown(fd, SHUT_WR);
                close(fd);
                s->counters.connections_rejected++;
                if (s->metrics)
                        metrics_count_error(s->metrics, PROTO_ERROR_UNKNOWN);
                log_debug("Refused a connection: %" PRIu64 " connections open",
                          s->counters.connections_current);
                return;
        }

        if (is_tcp)
                /* Replies are small and latency matters: no Nagle. Harmless if refused. */
                (void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int));

        /* A batch reserves room for all it takes before it checks the limit again (and on RESP,
         * for one ECHO of a whole bulk). */
        r = connection_new(fd, is_tcp,
                           s->settings.output_limit + BATCH_LINES_PER_CONNECTION * PROTO_REPLY_MAX +
                                   RESP_BULK_MAX + PROTO_REPLY_MAX,
                           &c);
        if (r < 0) {
                log_warning_errno(r, "Failed to allocate a connection, closing it: %m");
                close(fd);
                return;
        }
        c->id = ++s->next_id;
        c->admin = admin;
        if (grpc && (r = frontend_grpc_attach(c)) < 0) {
                log_warning_errno(r, "Failed to set up a gRPC connection, closing it: %m");
                connection_free(c);
                return;
        }
        c->resp_allowed = s->settings.resp;
        c->last_activity_usec = server_now(s, CLOCK_MONOTONIC);

        c->epfd = s->epfd;
        r = connection_set_events(c, EPOLLIN);
        if (r < 0) {
                log_warning_errno(r, "Failed to watch a connection, closing it: %m");
                connection_free(c);
                return;
        }

        c->next = s->connections;
        if (s->connections)
                s->connections->prev = c;
        s->connections = c;
        s->counters.connections_current++;
        s->counters.connections_accepted++;
        server_metrics_connections(s);
        log_debug("Connection %" PRIu64 ": accepted (%" PRIu64 " open)", c->id,
                  s->counters.connections_current);
}

/* After a batch, for one connection of it: drops consumed input, sends the replies with
 * one send(), and decides whether it goes back on the ready list (at the tail, for
 * fairness) or is done. */
static void server_after_batch(Server *s, Connection *c, bool was_in_flight) {
        uint32_t held = 0;

        if (c->done) {
                c->in_flight = false;
                c->done(c, c->userdata);
                return;
        }
        if (was_in_flight) {
                c->in_flight = false;
                if (c->close_deferred) {
                        server_close_now(s, c);
                        return;
                }
                held = c->held_revents;
                c->held_revents = 0;
        }
        if (c->closing)
                connection_drop_input(c); /* lines after an ERR are discarded */
        connection_compact_input(c);
        if (c->grpc)
                frontend_grpc_send(c, s->settings.output_limit);
        /* requests were answered: what is left is the next one's start, its clock starts now
         * (a gRPC call's when it began) */
        c->request_start_usec =
                c->in_len > 0 ? server_now(s, CLOCK_MONOTONIC) : frontend_grpc_incomplete_since(c);

        if (server_flush(s, c) < 0)
                return; /* closed */

        server_queue(s, c);

        if (server_maybe_finish(s, c))
                return;
        if (!c->lingering)
                server_update_events(s, c);
        /* Input that arrived while the batch was in flight: its edge is spent, so it is read
         * (or, lingering after an ERR, discarded) now, if the connection still takes input (a
         * blocked one is re-armed by epoll_ctl(), which re-checks readiness, once it drains). */
        if (held && (c->events & EPOLLIN))
                server_connection_event(s, c, held);
}

/* A batch was answered (store.h: at once for the local store, later for one that completes
 * later): the replies of its connections go out. */
static void server_batch_done(Batch *b, size_t n_answered, void *userdata) {
        ServerBatch *sb = userdata;
        Server *s = sb->server;
        bool was_in_flight = sb->in_flight;

        s->counters.batch_requests += n_answered;
        s->counters.batches++;
        if (was_in_flight)
                s->n_in_flight--;
        for (size_t i = 0; i < sb->n_conns; i++)
                server_after_batch(s, sb->conns[i], was_in_flight);
        sb->n_conns = 0;
        sb->in_flight = false;

        if (s->hold && s->n_in_flight == 0 && s->idle)
                (void) sd_event_source_set_enabled(s->idle_source, SD_EVENT_ONESHOT);

        /* Leftovers wait for the defer source; without any, it must not fire for nothing. */
        if (!!s->ready_head != s->defer_armed &&
            sd_event_source_set_enabled(s->defer, s->ready_head ? SD_EVENT_ONESHOT : SD_EVENT_OFF) >= 0)
                s->defer_armed = !!s->ready_head;
}

/* Batches over the ready connections, in order, as many as a batch takes each, then their
 * replies (server_batch_done()). A batch the store completes at once ends the run (leftovers
 * wait for the defer source, after the next reads); while one is in flight in a store that
 * completes later (sync=always, a remote backend), its connections are neither read nor
 * taken again nor closed (its requests point into their input, and each connection's replies
 * stay in order), and the next batch takes the other ready connections, up to SERVER_BATCHES
 * in flight. */
static void server_run_batch(Server *s) {
        if (s->hold)
                return; /* server_hold_batches(false) runs them */
        while (s->ready_head) {
                ServerBatch *sb = NULL;
                Connection *c;
                int r;

                for (size_t i = 0; i < SERVER_BATCHES; i++)
                        if (!s->batches[i].in_flight) {
                                sb = &s->batches[i];
                                break;
                        }
                if (!sb)
                        return; /* a batch that completes takes the rest */
                sb->n_conns = 0;
                /* Bounded by conns[] too: a connection may give no request (its replies reached
                 * the output limit since it was queued, or its EOF cut a RESP request short),
                 * so the batch's room alone does not bound the walk. */
                for (c = s->ready_head; c && sb->n_conns < BATCH_REQUESTS_MAX && batch_has_room(sb->batch);
                     c = s->ready_head) {
                        batch_take(sb->batch, c);
                        ready_remove(s, c);
                        sb->conns[sb->n_conns++] = c;
                }

                r = batch_finish(sb->batch, server_now(s, CLOCK_REALTIME));
                if (r <= 0)
                        return; /* answered (server_batch_done() ran) */
                /* in flight: its connections wait, unread, for server_batch_done() */
                s->n_in_flight++;
                sb->in_flight = true;
                for (size_t i = 0; i < sb->n_conns; i++) {
                        c = sb->conns[i];
                        c->in_flight = true;
                        server_update_events(s, c);
                }
        }
}

static int server_defer_handler(sd_event_source *es, void *userdata) {
        Server *s = userdata;

        s->defer_armed = false; /* a oneshot source is off once dispatched */
        server_run_batch(s);
        return 0;
}

static int server_idle_handler(sd_event_source *es, void *userdata) {
        Server *s = userdata;

        if (s->hold && s->n_in_flight == 0 && s->idle)
                s->idle(s->idle_userdata);
        return 0;
}

/* True if c holds the start of a request that has not arrived whole within the request
 * timeout. A connection with a whole request to answer (waiting for its batch, or for room
 * in its output: a client that does not read) is not late. */
static bool server_request_overdue(Server *s, Connection *c, uint64_t now) {
        if (s->settings.request_timeout_usec == 0 || c->request_start_usec == 0 || c->closing ||
            c->blocked || c->on_ready)
                return false;
        if (now - c->request_start_usec < s->settings.request_timeout_usec)
                return false;
        return !connection_has_request(c);
}

static int server_housekeeping_handler(sd_event_source *es, uint64_t usec, void *userdata) {
        Server *s = userdata;
        uint64_t now = server_now(s, CLOCK_MONOTONIC);

        for (Connection *c = s->connections, *next; c; c = next) {
                next = c->next;
                if (c->in_flight)
                        continue; /* its batch is not answered yet: not idle, and must not close */
                if (c->lingering) {
                        if (now >= c->linger_until_usec) {
                                log_debug("Connection %" PRIu64 ": peer did not close, closing", c->id);
                                server_close(s, c);
                        }
                } else if (server_request_overdue(s, c, now)) {
                        log_debug("Connection %" PRIu64 ": request not complete within %" PRIu64
                                  " s, closing",
                                  c->id, s->settings.request_timeout_usec / 1000000);
                        server_close(s, c);
                } else if (s->settings.idle_timeout_usec > 0 &&
                           now - c->last_activity_usec >= s->settings.idle_timeout_usec) {
                        log_debug("Connection %" PRIu64 ": idle, closing", c->id);
                        server_close(s, c);
                }
        }
        server_arm_housekeeping(s);
        return 0;
}

/* The timer runs only while something can time out. */
static void server_arm_housekeeping(Server *s) {
        int r;

        if (s->settings.idle_timeout_usec == 0 && s->settings.request_timeout_usec == 0 &&
            s->n_lingering == 0)
                return;
        if (!s->housekeeping) {
                r = sd_event_add_time_relative(s->event, &s->housekeeping, CLOCK_MONOTONIC,
                                               SERVER_HOUSEKEEPING_USEC, 50 * 1000,
                                               server_housekeeping_handler, s);
                if (r < 0)
                        log_warning_errno(r, "Failed to arm the connection timer, ignoring: %m");
                return;
        }
        int enabled = SD_EVENT_OFF;
        (void) sd_event_source_get_enabled(s->housekeeping, &enabled);
        if (enabled != SD_EVENT_OFF)
                return;
        r = sd_event_source_set_time_relative(s->housekeeping, SERVER_HOUSEKEEPING_USEC);
        if (r >= 0)
                r = sd_event_source_set_enabled(s->housekeeping, SD_EVENT_ONESHOT);
        if (r < 0)
                log_warning_errno(r, "Failed to arm the connection timer, ignoring: %m");
}

int server_new(sd_event *e, const ServerSettings *settings, Server **ret) {
        Server *s;
        int r;

        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->epfd = -EBADF;
        s->event = sd_event_ref(e);
        s->settings = *settings;
        if (s->settings.output_limit < CONNECTION_OUT_INITIAL)
                s->settings.output_limit = CONNECTION_OUT_INITIAL;
        for (size_t i = 0; i < SERVER_BATCHES; i++) {
                ServerBatch *sb = &s->batches[i];

                sb->server = s;
                r = batch_new(
                        &(BatchSettings){ .output_limit = s->settings.output_limit,
                                          .debug = settings->debug,
                                          .client_time_max_age_usec = settings->client_time_max_age_usec,
                                          .allow_client_limits = settings->allow_client_limits,
                                          .inspect_admin = settings->inspect_admin,
                                          .grpc_allow_refunds = settings->grpc_allow_refunds,
                                          .grpc_ratelimit_headers = settings->grpc_ratelimit_headers,
                                          .grpc_backend_unavailable = settings->grpc_backend_unavailable },
                        &sb->batch);
                sb->conns = calloc(BATCH_REQUESTS_MAX, sizeof *sb->conns);
                if (r < 0 || !sb->conns) {
                        server_free(s);
                        return r < 0 ? r : -ENOMEM;
                }
                frontends_attach(sb->batch);
                batch_set_done(sb->batch, server_batch_done, sb);
        }

        s->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (s->epfd < 0) {
                r = -errno;
                server_free(s);
                return r;
        }
        r = sd_event_add_io(e, &s->epoll_source, s->epfd, EPOLLIN, server_epoll_handler, s);
        if (r >= 0)
                r = sd_event_add_defer(e, &s->defer, server_defer_handler, s);
        if (r >= 0)
                r = sd_event_source_set_priority(s->defer, SERVER_DEFER_PRIORITY);
        if (r >= 0)
                r = sd_event_source_set_enabled(s->defer, SD_EVENT_OFF);
        if (r >= 0)
                r = sd_event_add_defer(e, &s->idle_source, server_idle_handler, s);
        if (r >= 0)
                r = sd_event_source_set_enabled(s->idle_source, SD_EVENT_OFF);
        if (r < 0) {
                server_free(s);
                return r;
        }
        server_arm_housekeeping(s);

        *ret = s;
        return 0;
}

Server *server_free(Server *s) {
        if (!s)
                return NULL;

        s->stopping = false; /* no sd_event_exit() from here */
        while (s->connections)
                server_close_now(s, s->connections);
        sd_event_source_disable_unref(s->defer);
        sd_event_source_disable_unref(s->idle_source);
        sd_event_source_disable_unref(s->housekeeping);
        sd_event_source_disable_unref(s->epoll_source);
        if (s->epfd >= 0)
                close(s->epfd);
        for (size_t i = 0; i < SERVER_BATCHES; i++) {
                batch_free(s->batches[i].batch);
                free(s->batches[i].conns);
        }
        sd_event_unref(s->event);
        free(s);
        return NULL;
}

void server_set_rules(Server *s, const RuleSet *rules) {
        for (size_t i = 0; i < SERVER_BATCHES; i++)
                batch_set_rules(s->batches[i].batch, rules);
}

void server_set_store(Server *s, Store *store) {
        for (size_t i = 0; i < SERVER_BATCHES; i++)
                batch_set_store(s->batches[i].batch, store);
}

void server_set_backend(Server *s, StoreSubmitFunc submit, void *backend) {
        for (size_t i = 0; i < SERVER_BATCHES; i++)
                batch_set_backend(s->batches[i].batch, submit, backend);
}

bool server_batch_pending(const Server *s) {
        return s->n_in_flight > 0;
}

void server_hold_batches(Server *s, bool hold, void (*idle)(void *userdata), void *userdata) {
        s->hold = hold;
        s->idle = hold ? idle : NULL;
        s->idle_userdata = hold ? userdata : NULL;
        if (hold) {
                if (s->n_in_flight == 0 && s->idle)
                        (void) sd_event_source_set_enabled(s->idle_source, SD_EVENT_ONESHOT);
                return;
        }
        (void) sd_event_source_set_enabled(s->idle_source, SD_EVENT_OFF);
        if (s->ready_head && !s->defer_armed && sd_event_source_set_enabled(s->defer, SD_EVENT_ONESHOT) >= 0)
                s->defer_armed = true;
}

Metrics *server_metrics(const Server *s) {
        return s->metrics;
}

void server_set_metrics(Server *s, Metrics *metrics) {
        s->metrics = metrics;
        for (size_t i = 0; i < SERVER_BATCHES; i++)
                batch_set_metrics(s->batches[i].batch, metrics);
        server_metrics_connections(s);
}

/* One connection at stop: takes in what the kernel already holds (requests sent before the
 * stop are answered), then closes it at once if it has nothing to answer or send (an idle
 * pooled connection: nothing of ours is unread by its peer, and no input is left unread, so
 * the close is a FIN, not a reset), or lets it drain (server_maybe_finish()). */
static void server_stop_connection(Server *s, Connection *c) {
        if (c->in_flight || c->lingering || c->close_deferred) {
                if (!c->lingering)
                        server_update_events(s, c);
                return;
        }
        if (!c->eof && !c->closing && !c->blocked && c->in_len < CONNECTION_IN_SIZE) {
                ssize_t n = connection_read(c);
                if (n < 0) {
                        log_debug_errno((int) n, "Connection %" PRIu64 ": read failed, closing: %m", c->id);
                        server_close(s, c);
                        return;
                }
                server_queue(s, c);
        }
        if (frontend_grpc_stop(c))
                server_queue(s, c); /* its GOAWAY is sent by the batch that answers its calls */
        if (!c->on_ready && !c->blocked && connection_unsent(c) == 0) {
                log_debug("Connection %" PRIu64 ": nothing to answer at stop, closing", c->id);
                s->counters.connections_closed_at_stop++;
                server_close(s, c);
                return;
        }
        if (server_maybe_finish(s, c))
                return;
        if (!c->lingering)
                server_update_events(s, c);
}

void server_stop(Server *s) {
        s->stopping = true;

        /* Requests already read (or queued in the kernel) are answered by the batches still
         * to come (the defer source stays armed); nothing more is read. */
        for (Connection *c = s->connections, *next; c; c = next) {
                next = c->next;
                server_stop_connection(s, c);
        }
        if (!s->connections)
                (void) sd_event_exit(s->event, 0);
}

void server_schedule(Server *s, Connection *c) {
        c->framed = true; /* its protocol is its own: nothing to frame */
        ready_append(s, c);
}

void server_unschedule(Server *s, Connection *c) {
        ready_remove(s, c);
}

const ServerCounters *server_counters(const Server *s) {
        return &s->counters;
}
