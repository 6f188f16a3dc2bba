/* SPDX-License-Identifier: MIT */
#include "store/redis-url.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/number.h"
#include "shared/macro.h"

static const struct {
        const char *prefix;
        RedisMode mode;
        bool unix_socket;
} schemes[] = {
        { "redis://", REDIS_MODE_SINGLE, false },
        { "redis+unix://", REDIS_MODE_SINGLE, true },
        { "redis+sentinel://", REDIS_MODE_SENTINEL, false },
        { "redis+cluster://", REDIS_MODE_CLUSTER, false },
};

bool redis_url_is_redis(const char *s) {
        for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
                if (strncmp(s, schemes[i].prefix, strlen(schemes[i].prefix)) == 0)
                        return true;
        return false;
}

/* Copies s[0..len) percent-decoded into out (size bytes); -EINVAL on a bad escape or too long. */
static int url_decode(const char *s, size_t len, char *out, size_t size) {
        size_t k = 0;

        for (size_t i = 0; i < len; i++) {
                char c = s[i];

                if (c == '%') {
                        int h, l;

                        if (i + 2 >= len)
                                return -EINVAL;
                        h = hex_digit_value(s[i + 1]);
                        l = hex_digit_value(s[i + 2]);
                        if (h < 0 || l < 0)
                                return -EINVAL;
                        c = (char) (h * 16 + l);
                        if (c == '\0')
                                return -EINVAL;
                        i += 2;
                }
                if (k + 1 >= size)
                        return -EINVAL;
                out[k++] = c;
        }
        out[k] = '\0';
        return 0;
}

#define URL_FAIL(...)                                                                                       \
        do {                                                                                                \
                if (errbuf)                                                                                 \
                        snprintf(errbuf, size, __VA_ARGS__);                                                \
                return -EINVAL;                                                                             \
        } while (0)

/* One "host[:port]" or "[v6][:port]" of s[0..len). */
static int parse_host(const char *s, size_t len, int default_port, RedisUrlHost *h, char *errbuf,
                      size_t size) {
        const char *host = s, *colon = NULL;
        size_t host_len;
        uint64_t port = (uint64_t) default_port;

        if (len > 0 && s[0] == '[') {
                const char *end = memchr(s, ']', len);

                if (!end)
                        URL_FAIL("'%.*s': no ']' after an IPv6 address", (int) len, s);
                host = s + 1;
                host_len = (size_t) (end - host);
                if ((size_t) (end + 1 - s) < len) {
                        if (end[1] != ':')
                                URL_FAIL("'%.*s': ':port' expected after ']'", (int) len, s);
                        colon = end + 1;
                }
        } else {
                colon = memchr(s, ':', len);
                host_len = colon ? (size_t) (colon - s) : len;
        }
        if (host_len == 0)
                URL_FAIL("'%.*s': empty host", (int) len, s);
        if (host_len > REDIS_URL_HOST_MAX)
                URL_FAIL("host too long (%zu bytes, at most %d)", host_len, REDIS_URL_HOST_MAX);
        if (colon && parse_uint64_n(colon + 1, (size_t) (s + len - colon - 1), 1, 65535, &port) < 0)
                URL_FAIL("'%.*s': bad port (1..65535)", (int) len, s);
        memcpy(h->host, host, host_len);
        h->host[host_len] = '\0';
        h->port = (int) port;
        return 0;
}

