/* SPDX-License-Identifier: MIT */

/* The write-ahead journal: see wal.h for the files, their layout and the rules. */

#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shared/clock.h"
#include "store-error.h"
#include "store/wal.h"

#define WAL_MAGIC         "DIVVYWAL" /* 8 bytes, no NUL on disk */
#define WAL_MAGIC_SIZE    8
#define WAL_FILE_MODE     0600 /* like data.mdb: the daemon's user only, whatever the umask */
#define WAL_NAME_PREFIX   "wal-"
#define WAL_NAME_SUFFIX   ".divvyd"
#define WAL_NAME_NEW      ".new"
#define WAL_SEQ_DIGITS    16          /* hex digits of a sequence number in a file name */
#define WAL_ERROR_MAX     512         /* bytes: wal_error()'s sentence */
#define WAL_RECORD_CRC_AT 44          /* bytes of a record the CRC covers; the CRC follows */
#define WAL_HEADER_CRC_AT 60          /* bytes of the header the CRC covers; the CRC follows */
#define CRC32C_POLY       0x82F63B78u /* Castagnoli, reflected */
#define CRC32C_SLICES     8           /* slicing-by-8: 8 bytes per step, ~5 steps a record */
#define MAX(a, b)         ((a) > (b) ? (a) : (b))

_Static_assert(WAL_RECORD_SIZE == WAL_RECORD_CRC_AT + 4, "record: the CRC is its last 4 bytes");
_Static_assert(WAL_HEADER_SIZE == WAL_HEADER_CRC_AT + 4, "header: the CRC is its last 4 bytes");
_Static_assert(WAL_HEADER_SIZE % 16 == 0, "records stay 16-byte aligned");

typedef struct WalSegment {
        uint64_t seq;
        uint64_t first_lsn;
        uint64_t records;
        uint64_t file_size;
} WalSegment;

struct Wal {
        char *dir;
        int dir_fd;
        int lock_fd;
        uint64_t segment_size;
        int (*allocate)(int fd, off_t len);
        void (*start_write)(int fd, off_t off, off_t len); /* WalOptions' hook, or NULL */
        size_t page_size;

        /* the current segment: appended to */
        uint64_t seq;
        uint64_t first_lsn;
        int fd;
        uint8_t *map;
        size_t map_len;
        uint64_t capacity; /* records */
        uint64_t count;    /* records written */
        uint64_t synced;   /* records msync()ed */
        uint64_t started;  /* records whose writeback was started (WAL_WRITEBACK_CHUNK) */
        uint64_t next_lsn;

        /* write_appends (wal.h): records are encoded into staging (staging_cap bytes, grown
         * once to the largest batch) and pwrite()n; the current segment's blocks below
         * zeroed_to (bytes) are written (the header's page, records, or zeros) */
        bool write_appends;
        uint8_t *staging;
        size_t staging_cap;
        uint64_t zeroed_to;
        uint8_t *zeros; /* WAL_ZERO_CHUNK bytes of zeros */

        /* the spare: segment seq + 1, preallocated under its .new name */
        int spare_fd;
        uint8_t *spare_map;
        size_t spare_len;

        /* sealed segments, oldest first, consecutive sequence numbers */
        WalSegment *sealed;
        size_t n_sealed, n_sealed_alloc;
        uint64_t replay_last_seq; /* the last segment found by wal_open(); 0: none */
        WalDamage damage;         /* what the last wal_replay() skipped */

        bool dir_dirty; /* a segment was renamed in since the directory's last fsync */
        uint64_t appended, syncs, rotations;
        uint64_t sync_usec; /* spent in the syncs counted in syncs */
        char error[WAL_ERROR_MAX];
};

/* ---- CRC-32C, slicing-by-8 (portable; the table is built once) ---- */

static uint32_t crc_table[CRC32C_SLICES][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) && defined(__GNUC__)
/* SSE 4.2's crc32 instruction computes the same CRC-32C, 8 bytes an instruction: a
 * checkpoint re-reads its journal once per pass, and with the table the CRC was two thirds of
 * the checkpoint thread's time (perf, 10 million counters). */
static bool crc_hw; /* set by crc_table_init() */

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t state, const uint8_t *p, size_t n) {
        uint64_t crc = state;

        for (; n >= 8; p += 8, n -= 8)
                crc = __builtin_ia32_crc32di(crc, get_le64(p));
        for (; n > 0; p++, n--)
                crc = __builtin_ia32_crc32qi((uint32_t) crc, *p);
        return (uint32_t) crc;
}
#endif

static void crc_table_init(void) {
#if defined(__x86_64__) && defined(__GNUC__)
        crc_hw = __builtin_cpu_supports("sse4.2");
#endif
        for (uint32_t i = 0; i < 256; i++) {
                uint32_t c = i;

                for (int k = 0; k < 8; k++)
                        c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
                crc_table[0][i] = c;
        }
        for (uint32_t i = 0; i < 256; i++)
                for (int s = 1; s < CRC32C_SLICES; s++)
                        crc_table[s][i] =
                                (crc_table[s - 1][i] >> 8) ^ crc_table[0][crc_table[s - 1][i] & 0xff];
}

/* The CRC-32C register after n more bytes from state (not inverted). The table must have been
 * built (crc_once). */
static uint32_t crc32c_update(uint32_t state, const void *data, size_t n) {
        const uint8_t *p = data;
        uint32_t crc = state;

#if defined(__x86_64__) && defined(__GNUC__)
        if (crc_hw)
                return crc32c_hw(state, p, n);
#endif
        for (; n >= 8; p += 8, n -= 8) {
                uint32_t lo = get_le32(p) ^ crc, hi = get_le32(p + 4);

                crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
                      crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^
                      crc_table[2][(hi >> 8) & 0xff] ^ crc_table[1][(hi >> 16) & 0xff] ^
                      crc_table[0][hi >> 24];
        }
        for (; n > 0; p++, n--)
                crc = crc_table[0][(crc ^ *p) & 0xff] ^ (crc >> 8);
        return crc;
}

/* CRC-32C of n bytes (initial value and final xor ~0: "123456789" gives 0xE3069283). The
 * table must have been built (crc_once). */
static uint32_t crc32c(const void *data, size_t n) {
        return ~crc32c_update(~0u, data, n);
}

uint32_t wal_crc32c(uint32_t crc, const void *data, size_t n) {
        (void) pthread_once(&crc_once, crc_table_init);
        return ~crc32c_update(~crc, data, n);
}

/* ---- records and headers ---- */

