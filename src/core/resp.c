/* SPDX-License-Identifier: MIT */
/*
 * RESP2 requests and replies (issue #17); see resp.h. A single forward pass over caller-owned
 * memory: no allocation, no copies, no I/O. Grammar of a request (RESP2's "multibulk"):
 *
 *   request = "*" n CRLF ( "$" len CRLF <len bytes> CRLF ){n}     n = -1 | 0 .. max_args
 *   n, len  = [0-9]{1,18}  ("-1" for n only: a null array, like "*0" answered nothing)
 *
 * Between requests, CR and LF bytes (an empty inline line to Redis) are skipped.
 */

#include "number.h"
#include "protocol-reasons.h"
#include "resp.h"

#include "shared/utf8.h"

#include <string.h>

#define CRLF "\r\n"

/* Sentences of the framing errors: static, never anything from the client. */
#define REASON_FIRST   "Protocol error: expected '*' (divvyd takes RESP arrays of bulk strings)"
#define REASON_NESTED  "Protocol error: nested arrays are not supported"
#define REASON_TYPE    "Protocol error: expected '$' (a bulk string)"
#define REASON_NUMBER  "Protocol error: invalid length"
#define REASON_CRLF    "Protocol error: expected CRLF after a bulk string"
#define REASON_ARGS    "Protocol error: too many arguments"
#define REASON_BULK    "Protocol error: bulk string longer than the line limit"
#define REASON_REQUEST "Protocol error: request longer than the line limit"

/* Reasons of resp_to_request() of its own (those it shares with the line protocol are in
 * protocol-reasons.h). */
#define REASON_EMPTY_KEY "empty key"
#define REASON_KEY_CHAR  "blank, '=' or '\"' in a key"
#define REASON_ODD       "odd number of key/value arguments"
#define REASON_TOO_MANY  "too many key=value pairs"
#define REASON_NUL       "NUL byte in request"
#define REASON_CONTROL   "control character in request (only space and tab are allowed)"
#define REASON_UTF8      "invalid UTF-8 in request"
_Static_assert(PROTO_COUNT_MAX == 9007199254740991ULL, "REASON_COUNT_BIG names PROTO_COUNT_MAX");
_Static_assert(RESP_REQUEST_MAX + RESP_HEADER_MAX <= PROTO_LINE_MAX + 2u + 16u * 1024u,
               "a request fits a connection's input buffer (connection.h: CONNECTION_IN_SIZE)");

static int parse_fail(RespRequest *ret, int r, const char *reason) {
        ret->argc = 0;
        ret->error = reason;
        return r;
}

/* Reads the header "<type>[-]<digits>\r\n" at p. Returns 1 with *ret_n and *ret_len (its bytes),
 * 0 if it is incomplete, -EBADMSG if malformed (a '-' is only accepted by the caller). */
static int read_header(const uint8_t *p, const uint8_t *end, int64_t *ret_n, size_t *ret_len) {
        const uint8_t *q = p + 1, *digits;
        bool negative = false;
        int64_t n = 0;

        if (q < end && *q == '-') {
                negative = true;
                q++;
        }
        digits = q;
        while (q < end && *q >= '0' && *q <= '9') {
                if (q - digits >= 18)
                        return -EBADMSG;
                n = n * 10 + (*q - '0');
                q++;
        }
        if (q >= end)
                return (size_t) (end - p) < RESP_HEADER_MAX ? 0 : -EBADMSG;
        if (q == digits || *q != '\r')
                return -EBADMSG;
        if (q + 1 >= end)
                return 0;
        if (q[1] != '\n')
                return -EBADMSG;
        if (negative && n == 0)
                return -EBADMSG; /* "-0": Redis refuses it too (and resp_parse_again() reads digits only) */
        *ret_n = negative ? -n : n;
        *ret_len = (size_t) (q + 2 - p);
        return 1;
}

