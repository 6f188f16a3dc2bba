/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * redis-cluster.c: Redis Cluster routing, pure (no sockets, no logging). No client library for
 * Redis Cluster is packaged for Debian 12, so this is ours: the key's hash slot, the slot map
 * from a CLUSTER SLOTS reply, and the redirect errors (MOVED, ASK, TRYAGAIN, CLUSTERDOWN), as
 * the Redis Cluster specification defines them.
 *
 * The map keeps a list of nodes (primaries, "host:port") whose indices never change until
 * cluster_map_clear(): a rebuild from a new CLUSTER SLOTS reply or a MOVED reuses the index of
 * a node it already knows and appends the new ones, so the store can keep one connection per
 * node index. Nodes no longer serving any slot stay in the list (a cluster has few).
 * Looking a slot up (cluster_map_lookup()) is one array read: no allocation, no search.
 *
 * An empty host (or a RESP nil) in a reply means "the node that sent this reply": these
 * functions take that node's host as default_host and store it in its place. The host "?"
 * means an unknown endpoint (a node told to announce a hostname it has none of): its slots
 * stay unknown in a map, and a redirect to it is refused.
 */

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#define CLUSTER_SLOTS     16384  /* hash slots of a Redis Cluster (the specification's fixed number) */
#define CLUSTER_HOST_MAX  255    /* bytes of a host name or address: a DNS name's longest text */
#define CLUSTER_NODES_MAX 4096   /* nodes one map holds: Redis advises at most ~1000 nodes */
#define CLUSTER_NODE_NONE 0xFFFF /* slot_node[] of a slot no known node serves */

typedef struct ClusterNode {
        char host[CLUSTER_HOST_MAX + 1]; /* NUL-terminated; never empty in a map */
        uint16_t port;                   /* 1..65535 */
} ClusterNode;

typedef struct ClusterMap {
        ClusterNode *nodes;                /* owned; nodes[0..n_nodes), indices stable */
        size_t n_nodes, n_alloc;           /* used and allocated entries of nodes */
        uint16_t slot_node[CLUSTER_SLOTS]; /* index into nodes, or CLUSTER_NODE_NONE */
} ClusterMap;

typedef enum ClusterRedirect {
        CLUSTER_REDIRECT_NONE,        /* not a cluster error: the command's own error */
        CLUSTER_REDIRECT_MOVED,       /* the slot lives on node now: update the map, resend there */
        CLUSTER_REDIRECT_ASK,         /* migrating: resend to node once, after ASKING */
        CLUSTER_REDIRECT_TRYAGAIN,    /* multi-key command during a slot migration: retry later */
        CLUSTER_REDIRECT_CLUSTERDOWN, /* the cluster (or the slot) is not served: retry later */
        _CLUSTER_REDIRECT_MAX,
        _CLUSTER_REDIRECT_INVALID = -EINVAL,
} ClusterRedirect;

/* The hash slot of key[0..len): CRC16-XMODEM (polynomial 0x1021, initial 0) modulo 16384, of
 * the key's hash tag if it has one (the bytes between its first '{' and the first '}' after
 * it, when there is at least one), else of the whole key. */
uint16_t cluster_key_slot(const char *key, size_t len);

/* CRC16-XMODEM of buf[0..len) (exported for its test vector: "123456789" -> 0x31C3). */
uint16_t cluster_crc16(const char *buf, size_t len);

/* An empty map: no node, every slot unknown. */
void cluster_map_init(ClusterMap *m);

/* Frees the node list and empties the map (as cluster_map_init()). */
void cluster_map_clear(ClusterMap *m);

/* Replaces the map's slot table with the one a CLUSTER SLOTS reply r describes (RESP2: an array
 * of [start, end, [host, port, id?, ...], replicas...]; only the primary, the first node, is
 * kept). Slots the reply does not name become unknown; nodes are matched by host and port
 * with those already known, new ones appended. default_host replaces an empty or nil host.
 * Returns 0; -EPROTO if r is not such a reply (an error reply, a wrong type, a slot out of
 * range, start > end, a port outside 1..65535, a host longer than CLUSTER_HOST_MAX), -E2BIG
 * past CLUSTER_NODES_MAX nodes, -EINVAL if default_host is NULL, empty or too long, -ENOMEM.
 * On error the map is unchanged. */
int cluster_map_from_slots_reply(ClusterMap *m, const redisReply *r, const char *default_host);

/* The index of the node host:port in m's list, appending it if new (host[0..host_len), not
 * NUL-terminated). Returns the index; -EINVAL for an empty or too long host or port 0,
 * -E2BIG past CLUSTER_NODES_MAX nodes, -ENOMEM. */
int cluster_map_node_add(ClusterMap *m, const char *host, size_t host_len, uint16_t port);

/* The index of host:port in m's list, or -ENOENT. */
int cluster_map_node_find(const ClusterMap *m, const char *host, size_t host_len, uint16_t port);

/* Records that node (host:port, added if new) serves slot: what a MOVED says. Returns the
 * node's index, or cluster_map_node_add()'s error (the map unchanged); -EINVAL for a slot
 * >= CLUSTER_SLOTS. */
int cluster_map_set_slot(ClusterMap *m, uint16_t slot, const ClusterNode *node);

/* The index of the node serving slot, or -ENOENT when none is known (or slot is out of range). */
int cluster_map_lookup(const ClusterMap *m, uint16_t slot);

/* The node serving slot, or NULL when none is known. Valid until the next call that adds a node. */
const ClusterNode *cluster_map_node(const ClusterMap *m, uint16_t slot);

/* Parses the text of an error reply err[0..len) (hiredis's reply->str, without the '-'):
 *   "MOVED <slot> <host>:<port>", "ASK <slot> <host>:<port>"  -> *ret_slot and *ret_node set;
 *   "TRYAGAIN ...", "CLUSTERDOWN ..."                         -> neither set;
 *   anything else                                             -> CLUSTER_REDIRECT_NONE.
 * The port is after the host's last colon ("::1:6380" is host "::1"; "[::1]:6380" too); an
 * empty host means the node that replied: default_host is used. Returns the kind; -EPROTO for a
 * MOVED or ASK that does not have that form (slot >= 16384, port outside 1..65535, host "?",
 * too long, or empty without default_host, anything after the port). */
int cluster_parse_redirect(const char *err, size_t len, const char *default_host, uint16_t *ret_slot,
                           ClusterNode *ret_node);
