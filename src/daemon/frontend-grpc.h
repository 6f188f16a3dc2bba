/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * frontend-grpc.c: Envoy's rate limit service over gRPC (issue #34), a front-end of the
 * engine. A connection accepted on a --grpc listener speaks HTTP/2 with prior knowledge from
 * its first byte; its libnghttp2 server session is driven from divvyd's own loop: the server
 * reads into the connection's input, the front-end's take() hands every byte to
 * nghttp2_session_mem_recv() and takes the calls that arrived whole into the batch, and
 * after the batch frontend_grpc_send() moves what the session has to send
 * (nghttp2_session_mem_send()) into the connection's output. Many calls per connection at once
 * (HTTP/2 streams), each bounded (GRPC_MESSAGE_MAX), and GRPC_STREAMS_MAX of them at a time.
 *
 * A ShouldRateLimit call's descriptors are one slot each, decided all or nothing in one batch
 * (batch_group_close()); the reply is built when the last of them is formatted. Health/Check is
 * answered without the engine: SERVING, or NOT_SERVING while starting or stopping (what
 * /healthz answers).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "connection.h"

#define GRPC_STREAMS_MAX                                                                                    \
        128 /* concurrent calls per connection (SETTINGS_MAX_CONCURRENT_STREAMS): with                      \
             * GRPC_MESSAGE_MAX, bounds a connection's request memory to 2 MiB */
#define GRPC_MESSAGE_MAX                                                                                    \
        (16u * 1024u) /* bytes of one request message: an Envoy request is a few hundred; a larger          \
                       * one is answered RESOURCE_EXHAUSTED */
#define GRPC_ARENA_MAX                                                                                      \
        (4u * 1024u * 1024u) /* bytes a connection's decoded requests of one batch may take                 \
                              */

extern const Frontend frontend_grpc;

/* Makes c a gRPC connection (its session, its SETTINGS queued). Returns 0 or -ENOMEM. */
int frontend_grpc_attach(Connection *c);
/* Frees c's session and calls (the server, before connection_free()). Accepts any connection. */
void frontend_grpc_detach(Connection *c);
/* CLOCK_MONOTONIC since when c's oldest call that has begun has not arrived whole, or 0: what
 * the server's --request-timeout runs from (a peer that never finishes its calls is closed as a
 * line client that never finishes its line is). */
uint64_t frontend_grpc_incomplete_since(const Connection *c);
/* The server stops: if c has calls open, a GOAWAY tells the peer that no new call will be taken
 * (those are answered) and true is returned; false: none open (c may close at once, as an idle
 * connection does). */
bool frontend_grpc_stop(Connection *c);
/* Moves the frames the session has to send into c's output while c's unsent output is under
 * output_limit (the rest waits: c->grpc_work stays set); sets c->closing once the session
 * wants neither to read nor to write (after a GOAWAY). */
void frontend_grpc_send(Connection *c, size_t output_limit);
