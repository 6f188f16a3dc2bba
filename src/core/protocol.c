/* SPDX-License-Identifier: MIT */
/*
 * The divvy line protocol: framing, request parsing and reply formatting.
 *
 * Everything here is a single forward pass over caller-owned memory: no
 * allocation, no copies of keys or values, no I/O. Grammar (divvy 1.7, and version 2's count
 * and timestamp):
 *
 *   line   = verb [ blank+ count ] [ blank+ "@" time ] ( blank+ pair )* blank*
 *                                           (HIT: neither count nor time)
 *   count  = "0" | [1-9] [0-9]*
 *   time   = [0-9]{1,11} [ "." [0-9]{1,6} ]
 *   pair   = string "=" [ string ]          (a key may not be empty)
 *   string = unquoted | quoted
 *   unquoted = 1*( any byte but blank, '"', '=', control )
 *   quoted   = '"' *( any byte but '"', control other than tab ) '"'
 *   blank  = " " | "\t"
 *
 * Every non-ASCII byte must belong to a well-formed UTF-8 sequence.
 */

#include "number.h"
#include "protocol-reasons.h"
#include "protocol.h"

#include "shared/utf8.h"

#include <string.h>

static const char *const proto_error_code_table[_PROTO_ERROR_MAX] = {
        [PROTO_ERROR_UNKNOWN_COMMAND] = "unknown-command",
        [PROTO_ERROR_UNKNOWN] = "unknown",
        [PROTO_ERROR_BAD_COUNT] = "bad-count",
        [PROTO_ERROR_FORBIDDEN] = "forbidden",
        [PROTO_ERROR_BAD_TIME] = "bad-time",
};

static const char *const proto_verb_table[_PROTO_VERB_MAX] = {
        [PROTO_VERB_HIT] = "HIT",     [PROTO_VERB_HELLO] = "HELLO",     [PROTO_VERB_TAKE] = "TAKE",
        [PROTO_VERB_PEEK] = "PEEK",   [PROTO_VERB_CHARGE] = "CHARGE",   [PROTO_VERB_REFUND] = "REFUND",
        [PROTO_VERB_RESET] = "RESET", [PROTO_VERB_EXPLAIN] = "EXPLAIN",
};

const char *proto_verb_to_string(ProtoVerb verb) {
        if (verb < 0 || verb >= _PROTO_VERB_MAX)
                return NULL;
        return proto_verb_table[verb];
}

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
#define REASON_LEADING_BLANK  "blank before the command word"
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
_Static_assert(PROTO_COUNT_MAX == 9007199254740991ULL, "REASON_COUNT_BIG names PROTO_COUNT_MAX");

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

int proto_request_fail(ProtoRequest *req, ProtoErrorCode code, const char *reason) {
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
                        return proto_request_fail(req, PROTO_ERROR_UNKNOWN, reason);
                if (p >= end || *p != '=')
                        return proto_request_fail(req, PROTO_ERROR_UNKNOWN,
                                                  key.len == 0 ? REASON_EMPTY_KEY : REASON_MISSING_EQUALS);
                if (key.len == 0)
                        return proto_request_fail(req, PROTO_ERROR_UNKNOWN, REASON_EMPTY_KEY);
                p++;

                quoted = p < end && *p == '"';
                reason = read_string(&p, end, &value);
                if (reason)
                        return proto_request_fail(req, PROTO_ERROR_UNKNOWN, reason);
                if (p < end && !is_blank(*p))
                        return proto_request_fail(req, PROTO_ERROR_UNKNOWN,
                                                  quoted ? REASON_SEPARATOR : REASON_VALUE_EQUALS);

                if (!request_add(req, max_pairs, key, value))
                        return proto_request_fail(req, PROTO_ERROR_UNKNOWN, REASON_TOO_MANY);
        }
}

static void request_reset(ProtoRequest *req, ProtoVerb verb) {
        req->verb = verb;
        req->count = 0;
        req->has_count = false;
        req->at_usec = 0;
        req->has_at = false;
        req->n_pairs = 0;
        req->error_code = _PROTO_ERROR_INVALID;
        req->error_reason = NULL;
}

int proto_parse_pairs(const char *text, size_t len, size_t max_pairs, ProtoRequest *ret) {
        const uint8_t *p = (const uint8_t *) text;

        request_reset(ret, _PROTO_VERB_INVALID);
        if (len == 0)
                return 0; /* text may be NULL then, and NULL + 0 is undefined */
        return parse_pairs(p, p + len, max_pairs, ret);
}

