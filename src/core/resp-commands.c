/* SPDX-License-Identifier: MIT */
/* resp-commands.c: RESP's command table and the connection commands' decisions; see resp-commands.h. */

#include <string.h>

#include "resp-commands.h"

/* Why resp_client_name_ok() refused a name (HELLO SETNAME, CLIENT SETNAME). */
#define REASON_NAME                                                                                         \
        "Client names cannot contain spaces, newlines or special characters, nor be longer than 128 bytes"
_Static_assert(RESP_CLIENT_NAME_MAX == 128, "REASON_NAME says 128 bytes");

bool resp_client_name_ok(ProtoSlice name) {
        if (name.len > RESP_CLIENT_NAME_MAX)
                return false;
        for (size_t i = 0; i < name.len; i++)
                if ((uint8_t) name.ptr[i] <= ' ' || (uint8_t) name.ptr[i] >= 0x7F)
                        return false;
        return true;
}

static void plan_error(RespPlan *plan, const char *reason) {
        plan->reply = RESP_REPLY_ERROR;
        plan->reason = reason;
        plan->room = RESP_ERROR_ROOM;
}

static void plan_arity(RespPlan *plan) {
        plan->reply = RESP_REPLY_ARITY;
        plan->room = RESP_ERROR_ROOM;
}

static void handle_ping(const ProtoSlice *argv, size_t argc, RespPlan *plan) {
        if (argc > 2)
                return plan_arity(plan);
        if (argc == 2)
                plan->arg = argv[1];
        plan->room = RESP_ERROR_ROOM + plan->arg.len;
}

static void handle_echo(const ProtoSlice *argv, size_t argc, RespPlan *plan) {
        (void) argc;
        plan->arg = argv[1];
        plan->room = RESP_ERROR_ROOM + plan->arg.len;
}

static void handle_ok(const ProtoSlice *argv, size_t argc, RespPlan *plan) {
        (void) argv;
        (void) argc;
        plan->room = RESP_ERROR_ROOM;
}

/* HELLO [protover [AUTH username password] [SETNAME name]]: plan->n is the version asked for
 * (2 or 3; 0: the connection's stays). AUTH is Redis's with its default user and no password
 * configured: "default" with any password passes, another user name is refused. */
static void handle_hello(const ProtoSlice *argv, size_t argc, RespPlan *plan) {
        int64_t v = 0;

        if (argc >= 2) {
                if (resp_parse_int(argv[1], &v) < 0)
                        return plan_error(plan, "Protocol version is not an integer or out of range");
                if (v != 2 && v != 3) {
                        plan->reply = RESP_REPLY_NOPROTO;
                        plan->room = RESP_ERROR_ROOM;
                        return;
                }
        }
        for (size_t i = 2; i < argc; i++) {
                if (resp_slice_eq(argv[i], "SETNAME") && i + 1 < argc) {
                        if (!resp_client_name_ok(argv[i + 1]))
                                return plan_error(plan, REASON_NAME);
                        plan->sub = RESP_SUB_SETNAME;
                        plan->arg = argv[++i];
                } else if (resp_slice_eq(argv[i], "AUTH") && i + 2 < argc) {
                        if (!resp_slice_eq(argv[i + 1], "default")) {
                                plan->reply = RESP_REPLY_TEXT_ERROR;
                                plan->reason =
                                        "WRONGPASS invalid username-password pair or user is disabled.";
                                plan->room = RESP_ERROR_ROOM;
                                return;
                        }
                        i += 2;
                } else
                        return plan_error(plan, "Syntax error in HELLO option");
        }
        plan->n = (uint64_t) v;
        plan->room = RESP_ERROR_ROOM + 256;
}

/* CLIENT's subcommands: { name, arguments with CLIENT and the name (0: at least 3), what the reply
 * says }. */
static const struct {
        const char *name;
        size_t argc;
        RespSub sub;
} client_subcommands[] = {
        { "SETNAME", 3, RESP_SUB_SETNAME },
        { "GETNAME", 2, RESP_SUB_GETNAME },
        { "SETINFO", 4, RESP_SUB_OK },
        { "ID", 2, RESP_SUB_ID },
        { "MAINT_NOTIFICATIONS", 0, RESP_SUB_OK }, /* Redis 8's: on|off [option value ...] */
};

static void handle_client(const ProtoSlice *argv, size_t argc, RespPlan *plan) {
        for (size_t i = 0; i < sizeof client_subcommands / sizeof client_subcommands[0]; i++) {
                if (!resp_slice_eq(argv[1], client_subcommands[i].name))
                        continue;
                if (client_subcommands[i].argc ? argc != client_subcommands[i].argc : argc < 3)
                        return plan_arity(plan);
                if (client_subcommands[i].sub == RESP_SUB_SETNAME) {
                        if (!resp_client_name_ok(argv[2]))
                                return plan_error(plan, REASON_NAME);
                        plan->arg = argv[2];
                }
                plan->sub = client_subcommands[i].sub;
                plan->room = RESP_ERROR_ROOM + RESP_CLIENT_NAME_MAX;
                return;
        }
        plan_error(plan, "unknown CLIENT subcommand (divvyd knows SETNAME, GETNAME, SETINFO, ID and "
                         "MAINT_NOTIFICATIONS)");
}

