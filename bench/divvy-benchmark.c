/* SPDX-License-Identifier: MIT */

/*
 * divvy-benchmark: load generator for the divvy protocol, in the spirit of
 * redis-benchmark, with a Redis baseline mode so that the machine's own ceiling is
 * measured by the same client in the same run.
 *
 * Each thread runs an epoll loop over its share of the connections. A connection
 * sends a batch of P requests with one write(), waits for its P replies, then sends
 * the next batch (redis-benchmark's meaning of pipelining). The latency of a request
 * is from the write of its batch to the read that completed its reply. Every reply
 * is verified; ERR, malformed replies and lost connections make the exit status 1.
 *
 * In RESP (--redis) the replies are read as nested values (arrays, maps, bulk strings,
 * integers, booleans, nulls): --resp3 sends HELLO 3 on each connection before the load, and
 * --multi wraps each batch of P requests in MULTI ... EXEC (one +OK, P +QUEUED, then EXEC's
 * array of P replies, each counted as a request's).
 *
 * Not library code: this is a program, it prints.
 */

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "load-common.h"
#include "shared/clock.h" /* header only: this program links nothing of divvyd */

#define NSEC_PER_MSEC 1000000ULL

#define PIPELINE_MAX    4096                 /* requests per batch: bounds the output buffer */
#define TEMPLATE_MAX    1024                 /* bytes: longest rendered request or key */
#define REQUEST_MAX     (TEMPLATE_MAX + 512) /* bytes: one request with its RESP framing */
#define REDIS_WORDS_MAX 32                   /* words of a whole Redis command: bounds its framing */
#define REDIS_ARRAY_MAX 64                   /* elements of an array or map reply (a script's) */
#define REDIS_DEPTH_MAX 4    /* nesting of a reply: EXEC's array of maps holds arrays at most */
#define MULTI_OVERHEAD  32   /* bytes: "*1\r\n$5\r\nMULTI\r\n" and "*1\r\n$4\r\nEXEC\r\n" around a batch */
#define HELLO_MAX       4096 /* bytes: the longest reply to HELLO 3 we read */
#define HELLO_MSEC      5000 /* ms: how long we wait for it */
#define IN_SIZE         (64u * 1024u) /* bytes: input buffer per connection, many replies a read */
#define REPLY_LINE_MAX  512           /* bytes: a reply line longer than this is malformed */
#define STALL_NSEC                                                                                          \
        (10ULL * NSEC_PER_SEC) /* 10 s without any reply while requests are outstanding: the                \
                                * server is stuck; give up instead of hanging */
#define EPOLL_TIMEOUT_MSEC 100 /* ms: how often a thread looks at the phase when idle */
#define EVENTS_MAX         256

#define DEFAULT_TEMPLATE       "HIT method=GET path=/bench ip={actor}"
#define DEFAULT_REDIS_TEMPLATE "key{actor}"
#define PLACEHOLDER            "{actor}"

typedef struct Options {
        BenchOptions run; /* -a, -c, -n, -d, -w, -t, --label, -q */
        unsigned pipeline;
        uint64_t actors;    /* -k */
        bool sequential;    /* actors in order, each connection its stride */
        bool redis;         /* INCR in RESP instead of divvy HITs */
        bool redis_command; /* --redis with a template of several words: the whole command */
        char redis_sep;     /* what separates its words: ' ', or a tab if the template has one */
        bool resp3;         /* --resp3: HELLO 3 on connecting (implies --redis) */
        bool multi;         /* --multi: each batch in MULTI ... EXEC (implies --redis) */
        bool ipv4;          /* {actor} as a dotted quad instead of a number */
        const char *template;
        uint64_t seed;
} Options;

typedef struct Stats {
        uint64_t ok_true;   /* OK true (redis: any reply but an error, or a #f in it) */
        uint64_t ok_false;  /* OK false (redis: a reply holding RESP3's false, #f) */
        uint64_t err;       /* ERR replies (redis: error replies) */
        uint64_t malformed; /* replies that are neither */
        uint64_t conn_errors;
        BenchLatency latency; /* replies to requests sent in the measuring phase */
} Stats;

typedef struct Conn {
        int fd;
        unsigned index; /* 0 .. connections-1 */
        bool open;
        bool want_out;
        uint64_t quota;      /* measured requests still to send (-n); UINT64_MAX with -d */
        uint64_t seq;        /* requests sent, for --sequential */
        unsigned pending;    /* replies outstanding for the current batch */
        bool batch_measured; /* the current batch was sent while measuring */
        uint64_t batch_ns;   /* when the current batch was written */
        char *out;
        size_t out_len, out_pos;
        char in[IN_SIZE];
        size_t in_len;
        /* --redis: the reply being read, a value nested depth deep; left[i]: elements still to
         * read at level i */
        unsigned depth;
        unsigned left[REDIS_DEPTH_MAX];
        bool in_bulk;     /* the next line is a bulk string's data */
        bool unit_false;  /* the request's reply holds a #f */
        bool unit_err;    /* the request's reply holds an error */
        unsigned acks;    /* --multi: +OK and +QUEUED still expected before EXEC's array */
        unsigned batch_n; /* --multi: requests in the current transaction */
} Conn;

