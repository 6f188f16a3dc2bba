/* SPDX-License-Identifier: MIT */

/*
 * The checkpoint: the counters of the resident table, durable in one LMDB environment
 * (data.mdb + lock.mdb in the store directory), written in the background, sorted, and
 * only what changed since the previous checkpoint. See checkpoint.h for the contract.
 *
 * On-disk format, version CHECKPOINT_FORMAT_VERSION (2):
 *
 *   "meta"      key "magic"       -> CHECKPOINT_MAGIC (ASCII, no NUL), as in version 1
 *               key "version"     -> "2" (ASCII decimal)
 *               key "journal_seq" -> u64 little-endian: the journal sequence the last
 *                                    checkpoint covers; journal records up to it are in
 *                                    "counters" and the journal may drop them.
 *
 *   "counters"  key   = CounterId, 16 bytes: hi then lo, each big-endian. LMDB compares
 *                       keys with memcmp(), so its order is counter_id_compare()'s and a
 *                       checkpoint sorted by id touches each leaf page once, in order.
 *                       (MDB_INTEGERKEY is for 4- or 8-byte keys only: not usable.)
 *               value = 17 bytes: algorithm (1 byte, CounterAlgorithm), w0, w1 (u64
 *                       little-endian each; counter.h says what they mean).
 *               About 43 bytes an entry with LMDB's node header and page index, so with
 *               half-full to full leaf pages 45..90 bytes of data.mdb a counter.
 *
 * No expiry index (version 1 kept one and so wrote every renewal twice): a counter whose
 * w0 <= now is the same as an absent one; checkpoint_load() skips it, a checkpoint whose
 * record says so deletes it, and the expiry walk (walk_step()) deletes the others a bounded
 * number of entries at a time, resuming where it stopped.
 *
 * Version 1 (store.c) is migrated by checkpoint_open() (checkpoint.h): its "counters" db
 * (key = rule id + tag + actor, value = expiry + credit, u64 little-endian) and its "expiry"
 * index are replaced by version 2's "counters" in one write transaction.
 *
 * Environment flags: MDB_NOTLS (a Checkpoint moves between threads; see checkpoint.h).
 * Every commit is synchronous (no MDB_NOSYNC): a checkpoint is durable when
 * checkpoint_write() returns, which is what allows the journal to be dropped. Readahead is
 * left on: loading and checkpointing read the file in key order.
 */

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <lmdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "store-error.h"
#include "shared/clock.h"
#include "core/hash.h"

#define CHECKPOINT_MAGIC      "divvyd counter store" /* as version 1's */
#define CHECKPOINT_DBS        4                      /* meta, counters; v1's expiry while migrating */
#define CHECKPOINT_VALUE_SIZE 17                     /* bytes: algorithm, w0, w1 */
#define CHECKPOINT_FILE_MODE  0600 /* the user only, whatever the umask: data.mdb holds the id key */
#define CHECKPOINT_DIR_MODE   0750
#define CHECKPOINT_LOCK_SIZE                                                                                \
        (64U << 10) /* bytes of a lock.mdb made by checkpoint_lock_prepare(): at least LMDB's own (8 KiB,   \
                     * its 126 readers on x86-64), else LMDB would extend it unallocated; LMDB takes        \
                     * a larger file as it is, with room for more readers */
#define CHECKPOINT_RETRIES_MAX                                                                              \
        128 /* attempts of one transaction: each retry follows a growth of the map (at most 64              \
             * doublings) or its resize by another process */
#define CHECKPOINT_PREPARE_BYTES                                                                            \
        128 /* bytes of new pages a record may need: twice a record in a full leaf page */
#define V1_JOURNAL_NAME   "journal.divvyd" /* version 1's write-back journal */
#define V1_KEY_MIN        17               /* bytes: rule id + tag */
#define V1_KEY_MAX        417              /* bytes: rule id + tag + 400 bytes of actor */
#define V1_VALUE_SIZE     16               /* bytes: expiry, credit */
#define V1_JOURNAL_RECORD 30               /* bytes of a v1 journal record besides its key */

_Static_assert(COUNTER_ID_SIZE == HASH128_SIZE, "a counter id is a hash128()");

struct Checkpoint {
        char *dir;
        CheckpointOptions opts; /* defaults filled in */
        MDB_env *env;
        MDB_dbi dbi_meta, dbi_counters;
        uint64_t map_size; /* current */
        uint64_t journal_seq;
        pid_t other_pid;    /* another process had the environment open before ours (0: none) */
        CounterId walk_pos; /* the expiry walk's next entry, if walk_valid */
        bool walk_valid;
        uint8_t id_key[CHECKPOINT_ID_KEY_SIZE]; /* the secret key of counter ids (meta "id_key") */
        bool id_key_stored;                     /* read from meta, or written there */
        bool snapshot; /* format version 3: the counters are in counters.snap (snapshot.h) */
        uint64_t last_duration_usec, checkpoints, expired_total, map_grows, migrated;
};

/* A unit of work in one write transaction (txn_run()). Returns an MDB code, or a positive
 * errno (LMDB's convention for system errors). Called again from scratch after a map growth. */
typedef int (*TxnFunc)(Checkpoint *c, MDB_txn *txn, void *userdata);

static int errno_from_mdb(int r) {
        switch (r) {
        case MDB_SUCCESS:
                return 0;
        case MDB_NOTFOUND:
                return -ENOENT;
        case MDB_KEYEXIST:
                return -EEXIST;
        case MDB_MAP_FULL:
        case MDB_PAGE_FULL:
                return -ENOSPC;
        case MDB_TXN_FULL:
        case MDB_CURSOR_FULL:
        case MDB_DBS_FULL:
                return -E2BIG;
        case MDB_READERS_FULL:
        case MDB_TLS_FULL:
                return -EUSERS;
        case MDB_MAP_RESIZED:
                return -EAGAIN;
        case MDB_VERSION_MISMATCH:
        case MDB_INCOMPATIBLE:
                return -EPROTO;
        case MDB_INVALID:
        case MDB_CORRUPTED:
        case MDB_PAGE_NOTFOUND:
                return -EBADMSG;
        case MDB_BAD_RSLOT:
        case MDB_BAD_TXN:
        case MDB_BAD_VALSIZE:
        case MDB_BAD_DBI:
                return -EINVAL;
        default:
                return r > 0 ? -r : -EIO; /* MDB_PANIC and the rest */
        }
}

