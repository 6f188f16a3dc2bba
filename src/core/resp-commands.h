/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * resp-commands.c: RESP's command table (issue #32). One row per command divvyd answers on a
 * RESP connection: { name, arity, flags, handler }, found by resp_command_lookup() (a binary
 * search of the names, case-insensitive). Pure: no I/O, no allocation, no connection.
 *
 * A row's handler decides, from the arguments alone, what a connection command (PING, ECHO,
 * HELLO, CLIENT, COMMAND, SELECT, AUTH, QUIT) will answer: a RespPlan, which the daemon's RESP
 * front-end formats once the batch completes (in request order). divvyd's own commands (HIT,
 * TAKE, ...: RESP_COMMAND_VERB) are parsed by resp_to_request() and decided by the engine;
 * CL.THROTTLE and RL.* (RESP_COMMAND_CLIENT_LIMIT) by client-limits.c and the engine when the
 * daemon allows them: their handler answers the refusal of a daemon that does not.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/protocol.h"
#include "core/resp.h"

/* Room for any RESP error reply: the reasons are static sentences and the store's (shorter than
 * PROTO_REPLY_MAX), an unknown command's name is cut at RESP_NAME_SHOWN. */
#define RESP_ERROR_ROOM      (PROTO_REPLY_MAX + 64)
#define RESP_CLIENT_NAME_MAX 128 /* bytes of a client's name (CLIENT SETNAME, HELLO SETNAME) */

/* How a request is answered. */
typedef enum RespReply {
        RESP_REPLY_NORMAL,      /* by its command */
        RESP_REPLY_FATAL,       /* "-ERR <reason>", then closed: the framing is broken */
        RESP_REPLY_ERROR,       /* "-ERR <reason>" */
        RESP_REPLY_PROTO_ERROR, /* "-ERR <code> <reason>": a divvy error, as on a line */
        RESP_REPLY_UNKNOWN,     /* "-ERR unknown command '<arg>'" */
        RESP_REPLY_ARITY,       /* "-ERR wrong number of arguments for '<command>' command" */
        RESP_REPLY_NOPROTO,     /* HELLO 3 */
        RESP_REPLY_TEXT_ERROR,  /* "-<reason>": CL.THROTTLE's and RL.*'s own words */
} RespReply;

/* What a connection command's reply says besides its command. */
typedef enum RespSub {
        RESP_SUB_NONE,
        RESP_SUB_SETNAME, /* HELLO or CLIENT SETNAME: arg is the name */
        RESP_SUB_GETNAME,
        RESP_SUB_OK, /* CLIENT SETINFO: +OK */
        RESP_SUB_ID,
        RESP_SUB_EMPTY, /* COMMAND: an empty array */
        RESP_SUB_DOCS,  /* COMMAND DOCS: an empty map (RESP2: an empty array), as Redis's shape */
        RESP_SUB_COUNT,
        RESP_SUB_INFO,   /* n: the names asked about */
        RESP_SUB_QUEUED, /* a request queued after MULTI: +QUEUED */
} RespSub;

/* A connection command's reply, decided when it is taken. */
typedef struct RespPlan {
        RespReply reply;
        RespSub sub;
        ProtoSlice arg;     /* PING's or ECHO's message, a name to set, an unknown command's name */
        uint64_t n;         /* COMMAND INFO: the names asked about */
        const char *reason; /* static: an error's reason */
        size_t room;        /* bytes the reply may take */
} RespPlan;

typedef enum RespCommandFlags {
        RESP_COMMAND_VERB = 1 << 0,         /* divvyd's own: resp_to_request(), then the engine */
        RESP_COMMAND_CLIENT_LIMIT = 1 << 1, /* CL.THROTTLE, RL.*: --allow-client-limits */
        RESP_COMMAND_CLOSE = 1 << 2,        /* the connection closes after the reply (QUIT) */
        RESP_COMMAND_TRANSACTION = 1 << 3,  /* MULTI, EXEC, DISCARD, WATCH: the front-end's state */
} RespCommandFlags;

/* Fills *plan (zeroed by the caller) for argv[0..argc), which passed the row's arity. */
typedef void (*RespCommandHandler)(const ProtoSlice *argv, size_t argc, RespPlan *plan);

typedef struct RespCommandRow {
        const char *name; /* upper case */
        int arity;        /* as Redis's: N > 0 exactly N arguments (the name included), -N at least N */
        unsigned flags;   /* RespCommandFlags */
        RespCommandHandler handler;
        RespCommand cmd;
        ProtoVerb verb; /* RESP_COMMAND_VERB: the line protocol's verb */
} RespCommandRow;

/* The row of the command named name (any case), or NULL. */
const RespCommandRow *resp_command_lookup(ProtoSlice name);
/* The row of cmd, or NULL for RESP_CMD_UNKNOWN. */
const RespCommandRow *resp_command_row(RespCommand cmd);

/* Decides the reply of a request whose command is not RESP_COMMAND_VERB (row NULL: unknown
 * command): the arity check, then the row's handler. */
void resp_command_plan(const RespCommandRow *row, const ProtoSlice *argv, size_t argc, RespPlan *ret);

/* INFO's sections, in the order of its reply; a plan's n is the set asked for. */
typedef enum RespInfoSection {
        RESP_INFO_SERVER = 1 << 0,
        RESP_INFO_CLIENTS = 1 << 1,
        RESP_INFO_MEMORY = 1 << 2,
        RESP_INFO_PERSISTENCE = 1 << 3,
        RESP_INFO_STATS = 1 << 4,
        RESP_INFO_KEYSPACE = 1 << 5,
        RESP_INFO_ALL = (1 << 6) - 1,
} RespInfoSection;
#define RESP_INFO_MAX 1024 /* bytes of INFO's text, every section */

/* True if name may be a client's name (Redis: no spaces, newlines or special characters, at
 * most RESP_CLIENT_NAME_MAX bytes). */
bool resp_client_name_ok(ProtoSlice name);
