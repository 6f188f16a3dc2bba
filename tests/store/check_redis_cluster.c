/* SPDX-License-Identifier: MIT */

/* Redis Cluster routing (src/store/redis-cluster.c): hash slots against the values a real
 * redis-server gives, slot maps from CLUSTER SLOTS replies made with hiredis's own reader, and
 * every redirect form and its garbage. */

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "store/redis-cluster.h"
#include "check-run.h"

/* --- replies: a compact notation turned into RESP, fed to hiredis's reader ----------------
 *   [ ... ]   an array           123, -1   an integer
 *   nil       a nil bulk string  ''        the empty string
 *   'x y'     a string (quoted: spaces, digits)   word      a string
 *   !text     an error reply (the rest of the input is its text)
 */

#define RESP_MAX 65536 /* bytes of one test reply's RESP text */

static const char *skip_spaces(const char *p) {
        while (*p == ' ')
                p++;
        return p;
}

/* Appends the RESP of the one value at *p to out; advances *p. */
static void resp_value(const char **p, char *out, size_t size) {
        const char *s = skip_spaces(*p);
        size_t used = strlen(out);

        ck_assert_msg(*s != '\0' && *s != ']', "notation: value expected at '%s'", s);
        if (*s == '[') {
                char *inner = calloc(1, RESP_MAX);
                size_t n = 0;

                ck_assert_ptr_nonnull(inner);
                s = skip_spaces(s + 1);
                while (*s != ']') {
                        ck_assert_msg(*s != '\0', "notation: unclosed [");
                        resp_value(&s, inner, RESP_MAX);
                        s = skip_spaces(s);
                        n++;
                }
                snprintf(out + used, size - used, "*%zu\r\n%s", n, inner);
                free(inner);
                *p = s + 1;
                return;
        }
        if (*s == '\'') {
                const char *e = strchr(s + 1, '\'');

                ck_assert_ptr_nonnull(e);
                snprintf(out + used, size - used, "$%d\r\n%.*s\r\n", (int) (e - s - 1), (int) (e - s - 1),
                         s + 1);
                *p = e + 1;
                return;
        }
        size_t n = strcspn(s, " ]");
        char *end;
        long long v = strtoll(s, &end, 10);

        if (end == s + n && n > 0)
                snprintf(out + used, size - used, ":%lld\r\n", v);
        else if (n == 3 && memcmp(s, "nil", 3) == 0)
                snprintf(out + used, size - used, "$-1\r\n");
        else
                snprintf(out + used, size - used, "$%zu\r\n%.*s\r\n", n, (int) n, s);
        ck_assert_uint_lt(strlen(out), size - 1);
        *p = s + n;
}

/* The reply written in the notation above (freeReplyObject() it). */
static redisReply *reply_of(const char *notation) {
        char *resp = calloc(1, RESP_MAX);
        redisReader *rd = redisReaderCreate();
        void *reply = NULL;
        const char *p = notation;

        ck_assert_ptr_nonnull(resp);
        ck_assert_ptr_nonnull(rd);
        if (notation[0] == '!') {
                snprintf(resp, RESP_MAX, "-%s\r\n", notation + 1);
        } else {
                resp_value(&p, resp, RESP_MAX);
                ck_assert_msg(*skip_spaces(p) == '\0', "notation: trailing '%s'", p);
        }
        ck_assert_int_eq(redisReaderFeed(rd, resp, strlen(resp)), REDIS_OK);
        ck_assert_int_eq(redisReaderGetReply(rd, &reply), REDIS_OK);
        ck_assert_msg(reply != NULL, "incomplete RESP for '%s'", notation);
        redisReaderFree(rd);
        free(resp);
        return reply;
}

/* --- slots ----------------------------------------------------------------------------------- */

START_TEST (test_crc16_vector) {
        /* The specification's test vector (Appendix A): CRC16-XMODEM("123456789") = 0x31C3. */
        ck_assert_uint_eq(cluster_crc16("123456789", 9), 0x31C3);
        ck_assert_uint_eq(cluster_crc16("", 0), 0);
        ck_assert_uint_eq(cluster_crc16("A", 1), 0x58E5); /* XMODEM("A"), a one-byte check */
}
END_TEST

