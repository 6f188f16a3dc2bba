/* SPDX-License-Identifier: MIT */
/* resp-commands.c: RESP's command table (every name found in any case, nothing else found) and
 * the replies its handlers decide for the connection commands, without a daemon. */

#include <check.h>
#include <string.h>

#include "core/resp-commands.h"
#include "check-run.h"

static ProtoSlice slice(const char *s) {
        return (ProtoSlice){ s, strlen(s) };
}

/* Splits "A|b|c" into argv (at most 8; the pieces point into a static copy). */
static size_t split(const char *in, ProtoSlice *argv) {
        static char buf[256];
        size_t argc = 0;
        char *p = buf;

        strcpy(buf, in);
        for (;;) {
                char *bar = strchr(p, '|');
                argv[argc++] = (ProtoSlice){ p, bar ? (size_t) (bar - p) : strlen(p) };
                if (!bar || argc == 8)
                        return argc;
                p = bar + 1;
        }
}

START_TEST (test_lookup) {
        char lower[32];

        for (RespCommand c = RESP_CMD_HIT; c < _RESP_CMD_MAX; c++) {
                const RespCommandRow *row = resp_command_row(c);
                size_t n = strlen(row->name);

                ck_assert_int_eq(row->cmd, c);
                ck_assert_ptr_eq(resp_command_lookup(slice(row->name)), row);
                for (size_t i = 0; i <= n; i++)
                        lower[i] = (char) (row->name[i] >= 'A' && row->name[i] <= 'Z' ? row->name[i] + 32
                                                                                      : row->name[i]);
                ck_assert_ptr_eq(resp_command_lookup(slice(lower)), row);
                /* a prefix and an extension are other names */
                ck_assert_ptr_null(resp_command_lookup((ProtoSlice){ row->name, n - 1 }));
                memcpy(lower, row->name, n);
                memcpy(lower + n, "X", 2);
                ck_assert_ptr_null(resp_command_lookup(slice(lower)));
                /* divvyd's own commands carry their verb, the others none */
                ck_assert_int_eq(row->verb >= 0, (row->flags & RESP_COMMAND_VERB) != 0);
        }
        ck_assert_ptr_null(resp_command_row(RESP_CMD_UNKNOWN));
        ck_assert_ptr_null(resp_command_lookup(slice("")));
        ck_assert_ptr_null(resp_command_lookup(slice("GET")));
        ck_assert_ptr_null(resp_command_lookup(slice("ZZZ")));
        ck_assert_int_eq(resp_command_lookup(slice("cl.throttle"))->flags, RESP_COMMAND_CLIENT_LIMIT);
        ck_assert_int_eq(resp_command_lookup(slice("Quit"))->flags, RESP_COMMAND_CLOSE);
        ck_assert_int_eq(resp_command_lookup(slice("exec"))->flags, RESP_COMMAND_TRANSACTION);
        ck_assert_int_eq(resp_command_lookup(slice("hit"))->verb, PROTO_VERB_HIT);
}
END_TEST

