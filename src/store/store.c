/* SPDX-License-Identifier: MIT */

/*
 * The counter store, format version 2: the resident table answers, the journal makes each
 * batch durable, a background thread checkpoints the journal into LMDB. See store.h for the
 * contract; table.h, wal.h and checkpoint.h for the parts.
 *
 * A batch (store_apply()): every hit's id is computed and prefetched first, so that the
 * table's cache misses overlap; then each hit is applied to its table entry, the entry's old
 * state saved in the undo buffer and its new state written to the record buffer (a hit that
 * changes nothing, a denied one, writes no record); then ONE wal_append() of the records and,
 * with sync=always, ONE wal_sync(). If either fails the undo buffer puts the table back as it
 * was (a counter the batch created is deleted), so an error answer never leaves a change
 * behind; if only the sync failed, the old states are journaled after the new ones so that a
 * replay ends where the table is. The buffers are allocated once and grow only when a batch
 * is larger than any before.
 *
 * The checkpoint (store_maintain()): rotate the journal so that its records up to now are in
 * sealed, immutable segments, and hand their range to a thread. The thread reads them with
 * wal_segment_read() (never the table, which the event loop keeps changing) in one or more
 * passes, each taking the records whose id.hi falls in one slice of the id space (so each
 * pass holds at most about checkpoint_pass_records records and writes one contiguous key
 * range of data.mdb), and checkpoint_write()s each pass; only the last pass records the lsn
 * the checkpoint covers (checkpoint.h: a record is a whole state, so counters checkpointed
 * newer than the recorded lsn are set right again by the replay). Then a bounded
 * checkpoint_expire(). The event loop reaps the thread (an atomic flag, then pthread_join())
 * and deletes the covered segments with wal_release(). While a thread runs, the Checkpoint
 * is the thread's: the event loop uses the stats it cached at the last reap.
 */

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "store-error.h"
#include "core/hash.h"
#include "shared/clock.h"
#include "store.h"
#include "table.h"
#include "wal.h"

#define STORE_TAG_NO_ACTOR 0
#define STORE_TAG_VERBATIM 1
#define STORE_TAG_HASHED   2
#define STORE_KEY_MAX      (RULE_ID_SIZE + 1 + STORE_ACTOR_INLINE_MAX) /* bytes: 417 */
#define STORE_BATCH_INITIAL                                                                                 \
        4096                /* hits the batch buffers hold from the start (the daemon's BATCH_HITS_MAX) */
#define STORE_ERROR_MAX 512 /* bytes of a checkpoint's error sentence */

_Static_assert(STORE_ACTOR_INLINE_MAX >= HASH128_SIZE,
               "a hashed actor must not be longer than an inline one");

/* One hit's table change, to undo it. */
typedef struct Undo {
        CounterId id;
        CounterState state; /* before the hit */
        uint8_t algorithm;
        bool created;
} Undo;

/* What the checkpoint thread is given and gives back. */
#define CHECKPOINT_DISK_FULL_BYTES                                                                          \
        (4ULL << 20) /* bytes: an EIO from LMDB with less than this free on the disk is a full disk */

typedef struct Job {
        /* in */
        Checkpoint *checkpoint;
        const char *dir;
        uint64_t first_seq, last_seq; /* the sealed segments */
        uint64_t last_lsn;            /* of last_seq: what the checkpoint covers */
        uint64_t now_usec;
        size_t pass_records;
        uint64_t deadline_usec; /* CLOCK_MONOTONIC; 0: none. Atomic: store_close() may set it */
        /* out */
        int result;
        uint64_t duration_usec;
        CheckpointStats stats; /* after the job, if stats_ok */
        bool stats_ok;
        char error[STORE_ERROR_MAX];
        int done; /* set (release) by the thread when it is finished */
} Job;

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
        Job job;
        uint64_t covered_lsn;          /* the last checkpoint's lsn */
        uint64_t last_checkpoint_usec; /* CLOCK_MONOTONIC: last success, or open */
        uint64_t retry_usec;           /* CLOCK_MONOTONIC: no new attempt before */
        uint64_t backoff_usec;         /* after the last failure (0: none) */
        CheckpointStats ckpt_stats;    /* cached at the last reap */
        char ckpt_error[STORE_ERROR_MAX];
        uint64_t ckpt_failures, ckpt_ok;
        uint64_t ckpt_duration_usec; /* of the last successful checkpoint job, every pass */

        uint64_t swept_total;
        bool opened;         /* store_open() succeeded: store_close() may checkpoint */
        uint64_t clock_usec; /* the latest wall clock store_maintain() or store_checkpoint() was
                              * given (0: none): what store_close()'s checkpoint takes for now */
};