static const struct {
        const char *key;
        size_t len;
        uint16_t slot;
} slot_cases[] = {
        /* Every value is CLUSTER KEYSLOT's answer from redis-server 7.0.15 for the same bytes. */
        { "123456789", 9, 12739 },
        { "foo", 3, 12182 },
        { "bar", 3, 5061 },
        { "hello", 5, 866 },
        { "", 0, 0 },
        { "{user1000}.following", 20, 3443 },
        { "{user1000}.followers", 20, 3443 },
        { "user1000", 8, 3443 },
        { "foo{}{bar}", 10, 8363 },    /* an empty tag: the whole key */
        { "foo{{bar}}zap", 13, 4015 }, /* the tag is "{bar" */
        { "{bar", 4, 4015 },
        { "foo{bar}{zap}", 13, 5061 }, /* the first tag only: "bar" */
        { "{", 1, 4092 },
        { "}", 1, 12090 },
        { "{}", 2, 15257 },
        { "a{b", 3, 13340 },   /* no closing brace: the whole key */
        { "a}b{c}", 6, 7365 }, /* a '}' before the '{' does not count: "c" */
        { "divvyd:{alice}:0123456789abcdef0123456789abcdef", 47, 749 },
        { "alice", 5, 749 },
        { "\x00\xff\x80{x", 5, 7109 }, /* bytes above 0x7f and a NUL */
        { "\xff\xfe\xfd", 3, 287 },
        { "divvy:path=/a method=GET:bob:10:60", 34, 14497 },
};

START_TEST (test_key_slot_table) {
        const char *k = slot_cases[_i].key;

        ck_assert_msg(cluster_key_slot(k, slot_cases[_i].len) == slot_cases[_i].slot,
                      "slot of case %d: %u, not %u", _i, cluster_key_slot(k, slot_cases[_i].len),
                      slot_cases[_i].slot);
}
END_TEST

START_TEST (test_key_slot_is_its_tag) {
        /* Any key with a tag hashes as its tag does, whatever comes around it. */
        static const char *const keys[] = { "x{abc}y", "{abc}", "{abc}{def}", "zz{abc}}}", "{abc}{" };

        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
                ck_assert_uint_eq(cluster_key_slot(keys[i], strlen(keys[i])), cluster_key_slot("abc", 3));
        ck_assert_uint_eq(cluster_key_slot("abc", 3), cluster_crc16("abc", 3) & 16383);
        /* The length is honoured: bytes past it are not part of the key. */
        ck_assert_uint_eq(cluster_key_slot("foo{bar}", 3), 12182);
        ck_assert_uint_eq(cluster_key_slot("{user1000}", 9), cluster_key_slot("{user1000", 9));
}
END_TEST

/* --- slot maps ------------------------------------------------------------------------------- */

/* A three-primary cluster as redis-server 7 answers (ids, replicas, the metadata map). */
#define THREE_PRIMARIES                                                                                     \
        "[ [0 5460 [127.0.0.1 7000 aaaa []] [127.0.0.1 7003 dddd []]]"                                      \
        "  [5461 10922 [127.0.0.1 7001 bbbb [hostname h1]] [127.0.0.1 7004 eeee []]]"                       \
        "  [10923 16383 [127.0.0.1 7002 cccc []]] ]"

static void assert_node(const ClusterMap *m, uint16_t slot, const char *host, uint16_t port) {
        const ClusterNode *n = cluster_map_node(m, slot);

        ck_assert_msg(n != NULL, "slot %u: no node", slot);
        ck_assert_str_eq(n->host, host);
        ck_assert_uint_eq(n->port, port);
}

static void assert_unknown(const ClusterMap *m, uint16_t slot) {
        ck_assert_ptr_null(cluster_map_node(m, slot));
        ck_assert_int_eq(cluster_map_lookup(m, slot), -ENOENT);
}