typedef struct Worker {
        pthread_t thread;
        unsigned id;
        int epfd;
        Conn *conns;
        unsigned n_conns;
        uint64_t rng;
        Stats stats;
        bool first_err_printed;
} Worker;

static Options opt = {
        .run = { .connections = 16, .any_case = true, .secs_max = 1e6 },
        .pipeline = 1,
        .actors = 10000,
        .seed = 1,
};

/* The template split at each "{actor}". */
static const char *tpl_parts[TEMPLATE_MAX];
static size_t tpl_lens[TEMPLATE_MAX];
static size_t tpl_n;

static uint64_t xorshift(uint64_t *x) {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        return *x;
}

/* Writes the decimal digits of v at p; returns their number. */
static size_t put_u64(char *p, uint64_t v) {
        char tmp[20];
        size_t n = 0;

        do {
                tmp[n++] = (char) ('0' + v % 10);
                v /= 10;
        } while (v > 0);
        for (size_t i = 0; i < n; i++)
                p[i] = tmp[n - 1 - i];
        return n;
}

/* Writes actor as a dotted quad at p (at most 15 bytes); returns its length. The index is
 * scrambled by a bijection of 32 bits (multiplication by an odd constant, then an xor-shift),
 * so the addresses spread over the whole space and have the lengths of real clients' ones
 * (7 to 15 characters, 13.3 on average) while staying distinct: actor < 2^32. */
static size_t put_ipv4(char *p, uint64_t actor) {
        uint32_t x = (uint32_t) actor * 0x9E3779B1u;
        size_t n = 0;

        x ^= x >> 16;
        for (int shift = 24; shift >= 0; shift -= 8) {
                n += put_u64(p + n, (x >> shift) & 0xFFu);
                if (shift > 0)
                        p[n++] = '.';
        }
        return n;
}

/* Renders the template for actor into p (TEMPLATE_MAX bytes: split_template() checks that the
 * longest rendering fits); returns its length. */
static size_t render(char *p, uint64_t actor) {
        size_t n = 0;

        for (size_t i = 0; i < tpl_n; i++) {
                if (i > 0)
                        n += opt.ipv4 ? put_ipv4(p + n, actor) : put_u64(p + n, actor);
                memcpy(p + n, tpl_parts[i], tpl_lens[i]);
                n += tpl_lens[i];
        }
        return n;
}

/* Appends line (k < TEMPLATE_MAX bytes, at most REDIS_WORDS_MAX words separated by single
 * opt.redis_sep: main() checks) to p as a RESP array of bulk strings; returns its length,
 * framing included (< REQUEST_MAX). */
static size_t put_resp_command(char *p, const char *line, size_t k) {
        size_t n = 0, words = 1;

        for (size_t i = 0; i < k; i++)
                words += line[i] == opt.redis_sep;
        p[n++] = '*';
        n += put_u64(p + n, words);
        memcpy(p + n, "\r\n", 2);
        n += 2;
        for (size_t i = 0; i < k;) {
                const char *sp = memchr(line + i, opt.redis_sep, k - i);
                size_t w = sp ? (size_t) (sp - (line + i)) : k - i;

                p[n++] = '$';
                n += put_u64(p + n, w);
                memcpy(p + n, "\r\n", 2);
                n += 2;
                memcpy(p + n, line + i, w);
                n += w;
                memcpy(p + n, "\r\n", 2);
                n += 2;
                i += w + 1;
        }
        return n;
}

/* Appends one request for actor to p; returns its length (<= REQUEST_MAX). */
static size_t put_request(char *p, uint64_t actor) {
        char key[TEMPLATE_MAX];
        size_t n, k;

        if (!opt.redis) {
                n = render(p, actor);
                p[n++] = '\n';
                return n;
        }
        k = render(key, actor);
        if (opt.redis_command)
                return put_resp_command(p, key, k);
        memcpy(p, "*2\r\n$4\r\nINCR\r\n$", 15);
        n = 15;
        n += put_u64(p + n, k);
        memcpy(p + n, "\r\n", 2);
        n += 2;
        memcpy(p + n, key, k);
        n += k;
        memcpy(p + n, "\r\n", 2);
        return n + 2;
}

static int conn_set_out(Worker *w, Conn *c, bool want_out) {
        return bench_epoll_set_out(w->epfd, c->fd, c, &c->want_out, want_out);
}

static void conn_close(Worker *w, Conn *c) {
        if (!c->open)
                return;
        epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->open = false;
        c->pending = 0;
        c->depth = 0;
        c->in_bulk = c->unit_false = c->unit_err = false;
        c->acks = 0;
}

static void conn_fail(Worker *w, Conn *c, const char *what, int error) {
        w->stats.conn_errors++;
        if (!w->first_err_printed) {
                w->first_err_printed = true;
                fprintf(stderr, "divvy-benchmark: connection %u: %s%s%s\n", c->index, what,
                        error ? ": " : "", error ? strerror(error) : "");
        }
        conn_close(w, c);
}

