/* SPDX-License-Identifier: MIT */
/* connection.c: the input buffer and its framing, the output buffer, and the socket calls,
 * over a socketpair; and connections as the server walks them into a batch. */

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/config.h"
#include "daemon/batch.h"
#include "daemon/connection.h"
#include "daemon/server.h"
#include "check-run.h"

static Connection *conn;
static int peer;

static void setup(void) {
        int sv[2];

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
        ck_assert_int_eq(connection_new(sv[0], false, 64 * 1024, &conn), 0);
        peer = sv[1];
}

static void teardown(void) {
        conn = connection_free(conn);
        if (peer >= 0)
                close(peer);
}

static void peer_send(const char *s) {
        ck_assert_int_eq(send(peer, s, strlen(s), MSG_NOSIGNAL), (ssize_t) strlen(s));
}

START_TEST (test_new_and_free) {
        ck_assert_ptr_nonnull(conn->in);
        ck_assert_uint_eq(conn->out_size, CONNECTION_OUT_INITIAL);
        ck_assert_uint_eq(connection_unsent(conn), 0);
        ck_assert(!connection_has_request(conn));
        ck_assert_ptr_null(connection_free(NULL));
}
END_TEST

START_TEST (test_read_and_frame) {
        ProtoSlice line;
        size_t consumed;

        ck_assert_int_eq(connection_read(conn), 0); /* nothing yet: EAGAIN */
        peer_send("HIT a=1\r\nHIT b");
        ck_assert_int_eq(connection_read(conn), 14);
        ck_assert(!conn->eof);
        ck_assert(connection_has_request(conn));
        ck_assert_int_eq(connection_next_line(conn, &line, &consumed), 1);
        ck_assert_uint_eq(line.len, 7);
        ck_assert(memcmp(line.ptr, "HIT a=1", 7) == 0);
        ck_assert_uint_eq(consumed, 9);

        /* The framing is kept until the line is consumed: asked again, the same answer
         * (from the cache, as the input it was framed from is not looked at again). */
        conn->in[0] = '\n';
        ck_assert_int_eq(connection_next_line(conn, &line, &consumed), 1);
        ck_assert_uint_eq(line.len, 7);
        conn->in[0] = 'H';

        connection_consume_input(conn, consumed);
        ck_assert(!connection_has_request(conn)); /* "HIT b": incomplete */
        ck_assert_int_eq(connection_next_line(conn, &line, &consumed), 0);

        /* More input completes it: framed again. */
        peer_send("=2\n");
        ck_assert_int_eq(connection_read(conn), 3);
        ck_assert(connection_has_request(conn));
        ck_assert_int_eq(connection_next_line(conn, &line, &consumed), 1);
        ck_assert_uint_eq(line.len, 7);
        ck_assert(memcmp(line.ptr, "HIT b=2", 7) == 0);

        /* Compacting keeps the framing (it is relative to in_pos). */
        connection_compact_input(conn);
        ck_assert_uint_eq(conn->in_pos, 0);
        ck_assert_uint_eq(conn->in_len, 8);
        ck_assert_int_eq(connection_next_line(conn, &line, &consumed), 1);
        ck_assert_ptr_eq(line.ptr, conn->in);
        ck_assert(memcmp(line.ptr, "HIT b=2", 7) == 0);

        connection_drop_input(conn);
        ck_assert_uint_eq(conn->in_len, 0);
        ck_assert(!connection_has_request(conn));
}
END_TEST

START_TEST (test_eof_and_unterminated_line) {
        ProtoSlice line;
        size_t consumed;

        peer_send("HIT a=1");
        ck_assert_int_eq(shutdown(peer, SHUT_WR), 0);
        conn->peer_shut = true; /* as after EPOLLRDHUP: read on to the EOF */
        ck_assert_int_eq(connection_read(conn), 7);
        ck_assert(conn->eof);
        ck_assert_int_eq(connection_next_line(conn, &line, &consumed), 0);
        ck_assert(connection_has_request(conn)); /* the last line, answered without its "\n" */
}
END_TEST

