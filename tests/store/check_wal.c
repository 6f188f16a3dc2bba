/* SPDX-License-Identifier: MIT */

#include <check.h>
#include <sched.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/wal.h"
#include "check-run.h"
#include "store-test-util.h"

#define ERRBUF 512
#define T0     (1700000000ULL * 1000000ULL) /* µs: an arbitrary wall-clock time */
#define SEG_RECORDS                                                                                         \
        10 /* records per segment in most tests: small, so a few dozen records rotate many times */
#define SEG_SIZE (WAL_HEADER_SIZE + SEG_RECORDS * WAL_RECORD_SIZE)

/* ---- fixture: one temporary directory per test, on a real disk ($top_builddir or /var/tmp) ---- */

static void make_tmpdir(void) {
        store_test_make_tmpdir("check-wal");
}

static char *seg_path(char *buf, size_t size, uint64_t seq) {
        char name[WAL_SEGMENT_NAME_MAX];

        snprintf(buf, size, "%s/%s", tmpdir, wal_segment_name(seq, name));
        return buf;
}

static bool exists(const char *path) {
        return access(path, F_OK) == 0;
}

/* The i-th record of a test: every field differs from record to record. */
static CounterRecord rec(uint64_t i) {
        return (CounterRecord){
                .id = { .lo = i * 0x9e3779b97f4a7c15ULL, .hi = i },
                .algorithm = (uint8_t) (i % _COUNTER_ALGORITHM_MAX),
                .state = { .w0 = T0 + i, .w1 = i * 7 },
        };
}

static bool rec_eq(const CounterRecord *a, const CounterRecord *b) {
        return a->id.lo == b->id.lo && a->id.hi == b->id.hi && a->algorithm == b->algorithm &&
               a->state.w0 == b->state.w0 && a->state.w1 == b->state.w1;
}

static Wal *open_wal(uint64_t segment_size) {
        WalOptions o = { .segment_size = segment_size };
        char err[ERRBUF] = "";
        Wal *w = NULL;
        int r;

        r = wal_open(tmpdir, &o, &w, err, sizeof err);
        ck_assert_msg(r == 0, "wal_open: %d %s", r, err);
        return w;
}

/* Appends records first .. first + n - 1 in batches of batch. */
static void append_range(Wal *w, uint64_t first, uint64_t n, size_t batch) {
        CounterRecord b[64];

        ck_assert_uint_le(batch, 64);
        for (uint64_t i = 0; i < n;) {
                size_t k = n - i < batch ? (size_t) (n - i) : batch;

                for (size_t j = 0; j < k; j++)
                        b[j] = rec(first + i + j);
                ck_assert_msg(wal_append(w, b, k) == 0, "wal_append: %s", wal_error(w));
                i += k;
        }
}

/* What a replay saw. */
typedef struct Seen {
        CounterRecord *r;
        WalPosition *pos;
        size_t n, alloc;
} Seen;

static int collect(const CounterRecord *r, const WalPosition *pos, void *userdata) {
        Seen *s = userdata;

        if (s->n == s->alloc) {
                s->alloc = s->alloc ? s->alloc * 2 : 64;
                s->r = realloc(s->r, s->alloc * sizeof *s->r);
                s->pos = realloc(s->pos, s->alloc * sizeof *s->pos);
                ck_assert(s->r && s->pos);
        }
        s->r[s->n] = *r;
        s->pos[s->n++] = *pos;
        return 0;
}

static void seen_done(Seen *s) {
        free(s->r);
        free(s->pos);
        *s = (Seen){};
}

/* Opens the journal, replays it and checks it holds exactly records 0 .. n - 1 with lsns
 * first_lsn .. first_lsn + n - 1; returns the open Wal. */
static Wal *open_and_expect(uint64_t segment_size, uint64_t first_lsn, uint64_t n) {
        Wal *w = open_wal(segment_size);
        Seen s = {};
        int r;

        r = wal_replay(w, 0, collect, &s);
        ck_assert_msg(r == 0, "wal_replay: %d %s", r, wal_error(w));
        ck_assert_uint_eq(s.n, n);
        for (size_t i = 0; i < s.n; i++) {
                CounterRecord e = rec(i);

                ck_assert_msg(rec_eq(&s.r[i], &e), "record %zu differs", i);
                ck_assert_uint_eq(s.pos[i].lsn, first_lsn + i);
                if (i > 0)
                        ck_assert_uint_ge(s.pos[i].seq, s.pos[i - 1].seq);
        }
        seen_done(&s);
        return w;
}

/* An independent CRC-32C, bit by bit: checks the on-disk format, not wal.c against itself. */
static uint32_t crc32c_ref(const uint8_t *p, size_t n) {
        uint32_t c = ~0u;

        for (size_t i = 0; i < n; i++) {
                c ^= p[i];
                for (int k = 0; k < 8; k++)
                        c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        }
        return ~c;
}

static uint64_t le64(const uint8_t *p) {
        uint64_t v = 0;

        for (int i = 7; i >= 0; i--)
                v = v << 8 | p[i];
        return v;
}

static uint32_t le32(const uint8_t *p) {
        return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}

static void read_file(const char *path, uint8_t *buf, size_t n, off_t at) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(pread(fd, buf, n, at), (ssize_t) n);
        close(fd);
}

static void write_file(const char *path, const void *buf, size_t n, off_t at) {
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0640);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(pwrite(fd, buf, n, at), (ssize_t) n);
        close(fd);
}

/* ---- tests ---- */

START_TEST (test_layout) {
        CounterRecord r = rec(5);
        uint8_t h[WAL_HEADER_SIZE], b[WAL_RECORD_SIZE];
        char path[PATH_MAX];
        struct stat st;
        Wal *w;

        ck_assert_uint_eq(crc32c_ref((const uint8_t *) "123456789", 9), 0xE3069283u);
        w = open_wal(SEG_SIZE);
        ck_assert_int_eq(wal_append(w, &r, 1), 0);
        ck_assert_int_eq(wal_sync(w), 0);

        seg_path(path, sizeof path, 1);
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_int_eq(st.st_size, SEG_SIZE); /* preallocated */
        read_file(path, h, sizeof h, 0);
        ck_assert_mem_eq(h, "DIVVYWAL", 8);
        ck_assert_uint_eq(le32(h + 8), WAL_FORMAT_VERSION);
        ck_assert_uint_eq(le32(h + 12), WAL_RECORD_SIZE);
        ck_assert_uint_eq(le64(h + 16), 1); /* seq */
        ck_assert_uint_eq(le64(h + 24), 1); /* first lsn */
        ck_assert_uint_eq(le32(h + 60), crc32c_ref(h, 60));

        read_file(path, b, sizeof b, WAL_HEADER_SIZE);
        ck_assert_uint_eq(le64(b), 1); /* lsn */
        ck_assert_uint_eq(le64(b + 8), r.id.lo);
        ck_assert_uint_eq(le64(b + 16), r.id.hi);
        ck_assert_uint_eq(le64(b + 24), r.state.w0);
        ck_assert_uint_eq(le64(b + 32), r.state.w1);
        ck_assert_uint_eq(b[40], r.algorithm);
        ck_assert(b[41] == 0 && b[42] == 0 && b[43] == 0);
        ck_assert_uint_eq(le32(b + 44), crc32c_ref(b, 44));

        /* the next segment is ready in advance, under its .new name */
        snprintf(path, sizeof path, "%s/wal-0000000000000002.divvyd.new", tmpdir);
        ck_assert(exists(path));
        wal_close(w);
        ck_assert(!exists(path));
}
END_TEST

