/* SPDX-License-Identifier: MIT */
#include "store-checkpoint-job.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "shared/clock.h"
#include "store.h"

/* One pass of a checkpoint: the records of one slice of the id space, one per id (the last
 * read wins: the journal is in lsn order), found again through an open-addressing index of
 * their positions, so that a journal of many changes to few counters needs little memory. */
typedef struct Pass {
        uint64_t hi_min, hi_max; /* inclusive: the slice of ids this pass takes */
        CounterRecord *records;
        size_t n, allocated;
        uint32_t *slots;  /* position + 1 of the record of an id; 0: empty */
        size_t slot_mask; /* slots - 1, a power of two >= 2 * allocated */
        size_t limit;     /* 0: grow as needed; else -E2BIG past limit distinct ids */
        bool count_only;
        uint64_t counted;
} Pass;

static uint32_t *pass_slot(Pass *p, CounterId id) {
        /* ids are a keyed hash: their low bits are as good as any */
        for (size_t i = (size_t) id.lo & p->slot_mask;; i = (i + 1) & p->slot_mask) {
                uint32_t v = p->slots[i];

                if (v == 0 || counter_id_compare(&p->records[v - 1].id, &id) == 0)
                        return p->slots + i;
        }
}

static int pass_grow(Pass *p) {
        size_t a = p->allocated ? p->allocated * 2 : 4096, cap = 1;
        CounterRecord *q;
        uint32_t *slots;

        if (a > UINT32_MAX / 2)
                return -E2BIG;
        while (cap < 2 * a)
                cap <<= 1;
        q = reallocarray(p->records, a, sizeof *q);
        if (!q)
                return -ENOMEM;
        p->records = q;
        slots = calloc(cap, sizeof *slots);
        if (!slots)
                return -ENOMEM;
        free(p->slots);
        p->slots = slots;
        p->slot_mask = cap - 1;
        p->allocated = a;
        for (size_t i = 0; i < p->n; i++)
                *pass_slot(p, p->records[i].id) = (uint32_t) i + 1;
        return 0;
}

static void pass_reset(Pass *p) {
        p->n = 0;
        if (p->slots)
                memset(p->slots, 0, (p->slot_mask + 1) * sizeof *p->slots);
}

static int pass_take(const CounterRecord *r, const WalPosition *pos, void *userdata) {
        Pass *p = userdata;
        uint32_t *slot;
        int k;

        (void) pos;
        if (p->count_only) {
                p->counted++;
                return 0;
        }
        if (r->id.hi < p->hi_min || r->id.hi > p->hi_max)
                return 0;
        if (p->allocated == 0) {
                k = pass_grow(p);
                if (k < 0)
                        return k;
        }
        slot = pass_slot(p, r->id);
        if (*slot != 0) {
                p->records[*slot - 1] = *r; /* a later state of the same counter */
                return 0;
        }
        if (p->n == p->allocated) {
                if (p->limit > 0 && p->n >= p->limit)
                        return -E2BIG;
                k = pass_grow(p);
                if (k < 0)
                        return k;
                slot = pass_slot(p, r->id);
        }
        p->records[p->n] = *r;
        *slot = (uint32_t) ++p->n;
        return 0;
}

/* Reads the job's segments whole (checking every record) into p; seg_records (may be NULL)
 * gets the number of valid records of each. */
static int job_read(CheckpointJob *j, Pass *p, uint64_t after_lsn, uint64_t *seg_records) {
        j->damage = (WalDamage){};
        for (uint64_t seq = j->first_seq; seq <= j->last_seq; seq++) {
                WalSegmentInfo info;
                int r = wal_segment_read(j->dir, seq, after_lsn, j->last_lsn, pass_take, p, &info, j->error,
                                         sizeof j->error);
                if (r < 0)
                        return r;
                if (seg_records)
                        seg_records[seq - j->first_seq] = info.records;
                if (info.damaged > 0 && seq >= j->damage_from_seq) {
                        if (j->damage.records == 0)
                                j->damage = (WalDamage){ .first_seq = seq,
                                                         .first_index = info.first_damaged,
                                                         .first_lsn = info.first_lsn + info.first_damaged };
                        j->damage.records += info.damaged;
                        j->damage.segments++;
                        j->damage.last_seq = seq;
                }
        }
        return 0;
}

/* Reads p's slice of the records job_read() found: the others are skipped unchecked, so that
 * a pass costs the records of its slice, not every record of the journal again. */