START_TEST (test_line_too_long) {
        static char big[PROTO_LINE_MAX + 16];
        ProtoSlice line;
        size_t consumed;

        memset(big, 'x', sizeof big - 1);
        peer_send(big);
        ck_assert_int_gt(connection_read(conn), PROTO_LINE_MAX);
        ck_assert_int_eq(connection_next_line(conn, &line, &consumed), -EMSGSIZE);
        ck_assert(connection_has_request(conn)); /* to be refused */
}
END_TEST

/* A line of exactly PROTO_LINE_MAX bytes is a request; one byte more is refused, with "\n",
 * with "\r\n", and before its end has arrived. */
static int frame_line_of(size_t len, const char *end, size_t *ret_len) {
        static char big[PROTO_LINE_MAX + 8];
        ProtoSlice line = {};
        size_t consumed = 0;
        int r;

        ck_assert_uint_le(len + strlen(end), sizeof big - 1);
        memset(big, 'x', len);
        strcpy(big + len, end);
        peer_send(big);
        ck_assert_int_eq(connection_read(conn), (ssize_t) (len + strlen(end)));
        r = connection_next_line(conn, &line, &consumed);
        if (r == 1) {
                ck_assert_uint_eq(consumed, len + strlen(end));
                *ret_len = line.len;
        }
        connection_drop_input(conn);
        return r;
}

START_TEST (test_line_length_boundary) {
        size_t len = 0;

        ck_assert_int_eq(frame_line_of(PROTO_LINE_MAX, "\n", &len), 1);
        ck_assert_uint_eq(len, PROTO_LINE_MAX);
        ck_assert_int_eq(frame_line_of(PROTO_LINE_MAX, "\r\n", &len), 1);
        ck_assert_uint_eq(len, PROTO_LINE_MAX);
        ck_assert_int_eq(frame_line_of(PROTO_LINE_MAX + 1, "\n", &len), -EMSGSIZE);
        ck_assert_int_eq(frame_line_of(PROTO_LINE_MAX + 1, "\r\n", &len), -EMSGSIZE);
        /* Not yet ended: exactly the maximum may still end; one more cannot. */
        ck_assert_int_eq(frame_line_of(PROTO_LINE_MAX, "", &len), 0);
        ck_assert_int_eq(frame_line_of(PROTO_LINE_MAX, "\r", &len), 0);
        ck_assert_int_eq(frame_line_of(PROTO_LINE_MAX + 1, "", &len), -EMSGSIZE);
        ck_assert_int_eq(frame_line_of(PROTO_LINE_MAX + 1, "\r", &len), -EMSGSIZE);
}
END_TEST

START_TEST (test_input_buffer_full) {
        static char chunk[4096];
        ssize_t total = 0, n;

        memset(chunk, 'y', sizeof chunk);
        for (unsigned i = 0; i < CONNECTION_IN_SIZE / sizeof chunk + 2; i++)
                (void) send(peer, chunk, sizeof chunk, MSG_NOSIGNAL | MSG_DONTWAIT);
        while ((n = connection_read(conn)) > 0)
                total += n;
        ck_assert_int_eq(n, 0);
        ck_assert_uint_eq(conn->in_len, CONNECTION_IN_SIZE); /* never beyond the buffer */
        ck_assert_int_eq(total, (ssize_t) CONNECTION_IN_SIZE);
}
END_TEST

START_TEST (test_reserve_and_flush) {
        char buf[64];
        char *p = connection_reserve(conn, 10);

        ck_assert_ptr_eq(p, conn->out);
        memcpy(p, "OK true 1 60\n", 13);
        conn->out_len += 13;
        ck_assert_uint_eq(connection_unsent(conn), 13);
        ck_assert_int_eq(connection_flush(conn), 0);
        ck_assert_uint_eq(connection_unsent(conn), 0);
        ck_assert_uint_eq(conn->out_len, 0);
        ck_assert_int_eq(recv(peer, buf, sizeof buf, 0), 13);
        ck_assert(memcmp(buf, "OK true 1 60\n", 13) == 0);

        /* Growth by doubling up to out_max, and no further. */
        ck_assert_ptr_nonnull(connection_reserve(conn, CONNECTION_OUT_INITIAL + 1));
        ck_assert_uint_eq(conn->out_size, 2 * CONNECTION_OUT_INITIAL);
        ck_assert_ptr_null(connection_reserve(conn, 64 * 1024 + 1));
        ck_assert_ptr_nonnull(connection_reserve(conn, 64 * 1024));
        ck_assert_uint_eq(conn->out_size, 64 * 1024);
}
END_TEST

