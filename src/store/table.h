/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * table.c: the resident counter table. Counters live in memory in one open-addressing
 * array of fixed 32-byte entries (linear probing, backward-shift deletion): no allocation
 * and no pointer per counter, no allocation on lookup.
 *
 * Entry layout (TableEntry, 32 bytes, two per cache line): counter.h's CounterRecord packed.
 *
 *   id       the full 128-bit CounterId. The home slot is fastrange(id.hi, capacity)
 *            ((id.hi * capacity) >> 64): monotonic in id.hi, so the array is nearly in
 *            counter_id_compare() order (apart from clusters and the wrap-around: a
 *            checkpoint's sort is cheap), and any capacity works, not only powers of two.
 *   w0_meta  bits 0..55: the state's w0 (counter.h: for every algorithm, the wall-clock time
 *            in usec from which the counter is the same as an absent one; 2^56 usec is the
 *            year 4253, so no time is lost; larger values are clamped); bits 56..59: the
 *            CounterAlgorithm; bit 61: deleted during a migration (old array only); bit 63:
 *            slot in use; bits 60 and 62 are zero. An all-zero entry is an empty slot, so
 *            fresh anonymous memory is an empty table.
 *   w1       the state's w1, the algorithm's own word, all 64 bits.
 *
 * The flags live in w0's spare top byte rather than in the id so that the table keeps whole
 * ids, the ones the journal and the checkpoint write. Read and write the state with
 * table_entry_state() and table_entry_set_state(), never through the fields.
 *
 * table_expire_step() deletes a counter once w0 <= now: counter.h's contract, the same for
 * every algorithm, is all the table knows about the state.
 *
 * Ids must be uniformly distributed and unpredictable to clients: a keyed hash under a SECRET
 * key. Someone who can compute ids can pick actors whose ids share a home slot and build long
 * clusters (hash flooding); hash128()'s key is in the source today.
 *
 * Memory: the array grows by 3/2 when an insert would make it more than 3/4 full, so it is
 * 1/2 .. 3/4 full as it grows: 32 / (1/2 .. 3/4) = 43 .. 64 bytes per live counter. When
 * expiry leaves it under 1/4 full it shrinks back to 1/2 full (never below the size
 * table_new() was asked for). During a migration the old array comes on top, given back in
 * 2 MiB steps as the migration passes it (at worst 43 + 64 bytes just after a growth starts).
 *
 * Growth without a pause: growing (or shrinking) allocates the new array and MIGRATES
 * incrementally. Every table_put() first moves at most TABLE_MIGRATE_SLOTS (16) slots of the
 * old array, table_expire_step() and table_migrate_step() at most their max_slots; each
 * moved entry costs one insertion into the new array. Lookups consult both arrays (the old
 * one only while the migration has not passed the id's cluster). New counters always go to
 * the new array; so that it cannot fill up before the migration is over (puts alone finish
 * it within old-capacity/16 puts), a growth starts at 3/4 load into an array 3/2 the size
 * (1/2 full, plus at most 1/16 * 2/3 = 1/24 of its size inserted during the migration) and a
 * shrink divides the size by at most 4 (1/2 full, plus at most 4/16 = 1/4: 3/4). Past 9/10,
 * which this bound makes unreachable, a migration would be finished at once. The only
 * allocation is the new array, once per migration, never per counter.
 *
 * Pointers to entries (from table_put(), table_get()) are valid until the
 * next call that may move entries: table_put(), table_delete(), table_expire_step(),
 * table_migrate_step(), table_free(). Setting the state and the algorithm through them is
 * the way to update a counter.
 */

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/counter.h"

typedef struct TableEntry {
        CounterId id;
        uint64_t w0_meta; /* w0 and the table's flags: use the accessors */
        uint64_t w1;
} TableEntry;

#define TABLE_ENTRY_SIZE 32 /* bytes: the layout above; checked by a static assertion */

#define TABLE_W0_MAX          ((UINT64_C(1) << 56) - 1) /* usec: largest w0 kept (year 4253) */
#define TABLE_ALGORITHM_SHIFT 56
#define TABLE_ALGORITHM_MASK  (UINT64_C(0xf) << TABLE_ALGORITHM_SHIFT)
#define TABLE_FLAG_DELETED    (UINT64_C(1) << 61)
#define TABLE_FLAG_USED       (UINT64_C(1) << 63)

static inline CounterState table_entry_state(const TableEntry *e) {
        return (CounterState){ .w0 = e->w0_meta & TABLE_W0_MAX, .w1 = e->w1 };
}

/* Sets the state, w0 clamped to TABLE_W0_MAX; keeps the algorithm and the flags. */
static inline void table_entry_set_state(TableEntry *e, CounterState s) {
        e->w0_meta = (e->w0_meta & ~TABLE_W0_MAX) | (s.w0 < TABLE_W0_MAX ? s.w0 : TABLE_W0_MAX);
        e->w1 = s.w1;
}

static inline CounterAlgorithm table_entry_algorithm(const TableEntry *e) {
        return (CounterAlgorithm) ((e->w0_meta & TABLE_ALGORITHM_MASK) >> TABLE_ALGORITHM_SHIFT);
}

static inline void table_entry_set_algorithm(TableEntry *e, CounterAlgorithm a) {
        e->w0_meta = (e->w0_meta & ~TABLE_ALGORITHM_MASK) |
                     (((uint64_t) a << TABLE_ALGORITHM_SHIFT) & TABLE_ALGORITHM_MASK);
}

/* The entry as counter.h's record (what the journal and the checkpoint write). */
static inline CounterRecord table_entry_record(const TableEntry *e) {
        return (CounterRecord){
                .id = e->id,
                .algorithm = (uint8_t) table_entry_algorithm(e),
                .state = table_entry_state(e),
        };
}

#define TABLE_MIGRATE_SLOTS                                                                                 \
        16 /* old-array slots each table_put() moves during a migration: a handful of copies                \
            * (about 1 us) per operation, and a migration ends after capacity/16 puts, before               \
            * inserts can fill the new array (see the bound above) */

typedef struct Table Table;

/* Creates an empty table sized for `initial` counters without growing (0: the minimum).
 * Returns 0, or -ENOMEM. */
int table_new(size_t initial, Table **ret);

/* Frees the table and both arrays. Accepts NULL, returns NULL. */
Table *table_free(Table *t);

static inline void table_freep(Table **t) {
        if (*t)
                *t = table_free(*t);
}

/* Caps the bytes of entry arrays the table may hold at once (old + new during a migration);
 * 0 (the default) is no cap. A growth that would pass it fails with -ENOMEM like a failed
 * mmap(): the table keeps counting its existing counters and refuses only new ones. Shrinks
 * are exempt (they lower the footprint once done). */
void table_set_memory_max(Table *t, size_t bytes);

/* Caps the counters (table_count()) table_put() may create: with `max` or more, a new counter
 * is refused with -EDQUOT (the table unchanged) while existing ones are found as before; 0
 * (the default) is no cap. Lowering it below table_count() deletes nothing. */
void table_set_count_max(Table *t, size_t max);

/* Finds the counter `id`, creating it if absent with algorithm 0 (COUNTER_FIXED_WINDOW) and
 * state {0, 0}, i.e. the same as absent: the caller initialises it. Sets *ret to its entry
 * and returns 1 if it was created, 0 if it
 * existed; -ENOMEM if it was absent and the table could not grow, -EDQUOT if it was absent
 * and table_set_count_max()'s cap is reached (the table is unchanged and usable). Moves at most
 * TABLE_MIGRATE_SLOTS slots of a migration first. An expired counter is returned as it is: the caller
 * decides (w0 <= now: start afresh). */
int table_put(Table *t, CounterId id, TableEntry **ret);

/* Starts loading the cache line where `id`'s search begins, moving nothing. A batch of hits
 * that prefetches every id before the first table_put() overlaps their cache misses instead
 * of paying them one after the other (bench-table: "batches of 16"). */
void table_prefetch(const Table *t, CounterId id);

/* Finds the counter `id` without creating it or moving anything (for PEEK). Returns 0 and
 * sets *ret, or -ENOENT. */
int table_get(Table *t, CounterId id, TableEntry **ret);

/* Deletes the counter `id`. Returns 0, or -ENOENT. */
int table_delete(Table *t, CounterId id);

/* Live counters (expired ones count until a step deletes them). */
size_t table_count(const Table *t);

/* Bytes of memory the table holds: the Table and its arrays as mapped (all of both during a
 * migration, less the old array's pages already given back). VmRSS can be lower: pages
 * never touched are not resident. */
size_t table_memory(const Table *t);

/* Slots in the (new, during a migration) array. */
size_t table_capacity(const Table *t);

/* Migrations (growths and shrinks) started since table_new(): a copy made in chunks is of one
 * array only while it does not change. */
uint64_t table_generation(const Table *t);

/* One chunk of a copy of the table made in several calls (a snapshot, store.c): the live
 * counters (w0 > now_usec) of slots [from, next), written to out (room for max_slots), where
 * next is the first slot after an EMPTY slot at least min_slots past from, or the end of the
 * array (next == table_capacity(): the copy is complete). Ending each chunk on an empty slot
 * is what makes the chunks add up to the table while it changes between them (with no
 * migration between them: table_generation()): a counter sits between its home slot and the
 * first empty slot after it, and a deletion only moves counters towards their home, so a
 * counter not yet copied and not changed since can never move into a chunk already copied
 * (it may be copied twice, the same state: around the wrap-around). A counter changed between
 * chunks is copied in some state it had, or missed: its change is journaled, and the replay of
 * the journal after the copy's start sets it right. Returns 0 and sets *ret_n and *ret_next;
 * -EBUSY during a migration; -E2BIG if slots [from, from + max_slots) hold no empty slot after
 * min_slots. Moves nothing. */
int table_copy_chunk(const Table *t, size_t from, size_t min_slots, size_t max_slots, uint64_t now_usec,
                     CounterRecord *out, size_t *ret_n, size_t *ret_next);

/* Whether a migration (growth or shrink) is in progress. */
bool table_migrating(const Table *t);

/* One bounded step of expiry: examines at most max_slots slots, continuing from where the
 * previous step stopped, and deletes the counters whose w0 <= now_usec. A step ends early at
 * the end of the array (the cursor then starts again at its beginning next time): one step
 * never passes over a slot twice, so a step that examined fewer than max_slots slots finished
 * a pass over the table (or found it empty). During a migration the slots examined are the
 * old array's next ones, moved or (when expired) dropped, so the step also advances the
 * migration. Adds the number of deletions to *ret_deleted if non-NULL. May start a shrink
 * when the table is under TABLE_LOAD_MIN. Returns the number of slots examined
 * (<= max_slots). */
size_t table_expire_step(Table *t, uint64_t now_usec, size_t max_slots, size_t *ret_deleted);

/* Whether expiry steps should follow one another without waiting: a migration is in progress,
 * or one moved counters without examining them (table_migrate_step(), table_put()) and the
 * pass over the new array since (it starts at its beginning) has not reached its end. Such
 * expired counters may lie anywhere in the new array, e.g. after the survivors of slots that
 * were already swept, where steps find nothing to delete before they reach them. */
bool table_expire_unfinished(const Table *t);

/* Moves at most max_slots slots of the migration in progress, e.g. from idle time, so that
 * the old array is released sooner. Returns the number of slots examined (0: none in
 * progress). */
size_t table_migrate_step(Table *t, size_t max_slots);
