/* SPDX-License-Identifier: MIT */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/redis-cluster.h"

#include "core/number.h"

/* CRC16-XMODEM (CCITT polynomial 0x1021, initial value 0, no reflection), one byte at a time:
 * the table of the Redis Cluster specification (Appendix A), generated, not typed. */
static const uint16_t crc16_table[256] = {
        0x0000, 0x1021, 0x2042, 0x3063, 0x4084, 0x50a5, 0x60c6, 0x70e7, 0x8108, 0x9129, 0xa14a, 0xb16b,
        0xc18c, 0xd1ad, 0xe1ce, 0xf1ef, 0x1231, 0x0210, 0x3273, 0x2252, 0x52b5, 0x4294, 0x72f7, 0x62d6,
        0x9339, 0x8318, 0xb37b, 0xa35a, 0xd3bd, 0xc39c, 0xf3ff, 0xe3de, 0x2462, 0x3443, 0x0420, 0x1401,
        0x64e6, 0x74c7, 0x44a4, 0x5485, 0xa56a, 0xb54b, 0x8528, 0x9509, 0xe5ee, 0xf5cf, 0xc5ac, 0xd58d,
        0x3653, 0x2672, 0x1611, 0x0630, 0x76d7, 0x66f6, 0x5695, 0x46b4, 0xb75b, 0xa77a, 0x9719, 0x8738,
        0xf7df, 0xe7fe, 0xd79d, 0xc7bc, 0x48c4, 0x58e5, 0x6886, 0x78a7, 0x0840, 0x1861, 0x2802, 0x3823,
        0xc9cc, 0xd9ed, 0xe98e, 0xf9af, 0x8948, 0x9969, 0xa90a, 0xb92b, 0x5af5, 0x4ad4, 0x7ab7, 0x6a96,
        0x1a71, 0x0a50, 0x3a33, 0x2a12, 0xdbfd, 0xcbdc, 0xfbbf, 0xeb9e, 0x9b79, 0x8b58, 0xbb3b, 0xab1a,
        0x6ca6, 0x7c87, 0x4ce4, 0x5cc5, 0x2c22, 0x3c03, 0x0c60, 0x1c41, 0xedae, 0xfd8f, 0xcdec, 0xddcd,
        0xad2a, 0xbd0b, 0x8d68, 0x9d49, 0x7e97, 0x6eb6, 0x5ed5, 0x4ef4, 0x3e13, 0x2e32, 0x1e51, 0x0e70,
        0xff9f, 0xefbe, 0xdfdd, 0xcffc, 0xbf1b, 0xaf3a, 0x9f59, 0x8f78, 0x9188, 0x81a9, 0xb1ca, 0xa1eb,
        0xd10c, 0xc12d, 0xf14e, 0xe16f, 0x1080, 0x00a1, 0x30c2, 0x20e3, 0x5004, 0x4025, 0x7046, 0x6067,
        0x83b9, 0x9398, 0xa3fb, 0xb3da, 0xc33d, 0xd31c, 0xe37f, 0xf35e, 0x02b1, 0x1290, 0x22f3, 0x32d2,
        0x4235, 0x5214, 0x6277, 0x7256, 0xb5ea, 0xa5cb, 0x95a8, 0x8589, 0xf56e, 0xe54f, 0xd52c, 0xc50d,
        0x34e2, 0x24c3, 0x14a0, 0x0481, 0x7466, 0x6447, 0x5424, 0x4405, 0xa7db, 0xb7fa, 0x8799, 0x97b8,
        0xe75f, 0xf77e, 0xc71d, 0xd73c, 0x26d3, 0x36f2, 0x0691, 0x16b0, 0x6657, 0x7676, 0x4615, 0x5634,
        0xd94c, 0xc96d, 0xf90e, 0xe92f, 0x99c8, 0x89e9, 0xb98a, 0xa9ab, 0x5844, 0x4865, 0x7806, 0x6827,
        0x18c0, 0x08e1, 0x3882, 0x28a3, 0xcb7d, 0xdb5c, 0xeb3f, 0xfb1e, 0x8bf9, 0x9bd8, 0xabbb, 0xbb9a,
        0x4a75, 0x5a54, 0x6a37, 0x7a16, 0x0af1, 0x1ad0, 0x2ab3, 0x3a92, 0xfd2e, 0xed0f, 0xdd6c, 0xcd4d,
        0xbdaa, 0xad8b, 0x9de8, 0x8dc9, 0x7c26, 0x6c07, 0x5c64, 0x4c45, 0x3ca2, 0x2c83, 0x1ce0, 0x0cc1,
        0xef1f, 0xff3e, 0xcf5d, 0xdf7c, 0xaf9b, 0xbfba, 0x8fd9, 0x9ff8, 0x6e17, 0x7e36, 0x4e55, 0x5e74,
        0x2e93, 0x3eb2, 0x0ed1, 0x1ef0,
};