/* The verb of the word [word, end), compared case-insensitively, or _PROTO_VERB_INVALID. */
static ProtoVerb verb_from_word(const uint8_t *word, size_t len) {
        for (ProtoVerb v = 0; v < _PROTO_VERB_MAX; v++) {
                const char *name = proto_verb_table[v];
                size_t i;

                if (strlen(name) != len)
                        continue;
                for (i = 0; i < len; i++)
                        if ((word[i] | 0x20) != (name[i] | 0x20))
                                break;
                if (i == len)
                        return v;
        }
        return _PROTO_VERB_INVALID;
}

/* The count, if the token at *pp (after blanks) is one: moves *pp past it. Returns 0, or
 * -EBADMSG after proto_request_fail(). */
static int parse_count(const uint8_t **pp, const uint8_t *end, ProtoRequest *req) {
        const uint8_t *p = *pp, *tok;
        int r;

        while (p < end && is_blank(*p))
                p++;
        tok = p;
        while (p < end && !is_blank(*p) && *p != '=' && *p != '"')
                p++;
        /* A token with '=' or '"' in it is a pair (or a malformed one: parse_pairs() says so);
         * one that starts with '@' a timestamp. */
        if (p == tok || (p < end && !is_blank(*p)) || *tok == '@') {
                if (req->verb == PROTO_VERB_TAKE || req->verb == PROTO_VERB_CHARGE ||
                    req->verb == PROTO_VERB_REFUND)
                        return proto_request_fail(req, PROTO_ERROR_BAD_COUNT, REASON_COUNT_MISSING);
                if (req->verb == PROTO_VERB_PEEK)
                        req->count = 1;
                return 0;
        }

        if (req->verb == PROTO_VERB_HELLO || req->verb == PROTO_VERB_RESET ||
            req->verb == PROTO_VERB_EXPLAIN) {
                /* A number is a count they do not take; any other word is a pair without its
                 * '=' (parse_pairs() says so), as RESP's check (resp_to_request()) decides. */
                for (const uint8_t *q = tok; q < p; q++)
                        if (*q < '0' || *q > '9')
                                return 0;
                return proto_request_fail(req, PROTO_ERROR_BAD_COUNT, REASON_COUNT_NONE);
        }
        r = proto_parse_count_token(tok, (size_t) (p - tok), req);
        if (r < 0)
                return r;
        *pp = p;
        return 0;
}

int proto_parse_count_token(const uint8_t *tok, size_t len, ProtoRequest *req) {
        uint64_t v = 0;

        if (len == 0)
                return proto_request_fail(req, PROTO_ERROR_BAD_COUNT, REASON_COUNT_DIGITS);
        for (size_t i = 0; i < len; i++)
                if (tok[i] < '0' || tok[i] > '9')
                        return proto_request_fail(req, PROTO_ERROR_BAD_COUNT, REASON_COUNT_DIGITS);
        if (tok[0] == '0' && len > 1)
                return proto_request_fail(req, PROTO_ERROR_BAD_COUNT, REASON_COUNT_ZEROS);
        for (size_t i = 0; i < len; i++) {
                v = v * 10 + (uint64_t) (tok[i] - '0'); /* cannot wrap: v <= PROTO_COUNT_MAX < 2^60 here */
                if (v > PROTO_COUNT_MAX)
                        return proto_request_fail(req, PROTO_ERROR_BAD_COUNT, REASON_COUNT_BIG);
        }
        if (v == 0 && req->verb != PROTO_VERB_PEEK)
                return proto_request_fail(req, PROTO_ERROR_BAD_COUNT, REASON_COUNT_ZERO);
        req->count = v;
        req->has_count = true;
        return 0;
}

/* The client's timestamp, if the token at *pp (after blanks) starts with '@' and holds neither
 * '=' nor '"' (else it is a pair, as for the count): moves *pp past it. Returns 0, or -EBADMSG
 * after proto_request_fail(). */