int resp_parse(const char *buf, size_t len, size_t max_args, size_t max_bytes, RespRequest *ret) {
        const uint8_t *start = (const uint8_t *) buf, *end = start + len;
        size_t pos, hlen;
        int64_t n, blen;
        int r;

        ret->argc = 0;
        ret->error = NULL;
        if (max_args > RESP_ARGS_MAX)
                max_args = RESP_ARGS_MAX;
        if (len == 0)
                return 0;
        if (buf[0] == '\r' || buf[0] == '\n') {
                /* An empty line between requests, as Redis ignores it (redis-cli --pipe sends
                 * "\r\n" before its closing ECHO): consumed as a request of no arguments. */
                pos = 1;
                while (pos < len && pos < RESP_HEADER_MAX && (buf[pos] == '\r' || buf[pos] == '\n'))
                        pos++;
                ret->consumed = pos;
                return 1;
        }
        if (buf[0] != '*')
                return parse_fail(ret, -EBADMSG, REASON_FIRST);
        r = read_header(start, end, &n, &hlen);
        if (r <= 0)
                return r < 0 ? parse_fail(ret, r, REASON_NUMBER) : 0;
        if (n < -1)
                return parse_fail(ret, -EBADMSG, REASON_NUMBER);
        if (n > (int64_t) max_args)
                return parse_fail(ret, -E2BIG, REASON_ARGS);
        pos = hlen;
        for (int64_t i = 0; i < n; i++) {
                if (pos >= max_bytes)
                        return parse_fail(ret, -EMSGSIZE, REASON_REQUEST);
                if (pos >= len)
                        return 0;
                if (buf[pos] != '$')
                        return parse_fail(ret, -EBADMSG, buf[pos] == '*' ? REASON_NESTED : REASON_TYPE);
                r = read_header(start + pos, end, &blen, &hlen);
                if (r <= 0)
                        return r < 0 ? parse_fail(ret, r, REASON_NUMBER) : 0;
                if (blen < 0)
                        return parse_fail(ret, -EBADMSG, REASON_NUMBER);
                if (blen > RESP_BULK_MAX)
                        return parse_fail(ret, -EMSGSIZE, REASON_BULK);
                if (pos + hlen + (size_t) blen + 2 > max_bytes)
                        return parse_fail(ret, -EMSGSIZE, REASON_REQUEST);
                if (pos + hlen + (size_t) blen + 2 > len) {
                        /* Complete but for its "\r\n": refuse a wrong byte as soon as it is here. */
                        size_t at = pos + hlen + (size_t) blen;
                        if (at < len && buf[at] != '\r')
                                return parse_fail(ret, -EBADMSG, REASON_CRLF);
                        return 0;
                }
                if (buf[pos + hlen + blen] != '\r' || buf[pos + hlen + blen + 1] != '\n')
                        return parse_fail(ret, -EBADMSG, REASON_CRLF);
                ret->argv[i] = (ProtoSlice){ .ptr = buf + pos + hlen, .len = (size_t) blen };
                pos += hlen + (size_t) blen + 2;
        }
        ret->argc = n < 0 ? 0 : (size_t) n;
        ret->consumed = pos;
        return 1;
}

/* The decimal digits at *p up to the '\r' (a header resp_parse() accepted), *p moved past "\r\n". */
static size_t read_checked_number(const char **p) {
        const char *q = *p;
        size_t n = 0;

        while (*q != '\r')
                n = n * 10 + (size_t) (*q++ - '0');
        *p = q + 2;
        return n;
}

void resp_parse_again(const char *buf, RespRequest *ret) {
        const char *p = buf + 1;

        ret->argc = read_checked_number(&p);
        for (size_t i = 0; i < ret->argc; i++) {
                size_t len;

                p++; /* '$' */
                len = read_checked_number(&p);
                ret->argv[i] = (ProtoSlice){ .ptr = p, .len = len };
                p += len + 2;
        }
        ret->consumed = (size_t) (p - buf);
        ret->error = NULL;
}

