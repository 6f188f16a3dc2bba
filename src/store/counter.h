/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * A counter as the resident table, the write-ahead journal and the LMDB checkpoint all hold
 * it (format version 2): a 128-bit id, an algorithm tag and two 64-bit state words. The three
 * modules share these types and nothing else.
 *
 * Id: counter_id_from_key(), SipHash-2-4-128 (siphash24_128(), src/core/hash.h) of the
 * version-1 counter key, i.e. rule id (16 bytes) + actor tag (1 byte) + actor part (store.c's
 * counter_key()), under the database's SECRET id key: 16 random bytes made with the database
 * and kept in the checkpoint's "meta" ("id_key", checkpoint_id_key()). Secret, so that no
 * client can pick actors whose ids share a home slot of the table (hash flooding); hashing the
 * version-1 key, not something new, makes migrating a version-1 database exact: every v1 key
 * maps to the id a hit computes for the same rule and actor under the same key. lo is bytes
 * 0..7 of the hash read little-endian, hi bytes 8..15.
 *
 * State: w0 is, for every algorithm, the wall-clock time in µs (CLOCK_REALTIME) from which
 * the counter is the same as an absent one and may be deleted (fixed window: the window's
 * end; token bucket: the theoretical arrival time; sliding window: the end of the window
 * after the current one). w1 is the algorithm's own word (fixed window: credit left).
 * A record whose w0 is 0 deletes the counter (a reset, or an expired counter dropped).
 */

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/hash.h"

#define COUNTER_ID_SIZE     16 /* bytes: the hash of the v1 key */
#define COUNTER_ID_KEY_SIZE 16 /* bytes: SipHash's key, secret per database */

typedef struct CounterId {
        uint64_t lo, hi;
} CounterId;

typedef enum CounterAlgorithm {
        COUNTER_FIXED_WINDOW = 0,   /* divvy's: w1 = credit left until w0 */
        COUNTER_SLIDING_WINDOW = 1, /* reserved for the algorithms issue */
        COUNTER_TOKEN_BUCKET = 2,   /* reserved for the algorithms issue (GCRA: w0 = TAT) */
        _COUNTER_ALGORITHM_MAX,
} CounterAlgorithm;

typedef struct CounterState {
        uint64_t w0; /* µs, wall clock: deletable from then on (see above); 0 = deleted */
        uint64_t w1; /* the algorithm's word */
} CounterState;

typedef struct CounterRecord {
        CounterId id;
        uint8_t algorithm; /* CounterAlgorithm */
        CounterState state;
} CounterRecord;

static inline int counter_id_compare(const CounterId *a, const CounterId *b) {
        if (a->hi != b->hi)
                return a->hi < b->hi ? -1 : 1;
        if (a->lo != b->lo)
                return a->lo < b->lo ? -1 : 1;
        return 0;
}

/* The id of the counter whose version-1 key is key[0..len) under the database's id_key. */
static inline CounterId counter_id_from_key(const uint8_t id_key[COUNTER_ID_KEY_SIZE], const void *key,
                                            size_t len) {
        uint8_t h[HASH128_SIZE];
        uint64_t lo, hi;

        siphash24_128(id_key, key, len, h);
        memcpy(&lo, h, sizeof lo);
        memcpy(&hi, h + 8, sizeof hi);
        return (CounterId){ .lo = le64toh(lo), .hi = le64toh(hi) };
}