/* Sends what is left of the output. Returns 0 when all is sent, 1 if the socket is full. */
static int conn_flush(Worker *w, Conn *c) {
        while (c->out_pos < c->out_len) {
                ssize_t k = send(c->fd, c->out + c->out_pos, c->out_len - c->out_pos, MSG_NOSIGNAL);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return conn_set_out(w, c, true) < 0 ? -errno : 1;
                        return -errno;
                }
                c->out_pos += (size_t) k;
        }
        return conn_set_out(w, c, false);
}

/* Starts the next batch, or closes the connection when it is done. */
static void conn_next_batch(Worker *w, Conn *c) {
        Phase p = atomic_load_explicit(&bench_phase, memory_order_relaxed);
        bool measured = p == PHASE_MEASURE;
        unsigned batch = opt.pipeline;
        int r;

        if (p == PHASE_STOP || atomic_load_explicit(&bench_aborting, memory_order_relaxed) ||
            (measured && c->quota == 0)) {
                conn_close(w, c);
                return;
        }
        if (measured && c->quota < batch)
                batch = (unsigned) c->quota;

        c->out_len = c->out_pos = 0;
        if (opt.multi) {
                memcpy(c->out, "*1\r\n$5\r\nMULTI\r\n", 15);
                c->out_len = 15;
                c->acks = batch + 1;
                c->batch_n = batch;
        }
        for (unsigned i = 0; i < batch; i++) {
                uint64_t actor;

                if (opt.sequential)
                        actor = (c->index + (uint64_t) opt.run.connections * c->seq) % opt.actors;
                else
                        actor = xorshift(&w->rng) % opt.actors;
                c->seq++;
                c->out_len += put_request(c->out + c->out_len, actor);
        }
        if (opt.multi) {
                memcpy(c->out + c->out_len, "*1\r\n$4\r\nEXEC\r\n", 14);
                c->out_len += 14;
        }
        if (measured && c->quota != UINT64_MAX)
                c->quota -= batch;
        c->pending = batch;
        c->batch_measured = measured;
        c->batch_ns = clock_nsec(CLOCK_MONOTONIC);
        r = conn_flush(w, c);
        if (r < 0)
                conn_fail(w, c, "send failed", -r);
}

static void count_reply(Worker *w, Conn *c, uint64_t t) {
        if (c->batch_measured) {
                uint64_t lat = t > c->batch_ns ? t - c->batch_ns : 0;

                bench_latency_add(&w->stats.latency, t, lat);
        }
        c->pending--;
}

static bool is_uint(const char *p, size_t n, bool allow_minus) {
        if (n > 0 && allow_minus && p[0] == '-') {
                p++;
                n--;
        }
        if (n == 0 || n > 20)
                return false;
        for (size_t i = 0; i < n; i++)
                if (p[i] < '0' || p[i] > '9')
                        return false;
        return true;
}

/* "OK true|false <credit> <reset>" (HIT), or a version 2 decision "OK allowed=true|false ..."
 * (TAKE, PEEK, ...): 1 true, 0 false, -1 malformed. */
static int parse_ok(const char *l, size_t n) {
        const char *sp;
        int allowed;
        size_t skip;

        if (n > 16 && memcmp(l, "OK allowed=true ", 16) == 0)
                return 1;
        if (n > 17 && memcmp(l, "OK allowed=false ", 17) == 0)
                return 0;
        if (n > 8 && memcmp(l, "OK true ", 8) == 0) {
                allowed = 1;
                skip = 8;
        } else if (n > 9 && memcmp(l, "OK false ", 9) == 0) {
                allowed = 0;
                skip = 9;
        } else
                return -1;
        l += skip;
        n -= skip;
        sp = memchr(l, ' ', n);
        if (!sp || !is_uint(l, (size_t) (sp - l), false))
                return -1;
        n -= (size_t) (sp - l) + 1;
        return is_uint(sp + 1, n, true) ? allowed : -1;
}

static void report_reply(Worker *w, Conn *c, const char *what, const char *l, size_t n) {
        if (w->first_err_printed)
                return;
        w->first_err_printed = true;
        fprintf(stderr, "divvy-benchmark: connection %u: %s: \"%.*s\"\n", c->index, what,
                (int) (n > 200 ? 200 : n), l);
}

/* A request's reply is complete (its value, or with --multi its element of EXEC's array). */
static void finish_unit(Worker *w, Conn *c, uint64_t t) {
        count_reply(w, c, t);
        if (c->unit_err)
                w->stats.err++;
        else if (c->unit_false)
                w->stats.ok_false++;
        else
                w->stats.ok_true++;
        c->unit_false = c->unit_err = false;
}

/* --multi: a top-level line before EXEC's array, +OK to MULTI then +QUEUED for each request.
 * Returns false if it is anything else. */
static bool handle_multi_ack(Worker *w, Conn *c, const char *l, size_t n) {
        bool want_ok = c->acks == c->batch_n + 1;

        if (c->acks > 0 && ((want_ok && n == 3 && memcmp(l, "+OK", 3) == 0) ||
                            (!want_ok && n == 7 && memcmp(l, "+QUEUED", 7) == 0))) {
                c->acks--;
                return true;
        }
        if (l[0] == '-')
                w->stats.err++;
        else
                w->stats.malformed++;
        report_reply(w, c,
                     c->acks == 0 ? "expected EXEC's array"
                     : want_ok    ? "expected +OK"
                                  : "expected +QUEUED",
                     l, n);
        return false;
}

