/* SPDX-License-Identifier: MIT */

/*
 * The snapshot checkpoint's thread (format version 3; STORE-DESIGN.md, "Checkpoints"). store.c
 * rotates the journal first, so that the table holds exactly the journal up to job.last_lsn
 * when the thread starts. The thread copies the table in chunks of at least
 * SNAPSHOT_CHUNK_SLOTS slots, each under table_lock (the event loop holds it around every
 * change of the table while the job runs), and writes them to counters.snap.tmp at
 * opts.snapshot_rate; the event loop goes on between chunks. A counter changed between chunks
 * may be copied in any state it had since last_lsn, or not at all, but its change is journaled
 * after last_lsn and the replay sets it right; one not changed is copied in its one state
 * (table_copy_chunk()'s chunk boundaries: such a counter cannot slip into a chunk already
 * copied). A migration of the table (a growth or a shrink) moves counters between arrays
 * without a journal record: the snapshot waits for one in progress before its first chunk and
 * gives up (retried like a failed checkpoint) when one starts after it.
 */

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "shared/clock.h"
#include "snapshot.h"
#include "store-internal.h"

#define SNAPSHOT_CHUNK_SLOTS                                                                                \
        4096 /* slots a chunk copies at least: 128 KiB of table, about 20-40 us under the lock */
#define SNAPSHOT_CHUNK_SLOTS_MAX                                                                            \
        65536 /* ... at most (a cluster longer than this ends the snapshot: at the table's 3/4              \
               * load bound it does not happen) */
#define SNAPSHOT_MIGRATION_WAIT_USEC (10ULL * 1000ULL) /* between looks at a migration in progress */
#define SNAPSHOT_MIGRATION_WAITS     1000              /* looks, at most (10 s) */

static bool past_deadline(CheckpointJob *j) {
        uint64_t d = __atomic_load_n(&j->deadline_usec, __ATOMIC_RELAXED);

        return d != 0 && clock_usec(CLOCK_MONOTONIC) >= d;
}

/* Copies the next chunk from *pos under the lock. Returns 1 if the copy is complete, 0 if not,
 * or -errno with j->error set. */
static int copy_chunk(Store *s, CheckpointJob *j, uint64_t *gen, bool first, size_t *pos, CounterRecord *buf,
                      size_t *ret_n) {
        size_t next, cap;
        int r;

        for (unsigned waits = 0;; waits++) {
                pthread_mutex_lock(&s->table_lock);
                if (!table_migrating(s->table))
                        break;
                pthread_mutex_unlock(&s->table_lock);
                if (!first || waits >= SNAPSHOT_MIGRATION_WAITS || past_deadline(j)) {
                        set_error(
                                j->error, sizeof j->error,
                                "the snapshot gave up: the counter table was resized while it was written");
                        return -EAGAIN;
                }
                (void) nanosleep(&(struct timespec){ .tv_nsec = SNAPSHOT_MIGRATION_WAIT_USEC * 1000 }, NULL);
        }
        if (first)
                *gen = table_generation(s->table);
        if (*gen != table_generation(s->table)) {
                pthread_mutex_unlock(&s->table_lock);
                set_error(j->error, sizeof j->error,
                          "the snapshot gave up: the counter table was resized while it was written");
                return -EAGAIN;
        }
        r = table_copy_chunk(s->table, *pos, SNAPSHOT_CHUNK_SLOTS, SNAPSHOT_CHUNK_SLOTS_MAX, j->now_usec,
                             buf, ret_n, &next);
        cap = table_capacity(s->table);
        pthread_mutex_unlock(&s->table_lock);
        if (r < 0) {
                set_error(j->error, sizeof j->error, "the snapshot gave up: %s",
                          r == -E2BIG ? "a cluster of the counter table is too long" : strerror(-r));
                return r;
        }
        *pos = next;
        return next >= cap;
}

static int snapshot_run(Store *s, CheckpointJob *j, uint64_t *ret_count) {
        SnapshotWriter *w = NULL;
        CounterRecord *buf;
        uint64_t gen = 0, expect;
        size_t pos = 0, n;
        bool first = true;
        int r;

        buf = malloc(SNAPSHOT_CHUNK_SLOTS_MAX * sizeof *buf);
        if (!buf)
                return -ENOMEM;
        pthread_mutex_lock(&s->table_lock);
        expect = table_count(s->table);
        pthread_mutex_unlock(&s->table_lock);
        r = snapshot_writer_new(j->dir, j->last_lsn, j->now_usec, expect,
                                __atomic_load_n(&j->deadline_usec, __ATOMIC_RELAXED) != 0 ? 0
                                : s->opts.snapshot_rate ? s->opts.snapshot_rate
                                                        : STORE_SNAPSHOT_RATE_DEFAULT,
                                s->opts.snapshot_hook, &w, j->error, sizeof j->error);
        if (r < 0)
                goto finish;
        for (;;) {
                int done;

                if (past_deadline(j)) {
                        set_error(j->error, sizeof j->error, "checkpoint stopped at its deadline");
                        r = -ETIMEDOUT;
                        goto finish;
                }
                done = copy_chunk(s, j, &gen, first, &pos, buf, &n);
                first = false;
                if (done < 0) {
                        r = done;
                        goto finish;
                }
                r = snapshot_writer_add(w, buf, n, j->error, sizeof j->error);
                if (r < 0)
                        goto finish;
                *ret_count += n;
                if (done)
                        break;
        }
        r = snapshot_writer_commit(w, j->error, sizeof j->error);
        w = NULL;
        if (r < 0)
                goto finish;
        if (!checkpoint_snapshot(j->checkpoint)) {
                /* the migration from version 2: from now on the snapshot is the checkpoint */
                r = checkpoint_adopt_snapshot(j->checkpoint, j->last_lsn);
                if (r < 0)
                        set_error(j->error, sizeof j->error,
                                  "%s/data.mdb: cannot make the store format version 3: %s", j->dir,
                                  strerror(-r));
        }
finish:
        snapshot_writer_abort(w);
        free(buf);
        return r;
}

void *snapshot_job_thread(void *store) {
        Store *s = store;
        CheckpointJob *j = &s->job;
        uint64_t start = clock_usec(CLOCK_MONOTONIC), count = 0;

        (void) setpriority(PRIO_PROCESS, (id_t) gettid(), STORE_CHECKPOINT_NICE); /* as the LMDB one */
        j->result = snapshot_run(s, j, &count);
        j->duration_usec = clock_usec(CLOCK_MONOTONIC) - start;
        (void) malloc_trim(0);
        j->stats_ok = checkpoint_get_stats(j->checkpoint, &j->stats) >= 0;
        if (j->result >= 0) {
                j->stats.counters = count;
                j->stats.file_size =
                        SNAPSHOT_HEADER_SIZE + count * SNAPSHOT_RECORD_SIZE + SNAPSHOT_TRAILER_SIZE;
        } else
                j->stats_ok = false;
        __atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
        return NULL;
}
