/* SPDX-License-Identifier: MIT */
/*
 * The divvy line protocol: framing, request parsing and reply formatting.
 *
 * Everything here is a single forward pass over caller-owned memory: no
 * allocation, no copies of keys or values, no I/O. Grammar (divvy 1.7):
 *
 *   line   = blank* command ( blank+ pair )* blank*
 *   pair   = string "=" [ string ]          (a key may not be empty)
 *   string = unquoted | quoted
 *   unquoted = 1*( any byte but blank, '"', '=', control )
 *   quoted   = '"' *( any byte but '"', control other than tab ) '"'
 *   blank  = " " | "\t"
 *
 * Every non-ASCII byte must belong to a well-formed UTF-8 sequence.
 */

#include "protocol.h"

#include "shared/utf8.h"

#include <string.h>

static const char *const proto_error_code_table[_PROTO_ERROR_MAX] = {
        [PROTO_ERROR_UNKNOWN_COMMAND] = "unknown-command",
        [PROTO_ERROR_UNKNOWN] = "unknown",
};

const char *proto_error_code_to_string(ProtoErrorCode code) {
        if (code < 0 || code >= _PROTO_ERROR_MAX)
                return NULL;
        return proto_error_code_table[code];
}

int proto_next_line(const char *buf, size_t len, size_t line_max, ProtoSlice *ret_line,
                    size_t *ret_consumed) {
        const char *nl = NULL;
        size_t scan, n;

        /* The longest acceptable line is line_max bytes plus "\r\n": never look further, so a
         * huge line is refused after line_max + 2 bytes, not after a scan of all of it. */
        scan = line_max < SIZE_MAX - 2 ? line_max + 2 : SIZE_MAX;
        if (scan > len)
                scan = len;
        if (scan > 0)
                nl = memchr(buf, '\n', scan);

        if (!nl) {
                /* No end yet. More than line_max bytes is too long already, unless the last one
                 * is a "\r" that the next byte may turn into the line's "\r\n". */
                if (len > line_max && (len - line_max > 1 || buf[line_max] != '\r'))
                        return -EMSGSIZE;
                return 0;
        }

        n = (size_t) (nl - buf);
        if (n > 0 && buf[n - 1] == '\r')
                n--;
        if (n > line_max)
                return -EMSGSIZE;

        *ret_line = (ProtoSlice){ .ptr = buf, .len = n };
        *ret_consumed = (size_t) (nl - buf) + 1;
        return 1;
}

/* Reasons: short static strings, never anything from the client. */
#define REASON_EMPTY          "empty request line"
#define REASON_COMMAND        "unknown command"
#define REASON_UNTERMINATED   "unterminated quoted string"
#define REASON_MISSING_EQUALS "expected '=' after key"
#define REASON_EMPTY_KEY      "empty key"
#define REASON_QUOTE          "double quote inside an unquoted string"
#define REASON_VALUE_EQUALS   "'=' inside an unquoted value"
#define REASON_SEPARATOR      "expected whitespace between pairs"
#define REASON_TOO_MANY       "too many key=value pairs"
#define REASON_NUL            "NUL byte in request"
#define REASON_CONTROL        "control character in request (only space and tab are allowed)"
#define REASON_UTF8           "invalid UTF-8 in request"

static inline bool is_blank(uint8_t c) {
        return c == ' ' || c == '\t';
}

/* Checks one byte that is neither a delimiter nor plain printable ASCII. Returns its length
 * (1 for tab, the sequence length for UTF-8) or 0 and sets *reason. */
static size_t check_special(const uint8_t *p, const uint8_t *end, const char **reason) {
        size_t n;

        if (*p >= 0x80) {
                n = utf8_sequence_len(p, end);
                if (n == 0)
                        *reason = REASON_UTF8;
                return n;
        }
        if (*p == '\t')
                return 1;
        *reason = *p == 0 ? REASON_NUL : REASON_CONTROL;
        return 0;
}

/* Plain bytes: printable ASCII and DEL, minus the delimiters. */
static inline bool is_plain(uint8_t c) {
        return c > ' ' && c < 0x80 && c != '"' && c != '=';
}

