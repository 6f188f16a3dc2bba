/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * resp.c: RESP, the Redis protocol (RESP2; RESP3 replies after HELLO 3), as a second way to ask
 * divvyd (issue #17).
 *
 * Pure code: no I/O, no allocation. The parser takes a request (an array of bulk strings,
 * "*N\r\n$len\r\n...\r\n", as redis-cli and every client library send) from a connection's
 * input buffer as slices into it (nothing is copied); the command table names what the first
 * argument asks for; resp_to_request() turns divvyd's own commands (HIT, TAKE, ...) with their
 * key/value arguments into the ProtoRequest the line protocol's parser would have produced, so
 * that both protocols are matched, counted and decided by the same code; the formatters write
 * RESP replies into caller-supplied buffers.
 *
 * Inline commands (a request that is a plain line) are not RESP here: on a connection whose
 * first byte is not '*' the daemon speaks the divvy line protocol.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/protocol.h"

#define RESP_ARGS_MAX                                                                                       \
        (2 * PROTO_PAIRS_MAX + 8)    /* arguments per request: a verb, its count and timestamp and          \
                                      * PROTO_PAIRS_MAX key/value pairs, or RL.REDUCE's options */
#define RESP_BULK_MAX PROTO_LINE_MAX /* bytes of one argument: nothing a line could not hold */
#define RESP_REQUEST_MAX                                                                                    \
        (PROTO_LINE_MAX + 16u * RESP_ARGS_MAX) /* bytes of one whole request with its framing: a            \
                                                * maximal line's text plus 16 bytes of "$N\r\n..\r\n"       \
                                                * per argument; fits a connection's input buffer */
#define RESP_HEADER_MAX 24 /* bytes of a "*N\r\n" or "$N\r\n" header line we scan before refusing it */
#define RESP_NAME_SHOWN 64 /* bytes of an unknown command's name echoed in its error */

/* A parsed request: argv slices point into the input buffer. */
typedef struct RespRequest {
        size_t consumed; /* bytes of the request in the input */
        size_t argc;     /* 0: an empty array ("*0" or "*-1") or empty lines ("\r\n", which Redis
                          * skips between requests): answered nothing */
        ProtoSlice argv[RESP_ARGS_MAX];
        const char *error; /* after a failure: a static sentence */
} RespRequest;

/* Parses the first request in buf[0..len).
 * Returns 1 and sets ret->argc/argv and ret->consumed (its bytes) for a complete request; 0 when
 * more input is needed (everything seen so far is well-formed and within the limits); or, with
 * ret->error set, -EBADMSG for malformed framing (a first byte other than '*', an element that is
 * not a bulk string, a nested array, a bad length, a missing "\r\n"), -E2BIG for more than
 * max_args elements (max_args <= RESP_ARGS_MAX) and -EMSGSIZE for a bulk longer than
 * RESP_BULK_MAX or a request that would exceed max_bytes (checked against the declared lengths,
 * before their bytes arrive). Never reads beyond buf + len, nor beyond max_bytes + RESP_HEADER_MAX. An
 * error is final: the connection cannot be resynchronised. */
int resp_parse(const char *buf, size_t len, size_t max_args, size_t max_bytes, RespRequest *ret);

/* Parses again, without checking it, a request resp_parse() accepted (returned 1 for, with argc
 * >= 1) whose bytes start buf unchanged: a transaction's queued request at EXEC. Sets
 * ret->argc, argv and consumed as resp_parse() did. */
void resp_parse_again(const char *buf, RespRequest *ret);

/* What the first argument of a request asks for (case-insensitive). */
typedef enum RespCommand {
        RESP_CMD_UNKNOWN,
        /* divvyd's own, as in the line protocol */
        RESP_CMD_HIT,
        RESP_CMD_TAKE,
        RESP_CMD_PEEK,
        RESP_CMD_CHARGE,
        RESP_CMD_REFUND,
        RESP_CMD_RESET,
        RESP_CMD_EXPLAIN,
        /* what client libraries send on connecting and in health checks */
        RESP_CMD_PING,
        RESP_CMD_ECHO,
        RESP_CMD_QUIT,
        RESP_CMD_HELLO,
        RESP_CMD_CLIENT,
        RESP_CMD_COMMAND,
        RESP_CMD_SELECT,
        RESP_CMD_AUTH,
        RESP_CMD_INFO,  /* INFO [section ...]: Redis's text, divvyd's figures */
        RESP_CMD_MULTI, /* MULTI, EXEC, DISCARD, WATCH: transactions, by the front-end */
        RESP_CMD_EXEC,
        RESP_CMD_DISCARD,
        RESP_CMD_WATCH,
        /* redis-cell and Smyte's ratelimit (--allow-client-limits) */
        RESP_CMD_CL_THROTTLE,
        RESP_CMD_RL_REDUCE,
        RESP_CMD_RL_GET,
        RESP_CMD_RL_PREDUCE,
        RESP_CMD_RL_PGET,
        RESP_CMD_DEL,  /* DEL key: deletes a CL.THROTTLE cell, as redis-cell's users do */
        RESP_CMD_GCRA, /* Redis 8.8's GCRA (--allow-client-limits) */
        _RESP_CMD_MAX,
} RespCommand;

/* By RESP's command table (resp-commands.c). */
RespCommand resp_command_from_name(ProtoSlice name);
/* "HIT", "CL.THROTTLE", ... (upper case); NULL for RESP_CMD_UNKNOWN. */
const char *resp_command_to_string(RespCommand cmd);
/* The line protocol's verb of one of divvyd's own commands, or _PROTO_VERB_INVALID. */
ProtoVerb resp_command_verb(RespCommand cmd);

/* Turns argv[0..argc) of one of divvyd's own commands (argv[0] is its name) into *ret, as
 * proto_parse_request() would parse the equivalent line, with the same limits, error codes and
 * reasons:
 *
 *   HIT k v [k v ...]          TAKE n [@time] k v ...      PEEK [n] [@time] k v ...
 *   CHARGE n [@time] k v ...   REFUND n k v ...            RESET k v ...   EXPLAIN k v ...
 *
 * Each key and value is its own argument, so a value may hold blanks, '=' and '"' (what a line
 * would quote); keys may not be empty or hold blanks, '=' or '"'; neither may hold control bytes
 * other than tab or invalid UTF-8. With PEEK the count is there when the arguments after the
 * verb are odd in number; a timestamp is there when, after the count, they still are. The
 * slices of ret point into argv's. Returns 0, or -EBADMSG with ret->error_code/error_reason. */
int resp_to_request(ProtoVerb verb, const ProtoSlice *argv, size_t argc, ProtoRequest *ret);

/* True if s equals the NUL-terminated word, ignoring ASCII case. */
bool resp_slice_eq(ProtoSlice s, const char *word);

/* Parses s as a decimal integer (optional '-', no blanks, no leading '+'), as Redis's
 * string2ll() does. Returns 0 or -EINVAL (-ERANGE beyond int64). */
int resp_parse_int(ProtoSlice s, int64_t *ret);

/* ---- formatters ----------------------------------------------------------------------------
 * Each writes into buf (the caller makes room: the bound is given with each) and returns the
 * length written. No NUL is written. */

#define RESP_INT_MAX_LEN 23 /* ":-9223372036854775808\r\n" */

/* "+<s>\r\n"; s: NUL-terminated, CR and LF written as ' '. At most strlen(s) + 3 bytes. */
size_t resp_format_simple(char *buf, const char *s);
/* "-<prefix> <reason>\r\n" (prefix "ERR", "NOPROTO", ...); reason: NUL-terminated or NULL,
 * control bytes written as '?', cut at RESP_ERROR_REASON_MAX. At most RESP_ERROR_MAX bytes. */
#define RESP_ERROR_REASON_MAX 400
#define RESP_ERROR_MAX        (RESP_ERROR_REASON_MAX + 32)
size_t resp_format_error(char *buf, const char *prefix, const char *reason);
/* "-<text>\r\n": an error whose text carries its own prefix ("ERR ...", "Cell error: ..."); as
 * resp_format_error() otherwise. At most RESP_ERROR_MAX bytes. */
size_t resp_format_error_text(char *buf, const char *text);
/* "-ERR <code> <reason>\r\n": a divvy error, its code as the line protocol names it. */
size_t resp_format_proto_error(char *buf, ProtoErrorCode code, const char *reason);
/* "-ERR unknown command '<name>'\r\n", name cut at RESP_NAME_SHOWN bytes, control bytes and
 * '\'' as '?'. At most RESP_ERROR_MAX bytes. */
size_t resp_format_unknown_command(char *buf, ProtoSlice name);
/* ":<v>\r\n": at most RESP_INT_MAX_LEN bytes. */
size_t resp_format_integer(char *buf, int64_t v);
/* "$<len>\r\n<bytes>\r\n": at most len + 16 bytes. */
size_t resp_format_bulk(char *buf, const char *p, size_t len);
#define RESP_BULK_OVERHEAD 16
/* "$-1\r\n" (5 bytes). */
size_t resp_format_null(char *buf);
/* "*<n>\r\n": at most RESP_INT_MAX_LEN bytes. */
size_t resp_format_array(char *buf, uint64_t n);
/* RESP3 (after HELLO 3): "%<n>\r\n", a map of n pairs (2n elements follow), at most
 * RESP_INT_MAX_LEN bytes; "_\r\n", the null (3 bytes). */
size_t resp_format_map(char *buf, uint64_t n);
size_t resp_format_null3(char *buf);

/* The longest reply of divvyd's own commands but EXPLAIN: an array of 6 integers and a
 * rule label (PROTO_LABEL_MAX bytes, or "#<index>"); in RESP3 a map, its keys 68 bytes more. */
#define RESP_REPLY_DECISION_MAX (RESP_INT_MAX_LEN * 7 + PROTO_LABEL_MAX + RESP_BULK_OVERHEAD + 80)
/* EXPLAIN's longest reply in RESP3 (a map: the actor's bytes, at most RESP_BULK_MAX, and two
 * lists of rules; in RESP2 it is PROTO_REPLY_EXPLAIN_MAX + RESP_BULK_OVERHEAD). */
#define RESP_REPLY_EXPLAIN3_MAX                                                                             \
        (4 + 7 * 16 + PROTO_LABEL_MAX + RESP_BULK_OVERHEAD + RESP_INT_MAX_LEN +                             \
         2 * (PROTO_NAME_MAX + RESP_BULK_OVERHEAD) + RESP_BULK_MAX + RESP_BULK_OVERHEAD +                   \
         2 * (RESP_INT_MAX_LEN + PROTO_RULE_LIST_MAX))

/* The replies of divvyd's own commands, in the connection's version: RESP2 (resp3 false) has
 * arrays of integers, as on a line but in order without names; RESP3 (after HELLO 3) answers
 * the same fields as a map named as the line names them, "allowed" a boolean (#t, #f).
 *
 * HIT: "*3" allowed 0|1, credit, reset (-1: never); RESP3: %3 allowed, credit, reset. At most
 * RESP_REPLY_HIT_MAX bytes. */
#define RESP_REPLY_HIT_MAX (44 + 3 * RESP_INT_MAX_LEN) /* "%3", its keys and a boolean: 44 bytes */
size_t resp_format_hit(char *buf, bool resp3, bool allowed, uint64_t credit, int64_t reset);
/* A decision (TAKE, PEEK, CHARGE, REFUND): "*6" allowed 0|1, credit, limit, reset, retry, and
 * the binding rule's label as a bulk string ("#<index>" when it has none); RESP3: %6 allowed,
 * credit, limit, reset, retry, rule. At most RESP_REPLY_DECISION_MAX bytes. */
size_t resp_format_decision(char *buf, bool resp3, const AlgoResult *res, const ProtoRuleRef *rule);
/* EXPLAIN: proto_format_explain_fields() as one bulk string (at most PROTO_REPLY_EXPLAIN_MAX +
 * RESP_BULK_OVERHEAD bytes); RESP3: %7 rule (its label or "#<index>"), index, policy, actor (its
 * bytes, or null without an actorField), algorithm, canaries and continue (arrays of rules, cut
 * as the line cuts them, "..." last) (at most RESP_REPLY_EXPLAIN3_MAX bytes). */
size_t resp_format_explain(char *buf, bool resp3, const ProtoExplain *e);