START_TEST (test_map_three_primaries) {
        ClusterMap m;
        redisReply *r = reply_of(THREE_PRIMARIES);

        cluster_map_init(&m);
        for (unsigned s = 0; s < CLUSTER_SLOTS; s++)
                assert_unknown(&m, (uint16_t) s);
        ck_assert_int_eq(cluster_map_from_slots_reply(&m, r, "127.0.0.9"), 0);
        ck_assert_uint_eq(m.n_nodes, 3); /* primaries only */
        assert_node(&m, 0, "127.0.0.1", 7000);
        assert_node(&m, 5460, "127.0.0.1", 7000);
        assert_node(&m, 5461, "127.0.0.1", 7001);
        assert_node(&m, 10922, "127.0.0.1", 7001);
        assert_node(&m, 10923, "127.0.0.1", 7002);
        assert_node(&m, 16383, "127.0.0.1", 7002);
        ck_assert_int_eq(cluster_map_lookup(&m, 0), 0);
        ck_assert_int_eq(cluster_map_lookup(&m, 5461), 1);
        ck_assert_int_eq(cluster_map_lookup(&m, 16383), 2);
        ck_assert_int_eq(cluster_map_lookup(&m, 16384), -ENOENT);
        ck_assert_int_eq(cluster_map_lookup(&m, 0xFFFF), -ENOENT);
        ck_assert_int_eq(cluster_map_node_find(&m, "127.0.0.1", 9, 7001), 1);
        ck_assert_int_eq(cluster_map_node_find(&m, "127.0.0.1", 9, 7003), -ENOENT); /* a replica */
        ck_assert_int_eq(cluster_map_node_find(&m, "127.0.0.", 8, 7001), -ENOENT);
        ck_assert_uint_eq(cluster_map_node(&m, cluster_key_slot("foo", 3))->port, 7002); /* 12182 */
        freeReplyObject(r);
        cluster_map_clear(&m);
        ck_assert_uint_eq(m.n_nodes, 0);
        assert_unknown(&m, 0);
}
END_TEST

START_TEST (test_map_old_forms_and_default_host) {
        ClusterMap m;
        /* Redis 3 (host, port only), an empty host and a nil one (the node we asked), a split range
         * of one node, a hostname, an IPv6 address. */
        redisReply *r = reply_of("[ [0 99 [127.0.0.1 7000]] [100 100 ['' 7001 id]] [101 200 [nil 7002 id]]"
                                 "  [201 300 [127.0.0.1 7000 x]] [301 301 [redis-2.example 7000 id]]"
                                 "  [302 302 [::1 7005 id]] ]");

        cluster_map_init(&m);
        ck_assert_int_eq(cluster_map_from_slots_reply(&m, r, "127.0.0.7"), 0);
        ck_assert_uint_eq(m.n_nodes, 5);
        assert_node(&m, 99, "127.0.0.1", 7000);
        assert_node(&m, 100, "127.0.0.7", 7001);
        assert_node(&m, 101, "127.0.0.7", 7002);
        assert_node(&m, 200, "127.0.0.7", 7002);
        assert_node(&m, 201, "127.0.0.1", 7000);
        ck_assert_int_eq(cluster_map_lookup(&m, 300), cluster_map_lookup(&m, 0));
        assert_node(&m, 301, "redis-2.example", 7000);
        assert_node(&m, 302, "::1", 7005);
        assert_unknown(&m, 303);
        assert_unknown(&m, 16383);
        freeReplyObject(r);
        cluster_map_clear(&m);
}
END_TEST

START_TEST (test_map_unknown_endpoint) {
        ClusterMap m;
        redisReply *r = reply_of("[ [0 10 ['?' 7000 id]] [11 20 [127.0.0.1 7001 id]] ]");

        cluster_map_init(&m);
        ck_assert_int_eq(cluster_map_from_slots_reply(&m, r, "127.0.0.1"), 0);
        ck_assert_uint_eq(m.n_nodes, 1);
        assert_unknown(&m, 0);
        assert_unknown(&m, 10);
        assert_node(&m, 11, "127.0.0.1", 7001);
        freeReplyObject(r);
        cluster_map_clear(&m);
}
END_TEST