START_TEST (test_round_trip) {
        WalStats st;
        Seen s = {};
        Wal *w;

        w = open_wal(0);
        append_range(w, 0, 100, 7);
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert_uint_eq(st.records, 100);
        ck_assert_uint_eq(st.current_records, 100);
        ck_assert_uint_eq(st.appended, 100);
        ck_assert_uint_eq(st.next_lsn, 101);
        ck_assert_uint_eq(st.segments, 1);
        ck_assert_uint_eq(st.bytes, WAL_SEGMENT_SIZE_DEFAULT);
        ck_assert(st.spare_ready);
        wal_close(w);

        /* a restart replays all, then appends continue in a fresh segment */
        w = open_and_expect(0, 1, 100);
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert_uint_eq(st.current_seq, 2);
        ck_assert_uint_eq(st.sealed, 1);
        ck_assert_uint_eq(st.records, 100);
        append_range(w, 100, 50, 50);
        wal_close(w);
        wal_close(open_and_expect(0, 1, 150));

        /* restarts without appends leave no empty segments behind */
        for (int i = 0; i < 3; i++)
                wal_close(open_and_expect(0, 1, 150));
        w = open_wal(0);
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert_uint_eq(st.segments, 3);
        ck_assert_uint_eq(st.current_seq, 3);
        ck_assert_uint_eq(st.next_lsn, 151);
        wal_close(w);

        /* after_lsn: only what the checkpoint does not hold */
        w = open_wal(0);
        ck_assert_int_eq(wal_replay(w, 120, collect, &s), 0);
        ck_assert_uint_eq(s.n, 30);
        ck_assert_uint_eq(s.pos[0].lsn, 121);
        ck_assert_uint_eq(s.pos[0].seq, 2);
        seen_done(&s);
        wal_close(w);
}
END_TEST

START_TEST (test_rotations) {
        uint64_t first, last, n = 0;
        WalStats st;
        Wal *w;

        /* several runs, batches that do not divide the segment: many rotations */
        for (int run = 0; run < 4; run++) {
                w = open_and_expect(SEG_SIZE, 1, n);
                append_range(w, n, 97, 3);
                n += 97;
                ck_assert_int_eq(wal_get_stats(w, &st), 0);
                ck_assert_uint_ge(st.rotations, 97 / SEG_RECORDS);
                ck_assert_uint_eq(st.records, n);
                ck_assert_uint_eq(st.current_capacity, SEG_RECORDS);
                ck_assert_uint_eq(wal_sealed(w, &first, &last), st.sealed);
                ck_assert_uint_eq(first, 1);
                ck_assert_uint_eq(last, st.current_seq - 1);
                wal_close(w);
        }
        w = open_and_expect(SEG_SIZE, 1, n);

        /* a batch fills the rest exactly, an empty rotate does nothing */
        ck_assert_int_eq(wal_rotate(w), 0);
        append_range(w, n, SEG_RECORDS, SEG_RECORDS);
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert_uint_eq(st.current_records, SEG_RECORDS);
        ck_assert_int_eq(wal_rotate(w), 1);
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert_uint_eq(st.current_records, 0);
        ck_assert_int_eq(wal_append(w, NULL, 0), 0);
        wal_close(w);
        wal_close(open_and_expect(SEG_SIZE, 1, n + SEG_RECORDS));
}
END_TEST

/* Writes records 0..19 in segment 1 (SEG_SIZE is too small: one segment of 32), closes. */
static void write_twenty(void) {
        Wal *w = open_wal(WAL_HEADER_SIZE + 32 * WAL_RECORD_SIZE);

        append_range(w, 0, 20, 20);
        wal_close(w);
}

START_TEST (test_torn_tail) {
        static const struct {
                size_t at, len; /* the bytes of record 19 a crash left unwritten (zeros) */
        } torn[] = {
                { 20, 28 }, /* the write stopped in the middle: no CRC */
                { 44, 4 },  /* everything but the CRC */
                { 0, 24 },  /* a sector written without the one before it: no lsn */
        };
        uint8_t zeros[WAL_RECORD_SIZE] = {}, saved[WAL_RECORD_SIZE];
        char path[PATH_MAX];
        WalSegmentInfo info;
        WalDamage d;
        char err[ERRBUF];
        Wal *w;

        write_twenty();
        seg_path(path, sizeof path, 1);
        read_file(path, saved, sizeof saved, WAL_HEADER_SIZE + 19 * WAL_RECORD_SIZE);
        for (size_t k = 0; k < sizeof torn / sizeof *torn; k++) {
                write_file(path, saved, sizeof saved, WAL_HEADER_SIZE + 19 * WAL_RECORD_SIZE);
                write_file(path, zeros, torn[k].len, WAL_HEADER_SIZE + 19 * WAL_RECORD_SIZE + torn[k].at);
                ck_assert_int_eq(
                        wal_segment_read(tmpdir, 1, 0, UINT64_MAX, NULL, NULL, &info, err, sizeof err), 0);
                ck_assert_uint_eq(info.records, 19);
                ck_assert(info.damaged_tail);
                ck_assert_uint_eq(info.damaged, 0);
                ck_assert_uint_eq(info.end_offset, WAL_HEADER_SIZE + 19 * WAL_RECORD_SIZE);
        }

        /* replay stops exactly there, quietly; later appends follow it and are replayed next time */
        w = open_and_expect(SEG_SIZE, 1, 19);
        wal_replay_damage(w, &d);
        ck_assert_uint_eq(d.records, 0);
        append_range(w, 19, 25, 5);
        wal_close(w);
        w = open_and_expect(SEG_SIZE, 1, 44);
        wal_replay_damage(w, &d);
        ck_assert_uint_eq(d.records, 0);
        wal_close(w);
}
END_TEST

START_TEST (test_torn_tail_truncated) {
        char path[PATH_MAX];
        Wal *w;

        write_twenty();
        seg_path(path, sizeof path, 1);
        /* the file ends in the middle of record 19 */
        ck_assert_int_eq(truncate(path, WAL_HEADER_SIZE + 19 * WAL_RECORD_SIZE + 10), 0);
        w = open_and_expect(SEG_SIZE, 1, 19);
        append_range(w, 19, 3, 3);
        wal_close(w);
        wal_close(open_and_expect(SEG_SIZE, 1, 22));
}
END_TEST

START_TEST (test_sealed_corruption) {
        uint8_t junk = 0xff;
        char path[PATH_MAX];
        char err[ERRBUF];
        Wal *w;

        w = open_wal(SEG_SIZE);
        append_range(w, 0, 35, 5); /* segments 1-3 full, 4 has 5 */
        wal_close(w);

        /* a sealed segment cut short between the open and the replay: its records are gone */
        w = open_wal(SEG_SIZE);
        seg_path(path, sizeof path, 2);
        ck_assert_int_eq(truncate(path, WAL_HEADER_SIZE + 3 * WAL_RECORD_SIZE + 30), 0);
        ck_assert_int_eq(wal_replay(w, 0, NULL, NULL), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(wal_error(w), "wal-0000000000000002.divvyd: the file has room for 3 "
                                                   "records, but the journal held 10 there when it was "
                                                   "opened"));
        wal_close(w);

        /* a damaged header of a sealed segment: refused at open */
        seg_path(path, sizeof path, 3);
        write_file(path, &junk, 1, 20);
        ck_assert_int_eq(wal_open(tmpdir, NULL, &w, err, sizeof err), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(err, "damaged segment header"));

        /* a missing segment in the middle */
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(wal_open(tmpdir, NULL, &w, err, sizeof err), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(err, "wal-0000000000000003.divvyd is missing"));

        /* cut short before the open: refused there */
        seg_path(path, sizeof path, 1);
        ck_assert_int_eq(truncate(path, WAL_HEADER_SIZE + 3 * WAL_RECORD_SIZE + 30), 0);
        ck_assert_int_eq(wal_open(tmpdir, NULL, &w, err, sizeof err), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(err,
                                     "wal-0000000000000002.divvyd: the header says its first record is 11, "
                                     "which does not follow segment 0000000000000001"));
}
END_TEST

/* ---- damaged records (wal.h): skipped and counted, never the end of the journal ---- */

/* Opens the journal of 35 records (rec(0) .. rec(34), lsn 1 .. 35, SEG_RECORDS a segment)
 * and replays it: every record but those at lsn skip[0 .. n_skip - 1] must be delivered, in
 * order, with its lsn, and the damage must be n_skip records, the first at first_seq,
 * first_index. Returns the open Wal. */
