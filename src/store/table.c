/* SPDX-License-Identifier: MIT */

/*
 * The resident counter table (layout, bounds and contracts in table.h).
 *
 * During a migration there are two arrays: `cur`, where every new counter goes, and `old`,
 * moved into `cur` in slot order by a cursor (mig_pos). The old array is never written but
 * for two things, so that its probe chains stay intact for lookups:
 *   - slots below mig_pos have been moved: what they still hold is dead (a lookup that ends
 *     there answers "not in old"); they are not cleared;
 *   - a counter deleted from old before it is moved becomes a tombstone (TABLE_FLAG_DELETED):
 *     it still occupies its slot for probing, is never matched and never moved.
 * An old counter's probe chain runs from its home slot to its slot without an empty slot in
 * between. So once the cursor has passed an empty slot (mig_skip), no live old counter has
 * its home below it: lookups whose home is below mig_skip skip the old array, and the pages
 * below mig_skip are given back to the kernel (they read as zeros, i.e. empty, afterwards).
 */

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "store/table.h"

_Static_assert(sizeof(TableEntry) == TABLE_ENTRY_SIZE, "TableEntry must stay 32 bytes: 2 per cache line");
_Static_assert(_COUNTER_ALGORITHM_MAX <= 16, "CounterAlgorithm must fit the entry's 4 bits");

#define TABLE_CAPACITY_MIN                                                                                  \
        64 /* slots: 2 KiB, one page; below that the Table itself dominates and migrations would            \
            * start every few inserts */
#define TABLE_HUGEPAGE_MIN                                                                                  \
        (UINT64_C(2) << 20) /* bytes: arrays of at least one 2 MiB huge page ask for huge pages:            \
                             * random probes miss the TLB far less (bench-table at 10 million:              \
                             * hits about 30% faster). The price: the first touch of a huge page            \
                             * zeroes 2 MiB (about 0.1 ms), seen in the p99.99 of inserts */
#define TABLE_RELEASE_CHUNK                                                                                 \
        (UINT64_C(2) << 20) /* bytes: the moved part of the old array is given back in 2 MiB steps,         \
                             * one huge page per madvise(), so about one call per 4096 puts */

/* Load factor bounds (see table.h): grow past 3/4 into 3/2 the slots, shrink under 1/4 to
 * 1/2 full; hysteresis, so that a grown or a shrunk table (1/2) is far from both triggers.
 * The hard limit is a safety net the bound in table.h keeps unreachable: past 9/10 in the
 * new array a migration is finished at once (linear probing degrades fast near full). */
static inline bool load_over_max(size_t n, size_t cap) {
        return n * 4 > cap * 3;
}

static inline bool load_under_min(size_t n, size_t cap) {
        return n * 4 < cap;
}

static inline bool load_over_hard(size_t n, size_t cap) {
        return n * 10 > cap * 9;
}

typedef struct Slots {
        TableEntry *e;
        size_t cap;   /* slots */
        size_t bytes; /* mapped: cap entries rounded up to whole pages */
} Slots;

struct Table {
        Slots cur;             /* the array new counters go to */
        Slots old;             /* during a migration, the array being moved; e == NULL otherwise */
        size_t cur_used;       /* slots in use in cur */
        size_t old_left;       /* live counters of old not moved yet */
        size_t mig_pos;        /* next old slot to move: the ones below are dead */
        size_t mig_skip;       /* the last empty old slot the cursor passed: no live old home below */
        size_t old_released;   /* bytes at the start of old given back to the kernel */
        size_t expire_pos;     /* expiry cursor in cur (outside migrations) */
        bool expire_unchecked; /* a migration moved counters into cur without expiry: until the
                                * pass over cur after it (from its start) ends */
        size_t cap_min;        /* never shrink below: what table_new() was asked for */
        size_t memory_max;     /* bytes of arrays at once; 0: no cap */
        size_t count_max;      /* counters table_put() may create up to; 0: no cap */
        uint64_t generation;   /* migrations started: a snapshot's copy is of one array */
};

/* The home slot: fastrange, (hi * cap) / 2^64. Monotonic in hi, any capacity, one multiply. */
static inline size_t home_of(CounterId id, size_t cap) {
        return (size_t) (((unsigned __int128) id.hi * cap) >> 64);
}

static inline bool used(const TableEntry *e) {
        return e->w0_meta & TABLE_FLAG_USED;
}

static inline bool deleted(const TableEntry *e) {
        return e->w0_meta & TABLE_FLAG_DELETED;
}

