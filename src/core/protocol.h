/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * protocol.c: the divvy line protocol: version 1 (divvy 1.7's HIT, byte for byte) and
 * version 2 (the verbs HELLO, TAKE, PEEK, CHARGE, REFUND, RESET, EXPLAIN).
 *
 * Pure code: no I/O, no allocation. The framer finds complete lines in a
 * connection's input buffer; the parser splits one line into a command and
 * key=value pairs whose slices point into that line (nothing is copied);
 * the formatters write reply lines into caller-supplied buffers.
 */

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/algorithm.h"
#include "shared/limits.h"

#define PROTO_LINE_MAX  DIVVY_PROTO_LINE_MAX
#define PROTO_PAIRS_MAX DIVVY_PROTO_PAIRS_MAX
#define PROTO_REPLY_MAX 128 /* bytes: longest HIT or ERR reply line we format, "\n" and NUL included */
#define PROTO_REPLY_V2_MAX                                                                                  \
        512 /* bytes: longest TAKE/PEEK/CHARGE/REFUND, HELLO or RESET reply, "\n" and NUL included:         \
             * five 20-digit numbers and a 255-byte label need 410 */
#define PROTO_REPLY_EXPLAIN_MAX                                                                             \
        DIVVY_PROTO_REPLY_MAX /* bytes: longest EXPLAIN reply, "\n" and NUL included; the longest           \
                               * reply of any verb */
#define PROTO_COUNT_MAX      DIVVY_PROTO_COUNT_MAX
#define PROTO_LABEL_MAX      255 /* bytes of a rule label written into a reply (rules.h: RULE_LABEL_MAX) */
#define PROTO_VERSION_MAX    64  /* bytes of the server version written into the HELLO reply */
#define PROTO_NAME_MAX       32  /* bytes of a policy or algorithm name written into the EXPLAIN reply */
#define PROTO_ACTOR_TEXT_MAX 512 /* bytes: an EXPLAIN actor, escaped, is cut to this (marker included) */
#define PROTO_RULE_LIST_MAX                                                                                 \
        1536 /* bytes: EXPLAIN's canaries= and continue= lists are each cut to this (marker                 \
              * included): 5 full-length labels, or hundreds of short ones */

typedef struct ProtoSlice {
        const char *ptr; /* not NUL-terminated */
        size_t len;
} ProtoSlice;

typedef struct ProtoPair {
        ProtoSlice key;   /* without quotes */
        ProtoSlice value; /* without quotes; may be empty */
} ProtoPair;

/* The command words. HIT is version 1 (divvy's); the others are version 2, spoken by a client
 * after HELLO. The values index proto_verb_to_string(). */
typedef enum ProtoVerb {
        PROTO_VERB_HIT,
        PROTO_VERB_HELLO,
        PROTO_VERB_TAKE,
        PROTO_VERB_PEEK,
        PROTO_VERB_CHARGE,
        PROTO_VERB_REFUND,
        PROTO_VERB_RESET,
        PROTO_VERB_EXPLAIN,
        _PROTO_VERB_MAX,
        _PROTO_VERB_INVALID = -EINVAL,
} ProtoVerb;

/* The version 1 names, kept for the code that only knows HIT. */
typedef ProtoVerb ProtoCommand;
#define PROTO_COMMAND_HIT      PROTO_VERB_HIT
#define _PROTO_COMMAND_INVALID _PROTO_VERB_INVALID

/* The error codes of the wire protocol ("ERR <code> ..."). HIT only ever gets the first two
 * (divvy's clients know no others); the rest answer version 2 verbs only. */
typedef enum ProtoErrorCode {
        PROTO_ERROR_UNKNOWN_COMMAND, /* "unknown-command" */
        PROTO_ERROR_UNKNOWN,         /* "unknown" */
        PROTO_ERROR_BAD_COUNT,       /* "bad-count": a missing, malformed or out-of-range count */
        PROTO_ERROR_FORBIDDEN,       /* "forbidden": REFUND/RESET off an admin listener (the daemon's) */
        PROTO_ERROR_BAD_TIME, /* "bad-time": a malformed client timestamp, or one the daemon refuses */
        _PROTO_ERROR_MAX,
        _PROTO_ERROR_INVALID = -EINVAL,
} ProtoErrorCode;

typedef struct ProtoRequest {
        union {
                ProtoVerb verb;
                ProtoCommand command; /* the version 1 name of the same field */
        };
        /* The count after the verb. TAKE, CHARGE, REFUND: always given, 1..PROTO_COUNT_MAX.
         * PEEK: 0..PROTO_COUNT_MAX, 1 when absent (has_count false). Other verbs: 0, absent. */
        uint64_t count;
        bool has_count;
        /* TAKE, PEEK, CHARGE: the client's timestamp "@<seconds>[.<fraction>]" after the count
         * (Smyte's replay of past events), in wall-clock microseconds; whether the daemon
         * accepts it is its business (--client-time-max-age). */
        uint64_t at_usec;
        bool has_at;
        size_t n_pairs; /* distinct keys, in order of first appearance */
        ProtoPair pairs[PROTO_PAIRS_MAX];
        /* Set when proto_parse_line() or proto_parse_pairs() fails: */
        ProtoErrorCode error_code;
        const char *error_reason; /* static string, never NULL after a failure */
} ProtoRequest;

/* Finds the first complete line in buf[0..len).
 * Returns 1 and sets *ret_line (without "\n" and a trailing "\r") and *ret_consumed
 * (bytes up to and including the "\n"); returns 0 when no "\n" has arrived yet and
 * the partial line is still within line_max; returns -EMSGSIZE when the line is
 * longer than line_max bytes (with or without its "\n").
 * line_max counts the line without its "\n" and trailing "\r"; at most line_max + 2
 * bytes of buf are ever scanned, so a huge line fails as soon as line_max + 1 bytes of it
 * have arrived (line_max + 2 if the last of them is a "\r"). A "\r" elsewhere stays in
 * the line (the parser refuses it as a control character). */
int proto_next_line(const char *buf, size_t len, size_t line_max, ProtoSlice *ret_line,
                    size_t *ret_consumed);

/* Parses one request line of version 1 or 2 (as returned by proto_next_line()) into *ret:
 *
 *   line  = verb [ blank+ count ] [ blank+ "@" time ] ( blank+ pair )* blank*
 *   count = "0" | [1-9][0-9]*      (no sign, no leading zero; at most PROTO_COUNT_MAX)
 *   time  = [0-9]{1,11} [ "." [0-9]{1,6} ]   (Unix seconds, to the microsecond; TAKE, PEEK and
 *                                             CHARGE only, else or malformed: PROTO_ERROR_BAD_TIME)
 *
 * The verb is one of ProtoVerb's words, in any case, and must start the line (divvy answers a
 * line that starts with a blank with "unknown-command", and so do we). HIT is parsed exactly as
 * proto_parse_line() does (it never takes a count). For the other verbs, the first token after
 * the verb that holds neither '=' nor '"' is the count: TAKE, CHARGE and REFUND need one >= 1,
 * PEEK may have one >= 0 (default 1), HELLO, RESET and EXPLAIN have none (there a number is
 * an unexpected count, any other word a pair without its '='). A bad, missing or unexpected
 * count is PROTO_ERROR_BAD_COUNT; everything else fails as in proto_parse_line().
 * The daemon calls this one once it answers version 2. */
int proto_parse_request(const char *line, size_t len, size_t max_pairs, ProtoRequest *ret);

/* Parses one version 1 request line (as returned by proto_next_line()) into *ret.
 * Pair slices point into line. Duplicate keys: the last value wins, in the
 * position of the first occurrence. Returns 0, or -EBADMSG with
 * ret->error_code/error_reason set (unknown command, malformed pairs, NUL or
 * invalid UTF-8, more than max_pairs pairs). max_pairs <= PROTO_PAIRS_MAX
 * (larger values are clamped). An empty or blank line, or any command word other
 * than "HIT" in any case, is PROTO_ERROR_UNKNOWN_COMMAND; everything else that
 * fails is PROTO_ERROR_UNKNOWN. On failure n_pairs is 0; on success error_reason
 * is NULL. Only space and tab separate; other control bytes (C0) are refused. A blank before
 * the command word is PROTO_ERROR_UNKNOWN_COMMAND (as in divvy). The version 2 verbs are
 * unknown commands here: a daemon that calls this answers HIT only. */
int proto_parse_line(const char *line, size_t len, size_t max_pairs, ProtoRequest *ret);

/* The tokenizer shared by the request parser and the INI loader's section headers:
 * parses "key=value key2="quoted value" ..." (no command word) into pairs.
 * Same rules, limits and errors as proto_parse_line(), duplicates included;
 * ret->verb is set to _PROTO_VERB_INVALID (there is none). */
int proto_parse_pairs(const char *text, size_t len, size_t max_pairs, ProtoRequest *ret);

/* Returns the pair's value for key (compared bytewise over key_len), or NULL if
 * absent or key_len is 0 (keys are never empty). The one lookup of a key in a
 * request: rules.c matches with it on every request. */
const ProtoSlice *proto_request_get(const ProtoRequest *req, const char *key, size_t key_len);

/* Why no request could carry s (NUL-terminated) as a key or value, quoted on the wire if it has
 * blanks or '=', as proto_parse_pairs() would refuse it: "contains '\"', which a request cannot
 * carry", a control character other than tab, invalid UTF-8; NULL if one can. The loaders
 * refuse such a rule: it could never match. */
const char *proto_text_unsendable(const char *s);

/* Formats "OK true|false <credit> <reset>\n" into buf (at least PROTO_REPLY_MAX bytes);
 * returns the length written. reset may be -1 (divvy's answer for always-deny).
 * Both formatters also NUL-terminate buf (not counted in the returned length, which
 * is therefore at most PROTO_REPLY_MAX - 1). */
size_t proto_format_ok(char *buf, bool allowed, uint64_t credit, int64_t reset);

/* Formats "ERR <code> \"<reason>\"\n"; reason is truncated to fit PROTO_REPLY_MAX and any
 * '"' or control byte in it is replaced by '?'. Returns the length written.
 * Invalid UTF-8 bytes become '?' too, truncation never splits a character; a NULL
 * reason gives "ERR <code>\n"; an invalid code is written as "unknown". */
size_t proto_format_error(char *buf, ProtoErrorCode code, const char *reason);

const char *proto_error_code_to_string(ProtoErrorCode code);

/* "HIT", "HELLO", ... or NULL for an invalid verb. */
const char *proto_verb_to_string(ProtoVerb verb);

/* ---- version 2 replies --------------------------------------------------------------------
 * Each is "OK" and key=value fields, one line. Every formatter writes at most its buffer size
 * (PROTO_REPLY_V2_MAX or PROTO_REPLY_EXPLAIN_MAX) including the "\n" and a NUL that is not
 * counted in the returned length, never allocates, and cuts or replaces what could break the
 * line. Clients must ignore fields they do not know: later versions may append some. */

/* A rule as replies name it: "label", or "#<index>" when it has none. label: NUL-terminated;
 * bytes other than [A-Za-z0-9_-] (never in a valid label) are written as '?', and it is cut
 * at PROTO_LABEL_MAX bytes. */
typedef struct ProtoRuleRef {
        const char *label; /* NULL or "": the rule has no label */
        uint64_t index;    /* the rule's 0-based position in the config */
} ProtoRuleRef;

/* The answer to TAKE, PEEK, CHARGE or REFUND: the algorithm's result (allowed, credit left,
 * limit, reset: s until full again when allowed or until this request would pass when denied,
 * retry: s, 0 allowed, >= 1 denied, -1 never) and the binding rule, as
 * "OK allowed=true credit=7 limit=10 reset=42 retry=0 rule=<label or #index>\n" into buf (at
 * least PROTO_REPLY_V2_MAX bytes). Returns the length written. */
size_t proto_format_decision(char *buf, const AlgoResult *res, const ProtoRuleRef *rule);

/* "OK proto=2 server=divvyd/<version> verbs=HIT,HELLO,TAKE,PEEK,CHARGE,REFUND,RESET,EXPLAIN\n"
 * into buf (at least PROTO_REPLY_V2_MAX bytes). version: NUL-terminated, cut at
 * PROTO_VERSION_MAX bytes, bytes outside [A-Za-z0-9._+~-] written as '?'. */
size_t proto_format_hello(char *buf, const char *version);

/* "OK reset=<n>\n" (counters deleted) into buf (at least PROTO_REPLY_V2_MAX bytes). */
size_t proto_format_reset(char *buf, uint64_t n);

/* What EXPLAIN reports: the rules a request matches. */
typedef struct ProtoExplain {
        ProtoRuleRef rule;            /* the final (stop) rule */
        const char *policy;           /* its policy: "stop" (other names are written as given) */
        ProtoSlice actor;             /* its actor for this request; ptr NULL: the rule has no actorField */
        const char *algorithm;        /* its algorithm: "fixed-window", ... */
        const ProtoRuleRef *canaries; /* matching canary rules, config order */
        size_t n_canaries;
        const ProtoRuleRef *continues; /* matching matchPolicy=continue rules, config order */
        size_t n_continues;
} ProtoExplain;

/* "OK rule=<ref> index=<n> policy=<name> actor=<actor> algorithm=<name> canaries=<list>
 * continue=<list>\n" into buf (at least PROTO_REPLY_EXPLAIN_MAX bytes).
 * - policy and algorithm: cut at PROTO_NAME_MAX bytes, bytes outside [A-Za-z0-9_-] as '?'.
 * - actor: "-" (unquoted) when the rule has no actorField; otherwise the actor in double
 *   quotes, escaped so that the line stays one parseable line: '\\' and '"' as \\ and \",
 *   tab as \t, every other byte below 0x20, 0x7F and each byte of invalid UTF-8 as \xHH
 *   (two lowercase hex digits); valid UTF-8 as is. An actor whose escaped form exceeds
 *   PROTO_ACTOR_TEXT_MAX bytes is cut (never inside an escape or a character) and ends with
 *   the marker \... (a backslash and three dots, an escape that means nothing else).
 * - lists: the refs joined by ',' (labels hold no ','), "-" when empty; a list longer than
 *   PROTO_RULE_LIST_MAX bytes ends with the element "..." after the last ref that fits. */
size_t proto_format_explain(char *buf, const ProtoExplain *e);
/* The same fields without "OK " and "\n" (NUL-terminated; RESP's EXPLAIN reply): at most
 * PROTO_REPLY_EXPLAIN_MAX - 4 bytes and the NUL. */
size_t proto_format_explain_fields(char *buf, const ProtoExplain *e);