static void handle_command(const ProtoSlice *argv, size_t argc, RespPlan *plan) {
        if (argc == 1)
                plan->sub = RESP_SUB_EMPTY;
        else if (resp_slice_eq(argv[1], "DOCS"))
                plan->sub = RESP_SUB_DOCS;
        else if (resp_slice_eq(argv[1], "COUNT") && argc == 2)
                plan->sub = RESP_SUB_COUNT;
        else if (resp_slice_eq(argv[1], "INFO")) {
                plan->sub = RESP_SUB_INFO;
                plan->n = argc - 2;
        } else
                return plan_error(plan, "unknown COMMAND subcommand (divvyd knows DOCS, COUNT and INFO)");
        plan->room = RESP_ERROR_ROOM + 5 * argc;
}

static void handle_select(const ProtoSlice *argv, size_t argc, RespPlan *plan) {
        int64_t v;

        (void) argc;
        if (resp_parse_int(argv[1], &v) < 0)
                return plan_error(plan, "value is not an integer or out of range");
        if (v != 0)
                return plan_error(plan, "DB index is out of range");
        plan->room = RESP_ERROR_ROOM;
}

static void handle_auth(const ProtoSlice *argv, size_t argc, RespPlan *plan) {
        (void) argv;
        (void) argc;
        plan_error(plan, "AUTH <password> called without any password configured for the default user. Are "
                         "you sure your configuration is correct?");
}

/* INFO [section ...]: the sections named (any case; "default", "all" and "everything": every
 * one; none: every one), in plan->n; an unknown name adds nothing, as in Redis. */
static void handle_info(const ProtoSlice *argv, size_t argc, RespPlan *plan) {
        static const char *const names[] = { "SERVER",      "CLIENTS", "MEMORY",
                                             "PERSISTENCE", "STATS",   "KEYSPACE" };

        plan->n = argc == 1 ? RESP_INFO_ALL : 0;
        for (size_t i = 1; i < argc; i++) {
                if (resp_slice_eq(argv[i], "DEFAULT") || resp_slice_eq(argv[i], "ALL") ||
                    resp_slice_eq(argv[i], "EVERYTHING"))
                        plan->n = RESP_INFO_ALL;
                for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
                        if (resp_slice_eq(argv[i], names[k]))
                                plan->n |= 1u << k;
        }
        plan->room = RESP_ERROR_ROOM + RESP_INFO_MAX + RESP_BULK_OVERHEAD;
}

static void handle_client_limit_off(const ProtoSlice *argv, size_t argc, RespPlan *plan) {
        (void) argv;
        (void) argc;
        plan_error(plan, "CL.THROTTLE and RL.* are off: start divvyd with --allow-client-limits");
}

#define VERB(n, c, v) [c] = { .name = (n), .arity = -1, .flags = RESP_COMMAND_VERB, .cmd = (c), .verb = (v) }
#define LIMIT(n, c)                                                                                         \
        [c] = { .name = (n),                                                                                \
                .arity = -1,                                                                                \
                .flags = RESP_COMMAND_CLIENT_LIMIT,                                                         \
                .handler = handle_client_limit_off,                                                         \
                .cmd = (c),                                                                                 \
                .verb = _PROTO_VERB_INVALID }
#define CONN(n, a, f, h, c)                                                                                 \
        [c] = { .name = (n),                                                                                \
                .arity = (a),                                                                               \
                .flags = (f),                                                                               \
                .handler = (h),                                                                             \
                .cmd = (c),                                                                                 \
                .verb = _PROTO_VERB_INVALID }