/* Reads one quoted or unquoted string at *pp. On success stores its slice (without quotes),
 * moves *pp past it and returns NULL; otherwise returns the reason. An unquoted string ends
 * before a blank, '=' or the end; it may be empty (the caller decides whether that is fine). */
static const char *read_string(const uint8_t **pp, const uint8_t *end, ProtoSlice *ret) {
        const uint8_t *p = *pp, *start;
        const char *reason = NULL;
        size_t n;

        if (p < end && *p == '"') {
                start = ++p;
                for (;;) {
                        if (p >= end)
                                return REASON_UNTERMINATED;
                        if (*p == '"')
                                break;
                        if (*p >= ' ' && *p < 0x80) {
                                p++;
                                continue;
                        }
                        n = check_special(p, end, &reason); /* a tab is fine inside quotes */
                        if (n == 0)
                                return reason;
                        p += n;
                }
                *ret = (ProtoSlice){ .ptr = (const char *) start, .len = (size_t) (p - start) };
                *pp = p + 1;
                return NULL;
        }

        start = p;
        while (p < end) {
                if (is_plain(*p)) {
                        p++;
                        continue;
                }
                if (is_blank(*p) || *p == '=')
                        break;
                if (*p == '"')
                        return REASON_QUOTE;
                n = check_special(p, end, &reason);
                if (n == 0)
                        return reason;
                p += n;
        }
        *ret = (ProtoSlice){ .ptr = (const char *) start, .len = (size_t) (p - start) };
        *pp = p;
        return NULL;
}

static int request_fail(ProtoRequest *req, ProtoErrorCode code, const char *reason) {
        req->n_pairs = 0;
        req->error_code = code;
        req->error_reason = reason;
        return -EBADMSG;
}

/* Stores a pair; a repeated key keeps its first position and takes the new value. */
static bool request_add(ProtoRequest *req, size_t max_pairs, ProtoSlice key, ProtoSlice value) {
        for (size_t i = 0; i < req->n_pairs; i++) {
                ProtoPair *pair = &req->pairs[i];
                if (pair->key.len == key.len && memcmp(pair->key.ptr, key.ptr, key.len) == 0) {
                        pair->value = value;
                        return true;
                }
        }
        if (req->n_pairs >= max_pairs)
                return false;
        req->pairs[req->n_pairs++] = (ProtoPair){ .key = key, .value = value };
        return true;
}

/* Parses pairs in [p, end) into req, which the caller has reset. */
static int parse_pairs(const uint8_t *p, const uint8_t *end, size_t max_pairs, ProtoRequest *req) {
        ProtoSlice key, value;
        const char *reason;
        bool quoted;

        if (max_pairs > PROTO_PAIRS_MAX)
                max_pairs = PROTO_PAIRS_MAX;

        for (;;) {
                while (p < end && is_blank(*p))
                        p++;
                if (p >= end)
                        return 0;

                reason = read_string(&p, end, &key);
                if (reason)
                        return request_fail(req, PROTO_ERROR_UNKNOWN, reason);
                if (p >= end || *p != '=')
                        return request_fail(req, PROTO_ERROR_UNKNOWN,
                                            key.len == 0 ? REASON_EMPTY_KEY : REASON_MISSING_EQUALS);
                if (key.len == 0)
                        return request_fail(req, PROTO_ERROR_UNKNOWN, REASON_EMPTY_KEY);
                p++;

                quoted = p < end && *p == '"';
                reason = read_string(&p, end, &value);
                if (reason)
                        return request_fail(req, PROTO_ERROR_UNKNOWN, reason);
                if (p < end && !is_blank(*p))
                        return request_fail(req, PROTO_ERROR_UNKNOWN,
                                            quoted ? REASON_SEPARATOR : REASON_VALUE_EQUALS);

                if (!request_add(req, max_pairs, key, value))
                        return request_fail(req, PROTO_ERROR_UNKNOWN, REASON_TOO_MANY);
        }
}

static void request_reset(ProtoRequest *req, ProtoCommand command) {
        req->command = command;
        req->n_pairs = 0;
        req->error_code = _PROTO_ERROR_INVALID;
        req->error_reason = NULL;
}

int proto_parse_pairs(const char *text, size_t len, size_t max_pairs, ProtoRequest *ret) {
        const uint8_t *p = (const uint8_t *) text;

        request_reset(ret, _PROTO_COMMAND_INVALID);
        if (len == 0)
                return 0; /* text may be NULL then, and NULL + 0 is undefined */
        return parse_pairs(p, p + len, max_pairs, ret);
}