START_TEST (test_map_rebuild_keeps_indices) {
        ClusterMap m;
        redisReply *r1 = reply_of(THREE_PRIMARIES);
        /* After a failover of 7001 to its replica 7004 and a resharding: 7002 now first. */
        redisReply *r2 = reply_of("[ [0 99 [127.0.0.1 7002 c]] [100 5460 [127.0.0.1 7000 a]]"
                                  "  [5461 10922 [127.0.0.1 7004 e]] [10923 16000 [127.0.0.1 7002 c]] ]");

        cluster_map_init(&m);
        ck_assert_int_eq(cluster_map_from_slots_reply(&m, r1, "127.0.0.1"), 0);
        ck_assert_int_eq(cluster_map_from_slots_reply(&m, r2, "127.0.0.1"), 0);
        ck_assert_uint_eq(m.n_nodes, 4);
        ck_assert_int_eq(cluster_map_node_find(&m, "127.0.0.1", 9, 7000), 0);
        ck_assert_int_eq(cluster_map_node_find(&m, "127.0.0.1", 9, 7001), 1); /* kept, serves nothing */
        ck_assert_int_eq(cluster_map_node_find(&m, "127.0.0.1", 9, 7002), 2);
        ck_assert_int_eq(cluster_map_node_find(&m, "127.0.0.1", 9, 7004), 3);
        ck_assert_int_eq(cluster_map_lookup(&m, 0), 2);
        ck_assert_int_eq(cluster_map_lookup(&m, 99), 2);
        ck_assert_int_eq(cluster_map_lookup(&m, 100), 0);
        ck_assert_int_eq(cluster_map_lookup(&m, 5461), 3);
        ck_assert_int_eq(cluster_map_lookup(&m, 16000), 2);
        assert_unknown(&m, 16001); /* no longer in the reply: unknown, not the old node */
        assert_unknown(&m, 16383);
        freeReplyObject(r1);
        freeReplyObject(r2);
        cluster_map_clear(&m);
}
END_TEST

START_TEST (test_map_empty_reply) {
        ClusterMap m;
        redisReply *r1 = reply_of(THREE_PRIMARIES), *r2 = reply_of("[]");

        cluster_map_init(&m);
        ck_assert_int_eq(cluster_map_from_slots_reply(&m, r1, "127.0.0.1"), 0);
        ck_assert_int_eq(cluster_map_from_slots_reply(&m, r2, "127.0.0.1"), 0);
        for (unsigned s = 0; s < CLUSTER_SLOTS; s++)
                assert_unknown(&m, (uint16_t) s);
        ck_assert_uint_eq(m.n_nodes, 3);
        freeReplyObject(r1);
        freeReplyObject(r2);
        cluster_map_clear(&m);
}
END_TEST

static const char *const bad_replies[] = {
        "!ERR This instance has cluster support disabled",
        "7",
        "nil",
        "'0 16383'",
        "[ 0 ]",
        "[ [0 16383] ]",                                          /* no node */
        "[ [0 16383 127.0.0.1] ]",                                /* node not an array */
        "[ [0 16383 [127.0.0.1]] ]",                              /* no port */
        "[ [0 16383 []] ]",                                       /* empty node */
        "[ ['0' 16383 [127.0.0.1 7000]] ]",                       /* start a string */
        "[ [0 '16383' [127.0.0.1 7000]] ]",                       /* end a string */
        "[ [nil 16383 [127.0.0.1 7000]] ]",                       /* start nil */
        "[ [10 9 [127.0.0.1 7000]] ]",                            /* start > end */
        "[ [-1 9 [127.0.0.1 7000]] ]",                            /* slot < 0 */
        "[ [0 16384 [127.0.0.1 7000]] ]",                         /* slot > 16383 */
        "[ [16384 16384 [127.0.0.1 7000]] ]",                     /* slot > 16383 */
        "[ [0 16383 [127.0.0.1 '7000']] ]",                       /* port a string */
        "[ [0 16383 [127.0.0.1 0]] ]",                            /* port 0 */
        "[ [0 16383 [127.0.0.1 -7000]] ]",                        /* port < 0 */
        "[ [0 16383 [127.0.0.1 65536]] ]",                        /* port > 65535 */
        "[ [0 16383 [7 7000]] ]",                                 /* host an integer */
        "[ [0 16383 [[127.0.0.1] 7000]] ]",                       /* host an array */
        "[ [0 100 [127.0.0.1 7000]] [101 16383 [127.0.0.1 0]] ]", /* the second entry bad */
        "[ [0 100 [127.0.0.1 7000]] 7 ]",                         /* the second entry no array */
        "[ [0 100 [127.0.0.1 7000]] [101 16383 [127.0.0.2 7000]] [200 100 [127.0.0.3 1]] ]",
};

