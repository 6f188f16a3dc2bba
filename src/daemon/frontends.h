/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * frontends.c: the protocol front-ends divvyd has, one per ConnectionProto.
 */

#include "batch.h"

/* Gives b every front-end (batch_set_frontend()). A connection whose protocol is not decided
 * yet (no byte read) is taken as a line connection would be. */
void frontends_attach(Batch *b);
