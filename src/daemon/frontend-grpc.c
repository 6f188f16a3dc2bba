/* SPDX-License-Identifier: MIT */
/* frontend-grpc.c: Envoy's rate limit service over gRPC; see frontend-grpc.h. */

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nghttp2/nghttp2.h>

#include "frontend-grpc.h"
#include "frontend.h"
#include "log.h"

#include "core/grpc.h"
#include "core/rls.h"
#include "shared/clock.h"

#define GRPC_PATH_RLS    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
#define GRPC_PATH_HEALTH "/grpc.health.v1.Health/Check"
#define GRPC_BODY_KEEP                                                                                      \
        1024u /* bytes: a call's body buffer up to this is kept for the next call of its connection;        \
               * a larger one is given back when the call ends */
#define GRPC_STREAMS_KEEP 16 /* finished calls' structs kept per connection for the next ones */
#define GRPC_POOL_CLASSES 9  /* nghttp2's blocks of 16 B .. 4 KiB are kept for reuse, ... */
#define GRPC_POOL_KEEP                                                                                      \
        32 /* ... up to this many per size: nghttp2 allocates ~8 blocks per stream, which then cost         \
            * no malloc() (at most 256 KiB kept per connection) */

/* nghttp2's allocator for one connection: freed blocks of up to 4 KiB go to a free list of
 * their size class and are handed out again, so a stream in the steady state costs no
 * malloc(). Every block has a header naming its class (GRPC_POOL_CLASSES: a larger one). */
typedef struct GrpcPoolBlock {
        struct GrpcPoolBlock *next; /* on its free list */
        size_t cls;
        size_t size;         /* of the caller's bytes */
        max_align_t align[]; /* the caller's bytes */
} GrpcPoolBlock;

typedef struct GrpcPool {
        GrpcPoolBlock *free[GRPC_POOL_CLASSES];
        unsigned n_free[GRPC_POOL_CLASSES];
} GrpcPool;

static size_t pool_class(size_t n) {
        size_t cls = 0;

        while (cls < GRPC_POOL_CLASSES && ((size_t) 16 << cls) < n)
                cls++;
        return cls;
}

static void *pool_malloc(size_t n, void *mem_user_data) {
        GrpcPool *pool = mem_user_data;
        size_t cls = pool_class(n);
        GrpcPoolBlock *b;

        if (cls < GRPC_POOL_CLASSES && pool->free[cls]) {
                b = pool->free[cls];
                pool->free[cls] = b->next;
                pool->n_free[cls]--;
                return b->align;
        }
        if (n > SIZE_MAX - sizeof *b)
                return NULL;
        n = cls < GRPC_POOL_CLASSES ? (size_t) 16 << cls : n;
        b = malloc(sizeof *b + n);
        if (!b)
                return NULL;
        b->cls = cls;
        b->size = n;
        return b->align;
}

static GrpcPoolBlock *pool_block(void *p) {
        return (GrpcPoolBlock *) ((char *) p - offsetof(GrpcPoolBlock, align));
}

static void pool_free(void *p, void *mem_user_data) {
        GrpcPool *pool = mem_user_data;
        GrpcPoolBlock *b;

        if (!p)
                return;
        b = pool_block(p);
        if (b->cls < GRPC_POOL_CLASSES && pool->n_free[b->cls] < GRPC_POOL_KEEP) {
                b->next = pool->free[b->cls];
                pool->free[b->cls] = b;
                pool->n_free[b->cls]++;
                return;
        }
        free(b);
}

static void *pool_calloc(size_t nmemb, size_t size, void *mem_user_data) {
        void *p;

        if (size != 0 && nmemb > SIZE_MAX / size)
                return NULL;
        p = pool_malloc(nmemb * size, mem_user_data);
        if (p)
                memset(p, 0, nmemb * size);
        return p;
}

static void *pool_realloc(void *p, size_t n, void *mem_user_data) {
        GrpcPoolBlock *b;
        size_t old;
        void *q;

        if (!p)
                return pool_malloc(n, mem_user_data);
        b = pool_block(p);
        if (n <= b->size)
                return p;
        q = pool_malloc(n, mem_user_data);
        if (!q)
                return NULL;
        old = b->size;
        memcpy(q, p, old);
        pool_free(p, mem_user_data);
        return q;
}

static void pool_done(GrpcPool *pool) {
        for (size_t i = 0; i < GRPC_POOL_CLASSES; i++)
                while (pool->free[i]) {
                        GrpcPoolBlock *b = pool->free[i];
                        pool->free[i] = b->next;
                        free(b);
                }
}