static Wal *expect_damaged(const uint64_t *skip, size_t n_skip, uint64_t first_seq, uint64_t first_index) {
        Wal *w = open_wal(SEG_SIZE);
        uint64_t lsn = 1;
        WalDamage d;
        WalStats st;
        Seen s = {};
        size_t k = 0;

        ck_assert_int_eq(wal_replay(w, 0, collect, &s), 0);
        ck_assert_uint_eq(s.n, 35 - n_skip);
        for (size_t i = 0; i < s.n; i++, lsn++) {
                CounterRecord e;

                while (k < n_skip && lsn == skip[k])
                        lsn++, k++;
                e = rec(lsn - 1);
                ck_assert_msg(rec_eq(&s.r[i], &e), "record of lsn %" PRIu64 " differs", lsn);
                ck_assert_uint_eq(s.pos[i].lsn, lsn);
                ck_assert_uint_eq(s.pos[i].seq, (lsn - 1) / SEG_RECORDS + 1);
        }
        seen_done(&s);
        wal_replay_damage(w, &d);
        ck_assert_uint_eq(d.records, n_skip);
        if (n_skip <= 1)
                ck_assert_uint_eq(d.segments, n_skip);
        if (n_skip > 0) {
                ck_assert_uint_eq(d.first_seq, first_seq);
                ck_assert_uint_eq(d.first_index, first_index);
                ck_assert_uint_eq(d.first_lsn, (first_seq - 1) * SEG_RECORDS + first_index + 1);
        }
        /* new records never reuse the lsn of one after the damage */
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert_uint_eq(st.next_lsn, 36);
        return w;
}

static void write_35(void) {
        Wal *w = open_wal(SEG_SIZE);

        append_range(w, 0, 35, 5); /* segments 1-3 full, 4 (the last) has 5 */
        wal_close(w);
}

/* One flipped bit, in the middle of a record (neither its lsn nor its CRC): at the first, a
 * middle and the last record of the last segment (4) and of an earlier one (2). The records
 * after it are replayed, the damaged one is counted, at every open until a release. */
START_TEST (test_damage_bit_flip) {
        static const struct {
                uint64_t seq, index, records; /* the segment, the record, its records */
        } at[] = {
                { 4, 0, 5 }, { 4, 2, 5 }, { 4, 4, 5 }, { 2, 0, 10 }, { 2, 4, 10 }, { 2, 9, 10 },
        };
        char path[PATH_MAX];

        write_35();
        for (size_t k = 0; k < sizeof at / sizeof *at; k++) {
                off_t off = (off_t) (WAL_HEADER_SIZE + at[k].index * WAL_RECORD_SIZE + 30);
                uint64_t skip = (at[k].seq - 1) * SEG_RECORDS + at[k].index + 1;
                WalSegmentInfo info;
                char err[ERRBUF];
                uint8_t b;

                seg_path(path, sizeof path, at[k].seq);
                read_file(path, &b, 1, off);
                b ^= 0x10;
                write_file(path, &b, 1, off);
                ck_assert_int_eq(wal_segment_read(tmpdir, at[k].seq, 0, UINT64_MAX, NULL, NULL, &info, err,
                                                  sizeof err),
                                 0);
                ck_assert_uint_eq(info.records, at[k].records);
                ck_assert_uint_eq(info.damaged, 1);
                ck_assert_uint_eq(info.first_damaged, at[k].index);
                wal_close(expect_damaged(&skip, 1, at[k].seq, at[k].index));
                wal_close(expect_damaged(&skip, 1, at[k].seq, at[k].index)); /* the same again */
                b ^= 0x10;
                write_file(path, &b, 1, off);
                wal_close(expect_damaged(NULL, 0, 0, 0));
        }
}
END_TEST

/* Record index of segment seq: reads it into b, or writes b over it. */
static void record_io(uint64_t seq, uint64_t index, uint8_t b[static WAL_RECORD_SIZE], bool write) {
        char path[PATH_MAX];
        off_t off = (off_t) (WAL_HEADER_SIZE + index * WAL_RECORD_SIZE);

        seg_path(path, sizeof path, seq);
        if (write)
                write_file(path, b, WAL_RECORD_SIZE, off);
        else
                read_file(path, b, WAL_RECORD_SIZE, off);
}

/* Records 1 and 2 of the last segment damaged, then more appended and the journal opened
 * again: the new records follow the last one of the damaged segment (not the damage), so a
 * later open replays all of them, and a replay after a checkpoint's lsn counts only the
 * damage after it. */
START_TEST (test_damage_appends_after) {
        uint64_t skip[2] = { 32, 33 };
        char path[PATH_MAX];
        CounterRecord e;
        uint8_t b = 0;
        WalDamage d;
        Seen s = {};
        Wal *w;

        write_35();
        seg_path(path, sizeof path, 4);
        for (int k = 1; k <= 2; k++) /* in the id: one byte zeroed */
                write_file(path, &b, 1, WAL_HEADER_SIZE + (off_t) k * WAL_RECORD_SIZE + 9);
        w = expect_damaged(skip, 2, 4, 1);
        append_range(w, 35, 5, 5);
        wal_close(w);

        w = open_wal(SEG_SIZE);
        ck_assert_int_eq(wal_replay(w, 0, collect, &s), 0);
        ck_assert_uint_eq(s.n, 38);
        ck_assert_uint_eq(s.pos[37].lsn, 40);
        e = rec(39);
        ck_assert(rec_eq(&s.r[37], &e));
        seen_done(&s);
        /* after lsn 33 (a checkpoint that holds it): no damage left to report */
        ck_assert_int_eq(wal_replay(w, 33, collect, &s), 0);
        ck_assert_uint_eq(s.n, 7);
        ck_assert_uint_eq(s.pos[0].lsn, 34);
        seen_done(&s);
        wal_replay_damage(w, &d);
        ck_assert_uint_eq(d.records, 0);
        ck_assert_uint_eq(d.segments, 0);
        ck_assert_uint_eq(d.first_lsn, 0);
        /* after lsn 32: only the second damaged one counts */
        ck_assert_int_eq(wal_replay(w, 32, collect, &s), 0);
        ck_assert_uint_eq(s.n, 7);
        seen_done(&s);
        wal_replay_damage(w, &d);
        ck_assert_uint_eq(d.records, 1);
        ck_assert_uint_eq(d.segments, 1);
        ck_assert_uint_eq(d.first_index, 2);
        ck_assert_uint_eq(d.first_lsn, 33);
        wal_close(w);
}
END_TEST

/* A record never written (zeros) or torn is damage, not an end, where records follow it or
 * where the next segment's header says the segment's records go on: here the last record of
 * an earlier segment, and one in the middle of the last segment. */
START_TEST (test_damage_unwritten) {
        uint8_t saved[WAL_RECORD_SIZE], zeros[WAL_RECORD_SIZE] = {};
        static const struct {
                uint64_t seq, index;
                size_t at, len; /* the bytes zeroed */
        } at[] = {
                { 2, 9, 0, WAL_RECORD_SIZE },
                { 2, 9, 44, 4 },
                { 4, 2, 0, WAL_RECORD_SIZE },
                { 4, 2, 0, 8 },
        };

        write_35();
        for (size_t k = 0; k < sizeof at / sizeof *at; k++) {
                uint64_t skip = (at[k].seq - 1) * SEG_RECORDS + at[k].index + 1;
                uint8_t b[WAL_RECORD_SIZE];

                record_io(at[k].seq, at[k].index, saved, false);
                memcpy(b, saved, sizeof b);
                memcpy(b + at[k].at, zeros, at[k].len);
                record_io(at[k].seq, at[k].index, b, true);
                wal_close(expect_damaged(&skip, 1, at[k].seq, at[k].index));
                record_io(at[k].seq, at[k].index, saved, true);
        }
}
END_TEST

/* A valid record in another record's slot (a copied block, a misdirected write): its CRC is
 * right, its lsn is not the slot's. It is damage, never replayed as the slot's record (that
 * would put its counter back to the older state after the records between). In the last
 * segment, as its last record (written whole: damage, not a torn tail), in an earlier one,
 * and from another segment. */