bool resp_slice_eq(ProtoSlice s, const char *word) {
        size_t i;

        for (i = 0; i < s.len; i++) {
                uint8_t c = (uint8_t) s.ptr[i], w = (uint8_t) word[i];
                if (w == 0)
                        return false;
                if (c >= 'a' && c <= 'z')
                        c -= 'a' - 'A';
                if (w >= 'a' && w <= 'z')
                        w -= 'a' - 'A';
                if (c != w)
                        return false;
        }
        return word[i] == 0;
}

int resp_parse_int(ProtoSlice s, int64_t *ret) {
        size_t i = 0;
        bool negative = false;
        uint64_t v = 0;

        if (s.len > 0 && s.ptr[0] == '-') {
                negative = true;
                i = 1;
        }
        if (i >= s.len || s.len - i > 19)
                return -EINVAL;
        for (; i < s.len; i++) {
                if (s.ptr[i] < '0' || s.ptr[i] > '9')
                        return -EINVAL;
                v = v * 10 + (uint64_t) (s.ptr[i] - '0'); /* 19 digits cannot wrap a uint64_t */
        }
        if (v > (uint64_t) INT64_MAX + (negative ? 1 : 0))
                return -ERANGE;
        *ret = negative ? (int64_t) (0 - v) : (int64_t) v;
        return 0;
}

static bool is_digits(ProtoSlice s) {
        if (s.len == 0)
                return false;
        for (size_t i = 0; i < s.len; i++)
                if (s.ptr[i] < '0' || s.ptr[i] > '9')
                        return false;
        return true;
}

/* The count and the timestamp arguments: the line protocol's own parsers (protocol-reasons.h). */
static int parse_count(ProtoSlice s, ProtoRequest *req) {
        return proto_parse_count_token((const uint8_t *) s.ptr, s.len, req);
}

static int parse_time(ProtoSlice s, ProtoRequest *req) {
        return proto_parse_time_token((const uint8_t *) s.ptr, s.len, req);
}

/* NULL if s is text a request may hold (a key if key is set), else why not. */
static const char *check_text(ProtoSlice s, bool key) {
        const uint8_t *p = (const uint8_t *) s.ptr, *end = p + s.len;

        if (key && s.len == 0)
                return REASON_EMPTY_KEY;
        while (p < end) {
                uint8_t c = *p;
                if (c >= 0x80) {
                        size_t n = utf8_sequence_len(p, end);
                        if (n == 0)
                                return REASON_UTF8;
                        p += n;
                        continue;
                }
                if (key && (c == ' ' || c == '\t' || c == '=' || c == '"'))
                        return REASON_KEY_CHAR;
                if (c < ' ' && c != '\t')
                        return c == 0 ? REASON_NUL : REASON_CONTROL;
                p++;
        }
        return NULL;
}

