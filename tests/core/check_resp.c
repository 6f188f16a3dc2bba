/* SPDX-License-Identifier: MIT */
/* resp.c: the RESP2 request parser (complete, incomplete at every byte, malformed, over the
 * limits), resp_to_request() against the line protocol's parser, and the reply formatters. */

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/resp.h"
#include "check-run.h"

/* ---- the parser ---- */

static const struct {
        const char *in;
        int r;              /* of the whole input */
        size_t argc;        /* r == 1 */
        const char *args;   /* r == 1: the arguments joined by '|' */
        size_t consumed;    /* r == 1; 0: the whole input */
        const char *reason; /* r < 0: a word of the sentence */
} parse_cases[] = {
        { "*1\r\n$4\r\nPING\r\n", 1, 1, "PING", 0, NULL },
        { "*3\r\n$3\r\nHIT\r\n$4\r\npath\r\n$2\r\n/x\r\n", 1, 3, "HIT|path|/x", 0, NULL },
        { "*2\r\n$3\r\nHIT\r\n$0\r\n\r\n", 1, 2, "HIT|", 0, NULL },
        { "*2\r\n$4\r\nECHO\r\n$12\r\nhello world!\r\n", 1, 2, "ECHO|hello world!", 0, NULL },
        /* binary-safe: CR, LF and NUL inside a bulk */
        { "*1\r\n$4\r\na\r\nb\r\n", 1, 1, "a\r\nb", 0, NULL },
        /* two pipelined: the first only */
        { "*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n", 1, 1, "PING", 14, NULL },
        /* empty and null arrays: nothing to answer */
        { "*0\r\n", 1, 0, "", 0, NULL },
        { "*-1\r\n", 1, 0, "", 0, NULL },
        /* empty lines between requests (redis-cli --pipe): skipped as requests of nothing */
        { "\r\n", 1, 0, "", 0, NULL },
        { "\n\r\n*1\r\n$4\r\nPING\r\n", 1, 0, "", 3, NULL },
        /* incomplete */
        { "", 0, 0, NULL, 0, NULL },
        { "*", 0, 0, NULL, 0, NULL },
        { "*2\r", 0, 0, NULL, 0, NULL },
        { "*2\r\n$3\r\nHIT\r\n", 0, 0, NULL, 0, NULL },
        { "*1\r\n$4\r\nPI", 0, 0, NULL, 0, NULL },
        { "*1\r\n$4\r\nPING", 0, 0, NULL, 0, NULL },
        { "*1\r\n$4\r\nPING\r", 0, 0, NULL, 0, NULL },
        /* malformed framing */
        { "PING\r\n", -EBADMSG, 0, NULL, 0, "expected '*'" },
        { "*1\r\n+PING\r\n", -EBADMSG, 0, NULL, 0, "expected '$'" },
        { "*1\r\n:1\r\n", -EBADMSG, 0, NULL, 0, "expected '$'" },
        { "*1\r\n*1\r\n$1\r\na\r\n", -EBADMSG, 0, NULL, 0, "nested" },
        { "*x\r\n", -EBADMSG, 0, NULL, 0, "invalid length" },
        { "*\r\n", -EBADMSG, 0, NULL, 0, "invalid length" },
        { "*-2\r\n", -EBADMSG, 0, NULL, 0, "invalid length" },
        { "*1\n", -EBADMSG, 0, NULL, 0, "invalid length" },
        { "*1\rx", -EBADMSG, 0, NULL, 0, "invalid length" },
        { "*+1\r\n", -EBADMSG, 0, NULL, 0, "invalid length" },
        { "*1\r\n$-1\r\n", -EBADMSG, 0, NULL, 0, "invalid length" },
        { "*-0\r\n", -EBADMSG, 0, NULL, 0, "invalid length" },
        { "*1\r\n$-0\r\n\r\n", -EBADMSG, 0, NULL, 0, "invalid length" }, /* as Redis: "-0" is no length */
        { "*1\r\n$ 4\r\nPING\r\n", -EBADMSG, 0, NULL, 0, "invalid length" },
        { "*1\r\n$4\r\nPINGxx", -EBADMSG, 0, NULL, 0, "CRLF" },
        { "*1\r\n$4\r\nPING\rx", -EBADMSG, 0, NULL, 0, "CRLF" },
        { "*1\r\n$4\r\nPINGx", -EBADMSG, 0, NULL, 0, "CRLF" },
        { "*1\r\n$4\r\nPING\n", -EBADMSG, 0, NULL, 0, "CRLF" },
        /* digits without end: refused after RESP_HEADER_MAX bytes, not buffered forever */
        { "*11111111111111111111111111", -EBADMSG, 0, NULL, 0, "invalid length" },
        { "*1\r\n$0000000000000000000000000", -EBADMSG, 0, NULL, 0, "invalid length" },
        /* limits: arguments, a bulk longer than a line, a request longer than the limit */
        { "*137\r\n", -E2BIG, 0, NULL, 0, "too many" },
        { "*9999999999\r\n", -E2BIG, 0, NULL, 0, "too many" },
        { "*1\r\n$8193\r\n", -EMSGSIZE, 0, NULL, 0, "bulk string longer" },
        { "*1\r\n$99999999999\r\n", -EMSGSIZE, 0, NULL, 0, "bulk string longer" },
};

