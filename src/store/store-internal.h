/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The Store's fields, for the files that make up the local store: store.c (the HIT path, open
 * and close, the checkpoint's event-loop side), store-sync.c (the group commit's thread) and
 * store-snapshot.c (the snapshot's thread).
 * Not for other files: they use store.h.
 */

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "counter.h"
#include "store-checkpoint-job.h"
#include "store-error.h"
#include "store.h"
#include "table.h"
#include "wal.h"

/* One hit's table change, to undo it. */
typedef struct Undo {
        CounterId id;
        CounterState state; /* before the hit */
        uint8_t algorithm;
        bool created; /* the hit created the entry: undoing deletes it */
        bool absent;  /* the hit found no entry and created none: nothing to undo */
} Undo;

/* A batch of store_submit() waiting for the group commit (sync=always). */
typedef struct Pending {
        uint64_t lsn; /* its last record's: durable once the journal is synced up to it */
        StoreDoneFunc done;
        void *userdata;
} Pending;

struct Store {
        StoreOptions opts; /* path owned; defaults filled in */
        Table *table;
        Wal *wal;
        Checkpoint *checkpoint; /* the thread's while job_running */
        uint8_t id_key[COUNTER_ID_KEY_SIZE];

        /* The batch buffers: ids, records, undo; capacity each. */
        CounterId *ids;
        CounterRecord *records;
        Undo *undo;
        size_t batch_capacity;

        /* The checkpoint thread. */
        pthread_t thread;
        bool job_running;
        bool snapshot;              /* checkpoints are snapshots (format version 3, or opts.snapshot) */
        bool job_snapshot;          /* the running job is a snapshot: the table is shared with it */
        pthread_mutex_t table_lock; /* while job_snapshot: held by the event loop around every
                                     * change of the table, by the thread around each chunk it
                                     * copies (table_copy_chunk()) */
        CheckpointJob job;
        uint64_t covered_lsn;          /* the last checkpoint's lsn */
        uint64_t last_checkpoint_usec; /* CLOCK_MONOTONIC: last success, or open */
        uint64_t retry_usec;           /* CLOCK_MONOTONIC: no new attempt before */
        uint64_t backoff_usec;         /* after the last failure (0: none) */
        uint64_t release_seq;          /* the last checkpoint's segments could not all be deleted:
                                        * retried up to this one by store_maintain() (0: none) */
        CheckpointStats ckpt_stats;    /* cached at the last reap */
        char ckpt_error[STORE_ERROR_MAX];
        uint64_t opened_seq;                /* the last segment the journal held at open (0: none) */
        uint64_t damaged_records;           /* damaged journal records skipped: at open, by checkpoints */
        char damage_error[STORE_ERROR_MAX]; /* the last damage's sentence for the operator */
        /* Why the journal's last segment preallocation failed ("" if it did not): a full disk,
         * found by store_open() or store_maintain(), which retries it every call. */
        char journal_error[STORE_ERROR_MAX];
        uint64_t ckpt_failures, ckpt_ok;
        uint64_t ckpt_duration_usec; /* of the last successful checkpoint job, every pass */

        uint64_t swept_total;
        uint64_t refused_limit, refused_memory; /* hits refused a new counter (StoreStats) */

        /* Address space kept for the replay of the next start (see replay_reserve()). */
        void *reserve;
        size_t reserve_bytes;

        /* The group commit (sync=always, store_submit()): the committer thread fdatasync()s the
         * journal's current segment up to the newest lsn it was asked for and signals efd; the
         * event loop completes the batches it covers (store_process()). The fields under
         * commit_lock are shared; the FIFO is the event loop's. */
        bool committer; /* the thread runs */
        pthread_t commit_thread;
        pthread_mutex_t commit_lock;
        pthread_cond_t commit_wake;                /* the thread: work, or stop */
        pthread_cond_t commit_idle;                /* the event loop: a sync finished */
        int commit_efd;                            /* eventfd, readable when a sync finished */
        int commit_fd;                             /* dup() of the current segment's fd (-1: none) */
        uint64_t commit_seq;                       /* its segment */
        uint64_t commit_want;                      /* newest lsn to make durable */
        uint64_t commit_tried;                     /* newest lsn a sync was attempted for */
        uint64_t commit_synced;                    /* newest lsn known durable */
        uint64_t commit_fail_from, commit_fail_to; /* lsns a failed sync left unsynced (to 0: none) */
        int commit_fail_error;
        bool commit_busy, commit_stop;
        uint64_t commit_syncs;     /* successful syncs of the thread */
        uint64_t commit_sync_usec; /* time they took */
        Pending *pending;          /* FIFO ring, in lsn order */
        size_t pending_head, pending_n, pending_cap;
        bool opened;         /* store_open() succeeded: store_close() may checkpoint */
        bool finished;       /* store_finish() ran: store_close() does not repeat it */
        uint64_t clock_usec; /* the wall clock store_maintain() or store_checkpoint() was given last
                              * (not the largest: after a step back, a larger one would drop
                              * counters live at the clock the hits are answered at), else
                              * store_open()'s: what store_close()'s checkpoint takes for now */
};

/* The snapshot's thread (store-snapshot.c), started by store.c on a Store whose job
 * (CheckpointJob: dir, last_lsn, now_usec, deadline_usec in; result, error, duration_usec,
 * stats out, then done) is a snapshot: copies the table in chunks under table_lock into
 * counters.snap, makes the database version 3 if it is not, and sets job.done. */
void *snapshot_job_thread(void *store);
