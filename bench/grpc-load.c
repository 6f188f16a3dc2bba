/* SPDX-License-Identifier: MIT */

/*
 * grpc-load: load generator for Envoy's rate limit service over gRPC (issue #34), in the style
 * of divvy-benchmark: N HTTP/2 connections x M concurrent streams, each stream one unary call
 * of ShouldRateLimit with the same request (one descriptor), built once.
 *
 * Each thread runs an epoll loop over its share of the connections, with a libnghttp2 client
 * session per connection driven by mem_recv/mem_send: everything a read brings is handed to
 * nghttp2 at once, and every frame it then has to send goes out in one write().
 *
 * Closed loop (default): every connection keeps M calls open; a call that ends starts the next.
 * Open loop (--rate R): the k-th call of the run is due at start + k/R and belongs to
 * connection k mod N, so the calls are spread evenly across the connections on a precise
 * schedule (a timerfd per thread, absolute times, at most one wake-up per 20 us). A call that
 * is due while its connection has M calls open waits for one to end; its latency is always
 * counted from the time it was due, so a slow server is not hidden by a client that waits for
 * it (coordinated omission); the calls still waiting when the run ends are counted (missed).
 *
 * A call's latency ends when its stream closes (trailers included). Every answer is verified:
 * :status 200, grpc-status 0 and a RateLimitResponse whose overall_code is OK or OVER_LIMIT;
 * anything else is an error and makes the exit status 1.
 *
 * Not library code: this is a program, it prints.
 */

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "load-common.h"
#include "shared/clock.h" /* header only: this program links nothing of divvyd */

#define STREAMS_MAX 1024 /* concurrent calls per connection */
#define TEXT_MAX    100  /* bytes: domain, key, value (one byte of length each) */
#define REQUEST_MAX (5 + 3 * (TEXT_MAX + 2) + 6)
#define IN_SIZE     (64u * 1024u)          /* bytes read at once per connection */
#define OUT_SIZE    (256u * 1024u)         /* bytes of frames written at once at most */
#define WINDOW      (1 << 24)              /* bytes: the windows we grant the server */
#define STALL_NSEC  (10ULL * NSEC_PER_SEC) /* no answer for this long with calls open: give up */
#define TICK_NSEC                                                                                           \
        (20ULL * NSEC_PER_USEC) /* the open loop wakes at most this often: what is due by then              \
                                 * starts at once (late by less than this, and counted so) */
#define EPOLL_TIMEOUT_MSEC 100
#define EVENTS_MAX         256

#define RLS_PATH "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

typedef struct Options {
        BenchOptions run; /* -a, -c, -n, -d, -w, -t, --label, -q */
        unsigned streams;
        double rate; /* --rate: calls per second in all; 0: closed loop */
        const char *domain, *key, *value;
} Options;

typedef struct Stats {
        uint64_t ok;         /* overall_code OK */
        uint64_t over_limit; /* overall_code OVER_LIMIT */
        uint64_t err;        /* anything else: a status, a grpc-status, a reset, a bad message */
        uint64_t conn_errors;
        uint64_t late;        /* measured calls started after they were due (open loop) */
        uint64_t missed;      /* open loop: measured calls due before the end, never started */
        BenchLatency latency; /* answers to calls started (or due) while measuring */
} Stats;

typedef struct Conn Conn;
typedef struct Worker Worker;

/* One call. */
typedef struct Call {
        Conn *c;
        uint64_t start_ns; /* when it was due (open loop) or submitted (closed loop) */
        bool measured;
        bool used;
        int http_status;
        int grpc_status;  /* -1: none seen */
        uint8_t body[16]; /* the response's first bytes: prefix and overall_code */
        size_t body_len;
        size_t sent; /* bytes of the request given to nghttp2 */
} Call;