START_TEST (test_damage_misplaced_record) {
        static const struct {
                uint64_t seq, from, to, from_seq;
        } at[] = {
                { 4, 1, 3, 4 },
                { 4, 0, 4, 4 },
                { 2, 3, 7, 2 },
                { 1, 0, 3, 2 },
        };

        write_35();
        for (size_t k = 0; k < sizeof at / sizeof *at; k++) {
                uint8_t saved[WAL_RECORD_SIZE], b[WAL_RECORD_SIZE];
                uint64_t skip = (at[k].seq - 1) * SEG_RECORDS + at[k].to + 1;

                record_io(at[k].seq, at[k].to, saved, false);
                record_io(at[k].from_seq, at[k].from, b, false);
                record_io(at[k].seq, at[k].to, b, true);
                wal_close(expect_damaged(&skip, 1, at[k].seq, at[k].to));
                record_io(at[k].seq, at[k].to, saved, true);
                wal_close(expect_damaged(NULL, 0, 0, 0));
        }
}
END_TEST

static void put32(uint8_t *p, uint32_t v) {
        for (int i = 0; i < 4; i++)
                p[i] = (uint8_t) (v >> (8 * i));
}

/* A record with a right CRC over a wrong field (an unknown algorithm, a non-zero reserved
 * byte) is damage too: wal_append() takes the store's records as they are, replay checks what
 * it reads; and damage in two segments is counted in both. */
START_TEST (test_damage_fields_and_segments) {
        uint8_t saved[WAL_RECORD_SIZE], b[WAL_RECORD_SIZE];
        uint64_t skip[2] = { 6, 33 };
        WalDamage d;
        Wal *w;

        write_35();
        for (int k = 0; k < 4; k++) {
                record_io(1, 5, saved, false);
                memcpy(b, saved, sizeof b);
                if (k < 3)
                        b[41 + k] = 1;
                else
                        b[40] = _COUNTER_ALGORITHM_MAX;
                put32(b + 44, crc32c_ref(b, 44));
                record_io(1, 5, b, true);
                wal_close(expect_damaged(skip, 1, 1, 5));
                record_io(1, 5, saved, true);
        }
        /* two segments: the first and the last damaged record are named */
        record_io(1, 5, b, true);
        record_io(4, 2, saved, false);
        saved[10] ^= 1;
        record_io(4, 2, saved, true);
        w = open_wal(SEG_SIZE);
        ck_assert_int_eq(wal_replay(w, 0, NULL, NULL), 0);
        wal_replay_damage(w, &d);
        ck_assert_uint_eq(d.records, 2);
        ck_assert_uint_eq(d.segments, 2);
        ck_assert_uint_eq(d.first_seq, 1);
        ck_assert_uint_eq(d.first_index, 5);
        ck_assert_uint_eq(d.first_lsn, skip[0]);
        ck_assert_uint_eq(d.last_seq, 4);
        wal_close(w);
        wal_close(expect_damaged(skip, 2, 1, 5)); /* the same records, as expect_damaged() sees them */
}
END_TEST

START_TEST (test_foreign) {
        uint8_t h[WAL_HEADER_SIZE];
        char path[PATH_MAX];
        char err[ERRBUF];
        Wal *w = NULL;

        /* a file of something else under a segment's name */
        seg_path(path, sizeof path, 1);
        memset(h, 'x', sizeof h);
        memcpy(h, "SQLite format 3", 16);
        write_file(path, h, sizeof h, 0);
        ck_assert_int_eq(wal_open(tmpdir, NULL, &w, err, sizeof err), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(err, "is not a divvyd journal segment"));
        ck_assert_ptr_null(w);

        /* too short for a header */
        ck_assert_int_eq(truncate(path, 10), 0);
        ck_assert_int_eq(wal_open(tmpdir, NULL, &w, err, sizeof err), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(err, "is not a divvyd journal segment"));

        /* a real segment of another format version (its CRC right) */
        ck_assert_int_eq(unlink(path), 0);
        wal_close(open_wal(SEG_SIZE));
        read_file(path, h, sizeof h, 0);
        h[8] = 7;
        h[60] = (uint8_t) crc32c_ref(h, 60);
        h[61] = (uint8_t) (crc32c_ref(h, 60) >> 8);
        h[62] = (uint8_t) (crc32c_ref(h, 60) >> 16);
        h[63] = (uint8_t) (crc32c_ref(h, 60) >> 24);
        write_file(path, h, sizeof h, 0);
        ck_assert_int_eq(wal_open(tmpdir, NULL, &w, err, sizeof err), -EPROTO);
        ck_assert_ptr_nonnull(strstr(err, "format version 7 is not supported"));

        /* a segment renamed: its header names another sequence number */
        h[8] = WAL_FORMAT_VERSION;
        h[60] = (uint8_t) crc32c_ref(h, 60);
        h[61] = (uint8_t) (crc32c_ref(h, 60) >> 8);
        h[62] = (uint8_t) (crc32c_ref(h, 60) >> 16);
        h[63] = (uint8_t) (crc32c_ref(h, 60) >> 24);
        write_file(path, h, sizeof h, 0);
        wal_close(open_wal(SEG_SIZE)); /* repaired: opens again (the empty segment 1 replaced) */
        {
                char p9[PATH_MAX];

                ck_assert_int_eq(rename(path, seg_path(p9, sizeof p9, 9)), 0);
        }
        ck_assert_int_eq(wal_open(tmpdir, NULL, &w, err, sizeof err), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(err, "the header says segment 1, not 9"));
}
END_TEST

START_TEST (test_release) {
        uint64_t first, last, lsn;
        char path[PATH_MAX];
        WalStats st;
        Seen s = {};
        Wal *w;

        w = open_wal(SEG_SIZE);
        append_range(w, 0, 45, 5); /* segments 1-4 full, 5 current with 5 */
        ck_assert_uint_eq(wal_sealed(w, &first, &last), 4);
        ck_assert_uint_eq(first, 1);
        ck_assert_uint_eq(last, 4);
        ck_assert_int_eq(wal_sealed_last_lsn(w, 2, &lsn), 0);
        ck_assert_uint_eq(lsn, 20);
        ck_assert_int_eq(wal_sealed_last_lsn(w, 5, &lsn), -ENOENT);

        /* a checkpoint read segments 1-2 (from another thread: by path) and committed */
        for (uint64_t q = 1; q <= 2; q++) {
                char err[ERRBUF];

                ck_assert_int_eq(
                        wal_segment_read(tmpdir, q, 0, UINT64_MAX, collect, &s, NULL, err, sizeof err), 0);
        }
        ck_assert_uint_eq(s.n, 20);
        ck_assert_uint_eq(s.pos[19].lsn, 20);
        ck_assert_uint_eq(s.pos[19].seq, 2);
        seen_done(&s);
        ck_assert_int_eq(wal_release(w, 2), 2);
        ck_assert(!exists(seg_path(path, sizeof path, 1)));
        ck_assert(!exists(seg_path(path, sizeof path, 2)));
        ck_assert(exists(seg_path(path, sizeof path, 3)));
        ck_assert(exists(seg_path(path, sizeof path, 5)));
        ck_assert_int_eq(wal_release(w, 2), 0);       /* again: nothing */
        ck_assert_int_eq(wal_release(w, 5), -EINVAL); /* the current one */
        ck_assert(exists(seg_path(path, sizeof path, 5)));
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert_uint_eq(st.sealed, 2);
        ck_assert_uint_eq(st.segments, 3);
        ck_assert_uint_eq(st.records, 25);
        ck_assert_uint_eq(st.bytes, 3 * SEG_SIZE);
        wal_close(w);

        /* a restart replays what is left: lsn 21 on */
        w = open_wal(SEG_SIZE);
        ck_assert_int_eq(wal_replay(w, 0, collect, &s), 0);
        ck_assert_uint_eq(s.n, 25);
        ck_assert_uint_eq(s.pos[0].lsn, 21);
        ck_assert_uint_eq(s.pos[0].seq, 3);
        ck_assert_uint_eq(s.pos[24].lsn, 45);
        seen_done(&s);
        /* releasing everything sealed, then a restart: lsns go on */
        ck_assert_uint_eq(wal_sealed(w, &first, &last), 3); /* 3, 4, 5; 6 is current */
        ck_assert_uint_eq(last, 5);
        ck_assert_int_eq(wal_release(w, last), 3);
        append_range(w, 0, 1, 1);
        wal_close(w);
        w = open_wal(SEG_SIZE);
        ck_assert_int_eq(wal_replay(w, 0, collect, &s), 0);
        ck_assert_uint_eq(s.n, 1);
        ck_assert_uint_eq(s.pos[0].lsn, 46);
        seen_done(&s);
        wal_close(w);
}
END_TEST