static const struct {
        const char *request; /* arguments joined by '|' */
        RespReply reply;
        RespSub sub;
        const char *arg;    /* NULL: none */
        uint64_t n;         /* COMMAND INFO */
        const char *reason; /* a word of it, or NULL */
} plan_cases[] = {
        { "PING", RESP_REPLY_NORMAL, RESP_SUB_NONE, NULL, 0, NULL },
        { "ping|hello", RESP_REPLY_NORMAL, RESP_SUB_NONE, "hello", 0, NULL },
        { "PING|a|b", RESP_REPLY_ARITY, RESP_SUB_NONE, NULL, 0, NULL },
        { "ECHO", RESP_REPLY_ARITY, RESP_SUB_NONE, NULL, 0, NULL },
        { "ECHO|x y", RESP_REPLY_NORMAL, RESP_SUB_NONE, "x y", 0, NULL },
        { "ECHO|a|b", RESP_REPLY_ARITY, RESP_SUB_NONE, NULL, 0, NULL },
        { "QUIT", RESP_REPLY_NORMAL, RESP_SUB_NONE, NULL, 0, NULL },
        { "HELLO", RESP_REPLY_NORMAL, RESP_SUB_NONE, NULL, 0, NULL },
        { "HELLO|3", RESP_REPLY_NORMAL, RESP_SUB_NONE, NULL, 3, NULL },
        { "HELLO|2", RESP_REPLY_NORMAL, RESP_SUB_NONE, NULL, 2, NULL },
        { "HELLO|4", RESP_REPLY_NOPROTO, RESP_SUB_NONE, NULL, 0, NULL },
        { "HELLO|1", RESP_REPLY_NOPROTO, RESP_SUB_NONE, NULL, 0, NULL },
        { "HELLO|3|AUTH|default|pw|SETNAME|me", RESP_REPLY_NORMAL, RESP_SUB_SETNAME, "me", 3, NULL },
        { "HELLO|3|AUTH|bob|pw", RESP_REPLY_TEXT_ERROR, RESP_SUB_NONE, NULL, 0, "WRONGPASS" },
        { "HELLO|3|AUTH|default", RESP_REPLY_ERROR, RESP_SUB_NONE, NULL, 0, "Syntax error" },
        { "HELLO|two", RESP_REPLY_ERROR, RESP_SUB_NONE, NULL, 0, "Protocol version" },
        { "HELLO|2|SETNAME|me", RESP_REPLY_NORMAL, RESP_SUB_SETNAME, "me", 2, NULL },
        { "HELLO|2|SETNAME|a b", RESP_REPLY_ERROR, RESP_SUB_NONE, NULL, 0, "Client names" },
        { "HELLO|2|FOO", RESP_REPLY_ERROR, RESP_SUB_NONE, NULL, 0, "Syntax error" },
        { "CLIENT", RESP_REPLY_ARITY, RESP_SUB_NONE, NULL, 0, NULL },
        { "CLIENT|setname|me", RESP_REPLY_NORMAL, RESP_SUB_SETNAME, "me", 0, NULL },
        { "CLIENT|SETNAME", RESP_REPLY_ARITY, RESP_SUB_NONE, NULL, 0, NULL },
        { "CLIENT|SETNAME|a\tb", RESP_REPLY_ERROR, RESP_SUB_NONE, NULL, 0, "Client names" },
        { "CLIENT|GETNAME", RESP_REPLY_NORMAL, RESP_SUB_GETNAME, NULL, 0, NULL },
        { "CLIENT|GETNAME|x", RESP_REPLY_ARITY, RESP_SUB_NONE, NULL, 0, NULL },
        { "CLIENT|SETINFO|lib-name|x", RESP_REPLY_NORMAL, RESP_SUB_OK, NULL, 0, NULL },
        { "CLIENT|ID", RESP_REPLY_NORMAL, RESP_SUB_ID, NULL, 0, NULL },
        { "CLIENT|MAINT_NOTIFICATIONS|on|moving-endpoint-type|internal-ip", RESP_REPLY_NORMAL, RESP_SUB_OK,
          NULL, 0, NULL },
        { "CLIENT|MAINT_NOTIFICATIONS", RESP_REPLY_ARITY, RESP_SUB_NONE, NULL, 0, NULL },
        { "CLIENT|KILL", RESP_REPLY_ERROR, RESP_SUB_NONE, NULL, 0, "unknown CLIENT subcommand" },
        { "COMMAND", RESP_REPLY_NORMAL, RESP_SUB_EMPTY, NULL, 0, NULL },
        { "COMMAND|DOCS|x", RESP_REPLY_NORMAL, RESP_SUB_DOCS, NULL, 0, NULL },
        { "COMMAND|COUNT", RESP_REPLY_NORMAL, RESP_SUB_COUNT, NULL, 0, NULL },
        { "COMMAND|INFO|a|b", RESP_REPLY_NORMAL, RESP_SUB_INFO, NULL, 2, NULL },
        { "COMMAND|LIST", RESP_REPLY_ERROR, RESP_SUB_NONE, NULL, 0, "unknown COMMAND subcommand" },
        { "SELECT|0", RESP_REPLY_NORMAL, RESP_SUB_NONE, NULL, 0, NULL },
        { "SELECT|1", RESP_REPLY_ERROR, RESP_SUB_NONE, NULL, 0, "out of range" },
        { "SELECT|x", RESP_REPLY_ERROR, RESP_SUB_NONE, NULL, 0, "not an integer" },
        { "SELECT", RESP_REPLY_ARITY, RESP_SUB_NONE, NULL, 0, NULL },
        { "AUTH|secret", RESP_REPLY_ERROR, RESP_SUB_NONE, NULL, 0, "configuration is correct?" },
        { "INFO", RESP_REPLY_NORMAL, RESP_SUB_NONE, NULL, RESP_INFO_ALL, NULL },
        { "info|Persistence|clients", RESP_REPLY_NORMAL, RESP_SUB_NONE, NULL,
          RESP_INFO_PERSISTENCE | RESP_INFO_CLIENTS, NULL },
        { "INFO|server|everything", RESP_REPLY_NORMAL, RESP_SUB_NONE, NULL, RESP_INFO_ALL, NULL },
        { "INFO|nosuch", RESP_REPLY_NORMAL, RESP_SUB_NONE, NULL, 0, NULL },
        { "MULTI", RESP_REPLY_NORMAL, RESP_SUB_NONE, NULL, 0, NULL },
        { "multi|x", RESP_REPLY_ARITY, RESP_SUB_NONE, NULL, 0, NULL },
        { "EXEC|x", RESP_REPLY_ARITY, RESP_SUB_NONE, NULL, 0, NULL },
        { "DISCARD", RESP_REPLY_NORMAL, RESP_SUB_NONE, NULL, 0, NULL },
        { "WATCH", RESP_REPLY_ARITY, RESP_SUB_NONE, NULL, 0, NULL },
        { "WATCH|k|l", RESP_REPLY_NORMAL, RESP_SUB_NONE, NULL, 0, NULL },
        { "CL.THROTTLE|k|1|2|3", RESP_REPLY_ERROR, RESP_SUB_NONE, NULL, 0, "--allow-client-limits" },
        { "RL.GET|k|1|2", RESP_REPLY_ERROR, RESP_SUB_NONE, NULL, 0, "--allow-client-limits" },
        { "GET|k", RESP_REPLY_UNKNOWN, RESP_SUB_NONE, "GET", 0, NULL },
};