/* Whether slot e holds id (whatever its deleted flag). */
static inline bool matches(const TableEntry *e, CounterId id) {
        return e->id.hi == id.hi && e->id.lo == id.lo && used(e);
}

/* Whether e's counter is the same as an absent one at now (counter.h's contract on w0). */
static inline bool expired(const TableEntry *e, uint64_t now) {
        return (e->w0_meta & TABLE_W0_MAX) <= now;
}

/* The slot of id in s, or SIZE_MAX at the first empty slot. The array is never full. */
static size_t slots_find(const Slots *s, CounterId id) {
        size_t i = home_of(id, s->cap);

        for (;;) {
                const TableEntry *e = &s->e[i];

                if (!used(e))
                        return SIZE_MAX;
                if (matches(e, id))
                        return i;
                if (++i == s->cap)
                        i = 0;
        }
}

/* Copies src (whose id is not in s) into the first empty slot from its home; returns it. */
static TableEntry *slots_insert(Slots *s, const TableEntry *src) {
        size_t i = home_of(src->id, s->cap);

        while (used(&s->e[i]))
                if (++i == s->cap)
                        i = 0;
        s->e[i] = *src;
        return &s->e[i];
}

/* Empties slot i by backward shift: every later entry of the cluster whose home is not
 * cyclically in (i, j] moves back into the hole, so no probe chain gets an empty slot. */
static void slots_delete_at(Slots *s, size_t i) {
        size_t j = i;

        for (;;) {
                size_t h;

                if (++j == s->cap)
                        j = 0;
                if (!used(&s->e[j]))
                        break;
                h = home_of(s->e[j].id, s->cap);
                if (i <= j ? (i < h && h <= j) : (i < h || h <= j))
                        continue; /* its home is after the hole: it must stay */
                s->e[i] = s->e[j];
                i = j;
        }
        s->e[i] = (TableEntry){};
}

static size_t page_size(void) {
        long p = sysconf(_SC_PAGESIZE);

        return p > 0 ? (size_t) p : 4096;
}

/* Maps a zeroed (i.e. empty) array of cap slots. Returns 0 or -ENOMEM. */
static int slots_alloc(Slots *s, size_t cap) {
        size_t page = page_size(), bytes;
        void *p;

        if (cap > (SIZE_MAX - page) / sizeof(TableEntry))
                return -ENOMEM;
        bytes = (cap * sizeof(TableEntry) + page - 1) / page * page;
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
                return -ENOMEM;
        if (bytes >= TABLE_HUGEPAGE_MIN)
                (void) madvise(p, bytes, MADV_HUGEPAGE); /* a hint: fine if refused */
        *s = (Slots){ .e = p, .cap = cap, .bytes = bytes };
        return 0;
}

static void slots_free(Slots *s) {
        if (s->e)
                (void) munmap(s->e, s->bytes);
        *s = (Slots){};
}

/* Slots needed for n counters without passing the maximum load. */
static size_t capacity_for(size_t n) {
        size_t cap = n / 3 * 4 + (n % 3 * 4 + 2) / 3; /* ceil(n * 4 / 3) without overflow */

        return cap < TABLE_CAPACITY_MIN ? TABLE_CAPACITY_MIN : cap;
}

int table_new(size_t initial, Table **ret) {
        Table *t;
        int r;

        assert(ret);

        if (initial > SIZE_MAX / 2 / sizeof(TableEntry))
                return -ENOMEM;
        t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        t->cap_min = capacity_for(initial);
        r = slots_alloc(&t->cur, t->cap_min);
        if (r < 0) {
                free(t);
                return r;
        }
        *ret = t;
        return 0;
}

Table *table_free(Table *t) {
        if (!t)
                return NULL;
        slots_free(&t->cur);
        slots_free(&t->old);
        free(t);
        return NULL;
}

void table_set_memory_max(Table *t, size_t bytes) {
        assert(t);
        t->memory_max = bytes;
}

void table_set_count_max(Table *t, size_t max) {
        assert(t);
        t->count_max = max;
}

/* Starts moving everything into a new array of cap slots. check_max: apply memory_max (a
 * growth). Returns 0, or -ENOMEM with the table unchanged. */
