/* SPDX-License-Identifier: MIT */
/* http-api.c: the HTTP decision API's JSON bodies; see http-api.h. */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/http-api.h"
#include "shared/utf8.h"

static const struct {
        const char *path;
        ProtoVerb verb;
} endpoints[_HTTP_API_ENDPOINT_MAX] = {
        [HTTP_API_TAKE] = { "/v1/take", PROTO_VERB_TAKE },
        [HTTP_API_PEEK] = { "/v1/peek", PROTO_VERB_PEEK },
        [HTTP_API_CHARGE] = { "/v1/charge", PROTO_VERB_CHARGE },
        [HTTP_API_REFUND] = { "/v1/refund", PROTO_VERB_REFUND },
        [HTTP_API_RESET] = { "/v1/reset", PROTO_VERB_RESET },
        [HTTP_API_EXPLAIN] = { "/v1/explain", PROTO_VERB_EXPLAIN },
        [HTTP_API_ENVOY] = { "/json", PROTO_VERB_TAKE },
};

HttpApiEndpoint http_api_endpoint_from_path(const char *path) {
        for (int i = 0; i < _HTTP_API_ENDPOINT_MAX; i++)
                if (path && strcmp(path, endpoints[i].path) == 0)
                        return (HttpApiEndpoint) i;
        return _HTTP_API_ENDPOINT_INVALID;
}

ProtoVerb http_api_endpoint_verb(HttpApiEndpoint e) {
        return e >= 0 && e < _HTTP_API_ENDPOINT_MAX ? endpoints[e].verb : _PROTO_VERB_INVALID;
}

/* ---- the JSON reader ---- */

typedef struct Json {
        char *p, *end;
        const char *error; /* the first failure's sentence */
} Json;

static int json_fail(Json *j, const char *why) {
        if (!j->error)
                j->error = why;
        return -EBADMSG;
}

static void json_ws(Json *j) {
        while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
                j->p++;
}

/* Skips blanks; true if the next byte is c (not consumed). */
static bool json_peek(Json *j, char c) {
        json_ws(j);
        return j->p < j->end && *j->p == c;
}

static int json_expect(Json *j, char c, const char *why) {
        if (!json_peek(j, c))
                return json_fail(j, why);
        j->p++;
        return 0;
}

static int hex4(const char *p, unsigned *ret) {
        unsigned v = 0;

        for (int i = 0; i < 4; i++) {
                char c = p[i];
                v <<= 4;
                if (c >= '0' && c <= '9')
                        v |= (unsigned) (c - '0');
                else if (c >= 'a' && c <= 'f')
                        v |= (unsigned) (c - 'a' + 10);
                else if (c >= 'A' && c <= 'F')
                        v |= (unsigned) (c - 'A' + 10);
                else
                        return -EBADMSG;
        }
        *ret = v;
        return 0;
}

static size_t put_utf8(char *w, unsigned cp) {
        if (cp < 0x80) {
                w[0] = (char) cp;
                return 1;
        }
        if (cp < 0x800) {
                w[0] = (char) (0xC0 | (cp >> 6));
                w[1] = (char) (0x80 | (cp & 0x3F));
                return 2;
        }
        if (cp < 0x10000) {
                w[0] = (char) (0xE0 | (cp >> 12));
                w[1] = (char) (0x80 | ((cp >> 6) & 0x3F));
                w[2] = (char) (0x80 | (cp & 0x3F));
                return 3;
        }
        w[0] = (char) (0xF0 | (cp >> 18));
        w[1] = (char) (0x80 | ((cp >> 12) & 0x3F));
        w[2] = (char) (0x80 | ((cp >> 6) & 0x3F));
        w[3] = (char) (0x80 | (cp & 0x3F));
        return 4;
}

/* A string, decoded in place (the decoded text is never longer than its JSON form): *ret points
 * at it. Refuses invalid UTF-8, lone surrogates and control characters, escaped or not. */