static void id_to_key(const CounterId *id, uint8_t out[COUNTER_ID_SIZE]) {
        uint64_t hi = htobe64(id->hi), lo = htobe64(id->lo);

        memcpy(out, &hi, sizeof hi);
        memcpy(out + 8, &lo, sizeof lo);
}

static CounterId id_from_key(const uint8_t *p) {
        uint64_t hi, lo;

        memcpy(&hi, p, sizeof hi);
        memcpy(&lo, p + 8, sizeof lo);
        return (CounterId){ .lo = be64toh(lo), .hi = be64toh(hi) };
}

static void record_to_value(const CounterRecord *r, uint8_t out[CHECKPOINT_VALUE_SIZE]) {
        out[0] = r->algorithm;
        put_le64(out + 1, r->state.w0);
        put_le64(out + 9, r->state.w1);
}

/* Decodes one entry of "counters". Returns an MDB code (MDB_CORRUPTED if malformed). */
static int record_from_entry(const MDB_val *k, const MDB_val *v, CounterRecord *ret) {
        const uint8_t *p = v->mv_data;

        if (k->mv_size != COUNTER_ID_SIZE || v->mv_size != CHECKPOINT_VALUE_SIZE ||
            p[0] >= _COUNTER_ALGORITHM_MAX)
                return MDB_CORRUPTED;
        *ret = (CounterRecord){
                .id = id_from_key(k->mv_data),
                .algorithm = p[0],
                .state = { .w0 = get_le64(p + 1), .w1 = get_le64(p + 9) },
        };
        return 0;
}

static bool record_live(const CounterRecord *r, uint64_t now) {
        return r->state.w0 > now; /* w0 == 0 (deleted) is never live */
}

/* Stable merge sort by id: records of one id keep their (journal) order. tmp holds n / 2
 * records: the left half is moved there and merged back into a. */
static void sort_records(CounterRecord *a, size_t n, CounterRecord *tmp) {
        size_t h = n / 2, i = 0, j = h, k = 0;

        if (n < 2)
                return;
        sort_records(a, h, tmp);
        sort_records(a + h, n - h, tmp);
        if (counter_id_compare(&a[h - 1].id, &a[h].id) <= 0)
                return; /* already in order, as is common for runs of new counters */
        memcpy(tmp, a, h * sizeof *a);
        while (i < h && j < n)
                a[k++] = counter_id_compare(&a[j].id, &tmp[i].id) < 0 ? a[j++] : tmp[i++];
        while (i < h)
                a[k++] = tmp[i++];
}

/* Sorts records stably by id. Returns false if out of memory (records unchanged). */
static bool sort_by_id(CounterRecord *records, size_t n) {
        CounterRecord *tmp;

        if (n < 2)
                return true;
        tmp = malloc(n / 2 * sizeof *tmp);
        if (!tmp)
                return false;
        sort_records(records, n, tmp);
        free(tmp);
        return true;
}

/* ---- the map: growth and its reserve ---- */

/* How far a checkpoint may grow the map: all but the last eighth of map_size_max. The rest
 * is kept for deleting (the expiry walk), which needs fresh pages even to delete
 * (copy-on-write), and for the migration: without it a map full at its maximum could never
 * shrink its content again. */
static uint64_t map_max_for_writes(const Checkpoint *c) {
        uint64_t cap = c->opts.map_size_max - c->opts.map_size_max / 8;

        return cap < c->opts.map_size ? c->opts.map_size : cap;
}

static void refresh_map_size(Checkpoint *c) {
        MDB_envinfo info;

        if (mdb_env_info(c->env, &info) == 0)
                c->map_size = info.me_mapsize;
}

/* Doubles the map (no transaction open) up to map_max_for_writes(), or with reserve up to
 * map_size_max. Returns 0 if it grew, -ENOSPC at that limit, or -errno. */
static int map_grow(Checkpoint *c, bool reserve) {
        uint64_t max = reserve ? c->opts.map_size_max : map_max_for_writes(c), n;
        int r;

        if (c->map_size >= max)
                return -ENOSPC;
        n = c->map_size > max / 2 ? max : c->map_size * 2;
        r = mdb_env_set_mapsize(c->env, (size_t) n);
        if (r != 0)
                return errno_from_mdb(r);
        c->map_size = n;
        c->map_grows++;
        return 0;
}

/* Grows the map ahead of a transaction that will write about bytes more than is in use, so
 * that a large checkpoint is not begun again after each doubling. Best effort: the
 * transaction still grows the map if it needs more. */
static void map_prepare(Checkpoint *c, uint64_t bytes) {
        MDB_envinfo info;
        MDB_stat st;
        uint64_t want;

        if (mdb_env_info(c->env, &info) != 0 || mdb_env_stat(c->env, &st) != 0)
                return;
        want = ((uint64_t) info.me_last_pgno + 1) * st.ms_psize + bytes;
        while (c->map_size < want && map_grow(c, false) == 0)
                ;
}

/* After a transaction grew the map into the reserve, gives checkpoints the smaller map
 * again (LMDB keeps at least what is in use). No transaction may be open. */
static void map_unreserve(Checkpoint *c) {
        if (c->map_size <= map_max_for_writes(c) ||
            mdb_env_set_mapsize(c->env, (size_t) map_max_for_writes(c)) != 0)
                return;
        refresh_map_size(c);
}

/* ---- transactions ---- */

