/* SPDX-License-Identifier: MIT */
/* http-api.c: the HTTP API's JSON requests, good and bad (every bad one refused with its
 * sentence, so that nothing is charged for it), turned into the engine's requests, and the JSON
 * replies (parsed back by cJSON: valid JSON, the fields and values the docs promise). */

#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "core/http-api.h"
#include "check-run.h"

static HttpApiRequest req;

static int parse(HttpApiEndpoint e, const char *body, char *buf) {
        size_t len = strlen(body);

        memcpy(buf, body, len + 1);
        return http_api_parse(e, buf, len, &req);
}

static bool slice_eq(ProtoSlice s, const char *w) {
        return s.len == strlen(w) && memcmp(s.ptr, w, s.len) == 0;
}

START_TEST (test_endpoints) {
        ck_assert_int_eq(http_api_endpoint_from_path("/v1/take"), HTTP_API_TAKE);
        ck_assert_int_eq(http_api_endpoint_from_path("/v1/explain"), HTTP_API_EXPLAIN);
        ck_assert_int_eq(http_api_endpoint_from_path("/json"), HTTP_API_ENVOY);
        ck_assert_int_eq(http_api_endpoint_from_path("/v1/take/"), _HTTP_API_ENDPOINT_INVALID);
        ck_assert_int_eq(http_api_endpoint_from_path("/metrics"), _HTTP_API_ENDPOINT_INVALID);
        ck_assert_int_eq(http_api_endpoint_verb(HTTP_API_REFUND), PROTO_VERB_REFUND);
}
END_TEST

START_TEST (test_v1) {
        char buf[512];
        ProtoRequest p;

        ck_assert_int_eq(parse(HTTP_API_TAKE,
                               " {\"pairs\": {\"method\": \"GET\", \"ip\": \"1.2.3.4\"}, \"count\": 3}\n",
                               buf),
                         0);
        ck_assert_uint_eq(req.n_pairs, 2);
        ck_assert(slice_eq(req.pairs[0].key, "method") && slice_eq(req.pairs[0].value, "GET"));
        ck_assert(slice_eq(req.pairs[1].key, "ip") && slice_eq(req.pairs[1].value, "1.2.3.4"));
        ck_assert_int_eq(http_api_request_to_proto(&req, 0, &p), 0);
        ck_assert_int_eq(p.verb, PROTO_VERB_TAKE);
        ck_assert_uint_eq(p.count, 3);
        ck_assert_uint_eq(p.n_pairs, 2);

        /* count defaults to 1; peek may say 0 */
        ck_assert_int_eq(parse(HTTP_API_CHARGE, "{\"pairs\":{}}", buf), 0);
        ck_assert_int_eq(http_api_request_to_proto(&req, 0, &p), 0);
        ck_assert_uint_eq(p.count, 1);
        ck_assert_int_eq(parse(HTTP_API_PEEK, "{\"count\":0,\"pairs\":{\"a\":\"\"}}", buf), 0);
        ck_assert_int_eq(http_api_request_to_proto(&req, 0, &p), 0);
        ck_assert_int_eq(p.verb, PROTO_VERB_PEEK);
        ck_assert_uint_eq(p.count, 0);
        ck_assert(slice_eq(p.pairs[0].value, ""));

        /* escapes decoded in place: \", \\, \/, \u00e9, a surrogate pair; raw UTF-8 kept */
        ck_assert_int_eq(parse(HTTP_API_EXPLAIN,
                               "{\"pairs\":{\"k\\\"\":\"a\\\\b\\/c \\u00e9\\ud83d\\ude00 \xc3\xa9\"}}", buf),
                         0);
        ck_assert(slice_eq(req.pairs[0].key, "k\""));
        ck_assert(slice_eq(req.pairs[0].value, "a\\b/c \xc3\xa9\xf0\x9f\x98\x80 \xc3\xa9"));
        ck_assert_int_eq(http_api_request_to_proto(&req, 0, &p), 0);
        ck_assert_int_eq(p.verb, PROTO_VERB_EXPLAIN);
        ck_assert(!p.has_count);
}
END_TEST