START_TEST (test_plan) {
        ProtoSlice argv[8];
        size_t argc = split(plan_cases[_i].request, argv);
        RespPlan plan;

        resp_command_plan(resp_command_lookup(argv[0]), argv, argc, &plan);
        ck_assert_msg(plan.reply == plan_cases[_i].reply, "%s: reply %d", plan_cases[_i].request,
                      plan.reply);
        ck_assert_int_eq(plan.sub, plan_cases[_i].sub);
        ck_assert_int_eq(plan.n, plan_cases[_i].n);
        if (plan_cases[_i].arg) {
                ck_assert_uint_eq(plan.arg.len, strlen(plan_cases[_i].arg));
                ck_assert(memcmp(plan.arg.ptr, plan_cases[_i].arg, plan.arg.len) == 0);
        } else
                ck_assert_ptr_null(plan.arg.ptr);
        if (plan_cases[_i].reason)
                ck_assert_msg(plan.reason && strstr(plan.reason, plan_cases[_i].reason), "%s: %s",
                              plan_cases[_i].request, plan.reason ? plan.reason : "(null)");
        /* room for an error, and for a message echoed */
        ck_assert_uint_ge(plan.room, RESP_ERROR_ROOM + (plan.reply == RESP_REPLY_NORMAL ? plan.arg.len : 0));
}
END_TEST

START_TEST (test_client_name) {
        char name[RESP_CLIENT_NAME_MAX + 2];

        ck_assert(resp_client_name_ok(slice("")));
        ck_assert(resp_client_name_ok(slice("worker-1")));
        ck_assert(!resp_client_name_ok(slice("a b")));
        ck_assert(!resp_client_name_ok(slice("a\x7f")));
        memset(name, 'n', sizeof name);
        ck_assert(resp_client_name_ok((ProtoSlice){ name, RESP_CLIENT_NAME_MAX }));
        ck_assert(!resp_client_name_ok((ProtoSlice){ name, RESP_CLIENT_NAME_MAX + 1 }));
}
END_TEST

int main(void) {
        Suite *s = suite_create("resp-commands");
        TCase *tc = tcase_create("table");

        tcase_add_test(tc, test_lookup);
        tcase_add_loop_test(tc, test_plan, 0, sizeof plan_cases / sizeof plan_cases[0]);
        tcase_add_test(tc, test_client_name);
        suite_add_tcase(s, tc);
        return check_run_suite(s);
}
