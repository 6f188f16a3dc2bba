/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * frontend-resp.c: RESP's front-end (resp.h, issue #17; RESP3 after HELLO 3): requests framed by
 * connection_next_resp(), their command found in RESP's command table (resp-commands.h);
 * divvyd's own commands and the limits clients give (CL.THROTTLE, RL.*) go to the engine, the
 * connection commands (PING, HELLO, ...) are answered here. A command's error is answered and
 * the connection goes on; broken framing and QUIT close it after their reply. MULTI queues the
 * requests that follow (their bytes copied, nothing taken by the engine) until EXEC takes them
 * together into one batch, or DISCARD or an error while queueing drops them.
 */

#include "frontend.h"

/* MULTI ... EXEC: the requests a transaction may queue, and their bytes (copied into the
 * connection's multi_buf). EXEC takes them all into one batch, behind its reply's header. */
#define RESP_MULTI_MAX        32
#define RESP_MULTI_MAX_TEXT   "32"
#define RESP_MULTI_BYTES      32768
#define RESP_MULTI_BYTES_TEXT "32768"

extern const Frontend frontend_resp;
