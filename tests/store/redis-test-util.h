/* SPDX-License-Identifier: MIT */
#pragma once

/* For the Redis store's tests: a redis-server of the test's own (a free loopback port and a Unix
 * socket in a temporary directory, killed by pid and by PR_SET_PDEATHSIG if the test dies), and a
 * tiny poll() loop implementing RedisIo. Header-only: each test program includes it once. */

#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "shared/clock.h"
#include "store/redis-conn.h"

#define REDIS_SERVER_BIN "redis-server"

/* Exits 77 (automake's SKIP) if redis-server is not installed. */
static inline void redis_test_require_server(void) {
        if (system("command -v " REDIS_SERVER_BIN " >/dev/null 2>&1") != 0) {
                fprintf(stderr, "redis-server is not installed: skipping the Redis store tests\n");
                exit(77);
        }
}

typedef struct TestRedis {
        pid_t pid;
        int port;
        char dir[64];
        char sock[128];
        char password[64]; /* "" : none */
} TestRedis;

static inline int test_free_port(void) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof(sa);
        int fd = socket(AF_INET, SOCK_STREAM, 0), port;

        if (fd < 0 || bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0 ||
            getsockname(fd, (struct sockaddr *) &sa, &len) < 0)
                abort();
        port = ntohs(sa.sin_port);
        close(fd);
        return port;
}

/* A blocking hiredis client to the test's server (TCP), authenticated; NULL if it does not answer. */
static inline redisContext *test_redis_client(const TestRedis *t) {
        struct timeval tv = { 1, 0 };
        redisContext *c = redisConnectWithTimeout("127.0.0.1", t->port, tv);
        redisReply *r;

        if (!c || c->err) {
                if (c)
                        redisFree(c);
                return NULL;
        }
        if (t->password[0]) {
                r = redisCommand(c, "AUTH %s", t->password);
                if (r)
                        freeReplyObject(r);
        }
        return c;
}

static bool test_redis_cluster; /* the next start is a cluster node (no slots yet) */

