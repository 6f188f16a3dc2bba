/* SPDX-License-Identifier: MIT */
/*
 * libdivvy: the client side of the divvy line protocol (see divvy.h for the contract).
 *
 * Independent of the daemon's code: its own request formatter and reply parser, so the
 * installed library exports nothing but divvy_* and links nothing but libc.
 *
 * Data flow of a handle: divvy_send_hit() formats a request straight into `out`;
 * flushing writes `out` with non-blocking send() and, while the socket is not writable,
 * reads replies; every complete reply line is parsed at once into the `results` ring (a
 * valid server never sends more replies than requests, so the ring cannot overflow), and
 * only a partial line stays in `in`. divvy_read_result() pops the ring.
 */

#include "divvy.h"

#include "shared/clock.h"
#include "shared/limits.h"
#include "shared/macro.h"
#include "shared/utf8.h"

/* The installed header repeats the protocol's limits (it cannot include shared/): tie them. */
_Static_assert(DIVVY_PORT_DEFAULT == DIVVY_PROTO_PORT, "divvy.h and shared/limits.h disagree on the port");
_Static_assert(DIVVY_LINE_MAX == DIVVY_PROTO_LINE_MAX,
               "divvy.h and shared/limits.h disagree on the line limit");
_Static_assert(DIVVY_PAIRS_MAX == DIVVY_PROTO_PAIRS_MAX,
               "divvy.h and shared/limits.h disagree on the pair limit");
_Static_assert(DIVVY_COUNT_MAX == DIVVY_PROTO_COUNT_MAX,
               "divvy.h and shared/limits.h disagree on the count limit");

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define OUT_MAX                                                                                             \
        (16U * 1024U) /* bytes: requests queued before a write; two maximal lines fit,                      \
                       * many small ones go out in one send() */
#define REPLY_MAX                                                                                           \
        DIVVY_PROTO_REPLY_MAX /* bytes: longest reply line we accept (an EXPLAIN's); HIT's are <= 128 */
#define IN_MAX                                                                                              \
        (2U * REPLY_MAX) /* bytes: one recv(); complete lines are parsed out at once, so only               \
                          * a partial reply line (< REPLY_MAX) stays behind */
#define RAW_MAX    2     /* version 2 replies kept as lines during one call: HELLO's and the verb's */
#define ERROR_MAX  256   /* bytes: last_error, including the NUL */
#define CODE_MAX   64    /* bytes: server error code, including the NUL */
#define REASON_MAX 256   /* bytes: server error reason, including the NUL */
#define HOST_MAX   256   /* bytes: a DNS name is at most 253 */
#define PORT_MAX   8     /* bytes: "65535" and the NUL */

typedef enum AddressKind {
        ADDRESS_UNIX,
        ADDRESS_TCP,
} AddressKind;

struct divvy {
        AddressKind kind;
        struct sockaddr_un sun; /* ADDRESS_UNIX */
        socklen_t sun_len;
        char host[HOST_MAX]; /* ADDRESS_TCP, without brackets */
        char port[PORT_MAX];
        char address[HOST_MAX + 16]; /* for messages: "unix:/path" or "tcp:host:port" */

        int fd; /* -1 when not connected */
        uint64_t timeout_usec;

        /* Requests formatted but not fully written: out[out_off..out_len). n_queued counts
         * the requests in out[0..out_len) (all unwritten while out_off is 0). */
        char out[OUT_MAX];
        size_t out_len, out_off, n_queued;

        /* Partial reply line. */
        char in[IN_MAX];
        size_t in_len;

        /* Results parsed but not returned yet. */
        divvy_result results[DIVVY_PIPELINE_MAX];
        size_t ring_head, ring_count;

        /* Requests whose results the caller has not read: ring_count of them are in the ring,
         * the others are queued, on the wire, or (when broken != 0) failed. */
        size_t pending;
        /* A failure that all remaining pending results after the ring report: 0 or -errno.
         * err_first: the first of them is the ERR reply itself (-EPROTO), the rest -ECANCELED. */
        int broken;
        bool err_first;
        char broken_message[ERROR_MAX];

        char last_error[ERROR_MAX];
        char server_code[CODE_MAX];
        char server_reason[REASON_MAX];

        /* Version 2. A call of a new verb is synchronous (nothing else pending); while it runs,
         * raw_mode makes each OK reply a line in raw[] (in order) instead of a HIT result, and
         * the ring gets a placeholder so that the common reading path counts it. */
        bool raw_mode;
        size_t raw_count;
        char raw[RAW_MAX][REPLY_MAX];
        size_t raw_len[RAW_MAX];
        bool hello_ok;                    /* this connection answered HELLO with proto >= 2 */
        unsigned server_proto;            /* from the last HELLO reply: 0 before one */
        char server_name[DIVVY_NAME_MAX]; /* "server=" of the last HELLO reply */
};

/* ---- helpers ----------------------------------------------------------------------------- */

static int set_error(divvy *d, int r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set_error(divvy *d, int r, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        (void) vsnprintf(d->last_error, sizeof d->last_error, fmt, ap);
        va_end(ap);
        return r;
}

static const char *errno_text(int r, char *buf, size_t size) {
        /* GNU strerror_r (this file is built with _GNU_SOURCE): thread-safe, may ignore buf. */
        return strerror_r(r < 0 ? -r : r, buf, size);
}

/* Deadline for one call: UINT64_MAX when the timeout is 0 (none) or too large to add to the
 * clock (it would wrap into the past and time out before the first wait). */
static uint64_t deadline_of(const divvy *d) {
        uint64_t now;

        if (d->timeout_usec == 0)
                return UINT64_MAX;
        now = clock_usec(CLOCK_MONOTONIC);
        if (d->timeout_usec >= UINT64_MAX - now)
                return UINT64_MAX;
        return now + d->timeout_usec;
}

/* Waits for events on d->fd until deadline. Returns the revents, or -ETIMEDOUT, or -errno. */
static int wait_fd(divvy *d, short events, uint64_t deadline) {
        struct pollfd pfd = { .fd = d->fd, .events = events };
        uint64_t now, left_ms;
        int n;

        for (;;) {
                if (deadline == UINT64_MAX)
                        n = poll(&pfd, 1, -1);
                else {
                        now = clock_usec(CLOCK_MONOTONIC);
                        if (now >= deadline)
                                return -ETIMEDOUT;
                        left_ms = (deadline - now + 999) / 1000; /* round up: never spin at 0 */
                        n = poll(&pfd, 1, left_ms > INT32_MAX ? INT32_MAX : (int) left_ms);
                }
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n > 0)
                        return pfd.revents;
        }
}

