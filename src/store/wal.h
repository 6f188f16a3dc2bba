/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * wal.c: the write-ahead journal of the counter store (issue #14). Every change of a counter
 * is appended as a CounterRecord holding its state AFTER the change, so replay is idempotent:
 * the last record of an id wins. Knows nothing of LMDB or of the resident table.
 *
 * Files, all in the store's directory:
 *   wal.lock                     flock()ed by the one process that appends (-EBUSY for a second)
 *   wal-<seq, 16 hex>.divvyd     a segment: WAL_HEADER_SIZE bytes of header, then records
 *   wal-<seq, 16 hex>.divvyd.new the next segment, preallocated in advance (not yet in the journal)
 *
 * Segment header (WAL_HEADER_SIZE bytes, little-endian):
 *   0  8  magic "DIVVYWAL"
 *   8  4  format version (WAL_FORMAT_VERSION)
 *   12 4  record size (WAL_RECORD_SIZE)
 *   16 8  segment sequence number (the one in the file name)
 *   24 8  lsn of the segment's first record
 *   32 8  creation time, µs CLOCK_REALTIME (for the operator)
 *   40 20 zero
 *   60 4  CRC-32C (Castagnoli) of bytes 0..59
 *
 * Record (WAL_RECORD_SIZE bytes, little-endian), the n-th of a segment at
 * WAL_HEADER_SIZE + n * WAL_RECORD_SIZE:
 *   0  8  lsn: log sequence number, journal-wide, consecutive, the first ever is 1; it equals
 *         the segment's first lsn + n, so a record cannot be mistaken for one of another place
 *   8  8  id.lo
 *   16 8  id.hi
 *   24 8  state.w0 (0: the counter is deleted)
 *   32 8  state.w1
 *   40 1  algorithm (CounterAlgorithm)
 *   41 3  zero
 *   44 4  CRC-32C of bytes 0..43
 * A record is valid when its CRC, its lsn (the one its slot stands for) and its zero bytes
 * are right. An invalid one is, by its look (record_whole() in wal.c):
 *   empty    all zeros: never written (the unwritten rest of a preallocated segment)
 *   torn     its lsn field or its CRC field still zero: a write a kill or a crash cut short
 *            (the fields are written first and last, a disk sector holds at least one whole,
 *            and what was not written reads as zeros)
 *   damaged  written whole and wrong all the same: garbled on disk, or a valid record of
 *            another slot (a copied block, a misdirected write)
 * A segment's records run up to its last valid or damaged one (a sealed segment: up to where
 * the next segment's first lsn says). Every invalid record among them is damaged: skipped and
 * counted (WalDamage), never an end; the valid ones after it are read. What follows the
 * records, empty or torn, is the tail a crash leaves, ignored without a word. Skipping is
 * safe because a record holds its counter's whole state after a change and the lsn check
 * keeps every valid record in its place: records are still applied in lsn order, so a later
 * record of a counter supersedes a damaged one, and an older state is never applied after a
 * newer one. What is lost is the change each damaged record held, for the counters without a
 * later record.
 *
 * Segments are preallocated (posix_fallocate: a full disk is found when a segment is made,
 * never when a record is written) and mapped MAP_SHARED: an append is a memcpy, with no
 * system call per batch (one that does not wait per MiB, to start the disk writing), and
 * survives a kill -9 of the process (the page cache has it). wal_sync() makes it survive an
 * OS crash too. With WalOptions.write_appends (--sync=always) an append is one pwrite() into
 * the same page cache instead (coherent with the mapping and with every reader), and the
 * blocks ahead of it are zero-filled as it goes, so that the sync after each batch finds them
 * written: the bytes on disk are the same in both ways.
 *
 * Rotation: when a batch does not fit in the current segment, the segment is sealed (synced
 * to disk with its name, unmapped, immutable from then on) and the next one, prepared in advance by
 * wal_prepare() or else made on the spot, becomes current: its header is written and synced,
 * then it is renamed from .new to its final name. So every segment under a final name has a
 * valid header, and every sealed segment is complete on disk before a later one exists: only
 * the last segment can end in a torn record after a crash. A sealed segment's records must
 * end exactly where the next segment's first lsn says; anything else is corruption (-EBADMSG).
 *
 * Start-up: wal_open() seals the segments a previous run left (after syncing the last one)
 * and appends in a fresh segment whose first lsn follows the last segment's records (its last
 * valid or damaged one); a torn tail stays behind it, ignored. A last segment without a
 * record is replaced by the fresh one instead. wal_replay() then reads those segments, in
 * order. On a full disk there is no room for the fresh segment: the journal opens without
 * one, and appends fail (-ENOSPC) until one can be made, exactly as when a running journal
 * cannot make its next segment.
 *
 * Threads: a Wal is used by one thread. wal_segment_read() reads a sealed segment by
 * directory and sequence number, touching no Wal, so a checkpoint thread can read what
 * wal_sealed() named while the owner keeps appending; wal_release() (owner's thread) deletes
 * them once the checkpoint committed.
 *
 * Library-like: never logs. Functions return 0 (or a count) or -errno; a sentence for the
 * operator goes to the caller's errbuf, or for a Wal method to wal_error().
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "store/counter.h"

#define WAL_FORMAT_VERSION 1  /* bump on any change of the header or record layout */
#define WAL_HEADER_SIZE    64 /* bytes: the segment header; a multiple of 16 for the records */
#define WAL_RECORD_SIZE                                                                                     \
        48 /* bytes per record: lsn 8, id 16, state 16, algorithm 1, zero 3, CRC 4; well under the          \
            * 128 bytes per hit issue #14 allows for the journal and the checkpoint together */
#define WAL_SEGMENT_SIZE_DEFAULT                                                                            \
        (64ULL << 20) /* bytes: ~1.4 million records; one sync per segment at its seal, amortised           \
                       * over that many, and a checkpoint's unit of work */
#define WAL_SEGMENT_SIZE_MIN (WAL_HEADER_SIZE + 4 * WAL_RECORD_SIZE) /* bytes: for tests */
#define WAL_SEGMENT_SIZE_MAX (1ULL << 30) /* bytes: one mapping each; larger buys nothing */
#define WAL_LOCK_NAME        "wal.lock"

typedef struct WalOptions {
        uint64_t segment_size; /* bytes per new segment; 0 = WAL_SEGMENT_SIZE_DEFAULT */
        /* The first lsn when the directory holds no segment yet (0 = 1): the store passes the
         * checkpoint's last lsn + 1, so lsns keep growing even if every segment was removed. */
        uint64_t first_lsn;
        /* Test hook: allocates len bytes of fd like posix_fallocate() (returns 0 or a positive
         * errno). NULL = posix_fallocate(). Lets the tests make a disk "full". */
        int (*allocate)(int fd, off_t len);
        /* --sync=always: the caller syncs after nearly every append, so appends are written
         * with pwrite() instead of copied into the mapping, and the blocks just ahead of them
         * are zero-filled (WAL_ZERO_CHUNK at a time, WAL_ZERO_AHEAD ahead): a sync then writes
         * into blocks that are already written, with no extent to convert and no page fault
         * of a written-back page; and each append starts writing its blocks at once, so that
         * the sync mostly waits for the disk's cache flush alone. Same files, same contents;
         * only the cost of a sync changes, and the unfinished last block is written once per
         * append instead of once per sync (see STORE-DESIGN.md, "Durability"). */
        bool write_appends;
        /* Test hook: starts writing len bytes of fd at off to disk without waiting, like
         * sync_file_range(SYNC_FILE_RANGE_WRITE) (NULL: that). The early write-outs only make
         * syncs cheaper, so nothing else shows whether they ran: the tests see what they cover. */
        void (*start_write)(int fd, off_t off, off_t len);
} WalOptions;

/* Where a record was read: its segment and its lsn. */
typedef struct WalPosition {
        uint64_t seq;
        uint64_t lsn;
} WalPosition;

/* Called for each record read; a negative return stops the reading and is returned. */
typedef int (*WalRecordFunc)(const CounterRecord *r, const WalPosition *pos, void *userdata);

/* What wal_segment_read() found in a segment. */
typedef struct WalSegmentInfo {
        uint64_t seq;
        uint64_t first_lsn;
        uint64_t records;       /* slots up to the last valid or damaged record (wal.h's rules) */
        uint64_t capacity;      /* records the file has room for */
        uint64_t file_size;     /* bytes */
        uint64_t damaged;       /* of those records, the damaged ones (skipped) */
        uint64_t first_damaged; /* the index of the first of them in the segment, if any */
        bool damaged_tail;      /* the records are followed by a torn one (a crash's, ignored) */
        uint64_t end_offset;    /* byte offset where the records end */
} WalSegmentInfo;

/* The damaged records a wal_replay() skipped (those with lsn > its after_lsn). */
typedef struct WalDamage {
        uint64_t records;     /* how many */
        uint64_t segments;    /* in how many segments */
        uint64_t first_seq;   /* the first one: its segment, */
        uint64_t first_index; /* its index there (0: the segment's first record) */
        uint64_t first_lsn;   /* and the lsn of its slot */
        uint64_t last_seq;    /* the last one's segment */
} WalDamage;

typedef struct WalStats {
        uint64_t segments;         /* in the journal: sealed + the current one (if ready) */
        uint64_t sealed;           /* sealed segments (a checkpoint's to read and release) */
        uint64_t bytes;            /* file bytes of those segments (preallocated; the spare, when
                                    * ready, takes one segment size more) */
        uint64_t records;          /* valid records in them */
        uint64_t current_seq;      /* the segment appended to */
        uint64_t current_records;  /* its fill ... */
        uint64_t current_capacity; /* ... out of */
        uint64_t next_lsn;         /* the lsn the next record gets */
        bool spare_ready;          /* the next segment is preallocated */
        bool current_ready;        /* there is a current segment (false: wal_open() found no room
                                    * for it; the first append or wal_prepare() makes it) */
        uint64_t appended;         /* records appended since open */
        uint64_t syncs;            /* wal_sync() calls that synced something, since open */
        uint64_t sync_usec;        /* time spent in them (CLOCK_MONOTONIC) */
        uint64_t rotations;        /* segments sealed since open */
} WalStats;

typedef struct Wal Wal;

/* Opens the journal in dir (which must exist): takes wal.lock (-EBUSY if another process
 * holds it), checks every segment's header (-EBADMSG damaged, foreign or a sequence number
 * missing, -EPROTO another format version), finds where the last segment's valid records
 * end, syncs it, seals them all, and makes a fresh current segment and a spare. On a full
 * disk (-ENOSPC, -EDQUOT) it opens without them (WalStats.current_ready false, the reason in
 * wal_error()): the journal can be replayed, appends fail with -ENOSPC until wal_prepare() or
 * an append finds room. Leftover .new files are deleted. On failure returns -errno and writes
 * a sentence for the operator into errbuf (if non-NULL); *ret is set only on success. */
int wal_open(const char *dir, const WalOptions *o, Wal **ret, char *errbuf, size_t errbuf_size);

/* Unmaps and closes everything, releases the lock. Syncs nothing: call wal_sync() first if
 * the appended records must survive an OS crash. Accepts NULL; returns NULL. */
Wal *wal_close(Wal *w);
static inline void wal_closep(Wal **w) {
        if (*w)
                wal_close(*w);
}

/* Calls cb, in lsn order, for each valid record with lsn > after_lsn of the segments that
 * existed when wal_open() ran (the previous runs' journal, less what wal_release() deleted).
 * after_lsn: the last lsn the checkpoint holds (0: all). Damaged records (the rules above)
 * are skipped and counted: wal_replay_damage() says how many and where, also from inside cb
 * (the count so far). Returns 0, cb's negative return, or -EBADMSG when a segment's file is
 * now too short for the records wal_open() found there (the sentence in wal_error() names
 * it). */
int wal_replay(Wal *w, uint64_t after_lsn, WalRecordFunc cb, void *userdata);

/* The damaged records the last wal_replay() skipped (so far, when called from its cb). */
void wal_replay_damage(const Wal *w, WalDamage *ret);

/* Appends n records, in order, all or none: when they do not fit in the current segment it
 * is sealed and the next one becomes current first (made larger than segment_size if n
 * records need it: a batch is never split nor refused for its size). No system call that waits unless it
 * rotates: every 2 MiB appended, one sync_file_range() starts the disk writing, so that a seal
 * has little left to wait for. With write_appends: one pwrite() of the records and one
 * sync_file_range() that starts writing their blocks (so that the sync finds them written),
 * and one pwrite() of zeros every WAL_ZERO_CHUNK bytes. The records are the caller's (the
 * store's, from hits of validated rules): each algorithm < _COUNTER_ALGORITHM_MAX, not checked
 * here; wal_replay() treats a record read back with another as damage.
 * Returns 0; -EMSGSIZE if n records exceed WAL_SEGMENT_SIZE_MAX; -ENOSPC (or another -errno, the
 * sentence in wal_error()) if the next segment could not be made or (write_appends) the
 * records could not be written: nothing was appended. */
int wal_append(Wal *w, const CounterRecord *records, size_t n);

#define WAL_WRITEBACK_CHUNK                                                                                 \
        (2U << 20) /* bytes: appends start the disk writing every this much (~43700 records) without        \
                    * waiting, so sealing a segment waits for at most this much, not up to 64 MiB           \
                    * (bench-wal: tens of ms per rotation without it). Only whole chunks, aligned to        \
                    * it, are started: the page cache holds a file in folios of up to 2 MiB, and a          \
                    * started range that ends inside the folio still being appended to writes that          \
                    * whole folio again and again (measured: 88-102 bytes written per 48-byte record        \
                    * with 4 KiB-aligned ranges, 1.00x with 2 MiB-aligned ones) */
#define WAL_ZERO_CHUNK                                                                                      \
        (256U << 10) /* bytes: with write_appends, one pwrite() of zeros (+ a sync_file_range())            \
                      * per this much appended (~5400 records), some tens of µs on the event loop */
#define WAL_ZERO_AHEAD (1U << 20) /* bytes: with write_appends, zero-filled ahead of the appends */

/* Makes every record appended so far durable: msync(MS_SYNC) of the current segment's range
 * written since the last sync (sealed segments were synced when sealed), and an fsync of the
 * directory if a segment was made since. --sync=always calls it once per batch (group
 * commit). Returns 0 or -errno. */
int wal_sync(Wal *w);

/* For a thread that makes the journal durable while the owner appends (store.c's group
 * commit): the current segment's file descriptor (the owner's: dup() it to use it from
 * another thread, and again after a rotation), its sequence number, and the lsn of the last
 * record appended (0: none yet); the descriptor is negative when there is no current segment
 * (wal_open() on a full disk, until one is made). fdatasync() of that descriptor makes every record appended
 * so far durable, except the segment's name when it is new (wal_sync() syncs the directory
 * too: call it once after each rotation). No system call. */
void wal_current(const Wal *w, int *ret_fd, uint64_t *ret_seq, uint64_t *ret_last_lsn);

/* Seals the current segment, if it holds any record, and makes the next one current, so a
 * checkpoint can cover exactly the sealed segments. Returns 1 if it rotated, 0 if the current
 * segment was empty, or -errno (-ENOSPC: the next segment could not be made). */
int wal_rotate(Wal *w);

/* Preallocates the next segment now, if not yet done, so that rotating costs no allocation:
 * for an idle moment or a timer. A journal opened on a full disk gets its current segment
 * first. Returns 0 or -errno (-ENOSPC: the disk is full). */
int wal_prepare(Wal *w);

/* The range of sealed segments. Returns how many there are (they are consecutive); when
 * there are some, sets *ret_first and *ret_last (each may be NULL). */
size_t wal_sealed(const Wal *w, uint64_t *ret_first, uint64_t *ret_last);

/* The last lsn of sealed segment seq, i.e. what a checkpoint of segments up to seq covers.
 * Returns 0 or -ENOENT if seq is not sealed. */
int wal_sealed_last_lsn(const Wal *w, uint64_t seq, uint64_t *ret);

/* Deletes the sealed segments with sequence number <= up_to_seq, oldest first, then syncs the
 * directory: call it after the checkpoint that holds them committed. Returns how many it
 * deleted, or -EINVAL if up_to_seq is not a sealed segment's (never the current one), or
 * -errno. */
int wal_release(Wal *w, uint64_t up_to_seq);

int wal_get_stats(const Wal *w, WalStats *ret);

/* The sentence explaining the last failed call on w ("" if none). */
const char *wal_error(const Wal *w);

/* Reads segment seq of dir: checks its header and calls cb (may be NULL) for each valid
 * record with after_lsn < lsn <= last_lsn, skipping damaged ones (the rules above). last_lsn:
 * where the segment's records end, when the caller knows it (wal_sealed_last_lsn(); every
 * invalid record up to it is then damaged, and the rest of the file is not read), or
 * UINT64_MAX: the records end after the last valid or damaged one. Touches no Wal: any thread
 * may read a sealed segment. ret_info (may be NULL) says what was found. Returns 0, cb's
 * negative return, -ENOENT, -EBADMSG (damaged or foreign header), -EPROTO (another format
 * version), or -errno; a sentence goes to errbuf. */
int wal_segment_read(const char *dir, uint64_t seq, uint64_t after_lsn, uint64_t last_lsn, WalRecordFunc cb,
                     void *userdata, WalSegmentInfo *ret_info, char *errbuf, size_t errbuf_size);

/* For the passes of a checkpoint over records wal_segment_read() found: reads the first
 * `records` records of segment seq and calls cb for the valid ones with lsn > after_lsn whose
 * id.hi is in [hi_min, hi_max], checking the CRC of those only (the others cost a load of 8
 * bytes); a record of the slice that is not valid is a damaged one wal_segment_read() counted,
 * skipped. Returns 0, cb's negative return, or -errno. */
int wal_segment_read_slice(const char *dir, uint64_t seq, uint64_t after_lsn, uint64_t records,
                           uint64_t hi_min, uint64_t hi_max, WalRecordFunc cb, void *userdata, char *errbuf,
                           size_t errbuf_size);

/* The file name of segment seq ("wal-00000000000000a3.divvyd"), for messages and tests. */
#define WAL_SEGMENT_NAME_MAX 32 /* bytes: "wal-" + 16 + ".divvyd.new" + NUL, rounded up */
const char *wal_segment_name(uint64_t seq, char buf[static WAL_SEGMENT_NAME_MAX]);

/* CRC-32C (the journal's) of n more bytes after crc, the CRC of what came before (0 for the
 * first bytes): wal_crc32c(wal_crc32c(0, a, n), b, m) is the CRC of a then b. */
uint32_t wal_crc32c(uint32_t crc, const void *data, size_t n);

/* pwrite()s all n bytes of data at offset off of fd, resuming after a short write. Returns 0 or
 * -errno (-EIO for a write of nothing). */
int wal_pwrite_all(int fd, const void *data, size_t n, off_t off);