START_TEST (test_lock) {
        char err[ERRBUF] = "";
        Wal *w, *w2 = NULL;

        w = open_wal(SEG_SIZE);
        ck_assert_int_eq(wal_open(tmpdir, NULL, &w2, err, sizeof err), -EBUSY);
        ck_assert_ptr_null(w2);
        ck_assert_ptr_nonnull(strstr(err, "in use by another process"));
        wal_close(w);
        w = open_wal(SEG_SIZE); /* released with the first */
        wal_close(w);
        ck_assert_ptr_null(wal_close(NULL));
}
END_TEST

static int allocate_calls, allocate_fail_from;

/* The allocation hook: ENOSPC from the allocate_fail_from-th call on (0: never). */
static int allocate_hook(int fd, off_t len) {
        allocate_calls++;
        if (allocate_fail_from > 0 && allocate_calls >= allocate_fail_from)
                return ENOSPC;
        return posix_fallocate(fd, 0, len);
}

START_TEST (test_enospc_hook) {
        WalOptions o = { .segment_size = SEG_SIZE, .allocate = allocate_hook };
        Seen seen = {};
        CounterRecord b[4];
        char err[ERRBUF] = "";
        char path[PATH_MAX];
        WalStats st;
        Wal *w = NULL;

        /* a full disk at start: the first segment cannot be made, and the journal opens
         * without it (issue #30: a restart on a full disk exited); appends fail meanwhile */
        allocate_calls = 0;
        allocate_fail_from = 1;
        ck_assert_int_eq(wal_open(tmpdir, &o, &w, err, sizeof err), 0);
        ck_assert_ptr_nonnull(strstr(wal_error(w), "cannot allocate"));
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert(!st.current_ready && !st.spare_ready);
        ck_assert_uint_eq(st.segments, 0);
        snprintf(path, sizeof path, "%s/wal-0000000000000001.divvyd.new", tmpdir);
        ck_assert(!exists(path));
        ck_assert(!exists(seg_path(path, sizeof path, 1)));
        b[0] = rec(0);
        ck_assert_int_eq(wal_append(w, b, 1), -ENOSPC);
        ck_assert_int_eq(wal_sync(w), 0);
        ck_assert_int_eq(wal_prepare(w), -ENOSPC);
        allocate_fail_from = 0; /* space again: the current segment, then the spare */
        ck_assert_int_eq(wal_prepare(w), 0);
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert(st.current_ready && st.spare_ready);
        ck_assert_uint_eq(st.current_seq, 1);
        append_range(w, 0, 3, 3);
        wal_close(w);

        /* ... with a journal to replay, then to release (a checkpoint on the full disk) */
        allocate_calls = 0;
        allocate_fail_from = 1;
        ck_assert_int_eq(wal_open(tmpdir, &o, &w, err, sizeof err), 0);
        ck_assert_int_eq(wal_replay(w, 0, collect, &seen), 0);
        ck_assert_uint_eq(seen.n, 3);
        ck_assert_uint_eq(seen.pos[2].lsn, 3);
        seen_done(&seen);
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert(!st.current_ready);
        ck_assert_uint_eq(wal_sealed(w, NULL, NULL), 1);
        ck_assert_int_eq(wal_release(w, 2), -EINVAL); /* not a segment yet */
        ck_assert_int_eq(wal_release(w, 1), 1);
        ck_assert(!exists(seg_path(path, sizeof path, 1)));
        allocate_fail_from = 0;
        b[0] = rec(3);
        ck_assert_int_eq(wal_append(w, b, 1), 0); /* makes segment 2, lsn 4 */
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert_uint_eq(st.current_seq, 2);
        ck_assert_uint_eq(st.next_lsn, 5);
        wal_close(w);
        ck_assert_int_eq(unlink(seg_path(path, sizeof path, 2)), 0);

        /* ... or only the spare: the current segment takes appends */
        allocate_calls = 0;
        allocate_fail_from = 2;
        ck_assert_int_eq(wal_open(tmpdir, &o, &w, err, sizeof err), 0);
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert(st.current_ready && !st.spare_ready);
        append_range(w, 0, 2, 2);
        wal_close(w);
        ck_assert_int_eq(unlink(seg_path(path, sizeof path, 1)), 0);

        /* the disk fills while running: the batch that needs a new segment fails whole */
        allocate_calls = 0;
        allocate_fail_from = 0;
        ck_assert_int_eq(wal_open(tmpdir, &o, &w, err, sizeof err), 0);
        append_range(w, 0, SEG_RECORDS, SEG_RECORDS); /* segment 1 full */
        append_range(w, SEG_RECORDS, 2, 2);           /* segment 2, the spare: no allocation */
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert_uint_eq(st.current_seq, 2);
        ck_assert(!st.spare_ready);
        allocate_fail_from = allocate_calls + 1;
        append_range(w, SEG_RECORDS + 2, 8, 8); /* 20: segment 2 full */
        for (int i = 0; i < 4; i++)
                b[i] = rec((uint64_t) (20 + i));
        ck_assert_int_eq(wal_append(w, b, 2), -ENOSPC);
        ck_assert_ptr_nonnull(strstr(wal_error(w), "No space left"));
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert_uint_eq(st.records, 20);
        ck_assert_uint_eq(st.next_lsn, 21);
        ck_assert_int_eq(wal_prepare(w), -ENOSPC);
        /* space again */
        allocate_fail_from = 0;
        ck_assert_int_eq(wal_prepare(w), 0);
        ck_assert_int_eq(wal_append(w, b, 2), 0);
        wal_close(w);
        wal_close(open_and_expect(SEG_SIZE, 1, 22));
}
END_TEST

/* A real full file system: a tmpfs of 64 KiB mounted for the test, when this process may
 * mount (root with CAP_SYS_ADMIN, as in CI's container); says so on stderr when it may not.
 * With CK_FORK=no the whole test program moves to the new mount namespace: harmless. */