static void join_args(const RespRequest *req, char *buf, size_t size) {
        size_t n = 0;

        buf[0] = 0;
        for (size_t i = 0; i < req->argc; i++) {
                ck_assert_uint_lt(n + req->argv[i].len + 2, size);
                if (i > 0)
                        buf[n++] = '|';
                memcpy(buf + n, req->argv[i].ptr, req->argv[i].len);
                n += req->argv[i].len;
        }
        buf[n] = 0;
}

START_TEST (test_parse) {
        const char *in = parse_cases[_i].in;
        size_t len = strlen(in);
        RespRequest req;
        char joined[256];
        int r;

        /* "\x00"-free inputs but one: the NUL case is built below. */
        r = resp_parse(in, len, RESP_ARGS_MAX, RESP_REQUEST_MAX, &req);
        ck_assert_msg(r == parse_cases[_i].r, "\"%s\": %d, expected %d", in, r, parse_cases[_i].r);
        if (r == 1) {
                ck_assert_uint_eq(req.argc, parse_cases[_i].argc);
                ck_assert_uint_eq(req.consumed, parse_cases[_i].consumed ?: len);
                join_args(&req, joined, sizeof joined);
                ck_assert_str_eq(joined, parse_cases[_i].args);
                for (size_t i = 0; i < req.argc; i++)
                        ck_assert(req.argv[i].ptr >= in && req.argv[i].ptr + req.argv[i].len <= in + len);
                if (req.argc > 0) {
                        /* parsed again (a queued request at EXEC): the same arguments and bytes */
                        RespRequest again;

                        resp_parse_again(in, &again);
                        ck_assert_uint_eq(again.argc, req.argc);
                        ck_assert_uint_eq(again.consumed, req.consumed);
                        for (size_t i = 0; i < req.argc; i++)
                                ck_assert(again.argv[i].ptr == req.argv[i].ptr &&
                                          again.argv[i].len == req.argv[i].len);
                }
        } else if (r < 0) {
                ck_assert_ptr_nonnull(req.error);
                ck_assert_msg(strstr(req.error, parse_cases[_i].reason), "\"%s\": \"%s\"", in, req.error);
                ck_assert_uint_eq(req.argc, 0);
        }

        /* Every proper prefix of a complete request needs more; every prefix of a malformed one
         * needs more or fails the same way, never succeeds. */
        for (size_t k = 0; k < len && in[0] != '\r' && in[0] != '\n'; k++) {
                int rk = resp_parse(in, k, RESP_ARGS_MAX, RESP_REQUEST_MAX, &req);
                if (r == 1 && k < (parse_cases[_i].consumed ?: len))
                        ck_assert_msg(rk == 0, "\"%s\" cut at %zu: %d", in, k, rk);
                else if (r <= 0)
                        ck_assert_msg(rk == 0 || rk == r, "\"%s\" cut at %zu: %d", in, k, rk);
        }
}
END_TEST