static int migration_start(Table *t, size_t cap, bool check_max) {
        Slots n;
        int r;

        assert(!t->old.e);

        if (check_max && t->memory_max > 0 &&
            (t->cur.bytes >= t->memory_max || cap > (t->memory_max - t->cur.bytes) / sizeof(TableEntry)))
                return -ENOMEM;
        r = slots_alloc(&n, cap);
        if (r < 0)
                return r;
        t->old = t->cur;
        t->old_left = t->cur_used;
        t->cur = n;
        t->cur_used = 0;
        t->mig_pos = t->mig_skip = t->old_released = 0;
        t->expire_pos = 0;
        t->generation++;
        return 0;
}

/* Gives back the old array's pages below mig_skip, in TABLE_RELEASE_CHUNK steps. */
static void migration_release(Table *t) {
        size_t page = page_size();
        size_t until = t->mig_skip * sizeof(TableEntry) / page * page;

        if (until < t->old_released + TABLE_RELEASE_CHUNK)
                return;
        (void) madvise((uint8_t *) t->old.e + t->old_released, until - t->old_released, MADV_DONTNEED);
        t->old_released = until;
}

/* Moves at most max_slots old slots into cur; with expire, drops the counters whose
 * w0 <= now instead and counts them in *n_deleted. Ends the migration when the cursor
 * reaches the end. Returns the slots examined. */
static size_t migration_step(Table *t, size_t max_slots, bool expire, uint64_t now, size_t *n_deleted) {
        size_t n = 0;

        if (!t->old.e)
                return 0;

        for (; n < max_slots && t->mig_pos < t->old.cap; n++, t->mig_pos++) {
                const TableEntry *e = &t->old.e[t->mig_pos];

                if (!used(e)) {
                        t->mig_skip = t->mig_pos;
                        continue;
                }
                if (deleted(e))
                        continue;
                t->old_left--;
                if (expire && expired(e, now)) {
                        (*n_deleted)++;
                        continue;
                }
                (void) slots_insert(&t->cur, e);
                t->cur_used++;
                if (!expire)
                        t->expire_unchecked = true;
        }

        if (t->mig_pos == t->old.cap) {
                assert(t->old_left == 0);
                slots_free(&t->old);
                t->old_left = t->mig_pos = t->mig_skip = t->old_released = 0;
        } else
                migration_release(t);
        return n;
}

size_t table_migrate_step(Table *t, size_t max_slots) {
        assert(t);
        return migration_step(t, max_slots, false, 0, NULL);
}

/* Starts a shrink if the table is under the minimum load and no migration runs. Best
 * effort: without memory for the smaller array the table just stays large. */
static void maybe_shrink(Table *t) {
        size_t cap;

        if (t->old.e || t->cur.cap <= t->cap_min || !load_under_min(t->cur_used, t->cur.cap))
                return;
        /* 1/2 full, but at most 4 times smaller: the bound on inserts during the migration */
        cap = t->cur_used * 2;
        if (cap < t->cur.cap / 4 + 1)
                cap = t->cur.cap / 4 + 1;
        if (cap < t->cap_min)
                cap = t->cap_min;
        if (cap < t->cur.cap)
                (void) migration_start(t, cap, false);
}

/* The live old-array slot of id, or SIZE_MAX. */
static size_t old_find(const Table *t, CounterId id) {
        size_t i;

        if (!t->old.e || home_of(id, t->old.cap) < t->mig_skip)
                return SIZE_MAX;
        i = slots_find(&t->old, id);
        if (i == SIZE_MAX || i < t->mig_pos || deleted(&t->old.e[i]))
                return SIZE_MAX;
        return i;
}

/* The entry of id in either array, or NULL. */
static TableEntry *find(Table *t, CounterId id) {
        size_t i = slots_find(&t->cur, id);

        if (i != SIZE_MAX)
                return &t->cur.e[i];
        i = old_find(t, id);
        return i != SIZE_MAX ? &t->old.e[i] : NULL;
}

int table_put(Table *t, CounterId id, TableEntry **ret) {
        TableEntry *e, n;

        assert(t);
        assert(ret);

        if (t->old.e)
                (void) migration_step(t, TABLE_MIGRATE_SLOTS, false, 0, NULL);

        e = find(t, id);
        if (e) {
                *ret = e;
                return 0;
        }

        /* A new counter. */
        if (t->count_max > 0 && table_count(t) >= t->count_max)
                return -EDQUOT;
        /* Never reached by the bound in table.h; finishing is the safe way. */
        if (t->old.e && load_over_hard(t->cur_used + 1, t->cur.cap))
                (void) migration_step(t, SIZE_MAX, false, 0, NULL);
        if (!t->old.e && load_over_max(t->cur_used + 1, t->cur.cap)) {
                int r = migration_start(t, t->cur.cap + t->cur.cap / 2, true);

                if (r < 0)
                        return r;
        }

        n = (TableEntry){ .id = id, .w0_meta = TABLE_FLAG_USED };
        *ret = slots_insert(&t->cur, &n);
        t->cur_used++;
        return 1;
}