/* Begins a transaction, adopting a map another process grew. Returns an MDB code. */
static int txn_begin(Checkpoint *c, unsigned flags, MDB_txn **ret) {
        int r;

        r = mdb_txn_begin(c->env, NULL, flags, ret);
        if (r != MDB_MAP_RESIZED)
                return r;
        r = mdb_env_set_mapsize(c->env, 0);
        if (r != 0)
                return r;
        refresh_map_size(c);
        return mdb_txn_begin(c->env, NULL, flags, ret);
}

/* The one way this file writes: f in a write transaction, committed (fsync'ed) if it
 * succeeds, aborted if not; on MDB_MAP_FULL the map grows (with reserve: into the reserve)
 * and f runs again in a new transaction. All or nothing. Returns 0 or -errno. */
static int txn_run(Checkpoint *c, bool reserve, TxnFunc f, void *userdata) {
        int r = 0;

        for (unsigned attempt = 0; attempt < CHECKPOINT_RETRIES_MAX; attempt++) {
                MDB_txn *txn;

                r = txn_begin(c, 0, &txn);
                if (r != 0)
                        break;
                r = f(c, txn, userdata);
                if (r == 0)
                        r = mdb_txn_commit(txn); /* frees txn, also on failure */
                else
                        mdb_txn_abort(txn);
                if (r != MDB_MAP_FULL || map_grow(c, reserve) < 0)
                        break;
        }
        if (reserve)
                map_unreserve(c);
        return errno_from_mdb(r);
}

static int meta_get(Checkpoint *c, MDB_txn *txn, const char *key, MDB_val *ret) {
        MDB_val k = { .mv_size = strlen(key), .mv_data = (void *) key };

        return mdb_get(txn, c->dbi_meta, &k, ret);
}

static int meta_put(Checkpoint *c, MDB_txn *txn, const char *key, const void *value, size_t size) {
        MDB_val k = { .mv_size = strlen(key), .mv_data = (void *) key };
        MDB_val v = { .mv_size = size, .mv_data = (void *) value };

        return mdb_put(txn, c->dbi_meta, &k, &v, 0);
}

static int meta_put_seq(Checkpoint *c, MDB_txn *txn, uint64_t seq) {
        uint8_t buf[8];

        put_le64(buf, seq);
        return meta_put(c, txn, "journal_seq", buf, sizeof buf);
}

/* Writes what makes "meta" say version 2 with seq and opens (creating) "counters". */
static int meta_put_v2(Checkpoint *c, MDB_txn *txn, uint64_t seq) {
        char ver[16];
        int r;

        r = meta_put(c, txn, "magic", CHECKPOINT_MAGIC, strlen(CHECKPOINT_MAGIC));
        if (r == 0)
                r = meta_put(c, txn, "version", ver,
                             (size_t) snprintf(ver, sizeof ver, "%d", CHECKPOINT_FORMAT_VERSION));
        if (r == 0)
                r = meta_put_seq(c, txn, seq);
        if (r == 0)
                r = meta_put(c, txn, "id_key", c->id_key, sizeof c->id_key);
        if (r == 0)
                r = mdb_dbi_open(txn, "counters", MDB_CREATE, &c->dbi_counters);
        return r;
}

/* ---- the expiry walk ---- */

typedef struct Walk {
        uint64_t now;
        size_t max;
        /* out, valid once the transaction committed */
        CounterId pos;
        bool pos_valid, wrapped;
        size_t deleted;
} Walk;

/* Examines up to w->max counters from the walk's position, deleting the expired ones. */
static int walk_step(Checkpoint *c, MDB_txn *txn, Walk *w) {
        uint8_t kb[COUNTER_ID_SIZE];
        MDB_cursor *cur;
        MDB_val k, v;
        size_t examined;
        int r;

        w->pos = c->walk_pos;
        w->pos_valid = c->walk_valid;
        w->wrapped = false;
        w->deleted = 0;
        if (w->max == 0)
                return 0;
        r = mdb_cursor_open(txn, c->dbi_counters, &cur);
        if (r != 0)
                return r;
        if (w->pos_valid) {
                id_to_key(&w->pos, kb);
                k = (MDB_val){ .mv_size = sizeof kb, .mv_data = kb };
                r = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        } else
                r = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
        for (examined = 0; r == 0 && examined < w->max; examined++) {
                CounterRecord rec;

                r = record_from_entry(&k, &v, &rec);
                if (r != 0)
                        break;
                if (!record_live(&rec, w->now)) {
                        r = mdb_cursor_del(cur, 0);
                        if (r != 0)
                                break;
                        w->deleted++;
                }
                r = mdb_cursor_get(cur, &k, &v, MDB_NEXT); /* after a delete: the entry after it */
        }
        if (r == MDB_NOTFOUND) {
                w->pos_valid = false; /* the next walk starts from the front */
                w->wrapped = true;
                r = 0;
        } else if (r == 0) {
                w->pos = id_from_key(k.mv_data);
                w->pos_valid = true;
        }
        mdb_cursor_close(cur);
        return r;
}

static void walk_done(Checkpoint *c, const Walk *w) {
        c->walk_pos = w->pos;
        c->walk_valid = w->pos_valid;
        c->expired_total += w->deleted;
}

static int expire_txn(Checkpoint *c, MDB_txn *txn, void *userdata) {
        return walk_step(c, txn, userdata);
}

int checkpoint_expire(Checkpoint *c, uint64_t now, size_t max, size_t *ret_deleted) {
        Walk w = { .now = now, .max = max };
        int r;

        if (!c)
                return -EINVAL;
        if (ret_deleted)
                *ret_deleted = 0;
        if (max == 0)
                return 0;
        r = txn_run(c, true, expire_txn, &w);
        if (r < 0)
                return r;
        walk_done(c, &w);
        if (ret_deleted)
                *ret_deleted = w.deleted;
        return w.wrapped;
}

/* ---- writing a checkpoint ---- */

typedef struct Write {
        const CounterRecord *records; /* sorted */
        size_t n;
        uint64_t journal_seq, now;
        bool last; /* the checkpoint's last transaction: records journal_seq, walks */
        Walk walk;
} Write;