START_TEST (test_map_malformed_refused) {
        ClusterMap m;
        redisReply *good = reply_of(THREE_PRIMARIES), *bad = reply_of(bad_replies[_i]);
        uint16_t before[CLUSTER_SLOTS];

        cluster_map_init(&m);
        ck_assert_int_eq(cluster_map_from_slots_reply(&m, good, "127.0.0.1"), 0);
        memcpy(before, m.slot_node, sizeof(before));
        ck_assert_msg(cluster_map_from_slots_reply(&m, bad, "127.0.0.1") == -EPROTO, "accepted: %s",
                      bad_replies[_i]);
        /* Unchanged: the same slots, no node appended by the entries read before the bad one. */
        ck_assert_uint_eq(m.n_nodes, 3);
        ck_assert_int_eq(memcmp(before, m.slot_node, sizeof(before)), 0);
        freeReplyObject(good);
        freeReplyObject(bad);
        cluster_map_clear(&m);
}
END_TEST

START_TEST (test_map_limits) {
        ClusterMap m;
        char host[CLUSTER_HOST_MAX + 2], notation[CLUSTER_HOST_MAX + 64];
        redisReply *r;

        cluster_map_init(&m);
        ck_assert_int_eq(cluster_map_from_slots_reply(&m, NULL, "127.0.0.1"), -EPROTO);
        r = reply_of(THREE_PRIMARIES);
        ck_assert_int_eq(cluster_map_from_slots_reply(&m, r, NULL), -EINVAL);
        ck_assert_int_eq(cluster_map_from_slots_reply(&m, r, ""), -EINVAL);
        memset(host, 'h', sizeof(host) - 1);
        host[sizeof(host) - 1] = '\0'; /* 256 bytes */
        ck_assert_int_eq(cluster_map_from_slots_reply(&m, r, host), -EINVAL);
        freeReplyObject(r);
        ck_assert_uint_eq(m.n_nodes, 0);

        /* A host of CLUSTER_HOST_MAX bytes is fine, one more is refused. */
        snprintf(notation, sizeof(notation), "[ [0 1 [%.*s 7000]] ]", CLUSTER_HOST_MAX, host);
        r = reply_of(notation);
        ck_assert_int_eq(cluster_map_from_slots_reply(&m, r, "127.0.0.1"), 0);
        ck_assert_uint_eq(strlen(cluster_map_node(&m, 1)->host), CLUSTER_HOST_MAX);
        freeReplyObject(r);
        snprintf(notation, sizeof(notation), "[ [0 1 [%s 7000]] ]", host);
        r = reply_of(notation);
        ck_assert_int_eq(cluster_map_from_slots_reply(&m, r, "127.0.0.1"), -EPROTO);
        freeReplyObject(r);

        ck_assert_int_eq(cluster_map_node_add(&m, "", 0, 7000), -EINVAL);
        ck_assert_int_eq(cluster_map_node_add(&m, "a", 1, 0), -EINVAL);
        ck_assert_int_eq(cluster_map_node_add(&m, host, CLUSTER_HOST_MAX + 1, 1), -EINVAL);
        ck_assert_int_eq(cluster_map_node_add(&m, "a\0b", 3, 1), -EINVAL);
        cluster_map_clear(&m);

        /* CLUSTER_NODES_MAX nodes, then -E2BIG; an existing node is still found. */
        for (int i = 0; i < CLUSTER_NODES_MAX; i++) {
                char h[32];
                int n = snprintf(h, sizeof(h), "10.0.%d.%d", i / 256, i % 256);

                ck_assert_int_eq(cluster_map_node_add(&m, h, (size_t) n, 7000), i);
        }
        ck_assert_int_eq(cluster_map_node_add(&m, "10.0.99.1", 9, 7000), -E2BIG);
        ck_assert_int_eq(cluster_map_node_add(&m, "10.0.0.5", 8, 7000), 5);
        r = reply_of("[ [0 1 [10.0.99.1 7000]] ]");
        ck_assert_int_eq(cluster_map_from_slots_reply(&m, r, "127.0.0.1"), -E2BIG);
        freeReplyObject(r);
        cluster_map_clear(&m);
}
END_TEST