START_TEST (test_parse_limits) {
        static char buf[RESP_REQUEST_MAX * 2];
        RespRequest req;
        size_t n = 0;

        /* RESP_ARGS_MAX arguments: fine; the same with max_args one less: too many. */
        n += (size_t) sprintf(buf + n, "*%d\r\n", RESP_ARGS_MAX);
        for (int i = 0; i < RESP_ARGS_MAX; i++)
                n += (size_t) sprintf(buf + n, "$1\r\n%c\r\n", 'a' + i % 26);
        ck_assert_int_eq(resp_parse(buf, n, RESP_ARGS_MAX, RESP_REQUEST_MAX, &req), 1);
        ck_assert_uint_eq(req.argc, RESP_ARGS_MAX);
        ck_assert_uint_eq(req.consumed, n);
        ck_assert_int_eq(resp_parse(buf, n, RESP_ARGS_MAX - 1, RESP_REQUEST_MAX, &req), -E2BIG);

        /* A bulk of exactly the line limit is fine; the request limit is checked against the
         * declared length, before the bytes arrive. */
        n = (size_t) sprintf(buf, "*1\r\n$%d\r\n", RESP_BULK_MAX);
        memset(buf + n, 'x', RESP_BULK_MAX);
        memcpy(buf + n + RESP_BULK_MAX, "\r\n", 2);
        ck_assert_int_eq(resp_parse(buf, n + RESP_BULK_MAX + 2, RESP_ARGS_MAX, RESP_REQUEST_MAX, &req), 1);
        ck_assert_uint_eq(req.argv[0].len, RESP_BULK_MAX);
        ck_assert_int_eq(resp_parse(buf, n, RESP_ARGS_MAX, RESP_REQUEST_MAX, &req), 0);
        ck_assert_int_eq(resp_parse(buf, n, RESP_ARGS_MAX, 100, &req), -EMSGSIZE);

        /* Two bulks of the line limit: more than a request may be. */
        n = (size_t) sprintf(buf, "*2\r\n$%d\r\n", RESP_BULK_MAX);
        memset(buf + n, 'x', RESP_BULK_MAX);
        n += RESP_BULK_MAX;
        n += (size_t) sprintf(buf + n, "\r\n$%d\r\n", RESP_BULK_MAX);
        ck_assert_int_eq(resp_parse(buf, n, RESP_ARGS_MAX, RESP_REQUEST_MAX, &req), -EMSGSIZE);
        ck_assert(strstr(req.error, "request longer"));
}
END_TEST

/* ---- commands and resp_to_request() ---- */

START_TEST (test_command_names) {
        ck_assert_int_eq(resp_command_from_name((ProtoSlice){ "hit", 3 }), RESP_CMD_HIT);
        ck_assert_int_eq(resp_command_from_name((ProtoSlice){ "Cl.Throttle", 11 }), RESP_CMD_CL_THROTTLE);
        ck_assert_int_eq(resp_command_from_name((ProtoSlice){ "rl.pget", 7 }), RESP_CMD_RL_PGET);
        ck_assert_int_eq(resp_command_from_name((ProtoSlice){ "del", 3 }), RESP_CMD_DEL);
        ck_assert_int_eq(resp_command_from_name((ProtoSlice){ "HITS", 4 }), RESP_CMD_UNKNOWN);
        ck_assert_int_eq(resp_command_from_name((ProtoSlice){ "HI", 2 }), RESP_CMD_UNKNOWN);
        ck_assert_int_eq(resp_command_from_name((ProtoSlice){ "", 0 }), RESP_CMD_UNKNOWN);
        for (RespCommand c = RESP_CMD_HIT; c < _RESP_CMD_MAX; c++) {
                const char *name = resp_command_to_string(c);
                ck_assert_ptr_nonnull(name);
                ck_assert_int_eq(resp_command_from_name((ProtoSlice){ name, strlen(name) }), c);
        }
        ck_assert_ptr_null(resp_command_to_string(RESP_CMD_UNKNOWN));
        ck_assert_int_eq(resp_command_verb(RESP_CMD_TAKE), PROTO_VERB_TAKE);
        ck_assert_int_eq(resp_command_verb(RESP_CMD_PING), _PROTO_VERB_INVALID);
}
END_TEST