/* Writes the version-1 counter key of h to out; returns its length (<= STORE_KEY_MAX). The id
 * is its keyed hash (counter.h): the layout must not change. */
static size_t counter_key(const StoreHit *h, uint8_t *out) {
        memcpy(out, h->rule_id, RULE_ID_SIZE);
        if (!h->actor) {
                out[RULE_ID_SIZE] = STORE_TAG_NO_ACTOR;
                return RULE_ID_SIZE + 1;
        }
        if (h->actor_len <= STORE_ACTOR_INLINE_MAX) {
                out[RULE_ID_SIZE] = STORE_TAG_VERBATIM;
                if (h->actor_len > 0)
                        memcpy(out + RULE_ID_SIZE + 1, h->actor, h->actor_len);
                return RULE_ID_SIZE + 1 + h->actor_len;
        }
        out[RULE_ID_SIZE] = STORE_TAG_HASHED;
        hash128(h->actor, h->actor_len, out + RULE_ID_SIZE + 1);
        return RULE_ID_SIZE + 1 + HASH128_SIZE;
}

static uint64_t seconds_left(uint64_t expiry_usec, uint64_t now_usec) {
        /* caller guarantees now < expiry: the result is >= 1 */
        uint64_t d = expiry_usec - now_usec;

        return d / USEC_PER_SEC + (d % USEC_PER_SEC != 0);
}

/* The end of a window of reset_seconds starting now, as the table keeps it (clamped). */
static uint64_t window_end(uint64_t now_usec, uint64_t reset_seconds) {
        uint64_t d = reset_seconds > UINT64_MAX / USEC_PER_SEC ? UINT64_MAX : reset_seconds * USEC_PER_SEC;
        uint64_t end = now_usec > UINT64_MAX - d ? UINT64_MAX : now_usec + d;

        return end < TABLE_W0_MAX ? end : TABLE_W0_MAX;
}

const char *store_sync_to_string(StoreSync s) {
        static const char *const table[_STORE_SYNC_MAX] = {
                [STORE_SYNC_NONE] = "none",
                [STORE_SYNC_PERIODIC] = "periodic",
                [STORE_SYNC_ALWAYS] = "always",
        };

        if (s < 0 || s >= _STORE_SYNC_MAX)
                return NULL;
        return table[s];
}

StoreSync store_sync_from_string(const char *s) {
        if (!s)
                return _STORE_SYNC_INVALID;
        for (StoreSync i = 0; i < _STORE_SYNC_MAX; i++)
                if (strcmp(s, store_sync_to_string(i)) == 0)
                        return i;
        return _STORE_SYNC_INVALID;
}

const StoreOptions *store_options(const Store *s) {
        return s ? &s->opts : NULL;
}

/* ---- the HIT path ---- */

static int batch_reserve(Store *s, size_t n) {
        size_t cap = s->batch_capacity;
        void *p;

        if (n <= cap)
                return 0;
        while (cap < n)
                cap = cap ? cap * 2 : STORE_BATCH_INITIAL;
        p = reallocarray(s->ids, cap, sizeof *s->ids);
        if (!p)
                return -ENOMEM;
        s->ids = p;
        p = reallocarray(s->records, cap, sizeof *s->records);
        if (!p)
                return -ENOMEM;
        s->records = p;
        p = reallocarray(s->undo, cap, sizeof *s->undo);
        if (!p)
                return -ENOMEM;
        s->undo = p;
        s->batch_capacity = cap;
        return 0;
}