/* Handles one line of a RESP reply (its "\r" included) as part of a nested value: arrays and maps
 * open a level, bulk strings take two lines, the rest are one line. The value a request is answered
 * with (at the top level; with --multi, an element of EXEC's array) is counted when it completes.
 * Returns false when the connection must be dropped. */
static bool handle_resp_line(Worker *w, Conn *c, const char *l, size_t n, uint64_t t) {
        unsigned unit_depth = opt.multi ? 1 : 0;
        unsigned long k;

        if (n < 2 || l[n - 1] != '\r') {
                w->stats.malformed++;
                report_reply(w, c, "malformed reply line", l, n);
                return false;
        }
        n--;
        if (c->in_bulk)
                c->in_bulk = false; /* a bulk string's data: its value is complete */
        else if (opt.multi && c->depth == 0 && l[0] != '*')
                return handle_multi_ack(w, c, l, n);
        else
                switch (l[0]) {
                case '*':
                case '%':
                        if (!is_uint(l + 1, n - 1, false) ||
                            (k = strtoul(l + 1, NULL, 10)) > REDIS_ARRAY_MAX ||
                            (c->depth == 0 && opt.multi && (c->acks != 0 || k != c->batch_n)) ||
                            (k > 0 && c->depth >= REDIS_DEPTH_MAX)) {
                                w->stats.malformed++;
                                report_reply(w, c,
                                             opt.multi && c->depth == 0
                                                     ? "EXEC's array does not match the MULTI"
                                                     : "malformed or too deep aggregate",
                                             l, n);
                                return false;
                        }
                        if (l[0] == '%')
                                k *= 2;
                        if (k > 0) {
                                c->left[c->depth++] = (unsigned) k;
                                return true;
                        }
                        break; /* an empty one is a whole value */
                case '$':
                        if (n == 3 && memcmp(l, "$-1", 3) == 0)
                                break;
                        if (!is_uint(l + 1, n - 1, false)) {
                                w->stats.malformed++;
                                report_reply(w, c, "malformed bulk string", l, n);
                                return false;
                        }
                        c->in_bulk = true;
                        return true;
                case ':':
                        if (!is_uint(l + 1, n - 1, true)) {
                                w->stats.malformed++;
                                report_reply(w, c, "malformed integer", l, n);
                                return false;
                        }
                        break;
                case '#':
                        if (n != 2 || (l[1] != 't' && l[1] != 'f')) {
                                w->stats.malformed++;
                                report_reply(w, c, "malformed boolean", l, n);
                                return false;
                        }
                        c->unit_false |= l[1] == 'f';
                        break;
                case '_':
                case '+':
                        break;
                case '-':
                        if (!c->unit_err)
                                report_reply(w, c, "error reply", l, n);
                        c->unit_err = true;
                        break;
                default:
                        w->stats.malformed++;
                        report_reply(w, c, "malformed reply", l, n);
                        return false;
                }
        /* a value is complete at level c->depth: count it if it is a request's reply, then close
         * the aggregates it completes */
        for (;;) {
                if (c->depth == unit_depth)
                        finish_unit(w, c, t);
                if (c->depth == 0)
                        return true;
                if (--c->left[c->depth - 1] > 0)
                        return true;
                c->depth--;
                if (c->depth == 0 && opt.multi)
                        return true; /* EXEC's array: its elements were counted */
        }
}

/* Handles one complete reply line (without "\n"; with its "\r" for RESP). Returns false
 * when the connection must be dropped. */
static bool handle_line(Worker *w, Conn *c, const char *l, size_t n, uint64_t t) {
        if (c->pending == 0) {
                w->stats.malformed++;
                report_reply(w, c, "reply without a request", l, n);
                return false;
        }
        if (opt.redis)
                return handle_resp_line(w, c, l, n, t);
        count_reply(w, c, t);
        switch (parse_ok(l, n)) {
        case 1:
                w->stats.ok_true++;
                return true;
        case 0:
                w->stats.ok_false++;
                return true;
        default:
                break;
        }
        if (n >= 3 && memcmp(l, "ERR", 3) == 0 && (n == 3 || l[3] == ' ')) {
                w->stats.err++;
                report_reply(w, c, "ERR reply", l, n);
                return false; /* divvyd closes after an ERR */
        }
        w->stats.malformed++;
        report_reply(w, c, "malformed reply", l, n);
        return false;
}

