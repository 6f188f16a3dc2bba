/* SPDX-License-Identifier: MIT */
/* frontend-resp.c, RESP's front-end of the engine (issue #17): requests taken from socketpairs whose first
 * byte is '*', matched and applied to a real store in the same batches as line requests, answered in RESP in
 * request order; connection commands; errors that leave the connection open and framing errors that close
 * it; --resp=off. No event loop: the tests call batch_take() and batch_finish() as the server does. */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "batch-test-util.h"
#include "core/client-limits.h"
#include "daemon/frontend-resp.h"
#include "check-run.h"

static const char RULES[] = "[a=1]\ncreditLimit = 2\nresetSeconds = 60\nlabel = a\n"
                            "[d=1]\ncreditLimit = 0\nresetSeconds = 60\n"
                            "[f=*]\ncreditLimit = 5\nresetSeconds = 60\nactorField = f\n"
                            "[default]\ncreditLimit = 5\nresetSeconds = 0\n";

static void setup(void) {
        batch_test_setup(RULES, true); /* the server's default (--resp=on) */
}

/* A RESP request of the arguments in args, separated by '|' (static). */
static const char *req(const char *args) {
        static char buf[4][4096];
        static unsigned k;
        char *out = buf[k++ % 4];
        size_t n = 0, argc = 1;

        for (const char *p = args; *p; p++)
                argc += *p == '|';
        n += (size_t) sprintf(out + n, "*%zu\r\n", argc);
        for (const char *p = args;;) {
                const char *bar = strchr(p, '|');
                size_t len = bar ? (size_t) (bar - p) : strlen(p);
                n += (size_t) sprintf(out + n, "$%zu\r\n%.*s\r\n", len, (int) len, p);
                if (!bar)
                        break;
                p = bar + 1;
        }
        return out;
}

#define HIT3(allowed, credit, reset) "*3\r\n:" #allowed "\r\n:" #credit "\r\n:" #reset "\r\n"
/* RESP3's HIT: a map, allowed a boolean (t or f). */
#define HIT3_MAP(allowed, credit, reset)                                                                    \
        "%3\r\n$7\r\nallowed\r\n#" #allowed "\r\n$6\r\ncredit\r\n:" #credit "\r\n$5\r\nreset\r\n:" #reset   \
        "\r\n"

START_TEST (test_same_counters_as_lines) {
        /* A RESP client and a line client share a rule's counter, in one batch, in order. */
        input(0, req("HIT|a|1"));
        input(0, req("hit|a|1"));
        input(1, "HIT a=1\n");
        input(2, req("HIT|d|1"));
        input(2, req("HIT|x|1"));
        batch_take(batch, conns[0]);
        batch_take(batch, conns[1]);
        batch_take(batch, conns[2]);
        ck_assert_int_eq(conns[0]->proto, CONNECTION_PROTO_RESP);
        ck_assert_int_eq(conns[1]->proto, CONNECTION_PROTO_LINE);
        ck_assert_uint_eq(finish(), 5);
        ck_assert_str_eq(output(0), HIT3(1, 1, 60) HIT3(1, 0, 60));
        ck_assert_str_eq(output(1), "OK false 0 60\n");
        ck_assert_str_eq(output(2), HIT3(0, 0, -1) HIT3(1, 5, 0));
        ck_assert_uint_eq(metrics_hits_total(metrics, METRICS_STATUS_ACCEPTED), 3);
        ck_assert_uint_eq(metrics_hits_total(metrics, METRICS_STATUS_REJECTED), 2);
        ck_assert(!conns[0]->closing && !conns[2]->closing);
}
END_TEST

START_TEST (test_verbs) {
        input(0, req("TAKE|2|f|u1"));
        input(0, req("PEEK|f|u1"));
        input(0, req("PEEK|9|f|u1"));
        input(0, req("CHARGE|1|f|u1"));
        input(0, req("TAKE|1|a|1"));
        input(0, req("EXPLAIN|f|we ird\"|g|1"));
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 6);
        ck_assert_str_eq(output(0), "*6\r\n:1\r\n:3\r\n:5\r\n:60\r\n:0\r\n$2\r\n#2\r\n"
                                    "*6\r\n:1\r\n:2\r\n:5\r\n:60\r\n:0\r\n$2\r\n#2\r\n"
                                    "*6\r\n:0\r\n:3\r\n:5\r\n:60\r\n:-1\r\n$2\r\n#2\r\n" /* 9 > 5: never */
                                    "*6\r\n:1\r\n:2\r\n:5\r\n:60\r\n:0\r\n$2\r\n#2\r\n"
                                    "*6\r\n:1\r\n:1\r\n:2\r\n:60\r\n:0\r\n$1\r\na\r\n"
                                    "$89\r\nrule=#2 index=2 policy=stop actor=\"we ird\\\"\" "
                                    "algorithm=fixed-window canaries=- continue=-\r\n");
}
END_TEST

