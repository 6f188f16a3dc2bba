/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * store.c: the counters (format version 2, issue #14). A façade over three parts:
 *   table.c       the counters, RESIDENT in memory: every hit is answered from there;
 *   wal.c         the write-ahead journal: each batch's new counter states are appended to
 *                 mmap'd segments before the batch is answered;
 *   checkpoint.c  LMDB (data.mdb): the durable checkpoint, written by a background thread from
 *                 the journal's sealed segments, after which they are deleted.
 * Start-up (store_open()): open the checkpoint (migrating a version-1 database), load its live
 * counters into the table, replay the journal after the lsn it covers.
 *
 * Semantics: each hit's counter is changed by its rule's algorithm (core/algorithm.h, a pure
 * function of the counter's two words and the time): divvy's fixed window by default (its
 * Redis script: the first hit creates a counter with credit = limit - 1 and expiry = now +
 * reset; later hits decrement while credit > 0; an expired counter is treated as absent),
 * or a sliding window or a token bucket. A counter tagged with another algorithm than its
 * rule's is treated as absent. Time is wall-clock microseconds passed in by the caller
 * (injectable for tests); the state is stored as wall-clock time so windows survive restarts.
 *
 * Durability of an answered hit (the batch's records are in the journal's shared mapping when
 * store_apply() or store_submit() returns, i.e. in the page cache):
 *   always    the batch's records are fdatasync'ed before it is answered: survives a process
 *             crash, an OS crash and a power cut. store_apply() syncs (msync) before it
 *             returns. store_submit() is a group commit: it applies and journals the batch,
 *             queues its completion and returns; a sync thread the Store owns fdatasync()s the
 *             journal's current segment up to the newest record appended (one sync covers
 *             every batch that arrived meanwhile, so several batches are in flight) and makes
 *             store_event_fd() readable; store_process() then calls done for each batch it
 *             covers, in submission order. A rotation of the journal (a new segment, once per
 *             segment) is synced on the event loop by the next store_submit(), after waiting
 *             for the thread to be idle: the old segment was synced when it was sealed. If a
 *             sync fails, the batches it covers complete with its -errno (their hits are
 *             answered ERR) although the table counted them and later batches saw them: an
 *             error answer may have been counted, which is conservative (it never allows
 *             more); the next batch tries again;
 *   periodic  survives a process crash; store_sync() (the manager's timer, every
 *             sync_interval_usec) syncs: an OS crash loses at most the last interval;
 *   none      survives a process crash; an OS crash loses what the kernel had not written back
 *             since the last checkpoint or segment seal.
 *
 * Library-like: never logs; returns 0 or -errno; a sentence for the operator goes to errbuf
 * (open) or store_checkpoint_error(). One thread uses a Store; the checkpoint thread it starts
 * reads only sealed journal segments and writes only data.mdb; the sync thread (sync=always)
 * only fdatasync()s its own dup() of the current segment's descriptor.
 */

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/algorithm.h"
#include "core/rules.h"

#define STORE_FORMAT_VERSION 2 /* checkpoint.c's: bump on any change of key or value layout */
#define STORE_ACTOR_INLINE_MAX                                                                              \
        400 /* bytes: longer actors are hashed in the counter key (version 1's rule, kept so that           \
             * ids of migrated counters match) */
#define STORE_MAP_SIZE_DEFAULT     (64ULL << 20) /* bytes: initial map of data.mdb */
#define STORE_MAP_SIZE_MAX_DEFAULT (16ULL << 30) /* bytes: growth cap of data.mdb */
#define STORE_SYNC_INTERVAL_DEFAULT_USEC                                                                    \
        (100ULL * 1000ULL) /* periodic mode: sync the journal at most                                       \
                            * this often (100 ms) */
#define STORE_SWEEP_CHUNK_DEFAULT                                                                           \
        4096 /* table slots examined per sweep step: bench-table measures about 0.6 ms per 100k             \
              * slots, so a step costs about 25 us of the event loop */
#define STORE_CHECKPOINT_JOURNAL_MAX_DEFAULT                                                                \
        (256ULL << 20) /* bytes of journal records since the last checkpoint that start one */
#define STORE_CHECKPOINT_RECORDS_PER_COUNTER                                                                \
        2 /* by default a checkpoint starts once the journal holds this many records per counter            \
           * of data.mdb, if that is more than STORE_CHECKPOINT_JOURNAL_MAX_DEFAULT's: at 10 million        \
           * counters a checkpoint rewrites most leaf pages (about 600 MB) however few records it           \
           * covers; 2 keeps that near 30 bytes per HIT, and store_close()'s last checkpoint of             \
           * 20 million records within its 10 s (measured: see bench/RESULTS.md) */
#define STORE_CHECKPOINT_JOURNAL_CAP_DEFAULT                                                                \
        (2ULL << 30) /* bytes: ... but no more journal than this (the replay after a crash) */
#define STORE_CHECKPOINT_NICE                                                                               \
        10 /* nice of the checkpoint thread: the event loop first (weight 1024 against 110) */
#define STORE_CLOSE_CHECKPOINT_DEFAULT_USEC                                                                 \
        (10ULL * 1000ULL * 1000ULL) /* 10 s: store_close()'s last checkpoint, within the unit's             \
                                     * TimeoutStopSec=20s less 5 s for the clients */
#define STORE_CLOSE_PASS_RECORDS                                                                            \
        (1U << 22) /* records a pass of store_close()'s checkpoint holds (about 270 MB for a moment,        \
                    * instead of 8 times as many passes over the journal) */
#define STORE_CLOSE_CHECKPOINT_OFF UINT64_MAX /* close_checkpoint_usec: no last checkpoint */
#define STORE_CHECKPOINT_INTERVAL_DEFAULT_USEC                                                              \
        (300ULL * 1000ULL * 1000ULL) /* 5 min: a journal with any record this old starts a checkpoint */
#define STORE_CHECKPOINT_RETRY_MIN_USEC                                                                     \
        (1000ULL * 1000ULL) /* 1 s: first retry after a failed checkpoint, doubling ...                     \
                             */
#define STORE_CHECKPOINT_RETRY_MAX_USEC (60ULL * 1000ULL * 1000ULL) /* ... up to 1 min */
#define STORE_CHECKPOINT_PASS_RECORDS_DEFAULT                                                               \
        (1U << 18) /* journal records a checkpoint pass holds in memory (10 MB, and as much again           \
                    * to sort them): a larger journal is checkpointed in several passes, each over          \
                    * one range of ids (cheap: a pass skips the others' records unchecked); measured        \
                    * at 10 million counters just after a pre-fill, with a checkpoint running, RssAnon      \
                    * 570 MiB against 608 with 1 << 19 (the table alone: 561) */
#define STORE_SNAPSHOT_RATE_DEFAULT                                                                         \
        (128ULL << 20) /* bytes a second: a snapshot of 10 million counters (320 MB) in 2.5 s, a            \
                        * bounded share of the disk; store_close()'s last one is not paced */
#define STORE_SNAPSHOT_COUNTERS_PER_RECORD                                                                  \
        2 /* with snapshots, a checkpoint starts once the journal holds one record per this many live       \
           * counters (if more than STORE_CHECKPOINT_JOURNAL_MAX_DEFAULT's, up to the cap): a snapshot      \
           * writes 32 bytes per counter, so about 64 bytes per journaled change, and a restart after       \
           * a crash replays at most about one record per two counters after loading the snapshot           \
           * (10 million counters: the 320 MB snapshot and about 270 MB of journal) */
#define STORE_CHECKPOINT_TXN_RECORDS_DEFAULT                                                                \
        65536 /* records per LMDB transaction of a checkpoint (checkpoint.h: chunked; about 58              \
               * bytes of data.mdb a counter instead of 140 in one transaction) */

typedef enum StoreSync {
        STORE_SYNC_NONE,     /* never sync the journal (see above) */
        STORE_SYNC_PERIODIC, /* sync the journal every sync_interval_usec */
        STORE_SYNC_ALWAYS,   /* sync each batch's records before it is answered (group commit) */
        _STORE_SYNC_MAX,
        _STORE_SYNC_INVALID = -EINVAL,
} StoreSync;

typedef struct StoreOptions {
        const char *path;      /* directory; created (0750) if missing */
        uint64_t map_size;     /* initial map size of data.mdb in bytes; 0 = default */
        uint64_t map_size_max; /* its growth cap in bytes; 0 = default */
        StoreSync sync;
        uint64_t sync_interval_usec;         /* STORE_SYNC_PERIODIC; 0 = default */
        uint64_t checkpoint_journal_max;     /* bytes; 0 = by the live counters (checkpoint_threshold()) */
        uint64_t checkpoint_interval_usec;   /* 0 = default */
        size_t checkpoint_pass_records;      /* 0 = default */
        size_t checkpoint_txn_records;       /* 0 = default */
        uint64_t journal_segment_size;       /* bytes; 0 = WAL_SEGMENT_SIZE_DEFAULT */
        int (*journal_allocate)(int, off_t); /* test hook, WalOptions.allocate; NULL: the disk */
        /* Test hook of the group commit (sync=always, store_submit()): called instead of
         * fdatasync(fd) on the journal's current segment, from the sync thread (and once per
         * segment from store_submit(), and after store_apply()'s own sync); returns 0 or
         * -errno. NULL: fdatasync(). */
        int (*journal_sync)(int fd);
        uint64_t now_usec; /* wall clock of store_open() (what is expired when loading); 0 = now */
        uint64_t close_checkpoint_usec; /* store_close()'s last checkpoint may take this long; 0 =
                                         * default; STORE_CLOSE_CHECKPOINT_OFF: none */
        /* Counters the hits may create, at most (0: no cap). A hit that needs a new counter
         * beyond it fails alone with -EDQUOT (store_apply()); the counters the checkpoint and
         * the journal hold at store_open() are all loaded, even beyond it (they were
         * acknowledged): new ones are then refused until expiry brings the count under it. */
        uint64_t max_counters;
        size_t table_memory_max; /* test hook: table_set_memory_max() of the table (0: none) */
        /* Checkpoints write the whole table into counters.snap (snapshot.h) instead of the
         * journal into data.mdb, and the first one makes the database format version 3 (for
         * good: a version-3 database is checkpointed so whatever this says). STORE-DESIGN.md,
         * "Checkpoints". */
        bool snapshot;
        uint64_t snapshot_rate; /* bytes a second a snapshot is written at while serving; 0 = default */
        /* Test hook: called by the snapshot's thread at each SnapshotPoint (snapshot.h: 0 half the
         * records written, 1 the file complete and synced, before the rename). NULL: none. */
        void (*snapshot_hook)(int point);
} StoreOptions;

/* One hit of a batch. The caller fills the inputs; store_apply() the outputs. The inputs are
 * the caller's contract, not checked per hit: the engine builds hits from rules validated at
 * load (rules-draft.c) and client limits validated when parsed (client-limits.c), so rule_id
 * is set, actor is NULL only with actor_len 0, op is an AlgoOp, and algo is prepared
 * (algo_params_prepare(), or a peer's) or NULL with credit_limit and reset_seconds > 0. What
 * the store reads from disk (checkpoint, journal) it checks: that is input. */
typedef struct StoreHit {
        /* in */
        const uint8_t *rule_id; /* RULE_ID_SIZE bytes (Rule.id) */
        const char *actor;      /* NULL: rule has no actorField; else actor_len bytes */
        size_t actor_len;
        uint64_t credit_limit;  /* > 0 */
        uint64_t reset_seconds; /* > 0 */
        /* The rule's algorithm and parameters (Rule.algo, prepared), or NULL: divvy's fixed
         * window of credit_limit per reset_seconds. */
        const AlgoParams *algo;
        AlgoOp op;      /* core/algorithm.h's (0: ALGO_TAKE; divvy's HIT is TAKE 1) */
        uint64_t count; /* credits (not read by ALGO_RESET) */
        /* 0: the hit stands alone. Otherwise the consecutive hits with the same group are ALL OR
         * NOTHING (a request's enforcing rules, issue #15's matchPolicy=continue): each is
         * decided, and their changes are kept only if every one is allowed; if one is denied,
         * none is applied, and each reports its own decision as if alone. */
        uint32_t group;
        uint64_t at_usec; /* 0: the batch's time; else this hit's (a client's timestamp, issue #15) */
        /* The rule (NULL in tests of the local store, which reads only the fields above). The
         * Redis store (issue #16) reads its operation (divvy 1.7's key) and onBackendError. */
        const Rule *rule;
        /* out */
        int error;     /* 0, or -errno if this hit could not be applied */
        bool fallback; /* the backend failed it and its onBackendError decided (store-fallback.c) */
        /* The algorithm's result (algorithm.h), which the engine and the formatters use as it is:
         * allowed; credit left after this hit; limit, the counter's capacity (creditLimit, or a
         * token bucket's burst); reset, whole seconds until the counter is full again, rounded up,
         * >= 1, when denied until the hit would pass (the retry-after); retry, seconds: 0 allowed,
         * >= 1 denied, -1 can never pass. ALGO_RESET: allowed, credit 1 if a live counter was
         * deleted, else 0. All zero after an error. write is the local store's own. */
        AlgoResult res;
} StoreHit;

typedef struct StoreStats {
        uint64_t counters;  /* counters in the table (live + not yet swept) */
        uint64_t memory;    /* bytes the table holds */
        uint64_t map_size;  /* data.mdb: current map size, bytes */
        uint64_t data_size; /* data.mdb: bytes in use (pages * page size) */
        uint64_t
                file_size; /* size of the checkpoint file (counters.snap, or data.mdb), as of the last one */
        uint64_t swept_total; /* expired counters deleted from the table since open */
        uint64_t map_grows;   /* data.mdb map growths since open */
        uint64_t commits;     /* successful checkpoints since open */
        uint64_t syncs;       /* journal syncs since open (successful ones) */
        uint64_t sync_usec;   /* the time they took: with sync=always, what bounds the HITs/s */
        uint64_t journal_bytes;
        uint64_t journal_segments;
        uint64_t journal_records;          /* records in the journal (not yet released) */
        uint64_t checkpoint_counters;      /* entries in data.mdb, as of the last checkpoint */
        uint64_t checkpoint_age_usec;      /* since the last successful checkpoint (or open) */
        uint64_t checkpoint_duration_usec; /* of the last successful checkpoint */
        uint64_t checkpoint_failures;      /* failed checkpoints since open */
        uint64_t counters_max;             /* StoreOptions.max_counters (0: no cap) */
        uint64_t refused_limit;            /* hits refused a new counter by max_counters since open */
        uint64_t refused_memory;           /* ... because the table could not grow (-ENOMEM) */
        bool checkpoint_running;           /* a checkpoint thread is at work */
        bool checkpoint_failing;           /* the last checkpoint failed */
        uint64_t journal_damaged_records;  /* damaged journal records skipped: at open, by checkpoints */
        /* The last preallocation of a journal segment failed (store_journal_error() says why;
         * a full disk): batches that must be journaled fail with -ENOSPC once the current
         * segment is full, or at once while !journal_ready. Retried by store_maintain(). */
        bool journal_failing;
        bool journal_ready; /* the journal has a segment to append to (false: opened on a full disk) */
} StoreStats;

typedef struct Store Store;

/* Opens (creating if needed) the store at opts->path: the checkpoint (migrating version 1),
 * its live counters into the table, the journal replayed. A full disk that leaves no room for
 * the journal's new segment does not fail it: the store opens and serves what needs no
 * journal (reads, denied hits), fails the batches that do with -ENOSPC (as when a running
 * store's journal cannot grow) and store_maintain() makes the segment once there is room
 * (StoreStats.journal_ready, store_journal_error()). On failure returns -errno and writes a
 * sentence for the operator into errbuf (if non-NULL). */
int store_open(const StoreOptions *opts, Store **ret, char *errbuf, size_t errbuf_size);

/* What store_close() does first, so that the caller can report its result: completes every
 * batch submitted and writes the last checkpoint (see store_close()). Returns 0 (or nothing to
 * checkpoint), or -errno with store_checkpoint_error() saying why: the journal then stays, to
 * be replayed by the next store_open(). Once called, store_close() does not repeat it; no batch
 * may be submitted after it. */
int store_finish(Store *s);

/* Completes every batch submitted (sync=always: waits for the sync thread's last sync and
 * calls their done callbacks); then checkpoints what the journal holds (a running checkpoint
 * first), for at most close_checkpoint_usec: a clean stop leaves a checkpoint that covers the
 * whole journal, and the next store_open() replays nothing. Past the deadline the checkpoint
 * stops between two passes and the journal stays, to be replayed. Then syncs the journal
 * unless sync=none and closes. Accepts NULL; returns NULL. */
Store *store_close(Store *s);
static inline void store_closep(Store **s) {
        if (*s)
                store_close(*s);
}

/* Applies n hits at wall-clock time now_usec, in order (two hits on the same counter in one
 * batch see each other), then appends their new states to the journal in one wal_append(),
 * a copy into its mapped segment (and with sync=always syncs it). No allocation per hit.
 * Returns 0 with each hit's outputs set: error 0, or the hit's own error when it needed a new
 * counter that the table could not create, -EDQUOT at max_counters, -ENOMEM when the table
 * could not grow; such a hit fails with its all-or-nothing group (each of the group's hits gets
 * the error, none is applied), and every other hit of the batch is applied and answered as if
 * alone. On failure of the whole batch returns -errno and sets every hit's error to it, and the
 * table is as before the batch: -ENOSPC the journal's next segment does not fit on the disk,
 * -EIO etc. */
int store_apply(Store *s, StoreHit *hits, size_t n, uint64_t now_usec);

/* Called once the hits of a store_submit() have their outputs: error is store_apply()'s. */
typedef void (*StoreDoneFunc)(void *userdata, int error);

/* The completion-based interface the server uses, the same for every backend: hands the batch
 * over; done(userdata, error) is called once its outputs are set. The local store completes
 * at once (done runs before store_submit() returns) with sync=none or periodic, and with
 * sync=always when nothing was journaled (an error, or only denied hits); otherwise
 * sync=always completes from store_process(), after the sync that covers the batch (the hits'
 * outputs are set before store_submit() returns). A remote backend completes later, from its
 * event source; the hits (and what they point to) must stay untouched until done.
 * Returns 0 (done will be or was called), or -errno if the batch was not taken (done is not
 * called). */
int store_submit(Store *s, StoreHit *hits, size_t n, uint64_t now_usec, StoreDoneFunc done, void *userdata);

/* The group commit's completions (sync=always): a file descriptor that is readable when
 * batches of store_submit() may be complete, or -1 when every batch completes inside
 * store_submit() (sync=none, periodic). The event loop watches it and calls store_process(). */
int store_event_fd(Store *s);

/* Completes, in submission order, every batch of store_submit() the sync thread has covered
 * since: done(userdata, 0), or the failed sync's -errno. Never blocks. Returns how many it
 * completed, or -errno. */
int store_process(Store *s);

/* The batch interface as a function pointer, so that a batch engine can hold another backend
 * (a test double that completes later, a remote store) with one indirect call per batch. */
typedef int (*StoreSubmitFunc)(void *backend, StoreHit *hits, size_t n, uint64_t now_usec,
                               StoreDoneFunc done, void *userdata);
int store_submit_backend(void *store, StoreHit *hits, size_t n, uint64_t now_usec, StoreDoneFunc done,
                         void *userdata);

/* Periodic mode: syncs the journal if anything was appended since the last sync. The manager
 * calls this from a timer every sync_interval_usec. Returns 0 or -errno. */
int store_sync(Store *s);

/* One bounded step of expiry in the table (at most max_slots slots, see table_expire_step())
 * plus a step of a table migration in progress. Sets *ret_deleted; returns 1 if it deleted
 * something and stopped in the middle of a pass over the table, or a migration is still in
 * progress (more may follow soon), 0 if not (nothing expired there, or the pass is over).
 * Expiry in data.mdb is the checkpoint's. */
int store_sweep(Store *s, uint64_t now_usec, size_t max_slots, size_t *ret_deleted);

/* The background checkpoint, from a periodic timer (never blocks on LMDB): reaps a finished
 * checkpoint (on success deletes the journal segments it covers; on failure keeps them and
 * retries after a backoff), starts one when none runs and the journal holds at least
 * checkpoint_journal_max bytes of records since the last (by default: 256 MiB, or
 * STORE_CHECKPOINT_RECORDS_PER_COUNTER records per counter of data.mdb, up to 2 GiB), or any record older
 * than checkpoint_interval_usec, and otherwise preallocates the journal's next segment (retried at
 * every call while the disk is full: StoreStats.journal_failing). Returns 1 if a
 * checkpoint finished (successfully or not: see store_get_stats()), 0 if not, or -errno if one could not be
 * started (the journal could not rotate). */
int store_maintain(Store *s, uint64_t now_usec);

/* Checkpoints everything journaled so far and waits for it (tests, tools): starts a
 * checkpoint unless one runs, waits, reaps. Returns 0 or its -errno. */
int store_checkpoint(Store *s, uint64_t now_usec);

/* The sentence explaining the last failed preallocation of a journal segment ("" if the last
 * one succeeded): StoreStats.journal_failing. */
const char *store_journal_error(const Store *s);

/* The sentence explaining the last failed checkpoint ("" if the last one succeeded). */
const char *store_checkpoint_error(const Store *s);

/* The sentence for the operator about the last damaged journal records skipped, by the replay
 * at open or by a checkpoint (segment, record, how many, what was lost), "" if none: to log at
 * error level when journal_damaged_records grows. */
const char *store_journal_damage(const Store *s);

int store_get_stats(Store *s, StoreStats *ret);

const StoreOptions *store_options(const Store *s);

const char *store_sync_to_string(StoreSync s);
StoreSync store_sync_from_string(const char *s);
