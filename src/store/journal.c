/* SPDX-License-Identifier: MIT */
/*
 * journal.c: see journal.h. Files, mappings, records and checksums; no LMDB.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "journal.h"
#include "store-error.h"

#define JOURNAL_FILE_MODE 0640

static uint64_t get_le64(const uint8_t *p) {
        uint64_t v;

        memcpy(&v, p, sizeof v);
        return le64toh(v);
}

/* Opens, locks, preallocates and maps; *j holds what it got so far (journal_close() frees it). */
static int journal_open_file(Journal *j, size_t create_size, char *errbuf, size_t errbuf_size) {
        struct stat st;
        int r;

        j->fd = open(j->path, O_RDWR | O_CLOEXEC | (create_size > 0 ? O_CREAT : 0), JOURNAL_FILE_MODE);
        if (j->fd < 0) {
                r = -errno;
                j->fd = -EBADF;
                if (r == -ENOENT && create_size == 0)
                        return 0;
                return store_error(errbuf, errbuf_size, r, "cannot open %s: %s", j->path, strerror(-r));
        }
        if (flock(j->fd, LOCK_EX | LOCK_NB) < 0) {
                r = errno == EWOULDBLOCK ? -EBUSY : -errno;
                return store_error(errbuf, errbuf_size, r, "cannot lock %s: %s", j->path,
                                   r == -EBUSY ? "the store is in use by another process" : strerror(-r));
        }
        if (create_size > 0) {
                r = posix_fallocate(j->fd, 0, (off_t) create_size);
                if (r != 0)
                        return store_error(errbuf, errbuf_size, -r, "cannot allocate %zu bytes for %s: %s",
                                           create_size, j->path, strerror(r));
        }
        if (fstat(j->fd, &st) < 0)
                return store_error(errbuf, errbuf_size, -errno, "cannot stat %s: %m", j->path);
        if (st.st_size > 0) {
                void *m = mmap(NULL, (size_t) st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, j->fd, 0);
                if (m == MAP_FAILED)
                        return store_error(errbuf, errbuf_size, -errno, "cannot map %s: %m", j->path);
                j->map = m;
                j->len = (size_t) st.st_size;
        }
        return 0;
}

int journal_open(Journal *j, const char *path, size_t create_size, char *errbuf, size_t errbuf_size) {
        struct timespec ts;
        int r;

        *j = JOURNAL_NULL;
        j->path = strdup(path);
        if (!j->path)
                return -ENOMEM;
        r = journal_open_file(j, create_size, errbuf, errbuf_size);
        if (r < 0) {
                journal_close(j, false);
                return r;
        }
        /* a generation no earlier run used: replay never mistakes their records for ours */
        clock_gettime(CLOCK_REALTIME, &ts);
        j->gen = (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
        return 0;
}

void journal_close(Journal *j, bool remove) {
        if (remove && j->fd >= 0)
                (void) unlink(j->path);
        if (j->map)
                munmap(j->map, j->len);
        if (j->fd >= 0)
                close(j->fd);
        free(j->path);
        *j = JOURNAL_NULL;
}

void journal_truncate(Journal *j, size_t pos) {
        j->pos = pos;
        if (j->map && j->len - pos >= 2)
                j->map[pos] = j->map[pos + 1] = 0;
}

void journal_reset(Journal *j) {
        if (!j->map)
                return;
        j->gen++;
        journal_truncate(j, 0);
}

int journal_sync_head(Journal *j) {
        if (!j->map)
                return 0;
        return msync(j->map, 2, MS_SYNC) < 0 ? -errno : 0;
}

void journal_cursor_init(JournalCursor *c, const Journal *j, size_t len) {
        *c = (JournalCursor){ .j = j, .len = j->map ? (len < j->len ? len : j->len) : 0 };
}

bool journal_cursor_next(JournalCursor *c, JournalRecord *ret) {
        const uint8_t *p;
        size_t klen;
        uint64_t gen;
        uint32_t check;

        if (c->len - c->pos < JOURNAL_RECORD_FIXED)
                return false;
        p = c->j->map + c->pos;
        klen = (size_t) p[0] | (size_t) p[1] << 8;
        if (klen == 0 || c->len - c->pos < JOURNAL_RECORD_FIXED + klen)
                return false; /* the end mark, or cut off */
        gen = get_le64(p + 18 + klen);
        if (c->pos == 0)
                c->gen = gen;
        else if (gen != c->gen)
                return false; /* left over from an older generation */
        memcpy(&check, p + 26 + klen, sizeof check);
        if (le32toh(check) != journal_check(p, 26 + klen))
                return false; /* torn by an OS crash: nothing after it can be trusted */
        *ret = (JournalRecord){
                .key = p + 2,
                .key_len = klen,
                .expiry = get_le64(p + 2 + klen),
                .credit = get_le64(p + 10 + klen),
        };
        c->pos += JOURNAL_RECORD_FIXED + klen;
        return true;
}
