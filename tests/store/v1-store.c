/* SPDX-License-Identifier: MIT */

/*
 * The counter store: one LMDB environment (directory with data.mdb + lock.mdb)
 * holding three named databases. This is the only file that includes <lmdb.h>.
 *
 * On-disk format, version V1_STORE_FORMAT_VERSION (1):
 *
 *   "meta"      key "magic"   -> V1_STORE_MAGIC (ASCII, no NUL)
 *               key "version" -> format version as ASCII decimal ("1")
 *               Written once when the environment is created; v1_store_open() refuses
 *               anything else (-EPROTO).
 *
 *   "counters"  key   = rule_id (RULE_ID_SIZE = 16 bytes)
 *                       + tag (1 byte): 0 no actor (rule without actorField),
 *                                       1 actor kept verbatim,
 *                                       2 actor hashed
 *                       + tag 1: the actor bytes (0..V1_STORE_ACTOR_INLINE_MAX = 400)
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
 *   V1_STORE_SYNC_ALWAYS   normal LMDB commits: data pages and the meta page are
 *                       fsync'ed before v1_store_apply() returns. A committed batch
 *                       survives a process crash, an OS crash and a power cut.
 *   V1_STORE_SYNC_PERIODIC MDB_NOSYNC; v1_store_sync(), called by the server's timer,
 *                       fsyncs (mdb_env_sync(env, 1)) if anything was committed since
 *                       the last sync. A committed batch survives a process crash at
 *                       once; after an OS crash or power cut the database comes back
 *                       as of some commit at or after the last completed sync (at most
 *                       about one sync interval of updates is lost).
 *   V1_STORE_SYNC_NONE     MDB_NOSYNC and no fsync ever (except what the kernel flushes on
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
 * batches go into one long write transaction, committed by v1_store_sync() (the
 * manager's timer, every sync interval), before a sweep, at close, and early after
 * V1_STORE_WRITE_BACK_HITS_MAX hits. A counter written by many hits between two commits
 * is written to disk once, and a batch costs no page writes and no syscall at all.
 * What makes it safe is the journal (V1_STORE_JOURNAL_NAME), a file of JOURNAL_SIZE
 * bytes allocated once and mapped shared: as a batch is applied, the new value of
 * every counter it changes is copied into the mapping, before v1_store_apply() returns.
 * Memory of a shared file mapping belongs to the kernel's page cache, so a crash of
 * the process loses none of it; the records are never msync'ed, the sync modes keep
 * their meaning for crashes of the OS (only the first page, with the end mark a commit
 * left there, is msync'ed after each fsync of the database, so that an OS crash cannot
 * bring back a generation older than the database on disk). Each record carries the
 * journal's generation and a checksum; a commit starts a new generation at offset 0
 * (and marks the end there), so replay reads records from offset 0 while they are
 * whole, valid and of the first record's generation. Replay (idempotent: records hold values, not
 * increments, in order) happens in v1_store_open(), and in the store itself when the
 * open transaction is lost (map full, or a failed commit). The journal file is locked
 * (flock): a second process cannot open the same store in write-back mode (it would
 * wait forever for LMDB's writer lock, which the open transaction holds).
 * So, for a batch v1_store_apply() returned:
 *   always   (no write-back) on disk: survives a process crash, an OS crash, a power cut.
 *   periodic survives a process crash; an OS crash or power cut loses at most the
 *            hits since the last sync (about one sync interval), with the caveat below.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/hash.h"
#include "store/store-error.h"
#include "v1-store.h"

#define V1_STORE_MAGIC         "divvyd counter store"
#define V1_STORE_DBS           3 /* named databases: meta, counters, expiry */
#define V1_STORE_TAG_NO_ACTOR  0
#define V1_STORE_TAG_VERBATIM  1
#define V1_STORE_TAG_HASHED    2
#define V1_STORE_KEY_MAX       (RULE_ID_SIZE + 1 + V1_STORE_ACTOR_INLINE_MAX) /* bytes: 417 */
#define V1_STORE_EXPIRY_PREFIX 8                                              /* bytes: big-endian u64 */
#define V1_STORE_INDEX_KEY_MAX (V1_STORE_EXPIRY_PREFIX + V1_STORE_KEY_MAX)    /* bytes: 425 */
#define V1_STORE_VALUE_SIZE    16                                             /* bytes: expiry + credit */
#define V1_STORE_FILE_MODE     0640                                           /* data.mdb, lock.mdb */
#define V1_STORE_DIR_MODE      0750
#define V1_STORE_RETRIES_MAX                                                                                \
        128 /* attempts of one batch: each retry follows a map growth (at most 64 doublings) or             \
             * a map resize by another process */
#define USEC_PER_SEC 1000000ULL
#define JOURNAL_RECORD_FIXED                                                                                \
        30 /* bytes: key length (u16), expiry, credit, generation (u64), check (u32)                        \
            */
#define JOURNAL_RECORD_MAX (JOURNAL_RECORD_FIXED + V1_STORE_KEY_MAX)
/* bytes (about 15 MB): room for a full write-back transaction of the longest keys;
 * preallocated, so that a full disk cannot fault a write into the mapping */
