/* SPDX-License-Identifier: MIT */
/*
 * Writes tests/data/store/v1/data.mdb, the pinned version-1 database (see
 * tests/data/store/README): `make tests/store/make-fixture-v1 && tests/store/make-fixture-v1 DIR`,
 * then copy DIR/data.mdb. It writes with the version-1 store kept for tests (v1-store.c). Deterministic: a
 * fixed clock, fixed rules and actors. Rerun it only to make a fixture of a NEW format version; v1 must stay
 * as committed.
 */

#include <stdio.h>
#include <string.h>

#include "v1-store.h"
#include "fixture-v1.h"

static int hit(V1Store *s, const uint8_t *rule, const char *actor, size_t actor_len, uint64_t limit,
               uint64_t reset, unsigned times) {
        for (unsigned i = 0; i < times; i++) {
                V1StoreHit h = { .rule_id = rule,
                                 .actor = actor,
                                 .actor_len = actor_len,
                                 .credit_limit = limit,
                                 .reset_seconds = reset };
                int r = v1_store_apply(s, &h, 1, FIXTURE_T0);
                if (r < 0)
                        return r;
        }
        return 0;
}

int main(int argc, char **argv) {
        V1StoreOptions o = { .sync = V1_STORE_SYNC_ALWAYS,
                             .map_size = FIXTURE_MAP_SIZE,
                             .map_size_max = FIXTURE_MAP_SIZE * 8 };
        char err[512] = "", long_actor[FIXTURE_LONG_ACTOR_LEN];
        V1Store *s = NULL;
        int r;

        if (argc != 2) {
                fprintf(stderr, "usage: %s NEW-DIRECTORY\n", argv[0]);
                return 2;
        }
        o.path = argv[1];
        r = v1_store_open(&o, &s, err, sizeof err);
        if (r < 0) {
                fprintf(stderr, "v1_store_open: %s\n", err);
                return 1;
        }
        memset(long_actor, 'x', sizeof long_actor);
        r = hit(s, FIXTURE_RULE_A, NULL, 0, 10, 60, 3);
        if (r == 0)
                r = hit(s, FIXTURE_RULE_A, "alice", 5, 5, 3600, 1);
        if (r == 0)
                r = hit(s, FIXTURE_RULE_B, long_actor, sizeof long_actor, 2, 86400, 3);
        if (r == 0)
                r = hit(s, FIXTURE_RULE_B, "bob", 3, 4, 1, 2);
        v1_store_close(s);
        if (r < 0) {
                fprintf(stderr, "v1_store_apply: %s\n", strerror(-r));
                return 1;
        }
        return 0;
}
