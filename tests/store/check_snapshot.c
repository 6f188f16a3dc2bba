/* SPDX-License-Identifier: MIT */

/* snapshot.c: the counters.snap format, written by the writer and read back whole, and every
 * kind of damage refused with its sentence. */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/snapshot.h"
#include "check-run.h"
#include "store-test-util.h"

#define N      100000 /* records: several of the writer's and the reader's buffers */
#define ERRBUF 512

static void make_tmpdir(void) {
        store_test_make_tmpdir("check-snapshot");
}

static CounterRecord record(uint64_t i) {
        return (CounterRecord){ .id = { .lo = i * 0x9e3779b97f4a7c15ULL, .hi = ~i },
                                .algorithm = (uint8_t) (i % 3),
                                .state = { .w0 = 1000 + i, .w1 = i * 3 } };
}

typedef struct Got {
        uint64_t n, bad;
} Got;

static int got(const CounterRecord *r, void *userdata) {
        Got *g = userdata;
        uint64_t i = r->state.w0 - 1000;
        CounterRecord want = record(i);

        g->bad += r->id.lo != want.id.lo || r->id.hi != want.id.hi || r->algorithm != want.algorithm ||
                  r->state.w1 != want.state.w1;
        g->n++;
        return 0;
}

static void write_snapshot(uint64_t n) {
        char err[ERRBUF] = "";
        SnapshotWriter *w = NULL;
        CounterRecord r[100];

        ck_assert_int_eq(snapshot_writer_new(tmpdir, 42, 7, n, 0, NULL, &w, err, sizeof err), 0);
        for (uint64_t i = 0; i < n; i += 100) {
                size_t k = n - i < 100 ? (size_t) (n - i) : 100;

                for (size_t j = 0; j < k; j++)
                        r[j] = record(i + j);
                ck_assert_int_eq(snapshot_writer_add(w, r, k, err, sizeof err), 0);
        }
        ck_assert_msg(snapshot_writer_commit(w, err, sizeof err) == 0, "%s", err);
}

static char *snap_path(char *buf, size_t size) {
        snprintf(buf, size, "%s/" SNAPSHOT_NAME, tmpdir);
        return buf;
}

/* Written, renamed into place (no temporary file left), read back whole: every record, the
 * header's fields, records at or before now skipped. */
START_TEST (test_roundtrip) {
        char path[PATH_MAX], err[ERRBUF] = "";
        SnapshotInfo info;
        struct stat st;
        Got g = { 0 };

        write_snapshot(N);
        ck_assert_int_eq(stat(snap_path(path, sizeof path), &st), 0);
        ck_assert_int_eq(st.st_size,
                         SNAPSHOT_HEADER_SIZE + N * SNAPSHOT_RECORD_SIZE + SNAPSHOT_TRAILER_SIZE);
        ck_assert_uint_eq(st.st_mode & 0777, 0600);
        snprintf(path, sizeof path, "%s/" SNAPSHOT_TMP_NAME, tmpdir);
        ck_assert_int_eq(stat(path, &st), -1);
        ck_assert_int_eq(snapshot_read_info(tmpdir, &info, err, sizeof err), 0);
        ck_assert_uint_eq(info.lsn, 42);
        ck_assert_uint_eq(info.count, N);
        ck_assert_uint_eq(info.at_usec, 7);
        ck_assert_int_eq(snapshot_load(tmpdir, 0, got, &g, &info, err, sizeof err), 0);
        ck_assert_uint_eq(g.n, N);
        ck_assert_uint_eq(g.bad, 0);
        g = (Got){ 0 };
        ck_assert_int_eq(snapshot_load(tmpdir, 1000 + N / 2 - 1, got, &g, NULL, err, sizeof err), 0);
        ck_assert_uint_eq(g.n, N / 2); /* w0 <= now: expired */

        g = (Got){ 0 };
        write_snapshot(0);
        ck_assert_int_eq(snapshot_load(tmpdir, 0, got, &g, &info, err, sizeof err), 0);
        ck_assert_uint_eq(g.n, 0);
        ck_assert_int_eq(snapshot_read_info(tmpdir, &info, err, sizeof err), 0);
        ck_assert_uint_eq(info.count, 0);
}
END_TEST