START_TEST (test_admin) {
        /* REFUND and RESET: forbidden off an admin listener, and the connection goes on. */
        input(0, req("RESET|f|u2"));
        input(0, req("REFUND|1|f|u2"));
        input(0, req("PING"));
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 3);
        ck_assert_str_eq(output(0), "-ERR forbidden RESET needs an admin listener\r\n"
                                    "-ERR forbidden REFUND needs an admin listener\r\n+PONG\r\n");
        ck_assert(!conns[0]->closing);

        conns[1]->admin = true;
        input(1, req("HIT|f|u2"));
        input(1, req("RESET|f|u2"));
        input(1, req("RESET|f|u2"));
        batch_take(batch, conns[1]);
        ck_assert_uint_eq(finish(), 3);
        ck_assert_str_eq(output(1), HIT3(1, 4, 60) ":1\r\n:0\r\n");
}
END_TEST

START_TEST (test_command_errors_keep_connection) {
        input(0, req("TAKE|0|a|1"));
        input(0, req("HIT|a"));
        input(0, req("TAKE|1|@1|a|1")); /* client timestamps are off (max age 0) */
        input(0, req("FROB|x"));
        input(0, req("ECHO"));
        input(0, req("CL.THROTTLE|k|15|30|60"));
        input(0, req("PING|still here"));
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 7);
        ck_assert_str_eq(output(0), "-ERR bad-count count must be at least 1\r\n"
                                    "-ERR unknown odd number of key/value arguments\r\n"
                                    "-ERR bad-time client timestamps are off (--client-time-max-age)\r\n"
                                    "-ERR unknown command 'FROB'\r\n"
                                    "-ERR wrong number of arguments for 'ECHO' command\r\n"
                                    "-ERR CL.THROTTLE and RL.* are off: start divvyd with "
                                    "--allow-client-limits\r\n"
                                    "$10\r\nstill here\r\n");
        ck_assert(!conns[0]->closing && !conns[0]->err_sent);
        ck_assert_uint_eq(metrics_errors(metrics, PROTO_ERROR_BAD_COUNT), 1);
        ck_assert_uint_eq(metrics_errors(metrics, PROTO_ERROR_BAD_TIME), 1);
        ck_assert_uint_eq(metrics_errors(metrics, PROTO_ERROR_UNKNOWN_COMMAND), 1);
        ck_assert_uint_eq(metrics_errors(metrics, PROTO_ERROR_UNKNOWN), 3);
}
END_TEST

START_TEST (test_connection_commands) {
        input(0, req("HELLO"));
        input(0, req("HELLO|4"));
        input(0, req("HELLO|x"));
        input(0, req("CLIENT|GETNAME"));
        input(0, req("CLIENT|SETNAME|me"));
        input(0, req("CLIENT|GETNAME"));
        input(0, req("CLIENT|SETNAME|a b"));
        input(0, req("CLIENT|SETINFO|LIB-NAME|redis-py"));
        input(0, req("CLIENT|ID"));
        input(0, req("CLIENT|KILL|x"));
        input(0, req("SELECT|0"));
        input(0, req("SELECT|1"));
        input(0, req("COMMAND|DOCS"));
        input(0, req("COMMAND|INFO|get|set"));
        input(0, req("ECHO|a\r\nb"));
        input(0, "*0\r\n*-1\r\n");
        input(0, req("AUTH|x"));
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 16); /* "*0" and "*-1" are answered nothing */
        const char *out = output(0);
        ck_assert_msg(strncmp(out, "*14\r\n$6\r\nserver\r\n$6\r\ndivvyd\r\n$7\r\nversion\r\n", 42) == 0,
                      "%s", out);
        ck_assert(strstr(out, "$5\r\nproto\r\n:2\r\n$2\r\nid\r\n:1\r\n"));
        out = strstr(out, "$7\r\nmodules\r\n*0\r\n") + 17;
        ck_assert_str_eq(out,
                         "-NOPROTO sorry, this protocol version is not supported\r\n"
                         "-ERR Protocol version is not an integer or out of range\r\n"
                         "$-1\r\n+OK\r\n$2\r\nme\r\n"
                         "-ERR Client names cannot contain spaces, newlines or special characters, nor "
                         "be longer than 128 bytes\r\n"
                         "+OK\r\n:1\r\n"
                         "-ERR unknown CLIENT subcommand (divvyd knows SETNAME, GETNAME, SETINFO, ID and "
                         "MAINT_NOTIFICATIONS)\r\n"
                         "+OK\r\n-ERR DB index is out of range\r\n"
                         "*0\r\n*2\r\n$-1\r\n$-1\r\n$4\r\na\r\nb\r\n"
                         "-ERR AUTH <password> called without any password configured for the default "
                         "user. Are you sure your configuration is correct?\r\n");
        ck_assert(!conns[0]->closing);
}
END_TEST

