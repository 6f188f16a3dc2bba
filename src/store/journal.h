/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * journal.c: the write-back journal, a file of records "this key now holds (expiry,
 * credit)" in a shared mapping. It knows nothing of LMDB or of what a key means: the
 * store (store.c) appends a record for every counter a batch changes and, after a
 * crash or a lost transaction, reads them back with a JournalCursor and applies them
 * itself. Nothing here calls the store.
 *
 * Layout of a record (all integers little-endian):
 *   key length (u16, > 0) + key + expiry (u64) + credit (u64) + generation (u64)
 *   + check (u32, journal_check() of everything before it)
 * A key length of 0 is the end mark. Every commit of the store starts a new generation
 * at offset 0 (journal_reset()), so a reader takes records from offset 0 while they are
 * whole, carry a valid check and the first record's generation: a record torn by an OS
 * crash, or one left over from an older generation, ends the replay.
 *
 * Memory of a shared file mapping belongs to the kernel's page cache: a record is safe
 * from a crash of the process as soon as it is copied, without any syscall. Only
 * journal_sync_head() writes something (the end mark at offset 0) to the disk.
 */

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <endian.h>

/* bytes besides the key: key length (u16), expiry, credit, generation (u64), check (u32) */
#define JOURNAL_RECORD_FIXED 30

typedef struct Journal {
        int fd;       /* < 0: no journal */
        uint8_t *map; /* the file, mapped shared; NULL if empty or none */
        size_t len;   /* bytes mapped */
        size_t pos;   /* end of this generation's records */
        uint64_t gen; /* generation of the records being written */
        char *path;   /* owned */
} Journal;

#define JOURNAL_NULL ((Journal){ .fd = -EBADF })

/* One record, as a JournalCursor hands it out: key points into the mapping. */
typedef struct JournalRecord {
        const uint8_t *key;
        size_t key_len;
        uint64_t expiry;
        uint64_t credit;
} JournalRecord;

typedef struct JournalCursor {
        const Journal *j;
        size_t pos, len;
        uint64_t gen;
} JournalCursor;

/* Opens the journal at path and locks it (flock, -EBUSY if another process holds it).
 * create_size > 0: creates it if missing and preallocates create_size bytes, so that a
 * full disk cannot fault a write into the mapping. create_size 0: opens only a journal
 * that exists (if none, returns 0 with j->fd < 0). Maps what the file holds and starts a
 * generation no earlier run used. On failure returns -errno (with a sentence in errbuf,
 * but for -ENOMEM); *j is then closed. */
int journal_open(Journal *j, const char *path, size_t create_size, char *errbuf, size_t errbuf_size);

/* Unmaps and closes; remove: also deletes the file (its records are no longer needed).
 * Leaves *j as JOURNAL_NULL. Accepts a closed journal. */
void journal_close(Journal *j, bool remove);

/* The records' checksum: a word-at-a-time multiply-xorshift hash (a byte-wise FNV cost 6
 * instructions a byte, a tenth of a HIT's whole budget). Detects torn records; not
 * cryptographic. */
static inline uint32_t journal_check(const uint8_t *p, size_t n) {
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

static inline void journal_put_le64(uint8_t *p, uint64_t v) {
        v = htole64(v);
        memcpy(p, &v, sizeof v);
}

/* Appends the record "key now holds expiry and credit" (inline: once per hit, no
 * syscall). Returns 0, or -ENOBUFS if the journal has no room left (commit, then
 * journal_reset()). key_len: 1..65535. Does not move the end mark. */
static inline int journal_add(Journal *j, const uint8_t *key, size_t key_len, uint64_t expiry,
                              uint64_t credit) {
        uint8_t *p = j->map + j->pos;
        uint32_t check;

        if (!j->map || j->len - j->pos < JOURNAL_RECORD_FIXED + key_len + 2)
                return -ENOBUFS;
        p[0] = (uint8_t) (key_len & 0xff);
        p[1] = (uint8_t) (key_len >> 8);
        memcpy(p + 2, key, key_len);
        journal_put_le64(p + 2 + key_len, expiry);
        journal_put_le64(p + 10 + key_len, credit);
        journal_put_le64(p + 18 + key_len, j->gen);
        check = htole32(journal_check(p, 26 + key_len));
        memcpy(p + 26 + key_len, &check, sizeof check);
        j->pos += JOURNAL_RECORD_FIXED + key_len;
        return 0;
}

/* Marks the end of the records at pos (and forgets what was appended after it). */
void journal_truncate(Journal *j, size_t pos);

/* Starts a new, empty generation: everything in the journal was made redundant. */
void journal_reset(Journal *j);

/* Writes the journal's first page (its end mark after a reset) to disk. Call after every
 * fsync of what the records are applied to: else the file on disk could still hold a
 * generation the kernel wrote back long before, whose replay after an OS crash would set
 * its keys back to older values. Returns 0 or -errno. */
int journal_sync_head(Journal *j);

/* Reads the records among the first len bytes of the mapping, in order. */
void journal_cursor_init(JournalCursor *c, const Journal *j, size_t len);

/* The next valid record of the cursor's generation; false at the end mark, at a torn
 * or foreign record, or at the end of the range. */
bool journal_cursor_next(JournalCursor *c, JournalRecord *ret);