/* The parser gives the same records fed one byte at a time as fed whole. */
START_TEST (test_parse_bytewise) {
        char path[PATH_MAX], err[ERRBUF] = "";
        static uint8_t buf[SNAPSHOT_HEADER_SIZE + 1000 * SNAPSHOT_RECORD_SIZE + SNAPSHOT_TRAILER_SIZE];
        SnapshotParser p;
        Got g = { 0 };
        int fd;

        write_snapshot(1000);
        fd = open(snap_path(path, sizeof path), O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(read(fd, buf, sizeof buf), (ssize_t) sizeof buf);
        close(fd);
        snapshot_parser_init(&p, 0, got, &g);
        for (size_t i = 0; i < sizeof buf; i++)
                ck_assert_int_eq(snapshot_parser_feed(&p, buf + i, 1, err, sizeof err), 0);
        ck_assert_int_eq(snapshot_parser_finish(&p, err, sizeof err), 0);
        ck_assert_uint_eq(g.n, 1000);
        ck_assert_uint_eq(g.bad, 0);
        ck_assert_int_eq(snapshot_parser_feed(&p, buf, 1, err, sizeof err), -EBADMSG);
        ck_assert_str_eq(err, "bytes follow its end");
}
END_TEST

/* Damage at each place of the file: refused with its sentence, naming the file. */
START_TEST (test_damage_refused) {
        static const struct {
                off_t at; /* byte flipped; -1: cut the file there instead (-at - 1 bytes kept) */
                int error;
                const char *sentence;
        } cases[] = {
                { 3, -EBADMSG, "not a divvyd snapshot (bad magic)" },
                { 30, -EBADMSG, "its header is damaged (bad checksum)" },
                { SNAPSHOT_HEADER_SIZE + 5 * SNAPSHOT_RECORD_SIZE + 3, -EBADMSG,
                  "its records are damaged (bad checksum)" },
                { SNAPSHOT_HEADER_SIZE + 100 * SNAPSHOT_RECORD_SIZE + 1, -EBADMSG,
                  "its records are damaged (bad checksum)" },
                { -(SNAPSHOT_HEADER_SIZE + 50 * SNAPSHOT_RECORD_SIZE) - 1, -EBADMSG,
                  "it is cut short (in its records)" },
                { -(SNAPSHOT_HEADER_SIZE / 2) - 1, -EBADMSG, "it is cut short (in its header)" },
        };
        char path[PATH_MAX], err[ERRBUF];
        Got g = { 0 };

        snap_path(path, sizeof path);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                write_snapshot(100);
                if (cases[i].at >= 0) {
                        int fd = open(path, O_RDWR | O_CLOEXEC);
                        uint8_t b;

                        ck_assert_int_ge(fd, 0);
                        ck_assert_int_eq(pread(fd, &b, 1, cases[i].at), 1);
                        b ^= 0x01;
                        ck_assert_int_eq(pwrite(fd, &b, 1, cases[i].at), 1);
                        close(fd);
                } else
                        ck_assert_int_eq(truncate(path, -cases[i].at - 1), 0);
                err[0] = 0;
                ck_assert_int_eq(snapshot_load(tmpdir, 0, got, &g, NULL, err, sizeof err), cases[i].error);
                ck_assert_msg(strstr(err, cases[i].sentence) && strstr(err, "/" SNAPSHOT_NAME ": "),
                              "%zu: %s", i, err);
        }
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(snapshot_load(tmpdir, 0, got, &g, NULL, err, sizeof err), -ENOENT);
}
END_TEST

/* An abandoned writer leaves nothing, and the snapshot in place stays as it was. */
START_TEST (test_abort_keeps_previous) {
        char path[PATH_MAX], err[ERRBUF] = "";
        SnapshotWriter *w = NULL;
        CounterRecord r = record(5);
        SnapshotInfo info;
        struct stat st;

        write_snapshot(10);
        ck_assert_int_eq(snapshot_writer_new(tmpdir, 99, 0, 1, 0, NULL, &w, err, sizeof err), 0);
        ck_assert_int_eq(snapshot_writer_add(w, &r, 1, err, sizeof err), 0);
        snapshot_writer_abort(w);
        snprintf(path, sizeof path, "%s/" SNAPSHOT_TMP_NAME, tmpdir);
        ck_assert_int_eq(stat(path, &st), -1);
        ck_assert_int_eq(snapshot_read_info(tmpdir, &info, err, sizeof err), 0);
        ck_assert_uint_eq(info.lsn, 42);
        ck_assert_uint_eq(info.count, 10);
}
END_TEST

static Suite *snapshot_suite(void) {
        Suite *s = suite_create("snapshot");
        TCase *tc = tcase_create("core");

        store_test_fixtures(tc, "check-snapshot", make_tmpdir);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_roundtrip);
        tcase_add_test(tc, test_parse_bytewise);
        tcase_add_test(tc, test_damage_refused);
        tcase_add_test(tc, test_abort_keeps_previous);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        return check_run_suite(snapshot_suite());
}