START_TEST (test_enospc_tmpfs) {
        WalOptions o = { .segment_size = 40 * 1024 };
        char err[ERRBUF] = "";
        char mnt[PATH_MAX + 8];
        WalStats st;
        Wal *w = NULL;
        int r;

        snprintf(mnt, sizeof mnt, "%s/mnt", tmpdir);
        ck_assert_int_eq(mkdir(mnt, 0700), 0);
        /* in a mount namespace of this process's own, so a failing test leaves no mount behind */
        if (unshare(CLONE_NEWNS) < 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0 ||
            mount("tmpfs", mnt, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k") < 0) {
                fprintf(stderr,
                        "test_enospc_tmpfs: not run: cannot mount a tmpfs (%s); test_enospc_hook covers "
                        "it\n",
                        strerror(errno));
                return;
        }
        /* a current segment of 40 KiB fits, its spare does not: the journal opens without it */
        r = wal_open(mnt, &o, &w, err, sizeof err);
        ck_assert_int_eq(umount2(mnt, MNT_DETACH), 0);
        ck_assert_int_eq(r, 0);
        ck_assert_ptr_nonnull(strstr(wal_error(w), "cannot allocate 40960 bytes"));
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert(st.current_ready && !st.spare_ready);
        wal_close(w);
}
END_TEST

/* ---- write_appends (--sync=always): pwrite() instead of the mapping, blocks zero-filled ahead ---- */

#define WA_SEG_SIZE (3ULL << 20) /* bytes: several WAL_ZERO_CHUNKs, so the zero-filling moves along */
#define WA_BIG                                                                                              \
        ((WAL_ZERO_AHEAD + WAL_ZERO_CHUNK) / WAL_RECORD_SIZE + 1000) /* records: a batch past the lead */

static Wal *open_wal_in(const char *dir, uint64_t segment_size, bool write_appends) {
        WalOptions o = { .segment_size = segment_size, .write_appends = write_appends };
        char err[ERRBUF] = "";
        Wal *w = NULL;
        int r;

        r = wal_open(dir, &o, &w, err, sizeof err);
        ck_assert_msg(r == 0, "wal_open: %d %s", r, err);
        return w;
}

/* Appends records 0 .. n - 1 in batches of 1, 2, .. 64, 1, 2, ... records. */
static void append_varied(Wal *w, uint64_t n) {
        CounterRecord b[64];
        size_t k = 1;

        for (uint64_t i = 0; i < n; i += k, k = k % 64 + 1) {
                if (k > n - i)
                        k = (size_t) (n - i);
                for (size_t j = 0; j < k; j++)
                        b[j] = rec(i + j);
                ck_assert_msg(wal_append(w, b, k) == 0, "wal_append: %s", wal_error(w));
        }
}

static uint8_t *read_whole(const char *path, size_t *ret_size) {
        struct stat st;
        uint8_t *p;
        int fd = open(path, O_RDONLY);

        ck_assert_msg(fd >= 0, "%s: %s", path, strerror(errno));
        ck_assert_int_eq(fstat(fd, &st), 0);
        p = malloc((size_t) st.st_size + 1);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(pread(fd, p, (size_t) st.st_size, 0), st.st_size);
        close(fd);
        *ret_size = (size_t) st.st_size;
        return p;
}

/* The same appends, through the mapping in dir a and with write_appends in dir b, give the
 * same segments byte for byte after the header (whose creation time differs), over several
 * rotations and zero-filled chunks; the open segment reads back (the readers' mmap sees the
 * pwrite()s) and a reopened journal replays everything. A zero-fill that reached below the
 * end of the records would erase some. */
START_TEST (test_write_appends_same_bytes) {
        uint64_t n = 150000; /* ~7 MiB of records: 3 segments, the last one open */
        char a[PATH_MAX], b[PATH_MAX], pa[PATH_MAX + 64], pb[PATH_MAX + 64], name[WAL_SEGMENT_NAME_MAX];
        uint64_t seq;
        WalSegmentInfo info;
        Wal *wa, *wb;
        Seen seen = {};

        snprintf(a, sizeof a, "%s/a", tmpdir);
        snprintf(b, sizeof b, "%s/b", tmpdir);
        ck_assert_int_eq(mkdir(a, 0700), 0);
        ck_assert_int_eq(mkdir(b, 0700), 0);
        wa = open_wal_in(a, WA_SEG_SIZE, false);
        wb = open_wal_in(b, WA_SEG_SIZE, true);
        append_varied(wa, n);
        append_varied(wb, n);
        /* and one batch longer than the zero-filled lead: the filling resumes after it */
        CounterRecord *big = malloc(WA_BIG * sizeof *big);
        ck_assert_ptr_nonnull(big);
        for (size_t i = 0; i < WA_BIG; i++)
                big[i] = rec(n + i);
        ck_assert_int_eq(wal_append(wa, big, WA_BIG), 0);
        ck_assert_int_eq(wal_append(wb, big, WA_BIG), 0);
        free(big);
        n += WA_BIG;

        /* the open segment, read as the checkpoint thread reads a segment */
        wal_current(wb, NULL, &seq, NULL);
        ck_assert_uint_ge(seq, 3);
        ck_assert_int_eq(wal_segment_read(b, seq, 0, UINT64_MAX, NULL, NULL, &info, NULL, 0), 0);
        ck_assert_uint_gt(info.records, 0);
        ck_assert(!info.damaged_tail);
        ck_assert_uint_eq(info.first_lsn + info.records, n + 1);

        ck_assert_int_eq(wal_sync(wa), 0);
        ck_assert_int_eq(wal_sync(wb), 0);
        wal_close(wa);
        wal_close(wb);
        for (uint64_t q = 1; q <= seq; q++) {
                size_t na, nb;
                uint8_t *da, *db;

                snprintf(pa, sizeof pa, "%s/%s", a, wal_segment_name(q, name));
                snprintf(pb, sizeof pb, "%s/%s", b, wal_segment_name(q, name));
                da = read_whole(pa, &na);
                db = read_whole(pb, &nb);
                ck_assert_uint_eq(na, nb);
                ck_assert_msg(memcmp(da + WAL_HEADER_SIZE, db + WAL_HEADER_SIZE, na - WAL_HEADER_SIZE) == 0,
                              "segment %" PRIu64 " differs", q);
                free(da);
                free(db);
        }

        wb = open_wal_in(b, WA_SEG_SIZE, true);
        ck_assert_int_eq(wal_replay(wb, 0, collect, &seen), 0);
        ck_assert_uint_eq(seen.n, n);
        for (size_t i = 0; i < seen.n; i++) {
                CounterRecord e = rec(i);

                ck_assert_msg(rec_eq(&seen.r[i], &e), "record %zu differs", i);
                ck_assert_uint_eq(seen.pos[i].lsn, i + 1);
        }
        seen_done(&seen);
        wal_close(wb);
}
END_TEST

/* How many bytes of [from, to) of fd are in unwritten (preallocated, never written) extents,
 * or -1 if the file system does not say (no FIEMAP). */
static int64_t unwritten_bytes(int fd, uint64_t from, uint64_t to) {
        enum { N = 64 };
        struct {
                struct fiemap m;
                struct fiemap_extent e[N];
        } f;
        int64_t total = 0;

        memset(&f, 0, sizeof f);
        f.m.fm_start = from;
        f.m.fm_length = to - from;
        f.m.fm_flags = FIEMAP_FLAG_SYNC;
        f.m.fm_extent_count = N;
        if (ioctl(fd, FS_IOC_FIEMAP, &f.m) < 0)
                return -1;
        for (unsigned i = 0; i < f.m.fm_mapped_extents; i++) {
                const struct fiemap_extent *e = &f.e[i];
                uint64_t s = e->fe_logical > from ? e->fe_logical : from;
                uint64_t t = e->fe_logical + e->fe_length < to ? e->fe_logical + e->fe_length : to;

                if ((e->fe_flags & FIEMAP_EXTENT_UNWRITTEN) && t > s)
                        total += (int64_t) (t - s);
        }
        return total;
}

/* With write_appends the blocks from the end of the records to WAL_ZERO_AHEAD past it are
 * written (what makes a sync cheap), where the mapping leaves them preallocated only. Needs a
 * file system with unwritten extents (ext4, xfs); says so and passes without one. */
START_TEST (test_write_appends_zero_ahead) {
        const uint64_t n = 30000; /* ~1.4 MiB of records */
        uint64_t end = WAL_HEADER_SIZE + n * WAL_RECORD_SIZE;
        uint64_t from = (end + 4095) & ~4095ULL, to = end + WAL_ZERO_AHEAD - 4096;
        char a[PATH_MAX], b[PATH_MAX], p[PATH_MAX + 64], name[WAL_SEGMENT_NAME_MAX];
        int64_t ua, ub;
        Wal *wa, *wb;
        int fd;

        snprintf(a, sizeof a, "%s/a", tmpdir);
        snprintf(b, sizeof b, "%s/b", tmpdir);
        ck_assert_int_eq(mkdir(a, 0700), 0);
        ck_assert_int_eq(mkdir(b, 0700), 0);
        wa = open_wal_in(a, WA_SEG_SIZE, false);
        wb = open_wal_in(b, WA_SEG_SIZE, true);
        append_varied(wa, n);
        append_varied(wb, n);
        ck_assert_int_eq(wal_sync(wa), 0);
        ck_assert_int_eq(wal_sync(wb), 0);

        snprintf(p, sizeof p, "%s/%s", a, wal_segment_name(1, name));
        fd = open(p, O_RDONLY);
        ck_assert_int_ge(fd, 0);
        ua = unwritten_bytes(fd, from, to);
        close(fd);
        snprintf(p, sizeof p, "%s/%s", b, wal_segment_name(1, name));
        fd = open(p, O_RDONLY);
        ck_assert_int_ge(fd, 0);
        ub = unwritten_bytes(fd, from, to);
        /* and beyond the lead, the segment is left as it was made */
        int64_t beyond = unwritten_bytes(fd, end + WAL_ZERO_AHEAD + WAL_ZERO_CHUNK, WA_SEG_SIZE);
        close(fd);
        wal_close(wa);
        wal_close(wb);
        if (ua <= 0) {
                fprintf(stderr, "test_write_appends_zero_ahead: not run: %s has no unwritten extents\n",
                        tmpdir);
                return;
        }
        ck_assert_int_eq(ua, (int64_t) (to - from));
        ck_assert_int_eq(ub, 0);
        ck_assert_int_gt(beyond, 0);
}
END_TEST

/* The early write-outs (WalOptions.start_write): what each one asked the kernel to write. */
#define STARTS_MAX 4096
static struct { off_t off, len; } starts[STARTS_MAX];
static size_t n_starts;

static void start_write_hook(int fd, off_t off, off_t len) {
        (void) fd;
        ck_assert_uint_lt(n_starts, STARTS_MAX);
        starts[n_starts].off = off;
        starts[n_starts].len = len;
        n_starts++;
}

/* True if one of the write-outs since the from-th covers [off, off + len). */
static bool started_since(size_t from, uint64_t off, uint64_t len) {
        for (size_t i = from; i < n_starts; i++)
                if ((uint64_t) starts[i].off <= off &&
                    (uint64_t) starts[i].off + (uint64_t) starts[i].len >= off + len)
                        return true;
        return false;
}

/* With write_appends, every append starts writing its own bytes before it returns (so that
 * the sync that follows finds them written, and waits for the disk's cache flush alone), and
 * each chunk of zeros written ahead of the appends is started as it is written. */
START_TEST (test_write_appends_write_out) {
        WalOptions o = { .segment_size = WA_SEG_SIZE,
                         .write_appends = true,
                         .start_write = start_write_hook };
        char err[ERRBUF] = "";
        CounterRecord b[64];
        uint64_t count = 0;
        off_t page = (off_t) sysconf(_SC_PAGESIZE);
        Wal *w = NULL;

        ck_assert_int_eq(wal_open(tmpdir, &o, &w, err, sizeof err), 0);
        n_starts = 0;
        for (size_t k = 1; k <= 64; k++) {
                uint64_t off = WAL_HEADER_SIZE + count * WAL_RECORD_SIZE;
                size_t before = n_starts;

                for (size_t j = 0; j < k; j++)
                        b[j] = rec(count + j);
                ck_assert_int_eq(wal_append(w, b, k), 0);
                ck_assert_msg(started_since(before, off, k * WAL_RECORD_SIZE),
                              "the append of %zu records at %" PRIu64 " started no write-out of them", k,
                              off);
                /* whole pages: a range that ends inside one would leave its end unwritten */
                for (size_t i = before; i < n_starts; i++) {
                        ck_assert_int_eq(starts[i].off % page, 0);
                        ck_assert_int_eq(starts[i].len % page, 0);
                }
                count += k;
        }
        /* and the zeros written ahead of the appends, each chunk as it was written */
        uint64_t end = WAL_HEADER_SIZE + count * WAL_RECORD_SIZE;
        for (uint64_t z = (uint64_t) page; z + WAL_ZERO_CHUNK <= end + WAL_ZERO_AHEAD; z += WAL_ZERO_CHUNK)
                ck_assert_msg(started_since(0, z, WAL_ZERO_CHUNK),
                              "the zeros at %" PRIu64 " were not started", z);
        ck_assert_int_eq(wal_sync(w), 0);
        wal_close(w);
}
END_TEST

/* Without write_appends (the mapping: --sync=periodic and none), the appends start the disk
 * writing a whole WAL_WRITEBACK_CHUNK at a time, once it is full, so that sealing a segment has
 * little left to wait for. */
START_TEST (test_writeback_chunks) {
        const uint64_t seg = 2ULL * WAL_WRITEBACK_CHUNK + (1ULL << 20);
        WalOptions o = { .segment_size = seg, .start_write = start_write_hook };
        uint64_t per_chunk = WAL_WRITEBACK_CHUNK / WAL_RECORD_SIZE, count = 0;
        char err[ERRBUF] = "";
        CounterRecord b[1000];
        Wal *w = NULL;

        ck_assert_int_eq(wal_open(tmpdir, &o, &w, err, sizeof err), 0);
        n_starts = 0;
        /* up to just before the end of the first chunk: nothing started */
        while (WAL_HEADER_SIZE + (count + 1000) * WAL_RECORD_SIZE < WAL_WRITEBACK_CHUNK) {
                for (size_t j = 0; j < 1000; j++)
                        b[j] = rec(count + j);
                ck_assert_int_eq(wal_append(w, b, 1000), 0);
                count += 1000;
        }
        ck_assert_uint_eq(n_starts, 0);
        /* past two chunks: both started, each whole and aligned, and nothing of the third */
        while (count < 2 * per_chunk + 10) {
                for (size_t j = 0; j < 1000; j++)
                        b[j] = rec(count + j);
                ck_assert_int_eq(wal_append(w, b, 1000), 0);
                count += 1000;
        }
        ck_assert_msg(started_since(0, 0, WAL_WRITEBACK_CHUNK), "the first chunk was not started");
        ck_assert_msg(started_since(0, WAL_WRITEBACK_CHUNK, WAL_WRITEBACK_CHUNK),
                      "the second chunk was not started");
        for (size_t i = 0; i < n_starts; i++) {
                ck_assert_int_eq(starts[i].off % WAL_WRITEBACK_CHUNK, 0);
                ck_assert_int_eq(starts[i].len % WAL_WRITEBACK_CHUNK, 0);
                ck_assert_int_le(starts[i].off + starts[i].len, 2 * WAL_WRITEBACK_CHUNK);
        }
        ck_assert_int_eq(wal_sync(w), 0);
        wal_close(w);
}
END_TEST

/* write_appends: an append whose pwrite() fails (here EFBIG past RLIMIT_FSIZE, after a short
 * write of its first records) returns the error, appends nothing, and leaves none of its
 * records readable: a reopened journal replays only the records appended before it. */
START_TEST (test_write_appends_failed_write) {
        const uint64_t limit = 1 << 20, before = (limit - WAL_HEADER_SIZE) / WAL_RECORD_SIZE - 30;
        CounterRecord b[64];
        struct rlimit old, lim;
        void (*old_handler)(int);
        WalStats st;
        Wal *w;
        int r;

        w = open_wal_in(tmpdir, WA_SEG_SIZE, true);
        append_range(w, 0, before, 64);
        for (size_t j = 0; j < 64; j++)
                b[j] = rec(before + j);
        /* the batch's first 30 records fit under the limit, the rest do not */
        ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
        old_handler = signal(SIGXFSZ, SIG_IGN);
        lim = (struct rlimit){ .rlim_cur = limit, .rlim_max = old.rlim_max };
        ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
        r = wal_append(w, b, 64);
        ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
        signal(SIGXFSZ, old_handler);
        ck_assert_int_eq(r, -EFBIG);
        ck_assert_ptr_nonnull(strstr(wal_error(w), "cannot write"));
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert_uint_eq(st.appended, before);
        ck_assert_uint_eq(st.next_lsn, before + 1);
        wal_close(w); /* like a crash: nothing else appended after the failure */

        w = open_and_expect(WA_SEG_SIZE, 1, before);
        wal_close(w);
}
END_TEST

#define KILL_RECORDS 5000 /* records the killed child appends: dozens of 10-record segments */

START_TEST (test_kill9) {
        int status;
        pid_t pid;

        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                WalOptions o = { .segment_size = WAL_HEADER_SIZE + 100 * WAL_RECORD_SIZE };
                CounterRecord b[50];
                Wal *w = NULL;

                if (wal_open(tmpdir, &o, &w, NULL, 0) < 0)
                        _exit(2);
                for (uint64_t i = 0; i < KILL_RECORDS; i += 50) {
                        for (uint64_t j = 0; j < 50; j++)
                                b[j] = rec(i + j);
                        if (wal_append(w, b, 50) < 0)
                                _exit(3);
                }
                raise(SIGKILL); /* no wal_sync(), no wal_close() */
                _exit(4);
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child status %d", status);
        wal_close(open_and_expect(WAL_HEADER_SIZE + 100 * WAL_RECORD_SIZE, 1, KILL_RECORDS));
}
END_TEST

START_TEST (test_sync_and_limits) {
        CounterRecord big[SEG_RECORDS + 1];
        WalStats st;
        Wal *w;

        w = open_wal(SEG_SIZE);
        ck_assert_int_eq(wal_sync(w), 0); /* the new segment's name */
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert_uint_eq(st.syncs, 1);
        ck_assert_int_eq(wal_sync(w), 0); /* nothing to do */
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert_uint_eq(st.syncs, 1);
        append_range(w, 0, 3, 3);
        ck_assert_int_eq(wal_sync(w), 0);
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert_uint_eq(st.syncs, 2);

        /* more records than a segment holds: a larger segment of their own, all of them */
        for (size_t i = 0; i < SEG_RECORDS + 1; i++)
                big[i] = rec(3 + i);
        ck_assert_int_eq(wal_append(w, big, SEG_RECORDS + 1), 0);
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert_uint_eq(st.records, 3 + SEG_RECORDS + 1);
        wal_close(w);
        wal_close(open_and_expect(SEG_SIZE, 1, 3 + SEG_RECORDS + 1));
}
END_TEST

START_TEST (test_first_lsn_and_leftovers) {
        WalOptions o = { .segment_size = SEG_SIZE, .first_lsn = 1000 };
        char err[ERRBUF] = "";
        char path[PATH_MAX];
        WalSegmentInfo info;
        Wal *w = NULL;

        /* an empty directory starts at the checkpoint's lsn; a stale spare is removed */
        snprintf(path, sizeof path, "%s/wal-00000000000000aa.divvyd.new", tmpdir);
        write_file(path, "x", 1, 0);
        ck_assert_int_eq(wal_open(tmpdir, &o, &w, err, sizeof err), 0);
        ck_assert(!exists(path));
        append_range(w, 0, 4, 4);
        wal_close(w);
        ck_assert_int_eq(wal_segment_read(tmpdir, 1, 0, UINT64_MAX, NULL, NULL, &info, err, sizeof err), 0);
        ck_assert_uint_eq(info.first_lsn, 1000);
        ck_assert_uint_eq(info.records, 4);
        ck_assert_uint_eq(info.capacity, SEG_RECORDS);
        ck_assert(!info.damaged_tail);
        ck_assert_int_eq(wal_segment_read(tmpdir, 9, 0, UINT64_MAX, NULL, NULL, &info, err, sizeof err),
                         -ENOENT);
        wal_close(open_and_expect(SEG_SIZE, 1000, 4)); /* first_lsn only counts for an empty one */
}
END_TEST

/* The checkpoint's way: a thread reads each sealed segment by directory and number while
 * the owner keeps appending and rotating, and the owner releases what the reader is done
 * with. The reader sees every record once, in order. */
#define CONCURRENT_RECORDS 3000

typedef struct Checkpointer {
        _Atomic uint64_t handed;  /* the last sealed segment the owner handed over */
        _Atomic uint64_t read_to; /* the last segment the reader has read */
        _Atomic bool done;        /* the owner handed everything */
        uint64_t next_lsn;        /* the lsn the reader expects next */
        int error;
} Checkpointer;

static int checkpoint_record(const CounterRecord *r, const WalPosition *pos, void *userdata) {
        Checkpointer *c = userdata;
        CounterRecord e = rec(pos->lsn - 1);

        if (pos->lsn != c->next_lsn || !rec_eq(r, &e))
                return -EBADMSG;
        c->next_lsn++;
        return 0;
}

static void *checkpoint_thread(void *userdata) {
        Checkpointer *c = userdata;
        char err[ERRBUF];

        for (;;) {
                bool done = atomic_load(&c->done); /* before handed: nothing handed is missed */
                uint64_t handed = atomic_load(&c->handed), seq = atomic_load(&c->read_to);

                for (; seq < handed; seq++) {
                        c->error = wal_segment_read(tmpdir, seq + 1, 0, UINT64_MAX, checkpoint_record, c,
                                                    NULL, err, sizeof err);
                        if (c->error < 0)
                                return NULL;
                        atomic_store(&c->read_to, seq + 1);
                }
                if (done)
                        return NULL;
                sched_yield();
        }
}

START_TEST (test_concurrent_checkpoint) {
        Checkpointer c = { .next_lsn = 1 };
        uint64_t last;
        pthread_t t;
        WalStats st;
        Wal *w;

        w = open_wal(SEG_SIZE);
        ck_assert_int_eq(pthread_create(&t, NULL, checkpoint_thread, &c), 0);
        for (uint64_t i = 0; i < CONCURRENT_RECORDS; i += 6) {
                append_range(w, i, 6, 6);
                if (wal_sealed(w, NULL, &last) > 0)
                        atomic_store(&c.handed, last);
                if (atomic_load(&c.read_to) > 0 && wal_sealed(w, NULL, NULL) > 0)
                        ck_assert_int_ge(wal_release(w, atomic_load(&c.read_to)), 0);
        }
        ck_assert_int_eq(wal_rotate(w), 1);
        ck_assert_uint_gt(wal_sealed(w, NULL, &last), 0);
        atomic_store(&c.handed, last);
        atomic_store(&c.done, true);
        ck_assert_int_eq(pthread_join(t, NULL), 0);
        ck_assert_int_eq(c.error, 0);
        ck_assert_uint_eq(c.next_lsn, CONCURRENT_RECORDS + 1);
        ck_assert_int_ge(wal_release(w, last), 1);
        ck_assert_int_eq(wal_get_stats(w, &st), 0);
        ck_assert_uint_eq(st.segments, 1);
        ck_assert_uint_eq(st.records, 0);
        wal_close(w);
}
END_TEST

static Suite *wal_suite(void) {
        Suite *s = suite_create("wal");
        TCase *tc = tcase_create("wal");

        store_test_fixtures(tc, "check-wal", make_tmpdir);
        tcase_add_test(tc, test_layout);
        tcase_add_test(tc, test_round_trip);
        tcase_add_test(tc, test_rotations);
        tcase_add_test(tc, test_torn_tail);
        tcase_add_test(tc, test_torn_tail_truncated);
        tcase_add_test(tc, test_sealed_corruption);
        tcase_add_test(tc, test_damage_bit_flip);
        tcase_add_test(tc, test_damage_appends_after);
        tcase_add_test(tc, test_damage_unwritten);
        tcase_add_test(tc, test_damage_misplaced_record);
        tcase_add_test(tc, test_damage_fields_and_segments);
        tcase_add_test(tc, test_foreign);
        tcase_add_test(tc, test_release);
        tcase_add_test(tc, test_lock);
        tcase_add_test(tc, test_enospc_hook);
        tcase_add_test(tc, test_enospc_tmpfs);
        tcase_add_test(tc, test_kill9);
        tcase_add_test(tc, test_sync_and_limits);
        tcase_add_test(tc, test_first_lsn_and_leftovers);
        tcase_add_test(tc, test_concurrent_checkpoint);
        tcase_add_test(tc, test_write_appends_same_bytes);
        tcase_add_test(tc, test_write_appends_zero_ahead);
        tcase_add_test(tc, test_write_appends_failed_write);
        tcase_add_test(tc, test_write_appends_write_out);
        tcase_add_test(tc, test_writeback_chunks);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        return check_run_suite(wal_suite());
}