typedef enum GrpcMethod {
        GRPC_METHOD_UNKNOWN,
        GRPC_METHOD_RLS,
        GRPC_METHOD_HEALTH,
} GrpcMethod;

typedef struct GrpcConn GrpcConn;

/* One call (an HTTP/2 stream). */
typedef struct GrpcStream {
        GrpcConn *g;
        int32_t id;
        uint8_t method; /* GrpcMethod */
        bool grpc_content_type;
        bool too_big;           /* its body passed GRPC_MESSAGE_MAX: answered already */
        bool answered;          /* a response was submitted */
        bool in_batch;          /* slots of the batch point to it */
        bool closed;            /* nghttp2 closed the stream while in_batch */
        bool on_ready;          /* on the ready list */
        bool incomplete;        /* begun, not whole yet (nor answered) */
        uint64_t begin_usec;    /* CLOCK_MONOTONIC: its HEADERS arrived */
        uint64_t deadline_usec; /* CLOCK_MONOTONIC; 0: none (grpc-timeout) */
        uint8_t *body;          /* the request's bytes (prefix included) */
        size_t body_len, body_size;
        /* ShouldRateLimit, while in the batch (arena memory) */
        uint32_t n_desc, n_done;
        RlsStatus *st;
        RlsHits *hits;
        int error_status;  /* GrpcStatus of the first slot that failed; 0: none */
        bool group_denied; /* a rule that always denies decided: the others' hits were PEEKs */
        const char *error_reason;
        /* the response's message (prefix included), read by the data provider */
        uint8_t *resp;
        size_t resp_len, resp_size, resp_pos;
        struct GrpcStream *next; /* on the ready list, or the free list */
        struct GrpcStream *all_prev, *all_next;
} GrpcStream;

struct GrpcConn {
        Connection *c;
        nghttp2_session *session;
        GrpcPool pool;                       /* nghttp2's memory (outlives the session) */
        nghttp2_mem mem;                     /* the pool's functions */
        RlsArena arena;                      /* the requests decoded by one take() and their replies */
        GrpcStream *ready_head, *ready_tail; /* calls received whole, waiting for a batch */
        GrpcStream *all;                     /* every call open */
        GrpcStream *free_list;
        unsigned n_free, n_streams;
        unsigned n_incomplete; /* calls begun and not whole (--request-timeout applies) */
        Metrics *metrics;      /* the engine's (borrowed, NULL: none): every call's answer counted */
        uint64_t recv_usec;    /* CLOCK_MONOTONIC: when the bytes being processed were taken */
};

static nghttp2_session_callbacks *grpc_callbacks;
static nghttp2_option *grpc_option;

static void grpc_update_work(GrpcConn *g) {
        g->c->grpc_work = g->ready_head || nghttp2_session_want_write(g->session);
}

/* st is whole, answered or gone: no longer waited for. */
static void stream_complete(GrpcConn *g, GrpcStream *st) {
        if (!st->incomplete)
                return;
        st->incomplete = false;
        g->n_incomplete--;
}

static GrpcStream *stream_new(GrpcConn *g, int32_t id) {
        GrpcStream *st = g->free_list;

        if (st) {
                g->free_list = st->next;
                g->n_free--;
        } else {
                st = calloc(1, sizeof *st);
                if (!st)
                        return NULL;
        }
        uint8_t *body = st->body, *resp = st->resp;
        size_t body_size = st->body_size, resp_size = st->resp_size;
        *st = (GrpcStream){
                .g = g, .id = id, .body = body, .body_size = body_size, .resp = resp, .resp_size = resp_size
        };
        st->all_next = g->all;
        if (g->all)
                g->all->all_prev = st;
        g->all = st;
        g->n_streams++;
        st->incomplete = true;
        st->begin_usec = g->recv_usec;
        g->n_incomplete++;
        return st;
}

static void stream_free(GrpcStream *st) {
        free(st->body);
        free(st->resp);
        free(st);
}

static void ready_unlink(GrpcConn *g, GrpcStream *st) {
        GrpcStream **p = &g->ready_head, *prev = NULL;

        if (!st->on_ready)
                return;
        st->on_ready = false;
        for (; *p; prev = *p, p = &(*p)->next)
                if (*p == st) {
                        *p = st->next;
                        if (g->ready_tail == st)
                                g->ready_tail = prev;
                        st->next = NULL;
                        return;
                }
}

