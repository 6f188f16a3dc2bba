/* SPDX-License-Identifier: MIT */

#include "load-common.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "shared/clock.h" /* header only: these programs link nothing of divvyd */

atomic_bool bench_aborting = false;
_Atomic int bench_phase = PHASE_WARMUP;
uint64_t bench_start_ns;
uint64_t bench_measure_start_ns;
_Atomic uint64_t bench_stop_ns;

static unsigned hist_index(uint64_t v) {
        unsigned e;

        if (v < BENCH_HIST_SUB)
                return (unsigned) v;
        e = 63u - (unsigned) __builtin_clzll(v); /* >= BENCH_HIST_SUB_BITS */
        return (e - BENCH_HIST_SUB_BITS + 1u) * BENCH_HIST_SUB +
               (unsigned) ((v >> (e - BENCH_HIST_SUB_BITS)) & (BENCH_HIST_SUB - 1u));
}

/* The middle of bucket i, in ns. */
static double hist_value(unsigned i) {
        unsigned shift;
        uint64_t lo;

        if (i < BENCH_HIST_SUB)
                return (double) i;
        shift = i / BENCH_HIST_SUB - 1u;
        lo = (uint64_t) (BENCH_HIST_SUB + i % BENCH_HIST_SUB) << shift;
        return (double) lo + (double) ((1ULL << shift) - 1ULL) / 2.0;
}

void bench_latency_add(BenchLatency *l, uint64_t t, uint64_t ns) {
        l->measured++;
        if (t > l->last_ns)
                l->last_ns = t;
        l->hist[hist_index(ns)]++;
        if (ns > l->max_ns)
                l->max_ns = ns;
}

void bench_latency_merge(BenchLatency *into, const BenchLatency *from) {
        into->measured += from->measured;
        if (from->last_ns > into->last_ns)
                into->last_ns = from->last_ns;
        if (from->max_ns > into->max_ns)
                into->max_ns = from->max_ns;
        for (unsigned i = 0; i < BENCH_HIST_BUCKETS; i++)
                into->hist[i] += from->hist[i];
}

double bench_latency_percentile(const BenchLatency *l, double q) {
        uint64_t total = 0, target, seen = 0;

        for (unsigned i = 0; i < BENCH_HIST_BUCKETS; i++)
                total += l->hist[i];
        if (total == 0)
                return 0.0;
        target = (uint64_t) ceil(q * (double) total);
        if (target < 1)
                target = 1;
        for (unsigned i = 0; i < BENCH_HIST_BUCKETS; i++) {
                seen += l->hist[i];
                if (seen >= target) {
                        double v = hist_value(i);
                        return v > (double) l->max_ns ? (double) l->max_ns : v;
                }
        }
        return (double) l->max_ns;
}

void bench_summarize(BenchSummary *s, const BenchLatency *l, uint64_t start_ns) {
        s->secs = l->last_ns > start_ns ? (double) (l->last_ns - start_ns) / 1e9 : 0.0;
        s->rps = s->secs > 0.0 ? (double) l->measured / s->secs : 0.0;
        s->p50 = bench_latency_percentile(l, 0.50) / 1e3;
        s->p90 = bench_latency_percentile(l, 0.90) / 1e3;
        s->p99 = bench_latency_percentile(l, 0.99) / 1e3;
        s->p999 = bench_latency_percentile(l, 0.999) / 1e3;
        s->max_us = (double) l->max_ns / 1e3;
}

void bench_print_latency(const BenchSummary *s) {
        printf("  latency:    p50 %.1f us, p90 %.1f us, p99 %.1f us, p99.9 %.1f us, max %.1f us\n", s->p50,
               s->p90, s->p99, s->p999, s->max_us);
}

void bench_print_result_latency(const BenchSummary *s) {
        printf(" p50_us=%.1f p90_us=%.1f p99_us=%.1f p999_us=%.1f max_us=%.1f", s->p50, s->p90, s->p99,
               s->p999, s->max_us);
}