static void record_encode(uint8_t out[static WAL_RECORD_SIZE], const CounterRecord *r, uint64_t lsn) {
        put_le64(out, lsn);
        put_le64(out + 8, r->id.lo);
        put_le64(out + 16, r->id.hi);
        put_le64(out + 24, r->state.w0);
        put_le64(out + 32, r->state.w1);
        out[40] = r->algorithm;
        out[41] = out[42] = out[43] = 0;
        put_le32(out + WAL_RECORD_CRC_AT, crc32c(out, WAL_RECORD_CRC_AT));
}

/* Decodes the record at p if it is valid and the one with lsn expect_lsn. */
static bool record_decode(const uint8_t *p, uint64_t expect_lsn, CounterRecord *ret) {
        if (get_le64(p) != expect_lsn || p[40] >= _COUNTER_ALGORITHM_MAX || p[41] || p[42] || p[43])
                return false;
        if (get_le32(p + WAL_RECORD_CRC_AT) != crc32c(p, WAL_RECORD_CRC_AT))
                return false;
        *ret = (CounterRecord){
                .id = { .lo = get_le64(p + 8), .hi = get_le64(p + 16) },
                .algorithm = p[40],
                .state = { .w0 = get_le64(p + 24), .w1 = get_le64(p + 32) },
        };
        return true;
}

static bool all_zero(const uint8_t *p, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (p[i])
                        return false;
        return true;
}

/* Whether an invalid record was written whole (its lsn and CRC fields, written first and
 * last, are both there): then it is damaged, else torn or never written (wal.h). */
static bool record_whole(const uint8_t *p) {
        return get_le64(p) != 0 && get_le32(p + WAL_RECORD_CRC_AT) != 0;
}

static void header_encode(uint8_t out[static WAL_HEADER_SIZE], uint64_t seq, uint64_t first_lsn) {
        memset(out, 0, WAL_HEADER_SIZE);
        memcpy(out, WAL_MAGIC, WAL_MAGIC_SIZE);
        put_le32(out + 8, WAL_FORMAT_VERSION);
        put_le32(out + 12, WAL_RECORD_SIZE);
        put_le64(out + 16, seq);
        put_le64(out + 24, first_lsn);
        put_le64(out + 32, clock_usec(CLOCK_REALTIME));
        put_le32(out + WAL_HEADER_CRC_AT, crc32c(out, WAL_HEADER_CRC_AT));
}

/* Checks the header of the segment file name (for messages) of file_size bytes, which must be
 * segment seq. Sets *ret_first_lsn. Returns 0, -EPROTO (another format version) or -EBADMSG. */
static int header_check(const uint8_t *p, uint64_t file_size, const char *name, uint64_t seq,
                        uint64_t *ret_first_lsn, char *errbuf, size_t errbuf_size) {
        uint32_t version;

        if (file_size < WAL_HEADER_SIZE || memcmp(p, WAL_MAGIC, WAL_MAGIC_SIZE) != 0) {
                set_error(errbuf, errbuf_size,
                          "%s is not a divvyd journal segment (no \"" WAL_MAGIC "\" header)", name);
                return -EBADMSG;
        }
        version = get_le32(p + 8);
        if (version != WAL_FORMAT_VERSION) {
                set_error(errbuf, errbuf_size,
                          "%s: journal format version %" PRIu32
                          " is not supported by this divvyd (expects %d)",
                          name, version, WAL_FORMAT_VERSION);
                return -EPROTO;
        }
        if (get_le32(p + WAL_HEADER_CRC_AT) != crc32c(p, WAL_HEADER_CRC_AT) ||
            get_le32(p + 12) != WAL_RECORD_SIZE || get_le64(p + 24) == 0) {
                set_error(errbuf, errbuf_size, "%s: damaged segment header (checksum)", name);
                return -EBADMSG;
        }
        if (get_le64(p + 16) != seq) {
                set_error(errbuf, errbuf_size, "%s: the header says segment %" PRIu64 ", not %" PRIu64, name,
                          get_le64(p + 16), seq);
                return -EBADMSG;
        }
        *ret_first_lsn = get_le64(p + 24);
        return 0;
}

const char *wal_segment_name(uint64_t seq, char buf[static WAL_SEGMENT_NAME_MAX]) {
        snprintf(buf, WAL_SEGMENT_NAME_MAX, WAL_NAME_PREFIX "%016" PRIx64 WAL_NAME_SUFFIX, seq);
        return buf;
}

static const char *spare_name(uint64_t seq, char buf[static WAL_SEGMENT_NAME_MAX]) {
        snprintf(buf, WAL_SEGMENT_NAME_MAX, WAL_NAME_PREFIX "%016" PRIx64 WAL_NAME_SUFFIX WAL_NAME_NEW, seq);
        return buf;
}

/* Parses "wal-<16 hex>.divvyd" (returns 1) or the same with ".new" (returns 2); 0 otherwise. */
static int parse_name(const char *name, uint64_t *ret_seq) {
        size_t fixed = strlen(WAL_NAME_PREFIX) + WAL_SEQ_DIGITS;
        uint64_t seq = 0;
        const char *rest;

        if (strncmp(name, WAL_NAME_PREFIX, strlen(WAL_NAME_PREFIX)) != 0 || strlen(name) < fixed)
                return 0;
        for (size_t i = strlen(WAL_NAME_PREFIX); i < fixed; i++) {
                char c = name[i];

                if (c >= '0' && c <= '9')
                        seq = seq << 4 | (uint64_t) (c - '0');
                else if (c >= 'a' && c <= 'f')
                        seq = seq << 4 | (uint64_t) (c - 'a' + 10);
                else
                        return 0;
        }
        rest = name + fixed;
        *ret_seq = seq;
        if (strcmp(rest, WAL_NAME_SUFFIX) == 0)
                return 1;
        if (strcmp(rest, WAL_NAME_SUFFIX WAL_NAME_NEW) == 0)
                return 2;
        return 0;
}

/* ---- reading a segment (any thread) ---- */

/* A slice of the id space: scan only the records whose id.hi is in [hi_min, hi_max]. */
typedef struct Slice {
        uint64_t hi_min, hi_max;
} Slice;

static int segment_scan_fd_slice(int fd, const char *name, uint64_t seq, uint64_t after_lsn,
                                 uint64_t max_records, uint64_t last_lsn, const Slice *slice,
                                 WalRecordFunc cb, void *userdata, WalSegmentInfo *info, WalDamage *damage,
                                 char *errbuf, size_t errbuf_size);

/* Reads the open segment fd (name: for messages), which must be segment seq: checks the
 * header, then calls cb for each valid record with lsn > after_lsn among the segment's
 * records: the first max_records when the file has room for them (the caller knows where
 * they end), else up to the last valid or damaged one (wal.h). Damaged records are skipped;
 * those with lsn > after_lsn are added to *damage (may be NULL) as they are met, before cb
 * sees the next valid one. Fills *info. Returns 0, cb's negative return or -errno. */
