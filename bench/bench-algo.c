/* SPDX-License-Identifier: MIT */
/* Micro-benchmark of algo_apply(): ns per TAKE 1 (a HIT) for each algorithm, over 1024 counters
 * hit in turn with the clock advancing 10 µs per hit, so that allowed and denied hits, window
 * rollovers and refills all occur (100 per 60 s: mostly denied, like a limit under attack; 10^6
 * per 60 s: mostly allowed). Prints ns/op; no pass/fail. Usage: bench-algo [N_OPS] */

#include <stdio.h>
#include <stdlib.h>

#include "core/algorithm.h"
#include "shared/clock.h"

#define N_COUNTERS 1024

static int run(const char *name, AlgoParams p, size_t n_ops) {
        static AlgoState states[N_COUNTERS];
        const char *why = NULL;
        uint64_t now = UINT64_C(1764000000) * USEC_PER_SEC, allowed = 0, t0, ns;
        AlgoResult res;

        if (algo_params_prepare(&p, &why) < 0) {
                fprintf(stderr, "bench-algo: %s: %s\n", name, why);
                return -1;
        }
        for (size_t i = 0; i < N_COUNTERS; i++)
                states[i] = (AlgoState){ 0, 0 };
        t0 = clock_nsec(CLOCK_MONOTONIC);
        for (size_t i = 0; i < n_ops; i++) {
                now += 10;
                algo_apply(&p, ALGO_TAKE, 1, now, &states[i % N_COUNTERS], &res);
                allowed += res.allowed;
        }
        ns = clock_nsec(CLOCK_MONOTONIC) - t0;
        printf("%-34s %6.1f ns/op  (%.0f%% allowed)\n", name, (double) ns / (double) n_ops,
               100.0 * (double) allowed / (double) n_ops);
        return 0;
}

int main(int argc, char **argv) {
        size_t n_ops = argc > 1 ? strtoul(argv[1], NULL, 10) : 20000000;
        static const uint64_t limits[] = { 100, 1000000 };
        int r = 0;

        for (size_t i = 0; i < 2; i++) {
                uint64_t l = limits[i];
                char name[5][64];

                snprintf(name[0], sizeof name[0], "fixed-window %ju/60s", (uintmax_t) l);
                snprintf(name[1], sizeof name[1], "sliding-window %ju/60s", (uintmax_t) l);
                snprintf(name[2], sizeof name[2], "token-bucket %ju/60s", (uintmax_t) l);
                snprintf(name[3], sizeof name[3], "token-bucket %ju/60s strict", (uintmax_t) l);
                snprintf(name[4], sizeof name[4], "token-bucket %ju/60s refill 6s", (uintmax_t) l);
                r |= run(name[0], (AlgoParams){ ALGORITHM_FIXED_WINDOW, l, 60, 0, 0, false, 0, 0 }, n_ops);
                r |= run(name[1], (AlgoParams){ ALGORITHM_SLIDING_WINDOW, l, 60, 0, 0, false, 0, 0 }, n_ops);
                r |= run(name[2], (AlgoParams){ ALGORITHM_TOKEN_BUCKET, l, 60, 0, 0, false, 0, 0 }, n_ops);
                r |= run(name[3], (AlgoParams){ ALGORITHM_TOKEN_BUCKET, l, 60, 0, 0, true, 0, 0 }, n_ops);
                r |= run(name[4], (AlgoParams){ ALGORITHM_TOKEN_BUCKET, l, 60, 0, 6, false, 0, 0 }, n_ops);
        }
        return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