/* Fills n bytes of output with 'o'. */
static void out_fill(Connection *c, size_t n) {
        char *p = connection_reserve(c, n);

        ck_assert_ptr_nonnull(p);
        memset(p, 'o', n);
        c->out_len += n;
}

/* Reads everything the connection sent, returns the byte count. */
static size_t peer_drain(void) {
        static char buf[65536];
        size_t total = 0;
        ssize_t n;

        while ((n = recv(peer, buf, sizeof buf, MSG_DONTWAIT)) > 0)
                total += (size_t) n;
        return total;
}

START_TEST (test_output_given_back) {
        /* A backlog beyond CONNECTION_OUT_KEEP is given back once sent: the buffer is the
         * small one again. Up to it, the buffer is kept (no mapping per batch). */
        out_fill(conn, 64 * 1024);
        ck_assert_uint_eq(conn->out_size, 64 * 1024);
        ck_assert(conn->out_mapped);
        ck_assert_int_eq(connection_flush(conn), 0);
        ck_assert_uint_eq(peer_drain(), 64 * 1024);
        ck_assert(!conn->out_mapped);
        ck_assert_uint_eq(conn->out_size, CONNECTION_OUT_INITIAL);
        ck_assert_ptr_eq(conn->out, conn->out_heap);

        out_fill(conn, CONNECTION_OUT_KEEP);
        ck_assert_uint_eq(conn->out_size, CONNECTION_OUT_KEEP);
        ck_assert_int_eq(connection_flush(conn), 0);
        ck_assert_uint_eq(peer_drain(), CONNECTION_OUT_KEEP);
        ck_assert_uint_eq(conn->out_size, CONNECTION_OUT_KEEP); /* kept */

        /* Not while a batch in flight holds room in it. */
        out_fill(conn, 40 * 1024);
        conn->in_flight = true;
        ck_assert_int_eq(connection_flush(conn), 0);
        ck_assert_uint_eq(conn->out_size, 64 * 1024);
        ck_assert_ptr_nonnull(connection_reserve(conn, 64 * 1024)); /* the room is still there */
        conn->in_flight = false;
        ck_assert_uint_eq(peer_drain(), 40 * 1024);
        ck_assert_int_eq(connection_flush(conn), 0);
        ck_assert_uint_eq(conn->out_size, CONNECTION_OUT_INITIAL);
}
END_TEST

START_TEST (test_output_bound) {
        /* A client that never reads: the buffer grows to out_max rounded up to a page, never
         * further (the room the rounding adds is used), and its contents survive every
         * growth. */
        const size_t out_max = 100000, page = (size_t) sysconf(_SC_PAGESIZE);
        const size_t bound = (out_max + page - 1) / page * page;
        Connection *c;
        int sv[2];

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
        ck_assert_int_eq(connection_new(sv[0], false, out_max, &c), 0);
        for (size_t i = 0; i < out_max / 1000; i++) {
                char *p = connection_reserve(c, 1000);
                ck_assert_ptr_nonnull(p);
                memset(p, 'a' + (int) (i % 26), 1000);
                c->out_len += 1000;
                ck_assert_uint_le(c->out_size, bound);
        }
        ck_assert_uint_eq(c->out_len, out_max);
        ck_assert_ptr_null(connection_reserve(c, bound - out_max + 1));
        ck_assert_uint_le(c->out_size, bound);
        for (size_t i = 0; i < out_max; i++)
                ck_assert_int_eq(c->out[i], 'a' + (int) (i / 1000 % 26));
        connection_free(c);
        close(sv[1]);
}
END_TEST

