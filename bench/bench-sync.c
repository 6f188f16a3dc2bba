/* SPDX-License-Identifier: MIT */

/*
 * Micro-benchmark: the cost of one --sync=always group commit, by the way it is written.
 * Standalone (no divvyd code): it asks whether journal appends written with O_DIRECT from a
 * user-space buffer commit faster than today's page-cache write + fdatasync().
 *
 *   bench-sync [--unwritten] [--appender] [--commits N] [--bytes B] [--rounds R] [DIR]
 *
 * Each commit appends B bytes (default 10,000: about one 16 x 16 batch of records, 40 bytes
 * each) at the end of the previous one in a 64 MiB file, preallocated and (unless
 * --unwritten) zero-filled and synced beforehand, as wal.c's zero-fill ahead leaves the blocks
 * a sync writes. Methods, each on a fresh file, N commits (default 2000), µs per commit:
 *   buffered+fdatasync   pwrite(B) then fdatasync()                       (today's always)
 *   buffered+RWF_DSYNC   pwritev2(B, RWF_DSYNC)
 *   direct+O_DSYNC       O_DIRECT|O_DSYNC pwrite of the 4 KiB blocks from the one holding
 *                        the commit's first byte to the one holding its last (the last,
 *                        partial block is written again by the next commit)
 *   direct+RWF_DSYNC     the same blocks, O_DIRECT descriptor, pwritev2(RWF_DSYNC)
 *   direct+fdatasync     the same blocks, O_DIRECT pwrite then fdatasync()
 * --appender: meanwhile a second thread pwrite()s 640 bytes (16 records) at a time into the
 * file's second half, about every 20 µs, as the event loop appends while a buffered commit's
 * sync runs (a direct commit's event loop would only copy into the user-space buffer).
 * The methods run in turn, R rounds (default 5) of each, so that they share the minutes of a
 * shared machine: each round's line, then each method's median over the rounds.
 * DIR defaults to /var/tmp (a real disk); the file is removed afterwards.
 */

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define FILE_SIZE   (64UL << 20)
#define BLOCK       4096UL
#define ZERO_CHUNK  (1UL << 20)
#define COMMITS_DEF 2000
#define BYTES_DEF   10000
#define ROUNDS_DEF  5
#define ROUNDS_MAX  50

typedef enum {
        M_BUF_FDATASYNC,
        M_BUF_RWF_DSYNC,
        M_DIRECT_ODSYNC,
        M_DIRECT_RWF_DSYNC,
        M_DIRECT_FDATASYNC,
        _M_MAX,
} Method;

static const char *const method_name[_M_MAX] = {
        "buffered+fdatasync", "buffered+RWF_DSYNC", "direct+O_DSYNC", "direct+RWF_DSYNC", "direct+fdatasync",
};

static volatile bool appender_stop;

static void *appender(void *userdata) {
        int fd = *(int *) userdata;
        static unsigned char chunk[640];
        uint64_t off = FILE_SIZE / 2;
        struct timespec pause = { .tv_nsec = 20000 };

        while (!appender_stop && off + sizeof(chunk) <= FILE_SIZE) {
                if (pwrite(fd, chunk, sizeof(chunk), (off_t) off) != (ssize_t) sizeof(chunk))
                        break;
                off += sizeof(chunk);
                nanosleep(&pause, NULL);
        }
        return NULL;
}

static uint64_t now_nsec(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

        return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;

        return x < y ? -1 : x > y;
}

