/* SPDX-License-Identifier: MIT */
#include "snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shared/clock.h"
#include "store-error.h"
#include "wal.h"

_Static_assert(sizeof SNAPSHOT_MAGIC == 16, "the magic is 16 bytes with its NUL");

#define SNAPSHOT_CRC_AT      60
#define SNAPSHOT_TRAILER_TAG "SEND"
#define SNAPSHOT_W0_MASK     ((UINT64_C(1) << 56) - 1)

/* ---- records ---- */

static void record_put(uint8_t *out, const CounterRecord *r) {
        put_le64(out, r->id.lo);
        put_le64(out + 8, r->id.hi);
        put_le64(out + 16, (r->state.w0 & SNAPSHOT_W0_MASK) | (uint64_t) r->algorithm << 56);
        put_le64(out + 24, r->state.w1);
}

/* Returns 0, or -EBADMSG for a record no writer makes. */
static int record_get(const uint8_t *in, CounterRecord *r) {
        uint64_t w0 = get_le64(in + 16);

        *r = (CounterRecord){
                .id = { .lo = get_le64(in), .hi = get_le64(in + 8) },
                .algorithm = (uint8_t) (w0 >> 56),
                .state = { .w0 = w0 & SNAPSHOT_W0_MASK, .w1 = get_le64(in + 24) },
        };
        return r->algorithm < _COUNTER_ALGORITHM_MAX && r->state.w0 > 0 ? 0 : -EBADMSG;
}

static void header_put(uint8_t *out, const SnapshotInfo *info) {
        memset(out, 0, SNAPSHOT_HEADER_SIZE);
        memcpy(out, SNAPSHOT_MAGIC, sizeof SNAPSHOT_MAGIC);
        put_le32(out + 16, SNAPSHOT_VERSION);
        put_le32(out + 20, SNAPSHOT_RECORD_SIZE);
        put_le64(out + 24, info->lsn);
        put_le64(out + 32, info->count);
        put_le64(out + 40, info->at_usec);
        put_le32(out + SNAPSHOT_CRC_AT, wal_crc32c(0, out, SNAPSHOT_CRC_AT));
}

static int header_get(const uint8_t *in, SnapshotInfo *info, char *err, size_t err_size) {
        static const uint8_t zero[SNAPSHOT_CRC_AT - 48];

        if (memcmp(in, SNAPSHOT_MAGIC, sizeof SNAPSHOT_MAGIC) != 0) {
                set_error(err, err_size, "not a divvyd snapshot (bad magic)");
                return -EBADMSG;
        }
        if (get_le32(in + SNAPSHOT_CRC_AT) != wal_crc32c(0, in, SNAPSHOT_CRC_AT)) {
                set_error(err, err_size, "its header is damaged (bad checksum)");
                return -EBADMSG;
        }
        if (get_le32(in + 16) != SNAPSHOT_VERSION) {
                set_error(err, err_size,
                          "snapshot format version %u is not supported by this divvyd (expects %d)",
                          get_le32(in + 16), SNAPSHOT_VERSION);
                return -EPROTO;
        }
        if (get_le32(in + 20) != SNAPSHOT_RECORD_SIZE || memcmp(in + 48, zero, sizeof zero) != 0) {
                set_error(err, err_size, "its header is malformed");
                return -EBADMSG;
        }
        *info = (SnapshotInfo){ .lsn = get_le64(in + 24),
                                .count = get_le64(in + 32),
                                .at_usec = get_le64(in + 40) };
        if (info->count >
            (UINT64_MAX - SNAPSHOT_HEADER_SIZE - SNAPSHOT_TRAILER_SIZE) / SNAPSHOT_RECORD_SIZE) {
                set_error(err, err_size, "its header is malformed (count)");
                return -EBADMSG;
        }
        return 0;
}

/* ---- parsing ---- */

void snapshot_parser_init(SnapshotParser *p, uint64_t now_usec, SnapshotRecordFunc cb, void *userdata) {
        *p = (SnapshotParser){ .now_usec = now_usec, .cb = cb, .userdata = userdata };
}

static int parse_record(SnapshotParser *p, const uint8_t *in, char *err, size_t err_size) {
        CounterRecord r;
        int k;

        if (record_get(in, &r) < 0) {
                set_error(err, err_size, "record %" PRIu64 " is malformed", p->records);
                return -EBADMSG;
        }
        p->records++;
        if (r.state.w0 <= p->now_usec || !p->cb)
                return 0;
        k = p->cb(&r, p->userdata);
        return k < 0 ? k : 0;
}