#define JOURNAL_SIZE ((size_t) V1_STORE_WRITE_BACK_HITS_MAX * JOURNAL_RECORD_MAX)

_Static_assert(V1_STORE_INDEX_KEY_MAX <= 511, "LMDB's default maximum key size is 511 bytes");
_Static_assert(V1_STORE_ACTOR_INLINE_MAX >= HASH128_SIZE,
               "a hashed actor must not be longer than an inline one");

struct V1Store {
        V1StoreOptions opts; /* opts.path owned */
        MDB_env *env;
        MDB_dbi dbi_main, dbi_meta, dbi_counters, dbi_expiry;
        uint64_t map_size; /* current */
        bool dirty;        /* committed since the last sync */

        /* Write-back (opts.write_back): the open transaction, the hits in it, and the
         * journal of every batch applied to it (see store.h and "Write-back" above). */
        MDB_txn *wtxn;
        MDB_cursor *wcur; /* on the counters in wtxn, kept across batches; LMDB frees it with wtxn */
        size_t wtxn_hits;
        int journal_fd;  /* < 0: no write-back */
        uint8_t *jmap;   /* the journal, mapped shared */
        size_t jmap_len; /* >= JOURNAL_SIZE */
        size_t jpos;     /* end of this generation's records */
        uint64_t jgen;   /* generation of the records being written */
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

static void put_be64(void *p, uint64_t v) {
        v = htobe64(v);
        memcpy(p, &v, sizeof v);
}

/* Writes the counter key of h to out; returns its length (<= V1_STORE_KEY_MAX). */
static size_t counter_key(const V1StoreHit *h, uint8_t *out) {
        memcpy(out, h->rule_id, RULE_ID_SIZE);
        if (!h->actor) {
                out[RULE_ID_SIZE] = V1_STORE_TAG_NO_ACTOR;
                return RULE_ID_SIZE + 1;
        }
        if (h->actor_len <= V1_STORE_ACTOR_INLINE_MAX) {
                out[RULE_ID_SIZE] = V1_STORE_TAG_VERBATIM;
                if (h->actor_len > 0)
                        memcpy(out + RULE_ID_SIZE + 1, h->actor, h->actor_len);
                return RULE_ID_SIZE + 1 + h->actor_len;
        }
        out[RULE_ID_SIZE] = V1_STORE_TAG_HASHED;
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

/* How far new hits may grow the map: all but the last eighth of map_size_max. The rest
 * is kept for what must not fail for lack of room once hits were answered: rebuilding
 * the write-back transaction from the journal (at open too) and sweeping, which needs
 * fresh pages even to delete (copy-on-write). Without it a map full at its maximum
 * could refuse its own journal and never be swept. */
static uint64_t v1_store_hits_map_max(const V1Store *s) {
        uint64_t cap = s->opts.map_size_max - s->opts.map_size_max / 8;
        return cap < s->opts.map_size ? s->opts.map_size : cap;
}

/* Grows the map after MDB_MAP_FULL (no transaction may be open), up to
 * v1_store_hits_map_max() for new hits, or up to map_size_max for a recovery (journal
 * rebuild, sweep). Returns 0 if it grew, -ENOSPC if already at that limit, or -errno. */
static int v1_store_grow(V1Store *s, bool recovery) {
        uint64_t max = recovery ? s->opts.map_size_max : v1_store_hits_map_max(s);
        uint64_t n;
        int r;

        if (s->map_size >= max)
                return -ENOSPC;
        n = s->map_size > max / 2 ? max : s->map_size * 2;
        r = mdb_env_set_mapsize(s->env, (size_t) n);
        if (r != 0)
                return errno_from_mdb(r);
        s->map_size = n;
        return 0;
}

/* After a recovery grew the map into the reserve, hands new hits the smaller map again
 * (LMDB keeps at least what is in use). No transaction may be open. */
static void v1_store_unreserve(V1Store *s) {
        uint64_t max = v1_store_hits_map_max(s);
        MDB_envinfo info;

        if (s->map_size <= max || mdb_env_set_mapsize(s->env, (size_t) max) != 0)
                return;
        if (mdb_env_info(s->env, &info) == 0)
                s->map_size = info.me_mapsize;
}

static void v1_store_refresh_map_size(V1Store *s) {
        MDB_envinfo info;

        if (mdb_env_info(s->env, &info) == 0)
                s->map_size = info.me_mapsize;
}

/* Begins a write transaction, adopting a map grown by another process. */
static int v1_store_begin(V1Store *s, MDB_txn **ret) {
        int r;

        r = mdb_txn_begin(s->env, NULL, 0, ret);
        if (r == MDB_MAP_RESIZED) {
                r = mdb_env_set_mapsize(s->env, 0);
                if (r != 0)
                        return errno_from_mdb(r);
                v1_store_refresh_map_size(s);
                r = mdb_txn_begin(s->env, NULL, 0, ret);
        }
        return errno_from_mdb(r);
}

/* Commits (and frees) txn. Returns an MDB code, so that callers can tell
 * MDB_MAP_FULL (grow and retry) from a disk that is full (ENOSPC: give up). */
static int v1_store_commit(V1Store *s, MDB_txn *txn) {
        int r;

        r = mdb_txn_commit(txn);
        if (r != 0)
                return r;
        if (s->opts.sync != V1_STORE_SYNC_ALWAYS) /* else the commit itself fsync'ed */
                s->dirty = true;
        return 0;
}

/* Moves (or creates) the expiry-index entry of a counter. ikey holds the counter key
 * at offset V1_STORE_EXPIRY_PREFIX. old_expiry 0: no previous entry. */
static int index_move(V1Store *s, MDB_txn *txn, uint8_t *ikey, size_t klen, uint64_t old_expiry,
                      uint64_t new_expiry) {
        MDB_val k = { .mv_size = V1_STORE_EXPIRY_PREFIX + klen, .mv_data = ikey };
        MDB_val empty = { .mv_size = 0, .mv_data = NULL };
        int r;

        if (old_expiry != 0) {
                put_be64(ikey, old_expiry);
                r = mdb_del(txn, s->dbi_expiry, &k, NULL);
                if (r != 0 && r != MDB_NOTFOUND)
                        return r;
        }
        put_be64(ikey, new_expiry);
        return mdb_put(txn, s->dbi_expiry, &k, &empty, 0);
}

/* The journal records' checksum: a word-at-a-time multiply-xorshift hash (a byte-wise FNV
 * cost 6 instructions a byte, a tenth of a HIT's whole budget). Detects torn records; not
 * cryptographic. */
static uint32_t journal_check(const uint8_t *p, size_t n) {
        uint64_t h = 0x9e3779b97f4a7c15ULL ^ n, w;
        size_t i = 0;

        for (; i + 8 <= n; i += 8) {
                memcpy(&w, p + i, sizeof w);
                h = (h ^ le64toh(w)) * 0xff51afd7ed558ccdULL;
                h ^= h >> 32;
        }
        w = 0;
        memcpy(&w, p + i, n - i);
        h = (h ^ le64toh(w)) * 0xc4ceb9fe1a85ec53ULL;
        h ^= h >> 29;
        return (uint32_t) h;
}

/* Copies the record "counter key now has expiry and credit" into the journal. Returns 0,
 * or MDB_TXN_FULL if the journal has no room (the caller commits and retries). */
static int journal_add(V1Store *s, const uint8_t *key, size_t klen, uint64_t expiry, uint64_t credit) {
        uint8_t *p = s->jmap + s->jpos;
        uint32_t check;

        if (s->jmap_len - s->jpos < JOURNAL_RECORD_FIXED + klen + 2)
                return MDB_TXN_FULL;
        p[0] = (uint8_t) (klen & 0xff);
        p[1] = (uint8_t) (klen >> 8);
        memcpy(p + 2, key, klen);
        put_le64(p + 2 + klen, expiry);
        put_le64(p + 10 + klen, credit);
        put_le64(p + 18 + klen, s->jgen);
        check = htole32(journal_check(p, 26 + klen));
        memcpy(p + 26 + klen, &check, sizeof check);
        s->jpos += JOURNAL_RECORD_FIXED + klen;
        return 0;
}

/* Marks the end of the journal at pos (a zero key length ends replay). */
static void journal_mark_end(V1Store *s, size_t pos) {
        if (s->jmap_len - pos >= 2)
                s->jmap[pos] = s->jmap[pos + 1] = 0;
}

/* Writes the journal's first page (its end mark after a commit) to disk. Called after every
 * fsync of the database: else the file on disk could still hold a generation the kernel wrote
 * back long before (tens of seconds), whose replay after an OS crash would set its counters
 * back to those older values. Returns 0 or -errno. */
static int journal_sync_head(V1Store *s) {
        if (!s->jmap)
                return 0;
        return msync(s->jmap, 2, MS_SYNC) < 0 ? -errno : 0;
}

/* Starts a new, empty generation after a commit made everything in the journal redundant. */
static void journal_reset(V1Store *s) {
        if (!s->jmap)
                return;
        s->jgen++;
        s->jpos = 0;
        journal_mark_end(s, 0);
}

/* Sets a counter to (expiry, credit), keeping the expiry index in step. Returns an MDB code. */
static int put_counter(V1Store *s, MDB_txn *txn, const uint8_t *key, size_t klen, uint64_t expiry,
                       uint64_t credit) {
        uint8_t ikey[V1_STORE_INDEX_KEY_MAX];
        uint8_t buf[V1_STORE_VALUE_SIZE];
        uint64_t old_expiry = 0;
        MDB_val k = { .mv_size = klen, .mv_data = ikey + V1_STORE_EXPIRY_PREFIX }, v;
        int r;

        memcpy(ikey + V1_STORE_EXPIRY_PREFIX, key, klen);
        r = mdb_get(txn, s->dbi_counters, &k, &v);
        if (r == 0) {
                if (v.mv_size != V1_STORE_VALUE_SIZE)
                        return MDB_CORRUPTED;
                old_expiry = get_le64(v.mv_data);
        } else if (r != MDB_NOTFOUND)
                return r;
        put_le64(buf, expiry);
        put_le64(buf + 8, credit);
        v = (MDB_val){ .mv_size = sizeof buf, .mv_data = buf };
        r = mdb_put(txn, s->dbi_counters, &k, &v, 0);
        if (r != 0 || old_expiry == expiry)
                return r;
        return index_move(s, txn, ikey, klen, old_expiry, expiry);
}

/* Applies the valid records of the journal's first len bytes to txn, in order. Returns
 * an MDB code. */
static int journal_replay(V1Store *s, MDB_txn *txn, size_t len, size_t *ret_records) {
        const uint8_t *data = s->jmap;
        uint64_t gen = 0;
        size_t pos = 0;
        int r = 0;

        *ret_records = 0;
        while (data && len - pos >= JOURNAL_RECORD_FIXED) {
                const uint8_t *p = data + pos;
                size_t klen = (size_t) p[0] | (size_t) p[1] << 8;
                uint32_t check;

                if (klen <= RULE_ID_SIZE || klen > V1_STORE_KEY_MAX ||
                    len - pos < JOURNAL_RECORD_FIXED + klen)
                        break;
                if (pos == 0)
                        gen = get_le64(p + 18 + klen);
                else if (get_le64(p + 18 + klen) != gen)
                        break; /* left over from an older generation */
                memcpy(&check, p + 26 + klen, sizeof check);
                if (le32toh(check) != journal_check(p, 26 + klen))
                        break; /* torn by an OS crash: nothing after it can be trusted */
                r = put_counter(s, txn, p + 2, klen, get_le64(p + 2 + klen), get_le64(p + 10 + klen));
                if (r != 0)
                        break;
                pos += JOURNAL_RECORD_FIXED + klen;
                (*ret_records)++;
        }
        return r;
}

/* Rebuilds what the journal holds in a transaction of its own and commits it, growing
 * the map if needed; then empties the journal. Used at open and when the write-back
 * transaction was lost. Returns an MDB code. */
static int journal_recover(V1Store *s, size_t len) {
        int r = 0;

        for (unsigned attempt = 0; attempt < V1_STORE_RETRIES_MAX; attempt++) {
                size_t records;
                MDB_txn *txn;

                r = v1_store_begin(s, &txn);
                if (r < 0)
                        return -r;
                r = journal_replay(s, txn, len, &records);
                if (r != 0 || records == 0)
                        mdb_txn_abort(txn);
                else
                        r = v1_store_commit(s, txn);
                if (r != MDB_MAP_FULL || v1_store_grow(s, true) < 0)
                        break;
        }
        if (r == 0)
                journal_reset(s);
        v1_store_unreserve(s);
        return r;
}

/* Commits the write-back transaction, if one is open, and empties the journal. If the
 * commit fails the transaction is gone: what the journal holds is rebuilt (or, if that
 * fails too, left to the next v1_store_apply() or v1_store_open()), and the commit's error is
 * returned all the same. Returns an MDB code. */
static int write_back_commit(V1Store *s) {
        int r;

        if (!s->wtxn)
                return 0;
        r = v1_store_commit(s, s->wtxn); /* frees it, also on failure */
        s->wtxn = NULL;
        s->wcur = NULL;
        s->wtxn_hits = 0;
        if (r != 0) {
                (void) journal_recover(s, s->jpos);
                return r;
        }
        journal_reset(s);
        return 0;
}

/* One attempt at the batch inside txn (journal: also record every change in the
 * journal buffer). Returns an MDB error code (not errno). */
static int apply_batch(V1Store *s, MDB_txn *txn, V1StoreHit *hits, size_t n, uint64_t now_usec,
                       bool journal) {
        uint8_t ikey[V1_STORE_INDEX_KEY_MAX];
        uint8_t *ckey = ikey + V1_STORE_EXPIRY_PREFIX;
        uint8_t buf[V1_STORE_VALUE_SIZE];
        MDB_cursor *c = txn == s->wtxn ? s->wcur : NULL;
        int r;

        if (!c) {
                r = mdb_cursor_open(txn, s->dbi_counters, &c);
                if (r != 0)
                        return r;
        }

        for (size_t i = 0; i < n; i++) {
                V1StoreHit *h = hits + i;
                size_t klen = counter_key(h, ckey);
                MDB_val k = { .mv_size = klen, .mv_data = ckey };
                MDB_val v;
                uint64_t expiry, credit, old_expiry = 0;

                r = mdb_cursor_get(c, &k, &v, MDB_SET_KEY);
                if (r == 0) {
                        if (v.mv_size != V1_STORE_VALUE_SIZE) {
                                r = MDB_CORRUPTED;
                                break;
                        }
                        expiry = get_le64(v.mv_data);
                        credit = get_le64((const uint8_t *) v.mv_data + 8);
                        if (now_usec < expiry) {
                                /* live: decrement in place, expiry unchanged */
                                h->error = 0;
                                h->reset_left = seconds_left(expiry, now_usec);
                                if (credit == 0) {
                                        h->allowed = false;
                                        h->credit = 0;
                                        continue;
                                }
                                credit--;
                                h->allowed = true;
                                h->credit = credit;
                                put_le64(buf, expiry);
                                put_le64(buf + 8, credit);
                                v = (MDB_val){ .mv_size = sizeof buf, .mv_data = buf };
                                r = mdb_cursor_put(c, &k, &v, MDB_CURRENT);
                                if (r == 0 && journal)
                                        r = journal_add(s, ckey, klen, expiry, credit);
                                if (r != 0)
                                        break;
                                continue;
                        }
                        old_expiry = expiry; /* expired, not swept yet: renew */
                } else if (r != MDB_NOTFOUND)
                        break;

                expiry = usec_add_sat(now_usec, h->reset_seconds > UINT64_MAX / USEC_PER_SEC
                                                        ? UINT64_MAX
                                                        : h->reset_seconds * USEC_PER_SEC);
                credit = h->credit_limit - 1;
                put_le64(buf, expiry);
                put_le64(buf + 8, credit);
                v = (MDB_val){ .mv_size = sizeof buf, .mv_data = buf };
                k = (MDB_val){ .mv_size = klen, .mv_data = ckey };
                r = mdb_cursor_put(c, &k, &v, old_expiry != 0 ? MDB_CURRENT : 0);
                if (r != 0)
                        break;
                r = index_move(s, txn, ikey, klen, old_expiry, expiry);
                if (r == 0 && journal)
                        r = journal_add(s, ckey, klen, expiry, credit);
                if (r != 0)
                        break;
                h->error = 0;
                h->allowed = true;
                h->credit = credit;
                h->reset_left = seconds_left(expiry, now_usec);
        }

        if (c != s->wcur)
                mdb_cursor_close(c);
        return r == MDB_NOTFOUND ? 0 : r;
}

static bool hit_valid(const V1StoreHit *h) {
        return h->rule_id && h->credit_limit > 0 && h->reset_seconds > 0 && (h->actor || h->actor_len == 0);
}

/* Write-back: applies the batch to the open transaction and journals it. On any
 * failure the transaction is aborted and rebuilt from the journal (the earlier
 * batches in it were answered), then the batch is retried: after a map growth, or in
 * a fresh transaction if the old one was full. Returns an MDB code. */
static int apply_write_back(V1Store *s, V1StoreHit *hits, size_t n, uint64_t now_usec) {
        bool journal = n <= V1_STORE_WRITE_BACK_HITS_MAX; /* else: too big for the journal */
        int r = 0;

        if (!s->wtxn && s->jpos > 0) {
                /* answered batches that are in no transaction (a rebuild failed, the map is
                 * full): nothing new is taken before they are committed */
                r = journal_recover(s, s->jpos);
                if (r != 0)
                        return r;
        }

        if (s->wtxn_hits + n > V1_STORE_WRITE_BACK_HITS_MAX) {
                r = write_back_commit(s);
                if (r != 0)
                        return r;
        }
        for (unsigned attempt = 0; attempt < V1_STORE_RETRIES_MAX; attempt++) {
                size_t batch_start = s->jpos;
                bool grown = false;
                int k;

                if (!s->wtxn) {
                        r = v1_store_begin(s, &s->wtxn);
                        if (r < 0) {
                                s->wtxn = NULL;
                                s->wcur = NULL;
                                return -r;
                        }
                        r = mdb_cursor_open(s->wtxn, s->dbi_counters, &s->wcur);
                        if (r != 0) {
                                mdb_txn_abort(s->wtxn);
                                s->wtxn = NULL;
                                s->wcur = NULL;
                                return r;
                        }
                }
                r = apply_batch(s, s->wtxn, hits, n, now_usec, journal);
                if (r == 0) {
                        s->wtxn_hits += n;
                        journal_mark_end(s, s->jpos);
                        if (!journal)
                                return write_back_commit(s); /* not journaled: make it durable now */
                        return 0;
                }

                /* The batch failed: forget its records, rebuild the batches before it. */
                mdb_txn_abort(s->wtxn);
                s->wtxn = NULL;
                s->wcur = NULL;
                s->wtxn_hits = 0;
                s->jpos = batch_start;
                journal_mark_end(s, batch_start);
                if (r == MDB_MAP_FULL)
                        grown = v1_store_grow(s, false) >= 0;
                k = journal_recover(s, batch_start);
                if (k != 0)
                        return k;
                if (!(r == MDB_MAP_FULL && grown) && !(r == MDB_TXN_FULL && attempt == 0))
                        break;
        }
        return r;
}

int v1_store_apply(V1Store *s, V1StoreHit *hits, size_t n, uint64_t now_usec) {
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

        if (s->jmap) {
                r = errno_from_mdb(apply_write_back(s, hits, n, now_usec));
                if (r == 0)
                        return 0;
                goto fail;
        }
        for (unsigned attempt = 0; attempt < V1_STORE_RETRIES_MAX; attempt++) {
                MDB_txn *txn;

                r = v1_store_begin(s, &txn);
                if (r < 0)
                        goto fail;
                r = apply_batch(s, txn, hits, n, now_usec, false);
                if (r != 0)
                        mdb_txn_abort(txn);
                else
                        r = v1_store_commit(s, txn); /* frees txn, also on failure */
                if (r != MDB_MAP_FULL || v1_store_grow(s, false) < 0)
                        break;
                /* the map grew: redo the whole batch */
        }
        r = errno_from_mdb(r);
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

int v1_store_sync(V1Store *s) {
        int r;

        if (!s)
                return -EINVAL;
        r = write_back_commit(s);
        if (r != 0)
                return errno_from_mdb(r);
        if (s->opts.sync != V1_STORE_SYNC_PERIODIC || !s->dirty)
                return 0;
        r = mdb_env_sync(s->env, 1);
        if (r != 0)
                return errno_from_mdb(r);
        s->dirty = false;
        return journal_sync_head(s);
}

static int file_size(const V1Store *s, uint64_t *ret) {
        char p[PATH_MAX];
        struct stat st;

        if ((size_t) snprintf(p, sizeof p, "%s/data.mdb", s->opts.path) >= sizeof p)
                return -ENAMETOOLONG;
        if (stat(p, &st) < 0)
                return -errno;
        *ret = (uint64_t) st.st_size;
        return 0;
}

V1Store *v1_store_close(V1Store *s) {
        if (!s)
                return NULL;
        if (s->env) {
                /* If this commit fails, the journal stays for the next open to replay. */
                (void) write_back_commit(s);
                if (s->opts.sync != V1_STORE_SYNC_NONE && mdb_env_sync(s->env, 1) == 0)
                        (void) journal_sync_head(s);
                mdb_env_close(s->env);
        }
        if (s->jmap)
                munmap(s->jmap, s->jmap_len);
        if (s->journal_fd >= 0)
                close(s->journal_fd);
        free((char *) s->opts.path);
        free(s);
        return NULL;
}

/* Reads and checks "magic" and "version" from the meta table. */
static int check_meta(V1Store *s, MDB_txn *txn, char *errbuf, size_t errbuf_size) {
        MDB_val k, v;
        char ver[16];
        unsigned long version;
        char *end;
        int r;

        k = (MDB_val){ .mv_size = strlen("magic"), .mv_data = (void *) "magic" };
        r = mdb_get(txn, s->dbi_meta, &k, &v);
        if (r != 0 && r != MDB_NOTFOUND)
                goto fail_read;
        if (r == MDB_NOTFOUND || v.mv_size != strlen(V1_STORE_MAGIC) ||
            memcmp(v.mv_data, V1_STORE_MAGIC, v.mv_size) != 0) {
                set_error(errbuf, errbuf_size,
                          "%s/data.mdb: not a divvyd counter store (bad or missing magic)", s->opts.path);
                return -EPROTO;
        }

        k = (MDB_val){ .mv_size = strlen("version"), .mv_data = (void *) "version" };
        r = mdb_get(txn, s->dbi_meta, &k, &v);
        if (r != 0 && r != MDB_NOTFOUND)
                goto fail_read;
        if (r == MDB_NOTFOUND || v.mv_size == 0 || v.mv_size >= sizeof ver) {
                set_error(errbuf, errbuf_size,
                          "%s/data.mdb: database format version is missing or unreadable", s->opts.path);
                return -EPROTO;
        }
        memcpy(ver, v.mv_data, v.mv_size);
        ver[v.mv_size] = 0;
        errno = 0;
        version = strtoul(ver, &end, 10);
        if (errno != 0 || *end != 0 || ver[0] < '0' || ver[0] > '9') {
                set_error(errbuf, errbuf_size, "%s/data.mdb: database format version '%s' is unreadable",
                          s->opts.path, ver);
                return -EPROTO;
        }
        if (version != V1_STORE_FORMAT_VERSION) {
                set_error(errbuf, errbuf_size,
                          "%s/data.mdb: database format version %lu is not supported by this divvyd "
                          "(expects %d)",
                          s->opts.path, version, V1_STORE_FORMAT_VERSION);
                return -EPROTO;
        }
        return 0;

fail_read:
        set_error(errbuf, errbuf_size, "%s/data.mdb: cannot read format metadata: %s", s->opts.path,
                  mdb_strerror(r));
        return errno_from_mdb(r) == -EPROTO ? -EPROTO : -EBADMSG;
}

/* Creates the tables of a new environment, or opens and checks those of an existing one. */
static int open_tables(V1Store *s, char *errbuf, size_t errbuf_size) {
        MDB_txn *txn = NULL;
        MDB_dbi main_dbi;
        MDB_stat st;
        bool fresh;
        unsigned flags;
        int r;

        r = v1_store_begin(s, &txn);
        if (r < 0) {
                set_error(errbuf, errbuf_size, "%s: cannot begin a transaction: %s", s->opts.path,
                          strerror(-r));
                return r;
        }
        r = mdb_dbi_open(txn, NULL, 0, &main_dbi);
        if (r == 0)
                r = mdb_stat(txn, main_dbi, &st);
        s->dbi_main = main_dbi;
        if (r != 0)
                goto fail_mdb;
        fresh = st.ms_entries == 0;
        flags = fresh ? MDB_CREATE : 0;

        r = mdb_dbi_open(txn, "meta", flags, &s->dbi_meta);
        if (r == MDB_NOTFOUND || r == MDB_INCOMPATIBLE) {
                set_error(errbuf, errbuf_size,
                          "%s/data.mdb: an LMDB database, but not a divvyd counter store", s->opts.path);
                mdb_txn_abort(txn);
                return -EPROTO;
        }
        if (r != 0)
                goto fail_mdb;

        if (fresh) {
                char ver[16];
                MDB_val k, v;

                k = (MDB_val){ .mv_size = strlen("magic"), .mv_data = (void *) "magic" };
                v = (MDB_val){ .mv_size = strlen(V1_STORE_MAGIC), .mv_data = (void *) V1_STORE_MAGIC };
                r = mdb_put(txn, s->dbi_meta, &k, &v, 0);
                if (r != 0)
                        goto fail_mdb;
                k = (MDB_val){ .mv_size = strlen("version"), .mv_data = (void *) "version" };
                v = (MDB_val){ .mv_size = (size_t) snprintf(ver, sizeof ver, "%d", V1_STORE_FORMAT_VERSION),
                               .mv_data = ver };
                r = mdb_put(txn, s->dbi_meta, &k, &v, 0);
                if (r != 0)
                        goto fail_mdb;
        } else {
                r = check_meta(s, txn, errbuf, errbuf_size);
                if (r < 0) {
                        mdb_txn_abort(txn);
                        return r;
                }
        }

        r = mdb_dbi_open(txn, "counters", flags, &s->dbi_counters);
        if (r == 0)
                r = mdb_dbi_open(txn, "expiry", flags, &s->dbi_expiry);
        if (r == MDB_NOTFOUND || r == MDB_INCOMPATIBLE) {
                set_error(errbuf, errbuf_size, "%s/data.mdb: a divvyd counter store missing its tables",
                          s->opts.path);
                mdb_txn_abort(txn);
                return -EBADMSG;
        }
        if (r != 0)
                goto fail_mdb;

        r = mdb_txn_commit(txn);
        txn = NULL;
        if (r != 0)
                goto fail_mdb;
        return 0;

fail_mdb:
        if (txn)
                mdb_txn_abort(txn);
        set_error(errbuf, errbuf_size, "%s/data.mdb: %s", s->opts.path, mdb_strerror(r));
        r = errno_from_mdb(r);
        return r == -ENOENT ? -EBADMSG : r;
}

/* LMDB trusts the file to hold every page its meta page names; a truncated file
 * would be a SIGBUS on first access. Refuse it instead. */
static int check_file_size(V1Store *s, char *errbuf, size_t errbuf_size) {
        MDB_envinfo info;
        MDB_stat st;
        uint64_t size, need;
        int r;

        r = mdb_env_info(s->env, &info);
        if (r == 0)
                r = mdb_env_stat(s->env, &st);
        if (r != 0) {
                set_error(errbuf, errbuf_size, "%s: %s", s->opts.path, mdb_strerror(r));
                return errno_from_mdb(r);
        }
        r = file_size(s, &size);
        if (r < 0) {
                set_error(errbuf, errbuf_size, "%s/data.mdb: cannot stat: %s", s->opts.path, strerror(-r));
                return r;
        }
        need = ((uint64_t) info.me_last_pgno + 1) * st.ms_psize;
        if (size < need) {
                set_error(errbuf, errbuf_size,
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
static int journal_open(V1Store *s, char *errbuf, size_t errbuf_size) {
        bool wb = s->opts.write_back && s->opts.sync != V1_STORE_SYNC_ALWAYS;
        struct timespec ts;
        char p[PATH_MAX];
        struct stat st;
        int r;

        if ((size_t) snprintf(p, sizeof p, "%s/" V1_STORE_JOURNAL_NAME, s->opts.path) >= sizeof p) {
                set_error(errbuf, errbuf_size, "%s: path too long", s->opts.path);
                return -ENAMETOOLONG;
        }
        s->journal_fd = open(p, O_RDWR | O_CLOEXEC | (wb ? O_CREAT : 0), V1_STORE_FILE_MODE);
        if (s->journal_fd < 0) {
                r = -errno;
                s->journal_fd = -EBADF;
                if (r == -ENOENT && !wb)
                        return 0;
                set_error(errbuf, errbuf_size, "cannot open %s: %s", p, strerror(-r));
                return r;
        }
        if (flock(s->journal_fd, LOCK_EX | LOCK_NB) < 0) {
                r = errno == EWOULDBLOCK ? -EBUSY : -errno;
                set_error(errbuf, errbuf_size, "cannot lock %s: %s", p,
                          r == -EBUSY ? "the store is in use by another process" : strerror(-r));
                return r;
        }
        if (wb) {
                r = posix_fallocate(s->journal_fd, 0, (off_t) JOURNAL_SIZE);
                if (r != 0) {
                        set_error(errbuf, errbuf_size, "cannot allocate %zu bytes for %s: %s",
                                  (size_t) JOURNAL_SIZE, p, strerror(r));
                        return -r;
                }
        }
        if (fstat(s->journal_fd, &st) < 0) {
                r = -errno;
                set_error(errbuf, errbuf_size, "cannot stat %s: %s", p, strerror(-r));
                return r;
        }
        if (st.st_size > 0) {
                void *m = mmap(NULL, (size_t) st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, s->journal_fd,
                               0);
                if (m == MAP_FAILED) {
                        r = -errno;
                        set_error(errbuf, errbuf_size, "cannot map %s: %s", p, strerror(-r));
                        return r;
                }
                s->jmap = m;
                s->jmap_len = (size_t) st.st_size;
        }
        /* a generation no earlier run used: replay never mistakes their records for ours */
        clock_gettime(CLOCK_REALTIME, &ts);
        s->jgen = (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;

        r = journal_recover(s, s->jmap_len);
        if (r == 0 && s->opts.sync != V1_STORE_SYNC_NONE &&
            (mdb_env_sync(s->env, 1) != 0 || journal_sync_head(s) < 0))
                r = EIO;
        if (r != 0) {
                r = errno_from_mdb(r);
                set_error(errbuf, errbuf_size, "cannot replay the journal %s: %s", p, strerror(-r));
                return r;
        }
        if (!wb) {
                (void) unlink(p);
                if (s->jmap)
                        munmap(s->jmap, s->jmap_len);
                s->jmap = NULL;
                s->jmap_len = 0;
                close(s->journal_fd);
                s->journal_fd = -EBADF;
        }
        return 0;
}

int v1_store_open(const V1StoreOptions *opts, V1Store **ret, char *errbuf, size_t errbuf_size) {
        V1Store *s = NULL;
        unsigned flags = MDB_NOTLS | MDB_NORDAHEAD;
        struct stat st;
        int r, dead;

        if (errbuf && errbuf_size > 0)
                errbuf[0] = 0;
        if (!opts || !opts->path || !*opts->path || !ret ||
            (opts->sync < 0 || opts->sync >= _V1_STORE_SYNC_MAX)) {
                set_error(errbuf, errbuf_size, "invalid store options");
                return -EINVAL;
        }

        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->journal_fd = -EBADF;
        s->opts = *opts;
        s->opts.path = strdup(opts->path);
        if (!s->opts.path) {
                free(s);
                return -ENOMEM;
        }
        if (s->opts.map_size == 0)
                s->opts.map_size = V1_STORE_MAP_SIZE_DEFAULT;
        if (s->opts.map_size_max == 0)
                s->opts.map_size_max = V1_STORE_MAP_SIZE_MAX_DEFAULT;
        if (s->opts.map_size_max < s->opts.map_size)
                s->opts.map_size_max = s->opts.map_size;
        if (s->opts.sync_interval_usec == 0)
                s->opts.sync_interval_usec = V1_STORE_SYNC_INTERVAL_DEFAULT_USEC;
        if (s->opts.sync != V1_STORE_SYNC_ALWAYS)
                flags |= MDB_NOSYNC;

        if (mkdir(s->opts.path, V1_STORE_DIR_MODE) < 0 && errno != EEXIST) {
                r = -errno;
                set_error(errbuf, errbuf_size, "cannot create directory %s: %s", s->opts.path, strerror(-r));
                goto fail;
        }
        if (stat(s->opts.path, &st) < 0) {
                r = -errno;
                set_error(errbuf, errbuf_size, "cannot stat %s: %s", s->opts.path, strerror(-r));
                goto fail;
        }
        if (!S_ISDIR(st.st_mode)) {
                r = -ENOTDIR;
                set_error(errbuf, errbuf_size, "%s is not a directory", s->opts.path);
                goto fail;
        }

        r = mdb_env_create(&s->env);
        if (r != 0) {
                s->env = NULL;
                r = errno_from_mdb(r);
                set_error(errbuf, errbuf_size, "cannot create LMDB environment: %s", strerror(-r));
                goto fail;
        }
        r = mdb_env_set_maxdbs(s->env, V1_STORE_DBS);
        if (r == 0)
                r = mdb_env_set_mapsize(s->env, (size_t) s->opts.map_size);
        if (r != 0) {
                r = errno_from_mdb(r);
                set_error(errbuf, errbuf_size, "cannot configure LMDB environment: %s", strerror(-r));
                goto fail;
        }

        r = mdb_env_open(s->env, s->opts.path, flags, V1_STORE_FILE_MODE);
        if (r != 0) {
                if (r == MDB_INVALID || r == MDB_VERSION_MISMATCH || r == MDB_CORRUPTED ||
                    r == MDB_PAGE_NOTFOUND) {
                        set_error(errbuf, errbuf_size,
                                  "%s/data.mdb is not a valid LMDB database (corrupt, truncated or "
                                  "foreign file): %s",
                                  s->opts.path, mdb_strerror(r));
                        r = -EBADMSG;
                } else {
                        set_error(errbuf, errbuf_size, "cannot open LMDB environment in %s: %s",
                                  s->opts.path, mdb_strerror(r));
                        r = errno_from_mdb(r);
                }
                goto fail;
        }

        r = check_file_size(s, errbuf, errbuf_size);
        if (r < 0)
                goto fail;

        /* slots of readers that died without closing */
        r = mdb_reader_check(s->env, &dead);
        if (r != 0) {
                set_error(errbuf, errbuf_size, "%s: cannot clear stale readers: %s", s->opts.path,
                          mdb_strerror(r));
                r = errno_from_mdb(r);
                goto fail;
        }

        r = open_tables(s, errbuf, errbuf_size);
        if (r < 0)
                goto fail;

        r = journal_open(s, errbuf, errbuf_size);
        if (r < 0)
                goto fail;

        *ret = s;
        return 0;

fail:
        if (s->env) {
                mdb_env_close(s->env);
                s->env = NULL;
        }
        v1_store_close(s);
        return r;
}