void table_prefetch(const Table *t, CounterId id) {
        assert(t);

        __builtin_prefetch(&t->cur.e[home_of(id, t->cur.cap)], 1 /* for writing */);
        if (t->old.e && home_of(id, t->old.cap) >= t->mig_skip)
                __builtin_prefetch(&t->old.e[home_of(id, t->old.cap)], 1);
}

int table_get(Table *t, CounterId id, TableEntry **ret) {
        TableEntry *e;

        assert(t);
        assert(ret);

        e = find(t, id);
        if (!e)
                return -ENOENT;
        *ret = e;
        return 0;
}

int table_delete(Table *t, CounterId id) {
        size_t i;

        assert(t);

        i = slots_find(&t->cur, id);
        if (i != SIZE_MAX) {
                slots_delete_at(&t->cur, i);
                t->cur_used--;
        } else {
                i = old_find(t, id);
                if (i == SIZE_MAX)
                        return -ENOENT;
                t->old.e[i].w0_meta |= TABLE_FLAG_DELETED; /* a tombstone: chains stay whole */
                t->old_left--;
        }
        maybe_shrink(t);
        return 0;
}

size_t table_count(const Table *t) {
        assert(t);
        return t->cur_used + t->old_left;
}

size_t table_memory(const Table *t) {
        assert(t);
        return sizeof *t + t->cur.bytes + t->old.bytes - t->old_released;
}

size_t table_capacity(const Table *t) {
        assert(t);
        return t->cur.cap;
}

bool table_migrating(const Table *t) {
        assert(t);
        return t->old.e;
}

uint64_t table_generation(const Table *t) {
        assert(t);
        return t->generation;
}

int table_copy_chunk(const Table *t, size_t from, size_t min_slots, size_t max_slots, uint64_t now_usec,
                     CounterRecord *out, size_t *ret_n, size_t *ret_next) {
        size_t i, n = 0, end;
        bool bounded = false;

        assert(t && out && ret_n && ret_next && min_slots > 0 && max_slots >= min_slots);
        if (t->old.e)
                return -EBUSY;
        if (from >= t->cur.cap) {
                *ret_n = 0;
                *ret_next = t->cur.cap;
                return 0;
        }
        end = t->cur.cap - from > max_slots ? from + max_slots : t->cur.cap;
        for (i = from; i < end; i++) {
                const TableEntry *e = &t->cur.e[i];

                if (!used(e)) {
                        if (i - from >= min_slots) {
                                i++; /* the chunk ends with an empty slot */
                                bounded = true;
                                break;
                        }
                        continue;
                }
                if (!expired(e, now_usec))
                        out[n++] = table_entry_record(e);
        }
        if (!bounded && end < t->cur.cap)
                return -E2BIG; /* a cluster longer than the chunk: no boundary found */
        *ret_n = n;
        *ret_next = i;
        return 0;
}

bool table_expire_unfinished(const Table *t) {
        assert(t);
        return t->old.e || t->expire_unchecked;
}

size_t table_expire_step(Table *t, uint64_t now_usec, size_t max_slots, size_t *ret_deleted) {
        size_t n, n_deleted = 0;

        assert(t);

        n = migration_step(t, max_slots, true, now_usec, &n_deleted);

        while (n < max_slots && !t->old.e && t->cur_used > 0) {
                TableEntry *e = &t->cur.e[t->expire_pos];

                n++;
                if (used(e) && expired(e, now_usec)) {
                        /* stay: the backward shift may have moved the next entry here */
                        slots_delete_at(&t->cur, t->expire_pos);
                        t->cur_used--;
                        n_deleted++;
                        continue;
                }
                if (++t->expire_pos == t->cur.cap) {
                        t->expire_pos = 0;
                        t->expire_unchecked = false;
                        break; /* a pass is over: the caller decides when the next one starts */
                }
        }
        if (!t->old.e && t->cur_used == 0)
                t->expire_unchecked = false;

        maybe_shrink(t);
        if (ret_deleted)
                *ret_deleted += n_deleted;
        return n;
}