static int json_string(Json *j, ProtoSlice *ret) {
        char *w;

        if (json_expect(j, '"', "expected a string") < 0)
                return -EBADMSG;
        w = j->p;
        ret->ptr = w;
        while (j->p < j->end) {
                unsigned char c = (unsigned char) *j->p;

                if (c == '"') {
                        j->p++;
                        ret->len = (size_t) (w - ret->ptr);
                        return 0;
                }
                if (c < 0x20)
                        return json_fail(j, "control character in a string");
                if (c >= 0x80) {
                        size_t n = utf8_sequence_len((const uint8_t *) j->p, (const uint8_t *) j->end);
                        if (n == 0)
                                return json_fail(j, "invalid UTF-8 in a string");
                        memmove(w, j->p, n);
                        w += n;
                        j->p += n;
                        continue;
                }
                if (c != '\\') {
                        *w++ = *j->p++;
                        continue;
                }
                if (j->end - j->p < 2)
                        break;
                switch (j->p[1]) {
                case '"':
                case '\\':
                case '/':
                        *w++ = j->p[1];
                        j->p += 2;
                        continue;
                case 'b':
                case 'f':
                case 'n':
                case 'r':
                case 't':
                        return json_fail(j, "control character in a string");
                case 'u': {
                        unsigned cp, lo;

                        if (j->end - j->p < 6 || hex4(j->p + 2, &cp) < 0)
                                return json_fail(j, "bad \\u escape in a string");
                        j->p += 6;
                        if (cp >= 0xDC00 && cp <= 0xDFFF)
                                return json_fail(j, "lone surrogate in a string");
                        if (cp >= 0xD800 && cp <= 0xDBFF) {
                                if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' ||
                                    hex4(j->p + 2, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF)
                                        return json_fail(j, "lone surrogate in a string");
                                j->p += 6;
                                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        }
                        if (cp < 0x20 || cp == 0x7F)
                                return json_fail(j, "control character in a string");
                        w += put_utf8(w, cp);
                        continue;
                }
                default:
                        return json_fail(j, "bad escape in a string");
                }
        }
        return json_fail(j, "unterminated string");
}

/* A non-negative integer up to max (no fraction, no exponent, no leading zero). */
static int json_uint(Json *j, uint64_t max, uint64_t *ret, const char *why) {
        uint64_t v = 0;
        const char *start;

        json_ws(j);
        start = j->p;
        if (j->p < j->end && *j->p == '-')
                return json_fail(j, why);
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
                unsigned d = (unsigned) (*j->p - '0');
                if (v > (max - d) / 10)
                        return json_fail(j, why);
                v = v * 10 + d;
                j->p++;
        }
        if (j->p == start || (j->p - start > 1 && *start == '0'))
                return json_fail(j, why);
        if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
                return json_fail(j, why);
        *ret = v;
        return 0;
}

static int json_word(Json *j, const char *w) {
        size_t n = strlen(w);

        json_ws(j);
        if ((size_t) (j->end - j->p) < n || memcmp(j->p, w, n) != 0)
                return -EBADMSG;
        j->p += n;
        return 0;
}

static int json_bool(Json *j, bool *ret, const char *why) {
        if (json_word(j, "true") == 0)
                *ret = true;
        else if (json_word(j, "false") == 0)
                *ret = false;
        else
                return json_fail(j, why);
        return 0;
}

static bool slice_is(ProtoSlice s, const char *w) {
        return s.len == strlen(w) && memcmp(s.ptr, w, s.len) == 0;
}

/* One member of an object: key is decoded, the ':' consumed; reads the value. */
typedef int (*JsonMemberFunc)(Json *j, ProtoSlice key, void *userdata);

/* An object: each member to member(). */
static int json_object(Json *j, JsonMemberFunc member, void *userdata, const char *why) {
        if (json_expect(j, '{', why) < 0)
                return -EBADMSG;
        if (json_peek(j, '}')) {
                j->p++;
                return 0;
        }
        for (;;) {
                ProtoSlice key;

                if (json_string(j, &key) < 0 || json_expect(j, ':', "expected ':' after a key") < 0 ||
                    member(j, key, userdata) < 0)
                        return -EBADMSG;
                if (json_peek(j, '}')) {
                        j->p++;
                        return 0;
                }
                if (json_expect(j, ',', "expected ',' or '}' in an object") < 0)
                        return -EBADMSG;
        }
}