static const struct {
        HttpApiEndpoint e;
        const char *body;
        const char *error; /* a part of the sentence */
} bad[] = {
        { HTTP_API_TAKE, "", "must be a JSON object" },
        { HTTP_API_TAKE, "[]", "must be a JSON object" },
        { HTTP_API_TAKE, "{", "expected a string" },
        { HTTP_API_TAKE, "{}", "\"pairs\" is missing" },
        { HTTP_API_TAKE, "{\"pairs\":{},}", "expected a string" }, /* trailing comma */
        { HTTP_API_TAKE, "{\"pairs\":{}} {}", "bytes after" },
        { HTTP_API_TAKE, "{\"pairs\":{}, \"pairs\":{}}", "twice" },
        { HTTP_API_TAKE, "{\"pairs\":{\"a\":\"1\",\"a\":\"2\"}}", "twice" },
        { HTTP_API_TAKE, "{\"pairs\":{\"\":\"1\"}}", "empty key" },
        { HTTP_API_TAKE, "{\"pairs\":{\"a\":1}}", "must be strings" },
        { HTTP_API_TAKE, "{\"pairs\":[]}", "must be an object" },
        { HTTP_API_TAKE, "{\"pairs\":{},\"count\":\"3\"}", "\"count\" must be" },
        { HTTP_API_TAKE, "{\"pairs\":{},\"count\":-1}", "\"count\" must be" },
        { HTTP_API_TAKE, "{\"pairs\":{},\"count\":1.5}", "\"count\" must be" },
        { HTTP_API_TAKE, "{\"pairs\":{},\"count\":1e3}", "\"count\" must be" },
        { HTTP_API_TAKE, "{\"pairs\":{},\"count\":01}", "\"count\" must be" },
        { HTTP_API_TAKE, "{\"pairs\":{},\"count\":9007199254740992}", "\"count\" must be" },
        { HTTP_API_TAKE, "{\"pairs\":{},\"count\":0}", "at least 1" },
        { HTTP_API_TAKE, "{\"pairs\":{},\"cnt\":1}", "unknown field" },
        { HTTP_API_EXPLAIN, "{\"pairs\":{},\"count\":1}", "unknown field" },
        { HTTP_API_TAKE, "{\"pairs\":{\"a\":\"x\ty\"}}", "control character" },
        { HTTP_API_TAKE, "{\"pairs\":{\"a\":\"x\\ny\"}}", "control character" },
        { HTTP_API_TAKE, "{\"pairs\":{\"a\":\"x\\u0000y\"}}", "control character" },
        { HTTP_API_TAKE, "{\"pairs\":{\"a\":\"\\ud800\"}}", "lone surrogate" },
        { HTTP_API_TAKE, "{\"pairs\":{\"a\":\"\\udc00\"}}", "lone surrogate" },
        { HTTP_API_TAKE, "{\"pairs\":{\"a\":\"\\u12\"}}", "\\u escape" },
        { HTTP_API_TAKE, "{\"pairs\":{\"a\":\"\\x41\"}}", "bad escape" },
        { HTTP_API_TAKE, "{\"pairs\":{\"a\":\"\xc3\"}}", "invalid UTF-8" },
        { HTTP_API_TAKE, "{\"pairs\":{\"a\":\"\xed\xa0\x80\"}}", "invalid UTF-8" },
        { HTTP_API_TAKE, "{\"pairs\":{\"a\":\"abc", "unterminated" },
        { HTTP_API_ENVOY, "{\"descriptors\":[{\"entries\":[{\"key\":\"a\"}]}]}", "\"domain\"" },
        { HTTP_API_ENVOY, "{\"domain\":\"d\"}", "\"descriptors\"" },
        { HTTP_API_ENVOY, "{\"domain\":\"d\",\"descriptors\":[]}", "\"descriptors\"" },
        { HTTP_API_ENVOY, "{\"domain\":\"d\",\"descriptors\":[{\"entries\":[{\"value\":\"v\"}]}]}",
          "without a key" },
        { HTTP_API_ENVOY, "{\"domain\":\"d\",\"descriptors\":[{\"entries\":[{\"key\":\"a\",\"x\":1}]}]}",
          "unknown field in an entry" },
        { HTTP_API_ENVOY, "{\"domain\":\"d\",\"descriptors\":[{\"entries\":[],\"limit\":{}}]}", "override" },
        { HTTP_API_ENVOY, "{\"domain\":\"d\",\"descriptors\":[{\"entries\":[],\"hits_addend\":\"x\"}]}",
          "hits_addend" },
        { HTTP_API_ENVOY, "{\"domain\":\"d\",\"descriptors\":[{\"entries\":[],\"is_negative_hits\":1}]}",
          "boolean" },
        { HTTP_API_ENVOY, "{\"domain\":\"d\",\"descriptors\":[{}],\"hits_addend\":4294967296}",
          "hits_addend" },
        { HTTP_API_ENVOY, "{\"domain\":\"d\",\"descriptors\":[{}],\"extra\":true}", "unknown field" },
        { HTTP_API_ENVOY, "{\"domain\":\"d\",\"descriptors\":[1]}", "must be an object" },
};