static void conn_readable(Worker *w, Conn *c, uint64_t t) {
        for (;;) {
                ssize_t k = recv(c->fd, c->in + c->in_len, IN_SIZE - c->in_len, 0);
                size_t pos = 0;

                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return;
                        conn_fail(w, c, "receive failed", errno);
                        return;
                }
                if (k == 0) {
                        conn_fail(w, c, "server closed the connection", 0);
                        return;
                }
                c->in_len += (size_t) k;
                for (;;) {
                        const char *nl = memchr(c->in + pos, '\n', c->in_len - pos);
                        if (!nl)
                                break;
                        if (!handle_line(w, c, c->in + pos, (size_t) (nl - (c->in + pos)), t)) {
                                conn_close(w, c);
                                return;
                        }
                        pos = (size_t) (nl - c->in) + 1;
                        if (c->pending == 0) {
                                if (pos != c->in_len) {
                                        w->stats.malformed++;
                                        report_reply(w, c, "more replies than requests", c->in + pos,
                                                     c->in_len - pos);
                                        conn_close(w, c);
                                        return;
                                }
                                c->in_len = 0;
                                conn_next_batch(w, c);
                                return; /* the replies cannot be there yet */
                        }
                }
                if (c->in_len - pos > REPLY_LINE_MAX) {
                        w->stats.malformed++;
                        report_reply(w, c, "reply line too long", c->in + pos, c->in_len - pos);
                        conn_close(w, c);
                        return;
                }
                memmove(c->in, c->in + pos, c->in_len - pos);
                c->in_len -= pos;
                if ((size_t) k < IN_SIZE / 2)
                        return; /* most likely drained: let epoll tell */
        }
}

static void *worker_run(void *userdata) {
        Worker *w = userdata;
        struct epoll_event evs[EVENTS_MAX];
        uint64_t last_progress = clock_nsec(CLOCK_MONOTONIC);
        unsigned open;

        for (unsigned i = 0; i < w->n_conns; i++)
                conn_next_batch(w, &w->conns[i]);

        for (;;) {
                uint64_t before = w->stats.ok_true + w->stats.ok_false + w->stats.err + w->stats.malformed;
                uint64_t t;
                int n;

                open = 0;
                for (unsigned i = 0; i < w->n_conns; i++)
                        open += w->conns[i].open;
                if (open == 0)
                        break;

                n = epoll_wait(w->epfd, evs, EVENTS_MAX, EPOLL_TIMEOUT_MSEC);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        fprintf(stderr, "divvy-benchmark: epoll_wait: %m\n");
                        atomic_store(&bench_aborting, true);
                        break;
                }
                t = clock_nsec(CLOCK_MONOTONIC);
                for (int i = 0; i < n; i++) {
                        Conn *c = evs[i].data.ptr;

                        if (!c->open)
                                continue;
                        if (evs[i].events & EPOLLOUT) {
                                int r = conn_flush(w, c);
                                if (r < 0) {
                                        conn_fail(w, c, "send failed", -r);
                                        continue;
                                }
                        }
                        if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                                conn_readable(w, c, t);
                }
                if (w->stats.ok_true + w->stats.ok_false + w->stats.err + w->stats.malformed != before)
                        last_progress = t;
                else if (t - last_progress > STALL_NSEC || atomic_load(&bench_aborting)) {
                        for (unsigned i = 0; i < w->n_conns; i++)
                                if (w->conns[i].open)
                                        conn_fail(w, &w->conns[i],
                                                  atomic_load(&bench_aborting)
                                                          ? "aborted"
                                                          : "no reply for 10 s, giving up",
                                                  0);
                }
        }
        return NULL;
}

/* The end of the RESP value at b[pos..len): its offset past the last "\r\n", 0 if incomplete,
 * SIZE_MAX if malformed or nested deeper than depth. For HELLO's reply, read before the load. */
static size_t resp_value_end(const char *b, size_t len, size_t pos, unsigned depth) {
        const char *nl = memchr(b + pos, '\n', len - pos);
        size_t end;
        unsigned long k;

        if (pos >= len || !nl)
                return 0;
        end = (size_t) (nl - b) + 1;
        switch (b[pos]) {
        case '*':
        case '%':
                k = strtoul(b + pos + 1, NULL, 10);
                if (depth == 0 || k > REDIS_ARRAY_MAX)
                        return SIZE_MAX;
                for (unsigned long i = 0; i < (b[pos] == '%' ? 2 * k : k); i++) {
                        end = resp_value_end(b, len, end, depth - 1);
                        if (end == 0 || end == SIZE_MAX)
                                return end;
                }
                return end;
        case '$':
                if (b[pos + 1] == '-')
                        return end;
                k = strtoul(b + pos + 1, NULL, 10);
                return end + k + 2 <= len ? end + k + 2 : (k > HELLO_MAX ? SIZE_MAX : 0);
        default:
                return end;
        }
}

/* --resp3: HELLO 3 on the blocking socket fd, its reply read whole. Returns 0, or -EPROTO with
 * the reply printed if it is not RESP3's map (an error: the server speaks no RESP3). */
static int hello3(int fd) {
        static const char req[] = "*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n";
        char buf[HELLO_MAX];
        size_t len = 0, end = 0;

        if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t) (sizeof req - 1))
                return -EIO;
        while (end == 0) {
                struct pollfd pfd = { .fd = fd, .events = POLLIN };
                ssize_t k;

                if (len == sizeof buf || poll(&pfd, 1, HELLO_MSEC) <= 0)
                        return -ETIMEDOUT;
                k = recv(fd, buf + len, sizeof buf - len, 0);
                if (k <= 0)
                        return k == 0 ? -ECONNRESET : -errno;
                len += (size_t) k;
                end = resp_value_end(buf, len, 0, REDIS_DEPTH_MAX);
        }
        if (end != len || buf[0] != '%') {
                size_t shown = 0;

                while (shown < len && shown < 200 && buf[shown] != '\r' && buf[shown] != '\n')
                        shown++;
                fprintf(stderr, "divvy-benchmark: HELLO 3 answered \"%.*s\"\n", (int) shown, buf);
                return -EPROTO;
        }
        return 0;
}