/* A field seen twice: bit of seen. */
static int json_once(Json *j, unsigned *seen, unsigned bit) {
        if (*seen & bit)
                return json_fail(j, "a field appears twice");
        *seen |= bit;
        return 0;
}

/* ---- /v1/... ---- */

typedef struct V1 {
        HttpApiRequest *r;
        unsigned seen;
} V1;

static int v1_pair(Json *j, ProtoSlice key, void *userdata) {
        HttpApiRequest *r = userdata;
        ProtoSlice value;

        if (key.len == 0)
                return json_fail(j, "an empty key in \"pairs\"");
        for (size_t i = 0; i < r->n_pairs; i++)
                if (r->pairs[i].key.len == key.len && memcmp(r->pairs[i].key.ptr, key.ptr, key.len) == 0)
                        return json_fail(j, "a key appears twice in \"pairs\"");
        if (r->n_pairs >= PROTO_PAIRS_MAX)
                return json_fail(j, "too many pairs");
        if (!json_peek(j, '"'))
                return json_fail(j, "\"pairs\" values must be strings");
        if (json_string(j, &value) < 0)
                return -EBADMSG;
        r->pairs[r->n_pairs++] = (ProtoPair){ .key = key, .value = value };
        return 0;
}

static int v1_member(Json *j, ProtoSlice key, void *userdata) {
        V1 *v = userdata;
        HttpApiRequest *r = v->r;

        if (slice_is(key, "pairs")) {
                if (json_once(j, &v->seen, 1) < 0)
                        return -EBADMSG;
                return json_object(j, v1_pair, r, "\"pairs\" must be an object of strings");
        }
        if (slice_is(key, "count") && r->endpoint <= HTTP_API_REFUND) {
                if (json_once(j, &v->seen, 2) < 0 ||
                    json_uint(j, PROTO_COUNT_MAX, &r->count,
                              "\"count\" must be an integer from 0 to 9007199254740991") < 0)
                        return -EBADMSG;
                r->has_count = true;
                return 0;
        }
        return json_fail(j, r->endpoint <= HTTP_API_REFUND ? "unknown field (accepted: pairs, count)"
                                                           : "unknown field (accepted: pairs)");
}

/* ---- /json ---- */

typedef struct Envoy {
        HttpApiRequest *r;
        unsigned seen;
        HttpApiDescriptor *d;
        unsigned d_seen;
        ProtoPair *entry;
        unsigned e_seen;
} Envoy;

static int envoy_entry_member(Json *j, ProtoSlice key, void *userdata) {
        Envoy *e = userdata;

        if (slice_is(key, "key"))
                return json_once(j, &e->e_seen, 1) < 0 ? -EBADMSG : json_string(j, &e->entry->key);
        if (slice_is(key, "value"))
                return json_once(j, &e->e_seen, 2) < 0 ? -EBADMSG : json_string(j, &e->entry->value);
        return json_fail(j, "unknown field in an entry (accepted: key, value)");
}

/* An array: each element to element(). */
static int json_array(Json *j, int (*element)(Json *j, void *userdata), void *userdata, const char *why) {
        if (json_expect(j, '[', why) < 0)
                return -EBADMSG;
        if (json_peek(j, ']')) {
                j->p++;
                return 0;
        }
        for (;;) {
                if (element(j, userdata) < 0)
                        return -EBADMSG;
                if (json_peek(j, ']')) {
                        j->p++;
                        return 0;
                }
                if (json_expect(j, ',', "expected ',' or ']' in an array") < 0)
                        return -EBADMSG;
        }
}

