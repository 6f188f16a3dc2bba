/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * store.c: the counters, in one LMDB environment. Only src/store/ includes <lmdb.h>
 * (store.c and store-verify.c; the write-back journal, journal.c, knows no LMDB), and
 * nothing of LMDB shows in this header: its error codes become -errno where they are
 * returned (MDB_MAP_FULL -> -ENOSPC, MDB_NOTFOUND -> -ENOENT, version/format mismatch
 * -> -EPROTO, corrupt -> -EBADMSG). Library-like: never logs; human-readable details of
 * a failed open go to the caller's buffer.
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

#define STORE_FORMAT_VERSION 1 /* bump on any change of key or value layout */
#define STORE_ACTOR_INLINE_MAX                                                                              \
        400                                      /* bytes: longer actors are hashed so keys stay under      \
                                                  * LMDB's 511-byte limit */
#define STORE_MAP_SIZE_DEFAULT     (64ULL << 20) /* bytes: initial map */
#define STORE_MAP_SIZE_MAX_DEFAULT (16ULL << 30) /* bytes: growth cap */
#define STORE_SYNC_INTERVAL_DEFAULT_USEC                                                                    \
        (100ULL * 1000ULL) /* periodic mode: fsync at most                                                  \
                            * this often (100 ms) */
#define STORE_SWEEP_CHUNK_DEFAULT                                                                           \
        100 /* expired counters deleted per sweep step: measured ~0.6 ms per step at 10 million             \
             * counters (1000 took ~7 ms), so a step never holds the write lock long */
#define STORE_JOURNAL_NAME "journal.divvyd" /* write-back journal, beside data.mdb */
#define STORE_WRITE_BACK_HITS_MAX                                                                           \
        32768 /* hits per write-back transaction before it is committed early: bounds its dirty             \
               * pages (LMDB keeps at most 131072 in memory) and the journal (about 1.5 MB) */

typedef enum StoreSync {
        STORE_SYNC_NONE,     /* never fsync: survives a process crash, an OS crash may
                              * lose recent updates (never corrupts) */
        STORE_SYNC_PERIODIC, /* fsync at most every sync_interval_usec */
        STORE_SYNC_ALWAYS,   /* fsync before store_apply() returns */
        _STORE_SYNC_MAX,
        _STORE_SYNC_INVALID = -EINVAL,
} StoreSync;

typedef struct StoreOptions {
        const char *path;      /* directory; created (0750) if missing */
        uint64_t map_size;     /* initial map size in bytes (at most 7/8 of map_size_max is used:
                                * see store_apply()); 0 = default */
        uint64_t map_size_max; /* growth cap in bytes; 0 = default */
        StoreSync sync;
        uint64_t sync_interval_usec; /* STORE_SYNC_PERIODIC; 0 = default */
        /* Write-back (ignored with STORE_SYNC_ALWAYS): batches are applied to one long
         * write transaction. It is committed by store_sync() and store_close(), by
         * store_apply() before a batch that would take it past STORE_WRITE_BACK_HITS_MAX
         * hits, and right after a batch of more hits than that (too big for the journal).
         * store_sweep() and store_get_stats() work inside it and commit nothing. Each
         * batch's new counter values are copied into the journal file beside data.mdb (a
         * shared mapping: no syscall), so a crash of the process loses nothing
         * store_apply() returned: the journal is replayed by the next store_open() (or in
         * a commit of its own when the open transaction is lost to a full map or a failed
         * commit) and emptied after every commit. false: every batch is one LMDB commit. */
        bool write_back;
} StoreOptions;

/* One hit of a batch. The caller fills the inputs; store_apply() the outputs. */
typedef struct StoreHit {
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
} StoreHit;

typedef struct StoreStats {
        uint64_t counters;    /* entries in the counter table (live + not yet swept) */
        uint64_t map_size;    /* current map size, bytes */
        uint64_t data_size;   /* bytes in use (pages * page size) */
        uint64_t file_size;   /* size of data.mdb on disk */
        uint64_t swept_total; /* expired counters deleted since open */
        uint64_t map_grows;   /* automatic map growths since open */
        uint64_t commits;     /* write transactions committed since open */
        uint64_t syncs;       /* fsyncs since open */
} StoreStats;

typedef struct Store Store;

/* Opens (creating if needed) the environment at opts->path, clears stale readers,
 * checks the format version. On failure returns -errno and writes a sentence for
 * the operator into errbuf (if non-NULL), e.g. "database format version 7 is not
 * supported by this divvyd (expects 1)". */
int store_open(const StoreOptions *opts, Store **ret, char *errbuf, size_t errbuf_size);

/* Commits (and, unless sync=none, fsyncs) everything, closes. Accepts NULL; returns NULL. */
Store *store_close(Store *s);
static inline void store_closep(Store **s) {
        if (*s)
                store_close(*s);
}

/* Applies n hits in ONE write transaction at wall-clock time now_usec, in order
 * (two hits on the same counter in one batch see each other). No allocation per
 * hit. Grows the map when it is full, up to 7/8 of map_size_max (the rest is kept for
 * journal replays and sweeps, so that a full map can always be swept), and retries
 * the whole batch. Returns 0
 * if the batch committed (each hit's outputs set, error 0); on failure returns
 * -errno and sets every hit's error to it (nothing of the batch is kept):
 * -ENOSPC map full at the maximum or disk full, -EIO etc. With STORE_SYNC_ALWAYS
 * the commit is on disk when this returns. With write_back, "committed" means
 * applied to the open transaction and written to the journal (see StoreOptions). */
int store_apply(Store *s, StoreHit *hits, size_t n, uint64_t now_usec);

/* Write-back: commits the open transaction and empties the journal. Periodic mode:
 * then fsyncs if anything was committed since the last sync. The manager calls this
 * from a timer every sync_interval_usec. Returns 0 or -errno. */
int store_sync(Store *s);

/* Deletes up to max_delete (0: STORE_SWEEP_CHUNK_DEFAULT) expired counters (expiry <=
 * now_usec), oldest first: in one short write transaction of its own, or with write-back
 * inside the open transaction (committed with it). On a full map it may use the reserve
 * and deletes fewer at a time. Sets *ret_deleted; returns 1 if more expired counters
 * remain, 0 if none, or -errno. */
int store_sweep(Store *s, uint64_t now_usec, size_t max_delete, size_t *ret_deleted);

/* Fills *ret. With write-back it sees the open transaction (commits nothing). Returns 0
 * or -errno. */
int store_get_stats(Store *s, StoreStats *ret);

const StoreOptions *store_options(const Store *s);

const char *store_sync_to_string(StoreSync s);
StoreSync store_sync_from_string(const char *s);