static int parse_time(const uint8_t **pp, const uint8_t *end, ProtoRequest *req) {
        const uint8_t *p = *pp, *tok;
        int r;

        while (p < end && is_blank(*p))
                p++;
        if (p >= end || *p != '@')
                return 0;
        for (tok = p; p < end && !is_blank(*p); p++)
                if (*p == '=' || *p == '"')
                        return 0; /* a pair whose key starts with '@': no key is reserved */
        r = proto_parse_time_token(tok, (size_t) (p - tok), req);
        if (r < 0)
                return r;
        *pp = p;
        return 0;
}

int proto_parse_time_token(const uint8_t *tok, size_t len, ProtoRequest *req) {
        uint64_t sec = 0, usec = 0;
        size_t i = 1, n_sec = 0, n_frac = 0;

        if (req->verb != PROTO_VERB_TAKE && req->verb != PROTO_VERB_PEEK && req->verb != PROTO_VERB_CHARGE)
                return proto_request_fail(req, PROTO_ERROR_BAD_TIME, REASON_TIME_VERB);
        for (; i < len && tok[i] >= '0' && tok[i] <= '9' && n_sec < 12; i++, n_sec++)
                sec = sec * 10 + (uint64_t) (tok[i] - '0'); /* at most 12 digits read: cannot wrap */
        if (n_sec == 0 || n_sec > 11)
                return proto_request_fail(req, PROTO_ERROR_BAD_TIME, REASON_TIME_FORMAT);
        if (i < len && tok[i] == '.') {
                for (i++; i < len && tok[i] >= '0' && tok[i] <= '9' && n_frac < 7; i++, n_frac++)
                        usec = usec * 10 + (uint64_t) (tok[i] - '0');
                if (n_frac == 0 || n_frac > 6)
                        return proto_request_fail(req, PROTO_ERROR_BAD_TIME, REASON_TIME_FORMAT);
                for (size_t k = n_frac; k < 6; k++)
                        usec *= 10;
        }
        if (i != len)
                return proto_request_fail(req, PROTO_ERROR_BAD_TIME, REASON_TIME_FORMAT);
        req->at_usec = sec * 1000000 + usec;
        req->has_at = true;
        return 0;
}

/* Both entry points: v2 false refuses every verb but HIT as an unknown command. */
static int parse_request(const char *line, size_t len, size_t max_pairs, bool v2, ProtoRequest *ret) {
        const uint8_t *p = (const uint8_t *) line, *end, *word;
        ProtoVerb verb;
        int r;

        request_reset(ret, _PROTO_VERB_INVALID);
        if (len == 0)
                return proto_request_fail(ret, PROTO_ERROR_UNKNOWN_COMMAND, REASON_EMPTY);

        end = p + len;
        if (is_blank(*p)) {
                while (p < end && is_blank(*p))
                        p++;
                /* divvy split the line on blanks and looked up the empty first word. */
                return proto_request_fail(ret, PROTO_ERROR_UNKNOWN_COMMAND,
                                          p >= end ? REASON_EMPTY : REASON_LEADING_BLANK);
        }

        /* The command word runs to the first blank. */
        word = p;
        while (p < end && !is_blank(*p))
                p++;
        verb = verb_from_word(word, (size_t) (p - word));
        if (verb < 0 || (!v2 && verb != PROTO_VERB_HIT))
                return proto_request_fail(ret, PROTO_ERROR_UNKNOWN_COMMAND, REASON_COMMAND);

        ret->verb = verb;
        if (verb != PROTO_VERB_HIT) {
                r = parse_count(&p, end, ret);
                if (r >= 0)
                        r = parse_time(&p, end, ret);
                if (r < 0)
                        return r;
        }
        return parse_pairs(p, end, max_pairs, ret);
}

int proto_parse_line(const char *line, size_t len, size_t max_pairs, ProtoRequest *ret) {
        return parse_request(line, len, max_pairs, false, ret);
}