static int envoy_entry(Json *j, void *userdata) {
        Envoy *e = userdata;
        HttpApiRequest *r = e->r;
        size_t at = e->d->first_entry + e->d->n_entries;

        if (at >= HTTP_API_ENTRIES_MAX || e->d->n_entries + 1 >= PROTO_PAIRS_MAX)
                return json_fail(j, "too many entries");
        e->entry = &r->entries[at];
        *e->entry = (ProtoPair){ .key = { "", 0 }, .value = { "", 0 } };
        e->e_seen = 0;
        if (json_object(j, envoy_entry_member, e, "an entry must be an object") < 0)
                return -EBADMSG;
        if (e->entry->key.len == 0)
                return json_fail(j, "an entry without a key");
        e->d->n_entries++;
        return 0;
}

/* hits_addend of a descriptor: a UInt64Value, a number or a decimal string in proto3 JSON. */
static int envoy_hits(Json *j, uint64_t *ret) {
        const char *why = "\"hits_addend\" must be a non-negative integer";

        if (json_peek(j, '"')) {
                ProtoSlice s;
                Json inner;

                if (json_string(j, &s) < 0)
                        return -EBADMSG;
                inner = (Json){ .p = (char *) s.ptr, .end = (char *) s.ptr + s.len };
                if (json_uint(&inner, UINT64_MAX, ret, why) < 0 || inner.p != inner.end)
                        return json_fail(j, why);
                return 0;
        }
        return json_uint(j, UINT64_MAX, ret, why);
}

static int envoy_descriptor_member(Json *j, ProtoSlice key, void *userdata) {
        Envoy *e = userdata;

        if (slice_is(key, "entries"))
                return json_once(j, &e->d_seen, 1) < 0
                               ? -EBADMSG
                               : json_array(j, envoy_entry, e, "\"entries\" must be an array of objects");
        if (slice_is(key, "hits_addend") || slice_is(key, "hitsAddend")) {
                if (json_once(j, &e->d_seen, 2) < 0 || envoy_hits(j, &e->d->hits) < 0)
                        return -EBADMSG;
                e->d->has_hits = true;
                return 0;
        }
        if (slice_is(key, "is_negative_hits") || slice_is(key, "isNegativeHits"))
                return json_once(j, &e->d_seen, 4) < 0
                               ? -EBADMSG
                               : json_bool(j, &e->d->negative, "\"is_negative_hits\" must be a boolean");
        if (slice_is(key, "limit"))
                return json_fail(
                        j, "a descriptor's \"limit\" override is not supported: limits are the rules'");
        return json_fail(j,
                         "unknown field in a descriptor (accepted: entries, hits_addend, is_negative_hits)");
}

static int envoy_descriptor(Json *j, void *userdata) {
        Envoy *e = userdata;
        HttpApiRequest *r = e->r;
        size_t next = 0;

        if (r->n_descriptors >= HTTP_API_DESCRIPTORS_MAX)
                return json_fail(j, "too many descriptors");
        if (r->n_descriptors > 0) {
                const HttpApiDescriptor *prev = &r->descriptors[r->n_descriptors - 1];
                next = prev->first_entry + prev->n_entries;
        }
        e->d = &r->descriptors[r->n_descriptors];
        *e->d = (HttpApiDescriptor){ .first_entry = next };
        e->d_seen = 0;
        if (json_object(j, envoy_descriptor_member, e, "a descriptor must be an object") < 0)
                return -EBADMSG;
        r->n_descriptors++;
        return 0;
}

static int envoy_member(Json *j, ProtoSlice key, void *userdata) {
        Envoy *e = userdata;
        HttpApiRequest *r = e->r;

        if (slice_is(key, "domain"))
                return json_once(j, &e->seen, 1) < 0 ? -EBADMSG : json_string(j, &r->domain);
        if (slice_is(key, "descriptors"))
                return json_once(j, &e->seen, 2) < 0
                               ? -EBADMSG
                               : json_array(j, envoy_descriptor, e,
                                            "\"descriptors\" must be an array of objects");
        if (slice_is(key, "hits_addend") || slice_is(key, "hitsAddend"))
                return json_once(j, &e->seen, 4) < 0
                               ? -EBADMSG
                               : json_uint(j, UINT32_MAX, &r->hits_addend,
                                           "\"hits_addend\" must be an integer from 0 to 4294967295");
        return json_fail(j, "unknown field (accepted: domain, descriptors, hits_addend)");
}

