/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: a whole client connection. The bytes go through the server's real
 * per-connection code (server.c, connection.c) over a socketpair, with real rules and
 * a real LMDB store in a temporary directory, the loop run step by step in-process.
 *
 * Input: one mode byte, one chunk-size byte, then the client's byte stream. The mode
 * says whether the client half-closes and then reads every reply, or closes early;
 * whether a second client sends the same stream at the same time; whether the store is
 * a tiny one that fills up. Checked: every reply is a well-formed line; after a
 * half-close the client gets exactly one reply per request up to and including the
 * first ERR, which is the last line; nothing after an ERR is executed; the server
 * closes every connection and its connection gauge returns to 0.
 */

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config.h"
#include "fuzz.h"
#include "daemon/log.h"
#include "daemon/server.h"
#include "store/store.h"

#define FUZZ_INPUT_MAX       (256u * 1024u) /* bytes: larger inputs are skipped */
#define FUZZ_STEPS_MAX       20000          /* loop iterations per input before we call it a hang */
#define FUZZ_STORE_RECYCLE   4096 /* inputs between fresh stores: bounds the disk used by counters */
#define FUZZ_MAP_SMALL       (256u * 1024u) /* bytes: the "tiny store" map, full after a few thousand counters */
#define FUZZ_OUTPUT_LIMIT    4096           /* bytes: small, so the blocking path is reached */
#define FUZZ_CLIENTS_MAX     2
#define FUZZ_REPLIES_INITIAL (64u * 1024u)

enum {
        MODE_HALF_CLOSE = 1 << 0, /* shutdown(SHUT_WR) after sending, then read to EOF */
        MODE_TWO_CLIENTS = 1 << 1,
        MODE_SMALL_STORE = 1 << 2,
        MODE_READ_EAGERLY = 1 << 3, /* read replies after every chunk, not only when stuck */
};

static const char RULES[] = "[path=/login method=POST]\n"
                            "creditLimit = 3\n"
                            "resetSeconds = 60\n"
                            "actorField = ip\n"
                            "\n"
                            "[path=/api/* ip=*]\n"
                            "creditLimit = 2\n"
                            "resetSeconds = 3600\n"
                            "matchPolicy = canary\n"
                            "actorField = ip\n"
                            "label = api-canary\n"
                            "\n"
                            "[path=/api/*]\n"
                            "creditLimit = 5\n"
                            "resetSeconds = 10\n"
                            "\n"
                            "[path=*/admin*]\n"
                            "creditLimit = 0\n"
                            "resetSeconds = 60\n"
                            "\n"
                            "[method=GET]\n"
                            "creditLimit = 100\n"
                            "resetSeconds = 0\n"
                            "\n"
                            "[a=*]\n"
                            "creditLimit = 1\n"
                            "resetSeconds = 1\n"
                            "actorField = a\n"
                            "\n"
                            "[default]\n"
                            "creditLimit = 10\n"
                            "resetSeconds = 60\n"
                            "actorField = ip\n";

typedef struct Fuzz {
        char dir[64];
        sd_event *event;
        RuleSet *rules;
        Server *server;
        Store *stores[2];   /* [0] normal, [1] tiny; both stay open, the server uses one */
        unsigned inputs[2]; /* since each store was opened */
        bool small_store;   /* the server uses stores[1] */
} Fuzz;

static Fuzz fuzz;

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(path);
}