static int connect_one(void) {
        int fd = bench_connect(&opt.run.addr);

        if (fd >= 0 && opt.resp3) {
                int r = hello3(fd);
                if (r < 0) {
                        close(fd);
                        return r;
                }
        }
        /* non-blocking only after connect() (and HELLO 3): blocking keeps this simple */
        return bench_set_nonblock(fd);
}

static void help(void) {
        printf("Usage: divvy-benchmark [OPTIONS] [ADDRESS]\n"
               "Sends divvy HIT requests (or Redis INCRs with --redis) and reports throughput and "
               "latency.\n\n"
               "  -a, --address=ADDR     tcp:HOST:PORT, HOST:PORT or unix:PATH (default "
               "tcp:127.0.0.1:8321,\n"
               "                         with --redis tcp:127.0.0.1:6379)\n"
               "  -c, --connections=N    parallel connections (default 16)\n"
               "  -P, --pipeline=N       requests per batch: write N, wait for N replies (default 1)\n"
               "  -n, --requests=N       measure N requests (suffixes k, M)\n"
               "  -d, --duration=SEC     measure for SEC seconds (default 10 when -n is not given)\n"
               "  -w, --warmup=SEC       send unmeasured load first (default 1 with -d, 0 with -n)\n"
               "  -k, --actors=N         distinct actors (default 10000; suffixes k, M)\n"
               "      --sequential       actors in order instead of at random (one hit each with -n = -k)\n"
               "  -r, --request=TEMPLATE request line; " PLACEHOLDER " becomes the actor number\n"
               "                         (default '" DEFAULT_TEMPLATE "';\n"
               "                         with --redis, the key: '" DEFAULT_REDIS_TEMPLATE "', or a whole\n"
               "                         command of several words, e.g. 'SETEX key{actor} 60 1';\n"
               "                         separated by tabs if it has one, so a word may\n"
               "                         hold spaces: EVALSHA of a script with such keys)\n"
               "      --ipv4             " PLACEHOLDER " as a dotted quad derived from the actor number\n"
               "                         (distinct for each, spread like clients' addresses)\n"
               "      --redis            baseline: INCR <key> in the Redis protocol\n"
               "      --resp3            --redis, after HELLO 3 on each connection (RESP3 replies)\n"
               "      --multi            --redis, each batch of -P requests in MULTI ... EXEC (at most\n"
               "                         64); EXEC's array must hold one reply per request\n"
               "  -t, --threads=N        client threads (default: half the CPUs, at least 1)\n"
               "      --label=TEXT       name of this run in the RESULT line (default divvy or redis)\n"
               "      --seed=N           random seed (default 1)\n"
               "  -q, --quiet            print only the RESULT line\n"
               "  -h, --help\n\n"
               "Exit status: 0 if every reply was OK true/OK false (redis: any reply but an error;\n"
               "one holding RESP3's false, #f, counts as OK false), 1 on any ERR,\n"
               "malformed reply or lost connection, 2 on a usage error.\n");
}

static int split_template(const char *t) {
        const char *p = t;

        if (strlen(t) == 0 || strlen(t) > TEMPLATE_MAX - 1 || strchr(t, '\n'))
                return -EINVAL;
        tpl_n = 0;
        for (;;) {
                const char *h = strstr(p, PLACEHOLDER);
                if (tpl_n >= 16)
                        return -E2BIG; /* 16 parts bound the rendered length */
                tpl_parts[tpl_n] = p;
                tpl_lens[tpl_n] = h ? (size_t) (h - p) : strlen(p);
                tpl_n++;
                if (!h) /* each placeholder may become 20 digits */
                        return strlen(t) + (tpl_n - 1) * (20 - strlen(PLACEHOLDER)) < TEMPLATE_MAX ? 0
                                                                                                   : -E2BIG;
                p = h + strlen(PLACEHOLDER);
        }
}