static int write_txn(Checkpoint *c, MDB_txn *txn, void *userdata) {
        Write *w = userdata;
        MDB_cursor *cur;
        int r;

        r = mdb_cursor_open(txn, c->dbi_counters, &cur);
        if (r != 0)
                return r;
        for (size_t i = 0; i < w->n; i++) {
                const CounterRecord *rec = w->records + i;
                uint8_t kb[COUNTER_ID_SIZE], vb[CHECKPOINT_VALUE_SIZE];
                MDB_val k = { .mv_size = sizeof kb, .mv_data = kb }, v;

                if (i + 1 < w->n && counter_id_compare(&rec->id, &rec[1].id) == 0)
                        continue; /* a later record of this id wins */
                id_to_key(&rec->id, kb);
                if (record_live(rec, w->now)) {
                        record_to_value(rec, vb);
                        v = (MDB_val){ .mv_size = sizeof vb, .mv_data = vb };
                        r = mdb_cursor_put(cur, &k, &v, 0);
                } else {
                        r = mdb_cursor_get(cur, &k, &v, MDB_SET);
                        if (r == 0)
                                r = mdb_cursor_del(cur, 0);
                        else if (r == MDB_NOTFOUND)
                                r = 0; /* never checkpointed, or already gone */
                }
                if (r != 0)
                        break;
        }
        mdb_cursor_close(cur);
        if (r != 0 || !w->last)
                return r;
        r = meta_put_seq(c, txn, w->journal_seq);
        if (r == 0)
                r = walk_step(c, txn, &w->walk);
        return r;
}

/* Where the transaction that starts at records[start] ends: after txn_records_max records,
 * moved on past the other records of the last id (they must be decided together). */
static size_t chunk_end(const Checkpoint *c, const CounterRecord *records, size_t n, size_t start) {
        size_t end;

        if (c->opts.txn_records_max == 0 || n - start <= c->opts.txn_records_max)
                return n;
        end = start + c->opts.txn_records_max;
        while (end < n && counter_id_compare(&records[end - 1].id, &records[end].id) == 0)
                end++;
        return end;
}

int checkpoint_write(Checkpoint *c, CounterRecord *records, size_t n, uint64_t journal_seq, uint64_t now) {
        Write w = { .journal_seq = journal_seq, .now = now };
        uint64_t start = clock_usec(CLOCK_MONOTONIC);
        size_t i = 0;
        int r;

        if (!c || (!records && n > 0))
                return -EINVAL;
        for (size_t j = 0; j < n; j++)
                if (records[j].algorithm >= _COUNTER_ALGORITHM_MAX)
                        return -EINVAL;
        if (!sort_by_id(records, n))
                return -ENOMEM;
        w.walk = (Walk){ .now = now, .max = c->opts.expire_max };
        do {
                size_t end = chunk_end(c, records, n, i);

                w.records = records + i;
                w.n = end - i;
                w.last = end == n;
                map_prepare(c, (uint64_t) w.n * CHECKPOINT_PREPARE_BYTES);
                r = txn_run(c, false, write_txn, &w);
                if (r < 0)
                        return r;
                i = end;
        } while (!w.last);
        walk_done(c, &w.walk);
        c->journal_seq = journal_seq;
        c->checkpoints++;
        c->last_duration_usec = clock_usec(CLOCK_MONOTONIC) - start;
        return 0;
}

/* ---- loading ---- */

/* Asks the kernel to read data.mdb whole, in file order, ahead of a walk in key order: after
 * checkpoints have moved pages around, the walk's page faults would otherwise be random reads
 * of a cold file, one or a few pages each. Advisory. */
static void checkpoint_prefetch(MDB_env *env) {
        mdb_filehandle_t fd;

        if (mdb_env_get_fd(env, &fd) == 0)
                (void) posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
}

int checkpoint_load(Checkpoint *c, uint64_t now, int (*cb)(const CounterRecord *r, void *u), void *u) {
        MDB_cursor *cur = NULL;
        MDB_txn *txn;
        MDB_val k, v;
        int r;

        if (!c || !cb)
                return -EINVAL;
        checkpoint_prefetch(c->env);
        r = txn_begin(c, MDB_RDONLY, &txn);
        if (r != 0)
                return errno_from_mdb(r);
        r = mdb_cursor_open(txn, c->dbi_counters, &cur);
        if (r == 0)
                r = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
        while (r == 0) {
                CounterRecord rec;

                r = record_from_entry(&k, &v, &rec);
                if (r != 0)
                        break;
                if (record_live(&rec, now)) {
                        int q = cb(&rec, u);

                        if (q < 0) {
                                mdb_cursor_close(cur);
                                mdb_txn_abort(txn);
                                return q;
                        }
                }
                r = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
        }
        if (cur)
                mdb_cursor_close(cur);
        mdb_txn_abort(txn);
        return r == MDB_NOTFOUND ? 0 : errno_from_mdb(r);
}

/* ---- opening: create, check, or migrate version 1 ---- */

typedef struct Migration {
        uint64_t now;
        CounterRecord *records; /* the live v1 counters, as version-2 records */
        size_t n, allocated;
} Migration;

static int migration_add(Checkpoint *c, Migration *m, const MDB_val *k, const MDB_val *v) {
        uint64_t expiry;

        if (k->mv_size < V1_KEY_MIN || k->mv_size > V1_KEY_MAX || v->mv_size != V1_VALUE_SIZE)
                return MDB_CORRUPTED;
        expiry = get_le64(v->mv_data);
        if (expiry <= m->now)
                return 0; /* expired: version 1 treats it as absent */
        if (m->n == m->allocated) {
                size_t a = m->allocated ? m->allocated * 2 : 4096;
                CounterRecord *p = reallocarray(m->records, a, sizeof *p);

                if (!p)
                        return ENOMEM;
                m->records = p;
                m->allocated = a;
        }
        m->records[m->n++] = (CounterRecord){
                .id = counter_id_from_key(c->id_key, k->mv_data, k->mv_size),
                .algorithm = COUNTER_FIXED_WINDOW,
                .state = { .w0 = expiry, .w1 = get_le64((const uint8_t *) v->mv_data + 8) },
        };
        return 0;
}

