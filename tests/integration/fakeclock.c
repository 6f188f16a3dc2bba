/* SPDX-License-Identifier: MIT */
/*
 * A controlled wall clock for the integration tests (harness.FakeClock), preloaded into divvyd
 * (LD_PRELOAD), and into redis-server for the Redis store: while the 8 bytes of
 * $FAKECLOCK_FILE (a little-endian int64, ns since the epoch) are above 0, CLOCK_REALTIME and
 * gettimeofday() (Redis's TIME) read exactly that; at 0, or without the file, the real clock.
 * Every other clock (sd-event's CLOCK_MONOTONIC timers) is the real one. The test compiles it
 * (cc -shared) and writes the file between requests.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const volatile int64_t *frozen;
static int (*real_clock_gettime)(clockid_t, struct timespec *);
static int (*real_gettimeofday)(struct timeval *, void *);

__attribute__((constructor)) static void fakeclock_init(void) {
        const char *path = getenv("FAKECLOCK_FILE");
        void *p;
        int fd;

        real_clock_gettime = (int (*)(clockid_t, struct timespec *)) dlsym(RTLD_NEXT, "clock_gettime");
        real_gettimeofday = (int (*)(struct timeval *, void *)) dlsym(RTLD_NEXT, "gettimeofday");
        if (!path || (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
                return;
        p = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
        (void) close(fd);
        if (p != MAP_FAILED)
                frozen = p;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
        int64_t v = frozen ? *frozen : 0;

        if ((clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE) && v > 0) {
                ts->tv_sec = (time_t) (v / 1000000000);
                ts->tv_nsec = (long) (v % 1000000000);
                return 0;
        }
        return real_clock_gettime ? real_clock_gettime(clock, ts) : -1;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
        int64_t v = frozen ? *frozen : 0;

        if (v > 0 && tv) {
                tv->tv_sec = (time_t) (v / 1000000000);
                tv->tv_usec = (suseconds_t) (v % 1000000000 / 1000);
                return 0;
        }
        return real_gettimeofday ? real_gettimeofday(tv, tz) : -1;
}