START_TEST (test_flush_full_socket) {
        /* The peer does not read: a flush sends what fits and says so; the rest stays. */
        size_t sent = 0;
        int r = 0;

        (void) setsockopt(conn->fd, SOL_SOCKET, SO_SNDBUF, &(int){ 4096 }, sizeof(int));
        for (unsigned i = 0; i < 1000 && r == 0; i++) {
                char *p = connection_reserve(conn, 1024);
                ck_assert_ptr_nonnull(p);
                memset(p, 'z', 1024);
                conn->out_len += 1024;
                sent += 1024;
                r = connection_flush(conn);
        }
        ck_assert_int_eq(r, 1);
        ck_assert_uint_ge(connection_unsent(conn), 1024);
        ck_assert_uint_lt(connection_unsent(conn), sent);

        /* Reserving moves the unsent bytes to the front rather than growing. */
        conn->out_pos += 10; /* as if a later send() took 10 bytes */
        size_t unsent = connection_unsent(conn), size = conn->out_size;
        ck_assert_ptr_nonnull(connection_reserve(conn, conn->out_size - unsent));
        ck_assert_uint_eq(conn->out_pos, 0);
        ck_assert_uint_eq(connection_unsent(conn), unsent);
        ck_assert_uint_eq(conn->out_size, size);
}
END_TEST

START_TEST (test_flush_peer_gone) {
        char *p = connection_reserve(conn, 4);

        memcpy(p, "OK\n", 3);
        conn->out_len += 3;
        close(peer);
        peer = -1;
        ck_assert_int_eq(connection_flush(conn), -EPIPE);
}
END_TEST

START_TEST (test_discard_input) {
        peer_send("anything\n");
        ck_assert_int_eq(connection_discard_input(conn), 0);
        ck_assert_int_eq(shutdown(peer, SHUT_WR), 0);
        ck_assert_int_eq(connection_discard_input(conn), 1);
}
END_TEST

START_TEST (test_set_events) {
        struct epoll_event ev;
        int epfd = epoll_create1(EPOLL_CLOEXEC);

        ck_assert_int_ge(epfd, 0);
        conn->epfd = epfd;
        ck_assert_int_eq(connection_set_events(conn, EPOLLIN), 0);
        ck_assert_uint_eq(conn->events, EPOLLIN);
        ck_assert_int_eq(epoll_wait(epfd, &ev, 1, 0), 0);
        peer_send("x");
        ck_assert_int_eq(epoll_wait(epfd, &ev, 1, 0), 1);
        ck_assert_ptr_eq(ev.data.ptr, conn);
        ck_assert(ev.events & EPOLLIN);
        /* Edge-triggered: not reported again until new input. */
        ck_assert_int_eq(epoll_wait(epfd, &ev, 1, 0), 0);

        /* 0 removes the registration; freeing then touches epfd no more. */
        ck_assert_int_eq(connection_set_events(conn, 0), 0);
        peer_send("y");
        ck_assert_int_eq(epoll_wait(epfd, &ev, 1, 0), 0);
        conn = connection_free(conn);
        close(epfd);
}
END_TEST

/* ---- connections that give a batch no request ---- */

/* A connection on the ready list may give a batch nothing: its unsent replies reached the
 * output limit since it was queued (it is then marked blocked), or its peer's EOF cut a RESP
 * request short. A batch walked the ready list for as long as its room lasted, and such
 * connections take none, so with more than BATCH_REQUESTS_MAX of them queued at once it wrote
 * past the batch's array of connections. Here: BATCH_REQUESTS_MAX + 64 clients pipeline
 * requests and read nothing, every one reaches the output limit in the same round of batches,
 * and the next batch met them all. Every reply must still arrive once the clients read. */
#define MANY_CLIENTS   (BATCH_REQUESTS_MAX + 256)
#define MANY_REQUESTS  1000 /* per client: "HIT\n", enough rounds of 64 to fill the socket */
#define MANY_REPLY     "OK true 5 0\n"
#define MANY_STEPS_MAX 200000