START_TEST (test_bad) {
        char buf[512];

        ck_assert_msg(parse(bad[_i].e, bad[_i].body, buf) == -EBADMSG, "case %d accepted: %s", _i,
                      bad[_i].body);
        ck_assert_ptr_nonnull(req.error);
        ck_assert_msg(strstr(req.error, bad[_i].error), "case %d: \"%s\", expected \"%s\"", _i, req.error,
                      bad[_i].error);
}
END_TEST

START_TEST (test_envoy) {
        char buf[1024];
        ProtoRequest p;

        ck_assert_int_eq(
                parse(HTTP_API_ENVOY,
                      "{\"domain\":\"edge\",\"hitsAddend\":2,\"descriptors\":["
                      "{\"entries\":[{\"key\":\"remote_address\",\"value\":\"10.0.0.1\"}]},"
                      "{\"entries\":[{\"key\":\"path\",\"value\":\"/a\"},{\"key\":\"m\",\"value\":\"GET\"}],"
                      "\"hits_addend\":\"0\"},"
                      "{\"entries\":[{\"key\":\"k\"}],\"hitsAddend\":5,\"isNegativeHits\":true},"
                      "{\"entries\":[{\"key\":\"domain\",\"value\":\"x\"}]}]}",
                      buf),
                0);
        ck_assert_uint_eq(req.n_descriptors, 4);
        ck_assert(slice_eq(req.domain, "edge"));

        ck_assert_int_eq(http_api_request_to_proto(&req, 0, &p), 0);
        ck_assert_int_eq(p.verb, PROTO_VERB_TAKE);
        ck_assert_uint_eq(p.count, 2); /* the request's hits_addend */
        ck_assert_uint_eq(p.n_pairs, 2);
        ck_assert(slice_eq(p.pairs[0].key, "domain") && slice_eq(p.pairs[0].value, "edge"));
        ck_assert(slice_eq(p.pairs[1].key, "remote_address") && slice_eq(p.pairs[1].value, "10.0.0.1"));

        ck_assert_int_eq(http_api_request_to_proto(&req, 1, &p), 0);
        ck_assert_int_eq(p.verb, PROTO_VERB_PEEK); /* its own hits_addend 0 */
        ck_assert_uint_eq(p.count, 0);
        ck_assert_uint_eq(p.n_pairs, 3);
        ck_assert(slice_eq(p.pairs[2].key, "m") && slice_eq(p.pairs[2].value, "GET"));

        ck_assert_int_eq(http_api_request_to_proto(&req, 2, &p), 0);
        ck_assert_int_eq(p.verb, PROTO_VERB_REFUND);
        ck_assert_uint_eq(p.count, 5);
        ck_assert(slice_eq(p.pairs[1].key, "k") && slice_eq(p.pairs[1].value, ""));

        /* an entry named "domain" would be the domain twice */
        ck_assert_int_eq(http_api_request_to_proto(&req, 3, &p), -EBADMSG);
        ck_assert_ptr_nonnull(strstr(p.error_reason, "twice"));

        /* hits_addend absent or 0: one hit, as envoyproxy/ratelimit counts */
        ck_assert_int_eq(
                parse(HTTP_API_ENVOY, "{\"domain\":\"d\",\"hits_addend\":0,\"descriptors\":[{}]}", buf), 0);
        ck_assert_int_eq(http_api_request_to_proto(&req, 0, &p), 0);
        ck_assert_int_eq(p.verb, PROTO_VERB_TAKE);
        ck_assert_uint_eq(p.count, 1);
}
END_TEST