static void close_fd(divvy *d) {
        if (d->fd >= 0)
                (void) close(d->fd);
        d->fd = -1;
        d->in_len = 0;
        d->hello_ok = false; /* HELLO is per connection */
}

/* ---- addresses --------------------------------------------------------------------------- */

static int parse_unix(divvy *d, const char *path) {
        size_t len = strlen(path);

        if (len == 0)
                return -EINVAL;
        if (len >= sizeof d->sun.sun_path)
                return -ENAMETOOLONG;
        d->kind = ADDRESS_UNIX;
        d->sun.sun_family = AF_UNIX;
        memcpy(d->sun.sun_path, path, len + 1);
        d->sun_len = (socklen_t) (offsetof(struct sockaddr_un, sun_path) + len + 1);
        (void) snprintf(d->address, sizeof d->address, "unix:%s", path);
        return 0;
}

/* "host", "host:port", "[v6]", "[v6]:port". */
static int parse_tcp(divvy *d, const char *s) {
        const char *host = s, *host_end, *port = NULL;
        size_t host_len, port_len;
        unsigned long v;
        char *end;

        if (*s == '[') {
                host = s + 1;
                host_end = strchr(host, ']');
                if (!host_end)
                        return -EINVAL;
                if (host_end[1] == ':')
                        port = host_end + 2;
                else if (host_end[1] != '\0')
                        return -EINVAL;
        } else {
                host_end = strchr(s, ':');
                if (host_end) {
                        if (strchr(host_end + 1, ':'))
                                return -EINVAL; /* a bare IPv6 address needs brackets */
                        port = host_end + 1;
                } else
                        host_end = s + strlen(s);
        }

        host_len = (size_t) (host_end - host);
        if (host_len == 0 || host_len >= sizeof d->host)
                return -EINVAL;
        for (const char *p = host; p < host_end; p++)
                if (*p <= ' ' || *p == '/' || (unsigned char) *p >= 0x7f)
                        return -EINVAL;

        if (port) {
                port_len = strlen(port);
                if (port_len == 0 || port_len >= sizeof d->port || port[0] < '0' || port[0] > '9')
                        return -EINVAL;
                errno = 0;
                v = strtoul(port, &end, 10);
                if (errno != 0 || *end != '\0' || v == 0 || v > 65535)
                        return -EINVAL;
                (void) snprintf(d->port, sizeof d->port, "%lu", v);
        } else
                (void) snprintf(d->port, sizeof d->port, "%d", DIVVY_PORT_DEFAULT);

        memcpy(d->host, host, host_len);
        d->host[host_len] = '\0';
        d->kind = ADDRESS_TCP;
        (void) snprintf(d->address, sizeof d->address, strchr(d->host, ':') ? "tcp:[%s]:%s" : "tcp:%s:%s",
                        d->host, d->port);
        return 0;
}

static int parse_address(divvy *d, const char *address) {
        if (strncmp(address, "unix:", 5) == 0)
                return parse_unix(d, address + 5);
        if (address[0] == '/')
                return parse_unix(d, address);
        if (strncmp(address, "tcp:", 4) == 0)
                return parse_tcp(d, address + 4);
        return parse_tcp(d, address);
}

/* ---- lifecycle --------------------------------------------------------------------------- */

int divvy_new(const char *address, divvy **ret) {
        divvy *d;
        int r;

        if (!address || !ret)
                return -EINVAL;

        d = calloc(1, sizeof *d);
        if (!d)
                return -ENOMEM;
        d->fd = -1;
        d->timeout_usec = DIVVY_TIMEOUT_DEFAULT_USEC;

        r = parse_address(d, address);
        if (r < 0) {
                free(d);
                return r;
        }
        *ret = d;
        return 0;
}

divvy *divvy_free(divvy *d) {
        if (!d)
                return NULL;
        close_fd(d);
        free(d);
        return NULL;
}

int divvy_set_timeout(divvy *d, uint64_t usec) {
        if (!d)
                return -EINVAL;
        d->timeout_usec = usec;
        return 0;
}

const char *divvy_last_error(const divvy *d) {
        return d ? d->last_error : "";
}

const char *divvy_server_error_code(const divvy *d) {
        return d ? d->server_code : "";
}

const char *divvy_server_error_reason(const divvy *d) {
        return d ? d->server_reason : "";
}

size_t divvy_pending(const divvy *d) {
        return d ? d->pending : 0;
}

const char *divvy_version(void) {
        return PACKAGE_VERSION;
}

/* ---- connecting -------------------------------------------------------------------------- */

/* Non-blocking connect of a fresh socket to one address, bounded by deadline. */
static int connect_one(divvy *d, int family, const struct sockaddr *sa, socklen_t len, uint64_t deadline) {
        int fd, r, err = 0, one = 1;
        socklen_t err_len = sizeof err;

        fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        if (family != AF_UNIX)
                (void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* replies are small */

        d->fd = fd;
        if (connect(fd, sa, len) == 0)
                return 0;
        /* A Unix socket with a full backlog says EAGAIN: unlike TCP's EINPROGRESS, nothing is
         * under way (the socket even polls writable, unconnected), so try again, pausing 1 to
         * 16 ms, until the backlog frees or the deadline passes. */
        for (unsigned pause_ms = 1; family == AF_UNIX && errno == EAGAIN;
             pause_ms = pause_ms < 16 ? pause_ms * 2 : 16) {
                uint64_t now = clock_usec(CLOCK_MONOTONIC);

                if (now >= deadline) {
                        close_fd(d);
                        return -ETIMEDOUT;
                }
                (void) poll(NULL, 0, deadline - now < pause_ms * 1000ULL ? 1 : (int) pause_ms);
                if (connect(fd, sa, len) == 0)
                        return 0;
        }
        if (errno != EINPROGRESS && errno != EAGAIN && errno != EINTR) {
                r = -errno;
                close_fd(d);
                return r;
        }
        r = wait_fd(d, POLLOUT, deadline);
        if (r >= 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) < 0)
                r = -errno;
        else if (r >= 0 && err != 0)
                r = -err;
        if (r < 0) {
                close_fd(d);
                return r;
        }
        return 0;
}