/* What redis-py 8 sends on connecting, then a HIT, in RESP3; HELLO 2 switches back. */
START_TEST (test_resp3) {
        input(0, req("HELLO|3|AUTH|default|pw|SETNAME|me"));
        input(0, req("CLIENT|SETINFO|LIB-NAME|redis-py"));
        input(0, req("CLIENT|MAINT_NOTIFICATIONS|on|moving-endpoint-type|internal-ip"));
        input(0, req("CLIENT|GETNAME"));
        input(0, req("HIT|f|u1"));
        input(0, req("COMMAND|INFO|get"));
        input(0, req("COMMAND|DOCS"));
        input(0, req("HELLO|3|AUTH|bob|pw"));
        input(0, req("HELLO|2"));
        input(0, req("COMMAND|INFO|get"));
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 10);
        const char *out = output(0);
        ck_assert_msg(strncmp(out, "%7\r\n$6\r\nserver\r\n$6\r\ndivvyd\r\n$7\r\nversion\r\n", 41) == 0, "%s",
                      out);
        ck_assert(strstr(out, "$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:1\r\n"));
        out = strstr(out, "$7\r\nmodules\r\n*0\r\n") + 17;
        const char *middle = "+OK\r\n+OK\r\n$2\r\nme\r\n" HIT3_MAP(
                t, 4, 60) "*1\r\n_\r\n%0\r\n" /* COMMAND DOCS: Redis's empty map */
                          "-WRONGPASS invalid username-password pair or user is disabled.\r\n*14\r\n";
        ck_assert_msg(strncmp(out, middle, strlen(middle)) == 0, "%s", out);
        ck_assert(strstr(out, "$5\r\nproto\r\n:2\r\n"));
        ck_assert_str_eq(strstr(out, "$7\r\nmodules\r\n*0\r\n") + 17, "*1\r\n$-1\r\n");
        ck_assert(!conns[0]->resp->resp3);
}
END_TEST

/* Every reply of divvyd's own verbs on a RESP3 connection: maps of the line's names, "allowed" a
 * boolean; RESET an integer; and after HELLO 2 the same requests answer RESP2's arrays, byte for
 * byte as before HELLO 3. */
#define TAKE3_MAP(allowed, credit, limit, reset, retry, rule)                                               \
        "%6\r\n$7\r\nallowed\r\n#" #allowed "\r\n$6\r\ncredit\r\n:" #credit "\r\n$5\r\nlimit\r\n:" #limit   \
        "\r\n$5\r\nreset\r\n:" #reset "\r\n$5\r\nretry\r\n:" #retry "\r\n$4\r\nrule\r\n" rule "\r\n"
#define RESP2_REPLIES                                                                                       \
        HIT3(1, 4, 60)                                                                                      \
        HIT3(0, 0, -1)                                                                                      \
        "*6\r\n:1\r\n:2\r\n:5\r\n:60\r\n:0\r\n$2\r\n#2\r\n"                                                 \
        "*6\r\n:0\r\n:2\r\n:5\r\n:60\r\n:-1\r\n$2\r\n#2\r\n"                                                \
        "$89\r\nrule=#2 index=2 policy=stop actor=\"we ird\\\"\" "                                          \
        "algorithm=fixed-window canaries=- continue=-\r\n"                                                  \
        "$79\r\nrule=a index=0 policy=stop actor=- algorithm=fixed-window "                                 \
        "canaries=- continue=-\r\n"                                                                         \
        ":1\r\n"

/* The verbs on connection i, as an admin; RESET last puts the counter back as it was. */
static void resp3_verbs(unsigned i) {
        conns[i]->admin = true;
        input(i, req("HIT|f|we ird\""));
        input(i, req("HIT|d|1"));
        input(i, req("TAKE|2|f|we ird\""));
        input(i, req("PEEK|9|f|we ird\""));
        input(i, req("EXPLAIN|f|we ird\""));
        input(i, req("EXPLAIN|a|1"));
        input(i, req("RESET|f|we ird\""));
        batch_take(batch, conns[i]);
        ck_assert_uint_eq(finish(), 7);
}