START_TEST (test_map_set_slot) {
        ClusterMap m;
        ClusterNode a = { "127.0.0.1", 7000 }, b = { "127.0.0.1", 7001 }, empty = { "", 7000 };

        cluster_map_init(&m);
        ck_assert_int_eq(cluster_map_set_slot(&m, 3999, &a), 0);
        ck_assert_int_eq(cluster_map_set_slot(&m, 4000, &b), 1);
        ck_assert_int_eq(cluster_map_set_slot(&m, 4001, &a), 0);
        ck_assert_int_eq(cluster_map_set_slot(&m, 3999, &b), 1); /* MOVED again */
        ck_assert_int_eq(cluster_map_lookup(&m, 3999), 1);
        ck_assert_int_eq(cluster_map_lookup(&m, 4001), 0);
        assert_unknown(&m, 3998);
        ck_assert_int_eq(cluster_map_set_slot(&m, 16384, &a), -EINVAL);
        ck_assert_int_eq(cluster_map_set_slot(&m, 5, &empty), -EINVAL);
        assert_unknown(&m, 5);
        ck_assert_uint_eq(m.n_nodes, 2);
        cluster_map_clear(&m);
}
END_TEST

/* --- redirects ------------------------------------------------------------------------------- */

static const struct {
        const char *err;
        const char *default_host;
        int kind;
        uint16_t slot;
        const char *host;
        uint16_t port;
} redirect_cases[] = {
        { "MOVED 3999 127.0.0.1:6381", NULL, CLUSTER_REDIRECT_MOVED, 3999, "127.0.0.1", 6381 },
        { "ASK 3999 127.0.0.1:6381", NULL, CLUSTER_REDIRECT_ASK, 3999, "127.0.0.1", 6381 },
        { "MOVED 0 127.0.0.1:1", NULL, CLUSTER_REDIRECT_MOVED, 0, "127.0.0.1", 1 },
        { "ASK 16383 127.0.0.1:65535", NULL, CLUSTER_REDIRECT_ASK, 16383, "127.0.0.1", 65535 },
        { "MOVED 12182 ::1:6380", NULL, CLUSTER_REDIRECT_MOVED, 12182, "::1", 6380 },
        { "MOVED 12182 [::1]:6380", NULL, CLUSTER_REDIRECT_MOVED, 12182, "::1", 6380 },
        { "ASK 7 fe80::1:2:3:4:7000", NULL, CLUSTER_REDIRECT_ASK, 7, "fe80::1:2:3:4", 7000 },
        { "MOVED 7 redis-2.example:7000", NULL, CLUSTER_REDIRECT_MOVED, 7, "redis-2.example", 7000 },
        { "MOVED 7 :7001", "127.0.0.5", CLUSTER_REDIRECT_MOVED, 7, "127.0.0.5", 7001 }, /* same host */
        { "ASK 7 :7001", "127.0.0.5", CLUSTER_REDIRECT_ASK, 7, "127.0.0.5", 7001 },
        { "MOVED 007 a:07000", NULL, CLUSTER_REDIRECT_MOVED, 7, "a", 7000 },
        { "TRYAGAIN Multiple keys request during rehashing of slot", NULL, CLUSTER_REDIRECT_TRYAGAIN, 0,
          NULL, 0 },
        { "TRYAGAIN", NULL, CLUSTER_REDIRECT_TRYAGAIN, 0, NULL, 0 },
        { "CLUSTERDOWN The cluster is down", NULL, CLUSTER_REDIRECT_CLUSTERDOWN, 0, NULL, 0 },
        { "CLUSTERDOWN Hash slot not served", NULL, CLUSTER_REDIRECT_CLUSTERDOWN, 0, NULL, 0 },
        { "CLUSTERDOWN", NULL, CLUSTER_REDIRECT_CLUSTERDOWN, 0, NULL, 0 },
        /* not cluster errors */
        { "", NULL, CLUSTER_REDIRECT_NONE, 0, NULL, 0 },
        { "ERR unknown command 'FOO'", NULL, CLUSTER_REDIRECT_NONE, 0, NULL, 0 },
        { "NOSCRIPT No matching script. Please use EVAL.", NULL, CLUSTER_REDIRECT_NONE, 0, NULL, 0 },
        { "CROSSSLOT Keys in request don't hash to the same slot", NULL, CLUSTER_REDIRECT_NONE, 0, NULL, 0 },
        { "MOVEDX 1 a:1", NULL, CLUSTER_REDIRECT_NONE, 0, NULL, 0 },
        { "moved 1 a:1", NULL, CLUSTER_REDIRECT_NONE, 0, NULL, 0 },
        { "ASKING", NULL, CLUSTER_REDIRECT_NONE, 0, NULL, 0 },
        { "TRYAGAINX", NULL, CLUSTER_REDIRECT_NONE, 0, NULL, 0 },
        { "CLUSTERDOWNX", NULL, CLUSTER_REDIRECT_NONE, 0, NULL, 0 },
        { " MOVED 1 a:1", NULL, CLUSTER_REDIRECT_NONE, 0, NULL, 0 },
        { "MOVE 1 a:1", NULL, CLUSTER_REDIRECT_NONE, 0, NULL, 0 },
        /* MOVED and ASK of another form: refused */
        { "MOVED", NULL, -EPROTO, 0, NULL, 0 },
        { "ASK", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED ", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED 1", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED 1 ", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED  1 a:1", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED  a:1", NULL, -EPROTO, 0, NULL, 0 }, /* no slot */
        { "MOVED 1  a:1", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED x a:1", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED -1 a:1", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED +1 a:1", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED 16384 a:1", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED 65536 a:1", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED 123456 a:1", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED 1x a:1", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED 1 a", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED 1 a:", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED 1 a:0", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED 1 a:65536", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED 1 a:123456", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED 1 a:-1", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED 1 a:63x9", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED 1 a:6379 ", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED 1 a:6379 extra", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED 1 ?:6379", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED 1 []:6379", NULL, -EPROTO, 0, NULL, 0 },
        { "MOVED 1 :6379", NULL, -EPROTO, 0, NULL, 0 }, /* no default host */
        { "MOVED 1 :6379", "", -EPROTO, 0, NULL, 0 },
        { "ASK 1 a:99999", NULL, -EPROTO, 0, NULL, 0 },
        { "ASK x", NULL, -EPROTO, 0, NULL, 0 },
};

START_TEST (test_redirect_table) {
        uint16_t slot = 0xBEEF;
        ClusterNode node = { "untouched", 42 };
        const char *err = redirect_cases[_i].err;
        int k = cluster_parse_redirect(err, strlen(err), redirect_cases[_i].default_host, &slot, &node);

        ck_assert_msg(k == redirect_cases[_i].kind, "'%s': %d, not %d", err, k, redirect_cases[_i].kind);
        if (k == CLUSTER_REDIRECT_MOVED || k == CLUSTER_REDIRECT_ASK) {
                ck_assert_uint_eq(slot, redirect_cases[_i].slot);
                ck_assert_str_eq(node.host, redirect_cases[_i].host);
                ck_assert_uint_eq(node.port, redirect_cases[_i].port);
        } else {
                ck_assert_uint_eq(slot, 0xBEEF);
                ck_assert_str_eq(node.host, "untouched");
                ck_assert_uint_eq(node.port, 42);
        }
}
END_TEST

START_TEST (test_redirect_edges) {
        uint16_t slot = 0;
        ClusterNode node;
        char err[CLUSTER_HOST_MAX + 64];
        char host[CLUSTER_HOST_MAX + 2];

        /* "::1" alone is host ":" port 1: accepted as written (the last colon rule); a real
         * IPv6 redirect always carries its port. */
        ck_assert_int_eq(cluster_parse_redirect("MOVED 1 ::1", 11, NULL, &slot, &node),
                         CLUSTER_REDIRECT_MOVED);
        /* The length is honoured: nothing is read past it. */
        ck_assert_int_eq(cluster_parse_redirect("MOVED 3999 127.0.0.1:6381 garbage", 25, NULL, &slot, &node),
                         CLUSTER_REDIRECT_MOVED);
        ck_assert_uint_eq(node.port, 6381);
        ck_assert_int_eq(cluster_parse_redirect("MOVED 3999 127.0.0.1:6381", 3, NULL, &slot, &node),
                         CLUSTER_REDIRECT_NONE);
        ck_assert_int_eq(cluster_parse_redirect("MOVED 3999 127.0.0.1:6381", 5, NULL, &slot, &node),
                         -EPROTO);
        ck_assert_int_eq(cluster_parse_redirect("TRYAGAIN", 3, NULL, &slot, &node), CLUSTER_REDIRECT_NONE);
        ck_assert_int_eq(cluster_parse_redirect(NULL, 0, NULL, &slot, &node), CLUSTER_REDIRECT_NONE);
        /* A NUL inside is garbage, not the end. */
        ck_assert_int_eq(cluster_parse_redirect("MOVED 1 a\0b:7000", 16, NULL, &slot, &node), -EPROTO);

        /* Hosts up to CLUSTER_HOST_MAX bytes. */
        memset(host, 'h', sizeof(host) - 1);
        host[sizeof(host) - 1] = '\0';
        snprintf(err, sizeof(err), "ASK 5 %.*s:7000", CLUSTER_HOST_MAX, host);
        ck_assert_int_eq(cluster_parse_redirect(err, strlen(err), NULL, &slot, &node), CLUSTER_REDIRECT_ASK);
        ck_assert_uint_eq(strlen(node.host), CLUSTER_HOST_MAX);
        snprintf(err, sizeof(err), "ASK 5 %s:7000", host);
        ck_assert_int_eq(cluster_parse_redirect(err, strlen(err), NULL, &slot, &node), -EPROTO);
}
END_TEST

static Suite *redis_cluster_suite(void) {
        Suite *s = suite_create("redis-cluster");
        TCase *tc = tcase_create("slots");

        tcase_add_test(tc, test_crc16_vector);
        tcase_add_loop_test(tc, test_key_slot_table, 0, (int) (sizeof(slot_cases) / sizeof(slot_cases[0])));
        tcase_add_test(tc, test_key_slot_is_its_tag);
        suite_add_tcase(s, tc);

        tc = tcase_create("map");
        tcase_add_test(tc, test_map_three_primaries);
        tcase_add_test(tc, test_map_old_forms_and_default_host);
        tcase_add_test(tc, test_map_unknown_endpoint);
        tcase_add_test(tc, test_map_rebuild_keeps_indices);
        tcase_add_test(tc, test_map_empty_reply);
        tcase_add_loop_test(tc, test_map_malformed_refused, 0,
                            (int) (sizeof(bad_replies) / sizeof(bad_replies[0])));
        tcase_add_test(tc, test_map_limits);
        tcase_add_test(tc, test_map_set_slot);
        suite_add_tcase(s, tc);

        tc = tcase_create("redirect");
        tcase_add_loop_test(tc, test_redirect_table, 0,
                            (int) (sizeof(redirect_cases) / sizeof(redirect_cases[0])));
        tcase_add_test(tc, test_redirect_edges);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        return check_run_suite(redis_cluster_suite());
}