static int do_connect(divvy *d, uint64_t deadline) {
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
        struct addrinfo *list = NULL;
        char buf[128];
        int r;

        if (d->fd >= 0)
                return 0;

        if (d->kind == ADDRESS_UNIX)
                r = connect_one(d, AF_UNIX, (const struct sockaddr *) &d->sun, d->sun_len, deadline);
        else {
                r = getaddrinfo(d->host, d->port, &hints, &list);
                if (r != 0)
                        return set_error(d, -EHOSTUNREACH, "Failed to resolve %s: %s", d->address,
                                         r == EAI_SYSTEM ? errno_text(errno, buf, sizeof buf)
                                                         : gai_strerror(r));
                r = -EHOSTUNREACH;
                for (struct addrinfo *ai = list; ai; ai = ai->ai_next) {
                        r = connect_one(d, ai->ai_family, ai->ai_addr, ai->ai_addrlen, deadline);
                        if (r >= 0 || r == -ETIMEDOUT)
                                break;
                }
                freeaddrinfo(list);
        }
        if (r < 0)
                return set_error(d, r, "Failed to connect to %s: %s", d->address,
                                 r == -ETIMEDOUT ? "timed out" : errno_text(r, buf, sizeof buf));
        return 0;
}

int divvy_connect(divvy *d) {
        if (!d)
                return -EINVAL;
        return do_connect(d, deadline_of(d));
}

/* ---- requests ---------------------------------------------------------------------------- */

/* Checks s and returns its wire length (with quotes when needed) or a negative errno with
 * *ret_why set. */
static ssize_t string_wire_len(const char *s, const char **ret_why) {
        const unsigned char *p = (const unsigned char *) s, *end = p + strlen(s);
        bool quote = *p == '\0';
        size_t n;

        while (*p) {
                if (*p == '"') {
                        *ret_why = "contains '\"', which the protocol cannot carry";
                        return -EINVAL;
                }
                if (*p < 0x20 && *p != '\t') {
                        *ret_why = *p == '\n' || *p == '\r'
                                           ? "contains a line break, which the protocol cannot carry"
                                           : "contains a control character";
                        return -EINVAL;
                }
                if (*p >= 0x80) {
                        n = utf8_sequence_len(p, end);
                        if (n == 0) {
                                *ret_why = "is not valid UTF-8";
                                return -EINVAL;
                        }
                        p += n;
                        quote = true; /* divvy's own parser treats Unicode spaces as blanks */
                        continue;
                }
                if (*p == ' ' || *p == '\t' || *p == '=')
                        quote = true;
                p++;
        }
        return (ssize_t) ((size_t) (p - (const unsigned char *) s) + (quote ? 2 : 0));
}

bool divvy_string_is_valid(const char *s, bool is_key) {
        const char *why;

        if (!s || (is_key && *s == '\0'))
                return false;
        return string_wire_len(s, &why) >= 0;
}

/* A key's wire length: string_wire_len(), and quoted when it starts with '@' in a request of a
 * version 2 verb, where divvyd reads an unquoted "@..." after the count as a client timestamp
 * ("TAKE 1 @user=x" is ERR bad-time) while "@user"=x is the key @user. HIT has no timestamp,
 * and its bytes stay as they always were. */
static ssize_t key_wire_len(const char *key, bool v2, const char **ret_why) {
        ssize_t n = string_wire_len(key, ret_why);

        if (n >= 0 && v2 && key[0] == '@' && (size_t) n == strlen(key))
                n += 2;
        return n;
}

static bool is_v2_head(const char *head) {
        return strcmp(head, "HIT") != 0;
}

static char *put_string(char *p, const char *s, size_t wire_len) {
        size_t len = strlen(s);
        bool quote = wire_len != len;

        if (quote)
                *p++ = '"';
        memcpy(p, s, len);
        p += len;
        if (quote)
                *p++ = '"';
        return p;
}

/* Validates the pairs; returns the length of the request "<head> pairs...\n" (head: "HIT",
 * "TAKE 5", ...), or a negative errno. */
static ssize_t request_len(divvy *d, const char *head, const divvy_pair *pairs, size_t n_pairs) {
        size_t total = strlen(head);
        bool v2 = is_v2_head(head);
        const char *why = NULL;
        ssize_t k, v;

        if (n_pairs > 0 && !pairs)
                return set_error(d, -EINVAL, "Invalid argument: pairs is NULL");
        if (n_pairs > DIVVY_PAIRS_MAX)
                return set_error(d, -E2BIG, "Too many pairs: %zu (at most %d)", n_pairs, DIVVY_PAIRS_MAX);

        for (size_t i = 0; i < n_pairs; i++) {
                if (!pairs[i].key || !pairs[i].value)
                        return set_error(d, -EINVAL, "Invalid argument: pair %zu has a NULL key or value",
                                         i);
                if (pairs[i].key[0] == '\0')
                        return set_error(d, -EINVAL, "Invalid key in pair %zu: empty", i);
                k = key_wire_len(pairs[i].key, v2, &why);
                if (k < 0)
                        return set_error(d, (int) k, "Invalid key '%.64s': %s", pairs[i].key, why);
                v = string_wire_len(pairs[i].value, &why);
                if (v < 0)
                        return set_error(d, (int) v, "Invalid value for key '%.64s': %s", pairs[i].key, why);
                total += 1 + (size_t) k + 1 + (size_t) v;
                if (total > DIVVY_LINE_MAX)
                        return set_error(d, -E2BIG, "Request longer than %d bytes", DIVVY_LINE_MAX);
        }
        return (ssize_t) (total + 1);
}

static void format_request(char *p, const char *head, const divvy_pair *pairs, size_t n_pairs) {
        size_t head_len = strlen(head);
        bool v2 = is_v2_head(head);
        const char *why;

        memcpy(p, head, head_len);
        p += head_len;
        for (size_t i = 0; i < n_pairs; i++) {
                *p++ = ' ';
                p = put_string(p, pairs[i].key, (size_t) key_wire_len(pairs[i].key, v2, &why));
                *p++ = '=';
                p = put_string(p, pairs[i].value, (size_t) string_wire_len(pairs[i].value, &why));
        }
        *p = '\n';
}