static double median(double *v, unsigned n) {
        qsort(v, n, sizeof(*v), cmp_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Creates path: 64 MiB preallocated, zero-filled and synced unless unwritten. */
static int prepare(const char *path, bool unwritten) {
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        int r;

        if (fd < 0)
                return -errno;
        r = posix_fallocate(fd, 0, FILE_SIZE);
        if (r == 0 && !unwritten) {
                char *z = calloc(1, ZERO_CHUNK);

                if (!z)
                        r = ENOMEM;
                for (size_t off = 0; r == 0 && off < FILE_SIZE; off += ZERO_CHUNK)
                        if (pwrite(fd, z, ZERO_CHUNK, (off_t) off) != (ssize_t) ZERO_CHUNK)
                                r = errno ? errno : EIO;
                free(z);
        }
        if (r == 0 && fsync(fd) < 0)
                r = errno;
        close(fd);
        return -r;
}

static int run(const char *path, Method m, unsigned commits, size_t bytes, bool unwritten, bool concurrent,
               uint64_t *lat) {
        bool direct = m >= M_DIRECT_ODSYNC;
        int flags = O_RDWR | O_CLOEXEC | (direct ? O_DIRECT : 0) | (m == M_DIRECT_ODSYNC ? O_DSYNC : 0);
        size_t cap = (bytes / BLOCK + 2) * BLOCK;
        unsigned char *buf = NULL;
        uint64_t off = 0;
        pthread_t thread;
        bool threaded = false;
        int fd, afd = -1, r = 0;

        r = prepare(path, unwritten);
        if (r < 0)
                return r;
        fd = open(path, flags);
        if (fd < 0)
                return -errno;
        if (posix_memalign((void **) &buf, BLOCK, cap) != 0) {
                close(fd);
                return -ENOMEM;
        }
        memset(buf, 0, cap);
        if (concurrent && !direct) {
                afd = open(path, O_RDWR | O_CLOEXEC);
                appender_stop = false;
                threaded = afd >= 0 && pthread_create(&thread, NULL, appender, &afd) == 0;
        }
        for (unsigned i = 0; i < commits && r == 0; i++) {
                uint64_t start = off & ~(BLOCK - 1), end = off + bytes, t0;
                ssize_t n;

                if (end > FILE_SIZE) {
                        r = -EFBIG;
                        break;
                }
                /* The buffer holds blocks [start, ...): the tail block of the previous commit
                 * is kept at its front, as a journal writer would keep it. */
                memset(buf + (off - start), (int) (i & 0xff) | 1, bytes);
                t0 = now_nsec();
                if (!direct) {
                        struct iovec v = { .iov_base = buf + (off - start), .iov_len = bytes };

                        n = m == M_BUF_RWF_DSYNC ? pwritev2(fd, &v, 1, (off_t) off, RWF_DSYNC)
                                                 : pwrite(fd, v.iov_base, bytes, (off_t) off);
                        if (n == (ssize_t) bytes && m == M_BUF_FDATASYNC && fdatasync(fd) < 0)
                                n = -1;
                        n = n == (ssize_t) bytes ? 0 : -1;
                } else {
                        size_t len = ((end + BLOCK - 1) & ~(BLOCK - 1)) - start;
                        struct iovec v = { .iov_base = buf, .iov_len = len };

                        n = m == M_DIRECT_RWF_DSYNC ? pwritev2(fd, &v, 1, (off_t) start, RWF_DSYNC)
                                                    : pwrite(fd, buf, len, (off_t) start);
                        if (n == (ssize_t) len && m == M_DIRECT_FDATASYNC && fdatasync(fd) < 0)
                                n = -1;
                        n = n == (ssize_t) len ? 0 : -1;
                }
                lat[i] = now_nsec() - t0;
                if (n < 0) {
                        r = errno ? -errno : -EIO;
                        break;
                }
                off = end;
                if (direct) {
                        /* Keep the (partial) block holding the new end at the buffer's front. */
                        uint64_t nstart = off & ~(BLOCK - 1);

                        memmove(buf, buf + (nstart - start), BLOCK);
                }
        }
        if (threaded) {
                appender_stop = true;
                pthread_join(thread, NULL);
        }
        if (afd >= 0)
                close(afd);
        free(buf);
        close(fd);
        unlink(path);
        return r;
}

int main(int argc, char **argv) {
        const char *dir = "/var/tmp";
        unsigned commits = COMMITS_DEF;
        size_t bytes = BYTES_DEF;
        bool unwritten = false, concurrent = false;
        char path[4096];
        unsigned rounds = ROUNDS_DEF;
        static double mean[_M_MAX][ROUNDS_MAX], p50[_M_MAX][ROUNDS_MAX], p99[_M_MAX][ROUNDS_MAX];
        uint64_t *lat;

        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--unwritten") == 0)
                        unwritten = true;
                else if (strcmp(argv[i], "--appender") == 0)
                        concurrent = true;
                else if (strcmp(argv[i], "--commits") == 0 && i + 1 < argc)
                        commits = (unsigned) strtoul(argv[++i], NULL, 10);
                else if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc)
                        bytes = strtoul(argv[++i], NULL, 10);
                else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
                        rounds = (unsigned) strtoul(argv[++i], NULL, 10);
                else if (argv[i][0] == '-') {
                        fprintf(stderr, "usage: bench-sync [--unwritten] [--appender] [--commits N] "
                                        "[--bytes B] [--rounds R] [DIR]\n");
                        return 2;
                } else
                        dir = argv[i];
        }
        if (rounds == 0 || rounds > ROUNDS_MAX || commits == 0 || bytes == 0 ||
            (uint64_t) commits * bytes > FILE_SIZE - BLOCK) {
                fprintf(stderr, "bench-sync: commits x bytes must fit in %lu bytes\n", FILE_SIZE - BLOCK);
                return 2;
        }
        lat = calloc(commits, sizeof(*lat));
        if (!lat)
                return 1;
        snprintf(path, sizeof(path), "%s/bench-sync.%ld", dir, (long) getpid());
        printf("%u commits of %zu bytes, %s blocks, in %s%s\n", commits, bytes,
               unwritten ? "unwritten" : "zero-filled", dir, concurrent ? ", with an appender thread" : "");
        printf("%-5s %-20s %9s %9s %9s %9s\n", "round", "method", "mean_us", "p50_us", "p99_us", "max_us");
        for (unsigned k = 0; k < rounds; k++)
                for (Method m = 0; m < _M_MAX; m++) {
                        uint64_t sum = 0;
                        int r = run(path, m, commits, bytes, unwritten, concurrent, lat);

                        if (r < 0) {
                                printf("%-5u %-20s failed: %s\n", k + 1, method_name[m], strerror(-r));
                                return 1;
                        }
                        for (unsigned i = 0; i < commits; i++)
                                sum += lat[i];
                        qsort(lat, commits, sizeof(*lat), cmp_u64);
                        mean[m][k] = (double) sum / commits / 1000.0;
                        p50[m][k] = (double) lat[commits / 2] / 1000.0;
                        p99[m][k] = (double) lat[commits * 99 / 100] / 1000.0;
                        printf("%-5u %-20s %9.1f %9.1f %9.1f %9.1f\n", k + 1, method_name[m], mean[m][k],
                               p50[m][k], p99[m][k], (double) lat[commits - 1] / 1000.0);
                }
        printf("median over %u rounds:\n%-20s %9s %9s %9s\n", rounds, "method", "mean_us", "p50_us",
               "p99_us");
        for (Method m = 0; m < _M_MAX; m++)
                printf("%-20s %9.1f %9.1f %9.1f\n", method_name[m], median(mean[m], rounds),
                       median(p50[m], rounds), median(p99[m], rounds));
        free(lat);
        return 0;
}