static const RespCommandRow command_table[_RESP_CMD_MAX] = {
        VERB("HIT", RESP_CMD_HIT, PROTO_VERB_HIT),
        VERB("TAKE", RESP_CMD_TAKE, PROTO_VERB_TAKE),
        VERB("PEEK", RESP_CMD_PEEK, PROTO_VERB_PEEK),
        VERB("CHARGE", RESP_CMD_CHARGE, PROTO_VERB_CHARGE),
        VERB("REFUND", RESP_CMD_REFUND, PROTO_VERB_REFUND),
        VERB("RESET", RESP_CMD_RESET, PROTO_VERB_RESET),
        VERB("EXPLAIN", RESP_CMD_EXPLAIN, PROTO_VERB_EXPLAIN),
        CONN("PING", -1, 0, handle_ping, RESP_CMD_PING),
        CONN("ECHO", 2, 0, handle_echo, RESP_CMD_ECHO),
        CONN("QUIT", -1, RESP_COMMAND_CLOSE, handle_ok, RESP_CMD_QUIT),
        CONN("HELLO", -1, 0, handle_hello, RESP_CMD_HELLO),
        CONN("CLIENT", -2, 0, handle_client, RESP_CMD_CLIENT),
        CONN("COMMAND", -1, 0, handle_command, RESP_CMD_COMMAND),
        CONN("SELECT", 2, 0, handle_select, RESP_CMD_SELECT),
        CONN("AUTH", -1, 0, handle_auth, RESP_CMD_AUTH),
        CONN("INFO", -1, 0, handle_info, RESP_CMD_INFO),
        CONN("MULTI", 1, RESP_COMMAND_TRANSACTION, handle_ok, RESP_CMD_MULTI),
        CONN("EXEC", 1, RESP_COMMAND_TRANSACTION, handle_ok, RESP_CMD_EXEC),
        CONN("DISCARD", 1, RESP_COMMAND_TRANSACTION, handle_ok, RESP_CMD_DISCARD),
        CONN("WATCH", -2, RESP_COMMAND_TRANSACTION, handle_ok, RESP_CMD_WATCH),
        LIMIT("CL.THROTTLE", RESP_CMD_CL_THROTTLE),
        LIMIT("RL.REDUCE", RESP_CMD_RL_REDUCE),
        LIMIT("RL.GET", RESP_CMD_RL_GET),
        LIMIT("RL.PREDUCE", RESP_CMD_RL_PREDUCE),
        LIMIT("RL.PGET", RESP_CMD_RL_PGET),
        LIMIT("DEL", RESP_CMD_DEL),
        LIMIT("GCRA", RESP_CMD_GCRA),
};

/* The commands in the order of their names (upper case, byte order), for the binary search. */
static const uint8_t by_name[_RESP_CMD_MAX - 1] = {
        RESP_CMD_AUTH,   RESP_CMD_CHARGE,  RESP_CMD_CL_THROTTLE, RESP_CMD_CLIENT,    RESP_CMD_COMMAND,
        RESP_CMD_DEL,    RESP_CMD_DISCARD, RESP_CMD_ECHO,        RESP_CMD_EXEC,      RESP_CMD_EXPLAIN,
        RESP_CMD_GCRA,   RESP_CMD_HELLO,   RESP_CMD_HIT,         RESP_CMD_INFO,      RESP_CMD_MULTI,
        RESP_CMD_PEEK,   RESP_CMD_PING,    RESP_CMD_QUIT,        RESP_CMD_REFUND,    RESP_CMD_RESET,
        RESP_CMD_RL_GET, RESP_CMD_RL_PGET, RESP_CMD_RL_PREDUCE,  RESP_CMD_RL_REDUCE, RESP_CMD_SELECT,
        RESP_CMD_TAKE,   RESP_CMD_WATCH,
};

/* name (any case) against an upper-case word, as strcmp() orders them. */
static int compare_name(ProtoSlice name, const char *word) {
        size_t i;

        for (i = 0; i < name.len && word[i]; i++) {
                uint8_t c = (uint8_t) name.ptr[i];
                if (c >= 'a' && c <= 'z')
                        c -= 'a' - 'A';
                if (c != (uint8_t) word[i])
                        return c < (uint8_t) word[i] ? -1 : 1;
        }
        if (i < name.len)
                return 1;
        return word[i] ? -1 : 0;
}

const RespCommandRow *resp_command_lookup(ProtoSlice name) {
        size_t lo = 0, hi = sizeof by_name;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                const RespCommandRow *row = &command_table[by_name[mid]];
                int r = compare_name(name, row->name);

                if (r == 0)
                        return row;
                if (r < 0)
                        hi = mid;
                else
                        lo = mid + 1;
        }
        return NULL;
}

const RespCommandRow *resp_command_row(RespCommand cmd) {
        if (cmd <= RESP_CMD_UNKNOWN || cmd >= _RESP_CMD_MAX)
                return NULL;
        return &command_table[cmd];
}

void resp_command_plan(const RespCommandRow *row, const ProtoSlice *argv, size_t argc, RespPlan *ret) {
        *ret = (RespPlan){ .room = RESP_ERROR_ROOM };
        if (!row) {
                ret->reply = RESP_REPLY_UNKNOWN;
                ret->arg = argv[0];
                return;
        }
        if (row->arity > 0 ? argc != (size_t) row->arity : argc < (size_t) -row->arity)
                return plan_arity(ret);
        if (row->handler)
                row->handler(argv, argc, ret);
}

RespCommand resp_command_from_name(ProtoSlice name) {
        const RespCommandRow *row = resp_command_lookup(name);

        return row ? row->cmd : RESP_CMD_UNKNOWN;
}

const char *resp_command_to_string(RespCommand cmd) {
        const RespCommandRow *row = resp_command_row(cmd);

        return row ? row->name : NULL;
}

ProtoVerb resp_command_verb(RespCommand cmd) {
        const RespCommandRow *row = resp_command_row(cmd);

        return row ? row->verb : _PROTO_VERB_INVALID;
}