/* Each RESP request (arguments joined by '|') next to the line the line protocol would parse
 * the same way; line NULL: the RESP request fails with code and a reason containing reason. */
static const struct {
        const char *args;
        const char *line;
        ProtoErrorCode code;
        const char *reason;
} request_cases[] = {
        { "HIT|path|/x|user|1", "HIT path=/x user=1", 0, NULL },
        { "hit|path|/x", "HIT path=/x", 0, NULL },
        { "HIT", "HIT", 0, NULL },
        { "HIT|a|1|a|2|b|3", "HIT a=1 a=2 b=3", 0, NULL }, /* last value, first position */
        { "HIT|q|a b=c", "HIT q=\"a b=c\"", 0, NULL },     /* what a line quotes */
        { "HIT|path|", "HIT path=", 0, NULL },             /* empty value */
        { "TAKE|3|path|/x", "TAKE 3 path=/x", 0, NULL },
        { "TAKE|3|@1700000000.5|path|/x", "TAKE 3 @1700000000.5 path=/x", 0, NULL },
        { "PEEK|path|/x", "PEEK path=/x", 0, NULL },
        { "PEEK|0|path|/x", "PEEK 0 path=/x", 0, NULL },
        { "PEEK|@1700000000|path|/x", "PEEK @1700000000 path=/x", 0, NULL },
        { "PEEK|2|@1700000000|path|/x", "PEEK 2 @1700000000 path=/x", 0, NULL },
        { "PEEK|5|7", "PEEK 5=7", 0, NULL }, /* two digits: a pair */
        { "CHARGE|9007199254740991|a|b", "CHARGE 9007199254740991 a=b", 0, NULL },
        { "REFUND|1|a|b", "REFUND 1 a=b", 0, NULL },
        { "RESET|a|b", "RESET a=b", 0, NULL },
        { "EXPLAIN|a|b", "EXPLAIN a=b", 0, NULL },
        /* errors */
        { "TAKE", NULL, PROTO_ERROR_BAD_COUNT, "missing count" },
        { "TAKE|path|/x", NULL, PROTO_ERROR_BAD_COUNT, "decimal digits" },
        { "TAKE|0|a|b", NULL, PROTO_ERROR_BAD_COUNT, "at least 1" },
        { "TAKE|01|a|b", NULL, PROTO_ERROR_BAD_COUNT, "leading zero" },
        { "TAKE|9007199254740992|a|b", NULL, PROTO_ERROR_BAD_COUNT, "above" },
        { "RESET|1|a|b", NULL, PROTO_ERROR_BAD_COUNT, "take no count" },
        { "TAKE|1|@x|a|b", NULL, PROTO_ERROR_BAD_TIME, "@<seconds>" },
        { "TAKE|1|@1.1234567|a|b", NULL, PROTO_ERROR_BAD_TIME, "@<seconds>" },
        { "TAKE|1|@123456789012|a|b", NULL, PROTO_ERROR_BAD_TIME, "@<seconds>" },
        { "REFUND|1|@1|a|b", NULL, PROTO_ERROR_BAD_TIME, "only TAKE" },
        { "HIT|@1|a|b", NULL, PROTO_ERROR_UNKNOWN, "odd number" }, /* HIT: divvy's codes only */
        { "HIT|@1|a", "HIT @1=a", 0, NULL },
        { "HIT|a", NULL, PROTO_ERROR_UNKNOWN, "odd number" },
        { "TAKE|1|a|b|c", NULL, PROTO_ERROR_UNKNOWN, "odd number" },
        { "HIT||x", NULL, PROTO_ERROR_UNKNOWN, "empty key" },
        { "HIT|a b|x", NULL, PROTO_ERROR_UNKNOWN, "in a key" },
        { "HIT|a=b|x", NULL, PROTO_ERROR_UNKNOWN, "in a key" },
        { "HIT|a\"|x", NULL, PROTO_ERROR_UNKNOWN, "in a key" },
        { "HIT|a|x\ny", NULL, PROTO_ERROR_UNKNOWN, "control character" },
        { "HIT|a|\xff", NULL, PROTO_ERROR_UNKNOWN, "UTF-8" },
        { "HIT|\xc3\xa9|\xc3\xa9\t", "HIT \xc3\xa9=\"\xc3\xa9\t\"", 0, NULL },
};

