/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * redis-url.c: the --store URLs of the Redis/Valkey store (redis-store.h), parsed; pure (no
 * sockets, no name resolution, no logging).
 *
 *   redis://[[user:]password@]host:port[/db]      one server (a primary); host may be [v6]
 *   redis+unix:///path/to/redis.sock[?db=N]       one server on a Unix socket
 *   redis+sentinel://h1:p1[,h2:p2...]/mastername[?db=N]
 *                                                 the primary named mastername, asked of the
 *                                                 sentinels in order (user/password, as in
 *                                                 redis://, are the primary's; the sentinels
 *                                                 are asked without AUTH)
 *   redis+cluster://h1:p1[,h2:p2...]              a Redis Cluster: the nodes given are seeds
 * The port may be left out (6379; sentinels 26379).
 */

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

#define REDIS_URL_HOSTS_MAX         16  /* hosts of a sentinel or cluster URL */
#define REDIS_URL_HOST_MAX          255 /* bytes of one host */
#define REDIS_URL_SECRET_MAX        512 /* bytes of a user or a password */
#define REDIS_URL_NAME_MAX          128 /* bytes of a sentinel master name */
#define REDIS_DEFAULT_PORT          6379
#define REDIS_SENTINEL_DEFAULT_PORT 26379

typedef enum RedisMode {
        REDIS_MODE_SINGLE,   /* redis:// or redis+unix:// */
        REDIS_MODE_SENTINEL, /* redis+sentinel:// */
        REDIS_MODE_CLUSTER,  /* redis+cluster:// */
        _REDIS_MODE_MAX,
        _REDIS_MODE_INVALID = -EINVAL,
} RedisMode;

typedef struct RedisUrlHost {
        char host[REDIS_URL_HOST_MAX + 1]; /* without [] for IPv6 */
        int port;
} RedisUrlHost;

/* A parsed --store URL. */
typedef struct RedisUrl {
        RedisMode mode;
        char user[REDIS_URL_SECRET_MAX + 1];     /* "" : none */
        char password[REDIS_URL_SECRET_MAX + 1]; /* "" : none (percent-decoded, as user) */
        int db;                                  /* 0..(INT_MAX); not in cluster mode */
        char unix_path[108];                     /* redis+unix: the socket; else "" */
        RedisUrlHost hosts[REDIS_URL_HOSTS_MAX]; /* the server, the sentinels or the seeds */
        size_t n_hosts;
        char master[REDIS_URL_NAME_MAX + 1]; /* sentinel: the master's name */
} RedisUrl;

/* Parses url into ret. Returns 0, or -EINVAL with a sentence in errbuf (if non-NULL) naming what
 * is wrong: the scheme, a host, a port, the db, a missing master name, too many hosts. */
int redis_url_parse(const char *url, RedisUrl *ret, char *errbuf, size_t size);
/* Whether s starts with a scheme redis_url_parse() knows ("redis://", "redis+unix://", ...). */
bool redis_url_is_redis(const char *s);