/* The call is over: its struct goes to the free list (its buffers kept if small). */
static void stream_release(GrpcConn *g, GrpcStream *st) {
        ready_unlink(g, st);
        stream_complete(g, st);
        if (st->all_prev)
                st->all_prev->all_next = st->all_next;
        else
                g->all = st->all_next;
        if (st->all_next)
                st->all_next->all_prev = st->all_prev;
        g->n_streams--;
        if (g->n_free >= GRPC_STREAMS_KEEP) {
                stream_free(st);
                return;
        }
        if (st->body_size > GRPC_BODY_KEEP) {
                free(st->body);
                st->body = NULL;
                st->body_size = 0;
        }
        if (st->resp_size > GRPC_BODY_KEEP) {
                free(st->resp);
                st->resp = NULL;
                st->resp_size = 0;
        }
        st->next = g->free_list;
        g->free_list = st;
        g->n_free++;
}

/* A header of constant strings: nghttp2 does not copy them. */
#define NV_CONST(name, value)                                                                               \
        {                                                                                                   \
                (uint8_t *) (name), (uint8_t *) (value), sizeof(name) - 1, sizeof(value) - 1,               \
                        NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE                        \
        }
static const nghttp2_nv grpc_ok_headers[] = { NV_CONST(":status", "200"),
                                              NV_CONST("content-type", "application/grpc") };
static const nghttp2_nv grpc_ok_trailer[] = { NV_CONST("grpc-status", "0") };

static ssize_t grpc_read_body(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                              uint32_t *data_flags, nghttp2_data_source *source, void *user_data) {
        GrpcStream *st = source->ptr;
        size_t n = st->resp_len - st->resp_pos;

        if (n > length)
                n = length;
        memcpy(buf, st->resp + st->resp_pos, n);
        st->resp_pos += n;
        if (st->resp_pos == st->resp_len) {
                *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
                if (nghttp2_submit_trailer(session, stream_id, grpc_ok_trailer, 1) != 0)
                        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the stream is reset */
        }
        return (ssize_t) n;
}

#define NV(name, value)                                                                                     \
        { (uint8_t *) (name), (uint8_t *) (value), strlen(name), strlen(value), NGHTTP2_NV_FLAG_NONE }

/* st's answer with status, in divvyd_grpc_calls_total. */
static void grpc_count(GrpcConn *g, const GrpcStream *st, GrpcStatus status) {
        static const MetricsGrpcMethod method[] = {
                [GRPC_METHOD_UNKNOWN] = METRICS_GRPC_UNKNOWN,
                [GRPC_METHOD_RLS] = METRICS_GRPC_SHOULD_RATE_LIMIT,
                [GRPC_METHOD_HEALTH] = METRICS_GRPC_HEALTH_CHECK,
        };

        if (g->metrics)
                metrics_count_grpc(g->metrics, method[st->method], (unsigned) status);
}

/* Answers st with its message in st->resp and grpc-status 0. */
static void grpc_respond_ok(GrpcConn *g, GrpcStream *st) {
        nghttp2_data_provider prd = { .source.ptr = st, .read_callback = grpc_read_body };
        int r;

        grpc_count(g, st, GRPC_STATUS_OK);
        st->answered = true;
        stream_complete(g, st);
        st->resp_pos = 0;
        r = nghttp2_submit_response(g->session, st->id, grpc_ok_headers, 2, &prd);
        if (r != 0)
                log_debug("Connection %" PRIu64 ": stream %" PRIi32 ": response not submitted: %s", g->c->id,
                          st->id, nghttp2_strerror(r));
}

/* Answers st with a gRPC error, in a trailers-only response. */
static void grpc_respond_error(GrpcConn *g, GrpcStream *st, GrpcStatus status, const char *reason) {
        char code[4], msg[GRPC_MESSAGE_TEXT_MAX];
        nghttp2_nv hdrs[] = { NV(":status", "200"), NV("content-type", "application/grpc"),
                              NV("grpc-status", ""), NV("grpc-message", "") };
        int r;

        grpc_count(g, st, status);
        st->answered = true;
        stream_complete(g, st);
        (void) snprintf(code, sizeof code, "%d", (int) status);
        hdrs[2].value = (uint8_t *) code;
        hdrs[2].valuelen = strlen(code);
        hdrs[3].valuelen = grpc_message_encode(reason, strlen(reason), msg, sizeof msg);
        hdrs[3].value = (uint8_t *) msg;
        r = nghttp2_submit_response(g->session, st->id, hdrs, 4, NULL);
        if (r != 0)
                log_debug("Connection %" PRIu64 ": stream %" PRIi32 ": response not submitted: %s", g->c->id,
                          st->id, nghttp2_strerror(r));
}

