/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * checkpoint.c: the durable checkpoint of the counters (format version 2), one LMDB
 * environment (data.mdb) in the store directory. The resident table holds the counters, the
 * write-ahead journal makes every change durable at once; a checkpoint, written in the
 * background, writes the counters changed since the previous one, after which the journal
 * up to checkpoint_journal_seq() may be dropped. Start-up: checkpoint_load(), then replay the
 * journal after that sequence. Library-like: never logs; returns 0 or -errno; LMDB's codes
 * are translated once (MDB_MAP_FULL -> -ENOSPC, MDB_NOTFOUND -> -ENOENT, a damaged file ->
 * -EBADMSG, a foreign one or an unknown version -> -EPROTO).
 *
 * On-disk format, version 2 (layout in detail at the top of checkpoint.c):
 *   "meta"      "magic" -> "divvyd counter store", "version" -> "2",
 *               "journal_seq" -> u64 little-endian: the journal sequence the last
 *               checkpoint covers (0: none),
 *               "id_key" -> 16 random bytes, the secret key of counter ids (counter.h),
 *               made with the database (or by the migration) and never changed.
 *   "counters"  key = CounterId, 16 bytes big-endian hi then lo (so LMDB's byte order is
 *               counter_id_compare()'s order); value = 17 bytes: algorithm (1 byte), w0, w1
 *               (u64 little-endian each). Only live counters; no expiry index.
 *
 * Migration from version 1, in checkpoint_open(), in ONE write transaction: every v1
 * counter still live at CheckpointOptions.now_usec becomes the record id =
 * counter_id_from_key(id_key, v1 key) (counter.h) under a fresh random id_key stored with it, algorithm
 * COUNTER_FIXED_WINDOW, w0 = v1 expiry, w1 = v1 credit; the v1 "counters" and "expiry" databases are
 * dropped, "version" becomes "2", "journal_seq" 0. Interrupted (crash, map cap too small, disk full) the
 * database is still version 1, as it was, and the next checkpoint_open() migrates it again. The v1 counters
 * are held in memory during the migration (40 bytes each) and the transaction needs room for both formats,
 * so it may grow the map up to map_size_max (the reserve included). A v1 write-back journal (journal.divvyd)
 * that may still hold records is refused with -EUCLEAN and a sentence (start the previous divvyd once and
 * stop it cleanly: it replays and empties its journal), one that a running divvyd holds with -EBUSY; an
 * empty one is removed after the migration committed. Any other process that has the environment open (an
 * old divvyd without write-back) is refused with -EBUSY too: it would go on writing version-1 keys into
 * version 2's tables. So call checkpoint_open() before the version-2 journal is opened.
 *
 * Map: starts at map_size, doubles on demand up to map_size_max. As in version 1 the last
 * eighth of map_size_max is a reserve: checkpoint_write() grows the map only up to seven
 * eighths and returns -ENOSPC beyond (the previous checkpoint stays intact, the caller keeps
 * its journal and retries later); deleting (checkpoint_expire()) and the migration may use
 * the reserve, since even a delete needs fresh pages (copy-on-write).
 *
 * Chunked checkpoints (txn_records_max > 0): LMDB copies every page a transaction touches
 * and can reuse the old copies only two commits later, so a checkpoint whose changes are
 * spread over every leaf page (1 million random changes among 10 million counters are)
 * needs free room for two more copies of the whole database: data.mdb settles at about 3
 * times its live data. Split into transactions of txn_records_max sorted records, each of
 * which covers one range of ids and so touches only its share of the pages, it needs room
 * for about two transactions' share instead. The checkpoint is then no longer all or nothing:
 * a crash or an error between its transactions leaves the counters of the committed ones
 * newer than journal_seq, which is still the previous one. That is safe as long as the
 * journal holds values, not increments (counter.h: a record is a counter's whole state) and
 * replays in order: replaying from journal_seq sets every counter it names to its last
 * journaled state, whatever the checkpoint held; a counter it does not name did not change.
 *
 * Threads: a Checkpoint is used by one thread at a time (the store's checkpoint thread;
 * open and load may run on another thread before it starts: the environment is opened with
 * MDB_NOTLS, so no transaction is tied to a thread). Never on the event loop: every write
 * is fsync'ed.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "counter.h"

#define CHECKPOINT_FORMAT_VERSION 2
#define CHECKPOINT_SNAPSHOT_VERSION                                                                         \
        3 /* data.mdb keeps "meta" only (id_key, journal_seq: the first snapshot's lsn); the counters       \
           * are in counters.snap (snapshot.h), which is authoritative */
#define CHECKPOINT_ID_KEY_SIZE          COUNTER_ID_KEY_SIZE
#define CHECKPOINT_MAP_SIZE_DEFAULT     (16ULL << 20) /* bytes: initial map */
#define CHECKPOINT_MAP_SIZE_MAX_DEFAULT (16ULL << 30) /* bytes: growth cap */
#define CHECKPOINT_EXPIRE_MAX_DEFAULT                                                                       \
        4096 /* counters examined by the expiry walk inside each checkpoint_write() */

typedef struct CheckpointOptions {
        uint64_t map_size;      /* initial map size in bytes; 0 = default */
        uint64_t map_size_max;  /* growth cap in bytes; 0 = default */
        size_t expire_max;      /* entries checkpoint_write()'s expiry walk examines; 0 = default */
        uint64_t now_usec;      /* wall clock for the migration (drops expired v1 counters); 0 = now */
        size_t txn_records_max; /* records per transaction of a checkpoint (chunked); 0 = all in one */
} CheckpointOptions;

typedef struct CheckpointStats {
        uint64_t counters;           /* entries in the counters db (live + not yet expired away) */
        uint64_t file_size;          /* bytes of data.mdb on disk */
        uint64_t data_size;          /* bytes in use (pages * page size) */
        uint64_t map_size;           /* current map size, bytes */
        uint64_t journal_seq;        /* journal sequence the last checkpoint covers */
        uint64_t last_duration_usec; /* of the last successful checkpoint_write() */
        uint64_t checkpoints;        /* successful checkpoint_write()s since open */
        uint64_t expired_total;      /* counters deleted by the expiry walk since open */
        uint64_t map_grows;          /* map growths since open */
        uint64_t migrated;           /* v1 counters migrated by this open (0: none) */
} CheckpointStats;

typedef struct Checkpoint Checkpoint;

/* Makes sure every block of dir/lock.mdb is allocated, creating it (CHECKPOINT_LOCK_SIZE bytes)
 * if missing or empty, before LMDB opens the environment: LMDB writes lock.mdb through a
 * mapping, and a block a full filesystem cannot give there is a SIGBUS, not an error (a new
 * lock.mdb on a full tmpfs crashed the daemon). An existing file keeps its size (LMDB sizes its
 * reader table by it, in every process), and is used as it is if there is no room. Returns 0,
 * or -ENOSPC / -EDQUOT with a sentence in err (if non-NULL) when there is no room for a new
 * one; any other failure returns 0 and is LMDB's to report. */
int checkpoint_lock_prepare(const char *dir, char *err, size_t err_size);

/* Opens the checkpoint in directory dir (created 0750 if missing), creating a version-2
 * database if there is none, migrating a version-1 one (see above). o may be NULL (defaults).
 * On failure returns -errno and writes a sentence for the operator into err (if non-NULL):
 * -EPROTO a foreign LMDB database or an unknown version, -EBADMSG a damaged one, -EUCLEAN a v1
 * journal with records, -EBUSY a v1 store in use, -ENOSPC the migration does not fit
 * map_size_max or the disk is full (a new database, or lock.mdb, cannot be made). */
int checkpoint_open(const char *dir, const CheckpointOptions *o, Checkpoint **ret, char *err,
                    size_t err_size);

/* Closes. Every successful write is already on disk. Accepts NULL; returns NULL. */
Checkpoint *checkpoint_close(Checkpoint *c);
static inline void checkpoint_closep(Checkpoint **c) {
        if (*c)
                checkpoint_close(*c);
}

/* Calls cb for every live counter (w0 > now_usec) in id order, from one read-only
 * transaction. cb returns >= 0 to go on, < 0 to stop: that value is returned. Returns 0,
 * -EBADMSG if an entry is malformed, or -errno. */
int checkpoint_load(Checkpoint *c, uint64_t now_usec, int (*cb)(const CounterRecord *r, void *u), void *u);

/* Writes one checkpoint: records (sorted in place by id, stably: of several records of one
 * id, in journal order, the last wins) with w0 > now_usec are upserted, the others (w0 == 0:
 * deleted; w0 <= now: expired) deleted; journal_seq is recorded; and the expiry walk
 * examines up to expire_max more counters (see checkpoint_expire()). Durable (fsync'ed) when
 * it returns. With txn_records_max 0, ONE transaction: all or nothing. Else see "Chunked
 * checkpoints" above: each transaction is all or nothing, journal_seq moves only with the
 * last. Returns 0, -EINVAL (bad algorithm: nothing written), -ENOSPC (the map cap less its
 * reserve, or the disk, is full: journal_seq unchanged, the caller keeps its journal and
 * retries later), -ENOMEM, or -errno. */
int checkpoint_write(Checkpoint *c, CounterRecord *records, size_t n, uint64_t journal_seq,
                     uint64_t now_usec);

/* The bounded expiry walk: examines at most max counters from where the previous walk
 * stopped (wrapping around at the end) and deletes those with w0 <= now_usec, in one
 * transaction that may use the map's reserve. Sets *ret_deleted (if non-NULL). Returns 1
 * if the walk reached the end of the counters (a pass is complete), 0 if not, or -errno. */
int checkpoint_expire(Checkpoint *c, uint64_t now_usec, size_t max, size_t *ret_deleted);

/* The database's secret key of counter ids (counter.h): what counter_id_from_key() of every
 * hit must use. Read at open (made there for a new or migrated database). */
void checkpoint_id_key(const Checkpoint *c, uint8_t ret[static CHECKPOINT_ID_KEY_SIZE]);

/* Whether the database is format version 3: its counters are in counters.snap, not here. */
bool checkpoint_snapshot(const Checkpoint *c);

/* Makes the database format version 3 (CHECKPOINT_SNAPSHOT_VERSION), in ONE transaction: the
 * counters are deleted, "version" becomes "3" and journal_seq journal_seq. Call it once a
 * snapshot covering journal_seq is durable (snapshot_writer_commit()): from then on the
 * snapshot is the checkpoint, and a divvyd that knows only version 2 refuses the directory
 * rather than loading no counters. Interrupted, the database stays version 2 and whole, and
 * the journal since its journal_seq is still there (it is released only after this). Returns
 * 0 or -errno. */
int checkpoint_adopt_snapshot(Checkpoint *c, uint64_t journal_seq);

/* The journal sequence the last checkpoint covers (0: none yet). */
uint64_t checkpoint_journal_seq(const Checkpoint *c);

int checkpoint_get_stats(Checkpoint *c, CheckpointStats *ret);
