/* SPDX-License-Identifier: MIT */
/* frontend-http.c, the HTTP API's front-end: a request is a Connection without a socket (its body the
 * input, its HttpExchange the userdata), taken into the same batches as line requests, and its reply
 * (status, the RateLimit fields, the JSON body) built from what the engine decided; /json's
 * descriptors decided together, and one bad descriptor charging none. No event loop and no HTTP: the
 * tests call batch_take() and batch_finish() as the server does, and frontend_http_reply() as
 * http-api-server.c does. */

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "batch-test-util.h"
#include "daemon/frontend-http.h"
#include "check-run.h"

static const char RULES[] =
        "[a=1]\ncreditLimit = 2\nresetSeconds = 60\nlabel = a\n"
        "[domain=edge ip=*]\ncreditLimit = 1\nresetSeconds = 3600\nactorField = ip\nlabel = per-ip\n"
        "[default]\ncreditLimit = 5\nresetSeconds = 0\n";

static Connection *hc; /* the HTTP request's connection */
static HttpExchange exchange;
static HttpReply reply;

static void setup(void) {
        batch_test_setup(RULES, true);
        ck_assert_int_eq(connection_new(-EBADF, false, 64 * 1024, &hc), 0);
        hc->proto = CONNECTION_PROTO_HTTP;
        hc->userdata = &exchange;
}

static void teardown_http(void) {
        hc = connection_free(hc);
        teardown();
}

/* One HTTP request to endpoint with body, taken into the batch (not finished). */
static void request(HttpApiEndpoint e, const char *body, bool admin) {
        exchange = (HttpExchange){ .endpoint = e };
        hc->in_len = hc->in_pos = hc->out_len = hc->out_pos = 0;
        hc->admin = admin;
        hc->framed = true;
        memcpy(hc->in, body, strlen(body));
        hc->in_len = strlen(body);
        batch_take(batch, hc);
        ck_assert(exchange.taken);
}

static void answer(void) {
        frontend_http_reply(hc, &reply);
}

START_TEST (test_take_shares_counters_with_lines) {
        request(HTTP_API_TAKE, "{\"pairs\": {\"a\": \"1\"}}", false);
        input(0, "HIT a=1\n");
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 2);
        answer();
        ck_assert_uint_eq(reply.status, 200);
        ck_assert_str_eq(
                reply.body,
                "{\"allowed\":true,\"credit\":1,\"limit\":2,\"reset\":60,\"retry\":0,\"rule\":\"a\"}");
        ck_assert(reply.has_limit);
        ck_assert_str_eq(reply.policy, "\"a\";q=2;w=60");
        ck_assert_str_eq(reply.limit, "\"a\";r=1;t=60");
        ck_assert(!reply.has_retry_after);
        ck_assert_str_eq(output(0), "OK true 0 60\n");

        request(HTTP_API_TAKE, "{\"pairs\": {\"a\": \"1\"}}", false);
        ck_assert_uint_eq(finish(), 1);
        answer();
        ck_assert_uint_eq(reply.status, 429);
        ck_assert_str_eq(reply.limit, "\"a\";r=0;t=60");
        ck_assert(reply.has_retry_after);
        ck_assert_str_eq(reply.retry_after, "60");
        ck_assert_uint_eq(metrics_hits_total(metrics, METRICS_STATUS_ACCEPTED),
                          1); /* the HIT; TAKEs are verbs */
}
END_TEST

START_TEST (test_errors) {
        request(HTTP_API_TAKE, "{\"pairs\": {\"a\": 1}}", false);
        ck_assert_uint_eq(finish(), 1);
        answer();
        ck_assert_uint_eq(reply.status, 400);
        ck_assert_str_eq(reply.body,
                         "{\"error\":\"bad-request\",\"reason\":\"\\\"pairs\\\" values must be strings\"}");
        ck_assert(!reply.has_limit);

        request(HTTP_API_REFUND, "{\"pairs\": {\"a\": \"1\"}}", false);
        ck_assert_uint_eq(finish(), 1);
        answer();
        ck_assert_uint_eq(reply.status, 403);
        ck_assert_str_eq(reply.body,
                         "{\"error\":\"forbidden\",\"reason\":\"REFUND needs an admin listener\"}");

        request(HTTP_API_RESET, "{\"pairs\": {\"a\": \"1\"}}", true);
        ck_assert_uint_eq(finish(), 1);
        answer();
        ck_assert_uint_eq(reply.status, 200);
        ck_assert_str_eq(reply.body, "{\"reset\":0}"); /* nothing was charged */
}
END_TEST

START_TEST (test_envoy) {
        static const char body[] = "{\"domain\": \"edge\", \"descriptors\": ["
                                   "{\"entries\": [{\"key\": \"ip\", \"value\": \"10.0.0.1\"}]},"
                                   "{\"entries\": [{\"key\": \"ip\", \"value\": \"10.0.0.2\"}]}]}";

        request(HTTP_API_ENVOY, body, false);
        ck_assert_uint_eq(finish(), 2);
        answer();
        ck_assert_uint_eq(reply.status, 200);
        ck_assert_str_eq(reply.body, "{\"overallCode\":\"OK\",\"statuses\":["
                                     "{\"code\":\"OK\",\"currentLimit\":{\"requestsPerUnit\":1,\"unit\":"
                                     "\"HOUR\",\"name\":\"per-ip\"},"
                                     "\"durationUntilReset\":\"3600s\"},"
                                     "{\"code\":\"OK\",\"currentLimit\":{\"requestsPerUnit\":1,\"unit\":"
                                     "\"HOUR\",\"name\":\"per-ip\"},"
                                     "\"durationUntilReset\":\"3600s\"}]}");

        /* a bad descriptor beside a good one (a new ip): one error slot, nothing charged */
        request(HTTP_API_ENVOY,
                "{\"domain\": \"edge\", \"descriptors\": [{\"entries\": [{\"key\": \"ip\", \"value\": "
                "\"10.0.0.3\"}]},"
                "{\"entries\": [{\"key\": \"ip\", \"value\": \"x\"}], \"is_negative_hits\": true}]}",
                false);
        ck_assert_uint_eq(finish(), 1);
        answer();
        ck_assert_uint_eq(reply.status, 403);
        request(HTTP_API_ENVOY,
                "{\"domain\": \"edge\", \"descriptors\": [{\"entries\": [{\"key\": \"ip\", \"value\": "
                "\"10.0.0.3\"}]}]}",
                false);
        ck_assert_uint_eq(finish(), 1);
        answer();
        ck_assert_uint_eq(reply.status, 200); /* its one credit was still there */

        request(HTTP_API_ENVOY, body, false);
        ck_assert_uint_eq(finish(), 2);
        answer();
        ck_assert_uint_eq(reply.status, 429);
        ck_assert_ptr_nonnull(strstr(reply.body, "{\"overallCode\":\"OVER_LIMIT\""));
}
END_TEST

int main(void) {
        Suite *s = suite_create("frontend_http");
        TCase *tc = tcase_create("http");

        tcase_add_checked_fixture(tc, setup, teardown_http);
        tcase_add_test(tc, test_take_shares_counters_with_lines);
        tcase_add_test(tc, test_errors);
        tcase_add_test(tc, test_envoy);
        suite_add_tcase(s, tc);
        return check_run_suite(s);
}