/* ---- replies ----------------------------------------------------------------------------- */

/* Marks the connection failed: it is closed, and every pending result that is not in the
 * ring reports r (err_first: the first of them reports the ERR reply). Returns r. */
static int fail_connection(divvy *d, int r, bool err_first) {
        close_fd(d);
        d->out_len = d->out_off = d->n_queued = 0;
        if (d->pending > d->ring_count) {
                d->broken = r;
                d->err_first = err_first;
                memcpy(d->broken_message, d->last_error, sizeof d->broken_message);
        }
        return r;
}

static bool parse_u64(const char *s, size_t len, uint64_t *ret) {
        uint64_t v = 0;

        if (len == 0 || len > 20)
                return false;
        for (size_t i = 0; i < len; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return false;
                if (v > (UINT64_MAX - (uint64_t) (s[i] - '0')) / 10)
                        return false;
                v = v * 10 + (uint64_t) (s[i] - '0');
        }
        *ret = v;
        return true;
}

/* An optional '-' and decimal digits, within int64_t (INT64_MIN included). */
static bool parse_i64(const char *s, size_t len, int64_t *ret) {
        bool negative = len > 0 && s[0] == '-';
        uint64_t v;

        if (!parse_u64(s + negative, len - negative, &v) || v > (uint64_t) INT64_MAX + negative)
                return false;
        *ret = negative ? (int64_t) (UINT64_C(0) - v) : (int64_t) v;
        return true;
}

/* Splits line into at most max blank-separated tokens; returns how many, or max + 1 when
 * there are more. */
static size_t split(const char *line, size_t len, const char **tok, size_t *tok_len, size_t max) {
        size_t n = 0, i = 0, start;

        for (;;) {
                while (i < len && (line[i] == ' ' || line[i] == '\t'))
                        i++;
                if (i >= len)
                        return n;
                if (n == max)
                        return max + 1;
                start = i;
                while (i < len && line[i] != ' ' && line[i] != '\t')
                        i++;
                tok[n] = line + start;
                tok_len[n++] = i - start;
        }
}

static void copy_text(char *dst, size_t size, const char *src, size_t len) {
        if (len >= size)
                len = size - 1;
        memcpy(dst, src, len);
        dst[len] = '\0';
        for (size_t i = 0; i < len; i++) /* keep messages on one printable line */
                if ((unsigned char) dst[i] < 0x20)
                        dst[i] = '?';
}

/* Parses one reply line (without "\n"). Returns 0 for an OK reply (stored in the ring),
 * -EPROTO for an ERR reply, -EBADMSG for anything else. */
static int parse_reply(divvy *d, const char *line, size_t len) {
        const char *tok[4];
        size_t tok_len[4], n, i;
        divvy_result res;

        if (len > 0 && line[len - 1] == '\r')
                len--;

        if (len >= 3 && memcmp(line, "ERR", 3) == 0 && (len == 3 || line[3] == ' ' || line[3] == '\t')) {
                for (i = 3; i < len && (line[i] == ' ' || line[i] == '\t'); i++)
                        ;
                n = i;
                while (i < len && line[i] != ' ' && line[i] != '\t')
                        i++;
                copy_text(d->server_code, sizeof d->server_code, line + n, i - n);
                while (i < len && (line[i] == ' ' || line[i] == '\t'))
                        i++;
                n = len;
                if (n - i >= 2 && line[i] == '"' && line[n - 1] == '"') {
                        i++;
                        n--;
                }
                copy_text(d->server_reason, sizeof d->server_reason, line + i, n - i);
                return set_error(d, -EPROTO, "Server error: %s%s%s", d->server_code,
                                 d->server_reason[0] ? ": " : "", d->server_reason);
        }

        if (d->raw_mode) {
                /* A version 2 reply: kept whole, parsed by the verb's call. */
                if (len < 2 || memcmp(line, "OK", 2) != 0 ||
                    (len > 2 && line[2] != ' ' && line[2] != '\t') || d->raw_count >= RAW_MAX ||
                    len >= REPLY_MAX)
                        goto bad;
                memcpy(d->raw[d->raw_count], line, len);
                d->raw[d->raw_count][len] = '\0';
                d->raw_len[d->raw_count++] = len;
                d->results[(d->ring_head + d->ring_count) % DIVVY_PIPELINE_MAX] = (divvy_result){};
                d->ring_count++;
                return 0;
        }

        n = split(line, len, tok, tok_len, 4);
        if (n != 4 || tok_len[0] != 2 || memcmp(tok[0], "OK", 2) != 0)
                goto bad;
        if (tok_len[1] == 4 && memcmp(tok[1], "true", 4) == 0)
                res.allowed = true;
        else if (tok_len[1] == 5 && memcmp(tok[1], "false", 5) == 0)
                res.allowed = false;
        else
                goto bad;
        if (!parse_u64(tok[2], tok_len[2], &res.credit))
                goto bad;
        if (!parse_i64(tok[3], tok_len[3], &res.reset_seconds))
                goto bad;

        d->results[(d->ring_head + d->ring_count) % DIVVY_PIPELINE_MAX] = res;
        d->ring_count++;
        return 0;

bad:
        copy_text(d->server_reason, sizeof d->server_reason, line, len);
        return set_error(d, -EBADMSG, "Unexpected reply from %s: '%.80s'", d->address, d->server_reason);
}

/* Requests written (at least partly) whose replies have not arrived. */
static size_t awaiting(const divvy *d) {
        size_t unsent = d->out_off == 0 ? d->n_queued : 0;

        return d->pending - d->ring_count - unsent;
}

/* One recv() and the parsing of every complete line in it. Returns 1 if bytes were read, 0 if
 * none were ready, or a negative errno after failing the connection. */