int resp_to_request(ProtoVerb verb, const ProtoSlice *argv, size_t argc, ProtoRequest *ret) {
        size_t i = 1;

        ret->verb = verb;
        ret->count = verb == PROTO_VERB_PEEK ? 1 : 0;
        ret->has_count = false;
        ret->at_usec = 0;
        ret->has_at = false;
        ret->n_pairs = 0;
        ret->error_code = _PROTO_ERROR_INVALID;
        ret->error_reason = NULL;

        switch (verb) {
        case PROTO_VERB_TAKE:
        case PROTO_VERB_CHARGE:
        case PROTO_VERB_REFUND:
                if (argc < 2)
                        return proto_request_fail(ret, PROTO_ERROR_BAD_COUNT, REASON_COUNT_MISSING);
                if (parse_count(argv[i++], ret) < 0)
                        return -EBADMSG;
                break;
        case PROTO_VERB_PEEK:
                /* A count when the first argument is digits and what follows it (after an
                 * optional timestamp) are pairs. */
                if (argc >= 2 && is_digits(argv[1])) {
                        size_t after = argc - 2;
                        if (after > 0 && argv[2].len > 0 && argv[2].ptr[0] == '@')
                                after--;
                        if (after % 2 == 0 && parse_count(argv[i++], ret) < 0)
                                return -EBADMSG;
                }
                break;
        case PROTO_VERB_RESET:
        case PROTO_VERB_EXPLAIN:
                if ((argc - 1) % 2 == 1 && is_digits(argv[1]))
                        return proto_request_fail(ret, PROTO_ERROR_BAD_COUNT, REASON_COUNT_NONE);
                break;
        default:
                break;
        }
        /* Not on HIT: as on a line, its arguments are pairs only, and its errors divvy's codes
         * (an odd "@..." first is an odd count, not bad-time). */
        if (verb != PROTO_VERB_HIT && i < argc && (argc - i) % 2 == 1 && argv[i].len > 0 &&
            argv[i].ptr[0] == '@')
                if (parse_time(argv[i++], ret) < 0)
                        return -EBADMSG;
        if ((argc - i) % 2 == 1)
                return proto_request_fail(ret, PROTO_ERROR_UNKNOWN, REASON_ODD);

        for (; i < argc; i += 2) {
                ProtoSlice key = argv[i], value = argv[i + 1];
                const char *why = check_text(key, true);
                size_t k;

                if (!why)
                        why = check_text(value, false);
                if (why)
                        return proto_request_fail(ret, PROTO_ERROR_UNKNOWN, why);
                /* A repeated key keeps its first position and takes the new value. */
                for (k = 0; k < ret->n_pairs; k++)
                        if (ret->pairs[k].key.len == key.len &&
                            memcmp(ret->pairs[k].key.ptr, key.ptr, key.len) == 0)
                                break;
                if (k < ret->n_pairs) {
                        ret->pairs[k].value = value;
                        continue;
                }
                if (ret->n_pairs >= PROTO_PAIRS_MAX)
                        return proto_request_fail(ret, PROTO_ERROR_UNKNOWN, REASON_TOO_MANY);
                ret->pairs[ret->n_pairs++] = (ProtoPair){ .key = key, .value = value };
        }
        return 0;
}

/* ---- formatters ---- */

static char *append_mem(char *p, const char *s, size_t n) {
        memcpy(p, s, n);
        return p + n;
}

static char *append_int(char *p, int64_t v) {
        *p++ = ':';
        p = number_append_i64(p, v);
        return append_mem(p, CRLF, 2);
}

size_t resp_format_simple(char *buf, const char *s) {
        char *p = buf;

        *p++ = '+';
        for (; *s; s++)
                *p++ = *s == '\r' || *s == '\n' ? ' ' : *s;
        p = append_mem(p, CRLF, 2);
        return (size_t) (p - buf);
}

size_t resp_format_error(char *buf, const char *prefix, const char *reason) {
        char *p = buf;
        size_t n;

        *p++ = '-';
        n = strnlen(prefix, 16);
        p = append_mem(p, prefix, n);
        if (reason) {
                *p++ = ' ';
                for (n = 0; reason[n] && n < RESP_ERROR_REASON_MAX; n++) {
                        uint8_t c = (uint8_t) reason[n];
                        *p++ = c < ' ' || c == 0x7F ? '?' : (char) c;
                }
        }
        p = append_mem(p, CRLF, 2);
        return (size_t) (p - buf);
}

size_t resp_format_error_text(char *buf, const char *text) {
        char *p = buf;

        *p++ = '-';
        for (size_t n = 0; text[n] && n < RESP_ERROR_REASON_MAX; n++) {
                uint8_t c = (uint8_t) text[n];
                *p++ = c < ' ' || c == 0x7F ? '?' : (char) c;
        }
        p = append_mem(p, CRLF, 2);
        return (size_t) (p - buf);
}

size_t resp_format_proto_error(char *buf, ProtoErrorCode code, const char *reason) {
        char *p = buf;
        const char *name = proto_error_code_to_string(code) ?: "unknown";

        p = append_mem(p, "-ERR ", 5);
        p = append_mem(p, name, strlen(name));
        if (reason) {
                *p++ = ' ';
                for (size_t n = 0; reason[n] && n < RESP_ERROR_REASON_MAX; n++) {
                        uint8_t c = (uint8_t) reason[n];
                        *p++ = c < ' ' || c == 0x7F ? '?' : (char) c;
                }
        }
        p = append_mem(p, CRLF, 2);
        return (size_t) (p - buf);
}