/* Starts (or restarts, same port and socket) the server; waits until it answers PING (5 s at most). */
static inline void test_redis_start(TestRedis *t) {
        char port[16], nodes[160];
        const char *argv[32];
        int n = 0;

        if (t->dir[0] == '\0') {
                snprintf(t->dir, sizeof(t->dir), "/tmp/divvyd-redis-XXXXXX");
                if (!mkdtemp(t->dir))
                        abort();
                snprintf(t->sock, sizeof(t->sock), "%s/redis.sock", t->dir);
                t->port = test_free_port();
                /* a cluster node also listens on port + 10000 (its bus) */
                for (int i = 0; i < 100 && test_redis_cluster && t->port > 55000; i++)
                        t->port = test_free_port();
        }
        snprintf(port, sizeof(port), "%d", t->port);
        argv[n++] = REDIS_SERVER_BIN;
        argv[n++] = "--port";
        argv[n++] = port;
        argv[n++] = "--bind";
        argv[n++] = "127.0.0.1";
        argv[n++] = "--save";
        argv[n++] = "";
        argv[n++] = "--appendonly";
        argv[n++] = "no";
        argv[n++] = "--dir";
        argv[n++] = t->dir;
        argv[n++] = "--unixsocket";
        argv[n++] = t->sock;
        argv[n++] = "--unixsocketperm";
        argv[n++] = "700";
        argv[n++] = "--loglevel";
        argv[n++] = "warning";
        if (t->password[0]) {
                argv[n++] = "--requirepass";
                argv[n++] = t->password;
        }
        if (test_redis_cluster) {
                snprintf(nodes, sizeof(nodes), "%s/nodes.conf", t->dir);
                argv[n++] = "--cluster-enabled";
                argv[n++] = "yes";
                argv[n++] = "--cluster-config-file";
                argv[n++] = nodes;
        }
        argv[n] = NULL;
        t->pid = fork();
        if (t->pid < 0)
                abort();
        if (t->pid == 0) {
                int null = open("/dev/null", O_WRONLY);

                (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (null >= 0)
                        (void) dup2(null, STDOUT_FILENO);
                execvp(argv[0], (char *const *) argv);
                _exit(127);
        }
        for (int i = 0; i < 500; i++) {
                redisContext *c = test_redis_client(t);
                redisReply *r = c ? redisCommand(c, "PING") : NULL;
                bool ok = r && (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR);

                if (r)
                        freeReplyObject(r);
                if (c)
                        redisFree(c);
                if (ok)
                        return;
                usleep(10000);
        }
        fprintf(stderr, "redis-server did not start on port %d\n", t->port);
        abort();
}

static inline void test_redis_kill(TestRedis *t) {
        if (t->pid > 0) {
                (void) kill(t->pid, SIGKILL);
                (void) waitpid(t->pid, NULL, 0);
                t->pid = 0;
        }
        (void) unlink(t->sock);
}

static inline void test_redis_stop(TestRedis *t) {
        char path[160];

        test_redis_kill(t);
        snprintf(path, sizeof(path), "%s/dump.rdb", t->dir);
        (void) unlink(path);
        snprintf(path, sizeof(path), "%s/nodes.conf", t->dir);
        (void) unlink(path);
        (void) rmdir(t->dir);
}

/* A blocking command on a fresh client; the reply or NULL. */
static inline redisReply *test_redis_command(const TestRedis *t, const char *fmt, ...) {
        redisContext *c = test_redis_client(t);
        redisReply *r = NULL;
        va_list ap;

        if (!c)
                return NULL;
        va_start(ap, fmt);
        r = redisvCommand(c, fmt, ap);
        va_end(ap);
        redisFree(c);
        return r;
}

/* ---- the poll() loop: RedisIo for the tests ---- */

#define TEST_LOOP_FDS 32

typedef struct TestLoop {
        struct pollfd fds[TEST_LOOP_FDS];
        size_t n;
        uint64_t timer; /* CLOCK_MONOTONIC µs; 0: none */
        unsigned watch_calls, timer_calls;
        /* what to call */
        void *target;
        int (*on_io)(void *target, int fd, uint32_t revents);
        int (*on_timer)(void *target, uint64_t now);
} TestLoop;

static inline int test_loop_watch(void *userdata, int fd, uint32_t events) {
        TestLoop *l = userdata;
        size_t i;

        l->watch_calls++;
        for (i = 0; i < l->n; i++)
                if (l->fds[i].fd == fd)
                        break;
        if (events == 0) {
                if (i < l->n)
                        l->fds[i] = l->fds[--l->n];
                return 0;
        }
        if (i == l->n) {
                if (l->n == TEST_LOOP_FDS)
                        return -ENOSPC;
                l->n++;
        }
        l->fds[i] = (struct pollfd){ .fd = fd,
                                     .events = (short) (((events & EPOLLIN) ? POLLIN : 0) |
                                                        ((events & EPOLLOUT) ? POLLOUT : 0)) };
        return 0;
}

static inline int test_loop_timer(void *userdata, uint64_t at) {
        TestLoop *l = userdata;

        l->timer_calls++;
        l->timer = at;
        return 0;
}

static inline RedisIo test_loop_io(TestLoop *l) {
        return (RedisIo){ .userdata = l, .watch = test_loop_watch, .timer = test_loop_timer };
}

/* One poll() of at most max_usec; dispatches what is ready, then the timer if it passed. */
static inline void test_loop_once(TestLoop *l, uint64_t max_usec) {
        struct pollfd fds[TEST_LOOP_FDS];
        size_t n = l->n;
        uint64_t now = clock_usec(CLOCK_MONOTONIC), wait = max_usec;
        int k;

        if (l->timer != 0)
                wait = l->timer <= now ? 0 : (l->timer - now < wait ? l->timer - now : wait);
        memcpy(fds, l->fds, n * sizeof(fds[0]));
        k = poll(fds, n, (int) ((wait + 999) / 1000));
        for (size_t i = 0; k > 0 && i < n; i++) {
                uint32_t ev = 0;

                if (fds[i].revents == 0)
                        continue;
                ev |= (fds[i].revents & POLLIN) ? EPOLLIN : 0;
                ev |= (fds[i].revents & POLLOUT) ? EPOLLOUT : 0;
                ev |= (fds[i].revents & POLLERR) ? EPOLLERR : 0;
                ev |= (fds[i].revents & POLLHUP) ? EPOLLHUP : 0;
                /* the fd may have been unwatched by an earlier callback of this round */
                for (size_t j = 0; j < l->n; j++)
                        if (l->fds[j].fd == fds[i].fd) {
                                (void) l->on_io(l->target, fds[i].fd, ev);
                                break;
                        }
        }
        now = clock_usec(CLOCK_MONOTONIC);
        if (l->timer != 0 && l->timer <= now) {
                l->timer = 0;
                (void) l->on_timer(l->target, now);
        }
}

/* Runs the loop until *flag is true or max_usec passed; returns *flag. */
static inline bool test_loop_until(TestLoop *l, const bool *flag, uint64_t max_usec) {
        uint64_t end = clock_usec(CLOCK_MONOTONIC) + max_usec;

        while (!*flag) {
                uint64_t now = clock_usec(CLOCK_MONOTONIC);

                if (now >= end)
                        break;
                test_loop_once(l, end - now);
        }
        return *flag;
}