int snapshot_parser_feed(SnapshotParser *p, const void *data, size_t n, char *err, size_t err_size) {
        const uint8_t *in = data;
        int r;

        while (n > 0) {
                size_t take;

                if (p->done) {
                        set_error(err, err_size, "bytes follow its end");
                        return -EBADMSG;
                }
                if (!p->header_done) {
                        take = SNAPSHOT_HEADER_SIZE - p->have < n ? SNAPSHOT_HEADER_SIZE - p->have : n;
                        memcpy(p->header + p->have, in, take);
                        p->have += take, in += take, n -= take;
                        if (p->have < SNAPSHOT_HEADER_SIZE)
                                return 0;
                        r = header_get(p->header, &p->info, err, err_size);
                        if (r < 0)
                                return r;
                        p->header_done = true;
                        p->have = 0;
                        continue;
                }
                if (p->records < p->info.count) {
                        if (p->have > 0 || n < SNAPSHOT_RECORD_SIZE) {
                                take = SNAPSHOT_RECORD_SIZE - p->have < n ? SNAPSHOT_RECORD_SIZE - p->have
                                                                          : n;
                                memcpy(p->partial + p->have, in, take);
                                p->have += take, in += take, n -= take;
                                if (p->have < SNAPSHOT_RECORD_SIZE)
                                        return 0;
                                p->have = 0;
                                p->crc = wal_crc32c(p->crc, p->partial, SNAPSHOT_RECORD_SIZE);
                                r = parse_record(p, p->partial, err, err_size);
                                if (r < 0)
                                        return r;
                                continue;
                        }
                        /* whole records straight from the input */
                        take = n / SNAPSHOT_RECORD_SIZE;
                        if (take > p->info.count - p->records)
                                take = (size_t) (p->info.count - p->records);
                        p->crc = wal_crc32c(p->crc, in, take * SNAPSHOT_RECORD_SIZE);
                        for (size_t i = 0; i < take; i++) {
                                r = parse_record(p, in + i * SNAPSHOT_RECORD_SIZE, err, err_size);
                                if (r < 0)
                                        return r;
                        }
                        in += take * SNAPSHOT_RECORD_SIZE, n -= take * SNAPSHOT_RECORD_SIZE;
                        continue;
                }
                take = SNAPSHOT_TRAILER_SIZE - p->have < n ? SNAPSHOT_TRAILER_SIZE - p->have : n;
                memcpy(p->trailer + p->have, in, take);
                p->have += take, in += take, n -= take;
                if (p->have < SNAPSHOT_TRAILER_SIZE)
                        return 0;
                if (get_le32(p->trailer) != p->crc || memcmp(p->trailer + 4, SNAPSHOT_TRAILER_TAG, 4) != 0) {
                        set_error(err, err_size, "its records are damaged (bad checksum)");
                        return -EBADMSG;
                }
                p->done = true;
        }
        return 0;
}

int snapshot_parser_finish(SnapshotParser *p, char *err, size_t err_size) {
        if (p->done)
                return 0;
        set_error(err, err_size, "it is cut short (%s)",
                  !p->header_done              ? "in its header"
                  : p->records < p->info.count ? "in its records"
                                               : "in its trailer");
        return -EBADMSG;
}

/* ---- reading the file ---- */

static int open_snapshot(const char *dir, char *path, size_t path_size, char *err, size_t err_size) {
        int fd;

        snprintf(path, path_size, "%s/" SNAPSHOT_NAME, dir);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                if (errno != ENOENT)
                        set_error(err, err_size, "%s: %s", path, strerror(errno));
                return -errno;
        }
        return fd;
}

int snapshot_read_info(const char *dir, SnapshotInfo *ret, char *err, size_t err_size) {
        uint8_t h[SNAPSHOT_HEADER_SIZE];
        char path[PATH_MAX], why[STORE_ERROR_MAX] = "";
        SnapshotParser p;
        ssize_t n;
        int fd, r;

        fd = open_snapshot(dir, path, sizeof path, err, err_size);
        if (fd < 0)
                return fd;
        snapshot_parser_init(&p, 0, NULL, NULL);
        n = pread(fd, h, sizeof h, 0);
        if (n < 0) {
                r = -errno;
                set_error(why, sizeof why, "%s", strerror(errno));
        } else {
                r = snapshot_parser_feed(&p, h, (size_t) n, why, sizeof why);
                if (r >= 0 && !p.header_done)
                        r = snapshot_parser_finish(&p, why, sizeof why);
        }
        close(fd);
        if (r < 0) {
                set_error(err, err_size, "%s: %s", path, why);
                return r;
        }
        *ret = p.info;
        return 0;
}

