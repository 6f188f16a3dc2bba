/* SPDX-License-Identifier: MIT */

/*
 * The counter store: one LMDB environment (directory with data.mdb + lock.mdb)
 * holding three named databases. Only src/store/ includes <lmdb.h> (this file and
 * store-verify.c); the write-back journal (journal.c) deals in bytes and files only, and
 * this file calls it, never the reverse.
 *
 * On-disk format, version STORE_FORMAT_VERSION (1):
 *
 *   "meta"      key "magic"   -> STORE_MAGIC (ASCII, no NUL)
 *               key "version" -> format version as ASCII decimal ("1")
 *               Written once when the environment is created; store_open() refuses
 *               anything else (-EPROTO).
 *
 *   "counters"  key   = rule_id (RULE_ID_SIZE = 16 bytes)
 *                       + tag (1 byte): 0 no actor (rule without actorField),
 *                                       1 actor kept verbatim,
 *                                       2 actor hashed
 *                       + tag 1: the actor bytes (0..STORE_ACTOR_INLINE_MAX = 400)
 *                         tag 2: hash128(actor) (16 bytes), for actors longer than 400
 *                       so a key is at most 417 bytes, under LMDB's 511-byte limit.
 *               value = 16 bytes: expiry_usec (u64 little-endian, wall-clock
 *                       microseconds since the epoch at which the window ends)
 *                       + credit (u64 little-endian, credit left in the window).
 *
 *   "expiry"    key   = expiry_usec (u64 big-endian, so keys sort by time)
 *                       + the counter key as above (at most 425 bytes in all)
 *               value = empty.
 *               One entry per counter, kept in step with its value: creating or
 *               renewing a counter moves its entry; a decrement does not touch it.
 *               The sweeper walks this index from the front and stops at the first
 *               unexpired entry, so it never scans live counters.
 *
 * A counter is live while now < expiry_usec. An expired counter is treated as absent
 * by every hit, whether or not the sweeper has deleted it yet.
 *
 * Durability (LMDB without MDB_WRITEMAP in every mode):
 *
 *   STORE_SYNC_ALWAYS   normal LMDB commits: data pages and the meta page are
 *                       fsync'ed before store_apply() returns. A committed batch
 *                       survives a process crash, an OS crash and a power cut.
 *   STORE_SYNC_PERIODIC MDB_NOSYNC; store_sync(), called by the server's timer,
 *                       fsyncs (mdb_env_sync(env, 1)) if anything was committed since
 *                       the last sync. A committed batch survives a process crash at
 *                       once; after an OS crash or power cut the database comes back
 *                       as of some commit at or after the last completed sync (at most
 *                       about one sync interval of updates is lost).
 *   STORE_SYNC_NONE     MDB_NOSYNC and no fsync ever (except what the kernel flushes on
 *                       its own and the final sync at close is skipped too). Survives
 *                       a process crash; an OS crash loses whatever the kernel had not
 *                       written back yet.
 *
 * The write-order caveat from lmdb.h: with MDB_NOSYNC, LMDB writes a commit's data
 * pages and then its meta page with plain write()s and relies on them reaching the
 * disk in that order. Only if the filesystem preserves write order does an OS crash
 * merely undo the final transactions; on one that reorders writes (and with a disk
 * cache that does), a meta page could land before the pages it points to, and the
 * database could be damaged. MDB_WRITEMAP is never used: combined with MDB_NOSYNC it
 * gives the kernel no ordering at all. Where an OS crash must not risk the database
 * on such a filesystem, use sync=always.
 *
 * Write-back (opts.write_back, periodic and none): instead of one commit per batch,
 * batches go into one long write transaction, committed by store_sync() (the
 * manager's timer, every sync interval), at close, and early before a batch would take
 * it past STORE_WRITE_BACK_HITS_MAX hits (a batch larger than that is committed at once).
 * Sweeps and stats run inside it. A counter written by many hits between two commits
 * is written to disk once, and a batch costs no page writes and no syscall at all.
 * What makes it safe is the journal (STORE_JOURNAL_NAME), a file of JOURNAL_SIZE
 * bytes allocated once and mapped shared: as a batch is applied, the new value of
 * every counter it changes is copied into the mapping, before store_apply() returns.
 * Memory of a shared file mapping belongs to the kernel's page cache, so a crash of
 * the process loses none of it; the records are never msync'ed, the sync modes keep
 * their meaning for crashes of the OS (only the first page, with the end mark a commit
 * left there, is msync'ed after each fsync of the database, so that an OS crash cannot
 * bring back a generation older than the database on disk). Each record carries the
 * journal's generation and a checksum; a commit starts a new generation at offset 0
 * (and marks the end there), so replay reads records from offset 0 while they are
 * whole, valid and of the first record's generation. Replay (idempotent: records hold values, not
 * increments, in order) happens in store_open(), and in the store itself when the
 * open transaction is lost (map full, or a failed commit). The journal file is locked
 * (flock): a second process cannot open the same store in write-back mode (it would
 * wait forever for LMDB's writer lock, which the open transaction holds).
 * So, for a batch store_apply() returned:
 *   always   (no write-back) on disk: survives a process crash, an OS crash, a power cut.
 *   periodic survives a process crash; an OS crash or power cut loses at most the
 *            hits since the last sync (about one sync interval), with the caveat above.
 *   none     survives a process crash; an OS crash loses what the kernel had not written.
 *
 * Other environment flags: MDB_NOTLS (reader slots belong to transactions, not
 * threads), MDB_NORDAHEAD (every access is a point lookup; kernel readahead on a
 * database larger than RAM only evicts useful pages).
 */

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lmdb.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/hash.h"
#include "journal.h"
#include "store-error.h"
#include "store.h"

#define STORE_MAGIC         "divvyd counter store"
#define STORE_DBS           3 /* named databases: meta, counters, expiry */
#define STORE_TAG_NO_ACTOR  0
#define STORE_TAG_VERBATIM  1
#define STORE_TAG_HASHED    2
#define STORE_KEY_MAX       (RULE_ID_SIZE + 1 + STORE_ACTOR_INLINE_MAX) /* bytes: 417 */
#define STORE_EXPIRY_PREFIX 8                                           /* bytes: big-endian u64 */
#define STORE_INDEX_KEY_MAX (STORE_EXPIRY_PREFIX + STORE_KEY_MAX)       /* bytes: 425 */
#define STORE_VALUE_SIZE    16                                          /* bytes: expiry + credit */
#define STORE_FILE_MODE     0640                                        /* data.mdb, lock.mdb */
#define STORE_DIR_MODE      0750
#define STORE_RETRIES_MAX                                                                                   \
        128 /* attempts of one batch: each retry follows a map growth (at most 64 doublings) or             \
             * a map resize by another process */