/* More descriptors or entries than the limits: refused, never written past the arrays. */
START_TEST (test_envoy_limits) {
        static char body[HTTP_API_BODY_MAX], buf[HTTP_API_BODY_MAX];
        size_t n = 0;

        n += (size_t) snprintf(body + n, sizeof body - n, "{\"domain\":\"d\",\"descriptors\":[");
        for (int i = 0; i <= HTTP_API_DESCRIPTORS_MAX; i++)
                n += (size_t) snprintf(body + n, sizeof body - n, "%s{}", i ? "," : "");
        snprintf(body + n, sizeof body - n, "]}");
        ck_assert_int_eq(parse(HTTP_API_ENVOY, body, buf), -EBADMSG);
        ck_assert_str_eq(req.error, "too many descriptors");

        n = (size_t) snprintf(body, sizeof body, "{\"domain\":\"d\",\"descriptors\":[{\"entries\":[");
        for (int i = 0; i < PROTO_PAIRS_MAX; i++)
                n += (size_t) snprintf(body + n, sizeof body - n, "%s{\"key\":\"k%d\"}", i ? "," : "", i);
        snprintf(body + n, sizeof body - n, "]}]}");
        ck_assert_int_eq(parse(HTTP_API_ENVOY, body, buf), -EBADMSG);
        ck_assert_str_eq(req.error, "too many entries");

        n = (size_t) snprintf(body, sizeof body, "{\"pairs\":{");
        for (int i = 0; i <= PROTO_PAIRS_MAX; i++)
                n += (size_t) snprintf(body + n, sizeof body - n, "%s\"k%d\":\"v\"", i ? "," : "", i);
        snprintf(body + n, sizeof body - n, "}}");
        ck_assert_int_eq(parse(HTTP_API_TAKE, body, buf), -EBADMSG);
        ck_assert_str_eq(req.error, "too many pairs");
}
END_TEST

static cJSON *json_back(const char *text) {
        cJSON *j = cJSON_Parse(text);
        ck_assert_msg(j != NULL, "not JSON: %s", text);
        return j;
}

