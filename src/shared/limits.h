/* SPDX-License-Identifier: MIT */
#pragma once

/* The protocol's limits and divvy's port: one definition for the daemon's parser, its
 * listeners, libdivvy and the divvy command. libdivvy's installed header repeats the values as
 * DIVVY_* (an installed header cannot include this one); client.c asserts they are equal. */

#define DIVVY_PROTO_LINE_MAX                                                                                \
        8192 /* bytes: longest request line accepted, without its "\n";                                     \
              * divvy had no limit and buffered whatever it was sent */
#define DIVVY_PROTO_PAIRS_MAX                                                                               \
        64                    /* key=value pairs per request: bounds parse work and the request's           \
                               * pair array; no real operation needs more */
#define DIVVY_PROTO_PORT 8321 /* divvy's TCP port, the daemon's and the clients' default */