/* Version 1 -> 2 in the transaction txn: see checkpoint.h. */
static int migrate_txn(Checkpoint *c, MDB_txn *txn, void *userdata) {
        Migration *m = userdata;
        MDB_dbi v1_counters, v1_expiry;
        MDB_cursor *cur;
        MDB_val k, v;
        int r;

        m->n = 0; /* again from scratch after a map growth */
        r = mdb_dbi_open(txn, "counters", 0, &v1_counters);
        if (r == 0)
                r = mdb_dbi_open(txn, "expiry", 0, &v1_expiry);
        if (r == MDB_NOTFOUND || r == MDB_INCOMPATIBLE)
                return MDB_CORRUPTED; /* a version-1 store without its tables */
        if (r == 0)
                r = mdb_cursor_open(txn, v1_counters, &cur);
        if (r != 0)
                return r;
        for (r = mdb_cursor_get(cur, &k, &v, MDB_FIRST); r == 0; r = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                r = migration_add(c, m, &k, &v);
                if (r != 0)
                        break;
        }
        mdb_cursor_close(cur);
        if (r != MDB_NOTFOUND)
                return r;

        if (!sort_by_id(m->records, m->n))
                return ENOMEM;
        r = mdb_drop(txn, v1_counters, 1);
        if (r == 0)
                r = mdb_drop(txn, v1_expiry, 1);
        if (r == 0)
                r = meta_put_v2(c, txn, 0);
        if (r != 0)
                return r;
        r = mdb_cursor_open(txn, c->dbi_counters, &cur);
        if (r != 0)
                return r;
        for (size_t i = 0; i < m->n; i++) {
                uint8_t kb[COUNTER_ID_SIZE], vb[CHECKPOINT_VALUE_SIZE];

                if (i + 1 < m->n && counter_id_compare(&m->records[i].id, &m->records[i + 1].id) == 0)
                        continue; /* two v1 keys with one hash: cannot be told apart by a hit either */
                id_to_key(&m->records[i].id, kb);
                record_to_value(m->records + i, vb);
                k = (MDB_val){ .mv_size = sizeof kb, .mv_data = kb };
                v = (MDB_val){ .mv_size = sizeof vb, .mv_data = vb };
                r = mdb_cursor_put(cur, &k, &v, MDB_APPEND); /* sorted, into an empty db */
                if (r != 0)
                        break;
        }
        mdb_cursor_close(cur);
        return r;
}

static int id_key_txn(Checkpoint *c, MDB_txn *txn, void *userdata) {
        (void) userdata;
        return meta_put(c, txn, "id_key", c->id_key, sizeof c->id_key);
}

static int create_txn(Checkpoint *c, MDB_txn *txn, void *userdata) {
        int r;

        (void) userdata;
        r = mdb_dbi_open(txn, "meta", MDB_CREATE, &c->dbi_meta);
        return r != 0 ? r : meta_put_v2(c, txn, 0);
}

/* Reads the format version in a read-only transaction (which never waits for a writer, e.g.
 * a version-1 divvyd in write-back mode): 0 for an empty environment; for version 2 also
 * opens "counters" and reads journal_seq. Returns the version, or -errno with err set. */
static int read_version(Checkpoint *c, char *err, size_t err_size) {
        MDB_dbi main_dbi;
        MDB_txn *txn;
        MDB_stat st;
        MDB_val v;
        char ver[16], *end;
        unsigned long version;
        int r;

        r = txn_begin(c, MDB_RDONLY, &txn);
        if (r != 0) {
                set_error(err, err_size, "%s: cannot begin a transaction: %s", c->dir, mdb_strerror(r));
                return errno_from_mdb(r);
        }
        r = mdb_dbi_open(txn, NULL, 0, &main_dbi);
        if (r == 0)
                r = mdb_stat(txn, main_dbi, &st);
        if (r != 0)
                goto fail_mdb;
        if (st.ms_entries == 0) {
                mdb_txn_abort(txn);
                return 0;
        }
        r = mdb_dbi_open(txn, "meta", 0, &c->dbi_meta);
        if (r == 0)
                r = meta_get(c, txn, "magic", &v);
        if (r == MDB_NOTFOUND || r == MDB_INCOMPATIBLE ||
            (r == 0 && (v.mv_size != strlen(CHECKPOINT_MAGIC) ||
                        memcmp(v.mv_data, CHECKPOINT_MAGIC, v.mv_size) != 0))) {
                set_error(err, err_size, "%s/data.mdb: an LMDB database, but not a divvyd counter store",
                          c->dir);
                mdb_txn_abort(txn);
                return -EPROTO;
        }
        if (r == 0)
                r = meta_get(c, txn, "version", &v);
        if (r == MDB_NOTFOUND || (r == 0 && (v.mv_size == 0 || v.mv_size >= sizeof ver))) {
                set_error(err, err_size, "%s/data.mdb: database format version is missing or unreadable",
                          c->dir);
                mdb_txn_abort(txn);
                return -EPROTO;
        }
        if (r != 0)
                goto fail_mdb;
        memcpy(ver, v.mv_data, v.mv_size);
        ver[v.mv_size] = 0;
        errno = 0;
        version = strtoul(ver, &end, 10);
        if (errno != 0 || *end != 0 || ver[0] < '0' || ver[0] > '9' ||
            (version != 1 && version != CHECKPOINT_FORMAT_VERSION &&
             version != CHECKPOINT_SNAPSHOT_VERSION)) {
                set_error(err, err_size,
                          "%s/data.mdb: database format version '%s' is not supported by this divvyd "
                          "(expects %d or %d, or 1 to migrate)",
                          c->dir, ver, CHECKPOINT_FORMAT_VERSION, CHECKPOINT_SNAPSHOT_VERSION);
                mdb_txn_abort(txn);
                return -EPROTO;
        }
        if (version == 1) {
                r = mdb_txn_commit(txn); /* keeps the handle of "meta" */
                if (r != 0)
                        goto fail_mdb_done;
                return 1;
        }
        c->snapshot = version == CHECKPOINT_SNAPSHOT_VERSION;
        r = mdb_dbi_open(txn, "counters", 0, &c->dbi_counters);
        if (r == 0)
                r = meta_get(c, txn, "journal_seq", &v);
        if (r == MDB_NOTFOUND || r == MDB_INCOMPATIBLE || (r == 0 && v.mv_size != 8)) {
                set_error(err, err_size, "%s/data.mdb: a version-2 divvyd counter store missing its tables",
                          c->dir);
                mdb_txn_abort(txn);
                return -EBADMSG;
        }
        if (r != 0)
                goto fail_mdb;
        c->journal_seq = get_le64(v.mv_data);
        r = meta_get(c, txn, "id_key", &v);
        if (r == 0 && v.mv_size != sizeof c->id_key) {
                set_error(err, err_size, "%s/data.mdb: the counter id key is damaged", c->dir);
                mdb_txn_abort(txn);
                return -EBADMSG;
        }
        if (r == 0) {
                memcpy(c->id_key, v.mv_data, sizeof c->id_key);
                c->id_key_stored = true;
        } else if (r != MDB_NOTFOUND)
                goto fail_mdb;
        r = mdb_txn_commit(txn); /* keeps the handles */
        if (r != 0)
                goto fail_mdb_done;
        return CHECKPOINT_FORMAT_VERSION;

fail_mdb:
        mdb_txn_abort(txn);
fail_mdb_done:
        set_error(err, err_size, "%s/data.mdb: %s", c->dir, mdb_strerror(r));
        r = errno_from_mdb(r);
        return r == -ENOENT ? -EBADMSG : r;
}