START_TEST (test_format) {
        char buf[HTTP_API_EXPLAIN_MAX];
        AlgoResult res = { .allowed = false, .credit = 0, .limit = 10, .reset = 42, .retry = 7 };
        cJSON *j;

        http_api_format_decision(buf, &res, "per-ip");
        ck_assert_str_eq(buf, "{\"allowed\":false,\"credit\":0,\"limit\":10,\"reset\":42,\"retry\":7,"
                              "\"rule\":\"per-ip\"}");
        res.retry = -1;
        http_api_format_decision(buf, &res, NULL);
        ck_assert_str_eq(
                buf,
                "{\"allowed\":false,\"credit\":0,\"limit\":10,\"reset\":42,\"retry\":-1,\"rule\":null}");

        http_api_format_error(buf, "bad-request", "a \"quoted\"\n\xff reason");
        j = json_back(buf);
        ck_assert_str_eq(cJSON_GetObjectItem(j, "error")->valuestring, "bad-request");
        ck_assert_str_eq(cJSON_GetObjectItem(j, "reason")->valuestring, "a \"quoted\"\n\xef\xbf\xbd reason");
        cJSON_Delete(j);

        http_api_format_reset(buf, 3);
        ck_assert_str_eq(buf, "{\"reset\":3}");

        ProtoRuleRef canaries[2] = { { "c1", 0 }, { NULL, 4 } };
        ProtoExplain ex = { .rule = { "stop", 5 },
                            .policy = "stop",
                            .actor = { "a\"b", 3 },
                            .algorithm = "fixed-window",
                            .canaries = canaries,
                            .n_canaries = 2 };
        http_api_format_explain(buf, &ex);
        ck_assert_str_eq(buf,
                         "{\"rule\":\"stop\",\"index\":5,\"policy\":\"stop\",\"actor\":\"a\\\"b\","
                         "\"algorithm\":\"fixed-window\",\"canaries\":[\"c1\",\"#4\"],\"continue\":[]}");
        ex.actor = (ProtoSlice){ NULL, 0 };
        http_api_format_explain(buf, &ex);
        j = json_back(buf);
        ck_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "actor")));
        cJSON_Delete(j);
}
END_TEST

/* /json's statuses: gRPC's, as protojson writes them: lowerCamelCase, zero values left out. */
START_TEST (test_envoy_status) {
        char buf[HTTP_API_ENVOY_STATUS_MAX];
        RlsStatus ok = { .has_limit = true,
                         .requests_per_unit = 10,
                         .window_seconds = 60,
                         .name = "per-minute",
                         .remaining = 9,
                         .reset_seconds = 51 };
        RlsStatus over = { .over_limit = true,
                           .has_limit = true,
                           .requests_per_unit = 10,
                           .window_seconds = 90,
                           .reset_seconds = 3 };
        RlsStatus unlimited = { 0 };

        http_api_format_envoy_status(buf, &ok);
        ck_assert_str_eq(buf,
                         "{\"code\":\"OK\",\"currentLimit\":{\"requestsPerUnit\":10,\"unit\":\"MINUTE\","
                         "\"name\":\"per-minute\"},\"limitRemaining\":9,\"durationUntilReset\":\"51s\"}");
        /* 90 s is no unit (UNKNOWN, left out); no label: no name */
        http_api_format_envoy_status(buf, &over);
        ck_assert_str_eq(buf, "{\"code\":\"OVER_LIMIT\",\"currentLimit\":{\"requestsPerUnit\":10},"
                              "\"durationUntilReset\":\"3s\"}");
        over.requests_per_unit = 0; /* a rule that always denies */
        http_api_format_envoy_status(buf, &over);
        ck_assert_str_eq(buf, "{\"code\":\"OVER_LIMIT\",\"currentLimit\":{},\"durationUntilReset\":\"3s\"}");
        http_api_format_envoy_status(buf, &unlimited);
        ck_assert_str_eq(buf, "{\"code\":\"OK\"}");
        ck_assert_str_eq(http_api_envoy_unit(30 * 86400), "MONTH");
        ck_assert_str_eq(http_api_envoy_unit(365 * 86400), "YEAR");
        ck_assert_ptr_null(http_api_envoy_unit(0));
}
END_TEST

int main(void) {
        Suite *s = suite_create("http_api");
        TCase *tc = tcase_create("parse");

        tcase_add_test(tc, test_endpoints);
        tcase_add_test(tc, test_v1);
        tcase_add_loop_test(tc, test_bad, 0, sizeof bad / sizeof bad[0]);
        tcase_add_test(tc, test_envoy);
        tcase_add_test(tc, test_envoy_limits);
        tcase_add_test(tc, test_format);
        tcase_add_test(tc, test_envoy_status);
        suite_add_tcase(s, tc);
        return check_run_suite(s);
}