static bool hit_valid(const StoreHit *h) {
        return h->rule_id && h->credit_limit > 0 && h->reset_seconds > 0 && (h->actor || h->actor_len == 0);
}

/* Puts the table back as it was before the first n_undo hits of the batch, newest first. */
static void undo_hits(Store *s, size_t n_undo) {
        for (size_t i = n_undo; i-- > 0;) {
                const Undo *u = s->undo + i;
                TableEntry *e;

                if (u->created) {
                        (void) table_delete(s->table, u->id);
                        continue;
                }
                if (table_put(s->table, u->id, &e) < 0)
                        continue; /* cannot happen: the counter exists */
                table_entry_set_algorithm(e, (CounterAlgorithm) u->algorithm);
                table_entry_set_state(e, u->state);
        }
}

/* After a failed sync: journals the undone states after the batch's, so that a replay of the
 * journal ends as the table is. Best effort: the sync failed already. */
static void undo_journal(Store *s, size_t n_undo) {
        size_t m = 0;

        for (size_t i = n_undo; i-- > 0;)
                s->records[m++] = (CounterRecord){
                        .id = s->undo[i].id,
                        .algorithm = s->undo[i].algorithm,
                        .state = s->undo[i].created ? (CounterState){ 0, 0 } : s->undo[i].state,
                };
        (void) wal_append(s->wal, s->records, m);
}

int store_apply(Store *s, StoreHit *hits, size_t n, uint64_t now_usec) {
        uint8_t key[STORE_KEY_MAX];
        size_t m = 0, i;
        int r = 0;

        if (!s || (!hits && n > 0))
                return -EINVAL;
        if (n == 0)
                return 0;
        for (i = 0; i < n; i++)
                if (!hit_valid(hits + i)) {
                        r = -EINVAL;
                        goto fail;
                }
        r = batch_reserve(s, n);
        if (r < 0)
                goto fail;

        for (i = 0; i < n; i++) {
                s->ids[i] = counter_id_from_key(s->id_key, key, counter_key(hits + i, key));
                table_prefetch(s->table, s->ids[i]);
        }

        for (i = 0; i < n; i++) {
                StoreHit *h = hits + i;
                TableEntry *e;
                CounterState st;

                r = table_put(s->table, s->ids[i], &e);
                if (r < 0) {
                        undo_hits(s, i);
                        goto fail;
                }
                st = table_entry_state(e);
                s->undo[i] = (Undo){
                        .id = s->ids[i],
                        .state = st,
                        .algorithm = (uint8_t) table_entry_algorithm(e),
                        .created = r > 0,
                };
                h->error = 0;
                if (r > 0 || table_entry_algorithm(e) != COUNTER_FIXED_WINDOW || st.w0 <= now_usec) {
                        /* absent, expired, or another algorithm's: a fresh window */
                        st = (CounterState){ .w0 = window_end(now_usec, h->reset_seconds),
                                             .w1 = h->credit_limit - 1 };
                        table_entry_set_algorithm(e, COUNTER_FIXED_WINDOW);
                } else if (st.w1 > 0)
                        st.w1--;
                else {
                        h->allowed = false;
                        h->credit = 0;
                        h->reset_left = seconds_left(st.w0, now_usec);
                        continue; /* denied: nothing changes, nothing to journal */
                }
                table_entry_set_state(e, st);
                h->allowed = true;
                h->credit = st.w1;
                h->reset_left = seconds_left(st.w0, now_usec);
                s->records[m++] =
                        (CounterRecord){ .id = s->ids[i], .algorithm = COUNTER_FIXED_WINDOW, .state = st };
        }

        if (m > 0) {
                r = wal_append(s->wal, s->records, m);
                if (r < 0) {
                        undo_hits(s, n);
                        goto fail;
                }
                if (s->opts.sync == STORE_SYNC_ALWAYS) {
                        r = wal_sync(s->wal);
                        if (r < 0) {
                                undo_hits(s, n);
                                undo_journal(s, n);
                                goto fail;
                        }
                }
        }
        return 0;

fail:
        for (i = 0; i < n; i++) {
                hits[i].error = r;
                hits[i].allowed = false;
                hits[i].credit = 0;
                hits[i].reset_left = 0;
        }
        return r;
}