START_TEST (test_resp3_replies) {
        input(0, req("HELLO|3"));
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 1);
        (void) output(0);
        resp3_verbs(0);
        ck_assert_str_eq(
                output(0), HIT3_MAP(t, 4, 60) HIT3_MAP(f, 0, -1) TAKE3_MAP(t, 2, 5, 60, 0, "$2\r\n#2")
                                   TAKE3_MAP(f, 2, 5, 60, -1, "$2\r\n#2") /* 9 > 5: never */
                "%7\r\n$4\r\nrule\r\n$2\r\n#2\r\n$5\r\nindex\r\n:2\r\n$6\r\npolicy\r\n$4\r\nstop\r\n"
                "$5\r\nactor\r\n$7\r\nwe ird\"\r\n$9\r\nalgorithm\r\n$12\r\nfixed-window\r\n"
                "$8\r\ncanaries\r\n*0\r\n$8\r\ncontinue\r\n*0\r\n"
                "%7\r\n$4\r\nrule\r\n$1\r\na\r\n$5\r\nindex\r\n:0\r\n$6\r\npolicy\r\n$4\r\nstop\r\n"
                "$5\r\nactor\r\n_\r\n$9\r\nalgorithm\r\n$12\r\nfixed-window\r\n"
                "$8\r\ncanaries\r\n*0\r\n$8\r\ncontinue\r\n*0\r\n"
                ":1\r\n");

        /* HELLO 2: RESP2's replies again, byte for byte those of a connection that never said
         * HELLO 3 */
        input(0, req("HELLO|2"));
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 1);
        (void) output(0);
        resp3_verbs(0);
        ck_assert_str_eq(output(0), RESP2_REPLIES);
        resp3_verbs(1);
        ck_assert_str_eq(output(1), RESP2_REPLIES);
}
END_TEST

/* INFO: Redis's shape with divvyd's figures; ioredis's ready check reads "loading:0". */
START_TEST (test_info) {
        input(0, req("HIT|f|u1"));
        input(0, req("INFO"));
        input(0, req("INFO|persistence"));
        input(0, req("INFO|nosuch"));
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 4);
        const char *out = output(0) + strlen(HIT3(1, 4, 60));
        ck_assert_msg(strstr(out, "\r\n# Server\r\nredis_version:7.2.0\r\ndivvyd_version:"), "%s", out);
        ck_assert(strstr(out, "\r\nuptime_in_seconds:"));
        ck_assert(strstr(out, "\r\n# Clients\r\nconnected_clients:"));
        ck_assert(strstr(out, "\r\n# Persistence\r\nloading:0\r\n"));
        ck_assert(strstr(out, "\r\ndivvyd_hits_accepted:1\r\ndivvyd_hits_rejected:0\r\n"));
        ck_assert(strstr(out, "\r\n# Keyspace\r\ndb0:keys="));
        out = strstr(out, "avg_ttl=0\r\n\r\n") + strlen("avg_ttl=0\r\n\r\n");
        ck_assert_msg(strncmp(out, "$", 1) == 0 && strstr(out, "\r\n# Persistence\r\nloading:0\r\n") &&
                              !strstr(out, "# Server"),
                      "%s", out);
        ck_assert(strstr(out, "\r\n$0\r\n\r\n"));
}
END_TEST

#define EXECABORT "-EXECABORT Transaction discarded because of previous errors.\r\n"

/* MULTI/EXEC/DISCARD as Redis's: a transaction that is not executed charges nothing; an executed
 * one takes its requests into one batch, its replies in one array, in order. */