/* Splits s at '|' into argv (slices into s). */
static size_t split_args(const char *s, ProtoSlice *argv, size_t max) {
        size_t n = 0;
        const char *p = s;

        for (;;) {
                const char *bar = strchr(p, '|');
                size_t len = bar ? (size_t) (bar - p) : strlen(p);
                ck_assert_uint_lt(n, max);
                argv[n++] = (ProtoSlice){ p, len };
                if (!bar)
                        return n;
                p = bar + 1;
        }
}

static bool same_request(const ProtoRequest *a, const ProtoRequest *b) {
        if (a->verb != b->verb || a->count != b->count || a->has_count != b->has_count ||
            a->at_usec != b->at_usec || a->has_at != b->has_at || a->n_pairs != b->n_pairs)
                return false;
        for (size_t i = 0; i < a->n_pairs; i++)
                if (a->pairs[i].key.len != b->pairs[i].key.len ||
                    memcmp(a->pairs[i].key.ptr, b->pairs[i].key.ptr, a->pairs[i].key.len) != 0 ||
                    a->pairs[i].value.len != b->pairs[i].value.len ||
                    memcmp(a->pairs[i].value.ptr, b->pairs[i].value.ptr, a->pairs[i].value.len) != 0)
                        return false;
        return true;
}

START_TEST (test_to_request) {
        ProtoSlice argv[RESP_ARGS_MAX];
        size_t argc = split_args(request_cases[_i].args, argv, RESP_ARGS_MAX);
        RespCommand cmd = resp_command_from_name(argv[0]);
        ProtoRequest got, want;
        int r;

        ck_assert_int_ge(resp_command_verb(cmd), 0);
        r = resp_to_request(resp_command_verb(cmd), argv, argc, &got);
        if (!request_cases[_i].line) {
                ck_assert_msg(r == -EBADMSG, "%s: %d", request_cases[_i].args, r);
                ck_assert_int_eq(got.error_code, request_cases[_i].code);
                ck_assert_msg(strstr(got.error_reason, request_cases[_i].reason), "%s: \"%s\"",
                              request_cases[_i].args, got.error_reason);
                ck_assert_uint_eq(got.n_pairs, 0);
                return;
        }
        ck_assert_msg(r == 0, "%s: %d %s", request_cases[_i].args, r, got.error_reason);
        ck_assert_int_eq(proto_parse_request(request_cases[_i].line, strlen(request_cases[_i].line),
                                             PROTO_PAIRS_MAX, &want),
                         0);
        ck_assert_msg(same_request(&got, &want), "%s differs from %s", request_cases[_i].args,
                      request_cases[_i].line);
}
END_TEST

START_TEST (test_to_request_pairs_max) {
        static char keys[PROTO_PAIRS_MAX + 1][8];
        ProtoSlice argv[2 + 2 * (PROTO_PAIRS_MAX + 1)];
        ProtoRequest req;
        size_t n = 0;

        argv[n++] = (ProtoSlice){ "HIT", 3 };
        for (int i = 0; i <= PROTO_PAIRS_MAX; i++) {
                snprintf(keys[i], sizeof keys[i], "k%d", i);
                argv[n++] = (ProtoSlice){ keys[i], strlen(keys[i]) };
                argv[n++] = (ProtoSlice){ "v", 1 };
        }
        ck_assert_int_eq(resp_to_request(PROTO_VERB_HIT, argv, n - 2, &req), 0);
        ck_assert_uint_eq(req.n_pairs, PROTO_PAIRS_MAX);
        ck_assert_int_eq(resp_to_request(PROTO_VERB_HIT, argv, n, &req), -EBADMSG);
        ck_assert_str_eq(req.error_reason, "too many key=value pairs");
}
END_TEST

