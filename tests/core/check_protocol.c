/* SPDX-License-Identifier: MIT */
/* protocol.c: framing, request parsing and reply formatting, driven by tables of wire lines. */

#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/protocol.h"
#include "check-run.h"

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))
#define LINE(s)       s, sizeof(s) - 1 /* a literal and its length, embedded NULs included */

/* ---- helpers -------------------------------------------------------------------------------- */

static bool slice_eq(const ProtoSlice *s, const char *str) {
        return s->len == strlen(str) && memcmp(s->ptr, str, s->len) == 0;
}

static bool slice_inside(const ProtoSlice *s, const char *buf, size_t len) {
        return s->ptr >= buf && s->len <= len && (size_t) (s->ptr - buf) <= len - s->len;
}

/* For loops that run thousands of times: ck_assert*() records a mark point on every success
 * (a write to a pipe in fork mode), which would dominate the run time under valgrind. */
#define expect(cond)                                                                                        \
        do {                                                                                                \
                if (!(cond))                                                                                \
                        ck_abort_msg("%s:%d: expected %s", __FILE__, __LINE__, #cond);                      \
        } while (0)

/* Deterministic PRNG (xorshift64*): the same sequence on every run and platform. */
static uint64_t prng_state;

static void prng_seed(uint64_t seed) {
        prng_state = seed ? seed : 1;
}

static uint64_t prng_next(void) {
        prng_state ^= prng_state >> 12;
        prng_state ^= prng_state << 25;
        prng_state ^= prng_state >> 27;
        return prng_state * UINT64_C(2685821657736338717);
}

static size_t prng_below(size_t n) {
        return (size_t) (prng_next() % n);
}

/* ---- valid requests ------------------------------------------------------------------------- */

typedef struct ParseCase {
        const char *line;
        size_t len;
        size_t n_pairs;
        const char *kv[16]; /* key, value, key, value, ... in order */
} ParseCase;

static const ParseCase parse_ok_cases[] = {
        /* Every request line of the reference README. */
        { LINE("HIT method=GET path=/status"), 2, { "method", "GET", "path", "/status" } },
        { LINE("HIT method=GET path=/pantry/cookies/chocolate-chip ip=192.168.1.1"),
          3,
          { "method", "GET", "path", "/pantry/cookies/chocolate-chip", "ip", "192.168.1.1" } },
        { LINE("HIT method=GET path=/pantry/cookies/oatmeal ip=192.168.1.1"),
          3,
          { "method", "GET", "path", "/pantry/cookies/oatmeal", "ip", "192.168.1.1" } },
        { LINE("HIT method=GET path=/pantry/cookies/cricket-flavored ip=192.168.1.1"),
          3,
          { "method", "GET", "path", "/pantry/cookies/cricket-flavored", "ip", "192.168.1.1" } },
        { LINE("HIT method=GET path=/pantry/cookies/oatmeal ip=4.3.2.1"),
          3,
          { "method", "GET", "path", "/pantry/cookies/oatmeal", "ip", "4.3.2.1" } },
        { LINE("HIT method=\"POST\" path=\"/cgi-bin/upload.cgi\""),
          2,
          { "method", "POST", "path", "/cgi-bin/upload.cgi" } },
        { LINE("HIT method=\"DELETE\" path=\"/index.html\""),
          2,
          { "method", "DELETE", "path", "/index.html" } },
        { LINE("HIT method=GET ip=10.20.1.3"), 2, { "method", "GET", "ip", "10.20.1.3" } },
        { LINE("HIT method=GET ip=192.168.1.1"), 2, { "method", "GET", "ip", "192.168.1.1" } },
        { LINE("HIT method=GET path=/pantry/cookies/special-cookie ip=192.168.1.1"),
          3,
          { "method", "GET", "path", "/pantry/cookies/special-cookie", "ip", "192.168.1.1" } },
        /* Command word in any case, with or without pairs. */
        { LINE("HIT"), 0, { NULL } },
        { LINE("hit"), 0, { NULL } },
        { LINE("Hit a=b"), 1, { "a", "b" } },
        { LINE("hIT a=b"), 1, { "a", "b" } },
        /* Blanks: runs of spaces and tabs, trailing too (leading ones: see the errors). */
        { LINE("HIT   a=b \t c=d  "), 2, { "a", "b", "c", "d" } },
        { LINE("HIT\ta=b\t\tc=d\t"), 2, { "a", "b", "c", "d" } },
        { LINE("HIT   "), 0, { NULL } },
        /* Empty values, quoted or not. */
        { LINE("HIT a= b="), 2, { "a", "", "b", "" } },
        { LINE("HIT a=\"\" b=x"), 2, { "a", "", "b", "x" } },
        { LINE("HIT a="), 1, { "a", "" } },
        /* Quoted keys and values: spaces, '=', tabs, quotes stripped. */
        { LINE("HIT \"my key\"=x"), 1, { "my key", "x" } },
        { LINE("HIT a=\"x = y\" b=\"with  spaces\""), 2, { "a", "x = y", "b", "with  spaces" } },
        { LINE("HIT \"k=\"=\"=v\""), 1, { "k=", "=v" } },
        { LINE("HIT a=\"tab\tinside\""), 1, { "a", "tab\tinside" } },
        { LINE("HIT a=\"'single'\""), 1, { "a", "'single'" } },
        /* Duplicates: last value wins in the first position; keys are case-sensitive bytes. */
        { LINE("HIT a=1 b=2 a=3"), 2, { "a", "3", "b", "2" } },
        { LINE("HIT a=1 a=2 a=\"\""), 1, { "a", "" } },
        { LINE("HIT a=1 A=2"), 2, { "a", "1", "A", "2" } },
        { LINE("HIT ab=1 a=2 abc=3"), 3, { "ab", "1", "a", "2", "abc", "3" } },
        { LINE("HIT \"a\"=1 a=2"), 1, { "a", "2" } },
        /* Everything printable that is not a delimiter is plain, DEL included. */
        { LINE("HIT path=/v1/*?x&y;z ip=* q=~!@#$%^&()[]{}<>,.\x7f"),
          3,
          { "path", "/v1/*?x&y;z", "ip", "*", "q", "~!@#$%^&()[]{}<>,.\x7f" } },
        /* Well-formed UTF-8, including every boundary of RFC 3629's table. */
        { LINE("HIT name=caf\xc3\xa9 emoji=\xf0\x9f\x98\x80 \"k\xe2\x82\xac\"=\"\xe2\x82\xac 1\""),
          3,
          { "name", "caf\xc3\xa9", "emoji", "\xf0\x9f\x98\x80", "k\xe2\x82\xac", "\xe2\x82\xac 1" } },
        { LINE("HIT a=\xc2\x80 b=\xdf\xbf c=\xe0\xa0\x80 d=\xed\x9f\xbf e=\xee\x80\x80 f=\xef\xbf\xbf"),
          6,
          { "a", "\xc2\x80", "b", "\xdf\xbf", "c", "\xe0\xa0\x80", "d", "\xed\x9f\xbf", "e", "\xee\x80\x80",
            "f", "\xef\xbf\xbf" } },
        { LINE("HIT g=\xf0\x90\x80\x80 h=\xf3\xbf\xbf\xbf i=\xf4\x8f\xbf\xbf"),
          3,
          { "g", "\xf0\x90\x80\x80", "h", "\xf3\xbf\xbf\xbf", "i", "\xf4\x8f\xbf\xbf" } },
};

static void assert_pairs(const ProtoRequest *req, const ParseCase *c) {
        ck_assert_uint_eq(req->n_pairs, c->n_pairs);
        for (size_t i = 0; i < c->n_pairs; i++) {
                ck_assert_msg(slice_eq(&req->pairs[i].key, c->kv[2 * i]), "pair %zu key", i);
                ck_assert_msg(slice_eq(&req->pairs[i].value, c->kv[2 * i + 1]), "pair %zu value", i);
                ck_assert(slice_inside(&req->pairs[i].key, c->line, c->len));
                ck_assert(slice_inside(&req->pairs[i].value, c->line, c->len));
                const ProtoSlice *v = proto_request_get(req, c->kv[2 * i], strlen(c->kv[2 * i]));
                ck_assert_ptr_eq(v, &req->pairs[i].value);
        }
}

START_TEST (test_parse_ok) {
        const ParseCase *c = &parse_ok_cases[_i];
        ProtoRequest req;

        ck_assert_msg(proto_parse_line(c->line, c->len, PROTO_PAIRS_MAX, &req) == 0, "line %d: %s", _i,
                      req.error_reason);
        ck_assert_int_eq(req.command, PROTO_COMMAND_HIT);
        ck_assert_ptr_null(req.error_reason);
        assert_pairs(&req, c);

        /* The same text without the command word, through the INI loader's entry point. */
        const char *rest = c->line;
        while (*rest == ' ' || *rest == '\t')
                rest++;
        rest += 3;
        ck_assert_int_eq(proto_parse_pairs(rest, c->len - (size_t) (rest - c->line), PROTO_PAIRS_MAX, &req),
                         0);
        ck_assert_int_eq(req.command, _PROTO_COMMAND_INVALID);
        assert_pairs(&req, c);
}
END_TEST

/* ---- refused requests ----------------------------------------------------------------------- */

typedef struct ErrorCase {
        const char *line;
        size_t len;
        ProtoErrorCode code;
        const char *reason_has; /* a word the reason must contain */
} ErrorCase;

static const ErrorCase parse_error_cases[] = {
        /* Unknown commands, the empty line included. */
        { LINE(""), PROTO_ERROR_UNKNOWN_COMMAND, "empty" },
        { LINE("   \t "), PROTO_ERROR_UNKNOWN_COMMAND, "empty" },
        /* A blank before the command word: divvy's answer (it looked up an empty first word). */
        { LINE("  HIT   a=b \t c=d  "), PROTO_ERROR_UNKNOWN_COMMAND, "blank before" },
        { LINE("\tHIT\ta=b\t\tc=d\t"), PROTO_ERROR_UNKNOWN_COMMAND, "blank before" },
        { LINE(" HIT"), PROTO_ERROR_UNKNOWN_COMMAND, "blank before" },
        { LINE(" TAKE 1 a=b"), PROTO_ERROR_UNKNOWN_COMMAND, "blank before" },
        /* The version 2 verbs are unknown to the version 1 entry point. */
        { LINE("TAKE 1 a=b"), PROTO_ERROR_UNKNOWN_COMMAND, "command" },
        { LINE("HELLO"), PROTO_ERROR_UNKNOWN_COMMAND, "command" },
        { LINE("peek"), PROTO_ERROR_UNKNOWN_COMMAND, "command" },
        { LINE("GET a=b"), PROTO_ERROR_UNKNOWN_COMMAND, "command" },
        { LINE("HITS a=b"), PROTO_ERROR_UNKNOWN_COMMAND, "command" },
        { LINE("HI"), PROTO_ERROR_UNKNOWN_COMMAND, "command" },
        { LINE("HIT=a"), PROTO_ERROR_UNKNOWN_COMMAND, "command" },
        { LINE("\"HIT\" a=b"), PROTO_ERROR_UNKNOWN_COMMAND, "command" },
        { LINE("HIT\x01 a=b"), PROTO_ERROR_UNKNOWN_COMMAND, "command" },
        { LINE("H\0T a=b"), PROTO_ERROR_UNKNOWN_COMMAND, "command" },
        { LINE("HIT\xc2\xa0"
               "a=b"),
          PROTO_ERROR_UNKNOWN_COMMAND, "command" }, /* NBSP is no blank */
        /* Malformed pairs. */
        { LINE("HIT a=\"b"), PROTO_ERROR_UNKNOWN, "unterminated" },
        { LINE("HIT \"a=b"), PROTO_ERROR_UNKNOWN, "unterminated" },
        { LINE("HIT a=\""), PROTO_ERROR_UNKNOWN, "unterminated" },
        { LINE("HIT a"), PROTO_ERROR_UNKNOWN, "'='" },
        { LINE("HIT a b=c"), PROTO_ERROR_UNKNOWN, "'='" },
        { LINE("HIT a=b c"), PROTO_ERROR_UNKNOWN, "'='" },
        { LINE("HIT \"a\" =b"), PROTO_ERROR_UNKNOWN, "'='" },
        { LINE("HIT \"a\"\"b\"=c"), PROTO_ERROR_UNKNOWN, "'='" },
        { LINE("HIT =v"), PROTO_ERROR_UNKNOWN, "empty key" },
        { LINE("HIT \"\"=v"), PROTO_ERROR_UNKNOWN, "empty key" },
        { LINE("HIT a=1 =2"), PROTO_ERROR_UNKNOWN, "empty key" },
        { LINE("HIT a=b\"c"), PROTO_ERROR_UNKNOWN, "quote" },
        { LINE("HIT a\"b=c"), PROTO_ERROR_UNKNOWN, "quote" },
        { LINE("HIT a=\"x\"b=c"), PROTO_ERROR_UNKNOWN, "whitespace" },
        { LINE("HIT a=\"x\"\"y\""), PROTO_ERROR_UNKNOWN, "whitespace" },
        { LINE("HIT a=\"x\"=y"), PROTO_ERROR_UNKNOWN, "whitespace" },
        { LINE("HIT a=b=c"), PROTO_ERROR_UNKNOWN, "'='" },
        { LINE("HIT a==b"), PROTO_ERROR_UNKNOWN, "'='" },
        /* NUL and other control bytes: only space and tab separate. */
        { LINE("HIT a=b\0c"), PROTO_ERROR_UNKNOWN, "NUL" },
        { LINE("HIT a=\"b\0c\""), PROTO_ERROR_UNKNOWN, "NUL" },
        { LINE("HIT \0"), PROTO_ERROR_UNKNOWN, "NUL" },
        { LINE("HIT a\0=b"), PROTO_ERROR_UNKNOWN, "NUL" },
        { LINE("HIT a=b\rc"), PROTO_ERROR_UNKNOWN, "control" },
        { LINE("HIT a=b\r"), PROTO_ERROR_UNKNOWN, "control" },
        { LINE("HIT a=\x1b[31m"), PROTO_ERROR_UNKNOWN, "control" },
        { LINE("HIT a=\"\x01\""), PROTO_ERROR_UNKNOWN, "control" },
        { LINE("HIT a=\"x\ny\""), PROTO_ERROR_UNKNOWN, "control" },
        { LINE("HIT a=b\vc=d"), PROTO_ERROR_UNKNOWN, "control" },
        { LINE("HIT a=b\fc=d"), PROTO_ERROR_UNKNOWN, "control" },
        { LINE("HIT \x1f=b"), PROTO_ERROR_UNKNOWN, "control" },
        /* Invalid UTF-8. */
        { LINE("HIT a=\x80"), PROTO_ERROR_UNKNOWN, "UTF-8" },             /* stray continuation */
        { LINE("HIT a=\xbf"), PROTO_ERROR_UNKNOWN, "UTF-8" },             /* stray continuation */
        { LINE("HIT a=\xc0\xaf"), PROTO_ERROR_UNKNOWN, "UTF-8" },         /* overlong '/' */
        { LINE("HIT a=\xc1\xbf"), PROTO_ERROR_UNKNOWN, "UTF-8" },         /* overlong */
        { LINE("HIT a=\xe0\x80\xaf"), PROTO_ERROR_UNKNOWN, "UTF-8" },     /* overlong, 3 bytes */
        { LINE("HIT a=\xe0\x9f\xbf"), PROTO_ERROR_UNKNOWN, "UTF-8" },     /* overlong U+07FF */
        { LINE("HIT a=\xf0\x80\x80\xaf"), PROTO_ERROR_UNKNOWN, "UTF-8" }, /* overlong, 4 bytes */
        { LINE("HIT a=\xf0\x8f\xbf\xbf"), PROTO_ERROR_UNKNOWN, "UTF-8" }, /* overlong U+FFFF */
        { LINE("HIT a=\xed\xa0\x80"), PROTO_ERROR_UNKNOWN, "UTF-8" },     /* surrogate U+D800 */
        { LINE("HIT a=\xed\xbf\xbf"), PROTO_ERROR_UNKNOWN, "UTF-8" },     /* surrogate U+DFFF */
        { LINE("HIT a=\xf4\x90\x80\x80"), PROTO_ERROR_UNKNOWN, "UTF-8" }, /* U+110000 */
        { LINE("HIT a=\xf5\x80\x80\x80"), PROTO_ERROR_UNKNOWN, "UTF-8" }, /* lead byte > F4 */
        { LINE("HIT a=\xfe"), PROTO_ERROR_UNKNOWN, "UTF-8" },             /* never valid */
        { LINE("HIT a=\xff"), PROTO_ERROR_UNKNOWN, "UTF-8" },             /* never valid */
        { LINE("HIT a=\xc3"), PROTO_ERROR_UNKNOWN, "UTF-8" },             /* truncated at end */
        { LINE("HIT a=\xe2\x82"), PROTO_ERROR_UNKNOWN, "UTF-8" },         /* truncated at end */
        { LINE("HIT a=\xf0\x9f\x98"), PROTO_ERROR_UNKNOWN, "UTF-8" },     /* truncated at end */
        { LINE("HIT a=\xe2\x82 b=c"), PROTO_ERROR_UNKNOWN, "UTF-8" },     /* truncated by a blank */
        { LINE("HIT a=\xe2\x28\xa1"), PROTO_ERROR_UNKNOWN, "UTF-8" },     /* bad continuation */
        { LINE("HIT a=\"\xc3\""), PROTO_ERROR_UNKNOWN, "UTF-8" },         /* truncated by a quote */
        { LINE("HIT \xc3\xa9\xa9=b"), PROTO_ERROR_UNKNOWN, "UTF-8" },     /* extra continuation */
};

START_TEST (test_parse_error) {
        const ErrorCase *c = &parse_error_cases[_i];
        ProtoRequest req;

        ck_assert_int_eq(proto_parse_line(c->line, c->len, PROTO_PAIRS_MAX, &req), -EBADMSG);
        ck_assert_msg(req.error_code == c->code, "case %d: code %d", _i, req.error_code);
        ck_assert_ptr_nonnull(req.error_reason);
        ck_assert_msg(strstr(req.error_reason, c->reason_has), "case %d: reason '%s' lacks '%s'", _i,
                      req.error_reason, c->reason_has);
        ck_assert_uint_eq(req.n_pairs, 0);

        /* Reasons are static, short and need no sanitizing in the reply. */
        char reply[PROTO_REPLY_MAX];
        size_t n = proto_format_error(reply, req.error_code, req.error_reason);
        ck_assert_uint_lt(n, PROTO_REPLY_MAX);
        ck_assert_ptr_null(strchr(reply, '?'));
        ck_assert_ptr_nonnull(strstr(reply, req.error_reason));
}
END_TEST

static size_t build_pairs_line(char *buf, size_t n_keys, size_t n_dups) {
        size_t len = (size_t) sprintf(buf, "HIT");
        for (size_t i = 0; i < n_keys; i++)
                len += (size_t) sprintf(buf + len, " k%zu=v%zu", i, i);
        for (size_t i = 0; i < n_dups; i++)
                len += (size_t) sprintf(buf + len, " k%zu=dup", i);
        return len;
}

START_TEST (test_pairs_limit) {
        char line[2048];
        ProtoRequest req;
        size_t len;

        /* Exactly the maximum is fine, duplicates do not count, one more key is refused. */
        len = build_pairs_line(line, PROTO_PAIRS_MAX, 0);
        ck_assert_int_eq(proto_parse_line(line, len, PROTO_PAIRS_MAX, &req), 0);
        ck_assert_uint_eq(req.n_pairs, PROTO_PAIRS_MAX);
        ck_assert(slice_eq(&req.pairs[PROTO_PAIRS_MAX - 1].key, "k63"));

        len = build_pairs_line(line, PROTO_PAIRS_MAX, 10);
        ck_assert_int_eq(proto_parse_line(line, len, PROTO_PAIRS_MAX, &req), 0);
        ck_assert_uint_eq(req.n_pairs, PROTO_PAIRS_MAX);
        ck_assert(slice_eq(&req.pairs[9].value, "dup"));
        ck_assert(slice_eq(&req.pairs[10].value, "v10"));

        len = build_pairs_line(line, PROTO_PAIRS_MAX + 1, 0);
        ck_assert_int_eq(proto_parse_line(line, len, PROTO_PAIRS_MAX, &req), -EBADMSG);
        ck_assert_int_eq(req.error_code, PROTO_ERROR_UNKNOWN);
        ck_assert_ptr_nonnull(strstr(req.error_reason, "too many"));

        /* A larger max_pairs than the array holds is clamped. */
        ck_assert_int_eq(proto_parse_line(line, len, PROTO_PAIRS_MAX + 100, &req), -EBADMSG);

        /* Smaller limits from the caller. */
        ck_assert_int_eq(proto_parse_line(LINE("HIT a=1 b=2"), 2, &req), 0);
        ck_assert_int_eq(proto_parse_line(LINE("HIT a=1 b=2 a=3"), 2, &req), 0);
        ck_assert_int_eq(proto_parse_line(LINE("HIT a=1 b=2 c=3"), 2, &req), -EBADMSG);
        ck_assert_int_eq(proto_parse_line(LINE("HIT"), 0, &req), 0);
        ck_assert_int_eq(proto_parse_line(LINE("HIT a=1"), 0, &req), -EBADMSG);
        ck_assert_int_eq(proto_parse_pairs(LINE("a=1 b=2"), 1, &req), -EBADMSG);
}
END_TEST

START_TEST (test_parse_pairs) {
        ProtoRequest req;

        /* Section headers of the INI configuration. */
        ck_assert_int_eq(proto_parse_pairs(LINE("method=GET path=/pantry/* ip=*"), PROTO_PAIRS_MAX, &req),
                         0);
        ck_assert_uint_eq(req.n_pairs, 3);
        ck_assert(slice_eq(&req.pairs[1].value, "/pantry/*"));
        ck_assert(slice_eq(&req.pairs[2].value, "*"));

        ck_assert_int_eq(proto_parse_pairs(LINE("path=\"/a b\""), PROTO_PAIRS_MAX, &req), 0);
        ck_assert_uint_eq(req.n_pairs, 1);
        ck_assert(slice_eq(&req.pairs[0].value, "/a b"));

        ck_assert_int_eq(proto_parse_pairs(LINE(""), PROTO_PAIRS_MAX, &req), 0);
        ck_assert_uint_eq(req.n_pairs, 0);
        ck_assert_int_eq(proto_parse_pairs(NULL, 0, PROTO_PAIRS_MAX, &req), 0);
        ck_assert_int_eq(proto_parse_line(NULL, 0, PROTO_PAIRS_MAX, &req), -EBADMSG);
        ck_assert_int_eq(req.error_code, PROTO_ERROR_UNKNOWN_COMMAND);
        ck_assert_int_eq(proto_parse_pairs(LINE(" \t "), PROTO_PAIRS_MAX, &req), 0);

        /* No command word here: "HIT" is a key without '='. */
        ck_assert_int_eq(proto_parse_pairs(LINE("HIT a=b"), PROTO_PAIRS_MAX, &req), -EBADMSG);
        ck_assert_int_eq(req.error_code, PROTO_ERROR_UNKNOWN);
        ck_assert_int_eq(proto_parse_pairs(LINE("default"), PROTO_PAIRS_MAX, &req), -EBADMSG);
}
END_TEST

START_TEST (test_request_get) {
        ProtoRequest req;

        ck_assert_int_eq(proto_parse_line(LINE("HIT ab=1 a=2 \"a b\"=3 ab=4 e="), PROTO_PAIRS_MAX, &req), 0);
        ck_assert(slice_eq(proto_request_get(&req, "ab", 2), "4"));
        ck_assert(slice_eq(proto_request_get(&req, "a", 1), "2"));
        ck_assert(slice_eq(proto_request_get(&req, "a b", 3), "3"));
        ck_assert(slice_eq(proto_request_get(&req, "e", 1), ""));
        ck_assert(slice_eq(proto_request_get(&req, "abc", 2), "4")); /* key_len, not strlen */
        ck_assert_ptr_null(proto_request_get(&req, "abc", 3));
        ck_assert_ptr_null(proto_request_get(&req, "A", 1));
        ck_assert_ptr_null(proto_request_get(&req, "", 0));
        ck_assert_ptr_null(proto_request_get(&req, NULL, 0));
}
END_TEST

/* ---- framing -------------------------------------------------------------------------------- */

typedef struct FrameCase {
        const char *buf;
        size_t len;
        size_t line_max;
        int ret;
        const char *line; /* when ret == 1 */
        size_t line_len;
        size_t consumed;
} FrameCase;

static const FrameCase frame_cases[] = {
        { LINE(""), 8, 0, NULL, 0, 0 },
        { LINE("HIT a=b"), 8, 0, NULL, 0, 0 },
        { LINE("HIT a=b\nHIT c=d\n"), 8, 1, LINE("HIT a=b"), 8 },
        { LINE("HIT a=b\r\nHIT"), 8, 1, LINE("HIT a=b"), 9 },
        { LINE("\n"), 8, 1, LINE(""), 1 },
        { LINE("\r\n"), 8, 1, LINE(""), 2 },
        { LINE("\r\r\n"), 8, 1, LINE("\r"), 3 },
        { LINE("a\rb\n"), 8, 1, LINE("a\rb"), 4 },
        { LINE("a\0b\n"), 8, 1, LINE("a\0b"), 4 },
        /* line_max counts the line without "\n" and its "\r". */
        { LINE("12345678"), 8, 0, NULL, 0, 0 },
        { LINE("12345678\n"), 8, 1, LINE("12345678"), 9 },
        { LINE("12345678\r"), 8, 0, NULL, 0, 0 }, /* the "\n" may follow */
        { LINE("12345678\r\n"), 8, 1, LINE("12345678"), 10 },
        { LINE("1234567\r\r\n"), 8, 1, LINE("1234567\r"), 10 },
        { LINE("123456789"), 8, -EMSGSIZE, NULL, 0, 0 }, /* before its "\n" */
        { LINE("123456789\n"), 8, -EMSGSIZE, NULL, 0, 0 },
        { LINE("12345678\rX"), 8, -EMSGSIZE, NULL, 0, 0 },
        { LINE("12345678\r\r"), 8, -EMSGSIZE, NULL, 0, 0 },
        { LINE("12345678\r\r\n"), 8, -EMSGSIZE, NULL, 0, 0 },
        { LINE("123456789\r\n"), 8, -EMSGSIZE, NULL, 0, 0 },
        { LINE("\n"), 0, 1, LINE(""), 1 },
        { LINE("x"), 0, -EMSGSIZE, NULL, 0, 0 },
        { LINE("\r"), 0, 0, NULL, 0, 0 },
};

START_TEST (test_frame) {
        const FrameCase *c = &frame_cases[_i];
        ProtoSlice line = { NULL, 0 };
        size_t consumed = 0;

        ck_assert_int_eq(proto_next_line(c->buf, c->len, c->line_max, &line, &consumed), c->ret);
        if (c->ret == 1) {
                ck_assert_ptr_eq(line.ptr, c->buf);
                ck_assert_uint_eq(line.len, c->line_len);
                ck_assert_mem_eq(line.ptr, c->line, c->line_len);
                ck_assert_uint_eq(consumed, c->consumed);
        }
}
END_TEST

START_TEST (test_frame_limits) {
        static char big[(1 << 20) + 2];
        ProtoSlice line;
        size_t consumed;

        memset(big, 'x', sizeof big);
        ck_assert_int_eq(proto_next_line(NULL, 0, PROTO_LINE_MAX, &line, &consumed), 0);

        /* PROTO_LINE_MAX bytes is a line; one more is refused before any "\n" arrives. */
        big[PROTO_LINE_MAX] = '\n';
        ck_assert_int_eq(proto_next_line(big, PROTO_LINE_MAX + 1, PROTO_LINE_MAX, &line, &consumed), 1);
        ck_assert_uint_eq(line.len, PROTO_LINE_MAX);
        ck_assert_uint_eq(consumed, PROTO_LINE_MAX + 1);
        ck_assert_int_eq(proto_next_line(big, PROTO_LINE_MAX, PROTO_LINE_MAX, &line, &consumed), 0);
        big[PROTO_LINE_MAX] = 'x';
        ck_assert_int_eq(proto_next_line(big, PROTO_LINE_MAX + 1, PROTO_LINE_MAX, &line, &consumed),
                         -EMSGSIZE);

        /* A 1 MiB line: refused whatever follows, even with its "\n" at the very end. */
        big[sizeof big - 1] = '\n';
        ck_assert_int_eq(proto_next_line(big, sizeof big, PROTO_LINE_MAX, &line, &consumed), -EMSGSIZE);
        ck_assert_int_eq(proto_next_line(big, sizeof big - 1, PROTO_LINE_MAX, &line, &consumed), -EMSGSIZE);

        /* An unbounded limit does not overflow. */
        ck_assert_int_eq(proto_next_line(big, sizeof big, SIZE_MAX, &line, &consumed), 1);
        ck_assert_uint_eq(line.len, sizeof big - 1);
        ck_assert_int_eq(proto_next_line(big, 10, SIZE_MAX, &line, &consumed), 0);

        /* A good line, then an overlong one: the first is still delivered. */
        const char two[] = "ok\nxxxxxxxxxxxxxxxxxxxx";
        ck_assert_int_eq(proto_next_line(two, sizeof two - 1, 8, &line, &consumed), 1);
        ck_assert_uint_eq(consumed, 3);
        ck_assert_int_eq(proto_next_line(two + consumed, sizeof two - 1 - consumed, 8, &line, &consumed),
                         -EMSGSIZE);
}
END_TEST

/* A connection's input in miniature: a small buffer, appends of chunk_size() bytes, lines taken
 * out as they complete. Writes every line followed by "\n" to out, and "<EMSGSIZE>" where the
 * connection would be closed. */
#define FEED_LINE_MAX 40
#define FEED_BUF_SIZE (FEED_LINE_MAX + 2) /* the least that always lets a line complete */

typedef size_t (*ChunkFunc)(size_t pos, void *userdata);

static size_t feed(const char *in, size_t in_len, ChunkFunc chunk_size, void *userdata, char *out) {
        char buf[FEED_BUF_SIZE];
        size_t used = 0, pos = 0, out_len = 0;

        while (pos < in_len) {
                size_t n = chunk_size(pos, userdata);
                if (n > in_len - pos)
                        n = in_len - pos;
                if (n > sizeof buf - used)
                        n = sizeof buf - used;
                expect(n > 0);
                memcpy(buf + used, in + pos, n);
                used += n;
                pos += n;

                for (;;) {
                        ProtoSlice line;
                        size_t consumed;
                        int r = proto_next_line(buf, used, FEED_LINE_MAX, &line, &consumed);
                        if (r == -EMSGSIZE) {
                                memcpy(out + out_len, "<EMSGSIZE>", 10);
                                return out_len + 10;
                        }
                        expect(r >= 0);
                        if (r == 0)
                                break;
                        expect(consumed <= used);
                        memcpy(out + out_len, line.ptr, line.len);
                        out_len += line.len;
                        out[out_len++] = '\n';
                        memmove(buf, buf + consumed, used - consumed);
                        used -= consumed;
                }
        }
        return out_len;
}

static size_t chunk_whole(size_t pos, void *userdata) {
        return SIZE_MAX;
}

static size_t chunk_one(size_t pos, void *userdata) {
        return 1;
}

static size_t chunk_random(size_t pos, void *userdata) {
        return 1 + prng_below(FEED_BUF_SIZE + 8);
}

/* Splits at the given offsets (an array ending in SIZE_MAX): feeds up to each in turn. */
static size_t chunk_at(size_t pos, void *userdata) {
        const size_t *cuts = userdata;
        for (size_t i = 0; cuts[i] != SIZE_MAX; i++)
                if (cuts[i] > pos)
                        return cuts[i] - pos;
        return SIZE_MAX;
}

static const struct {
        const char *text;
        size_t len;
} transcripts[] = {
        { LINE("HIT method=GET path=/status\nhit a=b\r\n\n\r\nHIT a=\"x y\"\r\r\nHIT a\rb\n"
               "0123456789012345678901234567890123456789\n"
               "0123456789012345678901234567890123456789\r\nHIT partial") },
        { LINE("HIT a=1\nHIT b=2\n01234567890123456789012345678901234567890\nHIT never\n") },
        { LINE("HIT a=1\r\n0123456789012345678901234567890123456789\r\r\nHIT c=3\n") },
};

START_TEST (test_frame_splits) {
        const char *text = transcripts[_i].text;
        size_t len = transcripts[_i].len;
        char expected[1024], out[1024];
        size_t expected_len, n;

        expected_len = feed(text, len, chunk_whole, NULL, expected);
        ck_assert_uint_gt(expected_len, 0);

        n = feed(text, len, chunk_one, NULL, out);
        ck_assert_uint_eq(n, expected_len);
        ck_assert_mem_eq(out, expected, n);

        /* Every split into two and three pieces. */
        for (size_t a = 1; a < len; a++)
                for (size_t b = a; b < len; b++) {
                        size_t cuts[] = { a, b, SIZE_MAX };
                        n = feed(text, len, chunk_at, cuts, out);
                        if (n != expected_len || memcmp(out, expected, n) != 0)
                                ck_abort_msg("split at %zu,%zu", a, b);
                }

        prng_seed(0x5eed + (uint64_t) _i);
        for (unsigned k = 0; k < 2000; k++) {
                n = feed(text, len, chunk_random, NULL, out);
                expect(n == expected_len && memcmp(out, expected, n) == 0);
        }
}
END_TEST

/* ---- replies -------------------------------------------------------------------------------- */

static const struct {
        bool allowed;
        uint64_t credit;
        int64_t reset;
        const char *reply;
} ok_cases[] = {
        { true, 999, 60, "OK true 999 60\n" },
        { false, 0, -1, "OK false 0 -1\n" },
        { true, 57, 60, "OK true 57 60\n" },
        { false, 0, 3597, "OK false 0 3597\n" },
        { true, 0, 0, "OK true 0 0\n" },
        { true, 10, 9, "OK true 10 9\n" },
        { true, UINT64_C(1) << 53, INT64_C(1) << 53, "OK true 9007199254740992 9007199254740992\n" },
        { false, UINT64_MAX, INT64_MAX, "OK false 18446744073709551615 9223372036854775807\n" },
        { false, 1, INT64_MIN, "OK false 1 -9223372036854775808\n" },
        { false, 1, -42, "OK false 1 -42\n" },
};

START_TEST (test_format_ok) {
        char buf[PROTO_REPLY_MAX];
        size_t n = proto_format_ok(buf, ok_cases[_i].allowed, ok_cases[_i].credit, ok_cases[_i].reset);
        ck_assert_str_eq(buf, ok_cases[_i].reply);
        ck_assert_uint_eq(n, strlen(ok_cases[_i].reply));
}
END_TEST

static const struct {
        ProtoErrorCode code;
        const char *reason;
        const char *reply;
} error_cases[] = {
        { PROTO_ERROR_UNKNOWN_COMMAND, "unknown command", "ERR unknown-command \"unknown command\"\n" },
        { PROTO_ERROR_UNKNOWN, "bad", "ERR unknown \"bad\"\n" },
        { PROTO_ERROR_UNKNOWN, "", "ERR unknown \"\"\n" },
        { PROTO_ERROR_UNKNOWN, NULL, "ERR unknown\n" },
        { PROTO_ERROR_UNKNOWN, "a \"quoted\"\x01\r\n\t\x7f end", "ERR unknown \"a ?quoted?????? end\"\n" },
        { PROTO_ERROR_UNKNOWN, "caf\xc3\xa9 \xff\xc3(\xed\xa0\x80",
          "ERR unknown \"caf\xc3\xa9 ?"
          "?(?"
          "??\"\n" },
        { _PROTO_ERROR_INVALID, "x", "ERR unknown \"x\"\n" },
        { _PROTO_ERROR_MAX, "x", "ERR unknown \"x\"\n" },
};

START_TEST (test_format_error) {
        char buf[PROTO_REPLY_MAX];
        size_t n = proto_format_error(buf, error_cases[_i].code, error_cases[_i].reason);
        ck_assert_str_eq(buf, error_cases[_i].reply);
        ck_assert_uint_eq(n, strlen(error_cases[_i].reply));
}
END_TEST

START_TEST (test_format_error_truncation) {
        char reason[400], buf[PROTO_REPLY_MAX + 16];
        const char prefix[] = "ERR unknown-command \""; /* 21 bytes before the reason */
        size_t n;

        /* Plain ASCII: cut to fill the line exactly, NUL included. */
        memset(reason, 'a', sizeof reason - 1);
        reason[sizeof reason - 1] = '\0';
        memset(buf, 0x55, sizeof buf);
        n = proto_format_error(buf, PROTO_ERROR_UNKNOWN_COMMAND, reason);
        ck_assert_uint_eq(n, PROTO_REPLY_MAX - 1);
        ck_assert_uint_eq(strlen(buf), n);
        ck_assert_mem_eq(buf, prefix, sizeof prefix - 1);
        ck_assert_mem_eq(buf + n - 2, "\"\n", 2);
        ck_assert_uint_eq((unsigned char) buf[PROTO_REPLY_MAX], 0x55); /* nothing written past it */

        /* Two-byte characters: never cut in the middle of one. Room is 128 - 21 - 3 = 104 bytes:
         * "x" and 51 "é" take 103, the 52nd would not fit. */
        reason[0] = 'x';
        for (size_t i = 1; i + 2 < sizeof reason; i += 2)
                memcpy(reason + i, "\xc3\xa9", 2);
        reason[sizeof reason - 2] = '\0';
        n = proto_format_error(buf, PROTO_ERROR_UNKNOWN_COMMAND, reason);
        ck_assert_uint_eq(n, 21 + 103 + 2);
        ck_assert_mem_eq(buf + n - 4, "\xc3\xa9\"\n", 4);

        /* Every reason length: the reply always fits and ends the line. */
        for (size_t len = 0; len < 200; len++) {
                memset(reason, 'b', len);
                reason[len] = '\0';
                n = proto_format_error(buf, PROTO_ERROR_UNKNOWN, reason);
                ck_assert_uint_lt(n, PROTO_REPLY_MAX);
                ck_assert_uint_eq(strlen(buf), n);
                ck_assert_int_eq(buf[n - 1], '\n');
                ck_assert_int_eq(buf[n - 2], '"');
        }
}
END_TEST

START_TEST (test_error_code_to_string) {
        ck_assert_str_eq(proto_error_code_to_string(PROTO_ERROR_UNKNOWN_COMMAND), "unknown-command");
        ck_assert_str_eq(proto_error_code_to_string(PROTO_ERROR_UNKNOWN), "unknown");
        ck_assert_ptr_null(proto_error_code_to_string(_PROTO_ERROR_MAX));
        ck_assert_ptr_null(proto_error_code_to_string(_PROTO_ERROR_INVALID));
}
END_TEST

/* ---- version 2: verbs and counts ------------------------------------------------------------ */

#define NO_COUNT UINT64_MAX /* in VerbCase.count: the request has none (has_count false) */

typedef struct VerbCase {
        const char *line;
        size_t len;
        int code; /* -1: parses; else the ProtoErrorCode */
        ProtoVerb verb;
        uint64_t count; /* has_count false and this is the default when it is NO_COUNT */
        size_t n_pairs;
        const char *kv[8];
} VerbCase;

#define OKV(l, v, c, n, ...)                                                                                \
        {                                                                                                   \
                LINE(l), -1, v, c, n, {                                                                     \
                        __VA_ARGS__                                                                         \
                }                                                                                           \
        }
#define ERRV(l, code)                                                                                       \
        {                                                                                                   \
                LINE(l), code, _PROTO_VERB_INVALID, 0, 0, {                                                 \
                        NULL                                                                                \
                }                                                                                           \
        }

static const VerbCase verb_cases[] = {
        /* Every verb, in any case, with pairs as in HIT. */
        OKV("HELLO", PROTO_VERB_HELLO, NO_COUNT, 0, NULL),
        OKV("hello client=libdivvy/1", PROTO_VERB_HELLO, NO_COUNT, 1, "client", "libdivvy/1"),
        OKV("TAKE 1", PROTO_VERB_TAKE, 1, 0, NULL),
        OKV("TAKE 5 method=GET path=/x", PROTO_VERB_TAKE, 5, 2, "method", "GET", "path", "/x"),
        OKV("take\t7\tip=\"1.2.3.4\"  ", PROTO_VERB_TAKE, 7, 1, "ip", "1.2.3.4"),
        OKV("PEEK", PROTO_VERB_PEEK, NO_COUNT, 0, NULL),
        OKV("PEEK a=b", PROTO_VERB_PEEK, NO_COUNT, 1, "a", "b"),
        OKV("PEEK 0 a=b", PROTO_VERB_PEEK, 0, 1, "a", "b"),
        OKV("Peek 3", PROTO_VERB_PEEK, 3, 0, NULL),
        OKV("PEEK \"5\"=x", PROTO_VERB_PEEK, NO_COUNT, 1, "5", "x"), /* quoted: a key */
        OKV("PEEK 5=x", PROTO_VERB_PEEK, NO_COUNT, 1, "5", "x"),     /* with '=': a pair */
        OKV("CHARGE 12 a=b a=c", PROTO_VERB_CHARGE, 12, 1, "a", "c"),
        OKV("REFUND 9007199254740991 a=1", PROTO_VERB_REFUND, UINT64_C(9007199254740991), 1, "a", "1"),
        OKV("RESET a=b", PROTO_VERB_RESET, NO_COUNT, 1, "a", "b"),
        OKV("RESET", PROTO_VERB_RESET, NO_COUNT, 0, NULL),
        OKV("EXPLAIN method=GET", PROTO_VERB_EXPLAIN, NO_COUNT, 1, "method", "GET"),
        OKV("explain", PROTO_VERB_EXPLAIN, NO_COUNT, 0, NULL),
        /* HIT never takes a count: through the version 2 entry point it is still version 1. */
        OKV("HIT a=b", PROTO_VERB_HIT, NO_COUNT, 1, "a", "b"),
        ERRV("HIT 1 a=b", PROTO_ERROR_UNKNOWN),
        ERRV("HIT 1", PROTO_ERROR_UNKNOWN),
        /* Missing, zero, malformed, oversized counts. */
        ERRV("TAKE", PROTO_ERROR_BAD_COUNT),
        ERRV("TAKE a=b", PROTO_ERROR_BAD_COUNT),
        ERRV("CHARGE \"1\"=b", PROTO_ERROR_BAD_COUNT),
        ERRV("REFUND   ", PROTO_ERROR_BAD_COUNT),
        ERRV("TAKE 0", PROTO_ERROR_BAD_COUNT),
        ERRV("CHARGE 0 a=b", PROTO_ERROR_BAD_COUNT),
        ERRV("REFUND 0", PROTO_ERROR_BAD_COUNT),
        ERRV("TAKE 01", PROTO_ERROR_BAD_COUNT),
        ERRV("PEEK 00", PROTO_ERROR_BAD_COUNT),
        ERRV("PEEK 007 a=b", PROTO_ERROR_BAD_COUNT),
        ERRV("TAKE -1", PROTO_ERROR_BAD_COUNT),
        ERRV("TAKE +1", PROTO_ERROR_BAD_COUNT),
        ERRV("TAKE 1x", PROTO_ERROR_BAD_COUNT),
        ERRV("TAKE 1.5", PROTO_ERROR_BAD_COUNT),
        ERRV("TAKE 1e3", PROTO_ERROR_BAD_COUNT),
        ERRV("TAKE 0x10", PROTO_ERROR_BAD_COUNT),
        ERRV("PEEK abc", PROTO_ERROR_BAD_COUNT),
        ERRV("PEEK a b=c", PROTO_ERROR_BAD_COUNT),
        ERRV("TAKE \xd9\xa3", PROTO_ERROR_BAD_COUNT), /* ARABIC-INDIC DIGIT THREE is no digit */
        ERRV("TAKE 9007199254740992", PROTO_ERROR_BAD_COUNT),
        ERRV("TAKE 18446744073709551615", PROTO_ERROR_BAD_COUNT),
        ERRV("TAKE 18446744073709551616", PROTO_ERROR_BAD_COUNT),
        ERRV("TAKE 99999999999999999999999999999999999999", PROTO_ERROR_BAD_COUNT),
        ERRV("HELLO 2", PROTO_ERROR_BAD_COUNT),
        ERRV("RESET 1 a=b", PROTO_ERROR_BAD_COUNT),
        ERRV("EXPLAIN 0", PROTO_ERROR_BAD_COUNT),
        /* Only the first token may be the count. */
        ERRV("TAKE 1 2", PROTO_ERROR_UNKNOWN),
        ERRV("TAKE 1 a=b 2", PROTO_ERROR_UNKNOWN),
        ERRV("PEEK a=b 1", PROTO_ERROR_UNKNOWN),
        /* The pairs fail as in HIT. */
        ERRV("TAKE 1 a=\"b", PROTO_ERROR_UNKNOWN),
        ERRV("PEEK =v", PROTO_ERROR_UNKNOWN),
        ERRV("TAKE 1 a=b\x01", PROTO_ERROR_UNKNOWN),
        ERRV("EXPLAIN a=\xff", PROTO_ERROR_UNKNOWN),
        ERRV("TAKE 1 a=b\"c", PROTO_ERROR_UNKNOWN),
        /* Unknown commands and divvy's leading blank. */
        ERRV("TAKES 1", PROTO_ERROR_UNKNOWN_COMMAND),
        ERRV("TAK 1", PROTO_ERROR_UNKNOWN_COMMAND),
        ERRV("TAKE1", PROTO_ERROR_UNKNOWN_COMMAND),
        ERRV("TAKE=1", PROTO_ERROR_UNKNOWN_COMMAND),
        ERRV("\"TAKE\" 1", PROTO_ERROR_UNKNOWN_COMMAND),
        ERRV(" TAKE 1", PROTO_ERROR_UNKNOWN_COMMAND),
        ERRV("\tHELLO", PROTO_ERROR_UNKNOWN_COMMAND),
        ERRV("", PROTO_ERROR_UNKNOWN_COMMAND),
        ERRV("  ", PROTO_ERROR_UNKNOWN_COMMAND),
        ERRV("T\0KE 1", PROTO_ERROR_UNKNOWN_COMMAND),
};

/* The client's timestamp after the count (TAKE, PEEK, CHARGE). */
typedef struct TimeCase {
        const char *line;
        int code;         /* -1: parses; else the ProtoErrorCode */
        uint64_t at_usec; /* UINT64_MAX: none */
        uint64_t count;
        size_t n_pairs;
} TimeCase;

static const TimeCase time_cases[] = {
        { "TAKE 2 @1700000000 a=b", -1, UINT64_C(1700000000000000), 2, 1 },
        { "TAKE 2 @1700000000.5 a=b", -1, UINT64_C(1700000000500000), 2, 1 },
        { "CHARGE 1 @1700000000.000001", -1, UINT64_C(1700000000000001), 1, 0 },
        { "PEEK @1700000000.123456 a=b", -1, UINT64_C(1700000000123456), 1, 1 }, /* PEEK's count: 1 */
        { "PEEK 0 @0", -1, 0, 0, 0 },
        { "PEEK 3 @99999999999", -1, UINT64_C(99999999999000000), 3, 0 },
        { "TAKE 2 a=@1", -1, UINT64_MAX, 2, 1 },           /* in a value: not a timestamp */
        { "TAKE 2 a=b @1", PROTO_ERROR_UNKNOWN, 0, 0, 0 }, /* after the pairs: a bad pair */
        { "TAKE @1 a=b", PROTO_ERROR_BAD_COUNT, 0, 0, 0 }, /* TAKE still needs its count */
        { "REFUND 1 @1", PROTO_ERROR_BAD_TIME, 0, 0, 0 },
        { "EXPLAIN @1", PROTO_ERROR_BAD_TIME, 0, 0, 0 },
        { "TAKE 1 @", PROTO_ERROR_BAD_TIME, 0, 0, 0 },
        { "TAKE 1 @1.", PROTO_ERROR_BAD_TIME, 0, 0, 0 },
        { "TAKE 1 @1.1234567", PROTO_ERROR_BAD_TIME, 0, 0, 0 },
        { "TAKE 1 @123456789012", PROTO_ERROR_BAD_TIME, 0, 0, 0 },
        { "TAKE 1 @99999999999999999999999", PROTO_ERROR_BAD_TIME, 0, 0, 0 },
        { "TAKE 1 @-1", PROTO_ERROR_BAD_TIME, 0, 0, 0 },
        { "TAKE 1 @1x a=b", PROTO_ERROR_BAD_TIME, 0, 0, 0 },
        { "TAKE 1 @1=2", -1, UINT64_MAX, 1, 1 }, /* '=': a pair, its key "@1" (none is reserved) */
};

START_TEST (test_parse_time) {
        const TimeCase *c = &time_cases[_i];
        ProtoRequest req;
        int r = proto_parse_request(c->line, strlen(c->line), PROTO_PAIRS_MAX, &req);

        if (c->code >= 0) {
                ck_assert_msg(r == -EBADMSG && req.error_code == (ProtoErrorCode) c->code, "'%s': %d %s",
                              c->line, r, req.error_reason ? req.error_reason : "(parsed)");
                return;
        }
        ck_assert_msg(r == 0, "'%s': %s", c->line, req.error_reason);
        ck_assert_int_eq(req.has_at, c->at_usec != UINT64_MAX);
        if (req.has_at)
                ck_assert_uint_eq(req.at_usec, c->at_usec);
        ck_assert_uint_eq(req.count, c->count);
        ck_assert_uint_eq(req.n_pairs, c->n_pairs);
}
END_TEST

START_TEST (test_parse_verb) {
        const VerbCase *c = &verb_cases[_i];
        ProtoRequest req;
        int r = proto_parse_request(c->line, c->len, PROTO_PAIRS_MAX, &req);

        if (c->code >= 0) {
                ck_assert_msg(r == -EBADMSG, "case %d '%s': parsed", _i, c->line);
                ck_assert_msg(req.error_code == (ProtoErrorCode) c->code, "case %d '%s': code %s, reason %s",
                              _i, c->line, proto_error_code_to_string(req.error_code), req.error_reason);
                ck_assert_ptr_nonnull(req.error_reason);
                ck_assert_uint_eq(req.n_pairs, 0);
                char reply[PROTO_REPLY_MAX];
                size_t n = proto_format_error(reply, req.error_code, req.error_reason);
                ck_assert_uint_lt(n, PROTO_REPLY_MAX);
                ck_assert_ptr_null(strchr(reply, '?'));
                return;
        }

        ck_assert_msg(r == 0, "case %d '%s': %s", _i, c->line, req.error_reason);
        ck_assert_int_eq(req.verb, c->verb);
        ck_assert_int_eq(req.command, c->verb); /* the version 1 name of the field */
        ck_assert_ptr_null(req.error_reason);
        if (c->count == NO_COUNT) {
                ck_assert(!req.has_count);
                ck_assert_uint_eq(req.count, c->verb == PROTO_VERB_PEEK ? 1 : 0);
        } else {
                ck_assert(req.has_count);
                ck_assert_uint_eq(req.count, c->count);
        }
        ck_assert_uint_eq(req.n_pairs, c->n_pairs);
        for (size_t i = 0; i < c->n_pairs; i++) {
                ck_assert_msg(slice_eq(&req.pairs[i].key, c->kv[2 * i]), "pair %zu key", i);
                ck_assert_msg(slice_eq(&req.pairs[i].value, c->kv[2 * i + 1]), "pair %zu value", i);
                ck_assert(slice_inside(&req.pairs[i].key, c->line, c->len));
        }

        /* The version 1 entry point knows HIT only. */
        r = proto_parse_line(c->line, c->len, PROTO_PAIRS_MAX, &req);
        if (c->verb == PROTO_VERB_HIT)
                ck_assert_int_eq(r, 0);
        else {
                ck_assert_int_eq(r, -EBADMSG);
                ck_assert_int_eq(req.error_code, PROTO_ERROR_UNKNOWN_COMMAND);
        }
}
END_TEST

/* HIT through the version 2 entry point: the same answer as version 1 for every case. */
START_TEST (test_parse_hit_unchanged) {
        ProtoRequest a, b;

        for (size_t i = 0; i < ELEMENTSOF(parse_ok_cases); i++) {
                const ParseCase *c = &parse_ok_cases[i];
                ck_assert_int_eq(proto_parse_request(c->line, c->len, PROTO_PAIRS_MAX, &a), 0);
                ck_assert_int_eq(a.verb, PROTO_VERB_HIT);
                ck_assert(!a.has_count);
                assert_pairs(&a, c);
        }
        for (size_t i = 0; i < ELEMENTSOF(parse_error_cases); i++) {
                const ErrorCase *c = &parse_error_cases[i];
                int r1 = proto_parse_line(c->line, c->len, PROTO_PAIRS_MAX, &a);
                int r2 = proto_parse_request(c->line, c->len, PROTO_PAIRS_MAX, &b);
                ck_assert_int_eq(r1, -EBADMSG);
                if (r2 == 0) /* only the version 2 verbs parse here */
                        ck_assert_msg(b.verb != PROTO_VERB_HIT &&
                                              a.error_code == PROTO_ERROR_UNKNOWN_COMMAND,
                                      "error case %zu parsed", i);
                else {
                        ck_assert_int_eq(a.error_code, b.error_code);
                        ck_assert_str_eq(a.error_reason, b.error_reason);
                }
        }
}
END_TEST

/* Every count from 0 up to the limit's neighbourhood, and every digit count. */
START_TEST (test_count_bounds) {
        char line[64];
        ProtoRequest req;

        for (uint64_t v = 0; v < 1000; v++) {
                size_t n = (size_t) snprintf(line, sizeof line, "PEEK %" PRIu64 " a=b", v);
                ck_assert_int_eq(proto_parse_request(line, n, PROTO_PAIRS_MAX, &req), 0);
                ck_assert_uint_eq(req.count, v);
                n = (size_t) snprintf(line, sizeof line, "TAKE %" PRIu64, v);
                ck_assert_int_eq(proto_parse_request(line, n, PROTO_PAIRS_MAX, &req), v == 0 ? -EBADMSG : 0);
        }
        for (uint64_t v = PROTO_COUNT_MAX - 3; v <= PROTO_COUNT_MAX + 3; v++) {
                size_t n = (size_t) snprintf(line, sizeof line, "CHARGE %" PRIu64, v);
                int r = proto_parse_request(line, n, PROTO_PAIRS_MAX, &req);
                if (v <= PROTO_COUNT_MAX) {
                        ck_assert_int_eq(r, 0);
                        ck_assert_uint_eq(req.count, v);
                } else {
                        ck_assert_int_eq(r, -EBADMSG);
                        ck_assert_int_eq(req.error_code, PROTO_ERROR_BAD_COUNT);
                        ck_assert_ptr_nonnull(strstr(req.error_reason, "above"));
                }
        }
        /* 1 followed by k zeros: fine up to 10^15, too big from 10^16 (> 2^53-1), never wrapping. */
        for (size_t k = 0; k < 40; k++) {
                size_t n = (size_t) snprintf(line, sizeof line, "TAKE 1");
                for (size_t j = 0; j < k; j++)
                        line[n++] = '0';
                ck_assert_int_eq(proto_parse_request(line, n, PROTO_PAIRS_MAX, &req),
                                 k <= 15 ? 0 : -EBADMSG);
        }
}
END_TEST

START_TEST (test_verb_to_string) {
        static const char *const names[] = { "HIT",    "HELLO",  "TAKE",  "PEEK",
                                             "CHARGE", "REFUND", "RESET", "EXPLAIN" };
        ck_assert_uint_eq(ELEMENTSOF(names), _PROTO_VERB_MAX);
        for (int v = 0; v < _PROTO_VERB_MAX; v++)
                ck_assert_str_eq(proto_verb_to_string((ProtoVerb) v), names[v]);
        ck_assert_ptr_null(proto_verb_to_string(_PROTO_VERB_MAX));
        ck_assert_ptr_null(proto_verb_to_string(_PROTO_VERB_INVALID));
        ck_assert_str_eq(proto_error_code_to_string(PROTO_ERROR_BAD_COUNT), "bad-count");
        ck_assert_str_eq(proto_error_code_to_string(PROTO_ERROR_FORBIDDEN), "forbidden");
}
END_TEST

/* ---- version 2 replies ---------------------------------------------------------------------- */

static char label255[PROTO_LABEL_MAX + 2];

static void make_label255(void) {
        memset(label255, 'L', PROTO_LABEL_MAX + 1); /* one too many: cut */
        label255[PROTO_LABEL_MAX + 1] = '\0';
}

START_TEST (test_format_decision) {
        char buf[PROTO_REPLY_V2_MAX + 16], expected[PROTO_REPLY_V2_MAX];
        size_t n;

        static const struct {
                AlgoResult res;
                ProtoRuleRef rule;
                const char *reply;
        } cases[] = {
                { { .allowed = true, .credit = 7, .limit = 10, .reset = 42, .retry = 0 },
                  { "cookies", 3 },
                  "OK allowed=true credit=7 limit=10 reset=42 retry=0 rule=cookies\n" },
                { { .allowed = false, .credit = 0, .limit = 10, .reset = 17, .retry = 17 },
                  { NULL, 3 },
                  "OK allowed=false credit=0 limit=10 reset=17 retry=17 rule=#3\n" },
                { { .allowed = false, .credit = 0, .limit = 0, .reset = 0, .retry = -1 },
                  { "", 0 },
                  "OK allowed=false credit=0 limit=0 reset=0 retry=-1 rule=#0\n" },
                { { .allowed = true, .credit = 1, .limit = 2, .reset = 3, .retry = 0 },
                  { "a b=\"c", 1 }, /* never a valid label: still one token */
                  "OK allowed=true credit=1 limit=2 reset=3 retry=0 rule=a?b??c\n" },
                { { .allowed = false,
                    .credit = UINT64_MAX,
                    .limit = UINT64_MAX,
                    .reset = UINT64_MAX,
                    .retry = INT64_MIN },
                  { NULL, UINT64_MAX },
                  "OK allowed=false credit=18446744073709551615 limit=18446744073709551615 "
                  "reset=18446744073709551615 retry=-9223372036854775808 rule=#18446744073709551615\n" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                n = proto_format_decision(buf, &cases[i].res, &cases[i].rule);
                ck_assert_str_eq(buf, cases[i].reply);
                ck_assert_uint_eq(n, strlen(cases[i].reply));
        }

        /* The longest: every number at its widest and a label one byte over the limit, cut. */
        make_label255();
        memset(buf, 0x55, sizeof buf);
        n = proto_format_decision(
                buf,
                &(AlgoResult){
                        .credit = UINT64_MAX, .limit = UINT64_MAX, .reset = UINT64_MAX, .retry = INT64_MIN },
                &(ProtoRuleRef){ label255, 1 });
        snprintf(expected, sizeof expected,
                 "OK allowed=false credit=18446744073709551615 limit=18446744073709551615 "
                 "reset=18446744073709551615 retry=-9223372036854775808 rule=%.255s\n",
                 label255);
        ck_assert_str_eq(buf, expected);
        ck_assert_uint_lt(n, PROTO_REPLY_V2_MAX);
        ck_assert_uint_eq((unsigned char) buf[PROTO_REPLY_V2_MAX], 0x55);
}
END_TEST

START_TEST (test_format_hello_reset) {
        char buf[PROTO_REPLY_V2_MAX], expected[PROTO_REPLY_V2_MAX];
        size_t n;

        n = proto_format_hello(buf, "0.3.0");
        ck_assert_str_eq(
                buf,
                "OK proto=2 server=divvyd/0.3.0 verbs=HIT,HELLO,TAKE,PEEK,CHARGE,REFUND,RESET,EXPLAIN\n");
        ck_assert_uint_eq(n, strlen(buf));
        proto_format_hello(buf, "1.0~rc1+git.2 x\n");
        ck_assert_str_eq(buf, "OK proto=2 server=divvyd/1.0~rc1+git.2?x? "
                              "verbs=HIT,HELLO,TAKE,PEEK,CHARGE,REFUND,RESET,EXPLAIN\n");
        proto_format_hello(buf, NULL);
        ck_assert_str_eq(
                buf, "OK proto=2 server=divvyd/ verbs=HIT,HELLO,TAKE,PEEK,CHARGE,REFUND,RESET,EXPLAIN\n");
        make_label255();
        n = proto_format_hello(buf, label255);
        snprintf(expected, sizeof expected,
                 "OK proto=2 server=divvyd/%.64s verbs=HIT,HELLO,TAKE,PEEK,CHARGE,REFUND,RESET,EXPLAIN\n",
                 label255);
        ck_assert_str_eq(buf, expected);
        ck_assert_uint_lt(n, PROTO_REPLY_V2_MAX);

        n = proto_format_reset(buf, 0);
        ck_assert_str_eq(buf, "OK reset=0\n");
        ck_assert_uint_eq(n, 11);
        proto_format_reset(buf, 3);
        ck_assert_str_eq(buf, "OK reset=3\n");
        proto_format_reset(buf, UINT64_MAX);
        ck_assert_str_eq(buf, "OK reset=18446744073709551615\n");
}
END_TEST

#define SL(s) ((ProtoSlice){ .ptr = s, .len = sizeof(s) - 1 })

START_TEST (test_format_explain) {
        static const ProtoRuleRef canaries[] = { { "try-new", 1 }, { NULL, 2 } },
                                  conts[] = { { "global", 0 } };
        char buf[PROTO_REPLY_EXPLAIN_MAX + 16];
        size_t n;

        static const struct {
                ProtoExplain e;
                const char *reply;
        } cases[] = {
                { { { "cookies", 4 }, "stop", SL("192.168.1.1"), "fixed-window", canaries, 2, conts, 1 },
                  "OK rule=cookies index=4 policy=stop actor=\"192.168.1.1\" algorithm=fixed-window "
                  "canaries=try-new,#2 continue=global\n" },
                { { { NULL, 7 }, "stop", { NULL, 0 }, "token-bucket", NULL, 0, NULL, 0 },
                  "OK rule=#7 index=7 policy=stop actor=- algorithm=token-bucket canaries=- continue=-\n" },
                { { { "x", 0 }, "stop", SL(""), "sliding-window", NULL, 0, conts, 1 },
                  "OK rule=x index=0 policy=stop actor=\"\" algorithm=sliding-window canaries=- "
                  "continue=global\n" },
                /* Escapes: quote, backslash, tab, controls, DEL, invalid UTF-8; valid UTF-8 as is. */
                { { { "x", 0 },
                    "stop",
                    SL("a\"b\\c\td\x01\x1f\x7f\xff\xc3 caf\xc3\xa9 e=f"),
                    "fixed-window",
                    NULL,
                    0,
                    NULL,
                    0 },
                  "OK rule=x index=0 policy=stop actor=\"a\\\"b\\\\c\\td\\x01\\x1f\\x7f\\xff\\xc3 "
                  "caf\xc3\xa9 e=f\" "
                  "algorithm=fixed-window canaries=- continue=-\n" },
                /* Names that are not tokens cannot break the line. */
                { { { "x", 0 }, "st op\n", SL("a"), "fixed window", NULL, 0, NULL, 0 },
                  "OK rule=x index=0 policy=st?op? actor=\"a\" algorithm=fixed?window canaries=- "
                  "continue=-\n" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                n = proto_format_explain(buf, &cases[i].e);
                ck_assert_str_eq(buf, cases[i].reply);
                ck_assert_uint_eq(n, strlen(cases[i].reply));
        }
}
END_TEST

/* The reply's actor="..." field, unescaped; returns its length, or -1 if malformed, and sets
 * *cut when it ends with the marker. */
static ssize_t unescape_actor(const char *reply, char *out, bool *cut) {
        const char *p = strstr(reply, " actor=\"");
        size_t n = 0;

        *cut = false;
        if (!p)
                return -1;
        for (p += 8; *p != '"'; p++) {
                if (*p == '\0' || *p == '\n' || (unsigned char) *p < ' ')
                        return -1;
                if (*p != '\\') {
                        out[n++] = *p;
                        continue;
                }
                p++;
                if (*p == '\\' || *p == '"')
                        out[n++] = *p;
                else if (*p == 't')
                        out[n++] = '\t';
                else if (*p == 'x') {
                        unsigned v;
                        if (sscanf(p + 1, "%2x", &v) != 1)
                                return -1;
                        out[n++] = (char) v;
                        p += 2;
                } else if (strncmp(p, "...\"", 4) == 0) {
                        *cut = true;
                        p += 2;
                } else
                        return -1;
        }
        return (ssize_t) n;
}

START_TEST (test_format_explain_bounds) {
        static ProtoRuleRef refs[200];
        static char labels[200][PROTO_LABEL_MAX + 1];
        char buf[PROTO_REPLY_EXPLAIN_MAX + 16], actor[2048], back[2048];
        bool cut;
        size_t n;

        /* Actors of every length and a mix of plain, escaped and multi-byte pieces: the escaped
         * text unescapes to a prefix of the actor, whole unless cut, cut only when too long. */
        prng_seed(0xac7);
        for (size_t len = 0; len < 700; len++) {
                static const char *const pieces[] = { "a",    "\"",       "\\",           "\t",
                                                      "\x01", "\xc3\xa9", "\xe2\x82\xac", "\xff" };
                size_t alen = 0, escaped = 0;
                while (alen < len) {
                        const char *pc = pieces[prng_below(ELEMENTSOF(pieces))];
                        memcpy(actor + alen, pc, strlen(pc));
                        alen += strlen(pc);
                        escaped += pc[0] == 'a'                         ? 1
                                   : pc[0] == '\xc3'                    ? 2
                                   : pc[0] == '\xe2'                    ? 3
                                   : pc[0] == '\x01' || pc[0] == '\xff' ? 4
                                                                        : 2;
                }
                memset(buf, 0x55, sizeof buf);
                n = proto_format_explain(
                        buf,
                        &(ProtoExplain){
                                { "r", 0 }, "stop", { actor, alen }, "fixed-window", NULL, 0, NULL, 0 });
                expect(n < PROTO_REPLY_EXPLAIN_MAX && strlen(buf) == n && buf[n - 1] == '\n');
                expect(memchr(buf, '\n', n - 1) == NULL);
                ssize_t b = unescape_actor(buf, back, &cut);
                expect(b >= 0);
                expect(memcmp(back, actor, (size_t) b) == 0);
                expect(cut == (escaped > PROTO_ACTOR_TEXT_MAX));
                expect(cut || (size_t) b == alen);
                const char *q = strstr(buf, " actor=\"") + 8, *e = strstr(q, "\" algorithm=");
                expect(e && (size_t) (e - q) <= PROTO_ACTOR_TEXT_MAX);
        }

        /* Lists: full-length labels until they no longer fit, then "...". */
        for (size_t i = 0; i < ELEMENTSOF(refs); i++) {
                memset(labels[i], 'a' + (char) (i % 26), PROTO_LABEL_MAX);
                labels[i][PROTO_LABEL_MAX] = '\0';
                refs[i] = (ProtoRuleRef){ labels[i], i };
        }
        memset(actor, 0x01, 600);
        memset(buf, 0x55, sizeof buf);
        make_label255();
        n = proto_format_explain(buf, &(ProtoExplain){ { label255, UINT64_MAX },
                                                       label255,
                                                       { actor, 600 },
                                                       label255,
                                                       refs,
                                                       ELEMENTSOF(refs),
                                                       refs,
                                                       ELEMENTSOF(refs) });
        ck_assert_uint_lt(n, PROTO_REPLY_EXPLAIN_MAX);
        ck_assert_uint_eq((unsigned char) buf[PROTO_REPLY_EXPLAIN_MAX], 0x55);
        ck_assert_uint_eq(strlen(buf), n);
        const char *c = strstr(buf, " canaries="), *k = strstr(buf, " continue=");
        ck_assert_ptr_nonnull(c);
        ck_assert_ptr_nonnull(k);
        /* 5 labels of 255 and their commas take 1279 bytes; a sixth would pass 1536. */
        ck_assert_uint_eq((size_t) (k - c) - 10, 5 * 256 - 1 + 4);
        ck_assert_mem_eq(k - 4, ",...", 4);
        ck_assert_mem_eq(buf + n - 5, ",...\n", 5);

        /* Short refs: hundreds fit, and a list that fits exactly is not cut. */
        for (size_t i = 0; i < ELEMENTSOF(refs); i++)
                refs[i] = (ProtoRuleRef){ NULL, i };
        n = proto_format_explain(
                buf,
                &(ProtoExplain){ { NULL, 0 }, "stop", { NULL, 0 }, "fixed-window", refs, 3, refs + 197, 3 });
        ck_assert_str_eq(buf,
                         "OK rule=#0 index=0 policy=stop actor=- algorithm=fixed-window canaries=#0,#1,#2 "
                         "continue=#197,#198,#199\n");
}
END_TEST

/* ---- fuzzing -------------------------------------------------------------------------------- */

#define FUZZ_ITERATIONS 50000 /* about a second under valgrind; the seed is fixed */
#define FUZZ_LINE_MAX   200   /* bytes: long enough for a few pairs and for quoted runs */

static const char *const fuzz_seeds[] = {
        "HIT method=GET path=/status",
        "HIT method=\"POST\" path=\"/cgi-bin/upload.cgi\"",
        "hit \"my key\"=\"a = b\" x= y=\"\" ip=192.168.1.1",
        "HIT a=1 b=2 a=3 c=caf\xc3\xa9 d=\xf0\x9f\x98\x80",
        "HIT\ta=b\t\tc=d  ",
        "  HIT\ta=b\t\tc=d  ",
};

static const char fuzz_alphabet[] = { 'H',    'I',    'T',    'h',    'a',    'b',    '=',    '=',    '"',
                                      '"',    ' ',    ' ',    '\t',   '\0',   '\r',   '\x01', '\x7f', '\x80',
                                      '\xc3', '\xa9', '\xe2', '\xed', '\xf0', '\xf4', '\xff', '/',    '*' };

static const char *const fuzz_seeds_v2[] = {
        "TAKE 1 method=GET path=/status",
        "PEEK a=1 b=2 a=3",
        "PEEK 0 ip=\"1.2.3.4\"",
        "CHARGE 9007199254740991 k=caf\xc3\xa9",
        "REFUND 12 x= y=\"\"",
        "RESET user=alice",
        "EXPLAIN method=GET",
        "HELLO",
        "take\t7\ta=b  ",
};

/* A line from seeds (the first 4 bytes of each are skipped when its pairs are appended),
 * or random bytes behind prefix. */
static size_t fuzz_make_line_from(char *line, const char *const *seeds, size_t n_seeds, const char *prefix) {
        size_t len;

        if (prng_below(4) == 0) {
                /* Random bytes from a hostile alphabet, often behind a valid command word. */
                len = prng_below(FUZZ_LINE_MAX - 4);
                for (size_t i = 0; i < len; i++)
                        line[i] = fuzz_alphabet[prng_below(sizeof fuzz_alphabet)];
                if (prng_below(2) && len >= strlen(prefix))
                        memcpy(line, prefix, strlen(prefix));
                return len;
        }

        const char *seed = seeds[prng_below(n_seeds)];
        len = strlen(seed);
        memcpy(line, seed, len);
        for (size_t m = prng_below(4); m > 0; m--) {
                size_t at = len ? prng_below(len) : 0;
                switch (prng_below(5)) {
                case 0: /* bit flip */
                        if (len)
                                line[at] ^= (char) (1u << prng_below(8));
                        break;
                case 1: /* insert a special byte */
                        if (len + 1 < FUZZ_LINE_MAX) {
                                memmove(line + at + 1, line + at, len - at);
                                line[at] = fuzz_alphabet[prng_below(sizeof fuzz_alphabet)];
                                len++;
                        }
                        break;
                case 2: /* truncate */
                        len = at;
                        break;
                case 3: /* delete one byte */
                        if (len) {
                                memmove(line + at, line + at + 1, len - at - 1);
                                len--;
                        }
                        break;
                default: /* append a copy of the seed's pairs: duplicates and many pairs */
                        if (len + 1 + strlen(seed + 4) < FUZZ_LINE_MAX) {
                                line[len++] = ' ';
                                memcpy(line + len, seed + 4, strlen(seed + 4));
                                len += strlen(seed + 4);
                        }
                        break;
                }
        }
        return len;
}

static size_t fuzz_make_line(char *line) {
        return fuzz_make_line_from(line, fuzz_seeds, ELEMENTSOF(fuzz_seeds), "HIT ");
}

/* Writes the parsed pairs back as a line with every key and value quoted. */
static size_t fuzz_reserialize(const ProtoRequest *req, char *out) {
        size_t n = 0;
        memcpy(out, "HIT", 3);
        n = 3;
        for (size_t i = 0; i < req->n_pairs; i++) {
                out[n++] = ' ';
                out[n++] = '"';
                memcpy(out + n, req->pairs[i].key.ptr, req->pairs[i].key.len);
                n += req->pairs[i].key.len;
                memcpy(out + n, "\"=\"", 3);
                n += 3;
                memcpy(out + n, req->pairs[i].value.ptr, req->pairs[i].value.len);
                n += req->pairs[i].value.len;
                out[n++] = '"';
        }
        return n;
}

START_TEST (test_fuzz) {
        char line[FUZZ_LINE_MAX], again[4 * FUZZ_LINE_MAX], reply[PROTO_REPLY_MAX];
        unsigned ok = 0, failed = 0;
        ProtoRequest req, req2;

        prng_seed(UINT64_C(0xd1e5eed));
        for (unsigned iter = 0; iter < FUZZ_ITERATIONS; iter++) {
                size_t len = fuzz_make_line(line);
                size_t max_pairs = prng_below(8) == 0 ? prng_below(4) : PROTO_PAIRS_MAX;
                int r = proto_parse_line(line, len, max_pairs, &req);

                if (r < 0) {
                        expect(r == -EBADMSG);
                        expect(req.error_reason != NULL);
                        expect(req.error_code == PROTO_ERROR_UNKNOWN ||
                               req.error_code == PROTO_ERROR_UNKNOWN_COMMAND);
                        size_t n = proto_format_error(reply, req.error_code, req.error_reason);
                        expect(n < PROTO_REPLY_MAX);
                        expect(reply[n - 1] == '\n');
                        failed++;
                        continue;
                }

                expect(r == 0);
                expect(req.command == PROTO_COMMAND_HIT);
                expect(req.n_pairs <= max_pairs);
                for (size_t i = 0; i < req.n_pairs; i++) {
                        expect(slice_inside(&req.pairs[i].key, line, len));
                        expect(slice_inside(&req.pairs[i].value, line, len));
                        expect(req.pairs[i].key.len > 0);
                        expect(proto_request_get(&req, req.pairs[i].key.ptr, req.pairs[i].key.len) ==
                               &req.pairs[i].value);
                        for (size_t j = 0; j < i; j++)
                                expect(req.pairs[j].key.len != req.pairs[i].key.len ||
                                       memcmp(req.pairs[j].key.ptr, req.pairs[i].key.ptr,
                                              req.pairs[i].key.len) != 0);
                }

                /* Round trip: the pairs, all quoted, parse back to the same pairs. */
                size_t n = fuzz_reserialize(&req, again);
                expect(proto_parse_line(again, n, max_pairs, &req2) == 0);
                expect(req2.n_pairs == req.n_pairs);
                for (size_t i = 0; i < req.n_pairs; i++) {
                        expect(req2.pairs[i].key.len == req.pairs[i].key.len);
                        expect(memcmp(req2.pairs[i].key.ptr, req.pairs[i].key.ptr, req.pairs[i].key.len) ==
                               0);
                        expect(req2.pairs[i].value.len == req.pairs[i].value.len);
                        expect(memcmp(req2.pairs[i].value.ptr, req.pairs[i].value.ptr,
                                      req.pairs[i].value.len) == 0);
                }
                ok++;
        }

        /* The generator must exercise both outcomes, or the invariants prove little. */
        ck_assert_uint_gt(ok, FUZZ_ITERATIONS / 10);
        ck_assert_uint_gt(failed, FUZZ_ITERATIONS / 10);
}
END_TEST

/* Version 2: the verb, the count's rules and the pairs survive a round trip; errors carry
 * only the codes a version 2 request can get; HIT parses as in version 1. */
START_TEST (test_fuzz_v2) {
        char line[FUZZ_LINE_MAX], again[4 * FUZZ_LINE_MAX + 64];
        unsigned ok = 0, failed = 0, counted = 0;
        ProtoRequest req, req2, v1;

        prng_seed(UINT64_C(0x2e2b5));
        for (unsigned iter = 0; iter < FUZZ_ITERATIONS; iter++) {
                size_t len = fuzz_make_line_from(line, fuzz_seeds_v2, ELEMENTSOF(fuzz_seeds_v2),
                                                 prng_below(2) ? "TAKE 1 " : "PEEK ");
                int r = proto_parse_request(line, len, PROTO_PAIRS_MAX, &req);
                int r1 = proto_parse_line(line, len, PROTO_PAIRS_MAX, &v1);

                if (r < 0) {
                        expect(r == -EBADMSG && req.error_reason && req.n_pairs == 0);
                        expect(req.error_code == PROTO_ERROR_UNKNOWN ||
                               req.error_code == PROTO_ERROR_UNKNOWN_COMMAND ||
                               req.error_code == PROTO_ERROR_BAD_COUNT);
                        expect(r1 < 0);
                        failed++;
                        continue;
                }
                expect(r == 0 && req.verb >= 0 && req.verb < _PROTO_VERB_MAX);
                expect((r1 == 0) == (req.verb == PROTO_VERB_HIT));
                expect(req.count <= PROTO_COUNT_MAX);
                if (req.verb == PROTO_VERB_TAKE || req.verb == PROTO_VERB_CHARGE ||
                    req.verb == PROTO_VERB_REFUND)
                        expect(req.has_count && req.count >= 1);
                else if (req.verb == PROTO_VERB_PEEK)
                        expect(req.has_count || req.count == 1);
                else
                        expect(!req.has_count && req.count == 0);
                counted += req.has_count;

                /* Round trip: "VERB [count]" and the pairs, all quoted. */
                char pairs[4 * FUZZ_LINE_MAX];
                size_t m = fuzz_reserialize(&req, pairs); /* "HIT" and the pairs */
                size_t n = (size_t) sprintf(again, "%s", proto_verb_to_string(req.verb));
                if (req.has_count)
                        n += (size_t) sprintf(again + n, " %" PRIu64, req.count);
                memcpy(again + n, pairs + 3, m - 3);
                n += m - 3;
                expect(proto_parse_request(again, n, PROTO_PAIRS_MAX, &req2) == 0);
                expect(req2.verb == req.verb && req2.count == req.count && req2.has_count == req.has_count);
                expect(req2.n_pairs == req.n_pairs);
                for (size_t i = 0; i < req.n_pairs; i++)
                        expect(req2.pairs[i].value.len == req.pairs[i].value.len &&
                               memcmp(req2.pairs[i].value.ptr, req.pairs[i].value.ptr,
                                      req.pairs[i].value.len) == 0);
                ok++;
        }
        ck_assert_uint_gt(ok, FUZZ_ITERATIONS / 10);
        ck_assert_uint_gt(failed, FUZZ_ITERATIONS / 10);
        ck_assert_uint_gt(counted, FUZZ_ITERATIONS / 20);
}
END_TEST

START_TEST (test_fuzz_frame) {
        char buf[64];

        prng_seed(UINT64_C(0xf7a3e));
        for (unsigned iter = 0; iter < FUZZ_ITERATIONS; iter++) {
                size_t len = prng_below(sizeof buf + 1), line_max = prng_below(40);
                ProtoSlice line;
                size_t consumed;

                for (size_t i = 0; i < len; i++)
                        buf[i] = "ab\r\n\0"[prng_below(prng_below(2) ? 5 : 2)];
                int r = proto_next_line(buf, len, line_max, &line, &consumed);
                if (r == 1) {
                        expect(consumed <= len);
                        expect(buf[consumed - 1] == '\n');
                        expect(memchr(buf, '\n', consumed - 1) == NULL);
                        expect(line.ptr == buf);
                        expect(line.len <= line_max);
                        expect(line.len + 1 >= consumed - 1);
                } else if (r == 0) {
                        expect(memchr(buf, '\n', len) == NULL);
                        expect(len <= line_max + 1);
                } else {
                        expect(r == -EMSGSIZE);
                        const char *nl = memchr(buf, '\n', len);
                        expect((nl ? (size_t) (nl - buf) : len) > line_max);
                }
        }
}
END_TEST

/* HELLO, RESET and EXPLAIN take no count: a number there is refused as one ("take no count"),
 * but a word that is no number is a pair that lost its '=' (as on RESP, where it is an odd
 * argument), not a count, and is refused as such. */
START_TEST (test_no_count_verbs_word_is_a_pair) {
        static const struct {
                const char *line;
                ProtoErrorCode code;
                const char *reason;
        } cases[] = {
                { "RESET user", PROTO_ERROR_UNKNOWN, "expected '=' after key" },
                { "EXPLAIN method", PROTO_ERROR_UNKNOWN, "expected '=' after key" },
                { "HELLO client", PROTO_ERROR_UNKNOWN, "expected '=' after key" },
                { "RESET 1x a=b", PROTO_ERROR_UNKNOWN, "expected '=' after key" },
                { "RESET 12 a=b", PROTO_ERROR_BAD_COUNT, "take no count" },
                { "EXPLAIN 0", PROTO_ERROR_BAD_COUNT, "take no count" },
                { "HELLO 2", PROTO_ERROR_BAD_COUNT, "take no count" },
        };
        ProtoRequest req;

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                ck_assert_int_eq(
                        proto_parse_request(cases[i].line, strlen(cases[i].line), PROTO_PAIRS_MAX, &req),
                        -EBADMSG);
                ck_assert_msg(req.error_code == cases[i].code, "%s: %s", cases[i].line,
                              proto_error_code_to_string(req.error_code));
                ck_assert_msg(strstr(req.error_reason, cases[i].reason), "%s: \"%s\"", cases[i].line,
                              req.error_reason);
        }
}
END_TEST

/* A pair whose key starts with '@' is a pair wherever it stands, first after the verb and
 * count included: README says no request key is reserved, a timestamp is a bare "@..." token
 * (no '=', as the count), and HIT, a later position and RESP all took it as a pair. */
START_TEST (test_at_key_is_a_pair) {
        static const char *const lines[] = {
                "TAKE 1 @src=x path=/x", "PEEK @src=x",        "CHARGE 2 @1=x",
                "EXPLAIN @src=x",        "RESET @src=\"x y\"", "PEEK 0 \"@src\"=x",
        };
        ProtoRequest req;

        for (size_t i = 0; i < ELEMENTSOF(lines); i++) {
                ck_assert_msg(proto_parse_request(lines[i], strlen(lines[i]), PROTO_PAIRS_MAX, &req) == 0,
                              "%s: %s", lines[i], req.error_reason);
                ck_assert(!req.has_at);
                ck_assert_ptr_nonnull(proto_request_get(&req, lines[i][0] == 'C' ? "@1" : "@src",
                                                        lines[i][0] == 'C' ? 2 : 4));
        }
        /* a bare "@..." stays a timestamp, with a pair after it */
        ck_assert_int_eq(proto_parse_request("TAKE 1 @12 @src=x", 17, PROTO_PAIRS_MAX, &req), 0);
        ck_assert(req.has_at);
        ck_assert_uint_eq(req.at_usec, 12000000);
        ck_assert_ptr_nonnull(proto_request_get(&req, "@src", 4));
}
END_TEST

int main(void) {
        Suite *s = suite_create("protocol");
        TCase *tc;

        tc = tcase_create("parse");
        tcase_add_loop_test(tc, test_parse_ok, 0, ELEMENTSOF(parse_ok_cases));
        tcase_add_loop_test(tc, test_parse_error, 0, ELEMENTSOF(parse_error_cases));
        tcase_add_test(tc, test_pairs_limit);
        tcase_add_test(tc, test_parse_pairs);
        tcase_add_test(tc, test_request_get);
        suite_add_tcase(s, tc);

        tc = tcase_create("verbs");
        tcase_add_loop_test(tc, test_parse_verb, 0, ELEMENTSOF(verb_cases));
        tcase_add_loop_test(tc, test_parse_time, 0, ELEMENTSOF(time_cases));
        tcase_add_test(tc, test_parse_hit_unchanged);
        tcase_add_test(tc, test_count_bounds);
        tcase_add_test(tc, test_verb_to_string);
        tcase_add_test(tc, test_format_decision);
        tcase_add_test(tc, test_format_hello_reset);
        tcase_add_test(tc, test_format_explain);
        tcase_add_test(tc, test_format_explain_bounds);
        tcase_add_test(tc, test_no_count_verbs_word_is_a_pair);
        tcase_add_test(tc, test_at_key_is_a_pair);
        suite_add_tcase(s, tc);

        tc = tcase_create("frame");
        tcase_add_loop_test(tc, test_frame, 0, ELEMENTSOF(frame_cases));
        tcase_add_test(tc, test_frame_limits);
        tcase_add_loop_test(tc, test_frame_splits, 0, ELEMENTSOF(transcripts));
        suite_add_tcase(s, tc);

        tc = tcase_create("reply");
        tcase_add_loop_test(tc, test_format_ok, 0, ELEMENTSOF(ok_cases));
        tcase_add_loop_test(tc, test_format_error, 0, ELEMENTSOF(error_cases));
        tcase_add_test(tc, test_format_error_truncation);
        tcase_add_test(tc, test_error_code_to_string);
        suite_add_tcase(s, tc);

        tc = tcase_create("fuzz");
        tcase_add_test(tc, test_fuzz);
        tcase_add_test(tc, test_fuzz_v2);
        tcase_add_test(tc, test_fuzz_frame);
        suite_add_tcase(s, tc);

        return check_run_suite(s);
}
