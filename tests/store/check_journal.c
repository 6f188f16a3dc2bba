/* SPDX-License-Identifier: MIT */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/journal.h"
#include "check-run.h"

#define SIZE   4096 /* bytes: a small journal */
#define ERRBUF 512
/* journal_check() of test_record_layout's record and of nothing, as journal.c has always
 * computed them: a change here is a change of the on-disk journal format */
#define JOURNAL_CHECK_PINNED       0x07b3ae69u
#define JOURNAL_CHECK_EMPTY_PINNED 0x0fb13233u

static char tmpdir[PATH_MAX / 2], jpath[PATH_MAX];

static void setup(void) {
        const char *base = getenv("top_builddir");

        snprintf(tmpdir, sizeof tmpdir, "%s/check-journal-XXXXXX", base && *base ? base : "/tmp");
        ck_assert_msg(mkdtemp(tmpdir), "mkdtemp %s: %s", tmpdir, strerror(errno));
        snprintf(jpath, sizeof jpath, "%s/journal", tmpdir);
}

static void teardown(void) {
        (void) unlink(jpath);
        (void) rmdir(tmpdir);
}

static Journal open_new(size_t size) {
        char err[ERRBUF] = "";
        Journal j;

        ck_assert_msg(journal_open(&j, jpath, size, err, sizeof err) == 0, "%s", err);
        ck_assert_int_ge(j.fd, 0);
        ck_assert_ptr_nonnull(j.map);
        return j;
}

/* Appends the record "key<i>" -> (1000 + i, i). */
static void add(Journal *j, unsigned i) {
        char key[32];
        int n = snprintf(key, sizeof key, "key%u", i);

        ck_assert_int_eq(journal_add(j, (const uint8_t *) key, (size_t) n, 1000 + i, i), 0);
}

/* Reads the first len bytes; checks they hold key<first>.. in order; returns how many. */
static unsigned read_all(const Journal *j, size_t len, unsigned first) {
        JournalCursor c;
        JournalRecord rec;
        unsigned n = 0;

        journal_cursor_init(&c, j, len);
        while (journal_cursor_next(&c, &rec)) {
                char key[32];
                int kl = snprintf(key, sizeof key, "key%u", first + n);

                ck_assert_uint_eq(rec.key_len, (size_t) kl);
                ck_assert_int_eq(memcmp(rec.key, key, rec.key_len), 0);
                ck_assert_uint_eq(rec.expiry, 1000 + first + n);
                ck_assert_uint_eq(rec.credit, first + n);
                n++;
        }
        return n;
}

START_TEST (test_open_create_and_missing) {
        char err[ERRBUF] = "";
        struct stat st;
        Journal j;

        /* without create_size a missing journal is no journal, and no error */
        ck_assert_int_eq(journal_open(&j, jpath, 0, err, sizeof err), 0);
        ck_assert_int_lt(j.fd, 0);
        ck_assert_ptr_null(j.map);
        ck_assert_int_eq(journal_add(&j, (const uint8_t *) "k", 1, 1, 1), -ENOBUFS);
        ck_assert_uint_eq(read_all(&j, SIZE, 0), 0);
        ck_assert_int_eq(journal_sync_head(&j), 0);
        journal_close(&j, true);
        ck_assert_int_eq(access(jpath, F_OK), -1);

        /* created and preallocated */
        j = open_new(SIZE);
        ck_assert_int_eq(stat(jpath, &st), 0);
        ck_assert_int_eq(st.st_size, SIZE);
        ck_assert_uint_eq(j.len, SIZE);
        ck_assert_uint_eq(read_all(&j, j.len, 0), 0); /* all zero: an end mark at 0 */
        journal_close(&j, false);
        ck_assert_int_eq(j.fd, -EBADF);
        ck_assert_ptr_null(j.path);
        journal_close(&j, false); /* closing twice is fine */
        ck_assert_int_eq(access(jpath, F_OK), 0);
}
END_TEST

START_TEST (test_locked) {
        char err[ERRBUF] = "";
        Journal j = open_new(SIZE), k;

        /* flock: a second open file description is refused, even in this process */
        ck_assert_int_eq(journal_open(&k, jpath, SIZE, err, sizeof err), -EBUSY);
        ck_assert_msg(strstr(err, "in use by another process"), "%s", err);
        ck_assert_ptr_null(k.path);
        journal_close(&j, false);
        ck_assert_int_eq(journal_open(&k, jpath, 0, err, sizeof err), 0);
        journal_close(&k, true);
        ck_assert_int_eq(access(jpath, F_OK), -1);
}
END_TEST

START_TEST (test_records_replay_in_order) {
        Journal j = open_new(SIZE);
        size_t end;

        for (unsigned i = 0; i < 10; i++)
                add(&j, i);
        end = j.pos;
        ck_assert_uint_eq(end, 10 * JOURNAL_RECORD_FIXED + 4 * 10);
        journal_truncate(&j, j.pos);
        ck_assert_uint_eq(read_all(&j, j.len, 0), 10);
        ck_assert_uint_eq(read_all(&j, end - 1, 0), 9); /* a cut-off record is not read */

        /* the process dies; the next one maps the same file and reads them back */
        journal_close(&j, false);
        j = open_new(SIZE);
        ck_assert_uint_eq(read_all(&j, j.len, 0), 10);
        journal_close(&j, false);
}
END_TEST