/* Before migrating: refuses a version-1 write-back journal that may hold records data.mdb
 * lacks, or that a running divvyd holds. On success *ret_fd is the journal, locked (or
 * -EBADF if there is none), to be removed once the migration committed. */
static int v1_journal_check(Checkpoint *c, int *ret_fd, char *err, size_t err_size) {
        uint8_t head[2] = { 0, 0 };
        char p[PATH_MAX];
        struct stat st;
        int fd, r;

        *ret_fd = -EBADF;
        if ((size_t) snprintf(p, sizeof p, "%s/" V1_JOURNAL_NAME, c->dir) >= sizeof p) {
                set_error(err, err_size, "%s: path too long", c->dir);
                return -ENAMETOOLONG;
        }
        fd = open(p, O_RDWR | O_CLOEXEC);
        if (fd < 0) {
                if (errno == ENOENT)
                        return 0;
                r = -errno;
                set_error(err, err_size, "cannot open %s: %s", p, strerror(-r));
                return r;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                r = errno == EWOULDBLOCK ? -EBUSY : -errno;
                set_error(err, err_size, "cannot lock %s: %s", p,
                          r == -EBUSY ? "the store is in use by another process" : strerror(-r));
                goto fail;
        }
        if (fstat(fd, &st) < 0 || (st.st_size >= 2 && pread(fd, head, sizeof head, 0) != sizeof head)) {
                r = -errno;
                set_error(err, err_size, "cannot read %s: %s", p, strerror(-r));
                goto fail;
        }
        /* a record starts with its key length (u16 little-endian, > 16); 0 marks the end */
        if (st.st_size >= V1_JOURNAL_RECORD + V1_KEY_MIN &&
            ((size_t) head[0] | (size_t) head[1] << 8) >= V1_KEY_MIN) {
                set_error(err, err_size,
                          "%s may hold updates that divvyd's version-1 store has not written to data.mdb "
                          "yet: start the previous divvyd once and stop it cleanly, then start this one",
                          p);
                r = -EUCLEAN;
                goto fail;
        }
        *ret_fd = fd;
        return 0;

fail:
        close(fd);
        return r;
}

/* Which other process has the LMDB environment in dir open, if any (0: none). LMDB holds a
 * shared fcntl() lock on the first byte of lock.mdb while an environment is open; F_GETLK
 * reports another process's. Must run before this process opens the environment: closing
 * any descriptor of lock.mdb would drop this process's own LMDB lock. */
static pid_t lock_holder(const char *dir) {
        struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
        char p[PATH_MAX];
        int fd;

        if ((size_t) snprintf(p, sizeof p, "%s/lock.mdb", dir) >= sizeof p)
                return 0;
        fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return 0;
        if (fcntl(fd, F_GETLK, &fl) < 0)
                fl.l_type = F_UNLCK;
        close(fd);
        return fl.l_type == F_UNLCK ? 0 : fl.l_pid;
}

static int migrate(Checkpoint *c, char *err, size_t err_size) {
        Migration m = { .now = c->opts.now_usec ? c->opts.now_usec : clock_usec(CLOCK_REALTIME) };
        char p[PATH_MAX];
        int fd, r;

        if (c->other_pid > 0) {
                /* a divvyd of version 1 would go on writing its keys into version 2's tables */
                set_error(err, err_size,
                          "%s: the version-1 store is in use by another process (pid %d): stop it before "
                          "this divvyd migrates the store",
                          c->dir, (int) c->other_pid);
                return -EBUSY;
        }
        r = v1_journal_check(c, &fd, err, err_size);
        if (r < 0)
                return r;
        r = txn_run(c, true, migrate_txn, &m);
        free(m.records);
        if (r < 0) {
                if (fd >= 0)
                        close(fd);
                if (r == -ENOSPC)
                        set_error(err, err_size,
                                  "%s/data.mdb: migrating the version-1 store to version 2 needs more room "
                                  "than the maximum map size of %" PRIu64 " bytes, or the disk is full",
                                  c->dir, c->opts.map_size_max);
                else
                        set_error(err, err_size, "%s/data.mdb: cannot migrate the version-1 store: %s",
                                  c->dir, strerror(-r));
                return r == -ENOENT ? -EBADMSG : r;
        }
        c->migrated = m.n;
        if (fd >= 0) {
                /* empty (checked above) and nothing of version 2: it goes */
                snprintf(p, sizeof p, "%s/" V1_JOURNAL_NAME, c->dir);
                (void) unlink(p);
                close(fd);
        }
        return 0;
}

