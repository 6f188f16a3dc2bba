/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * frontend-line.c: the divvy line protocol's front-end (protocol.h): one request a line, one
 * reply a line; a request answered ERR closes the connection after its reply.
 */

#include "frontend.h"

extern const Frontend frontend_line;
