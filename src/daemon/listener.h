/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * listener.c: listening sockets. Parses --listen addresses (pure, tested),
 * creates TCP and Unix listening sockets or adopts the ones systemd passed
 * (socket activation), and accepts connections in a loop per readiness,
 * handing each new fd to the server (server_accept()). The listener calls the
 * server, never the other way round.
 */

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

#include <systemd/sd-event.h>

#include "server.h"

#define LISTEN_ADDRESS_MAX 512 /* bytes: longest --listen argument we accept */
#define LISTEN_BACKLOG     512 /* pending connections per listener: bursts of reconnecting clients */
#define LISTEN_ACCEPT_BATCH                                                                                 \
        256 /* connections accepted per readiness callback: a connect storm cannot starve the               \
             * other event sources, and level-triggered epoll brings us back for the rest */
#define LISTEN_ADMIN_PREFIX "admin:" /* --listen admin:unix:PATH, admin:tcp:HOST:PORT */
#define LISTEN_ADMIN_FDNAME                                                                                 \
        "admin" /* a socket passed by systemd whose name (FileDescriptorName=) starts with this             \
                 * is an admin listener */
#define LISTEN_ADMIN_MODE_DEFAULT                                                                           \
        0600 /* admin Unix sockets we create: REFUND and RESET change every client's counters, so           \
              * only the daemon's own user (and root) may connect unless told otherwise */
#define LISTEN_PAUSE_USEC                                                                                   \
        (100ULL * 1000ULL) /* 100 ms: how long a listener sleeps after EMFILE/ENFILE/ENOMEM, instead        \
                            * of spinning on a readiness it cannot serve */

typedef enum ListenKind {
        LISTEN_TCP,
        LISTEN_UNIX,
        _LISTEN_KIND_MAX,
        _LISTEN_KIND_INVALID = -EINVAL,
} ListenKind;

typedef struct ListenAddress {
        ListenKind kind;
        char host[256]; /* LISTEN_TCP: IPv4/IPv6 literal or name, without brackets */
        uint16_t port;  /* LISTEN_TCP: 1..65535 */
        char path[sizeof(((struct sockaddr_un *) 0)->sun_path)]; /* LISTEN_UNIX */
        bool admin; /* "admin:" prefix: its connections may send REFUND and RESET (issue #15) */
        bool grpc;  /* --grpc: its connections speak gRPC over HTTP/2 (issue #34) */
} ListenAddress;

/* Parses "tcp:HOST:PORT" (HOST may be "[v6]") or "unix:PATH" (absolute or relative,
 * shorter than sun_path), either optionally after "admin:" (an admin listener). Returns 0
 * or -EINVAL. */
int listen_address_parse(const char *s, ListenAddress *ret);

/* "tcp:[::1]:8321" / "unix:/run/divvyd.sock" / "admin:unix:/run/divvyd/admin.sock", for
 * messages; listen_address_parse() reads it back. */
const char *listen_address_to_string(const ListenAddress *a, char *buf, size_t size);

typedef struct Listener Listener;

/* Creates, binds and listens (SO_REUSEADDR; Unix: removes a stale socket file only if
 * nothing answers on it, then chmods it to unix_mode, which the caller chooses by a->admin:
 * --unix-mode or --admin-unix-mode); every connection accepted goes to server (borrowed: it
 * must outlive the listener), marked admin when a->admin. Returns 0 or -errno; on failure a
 * sentence for the operator is in errbuf. */
int listener_new(sd_event *e, const ListenAddress *a, mode_t unix_mode, Server *server, Listener **ret,
                 char *errbuf, size_t errbuf_size);

/* Adopts a socket passed by systemd: checks that it is a listening stream socket,
 * makes it non-blocking; connections go to server as with listener_new(). name may be
 * NULL; a name that starts with LISTEN_ADMIN_FDNAME makes an admin listener
 * (listen_fdname_is_admin()). Returns 0 or -errno (-ENOTSOCK when fd is not a listening
 * stream socket). */
int listener_adopt(sd_event *e, int fd, const char *name, Server *server, Listener **ret);

/* Stops accepting, closes the socket and removes a Unix socket file we created. Accepts NULL. */
Listener *listener_free(Listener *l);

/* Whether a socket-activation name (FileDescriptorName=, LISTEN_FDNAMES) marks an admin
 * listener: it starts with LISTEN_ADMIN_FDNAME ("admin", "admin-tcp", ...). NULL: no. */
bool listen_fdname_is_admin(const char *name);

/* "tcp:127.0.0.1:8321", "admin:unix:PATH"; adopted: "fd 3 (NAME)", "fd 4 (admin) [admin]". */
const char *listener_name(const Listener *l);
/* Whether its connections are admin connections (Connection.admin). */
bool listener_is_admin(const Listener *l);

/* Whether a socket-activation name marks a gRPC listener (--grpc): it contains
 * LISTEN_GRPC_FDNAME ("grpc", "admin-grpc", ...). NULL: no. */
#define LISTEN_GRPC_FDNAME "grpc"
bool listen_fdname_is_grpc(const char *name);