int store_submit(Store *s, StoreHit *hits, size_t n, uint64_t now_usec, StoreDoneFunc done, void *userdata) {
        int r = store_apply(s, hits, n, now_usec);

        if (done)
                done(userdata, r);
        return 0;
}

int store_submit_backend(void *store, StoreHit *hits, size_t n, uint64_t now_usec, StoreDoneFunc done,
                         void *userdata) {
        return store_submit(store, hits, n, now_usec, done, userdata);
}

int store_sync(Store *s) {
        if (!s)
                return -EINVAL;
        if (s->opts.sync == STORE_SYNC_NONE)
                return 0;
        return wal_sync(s->wal);
}

int store_sweep(Store *s, uint64_t now_usec, size_t max_slots, size_t *ret_deleted) {
        size_t deleted = 0;

        if (!s)
                return -EINVAL;
        (void) table_expire_step(s->table, now_usec, max_slots, &deleted);
        if (table_migrating(s->table))
                (void) table_migrate_step(s->table, max_slots);
        s->swept_total += deleted;
        if (ret_deleted)
                *ret_deleted = deleted;
        return deleted > 0;
}

/* ---- the checkpoint thread ---- */

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
static int job_read(Job *j, Pass *p, uint64_t after_lsn, uint64_t *seg_records) {
        for (uint64_t seq = j->first_seq; seq <= j->last_seq; seq++) {
                WalSegmentInfo info;
                int r = wal_segment_read(j->dir, seq, after_lsn, pass_take, p, &info, j->error,
                                         sizeof j->error);
                if (r < 0)
                        return r;
                if (seg_records)
                        seg_records[seq - j->first_seq] = info.records;
        }
        return 0;
}

/* Reads p's slice of the records job_read() found: the others are skipped unchecked, so that
 * a pass costs the records of its slice, not every record of the journal again. */