static void fuzz_cleanup(void) {
        fuzz.server = server_free(fuzz.server);
        fuzz.event = sd_event_unref(fuzz.event);
        for (unsigned i = 0; i < 2; i++)
                fuzz.stores[i] = store_close(fuzz.stores[i]);
        fuzz.rules = ruleset_free(fuzz.rules);
        if (fuzz.dir[0])
                (void) nftw(fuzz.dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Replaces stores[small] by a fresh, empty one in fuzz.dir/db-0 or db-1. */
static void store_reopen(bool small) {
        char path[128], err[256] = "";
        StoreOptions o = {
                .path = path,
                .sync = STORE_SYNC_NONE,
                .map_size = small ? FUZZ_MAP_SMALL : 0,
                .map_size_max = small ? FUZZ_MAP_SMALL : 64u << 20,
        };

        fuzz.stores[small] = store_close(fuzz.stores[small]);
        snprintf(path, sizeof path, "%s/db-%d", fuzz.dir, small);
        (void) nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        if (store_open(&o, &fuzz.stores[small], err, sizeof err) < 0) {
                fprintf(stderr, "store_open: %s\n", err);
                abort();
        }
        fuzz.inputs[small] = 0;
}

/* Points the server at the normal or the tiny store, recycling it now and then. */
static void store_use(bool small) {
        if (!fuzz.stores[small] || ++fuzz.inputs[small] > FUZZ_STORE_RECYCLE)
                store_reopen(small);
        server_set_store(fuzz.server, fuzz.stores[small]);
        fuzz.small_store = small;
}

static void fuzz_init(void) {
        ServerSettings settings = { .max_connections = 4, .output_limit = FUZZ_OUTPUT_LIMIT };
        const char *tmp = getenv("TMPDIR");
        Diag diag;

        /* The server logs store failures: noise here, where the tiny store fills up on purpose. */
        if (!getenv("FUZZ_LOG"))
                log_set_max_level(LOG_CRIT);

        snprintf(fuzz.dir, sizeof fuzz.dir, "%s/fuzz-connection-XXXXXX",
                 tmp && strlen(tmp) < 32 ? tmp : "/tmp");
        fuzz_check(mkdtemp(fuzz.dir));

        diag_init(&diag, "rules.ini");
        fuzz_check(ruleset_new("rules.ini", &fuzz.rules) == 0);
        fuzz_check(config_ini_parse(RULES, sizeof RULES - 1, fuzz.rules, &diag) == 0);
        fuzz_check(ruleset_finalize(fuzz.rules, &diag) == 0);
        diag_done(&diag);

        fuzz_check(sd_event_new(&fuzz.event) >= 0);
        fuzz_check(server_new(fuzz.event, &settings, &fuzz.server) == 0);
        server_set_rules(fuzz.server, fuzz.rules);
        atexit(fuzz_cleanup);
}

typedef struct Client {
        int fd;
        char *replies;
        size_t len, size;
        bool eof;
} Client;

/* Reads whatever the server has sent. */
static void client_read(Client *c) {
        while (!c->eof) {
                if (c->size - c->len < 4096) {
                        c->size *= 2;
                        c->replies = realloc(c->replies, c->size);
                        fuzz_check(c->replies);
                }
                ssize_t n = recv(c->fd, c->replies + c->len, c->size - c->len - 1, MSG_DONTWAIT);
                if (n == 0 || (n < 0 && errno == ECONNRESET)) {
                        c->eof = true;
                        break;
                }
                if (n < 0) {
                        fuzz_check(errno == EAGAIN);
                        break;
                }
                c->len += (size_t) n;
        }
        c->replies[c->len] = '\0';
}

/* Sends data, running the server and reading replies whenever the socket is full.
 * Returns false if the server closed the connection (after an ERR) first. */
static bool client_send(Client *c, const char *data, size_t len, bool eager) {
        for (size_t done = 0, steps = 0; done < len; steps++) {
                fuzz_check(steps < FUZZ_STEPS_MAX);
                ssize_t n = send(c->fd, data + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
                        return false;
                if (n < 0) {
                        fuzz_check(errno == EAGAIN);
                        fuzz_check(sd_event_run(fuzz.event, 0) >= 0);
                        client_read(c);
                        continue;
                }
                done += (size_t) n;
        }
        if (eager) {
                fuzz_check(sd_event_run(fuzz.event, 0) >= 0);
                client_read(c);
        }
        return true;
}

/* The number of replies a half-closing client must get for stream[0..len): one per
 * request line up to and including the first one that fails to frame or parse, the
 * unterminated last line included; *ret_err tells whether the last is an ERR. Mirrors
 * the contract (cli-spec.md), using the protocol module only for framing and parsing. */
static size_t expected_replies(const char *stream, size_t len, bool *ret_err) {
        static ProtoRequest req;
        size_t pos = 0, n = 0;

        *ret_err = false;
        while (pos < len) {
                ProtoSlice line;
                size_t consumed;
                int r = proto_next_line(stream + pos, len - pos, PROTO_LINE_MAX, &line, &consumed);

                n++;
                if (r < 0) {
                        *ret_err = true;
                        break;
                }
                if (r == 0) {
                        line = (ProtoSlice){ stream + pos, len - pos };
                        if (line.ptr[line.len - 1] == '\r')
                                line.len--;
                        consumed = len - pos;
                }
                if (proto_parse_line(line.ptr, line.len, PROTO_PAIRS_MAX, &req) < 0) {
                        *ret_err = true;
                        break;
                }
                pos += consumed;
        }
        return n;
}

static bool is_number(const char *s, const char *end, bool allow_minus) {
        if (allow_minus && s < end && *s == '-')
                s++;
        if (s >= end)
                return false;
        for (; s < end; s++)
                if (*s < '0' || *s > '9')
                        return false;
        return true;
}

/* Checks the complete reply lines in buf; returns how many there are and whether the
 * last one is an ERR. An ERR is never followed by another reply. */
static size_t check_replies(const char *buf, size_t len, bool *ret_err) {
        size_t n = 0;

        *ret_err = false;
        for (const char *p = buf, *end = buf + len, *nl;
             p < end && (nl = memchr(p, '\n', (size_t) (end - p))); p = nl + 1) {
                fuzz_check(!*ret_err); /* nothing after an ERR */
                fuzz_check((size_t) (nl - p) < PROTO_REPLY_MAX);
                n++;
                if (strncmp(p, "ERR ", 4) == 0) {
                        fuzz_check_err_line(p, (size_t) (nl - p)); /* a fixed reason, no echo */
                        *ret_err = true;
                        continue;
                }
                const char *a = p + 3, *sp1, *sp2;
                fuzz_check(strncmp(p, "OK true ", 8) == 0 || strncmp(p, "OK false ", 9) == 0);
                a = memchr(p + 3, ' ', (size_t) (nl - p - 3));
                fuzz_check(a);
                sp1 = a + 1;
                sp2 = memchr(sp1, ' ', (size_t) (nl - sp1));
                fuzz_check(sp2);
                fuzz_check(is_number(sp1, sp2, false));
                fuzz_check(is_number(sp2 + 1, nl, true));
        }
        return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        Client clients[FUZZ_CLIENTS_MAX] = {};
        const ServerCounters *counters;
        unsigned mode, n_clients;
        size_t chunk, len;
        const char *stream;

        if (size < 2 || size > FUZZ_INPUT_MAX)
                return 0;
        if (!fuzz.event)
                fuzz_init();
        mode = data[0];
        chunk = data[1] == 0 ? size : (size_t) data[1] * 16u;
        stream = (const char *) data + 2;
        len = size - 2;
        n_clients = mode & MODE_TWO_CLIENTS ? 2 : 1;

        store_use(mode & MODE_SMALL_STORE);

        for (unsigned i = 0; i < n_clients; i++) {
                int sv[2];

                fuzz_check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
                server_accept(sv[0], false, false, fuzz.server);
                clients[i].fd = sv[1];
                clients[i].size = FUZZ_REPLIES_INITIAL;
                clients[i].replies = malloc(clients[i].size);
                fuzz_check(clients[i].replies);
        }

        /* The clients take turns sending a chunk each. */
        bool open[FUZZ_CLIENTS_MAX] = { true, true };
        for (size_t pos = 0; pos < len; pos += chunk) {
                size_t n = len - pos < chunk ? len - pos : chunk;
                for (unsigned i = 0; i < n_clients; i++)
                        if (open[i])
                                open[i] =
                                        client_send(&clients[i], stream + pos, n, mode & MODE_READ_EAGERLY);
        }

        for (unsigned i = 0; i < n_clients; i++) {
                Client *c = &clients[i];

                if (mode & MODE_HALF_CLOSE) {
                        /* The peer may have closed already (after an ERR): then it has all. */
                        (void) shutdown(c->fd, SHUT_WR);
                        for (unsigned steps = 0; !c->eof; steps++) {
                                fuzz_check(steps < FUZZ_STEPS_MAX);
                                fuzz_check(sd_event_run(fuzz.event, 10 * 1000) >= 0);
                                client_read(c);
                        }
                        bool err, want_err;
                        size_t got = check_replies(c->replies, c->len, &err);
                        size_t want = expected_replies(stream, len, &want_err);
                        fuzz_check(c->len == 0 || c->replies[c->len - 1] == '\n');
                        if (err && strstr(c->replies, "ERR unknown \"store")) {
                                /* Only the store may fail a valid request (a full tiny map),
                                 * and that ends the conversation there. */
                                fuzz_check(fuzz.small_store);
                                fuzz_check(got <= want);
                        } else {
                                fuzz_check(err == want_err);
                                fuzz_check(got == want);
                        }
                } else {
                        (void) sd_event_run(fuzz.event, 0);
                        client_read(c);
                        bool err;
                        (void) check_replies(c->replies, c->len, &err);
                }
        }

        for (unsigned i = 0; i < n_clients; i++) {
                close(clients[i].fd);
                free(clients[i].replies);
        }
        /* Every connection goes away once its peer is gone. */
        counters = server_counters(fuzz.server);
        for (unsigned steps = 0; counters->connections_current > 0; steps++) {
                fuzz_check(steps < FUZZ_STEPS_MAX);
                fuzz_check(sd_event_run(fuzz.event, 10 * 1000) >= 0);
        }
        return 0;
}