START_TEST (test_transactions) {
        input(0, req("MULTI"));
        input(0, req("HIT|f|t1"));
        input(0, req("FROB"));
        input(0, req("HIT|f|t1"));
        input(0, req("EXEC"));
        input(0, req("HIT|f|t1")); /* the first hit of t1 */
        input(0, req("EXEC"));
        input(0, req("DISCARD"));
        input(0, req("WATCH|k"));
        input(0, req("MULTI"));
        input(0, req("MULTI"));
        input(0, req("HIT|f|t2"));
        input(0, req("DISCARD"));
        input(0, req("MULTI"));
        input(0, req("HIT|f|t2"));
        input(0, req("PING"));
        input(0, req("HIT|f|t2"));
        input(0, req("EXEC"));
        input(0, req("HIT|f|t2"));
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 18 + 3); /* the queued requests have a slot each again at EXEC */
        ck_assert_str_eq(
                output(0),
                "+OK\r\n+QUEUED\r\n-ERR unknown command 'FROB'\r\n+QUEUED\r\n" EXECABORT HIT3(
                        1, 4, 60) "-ERR EXEC without MULTI\r\n-ERR DISCARD without MULTI\r\n"
                                  "-ERR WATCH is not supported: divvyd's EXEC runs its commands together, "
                                  "without optimistic locking\r\n"
                                  "+OK\r\n-ERR MULTI calls can not be nested\r\n+QUEUED\r\n+OK\r\n"
                                  "+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n"
                                  "*3\r\n" HIT3(1, 4, 60) "+PONG\r\n" HIT3(1, 3, 60));
        ck_assert_uint_eq(metrics_hits_total(metrics, METRICS_STATUS_ACCEPTED), 3);
        /* EXEC ends what a batch takes from the connection: the next HIT is the next batch's */
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 1);
        ck_assert_str_eq(output(0), HIT3(1, 2, 60));

        /* WATCH inside MULTI, and a transaction beyond RESP_MULTI_MAX requests: aborted */
        input(0, req("MULTI"));
        input(0, req("WATCH|k"));
        input(0, req("HIT|f|t3"));
        input(0, req("EXEC"));
        input(0, req("MULTI"));
        for (unsigned i = 0; i <= RESP_MULTI_MAX; i++)
                input(0, req("HIT|f|t3"));
        input(0, req("EXEC"));
        input(0, req("HIT|f|t3"));
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 4 + 1 + RESP_MULTI_MAX + 1 + 1 + 1);
        const char *out = output(0);
        ck_assert(strncmp(out,
                          "+OK\r\n-ERR WATCH inside MULTI is not allowed\r\n+QUEUED\r\n" EXECABORT "+OK\r\n",
                          strlen("+OK\r\n-ERR WATCH inside MULTI is not allowed\r\n+QUEUED\r\n" EXECABORT
                                 "+OK\r\n")) == 0);
        ck_assert_str_eq(strstr(out, "-ERR transaction too large"),
                         "-ERR transaction too large: divvyd queues at most " RESP_MULTI_MAX_TEXT
                         " commands of at most " RESP_MULTI_BYTES_TEXT
                         " bytes in all\r\n" EXECABORT HIT3(1, 4, 60));
        ck_assert_uint_eq(metrics_hits_total(metrics, METRICS_STATUS_ACCEPTED), 5);
        ck_assert(!conns[0]->resp->multi);
}
END_TEST

START_TEST (test_quit) {
        input(0, req("PING"));
        input(0, req("QUIT"));
        input(0, req("HIT|a|1"));
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 2);
        ck_assert_str_eq(output(0), "+PONG\r\n+OK\r\n");
        ck_assert(conns[0]->closing);
        ck_assert_uint_eq(conns[0]->in_pos, conns[0]->in_len); /* the HIT is dropped */
        ck_assert_uint_eq(metrics_hits_total(metrics, METRICS_STATUS_ACCEPTED), 0);
}
END_TEST

START_TEST (test_partial_input) {
        const char *r = req("HIT|a|1");
        size_t n = strlen(r);

        /* Byte by byte: no request until the last one arrives. */
        for (size_t k = 0; k + 1 < n; k++) {
                input_n(0, r + k, 1);
                ck_assert(!connection_has_request(conns[0]));
        }
        input_n(0, r + n - 1, 1);
        ck_assert(connection_has_request(conns[0]));
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 1);
        ck_assert_str_eq(output(0), HIT3(1, 1, 60));

        /* A request cut by the peer's EOF is answered nothing. */
        input(1, "*2\r\n$4\r\nPING\r\n$3\r\nab");
        conns[1]->eof = true;
        ck_assert(connection_has_request(conns[1]));
        batch_take(batch, conns[1]);
        ck_assert_uint_eq(finish(), 0);
        ck_assert_str_eq(output(1), "");
        ck_assert_uint_eq(conns[1]->in_pos, conns[1]->in_len);
}
END_TEST

static const struct {
        const char *in;
        const char *reply;
} framing_cases[] = {
        { "*1\r\n*1\r\n$1\r\na\r\n", "-ERR Protocol error: nested arrays are not supported\r\n" },
        { "*1\r\n$999999999\r\n", "-ERR Protocol error: bulk string longer than the line limit\r\n" },
        { "*1\r\n$4\r\nPINGxx", "-ERR Protocol error: expected CRLF after a bulk string\r\n" },
        { "*1\r\n:1\r\n", "-ERR Protocol error: expected '$' (a bulk string)\r\n" },
        { "*x\r\n", "-ERR Protocol error: invalid length\r\n" },
        { "*999\r\n", "-ERR Protocol error: too many arguments\r\n" },
        /* a second request that is not RESP: this connection speaks RESP for its lifetime */
        { "HIT a=1\n", "-ERR Protocol error: expected '*' (divvyd takes RESP arrays of bulk strings)\r\n" },
};