int snapshot_load(const char *dir, uint64_t now_usec, SnapshotRecordFunc cb, void *userdata,
                  SnapshotInfo *ret_info, char *err, size_t err_size) {
        char path[PATH_MAX], why[STORE_ERROR_MAX] = "";
        SnapshotParser p;
        uint8_t *buf;
        int fd, r = 0;

        fd = open_snapshot(dir, path, sizeof path, err, err_size);
        if (fd < 0)
                return fd;
        buf = malloc(SNAPSHOT_BUFFER_SIZE);
        if (!buf) {
                close(fd);
                return -ENOMEM;
        }
        (void) posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        snapshot_parser_init(&p, now_usec, cb, userdata);
        for (;;) {
                ssize_t n = read(fd, buf, SNAPSHOT_BUFFER_SIZE);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r = -errno;
                        set_error(why, sizeof why, "%s", strerror(errno));
                        break;
                }
                if (n == 0) {
                        r = snapshot_parser_finish(&p, why, sizeof why);
                        break;
                }
                r = snapshot_parser_feed(&p, buf, (size_t) n, why, sizeof why);
                if (r < 0)
                        break;
        }
        free(buf);
        close(fd);
        if (r < 0) {
                if (why[0])
                        set_error(err, err_size,
                                  "%s: %s: the counters cannot be read; restore the store directory from a "
                                  "copy made while divvyd was stopped",
                                  path, why);
                return r;
        }
        if (ret_info)
                *ret_info = p.info;
        return 0;
}

/* ---- writing ---- */

struct SnapshotWriter {
        int fd, dir_fd;
        char *dir;
        SnapshotInfo info;
        uint64_t expect, rate_bytes, start_usec, written;
        uint32_t crc;
        uint8_t *buf;
        size_t used;
        bool hooked_half;
        void (*hook)(int point);
};

static void tmp_path(const char *dir, char *out, size_t size) {
        snprintf(out, size, "%s/" SNAPSHOT_TMP_NAME, dir);
}

void snapshot_remove_tmp(const char *dir) {
        char p[PATH_MAX];

        tmp_path(dir, p, sizeof p);
        (void) unlink(p);
}

static void write_error(char *err, size_t err_size, const char *dir, const char *what, int r) {
        set_error(err, err_size, "writing the checkpoint failed: %s/" SNAPSHOT_TMP_NAME ": %s: %s%s", dir,
                  what, strerror(-r),
                  r == -ENOSPC || r == -EDQUOT
                          ? " (the disk is full: the previous checkpoint stays, with the journal)"
                          : "");
}

int snapshot_writer_new(const char *dir, uint64_t lsn, uint64_t at_usec, uint64_t expect,
                        uint64_t rate_bytes, void (*hook)(int point), SnapshotWriter **ret, char *err,
                        size_t err_size) {
        char p[PATH_MAX];
        uint8_t h[SNAPSHOT_HEADER_SIZE];
        SnapshotWriter *w;
        int r;

        w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        *w = (SnapshotWriter){ .fd = -1,
                               .dir_fd = -1,
                               .info = { .lsn = lsn, .at_usec = at_usec },
                               .expect = expect,
                               .rate_bytes = rate_bytes,
                               .hook = hook,
                               .start_usec = clock_usec(CLOCK_MONOTONIC) };
        w->dir = strdup(dir);
        w->buf = malloc(SNAPSHOT_BUFFER_SIZE);
        if (!w->dir || !w->buf) {
                r = -ENOMEM;
                goto fail;
        }
        w->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (w->dir_fd < 0) {
                r = -errno;
                set_error(err, err_size, "%s: %s", dir, strerror(errno));
                goto fail;
        }
        tmp_path(dir, p, sizeof p);
        w->fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (w->fd < 0) {
                r = -errno;
                write_error(err, err_size, dir, "create", r);
                goto fail;
        }
        (void) fchmod(w->fd, 0600); /* whatever the umask did */
        header_put(h, &w->info);    /* count 0 for now: rewritten by commit */
        r = wal_pwrite_all(w->fd, h, sizeof h, 0);
        if (r < 0) {
                write_error(err, err_size, dir, "write", r);
                goto fail;
        }
        *ret = w;
        return 0;

fail:
        snapshot_writer_abort(w);
        return r;
}