int http_api_parse(HttpApiEndpoint e, char *body, size_t len, HttpApiRequest *ret) {
        Json j = { .p = body, .end = body + len };
        int r;

        ret->endpoint = e;
        ret->n_pairs = ret->n_descriptors = 0;
        ret->count = 1;
        ret->has_count = false;
        ret->domain = (ProtoSlice){ "", 0 };
        ret->hits_addend = 0;
        ret->error = NULL;

        if (e == HTTP_API_ENVOY) {
                Envoy env = { .r = ret };

                r = json_object(&j, envoy_member, &env, "the body must be a JSON object");
                if (r >= 0 && ret->domain.len == 0)
                        r = json_fail(&j, "\"domain\" is missing or empty");
                if (r >= 0 && ret->n_descriptors == 0)
                        r = json_fail(&j, "\"descriptors\" is missing or empty");
        } else {
                V1 v = { .r = ret };

                r = json_object(&j, v1_member, &v, "the body must be a JSON object");
                if (r >= 0 && !(v.seen & 1))
                        r = json_fail(&j, "\"pairs\" is missing");
                if (r >= 0 && ret->has_count && ret->count == 0 && e != HTTP_API_PEEK)
                        r = json_fail(&j, "\"count\" must be at least 1");
        }
        if (r >= 0) {
                json_ws(&j);
                if (j.p != j.end)
                        r = json_fail(&j, "bytes after the JSON object");
        }
        if (r < 0) {
                ret->error = j.error ?: "malformed JSON";
                return -EBADMSG;
        }
        return 0;
}

static int proto_fail(ProtoRequest *ret, ProtoErrorCode code, const char *why) {
        ret->n_pairs = 0;
        ret->error_code = code;
        ret->error_reason = why;
        return -EBADMSG;
}

int http_api_request_to_proto(const HttpApiRequest *r, size_t i, ProtoRequest *ret) {
        const ProtoPair *src;
        size_t n;

        *ret = (ProtoRequest){ .verb = http_api_endpoint_verb(r->endpoint) };
        if (r->endpoint != HTTP_API_ENVOY) {
                src = r->pairs;
                n = r->n_pairs;
                if (ret->verb <= PROTO_VERB_REFUND && ret->verb >= PROTO_VERB_TAKE) {
                        ret->count = r->count;
                        ret->has_count = true;
                }
        } else {
                const HttpApiDescriptor *d = &r->descriptors[i];
                uint64_t hits = d->has_hits ? d->hits : r->hits_addend ?: 1;

                src = r->entries + d->first_entry;
                n = d->n_entries;
                ret->pairs[0] = (ProtoPair){ .key = { "domain", 6 }, .value = r->domain };
                ret->n_pairs = 1;
                if (hits == 0)
                        ret->verb = PROTO_VERB_PEEK;
                else if (d->negative)
                        ret->verb = PROTO_VERB_REFUND;
                if (hits > PROTO_COUNT_MAX)
                        return proto_fail(ret, PROTO_ERROR_BAD_COUNT, "hits_addend above 9007199254740991");
                ret->count = hits;
                ret->has_count = true;
        }
        for (size_t k = 0; k < n; k++) {
                if (proto_request_get(ret, src[k].key.ptr, src[k].key.len))
                        return proto_fail(ret, PROTO_ERROR_UNKNOWN,
                                          r->endpoint == HTTP_API_ENVOY
                                                  ? "a key appears twice in a descriptor (with "
                                                    "\"domain\")"
                                                  : "a key appears twice");
                if (ret->n_pairs >= PROTO_PAIRS_MAX)
                        return proto_fail(ret, PROTO_ERROR_UNKNOWN, "too many pairs");
                ret->pairs[ret->n_pairs++] = src[k];
        }
        return 0;
}

/* ---- the JSON writer: bounded, never past cap - 1 (the NUL) ---- */

