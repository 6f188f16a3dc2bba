/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * store-checkpoint-job.c: the checkpoint thread's side of store_maintain() (store.c starts it
 * with pthread_create(checkpoint_job_thread, job) and reaps it): it reads the sealed journal
 * segments job names, with wal_segment_read() (never the table, which the event loop keeps
 * changing), in one or more passes, each taking the records whose id.hi falls in one slice of
 * the id space, and checkpoint_write()s each pass; only the last records the lsn the checkpoint
 * covers. Then a bounded checkpoint_expire(). It touches nothing but the job and what the job
 * names: the Checkpoint is the thread's until the job is done.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "store-error.h"
#include "wal.h"

/* What the checkpoint thread is given and gives back. */
#define CHECKPOINT_DISK_FULL_BYTES                                                                          \
        (4ULL << 20) /* bytes: an EIO from LMDB with less than this free on the disk is a full disk */

typedef struct CheckpointJob {
        /* in */
        Checkpoint *checkpoint;
        const char *dir;
        uint64_t first_seq, last_seq; /* the sealed segments */
        uint64_t last_lsn;            /* of last_seq: what the checkpoint covers */
        uint64_t now_usec;
        size_t pass_records;
        uint64_t deadline_usec;   /* CLOCK_MONOTONIC; 0: none. Atomic: store_close() may set it */
        uint64_t damage_from_seq; /* damage in segments from this one on is new: written since open */
        /* out */
        WalDamage damage; /* damaged records found in those segments (skipped) */
        int result;
        uint64_t duration_usec;
        CheckpointStats stats; /* after the job, if stats_ok */
        bool stats_ok;
        char error[STORE_ERROR_MAX];
        int done; /* set (release) by the thread when it is finished */
} CheckpointJob;

/* The thread: runs the job (userdata, a CheckpointJob) at STORE_CHECKPOINT_NICE, fills in its
 * out fields, then sets done (release). Returns NULL. */
void *checkpoint_job_thread(void *userdata);