struct Conn {
        int fd;
        unsigned index;
        bool open;
        bool want_out;
        Worker *w;
        nghttp2_session *session;
        uint64_t quota;  /* measured calls still to start (-n); UINT64_MAX with -d */
        unsigned active; /* calls open */
        uint64_t next_k; /* open loop: the index of its next call in the run's schedule */
        Call *calls;     /* opt.streams */
        Call **free_calls;
        unsigned n_free;
        uint8_t *out;
        size_t out_len, out_pos;
};

struct Worker {
        pthread_t thread;
        int epfd;
        int tfd; /* the timerfd of the open loop's schedule */
        Conn *conns;
        unsigned n_conns;
        Stats stats;
        bool first_err_printed;
};

static Options opt = {
        .run = { .connections = 16, .threads = 1, .label = "grpc", .secs_max = 86400.0 },
        .streams = 16,
        .domain = "bench",
        .key = "ip",
        .value = "0",
};

static uint8_t request[REQUEST_MAX];
static size_t request_len;
static nghttp2_session_callbacks *callbacks;

static const nghttp2_nv request_headers[] = {
#define NVS(n, v)                                                                                           \
        {                                                                                                   \
                (uint8_t *) (n), (uint8_t *) (v), sizeof(n) - 1, sizeof(v) - 1,                             \
                        NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE                        \
        }
        NVS(":method", "POST"),
        NVS(":scheme", "http"),
        NVS(":path", RLS_PATH),
        NVS(":authority", "divvyd"),
        NVS("content-type", "application/grpc"),
        NVS("te", "trailers"),
#undef NVS
};

/* A length-delimited protobuf field (payload < 128 bytes) at p; returns its size. */
static size_t put_field(uint8_t *p, unsigned field, const uint8_t *payload, size_t len) {
        p[0] = (uint8_t) (field << 3 | 2);
        p[1] = (uint8_t) len;
        memmove(p + 2, payload, len);
        return len + 2;
}

/* The gRPC-framed RateLimitRequest { domain, descriptors { entries { key, value } } }. */
static void build_request(void) {
        uint8_t entry[2 * (TEXT_MAX + 2)], desc[2 * (TEXT_MAX + 2) + 2];
        size_t e = 0, d, n = 5;

        e += put_field(entry + e, 1, (const uint8_t *) opt.key, strlen(opt.key));
        e += put_field(entry + e, 2, (const uint8_t *) opt.value, strlen(opt.value));
        d = put_field(desc, 1, entry, e);
        n += put_field(request + n, 1, (const uint8_t *) opt.domain, strlen(opt.domain));
        n += put_field(request + n, 2, desc, d);
        request[0] = 0;
        request[1] = (uint8_t) ((n - 5) >> 24);
        request[2] = (uint8_t) ((n - 5) >> 16);
        request[3] = (uint8_t) ((n - 5) >> 8);
        request[4] = (uint8_t) (n - 5);
        request_len = n;
}

static void conn_fail(Worker *w, Conn *c, const char *what, int error);

static ssize_t read_request(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                            uint32_t *data_flags, nghttp2_data_source *source, void *user_data) {
        Call *call = source->ptr;
        size_t n = request_len - call->sent;

        (void) session;
        (void) stream_id;
        (void) user_data;
        if (n > length)
                n = length;
        memcpy(buf, request + call->sent, n);
        call->sent += n;
        if (call->sent == request_len)
                *data_flags |= NGHTTP2_DATA_FLAG_EOF;
        return (ssize_t) n;
}

/* Starts a call due at start_ns. Returns false if the connection has no free stream. */
static bool call_start(Conn *c, uint64_t start_ns, bool measured) {
        nghttp2_data_provider prd = { .read_callback = read_request };
        Call *call;
        int32_t id;

        if (c->n_free == 0)
                return false;
        call = c->free_calls[--c->n_free];
        *call = (Call){
                .c = c, .start_ns = start_ns, .measured = measured, .used = true, .grpc_status = -1
        };
        prd.source.ptr = call;
        id = nghttp2_submit_request(c->session, NULL, request_headers,
                                    sizeof request_headers / sizeof request_headers[0], &prd, call);
        if (id < 0) {
                call->used = false;
                c->free_calls[c->n_free++] = call;
                conn_fail(c->w, c, "nghttp2_submit_request failed", 0);
                return false;
        }
        c->active++;
        return true;
}

