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
 * replay ends where the table is. A hit whose new counter the table cannot make (max_counters,
 * or an array that cannot be mapped) fails alone with its all-or-nothing group: the group is
 * undone and the batch goes on. The buffers are allocated once and grow only when a batch
 * is larger than any before.
 *
 * store_submit() with sync=always applies and journals the batch the same way, then queues its
 * completion behind the group commit, whose thread (store-sync.c) syncs the journal.
 *
 * The checkpoint (store_maintain()): rotate the journal so that its records up to now are in
 * sealed, immutable segments, and hand their range to a thread (store-checkpoint-job.c). The
 * thread reads them with wal_segment_read() (never the table, which the event loop keeps
 * changing) in one or more passes, each taking the records whose id.hi falls in one slice of
 * the id space (so each pass holds at most about checkpoint_pass_records records and writes
 * one contiguous key range of data.mdb), and checkpoint_write()s each pass; only the last pass
 * records the lsn the checkpoint covers (checkpoint.h: a record is a whole state, so counters
 * checkpointed newer than the recorded lsn are set right again by the replay). Then a bounded
 * checkpoint_expire(). The event loop reaps the thread (an atomic flag, then pthread_join())
 * and deletes the covered segments with wal_release(). While a thread runs, the Checkpoint
 * is the thread's: the event loop uses the stats it cached at the last reap.
 */

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "snapshot.h"
#include "store-checkpoint-job.h"
#include "store-internal.h"
#include "store-sync.h"
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
        4096 /* hits the batch buffers hold from the start (the daemon's BATCH_HITS_MAX) */

_Static_assert(STORE_ACTOR_INLINE_MAX >= HASH128_SIZE,
               "a hashed actor must not be longer than an inline one");

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