uint16_t cluster_crc16(const char *buf, size_t len) {
        uint16_t crc = 0;

        for (size_t i = 0; i < len; i++)
                crc = (uint16_t) (crc << 8) ^ crc16_table[((crc >> 8) ^ (uint8_t) buf[i]) & 0xff];
        return crc;
}

uint16_t cluster_key_slot(const char *key, size_t len) {
        const char *open = len > 0 ? memchr(key, '{', len) : NULL;

        if (open) {
                size_t rest = len - (size_t) (open - key) - 1;
                const char *close = memchr(open + 1, '}', rest);

                if (close && close > open + 1) /* "{}": no tag, the whole key */
                        return cluster_crc16(open + 1, (size_t) (close - open - 1)) & (CLUSTER_SLOTS - 1);
        }
        return cluster_crc16(key, len) & (CLUSTER_SLOTS - 1);
}

void cluster_map_init(ClusterMap *m) {
        m->nodes = NULL;
        m->n_nodes = m->n_alloc = 0;
        memset(m->slot_node, 0xff, sizeof(m->slot_node)); /* CLUSTER_NODE_NONE everywhere */
}

void cluster_map_clear(ClusterMap *m) {
        free(m->nodes);
        cluster_map_init(m);
}

int cluster_map_node_find(const ClusterMap *m, const char *host, size_t host_len, uint16_t port) {
        for (size_t i = 0; i < m->n_nodes; i++)
                if (m->nodes[i].port == port && strncmp(m->nodes[i].host, host, host_len) == 0 &&
                    m->nodes[i].host[host_len] == '\0')
                        return (int) i;
        return -ENOENT;
}

int cluster_map_node_add(ClusterMap *m, const char *host, size_t host_len, uint16_t port) {
        int i;

        if (host_len == 0 || host_len > CLUSTER_HOST_MAX || memchr(host, '\0', host_len) || port == 0)
                return -EINVAL;
        i = cluster_map_node_find(m, host, host_len, port);
        if (i >= 0)
                return i;
        if (m->n_nodes >= CLUSTER_NODES_MAX)
                return -E2BIG;
        if (m->n_nodes == m->n_alloc) {
                size_t n = m->n_alloc ? 2 * m->n_alloc : 8;
                ClusterNode *nodes;

                if (n > CLUSTER_NODES_MAX)
                        n = CLUSTER_NODES_MAX;
                nodes = realloc(m->nodes, n * sizeof(*nodes));
                if (!nodes)
                        return -ENOMEM;
                m->nodes = nodes;
                m->n_alloc = n;
        }
        memcpy(m->nodes[m->n_nodes].host, host, host_len);
        m->nodes[m->n_nodes].host[host_len] = '\0';
        m->nodes[m->n_nodes].port = port;
        return (int) m->n_nodes++;
}

int cluster_map_set_slot(ClusterMap *m, uint16_t slot, const ClusterNode *node) {
        int i;

        if (slot >= CLUSTER_SLOTS)
                return -EINVAL;
        i = cluster_map_node_add(m, node->host, strnlen(node->host, sizeof(node->host)), node->port);
        if (i < 0)
                return i;
        m->slot_node[slot] = (uint16_t) i;
        return i;
}

int cluster_map_lookup(const ClusterMap *m, uint16_t slot) {
        if (slot >= CLUSTER_SLOTS || m->slot_node[slot] == CLUSTER_NODE_NONE)
                return -ENOENT;
        return m->slot_node[slot];
}

const ClusterNode *cluster_map_node(const ClusterMap *m, uint16_t slot) {
        int i = cluster_map_lookup(m, slot);

        return i < 0 ? NULL : &m->nodes[i];
}

/* One [start, end, [host, port, ...], replicas...] entry of CLUSTER SLOTS: its primary added to
 * m (*ret_node = its index, or CLUSTER_NODE_NONE for the unknown endpoint "?"). */
static int slots_entry(ClusterMap *m, const redisReply *e, const char *default_host, long long *ret_start,
                       long long *ret_end, uint16_t *ret_node) {
        const redisReply *node, *host, *port;
        const char *h;
        size_t hlen;
        int i;

        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER)
                return -EPROTO;
        *ret_start = e->element[0]->integer;
        *ret_end = e->element[1]->integer;
        if (*ret_start < 0 || *ret_start > *ret_end || *ret_end >= CLUSTER_SLOTS)
                return -EPROTO;
        node = e->element[2];
        if (node->type != REDIS_REPLY_ARRAY || node->elements < 2)
                return -EPROTO;
        host = node->element[0];
        port = node->element[1];
        if ((host->type != REDIS_REPLY_STRING && host->type != REDIS_REPLY_NIL) ||
            port->type != REDIS_REPLY_INTEGER || port->integer < 1 || port->integer > 65535)
                return -EPROTO;
        h = host->type == REDIS_REPLY_STRING ? host->str : "";
        hlen = host->type == REDIS_REPLY_STRING ? host->len : 0;
        if (hlen == 1 && h[0] == '?') { /* unknown endpoint: its slots stay unknown */
                *ret_node = CLUSTER_NODE_NONE;
                return 0;
        }
        if (hlen == 0) {
                h = default_host;
                hlen = strlen(default_host);
        }
        if (hlen > CLUSTER_HOST_MAX || memchr(h, '\0', hlen))
                return -EPROTO;
        i = cluster_map_node_add(m, h, hlen, (uint16_t) port->integer);
        if (i < 0)
                return i;
        *ret_node = (uint16_t) i;
        return 0;
}