/* The closed loop's next call on c, if the run goes on. */
static void closed_next(Conn *c) {
        int ph = atomic_load(&bench_phase);

        if (ph == PHASE_STOP || atomic_load(&bench_aborting))
                return;
        if (ph == PHASE_MEASURE) {
                if (c->quota == 0)
                        return;
                c->quota--;
        }
        (void) call_start(c, clock_nsec(CLOCK_MONOTONIC), ph == PHASE_MEASURE);
}

/* The open loop: when call k of c (its index in the whole schedule) is due. */
static uint64_t due_ns(uint64_t k) {
        return bench_start_ns + (uint64_t) ((double) k * 1e9 / opt.rate);
}

/* Starts every call of c due by now (as streams free up); returns when its next is due. */
static uint64_t open_starts(Conn *c, uint64_t now) {
        for (;;) {
                uint64_t due = due_ns(c->next_k);
                int ph = atomic_load(&bench_phase);
                bool measured = due >= bench_measure_start_ns && bench_measure_start_ns != 0;

                if (ph == PHASE_STOP || atomic_load(&bench_aborting) || !c->open)
                        return UINT64_MAX;
                if (due > now)
                        return due;
                if (measured && c->quota == 0)
                        return UINT64_MAX;
                if (!call_start(c, due, measured))
                        return UINT64_MAX; /* all its streams are busy: when one ends */
                if (measured) {
                        c->quota--;
                        if (now - due > 1000 * NSEC_PER_USEC)
                                c->w->stats.late++;
                }
                c->next_k += opt.run.connections;
        }
}

static void report_error(Worker *w, const char *what, int code) {
        if (!w->first_err_printed) {
                w->first_err_printed = true;
                fprintf(stderr, "grpc-load: first error: %s %d\n", what, code);
        }
}

static void call_end(Conn *c, Call *call, uint32_t error_code) {
        Worker *w = c->w;
        uint64_t t = clock_nsec(CLOCK_MONOTONIC);
        bool ok = false, over = false;

        if (error_code != NGHTTP2_NO_ERROR)
                report_error(w, "stream reset, HTTP/2 error", (int) error_code);
        else if (call->http_status != 200)
                report_error(w, ":status", call->http_status);
        else if (call->grpc_status != 0)
                report_error(w, "grpc-status", call->grpc_status);
        else if (call->body_len < 5 || call->body[0] != 0)
                report_error(w, "no response message, bytes", (int) call->body_len);
        else if (call->body_len >= 7 && call->body[5] == 0x08 && call->body[6] == 1)
                ok = true;
        else if (call->body_len >= 7 && call->body[5] == 0x08 && call->body[6] == 2)
                over = true;
        else
                report_error(w, "overall_code neither OK nor OVER_LIMIT, byte", call->body[6]);
        if (call->measured) {
                uint64_t ns = t - call->start_ns;

                w->stats.ok += ok;
                w->stats.over_limit += over;
                w->stats.err += !ok && !over;
                bench_latency_add(&w->stats.latency, t, ns);
        } else if (!ok && !over)
                w->stats.err++;
        call->used = false;
        c->free_calls[c->n_free++] = call;
        c->active--;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data) {
        Call *call = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        int v = 0;

        (void) flags;
        (void) user_data;
        if (!call || frame->hd.type != NGHTTP2_HEADERS)
                return 0;
        if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
                for (size_t i = 0; i < valuelen && i < 4; i++)
                        v = v * 10 + (value[i] - '0');
                call->http_status = v;
        } else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
                for (size_t i = 0; i < valuelen && i < 4; i++)
                        v = v * 10 + (value[i] - '0');
                call->grpc_status = v;
        }
        return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id, const uint8_t *data,
                         size_t len, void *user_data) {
        Call *call = nghttp2_session_get_stream_user_data(session, stream_id);
        size_t n;

        (void) flags;
        (void) user_data;
        if (!call)
                return 0;
        n = sizeof call->body - call->body_len;
        if (n > len)
                n = len;
        memcpy(call->body + call->body_len, data, n);
        call->body_len += n;
        return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                           void *user_data) {
        Conn *c = user_data;
        Call *call = nghttp2_session_get_stream_user_data(session, stream_id);

        if (!call || !call->used)
                return 0;
        call_end(c, call, error_code);
        if (opt.rate == 0.0)
                closed_next(c);
        return 0;
}