START_TEST (test_framing_errors_close) {
        /* One good request, then a broken one: the first is answered, the error once, nothing
         * after it; the other connection is not affected. */
        input(0, req("PING"));
        input(0, framing_cases[_i].in);
        input(0, req("PING"));
        input(1, req("PING"));
        batch_take(batch, conns[0]);
        batch_take(batch, conns[1]);
        finish();
        char want[256];
        snprintf(want, sizeof want, "+PONG\r\n%s", framing_cases[_i].reply);
        ck_assert_str_eq(output(0), want);
        ck_assert(conns[0]->closing && conns[0]->err_sent);
        ck_assert_uint_eq(conns[0]->in_pos, conns[0]->in_len);
        ck_assert_str_eq(output(1), "+PONG\r\n");
        ck_assert(!conns[1]->closing);
}
END_TEST

START_TEST (test_resp_off) {
        /* --resp=off: "*..." is a line, an unknown command, as before issue #17. */
        conns[0]->resp_allowed = false;
        input(0, req("PING"));
        batch_take(batch, conns[0]);
        finish();
        ck_assert_int_eq(conns[0]->proto, CONNECTION_PROTO_LINE);
        ck_assert_str_eq(output(0), "ERR unknown-command \"unknown command\"\n");
        ck_assert(conns[0]->closing);

        /* A line connection stays one even if a later line starts with '*'. */
        input(1, "HIT a=1\n*1\r\n");
        batch_take(batch, conns[1]);
        finish();
        ck_assert_str_eq(output(1), "OK true 1 60\nERR unknown-command \"unknown command\"\n");
}
END_TEST

START_TEST (test_pipelined_batches) {
        /* More requests than one batch takes from a connection: the rest in the next batch, in
         * order, and the counter moves once per HIT. */
        char big[200 * 32];
        size_t n = 0;

        for (unsigned i = 0; i < 100; i++)
                n += (size_t) sprintf(big + n, "%s", req("HIT|f|p"));
        input_n(0, big, n);
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), BATCH_LINES_PER_CONNECTION);
        connection_compact_input(conns[0]);
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 100 - BATCH_LINES_PER_CONNECTION);
        const char *out = output(0);
        ck_assert(strncmp(out, HIT3(1, 4, 60) HIT3(1, 3, 60), 34) == 0);
        size_t count = 0;
        for (const char *p = out; (p = strstr(p, "*3\r\n")); p++)
                count++;
        ck_assert_uint_eq(count, 100);
        ck_assert_uint_eq(metrics_hits_total(metrics, METRICS_STATUS_ACCEPTED), 5);
        ck_assert_uint_eq(metrics_hits_total(metrics, METRICS_STATUS_REJECTED), 95);
}
END_TEST

START_TEST (test_reply_room_then_compact) {
        /* A connection whose output buffer holds one decision: the batch frames the second
         * request, finds no room for its reply and leaves it for the next batch; the server
         * compacts the input in between, which moves the framed request. */
        Connection *small;
        int sv[2];

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
        ck_assert_int_eq(connection_new(sv[0], false, RESP_REPLY_DECISION_MAX + 8, &small), 0);
        small->resp_allowed = true;
        const char *reqs[] = { req("TAKE|1|f|r1"), req("TAKE|1|f|r22"), req("TAKE|1|f|r333") };
        for (unsigned i = 0; i < 3; i++)
                ck_assert_int_eq(send(sv[1], reqs[i], strlen(reqs[i]), 0), (ssize_t) strlen(reqs[i]));
        ck_assert_int_gt(connection_read(small), 0);
        for (unsigned i = 0; i < 3; i++) {
                char want[64];
                batch_take(batch, small);
                ck_assert_uint_eq(finish(), 1);
                snprintf(want, sizeof want, "*6\r\n:1\r\n:4\r\n:5\r\n:60\r\n:0\r\n$2\r\n#2\r\n");
                ck_assert_uint_eq(connection_unsent(small), strlen(want));
                ck_assert_mem_eq(small->out + small->out_pos, want, strlen(want));
                small->out_pos = small->out_len = 0;
                connection_compact_input(small);
        }
        /* each request went to its own actor's counter: r1, r22, r333 */
        input(0, req("PEEK|0|f|r22"));
        batch_take(batch, conns[0]);
        finish();
        ck_assert_str_eq(output(0), "*6\r\n:1\r\n:4\r\n:5\r\n:60\r\n:0\r\n$2\r\n#2\r\n");
        connection_free(small);
        close(sv[1]);
}
END_TEST

/* The fixture's batch replaced by one with --allow-client-limits, on the same store. */
static void client_limits_batch(void) {
        batch = batch_free(batch);
        ck_assert_int_eq(
                batch_new(&(BatchSettings){ .output_limit = 4096, .allow_client_limits = true }, &batch), 0);
        frontends_attach(batch);
        batch_set_rules(batch, rules);
        batch_set_store(batch, store);
        batch_set_done(batch, on_done, NULL);
}