static int segment_scan_fd(int fd, const char *name, uint64_t seq, uint64_t after_lsn, uint64_t max_records,
                           WalRecordFunc cb, void *userdata, WalSegmentInfo *info, WalDamage *damage,
                           char *errbuf, size_t errbuf_size) {
        return segment_scan_fd_slice(fd, name, seq, after_lsn, max_records, UINT64_MAX, NULL, cb, userdata,
                                     info, damage, errbuf, errbuf_size);
}

/* Counts the damaged records of segment seq from index from (lsn first_lsn + from) up to
 * before index to, those with lsn > after_lsn into *damage (may be NULL), all into *info. */
static void damage_add(WalSegmentInfo *info, WalDamage *damage, uint64_t seq, uint64_t first_lsn,
                       uint64_t after_lsn, uint64_t from, uint64_t to) {
        if (to <= from)
                return;
        if (info->damaged == 0)
                info->first_damaged = from;
        info->damaged += to - from;
        if (!damage || first_lsn + to - 1 <= after_lsn)
                return;
        if (first_lsn + from <= after_lsn)
                from = after_lsn + 1 - first_lsn;
        if (damage->records == 0)
                *damage =
                        (WalDamage){ .first_seq = seq, .first_index = from, .first_lsn = first_lsn + from };
        if (damage->segments == 0 || damage->last_seq != seq)
                damage->segments++;
        damage->last_seq = seq;
        damage->records += to - from;
}

/* With slice, records outside it are skipped unread (their CRC unchecked), and so are
 * invalid ones in it: only for records a scan without slice has already found (and counted
 * the damaged ones of). */
static int segment_scan_fd_slice(int fd, const char *name, uint64_t seq, uint64_t after_lsn,
                                 uint64_t max_records, uint64_t last_lsn, const Slice *slice,
                                 WalRecordFunc cb, void *userdata, WalSegmentInfo *info, WalDamage *damage,
                                 char *errbuf, size_t errbuf_size) {
        uint64_t first_lsn, capacity, limit, i, end = 0;
        bool known, torn = false;
        struct stat st;
        uint8_t *m;
        int r;

        (void) pthread_once(&crc_once, crc_table_init);
        if (fstat(fd, &st) < 0) {
                r = -errno;
                set_error(errbuf, errbuf_size, "cannot stat %s: %s", name, strerror(-r));
                return r;
        }
        if ((uint64_t) st.st_size < WAL_HEADER_SIZE) {
                set_error(errbuf, errbuf_size, "%s is not a divvyd journal segment (%" PRIu64 " bytes)",
                          name, (uint64_t) st.st_size);
                return -EBADMSG;
        }
        m = mmap(NULL, (size_t) st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
                r = -errno;
                set_error(errbuf, errbuf_size, "cannot map %s: %s", name, strerror(-r));
                return r;
        }
        r = header_check(m, (uint64_t) st.st_size, name, seq, &first_lsn, errbuf, errbuf_size);
        if (r < 0)
                goto finish;
        capacity = ((uint64_t) st.st_size - WAL_HEADER_SIZE) / WAL_RECORD_SIZE;
        if (last_lsn != UINT64_MAX && (last_lsn < first_lsn || last_lsn - first_lsn < max_records))
                max_records = last_lsn < first_lsn ? 0 : last_lsn - first_lsn + 1;
        known = max_records <= capacity; /* every record up to max_records is one */
        limit = known ? max_records : capacity;
        *info = (WalSegmentInfo){ .seq = seq, .first_lsn = first_lsn, .capacity = capacity };
        for (i = 0; i < limit; i++) {
                const uint8_t *p = m + WAL_HEADER_SIZE + i * WAL_RECORD_SIZE;
                WalPosition pos = { .seq = seq, .lsn = first_lsn + i };
                CounterRecord rec;

                if (slice) {
                        uint64_t hi = get_le64(p + 16); /* the id's hi, read before the CRC */

                        if (hi < slice->hi_min || hi > slice->hi_max || pos.lsn <= after_lsn ||
                            !record_decode(p, pos.lsn, &rec))
                                continue;
                        r = cb(&rec, &pos, userdata);
                        if (r < 0)
                                break;
                        continue;
                }
                if (!record_decode(p, pos.lsn, &rec)) {
                        if (!known && record_whole(p)) {
                                damage_add(info, damage, seq, first_lsn, after_lsn, end, i + 1);
                                end = i + 1;
                        }
                        continue;
                }
                damage_add(info, damage, seq, first_lsn, after_lsn, end, i); /* invalid since the last */
                end = i + 1;
                if (cb && pos.lsn > after_lsn) {
                        r = cb(&rec, &pos, userdata);
                        if (r < 0)
                                break;
                }
        }
        if (r >= 0 && !slice) {
                if (known) {
                        damage_add(info, damage, seq, first_lsn, after_lsn, end, limit);
                        end = limit;
                } else
                        torn = end < capacity &&
                               !all_zero(m + WAL_HEADER_SIZE + end * WAL_RECORD_SIZE, WAL_RECORD_SIZE);
        }
        info->records = slice ? limit : end;
        info->file_size = (uint64_t) st.st_size;
        info->damaged_tail = torn;
        info->end_offset = WAL_HEADER_SIZE + info->records * WAL_RECORD_SIZE;
        if (r > 0)
                r = 0;
finish:
        munmap(m, (size_t) st.st_size);
        return r;
}

static int segment_read(const char *dir, uint64_t seq, uint64_t after_lsn, uint64_t limit,
                        const Slice *slice, WalRecordFunc cb, void *userdata, WalSegmentInfo *ret_info,
                        char *errbuf, size_t errbuf_size);

int wal_segment_read(const char *dir, uint64_t seq, uint64_t after_lsn, uint64_t last_lsn, WalRecordFunc cb,
                     void *userdata, WalSegmentInfo *ret_info, char *errbuf, size_t errbuf_size) {
        return segment_read(dir, seq, after_lsn, last_lsn, NULL, cb, userdata, ret_info, errbuf,
                            errbuf_size);
}

int wal_segment_read_slice(const char *dir, uint64_t seq, uint64_t after_lsn, uint64_t records,
                           uint64_t hi_min, uint64_t hi_max, WalRecordFunc cb, void *userdata, char *errbuf,
                           size_t errbuf_size) {
        if (!cb)
                return -EINVAL;
        return segment_read(dir, seq, after_lsn, records, &(Slice){ .hi_min = hi_min, .hi_max = hi_max }, cb,
                            userdata, NULL, errbuf, errbuf_size);
}