int bench_parse_count(const char *s, bool any_case, uint64_t *ret) {
        char *end;
        unsigned long long v;
        uint64_t mult = 1;

        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno != 0 || end == s || s[0] == '-')
                return -EINVAL;
        if (*end == 'k' || (any_case && *end == 'K'))
                mult = 1000, end++;
        else if (*end == 'M' || (any_case && *end == 'm'))
                mult = 1000000, end++;
        if (*end != 0 || v > UINT64_MAX / mult)
                return -EINVAL;
        *ret = v * mult;
        return 0;
}

int bench_parse_uint(const char *s, bool any_case, unsigned lo, unsigned hi, unsigned *ret) {
        uint64_t v;

        if (bench_parse_count(s, any_case, &v) < 0 || v < lo || v > hi)
                return -EINVAL;
        *ret = (unsigned) v;
        return 0;
}

int bench_parse_seconds(const char *s, double max, uint64_t *ret) {
        char *end;
        double v;

        errno = 0;
        v = strtod(s, &end);
        if (errno != 0 || end == s || *end != 0 || !(v >= 0.0) || v > max)
                return -EINVAL;
        *ret = (uint64_t) (v * (double) NSEC_PER_SEC);
        return 0;
}

int bench_option(BenchOptions *o, int c, const char *arg) {
        int r = 0;

        switch (c) {
        case 'a':
                o->address = arg;
                break;
        case 'c':
                r = bench_parse_uint(arg, o->any_case, 1, BENCH_CONNECTIONS_MAX, &o->connections);
                break;
        case 'n':
                r = bench_parse_count(arg, o->any_case, &o->requests);
                if (r >= 0 && o->requests == 0)
                        r = -EINVAL;
                break;
        case 'd':
                r = bench_parse_seconds(arg, o->secs_max, &o->duration_ns);
                if (r >= 0 && o->duration_ns == 0)
                        r = -EINVAL;
                o->have_d = true;
                break;
        case 'w':
                r = bench_parse_seconds(arg, o->secs_max, &o->warmup_ns);
                o->have_w = true;
                break;
        case 't':
                r = bench_parse_uint(arg, o->any_case, 1, BENCH_THREADS_MAX, &o->threads);
                break;
        case BENCH_OPT_LABEL:
                o->label = arg;
                break;
        case 'q':
                o->quiet = true;
                break;
        default:
                return 1;
        }
        return r < 0 ? -EINVAL : 0;
}

int bench_options_times(BenchOptions *o, const char *prog) {
        if (o->requests > 0 && o->have_d) {
                fprintf(stderr, "%s: -n and -d exclude each other\n", prog);
                return -EINVAL;
        }
        if (o->requests == 0 && !o->have_d)
                o->duration_ns = 10 * NSEC_PER_SEC;
        if (o->requests == 0 && !o->have_w)
                o->warmup_ns = NSEC_PER_SEC;
        return 0;
}

int bench_parse_address(const char *a, BenchAddress *ret) {
        const char *colon;
        size_t hl;

        if (strncmp(a, "unix:", 5) == 0) {
                if (strlen(a + 5) == 0 || strlen(a + 5) >= sizeof(ret->path))
                        return -EINVAL;
                strcpy(ret->path, a + 5);
                ret->is_unix = true;
                return 0;
        }
        if (strncmp(a, "tcp:", 4) == 0)
                a += 4;
        colon = strrchr(a, ':');
        if (!colon || strlen(colon + 1) == 0 || strlen(colon + 1) >= sizeof(ret->port))
                return -EINVAL;
        hl = (size_t) (colon - a);
        if (hl >= 2 && a[0] == '[' && a[hl - 1] == ']') {
                a++;
                hl -= 2;
        }
        if (hl == 0 || hl >= sizeof(ret->host))
                return -EINVAL;
        memcpy(ret->host, a, hl);
        ret->host[hl] = 0;
        strcpy(ret->port, colon + 1);
        return 0;
}

