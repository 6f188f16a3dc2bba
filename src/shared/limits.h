/* SPDX-License-Identifier: MIT */
#pragma once

/* The protocol's limits and divvy's port: one definition for the daemon's parser, its
 * listeners, libdivvy and the divvy command. libdivvy's installed header repeats the values as
 * DIVVY_* (an installed header cannot include this one); client.c asserts they are equal. */

#define DIVVY_PROTO_LINE_MAX                                                                                \
        8192 /* bytes: longest request line accepted, without its "\n";                                     \
              * divvy had no limit and buffered whatever it was sent */
#define DIVVY_PROTO_PAIRS_MAX                                                                               \
        64 /* key=value pairs per request: bounds parse work and the request's                              \
            * pair array; no real operation needs more */
#define DIVVY_PROTO_REPLY_MAX                                                                               \
        4096 /* bytes: longest reply line of any verb, "\n" and a NUL included (EXPLAIN's, whose            \
              * long parts are cut to fit); libdivvy reads replies up to this */
#define DIVVY_PROTO_COUNT_MAX                                                                               \
        9007199254740991ULL   /* 2^53-1: the largest count of TAKE/PEEK/CHARGE/REFUND; exact in             \
                               * JSON numbers and JavaScript, like creditLimit */
#define DIVVY_PROTO_PORT 8321 /* divvy's TCP port, the daemon's and the clients' default */
