/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * hash.c: SipHash-2-4 with 128-bit output under a fixed key, used for rule
 * identities and for actors too long to keep verbatim in an LMDB key.
 * Its output is part of the on-disk format: never change the key or algorithm
 * without bumping STORE_FORMAT_VERSION.
 */

#include <stddef.h>
#include <stdint.h>

#define HASH128_SIZE 16

void hash128(const void *data, size_t len, uint8_t out[HASH128_SIZE]);

/* The same function under a caller-chosen key: the reference vectors' tests, and the counter
 * ids of the store, keyed with a secret per database (src/store/counter.h) so that clients
 * cannot choose actors that collide in the counter table. */
void siphash24_128(const uint8_t key[16], const void *data, size_t len, uint8_t out[HASH128_SIZE]);