/* Makes room for a response message of len bytes (prefix included). */
static int stream_resp_reserve(GrpcStream *st, size_t len) {
        if (st->resp_size < len) {
                uint8_t *p = realloc(st->resp, len);
                if (!p)
                        return -ENOMEM;
                st->resp = p;
                st->resp_size = len;
        }
        st->resp_len = len;
        return 0;
}

/* ---- nghttp2's callbacks ---- */

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user_data) {
        GrpcConn *g = user_data;
        GrpcStream *st;

        if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
                return 0;
        if (g->n_streams >= GRPC_STREAMS_MAX || !(st = stream_new(g, frame->hd.stream_id))) {
                /* over the limit we announced (before the peer acknowledged it), or no memory */
                (void) nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                                 NGHTTP2_REFUSED_STREAM);
                return 0;
        }
        (void) nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, st);
        return 0;
}

static bool name_is(const uint8_t *name, size_t len, const char *want) {
        return len == strlen(want) && memcmp(name, want, len) == 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data) {
        GrpcStream *st;

        if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
                return 0;
        st = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        if (!st)
                return 0;
        if (name_is(name, namelen, ":path")) {
                if (name_is(value, valuelen, GRPC_PATH_RLS))
                        st->method = GRPC_METHOD_RLS;
                else if (name_is(value, valuelen, GRPC_PATH_HEALTH))
                        st->method = GRPC_METHOD_HEALTH;
        } else if (name_is(name, namelen, "content-type"))
                st->grpc_content_type = valuelen >= 16 && memcmp(value, "application/grpc", 16) == 0 &&
                                        (valuelen == 16 || value[16] == '+' || value[16] == ';');
        else if (name_is(name, namelen, "grpc-timeout")) {
                uint64_t usec;
                if (grpc_timeout_parse((const char *) value, valuelen, &usec) == 0)
                        st->deadline_usec = st->g->recv_usec + (usec ? usec : 1);
        }
        return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id, const uint8_t *data,
                         size_t len, void *user_data) {
        GrpcConn *g = user_data;
        GrpcStream *st = nghttp2_session_get_stream_user_data(session, stream_id);
        size_t need;

        if (!st || st->answered)
                return 0;
        need = st->body_len + len;
        if (need > GRPC_PREFIX_SIZE + GRPC_MESSAGE_MAX)
                st->too_big = true;
        else if (need > st->body_size) {
                size_t size = st->body_size ? st->body_size : 256;
                uint8_t *p;

                while (size < need)
                        size *= 2;
                if (size > GRPC_PREFIX_SIZE + GRPC_MESSAGE_MAX)
                        size = GRPC_PREFIX_SIZE + GRPC_MESSAGE_MAX;
                p = realloc(st->body, size);
                if (!p) {
                        grpc_respond_error(g, st, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
                        return 0;
                }
                st->body = p;
                st->body_size = size;
        }
        if (st->too_big) {
                /* answered now; once the answer is sent, the rest is refused (on_frame_send()) */
                grpc_respond_error(g, st, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                   "request message larger than 16 KiB");
                return 0;
        }
        memcpy(st->body + st->body_len, data, len);
        st->body_len += len;
        return 0;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data) {
        GrpcConn *g = user_data;
        GrpcStream *st;

        if ((frame->hd.type != NGHTTP2_DATA && frame->hd.type != NGHTTP2_HEADERS) ||
            !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
                return 0;
        st = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        if (!st || st->answered)
                return 0;
        /* the call is whole: it waits for a batch */
        stream_complete(g, st);
        st->next = NULL;
        st->on_ready = true;
        if (g->ready_tail)
                g->ready_tail->next = st;
        else
                g->ready_head = st;
        g->ready_tail = st;
        return 0;
}

static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *user_data) {
        GrpcStream *st;

        if (frame->hd.type != NGHTTP2_HEADERS || !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
                return 0;
        st = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        if (st && st->too_big)
                /* answered before the request ended: the peer may stop sending */
                (void) nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                                 NGHTTP2_NO_ERROR);
        return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                           void *user_data) {
        GrpcConn *g = user_data;
        GrpcStream *st = nghttp2_session_get_stream_user_data(session, stream_id);

        if (!st)
                return 0;
        (void) nghttp2_session_set_stream_user_data(session, stream_id, NULL);
        if (st->in_batch) {
                st->closed = true; /* released when its batch is done with it */
                return 0;
        }
        stream_release(g, st);
        return 0;
}

static int grpc_setup(void) {
        int r;

        if (grpc_callbacks)
                return 0;
        r = nghttp2_session_callbacks_new(&grpc_callbacks);
        if (r == 0)
                r = nghttp2_option_new(&grpc_option);
        if (r != 0)
                return -ENOMEM;
        nghttp2_session_callbacks_set_on_begin_headers_callback(grpc_callbacks, on_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback(grpc_callbacks, on_header);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(grpc_callbacks, on_data_chunk);
        nghttp2_session_callbacks_set_on_frame_recv_callback(grpc_callbacks, on_frame_recv);
        nghttp2_session_callbacks_set_on_stream_close_callback(grpc_callbacks, on_stream_close);
        nghttp2_session_callbacks_set_on_frame_send_callback(grpc_callbacks, on_frame_send);
        /* closed streams are not kept for priorities: gRPC uses none */
        nghttp2_option_set_no_closed_streams(grpc_option, 1);
        return 0;
}

int frontend_grpc_attach(Connection *c) {
        const nghttp2_settings_entry settings[] = {
                { NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, GRPC_STREAMS_MAX },
                { NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16 * 1024 },
        };
        GrpcConn *g;
        int r;

        r = grpc_setup();
        if (r < 0)
                return r;
        g = calloc(1, sizeof *g);
        if (!g)
                return -ENOMEM;
        g->c = c;
        rls_arena_init(&g->arena, GRPC_ARENA_MAX);
        g->mem = (nghttp2_mem){ .mem_user_data = &g->pool,
                                .malloc = pool_malloc,
                                .free = pool_free,
                                .calloc = pool_calloc,
                                .realloc = pool_realloc };
        if (nghttp2_session_server_new3(&g->session, grpc_callbacks, g, grpc_option, &g->mem) != 0) {
                free(g);
                return -ENOMEM;
        }
        if (nghttp2_submit_settings(g->session, NGHTTP2_FLAG_NONE, settings, 2) != 0) {
                nghttp2_session_del(g->session);
                pool_done(&g->pool);
                free(g);
                return -ENOMEM;
        }
        c->grpc = g;
        c->proto = CONNECTION_PROTO_GRPC;
        grpc_update_work(g);
        return 0;
}

void frontend_grpc_detach(Connection *c) {
        GrpcConn *g = c->grpc;

        if (!g)
                return;
        nghttp2_session_del(g->session);
        while (g->all) {
                GrpcStream *st = g->all;
                g->all = st->all_next;
                stream_free(st);
        }
        while (g->free_list) {
                GrpcStream *st = g->free_list;
                g->free_list = st->next;
                stream_free(st);
        }
        rls_arena_done(&g->arena);
        pool_done(&g->pool);
        free(g);
        c->grpc = NULL;
}

uint64_t frontend_grpc_incomplete_since(const Connection *c) {
        const GrpcConn *g = c->grpc;
        uint64_t since = 0;

        if (!g || g->n_incomplete == 0)
                return 0;
        for (const GrpcStream *st = g->all; st; st = st->all_next)
                if (st->incomplete && (since == 0 || st->begin_usec < since))
                        since = st->begin_usec;
        return since;
}

bool frontend_grpc_stop(Connection *c) {
        GrpcConn *g = c->grpc;

        if (!g || g->n_streams == 0)
                return false;
        (void) nghttp2_submit_goaway(g->session, NGHTTP2_FLAG_NONE,
                                     nghttp2_session_get_last_proc_stream_id(g->session), NGHTTP2_NO_ERROR,
                                     NULL, 0);
        grpc_update_work(g);
        return true;
}

void frontend_grpc_send(Connection *c, size_t output_limit) {
        GrpcConn *g = c->grpc;

        if (!g)
                return;
        while (connection_unsent(c) < output_limit) {
                const uint8_t *data;
                ssize_t n = nghttp2_session_mem_send(g->session, &data);
                char *p;

                if (n < 0) {
                        log_debug("Connection %" PRIu64 ": HTTP/2 session failed, closing: %s", c->id,
                                  nghttp2_strerror((int) n));
                        c->closing = true;
                        break;
                }
                if (n == 0)
                        break;
                /* under output_limit, a frame (<= 16 KiB + 9) fits the cap (server_accept()) */
                p = connection_reserve(c, (size_t) n);
                if (!p) {
                        log_warning("Connection %" PRIu64 ": out of memory for HTTP/2 frames, closing",
                                    c->id);
                        c->closing = true;
                        break;
                }
                memcpy(p, data, (size_t) n);
                c->out_len += (size_t) n;
        }
        if (connection_unsent(c) >= output_limit && nghttp2_session_want_write(g->session))
                c->blocked = true; /* the rest once the peer has read (server_flush() unblocks) */
        if (!nghttp2_session_want_read(g->session) && !nghttp2_session_want_write(g->session))
                c->closing = true; /* after a GOAWAY, or the peer's */
        grpc_update_work(g);
}

/* ---- the engine's side ---- */

static void grpc_health(Batch *b, GrpcConn *g, GrpcStream *st, const GrpcMessage *m) {
        const Metrics *metrics = batch_metrics(b);
        int r = rls_health_request(&g->arena, m->data, m->len);

        if (r == -ENOENT) {
                grpc_respond_error(g, st, GRPC_STATUS_NOT_FOUND, "unknown service");
                return;
        }
        if (r < 0) {
                grpc_respond_error(g, st, GRPC_STATUS_INVALID_ARGUMENT, "not a HealthCheckRequest");
                return;
        }
        if (stream_resp_reserve(st, GRPC_PREFIX_SIZE + RLS_HEALTH_RESPONSE_MAX) < 0) {
                grpc_respond_error(g, st, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
                return;
        }
        st->resp_len = GRPC_PREFIX_SIZE + rls_health_response(!metrics || metrics_serving(metrics),
                                                              st->resp + GRPC_PREFIX_SIZE);
        grpc_prefix_write(st->resp, (uint32_t) (st->resp_len - GRPC_PREFIX_SIZE));
        grpc_respond_ok(g, st);
}

/* batch_group_close()'s refill: slot's descriptor into the batch's request again. */
static void grpc_refill(Batch *b, BatchSlot *slot, void *userdata) {
        const RlsRequest *req = userdata;
        RlsHits hits;
        const char *why;

        (void) rls_descriptor_request(req, slot->n, batch_request(b), &hits, &why); /* passed once */
}

/* What --debug logs as a descriptor's request: its pairs as a line's ("domain=envoy k=v"), in
 * the arena; without --debug, nothing. */
static ProtoSlice grpc_debug_text(Batch *b, GrpcConn *g, const ProtoRequest *req) {
        size_t len = 0;
        char *p;

        if (!batch_settings(b)->debug)
                return (ProtoSlice){ "", 0 };
        for (size_t i = 0; i < req->n_pairs; i++)
                len += req->pairs[i].key.len + req->pairs[i].value.len + 2;
        p = rls_arena_alloc(&g->arena, len);
        if (!p)
                return (ProtoSlice){ "", 0 };
        len = 0;
        for (size_t i = 0; i < req->n_pairs; i++) {
                if (i > 0)
                        p[len++] = ' ';
                memcpy(p + len, req->pairs[i].key.ptr, req->pairs[i].key.len);
                len += req->pairs[i].key.len;
                p[len++] = '=';
                memcpy(p + len, req->pairs[i].value.ptr, req->pairs[i].value.len);
                len += req->pairs[i].value.len;
        }
        return (ProtoSlice){ p, len };
}

static const ProtoVerb rls_hit_verb[] = {
        [RLS_HIT_TAKE] = PROTO_VERB_TAKE,
        [RLS_HIT_PEEK] = PROTO_VERB_PEEK,
        [RLS_HIT_REFUND] = PROTO_VERB_REFUND,
};

/* Takes a ShouldRateLimit call into b: one slot per descriptor. Returns false if b has no room
 * for it (it waits for the next batch). */
static bool grpc_take_rls(Batch *b, GrpcConn *g, GrpcStream *st, const GrpcMessage *m) {
        Connection *c = g->c;
        RlsRequest *req;
        const char *why = NULL;
        size_t n;
        uint32_t group;
        BatchSlot *first = NULL;
        int r;

        r = rls_request_decode(&g->arena, m->data, m->len, &req);
        if (r < 0) {
                grpc_respond_error(
                        g, st, r == -ENOMEM ? GRPC_STATUS_RESOURCE_EXHAUSTED : GRPC_STATUS_INVALID_ARGUMENT,
                        r == -ENOMEM ? "out of memory" : "not a RateLimitRequest");
                return true;
        }
        r = rls_request_check(req, &why);
        if (r < 0) {
                grpc_respond_error(g, st, GRPC_STATUS_INVALID_ARGUMENT, why);
                return true;
        }
        n = rls_request_descriptors(req);
        st->n_desc = (uint32_t) n;
        st->st = rls_arena_alloc(&g->arena, n * sizeof *st->st);
        st->hits = rls_arena_alloc(&g->arena, n * sizeof *st->hits);
        if (!st->st || !st->hits) {
                grpc_respond_error(g, st, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
                return true;
        }
        for (size_t i = 0; r >= 0 && i < n; i++) {
                r = rls_descriptor_request(req, i, batch_request(b), &st->hits[i], &why);
                if (r >= 0 && st->hits[i].kind == RLS_HIT_REFUND && !c->admin &&
                    !batch_settings(b)->grpc_allow_refunds) {
                        grpc_respond_error(
                                g, st, GRPC_STATUS_PERMISSION_DENIED,
                                "is_negative_hits needs an admin listener or --grpc-allow-refunds");
                        return true;
                }
        }
        if (r < 0) {
                grpc_respond_error(g, st, GRPC_STATUS_INVALID_ARGUMENT, why);
                return true;
        }
        if (!batch_room_for(b, n))
                return false;

        group = n > 1 ? batch_group_id(b) : 0;
        st->in_batch = true;
        for (size_t i = 0; i < n; i++) {
                BatchSlot *slot;

                (void) rls_descriptor_request(req, i, batch_request(b), &st->hits[i], &why);
                slot = batch_slot_add(b, c, grpc_debug_text(b, g, batch_request(b)));
                slot->verb = rls_hit_verb[st->hits[i].kind];
                slot->count = st->hits[i].count;
                slot->group = group;
                slot->fe_data = st;
                slot->n = i;
                if (!first)
                        first = slot;
                batch_match(b, slot);
        }
        if (group)
                batch_group_close(b, first, n, grpc_refill, req);
        return true;
}

/* Takes the calls of c that arrived whole, up to BATCH_LINES_PER_CONNECTION, while b has room. */
static void grpc_take(Batch *b, Connection *c) {
        GrpcConn *g = c->grpc;
        unsigned taken = 0;
        uint64_t now;

        rls_arena_reset(&g->arena); /* the previous batch of c is answered */
        g->metrics = batch_metrics(b);
        if (connection_unsent(c) >= batch_settings(b)->output_limit) {
                c->blocked = true; /* a peer that does not read: nothing more until it does */
                return;
        }
        now = g->recv_usec = clock_usec(CLOCK_MONOTONIC); /* one reading for every call in them */
        if (c->in_len > c->in_pos) {
                ssize_t n = nghttp2_session_mem_recv(g->session, (const uint8_t *) c->in + c->in_pos,
                                                     c->in_len - c->in_pos);
                if (n < 0) {
                        log_debug("Connection %" PRIu64 ": HTTP/2 error, closing: %s", c->id,
                                  nghttp2_strerror((int) n));
                        (void) nghttp2_session_terminate_session(g->session, NGHTTP2_PROTOCOL_ERROR);
                }
                connection_consume_input(c, c->in_len - c->in_pos);
        }
        while (g->ready_head && taken < BATCH_LINES_PER_CONNECTION) {
                GrpcStream *st = g->ready_head;
                GrpcMessage m;
                int r;

                if (connection_unsent(c) >= batch_settings(b)->output_limit) {
                        c->blocked = true;
                        break;
                }
                if (st->method != GRPC_METHOD_UNKNOWN && !st->grpc_content_type) {
                        grpc_respond_error(g, st, GRPC_STATUS_INVALID_ARGUMENT,
                                           "content-type is not application/grpc");
                        goto next;
                }
                if (st->method == GRPC_METHOD_UNKNOWN) {
                        grpc_respond_error(g, st, GRPC_STATUS_UNIMPLEMENTED, "unknown method");
                        goto next;
                }
                if (st->deadline_usec && now >= st->deadline_usec) {
                        grpc_respond_error(g, st, GRPC_STATUS_DEADLINE_EXCEEDED, "deadline exceeded");
                        goto next;
                }
                r = grpc_unary_parse(st->body, st->body_len, GRPC_MESSAGE_MAX, &m);
                if (r < 0) {
                        grpc_respond_error(g, st,
                                           r == -EMSGSIZE ? GRPC_STATUS_RESOURCE_EXHAUSTED
                                                          : GRPC_STATUS_INTERNAL,
                                           r == -ENODATA ? "no whole request message"
                                                         : "not one length-prefixed message");
                        goto next;
                }
                if (m.compressed) {
                        grpc_respond_error(g, st, GRPC_STATUS_UNIMPLEMENTED,
                                           "compressed messages are not supported");
                        goto next;
                }
                if (st->method == GRPC_METHOD_HEALTH)
                        grpc_health(b, g, st, &m);
                else if (!grpc_take_rls(b, g, st, &m))
                        break; /* the next batch takes it */
                taken++;
        next:
                g->ready_head = st->next;
                if (!g->ready_head)
                        g->ready_tail = NULL;
                st->next = NULL;
                st->on_ready = false;
        }
        grpc_update_work(g);
}

/* Every descriptor of st is decided: the reply. */
static void grpc_finish(Batch *b, GrpcConn *g, GrpcStream *st) {
        RlsHeader headers[RLS_HEADERS_MAX];
        size_t nh = 0, len;

        st->in_batch = false;
        if (st->closed) {
                stream_release(g, st);
                return;
        }
        if (st->error_status) {
                grpc_respond_error(g, st, st->error_status, st->error_reason);
                return;
        }
        if (st->deadline_usec && clock_usec(CLOCK_MONOTONIC) >= st->deadline_usec) {
                grpc_respond_error(g, st, GRPC_STATUS_DEADLINE_EXCEEDED, "deadline exceeded");
                return;
        }
        (void) rls_statuses_settle(st->st, st->hits, st->n_desc, st->group_denied);
        if (batch_settings(b)->grpc_ratelimit_headers)
                nh = rls_ratelimit_headers(&g->arena, st->st, st->n_desc, headers);
        len = rls_response_encoded_max(st->st, st->n_desc, headers, nh);
        if (stream_resp_reserve(st, GRPC_PREFIX_SIZE + len) < 0) {
                grpc_respond_error(g, st, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
                return;
        }
        len = rls_response_encode(st->st, st->n_desc, headers, nh, st->resp + GRPC_PREFIX_SIZE);
        st->resp_len = GRPC_PREFIX_SIZE + len;
        grpc_prefix_write(st->resp, (uint32_t) len);
        grpc_respond_ok(g, st);
}

static void grpc_slot_done(Batch *b, const BatchSlot *slot) {
        GrpcStream *st = slot->fe_data;

        if (++st->n_done == st->n_desc)
                grpc_finish(b, st->g, st);
}

static size_t grpc_format_decision(Batch *b, const BatchSlot *slot, const BatchDecision *d, char *p) {
        GrpcStream *st = slot->fe_data;

        st->group_denied = st->group_denied || slot->group_denied;
        if (batch_settings(b)->grpc_backend_unavailable && !st->error_status &&
            batch_slot_fallback(b, slot)) {
                /* Envoy's failure_mode_deny decides rather than the rule's onBackendError */
                st->error_status = GRPC_STATUS_UNAVAILABLE;
                st->error_reason = "the store backend failed";
        }
        rls_status_of(d->rule, &d->res, &st->st[slot->n]);
        if (batch_settings(b)->debug && d->rule)
                batch_log_reply(slot, d->rule, d->res.allowed ? "OK\n" : "OVER_LIMIT\n",
                                d->res.allowed ? 3 : 11);
        grpc_slot_done(b, slot);
        return 0; /* the frames are written by frontend_grpc_send() */
}

static size_t grpc_format_error(Batch *b, const BatchSlot *slot, ProtoErrorCode code, const char *reason,
                                char *p) {
        GrpcStream *st = slot->fe_data;

        if (!st->error_status) {
                /* a store failure: Envoy's failure_mode_deny decides */
                st->error_status = code == PROTO_ERROR_FORBIDDEN ? GRPC_STATUS_PERMISSION_DENIED
                                                                 : GRPC_STATUS_UNAVAILABLE;
                st->error_reason = reason ? reason : "error";
        }
        grpc_slot_done(b, slot);
        return 0;
}

const Frontend frontend_grpc = {
        .name = "grpc",
        .take = grpc_take,
        .format_decision = grpc_format_decision,
        .format_error = grpc_format_error,
};