/* LMDB trusts the file to hold every page its meta page names; a truncated file would be a
 * SIGBUS on first access. Refuse it instead. */
static int check_file_size(Checkpoint *c, char *err, size_t err_size) {
        MDB_envinfo info;
        MDB_stat st;
        struct stat fst;
        char p[PATH_MAX];
        uint64_t need;
        int r;

        r = mdb_env_info(c->env, &info);
        if (r == 0)
                r = mdb_env_stat(c->env, &st);
        if (r != 0) {
                set_error(err, err_size, "%s: %s", c->dir, mdb_strerror(r));
                return errno_from_mdb(r);
        }
        snprintf(p, sizeof p, "%s/data.mdb", c->dir);
        if (stat(p, &fst) < 0) {
                r = -errno;
                set_error(err, err_size, "cannot stat %s: %s", p, strerror(-r));
                return r;
        }
        need = ((uint64_t) info.me_last_pgno + 1) * st.ms_psize;
        if ((uint64_t) fst.st_size < need) {
                set_error(err, err_size,
                          "%s is truncated or damaged: %" PRIu64 " bytes, but its pages need %" PRIu64, p,
                          (uint64_t) fst.st_size, need);
                return -EBADMSG;
        }
        c->map_size = info.me_mapsize;
        return 0;
}

int checkpoint_lock_prepare(const char *dir, char *err, size_t err_size) {
        char path[PATH_MAX];
        bool created = true;
        struct stat st;
        int fd, r = 0;

        if ((size_t) snprintf(path, sizeof path, "%s/lock.mdb", dir) >= sizeof path)
                return 0;
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, CHECKPOINT_FILE_MODE);
        if (fd < 0 && errno == EEXIST) {
                created = false;
                fd = open(path, O_RDWR | O_CLOEXEC);
        }
        if (fd < 0)
                return 0;
        /* fallocate(), not posix_fallocate(): where the filesystem cannot, glibc's emulation
         * would write bytes back into a lock file other processes may be using. A lock file
         * LMDB made before is used as it is when the disk is full: LMDB wrote its first page
         * when it made it, and a later page only holds readers beyond the ~60 of the first. */
        if (fstat(fd, &st) == 0 &&
            fallocate(fd, 0, 0, st.st_size > 0 ? st.st_size : (off_t) CHECKPOINT_LOCK_SIZE) < 0 &&
            (errno == ENOSPC || errno == EDQUOT) && st.st_size == 0) {
                r = -errno;
                if (created)
                        (void) unlink(path);
                set_error(err, err_size, "%s: the disk is full, no room for lock.mdb (%s): free some space",
                          dir, strerror(-r));
        }
        close(fd);
        return r;
}

static int env_open(Checkpoint *c, char *err, size_t err_size) {
        struct stat st;
        int r, dead;

        if (mkdir(c->dir, CHECKPOINT_DIR_MODE) < 0 && errno != EEXIST) {
                r = -errno;
                set_error(err, err_size, "cannot create directory %s: %s", c->dir, strerror(-r));
                return r;
        }
        if (stat(c->dir, &st) < 0) {
                r = -errno;
                set_error(err, err_size, "cannot stat %s: %s", c->dir, strerror(-r));
                return r;
        }
        if (!S_ISDIR(st.st_mode)) {
                set_error(err, err_size, "%s is not a directory", c->dir);
                return -ENOTDIR;
        }
        r = checkpoint_lock_prepare(c->dir, err, err_size);
        if (r < 0)
                return r;
        r = mdb_env_create(&c->env);
        if (r != 0) {
                c->env = NULL;
                set_error(err, err_size, "cannot create LMDB environment: %s", mdb_strerror(r));
                return errno_from_mdb(r);
        }
        r = mdb_env_set_maxdbs(c->env, CHECKPOINT_DBS);
        if (r == 0)
                r = mdb_env_set_mapsize(c->env, (size_t) c->opts.map_size);
        if (r != 0) {
                set_error(err, err_size, "cannot configure LMDB environment: %s", mdb_strerror(r));
                return errno_from_mdb(r);
        }
        r = mdb_env_open(c->env, c->dir, MDB_NOTLS, CHECKPOINT_FILE_MODE);
        if (r == MDB_INVALID || r == MDB_VERSION_MISMATCH || r == MDB_CORRUPTED || r == MDB_PAGE_NOTFOUND) {
                set_error(
                        err, err_size,
                        "%s/data.mdb is not a valid LMDB database (corrupt, truncated or foreign file): %s",
                        c->dir, mdb_strerror(r));
                return -EBADMSG;
        }
        if (r == ENOSPC || r == EDQUOT) { /* data.mdb's first pages (a new database) */
                set_error(err, err_size, "%s: the disk is full, no room for data.mdb (%s): free some space",
                          c->dir, strerror(r));
                return -r;
        }
        if (r != 0) {
                set_error(err, err_size, "cannot open LMDB environment in %s: %s", c->dir, mdb_strerror(r));
                return errno_from_mdb(r);
        }
        r = check_file_size(c, err, err_size);
        if (r < 0)
                return r;
        r = mdb_reader_check(c->env, &dead); /* slots of readers that died without closing */
        if (r != 0) {
                set_error(err, err_size, "%s: cannot clear stale readers: %s", c->dir, mdb_strerror(r));
                return errno_from_mdb(r);
        }
        return 0;
}