size_t resp_format_unknown_command(char *buf, ProtoSlice name) {
        char *p = buf;
        size_t n = name.len < RESP_NAME_SHOWN ? name.len : RESP_NAME_SHOWN;

        p = append_mem(p, "-ERR unknown command '", 22);
        for (size_t i = 0; i < n; i++) {
                uint8_t c = (uint8_t) name.ptr[i];
                *p++ = c < ' ' || c >= 0x7F || c == '\'' ? '?' : (char) c;
        }
        p = append_mem(p, "'" CRLF, 3);
        return (size_t) (p - buf);
}

size_t resp_format_integer(char *buf, int64_t v) {
        return (size_t) (append_int(buf, v) - buf);
}

size_t resp_format_bulk(char *buf, const char *s, size_t len) {
        char *p = buf;

        *p++ = '$';
        p = number_append_u64(p, len);
        p = append_mem(p, CRLF, 2);
        if (len > 0)
                p = append_mem(p, s, len);
        p = append_mem(p, CRLF, 2);
        return (size_t) (p - buf);
}

size_t resp_format_null(char *buf) {
        memcpy(buf, "$-1" CRLF, 5);
        return 5;
}

static size_t format_aggregate(char *buf, char type, uint64_t n) {
        char *p = buf;

        *p++ = type;
        p = number_append_u64(p, n);
        p = append_mem(p, CRLF, 2);
        return (size_t) (p - buf);
}

size_t resp_format_array(char *buf, uint64_t n) {
        return format_aggregate(buf, '*', n);
}

size_t resp_format_map(char *buf, uint64_t n) {
        return format_aggregate(buf, '%', n);
}

size_t resp_format_null3(char *buf) {
        memcpy(buf, "_" CRLF, 3);
        return 3;
}

/* RESP3's boolean: "#t\r\n" or "#f\r\n". */
static char *append_bool(char *p, bool v) {
        return append_mem(p, v ? "#t" CRLF : "#f" CRLF, 4);
}

/* A literal's bytes: a map's header and keys, written whole. */
#define KEY(p, literal) append_mem(p, literal, sizeof(literal) - 1)

static int64_t clamp_i64(uint64_t v) {
        return v > INT64_MAX ? INT64_MAX : (int64_t) v;
}

size_t resp_format_hit(char *buf, bool resp3, bool allowed, uint64_t credit, int64_t reset) {
        char *p = buf;

        if (!resp3) {
                p = append_mem(p, "*3" CRLF, 4);
                p = append_int(p, allowed);
                p = append_int(p, clamp_i64(credit));
                return (size_t) (append_int(p, reset) - buf);
        }
        p = KEY(p, "%3" CRLF "$7" CRLF "allowed" CRLF);
        p = append_bool(p, allowed);
        p = KEY(p, "$6" CRLF "credit" CRLF);
        p = append_int(p, clamp_i64(credit));
        p = KEY(p, "$5" CRLF "reset" CRLF);
        return (size_t) (append_int(p, reset) - buf);
}

static bool is_label_char(uint8_t c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
               c == '-';
}

/* A rule as a bulk string: its label (cut at PROTO_LABEL_MAX, bytes outside [A-Za-z0-9_-] as '?'),
 * or "#<index>" when it has none. At most PROTO_LABEL_MAX + RESP_BULK_OVERHEAD bytes. */
static char *append_rule_ref(char *p, const ProtoRuleRef *rule) {
        char label[PROTO_LABEL_MAX + 24];
        size_t n = 0;

        if (rule->label && rule->label[0])
                for (; rule->label[n] && n < PROTO_LABEL_MAX; n++)
                        label[n] = is_label_char((uint8_t) rule->label[n]) ? rule->label[n] : '?';
        else {
                label[0] = '#';
                n = (size_t) (number_append_u64(label + 1, rule->index) - label);
        }
        return p + resp_format_bulk(p, label, n);
}

