/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the snapshot reader's parser (src/store/snapshot.c), the input being a whole
 * counters.snap. The first byte picks where the input is cut into two feeds (the reader feeds
 * what each read() returns); the rest is the file. Checks: both feedings agree (result and
 * records); a failure carries a one-line sentence; a success has parsed exactly the header's
 * count of records, each with a valid algorithm and a live w0, and consumed the whole file.
 */

#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "store/snapshot.h"

typedef struct Seen {
        uint64_t n, sum;
} Seen;

static int take(const CounterRecord *r, void *userdata) {
        Seen *s = userdata;

        fuzz_check(r->algorithm < _COUNTER_ALGORITHM_MAX);
        fuzz_check(r->state.w0 > 0);
        s->n++;
        s->sum += r->id.lo ^ r->id.hi ^ r->state.w0 ^ r->state.w1;
        return 0;
}

static int parse(const uint8_t *data, size_t size, size_t cut, Seen *seen, SnapshotParser *p, char *err,
                 size_t err_size) {
        int r;

        snapshot_parser_init(p, 0, take, seen);
        r = snapshot_parser_feed(p, data, cut, err, err_size);
        if (r >= 0)
                r = snapshot_parser_feed(p, data + cut, size - cut, err, err_size);
        if (r >= 0)
                r = snapshot_parser_finish(p, err, err_size);
        return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char e1[256] = "", e2[256] = "";
        SnapshotParser p1, p2;
        Seen s1 = { 0 }, s2 = { 0 };
        size_t cut;
        int r1, r2;

        if (size < 1)
                return 0;
        cut = size > 1 ? data[0] % size : 0;
        data++, size--;
        if (cut > size)
                cut = size;
        r1 = parse(data, size, size, &s1, &p1, e1, sizeof e1);
        r2 = parse(data, size, cut, &s2, &p2, e2, sizeof e2);
        fuzz_check(r1 == r2);
        fuzz_check(r1 == 0 || r1 == -EBADMSG || r1 == -EPROTO);
        if (r1 < 0) {
                fuzz_check(strcmp(e1, e2) == 0 && e1[0] != 0 && !strchr(e1, '\n'));
                return 0;
        }
        fuzz_check(s1.n == s2.n && s1.sum == s2.sum);
        fuzz_check(p1.records == p1.info.count && s1.n == p1.info.count);
        fuzz_check(size ==
                   SNAPSHOT_HEADER_SIZE + p1.info.count * SNAPSHOT_RECORD_SIZE + SNAPSHOT_TRAILER_SIZE);
        return 0;
}
