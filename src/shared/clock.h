/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdint.h>
#include <time.h>

#define USEC_PER_SEC  UINT64_C(1000000)
#define USEC_PER_MSEC UINT64_C(1000)
#define NSEC_PER_USEC UINT64_C(1000)
#define NSEC_PER_SEC  UINT64_C(1000000000)

/* Microseconds on the given clock: CLOCK_MONOTONIC for deadlines and scheduling,
 * CLOCK_REALTIME only for what is persisted. clock_gettime() cannot fail for these clocks. */
static inline uint64_t clock_usec(clockid_t clock) {
        struct timespec ts;

        (void) clock_gettime(clock, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / NSEC_PER_USEC;
}

/* Nanoseconds on the given clock, for timing (the micro-benchmarks). */
static inline uint64_t clock_nsec(clockid_t clock) {
        struct timespec ts;

        (void) clock_gettime(clock, &ts);
        return (uint64_t) ts.tv_sec * NSEC_PER_SEC + (uint64_t) ts.tv_nsec;
}
