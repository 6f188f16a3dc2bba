/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * protocol.c: the divvy line protocol, version 1 (divvy 1.7 wire format).
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

#include "shared/limits.h"

#define PROTO_LINE_MAX  DIVVY_PROTO_LINE_MAX
#define PROTO_PAIRS_MAX DIVVY_PROTO_PAIRS_MAX
#define PROTO_REPLY_MAX 128 /* bytes: longest reply line we ever format, "\n" included */

typedef struct ProtoSlice {
        const char *ptr; /* not NUL-terminated */
        size_t len;
} ProtoSlice;

typedef struct ProtoPair {
        ProtoSlice key;   /* without quotes */
        ProtoSlice value; /* without quotes; may be empty */
} ProtoPair;

typedef enum ProtoCommand {
        PROTO_COMMAND_HIT,
        _PROTO_COMMAND_MAX,
        _PROTO_COMMAND_INVALID = -EINVAL,
} ProtoCommand;

/* The error codes of the wire protocol ("ERR <code> ..."). */
typedef enum ProtoErrorCode {
        PROTO_ERROR_UNKNOWN_COMMAND, /* "unknown-command" */
        PROTO_ERROR_UNKNOWN,         /* "unknown" */
        _PROTO_ERROR_MAX,
        _PROTO_ERROR_INVALID = -EINVAL,
} ProtoErrorCode;

typedef struct ProtoRequest {
        ProtoCommand command;
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

/* Parses one request line (as returned by proto_next_line()) into *ret.
 * Pair slices point into line. Duplicate keys: the last value wins, in the
 * position of the first occurrence. Returns 0, or -EBADMSG with
 * ret->error_code/error_reason set (unknown command, malformed pairs, NUL or
 * invalid UTF-8, more than max_pairs pairs). max_pairs <= PROTO_PAIRS_MAX
 * (larger values are clamped). An empty or blank line, or any command word other
 * than "HIT" in any case, is PROTO_ERROR_UNKNOWN_COMMAND; everything else that
 * fails is PROTO_ERROR_UNKNOWN. On failure n_pairs is 0; on success error_reason
 * is NULL. Only space and tab separate; other control bytes (C0) are refused. */
int proto_parse_line(const char *line, size_t len, size_t max_pairs, ProtoRequest *ret);

/* The tokenizer shared by the request parser and the INI loader's section headers:
 * parses "key=value key2="quoted value" ..." (no command word) into pairs.
 * Same rules, limits and errors as proto_parse_line(), duplicates included;
 * ret->command is set to _PROTO_COMMAND_INVALID (there is none). */
int proto_parse_pairs(const char *text, size_t len, size_t max_pairs, ProtoRequest *ret);

/* Returns the pair's value for key (compared bytewise over key_len), or NULL if
 * absent or key_len is 0 (keys are never empty). The one lookup of a key in a
 * request: rules.c matches with it on every HIT. */
const ProtoSlice *proto_request_get(const ProtoRequest *req, const char *key, size_t key_len);

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
