/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * store-sync.c: the group commit (--sync=always, store_submit()): the committer thread
 * fdatasync()s the journal's current segment up to the newest lsn it was asked for and signals
 * an eventfd; the event loop completes the batches it covers (store_process(), store.h).
 * store.c applies and journals a batch, queues its completion (Store.pending) and wakes the
 * thread; this file never calls store.c.
 */

#include <pthread.h>
#include <stdint.h>

#include "store-internal.h"
#include "wal.h"

/* Starts the committer (store_open(), sync=always). Returns 0 or -errno. */
int store_commit_start(Store *s);

/* Stops the committer after its last sync and completes what it covered (store_close()). */
void store_commit_stop(Store *s);

/* The journal's current segment changed (a rotation since the last batch: the old segment was
 * synced when it was sealed): syncs the new one and its name here, once per segment, and hands
 * its fd to the thread once it is idle. Under commit_lock. */
void store_commit_rotated(Store *s, int fd, uint64_t seq, uint64_t last);

/* After anything that may have rotated the journal (store_apply(), a checkpoint's start): the
 * thread gets the new segment at once, so that its dup() of the old one, deleted after the
 * checkpoint, does not keep the old one's disk space. No system call unless it rotated. */
static inline void store_commit_refresh(Store *s) {
        uint64_t seq, last;
        int fd;

        if (!s || !s->committer)
                return;
        wal_current(s->wal, &fd, &seq, &last);
        if ((seq == s->commit_seq && s->commit_fd >= 0) || fd < 0)
                return; /* the event loop's own field: the thread never writes it; fd < 0: no
                         * segment yet (a full disk), nothing to sync */
        pthread_mutex_lock(&s->commit_lock);
        store_commit_rotated(s, fd, seq, last);
        pthread_mutex_unlock(&s->commit_lock);
}