int checkpoint_open(const char *dir, const CheckpointOptions *o, Checkpoint **ret, char *err,
                    size_t err_size) {
        Checkpoint *c;
        int r;

        if (err && err_size > 0)
                err[0] = 0;
        if (!dir || !*dir || !ret) {
                set_error(err, err_size, "invalid checkpoint options");
                return -EINVAL;
        }
        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        if (o)
                c->opts = *o;
        c->dir = strdup(dir);
        if (!c->dir) {
                r = -ENOMEM;
                goto fail;
        }
        if (c->opts.map_size == 0)
                c->opts.map_size = CHECKPOINT_MAP_SIZE_DEFAULT;
        if (c->opts.map_size_max == 0)
                c->opts.map_size_max = CHECKPOINT_MAP_SIZE_MAX_DEFAULT;
        if (c->opts.map_size_max < c->opts.map_size)
                c->opts.map_size_max = c->opts.map_size;
        if (c->opts.expire_max == 0)
                c->opts.expire_max = CHECKPOINT_EXPIRE_MAX_DEFAULT;

        /* A fresh secret key for the counter ids; read_version() replaces it with the stored one. */
        if (getrandom(c->id_key, sizeof c->id_key, 0) != (ssize_t) sizeof c->id_key) {
                r = -errno;
                set_error(err, err_size, "cannot get random bytes for the counter id key: %s", strerror(-r));
                goto fail;
        }
        c->other_pid = lock_holder(c->dir);
        r = env_open(c, err, err_size);
        if (r < 0)
                goto fail;
        r = read_version(c, err, err_size);
        if (r == CHECKPOINT_FORMAT_VERSION && !c->id_key_stored) {
                /* a version-2 database of a divvyd that hashed ids under the public key: it has
                 * no counter a keyed id can find, since none could be migrated to it */
                r = txn_run(c, false, id_key_txn, NULL);
                if (r < 0)
                        set_error(err, err_size, "%s/data.mdb: cannot store the counter id key: %s", c->dir,
                                  strerror(-r));
        } else if (r == 0) {
                r = txn_run(c, false, create_txn, NULL);
                if (r < 0)
                        set_error(err, err_size, "%s/data.mdb: cannot create the store: %s", c->dir,
                                  strerror(-r));
        } else if (r == 1)
                r = migrate(c, err, err_size);
        if (r < 0)
                goto fail;
        *ret = c;
        return 0;

fail:
        checkpoint_close(c);
        return r;
}

Checkpoint *checkpoint_close(Checkpoint *c) {
        if (!c)
                return NULL;
        if (c->env)
                mdb_env_close(c->env);
        free(c->dir);
        free(c);
        return NULL;
}

void checkpoint_id_key(const Checkpoint *c, uint8_t ret[static CHECKPOINT_ID_KEY_SIZE]) {
        memcpy(ret, c->id_key, CHECKPOINT_ID_KEY_SIZE);
}

bool checkpoint_snapshot(const Checkpoint *c) {
        return c && c->snapshot;
}

static int adopt_txn(Checkpoint *c, MDB_txn *txn, void *userdata) {
        char ver[16];
        int r;

        r = mdb_drop(txn, c->dbi_counters, 0);
        if (r == 0)
                r = meta_put(c, txn, "version", ver,
                             (size_t) snprintf(ver, sizeof ver, "%d", CHECKPOINT_SNAPSHOT_VERSION));
        if (r == 0)
                r = meta_put_seq(c, txn, *(const uint64_t *) userdata);
        return r;
}

/* After the migration to version 3: data.mdb keeps its size (LMDB never gives pages back to
 * the file), which every start would read through (store-verify.c). A compacted copy, synced
 * and renamed over it, is the few pages of "meta". Nothing writes data.mdb after the
 * migration, so the environment still open on the old file misses nothing. Best effort: a
 * crash or a failure leaves one or the other, both version 3. */
static void compact(Checkpoint *c) {
        char tmp[PATH_MAX], path[PATH_MAX];
        int fd, dfd, r;

        snprintf(tmp, sizeof tmp, "%s/data.mdb.compact", c->dir);
        snprintf(path, sizeof path, "%s/data.mdb", c->dir);
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
                return;
        (void) fchmod(fd, 0600); /* whatever the umask did */
        r = mdb_env_copyfd2(c->env, fd, MDB_CP_COMPACT);
        if (r == 0 && fsync(fd) < 0)
                r = errno;
        close(fd);
        if (r != 0 || rename(tmp, path) < 0) {
                (void) unlink(tmp);
                return;
        }
        dfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
                (void) fsync(dfd);
                close(dfd);
        }
}

int checkpoint_adopt_snapshot(Checkpoint *c, uint64_t journal_seq) {
        int r;

        if (!c)
                return -EINVAL;
        /* the reserve may be used: emptying "counters" frees pages, but copy-on-write needs a few */
        r = txn_run(c, true, adopt_txn, &journal_seq);
        if (r < 0)
                return r;
        c->snapshot = true;
        c->journal_seq = journal_seq;
        compact(c);
        return 0;
}

uint64_t checkpoint_journal_seq(const Checkpoint *c) {
        return c ? c->journal_seq : 0;
}

int checkpoint_get_stats(Checkpoint *c, CheckpointStats *ret) {
        MDB_envinfo info;
        MDB_stat st;
        MDB_txn *txn;
        struct stat fst;
        char p[PATH_MAX];
        int r;

        if (!c || !ret)
                return -EINVAL;
        r = txn_begin(c, MDB_RDONLY, &txn);
        if (r != 0)
                return errno_from_mdb(r);
        r = mdb_stat(txn, c->dbi_counters, &st);
        mdb_txn_abort(txn);
        if (r == 0)
                r = mdb_env_info(c->env, &info);
        if (r != 0)
                return errno_from_mdb(r);
        snprintf(p, sizeof p, "%s/data.mdb", c->dir);
        if (stat(p, &fst) < 0)
                return -errno;
        *ret = (CheckpointStats){
                .counters = st.ms_entries,
                .file_size = (uint64_t) fst.st_size,
                .data_size = ((uint64_t) info.me_last_pgno + 1) * st.ms_psize,
                .map_size = info.me_mapsize,
                .journal_seq = c->journal_seq,
                .last_duration_usec = c->last_duration_usec,
                .checkpoints = c->checkpoints,
                .expired_total = c->expired_total,
                .map_grows = c->map_grows,
                .migrated = c->migrated,
        };
        return 0;
}