START_TEST (test_client_limits) {
        /* --allow-client-limits: a batch of its own, on the same store. redis-cell's worked example
         * (README: "CL.THROTTLE user123 15 30 60" on a fresh key; the key alone is the cell), then
         * Smyte's RL.*: the tokens before the take, a larger take draining the bucket,
         * RL.PREDUCE's milliseconds naming the same bucket as RL.REDUCE's seconds, AT at any
         * time (a time before the last refill refills nothing). */
        client_limits_batch();

        input(0, req("CL.THROTTLE|user123|15|30|60"));
        input(0, req("cl.throttle|user123|15|30|60"));
        input(0, req("CL.THROTTLE|user123|15|30|60|0"));
        input(0, req("CL.THROTTLE|user123|15|30|61")); /* other parameters: the same cell */
        input(0, req("CL.THROTTLE|user123|15|0|60"));
        input(0, req("CL.THROTTLE|user123|15"));
        input(0, req("RL.REDUCE|k|3|60"));
        input(0, req("RL.REDUCE|k|3|60|TAKE|2"));
        input(0, req("RL.REDUCE|k|3|60|TAKE|2"));
        input(0, req("RL.GET|k|3|60"));
        input(0, req("RL.PGET|k|3|60000"));
        input(0, req("RL.REDUCE|k|3|60|AT|1700000000")); /* not --client-time-max-age's */
        input(0, req("HIT|a|1"));                        /* the rules still decide the rest */
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 13);
        ck_assert_str_eq(output(0),
                         "*5\r\n:0\r\n:16\r\n:15\r\n:-1\r\n:2\r\n"
                         "*5\r\n:0\r\n:16\r\n:14\r\n:-1\r\n:4\r\n"
                         "*5\r\n:0\r\n:16\r\n:14\r\n:-1\r\n:4\r\n"
                         "*5\r\n:0\r\n:16\r\n:13\r\n:-1\r\n:7\r\n"
                         "-Cell error: Zero rates are not supported\r\n"
                         "-Cell error: Usage: cl.throttle <key> <max_burst> <count per period> <period> "
                         "[<quantity>]\r\n"
                         ":3\r\n:2\r\n:0\r\n:0\r\n:0\r\n"
                         ":0\r\n" HIT3(1, 1, 60));
        ck_assert(!conns[0]->closing);
}
END_TEST

START_TEST (test_client_limits_counted) {
        /* CL.THROTTLE and RL.* are counted per outcome as the verb of their operation, as TAKE and
         * PEEK are on a line: allowed and denied decisions and the credits taken. */
        client_limits_batch();
        batch_set_metrics(batch, metrics);

        input(0, req("CL.THROTTLE|u|1|1|60")); /* a bucket of 2: taken */
        input(0, req("CL.THROTTLE|u|1|1|60")); /* taken */
        input(0, req("CL.THROTTLE|u|1|1|60")); /* denied */
        input(0, req("CL.THROTTLE|u|1|1|60|0"));
        input(0, req("RL.REDUCE|r|3|60|TAKE|2")); /* 2 taken */
        input(0, req("RL.REDUCE|r|3|60|TAKE|2")); /* denied (Smyte's drain) */
        input(0, req("CL.THROTTLE|u|1|1|60|-1")); /* a refund of 1, counted as one */
        input(0, req("DEL|u"));                   /* a reset */
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 8);
        ck_assert_uint_eq(metrics_verb_decisions(metrics, PROTO_VERB_TAKE, true), 3);
        ck_assert_uint_eq(metrics_verb_decisions(metrics, PROTO_VERB_TAKE, false), 2);
        ck_assert_uint_eq(metrics_verb_credits(metrics, PROTO_VERB_TAKE), 4);
        ck_assert_uint_eq(metrics_verb_decisions(metrics, PROTO_VERB_PEEK, true) +
                                  metrics_verb_decisions(metrics, PROTO_VERB_PEEK, false),
                          1);
        ck_assert_uint_eq(metrics_verb_decisions(metrics, PROTO_VERB_REFUND, true), 1);
        ck_assert_uint_eq(metrics_verb_credits(metrics, PROTO_VERB_REFUND), 0);
        ck_assert_uint_eq(metrics_verb_decisions(metrics, PROTO_VERB_RESET, true), 1);
}
END_TEST