/* Sleeps as long as the writes so far are ahead of rate_bytes a second. */
static void pace(SnapshotWriter *w) {
        uint64_t due, now;

        if (w->rate_bytes == 0)
                return;
        due = w->start_usec + w->written * UINT64_C(1000000) / w->rate_bytes;
        now = clock_usec(CLOCK_MONOTONIC);
        if (due > now) {
                uint64_t d = due - now;
                struct timespec ts = { .tv_sec = (time_t) (d / 1000000),
                                       .tv_nsec = (long) (d % 1000000) * 1000 };

                (void) nanosleep(&ts, NULL);
        }
}

static int flush(SnapshotWriter *w) {
        int r;

        if (w->used == 0)
                return 0;
        w->crc = wal_crc32c(w->crc, w->buf, w->used);
        r = wal_pwrite_all(w->fd, w->buf, w->used, (off_t) (SNAPSHOT_HEADER_SIZE + w->written));
        if (r < 0)
                return r;
        /* start the disk writing it now rather than in one burst at the fsync */
        (void) sync_file_range(w->fd, (off_t) (SNAPSHOT_HEADER_SIZE + w->written), (off_t) w->used,
                               SYNC_FILE_RANGE_WRITE);
        w->written += w->used;
        w->used = 0;
        pace(w);
        return 0;
}

int snapshot_writer_add(SnapshotWriter *w, const CounterRecord *records, size_t n, char *err,
                        size_t err_size) {
        int r;

        for (size_t i = 0; i < n; i++) {
                if (w->used + SNAPSHOT_RECORD_SIZE > SNAPSHOT_BUFFER_SIZE) {
                        r = flush(w);
                        if (r < 0) {
                                write_error(err, err_size, w->dir, "write", r);
                                return r;
                        }
                }
                record_put(w->buf + w->used, records + i);
                w->used += SNAPSHOT_RECORD_SIZE;
                w->info.count++;
                if (w->hook && !w->hooked_half && w->info.count * 2 >= w->expect) {
                        w->hooked_half = true;
                        r = flush(w);
                        if (r < 0) {
                                write_error(err, err_size, w->dir, "write", r);
                                return r;
                        }
                        w->hook(SNAPSHOT_POINT_WRITTEN);
                }
        }
        return 0;
}

int snapshot_writer_commit(SnapshotWriter *w, char *err, size_t err_size) {
        char from[PATH_MAX], to[PATH_MAX];
        uint8_t h[SNAPSHOT_HEADER_SIZE], t[SNAPSHOT_TRAILER_SIZE];
        const char *what = "write";
        int r;

        r = flush(w);
        if (r >= 0) {
                put_le32(t, w->crc);
                memcpy(t + 4, SNAPSHOT_TRAILER_TAG, 4);
                r = wal_pwrite_all(w->fd, t, sizeof t, (off_t) (SNAPSHOT_HEADER_SIZE + w->written));
        }
        if (r >= 0) {
                header_put(h, &w->info);
                r = wal_pwrite_all(w->fd, h, sizeof h, 0);
        }
        if (r >= 0 && fsync(w->fd) < 0) {
                r = -errno;
                what = "fsync";
        }
        if (r < 0) {
                write_error(err, err_size, w->dir, what, r);
                snapshot_writer_abort(w);
                return r;
        }
        if (w->hook)
                w->hook(SNAPSHOT_POINT_SWAP);
        tmp_path(w->dir, from, sizeof from);
        snprintf(to, sizeof to, "%s/" SNAPSHOT_NAME, w->dir);
        if (rename(from, to) < 0) {
                r = -errno;
                set_error(err, err_size, "renaming %s to %s failed: %s", from, to, strerror(errno));
                snapshot_writer_abort(w);
                return r;
        }
        if (fsync(w->dir_fd) < 0) {
                /* renamed, but perhaps not durably: the next checkpoint tries again; the
                 * journal it covers is kept */
                r = -errno;
                set_error(err, err_size, "%s: fsync of the directory failed: %s", w->dir, strerror(errno));
        }
        close(w->fd);
        w->fd = -1;
        snapshot_writer_abort(w); /* frees; the temporary file is gone already */
        return r;
}

SnapshotWriter *snapshot_writer_abort(SnapshotWriter *w) {
        if (!w)
                return NULL;
        if (w->fd >= 0) {
                close(w->fd);
                snapshot_remove_tmp(w->dir);
        }
        if (w->dir_fd >= 0)
                close(w->dir_fd);
        free(w->dir);
        free(w->buf);
        free(w);
        return NULL;
}