START_TEST (test_truncate_forgets) {
        Journal j = open_new(SIZE);
        size_t mark;

        add(&j, 0);
        add(&j, 1);
        mark = j.pos;
        add(&j, 2);
        journal_truncate(&j, mark); /* the batch that failed */
        ck_assert_uint_eq(j.pos, mark);
        ck_assert_uint_eq(read_all(&j, j.len, 0), 2);
        add(&j, 2);
        add(&j, 3);
        journal_truncate(&j, j.pos);
        ck_assert_uint_eq(read_all(&j, j.len, 0), 4);
        journal_close(&j, false);
}
END_TEST

START_TEST (test_reset_generation) {
        Journal j = open_new(SIZE);
        uint64_t gen = j.gen;

        for (unsigned i = 0; i < 5; i++)
                add(&j, i);
        journal_truncate(&j, j.pos);
        journal_reset(&j); /* a commit made them redundant */
        ck_assert_uint_eq(j.gen, gen + 1);
        ck_assert_uint_eq(j.pos, 0);
        ck_assert_uint_eq(read_all(&j, j.len, 0), 0);

        /* the new generation overwrites the end mark; the older records behind it are not
         * taken for its own, even with no end mark written after the new one */
        add(&j, 7);
        ck_assert_uint_eq(read_all(&j, j.len, 7), 1);
        journal_close(&j, false);
}
END_TEST

START_TEST (test_torn_record) {
        Journal j = open_new(SIZE);
        size_t second;

        add(&j, 0);
        second = j.pos;
        add(&j, 1);
        add(&j, 2);
        journal_truncate(&j, j.pos);
        j.map[second + 2 + 1] ^= 0x40; /* a byte of the second record's key */
        ck_assert_uint_eq(read_all(&j, j.len, 0), 1);
        j.map[second + 2 + 1] ^= 0x40;
        j.map[second + JOURNAL_RECORD_FIXED + 4 - 1] ^= 0x01; /* its check */
        ck_assert_uint_eq(read_all(&j, j.len, 0), 1);
        j.map[second + JOURNAL_RECORD_FIXED + 4 - 1] ^= 0x01;
        ck_assert_uint_eq(read_all(&j, j.len, 0), 3);
        journal_close(&j, false);
}
END_TEST

START_TEST (test_full) {
        Journal j = open_new(SIZE);
        unsigned n = 0;
        char key[32];

        /* room is kept for the end mark behind the last record */
        for (;; n++) {
                int kl = snprintf(key, sizeof key, "key%u", n);
                int r = journal_add(&j, (const uint8_t *) key, (size_t) kl, 1000 + n, n);
                if (r < 0) {
                        ck_assert_int_eq(r, -ENOBUFS);
                        break;
                }
        }
        ck_assert_uint_gt(n, 50);
        ck_assert_uint_le(j.pos + 2, j.len);
        journal_truncate(&j, j.pos);
        ck_assert_uint_eq(read_all(&j, j.len, 0), n);
        journal_reset(&j);
        add(&j, 0); /* room again */
        ck_assert_int_eq(journal_sync_head(&j), 0);
        journal_close(&j, false);
}
END_TEST

/* The record layout and checksum are on disk (a journal outlives a crash and an upgrade):
 * pinned byte for byte. */
START_TEST (test_record_layout) {
        static const uint8_t expect[JOURNAL_RECORD_FIXED + 3] = {
                0x03, 0x00,                                     /* key length */
                'a',  'b',  'c',                                /* key */
                0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* expiry */
                0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* credit */
                0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* generation */
        };
        Journal j = open_new(SIZE);
        uint32_t check;

        j.gen = 0x11;
        ck_assert_int_eq(journal_add(&j, (const uint8_t *) "abc", 3, 0x0102030405060708ULL, 42), 0);
        ck_assert_int_eq(memcmp(j.map, expect, JOURNAL_RECORD_FIXED + 3 - 4), 0);
        memcpy(&check, j.map + JOURNAL_RECORD_FIXED + 3 - 4, sizeof check);
        ck_assert_uint_eq(le32toh(check), journal_check(expect, JOURNAL_RECORD_FIXED + 3 - 4));
        ck_assert_uint_eq(journal_check(expect, JOURNAL_RECORD_FIXED + 3 - 4), JOURNAL_CHECK_PINNED);
        ck_assert_uint_eq(journal_check((const uint8_t *) "", 0), JOURNAL_CHECK_EMPTY_PINNED);
        journal_close(&j, false);
}
END_TEST

static Suite *journal_suite(void) {
        Suite *su = suite_create("journal");
        TCase *tc = tcase_create("core");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_open_create_and_missing);
        tcase_add_test(tc, test_locked);
        tcase_add_test(tc, test_records_replay_in_order);
        tcase_add_test(tc, test_truncate_forgets);
        tcase_add_test(tc, test_reset_generation);
        tcase_add_test(tc, test_torn_record);
        tcase_add_test(tc, test_full);
        tcase_add_test(tc, test_record_layout);
        suite_add_tcase(su, tc);
        return su;
}

int main(void) {
        return check_run_suite(journal_suite());
}