int redis_url_parse(const char *url, RedisUrl *ret, char *errbuf, size_t size) {
        RedisUrl u = { 0 };
        const char *p = NULL, *end, *at, *slash, *query, *hosts_end;
        bool unix_socket = false;
        int default_port = REDIS_DEFAULT_PORT, r;

        if (!url)
                URL_FAIL("no URL");
        for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
                if (strncmp(url, schemes[i].prefix, strlen(schemes[i].prefix)) == 0) {
                        p = url + strlen(schemes[i].prefix);
                        u.mode = schemes[i].mode;
                        unix_socket = schemes[i].unix_socket;
                }
        if (!p)
                URL_FAIL("'%s': unknown scheme (redis://, redis+unix://, redis+sentinel://, "
                         "redis+cluster://)",
                         url);
        end = p + strlen(p);
        query = strchr(p, '?');
        if (!query)
                query = end;

        /* ?db=N (unix, sentinel) */
        if (query < end) {
                uint64_t db;

                if (strncmp(query, "?db=", 4) != 0 || u.mode == REDIS_MODE_CLUSTER ||
                    (!unix_socket && u.mode == REDIS_MODE_SINGLE))
                        URL_FAIL("'%s': unknown query '%s' (only ?db=N, for redis+unix and redis+sentinel)",
                                 url, query);
                r = parse_uint64_n(query + 4, (size_t) (end - query - 4), 0, INT_MAX, &db);
                if (r < 0)
                        URL_FAIL("'%s': bad db number '%s'", url, query + 4);
                u.db = (int) db;
        }

        if (unix_socket) {
                size_t len = (size_t) (query - p);

                if (len == 0 || p[0] != '/')
                        URL_FAIL("'%s': redis+unix:// needs an absolute path (redis+unix:///run/redis.sock)",
                                 url);
                if (len >= sizeof(u.unix_path))
                        URL_FAIL("'%s': socket path too long (at most %zu bytes)", url,
                                 sizeof(u.unix_path) - 1);
                memcpy(u.unix_path, p, len);
                u.unix_path[len] = '\0';
                *ret = u;
                return 0;
        }

        /* [user:password@] */
        at = memchr(p, '@', (size_t) (query - p));
        if (at) {
                const char *colon = memchr(p, ':', (size_t) (at - p));

                if (colon) {
                        if (url_decode(p, (size_t) (colon - p), u.user, sizeof(u.user)) < 0 ||
                            url_decode(colon + 1, (size_t) (at - colon - 1), u.password,
                                       sizeof(u.password)) < 0)
                                URL_FAIL("'%s': bad user or password (percent-encoding, length)", url);
                } else if (url_decode(p, (size_t) (at - p), u.password, sizeof(u.password)) < 0)
                        URL_FAIL("'%s': bad password (percent-encoding, length)", url);
                p = at + 1;
        }

        /* hosts, then /db or /mastername */
        slash = memchr(p, '/', (size_t) (query - p));
        hosts_end = slash ? slash : query;
        if (u.mode == REDIS_MODE_SENTINEL)
                default_port = REDIS_SENTINEL_DEFAULT_PORT;
        for (const char *h = p; h <= hosts_end;) {
                const char *comma = memchr(h, ',', (size_t) (hosts_end - h));
                const char *e = comma ? comma : hosts_end;

                if (u.n_hosts == REDIS_URL_HOSTS_MAX)
                        URL_FAIL("'%s': more than %d hosts", url, REDIS_URL_HOSTS_MAX);
                r = parse_host(h, (size_t) (e - h), default_port, &u.hosts[u.n_hosts], errbuf, size);
                if (r < 0)
                        return r;
                u.n_hosts++;
                if (!comma)
                        break;
                h = comma + 1;
        }
        if (u.n_hosts > 1 && u.mode == REDIS_MODE_SINGLE)
                URL_FAIL(
                        "'%s': redis:// takes one host (redis+sentinel:// or redis+cluster:// take several)",
                        url);
        if (u.mode == REDIS_MODE_SENTINEL) {
                size_t len = slash ? (size_t) (query - slash - 1) : 0;

                if (len == 0)
                        URL_FAIL("'%s': the master's name is missing (redis+sentinel://host:port/mymaster)",
                                 url);
                if (len > REDIS_URL_NAME_MAX)
                        URL_FAIL("'%s': master name too long (at most %d bytes)", url, REDIS_URL_NAME_MAX);
                memcpy(u.master, slash + 1, len);
                u.master[len] = '\0';
        } else if (u.mode == REDIS_MODE_CLUSTER) {
                if (slash && slash + 1 < query)
                        URL_FAIL("'%s': a cluster has no database number (only db 0)", url);
        } else if (slash && slash + 1 < query) {
                uint64_t db;

                if (parse_uint64_n(slash + 1, (size_t) (query - slash - 1), 0, INT_MAX, &db) < 0)
                        URL_FAIL("'%s': bad db number '%.*s'", url, (int) (query - slash - 1), slash + 1);
                u.db = (int) db;
        }
        *ret = u;
        return 0;
}