static int receive(divvy *d) {
        char buf[128];
        char *nl, *line;
        ssize_t n;
        size_t used;
        int r;

        n = recv(d->fd, d->in + d->in_len, sizeof d->in - d->in_len, MSG_DONTWAIT);
        if (n < 0 && errno == ECONNRESET)
                /* The server closed with our request unread (e.g. after "ERR ... too many
                 * connections"): the error is reported once, what it sent before is still
                 * queued behind it. */
                n = recv(d->fd, d->in + d->in_len, sizeof d->in - d->in_len, MSG_DONTWAIT);
        if (n < 0) {
                if (errno == EAGAIN || errno == EINTR)
                        return 0;
                r = -errno;
                set_error(d, r == -EPIPE ? -ECONNRESET : r,
                          "Connection to %s failed: %s; the request may have been executed", d->address,
                          errno_text(r, buf, sizeof buf));
                return fail_connection(d, r == -EPIPE ? -ECONNRESET : r, false);
        }
        if (n == 0) {
                set_error(d, -ECONNRESET,
                          "Connection closed by %s before the reply; the request may have been executed",
                          d->address);
                return fail_connection(d, -ECONNRESET, false);
        }
        d->in_len += (size_t) n;

        line = d->in;
        used = 0;
        while ((nl = memchr(line, '\n', d->in_len - used))) {
                if (awaiting(d) == 0) {
                        set_error(d, -EBADMSG, "Unexpected reply from %s without a request", d->address);
                        return fail_connection(d, -EBADMSG, false);
                }
                r = parse_reply(d, line, (size_t) (nl - line));
                if (r == -EPROTO)
                        return fail_connection(d, -EPROTO, true); /* the server closes too */
                if (r < 0)
                        return fail_connection(d, r, false);
                used += (size_t) (nl - line) + 1;
                line = nl + 1;
        }
        d->in_len -= used;
        memmove(d->in, d->in + used, d->in_len);
        if (d->in_len > REPLY_MAX) {
                set_error(d, -EBADMSG, "Reply from %s longer than %d bytes", d->address, REPLY_MAX);
                return fail_connection(d, -EBADMSG, false);
        }
        return 1;
}

/* True if the server closed an idle connection (or it broke): then it must be replaced. Only
 * called when no request is awaiting a reply, so any byte or EOF here is not an answer. */
static bool connection_is_dead(divvy *d) {
        char c;
        ssize_t n;

        n = recv(d->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n < 0)
                return errno != EAGAIN && errno != EINTR;
        return true; /* EOF, or an unsolicited byte (e.g. "too many connections") */
}

/* After a failed send(): true if the server explained why it closed with an ERR line (e.g.
 * "ERR unknown \"too many connections\"" sent right after accepting), now in last_error. */
static bool server_said_err(divvy *d) {
        char line[REPLY_MAX];
        char *nl;
        ssize_t n;

        n = recv(d->fd, line, sizeof line, MSG_DONTWAIT);
        if (n < 0 && errno == ECONNRESET)
                n = recv(d->fd, line, sizeof line, MSG_DONTWAIT); /* see receive() */
        if (n <= 0)
                return false;
        nl = memchr(line, '\n', (size_t) n);
        if (!nl || nl - line < 3 || memcmp(line, "ERR", 3) != 0)
                return false; /* only an ERR explains; an OK here would answer nothing */
        return parse_reply(d, line, (size_t) (nl - line)) == -EPROTO;
}

/* Writes every queued request, reading replies while the socket is not writable. */
static int flush(divvy *d, uint64_t deadline) {
        bool retried = false;
        char buf[128];
        ssize_t n;
        int r;

        if (d->out_len == 0)
                return 0;

        if (d->fd >= 0 && awaiting(d) == 0 && connection_is_dead(d))
                close_fd(d); /* nothing of ours is on it: reconnecting is safe */

        while (d->out_off < d->out_len) {
                if (d->fd < 0) {
                        r = do_connect(d, deadline);
                        if (r < 0) /* nothing was sent: the requests were not executed */
                                return fail_connection(d, r, false);
                }

                n = send(d->fd, d->out + d->out_off, d->out_len - d->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n >= 0) {
                        d->out_off += (size_t) n;
                        continue;
                }
                if (errno == EINTR)
                        continue;
                if (errno == EAGAIN) {
                        r = wait_fd(d, POLLOUT | POLLIN, deadline);
                        if (r == -ETIMEDOUT) {
                                set_error(d, r, "Timed out sending to %s", d->address);
                                return fail_connection(d, r, false);
                        }
                        if (r < 0) {
                                set_error(d, r, "poll() failed: %s", errno_text(r, buf, sizeof buf));
                                return fail_connection(d, r, false);
                        }
                        if (r & (POLLIN | POLLHUP | POLLERR)) {
                                r = receive(d);
                                if (r < 0)
                                        return r;
                        }
                        continue;
                }

                r = -errno;
                if ((r == -EPIPE || r == -ECONNRESET) && awaiting(d) > 0) {
                        /* The server closed, maybe after answering some of the requests written
                         * (and refusing one with ERR): those replies are in the socket. Read them,
                         * so that their results are kept and an ERR is reported as one (the rest
                         * -ECANCELED), until receive() fails the connection at its end. */
                        while ((n = receive(d)) > 0)
                                ;
                        if (n < 0)
                                return (int) n;
                }
                if ((r == -EPIPE || r == -ECONNRESET) && server_said_err(d))
                        return fail_connection(d, -EPROTO, true);
                if ((r == -EPIPE || r == -ECONNRESET) && !retried && d->out_off == 0 && awaiting(d) == 0) {
                        /* Broken before any byte of ours went out: reconnect once. */
                        retried = true;
                        close_fd(d);
                        continue;
                }
                set_error(d, r, "Failed to send to %s: %s%s", d->address, errno_text(r, buf, sizeof buf),
                          d->out_off > 0 ? "; the request may have been executed" : "");
                return fail_connection(d, r == -EPIPE ? -ECONNRESET : r, false);
        }

        d->out_len = d->out_off = d->n_queued = 0;
        return 0;
}

int divvy_flush(divvy *d) {
        if (!d)
                return -EINVAL;
        return flush(d, deadline_of(d));
}

/* Queues "<head> pairs...\n". */
static int send_request(divvy *d, const char *head, const divvy_pair *pairs, size_t n_pairs) {
        ssize_t len;
        int r;

        if (d->broken != 0)
                return set_error(d, -EBUSY,
                                 "Results of failed requests are pending: read them before sending more");
        if (d->pending >= DIVVY_PIPELINE_MAX)
                return set_error(d, -ENOBUFS, "%d results pending: read some before sending more",
                                 DIVVY_PIPELINE_MAX);

        len = request_len(d, head, pairs, n_pairs);
        if (len < 0)
                return (int) len;

        if (sizeof d->out - d->out_len < (size_t) len) {
                r = flush(d, deadline_of(d));
                if (r < 0)
                        return r;
        }
        format_request(d->out + d->out_len, head, pairs, n_pairs);
        d->out_len += (size_t) len;
        d->n_queued++;
        d->pending++;
        return 0;
}