static int job_read_slice(CheckpointJob *j, Pass *p, uint64_t after_lsn, const uint64_t *seg_records) {
        for (uint64_t seq = j->first_seq; seq <= j->last_seq; seq++) {
                int r = wal_segment_read_slice(j->dir, seq, after_lsn, seg_records[seq - j->first_seq],
                                               p->hi_min, p->hi_max, pass_take, p, j->error,
                                               sizeof j->error);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Words a failed checkpoint write into j->error and returns r. LMDB turns a short write
 * (mdb_page_flush: "short write, filesystem full?") into EIO, so an EIO with almost no room
 * left on the database's filesystem is reported as the full disk it is. */
static int checkpoint_failure_reason(CheckpointJob *j, int r) {
        struct statvfs fs;

        if (r == -EIO && statvfs(j->dir, &fs) == 0 &&
            (uint64_t) fs.f_bavail * fs.f_frsize < CHECKPOINT_DISK_FULL_BYTES)
                r = -ENOSPC;
        set_error(j->error, sizeof j->error, "writing the checkpoint failed: %s%s", strerror(-r),
                  r == -ENOSPC ? " (the maximum map size, less its reserve, is reached, or the disk is full)"
                               : "");
        return r;
}

static bool job_past_deadline(CheckpointJob *j) {
        uint64_t d = __atomic_load_n(&j->deadline_usec, __ATOMIC_RELAXED);

        return d != 0 && clock_usec(CLOCK_MONOTONIC) >= d;
}

static int job_run(CheckpointJob *j) {
        uint64_t after = checkpoint_journal_seq(j->checkpoint);
        Pass p = { .hi_max = UINT64_MAX, .limit = j->pass_records };
        uint64_t passes = 1, *seg_records = NULL;
        bool have_first;
        int r;

        /* First, one pass over every id: enough unless the journal changed more than
         * pass_records counters (then -E2BIG, found early, after that many). */
        while (p.allocated < p.limit) {
                r = pass_grow(&p);
                if (r < 0)
                        goto finish;
        }
        r = job_read(j, &p, after, NULL);
        have_first = r >= 0;
        if (r == -E2BIG) {
                /* passes over slices of the id space, sized by the number of records */
                p = (Pass){ .records = p.records,
                            .allocated = p.allocated,
                            .slots = p.slots,
                            .slot_mask = p.slot_mask,
                            .count_only = true };
                seg_records = calloc(j->last_seq - j->first_seq + 1, sizeof *seg_records);
                if (!seg_records) {
                        r = -ENOMEM;
                        goto finish;
                }
                r = job_read(j, &p, after, seg_records);
                if (r < 0)
                        goto finish;
                passes = p.counted / j->pass_records + 2;
                p.count_only = false;
        } else if (r < 0)
                goto finish;
        for (uint64_t k = 0; k < passes; k++) {
                bool last = k + 1 == passes;

                if (job_past_deadline(j)) {
                        /* the passes written stay (checkpoint.h: safe), journal_seq does not move */
                        set_error(j->error, sizeof j->error, "checkpoint stopped at its deadline");
                        r = -ETIMEDOUT;
                        break;
                }
                if (!have_first) {
                        /* slice k of the id space: [k * 2^64 / passes, (k + 1) * 2^64 / passes) */
                        p.hi_min = (uint64_t) (((unsigned __int128) k << 64) / passes);
                        p.hi_max = last ? UINT64_MAX
                                        : (uint64_t) (((unsigned __int128) (k + 1) << 64) / passes) - 1;
                        pass_reset(&p);
                        r = job_read_slice(j, &p, after, seg_records);
                        if (r < 0)
                                break;
                }
                if (p.n == 0 && !last)
                        continue;
                r = checkpoint_write(j->checkpoint, p.records, p.n,
                                     last ? j->last_lsn : checkpoint_journal_seq(j->checkpoint),
                                     j->now_usec);
                if (r < 0) {
                        r = checkpoint_failure_reason(j, r);
                        break;
                }
        }
finish:
        free(seg_records);
        free(p.slots);
        free(p.records);
        if (r < 0)
                return r;
        (void) checkpoint_expire(j->checkpoint, j->now_usec, CHECKPOINT_EXPIRE_MAX_DEFAULT, NULL);
        return 0;
}

void *checkpoint_job_thread(void *userdata) {
        CheckpointJob *j = userdata;
        uint64_t start = clock_usec(CLOCK_MONOTONIC);

        /* Below the event loop: on 2 CPUs the checkpoint would otherwise take half of the
         * loop's time whenever the clients keep the other busy. Linux's nice is per thread.
         * Not SCHED_IDLE: a saturated machine must not starve it (the journal would grow
         * without bound). Best effort. */
        (void) setpriority(PRIO_PROCESS, (id_t) gettid(), STORE_CHECKPOINT_NICE);
        j->result = job_run(j);
        j->duration_usec = clock_usec(CLOCK_MONOTONIC) - start;
        /* The passes' buffer grew through sizes glibc keeps in this thread's arena after
         * free(): give those pages back, or RSS keeps tens of MB per live checkpoint thread. */
        (void) malloc_trim(0);
        j->stats_ok = checkpoint_get_stats(j->checkpoint, &j->stats) >= 0;
        __atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
        return NULL;
}
