/* SPDX-License-Identifier: MIT */
/* frontends.c: the protocol front-ends divvyd has; see frontends.h. */

#include "frontend-grpc.h"
#include "frontend-line.h"
#include "frontend-resp.h"
#include "frontends.h"

void frontends_attach(Batch *b) {
        batch_set_frontend(b, CONNECTION_PROTO_GRPC, &frontend_grpc);
        batch_set_frontend(b, CONNECTION_PROTO_UNDECIDED, &frontend_line);
        batch_set_frontend(b, CONNECTION_PROTO_LINE, &frontend_line);
        batch_set_frontend(b, CONNECTION_PROTO_RESP, &frontend_resp);
}