START_TEST (test_parse_int) {
        int64_t v = 0;

        ck_assert_int_eq(resp_parse_int((ProtoSlice){ "15", 2 }, &v), 0);
        ck_assert_int_eq(v, 15);
        ck_assert_int_eq(resp_parse_int((ProtoSlice){ "-3", 2 }, &v), 0);
        ck_assert_int_eq(v, -3);
        ck_assert_int_eq(resp_parse_int((ProtoSlice){ "-9223372036854775808", 20 }, &v), 0);
        ck_assert_int_eq(v, INT64_MIN);
        ck_assert_int_eq(resp_parse_int((ProtoSlice){ "9223372036854775808", 19 }, &v), -ERANGE);
        ck_assert_int_eq(resp_parse_int((ProtoSlice){ "", 0 }, &v), -EINVAL);
        ck_assert_int_eq(resp_parse_int((ProtoSlice){ "-", 1 }, &v), -EINVAL);
        ck_assert_int_eq(resp_parse_int((ProtoSlice){ "1x", 2 }, &v), -EINVAL);
        ck_assert_int_eq(resp_parse_int((ProtoSlice){ "+1", 2 }, &v), -EINVAL);
        ck_assert_int_eq(resp_parse_int((ProtoSlice){ "99999999999999999999", 20 }, &v), -EINVAL);
}
END_TEST

/* ---- formatters ---- */

#define CHECK_FORMAT(expr, want)                                                                            \
        do {                                                                                                \
                size_t n_ = (expr);                                                                         \
                ck_assert_uint_eq(n_, strlen(want));                                                        \
                ck_assert_mem_eq(buf, want, n_);                                                            \
        } while (0)

START_TEST (test_format) {
        char buf[RESP_REPLY_DECISION_MAX + 64];
        char label[PROTO_LABEL_MAX + 10];

        CHECK_FORMAT(resp_format_simple(buf, "PONG"), "+PONG\r\n");
        CHECK_FORMAT(resp_format_simple(buf, "a\r\nb"), "+a  b\r\n");
        CHECK_FORMAT(resp_format_error(buf, "NOPROTO", "sorry"), "-NOPROTO sorry\r\n");
        CHECK_FORMAT(resp_format_error(buf, "ERR", "x\ny"), "-ERR x?y\r\n");
        CHECK_FORMAT(resp_format_proto_error(buf, PROTO_ERROR_BAD_COUNT, "count must be at least 1"),
                     "-ERR bad-count count must be at least 1\r\n");
        CHECK_FORMAT(resp_format_proto_error(buf, PROTO_ERROR_UNKNOWN, NULL), "-ERR unknown\r\n");
        CHECK_FORMAT(resp_format_unknown_command(buf, (ProtoSlice){ "FOO'\r\n", 6 }),
                     "-ERR unknown command 'FOO?\?\?'\r\n");
        CHECK_FORMAT(resp_format_integer(buf, 0), ":0\r\n");
        CHECK_FORMAT(resp_format_integer(buf, -1), ":-1\r\n");
        CHECK_FORMAT(resp_format_integer(buf, INT64_MIN), ":-9223372036854775808\r\n");
        CHECK_FORMAT(resp_format_bulk(buf, "ab\r\n", 4), "$4\r\nab\r\n\r\n");
        CHECK_FORMAT(resp_format_bulk(buf, NULL, 0), "$0\r\n\r\n");
        CHECK_FORMAT(resp_format_null(buf), "$-1\r\n");
        CHECK_FORMAT(resp_format_null3(buf), "_\r\n");
        CHECK_FORMAT(resp_format_map(buf, 7), "%7\r\n");
        CHECK_FORMAT(resp_format_array(buf, 0), "*0\r\n");
        CHECK_FORMAT(resp_format_array(buf, 12), "*12\r\n");
        CHECK_FORMAT(resp_format_hit(buf, false, true, 9, 60), "*3\r\n:1\r\n:9\r\n:60\r\n");
        CHECK_FORMAT(resp_format_hit(buf, false, false, 0, -1), "*3\r\n:0\r\n:0\r\n:-1\r\n");
        CHECK_FORMAT(
                resp_format_decision(
                        buf, false,
                        &(AlgoResult){ .allowed = true, .credit = 7, .limit = 10, .reset = 42, .retry = 0 },
                        &(ProtoRuleRef){ "api", 3 }),
                "*6\r\n:1\r\n:7\r\n:10\r\n:42\r\n:0\r\n$3\r\napi\r\n");
        CHECK_FORMAT(
                resp_format_decision(buf, false, &(AlgoResult){ .retry = -1 }, &(ProtoRuleRef){ NULL, 12 }),
                "*6\r\n:0\r\n:0\r\n:0\r\n:0\r\n:-1\r\n$3\r\n#12\r\n");

        /* The longest decision fits its bound; a label is cut at PROTO_LABEL_MAX. */
        memset(label, 'l', sizeof label - 1);
        label[sizeof label - 1] = 0;
        size_t n = resp_format_decision(
                buf, false,
                &(AlgoResult){
                        .credit = UINT64_MAX, .limit = UINT64_MAX, .reset = UINT64_MAX, .retry = INT64_MIN },
                &(ProtoRuleRef){ label, 0 });
        ck_assert_uint_le(n, RESP_REPLY_DECISION_MAX);
        ck_assert(strstr(buf, "$255\r\n"));
        n = resp_format_decision(
                buf, true,
                &(AlgoResult){
                        .credit = UINT64_MAX, .limit = UINT64_MAX, .reset = UINT64_MAX, .retry = INT64_MIN },
                &(ProtoRuleRef){ label, 0 });
        ck_assert_uint_le(n, RESP_REPLY_DECISION_MAX);
        ck_assert_uint_le(resp_format_hit(buf, true, true, UINT64_MAX, INT64_MIN), RESP_REPLY_HIT_MAX);
        ck_assert_uint_le(resp_format_hit(buf, false, true, UINT64_MAX, INT64_MIN), RESP_REPLY_HIT_MAX);
}
END_TEST