/* Reads segment seq of dir: with slice, its first `limit` records; without, those up to lsn
 * `limit` (UINT64_MAX: up to where they end). */
static int segment_read(const char *dir, uint64_t seq, uint64_t after_lsn, uint64_t limit,
                        const Slice *slice, WalRecordFunc cb, void *userdata, WalSegmentInfo *ret_info,
                        char *errbuf, size_t errbuf_size) {
        char name[WAL_SEGMENT_NAME_MAX], path[PATH_MAX];
        WalSegmentInfo info;
        int fd, r;

        if (!dir)
                return -EINVAL;
        if ((size_t) snprintf(path, sizeof path, "%s/%s", dir, wal_segment_name(seq, name)) >= sizeof path) {
                set_error(errbuf, errbuf_size, "%s: path too long", dir);
                return -ENAMETOOLONG;
        }
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                r = -errno;
                set_error(errbuf, errbuf_size, "cannot open %s: %s", path, strerror(-r));
                return r;
        }
        r = segment_scan_fd_slice(fd, path, seq, after_lsn, slice ? limit : UINT64_MAX,
                                  slice ? UINT64_MAX : limit, slice, cb, userdata, &info, NULL, errbuf,
                                  errbuf_size);
        close(fd);
        if (r >= 0 && ret_info)
                *ret_info = info;
        return r;
}

/* ---- the Wal ---- */