int bench_connect(const BenchAddress *a) {
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai;
        int fd, r, one = 1;

        if (a->is_unix) {
                struct sockaddr_un sa = { .sun_family = AF_UNIX };

                strcpy(sa.sun_path, a->path);
                fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (fd < 0)
                        return -errno;
                if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                        r = -errno;
                        close(fd);
                        return r;
                }
                return fd;
        }
        if (getaddrinfo(a->host, a->port, &hints, &ai) != 0)
                return -EADDRNOTAVAIL;
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                r = -errno;
                freeaddrinfo(ai);
                return r;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
                r = -errno;
                freeaddrinfo(ai);
                close(fd);
                return r;
        }
        freeaddrinfo(ai);
        (void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return fd;
}

int bench_set_nonblock(int fd) {
        if (fd < 0)
                return fd;
        if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

uint64_t bench_share_start(uint64_t total, unsigned n, unsigned i) {
        return total * i / n;
}

uint64_t bench_share(uint64_t total, unsigned n, unsigned i) {
        return total * (i + 1) / n - total * i / n;
}

uint64_t bench_quota(uint64_t requests, unsigned connections, unsigned i) {
        if (requests == 0)
                return UINT64_MAX;
        return requests / connections + (i < requests % connections);
}

int bench_epoll_add(int epfd, int fd, void *ptr) {
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = ptr };

        return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

int bench_epoll_set_out(int epfd, int fd, void *ptr, bool *out_now, bool want_out) {
        struct epoll_event ev = { .events = EPOLLIN | (want_out ? EPOLLOUT : 0u), .data.ptr = ptr };

        if (*out_now == want_out)
                return 0;
        *out_now = want_out;
        return epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) < 0 ? -errno : 0;
}

unsigned bench_run(const char *prog, void *workers, unsigned n, size_t size, size_t thread_offset,
                   void *(*fn)(void *), uint64_t warmup_ns, uint64_t duration_ns, bool due_times) {
        char *base = workers;
        unsigned started = 0;

        bench_start_ns = clock_nsec(CLOCK_MONOTONIC);
        if (warmup_ns == 0) {
                bench_measure_start_ns = bench_start_ns;
                atomic_store(&bench_phase, PHASE_MEASURE);
        } else
                bench_measure_start_ns = bench_start_ns + warmup_ns; /* the open loop's due times */
        for (; started < n; started++) {
                char *w = base + size * started;
                int r = pthread_create((pthread_t *) (void *) (w + thread_offset), NULL, fn, w);

                if (r != 0) {
                        fprintf(stderr, "%s: pthread_create: %s\n", prog, strerror(r));
                        atomic_store(&bench_aborting, true);
                        break;
                }
        }
        if (warmup_ns > 0 && !atomic_load(&bench_aborting)) {
                bench_sleep_ns(warmup_ns);
                if (!due_times)
                        bench_measure_start_ns = clock_nsec(CLOCK_MONOTONIC);
                atomic_store(&bench_phase, PHASE_MEASURE);
        }
        if (duration_ns > 0 && !atomic_load(&bench_aborting)) {
                bench_sleep_ns(duration_ns);
                atomic_store(&bench_stop_ns, clock_nsec(CLOCK_MONOTONIC));
                atomic_store(&bench_phase, PHASE_STOP);
        }
        for (unsigned i = 0; i < started; i++)
                pthread_join(*(pthread_t *) (void *) (base + size * i + thread_offset), NULL);
        return started;
}

void bench_sleep_ns(uint64_t ns) {
        struct timespec ts = { .tv_sec = (time_t) (ns / NSEC_PER_SEC),
                               .tv_nsec = (long) (ns % NSEC_PER_SEC) };

        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static void on_signal(int sig) {
        (void) sig;
        atomic_store(&bench_aborting, true);
}

void bench_signals(void) {
        signal(SIGPIPE, SIG_IGN);
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
}