static int parse_argv(int argc, char **argv) {
        enum { ARG_SEQUENTIAL = BENCH_OPT_LABEL + 1, ARG_REDIS, ARG_SEED, ARG_IPV4, ARG_RESP3, ARG_MULTI };
        static const struct option options[] = {
                BENCH_LONG_OPTIONS,
                { "pipeline", required_argument, NULL, 'P' },
                { "actors", required_argument, NULL, 'k' },
                { "sequential", no_argument, NULL, ARG_SEQUENTIAL },
                { "request", required_argument, NULL, 'r' },
                { "redis", no_argument, NULL, ARG_REDIS },
                { "resp3", no_argument, NULL, ARG_RESP3 },
                { "multi", no_argument, NULL, ARG_MULTI },
                { "ipv4", no_argument, NULL, ARG_IPV4 },
                { "seed", required_argument, NULL, ARG_SEED },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        long ncpu;
        int c;

        while ((c = getopt_long(argc, argv, "a:c:P:n:d:w:k:r:t:qh", options, NULL)) >= 0) {
                int r = bench_option(&opt.run, c, optarg);

                if (r == 1) {
                        r = 0;
                        switch (c) {
                        case 'P':
                                r = bench_parse_uint(optarg, true, 1, PIPELINE_MAX, &opt.pipeline);
                                break;
                        case 'k':
                                r = bench_parse_count(optarg, true, &opt.actors);
                                if (r >= 0 && opt.actors == 0)
                                        r = -EINVAL;
                                break;
                        case ARG_SEQUENTIAL:
                                opt.sequential = true;
                                break;
                        case 'r':
                                opt.template = optarg;
                                break;
                        case ARG_REDIS:
                                opt.redis = true;
                                break;
                        case ARG_RESP3:
                                opt.resp3 = opt.redis = true;
                                break;
                        case ARG_MULTI:
                                opt.multi = opt.redis = true;
                                break;
                        case ARG_IPV4:
                                opt.ipv4 = true;
                                break;
                        case ARG_SEED:
                                r = bench_parse_count(optarg, true, &opt.seed);
                                break;
                        case 'h':
                                help();
                                exit(EXIT_SUCCESS);
                        default:
                                return -EINVAL;
                        }
                }
                if (r < 0) {
                        fprintf(stderr, "divvy-benchmark: invalid value for -%c: '%s'\n",
                                c < 0x100 ? c : '-', optarg);
                        return -EINVAL;
                }
        }
        if (optind < argc) {
                if (opt.run.address || optind + 1 < argc) {
                        fprintf(stderr, "divvy-benchmark: one address only\n");
                        return -EINVAL;
                }
                opt.run.address = argv[optind];
        }
        if (!opt.run.address)
                opt.run.address = opt.redis ? "tcp:127.0.0.1:6379" : "tcp:127.0.0.1:8321";
        if (bench_parse_address(opt.run.address, &opt.run.addr) < 0) {
                fprintf(stderr, "divvy-benchmark: invalid address '%s'\n", opt.run.address);
                return -EINVAL;
        }
        if (bench_options_times(&opt.run, "divvy-benchmark") < 0)
                return -EINVAL;
        if (!opt.template)
                opt.template = opt.redis ? DEFAULT_REDIS_TEMPLATE : DEFAULT_TEMPLATE;
        if (split_template(opt.template) < 0) {
                fprintf(stderr,
                        "divvy-benchmark: request template must be 1..%d bytes once rendered, one line, "
                        "at most 15 " PLACEHOLDER "\n",
                        TEMPLATE_MAX - 1);
                return -EINVAL;
        }
        /* with --redis, a template of several words is the whole command (e.g. SETEX key ttl 1);
         * its words are separated by tabs if it has one (then a word may hold spaces) */
        opt.redis_sep = strchr(opt.template, '\t') ? '\t' : ' ';
        opt.redis_command = opt.redis && strchr(opt.template, opt.redis_sep);
        if (opt.redis_command) {
                const char twice[] = { opt.redis_sep, opt.redis_sep, '\0' };
                size_t words = 1;

                for (const char *q = opt.template; *q; q++)
                        words += *q == opt.redis_sep;
                if (opt.template[0] == opt.redis_sep || strstr(opt.template, twice) ||
                    opt.template[strlen(opt.template) - 1] == opt.redis_sep || words > REDIS_WORDS_MAX) {
                        fprintf(stderr,
                                "divvy-benchmark: a Redis command is 2..%d words separated by "
                                "single spaces (or single tabs)\n",
                                REDIS_WORDS_MAX);
                        return -EINVAL;
                }
        }
        if (opt.multi && opt.pipeline > REDIS_ARRAY_MAX) {
                fprintf(stderr, "divvy-benchmark: --multi allows at most %d requests per transaction (-P)\n",
                        REDIS_ARRAY_MAX);
                return -EINVAL;
        }
        if (opt.ipv4 && opt.actors > UINT64_C(1) << 32) {
                fprintf(stderr, "divvy-benchmark: --ipv4 allows at most 2^32 actors\n");
                return -EINVAL;
        }
        if (!opt.run.label)
                opt.run.label = opt.redis ? "redis" : "divvy";
        if (opt.run.threads == 0) {
                ncpu = sysconf(_SC_NPROCESSORS_ONLN);
                opt.run.threads = ncpu >= 4 ? (unsigned) (ncpu / 2) : 1;
        }
        if (opt.run.threads > opt.run.connections)
                opt.run.threads = opt.run.connections;
        if (opt.run.requests > 0 && opt.run.requests < opt.run.connections)
                opt.run.connections = (unsigned) opt.run.requests; /* no idle connections */
        if (opt.run.threads > opt.run.connections)
                opt.run.threads = opt.run.connections;
        return 0;
}

static void merge(Stats *into, const Stats *s) {
        into->ok_true += s->ok_true;
        into->ok_false += s->ok_false;
        into->err += s->err;
        into->malformed += s->malformed;
        into->conn_errors += s->conn_errors;
        bench_latency_merge(&into->latency, &s->latency);
}

int main(int argc, char **argv) {
        static Stats total;
        Worker *workers = NULL;
        Conn *conns = NULL;
        char *outbufs = NULL;
        BenchSummary sum;
        int ret = EXIT_FAILURE;

        if (parse_argv(argc, argv) < 0)
                return 2;

        bench_signals();

        workers = calloc(opt.run.threads, sizeof(Worker));
        conns = calloc(opt.run.connections, sizeof(Conn));
        outbufs = malloc((size_t) opt.run.connections * (opt.pipeline * REQUEST_MAX + MULTI_OVERHEAD));
        if (!workers || !conns || !outbufs) {
                fprintf(stderr, "divvy-benchmark: out of memory\n");
                goto finish;
        }
        for (unsigned i = 0; i < opt.run.threads; i++) {
                workers[i].id = i;
                workers[i].epfd = -1;
                workers[i].rng = opt.seed * 0x9E3779B97F4A7C15ULL + i + 1;
                workers[i].conns = conns + bench_share_start(opt.run.connections, opt.run.threads, i);
                workers[i].n_conns = (unsigned) bench_share(opt.run.connections, opt.run.threads, i);
        }
        for (unsigned i = 0; i < opt.run.connections; i++) {
                Conn *c = &conns[i];
                int fd = connect_one();

                if (fd < 0) {
                        fprintf(stderr, "divvy-benchmark: cannot connect to %s: %s\n", opt.run.address,
                                strerror(-fd));
                        goto finish;
                }
                c->fd = fd;
                c->index = i;
                c->open = true;
                c->out = outbufs + (size_t) i * (opt.pipeline * REQUEST_MAX + MULTI_OVERHEAD);
                c->quota = bench_quota(opt.run.requests, opt.run.connections, i);
        }
        for (unsigned i = 0; i < opt.run.threads; i++) {
                Worker *w = &workers[i];

                w->epfd = epoll_create1(EPOLL_CLOEXEC);
                if (w->epfd < 0) {
                        fprintf(stderr, "divvy-benchmark: epoll_create1: %m\n");
                        goto finish;
                }
                for (unsigned j = 0; j < w->n_conns; j++) {
                        int r = bench_epoll_add(w->epfd, w->conns[j].fd, &w->conns[j]);
                        if (r < 0) {
                                fprintf(stderr, "divvy-benchmark: epoll_ctl: %s\n", strerror(-r));
                                goto finish;
                        }
                }
        }

        if (bench_run("divvy-benchmark", workers, opt.run.threads, sizeof(Worker), offsetof(Worker, thread),
                      worker_run, opt.run.warmup_ns, opt.run.duration_ns, false) < opt.run.threads)
                goto finish;

        for (unsigned i = 0; i < opt.run.threads; i++)
                merge(&total, &workers[i].stats);

        bench_summarize(&sum, &total.latency, bench_measure_start_ns);

        if (!opt.run.quiet) {
                printf("%s at %s: %u connections, pipeline %u, %u thread%s, %" PRIu64 " actors%s\n",
                       opt.run.label, opt.run.address, opt.run.connections, opt.pipeline, opt.run.threads,
                       opt.run.threads == 1 ? "" : "s", opt.actors,
                       opt.sequential ? " in order" : " at random");
                printf("  throughput: %" PRIu64 " requests in %.3f s = %.0f requests/s\n",
                       total.latency.measured, sum.secs, sum.rps);
                printf("  replies:    %s %" PRIu64 ", OK false %" PRIu64 ", ERR %" PRIu64
                       ", malformed %" PRIu64 ", lost connections %" PRIu64 "\n",
                       opt.redis ? "integer" : "OK true", total.ok_true, total.ok_false, total.err,
                       total.malformed, total.conn_errors);
                bench_print_latency(&sum);
        }
        printf("RESULT label=%s target=%s address=%s connections=%u pipeline=%u threads=%u actors=%" PRIu64
               " requests=%" PRIu64 " seconds=%.3f rps=%.0f ok_true=%" PRIu64 " ok_false=%" PRIu64
               " err=%" PRIu64 " malformed=%" PRIu64 " lost=%" PRIu64,
               opt.run.label, opt.redis ? "redis" : "divvy", opt.run.address, opt.run.connections,
               opt.pipeline, opt.run.threads, opt.actors, total.latency.measured, sum.secs, sum.rps,
               total.ok_true, total.ok_false, total.err, total.malformed, total.conn_errors);
        bench_print_result_latency(&sum);
        printf(" resp=%d multi=%d\n", !opt.redis ? 0 : opt.resp3 ? 3 : 2, opt.multi);
        fflush(stdout);

        if (total.err == 0 && total.malformed == 0 && total.conn_errors == 0 && total.latency.measured > 0 &&
            !atomic_load(&bench_aborting))
                ret = EXIT_SUCCESS;
finish:
        if (conns)
                for (unsigned i = 0; i < opt.run.connections; i++)
                        if (conns[i].open)
                                close(conns[i].fd);
        if (workers)
                for (unsigned i = 0; i < opt.run.threads; i++)
                        if (workers[i].epfd >= 0)
                                close(workers[i].epfd);
        free(outbufs);
        free(conns);
        free(workers);
        return ret;
}