int proto_parse_request(const char *line, size_t len, size_t max_pairs, ProtoRequest *ret) {
        return parse_request(line, len, max_pairs, true, ret);
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

size_t proto_format_ok(char *buf, bool allowed, uint64_t credit, int64_t reset) {
        char *p = buf;

        /* At most 9 + 20 + 1 + 20 + 1 bytes and the NUL: always well within PROTO_REPLY_MAX. */
        p = append_str(p, allowed ? "OK true " : "OK false ");
        p = number_append_u64(p, credit);
        *p++ = ' ';
        if (reset < 0) {
                *p++ = '-';
                p = number_append_u64(p,
                                      UINT64_C(0) - (uint64_t) reset); /* modular: right for INT64_MIN too */
        } else
                p = number_append_u64(p, (uint64_t) reset);
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

/* ---- version 2 replies --------------------------------------------------------------------- */

/* Copies at most max bytes of s, each byte for which ok() is false as '?'. */
static char *append_token(char *p, const char *s, size_t max, bool (*ok)(uint8_t c)) {
        for (size_t i = 0; s && s[i] && i < max; i++)
                *p++ = ok((uint8_t) s[i]) ? s[i] : '?';
        return p;
}

static bool is_label_char(uint8_t c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
               c == '-';
}

static bool is_version_char(uint8_t c) {
        return is_label_char(c) || c == '.' || c == '+' || c == '~';
}

/* "label" or "#index": at most 1 + 20 or PROTO_LABEL_MAX bytes. */
static char *append_rule_ref(char *p, const ProtoRuleRef *ref) {
        if (ref->label && ref->label[0])
                return append_token(p, ref->label, PROTO_LABEL_MAX, is_label_char);
        *p++ = '#';
        return number_append_u64(p, ref->index);
}

size_t proto_format_decision(char *buf, const AlgoResult *res, const ProtoRuleRef *rule) {
        char *p = buf;

        /* At most 15 + 5 + 4 * (7 + 20) + 6 + 255 + 1 bytes and the NUL: within PROTO_REPLY_V2_MAX. */
        p = append_str(p, res->allowed ? "OK allowed=true credit=" : "OK allowed=false credit=");
        p = number_append_u64(p, res->credit);
        p = append_str(p, " limit=");
        p = number_append_u64(p, res->limit);
        p = append_str(p, " reset=");
        p = number_append_u64(p, res->reset);
        p = append_str(p, " retry=");
        p = number_append_i64(p, res->retry);
        p = append_str(p, " rule=");
        p = append_rule_ref(p, rule);
        *p++ = '\n';
        *p = '\0';
        return (size_t) (p - buf);
}

size_t proto_format_hello(char *buf, const char *version) {
        char *p = buf;

        p = append_str(p, "OK proto=2 server=divvyd/");
        p = append_token(p, version, PROTO_VERSION_MAX, is_version_char);
        p = append_str(p, " verbs=");
        for (ProtoVerb v = 0; v < _PROTO_VERB_MAX; v++) {
                if (v > 0)
                        *p++ = ',';
                p = append_str(p, proto_verb_table[v]);
        }
        *p++ = '\n';
        *p = '\0';
        return (size_t) (p - buf);
}

size_t proto_format_reset(char *buf, uint64_t n) {
        char *p = buf;

        p = append_str(p, "OK reset=");
        p = number_append_u64(p, n);
        *p++ = '\n';
        *p = '\0';
        return (size_t) (p - buf);
}

#define ACTOR_CUT_MARKER "\\..." /* an escape that means nothing else */

/* The actor in quotes, escaped (see protocol.h); at most PROTO_ACTOR_TEXT_MAX + 2 bytes. */
static char *append_actor(char *p, ProtoSlice actor) {
        static const char hex[] = "0123456789abcdef";
        const uint8_t *a = (const uint8_t *) actor.ptr, *a_end = a + actor.len;
        const char *limit = p + 1 + PROTO_ACTOR_TEXT_MAX; /* the opening quote, then the text */
        char esc[4];

        *p++ = '"';
        while (a < a_end) {
                size_t n = *a >= 0x80 ? utf8_sequence_len(a, a_end) : 1, e;
                const char *src;

                if (n > 1) {
                        src = (const char *) a;
                        e = n;
                } else if (*a == '\\' || *a == '"') {
                        esc[0] = '\\';
                        esc[1] = (char) *a;
                        src = esc;
                        e = 2;
                } else if (*a == '\t') {
                        src = "\\t";
                        e = 2;
                } else if (n == 0 || *a < ' ' || *a == 0x7F) {
                        esc[0] = '\\';
                        esc[1] = 'x';
                        esc[2] = hex[*a >> 4];
                        esc[3] = hex[*a & 0xF];
                        src = esc;
                        e = 4;
                        n = 1;
                } else {
                        src = (const char *) a;
                        e = 1;
                }
                /* Every piece but the last leaves room for the marker, so the marker always fits
                 * when a piece does not. */
                size_t room = (size_t) (limit - p);
                if (e > room || (a + n < a_end && e + (sizeof ACTOR_CUT_MARKER - 1) > room)) {
                        p = append_str(p, ACTOR_CUT_MARKER);
                        break;
                }
                memcpy(p, src, e);
                p += e;
                a += n;
        }
        *p++ = '"';
        return p;
}

/* Refs joined by ',', "-" if none; cut with a final "..." element to PROTO_RULE_LIST_MAX bytes. */
static char *append_rule_list(char *p, const ProtoRuleRef *refs, size_t n) {
        char *start = p, ref[PROTO_LABEL_MAX + 1];

        if (n == 0) {
                *p++ = '-';
                return p;
        }
        for (size_t i = 0; i < n; i++) {
                size_t len = (size_t) (append_rule_ref(ref, &refs[i]) - ref);
                size_t used = (size_t) (p - start), need = (i > 0) + len;
                /* Room for this ref, and for ",..." unless it is the last one. */
                if (used + need + (i + 1 < n ? 4 : 0) > PROTO_RULE_LIST_MAX) {
                        p = append_str(p, i > 0 ? ",..." : "...");
                        break;
                }
                if (i > 0)
                        *p++ = ',';
                memcpy(p, ref, len);
                p += len;
        }
        return p;
}

size_t proto_format_explain_fields(char *buf, const ProtoExplain *e) {
        char *p = buf;

        /* With proto_format_explain()'s "OK " and "\n": at most 8 + 255 + 7 + 20 + 8 + 32 + 7 + 2 + 512 + 11
         * + 32 + 10 + 1536 + 10 + 1536 + 1 bytes and the NUL: 3988 <= PROTO_REPLY_EXPLAIN_MAX. */
        p = append_str(p, "rule=");
        p = append_rule_ref(p, &e->rule);
        p = append_str(p, " index=");
        p = number_append_u64(p, e->rule.index);
        p = append_str(p, " policy=");
        p = append_token(p, e->policy, PROTO_NAME_MAX, is_label_char);
        p = append_str(p, " actor=");
        if (e->actor.ptr)
                p = append_actor(p, e->actor);
        else
                *p++ = '-';
        p = append_str(p, " algorithm=");
        p = append_token(p, e->algorithm, PROTO_NAME_MAX, is_label_char);
        p = append_str(p, " canaries=");
        p = append_rule_list(p, e->canaries, e->n_canaries);
        p = append_str(p, " continue=");
        p = append_rule_list(p, e->continues, e->n_continues);
        *p = '\0';
        return (size_t) (p - buf);
}

size_t proto_format_explain(char *buf, const ProtoExplain *e) {
        size_t n;

        memcpy(buf, "OK ", 3);
        n = 3 + proto_format_explain_fields(buf + 3, e);
        buf[n++] = '\n';
        buf[n] = '\0';
        return n;
}

_Static_assert(8 + PROTO_LABEL_MAX + 7 + 20 + 8 + PROTO_NAME_MAX + 7 + 2 + PROTO_ACTOR_TEXT_MAX + 11 +
                               PROTO_NAME_MAX + 10 + PROTO_RULE_LIST_MAX + 10 + PROTO_RULE_LIST_MAX + 2 <=
                       PROTO_REPLY_EXPLAIN_MAX,
               "an EXPLAIN reply may not fit PROTO_REPLY_EXPLAIN_MAX");
_Static_assert(24 + 4 * (7 + 20) + 6 + PROTO_LABEL_MAX + 2 <= PROTO_REPLY_V2_MAX,
               "a decision reply may not fit PROTO_REPLY_V2_MAX");
_Static_assert(25 + PROTO_VERSION_MAX + 7 + 64 + 2 <= PROTO_REPLY_V2_MAX, "a HELLO reply may not fit");

const char *proto_text_unsendable(const char *s) {
        const uint8_t *q = (const uint8_t *) s, *end = q + strlen(s);

        while (q < end) {
                size_t n = 1;
                if (*q == '"')
                        return "contains '\"', which a request cannot carry";
                if (*q < ' ' && *q != '\t')
                        return "contains a control character, which a request cannot carry";
                if (*q >= 0x80 && (n = utf8_sequence_len(q, end)) == 0)
                        return "is not valid UTF-8, which a request cannot carry";
                q += n;
        }
        return NULL;
}