START_TEST (test_del_gcra) {
        /* DEL deletes the GCRA counter of its key, as Redis's DEL deletes the key GCRA wrote: 1
         * for a live counter (one key, whether its cell, its GCRA counter or both lived), then a
         * full burst again; 0 once nothing lives under the key. */
        client_limits_batch();
        input(0, req("GCRA|g1|1|1|60"));
        input(0, req("GCRA|g1|1|1|60"));
        input(0, req("GCRA|g1|1|1|60")); /* a burst of 2: limited */
        input(0, req("DEL|g1"));
        input(0, req("DEL|g1"));
        input(0, req("GCRA|g1|1|1|60")); /* fresh */
        input(0, req("CL.THROTTLE|g1|1|1|60"));
        input(0, req("DEL|g1")); /* both */
        input(0, req("GCRA|g1|1|1|60"));
        input(0, req("CL.THROTTLE|g1|1|1|60"));
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 10);
        ck_assert_str_eq(output(0), "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:60\r\n"
                                    "*5\r\n:0\r\n:2\r\n:0\r\n:-1\r\n:120\r\n"
                                    "*5\r\n:1\r\n:2\r\n:0\r\n:60\r\n:120\r\n"
                                    ":1\r\n:0\r\n"
                                    "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:60\r\n"
                                    "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:60\r\n"
                                    ":1\r\n"
                                    "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:60\r\n"
                                    "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:60\r\n");
}
END_TEST

/* The hits of the last batch submitted, as the store got them; then the real store applies them. */
static StoreHit seen[4];
static size_t n_seen;

static int seeing_submit(void *backend, StoreHit *hits, size_t n, uint64_t now_usec, StoreDoneFunc done,
                         void *userdata) {
        n_seen = n < 4 ? n : 4;
        memcpy(seen, hits, n_seen * sizeof *hits);
        return store_submit(backend, hits, n, now_usec, done, userdata);
}

START_TEST (test_client_limit_hits) {
        /* A client's limit is one hit on the counter its id names, the key hashed into the id once
         * (client-limits.c): no actor for the store to hash again. Its operation is the
         * algorithm's: TAKE of the quantity, PEEK for 0, RESET for DEL. */
        ClientLimit cl;
        const char *err = NULL;
        const ProtoSlice argv[4] = { { "user123", 7 }, { "15", 2 }, { "30", 2 }, { "60", 2 } };

        ck_assert_int_eq(client_limit_parse_del(1, argv, &cl, &err), 0);
        client_limits_batch();
        batch_set_backend(batch, seeing_submit, store);
        input(0, req("CL.THROTTLE|user123|15|30|60|2"));
        input(0, req("DEL|user123"));
        input(0, req("CL.THROTTLE|user123|15|30|60|0"));
        batch_take(batch, conns[0]);
        ck_assert_uint_eq(finish(), 3);
        ck_assert_str_eq(output(0), "*5\r\n:0\r\n:16\r\n:14\r\n:-1\r\n:4\r\n"
                                    ":1\r\n" /* DEL: a live cell was deleted */
                                    "*5\r\n:0\r\n:16\r\n:16\r\n:-1\r\n:0\r\n");
        ck_assert_uint_eq(n_seen, 4); /* DEL: the cell and the key's GCRA counter */
        for (size_t i = 0; i < 4; i++) {
                ck_assert_mem_eq(seen[i].rule_id, i == 2 ? cl.also_id : cl.id, CLIENT_LIMIT_ID_SIZE);
                ck_assert_ptr_null(seen[i].actor);
                ck_assert_uint_eq(seen[i].actor_len, 0);
        }
        ck_assert_int_eq(seen[0].op, ALGO_TAKE);
        ck_assert_uint_eq(seen[0].count, 2);
        ck_assert_int_eq(seen[1].op, ALGO_RESET);
        ck_assert_int_eq(seen[2].op, ALGO_RESET);
        ck_assert_int_eq(seen[3].op, ALGO_PEEK);
}
END_TEST

int main(void) {
        Suite *s = suite_create("frontend_resp");
        TCase *tc = tcase_create("resp");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_same_counters_as_lines);
        tcase_add_test(tc, test_verbs);
        tcase_add_test(tc, test_admin);
        tcase_add_test(tc, test_command_errors_keep_connection);
        tcase_add_test(tc, test_connection_commands);
        tcase_add_test(tc, test_resp3);
        tcase_add_test(tc, test_resp3_replies);
        tcase_add_test(tc, test_info);
        tcase_add_test(tc, test_transactions);
        tcase_add_test(tc, test_quit);
        tcase_add_test(tc, test_partial_input);
        tcase_add_loop_test(tc, test_framing_errors_close, 0,
                            sizeof framing_cases / sizeof framing_cases[0]);
        tcase_add_test(tc, test_resp_off);
        tcase_add_test(tc, test_pipelined_batches);
        tcase_add_test(tc, test_client_limits);
        tcase_add_test(tc, test_client_limits_counted);
        tcase_add_test(tc, test_client_limit_hits);
        tcase_add_test(tc, test_del_gcra);
        tcase_add_test(tc, test_reply_room_then_compact);
        suite_add_tcase(s, tc);
        return check_run_suite(s);
}