typedef struct Out {
        char *buf;
        size_t len, cap;
} Out;

static void out_raw(Out *o, const char *s, size_t n) {
        if (n > o->cap - 1 - o->len)
                n = o->cap - 1 - o->len;
        memcpy(o->buf + o->len, s, n);
        o->len += n;
        o->buf[o->len] = '\0';
}

static void out_str(Out *o, const char *s) {
        out_raw(o, s, strlen(s));
}

static void out_u64(Out *o, uint64_t v) {
        char num[24];
        int n = snprintf(num, sizeof num, "%" PRIu64, v);
        out_raw(o, num, (size_t) n);
}

/* s as a JSON string: '"', '\' and control characters escaped, invalid UTF-8 as U+FFFD. */
static void out_json_string(Out *o, const char *s, size_t len) {
        out_raw(o, "\"", 1);
        for (size_t i = 0; i < len;) {
                unsigned char c = (unsigned char) s[i];
                char esc[8];

                if (c >= 0x80) {
                        size_t n = utf8_sequence_len((const uint8_t *) s + i, (const uint8_t *) s + len);
                        if (n == 0) {
                                out_str(o, "\\ufffd");
                                i++;
                        } else {
                                out_raw(o, s + i, n);
                                i += n;
                        }
                        continue;
                }
                if (c == '"' || c == '\\') {
                        esc[0] = '\\';
                        esc[1] = (char) c;
                        out_raw(o, esc, 2);
                } else if (c < 0x20 || c == 0x7F) {
                        snprintf(esc, sizeof esc, "\\u%04x", c);
                        out_raw(o, esc, 6);
                } else
                        out_raw(o, s + i, 1);
                i++;
        }
        out_raw(o, "\"", 1);
}

const char *http_api_rule_name(const ProtoRuleRef *r, char *buf) {
        if (r->label && r->label[0]) {
                snprintf(buf, PROTO_LABEL_MAX + 1, "%s", r->label);
                return buf;
        }
        snprintf(buf, PROTO_LABEL_MAX + 1, "#%" PRIu64, r->index);
        return buf;
}

size_t http_api_format_decision(char *buf, const AlgoResult *res, const char *rule_name) {
        Out o = { buf, 0, HTTP_API_REPLY_MAX };
        char num[24];

        out_str(&o, res->allowed ? "{\"allowed\":true,\"credit\":" : "{\"allowed\":false,\"credit\":");
        out_u64(&o, res->credit);
        out_str(&o, ",\"limit\":");
        out_u64(&o, res->limit);
        out_str(&o, ",\"reset\":");
        out_u64(&o, res->reset);
        out_str(&o, ",\"retry\":");
        snprintf(num, sizeof num, "%" PRId64, res->retry);
        out_str(&o, num);
        out_str(&o, ",\"rule\":");
        if (rule_name)
                out_json_string(&o, rule_name, strnlen(rule_name, PROTO_LABEL_MAX));
        else
                out_str(&o, "null");
        out_str(&o, "}");
        return o.len;
}

size_t http_api_format_reset(char *buf, uint64_t n) {
        Out o = { buf, 0, HTTP_API_REPLY_MAX };

        out_str(&o, "{\"reset\":");
        out_u64(&o, n);
        out_str(&o, "}");
        return o.len;
}

size_t http_api_format_error(char *buf, const char *code, const char *reason) {
        Out o = { buf, 0, HTTP_API_REPLY_MAX };

        out_str(&o, "{\"error\":");
        out_json_string(&o, code, strlen(code));
        if (reason) {
                out_str(&o, ",\"reason\":");
                out_json_string(&o, reason, strnlen(reason, PROTO_REPLY_V2_MAX));
        }
        out_str(&o, "}");
        return o.len;
}