static int conn_set_out(Worker *w, Conn *c, bool want_out) {
        return bench_epoll_set_out(w->epfd, c->fd, c, &c->want_out, want_out);
}

static void conn_close(Worker *w, Conn *c) {
        if (!c->open)
                return;
        c->open = false;
        (void) epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
}

static void conn_fail(Worker *w, Conn *c, const char *what, int error) {
        if (!c->open)
                return;
        w->stats.conn_errors++;
        w->stats.err += c->active;
        if (!atomic_load(&bench_aborting) || error)
                fprintf(stderr, "grpc-load: connection %u: %s%s%s\n", c->index, what, error ? ": " : "",
                        error ? strerror(error) : "");
        conn_close(w, c);
}

/* Everything nghttp2 has to send, in as few write()s as the socket takes. */
static int conn_flush(Worker *w, Conn *c) {
        for (;;) {
                while (c->out_pos < c->out_len) {
                        ssize_t n = write(c->fd, c->out + c->out_pos, c->out_len - c->out_pos);
                        if (n < 0) {
                                if (errno == EINTR)
                                        continue;
                                if (errno == EAGAIN)
                                        return conn_set_out(w, c, true);
                                return -errno;
                        }
                        c->out_pos += (size_t) n;
                }
                c->out_pos = c->out_len = 0;
                while (c->out_len < OUT_SIZE - 16384 - 64) {
                        const uint8_t *data;
                        ssize_t n = nghttp2_session_mem_send(c->session, &data);

                        if (n < 0)
                                return -EPROTO;
                        if (n == 0)
                                break;
                        if ((size_t) n > OUT_SIZE - c->out_len)
                                return -EMSGSIZE;
                        memcpy(c->out + c->out_len, data, (size_t) n);
                        c->out_len += (size_t) n;
                }
                if (c->out_len == 0)
                        return conn_set_out(w, c, false);
        }
}

static void conn_readable(Worker *w, Conn *c) {
        uint8_t in[IN_SIZE];

        for (;;) {
                ssize_t n = read(c->fd, in, sizeof in), r;

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return;
                        conn_fail(w, c, "read failed", errno);
                        return;
                }
                if (n == 0) {
                        if (c->active > 0 || atomic_load(&bench_phase) != PHASE_STOP)
                                conn_fail(w, c, "closed by the server", 0);
                        else
                                conn_close(w, c);
                        return;
                }
                r = nghttp2_session_mem_recv(c->session, in, (size_t) n);
                if (r < 0) {
                        conn_fail(w, c, nghttp2_strerror((int) r), 0);
                        return;
                }
                if ((size_t) n < sizeof in)
                        return;
        }
}