int divvy_send_hit(divvy *d, const divvy_pair *pairs, size_t n_pairs) {
        if (!d)
                return -EINVAL;
        if (d->raw_mode)
                return set_error(d, -EBUSY, "A version 2 request is in progress");
        return send_request(d, "HIT", pairs, n_pairs);
}

/* divvy_read_result() until deadline; 0: the handle's timeout from now. */
static int read_result(divvy *d, divvy_result *ret, uint64_t deadline) {
        int r;

        if (d->pending == 0)
                return set_error(d, -ENOMSG, "No result pending");

        if (d->ring_count == 0 && d->broken == 0) {
                if (deadline == 0)
                        deadline = deadline_of(d);
                r = flush(d, deadline);
                while (r >= 0 && d->ring_count == 0) {
                        r = wait_fd(d, POLLIN, deadline);
                        if (r == -ETIMEDOUT) {
                                set_error(d, r, "Timed out waiting for a reply from %s", d->address);
                                r = fail_connection(d, r, false);
                        } else if (r < 0)
                                r = fail_connection(d, r, false);
                        else
                                r = receive(d);
                }
        }

        if (d->ring_count > 0) {
                *ret = d->results[d->ring_head];
                d->ring_head = (d->ring_head + 1) % DIVVY_PIPELINE_MAX;
                d->ring_count--;
                d->pending--;
                return 0;
        }

        /* broken != 0 here: report the failure for this request. */
        r = d->broken;
        d->pending--;
        if (d->err_first) {
                d->err_first = false;
                (void) set_error(d, -EPROTO, "%s", d->broken_message);
                r = -EPROTO;
                if (d->pending > 0) {
                        d->broken = -ECANCELED;
                        (void) snprintf(d->broken_message, sizeof d->broken_message,
                                        "Not executed: the server refused an earlier request on the "
                                        "connection (%s)",
                                        d->server_code);
                }
        } else
                (void) set_error(d, r, "%s", d->broken_message);
        if (d->pending == 0)
                d->broken = 0;
        return r;
}

int divvy_read_result(divvy *d, divvy_result *ret) {
        if (!d || !ret)
                return -EINVAL;
        return read_result(d, ret, 0);
}

int divvy_hit(divvy *d, const divvy_pair *pairs, size_t n_pairs, divvy_result *ret) {
        int r;

        if (!d || !ret)
                return -EINVAL;
        if (d->pending > 0)
                return set_error(d, -EBUSY, "%zu pipelined results pending: read them first", d->pending);
        r = divvy_send_hit(d, pairs, n_pairs);
        if (r < 0)
                return r;
        return divvy_read_result(d, ret);
}

int divvy_ping(divvy *d) {
        uint64_t deadline;
        char buf[128];
        int r;

        if (!d)
                return -EINVAL;
        if (d->pending > 0)
                return set_error(d, -EBUSY, "%zu pipelined results pending: read them first", d->pending);

        deadline = deadline_of(d);
        close_fd(d);
        r = do_connect(d, deadline);
        if (r < 0)
                return r;
        if (shutdown(d->fd, SHUT_WR) < 0) {
                r = -errno;
                set_error(d, r, "Failed to shut down the connection to %s: %s", d->address,
                          errno_text(r, buf, sizeof buf));
                close_fd(d);
                return r;
        }

        for (;;) {
                ssize_t n;

                r = wait_fd(d, POLLIN, deadline);
                if (r < 0) {
                        set_error(d, r, "%s did not answer: %s", d->address,
                                  r == -ETIMEDOUT ? "timed out" : errno_text(r, buf, sizeof buf));
                        break;
                }
                n = recv(d->fd, d->in + d->in_len, sizeof d->in - 1 - d->in_len, MSG_DONTWAIT);
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        continue;
                if (n < 0) {
                        r = -errno;
                        set_error(d, r, "Connection to %s failed: %s", d->address,
                                  errno_text(r, buf, sizeof buf));
                        break;
                }
                if (n == 0 && d->in_len == 0) {
                        r = 0; /* closed in turn, nothing said: alive */
                        break;
                }
                d->in_len += (size_t) n;
                if (n == 0 || d->in_len >= sizeof d->in - 1 || memchr(d->in, '\n', d->in_len)) {
                        char *nl = memchr(d->in, '\n', d->in_len);
                        size_t len = nl ? (size_t) (nl - d->in) : d->in_len;

                        r = parse_reply(d, d->in, len);
                        if (r == 0) { /* an OK without a request: not a divvy server */
                                d->ring_count = 0;
                                r = set_error(d, -EBADMSG, "Unexpected reply from %s without a request",
                                              d->address);
                        }
                        break;
                }
        }
        close_fd(d);
        return r;
}

/* ---- protocol version 2 ------------------------------------------------------------------ */

/* One key=value field of a version 2 reply. value excludes the quotes of a quoted value and
 * is still escaped. */
typedef struct Field {
        const char *key, *value;
        size_t key_len, value_len;
        bool quoted;
} Field;

/* Reads the field at *pp (blanks skipped). Returns 1 and moves *pp past it, 0 at the end of
 * the line, -1 if malformed (an unterminated quoted value). A token without '=' is returned
 * with key_len 0 (and ignored by the callers). */
static int next_field(const char **pp, const char *end, Field *f) {
        const char *p = *pp;

        while (p < end && (*p == ' ' || *p == '\t'))
                p++;
        if (p >= end)
                return 0;
        *f = (Field){ .key = p };
        while (p < end && *p != '=' && *p != ' ' && *p != '\t')
                p++;
        if (p >= end || *p != '=') {
                f->key_len = 0;
                *pp = p;
                return 1;
        }
        f->key_len = (size_t) (p - f->key);
        p++;
        if (p < end && *p == '"') {
                f->quoted = true;
                f->value = ++p;
                while (p < end && *p != '"')
                        p += *p == '\\' && p + 1 < end ? 2 : 1;
                if (p >= end)
                        return -1;
                f->value_len = (size_t) (p - f->value);
                p++;
        } else {
                f->value = p;
                while (p < end && *p != ' ' && *p != '\t')
                        p++;
                f->value_len = (size_t) (p - f->value);
        }
        *pp = p;
        return 1;
}

