/* SPDX-License-Identifier: MIT */

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/table.h"
#include "check-run.h"

#define _cleanup_table_ __attribute__((cleanup(table_freep)))

/* ck_assert() logs a mark point per call (slow under valgrind): hot loops use this instead,
 * which reports only failures. */
#define expect(expr)                                                                                        \
        do {                                                                                                \
                if (!(expr))                                                                                \
                        ck_abort_msg("%s:%d: %s", __FILE__, __LINE__, #expr);                               \
        } while (0)

#define SLOTS_MIN   64 /* table.c's TABLE_CAPACITY_MIN: the capacity of table_new(0) */
#define SEED        0x5eed5eedULL
#define MODEL_IDS   2000                           /* ids the model test draws from */
#define MODEL_OPS   100000                         /* operations of the model test */
#define GROW_COUNT  3000                           /* counters inserted by the growth tests */
#define CHUNK_SLOTS ((2 << 20) / TABLE_ENTRY_SIZE) /* slots in table.c's TABLE_RELEASE_CHUNK (2 MiB) */

static uint64_t rng_state;

static uint64_t rng(void) {
        /* xorshift64*: deterministic under a fixed seed */
        rng_state ^= rng_state >> 12;
        rng_state ^= rng_state << 25;
        rng_state ^= rng_state >> 27;
        return rng_state * 0x2545f4914f6cdd1dULL;
}

/* The id.hi whose home is `home` in a table of cap slots, plus k (k small: same home). */
static uint64_t hi_at(size_t home, size_t cap, uint64_t k) {
        unsigned __int128 lo = (((unsigned __int128) home << 64) + cap - 1) / cap;

        return (uint64_t) lo + k;
}

static CounterId id_at(size_t home, size_t cap, uint64_t k) {
        return (CounterId){ .lo = k * 7919 + 1, .hi = hi_at(home, cap, k) };
}

static CounterId id_random(void) {
        return (CounterId){ .lo = rng(), .hi = rng() };
}

static bool id_eq(CounterId a, CounterId b) {
        return a.lo == b.lo && a.hi == b.hi;
}

static Table *new_table(size_t initial) {
        Table *t = NULL;

        ck_assert_int_eq(table_new(initial, &t), 0);
        ck_assert_ptr_nonnull(t);
        return t;
}

/* Puts id as a new counter with the given words. */
static void put_new(Table *t, CounterId id, uint64_t w0, uint64_t w1) {
        TableEntry *e = NULL;

        expect(table_put(t, id, &e) == 1);
        expect(e);
        expect(table_entry_algorithm(e) == COUNTER_FIXED_WINDOW); /* 0: as absent */
        expect(table_entry_state(e).w0 == 0);
        expect(table_entry_state(e).w1 == 0);
        expect(id_eq(e->id, id));
        table_entry_set_state(e, (CounterState){ w0, w1 });
        table_entry_set_algorithm(e, COUNTER_TOKEN_BUCKET); /* not 0: shows it is kept */
}

/* Asserts id is present with the given words (by lookup without insert). */
static void assert_has(Table *t, CounterId id, uint64_t w0, uint64_t w1) {
        TableEntry *e = NULL;

        if (table_get(t, id, &e) != 0)
                ck_abort_msg("id %016llx:%016llx missing", (unsigned long long) id.hi,
                             (unsigned long long) id.lo);
        expect(id_eq(e->id, id));
        expect(table_entry_state(e).w0 == w0);
        expect(table_entry_state(e).w1 == w1);
        expect(table_entry_algorithm(e) == COUNTER_TOKEN_BUCKET);
}

static void assert_absent(Table *t, CounterId id) {
        TableEntry *e = NULL;

        expect(table_get(t, id, &e) == -ENOENT);
}

START_TEST (test_basic) {
        Table *t = new_table(0);
        CounterId a = { .lo = 1, .hi = 2 }, b = { .lo = 3, .hi = 4 };
        TableEntry *e = NULL;

        ck_assert_uint_eq(table_count(t), 0);
        ck_assert_uint_eq(table_capacity(t), SLOTS_MIN);
        ck_assert(!table_migrating(t));
        assert_absent(t, a);
        ck_assert_int_eq(table_delete(t, a), -ENOENT);

        put_new(t, a, 100, 5);
        put_new(t, b, 200, 6);
        ck_assert_uint_eq(table_count(t), 2);
        assert_has(t, a, 100, 5);
        assert_has(t, b, 200, 6);

        /* existing: same entry, not created, words kept */
        ck_assert_int_eq(table_put(t, a, &e), 0);
        ck_assert_uint_eq(table_entry_state(e).w1, 5);
        table_entry_set_state(e, (CounterState){ 100, 4 });
        assert_has(t, a, 100, 4);
        ck_assert_uint_eq(table_count(t), 2);

        ck_assert_int_eq(table_delete(t, a), 0);
        ck_assert_int_eq(table_delete(t, a), -ENOENT);
        assert_absent(t, a);
        assert_has(t, b, 200, 6);
        ck_assert_uint_eq(table_count(t), 1);

        /* a deleted id comes back fresh */
        put_new(t, a, 300, 7);
        assert_has(t, a, 300, 7);
        ck_assert_uint_ge(table_memory(t), SLOTS_MIN * sizeof(TableEntry));
        ck_assert_ptr_null(table_free(t));
        ck_assert_ptr_null(table_free(NULL));
}
END_TEST

START_TEST (test_entry) {
        _cleanup_table_ Table *t = new_table(0);
        CounterId id = { .lo = UINT64_MAX, .hi = UINT64_MAX }; /* every id bit is kept */
        TableEntry *e = NULL;
        CounterRecord rec;

        put_new(t, id, 1, UINT64_MAX);
        ck_assert_int_eq(table_get(t, id, &e), 0);
        ck_assert(id_eq(e->id, id));
        ck_assert_uint_eq(table_entry_state(e).w1, UINT64_MAX); /* all 64 bits of w1 */

        /* algorithm and state are independent of each other and of the flags */
        for (unsigned a = 0; a < 16; a++) {
                table_entry_set_algorithm(e, (CounterAlgorithm) a);
                ck_assert_uint_eq(table_entry_algorithm(e), a);
                ck_assert_uint_eq(table_entry_state(e).w0, 1);
        }
        table_entry_set_algorithm(e, COUNTER_SLIDING_WINDOW);
        table_entry_set_state(e, (CounterState){ TABLE_W0_MAX, 7 });
        ck_assert_uint_eq(table_entry_state(e).w0, TABLE_W0_MAX);
        table_entry_set_state(e, (CounterState){ UINT64_MAX, 8 }); /* clamped, flags kept */
        ck_assert_uint_eq(table_entry_state(e).w0, TABLE_W0_MAX);
        ck_assert_int_eq(table_entry_algorithm(e), COUNTER_SLIDING_WINDOW);
        ck_assert_int_eq(table_get(t, id, &e), 0); /* still in use, still found */

        rec = table_entry_record(e);
        ck_assert(id_eq(rec.id, id));
        ck_assert_int_eq(rec.algorithm, COUNTER_SLIDING_WINDOW);
        ck_assert_uint_eq(rec.state.w0, TABLE_W0_MAX);
        ck_assert_uint_eq(rec.state.w1, 8);

        /* w0 in the far future: never expires; a step ends at the end of the array (one pass,
         * never a slot twice), however large its budget */
        ck_assert_uint_eq(table_capacity(t), SLOTS_MIN);
        ck_assert_uint_eq(table_expire_step(t, TABLE_W0_MAX - 1, 1000, NULL), SLOTS_MIN);
        ck_assert_uint_eq(table_expire_step(t, TABLE_W0_MAX - 1, 10, NULL), 10); /* from the start */
        ck_assert_uint_eq(table_count(t), 1);
}
END_TEST

START_TEST (test_collisions) {
        _cleanup_table_ Table *t = new_table(0);
        enum { N = 30 };     /* under 3/4 of 64: no growth */
        const size_t H = 10; /* the common home slot */
        CounterId ids[N];

        for (size_t i = 0; i < N; i++) {
                /* every third one at the next home: clusters that interleave homes */
                ids[i] = id_at(H + (i % 3 == 2), SLOTS_MIN, i);
                put_new(t, ids[i], i, i * 10);
        }
        ck_assert(!table_migrating(t));
        ck_assert_uint_eq(table_capacity(t), SLOTS_MIN);
        for (size_t i = 0; i < N; i++)
                assert_has(t, ids[i], i, i * 10);
        /* an id at the same home with another id.lo is another counter */
        assert_absent(t, (CounterId){ .lo = ids[0].lo + 1, .hi = ids[0].hi });

        /* delete inside the cluster, from the middle, the front and the end */
        for (size_t i = 1; i < N - 1; i += 4)
                ck_assert_int_eq(table_delete(t, ids[i]), 0);
        ck_assert_int_eq(table_delete(t, ids[0]), 0);
        ck_assert_int_eq(table_delete(t, ids[N - 1]), 0);
        for (size_t i = 0; i < N; i++) {
                if (i % 4 == 1 || i == 0 || i == N - 1)
                        assert_absent(t, ids[i]);
                else
                        assert_has(t, ids[i], i, i * 10);
        }
        ck_assert_uint_eq(table_count(t), N - 9); /* 1, 5, ..., 25, then 0 and 29 */
}
END_TEST

START_TEST (test_wrap_around) {
        _cleanup_table_ Table *t = new_table(0);
        enum { N = 24 };
        CounterId ids[N];

        /* homes cap-2, cap-1 and 0, 1: one cluster across the end of the array */
        for (size_t i = 0; i < N; i++) {
                size_t homes[] = { SLOTS_MIN - 2, SLOTS_MIN - 1, 0, 1 };

                ids[i] = id_at(homes[i % 4], SLOTS_MIN, i);
                put_new(t, ids[i], i, i);
        }
        ck_assert(!table_migrating(t));
        for (size_t i = 0; i < N; i++)
                assert_has(t, ids[i], i, i);

        /* delete the end's first: the entries after the wrap must move back across it, the
         * ones whose home is 0 or 1 must not move to the end */
        for (size_t i = 0; i < N; i += 4) {
                ck_assert_int_eq(table_delete(t, ids[i]), 0);
                for (size_t j = 0; j < N; j++)
                        if (j % 4 == 0 && j <= i)
                                assert_absent(t, ids[j]);
                        else
                                assert_has(t, ids[j], j, j);
        }
        for (size_t i = 1; i < N; i += 4)
                ck_assert_int_eq(table_delete(t, ids[i]), 0);
        for (size_t i = 0; i < N; i++)
                if (i % 4 >= 2)
                        assert_has(t, ids[i], i, i);
                else
                        assert_absent(t, ids[i]);
        /* and refill: the holes are usable */
        for (size_t i = 0; i < N; i++)
                if (i % 4 < 2)
                        put_new(t, ids[i], i, i);
        for (size_t i = 0; i < N; i++)
                assert_has(t, ids[i], i, i);
}
END_TEST

/* Every id of ids[0..n) whose present[] is set is found with words (i, i + 1), the others
 * not; the count agrees. */
static void assert_all(Table *t, const CounterId *ids, const bool *present, size_t n) {
        size_t live = 0;

        for (size_t i = 0; i < n; i++)
                if (present[i]) {
                        assert_has(t, ids[i], i, i + 1);
                        live++;
                } else
                        assert_absent(t, ids[i]);
        expect(table_count(t) == live);
}

START_TEST (test_growth) {
        _cleanup_table_ Table *t = new_table(0);
        static CounterId ids[GROW_COUNT];
        static bool present[GROW_COUNT];
        size_t migrations = 0, checked_mid = 0, n = 0;
        bool was_migrating = false;

        rng_state = SEED;
        for (size_t i = 0; i < GROW_COUNT; i++)
                ids[i] = id_random();

        while (n < GROW_COUNT) {
                put_new(t, ids[n], n, n + 1);
                present[n++] = true;

                table_prefetch(t, ids[n - 1]); /* a hint: harmless in either array */
                if (table_migrating(t)) {
                        if (!was_migrating)
                                migrations++;
                        /* mid-migration: delete some (either array), re-insert some */
                        if (n % 5 == 0) {
                                size_t v = rng() % n;

                                if (present[v]) {
                                        ck_assert_int_eq(table_delete(t, ids[v]), 0);
                                        present[v] = false;
                                } else {
                                        put_new(t, ids[v], v, v + 1);
                                        present[v] = true;
                                }
                        }
                        if (n % 7 == 0 && table_migrating(t)) {
                                assert_all(t, ids, present, n);
                                checked_mid++;
                        }
                }
                was_migrating = table_migrating(t);
        }
        assert_all(t, ids, present, n);
        ck_assert_uint_ge(migrations, 5); /* 64 slots to thousands */
        ck_assert_uint_ge(checked_mid, 50);

        /* updating existing counters also drives the migration to its end */
        for (size_t i = 0; table_migrating(t); i = (i + 1) % n) {
                TableEntry *e = NULL;

                ck_assert_int_ge(table_put(t, ids[i], &e), 0);
                if (!present[i]) {
                        table_entry_set_state(e, (CounterState){ i, i + 1 });
                        table_entry_set_algorithm(e, COUNTER_TOKEN_BUCKET);
                        present[i] = true;
                }
        }
        assert_all(t, ids, present, n);
        /* steady state: at most 3/4 full, at least 1/2 after the last growth */
        ck_assert_uint_le(table_count(t) * 4, table_capacity(t) * 3);
        ck_assert_uint_le(table_capacity(t) * sizeof(TableEntry), table_count(t) * 64);
}
END_TEST

/* Fills t with n random counters, returning the first id drawn (rng_state set by caller). */
static void fill(Table *t, CounterId *ids, size_t n, uint64_t (*expiry)(size_t)) {
        for (size_t i = 0; i < n; i++) {
                ids[i] = id_random();
                put_new(t, ids[i], expiry(i), i);
        }
}

static uint64_t expiry_half(size_t i) {
        return i % 2 ? 100 : 1000; /* odd ones expire at 100, even ones live until 1000 */
}

/* Runs expiry steps of at most `max` slots at now=500 until nothing changes for a whole
 * rotation; checks the bound on every step. Returns the deletions. */
static size_t expire_all(Table *t, size_t max) {
        size_t deleted = 0, idle = 0;

        for (size_t steps = 0; idle < 2 * table_capacity(t) / max + 2; steps++) {
                size_t before = deleted, n;

                n = table_expire_step(t, 500, max, &deleted);
                ck_assert_uint_le(n, max);
                idle = deleted == before && !table_migrating(t) ? idle + 1 : 0;
                ck_assert_uint_lt(steps, 100000);
        }
        return deleted;
}

START_TEST (test_expire) {
        _cleanup_table_ Table *t = new_table(0);
        static CounterId ids[GROW_COUNT];
        size_t deleted;

        rng_state = SEED + 1;
        fill(t, ids, GROW_COUNT, expiry_half);
        ck_assert_uint_eq(table_expire_step(t, 500, 0, NULL), 0);

        deleted = expire_all(t, 7);
        ck_assert_uint_eq(deleted, GROW_COUNT / 2);
        ck_assert_uint_eq(table_count(t), GROW_COUNT / 2);
        for (size_t i = 0; i < GROW_COUNT; i++)
                if (i % 2)
                        assert_absent(t, ids[i]);
                else
                        assert_has(t, ids[i], 1000, i);

        /* an empty table: a step examines nothing (no spinning) */
        deleted = 0;
        for (size_t i = 0; i < 20 && (table_count(t) > 0 || table_migrating(t)); i++)
                (void) table_expire_step(t, 2000, SIZE_MAX, &deleted);
        ck_assert_uint_eq(table_count(t), 0);
        ck_assert_uint_eq(table_expire_step(t, 2000, 100, NULL), 0);
}
END_TEST

START_TEST (test_expire_mid_migration) {
        _cleanup_table_ Table *t = new_table(0);
        static CounterId ids[GROW_COUNT];
        size_t n = 0, deleted = 0;

        /* fill until a migration starts, then expire through it */
        rng_state = SEED + 2;
        while (n < 100 || !table_migrating(t)) {
                ids[n] = id_random();
                put_new(t, ids[n], expiry_half(n), n);
                n++;
        }
        ck_assert_uint_le(table_expire_step(t, 500, 3, &deleted), 3);
        ck_assert(table_migrating(t));
        deleted += expire_all(t, 5);
        ck_assert(!table_migrating(t));
        ck_assert_uint_eq(deleted, n / 2);
        for (size_t i = 0; i < n; i++)
                if (i % 2)
                        assert_absent(t, ids[i]);
                else
                        assert_has(t, ids[i], 1000, i);
}
END_TEST

static uint64_t expiry_few(size_t i) {
        return i % 100 ? 100 : 1000; /* 1 in 100 lives */
}

START_TEST (test_shrink) {
        _cleanup_table_ Table *t = new_table(0);
        static CounterId ids[GROW_COUNT];
        size_t cap_full, deleted;

        rng_state = SEED + 3;
        fill(t, ids, GROW_COUNT, expiry_few);
        while (table_migrating(t))
                (void) table_migrate_step(t, 100);
        cap_full = table_capacity(t);

        deleted = expire_all(t, 50);
        ck_assert_uint_eq(deleted, GROW_COUNT - GROW_COUNT / 100);
        ck_assert_uint_lt(table_capacity(t), cap_full / 4);
        ck_assert_uint_eq(table_capacity(t), SLOTS_MIN);
        for (size_t i = 0; i < GROW_COUNT; i++)
                if (i % 100)
                        assert_absent(t, ids[i]);
                else
                        assert_has(t, ids[i], 1000, i);
        ck_assert_uint_eq(table_migrate_step(t, 100), 0);
}
END_TEST

START_TEST (test_presized_no_shrink) {
        _cleanup_table_ Table *t = new_table(1000);
        size_t cap = table_capacity(t);
        CounterId ids[10];

        ck_assert_uint_ge(cap * 3, 1000 * 4);
        rng_state = SEED + 4;
        fill(t, ids, 10, expiry_half);
        (void) expire_all(t, 64);
        ck_assert_uint_eq(table_count(t), 5);
        ck_assert_uint_eq(table_capacity(t), cap); /* never below what was asked for */
}
END_TEST

START_TEST (test_enomem) {
        _cleanup_table_ Table *t = new_table(0);
        static CounterId ids[GROW_COUNT];
        TableEntry *e = NULL;
        size_t n = 0, count;
        int r;

        /* room for the arrays of a few hundred counters, then no more */
        table_set_memory_max(t, 64 * 1024);
        rng_state = SEED + 6;
        for (;;) {
                ck_assert_uint_lt(n, GROW_COUNT);
                ids[n] = id_random();
                r = table_put(t, ids[n], &e);
                if (r < 0)
                        break;
                ck_assert_int_eq(r, 1);
                table_entry_set_state(e, (CounterState){ n, n + 1 });
                table_entry_set_algorithm(e, COUNTER_TOKEN_BUCKET);
                n++;
                ck_assert_uint_le(table_memory(t), 64 * 1024 + 4096);
        }
        ck_assert_int_eq(r, -ENOMEM);
        ck_assert_uint_gt(n, 300);
        count = table_count(t);
        ck_assert_uint_eq(count, n);
        ck_assert_int_eq(table_put(t, ids[n], &e), -ENOMEM); /* still refused, still unchanged */
        assert_absent(t, ids[n]);

        /* usable: existing counters update, deletes make room */
        for (size_t i = 0; i < n; i++) {
                ck_assert_int_eq(table_put(t, ids[i], &e), 0);
                ck_assert_uint_eq(table_entry_state(e).w1, i + 1);
        }
        ck_assert_int_eq(table_delete(t, ids[0]), 0);
        put_new(t, ids[n], n, n + 1);
        ck_assert_uint_eq(table_count(t), count);
        for (size_t i = 1; i <= n; i++)
                assert_has(t, ids[i], i, i + 1);

        /* lifting the cap lets it grow again */
        table_set_memory_max(t, 0);
        put_new(t, id_random(), 0, 0);
        ck_assert_uint_eq(table_count(t), count + 1);
}
END_TEST

/* At the count cap a new counter is refused with -EDQUOT, the table unchanged; existing ones
 * are found and updated; a delete makes room; a cap lowered below the count deletes nothing. */
START_TEST (test_count_max) {
        _cleanup_table_ Table *t = new_table(0);
        CounterId ids[12];
        TableEntry *e = NULL;

        rng_state = SEED + 8;
        for (size_t i = 0; i < 12; i++)
                ids[i] = id_random();
        table_set_count_max(t, 10);
        for (size_t i = 0; i < 10; i++)
                put_new(t, ids[i], i, i + 1);
        ck_assert_int_eq(table_put(t, ids[10], &e), -EDQUOT);
        assert_absent(t, ids[10]);
        ck_assert_uint_eq(table_count(t), 10);
        for (size_t i = 0; i < 10; i++) {
                ck_assert_int_eq(table_put(t, ids[i], &e), 0);
                ck_assert_uint_eq(table_entry_state(e).w1, i + 1);
        }
        ck_assert_int_eq(table_delete(t, ids[0]), 0);
        put_new(t, ids[10], 10, 11);
        ck_assert_int_eq(table_put(t, ids[11], &e), -EDQUOT);
        table_set_count_max(t, 5);
        ck_assert_uint_eq(table_count(t), 10);
        for (size_t i = 1; i <= 10; i++)
                assert_has(t, ids[i], i, i + 1);
        table_set_count_max(t, 0);
        put_new(t, ids[11], 11, 12);
        ck_assert_uint_eq(table_count(t), 11);
}
END_TEST

START_TEST (test_release) {
        /* big enough that the old array spans several 2 MiB release chunks */
        enum { N = 150000, CLUSTER = 40 };
        _cleanup_table_ Table *t = new_table(N);
        static CounterId ids[N + 1];
        static bool present[N + 1];
        size_t cap = table_capacity(t), peak, end, n = 0;

        /* clusters across the first chunk boundaries, then random ids up to the growth */
        for (size_t b = 1; b <= 2; b++)
                for (size_t k = 0; k < CLUSTER; k++, n++) {
                        ids[n] = id_at(b * CHUNK_SLOTS - 5, cap, k);
                        put_new(t, ids[n], n, n + 1);
                        present[n] = true;
                }
        rng_state = SEED + 7;
        for (; n <= N; n++) {
                ids[n] = id_random();
                put_new(t, ids[n], n, n + 1);
                present[n] = true;
        }
        ck_assert(table_migrating(t));
        peak = table_memory(t);

        /* lookups stay right while the moved part of the old array is given back. The
         * cursor (pos: migrate steps are all that moved it) stops just past each chunk
         * boundary, inside the cluster across it: the pages before the cluster may go, the
         * cluster's may not. */
        for (size_t pos = 0; table_migrating(t);) {
                size_t v = rng() % n, to = (pos / CHUNK_SLOTS + 1) * CHUNK_SLOTS + 2;

                expect(table_memory(t) <= peak);
                if (present[v]) {
                        ck_assert_int_eq(table_delete(t, ids[v]), 0);
                        present[v] = false;
                }
                pos += table_migrate_step(t, to - pos);
                assert_all(t, ids, present, n);
        }
        end = table_memory(t);
        ck_assert_uint_lt(end, peak);
        ck_assert_uint_le(end, n * 64 + 8192);
}
END_TEST

/* ---- a randomized model test: the table against a plain array indexed by id number ---- */

typedef struct Model {
        bool present;
        uint64_t w0, w1;
} Model;

static CounterId model_id(size_t i) {
        static const uint64_t hot[] = { 0, UINT64_MAX - 4096, UINT64_C(1) << 63 };
        uint64_t x = i * 0x9e3779b97f4a7c15ULL;

        /* 1 in 8 ids crowd around three spots (both ends: wrap-around): long clusters */
        if (i % 8 == 0)
                return (CounterId){ .lo = i, .hi = hot[i / 8 % 3] + (x >> 52) };
        return (CounterId){ .lo = i, .hi = x ^ (x >> 29) };
}

START_TEST (test_model) {
        _cleanup_table_ Table *t = new_table(0);
        static Model m[MODEL_IDS];
        uint64_t now = 1000;
        size_t live = 0;

        memset(m, 0, sizeof m);
        rng_state = SEED + 8;
        for (size_t op = 0; op < MODEL_OPS; op++) {
                uint64_t r = rng();
                size_t active = (op / 5000) % 2 ? MODEL_IDS / 20 : MODEL_IDS; /* grow, shrink, ... */
                size_t i = (size_t) (r >> 32) % active;
                CounterId id = model_id(i);
                TableEntry *e = NULL;
                int k;

                switch (r % 16) {
                case 0 ... 7: /* hit */
                        k = table_put(t, id, &e);
                        expect(k == (m[i].present ? 0 : 1));
                        if (k == 0) {
                                expect(table_entry_state(e).w0 == m[i].w0);
                                expect(table_entry_state(e).w1 == m[i].w1);
                        } else
                                live++;
                        m[i] = (Model){ true, now + rng() % 5000, rng() };
                        table_entry_set_state(e, (CounterState){ m[i].w0, m[i].w1 });
                        break;
                case 8 ... 10: /* peek */
                        k = table_get(t, id, &e);
                        expect(k == (m[i].present ? 0 : -ENOENT));
                        if (k == 0) {
                                expect(table_entry_state(e).w0 == m[i].w0);
                                expect(table_entry_state(e).w1 == m[i].w1);
                        }
                        break;
                case 11 ... 13: /* delete */
                        expect(table_delete(t, id) == (m[i].present ? 0 : -ENOENT));
                        live -= m[i].present;
                        m[i].present = false;
                        break;
                case 14: { /* time passes, a bounded expiry step */
                        size_t deleted = 0, gone = 0;

                        now += rng() % 50;
                        expect(table_expire_step(t, now, 32, &deleted) <= 32);
                        /* only expired counters may go: find which did */
                        if (deleted > 0)
                                for (size_t j = 0; j < MODEL_IDS; j++)
                                        if (m[j].present && m[j].w0 <= now &&
                                            table_get(t, model_id(j), &e) == -ENOENT) {
                                                m[j].present = false;
                                                gone++;
                                        }
                        expect(gone == deleted);
                        live -= gone;
                        break;
                }
                case 15:
                        (void) table_migrate_step(t, rng() % 64);
                        break;
                }
                expect(table_count(t) == live);

                if (op % 10007 != 0)
                        continue;
                for (size_t j = 0; j < MODEL_IDS; j++)
                        if (m[j].present) {
                                expect(table_get(t, model_id(j), &e) == 0);
                                expect(table_entry_state(e).w0 == m[j].w0);
                                expect(table_entry_state(e).w1 == m[j].w1);
                        } else
                                assert_absent(t, model_id(j));
        }
}
END_TEST

/* table_expire_unfinished(): true during a migration, and after one that moved counters
 * without examining them until the pass over the new array ends; a migration with expiry
 * only (every counter examined as it moved) leaves nothing to catch up on. */
START_TEST (test_expire_unfinished) {
        _cleanup_table_ Table *t = new_table(0);
        size_t n = 0, passes = 0;

        rng_state = SEED;
        expect(!table_expire_unfinished(t));
        while (!table_migrating(t))
                put_new(t, id_random(), 100 + n++ % 2 * 1000, 1); /* every other one expires at 100 */
        expect(table_expire_unfinished(t));
        while (table_migrating(t))
                (void) table_migrate_step(t, 8); /* moved without expiry */
        ck_assert(table_expire_unfinished(t));   /* expired counters may be anywhere in it */

        /* steps over the new array: unfinished until one reaches its end */
        for (unsigned i = 0; i < 1000 && table_expire_unfinished(t); i++) {
                size_t step = table_expire_step(t, 500, 8, NULL);

                passes += step < 8;
        }
        ck_assert(!table_expire_unfinished(t));
        ck_assert_uint_le(passes, 1);
        ck_assert_uint_eq(table_count(t), n / 2);

        /* a growth moved by expiry steps alone: nothing unexamined */
        while (!table_migrating(t))
                put_new(t, id_random(), 2000, 1);
        while (table_migrating(t))
                (void) table_expire_step(t, 500, 8, NULL);
        ck_assert(!table_expire_unfinished(t));
}
END_TEST

static size_t home_of_id(CounterId id, size_t cap) {
        return (size_t) (((unsigned __int128) id.hi * cap) >> 64);
}

/* A copy in chunks (table_copy_chunk(), a snapshot's) while the table changes between chunks:
 * deletions (whose backward shifts move other counters), inserts and updates. Every counter
 * not changed since the copy began is in the copy, in its one state; the copy holds nothing
 * but states counters had. A migration stops it (-EBUSY). */
START_TEST (test_copy_chunk) {
        enum { N = 20000, ROUNDS = 3 };
        _cleanup_table_ Table *t = new_table(N);
        static CounterId ids[2 * N];
        static bool touched[2 * N], present[2 * N], seen[2 * N];
        static CounterRecord out[65536];
        size_t n_ids = 0, pos = 0, next, n, copied = 0;
        uint64_t gen;
        TableEntry *e;

        rng_state = SEED;
        for (; n_ids < N * 3 / 4; n_ids++) {
                ids[n_ids] = id_random();
                ck_assert_int_eq(table_put(t, ids[n_ids], &e), 1);
                table_entry_set_state(e, (CounterState){ .w0 = 1000 + n_ids, .w1 = n_ids });
                present[n_ids] = true;
        }
        gen = table_generation(t);
        for (;;) {
                ck_assert_int_eq(table_copy_chunk(t, pos, 64, 65536, 0, out, &n, &next), 0);
                for (size_t i = 0; i < n; i++) {
                        size_t k = (size_t) out[i].state.w1;

                        expect(k < n_ids && id_eq(out[i].id, ids[k]));
                        expect(touched[k] || out[i].state.w0 == 1000 + k);
                        seen[k] = true;
                }
                copied += n;
                ck_assert_uint_gt(next, pos);
                pos = next;
                if (pos >= table_capacity(t))
                        break;
                for (unsigned r = 0; r < ROUNDS; r++) {
                        size_t k = (size_t) (rng() % n_ids);

                        /* the first round deletes a counter just below the boundary, if one is
                         * there: what shifts a counter of the next chunk into this one */
                        for (size_t j = 0; r == 0 && j < n_ids; j++)
                                if (present[j] && home_of_id(ids[j], table_capacity(t)) + 4 >= pos &&
                                    home_of_id(ids[j], table_capacity(t)) < pos) {
                                        k = j;
                                        break;
                                }

                        if (present[k]) { /* delete: a backward shift of its cluster */
                                ck_assert_int_eq(table_delete(t, ids[k]), 0);
                                present[k] = false;
                        } else { /* back, in another state */
                                ck_assert_int_eq(table_put(t, ids[k], &e), 1);
                                table_entry_set_state(e, (CounterState){ .w0 = 1, .w1 = k });
                                present[k] = true;
                        }
                        touched[k] = true;
                }
        }
        ck_assert_uint_eq(table_generation(t), gen);
        for (size_t k = 0; k < n_ids; k++)
                expect(touched[k] || seen[k]);
        ck_assert_uint_ge(copied, N / 2);

        /* a growth: no chunk until it is over, and another generation */
        while (!table_migrating(t)) {
                ck_assert_int_eq(table_put(t, id_random(), &e), 1);
                table_entry_set_state(e, (CounterState){ .w0 = 1, .w1 = 0 });
        }
        ck_assert_int_eq(table_copy_chunk(t, 0, 64, 65536, 0, out, &n, &next), -EBUSY);
        ck_assert_uint_ne(table_generation(t), gen);
}
END_TEST

static Suite *table_suite(void) {
        const struct {
                const char *name;
                const TTest *test;
        } cases[] = {
                { "basic", test_basic },
                { "entry", test_entry },
                { "collisions", test_collisions },
                { "wrap_around", test_wrap_around },
                { "growth", test_growth },
                { "expire", test_expire },
                { "expire_mid_migration", test_expire_mid_migration },
                { "shrink", test_shrink },
                { "presized_no_shrink", test_presized_no_shrink },
                { "enomem", test_enomem },
                { "count_max", test_count_max },
                { "release", test_release },
                { "model", test_model },
                { "expire_unfinished", test_expire_unfinished },
                { "copy_chunk", test_copy_chunk },
        };
        Suite *s = suite_create("table");

        /* one case per test, so that CK_RUN_CASE=<name> runs one (under valgrind, gdb) */
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                TCase *tc = tcase_create(cases[i].name);

                tcase_set_timeout(tc, 120); /* seconds: valgrind takes about 10 for the longest */
                tcase_add_test(tc, cases[i].test);
                suite_add_tcase(s, tc);
        }
        return s;
}

int main(void) {
        return check_run_suite(table_suite());
}