int proto_parse_line(const char *line, size_t len, size_t max_pairs, ProtoRequest *ret) {
        const uint8_t *p = (const uint8_t *) line, *end, *word;

        request_reset(ret, _PROTO_COMMAND_INVALID);
        if (len == 0)
                return request_fail(ret, PROTO_ERROR_UNKNOWN_COMMAND, REASON_EMPTY);

        end = p + len;
        while (p < end && is_blank(*p))
                p++;
        if (p >= end)
                return request_fail(ret, PROTO_ERROR_UNKNOWN_COMMAND, REASON_EMPTY);

        /* The command word runs to the first blank; "HIT" is the only one, in any case. */
        word = p;
        while (p < end && !is_blank(*p))
                p++;
        if (p - word != 3 || (word[0] | 0x20) != 'h' || (word[1] | 0x20) != 'i' || (word[2] | 0x20) != 't')
                return request_fail(ret, PROTO_ERROR_UNKNOWN_COMMAND, REASON_COMMAND);

        ret->command = PROTO_COMMAND_HIT;
        return parse_pairs(p, end, max_pairs, ret);
}

const ProtoSlice *proto_request_get(const ProtoRequest *req, const char *key, size_t key_len) {
        if (key_len == 0)
                return NULL; /* keys are never empty */
        for (size_t i = 0; i < req->n_pairs; i++) {
                const ProtoPair *pair = &req->pairs[i];
                if (pair->key.len == key_len && memcmp(pair->key.ptr, key, key_len) == 0)
                        return &pair->value;
        }
        return NULL;
}

static char *append_str(char *p, const char *s) {
        size_t n = strlen(s);
        memcpy(p, s, n);
        return p + n;
}

static char *append_u64(char *p, uint64_t v) {
        char digits[20]; /* UINT64_MAX has 20 decimal digits */
        size_t n = 0;

        do {
                digits[n++] = (char) ('0' + v % 10);
                v /= 10;
        } while (v > 0);
        while (n > 0)
                *p++ = digits[--n];
        return p;
}

size_t proto_format_ok(char *buf, bool allowed, uint64_t credit, int64_t reset) {
        char *p = buf;

        /* At most 9 + 20 + 1 + 20 + 1 bytes and the NUL: always well within PROTO_REPLY_MAX. */
        p = append_str(p, allowed ? "OK true " : "OK false ");
        p = append_u64(p, credit);
        *p++ = ' ';
        if (reset < 0) {
                *p++ = '-';
                p = append_u64(p, UINT64_C(0) - (uint64_t) reset); /* modular: right for INT64_MIN too */
        } else
                p = append_u64(p, (uint64_t) reset);
        *p++ = '\n';
        *p = '\0';
        return (size_t) (p - buf);
}

size_t proto_format_error(char *buf, ProtoErrorCode code, const char *reason) {
        const char *code_str = proto_error_code_to_string(code);
        char *p = buf;

        p = append_str(p, "ERR ");
        p = append_str(p, code_str ? code_str : proto_error_code_table[PROTO_ERROR_UNKNOWN]);

        if (reason) {
                const uint8_t *r = (const uint8_t *) reason, *r_end = r + strlen(reason);
                /* Room for the reason: everything but the closing "\"\n" and the NUL. */
                const char *limit = buf + PROTO_REPLY_MAX - 3;

                *p++ = ' ';
                *p++ = '"';
                while (r < r_end && p < limit) {
                        size_t n = *r >= 0x80 ? utf8_sequence_len(r, r_end) : 1;

                        if (n > 1) {
                                if ((size_t) (limit - p) < n)
                                        break; /* truncate before, not inside, a character */
                                memcpy(p, r, n);
                                p += n;
                                r += n;
                                continue;
                        }
                        /* Invalid UTF-8, controls and quotes would break the reply line. */
                        *p++ = n == 0 || *r < ' ' || *r == 0x7F || *r == '"' ? '?' : (char) *r;
                        r++;
                }
                *p++ = '"';
        }
        *p++ = '\n';
        *p = '\0';
        return (size_t) (p - buf);
}