/* True if the whole reply line (after "OK") is a sequence of well-formed fields. */
static bool fields_ok(const char *line, size_t len) {
        const char *p = line + 2, *end = line + len;
        Field f;
        int r;

        while ((r = next_field(&p, end, &f)) > 0)
                ;
        return r == 0;
}

/* Finds key in the reply line (after "OK"). Returns 1 found, 0 absent, -1 malformed. */
static int get_field(const char *line, size_t len, const char *key, Field *ret) {
        const char *p = line + 2, *end = line + len;
        size_t key_len = strlen(key);
        Field f;
        int r;

        while ((r = next_field(&p, end, &f)) > 0)
                if (f.key_len == key_len && memcmp(f.key, key, key_len) == 0) {
                        *ret = f;
                        return 1;
                }
        return r;
}

static bool field_u64(const char *line, size_t len, const char *key, uint64_t *ret) {
        Field f;

        return get_field(line, len, key, &f) == 1 && !f.quoted && parse_u64(f.value, f.value_len, ret);
}

static bool field_i64(const char *line, size_t len, const char *key, int64_t *ret) {
        Field f;

        return get_field(line, len, key, &f) == 1 && !f.quoted && parse_i64(f.value, f.value_len, ret);
}

/* An unquoted text field copied into buf (NUL-terminated, cut to fit, controls as '?').
 * "-" is copied as "" when dash_empty. */
static bool field_text(const char *line, size_t len, const char *key, char *buf, size_t size,
                       bool dash_empty) {
        Field f;

        if (get_field(line, len, key, &f) != 1 || f.quoted)
                return false;
        if (dash_empty && f.value_len == 1 && f.value[0] == '-')
                f.value_len = 0;
        copy_text(buf, size, f.value, f.value_len);
        return true;
}

/* The actor field: "-" (no actorField) or a quoted, escaped text (see divvyd's protocol.h). */
static bool field_actor(const char *line, size_t len, divvy_explanation *e) {
        const char *p, *end;
        size_t n = 0;
        Field f;

        if (get_field(line, len, "actor", &f) != 1)
                return false;
        if (!f.quoted) {
                if (f.value_len != 1 || f.value[0] != '-')
                        return false;
                e->has_actor = false;
                return true;
        }
        e->has_actor = true;
        for (p = f.value, end = f.value + f.value_len; p < end && n + 1 < sizeof e->actor; p++) {
                if (*p != '\\') {
                        e->actor[n++] = *p;
                        continue;
                }
                if (++p >= end)
                        return false;
                if (*p == 't')
                        e->actor[n++] = '\t';
                else if (*p == 'x' && end - p > 2 && hex_digit_value(p[1]) >= 0 &&
                         hex_digit_value(p[2]) >= 0) {
                        e->actor[n++] = (char) (hex_digit_value(p[1]) * 16 + hex_digit_value(p[2]));
                        p += 2;
                } else if (*p == '.' && end - p == 3 && p[1] == '.' && p[2] == '.') {
                        e->actor_cut = true;
                        break;
                } else
                        e->actor[n++] = *p; /* \\, \", and escapes of later versions: the byte */
        }
        e->actor[n] = '\0';
        e->actor_len = n;
        return true;
}

static int bad_v2_reply(divvy *d, const char *line, size_t len) {
        copy_text(d->server_reason, sizeof d->server_reason, line, len);
        return set_error(d, -EBADMSG, "Unexpected reply from %s: '%.80s'", d->address, d->server_reason);
}

/* Takes the HELLO reply raw[0]. Returns 0, -EPROTONOSUPPORT or -EBADMSG. */
static int take_hello(divvy *d) {
        const char *line = d->raw[0];
        size_t len = d->raw_len[0];
        uint64_t proto;

        if (!field_u64(line, len, "proto", &proto) || proto > 1000)
                return bad_v2_reply(d, line, len);
        d->server_proto = (unsigned) proto;
        if (!field_text(line, len, "server", d->server_name, sizeof d->server_name, false))
                d->server_name[0] = '\0';
        if (proto < 2)
                return set_error(d, -EPROTONOSUPPORT, "%s speaks divvy protocol version %u, not 2",
                                 d->address, d->server_proto);
        /* Only if the connection is still the one HELLO went on: an ERR read in the same recv()
         * as this reply may have closed it already. */
        d->hello_ok = d->fd >= 0;
        return 0;
}

/* Reads the result of the request after a failed one, so that nothing stays pending; keeps
 * last_error. */
static void drain(divvy *d, uint64_t deadline) {
        char saved[ERROR_MAX];
        divvy_result ignored;

        memcpy(saved, d->last_error, sizeof saved);
        while (d->pending > 0)
                (void) read_result(d, &ignored, deadline);
        memcpy(d->last_error, saved, sizeof saved);
}

/* Sends "<head> pairs" (after HELLO if this connection has not had one) and waits for its
 * reply, the whole call bounded by one timeout (as one divvy_hit() is). Returns 0 with the OK line in
 * d->raw[d->raw_count - 1], or a negative errno. */