#define USEC_PER_SEC       1000000ULL
#define JOURNAL_RECORD_MAX (JOURNAL_RECORD_FIXED + STORE_KEY_MAX)
/* bytes (about 15 MB): room for a full write-back transaction of the longest keys;
 * preallocated, so that a full disk cannot fault a write into the mapping */
#define JOURNAL_SIZE ((size_t) STORE_WRITE_BACK_HITS_MAX * JOURNAL_RECORD_MAX)

#define _cleanup_(f) __attribute__((cleanup(f)))
/* Hands the transaction on (to a commit, which frees it), leaving NULL for the cleanup. */
#define TAKE_TXN(t)                                                                                         \
        ({                                                                                                  \
                MDB_txn *_t = (t);                                                                          \
                (t) = NULL;                                                                                 \
                _t;                                                                                         \
        })

_Static_assert(STORE_INDEX_KEY_MAX <= 511, "LMDB's default maximum key size is 511 bytes");
_Static_assert(STORE_ACTOR_INLINE_MAX >= HASH128_SIZE,
               "a hashed actor must not be longer than an inline one");

/* A write transaction and the first error of its steps (sticky: see txn_check()). */
typedef struct StoreTxn {
        MDB_txn *txn;
        int error;     /* 0 or the first -errno */
        bool map_full; /* that error was MDB_MAP_FULL: a larger map may let the work through */
} StoreTxn;

struct Store {
        StoreOptions opts; /* opts.path owned */
        MDB_env *env;
        MDB_dbi dbi_main, dbi_meta, dbi_counters, dbi_expiry;
        uint64_t map_size; /* current */
        bool dirty;        /* committed since the last sync */
        uint64_t swept_total, map_grows, commits, syncs;

        /* Write-back (opts.write_back): the open transaction, the hits in it, and the
         * journal of every batch applied to it (see store.h and "Write-back" above). */
        StoreTxn wtxn;    /* wtxn.txn NULL: none open */
        MDB_cursor *wcur; /* on the counters in wtxn, kept across batches; LMDB frees it with wtxn */
        size_t wtxn_hits;
        Journal journal; /* journal.map NULL: no write-back */
};

static int errno_from_mdb(int r) {
        switch (r) {
        case MDB_SUCCESS:
                return 0;
        case MDB_KEYEXIST:
                return -EEXIST;
        case MDB_NOTFOUND:
                return -ENOENT;
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
        case MDB_PANIC:
                return -EIO;
        case MDB_BAD_RSLOT:
        case MDB_BAD_TXN:
        case MDB_BAD_VALSIZE:
        case MDB_BAD_DBI:
                return -EINVAL;
        default:
                return r > 0 ? -r : -EIO;
        }
}

static uint64_t get_le64(const void *p) {
        uint64_t v;

        memcpy(&v, p, sizeof v);
        return le64toh(v);
}

static void put_le64(void *p, uint64_t v) {
        v = htole64(v);
        memcpy(p, &v, sizeof v);
}

static uint64_t get_be64(const void *p) {
        uint64_t v;

        memcpy(&v, p, sizeof v);
        return be64toh(v);
}

static void put_be64(void *p, uint64_t v) {
        v = htobe64(v);
        memcpy(p, &v, sizeof v);
}

/* Writes the counter key of h to out; returns its length (<= STORE_KEY_MAX). */
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