/* The open loop: starts what is due on w's connections; arms the timer for the next. */
static void worker_schedule(Worker *w) {
        uint64_t now = clock_nsec(CLOCK_MONOTONIC), next = UINT64_MAX;
        struct itimerspec its = { 0 };

        for (unsigned i = 0; i < w->n_conns; i++) {
                uint64_t t = w->conns[i].open ? open_starts(&w->conns[i], now) : UINT64_MAX;
                if (t < next)
                        next = t;
        }
        if (next != UINT64_MAX) {
                if (next < now + TICK_NSEC)
                        next = now + TICK_NSEC;
                its.it_value.tv_sec = (time_t) (next / NSEC_PER_SEC);
                its.it_value.tv_nsec = (long) (next % NSEC_PER_SEC);
        }
        (void) timerfd_settime(w->tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void *worker_run(void *userdata) {
        Worker *w = userdata;
        struct epoll_event evs[EVENTS_MAX];
        uint64_t last_progress = clock_nsec(CLOCK_MONOTONIC);

        if (opt.rate == 0.0)
                for (unsigned i = 0; i < w->n_conns; i++)
                        for (unsigned s = 0; s < opt.streams; s++)
                                closed_next(&w->conns[i]);
        else
                worker_schedule(w);
        for (unsigned i = 0; i < w->n_conns; i++) {
                int r = conn_flush(w, &w->conns[i]);
                if (r < 0)
                        conn_fail(w, &w->conns[i], "send failed", -r);
        }

        for (;;) {
                uint64_t before = w->stats.latency.measured + w->stats.err, t, quota = 0;
                unsigned open = 0, active = 0;
                int n;

                for (unsigned i = 0; i < w->n_conns; i++) {
                        open += w->conns[i].open;
                        active += w->conns[i].open ? w->conns[i].active : 0;
                        quota += w->conns[i].open ? w->conns[i].quota : 0;
                }
                if (open == 0)
                        break;
                if (active == 0 &&
                    (atomic_load(&bench_phase) == PHASE_STOP || atomic_load(&bench_aborting) ||
                     (atomic_load(&bench_phase) == PHASE_MEASURE && quota == 0)))
                        break; /* the run is over, or -n calls were made */
                n = epoll_wait(w->epfd, evs, EVENTS_MAX, EPOLL_TIMEOUT_MSEC);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        fprintf(stderr, "grpc-load: epoll_wait: %m\n");
                        atomic_store(&bench_aborting, true);
                        break;
                }
                for (int i = 0; i < n; i++) {
                        Conn *c = evs[i].data.ptr;

                        if (!c) { /* the timerfd */
                                uint64_t ticks;
                                (void) !read(w->tfd, &ticks, sizeof ticks);
                                continue;
                        }
                        if (c->open && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                                conn_readable(w, c);
                }
                if (opt.rate != 0.0)
                        worker_schedule(w);
                for (unsigned i = 0; i < w->n_conns; i++) {
                        Conn *c = &w->conns[i];
                        int r;

                        if (!c->open || !nghttp2_session_want_write(c->session) || c->out_len > 0)
                                continue;
                        r = conn_flush(w, c);
                        if (r < 0)
                                conn_fail(w, c, "send failed", -r);
                }
                for (int i = 0; i < n; i++) {
                        Conn *c = evs[i].data.ptr;
                        int r;

                        if (!c || !c->open || !(evs[i].events & EPOLLOUT))
                                continue;
                        r = conn_flush(w, c);
                        if (r < 0)
                                conn_fail(w, c, "send failed", -r);
                }
                t = clock_nsec(CLOCK_MONOTONIC);
                if (w->stats.latency.measured + w->stats.err != before || active == 0)
                        last_progress = t;
                else if (t - last_progress > STALL_NSEC || atomic_load(&bench_aborting)) {
                        for (unsigned i = 0; i < w->n_conns; i++)
                                conn_fail(w, &w->conns[i],
                                          atomic_load(&bench_aborting) ? "aborted"
                                                                       : "no answer for 10 s, giving up",
                                          0);
                }
        }
        if (opt.rate != 0.0 && atomic_load(&bench_stop_ns) != 0)
                for (unsigned i = 0; i < w->n_conns; i++) {
                        Conn *c = &w->conns[i];

                        /* the calls a server too slow kept from starting: not hidden */
                        for (uint64_t due; (due = due_ns(c->next_k)) < atomic_load(&bench_stop_ns);
                             c->next_k += opt.run.connections)
                                w->stats.missed += due >= bench_measure_start_ns;
                }
        for (unsigned i = 0; i < w->n_conns; i++)
                conn_close(w, &w->conns[i]);
        return NULL;
}

static int connect_one(void) {
        return bench_set_nonblock(bench_connect(&opt.run.addr));
}

/* c's HTTP/2 session: our SETTINGS (no push, large windows), its calls. */
static int conn_setup(Conn *c) {
        const nghttp2_settings_entry settings[] = {
                { NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
                { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, WINDOW },
        };

        if (nghttp2_session_client_new(&c->session, callbacks, c) != 0)
                return -ENOMEM;
        if (nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, settings, 2) != 0 ||
            nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0, WINDOW) != 0)
                return -ENOMEM;
        c->calls = calloc(opt.streams, sizeof *c->calls);
        c->free_calls = calloc(opt.streams, sizeof *c->free_calls);
        c->out = malloc(OUT_SIZE);
        if (!c->calls || !c->free_calls || !c->out)
                return -ENOMEM;
        for (unsigned i = 0; i < opt.streams; i++)
                c->free_calls[c->n_free++] = &c->calls[i];
        return 0;
}

static void conn_free(Conn *c) {
        if (c->session)
                nghttp2_session_del(c->session);
        free(c->calls);
        free(c->free_calls);
        free(c->out);
}

static void help(void) {
        printf("Usage: grpc-load [OPTIONS] [ADDRESS]\n"
               "Calls Envoy's ShouldRateLimit over gRPC (HTTP/2 without TLS) and reports throughput "
               "and latency.\n\n"
               "  -a, --address=ADDR     tcp:HOST:PORT, HOST:PORT or unix:PATH (default "
               "tcp:127.0.0.1:8081)\n"
               "  -c, --connections=N    HTTP/2 connections (default 16)\n"
               "  -m, --streams=N        concurrent calls per connection (default 16)\n"
               "  -n, --requests=N       measure N calls (suffixes k, M)\n"
               "  -d, --duration=SEC     measure for SEC seconds (default 10 when -n is not given)\n"
               "  -w, --warmup=SEC       unmeasured load first (default 1 with -d, 0 with -n)\n"
               "  -R, --rate=R           open loop: R calls/s in all, due on a fixed schedule spread\n"
               "                         evenly over the connections; latency from when each was due\n"
               "                         (default: closed loop, every stream busy all the time)\n"
               "      --domain=TEXT      the request's domain (default bench)\n"
               "      --key=TEXT         its one descriptor's entry key (default ip)\n"
               "      --value=TEXT       and value (default 0)\n"
               "  -t, --threads=N        client threads (default 1)\n"
               "      --label=TEXT       name of this run in the RESULT line (default grpc)\n"
               "  -q, --quiet            print only the RESULT line\n"
               "  -h, --help\n\n"
               "Exit status: 0 if every call ended with grpc-status 0 and a RateLimitResponse whose\n"
               "overall_code is OK or OVER_LIMIT, 1 on any other answer or a lost connection, 2 on\n"
               "a usage error.\n");
}

static int parse_text(const char *s, const char **ret) {
        if (strlen(s) > TEXT_MAX)
                return -EINVAL;
        *ret = s;
        return 0;
}

static int parse_argv(int argc, char **argv) {
        enum { OPT_DOMAIN = BENCH_OPT_LABEL + 1, OPT_KEY, OPT_VALUE };
        static const struct option options[] = {
                BENCH_LONG_OPTIONS,
                { "streams", required_argument, NULL, 'm' },
                { "rate", required_argument, NULL, 'R' },
                { "domain", required_argument, NULL, OPT_DOMAIN },
                { "key", required_argument, NULL, OPT_KEY },
                { "value", required_argument, NULL, OPT_VALUE },
                { "help", no_argument, NULL, 'h' },
                { 0 },
        };
        char *end;
        int c, r = 0;

        opt.run.address = "tcp:127.0.0.1:8081";
        while ((c = getopt_long(argc, argv, "a:c:m:n:d:w:R:t:qh", options, NULL)) >= 0) {
                r = bench_option(&opt.run, c, optarg);
                if (r == 1) {
                        r = 0;
                        switch (c) {
                        case 'm':
                                r = bench_parse_uint(optarg, false, 1, STREAMS_MAX, &opt.streams);
                                break;
                        case 'R':
                                errno = 0;
                                opt.rate = strtod(optarg, &end);
                                r = errno || end == optarg || *end || !(opt.rate >= 1.0) || opt.rate > 1e9
                                            ? -EINVAL
                                            : 0;
                                break;
                        case OPT_DOMAIN:
                                r = parse_text(optarg, &opt.domain);
                                break;
                        case OPT_KEY:
                                r = parse_text(optarg, &opt.key);
                                break;
                        case OPT_VALUE:
                                r = parse_text(optarg, &opt.value);
                                break;
                        case 'h':
                                help();
                                exit(0);
                        default:
                                return -EINVAL;
                        }
                }
                if (r < 0) {
                        fprintf(stderr, "grpc-load: invalid value for -%c: %s\n", c < 256 ? c : '-', optarg);
                        return r;
                }
        }
        if (optind < argc)
                opt.run.address = argv[optind++];
        if (optind < argc) {
                fprintf(stderr, "grpc-load: unexpected argument %s\n", argv[optind]);
                return -EINVAL;
        }
        if (bench_options_times(&opt.run, "grpc-load") < 0)
                return -EINVAL;
        if (opt.run.threads > opt.run.connections)
                opt.run.threads = opt.run.connections;
        if (bench_parse_address(opt.run.address, &opt.run.addr) < 0) {
                fprintf(stderr, "grpc-load: invalid address %s\n", opt.run.address);
                return -EINVAL;
        }
        return 0;
}

static void merge(Stats *into, const Stats *s) {
        into->ok += s->ok;
        into->over_limit += s->over_limit;
        into->err += s->err;
        into->conn_errors += s->conn_errors;
        into->late += s->late;
        into->missed += s->missed;
        bench_latency_merge(&into->latency, &s->latency);
}

int main(int argc, char **argv) {
        static Stats total;
        Worker *workers = NULL;
        Conn *conns = NULL;
        BenchSummary sum;
        int ret = EXIT_FAILURE;

        if (parse_argv(argc, argv) < 0)
                return 2;
        build_request();

        bench_signals();

        if (nghttp2_session_callbacks_new(&callbacks) != 0) {
                fprintf(stderr, "grpc-load: out of memory\n");
                return EXIT_FAILURE;
        }
        nghttp2_session_callbacks_set_on_header_callback(callbacks, on_header);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, on_data_chunk);
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, on_stream_close);

        workers = calloc(opt.run.threads, sizeof(Worker));
        conns = calloc(opt.run.connections, sizeof(Conn));
        if (!workers || !conns) {
                fprintf(stderr, "grpc-load: out of memory\n");
                goto finish;
        }
        for (unsigned i = 0; i < opt.run.threads; i++) {
                workers[i].epfd = workers[i].tfd = -1;
                workers[i].conns = conns + bench_share_start(opt.run.connections, opt.run.threads, i);
                workers[i].n_conns = (unsigned) bench_share(opt.run.connections, opt.run.threads, i);
        }
        for (unsigned i = 0; i < opt.run.threads; i++)
                for (unsigned j = 0; j < workers[i].n_conns; j++)
                        workers[i].conns[j].w = &workers[i];
        for (unsigned i = 0; i < opt.run.connections; i++) {
                Conn *c = &conns[i];
                int fd = connect_one(), r;

                if (fd < 0) {
                        fprintf(stderr, "grpc-load: cannot connect to %s: %s\n", opt.run.address,
                                strerror(-fd));
                        goto finish;
                }
                c->fd = fd;
                c->index = i;
                c->open = true;
                c->next_k = i;
                c->quota = bench_quota(opt.run.requests, opt.run.connections, i);
                r = conn_setup(c);
                if (r < 0) {
                        fprintf(stderr, "grpc-load: %s\n", strerror(-r));
                        goto finish;
                }
        }
        for (unsigned i = 0; i < opt.run.threads; i++) {
                Worker *w = &workers[i];

                w->epfd = epoll_create1(EPOLL_CLOEXEC);
                w->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
                if (w->epfd < 0 || w->tfd < 0 || bench_epoll_add(w->epfd, w->tfd, NULL) < 0) {
                        fprintf(stderr, "grpc-load: epoll or timerfd: %m\n");
                        goto finish;
                }
                for (unsigned j = 0; j < w->n_conns; j++) {
                        int r = bench_epoll_add(w->epfd, w->conns[j].fd, &w->conns[j]);
                        if (r < 0) {
                                fprintf(stderr, "grpc-load: epoll_ctl: %s\n", strerror(-r));
                                goto finish;
                        }
                }
        }

        if (bench_run("grpc-load", workers, opt.run.threads, sizeof(Worker), offsetof(Worker, thread),
                      worker_run, opt.run.warmup_ns, opt.run.duration_ns, opt.rate > 0.0) < opt.run.threads)
                goto finish;

        for (unsigned i = 0; i < opt.run.threads; i++)
                merge(&total, &workers[i].stats);

        bench_summarize(&sum, &total.latency, bench_measure_start_ns);

        if (!opt.run.quiet) {
                printf("%s at %s: %u connections x %u streams, %u thread%s, %s\n", opt.run.label,
                       opt.run.address, opt.run.connections, opt.streams, opt.run.threads,
                       opt.run.threads == 1 ? "" : "s", opt.rate > 0.0 ? "open loop" : "closed loop");
                if (opt.rate > 0.0)
                        printf("  schedule:   %.0f calls/s, %" PRIu64
                               " started more than 1 ms late, %" PRIu64
                               " due but never started (their connection's streams were busy)\n",
                               opt.rate, total.late, total.missed);
                printf("  throughput: %" PRIu64 " calls in %.3f s = %.0f calls/s\n", total.latency.measured,
                       sum.secs, sum.rps);
                printf("  answers:    OK %" PRIu64 ", OVER_LIMIT %" PRIu64 ", errors %" PRIu64
                       ", lost connections %" PRIu64 "\n",
                       total.ok, total.over_limit, total.err, total.conn_errors);
                bench_print_latency(&sum);
        }
        printf("RESULT label=%s target=grpc address=%s connections=%u streams=%u threads=%u rate=%.0f"
               " requests=%" PRIu64 " seconds=%.3f rps=%.0f ok=%" PRIu64 " over_limit=%" PRIu64
               " err=%" PRIu64 " lost=%" PRIu64 " late=%" PRIu64 " missed=%" PRIu64,
               opt.run.label, opt.run.address, opt.run.connections, opt.streams, opt.run.threads, opt.rate,
               total.latency.measured, sum.secs, sum.rps, total.ok, total.over_limit, total.err,
               total.conn_errors, total.late, total.missed);
        bench_print_result_latency(&sum);
        printf("\n");
        fflush(stdout);

        if (total.err == 0 && total.conn_errors == 0 && total.latency.measured > 0 &&
            !atomic_load(&bench_aborting))
                ret = EXIT_SUCCESS;
finish:
        if (conns)
                for (unsigned i = 0; i < opt.run.connections; i++) {
                        if (conns[i].open)
                                close(conns[i].fd);
                        conn_free(&conns[i]);
                }
        if (workers)
                for (unsigned i = 0; i < opt.run.threads; i++) {
                        if (workers[i].epfd >= 0)
                                close(workers[i].epfd);
                        if (workers[i].tfd >= 0)
                                close(workers[i].tfd);
                }
        nghttp2_session_callbacks_del(callbacks);
        free(conns);
        free(workers);
        return ret;
}
