/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * frontend-resp.c: RESP's front-end (resp.h, issue #17; RESP3 after HELLO 3): requests framed by
 * connection_next_resp(), their command found in RESP's command table (resp-commands.h);
 * divvyd's own commands and the limits clients give (CL.THROTTLE, RL.*) go to the engine, the
 * connection commands (PING, HELLO, ...) are answered here. A command's error is answered and
 * the connection goes on; broken framing and QUIT close it after their reply.
 */

#include "frontend.h"

extern const Frontend frontend_resp;
