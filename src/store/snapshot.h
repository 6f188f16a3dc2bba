/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * snapshot.c: the counters written whole, sequentially, into one file the store owns
 * (counters.snap in the store directory), the checkpoint of format version 3 (STORE-DESIGN.md,
 * "Checkpoints"). The table is resident and compact, so a checkpoint that writes all of it
 * costs the number of live counters, not the number of changes since the last one, and a
 * start reads it sequentially.
 *
 * File layout (little-endian):
 *   header, SNAPSHOT_HEADER_SIZE (64) bytes:
 *     0  16  SNAPSHOT_MAGIC "divvyd snapshot" and a NUL
 *     16  4  format version (SNAPSHOT_VERSION, 1)
 *     20  4  record size (SNAPSHOT_RECORD_SIZE, 32)
 *     24  8  lsn: the last journal record the snapshot covers (replay starts after it)
 *     32  8  count: records that follow
 *     40  8  the wall clock (µs) the snapshot was taken at (informational)
 *     48 12  zero
 *     60  4  CRC-32C of bytes 0..59
 *   count records of SNAPSHOT_RECORD_SIZE (32) bytes: id.lo, id.hi, w0 | algorithm << 56, w1
 *     (u64 each; w0 > 0 and below 2^56, algorithm < _COUNTER_ALGORITHM_MAX)
 *   trailer, SNAPSHOT_TRAILER_SIZE (8) bytes: CRC-32C of every record, then "SEND"
 * The file is exactly header + count * 32 + trailer bytes. An id may appear twice (a copy made
 * while the table changes, table_copy_chunk()): the later record wins; the journal replayed
 * after lsn sets every counter changed during the copy right.
 *
 * Writing: to counters.snap.tmp (created 0600), fsync'ed, renamed over counters.snap, the
 * directory fsync'ed: a crash leaves the previous snapshot or the new one, whole.
 *
 * Library-like: never logs; returns 0 or -errno, with a sentence for the operator in err.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "counter.h"

#define SNAPSHOT_NAME         "counters.snap"
#define SNAPSHOT_TMP_NAME     "counters.snap.tmp"
#define SNAPSHOT_MAGIC        "divvyd snapshot" /* and its NUL: 16 bytes */
#define SNAPSHOT_VERSION      1
#define SNAPSHOT_HEADER_SIZE  64
#define SNAPSHOT_RECORD_SIZE  32
#define SNAPSHOT_TRAILER_SIZE 8
#define SNAPSHOT_BUFFER_SIZE                                                                                \
        (1U << 20) /* bytes: what the writer and the reader move per system call (32,768 records) */

typedef struct SnapshotInfo {
        uint64_t lsn;     /* the last journal record covered */
        uint64_t count;   /* records in the file */
        uint64_t at_usec; /* the wall clock it was taken at */
} SnapshotInfo;

/* ---- parsing (pure: the reader and the fuzz target) ---- */

typedef int (*SnapshotRecordFunc)(const CounterRecord *r, void *userdata);

typedef struct SnapshotParser {
        uint8_t header[SNAPSHOT_HEADER_SIZE], trailer[SNAPSHOT_TRAILER_SIZE];
        uint8_t partial[SNAPSHOT_RECORD_SIZE]; /* a record split between two feeds */
        size_t have;                           /* bytes of the current part (header, record, trailer) */
        uint64_t records;                      /* records parsed */
        uint32_t crc;                          /* of the records so far */
        bool header_done, done;
        SnapshotInfo info;
        uint64_t now_usec; /* records with w0 <= now_usec are skipped (expired) */
        SnapshotRecordFunc cb;
        void *userdata;
} SnapshotParser;

/* Starts a parse: cb is called for every live record, in file order; a negative return stops
 * the parse with that value. */
void snapshot_parser_init(SnapshotParser *p, uint64_t now_usec, SnapshotRecordFunc cb, void *userdata);

/* Parses the next n bytes of the file. Returns 0, cb's negative value, or -EBADMSG with a
 * sentence in err (bad magic or header CRC, unknown version or record size, a malformed
 * record, bytes after the trailer, a wrong CRC of the records), -EPROTO for another format
 * version. The header's fields are in p->info once parsed. */
int snapshot_parser_feed(SnapshotParser *p, const void *data, size_t n, char *err, size_t err_size);

/* Ends a parse: -EBADMSG with a sentence if the file was cut short, else 0. */
int snapshot_parser_finish(SnapshotParser *p, char *err, size_t err_size);

/* ---- the file ---- */

/* Reads dir/counters.snap's header alone into *ret. Returns 0, -ENOENT if there is none,
 * -EBADMSG / -EPROTO with a sentence, or -errno. */
int snapshot_read_info(const char *dir, SnapshotInfo *ret, char *err, size_t err_size);

/* Reads dir/counters.snap whole, calling cb for each live counter (w0 > now_usec), checking
 * every byte: returns 0 (and *ret_info), -ENOENT, cb's negative value, -EBADMSG / -EPROTO with
 * a sentence naming the file, or -errno. Reads in SNAPSHOT_BUFFER_SIZE chunks, sequentially. */
int snapshot_load(const char *dir, uint64_t now_usec, SnapshotRecordFunc cb, void *userdata,
                  SnapshotInfo *ret_info, char *err, size_t err_size);

typedef struct SnapshotWriter SnapshotWriter;

/* The points where the writer calls its test hook (StoreOptions.snapshot_hook), e.g. for a test
 * to kill the process there. */
typedef enum SnapshotPoint {
        SNAPSHOT_POINT_WRITTEN, /* half the records are written to the temporary file */
        SNAPSHOT_POINT_SWAP,    /* the temporary file is complete and synced, not yet renamed */
} SnapshotPoint;

/* Creates dir/counters.snap.tmp (replacing one a crash left) for a snapshot covering lsn,
 * expecting about `expect` records (for SNAPSHOT_POINT_WRITTEN). rate_bytes > 0 paces the
 * writes at that many bytes a second (sleeping between buffers). Returns 0, or -errno with a
 * sentence. */
int snapshot_writer_new(const char *dir, uint64_t lsn, uint64_t at_usec, uint64_t expect,
                        uint64_t rate_bytes, void (*hook)(int point), SnapshotWriter **ret, char *err,
                        size_t err_size);

/* Appends n records (algorithm < _COUNTER_ALGORITHM_MAX, 0 < w0 < 2^56). Returns 0 or -errno
 * with a sentence (-ENOSPC: the disk is full). */
int snapshot_writer_add(SnapshotWriter *w, const CounterRecord *records, size_t n, char *err,
                        size_t err_size);

/* Completes the file (trailer, header), fsyncs it, renames it over dir/counters.snap and
 * fsyncs the directory: from then on it is the snapshot. Returns 0 or -errno with a sentence
 * (the temporary file removed, the previous snapshot untouched). Frees w either way. */
int snapshot_writer_commit(SnapshotWriter *w, char *err, size_t err_size);

/* Abandons the snapshot: removes the temporary file. Accepts NULL, returns NULL. */
SnapshotWriter *snapshot_writer_abort(SnapshotWriter *w);

/* Removes a temporary file a crash left in dir (best effort). */
void snapshot_remove_tmp(const char *dir);