static int buffers_reserve(Store *s, size_t n) {
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

_Static_assert((int) ALGORITHM_FIXED_WINDOW == (int) COUNTER_FIXED_WINDOW &&
                       (int) ALGORITHM_SLIDING_WINDOW == (int) COUNTER_SLIDING_WINDOW &&
                       (int) ALGORITHM_TOKEN_BUCKET == (int) COUNTER_TOKEN_BUCKET,
               "a counter's tag is its rule's algorithm");

/* Puts the table back as it was before hits [from, to) of the batch, newest first. */
static void undo_range(Store *s, size_t from, size_t to) {
        for (size_t i = to; i-- > from;) {
                const Undo *u = s->undo + i;
                TableEntry *e;

                if (u->absent)
                        continue;
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

static void undo_hits(Store *s, size_t n_undo) {
        undo_range(s, 0, n_undo);
}

/* After a failed sync: journals the undone states after the batch's, so that a replay of the
 * journal ends as the table is. Best effort: the sync failed already. */
static void undo_journal(Store *s, size_t n_undo) {
        size_t m = 0;

        for (size_t i = n_undo; i-- > 0;)
                if (!s->undo[i].absent)
                        s->records[m++] = (CounterRecord){
                                .id = s->undo[i].id,
                                .algorithm = s->undo[i].algorithm,
                                .state = s->undo[i].created ? (CounterState){ 0, 0 } : s->undo[i].state,
                        };
        (void) wal_append(s->wal, s->records, m);
}

/* Applies hit i of the batch to its counter: the table entry, the undo record, the outputs,
 * and the journal record if it changed something (appended at s->records[*m]). */
static int apply_hit(Store *s, StoreHit *h, size_t i, size_t *m, uint64_t batch_usec) {
        uint64_t now_usec = h->at_usec ? h->at_usec : batch_usec;
        AlgoParams fixed;
        const AlgoParams *p = h->algo;
        TableEntry *e = NULL;
        AlgoState st = { 0, 0 };
        int r;

        if (!p) {
                /* divvy's fixed window: algo_apply() reads only its credit_limit and
                 * reset_seconds, nothing algo_params_prepare() derives */
                fixed = (AlgoParams){ .algorithm = ALGORITHM_FIXED_WINDOW,
                                      .credit_limit = h->credit_limit,
                                      .reset_seconds = h->reset_seconds };
                p = &fixed;
        }

        if (h->op == ALGO_TAKE || h->op == ALGO_CHARGE) {
                r = table_put(s->table, s->ids[i], &e);
                if (r < 0)
                        return r;
        } else
                r = table_get(s->table, s->ids[i], &e) < 0 ? 0 : 2; /* 2: found, created nothing */
        if (!e) {
                s->undo[i] = (Undo){ .id = s->ids[i], .absent = true };
        } else {
                s->undo[i] = (Undo){
                        .id = s->ids[i],
                        .state = table_entry_state(e),
                        .algorithm = (uint8_t) table_entry_algorithm(e),
                        .created = r == 1,
                };
                /* a fresh entry, or another algorithm's counter (its rule changed): absent */
                if (r != 1 && table_entry_algorithm(e) == (CounterAlgorithm) p->algorithm) {
                        CounterState cs = table_entry_state(e);
                        st = (AlgoState){ .w0 = cs.w0, .w1 = cs.w1 };
                }
        }
        h->error = 0;

        if (h->op == ALGO_RESET) {
                /* credit: a live counter of this algorithm was deleted; another's goes too */
                algo_apply(p, ALGO_RESET, 0, now_usec, &st, &h->res);
                h->res.write = e != NULL;
                if (!e)
                        return 0;
                (void) table_delete(s->table, s->ids[i]);
                s->records[(*m)++] = (CounterRecord){ .id = s->ids[i], .algorithm = (uint8_t) p->algorithm };
                return 0;
        }

        algo_apply(p, h->op, h->count, now_usec, &st, &h->res);
        if (!h->res.write) {
                if (r == 1) {
                        /* created for nothing (e.g. a TAKE above the capacity) */
                        (void) table_delete(s->table, s->ids[i]);
                        s->undo[i].absent = true;
                }
                return 0;
        }
        if (st.w0 > TABLE_W0_MAX)
                st.w0 = TABLE_W0_MAX;
        table_entry_set_algorithm(e, (CounterAlgorithm) p->algorithm);
        table_entry_set_state(e, (CounterState){ .w0 = st.w0, .w1 = st.w1 });
        s->records[(*m)++] = (CounterRecord){ .id = s->ids[i],
                                              .algorithm = (uint8_t) p->algorithm,
                                              .state = { .w0 = st.w0, .w1 = st.w1 } };
        return 0;
}

/* store_apply()'s sync (sync=always): the journal's, then the test hook's (StoreOptions'
 * journal_sync, which can make it fail). */
static int apply_sync(Store *s) {
        int fd, r;

        r = wal_sync(s->wal);
        if (r < 0 || !s->opts.journal_sync)
                return r;
        wal_current(s->wal, &fd, NULL, NULL);
        return s->opts.journal_sync(fd);
}

/* Sets h's outputs to the failure r. */
static void hit_fail(StoreHit *h, int r) {
        h->error = r;
        h->res = (AlgoResult){ .allowed = false };
}

/* Hit i could not get a new counter (r: -EDQUOT, -ENOMEM): it fails with its all-or-nothing
 * group, which starts at group_start (the group's earlier hits are undone, its later ones are
 * not applied); the rest of the batch goes on. Returns the index of the group's last hit. */
static size_t fail_group(Store *s, StoreHit *hits, size_t n, size_t i, size_t group_start, int r) {
        size_t from = hits[i].group != 0 ? group_start : i, to = i + 1;

        if (hits[i].group != 0)
                while (to < n && hits[to].group == hits[i].group)
                        to++;
        undo_range(s, from, i);
        for (size_t j = from; j < to; j++) {
                s->undo[j] = (Undo){ .absent = true }; /* undone, or never applied */
                hit_fail(hits + j, r);
        }
        if (r == -EDQUOT)
                s->refused_limit++;
        else
                s->refused_memory++;
        return to - 1;
}

/* store_apply() without its sync when sync is false (the group commit's). Sets *ret_records to
 * the records journaled. */
static int apply_hits(Store *s, StoreHit *hits, size_t n, uint64_t now_usec, bool sync,
                      size_t *ret_records) {
        uint8_t key[STORE_KEY_MAX];
        size_t m = 0, i, group_start = 0, group_m = 0;
        bool group_ok = true;
        int r = 0;

        *ret_records = 0;
        if (!s || (!hits && n > 0))
                return -EINVAL;
        if (n == 0)
                return 0;
        /* the hits are the caller's contract (store.h): not checked here */
        r = buffers_reserve(s, n);
        if (r < 0)
                goto fail;

        for (i = 0; i < n; i++) {
                s->ids[i] = counter_id_from_key(s->id_key, key, counter_key(hits + i, key));
                table_prefetch(s->table, s->ids[i]);
        }

        for (i = 0; i < n; i++) {
                StoreHit *h = hits + i;

                if (h->group != 0 && (i == 0 || hits[i - 1].group != h->group)) {
                        group_start = i;
                        group_m = m;
                        group_ok = true;
                }
                r = apply_hit(s, h, i, &m, now_usec);
                if (r == -EDQUOT || r == -ENOMEM) {
                        /* only the request that needed the counter fails: its records, if
                         * any, are its group's, the ones after group_m */
                        if (h->group != 0)
                                m = group_m;
                        i = fail_group(s, hits, n, i, group_start, r);
                        r = 0;
                        continue;
                }
                if (r < 0) {
                        undo_hits(s, i);
                        goto fail;
                }
                if (h->group == 0)
                        continue;
                group_ok = group_ok && h->res.allowed;
                if (!group_ok && (i + 1 == n || hits[i + 1].group != h->group)) {
                        /* all or nothing: one was denied, so none is applied */
                        undo_range(s, group_start, i + 1);
                        for (size_t j = group_start; j <= i; j++)
                                s->undo[j].absent = true; /* undone already */
                        m = group_m;
                }
        }

        if (m > 0) {
                r = wal_append(s->wal, s->records, m);
                if (r < 0) {
                        undo_hits(s, n);
                        goto fail;
                }
                if (sync && s->opts.sync == STORE_SYNC_ALWAYS) {
                        r = apply_sync(s);
                        if (r < 0) {
                                undo_hits(s, n);
                                undo_journal(s, n);
                                goto fail;
                        }
                }
        }
        *ret_records = m;
        return 0;

fail:
        for (i = 0; i < n; i++)
                hit_fail(hits + i, r);
        return r;
}

/* While a snapshot's thread copies the table (job_snapshot), every change of the table is
 * made under table_lock; otherwise the event loop is the table's only user. */
static void table_lock(Store *s) {
        if (s->job_snapshot)
                pthread_mutex_lock(&s->table_lock);
}

static void table_unlock(Store *s) {
        if (s->job_snapshot)
                pthread_mutex_unlock(&s->table_lock);
}

/* apply_hits() under the table's lock. */
static int apply_hits_locked(Store *s, StoreHit *hits, size_t n, uint64_t now_usec, bool sync,
                             size_t *ret_records) {
        int r;

        if (!s)
                return -EINVAL;
        table_lock(s);
        r = apply_hits(s, hits, n, now_usec, sync, ret_records);
        table_unlock(s);
        return r;
}

int store_apply(Store *s, StoreHit *hits, size_t n, uint64_t now_usec) {
        size_t m;
        int r;

        r = apply_hits_locked(s, hits, n, now_usec, true, &m);
        store_commit_refresh(s);
        return r;
}

/* ---- the group commit's side of a batch (the thread: store-sync.c) ---- */

static int pending_reserve(Store *s) {
        Pending *p;
        size_t cap;

        if (s->pending_n < s->pending_cap)
                return 0;
        cap = s->pending_cap ? s->pending_cap * 2 : 16;
        p = calloc(cap, sizeof *p);
        if (!p)
                return -ENOMEM;
        for (size_t i = 0; i < s->pending_n; i++)
                p[i] = s->pending[(s->pending_head + i) % s->pending_cap];
        free(s->pending);
        s->pending = p;
        s->pending_cap = cap;
        s->pending_head = 0;
        return 0;
}

/* sync=always: applies and journals the batch, queues its completion behind the sync that
 * covers it, and wakes the thread. */
static int submit_always(Store *s, StoreHit *hits, size_t n, uint64_t now_usec, StoreDoneFunc done,
                         void *userdata) {
        uint64_t seq, last;
        bool wake = false;
        size_t m;
        int fd, r;

        r = pending_reserve(s);
        if (r < 0)
                return r;
        r = apply_hits_locked(s, hits, n, now_usec, false, &m);
        if (r < 0 || m == 0) {
                /* nothing journaled (an error, or only denied hits): nothing to wait for */
                if (done)
                        done(userdata, r);
                return 0;
        }
        wal_current(s->wal, &fd, &seq, &last);
        s->pending[(s->pending_head + s->pending_n++) % s->pending_cap] =
                (Pending){ .done = done, .userdata = userdata, .lsn = last };

        pthread_mutex_lock(&s->commit_lock);
        if (seq != s->commit_seq || s->commit_fd < 0)
                store_commit_rotated(s, fd, seq, last);
        else if (last > s->commit_want) {
                s->commit_want = last;
                wake = !s->commit_busy; /* a busy thread looks again when its sync returns */
        }
        pthread_mutex_unlock(&s->commit_lock);
        /* Signalled after the unlock, so that the thread, woken on the other CPU, does not find
         * the lock still held and sleep again on it (+7 % HITs/s with --sync=always at 16 x 16 in
         * 6 interleaved pairs). Safe: it waits in a loop that checks commit_want under the lock. */
        if (wake)
                pthread_cond_signal(&s->commit_wake);
        return 0;
}

int store_submit(Store *s, StoreHit *hits, size_t n, uint64_t now_usec, StoreDoneFunc done, void *userdata) {
        int r;

        if (s && s->committer)
                return submit_always(s, hits, n, now_usec, done, userdata);
        r = store_apply(s, hits, n, now_usec);

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
        size_t deleted = 0, examined;

        if (!s)
                return -EINVAL;
        table_lock(s);
        examined = table_expire_step(s->table, now_usec, max_slots, &deleted);
        if (table_migrating(s->table))
                (void) table_migrate_step(s->table, max_slots);
        table_unlock(s);
        s->swept_total += deleted;
        if (ret_deleted)
                *ret_deleted = deleted;
        /* More soon only in the middle of a pass: a step that reached the end of the table has
         * seen every counter, and whatever expires from now on waits for the next pass. Were
         * it otherwise, counters that live for less than a step's gap (a token bucket refilled
         * within a millisecond) would keep the sweeper busy, and every hit after a deletion
         * would insert its counter anew. A migration in progress, and the pass over the new
         * array after it, are the middle of a pass whatever the step deleted: a shrink starts
         * once 3/4 of the table is swept, its first steps go over the part of the old array
         * already swept, empty, and the new array begins with the survivors of that part; a
         * wait of an interval after each step that found nothing there left the rest of the
         * expired counters, and both arrays, for one interval per max_slots slots. */
        return (deleted > 0 && examined == max_slots) || table_expire_unfinished(s->table);
}

/* A checkpoint failed, or could not start: the next attempt after 1 s, then 2, 4, ... up to
 * STORE_CHECKPOINT_RETRY_MAX_USEC, until one succeeds. */
static void checkpoint_backoff(Store *s) {
        s->ckpt_failures++;
        s->backoff_usec = s->backoff_usec ? s->backoff_usec * 2 : STORE_CHECKPOINT_RETRY_MIN_USEC;
        if (s->backoff_usec > STORE_CHECKPOINT_RETRY_MAX_USEC)
                s->backoff_usec = STORE_CHECKPOINT_RETRY_MAX_USEC;
        s->retry_usec = clock_usec(CLOCK_MONOTONIC) + s->backoff_usec;
}

/* Words damaged journal records for the operator: where the first is, how many there are,
 * what was lost (what) and what to do. */
static void damage_describe(Store *s, const WalDamage *d, const char *what) {
        char first[WAL_SEGMENT_NAME_MAX], last[WAL_SEGMENT_NAME_MAX + 16] = "";

        if (d->segments > 1) {
                char name[WAL_SEGMENT_NAME_MAX];

                snprintf(last, sizeof last, ", the last in %s", wal_segment_name(d->last_seq, name));
        }
        set_error(s->damage_error, sizeof s->damage_error,
                  "%s/%s: record %" PRIu64 " (lsn %" PRIu64 ") is damaged; %" PRIu64
                  " damaged journal record%s skipped in %" PRIu64
                  " segment%s%s %s. Check the disk, and copy "
                  "the wal-*.divvyd files aside before the next checkpoint deletes them",
                  s->opts.path, wal_segment_name(d->first_seq, first), d->first_index, d->first_lsn,
                  d->records, d->records == 1 ? "" : "s", d->segments, d->segments == 1 ? "" : "s", last,
                  what);
}

/* Joins a job that is done (or, with wait, waits for it) and takes its result. Returns 1 if
 * one was reaped, 0 if none. */
static int job_reap(Store *s, bool wait) {
        CheckpointJob *j = &s->job;
        int r;

        if (!s->job_running)
                return 0;
        if (!wait && !__atomic_load_n(&j->done, __ATOMIC_ACQUIRE))
                return 0;
        (void) pthread_join(s->thread, NULL);
        s->job_running = false;
        s->job_snapshot = false;
        if (j->stats_ok)
                s->ckpt_stats = j->stats;
        if (j->result >= 0 && j->damage.records > 0) {
                s->damaged_records += j->damage.records;
                damage_describe(s, &j->damage,
                                "by a checkpoint of the journal written since start: the changes they held "
                                "are not in the checkpoint (the counters in memory are right until a "
                                "restart)");
        }
        if (j->result >= 0) {
                r = wal_release(s->wal, j->last_seq);
                if (r < 0 && r != -EINVAL) {
                        /* the segments stay: replay skips what the checkpoint covers */
                        set_error(s->ckpt_error, sizeof s->ckpt_error,
                                  "checkpoint written, but deleting the journal it covers failed: %s",
                                  wal_error(s->wal));
                        s->release_seq = j->last_seq;
                } else {
                        s->ckpt_error[0] = 0;
                        s->release_seq = 0;
                }
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
        checkpoint_backoff(s);
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
        s->job = (CheckpointJob){
                .checkpoint = s->checkpoint,
                .dir = s->opts.path,
                .first_seq = first,
                .last_seq = last,
                .last_lsn = lsn,
                .now_usec = now_usec,
                .pass_records = pass_records > 0 ? pass_records : s->opts.checkpoint_pass_records,
                .deadline_usec = deadline_usec,
                .damage_from_seq = s->opened_seq + 1,
        };
        /* A snapshot copies the table as it is now, which holds the journal up to lsn: the
         * rotation above sealed every record appended so far. */
        s->job_snapshot = s->snapshot;
        r = -pthread_create(&s->thread, NULL, s->snapshot ? snapshot_job_thread : checkpoint_job_thread,
                            s->snapshot ? (void *) s : (void *) &s->job);
        if (r < 0) {
                s->job_snapshot = false;
                return r;
        }
        s->job_running = true;
        return 1;
}

/* Journal records that start a checkpoint: checkpoint_journal_max's worth if it was given;
 * by default STORE_CHECKPOINT_JOURNAL_MAX_DEFAULT's, or STORE_CHECKPOINT_RECORDS_PER_COUNTER
 * per counter of data.mdb (with snapshots: one per STORE_SNAPSHOT_COUNTERS_PER_RECORD counters of
 * the snapshot) if that is more, up to STORE_CHECKPOINT_JOURNAL_CAP_DEFAULT's. A
 * checkpoint of changes spread over many counters rewrites most leaf pages of data.mdb
 * whatever the number of records it covers, so what it writes per HIT falls as the journal
 * it covers grows with data.mdb. data.mdb's counters, not the table's: while counters are
 * new (a pre-fill), checkpoints stay frequent and cheap, and store_close()'s last one small. */
static uint64_t checkpoint_threshold(const Store *s) {
        uint64_t min = STORE_CHECKPOINT_JOURNAL_MAX_DEFAULT / WAL_RECORD_SIZE,
                 cap = STORE_CHECKPOINT_JOURNAL_CAP_DEFAULT / WAL_RECORD_SIZE, by_counters;

        if (s->opts.checkpoint_journal_max > 0)
                return (s->opts.checkpoint_journal_max + WAL_RECORD_SIZE - 1) / WAL_RECORD_SIZE;
        by_counters = s->snapshot ? s->ckpt_stats.counters / STORE_SNAPSHOT_COUNTERS_PER_RECORD
                                  : s->ckpt_stats.counters * STORE_CHECKPOINT_RECORDS_PER_COUNTER;
        return by_counters < min ? min : by_counters > cap ? cap : by_counters;
}

/* Journal records not yet covered by a checkpoint. */
static uint64_t journal_pending(const Store *s) {
        WalStats ws;

        if (wal_get_stats(s->wal, &ws) < 0)
                return 0;
        return ws.next_lsn > s->covered_lsn + 1 ? ws.next_lsn - s->covered_lsn - 1 : 0;
}

/* Preallocates the journal's next segment (and its current one, if it opened on a full disk),
 * keeping the reason of a failure in journal_error until an attempt succeeds. */
static void journal_prepare(Store *s) {
        if (wal_prepare(s->wal) < 0)
                set_error(s->journal_error, sizeof s->journal_error, "%s", wal_error(s->wal));
        else
                s->journal_error[0] = 0;
}

const char *store_journal_error(const Store *s) {
        return s ? s->journal_error : "";
}

int store_maintain(Store *s, uint64_t now_usec) {
        uint64_t now, pending;
        int reaped, r;

        if (!s)
                return -EINVAL;
        if (now_usec > 0)
                s->clock_usec = now_usec; /* the latest, not the largest: the clock may step back */
        reaped = job_reap(s, false);
        if (s->job_running)
                return reaped;
        /* after the reap, which sets last_checkpoint_usec: read before, the interval since it
         * was negative, i.e. huge, and a checkpoint started again at once after each one */
        now = clock_usec(CLOCK_MONOTONIC);
        if (s->release_seq > 0 && wal_release(s->wal, s->release_seq) >= 0) {
                /* The covered segments are gone at last: on an idle daemon no checkpoint would
                 * come to clear the error, and STATUS said "failing" for good. Another failure
                 * since (backoff_usec) keeps its own error. */
                s->release_seq = 0;
                if (s->backoff_usec == 0)
                        s->ckpt_error[0] = 0;
        }
        pending = journal_pending(s);
        if (pending > 0 && now >= s->retry_usec &&
            (pending >= checkpoint_threshold(s) ||
             now - s->last_checkpoint_usec >= s->opts.checkpoint_interval_usec)) {
                r = job_start(s, now_usec, 0, 0);
                store_commit_refresh(s);
                if (r < 0) {
                        set_error(s->ckpt_error, sizeof s->ckpt_error, "cannot start a checkpoint: %s",
                                  wal_error(s->wal)[0] ? wal_error(s->wal) : strerror(-r));
                        /* backing off as after a failed checkpoint: a full disk is not retried,
                         * counted and a segment fallocate()d every second for ever */
                        checkpoint_backoff(s);
                        return r;
                }
                if (r > 0)
                        return reaped;
        }
        journal_prepare(s); /* a failure shows at the next rotation, and in journal_error */
        return reaped;
}

int store_checkpoint(Store *s, uint64_t now_usec) {
        int r;

        if (!s)
                return -EINVAL;
        if (now_usec > 0)
                s->clock_usec = now_usec; /* the latest, not the largest: the clock may step back */
        (void) job_reap(s, true);
        if (journal_pending(s) == 0)
                return 0;
        r = job_start(s, now_usec, 0, 0);
        store_commit_refresh(s);
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
                .syncs = ws.syncs + (s->committer ? __atomic_load_n(&s->commit_syncs, __ATOMIC_RELAXED) : 0),
                .sync_usec = ws.sync_usec +
                             (s->committer ? __atomic_load_n(&s->commit_sync_usec, __ATOMIC_RELAXED) : 0),
                .journal_bytes = ws.bytes,
                .journal_segments = ws.segments,
                .journal_records = ws.records,
                .checkpoint_counters = s->ckpt_stats.counters,
                .checkpoint_age_usec = clock_usec(CLOCK_MONOTONIC) - s->last_checkpoint_usec,
                .checkpoint_duration_usec = s->ckpt_duration_usec,
                .checkpoint_failures = s->ckpt_failures,
                .counters_max = s->opts.max_counters,
                .refused_limit = s->refused_limit,
                .refused_memory = s->refused_memory,
                .checkpoint_running = s->job_running,
                .checkpoint_failing = s->ckpt_error[0] != 0,
                .journal_damaged_records = s->damaged_records,
                .journal_failing = s->journal_error[0] != 0,
                .journal_ready = ws.current_ready,
        };
        return 0;
}

const char *store_journal_damage(const Store *s) {
        return s ? s->damage_error : "";
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
         * times), and starting would silently lose what they counted. Damaged records the
         * journal skipped before it stand in their place (they are reported). */
        if (!rp->started) {
                WalDamage d;

                wal_replay_damage(rp->store->wal, &d);
                if (pos->lsn - d.records != rp->next_lsn)
                        return -ESPIPE;
        }
        rp->started = true;
        if (r->state.w0 == 0 || r->state.w0 <= rp->now_usec) {
                (void) table_delete(rp->store->table, r->id); /* deleted, or expired since */
                return 0;
        }
        return load_record(r, rp->store);
}

/* Makes the table, sized for `initial` counters, and loads the checkpoint's live counters into
 * it (a table there already is freed first). */
static int load_table(Store *s, size_t initial, uint64_t now, char *errbuf, size_t errbuf_size) {
        int r;

        s->table = table_free(s->table);
        r = table_new(initial, &s->table);
        if (r < 0) {
                set_error(errbuf, errbuf_size, "cannot allocate the counter table: %s", strerror(-r));
                return r;
        }
        table_set_memory_max(s->table, s->opts.table_memory_max);
        if (checkpoint_snapshot(s->checkpoint)) {
                r = snapshot_load(s->opts.path, now, load_record, s, NULL, errbuf, errbuf_size);
                if (r < 0 && (!errbuf || !errbuf[0]))
                        set_error(errbuf, errbuf_size, "%s/" SNAPSHOT_NAME ": cannot load the counters: %s",
                                  s->opts.path, strerror(-r));
                return r;
        }
        r = checkpoint_load(s->checkpoint, now, load_record, s);
        if (r < 0)
                set_error(errbuf, errbuf_size, "%s/data.mdb: cannot load the counters: %s", s->opts.path,
                          strerror(-r));
        return r;
}

/* The replay's census: a HyperLogLog estimate of the distinct live counters the journal adds
 * to the table. Ids are a keyed hash, uniform, but the ones not in the table may not be
 * uniform in id.hi (a checkpoint that stopped after some of its passes wrote slices of the
 * id.hi range): so id.lo alone, its low bits picking the register, the others giving the rank.
 * 4 KiB; standard error 1.04 / sqrt(4096), 1.6 %. */
#define CENSUS_BITS 12

typedef struct Census {
        Table *table;
        uint64_t now_usec;
        uint8_t reg[1U << CENSUS_BITS];
} Census;

static int census_record(const CounterRecord *r, const WalPosition *pos, void *userdata) {
        Census *c = userdata;
        TableEntry *e;
        uint64_t w = r->id.lo >> CENSUS_BITS;
        uint8_t rank;

        (void) pos;
        if (r->state.w0 == 0 || r->state.w0 <= c->now_usec || table_get(c->table, r->id, &e) >= 0)
                return 0; /* deleted or expired (the replay drops it), or in the checkpoint */
        rank = w == 0 ? 64 - CENSUS_BITS + 1 : (uint8_t) (__builtin_clzll(w) - CENSUS_BITS + 1);
        if (rank > c->reg[r->id.lo & ((1U << CENSUS_BITS) - 1)])
                c->reg[r->id.lo & ((1U << CENSUS_BITS) - 1)] = rank;
        return 0;
}

/* ln(x) for x > 0, without libm: x = y * 2^k with y in [1, 2), ln(y) = 2 atanh((y - 1) / (y + 1)),
 * whose series converges fast there (|t| <= 1/3). */
static double census_ln(double x) {
        double t, t2, p, sum = 0;
        int k = 0;

        for (; x >= 2; x /= 2)
                k++;
        for (; x < 1; x *= 2)
                k--;
        t = (x - 1) / (x + 1);
        t2 = t * t;
        p = t;
        for (int i = 1; i < 40; i += 2, p *= t2)
                sum += p / i;
        return 2 * sum + k * 0.69314718055994531;
}

static uint64_t census_estimate(const Census *c) {
        const double m = 1U << CENSUS_BITS;
        double sum = 0, e;
        size_t zeros = 0;

        for (size_t i = 0; i < sizeof c->reg; i++) {
                sum += 1.0 / (double) (UINT64_C(1) << (c->reg[i] > 63 ? 63 : c->reg[i]));
                zeros += c->reg[i] == 0;
        }
        e = 0.7213 / (1 + 1.079 / m) * m * m / sum;
        if (e <= 2.5 * m && zeros > 0)
                e = m * census_ln(m / (double) zeros); /* small counts: linear counting */
        return (uint64_t) e;
}

/* Start-up needs no more memory for the table than the running process held: a replay that
 * added counters to a table sized for the checkpoint's would grow it, holding both arrays at
 * once (2.5 times the checkpoint's table), where the running process may have held one array
 * for the same counters. So when the journal adds more counters than the table has room for,
 * they are counted first (census_record(), one read of the journal more), and the table is made
 * again at its final size (the checkpoint loaded again) before the replay: one array, sized for
 * what the replay ends with, plus a margin of 3 standard errors of the estimate. */
static int replay_size_table(Store *s, uint64_t now, char *errbuf, size_t errbuf_size) {
        Census *c;
        uint64_t add, need;
        int r;

        /* Not even one new counter per record would make it grow: nothing to count. */
        if ((table_count(s->table) + journal_pending(s)) * 4 <= (uint64_t) table_capacity(s->table) * 3)
                return 0;
        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        *c = (Census){ .table = s->table, .now_usec = now };
        r = wal_replay(s->wal, s->covered_lsn, census_record, c);
        add = census_estimate(c);
        free(c);
        if (r < 0)
                return 0; /* the replay itself says what is wrong */
        add += add / 20;
        need = table_count(s->table) + add;
        if (need * 4 <= (uint64_t) table_capacity(s->table) * 3 || need > SIZE_MAX / 2)
                return 0;
        return load_table(s, (size_t) need, now, errbuf, errbuf_size);
}

/* Under an address-space limit (RLIMIT_AS), the next start's replay maps one journal segment
 * at a time on top of what this process holds while serving (the journal's current segment and
 * its spare are mapped again at that start): so that a restart after a crash under the same
 * limit finds room for it, the serving process keeps that much address space reserved (no
 * memory: PROT_NONE, MAP_NORESERVE), mapped once the replay is over and unmapped for the last
 * checkpoint of store_finish() (the process ends next). Without a limit there is
 * nothing to keep. Best effort: at the limit already, it serves without (the table then has
 * that much more room, and a restart may need a higher limit). */
static void replay_reserve(Store *s) {
        struct rlimit rl;
        void *p;

        if (getrlimit(RLIMIT_AS, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
                return;
        s->reserve_bytes =
                s->opts.journal_segment_size ? s->opts.journal_segment_size : WAL_SEGMENT_SIZE_DEFAULT;
        p = mmap(NULL, s->reserve_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
                s->reserve_bytes = 0;
                return;
        }
        s->reserve = p;
}

/* Format version 3: counters.snap is the checkpoint, its lsn the one covered. */
static int open_snapshot_info(Store *s, char *errbuf, size_t errbuf_size) {
        SnapshotInfo info;
        int r;

        r = snapshot_read_info(s->opts.path, &info, errbuf, errbuf_size);
        if (r == -ENOENT) {
                set_error(errbuf, errbuf_size,
                          "%s/" SNAPSHOT_NAME
                          " is missing: data.mdb (format version 3) says the counters are "
                          "there; restore the store directory from a copy made while divvyd was stopped",
                          s->opts.path);
                return -EBADMSG;
        }
        if (r < 0)
                return r;
        if (info.lsn < s->covered_lsn) {
                set_error(errbuf, errbuf_size,
                          "%s/" SNAPSHOT_NAME " (record %" PRIu64 ") is older than data.mdb (record %" PRIu64
                          "): they are from different times; restore them together, as copied while divvyd "
                          "was stopped",
                          s->opts.path, info.lsn, s->covered_lsn);
                return -EBADMSG;
        }
        s->covered_lsn = info.lsn;
        s->ckpt_stats.counters = info.count;
        s->ckpt_stats.journal_seq = info.lsn;
        s->ckpt_stats.file_size =
                SNAPSHOT_HEADER_SIZE + info.count * SNAPSHOT_RECORD_SIZE + SNAPSHOT_TRAILER_SIZE;
        return 0;
}

int store_open(const StoreOptions *opts, Store **ret, char *errbuf, size_t errbuf_size) {
        WalDamage damage;
        CheckpointStats cs;
        struct rlimit rl;
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
        s->commit_fd = s->commit_efd = -1;
        (void) pthread_mutex_init(&s->table_lock, NULL);
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
        snapshot_remove_tmp(s->opts.path); /* a snapshot a crash interrupted */
        s->snapshot = s->opts.snapshot || checkpoint_snapshot(s->checkpoint);
        if (checkpoint_snapshot(s->checkpoint)) {
                r = open_snapshot_info(s, errbuf, errbuf_size);
                if (r < 0)
                        goto fail;
        }

        r = load_table(s, s->ckpt_stats.counters, now, errbuf, errbuf_size);
        if (r < 0)
                goto fail;

        r = wal_open(s->opts.path,
                     &(WalOptions){ .segment_size = s->opts.journal_segment_size,
                                    .first_lsn = s->covered_lsn + 1,
                                    .allocate = s->opts.journal_allocate,
                                    .write_appends = s->opts.sync == STORE_SYNC_ALWAYS },
                     &s->wal, errbuf, errbuf_size);
        if (r < 0)
                goto fail;
        if (wal_error(s->wal)[0]) /* opened on a full disk, without a segment to append to */
                set_error(s->journal_error, sizeof s->journal_error, "%s", wal_error(s->wal));
        r = replay_size_table(s, now, errbuf, errbuf_size);
        if (r < 0)
                goto fail;
        rp = (Replay){ .store = s, .now_usec = now, .next_lsn = s->covered_lsn + 1 };
        r = wal_replay(s->wal, s->covered_lsn, replay_record, &rp);
        wal_replay_damage(s->wal, &damage);
        if (r >= 0 && !rp.started) {
                /* Nothing replayed (a clean stop checkpoints the whole journal): the journal's
                 * next record must still be the one after the checkpoint's (or damaged ones). */
                r = wal_get_stats(s->wal, &ws);
                if (r >= 0 && ws.next_lsn - damage.records > s->covered_lsn + 1)
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
        if (r == -ENOMEM && getrlimit(RLIMIT_AS, &rl) >= 0 && rl.rlim_cur != RLIM_INFINITY) {
                set_error(errbuf, errbuf_size,
                          "%s: cannot replay the journal: %s under an address-space limit (RLIMIT_AS, "
                          "LimitAS=) of %" PRIu64 " MiB: the replay holds the counters and one "
                          "journal segment (--journal-segment-size) at a time; raise the limit",
                          s->opts.path, strerror(-r), (uint64_t) rl.rlim_cur >> 20);
                goto fail;
        }
        if (r < 0) {
                set_error(errbuf, errbuf_size, "%s: cannot replay the journal: %s", s->opts.path,
                          wal_error(s->wal)[0] ? wal_error(s->wal) : strerror(-r));
                goto fail;
        }
        if (damage.records > 0) {
                s->damaged_records = damage.records;
                damage_describe(s, &damage,
                                "at start: the changes they held are lost (their counters keep the state of "
                                "their previous record), every valid record was replayed");
        }
        (void) wal_sealed(s->wal, NULL, &s->opened_seq);
        /* The cap applies to the counters hits create from now on: what was loaded was
         * acknowledged, and stays whatever the cap. */
        table_set_count_max(s->table,
                            s->opts.max_counters > SIZE_MAX ? SIZE_MAX : (size_t) s->opts.max_counters);
        replay_reserve(s);
        r = buffers_reserve(s, STORE_BATCH_INITIAL);
        if (r < 0)
                goto fail;
        if (s->opts.sync == STORE_SYNC_ALWAYS) {
                r = store_commit_start(s);
                if (r < 0) {
                        set_error(errbuf, errbuf_size, "cannot start the journal's sync thread: %s",
                                  strerror(-r));
                        goto fail;
                }
        }
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
static int close_checkpoint(Store *s) {
        uint64_t deadline = clock_usec(CLOCK_MONOTONIC) + s->opts.close_checkpoint_usec;
        size_t pass_records = s->opts.checkpoint_pass_records > STORE_CLOSE_PASS_RECORDS
                                      ? s->opts.checkpoint_pass_records
                                      : STORE_CLOSE_PASS_RECORDS;
        int r;

        if (s->job_running)
                __atomic_store_n(&s->job.deadline_usec, deadline, __ATOMIC_RELAXED);
        (void) job_reap(s, true);
        if (s->opts.close_checkpoint_usec == STORE_CLOSE_CHECKPOINT_OFF || journal_pending(s) == 0)
                return 0;
        if (clock_usec(CLOCK_MONOTONIC) >= deadline) {
                set_error(s->ckpt_error, sizeof s->ckpt_error, "no time left for the last checkpoint");
                return -ETIMEDOUT;
        }
        /* Not the clock now but the latest one the store was given: an older one only keeps
         * expired counters for the next checkpoint (load skips them), a newer one than the hits
         * were answered at (a caller's own clock, in tests) would drop live ones. */
        /* Larger passes than while serving (each pass re-reads the whole journal): the
         * memory is no longer the table's neighbour's, the time is bounded. Without that
         * memory (an address-space limit), passes of the serving size. */
        for (;;) {
                r = job_start(s, s->clock_usec, deadline, pass_records);
                if (r <= 0) {
                        if (r < 0)
                                set_error(s->ckpt_error, sizeof s->ckpt_error,
                                          "cannot start the last checkpoint: %s",
                                          wal_error(s->wal)[0] ? wal_error(s->wal) : strerror(-r));
                        return r;
                }
                (void) job_reap(s, true);
                r = s->job.result;
                if (r != -ENOMEM || pass_records <= s->opts.checkpoint_pass_records ||
                    clock_usec(CLOCK_MONOTONIC) >= deadline)
                        return r < 0 ? r : 0;
                pass_records = s->opts.checkpoint_pass_records;
        }
}

int store_finish(Store *s) {
        int r = 0;

        if (!s)
                return -EINVAL;
        if (s->finished)
                return 0;
        store_commit_stop(s); /* every batch submitted is completed */
        if (s->reserve) {
                /* the next start's room, this process's last checkpoint's until it exits */
                (void) munmap(s->reserve, s->reserve_bytes);
                s->reserve = NULL;
        }
        if (s->opened)
                r = close_checkpoint(s);
        else if (s->wal)
                (void) job_reap(s, true);
        s->finished = true;
        return r;
}

Store *store_close(Store *s) {
        if (!s)
                return NULL;
        (void) store_finish(s);
        if (s->wal && s->opts.sync != STORE_SYNC_NONE)
                (void) wal_sync(s->wal);
        wal_close(s->wal);
        checkpoint_close(s->checkpoint);
        table_free(s->table);
        free(s->ids);
        free(s->records);
        free(s->undo);
        free((char *) s->opts.path);
        (void) pthread_mutex_destroy(&s->table_lock);
        free(s);
        return NULL;
}
