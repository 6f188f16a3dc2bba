/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the parsers of the per-call-parameter commands (client-limits.c). The first
 * byte picks the command (CL.THROTTLE or one of the four RL.*, any case), the rest is its
 * arguments separated by "\n" (any other byte, NUL included, belongs to an argument). Checks:
 * a failure carries a one-line printable error; a success carries a peer's algorithm, a key
 * inside the input and an operation the store knows, and three calls in a row on one state
 * (the peers' arithmetic, under the sanitizers) give replies within their bounds.
 */

#include <string.h>

#include "fuzz.h"
#include "core/client-limits.h"

#define ARGS_MAX 12

static void check_error(const char *err) {
        fuzz_check(err != NULL);
        fuzz_check(strlen(err) > 0 && strlen(err) < CLIENT_LIMIT_ERROR_MAX);
        for (const char *p = err; *p; p++)
                fuzz_check(*p >= 0x20 && *p < 0x7f);
}

static void check_ok(const ClientLimit *cl, const uint8_t *data, size_t size) {
        AlgoState st = { 0, 0 };
        AlgoResult res;
        uint64_t now = UINT64_C(1764000000000000);

        fuzz_check(cl->key.ptr != NULL);
        fuzz_check(cl->key.len == 0 ||
                   ((const uint8_t *) cl->key.ptr >= data && cl->key.len <= size &&
                    (size_t) ((const uint8_t *) cl->key.ptr - data) <= size - cl->key.len));
        fuzz_check(cl->algo.algorithm == ALGORITHM_TOKEN_BUCKET);
        fuzz_check(cl->algo.peer == (cl->kind == CLIENT_LIMIT_THROTTLE ? ALGO_PEER_CELL : ALGO_PEER_SMYTE));
        fuzz_check(cl->op == ALGO_TAKE || cl->op == ALGO_PEEK);
        fuzz_check(cl->op != ALGO_PEEK || cl->count == 0);
        for (int round = 0; round < 3; round++) {
                algo_apply(&cl->algo, cl->op, cl->count, cl->at_usec ? cl->at_usec : now, &st, &res);
                fuzz_check(st.w0 <= ALGO_W0_MAX);
                if (cl->kind == CLIENT_LIMIT_THROTTLE) {
                        int64_t out[CLIENT_LIMIT_THROTTLE_REPLY_LEN];
                        const char *err = client_limit_throttle_error(&res);

                        if (err) {
                                check_error(err);
                                continue;
                        }
                        fuzz_check(client_limit_format_throttle(cl, &res, out) ==
                                   CLIENT_LIMIT_THROTTLE_REPLY_LEN);
                        fuzz_check(out[0] == 0 || out[0] == 1);
                        fuzz_check(out[0] == 1 || out[3] == -1);
                } else {
                        int64_t v = client_limit_reduce_reply(cl, &res);

                        fuzz_check(cl->interval_usec == 0);
                        fuzz_check(v >= 0 && (uint64_t) v <= res.limit); /* 0 to max tokens */
                }
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static const char *const commands[] = { "RL.REDUCE", "rl.get", "Rl.PReduce", "rl.pget" };
        ProtoSlice argv[ARGS_MAX];
        int argc = 0;
        unsigned which;
        size_t start;
        ClientLimit cl;
        const char *err = NULL;
        int r;

        if (size < 1)
                return 0;
        which = data[0] % 5;
        start = 1;
        for (size_t i = 1; i <= size && argc < ARGS_MAX; i++)
                if (i == size || data[i] == '\n') {
                        argv[argc++] = (ProtoSlice){ (const char *) data + start, i - start };
                        start = i + 1;
                }
        if (which == 0)
                r = client_limit_parse_throttle(argc, argv, &cl, &err);
        else
                r = client_limit_parse_reduce(commands[which - 1], argc, argv, &cl, &err);
        fuzz_check(r == 0 || r == -EINVAL);
        if (r < 0)
                check_error(err);
        else
                check_ok(&cl, data, size);
        return 0;
}