/* RESP3 (after HELLO 3): the same fields as maps named as the line names them, "allowed" a
 * boolean; EXPLAIN's actor as its bytes (null without one), its lists as arrays cut as the
 * line cuts them. */
START_TEST (test_format_resp3) {
        static char buf[RESP_REPLY_EXPLAIN3_MAX + 64], label[300];
        ProtoRuleRef refs[16];
        ProtoExplain e = { .rule = { "api", 3 }, .policy = "stop", .algorithm = "token-bucket" };

        CHECK_FORMAT(resp_format_hit(buf, true, true, 9, 60),
                     "%3\r\n$7\r\nallowed\r\n#t\r\n$6\r\ncredit\r\n:9\r\n$5\r\nreset\r\n:60\r\n");
        CHECK_FORMAT(resp_format_hit(buf, true, false, 0, -1),
                     "%3\r\n$7\r\nallowed\r\n#f\r\n$6\r\ncredit\r\n:0\r\n$5\r\nreset\r\n:-1\r\n");
        CHECK_FORMAT(
                resp_format_decision(buf, true,
                                     &(AlgoResult){ .allowed = true, .credit = 7, .limit = 10, .reset = 42 },
                                     &(ProtoRuleRef){ "api", 3 }),
                "%6\r\n$7\r\nallowed\r\n#t\r\n$6\r\ncredit\r\n:7\r\n$5\r\nlimit\r\n:10\r\n$5\r\nreset\r\n:"
                "42\r\n$5\r\nretry\r\n:0\r\n$4\r\nrule\r\n$3\r\napi\r\n");
        CHECK_FORMAT(
                resp_format_decision(buf, true, &(AlgoResult){ .retry = -1 }, &(ProtoRuleRef){ NULL, 12 }),
                "%6\r\n$7\r\nallowed\r\n#f\r\n$6\r\ncredit\r\n:0\r\n$5\r\nlimit\r\n:0\r\n$5\r\nreset\r\n:"
                "0\r\n$5\r\nretry\r\n:-1\r\n$4\r\nrule\r\n$3\r\n#12\r\n");

        e.actor = (ProtoSlice){ "a\r\n\"b", 5 };
        e.canaries = refs;
        e.n_canaries = 2;
        refs[0] = (ProtoRuleRef){ "c1", 0 };
        refs[1] = (ProtoRuleRef){ NULL, 1 };
        CHECK_FORMAT(resp_format_explain(buf, true, &e),
                     "%7\r\n$4\r\nrule\r\n$3\r\napi\r\n$5\r\nindex\r\n:3\r\n$6\r\npolicy\r\n$4\r\nstop\r\n"
                     "$5\r\nactor\r\n$5\r\na\r\n\"b\r\n$9\r\nalgorithm\r\n$12\r\ntoken-bucket\r\n"
                     "$8\r\ncanaries\r\n*2\r\n$2\r\nc1\r\n$2\r\n#1\r\n$8\r\ncontinue\r\n*0\r\n");

        /* the longest: a whole bulk of actor, lists of long labels cut with "..." */
        memset(label, 'l', sizeof label - 1);
        label[sizeof label - 1] = 0;
        for (size_t i = 0; i < 16; i++)
                refs[i] = (ProtoRuleRef){ label, i };
        e = (ProtoExplain){ .rule = { label, 0 },
                            .policy = label,
                            .algorithm = label,
                            .canaries = refs,
                            .n_canaries = 16,
                            .continues = refs,
                            .n_continues = 16 };
        {
                static char actor[RESP_BULK_MAX];
                size_t n;

                memset(actor, 'x', sizeof actor);
                e.actor = (ProtoSlice){ actor, sizeof actor };
                n = resp_format_explain(buf, true, &e);
                ck_assert_uint_le(n, RESP_REPLY_EXPLAIN3_MAX);
                ck_assert_msg(strstr(buf, "$8\r\ncanaries\r\n*6\r\n$255\r\n"), "%.*s", (int) n, buf);
                ck_assert(strstr(buf, "$3\r\n...\r\n$8\r\ncontinue\r\n*6\r\n"));
        }
        e.actor = (ProtoSlice){ NULL, 0 };
        e.n_canaries = e.n_continues = 0;
        (void) resp_format_explain(buf, true, &e);
        ck_assert(strstr(buf, "$5\r\nactor\r\n_\r\n$9\r\nalgorithm\r\n$32\r\n"));
        ck_assert(strstr(buf, "$8\r\ncanaries\r\n*0\r\n$8\r\ncontinue\r\n*0\r\n"));
}
END_TEST