static void out_rule_list(Out *o, const ProtoRuleRef *refs, size_t n) {
        size_t start = o->len;
        char name[PROTO_LABEL_MAX + 1];

        out_raw(o, "[", 1);
        for (size_t i = 0; i < n; i++) {
                if (o->len - start > PROTO_RULE_LIST_MAX) {
                        out_str(o, i ? ",\"...\"" : "\"...\"");
                        break;
                }
                if (i)
                        out_raw(o, ",", 1);
                http_api_rule_name(&refs[i], name);
                out_json_string(o, name, strlen(name));
        }
        out_raw(o, "]", 1);
}

size_t http_api_format_explain(char *buf, const ProtoExplain *e) {
        Out o = { buf, 0, HTTP_API_EXPLAIN_MAX };
        char name[PROTO_LABEL_MAX + 1];

        out_str(&o, "{\"rule\":");
        http_api_rule_name(&e->rule, name);
        out_json_string(&o, name, strlen(name));
        out_str(&o, ",\"index\":");
        out_u64(&o, e->rule.index);
        out_str(&o, ",\"policy\":");
        out_json_string(&o, e->policy, strnlen(e->policy, PROTO_NAME_MAX));
        out_str(&o, ",\"actor\":");
        if (e->actor.ptr) {
                size_t len = e->actor.len;
                if (len > PROTO_ACTOR_TEXT_MAX) /* cut as the line protocol does, never in a character */
                        len = PROTO_ACTOR_TEXT_MAX;
                while (len < e->actor.len && len > 0 && ((unsigned char) e->actor.ptr[len] & 0xC0) == 0x80)
                        len--;
                out_json_string(&o, e->actor.ptr, len);
                if (len < e->actor.len)
                        out_str(&o, ",\"actor_cut\":true");
        } else
                out_str(&o, "null");
        out_str(&o, ",\"algorithm\":");
        out_json_string(&o, e->algorithm, strnlen(e->algorithm, PROTO_NAME_MAX));
        out_str(&o, ",\"canaries\":");
        out_rule_list(&o, e->canaries, e->n_canaries);
        out_str(&o, ",\"continue\":");
        out_rule_list(&o, e->continues, e->n_continues);
        out_str(&o, "}");
        return o.len;
}

const char *http_api_envoy_unit(uint64_t seconds) {
        switch (seconds) {
        case 1:
                return "SECOND";
        case 60:
                return "MINUTE";
        case 3600:
                return "HOUR";
        case 86400:
                return "DAY";
        case 7 * 86400:
                return "WEEK";
        case 30 * 86400:
                return "MONTH";
        case 365 * 86400:
                return "YEAR";
        default:
                return NULL;
        }
}

size_t http_api_format_envoy_status(char *buf, const RlsStatus *s) {
        Out o = { buf, 0, HTTP_API_ENVOY_STATUS_MAX };
        const char *unit = http_api_envoy_unit(s->window_seconds);
        const char *sep = "";

        out_str(&o, s->over_limit ? "{\"code\":\"OVER_LIMIT\"" : "{\"code\":\"OK\"");
        if (s->has_limit) {
                out_str(&o, ",\"currentLimit\":{");
                if (s->requests_per_unit > 0) {
                        out_str(&o, "\"requestsPerUnit\":");
                        out_u64(&o, s->requests_per_unit > UINT32_MAX ? UINT32_MAX : s->requests_per_unit);
                        sep = ",";
                }
                if (unit) {
                        out_str(&o, sep);
                        out_str(&o, "\"unit\":\"");
                        out_str(&o, unit);
                        out_str(&o, "\"");
                        sep = ",";
                }
                if (s->name && s->name[0]) {
                        out_str(&o, sep);
                        out_str(&o, "\"name\":");
                        out_json_string(&o, s->name, strnlen(s->name, PROTO_LABEL_MAX));
                }
                out_str(&o, "}");
        }
        if (s->remaining > 0) {
                out_str(&o, ",\"limitRemaining\":");
                out_u64(&o, s->remaining > UINT32_MAX ? UINT32_MAX : s->remaining);
        }
        if (s->reset_seconds > 0) {
                out_str(&o, ",\"durationUntilReset\":\"");
                out_u64(&o, s->reset_seconds);
                out_str(&o, "s\"");
        }
        out_str(&o, "}");
        return o.len;
}