static int wal_set_error(Wal *w, int r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int wal_set_error(Wal *w, int r, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(w->error, sizeof w->error, fmt, ap);
        va_end(ap);
        return r;
}

/* Makes room for one more sealed segment, so sealing cannot fail half-way for memory. */
static int sealed_reserve(Wal *w) {
        WalSegment *a;
        size_t n;

        if (w->n_sealed < w->n_sealed_alloc)
                return 0;
        n = w->n_sealed_alloc ? w->n_sealed_alloc * 2 : 16;
        a = reallocarray(w->sealed, n, sizeof *a);
        if (!a)
                return wal_set_error(w, -ENOMEM, "out of memory");
        w->sealed = a;
        w->n_sealed_alloc = n;
        return 0;
}

static const WalSegment *sealed_find(const Wal *w, uint64_t seq) {
        if (w->n_sealed == 0 || seq < w->sealed[0].seq || seq - w->sealed[0].seq >= w->n_sealed)
                return NULL;
        return &w->sealed[seq - w->sealed[0].seq];
}

static int allocate_default(int fd, off_t len) {
        return posix_fallocate(fd, 0, len);
}

static void spare_drop(Wal *w, bool unlink_it) {
        char name[WAL_SEGMENT_NAME_MAX];

        if (w->spare_map)
                munmap(w->spare_map, w->spare_len);
        w->spare_map = NULL;
        if (w->spare_fd >= 0) {
                close(w->spare_fd);
                if (unlink_it)
                        (void) unlinkat(w->dir_fd, spare_name(w->seq + 1, name), 0);
        }
        w->spare_fd = -EBADF;
}

/* Makes the spare, the next segment, of at least size bytes (the configured segment size, or
 * more for a batch that does not fit in one: segments say their size by their file's). A spare
 * made earlier that is too small is replaced. */
static int prepare_sized(Wal *w, uint64_t size) {
        char name[WAL_SEGMENT_NAME_MAX];
        void *m;
        int fd, r;

        if (size < w->segment_size)
                size = w->segment_size;
        if (w->spare_fd >= 0 && w->spare_len >= size)
                return 0;
        spare_drop(w, true);
        spare_name(w->seq + 1, name);
        fd = openat(w->dir_fd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, WAL_FILE_MODE);
        if (fd < 0)
                return wal_set_error(w, -errno, "cannot create %s/%s: %s", w->dir, name, strerror(errno));
        r = (w->allocate ? w->allocate : allocate_default)(fd, (off_t) size);
        if (r != 0) {
                close(fd);
                (void) unlinkat(w->dir_fd, name, 0);
                return wal_set_error(w, -r, "cannot allocate %" PRIu64 " bytes for %s/%s: %s", size, w->dir,
                                     name, strerror(r));
        }
        m = mmap(NULL, (size_t) size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
                r = -errno;
                close(fd);
                (void) unlinkat(w->dir_fd, name, 0);
                return wal_set_error(w, r, "cannot map %s/%s: %s", w->dir, name, strerror(-r));
        }
        /* No fault-around or read-ahead: the page cache then holds the segment in 4 KiB folios,
         * not in large ones. A store through the mapping marks its whole folio dirty, so with
         * 2 MiB folios each periodic sync wrote the folio being appended to whole, again at the
         * next sync: measured 1.48 x the bytes appended with a sync every 2.7 MB (--sync=periodic
         * at ~570,000 HITs/s), 1.01 x with this. Advisory. */
        (void) madvise(m, (size_t) size, MADV_RANDOM);
        w->spare_fd = fd;
        w->spare_map = m;
        w->spare_len = (size_t) size;
        return 0;
}

static int rotate(Wal *w);

/* Whether r says the filesystem has no room (a full disk, or the user's quota). */
static bool no_room(int r) {
        return r == -ENOSPC || r == -EDQUOT;
}

int wal_prepare(Wal *w) {
        int r;

        if (!w)
                return -EINVAL;
        if (!w->map) {
                /* opened on a full disk: the current segment first (it seals nothing) */
                r = rotate(w);
                if (r < 0)
                        return r;
        }
        return prepare_sized(w, w->segment_size);
}

/* msync()s the current segment's records written since the last sync. */
static int current_flush(Wal *w) {
        size_t from, to;

        if (!w->map || w->count == w->synced)
                return 0;
        from = (WAL_HEADER_SIZE + (size_t) w->synced * WAL_RECORD_SIZE) & ~(w->page_size - 1);
        to = WAL_HEADER_SIZE + (size_t) w->count * WAL_RECORD_SIZE;
        if (msync(w->map + from, to - from, MS_SYNC) < 0)
                return wal_set_error(w, -errno, "cannot sync %s/wal-%016" PRIx64 WAL_NAME_SUFFIX ": %s",
                                     w->dir, w->seq, strerror(errno));
        w->synced = w->count;
        return 0;
}

/* fsync()s the directory if a segment was renamed in since it was last synced. */
static int dir_sync(Wal *w) {
        if (!w->dir_dirty)
                return 0;
        if (fsync(w->dir_fd) < 0)
                return wal_set_error(w, -errno, "cannot sync the directory %s: %s", w->dir, strerror(errno));
        w->dir_dirty = false;
        return 0;
}

/* Seals the current segment (if any) and makes the spare, segment seq + 1, of at least size
 * bytes, current: writes and syncs its header, then renames it in. The old segment, data and
 * name, is on disk before the new name can be. On failure the current segment stays current
 * and nothing is lost. */
static int rotate_sized(Wal *w, uint64_t size) {
        char from[WAL_SEGMENT_NAME_MAX], to[WAL_SEGMENT_NAME_MAX];
        int r;

        r = prepare_sized(w, size);
        if (r < 0)
                return r;
        if (w->map) {
                r = sealed_reserve(w);
                if (r < 0)
                        return r;
                r = current_flush(w);
                if (r >= 0)
                        r = dir_sync(w); /* its own name, if it is new since the last sync */
                if (r < 0)
                        return r;
        }
        header_encode(w->spare_map, w->seq + 1, w->next_lsn);
        if (msync(w->spare_map, w->page_size, MS_SYNC) < 0)
                return wal_set_error(w, -errno, "cannot sync %s/%s: %s", w->dir,
                                     spare_name(w->seq + 1, from), strerror(errno));
        if (renameat(w->dir_fd, spare_name(w->seq + 1, from), w->dir_fd, wal_segment_name(w->seq + 1, to)) <
            0)
                return wal_set_error(w, -errno, "cannot rename %s/%s: %s", w->dir, from, strerror(errno));
        w->dir_dirty = true;

        if (w->map) {
                w->sealed[w->n_sealed++] = (WalSegment){
                        .seq = w->seq,
                        .first_lsn = w->first_lsn,
                        .records = w->count,
                        .file_size = w->map_len,
                };
                munmap(w->map, w->map_len);
                close(w->fd);
                w->rotations++;
        }
        w->seq++;
        w->first_lsn = w->next_lsn;
        w->fd = w->spare_fd;
        w->map = w->spare_map;
        w->map_len = w->spare_len;
        w->capacity = (w->map_len - WAL_HEADER_SIZE) / WAL_RECORD_SIZE;
        w->count = w->synced = w->started = 0;
        w->zeroed_to = w->page_size; /* the header's page: written and synced above */
        w->spare_fd = -EBADF;
        w->spare_map = NULL;
        return 0;
}

static int rotate(Wal *w) {
        return rotate_sized(w, w->segment_size);
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

        return x < y ? -1 : x > y;
}

/* Lists the segments of the directory, sorted, into *ret (*ret_n of them), and deletes
 * leftover spares. */
static int list_segments(Wal *w, uint64_t **ret, size_t *ret_n, char *errbuf, size_t errbuf_size) {
        uint64_t *seqs = NULL, seq;
        size_t n = 0, n_alloc = 0;
        struct dirent *de;
        DIR *d;
        int fd, r = 0;

        fd = openat(w->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || !(d = fdopendir(fd))) {
                r = -errno;
                if (fd >= 0)
                        close(fd);
                set_error(errbuf, errbuf_size, "cannot read %s: %s", w->dir, strerror(-r));
                return r;
        }
        while ((errno = 0, de = readdir(d))) {
                switch (parse_name(de->d_name, &seq)) {
                case 1:
                        if (n == n_alloc) {
                                uint64_t *a = reallocarray(seqs, n_alloc ? n_alloc * 2 : 16, sizeof *a);

                                if (!a) {
                                        r = -ENOMEM;
                                        goto finish;
                                }
                                seqs = a;
                                n_alloc = n_alloc ? n_alloc * 2 : 16;
                        }
                        seqs[n++] = seq;
                        break;
                case 2: /* a spare a previous run prepared: never part of the journal */
                        (void) unlinkat(w->dir_fd, de->d_name, 0);
                        break;
                default:
                        break;
                }
        }
        if (errno != 0)
                r = -errno;
finish:
        closedir(d);
        if (r < 0) {
                free(seqs);
                set_error(errbuf, errbuf_size, "cannot read %s: %s", w->dir, strerror(-r));
                return r;
        }
        if (n > 0) /* seqs is NULL for none: qsort() must not see it */
                qsort(seqs, n, sizeof *seqs, cmp_u64);
        *ret = seqs;
        *ret_n = n;
        return 0;
}

/* Reads the header of segment seq: its first lsn and file size. */
static int read_header(Wal *w, uint64_t seq, WalSegment *ret, char *errbuf, size_t errbuf_size) {
        char name[WAL_SEGMENT_NAME_MAX], path[PATH_MAX];
        uint8_t h[WAL_HEADER_SIZE];
        struct stat st;
        ssize_t k;
        int fd, r;

        snprintf(path, sizeof path, "%s/%s", w->dir, wal_segment_name(seq, name));
        fd = openat(w->dir_fd, name, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                r = -errno;
                set_error(errbuf, errbuf_size, "cannot open %s: %s", path, strerror(-r));
                return r;
        }
        if (fstat(fd, &st) < 0) {
                r = -errno;
                close(fd);
                set_error(errbuf, errbuf_size, "cannot stat %s: %s", path, strerror(-r));
                return r;
        }
        k = pread(fd, h, sizeof h, 0);
        r = k < 0 ? -errno : 0;
        close(fd);
        if (r < 0) {
                set_error(errbuf, errbuf_size, "cannot read %s: %s", path, strerror(-r));
                return r;
        }
        if (k < (ssize_t) sizeof h)
                memset(h + k, 0, sizeof h - (size_t) k);
        *ret = (WalSegment){ .seq = seq, .file_size = (uint64_t) st.st_size };
        return header_check(h, (uint64_t) st.st_size, path, seq, &ret->first_lsn, errbuf, errbuf_size);
}

/* Finds the segments a previous run left: checks their headers and sequence, counts the
 * records of the last one (syncing it, since it is about to be sealed) and seals them all. */
static int load_segments(Wal *w, uint64_t first_lsn, char *errbuf, size_t errbuf_size) {
        char name[WAL_SEGMENT_NAME_MAX], path[PATH_MAX];
        uint64_t *seqs = NULL;
        WalSegmentInfo info;
        size_t n = 0;
        int fd, r;

        r = list_segments(w, &seqs, &n, errbuf, errbuf_size);
        if (r < 0)
                return r;
        w->seq = 0;
        w->next_lsn = first_lsn;
        if (n == 0)
                goto finish;
        w->sealed = calloc(n, sizeof *w->sealed);
        if (!w->sealed) {
                r = -ENOMEM;
                goto finish;
        }
        w->n_sealed_alloc = n;
        for (size_t i = 0; i < n; i++) {
                WalSegment *s = &w->sealed[i];

                if (i > 0 && seqs[i] != seqs[i - 1] + 1) {
                        set_error(errbuf, errbuf_size,
                                  "%s: journal segment %s is missing (found %" PRIu64
                                  " segments, %016" PRIx64 " to %016" PRIx64 ")",
                                  w->dir, wal_segment_name(seqs[i - 1] + 1, name), (uint64_t) n, seqs[0],
                                  seqs[n - 1]);
                        r = -EBADMSG;
                        goto finish;
                }
                r = read_header(w, seqs[i], s, errbuf, errbuf_size);
                if (r < 0)
                        goto finish;
                w->n_sealed++;
                if (i > 0) {
                        WalSegment *p = &w->sealed[i - 1];
                        uint64_t cap = (p->file_size - WAL_HEADER_SIZE) / WAL_RECORD_SIZE;

                        if (s->first_lsn < p->first_lsn || s->first_lsn - p->first_lsn > cap) {
                                set_error(errbuf, errbuf_size,
                                          "%s/%s: the header says its first record is %" PRIu64
                                          ", which does not follow segment %016" PRIx64
                                          " (first record %" PRIu64 ", room for %" PRIu64 ")",
                                          w->dir, wal_segment_name(s->seq, name), s->first_lsn, p->seq,
                                          p->first_lsn, cap);
                                r = -EBADMSG;
                                goto finish;
                        }
                        p->records = s->first_lsn - p->first_lsn;
                }
        }

        /* The last one: its records (up to its last valid or damaged one) are what the journal
         * holds; a torn tail stays behind. */
        snprintf(path, sizeof path, "%s/%s", w->dir, wal_segment_name(seqs[n - 1], name));
        fd = openat(w->dir_fd, name, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                r = -errno;
                set_error(errbuf, errbuf_size, "cannot open %s: %s", path, strerror(-r));
                goto finish;
        }
        r = segment_scan_fd(fd, path, seqs[n - 1], 0, UINT64_MAX, NULL, NULL, &info, NULL, errbuf,
                            errbuf_size);
        if (r >= 0 && fdatasync(fd) < 0) {
                r = -errno;
                set_error(errbuf, errbuf_size, "cannot sync %s: %s", path, strerror(-r));
        }
        close(fd);
        if (r < 0)
                goto finish;
        /* and its name: the previous run may have been killed before it synced the directory */
        if (fsync(w->dir_fd) < 0) {
                r = -errno;
                set_error(errbuf, errbuf_size, "cannot sync the directory %s: %s", w->dir, strerror(-r));
                goto finish;
        }
        w->sealed[n - 1].records = info.records;
        w->seq = w->replay_last_seq = seqs[n - 1];
        w->next_lsn = info.first_lsn + info.records;
        if (info.records == 0) {
                /* It holds nothing: the fresh segment replaces it (same number, same first lsn),
                 * so restarts without traffic do not pile up preallocated segments. */
                if (unlinkat(w->dir_fd, name, 0) < 0) {
                        r = -errno;
                        set_error(errbuf, errbuf_size, "cannot delete %s: %s", path, strerror(-r));
                        goto finish;
                }
                w->n_sealed--;
                w->seq = w->replay_last_seq = seqs[n - 1] - 1;
                if (w->n_sealed == 0)
                        w->replay_last_seq = 0;
        }
finish:
        free(seqs);
        if (r == -ENOMEM)
                set_error(errbuf, errbuf_size, "out of memory");
        return r;
}

int wal_open(const char *dir, const WalOptions *o, Wal **ret, char *errbuf, size_t errbuf_size) {
        WalOptions defaults = {};
        Wal *w;
        int r;

        if (!dir || !ret)
                return -EINVAL;
        if (!o)
                o = &defaults;
        if (o->segment_size != 0 &&
            (o->segment_size < WAL_SEGMENT_SIZE_MIN || o->segment_size > WAL_SEGMENT_SIZE_MAX)) {
                set_error(errbuf, errbuf_size,
                          "journal segment size %" PRIu64 " is not between %d and %llu bytes",
                          o->segment_size, WAL_SEGMENT_SIZE_MIN, WAL_SEGMENT_SIZE_MAX);
                return -EINVAL;
        }
        (void) pthread_once(&crc_once, crc_table_init);

        w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        *w = (Wal){
                .dir = strdup(dir),
                .dir_fd = -EBADF,
                .lock_fd = -EBADF,
                .fd = -EBADF,
                .spare_fd = -EBADF,
                .segment_size = o->segment_size ? o->segment_size : WAL_SEGMENT_SIZE_DEFAULT,
                .allocate = o->allocate,
                .start_write = o->start_write,
                .page_size = (size_t) sysconf(_SC_PAGESIZE),
                .write_appends = o->write_appends,
        };
        if (w->write_appends)
                w->zeros = calloc(1, WAL_ZERO_CHUNK);
        if (!w->dir || (w->write_appends && !w->zeros)) {
                r = -ENOMEM;
                set_error(errbuf, errbuf_size, "out of memory");
                goto fail;
        }
        w->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (w->dir_fd < 0) {
                r = -errno;
                set_error(errbuf, errbuf_size, "cannot open the journal directory %s: %s", dir,
                          strerror(-r));
                goto fail;
        }
        w->lock_fd = openat(w->dir_fd, WAL_LOCK_NAME, O_RDWR | O_CREAT | O_CLOEXEC, WAL_FILE_MODE);
        if (w->lock_fd < 0) {
                r = -errno;
                set_error(errbuf, errbuf_size, "cannot open %s/" WAL_LOCK_NAME ": %s", dir, strerror(-r));
                goto fail;
        }
        if (flock(w->lock_fd, LOCK_EX | LOCK_NB) < 0) {
                r = errno == EWOULDBLOCK ? -EBUSY : -errno;
                set_error(errbuf, errbuf_size, "cannot lock %s/" WAL_LOCK_NAME ": %s", dir,
                          r == -EBUSY ? "the journal is in use by another process" : strerror(-r));
                goto fail;
        }
        r = load_segments(w, o->first_lsn ? o->first_lsn : 1, errbuf, errbuf_size);
        if (r < 0)
                goto fail;
        /* A fresh current segment, then the next one in advance. On a full disk the journal
         * opens without them, as a running one is once its segments are full and no next one
         * can be made: appends fail with -ENOSPC, and wal_prepare() makes them once there is
         * room. w->error keeps the reason. Any other failure fails the open. */
        r = rotate(w);
        if (r >= 0)
                r = prepare_sized(w, w->segment_size);
        if (r < 0 && !no_room(r)) {
                char name[WAL_SEGMENT_NAME_MAX];

                set_error(errbuf, errbuf_size, "%s", w->error);
                if (w->map) /* the fresh segment, still empty: a failed open leaves nothing behind */
                        (void) unlinkat(w->dir_fd, wal_segment_name(w->seq, name), 0);
                goto fail;
        }
        w->rotations = 0;
        if (r >= 0)
                w->error[0] = 0;
        *ret = w;
        return 0;
fail:
        wal_close(w);
        return r;
}

Wal *wal_close(Wal *w) {
        if (!w)
                return NULL;
        spare_drop(w, true);
        if (w->map)
                munmap(w->map, w->map_len);
        if (w->fd >= 0)
                close(w->fd);
        if (w->lock_fd >= 0)
                close(w->lock_fd); /* releases the flock */
        if (w->dir_fd >= 0)
                close(w->dir_fd);
        free(w->sealed);
        free(w->staging);
        free(w->zeros);
        free(w->dir);
        free(w);
        return NULL;
}

int wal_replay(Wal *w, uint64_t after_lsn, WalRecordFunc cb, void *userdata) {
        char name[WAL_SEGMENT_NAME_MAX], path[PATH_MAX];

        if (!w)
                return -EINVAL;
        w->error[0] = 0;
        w->damage = (WalDamage){};
        for (size_t i = 0; i < w->n_sealed && w->sealed[i].seq <= w->replay_last_seq; i++) {
                const WalSegment *s = &w->sealed[i];
                WalSegmentInfo info;
                int fd, r;

                if (s->records > 0 && s->first_lsn + s->records - 1 <= after_lsn)
                        continue; /* the checkpoint has all of it */
                snprintf(path, sizeof path, "%s/%s", w->dir, wal_segment_name(s->seq, name));
                fd = openat(w->dir_fd, name, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        return wal_set_error(w, -errno, "cannot open %s: %s", path, strerror(errno));
                r = segment_scan_fd(fd, path, s->seq, after_lsn, s->records, cb, userdata, &info, &w->damage,
                                    w->error, sizeof w->error);
                close(fd);
                if (r < 0)
                        return r;
                if (info.first_lsn != s->first_lsn || info.records != s->records)
                        return wal_set_error(w, -EBADMSG,
                                             "%s: the file has room for %" PRIu64 " records, but the "
                                             "journal held %" PRIu64 " there when it was opened: the "
                                             "journal is corrupt",
                                             path, info.capacity, s->records);
        }
        return 0;
}

void wal_replay_damage(const Wal *w, WalDamage *ret) {
        *ret = w ? w->damage : (WalDamage){};
}

/* Asks the kernel to start writing len bytes of the current segment at off to disk, without
 * waiting. Advisory: an error shows at the next sync. */
static void start_write(Wal *w, uint64_t off, uint64_t len) {
        if (w->start_write)
                w->start_write(w->fd, (off_t) off, (off_t) len);
        else
                (void) sync_file_range(w->fd, (off_t) off, (off_t) len, SYNC_FILE_RANGE_WRITE);
}

/* Every WAL_WRITEBACK_CHUNK bytes appended, asks the kernel to start writing the whole chunks
 * appended to disk, without waiting: advisory (an error shows at the next sync), one system
 * call per ~43700 records. */
static void writeback_start(Wal *w) {
        size_t from, to;

        if (w->count - w->started < WAL_WRITEBACK_CHUNK / WAL_RECORD_SIZE || w->count <= w->synced)
                return;
        from = (WAL_HEADER_SIZE + (size_t) MAX(w->started, w->synced) * WAL_RECORD_SIZE) &
               ~((size_t) WAL_WRITEBACK_CHUNK - 1);
        to = (WAL_HEADER_SIZE + (size_t) w->count * WAL_RECORD_SIZE) & ~((size_t) WAL_WRITEBACK_CHUNK - 1);
        if (to <= from)
                return;
        start_write(w, from, to - from);
        /* the records that begin before to (the next range starts at to) */
        w->started = (to - WAL_HEADER_SIZE + WAL_RECORD_SIZE - 1) / WAL_RECORD_SIZE;
}

int wal_pwrite_all(int fd, const void *data, size_t n, off_t off) {
        const uint8_t *p = data;

        while (n > 0) {
                ssize_t k = pwrite(fd, p, n, off);

                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                if (k == 0)
                        return -EIO;
                p += k;
                n -= (size_t) k;
                off += k;
        }
        return 0;
}

/* write_appends: zero-fills the current segment's blocks from zeroed_to up to WAL_ZERO_AHEAD
 * past the end of the records (never below it), a chunk at a time, and starts writing each to
 * disk without waiting. Advisory: a block left unwritten only makes a sync slower. */
static void zero_ahead(Wal *w) {
        uint64_t end = WAL_HEADER_SIZE + w->count * WAL_RECORD_SIZE;
        uint64_t target = end + WAL_ZERO_AHEAD;

        if (w->zeroed_to < end) /* a batch larger than the lead: its own bytes wrote its blocks */
                w->zeroed_to = (end + w->page_size - 1) & ~((uint64_t) w->page_size - 1);
        if (target > w->map_len)
                target = w->map_len;
        while (w->zeroed_to < target) {
                uint64_t len = w->map_len - w->zeroed_to < WAL_ZERO_CHUNK ? w->map_len - w->zeroed_to
                                                                          : WAL_ZERO_CHUNK;

                if (wal_pwrite_all(w->fd, w->zeros, (size_t) len, (off_t) w->zeroed_to) < 0)
                        break;
                start_write(w, w->zeroed_to, len);
                w->zeroed_to += len;
        }
}

/* write_appends: asks the kernel to start writing the blocks of the len bytes just written at
 * off, without waiting. The sync that covers them runs on the committer thread, which is often
 * still busy with the previous batches' sync, or takes tens of µs to wake (a cross-CPU wake-up
 * of a virtual machine's idle vCPU: 35 µs median, measured under 16 x 16 load). Started here,
 * the blocks are written (or on their way) when that sync begins, and it mostly waits for the
 * disk's cache flush alone: one device round trip instead of two (fdatasync() of 10 KB on this
 * machine's virtio disk: 90 µs, 44 µs when the blocks were written beforehand). Measured: 8-15 %
 * more HITs/s with --sync=always at 16 x 16 (STORE-DESIGN.md, "Durability"). Costs one system call per
 * batch on the event loop, and the unfinished last block is written once per batch instead of
 * once per sync (157 against 138 bytes written to the disk per HIT). Advisory: a failed write
 * shows at the sync. */
static void writeout_start(Wal *w, uint64_t off, size_t len) {
        uint64_t from = off & ~((uint64_t) w->page_size - 1);
        uint64_t to = (off + len + w->page_size - 1) & ~((uint64_t) w->page_size - 1);

        start_write(w, from, to - from);
}

/* write_appends: encodes the records into the staging buffer and writes them at the end of
 * the current segment. On failure, zeros over whatever part was written (so that no record of
 * a failed append can be replayed) and returns -errno. */
static int append_write(Wal *w, const CounterRecord *records, size_t n) {
        size_t len = n * WAL_RECORD_SIZE;
        off_t off = (off_t) (WAL_HEADER_SIZE + w->count * WAL_RECORD_SIZE);
        int r;

        if (len > w->staging_cap) {
                uint8_t *b = realloc(w->staging, len);

                if (!b)
                        return wal_set_error(w, -ENOMEM, "out of memory");
                w->staging = b;
                w->staging_cap = len;
        }
        for (size_t i = 0; i < n; i++)
                record_encode(w->staging + i * WAL_RECORD_SIZE, &records[i], w->next_lsn + i);
        r = wal_pwrite_all(w->fd, w->staging, len, off);
        if (r < 0) {
                memset(w->staging, 0, len);
                (void) wal_pwrite_all(w->fd, w->staging, len, off); /* best effort */
                return wal_set_error(w, r, "cannot write to %s/wal-%016" PRIx64 WAL_NAME_SUFFIX ": %s",
                                     w->dir, w->seq, strerror(-r));
        }
        writeout_start(w, (uint64_t) off, len);
        return 0;
}

int wal_append(Wal *w, const CounterRecord *records, size_t n) {
        uint8_t *p;
        int r;

        if (!w || (!records && n > 0))
                return -EINVAL;
        if (n == 0)
                return 0;
        if (n > (WAL_SEGMENT_SIZE_MAX - WAL_HEADER_SIZE) / WAL_RECORD_SIZE)
                return wal_set_error(w, -EMSGSIZE, "%zu records do not fit in one journal segment", n);
        if (n > w->capacity - w->count) {
                /* a batch larger than a segment gets a larger one of its own: all or none, still */
                r = rotate_sized(w, WAL_HEADER_SIZE + (uint64_t) n * WAL_RECORD_SIZE);
                if (r < 0)
                        return r;
        }
        if (w->write_appends) {
                r = append_write(w, records, n);
                if (r < 0)
                        return r;
        } else {
                p = w->map + WAL_HEADER_SIZE + w->count * WAL_RECORD_SIZE;
                for (size_t i = 0; i < n; i++, p += WAL_RECORD_SIZE)
                        record_encode(p, &records[i], w->next_lsn + i);
        }
        w->count += n;
        w->next_lsn += n;
        w->appended += n;
        if (w->write_appends)
                zero_ahead(w); /* append_write() started the records' writing */
        else
                writeback_start(w);
        return 0;
}

int wal_sync(Wal *w) {
        uint64_t start;
        int r;

        if (!w)
                return -EINVAL;
        if (w->count <= w->synced && !w->dir_dirty)
                return 0; /* nothing to sync: not counted, no clock read */
        start = clock_usec(CLOCK_MONOTONIC);
        if (w->count > w->synced) {
                r = current_flush(w);
                if (r < 0)
                        return r;
        }
        if (w->dir_dirty) {
                r = dir_sync(w);
                if (r < 0)
                        return r;
        }
        w->syncs++;
        w->sync_usec += clock_usec(CLOCK_MONOTONIC) - start;
        return 0;
}

void wal_current(const Wal *w, int *ret_fd, uint64_t *ret_seq, uint64_t *ret_last_lsn) {
        if (ret_fd)
                *ret_fd = w->fd;
        if (ret_seq)
                *ret_seq = w->seq;
        if (ret_last_lsn)
                *ret_last_lsn = w->next_lsn - 1;
}

int wal_rotate(Wal *w) {
        int r;

        if (!w)
                return -EINVAL;
        if (w->count == 0)
                return 0;
        r = rotate(w);
        return r < 0 ? r : 1;
}

size_t wal_sealed(const Wal *w, uint64_t *ret_first, uint64_t *ret_last) {
        if (!w || w->n_sealed == 0)
                return 0;
        if (ret_first)
                *ret_first = w->sealed[0].seq;
        if (ret_last)
                *ret_last = w->sealed[w->n_sealed - 1].seq;
        return w->n_sealed;
}

int wal_sealed_last_lsn(const Wal *w, uint64_t seq, uint64_t *ret) {
        const WalSegment *s = w ? sealed_find(w, seq) : NULL;

        if (!s)
                return -ENOENT;
        if (ret)
                *ret = s->first_lsn + s->records - 1;
        return 0;
}

int wal_release(Wal *w, uint64_t up_to_seq) {
        char name[WAL_SEGMENT_NAME_MAX];
        size_t k = 0;
        int r = 0;

        if (!w)
                return -EINVAL;
        /* without a current segment (opened on a full disk) w->seq is the last sealed one */
        if (up_to_seq > w->seq || (w->map && up_to_seq == w->seq))
                return wal_set_error(w, -EINVAL,
                                     "segment %016" PRIx64 " is not sealed (the current one is %016" PRIx64
                                     ")",
                                     up_to_seq, w->seq);
        while (k < w->n_sealed && w->sealed[k].seq <= up_to_seq) {
                if (unlinkat(w->dir_fd, wal_segment_name(w->sealed[k].seq, name), 0) < 0 &&
                    errno != ENOENT) {
                        r = wal_set_error(w, -errno, "cannot delete %s/%s: %s", w->dir, name,
                                          strerror(errno));
                        break;
                }
                k++;
        }
        if (k > 0) {
                memmove(w->sealed, w->sealed + k, (w->n_sealed - k) * sizeof *w->sealed);
                w->n_sealed -= k;
        }
        if (k > 0 && fsync(w->dir_fd) < 0 && r >= 0)
                r = wal_set_error(w, -errno, "cannot sync the directory %s: %s", w->dir, strerror(errno));
        return r < 0 ? r : (int) k;
}

int wal_get_stats(const Wal *w, WalStats *ret) {
        WalStats s = {};

        if (!w || !ret)
                return -EINVAL;
        for (size_t i = 0; i < w->n_sealed; i++) {
                s.bytes += w->sealed[i].file_size;
                s.records += w->sealed[i].records;
        }
        s.sealed = w->n_sealed;
        s.segments = w->n_sealed + (w->map ? 1 : 0);
        s.current_ready = w->map != NULL;
        s.bytes += w->map_len;
        s.records += w->count;
        s.current_seq = w->seq;
        s.current_records = w->count;
        s.current_capacity = w->capacity;
        s.next_lsn = w->next_lsn;
        s.spare_ready = w->spare_fd >= 0;
        s.appended = w->appended;
        s.syncs = w->syncs;
        s.sync_usec = w->sync_usec;
        s.rotations = w->rotations;
        *ret = s;
        return 0;
}

const char *wal_error(const Wal *w) {
        return w ? w->error : "";
}