static uint64_t usec_add_sat(uint64_t a, uint64_t b) {
        return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t seconds_left(uint64_t expiry_usec, uint64_t now_usec) {
        /* caller guarantees now < expiry: the result is >= 1 */
        uint64_t d = expiry_usec - now_usec;

        return d / USEC_PER_SEC + (d % USEC_PER_SEC != 0);
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

/* How far new hits may grow the map: all but the last eighth of map_size_max. The rest
 * is kept for what must not fail for lack of room once hits were answered: rebuilding
 * the write-back transaction from the journal (at open too) and sweeping, which needs
 * fresh pages even to delete (copy-on-write). Without it a map full at its maximum
 * could refuse its own journal and never be swept. The reserve is kept even when the
 * initial map size is (nearly) the maximum: the map then starts at this size. */
static uint64_t store_hits_map_max(const Store *s) {
        return s->opts.map_size_max - s->opts.map_size_max / 8;
}

/* Grows the map after MDB_MAP_FULL (no transaction may be open), up to
 * store_hits_map_max() for new hits, or up to map_size_max for a recovery (journal
 * rebuild, sweep). Returns 0 if it grew, -ENOSPC if already at that limit, or -errno. */
static int store_grow(Store *s, bool recovery) {
        uint64_t max = recovery ? s->opts.map_size_max : store_hits_map_max(s);
        uint64_t n;
        int r;

        if (s->map_size >= max)
                return -ENOSPC;
        n = s->map_size > max / 2 ? max : s->map_size * 2;
        r = mdb_env_set_mapsize(s->env, (size_t) n);
        if (r != 0)
                return errno_from_mdb(r);
        s->map_size = n;
        s->map_grows++;
        return 0;
}

static void store_refresh_map_size(Store *s) {
        MDB_envinfo info;

        if (mdb_env_info(s->env, &info) == 0)
                s->map_size = info.me_mapsize;
}

/* After a recovery grew the map into the reserve, hands new hits the smaller map again
 * (LMDB keeps at least what is in use). No transaction may be open. */
static void store_unreserve(Store *s) {
        uint64_t max = store_hits_map_max(s);

        if (s->map_size <= max || mdb_env_set_mapsize(s->env, (size_t) max) != 0)
                return;
        store_refresh_map_size(s);
}

/* Begins a transaction (flags: 0 or MDB_RDONLY), adopting a map grown by another
 * process. Returns 0 or -errno. */
static int store_begin(Store *s, unsigned flags, MDB_txn **ret) {
        int r;

        r = mdb_txn_begin(s->env, NULL, flags, ret);
        if (r == MDB_MAP_RESIZED) {
                r = mdb_env_set_mapsize(s->env, 0);
                if (r != 0)
                        return errno_from_mdb(r);
                store_refresh_map_size(s);
                r = mdb_txn_begin(s->env, NULL, flags, ret);
        }
        if (r != 0)
                *ret = NULL;
        return errno_from_mdb(r);
}

/* ---- write transactions: one sticky error, one retry loop ---- */

/* Records the result of an LMDB call in t; the first failure sticks (later steps of a
 * failed transaction are not attempted: callers return t->error at once). Returns
 * t->error: 0 or -errno. */
static int txn_check(StoreTxn *t, int mdb_r) {
        if (mdb_r != 0 && t->error == 0) {
                t->error = errno_from_mdb(mdb_r);
                t->map_full = mdb_r == MDB_MAP_FULL;
        }
        return t->error;
}

static int txn_begin(Store *s, StoreTxn *t) {
        *t = (StoreTxn){};
        t->error = store_begin(s, 0, &t->txn);
        return t->error;
}

/* Ends t: commits it if commit is set and no step failed, else aborts it. Returns 0 or
 * the -errno that failed it (t->map_full says whether a larger map may help). */
static int txn_end(Store *s, StoreTxn *t, bool commit) {
        if (!t->txn)
                return t->error;
        if (!commit || t->error != 0) {
                mdb_txn_abort(t->txn);
                t->txn = NULL;
                return t->error;
        }
        (void) txn_check(t, mdb_txn_commit(t->txn)); /* frees it, also on failure */
        t->txn = NULL;
        if (t->error != 0)
                return t->error;
        s->commits++;
        if (s->opts.sync == STORE_SYNC_ALWAYS)
                s->syncs++; /* the commit itself fsync'ed */
        else
                s->dirty = true;
        return 0;
}

/* Write-back: aborts the open transaction (LMDB frees its cursor) after a failure. The
 * journal keeps every batch answered in it. */
static void write_back_drop(Store *s) {
        (void) txn_end(s, &s->wtxn, false);
        s->wtxn = (StoreTxn){};
        s->wcur = NULL;
        s->wtxn_hits = 0;
}

/* Write-back: the open transaction, begun (with its cursor on the counters) if none is. */
static int write_back_begin(Store *s) {
        if (s->wtxn.txn)
                return 0;
        if (txn_begin(s, &s->wtxn) < 0 ||
            txn_check(&s->wtxn, mdb_cursor_open(s->wtxn.txn, s->dbi_counters, &s->wcur)) < 0) {
                int r = s->wtxn.error;

                write_back_drop(s);
                return r;
        }
        return 0;
}

static int journal_recover(Store *s, size_t len);

/* What a write does inside its transaction: returns 0 to commit (write-back: to keep the
 * transaction open), STORE_TXN_EMPTY if it wrote nothing (abort), or t->error. */
#define STORE_TXN_EMPTY 1
typedef struct StoreWrite {
        int (*run)(Store *s, StoreTxn *t, void *userdata);
        bool (*shrink)(void *userdata); /* optional: the map is full at its limit; do less and
                                         * return true to be run again */
        bool recovery;                  /* may grow the map into the reserve */
        bool write_back;                /* run in the open write-back transaction, leave it open */
} StoreWrite;

/* The one retry loop of every write. Runs w->run in a write transaction and commits it
 * (write-back: applies it to the open transaction). If the map is full it grows the map
 * and runs it again from the start in a new transaction (the failed one is gone: for
 * write-back, the open transaction is rebuilt from the journal first, without the failed
 * batch's records); at the map's limit it asks w->shrink. A full journal (-ENOBUFS) is
 * retried once in a fresh write-back transaction. Returns 0 or -errno. */
static int store_write(Store *s, const StoreWrite *w, void *userdata) {
        int r = 0;

        for (unsigned attempt = 0; attempt < STORE_RETRIES_MAX; attempt++) {
                size_t batch_start = s->journal.pos;
                StoreTxn local, *t = w->write_back ? &s->wtxn : &local;
                bool map_full, grown;

                r = w->write_back ? write_back_begin(s) : txn_begin(s, t);
                if (r < 0)
                        break;
                r = w->run(s, t, userdata);
                if (w->write_back && r >= 0)
                        return 0;
                if (!w->write_back) {
                        r = txn_end(s, t, r == 0);
                        if (r >= 0)
                                break;
                }
                map_full = t->map_full;
                if (w->write_back) {
                        /* forget the failed batch's records; the ones before it were answered */
                        write_back_drop(s);
                        journal_truncate(&s->journal, batch_start);
                }
                grown = map_full && store_grow(s, w->recovery) == 0;
                if (w->write_back) {
                        int k = journal_recover(s, batch_start);
                        if (k < 0)
                                return k;
                }
                if (grown || (map_full && w->shrink && w->shrink(userdata)) ||
                    (r == -ENOBUFS && attempt == 0))
                        continue;
                break;
        }
        if (w->recovery)
                store_unreserve(s);
        return r < 0 ? r : 0;
}

/* ---- counters ---- */

/* Moves (or creates) the expiry-index entry of a counter. ikey holds the counter key
 * at offset STORE_EXPIRY_PREFIX. old_expiry 0: no previous entry. */
static int index_move(Store *s, StoreTxn *t, uint8_t *ikey, size_t klen, uint64_t old_expiry,
                      uint64_t new_expiry) {
        MDB_val k = { .mv_size = STORE_EXPIRY_PREFIX + klen, .mv_data = ikey };
        MDB_val empty = { .mv_size = 0, .mv_data = NULL };
        int r;

        if (old_expiry != 0) {
                put_be64(ikey, old_expiry);
                r = mdb_del(t->txn, s->dbi_expiry, &k, NULL);
                if (r != MDB_NOTFOUND && txn_check(t, r) < 0)
                        return t->error;
        }
        put_be64(ikey, new_expiry);
        return txn_check(t, mdb_put(t->txn, s->dbi_expiry, &k, &empty, 0));
}

/* Sets a counter to (expiry, credit), keeping the expiry index in step. */
static int put_counter(Store *s, StoreTxn *t, const uint8_t *key, size_t klen, uint64_t expiry,
                       uint64_t credit) {
        uint8_t ikey[STORE_INDEX_KEY_MAX];
        uint8_t buf[STORE_VALUE_SIZE];
        uint64_t old_expiry = 0;
        MDB_val k = { .mv_size = klen, .mv_data = ikey + STORE_EXPIRY_PREFIX }, v;
        int r;

        memcpy(ikey + STORE_EXPIRY_PREFIX, key, klen);
        r = mdb_get(t->txn, s->dbi_counters, &k, &v);
        if (r == 0) {
                if (v.mv_size != STORE_VALUE_SIZE)
                        return txn_check(t, MDB_CORRUPTED);
                old_expiry = get_le64(v.mv_data);
        } else if (r != MDB_NOTFOUND)
                return txn_check(t, r);
        put_le64(buf, expiry);
        put_le64(buf + 8, credit);
        v = (MDB_val){ .mv_size = sizeof buf, .mv_data = buf };
        if (txn_check(t, mdb_put(t->txn, s->dbi_counters, &k, &v, 0)) < 0 || old_expiry == expiry)
                return t->error;
        return index_move(s, t, ikey, klen, old_expiry, expiry);
}

/* Applies the valid records among the journal's first len bytes, in order (a record whose
 * key is not a counter key ends them, as a torn one does). userdata: the size_t len. */
static int journal_replay(Store *s, StoreTxn *t, void *userdata) {
        JournalCursor c;
        JournalRecord rec;
        size_t records = 0;

        journal_cursor_init(&c, &s->journal, *(const size_t *) userdata);
        while (journal_cursor_next(&c, &rec)) {
                if (rec.key_len <= RULE_ID_SIZE || rec.key_len > STORE_KEY_MAX)
                        break;
                if (put_counter(s, t, rec.key, rec.key_len, rec.expiry, rec.credit) < 0)
                        return t->error;
                records++;
        }
        return records > 0 ? 0 : STORE_TXN_EMPTY;
}

/* Rebuilds what the journal's first len bytes hold in a transaction of its own and
 * commits it, growing the map into the reserve if needed; then empties the journal. Used
 * at open and when the write-back transaction was lost. Returns 0 or -errno. */
static int journal_recover(Store *s, size_t len) {
        static const StoreWrite w = { .run = journal_replay, .recovery = true };
        int r;

        r = store_write(s, &w, &len);
        if (r == 0)
                journal_reset(&s->journal);
        return r;
}

/* Write-back: answered hits that are in no transaction (a rebuild failed for a full map). */
static bool journal_pending(const Store *s) {
        return s->journal.map && !s->wtxn.txn && s->journal.pos > 0;
}

/* Commits the write-back transaction, if one is open, and empties the journal. If the
 * commit fails the transaction is gone: what the journal holds is rebuilt (or, if that
 * fails too, left to the next store_apply(), store_sweep() or store_open()), and the
 * commit's error is returned all the same. Returns 0 or -errno. */
static int write_back_commit(Store *s) {
        int r;

        if (!s->wtxn.txn)
                return 0;
        r = txn_end(s, &s->wtxn, true);
        write_back_drop(s);
        if (r < 0) {
                (void) journal_recover(s, s->journal.pos);
                return r;
        }
        journal_reset(&s->journal);
        return 0;
}

/* The outcome of a hit on a live counter (expiry, credit): decrements unless exhausted.
 * Returns true if the counter changed. */
static bool hit_live(StoreHit *h, uint64_t expiry, uint64_t *credit, uint64_t now_usec) {
        h->error = 0;
        h->reset_left = seconds_left(expiry, now_usec);
        h->allowed = *credit > 0;
        if (*credit > 0)
                (*credit)--;
        h->credit = *credit;
        return h->allowed;
}

/* The first hit of a window: a new counter with credit limit - 1. Returns its expiry. */
static uint64_t hit_new(StoreHit *h, uint64_t *credit, uint64_t now_usec) {
        uint64_t expiry = usec_add_sat(now_usec, h->reset_seconds > UINT64_MAX / USEC_PER_SEC
                                                         ? UINT64_MAX
                                                         : h->reset_seconds * USEC_PER_SEC);

        *credit = h->credit_limit - 1;
        h->error = 0;
        h->allowed = true;
        h->credit = *credit;
        h->reset_left = seconds_left(expiry, now_usec);
        return expiry;
}

typedef struct Batch {
        StoreHit *hits;
        size_t n;
        uint64_t now_usec;
        bool journal; /* record every change in the journal */
} Batch;

/* Writes the value (expiry, credit) of the counter key through the cursor c. */
static int put_value(StoreTxn *t, MDB_cursor *c, uint8_t *key, size_t klen, uint64_t expiry, uint64_t credit,
                     unsigned flags) {
        uint8_t buf[STORE_VALUE_SIZE];
        MDB_val k = { .mv_size = klen, .mv_data = key };
        MDB_val v = { .mv_size = sizeof buf, .mv_data = buf };

        put_le64(buf, expiry);
        put_le64(buf + 8, credit);
        return txn_check(t, mdb_cursor_put(c, &k, &v, flags));
}

/* One hit inside t, through the cursor c on the counters; journal: records the change. */
static int apply_hit(Store *s, StoreTxn *t, MDB_cursor *c, StoreHit *h, uint64_t now_usec, bool journal) {
        uint8_t ikey[STORE_INDEX_KEY_MAX];
        uint8_t *ckey = ikey + STORE_EXPIRY_PREFIX;
        size_t klen = counter_key(h, ckey);
        MDB_val k = { .mv_size = klen, .mv_data = ckey }, v;
        uint64_t expiry = 0, credit = 0, old_expiry;
        int r;

        r = mdb_cursor_get(c, &k, &v, MDB_SET_KEY);
        if (r != 0 && r != MDB_NOTFOUND)
                return txn_check(t, r);
        if (r == 0) {
                if (v.mv_size != STORE_VALUE_SIZE)
                        return txn_check(t, MDB_CORRUPTED);
                expiry = get_le64(v.mv_data);
                credit = get_le64((const uint8_t *) v.mv_data + 8);
        }
        if (r == 0 && now_usec < expiry) {
                /* live: decrement in place, expiry unchanged */
                if (!hit_live(h, expiry, &credit, now_usec))
                        return 0;
                if (put_value(t, c, ckey, klen, expiry, credit, MDB_CURRENT) < 0)
                        return t->error;
        } else {
                /* new, or expired and not swept yet: a new window */
                old_expiry = expiry;
                expiry = hit_new(h, &credit, now_usec);
                if (put_value(t, c, ckey, klen, expiry, credit, old_expiry != 0 ? MDB_CURRENT : 0) < 0 ||
                    index_move(s, t, ikey, klen, old_expiry, expiry) < 0)
                        return t->error;
        }
        if (journal && journal_add(&s->journal, ckey, klen, expiry, credit) < 0)
                t->error = -ENOBUFS; /* the caller commits and retries in a fresh transaction */
        return t->error;
}

/* One attempt at a batch (userdata: a Batch) inside t. */
static int apply_batch(Store *s, StoreTxn *t, void *userdata) {
        const Batch *b = userdata;
        MDB_cursor *c = t == &s->wtxn ? s->wcur : NULL;

        if (!c && txn_check(t, mdb_cursor_open(t->txn, s->dbi_counters, &c)) < 0)
                return t->error;
        for (size_t i = 0; i < b->n; i++)
                if (apply_hit(s, t, c, b->hits + i, b->now_usec, b->journal) < 0)
                        break;
        if (c != s->wcur)
                mdb_cursor_close(c);
        return t->error;
}

static bool hit_valid(const StoreHit *h) {
        return h->rule_id && h->credit_limit > 0 && h->reset_seconds > 0 && (h->actor || h->actor_len == 0);
}

/* Write-back: applies the batch to the open transaction and journals it. On any
 * failure the transaction is aborted and rebuilt from the journal (the earlier
 * batches in it were answered), then the batch is retried (store_write()). */
static int apply_write_back(Store *s, StoreHit *hits, size_t n, uint64_t now_usec) {
        static const StoreWrite w = { .run = apply_batch, .write_back = true };
        Batch b = { .hits = hits, .n = n, .now_usec = now_usec, .journal = n <= STORE_WRITE_BACK_HITS_MAX };
        int r;

        if (journal_pending(s)) {
                /* nothing new is taken before the answered hits are in a transaction */
                r = journal_recover(s, s->journal.pos);
                if (r < 0)
                        return r;
        }
        if (s->wtxn_hits + n > STORE_WRITE_BACK_HITS_MAX) {
                r = write_back_commit(s);
                if (r < 0)
                        return r;
        }
        r = store_write(s, &w, &b);
        if (r < 0)
                return r;
        s->wtxn_hits += n;
        journal_truncate(&s->journal, s->journal.pos); /* the end mark behind the batch */
        if (!b.journal)
                return write_back_commit(s); /* too big for the journal: make it durable now */
        return 0;
}

int store_apply(Store *s, StoreHit *hits, size_t n, uint64_t now_usec) {
        static const StoreWrite w = { .run = apply_batch };
        Batch b = { .hits = hits, .n = n, .now_usec = now_usec };
        int r = 0;

        if (!s || (!hits && n > 0))
                return -EINVAL;
        if (n == 0)
                return 0;
        for (size_t i = 0; i < n; i++)
                if (!hit_valid(hits + i)) {
                        r = -EINVAL;
                        goto fail;
                }

        r = s->journal.map ? apply_write_back(s, hits, n, now_usec) : store_write(s, &w, &b);
        if (r == 0)
                return 0;
fail:
        for (size_t i = 0; i < n; i++) {
                hits[i].error = r;
                hits[i].allowed = false;
                hits[i].credit = 0;
                hits[i].reset_left = 0;
        }
        return r;
}

int store_sync(Store *s) {
        int r;

        if (!s)
                return -EINVAL;
        r = write_back_commit(s);
        if (r < 0)
                return r;
        if (s->opts.sync != STORE_SYNC_PERIODIC || !s->dirty)
                return 0;
        r = mdb_env_sync(s->env, 1);
        if (r != 0)
                return errno_from_mdb(r);
        s->dirty = false;
        s->syncs++;
        return journal_sync_head(&s->journal);
}

typedef struct Sweep {
        uint64_t now_usec;
        size_t max, deleted;
        bool more;
} Sweep;

/* Deletes the counter an expired index entry (ik) names, if its value still has that
 * expiry (else it was renewed, and only the stale entry goes). */
static int sweep_one(StoreTxn *t, MDB_cursor *cc, const MDB_val *ik) {
        MDB_val ck = { .mv_size = ik->mv_size - STORE_EXPIRY_PREFIX,
                       .mv_data = (uint8_t *) ik->mv_data + STORE_EXPIRY_PREFIX };
        MDB_val cv;
        int r;

        r = mdb_cursor_get(cc, &ck, &cv, MDB_SET_KEY);
        if (r == 0 && cv.mv_size == STORE_VALUE_SIZE && get_le64(cv.mv_data) == get_be64(ik->mv_data))
                return txn_check(t, mdb_cursor_del(cc, 0));
        return r == 0 || r == MDB_NOTFOUND ? 0 : txn_check(t, r); /* entry without its counter */
}

/* One sweep attempt (userdata: a Sweep): deletes up to max expired counters. */
static int sweep_txn(Store *s, StoreTxn *t, void *userdata) {
        Sweep *w = userdata;
        MDB_cursor *ci = NULL, *cc = NULL;
        MDB_val k, v;
        int r;

        w->deleted = 0;
        w->more = false;
        if (txn_check(t, mdb_cursor_open(t->txn, s->dbi_expiry, &ci)) < 0 ||
            txn_check(t, mdb_cursor_open(t->txn, s->dbi_counters, &cc)) < 0)
                goto finish;
        for (;;) {
                /* MDB_FIRST after each deletion: a few cached page hops, and no reliance
                 * on where a cursor stands after mdb_cursor_del() */
                r = mdb_cursor_get(ci, &k, &v, MDB_FIRST);
                if (r != 0) {
                        if (r != MDB_NOTFOUND)
                                (void) txn_check(t, r);
                        break;
                }
                if (k.mv_size <= STORE_EXPIRY_PREFIX) {
                        (void) txn_check(t, MDB_CORRUPTED);
                        break;
                }
                if (get_be64(k.mv_data) > w->now_usec)
                        break; /* oldest remaining one is live */
                if (w->deleted >= w->max) {
                        w->more = true;
                        break;
                }
                if (sweep_one(t, cc, &k) < 0 || txn_check(t, mdb_cursor_del(ci, 0)) < 0)
                        break;
                w->deleted++;
        }
finish:
        if (cc)
                mdb_cursor_close(cc);
        if (ci)
                mdb_cursor_close(ci);
        return t->error < 0 ? t->error : w->deleted > 0 ? 0 : STORE_TXN_EMPTY;
}

/* Even deleting needs fresh pages (copy-on-write): at the map's limit, delete one counter
 * per transaction (sweep_own() chains them). */
static bool sweep_shrink(void *userdata) {
        Sweep *w = userdata;

        if (w->max <= 1)
                return false;
        w->max = 1;
        return true;
}

/* Sweeps in transactions of its own. When the map is full even with the reserve, one
 * counter per transaction, in a chain of them up to the asked number: LMDB reuses the
 * pages a commit frees only two commits later, so one larger deletion could take all of
 * the reserve and leave the next transaction nothing, and the store would never be swept;
 * small ones keep the chain going until the freed pages come back. */
static int sweep_own(Store *s, Sweep *sw) {
        static const StoreWrite w = { .run = sweep_txn, .shrink = sweep_shrink, .recovery = true };
        size_t want = sw->max, total = 0;
        int r;

        for (;;) {
                r = store_write(s, &w, sw);
                if (r < 0)
                        break;
                total += sw->deleted;
                if (!sw->more || sw->max == want || total >= want)
                        break;
        }
        sw->deleted = total;
        if (r < 0 && total > 0) {
                sw->more = true; /* what was deleted stays deleted: report it, retry the rest later */
                r = 0;
        }
        return r;
}

int store_sweep(Store *s, uint64_t now_usec, size_t max_delete, size_t *ret_deleted) {
        Sweep sw = { .now_usec = now_usec, .max = max_delete > 0 ? max_delete : STORE_SWEEP_CHUNK_DEFAULT };
        int r;

        if (ret_deleted)
                *ret_deleted = 0;
        if (!s)
                return -EINVAL;

        /* Write-back: sweep inside the open transaction (one writer at a time), rather than
         * commit it early. Deletions need no journal: an expired counter is absent whether
         * or not it was deleted, and one that a replay brings back is expired. */
        r = s->wtxn.txn ? sweep_txn(s, &s->wtxn, &sw) : -EAGAIN;
        if (r < 0 && s->wtxn.txn)
                write_back_drop(s); /* broken (a full map): rebuilt below, then swept on our own */
        if (r < 0 && journal_pending(s)) {
                /* If even the reserve cannot take the answered hits, sweep first: deleting
                 * expired counters makes the room, and it is safe before the replay
                 * (records hold values; an expired one stays expired). */
                r = journal_recover(s, s->journal.pos);
                if (r < 0 && r != -ENOSPC)
                        return r;
        }
        if (r < 0 || !s->wtxn.txn) {
                r = sweep_own(s, &sw);
                if (r == 0 && sw.deleted > 0 && journal_pending(s))
                        (void) journal_recover(s, s->journal.pos); /* the room it was waiting for */
                if (r < 0)
                        return r;
        }
        s->swept_total += sw.deleted;
        if (ret_deleted)
                *ret_deleted = sw.deleted;
        return sw.more ? 1 : 0;
}

static int file_size(const Store *s, uint64_t *ret) {
        char p[PATH_MAX];
        struct stat st;

        if ((size_t) snprintf(p, sizeof p, "%s/data.mdb", s->opts.path) >= sizeof p)
                return -ENAMETOOLONG;
        if (stat(p, &st) < 0)
                return -errno;
        *ret = (uint64_t) st.st_size;
        return 0;
}

static uint64_t stat_pages(const MDB_stat *st) {
        return (uint64_t) st->ms_branch_pages + st->ms_leaf_pages + st->ms_overflow_pages;
}

int store_get_stats(Store *s, StoreStats *ret) {
        MDB_stat st_main, st_meta, st_counters, st_expiry;
        MDB_txn *txn = NULL;
        uint64_t fsize = 0;
        int r = 0;

        if (!s || !ret)
                return -EINVAL;
        if (s->wtxn.txn)
                txn = s->wtxn.txn; /* sees everything applied; a read transaction would wait for nothing */
        else
                r = store_begin(s, MDB_RDONLY, &txn);
        if (r < 0)
                return r;
        r = mdb_stat(txn, s->dbi_main, &st_main);
        if (r == 0)
                r = mdb_stat(txn, s->dbi_meta, &st_meta);
        if (r == 0)
                r = mdb_stat(txn, s->dbi_counters, &st_counters);
        if (r == 0)
                r = mdb_stat(txn, s->dbi_expiry, &st_expiry);
        if (txn != s->wtxn.txn)
                mdb_txn_abort(txn);
        if (r != 0)
                return errno_from_mdb(r);
        r = file_size(s, &fsize);
        if (r < 0)
                return r;

        *ret = (StoreStats){
                .counters = st_counters.ms_entries,
                .map_size = s->map_size,
                .data_size = (stat_pages(&st_main) + stat_pages(&st_meta) + stat_pages(&st_counters) +
                              stat_pages(&st_expiry)) *
                             st_main.ms_psize,
                .file_size = fsize,
                .swept_total = s->swept_total,
                .map_grows = s->map_grows,
                .commits = s->commits,
                .syncs = s->syncs,
        };
        return 0;
}

static void store_freep(Store **sp);

Store *store_close(Store *s) {
        if (!s)
                return NULL;
        if (s->env) {
                /* If this commit fails, the journal stays for the next open to replay. */
                (void) write_back_commit(s);
                if (s->opts.sync != STORE_SYNC_NONE && mdb_env_sync(s->env, 1) == 0)
                        (void) journal_sync_head(&s->journal);
        }
        store_freep(&s);
        return NULL;
}

/* Reads and checks "magic" and "version" from the meta table. */
static int check_meta(Store *s, MDB_txn *txn, char *errbuf, size_t errbuf_size) {
        MDB_val k, v;
        char ver[16];
        unsigned long version;
        char *end;
        int r;

        k = (MDB_val){ .mv_size = strlen("magic"), .mv_data = (void *) "magic" };
        r = mdb_get(txn, s->dbi_meta, &k, &v);
        if (r != 0 && r != MDB_NOTFOUND)
                goto fail_read;
        if (r == MDB_NOTFOUND || v.mv_size != strlen(STORE_MAGIC) ||
            memcmp(v.mv_data, STORE_MAGIC, v.mv_size) != 0) {
                (void) store_error(errbuf, errbuf_size, 0,
                                   "%s/data.mdb: not a divvyd counter store (bad or missing magic)",
                                   s->opts.path);
                return -EPROTO;
        }

        k = (MDB_val){ .mv_size = strlen("version"), .mv_data = (void *) "version" };
        r = mdb_get(txn, s->dbi_meta, &k, &v);
        if (r != 0 && r != MDB_NOTFOUND)
                goto fail_read;
        if (r == MDB_NOTFOUND || v.mv_size == 0 || v.mv_size >= sizeof ver) {
                (void) store_error(errbuf, errbuf_size, 0,
                                   "%s/data.mdb: database format version is missing or unreadable",
                                   s->opts.path);
                return -EPROTO;
        }
        memcpy(ver, v.mv_data, v.mv_size);
        ver[v.mv_size] = 0;
        errno = 0;
        version = strtoul(ver, &end, 10);
        if (errno != 0 || *end != 0 || ver[0] < '0' || ver[0] > '9') {
                (void) store_error(errbuf, errbuf_size, 0,
                                   "%s/data.mdb: database format version '%s' is unreadable", s->opts.path,
                                   ver);
                return -EPROTO;
        }
        if (version != STORE_FORMAT_VERSION) {
                (void) store_error(
                        errbuf, errbuf_size, 0,
                        "%s/data.mdb: database format version %lu is not supported by this divvyd "
                        "(expects %d)",
                        s->opts.path, version, STORE_FORMAT_VERSION);
                return -EPROTO;
        }
        return 0;

fail_read:
        (void) store_error(errbuf, errbuf_size, 0, "%s/data.mdb: cannot read format metadata: %s",
                           s->opts.path, mdb_strerror(r));
        return errno_from_mdb(r) == -EPROTO ? -EPROTO : -EBADMSG;
}

/* Aborts a transaction that was not committed (commit sets it NULL): the one cleanup of
 * open_tables()' early returns. */
static void txn_abortp(MDB_txn **txn) {
        if (*txn)
                mdb_txn_abort(*txn);
}

/* An LMDB error while opening the tables: explained in errbuf, translated once. */
static int open_tables_failed(Store *s, int mdb_r, char *errbuf, size_t errbuf_size) {
        int r = errno_from_mdb(mdb_r);

        (void) store_error(errbuf, errbuf_size, 0, "%s/data.mdb: %s", s->opts.path, mdb_strerror(mdb_r));
        return r == -ENOENT ? -EBADMSG : r;
}

/* Writes "magic" and "version" into the meta table of a new environment. Returns an MDB code. */
static int write_meta(Store *s, MDB_txn *txn) {
        char ver[16];
        MDB_val k, v;
        int r;

        k = (MDB_val){ .mv_size = strlen("magic"), .mv_data = (void *) "magic" };
        v = (MDB_val){ .mv_size = strlen(STORE_MAGIC), .mv_data = (void *) STORE_MAGIC };
        r = mdb_put(txn, s->dbi_meta, &k, &v, 0);
        if (r != 0)
                return r;
        k = (MDB_val){ .mv_size = strlen("version"), .mv_data = (void *) "version" };
        v = (MDB_val){ .mv_size = (size_t) snprintf(ver, sizeof ver, "%d", STORE_FORMAT_VERSION),
                       .mv_data = ver };
        return mdb_put(txn, s->dbi_meta, &k, &v, 0);
}

/* Creates the tables of a new environment, or opens and checks those of an existing one. */
static int open_tables(Store *s, char *errbuf, size_t errbuf_size) {
        _cleanup_(txn_abortp) MDB_txn *txn = NULL;
        MDB_stat st;
        unsigned flags;
        int r;

        r = store_begin(s, 0, &txn);
        if (r < 0)
                return store_error(errbuf, errbuf_size, r, "%s: cannot begin a transaction: %s",
                                   s->opts.path, strerror(-r));
        r = mdb_dbi_open(txn, NULL, 0, &s->dbi_main);
        if (r == 0)
                r = mdb_stat(txn, s->dbi_main, &st);
        if (r != 0)
                return open_tables_failed(s, r, errbuf, errbuf_size);
        flags = st.ms_entries == 0 ? MDB_CREATE : 0; /* a new environment */

        r = mdb_dbi_open(txn, "meta", flags, &s->dbi_meta);
        if (r == MDB_NOTFOUND || r == MDB_INCOMPATIBLE)
                return store_error(errbuf, errbuf_size, -EPROTO,
                                   "%s/data.mdb: an LMDB database, but not a divvyd counter store",
                                   s->opts.path);
        if (r == 0 && flags == MDB_CREATE)
                r = write_meta(s, txn);
        else if (r == 0) {
                r = check_meta(s, txn, errbuf, errbuf_size);
                if (r < 0)
                        return r;
        }
        if (r != 0)
                return open_tables_failed(s, r, errbuf, errbuf_size);

        r = mdb_dbi_open(txn, "counters", flags, &s->dbi_counters);
        if (r == 0)
                r = mdb_dbi_open(txn, "expiry", flags, &s->dbi_expiry);
        if (r == MDB_NOTFOUND || r == MDB_INCOMPATIBLE)
                return store_error(errbuf, errbuf_size, -EBADMSG,
                                   "%s/data.mdb: a divvyd counter store missing its tables", s->opts.path);
        if (r == 0)
                r = mdb_txn_commit(TAKE_TXN(txn));
        if (r != 0)
                return open_tables_failed(s, r, errbuf, errbuf_size);
        return 0;
}

/* LMDB trusts the file to hold every page its meta page names; a truncated file
 * would be a SIGBUS on first access. Refuse it instead. */
static int check_file_size(Store *s, char *errbuf, size_t errbuf_size) {
        MDB_envinfo info;
        MDB_stat st;
        uint64_t size, need;
        int r;

        r = mdb_env_info(s->env, &info);
        if (r == 0)
                r = mdb_env_stat(s->env, &st);
        if (r != 0) {
                (void) store_error(errbuf, errbuf_size, 0, "%s: %s", s->opts.path, mdb_strerror(r));
                return errno_from_mdb(r);
        }
        r = file_size(s, &size);
        if (r < 0) {
                (void) store_error(errbuf, errbuf_size, 0, "%s/data.mdb: cannot stat: %s", s->opts.path,
                                   strerror(-r));
                return r;
        }
        need = ((uint64_t) info.me_last_pgno + 1) * st.ms_psize;
        if (size < need) {
                (void) store_error(errbuf, errbuf_size, 0,
                                   "%s/data.mdb is truncated or damaged: %" PRIu64
                                   " bytes, but its pages need %" PRIu64,
                                   s->opts.path, size, need);
                return -EBADMSG;
        }
        s->map_size = info.me_mapsize;
        return 0;
}

/* Opens (write-back: creates and preallocates) the journal, locks and maps it, and
 * replays what a previous run left in it. Without write-back a leftover journal is
 * replayed and removed. */
static int store_open_journal(Store *s, char *errbuf, size_t errbuf_size) {
        bool wb = s->opts.write_back && s->opts.sync != STORE_SYNC_ALWAYS;
        char p[PATH_MAX];
        int r;

        if ((size_t) snprintf(p, sizeof p, "%s/" STORE_JOURNAL_NAME, s->opts.path) >= sizeof p)
                return store_error(errbuf, errbuf_size, -ENAMETOOLONG, "%s: path too long", s->opts.path);
        r = journal_open(&s->journal, p, wb ? JOURNAL_SIZE : 0, errbuf, errbuf_size);
        if (r < 0 || s->journal.fd < 0)
                return r; /* failed, or (no write-back) no journal left to replay */

        r = journal_recover(s, s->journal.len);
        if (r == 0 && s->opts.sync != STORE_SYNC_NONE &&
            (mdb_env_sync(s->env, 1) != 0 || journal_sync_head(&s->journal) < 0))
                r = -EIO;
        if (r < 0) {
                return store_error(errbuf, errbuf_size, r, "cannot replay the journal %s: %s", p,
                                   strerror(-r));
        }
        if (!wb)
                journal_close(&s->journal, true);
        return 0;
}

/* A Store with opts and their defaults; nothing opened yet. NULL: out of memory. */
static Store *store_new(const StoreOptions *opts) {
        Store *s = calloc(1, sizeof *s);

        if (!s)
                return NULL;
        s->journal = JOURNAL_NULL;
        s->opts = *opts;
        s->opts.path = strdup(opts->path);
        if (!s->opts.path) {
                free(s);
                return NULL;
        }
        if (s->opts.map_size == 0)
                s->opts.map_size = STORE_MAP_SIZE_DEFAULT;
        if (s->opts.map_size_max == 0)
                s->opts.map_size_max = STORE_MAP_SIZE_MAX_DEFAULT;
        if (s->opts.map_size_max < s->opts.map_size)
                s->opts.map_size_max = s->opts.map_size;
        if (s->opts.sync_interval_usec == 0)
                s->opts.sync_interval_usec = STORE_SYNC_INTERVAL_DEFAULT_USEC;
        return s;
}

/* Closes what a failed store_open() had opened, committing nothing. */
static void store_freep(Store **sp) {
        Store *s = *sp;

        if (!s)
                return;
        if (s->env)
                mdb_env_close(s->env);
        journal_close(&s->journal, false);
        free((char *) s->opts.path);
        free(s);
}

static int store_make_dir(Store *s, char *errbuf, size_t errbuf_size) {
        struct stat st;

        if (mkdir(s->opts.path, STORE_DIR_MODE) < 0 && errno != EEXIST)
                return store_error(errbuf, errbuf_size, -errno, "cannot create directory %s: %m",
                                   s->opts.path);
        if (stat(s->opts.path, &st) < 0)
                return store_error(errbuf, errbuf_size, -errno, "cannot stat %s: %m", s->opts.path);
        if (!S_ISDIR(st.st_mode))
                return store_error(errbuf, errbuf_size, -ENOTDIR, "%s is not a directory", s->opts.path);
        return 0;
}

/* Creates, configures and opens the LMDB environment; checks its file and clears the slots of
 * readers that died without closing. */
static int store_open_env(Store *s, char *errbuf, size_t errbuf_size) {
        unsigned flags = MDB_NOTLS | MDB_NORDAHEAD | (s->opts.sync != STORE_SYNC_ALWAYS ? MDB_NOSYNC : 0);
        uint64_t map_size =
                s->opts.map_size < store_hits_map_max(s) ? s->opts.map_size : store_hits_map_max(s);
        int r, dead;

        r = mdb_env_create(&s->env);
        if (r != 0) {
                s->env = NULL;
                r = errno_from_mdb(r);
                return store_error(errbuf, errbuf_size, r, "cannot create LMDB environment: %s",
                                   strerror(-r));
        }
        r = mdb_env_set_maxdbs(s->env, STORE_DBS);
        if (r == 0)
                r = mdb_env_set_mapsize(s->env, (size_t) map_size);
        if (r != 0) {
                r = errno_from_mdb(r);
                return store_error(errbuf, errbuf_size, r, "cannot configure LMDB environment: %s",
                                   strerror(-r));
        }

        r = mdb_env_open(s->env, s->opts.path, flags, STORE_FILE_MODE);
        if (r == MDB_INVALID || r == MDB_VERSION_MISMATCH || r == MDB_CORRUPTED || r == MDB_PAGE_NOTFOUND)
                return store_error(errbuf, errbuf_size, -EBADMSG,
                                   "%s/data.mdb is not a valid LMDB database (corrupt, truncated or "
                                   "foreign file): %s",
                                   s->opts.path, mdb_strerror(r));
        if (r != 0)
                return store_error(errbuf, errbuf_size, errno_from_mdb(r),
                                   "cannot open LMDB environment in %s: %s", s->opts.path, mdb_strerror(r));

        r = check_file_size(s, errbuf, errbuf_size);
        if (r < 0)
                return r;
        r = mdb_reader_check(s->env, &dead);
        if (r != 0)
                return store_error(errbuf, errbuf_size, errno_from_mdb(r),
                                   "%s: cannot clear stale readers: %s", s->opts.path, mdb_strerror(r));
        return 0;
}

int store_open(const StoreOptions *opts, Store **ret, char *errbuf, size_t errbuf_size) {
        _cleanup_(store_freep) Store *s = NULL;
        int r;

        if (errbuf && errbuf_size > 0)
                errbuf[0] = 0;
        if (!opts || !opts->path || !*opts->path || !ret ||
            (opts->sync < 0 || opts->sync >= _STORE_SYNC_MAX))
                return store_error(errbuf, errbuf_size, -EINVAL, "invalid store options");

        s = store_new(opts);
        if (!s)
                return -ENOMEM;
        r = store_make_dir(s, errbuf, errbuf_size);
        if (r == 0)
                r = store_open_env(s, errbuf, errbuf_size);
        if (r == 0)
                r = open_tables(s, errbuf, errbuf_size);
        if (r == 0)
                r = store_open_journal(s, errbuf, errbuf_size);
        if (r < 0)
                return r;
        *ret = s;
        s = NULL;
        return 0;
}