int cluster_map_from_slots_reply(ClusterMap *m, const redisReply *r, const char *default_host) {
        size_t old_n = m->n_nodes;
        uint16_t *table;
        int err = 0;

        if (!default_host || default_host[0] == '\0' || strlen(default_host) > CLUSTER_HOST_MAX)
                return -EINVAL;
        if (!r || r->type != REDIS_REPLY_ARRAY)
                return -EPROTO;
        /* Built aside (32 KiB, once per map refresh) so that an error leaves the map as it was. */
        table = malloc(sizeof(m->slot_node));
        if (!table)
                return -ENOMEM;
        memset(table, 0xff, sizeof(m->slot_node));
        for (size_t k = 0; k < r->elements; k++) {
                long long start, end;
                uint16_t node;

                err = slots_entry(m, r->element[k], default_host, &start, &end, &node);
                if (err < 0)
                        break;
                for (long long s = start; s <= end; s++)
                        table[s] = node;
        }
        if (err < 0)
                m->n_nodes = old_n; /* nobody has seen the nodes this call appended */
        else
                memcpy(m->slot_node, table, sizeof(m->slot_node));
        free(table);
        return err;
}

/* True if err[0..len) starts with the word w followed by a space or the end. */
static bool starts_with_word(const char *err, size_t len, const char *w) {
        size_t n = strlen(w);

        return len >= n && memcmp(err, w, n) == 0 && (len == n || err[n] == ' ');
}

/* "<slot> <host>:<port>" of a MOVED or ASK, p just after the word's space. */
static int parse_target(const char *p, const char *end, const char *default_host, uint16_t *ret_slot,
                        ClusterNode *ret_node) {
        const char *host, *colon, *q;
        size_t hlen;
        uint64_t slot, port;

        for (q = p; q < end && *q != ' '; q++)
                ;
        if (q >= end || parse_uint64_n(p, (size_t) (q - p), 0, CLUSTER_SLOTS - 1, &slot) < 0)
                return -EPROTO;
        host = p = q + 1;
        colon = NULL;
        for (q = p; q < end; q++)
                if (*q == ':')
                        colon = q;
        if (!colon)
                return -EPROTO;
        if (parse_uint64_n(colon + 1, (size_t) (end - colon - 1), 1, 65535, &port) < 0)
                return -EPROTO;
        hlen = (size_t) (colon - host);
        if (hlen >= 2 && host[0] == '[' && host[hlen - 1] == ']') {
                host++;
                hlen -= 2;
        }
        if (hlen == 0) {
                if (!default_host)
                        return -EPROTO;
                host = default_host;
                hlen = strlen(default_host);
        }
        if (hlen == 0 || hlen > CLUSTER_HOST_MAX || (hlen == 1 && host[0] == '?') ||
            memchr(host, ' ', hlen) || memchr(host, '\0', hlen))
                return -EPROTO;
        *ret_slot = (uint16_t) slot;
        memcpy(ret_node->host, host, hlen);
        ret_node->host[hlen] = '\0';
        ret_node->port = (uint16_t) port;
        return 0;
}

int cluster_parse_redirect(const char *err, size_t len, const char *default_host, uint16_t *ret_slot,
                           ClusterNode *ret_node) {
        int r;

        if (!err)
                return CLUSTER_REDIRECT_NONE;
        if (starts_with_word(err, len, "MOVED") || starts_with_word(err, len, "ASK")) {
                bool moved = err[0] == 'M';
                size_t skip = moved ? sizeof("MOVED") : sizeof("ASK"); /* the word and its space */

                if (len < skip)
                        return -EPROTO;
                r = parse_target(err + skip, err + len, default_host, ret_slot, ret_node);
                if (r < 0)
                        return r;
                return moved ? CLUSTER_REDIRECT_MOVED : CLUSTER_REDIRECT_ASK;
        }
        if (starts_with_word(err, len, "TRYAGAIN"))
                return CLUSTER_REDIRECT_TRYAGAIN;
        if (starts_with_word(err, len, "CLUSTERDOWN"))
                return CLUSTER_REDIRECT_CLUSTERDOWN;
        return CLUSTER_REDIRECT_NONE;
}