START_TEST (test_batch_walks_many_blocked_connections) {
        static const char rules_text[] = "[default]\ncreditLimit = 5\nresetSeconds = 0\n";
        static int clients[MANY_CLIENTS];
        static size_t received[MANY_CLIENTS];
        static char input[4 * MANY_REQUESTS];
        ServerSettings settings = { .max_connections = MANY_CLIENTS + 8, .output_limit = 4096 };
        const size_t want = MANY_REQUESTS * (sizeof MANY_REPLY - 1);
        struct rlimit rl;
        sd_event *e = NULL;
        Server *srv = NULL;
        RuleSet *rs = NULL;
        size_t done = 0;
        Diag diag;

        /* two fds per client */
        ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
        if (rl.rlim_cur < 2 * MANY_CLIENTS + 64) {
                rl.rlim_cur = rl.rlim_max;
                if (rl.rlim_max < 2 * MANY_CLIENTS + 64 || setrlimit(RLIMIT_NOFILE, &rl) < 0) {
                        printf("SKIP: %s: needs %d file descriptors\n", __func__, 2 * MANY_CLIENTS + 64);
                        return;
                }
        }

        diag_init(&diag, "rules.ini");
        ck_assert_int_eq(ruleset_new("rules.ini", &rs), 0);
        ck_assert_int_eq(config_ini_parse(rules_text, sizeof rules_text - 1, rs, &diag), 0);
        ck_assert_int_eq(ruleset_finalize(rs, &diag), 0);
        diag_done(&diag);
        ck_assert_int_eq(sd_event_new(&e), 0);
        ck_assert_int_eq(server_new(e, &settings, &srv), 0);
        server_set_rules(srv, rs); /* resetSeconds = 0 allows without a counter: no store */

        for (size_t i = 0; i < MANY_REQUESTS; i++)
                memcpy(input + 4 * i, "HIT\n", 4);
        for (size_t i = 0; i < MANY_CLIENTS; i++) {
                int sv[2];

                ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
                /* the smallest send buffer: replies back up into the output buffer soon */
                ck_assert_int_eq(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &(int){ 1 }, sizeof(int)), 0);
                ck_assert_int_eq(send(sv[1], input, sizeof input, MSG_NOSIGNAL), (ssize_t) sizeof input);
                server_accept(sv[0], false, false, srv);
                clients[i] = sv[1];
        }
        ck_assert_uint_eq(server_counters(srv)->connections_current, MANY_CLIENTS);

        /* Until every client is blocked: nothing left to dispatch. */
        for (unsigned step = 0, idle = 0; idle < 3; step++) {
                ck_assert_uint_lt(step, MANY_STEPS_MAX);
                int r = sd_event_run(e, 0);
                ck_assert_int_ge(r, 0);
                idle = r == 0 ? idle + 1 : 0;
        }

        /* The clients read; every reply arrives, in full. */
        for (unsigned step = 0; done < MANY_CLIENTS; step++) {
                ck_assert_uint_lt(step, MANY_STEPS_MAX);
                for (size_t i = 0; i < MANY_CLIENTS; i++) {
                        char buf[16384];
                        ssize_t n;

                        if (received[i] == want)
                                continue;
                        while ((n = recv(clients[i], buf, sizeof buf, 0)) > 0) {
                                ck_assert(memcmp(buf, MANY_REPLY, sizeof MANY_REPLY - 1) == 0 ||
                                          received[i] % (sizeof MANY_REPLY - 1) != 0);
                                received[i] += (size_t) n;
                        }
                        ck_assert_uint_le(received[i], want);
                        if (received[i] == want)
                                done++;
                }
                ck_assert_int_ge(sd_event_run(e, 0), 0);
        }
        ck_assert_uint_eq(server_counters(srv)->batch_requests, (uint64_t) MANY_CLIENTS * MANY_REQUESTS);

        for (size_t i = 0; i < MANY_CLIENTS; i++)
                close(clients[i]);
        srv = server_free(srv);
        e = sd_event_unref(e);
        rs = ruleset_free(rs);
}
END_TEST

int main(void) {
        Suite *s = suite_create("connection");
        TCase *tc = tcase_create("connection");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_new_and_free);
        tcase_add_test(tc, test_read_and_frame);
        tcase_add_test(tc, test_eof_and_unterminated_line);
        tcase_add_test(tc, test_line_too_long);
        tcase_add_test(tc, test_line_length_boundary);
        tcase_add_test(tc, test_input_buffer_full);
        tcase_add_test(tc, test_reserve_and_flush);
        tcase_add_test(tc, test_output_given_back);
        tcase_add_test(tc, test_output_bound);
        tcase_add_test(tc, test_flush_full_socket);
        tcase_add_test(tc, test_flush_peer_gone);
        tcase_add_test(tc, test_discard_input);
        tcase_add_test(tc, test_set_events);
        suite_add_tcase(s, tc);

        tc = tcase_create("server");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_batch_walks_many_blocked_connections);
        suite_add_tcase(s, tc);

        return check_run_suite(s);
}