static int job_read_slice(Job *j, Pass *p, uint64_t after_lsn, const uint64_t *seg_records) {
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
static int checkpoint_failure_reason(Job *j, int r) {
        struct statvfs fs;

        if (r == -EIO && statvfs(j->dir, &fs) == 0 &&
            (uint64_t) fs.f_bavail * fs.f_frsize < CHECKPOINT_DISK_FULL_BYTES)
                r = -ENOSPC;
        set_error(j->error, sizeof j->error, "writing the checkpoint failed: %s%s", strerror(-r),
                  r == -ENOSPC ? " (the maximum map size, less its reserve, is reached, or the disk is full)"
                               : "");
        return r;
}

static bool job_past_deadline(Job *j) {
        uint64_t d = __atomic_load_n(&j->deadline_usec, __ATOMIC_RELAXED);

        return d != 0 && clock_usec(CLOCK_MONOTONIC) >= d;
}

static int job_run(Job *j) {
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

static void *job_thread(void *userdata) {
        Job *j = userdata;
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

/* Joins a job that is done (or, with wait, waits for it) and takes its result. Returns 1 if
 * one was reaped, 0 if none. */
static int job_reap(Store *s, bool wait) {
        Job *j = &s->job;
        int r;

        if (!s->job_running)
                return 0;
        if (!wait && !__atomic_load_n(&j->done, __ATOMIC_ACQUIRE))
                return 0;
        (void) pthread_join(s->thread, NULL);
        s->job_running = false;
        if (j->stats_ok)
                s->ckpt_stats = j->stats;
        if (j->result >= 0) {
                r = wal_release(s->wal, j->last_seq);
                if (r < 0 && r != -EINVAL) {
                        /* the segments stay: replay skips what the checkpoint covers */
                        set_error(s->ckpt_error, sizeof s->ckpt_error,
                                  "checkpoint written, but deleting the journal it covers failed: %s",
                                  wal_error(s->wal));
                } else
                        s->ckpt_error[0] = 0;
                s->covered_lsn = j->last_lsn;
                s->ckpt_duration_usec = j->duration_usec;
                s->ckpt_ok++;
                s->backoff_usec = 0;
                s->retry_usec = 0;
                s->last_checkpoint_usec = clock_usec(CLOCK_MONOTONIC);
                return 1;
        }
        if (!j->error[0])
                set_error(j->error, sizeof j->error, "checkpoint failed: %s", strerror(-j->result));
        memcpy(s->ckpt_error, j->error, sizeof s->ckpt_error);
        s->ckpt_failures++;
        s->backoff_usec = s->backoff_usec ? s->backoff_usec * 2 : STORE_CHECKPOINT_RETRY_MIN_USEC;
        if (s->backoff_usec > STORE_CHECKPOINT_RETRY_MAX_USEC)
                s->backoff_usec = STORE_CHECKPOINT_RETRY_MAX_USEC;
        s->retry_usec = clock_usec(CLOCK_MONOTONIC) + s->backoff_usec;
        return 1;
}

/* Rotates the journal and starts a thread on its sealed segments. Returns 1 if started, 0 if
 * there is nothing to checkpoint, or -errno. */
static int job_start(Store *s, uint64_t now_usec, uint64_t deadline_usec, size_t pass_records) {
        uint64_t first, last, lsn;
        int r;

        r = wal_rotate(s->wal);
        if (r < 0)
                return r;
        if (wal_sealed(s->wal, &first, &last) == 0)
                return 0;
        r = wal_sealed_last_lsn(s->wal, last, &lsn);
        if (r < 0)
                return r;
        s->job = (Job){
                .checkpoint = s->checkpoint,
                .dir = s->opts.path,
                .first_seq = first,
                .last_seq = last,
                .last_lsn = lsn,
                .now_usec = now_usec,
                .pass_records = pass_records > 0 ? pass_records : s->opts.checkpoint_pass_records,
                .deadline_usec = deadline_usec,
        };
        r = -pthread_create(&s->thread, NULL, job_thread, &s->job);
        if (r < 0)
                return r;
        s->job_running = true;
        return 1;
}

/* Journal records that start a checkpoint: checkpoint_journal_max's worth if it was given;
 * by default STORE_CHECKPOINT_JOURNAL_MAX_DEFAULT's, or STORE_CHECKPOINT_RECORDS_PER_COUNTER
 * per counter of data.mdb if that is more, up to STORE_CHECKPOINT_JOURNAL_CAP_DEFAULT's. A
 * checkpoint of changes spread over many counters rewrites most leaf pages of data.mdb
 * whatever the number of records it covers, so what it writes per HIT falls as the journal
 * it covers grows with data.mdb. data.mdb's counters, not the table's: while counters are
 * new (a pre-fill), checkpoints stay frequent and cheap, and store_close()'s last one small. */
static uint64_t checkpoint_threshold(const Store *s) {
        uint64_t min = STORE_CHECKPOINT_JOURNAL_MAX_DEFAULT / WAL_RECORD_SIZE,
                 cap = STORE_CHECKPOINT_JOURNAL_CAP_DEFAULT / WAL_RECORD_SIZE, by_counters;

        if (s->opts.checkpoint_journal_max > 0)
                return (s->opts.checkpoint_journal_max + WAL_RECORD_SIZE - 1) / WAL_RECORD_SIZE;
        by_counters = s->ckpt_stats.counters * STORE_CHECKPOINT_RECORDS_PER_COUNTER;
        return by_counters < min ? min : by_counters > cap ? cap : by_counters;
}

/* Journal records not yet covered by a checkpoint. */
static uint64_t journal_pending(const Store *s) {
        WalStats ws;

        if (wal_get_stats(s->wal, &ws) < 0)
                return 0;
        return ws.next_lsn > s->covered_lsn + 1 ? ws.next_lsn - s->covered_lsn - 1 : 0;
}

int store_maintain(Store *s, uint64_t now_usec) {
        uint64_t now = clock_usec(CLOCK_MONOTONIC), pending;
        int reaped, r;

        if (!s)
                return -EINVAL;
        if (now_usec > s->clock_usec)
                s->clock_usec = now_usec;
        reaped = job_reap(s, false);
        if (s->job_running)
                return reaped;
        pending = journal_pending(s);
        if (pending > 0 && now >= s->retry_usec &&
            (pending >= checkpoint_threshold(s) ||
             now - s->last_checkpoint_usec >= s->opts.checkpoint_interval_usec)) {
                r = job_start(s, now_usec, 0, 0);
                if (r < 0) {
                        set_error(s->ckpt_error, sizeof s->ckpt_error, "cannot start a checkpoint: %s",
                                  wal_error(s->wal)[0] ? wal_error(s->wal) : strerror(-r));
                        s->ckpt_failures++;
                        s->backoff_usec = STORE_CHECKPOINT_RETRY_MIN_USEC;
                        s->retry_usec = now + s->backoff_usec;
                        return r;
                }
                if (r > 0)
                        return reaped;
        }
        (void) wal_prepare(s->wal); /* a failure shows at the next rotation */
        return reaped;
}

int store_checkpoint(Store *s, uint64_t now_usec) {
        int r;

        if (!s)
                return -EINVAL;
        if (now_usec > s->clock_usec)
                s->clock_usec = now_usec;
        (void) job_reap(s, true);
        if (journal_pending(s) == 0)
                return 0;
        r = job_start(s, now_usec, 0, 0);
        if (r <= 0)
                return r;
        (void) job_reap(s, true);
        return s->job.result < 0 ? s->job.result : 0;
}

const char *store_checkpoint_error(const Store *s) {
        return s ? s->ckpt_error : "";
}

int store_get_stats(Store *s, StoreStats *ret) {
        WalStats ws;
        int r;

        if (!s || !ret)
                return -EINVAL;
        r = wal_get_stats(s->wal, &ws);
        if (r < 0)
                return r;
        *ret = (StoreStats){
                .counters = table_count(s->table),
                .memory = table_memory(s->table),
                .map_size = s->ckpt_stats.map_size,
                .data_size = s->ckpt_stats.data_size,
                .file_size = s->ckpt_stats.file_size,
                .swept_total = s->swept_total,
                .map_grows = s->ckpt_stats.map_grows,
                .commits = s->ckpt_ok,
                .syncs = ws.syncs,
                .journal_bytes = ws.bytes,
                .journal_segments = ws.segments,
                .journal_records = ws.records,
                .checkpoint_counters = s->ckpt_stats.counters,
                .checkpoint_age_usec = clock_usec(CLOCK_MONOTONIC) - s->last_checkpoint_usec,
                .checkpoint_duration_usec = s->ckpt_duration_usec,
                .checkpoint_failures = s->ckpt_failures,
                .checkpoint_running = s->job_running,
                .checkpoint_failing = s->ckpt_error[0] != 0,
        };
        return 0;
}

/* ---- open and close ---- */

static int load_record(const CounterRecord *r, void *userdata) {
        Store *s = userdata;
        TableEntry *e;
        int k;

        k = table_put(s->table, r->id, &e);
        if (k < 0)
                return k;
        table_entry_set_algorithm(e, (CounterAlgorithm) r->algorithm);
        table_entry_set_state(e, r->state);
        return 0;
}

typedef struct Replay {
        Store *store;
        uint64_t now_usec;
        uint64_t next_lsn; /* the lsn the next record must have: the checkpoint's + 1 */
        bool started;      /* a record was replayed */
} Replay;

static int replay_record(const CounterRecord *r, const WalPosition *pos, void *userdata) {
        Replay *rp = userdata;

        /* The journal must go on where the checkpoint stops: a first record past the next lsn
         * means records between them are gone (a data.mdb and a journal copied at different
         * times), and starting would silently lose what they counted. */
        if (!rp->started && pos->lsn != rp->next_lsn)
                return -ESPIPE;
        rp->started = true;
        if (r->state.w0 == 0 || r->state.w0 <= rp->now_usec) {
                (void) table_delete(rp->store->table, r->id); /* deleted, or expired since */
                return 0;
        }
        return load_record(r, rp->store);
}

int store_open(const StoreOptions *opts, Store **ret, char *errbuf, size_t errbuf_size) {
        CheckpointStats cs;
        WalStats ws;
        Replay rp;
        Store *s;
        uint64_t now = opts && opts->now_usec ? opts->now_usec : clock_usec(CLOCK_REALTIME);
        int r;

        if (errbuf && errbuf_size > 0)
                errbuf[0] = 0;
        if (!opts || !opts->path || !*opts->path || !ret || opts->sync < 0 ||
            opts->sync >= _STORE_SYNC_MAX) {
                set_error(errbuf, errbuf_size, "invalid store options");
                return -EINVAL;
        }
        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->opts = *opts;
        s->opts.path = strdup(opts->path);
        if (!s->opts.path) {
                free(s);
                return -ENOMEM;
        }
        if (s->opts.map_size == 0)
                s->opts.map_size = STORE_MAP_SIZE_DEFAULT;
        if (s->opts.map_size_max == 0)
                s->opts.map_size_max = STORE_MAP_SIZE_MAX_DEFAULT;
        if (s->opts.map_size_max < s->opts.map_size)
                s->opts.map_size_max = s->opts.map_size;
        if (s->opts.sync_interval_usec == 0)
                s->opts.sync_interval_usec = STORE_SYNC_INTERVAL_DEFAULT_USEC;
        if (s->opts.checkpoint_interval_usec == 0)
                s->opts.checkpoint_interval_usec = STORE_CHECKPOINT_INTERVAL_DEFAULT_USEC;
        if (s->opts.checkpoint_pass_records == 0)
                s->opts.checkpoint_pass_records = STORE_CHECKPOINT_PASS_RECORDS_DEFAULT;
        if (s->opts.checkpoint_txn_records == 0)
                s->opts.checkpoint_txn_records = STORE_CHECKPOINT_TXN_RECORDS_DEFAULT;
        if (s->opts.close_checkpoint_usec == 0)
                s->opts.close_checkpoint_usec = STORE_CLOSE_CHECKPOINT_DEFAULT_USEC;

        r = checkpoint_open(s->opts.path,
                            &(CheckpointOptions){ .map_size = s->opts.map_size,
                                                  .map_size_max = s->opts.map_size_max,
                                                  .now_usec = now,
                                                  .txn_records_max = s->opts.checkpoint_txn_records },
                            &s->checkpoint, errbuf, errbuf_size);
        if (r < 0)
                goto fail;
        checkpoint_id_key(s->checkpoint, s->id_key);
        r = checkpoint_get_stats(s->checkpoint, &cs);
        if (r < 0) {
                set_error(errbuf, errbuf_size, "%s/data.mdb: %s", s->opts.path, strerror(-r));
                goto fail;
        }
        s->ckpt_stats = cs;
        s->covered_lsn = checkpoint_journal_seq(s->checkpoint);

        r = table_new(cs.counters, &s->table);
        if (r < 0) {
                set_error(errbuf, errbuf_size, "cannot allocate the counter table: %s", strerror(-r));
                goto fail;
        }
        r = checkpoint_load(s->checkpoint, now, load_record, s);
        if (r < 0) {
                set_error(errbuf, errbuf_size, "%s/data.mdb: cannot load the counters: %s", s->opts.path,
                          strerror(-r));
                goto fail;
        }

        r = wal_open(s->opts.path,
                     &(WalOptions){ .segment_size = s->opts.journal_segment_size,
                                    .first_lsn = s->covered_lsn + 1,
                                    .allocate = s->opts.journal_allocate },
                     &s->wal, errbuf, errbuf_size);
        if (r < 0)
                goto fail;
        rp = (Replay){ .store = s, .now_usec = now, .next_lsn = s->covered_lsn + 1 };
        r = wal_replay(s->wal, s->covered_lsn, replay_record, &rp);
        if (r >= 0 && !rp.started) {
                /* Nothing replayed (a clean stop checkpoints the whole journal): the journal's
                 * next record must still be the one after the checkpoint's. */
                r = wal_get_stats(s->wal, &ws);
                if (r >= 0 && ws.next_lsn > s->covered_lsn + 1)
                        r = -ESPIPE;
                else if (r >= 0 && ws.next_lsn < s->covered_lsn + 1) {
                        set_error(errbuf, errbuf_size,
                                  "%s: the journal ends before data.mdb's checkpoint (record %" PRIu64
                                  "): data.mdb and the wal-*.divvyd files are from different times; "
                                  "restore them together, as copied while divvyd was stopped",
                                  s->opts.path, s->covered_lsn);
                        r = -EBADMSG;
                        goto fail;
                }
        }
        if (r == -ESPIPE) {
                set_error(errbuf, errbuf_size,
                          "%s: the journal does not go on where data.mdb's checkpoint stops (record %" PRIu64
                          " is missing): data.mdb and the wal-*.divvyd files are from different times; "
                          "restore them together, as copied while divvyd was stopped",
                          s->opts.path, s->covered_lsn + 1);
                r = -EBADMSG;
                goto fail;
        }
        if (r < 0) {
                set_error(errbuf, errbuf_size, "%s: cannot replay the journal: %s", s->opts.path,
                          wal_error(s->wal)[0] ? wal_error(s->wal) : strerror(-r));
                goto fail;
        }
        r = batch_reserve(s, STORE_BATCH_INITIAL);
        if (r < 0)
                goto fail;
        s->last_checkpoint_usec = clock_usec(CLOCK_MONOTONIC);
        s->opened = true;
        s->clock_usec = now;
        *ret = s;
        return 0;

fail:
        store_close(s);
        return r;
}

/* The last checkpoint, at a clean stop: everything journaled, so that the next start loads
 * data.mdb and replays (almost) nothing. Bounded by close_checkpoint_usec from now, a running
 * checkpoint included; one stopped at its deadline leaves the journal to be replayed, as a
 * crash would. */
static void close_checkpoint(Store *s) {
        uint64_t deadline = clock_usec(CLOCK_MONOTONIC) + s->opts.close_checkpoint_usec;

        if (s->job_running)
                __atomic_store_n(&s->job.deadline_usec, deadline, __ATOMIC_RELAXED);
        (void) job_reap(s, true);
        if (s->opts.close_checkpoint_usec == STORE_CLOSE_CHECKPOINT_OFF || journal_pending(s) == 0 ||
            clock_usec(CLOCK_MONOTONIC) >= deadline)
                return;
        /* Not the clock now but the latest one the store was given: an older one only keeps
         * expired counters for the next checkpoint (load skips them), a newer one than the hits
         * were answered at (a caller's own clock, in tests) would drop live ones. */
        /* Larger passes than while serving (each pass re-reads the whole journal): the
         * memory is no longer the table's neighbour's, the time is bounded */
        if (job_start(s, s->clock_usec, deadline,
                      s->opts.checkpoint_pass_records > STORE_CLOSE_PASS_RECORDS
                              ? s->opts.checkpoint_pass_records
                              : STORE_CLOSE_PASS_RECORDS) > 0)
                (void) job_reap(s, true);
}

Store *store_close(Store *s) {
        if (!s)
                return NULL;
        if (s->opened)
                close_checkpoint(s);
        else if (s->wal)
                (void) job_reap(s, true);
        if (s->wal && s->opts.sync != STORE_SYNC_NONE)
                (void) wal_sync(s->wal);
        wal_close(s->wal);
        checkpoint_close(s->checkpoint);
        table_free(s->table);
        free(s->ids);
        free(s->records);
        free(s->undo);
        free((char *) s->opts.path);
        free(s);
        return NULL;
}