/* HIT's errors are divvy's two codes in either syntax (docs/protocol.md: bad-count, bad-time and
 * forbidden are for the new verbs only): whatever its arguments, a HIT that fails says
 * unknown, as the same words on a line do. */
START_TEST (test_hit_errors_keep_divvy_codes) {
        static const char *const cases[] = {
                "HIT|@1",    "HIT|@1|a|b", "HIT|@1700000000.5|a|b", "HIT|@x|a|b", "HIT|5",
                "HIT|5|a|b", "HIT|0|a|b",
        };
        ProtoSlice argv[8];
        ProtoRequest req;

        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
                size_t argc = split_args(cases[k], argv, 8);

                ck_assert_int_eq(resp_to_request(PROTO_VERB_HIT, argv, argc, &req), -EBADMSG);
                ck_assert_msg(req.error_code == PROTO_ERROR_UNKNOWN, "%s: %s", cases[k],
                              proto_error_code_to_string(req.error_code));
        }
}
END_TEST

int main(void) {
        Suite *s = suite_create("resp");
        TCase *tc = tcase_create("parse");
        tcase_add_loop_test(tc, test_parse, 0, sizeof parse_cases / sizeof parse_cases[0]);
        tcase_add_test(tc, test_parse_limits);
        suite_add_tcase(s, tc);

        tc = tcase_create("request");
        tcase_add_test(tc, test_command_names);
        tcase_add_loop_test(tc, test_to_request, 0, sizeof request_cases / sizeof request_cases[0]);
        tcase_add_test(tc, test_to_request_pairs_max);
        tcase_add_test(tc, test_parse_int);
        tcase_add_test(tc, test_hit_errors_keep_divvy_codes);
        suite_add_tcase(s, tc);

        tc = tcase_create("format");
        tcase_add_test(tc, test_format);
        tcase_add_test(tc, test_format_resp3);
        suite_add_tcase(s, tc);

        return check_run_suite(s);
}