static int call_v2(divvy *d, const char *head, const divvy_pair *pairs, size_t n_pairs) {
        bool hello = strcmp(head, "HELLO") == 0, probe;
        uint64_t deadline = deadline_of(d); /* one for the call: HELLO's reply and the verb's */
        divvy_result ignored;
        ssize_t len;
        int r;

        if (d->pending > 0)
                return set_error(d, -EBUSY, "%zu pipelined results pending: read them first", d->pending);
        if (d->broken != 0)
                return set_error(d, -EBUSY, "Results of failed requests are pending: read them first");
        len = request_len(d, head, pairs, n_pairs); /* validate before anything is queued */
        if (len < 0)
                return (int) len;
        /* A connection the server closed meanwhile is replaced now, so that HELLO goes on the
         * connection the request goes on. */
        if (d->fd >= 0 && connection_is_dead(d))
                close_fd(d);
        probe = hello || !d->hello_ok;

        if (probe) { /* what an earlier HELLO said no longer holds, whatever this one says */
                d->server_proto = 0;
                d->server_name[0] = '\0';
        }
        d->raw_mode = true;
        d->raw_count = 0;
        r = probe ? send_request(d, "HELLO", NULL, 0) : 0;
        if (r >= 0 && !hello)
                r = send_request(d, head, pairs, n_pairs); /* in the same write as HELLO */
        if (r < 0)
                goto finish;

        if (probe) {
                r = read_result(d, &ignored, deadline);
                if (r == -EPROTO && strcmp(d->server_code, "unknown-command") == 0) {
                        r = set_error(
                                d, -EPROTONOSUPPORT,
                                "%s does not speak divvy protocol version 2 (it answered HELLO with "
                                "unknown-command): an old divvyd or divvy; %s needs divvyd with version 2",
                                d->address, head);
                        goto finish;
                }
                if (r >= 0)
                        r = fields_ok(d->raw[0], d->raw_len[0]) ? take_hello(d)
                                                                : bad_v2_reply(d, d->raw[0], d->raw_len[0]);
                if (r < 0 || hello)
                        goto finish;
        }
        r = read_result(d, &ignored, deadline);
        if (r >= 0 && !fields_ok(d->raw[d->raw_count - 1], d->raw_len[d->raw_count - 1]))
                r = bad_v2_reply(d, d->raw[d->raw_count - 1], d->raw_len[d->raw_count - 1]);

finish:
        if (d->pending > 0)
                drain(d, deadline);
        d->raw_mode = false;
        if (r == -EBADMSG || r == -EPROTONOSUPPORT)
                close_fd(d); /* the connection's state is unknown: never reuse it */
        return r;
}

int divvy_hello(divvy *d) {
        int r;

        if (!d)
                return -EINVAL;
        r = call_v2(d, "HELLO", NULL, 0);
        return r < 0 ? r : (int) d->server_proto;
}

const char *divvy_server_name(const divvy *d) {
        return d ? d->server_name : "";
}

static int decision(divvy *d, const char *verb, uint64_t n, uint64_t min, const divvy_pair *pairs,
                    size_t n_pairs, divvy_decision *ret) {
        char head[40];
        const char *line;
        size_t len;
        Field f;
        int r;

        if (!d)
                return -EINVAL;
        if (!ret)
                return set_error(d, -EINVAL, "Invalid argument: the result is NULL");
        if (n < min || n > DIVVY_COUNT_MAX)
                return set_error(d, -EINVAL, "Invalid count %" PRIu64 " for %s: expected %" PRIu64 "..%llu",
                                 n, verb, min, DIVVY_COUNT_MAX);
        (void) snprintf(head, sizeof head, "%s %" PRIu64, verb, n);
        r = call_v2(d, head, pairs, n_pairs);
        if (r < 0)
                return r;

        line = d->raw[d->raw_count - 1];
        len = d->raw_len[d->raw_count - 1];
        *ret = (divvy_decision){};
        if (get_field(line, len, "allowed", &f) != 1 || f.quoted ||
            !((f.value_len == 4 && memcmp(f.value, "true", 4) == 0) ||
              (f.value_len == 5 && memcmp(f.value, "false", 5) == 0)) ||
            !field_u64(line, len, "credit", &ret->credit) || !field_u64(line, len, "limit", &ret->limit) ||
            !field_u64(line, len, "reset", &ret->reset_seconds) ||
            !field_i64(line, len, "retry", &ret->retry_seconds) ||
            !field_text(line, len, "rule", ret->rule, sizeof ret->rule, false))
                return bad_v2_reply(d, line, len);
        ret->allowed = f.value_len == 4;
        return 0;
}

int divvy_take(divvy *d, uint64_t n, const divvy_pair *pairs, size_t n_pairs, divvy_decision *ret) {
        return decision(d, "TAKE", n, 1, pairs, n_pairs, ret);
}

int divvy_peek(divvy *d, uint64_t n, const divvy_pair *pairs, size_t n_pairs, divvy_decision *ret) {
        return decision(d, "PEEK", n, 0, pairs, n_pairs, ret);
}

int divvy_charge(divvy *d, uint64_t n, const divvy_pair *pairs, size_t n_pairs, divvy_decision *ret) {
        return decision(d, "CHARGE", n, 1, pairs, n_pairs, ret);
}

int divvy_refund(divvy *d, uint64_t n, const divvy_pair *pairs, size_t n_pairs, divvy_decision *ret) {
        return decision(d, "REFUND", n, 1, pairs, n_pairs, ret);
}

int divvy_reset(divvy *d, const divvy_pair *pairs, size_t n_pairs, uint64_t *ret_n) {
        uint64_t n;
        int r;

        if (!d)
                return -EINVAL;
        r = call_v2(d, "RESET", pairs, n_pairs);
        if (r < 0)
                return r;
        if (!field_u64(d->raw[d->raw_count - 1], d->raw_len[d->raw_count - 1], "reset", &n))
                return bad_v2_reply(d, d->raw[d->raw_count - 1], d->raw_len[d->raw_count - 1]);
        if (ret_n)
                *ret_n = n;
        return 0;
}

int divvy_explain(divvy *d, const divvy_pair *pairs, size_t n_pairs, divvy_explanation *ret) {
        const char *line;
        size_t len;
        int r;

        if (!d)
                return -EINVAL;
        if (!ret)
                return set_error(d, -EINVAL, "Invalid argument: the result is NULL");
        r = call_v2(d, "EXPLAIN", pairs, n_pairs);
        if (r < 0)
                return r;

        line = d->raw[d->raw_count - 1];
        len = d->raw_len[d->raw_count - 1];
        *ret = (divvy_explanation){};
        if (!field_text(line, len, "rule", ret->rule, sizeof ret->rule, false) ||
            !field_u64(line, len, "index", &ret->index) ||
            !field_text(line, len, "policy", ret->policy, sizeof ret->policy, false) ||
            !field_text(line, len, "algorithm", ret->algorithm, sizeof ret->algorithm, false) ||
            !field_actor(line, len, ret) ||
            !field_text(line, len, "canaries", ret->canaries, sizeof ret->canaries, true) ||
            !field_text(line, len, "continue", ret->continues, sizeof ret->continues, true))
                return bad_v2_reply(d, line, len);
        return 0;
}
