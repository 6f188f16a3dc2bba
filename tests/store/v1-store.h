/* SPDX-License-Identifier: MIT */
/* TEST AND BENCH ONLY: divvyd's version-1 store (format 1, src/store/store.c before issue #14),
 * kept verbatim but renamed (v1_store_*) to build version-1 databases that the migration in
 * checkpoint.c must read. Never linked into divvyd. */
#pragma once

/*
 * store.c: the counters, in one LMDB environment. The only file that includes
 * <lmdb.h>; LMDB's error codes are translated to -errno here (MDB_MAP_FULL ->
 * -ENOSPC, MDB_NOTFOUND -> -ENOENT, version/format mismatch -> -EPROTO, corrupt
 * -> -EBADMSG). Library-like: never logs; human-readable details of a failed
 * open go to the caller's buffer.
 *
 * Semantics are divvy's fixed window (its Redis script): the first hit creates
 * a counter with credit = limit - 1 and expiry = now + reset; later hits
 * decrement while credit > 0; an expired counter is treated as absent.
 * Time is wall-clock microseconds passed in by the caller (injectable for tests);
 * expiry is stored as wall-clock time so windows survive restarts.
 */

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/rules.h"

#define V1_STORE_FORMAT_VERSION 1 /* bump on any change of key or value layout */
#define V1_STORE_ACTOR_INLINE_MAX                                                                           \
        400                                         /* bytes: longer actors are hashed so keys stay under   \
                                                     * LMDB's 511-byte limit */
#define V1_STORE_MAP_SIZE_DEFAULT     (64ULL << 20) /* bytes: initial map */
#define V1_STORE_MAP_SIZE_MAX_DEFAULT (16ULL << 30) /* bytes: growth cap */
#define V1_STORE_SYNC_INTERVAL_DEFAULT_USEC                                                                 \
        (100ULL * 1000ULL)                     /* periodic mode: fsync at most                              \
                                                * this often (100 ms) */
#define V1_STORE_JOURNAL_NAME "journal.divvyd" /* write-back journal, beside data.mdb */
#define V1_STORE_WRITE_BACK_HITS_MAX                                                                        \
        32768 /* hits per write-back transaction before it is committed early: bounds its dirty             \
               * pages (LMDB keeps at most 131072 in memory) and the journal (about 1.5 MB) */

typedef enum V1StoreSync {
        V1_STORE_SYNC_NONE,     /* never fsync: survives a process crash, an OS crash may
                                 * lose recent updates (never corrupts) */
        V1_STORE_SYNC_PERIODIC, /* fsync at most every sync_interval_usec */
        V1_STORE_SYNC_ALWAYS,   /* fsync before v1_store_apply() returns */
        _V1_STORE_SYNC_MAX,
        _V1_STORE_SYNC_INVALID = -EINVAL,
} V1StoreSync;

typedef struct V1StoreOptions {
        const char *path;      /* directory; created (0750) if missing */
        uint64_t map_size;     /* initial map size in bytes; 0 = default */
        uint64_t map_size_max; /* growth cap in bytes; 0 = default */
        V1StoreSync sync;
        uint64_t sync_interval_usec; /* V1_STORE_SYNC_PERIODIC; 0 = default */
        /* Write-back (ignored with V1_STORE_SYNC_ALWAYS): batches are applied to one long
         * write transaction that v1_store_sync() commits (so do
         * v1_store_close() and every V1_STORE_WRITE_BACK_HITS_MAX hits);
         * each batch's new counter values are appended with one write() to the journal
         * file beside data.mdb, so a crash of the process loses nothing v1_store_apply()
         * returned: the journal is replayed by the next v1_store_open() and emptied after
         * every commit. false: every batch is one LMDB commit. */
        bool write_back;
} V1StoreOptions;

/* One hit of a batch. The caller fills the inputs; v1_store_apply() the outputs. */
typedef struct V1StoreHit {
        /* in */
        const uint8_t *rule_id; /* RULE_ID_SIZE bytes (Rule.id) */
        const char *actor;      /* NULL: rule has no actorField; else actor_len bytes */
        size_t actor_len;
        uint64_t credit_limit;  /* > 0 */
        uint64_t reset_seconds; /* > 0 */
        /* out */
        int error; /* 0, or -errno if this hit could not be applied */
        bool allowed;
        uint64_t credit;     /* credit left after this hit */
        uint64_t reset_left; /* whole seconds until the window resets, rounded up, >= 1 */
} V1StoreHit;

typedef struct V1Store V1Store;

/* Opens (creating if needed) the environment at opts->path, clears stale readers,
 * checks the format version. On failure returns -errno and writes a sentence for
 * the operator into errbuf (if non-NULL), e.g. "database format version 7 is not
 * supported by this divvyd (expects 1)". */
int v1_store_open(const V1StoreOptions *opts, V1Store **ret, char *errbuf, size_t errbuf_size);

/* Commits (and, unless sync=none, fsyncs) everything, closes. Accepts NULL; returns NULL. */
V1Store *v1_store_close(V1Store *s);

/* Applies n hits in ONE write transaction at wall-clock time now_usec, in order
 * (two hits on the same counter in one batch see each other). No allocation per
 * hit. Grows the map on MDB_MAP_FULL up to map_size_max and retries. Returns 0
 * if the batch committed (each hit's outputs set, error 0); on failure returns
 * -errno and sets every hit's error to it (nothing of the batch is kept):
 * -ENOSPC map full at the maximum or disk full, -EIO etc. With V1_STORE_SYNC_ALWAYS
 * the commit is on disk when this returns. With write_back, "committed" means
 * applied to the open transaction and written to the journal (see V1StoreOptions). */
int v1_store_apply(V1Store *s, V1StoreHit *hits, size_t n, uint64_t now_usec);

/* Write-back: commits the open transaction and empties the journal. Periodic mode:
 * then fsyncs if anything was committed since the last sync. The manager calls this
 * from a timer every sync_interval_usec. Returns 0 or -errno. */
int v1_store_sync(V1Store *s);