size_t resp_format_decision(char *buf, bool resp3, const AlgoResult *res, const ProtoRuleRef *rule) {
        char *p = buf;

        if (!resp3) {
                p = append_mem(p, "*6" CRLF, 4);
                p = append_int(p, res->allowed);
        } else {
                p = KEY(p, "%6" CRLF "$7" CRLF "allowed" CRLF);
                p = append_bool(p, res->allowed);
                p = KEY(p, "$6" CRLF "credit" CRLF);
        }
        p = append_int(p, clamp_i64(res->credit));
        if (resp3)
                p = KEY(p, "$5" CRLF "limit" CRLF);
        p = append_int(p, clamp_i64(res->limit));
        if (resp3)
                p = KEY(p, "$5" CRLF "reset" CRLF);
        p = append_int(p, clamp_i64(res->reset));
        if (resp3)
                p = KEY(p, "$5" CRLF "retry" CRLF);
        p = append_int(p, res->retry);
        if (resp3)
                p = KEY(p, "$4" CRLF "rule" CRLF);
        return (size_t) (append_rule_ref(p, rule) - buf);
}

/* A list of rules as an array of bulk strings, cut as the line cuts it: when the next ref (and
 * a last "..." element) would take the list beyond PROTO_RULE_LIST_MAX bytes, "..." ends it.
 * At most RESP_INT_MAX_LEN + PROTO_RULE_LIST_MAX + RESP_BULK_OVERHEAD bytes. */
static char *append_rule_list(char *p, const ProtoRuleRef *refs, size_t n) {
        char *header = p, *start;
        size_t shown = 0;

        p += RESP_INT_MAX_LEN; /* room for the header, moved into place at the end */
        start = p;
        for (; shown < n; shown++) {
                char ref[PROTO_LABEL_MAX + RESP_BULK_OVERHEAD];
                size_t len = (size_t) (append_rule_ref(ref, &refs[shown]) - ref);

                if ((size_t) (p - start) + len + (shown + 1 < n ? 9 : 0) > PROTO_RULE_LIST_MAX)
                        break;
                p = append_mem(p, ref, len);
        }
        if (shown < n)
                p += resp_format_bulk(p, "...", 3);
        {
                size_t hlen = resp_format_array(header, shown + (shown < n)), body = (size_t) (p - start);

                memmove(header + hlen, start, body);
                return header + hlen + body;
        }
}

/* RESP3's EXPLAIN: a map of the line's fields, the actor as its bytes (null without one). */
static size_t format_explain3(char *buf, const ProtoExplain *e) {
        char *p = KEY(buf, "%7" CRLF "$4" CRLF "rule" CRLF);

        p = append_rule_ref(p, &e->rule);
        p = KEY(p, "$5" CRLF "index" CRLF);
        p = append_int(p, clamp_i64(e->rule.index));
        p = KEY(p, "$6" CRLF "policy" CRLF);
        p += resp_format_bulk(p, e->policy ?: "", e->policy ? strnlen(e->policy, PROTO_NAME_MAX) : 0);
        p = KEY(p, "$5" CRLF "actor" CRLF);
        if (e->actor.ptr)
                p += resp_format_bulk(p, e->actor.ptr,
                                      e->actor.len < RESP_BULK_MAX ? e->actor.len : RESP_BULK_MAX);
        else
                p += resp_format_null3(p);
        p = KEY(p, "$9" CRLF "algorithm" CRLF);
        p += resp_format_bulk(p, e->algorithm ?: "",
                              e->algorithm ? strnlen(e->algorithm, PROTO_NAME_MAX) : 0);
        p = KEY(p, "$8" CRLF "canaries" CRLF);
        p = append_rule_list(p, e->canaries, e->n_canaries);
        p = KEY(p, "$8" CRLF "continue" CRLF);
        p = append_rule_list(p, e->continues, e->n_continues);
        return (size_t) (p - buf);
}

size_t resp_format_explain(char *buf, bool resp3, const ProtoExplain *e) {
        char text[PROTO_REPLY_EXPLAIN_MAX];

        if (resp3)
                return format_explain3(buf, e);
        return resp_format_bulk(buf, text, proto_format_explain_fields(text, e));
}
