/* SPDX-License-Identifier: MIT */
/* main.c: the divvyd command: its options, the defaults it takes from the environment, and
 * either a config action (--check-config, --dump-config) or the manager's run. Everything
 * else lives in the daemon's library. */

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/number.h"
#include "core/diag.h"
#include "listener.h"
#include "log.h"
#include "manager.h"
#include "core/rules.h"
#include "store/redis-store.h"
#include "store/wal.h"

#define LISTEN_MAX              64 /* --listen options: more is a mistake, not a configuration */
#define HTTP_API_LISTEN_MAX     8  /* --http-api options */
#define DB_DEFAULT              "/var/lib/divvyd"
#define UNIX_MODE_DEFAULT       0660
#define MAX_CONNECTIONS_DEFAULT 4096
#define OUTPUT_LIMIT_DEFAULT    (1u << 20) /* bytes */

static void help(void) {
        printf("Usage: divvyd [OPTIONS] CONFIG\n"
               "\n"
               "Rate-limit and quota daemon speaking the divvy protocol.\n"
               "CONFIG is a rules file, .ini, .json or envoyproxy/ratelimit's .yaml/.yml, or a\n"
               "directory of .yaml/.yml files, one per domain (see divvyd.rules(5)).\n"
               "\n"
               "  -l, --listen=ADDR        Listen on tcp:HOST:PORT (HOST may be [IPv6]) or unix:PATH;\n"
               "                           repeatable (default tcp:127.0.0.1:$PORT, else port %d;\n"
               "                           ignored when socket-activated). An admin: prefix\n"
               "                           (admin:unix:PATH) makes an admin listener, the only one\n"
               "                           accepting REFUND and RESET; passed sockets are admin when\n"
               "                           their name starts with \"admin\" (FileDescriptorName=)\n"
               "      --unix-mode=MODE     Octal mode of Unix sockets we create (default 0%o)\n"
               "      --admin-unix-mode=MODE\n"
               "                           ... of admin Unix sockets (default 0%o)\n"
               "      --inspect=all|admin  Who may PEEK at counters and EXPLAIN rules: any client\n"
               "                           (default) or admin listeners only\n"
               "      --grpc=ADDR          Serve Envoy's rate limit service (gRPC, HTTP/2 with prior\n"
               "                           knowledge) on [admin:]tcp:HOST:PORT or [admin:]unix:PATH;\n"
               "                           repeatable; passed sockets whose name contains \"grpc\"\n"
               "      --grpc-allow-refunds Accept is_negative_hits on every --grpc listener (default:\n"
               "                           admin: ones only)\n"
               "      --grpc-backend-error=rules|unavailable\n"
               "                           With --store: what a call gets when Redis fails it: its\n"
               "                           rules' onBackendError (default) or UNAVAILABLE, for\n"
               "                           Envoy's failure_mode_deny\n"
               "      --grpc-ratelimit-headers\n"
               "                           Add the IETF draft's RateLimit and RateLimit-Policy fields\n"
               "                           to each response's response_headers_to_add\n"
               "  -d, --db=DIR             Store directory: journal and LMDB checkpoint\n"
               "                           (default $STATE_DIRECTORY, else %s)\n"
               "      --map-size=BYTES     Initial LMDB map size, suffixes K M G (default 64M)\n"
               "      --map-size-max=BYTES Map growth cap (default 16G; checkpoints may use 7/8)\n"
               "      --sync=MODE          none, periodic or always (default periodic)\n"
               "      --sync-interval=MS   Periodic mode: sync the journal this often (default 100)\n"
               "      --checkpoint-journal-max=BYTES\n"
               "                           Checkpoint once the journal holds this much (default 256M,\n"
               "                           or 96 bytes per checkpointed counter, 24 with snapshots,\n"
               "                           if more, up to 2G)\n"
               "      --checkpoint-format=snapshot|lmdb\n"
               "                           snapshot (default): checkpoints write every counter into\n"
               "                           counters.snap (a data.mdb is migrated, for good); lmdb:\n"
               "                           the journal into data.mdb, as before\n"
               "      --checkpoint-interval=SEC\n"
               "                           ... or this long after the last checkpoint, if the journal\n"
               "                           holds anything (default 300)\n"
               "      --journal-segment-size=BYTES\n"
               "                           Journal file size, 64K .. 1G, preallocated (default 64M)\n"
               "      --max-connections=N  Refuse clients beyond N (default %d)\n"
               "      --max-counters=N     Refuse hits that need a new counter beyond N counters\n"
               "                           (ERR unknown \"counter limit reached\"; default 0 = no cap)\n"
               "      --idle-timeout=SEC   Close connections idle this long (default 0 = never)\n"
               "      --request-timeout=SEC\n"
               "                           Close a connection whose request has not arrived whole\n"
               "                           this long after its first byte (default 10, 0 = never)\n"
               "      --client-time-max-age=SEC\n"
               "                           Accept a client's timestamp on TAKE, PEEK and CHARGE\n"
               "                           (@<unix seconds>) up to SEC old (default 0 = refuse)\n"
               "      --output-limit=BYTES Stop reading a client whose unsent replies exceed this\n"
               "                           (default 1M)\n"
               "      --sweep-interval=MS  How often expired counters are swept (default 1000)\n"
               "      --debug              Log each request a rule decides (HIT, TAKE, PEEK, CHARGE,\n"
               "                           REFUND, EXPLAIN) with that rule (also DEBUG=divvy)\n"
               "      --allow-root         Run even as root (refused otherwise: it needs no privilege)\n"
               "      --store=URL          Where counters live: local (default: --db, LMDB), or a\n"
               "                           Redis/Valkey shared by a fleet: "
               "redis://[USER:PASS@]HOST:PORT[/DB],\n"
               "                           redis+unix:///PATH[?db=N], redis+sentinel://H:P,H:P/PRIMARY,\n"
               "                           redis+cluster://H:P,H:P (see divvyd(8), \"Running a fleet\")\n"
               "      --store-password-file=FILE\n"
               "                           The Redis password, first line of FILE (also\n"
               "                           $DIVVYD_STORE_PASSWORD)\n"
               "      --backend-timeout=MS A batch's deadline on Redis (default 50)\n"
               "      --on-backend-error=P What a hit gets when Redis does not answer in time, unless\n"
               "                           its rule's onBackendError says: allow, deny or local (this\n"
               "                           host's LMDB store decides; the default)\n"
               "      --statsd-host=HOST   Send statsd metrics to HOST (also $STATSD_HOST)\n"
               "      --statsd-port=PORT   ... on PORT (also $STATSD_PORT; both are needed)\n"
               "      --statsd-prefix=P    Prefix of every statsd name, a '.' is added unless P is\n"
               "                           empty or ends in one (also $STATSD_PREFIX)\n"
               "      --statsd-tcp         Use TCP instead of UDP (also non-empty $STATSD_USE_TCP)\n"
               "      --statsd-interval=MS Flush aggregated statsd metrics this often (default 1000)\n"
               "      --http-port=PORT     Serve Prometheus metrics over HTTP (also $HTTP_SERVICE_PORT)\n"
               "      --http-address=ADDR  ... on this numeric address (default 127.0.0.1)\n"
               "      --metrics-path=PATH  ... at PATH (also $PROMETHEUS_METRICS_PATH; default /metrics)\n"
               "      --http-api=ADDR      Serve the HTTP decision API (JSON, RateLimit headers; see\n"
               "                           docs/http-api.md) on tcp:HOST:PORT or unix:PATH, apart from\n"
               "                           the metrics; repeatable; admin: as for --listen (REFUND,\n"
               "                           RESET); ignored when socket-activated (sockets named\n"
               "                           http-api or admin-http-api serve it then)\n"
               "      --resp=on|off        Answer connections whose first byte is '*' in RESP, the\n"
               "                           Redis protocol (default on; see divvyd(8))\n"
               "      --allow-client-limits\n"
               "                           Accept CL.THROTTLE, GCRA and RL.* over RESP: limits that the\n"
               "                           clients define (default off; local store only: refused\n"
               "                           with --store)\n"
               "  -n, --check-config       Validate CONFIG, print a summary (and a line per rule with\n"
               "                           another algorithm or policy than divvy's; warnings for rules\n"
               "                           whose divvy keys in Redis can meet), exit\n"
               "      --compat=divvy       ... and refuse the rules Node divvy 1.7 would decide\n"
               "                           otherwise or not read (before sharing its Redis)\n"
               "      --dump-config        Print CONFIG's rules as normalized JSON, exit\n"
               "  -h, --help               Show this help and exit\n"
               "      --version            Show the version and exit\n",
               DIVVY_PROTO_PORT, UNIX_MODE_DEFAULT, LISTEN_ADMIN_MODE_DEFAULT, DB_DEFAULT,
               MAX_CONNECTIONS_DEFAULT);
}

typedef enum Action {
        ACTION_RUN,
        ACTION_CHECK_CONFIG,
        ACTION_DUMP_CONFIG,
} Action;

/* Everything the command line says, before the environment fills in the defaults. */
typedef struct Options {
        Action action;
        ManagerSettings settings;
        ListenAddress addresses[LISTEN_MAX];
        size_t n_listen;
        ListenAddress http_api[HTTP_API_LISTEN_MAX]; /* --http-api */
        size_t n_http_api;
        const char *statsd_port, *http_port; /* checked, converted with the environment's */
        char password[512];                  /* --store-password-file's first line */
        bool statsd_tcp, allow_root;
        bool compat_divvy; /* --compat=divvy: --check-config also runs config_check_divvy() */
        ListenAddress grpc_addresses[LISTEN_MAX]; /* --grpc (issue #34) */
        size_t n_grpc;
} Options;

/* Prints diag's messages of a failed r on stderr (or r's errno text for path if it has none),
 * then frees diag. Returns r. */
static int diag_finish(Diag *diag, const char *path, int r) {
        if (r < 0) {
                if (diag_count(diag) > 0)
                        diag_print(diag, stderr);
                else
                        fprintf(stderr, "%s: %s\n", path, strerror(-r));
        }
        diag_done(diag);
        return r;
}

/* Loads path and prints every error to stderr. Returns 0 or a negative errno. */
static int load_rules(const char *path, RuleSet **ret) {
        Diag diag;

        diag_init(&diag, path);
        return diag_finish(&diag, path, config_load(path, ret, &diag));
}

/* Bytes with an optional K, M or G suffix (powers of 1024); the digits are parse_uint64()'s. */
static int parse_size(const char *s, uint64_t *ret) {
        char digits[32]; /* 2^64 has 20 digits: longer is leading zeros, refused as too long */
        size_t len = strlen(s);
        unsigned shift = 0;
        uint64_t v;
        int r;

        if (len > 0)
                switch (s[len - 1]) {
                case 'K':
                case 'k':
                        shift = 10;
                        break;
                case 'M':
                case 'm':
                        shift = 20;
                        break;
                case 'G':
                case 'g':
                        shift = 30;
                        break;
                }
        if (shift > 0)
                len--;
        if (len >= sizeof digits)
                return -ERANGE;
        memcpy(digits, s, len);
        digits[len] = '\0';
        r = parse_uint64(digits, 0, UINT64_MAX >> shift, &v);
        if (r < 0)
                return r;
        *ret = v << shift;
        return 0;
}

/* The first line of path (without its newline) into buf: a password kept out of the unit's
 * command line. Prints the problem. */
static int read_password_file(const char *path, char *buf, size_t size) {
        FILE *f = fopen(path, "re");
        size_t len;

        if (!f) {
                int r = -errno; /* before fprintf(), which may change errno */
                fprintf(stderr, "divvyd: cannot read --store-password-file '%s': %s\n", path, strerror(-r));
                return r;
        }
        if (!fgets(buf, (int) size, f))
                buf[0] = '\0';
        fclose(f);
        len = strcspn(buf, "\r\n");
        if (len == size - 1) {
                fprintf(stderr, "divvyd: --store-password-file '%s': first line too long (max %zu bytes)\n",
                        path, size - 2);
                return -E2BIG;
        }
        buf[len] = '\0';
        return 0;
}

static int usage_error(const char *option, const char *value) {
        fprintf(stderr, "divvyd: invalid value for %s: '%s'. Try 'divvyd --help'.\n", option, value);
        return 2;
}

/* An option of two words: *ret = true for yes, false for no. Returns 0, or -EINVAL for anything
 * else (*ret untouched). */
static int parse_two_words(const char *arg, const char *yes, const char *no, bool *ret) {
        if (strcmp(arg, yes) != 0 && strcmp(arg, no) != 0)
                return -EINVAL;
        *ret = strcmp(arg, yes) == 0;
        return 0;
}

enum {
        ARG_VERSION = 0x100,
        ARG_DUMP_CONFIG,
        ARG_GRPC,
        ARG_GRPC_ALLOW_REFUNDS,
        ARG_GRPC_RATELIMIT_HEADERS,
        ARG_GRPC_BACKEND_ERROR,
        ARG_UNIX_MODE,
        ARG_ADMIN_UNIX_MODE,
        ARG_INSPECT,
        ARG_MAP_SIZE,
        ARG_MAP_SIZE_MAX,
        ARG_SYNC,
        ARG_SYNC_INTERVAL,
        ARG_MAX_CONNECTIONS,
        ARG_MAX_COUNTERS,
        ARG_IDLE_TIMEOUT,
        ARG_REQUEST_TIMEOUT,
        ARG_CLIENT_TIME_MAX_AGE,
        ARG_OUTPUT_LIMIT,
        ARG_SWEEP_INTERVAL,
        ARG_CHECKPOINT_JOURNAL_MAX,
        ARG_CHECKPOINT_INTERVAL,
        ARG_CHECKPOINT_FORMAT,
        ARG_JOURNAL_SEGMENT_SIZE,
        ARG_DEBUG,
        ARG_STATSD_HOST,
        ARG_STATSD_PORT,
        ARG_STATSD_PREFIX,
        ARG_STATSD_TCP,
        ARG_STATSD_INTERVAL,
        ARG_HTTP_PORT,
        ARG_HTTP_ADDRESS,
        ARG_METRICS_PATH,
        ARG_ALLOW_ROOT,
        ARG_COMPAT,
        ARG_STORE,
        ARG_STORE_PASSWORD_FILE,
        ARG_BACKEND_TIMEOUT,
        ARG_ON_BACKEND_ERROR,
        /* RESP (issue #17) */
        ARG_RESP,
        ARG_ALLOW_CLIENT_LIMITS,
        ARG_HTTP_API,
};

/* The store's and the server's options. Returns 0, 1 if c is none of them, or the exit
 * status of a usage error (printed). */
static int parse_serving_option(int c, const char *arg, Options *o) {
        uint64_t v;

        switch (c) {
        case ARG_MAP_SIZE:
                if (parse_size(arg, &v) < 0 || v == 0)
                        return usage_error("--map-size", arg);
                o->settings.store.map_size = v;
                return 0;
        case ARG_MAP_SIZE_MAX:
                if (parse_size(arg, &v) < 0 || v == 0)
                        return usage_error("--map-size-max", arg);
                o->settings.store.map_size_max = v;
                return 0;
        case ARG_SYNC: {
                StoreSync sync = store_sync_from_string(arg);
                if (sync < 0)
                        return usage_error("--sync (none, periodic or always)", arg);
                o->settings.store.sync = sync;
                return 0;
        }
        case ARG_SYNC_INTERVAL:
                if (parse_uint64(arg, 1, 3600 * 1000, &v) < 0)
                        return usage_error("--sync-interval", arg);
                o->settings.store.sync_interval_usec = v * 1000;
                return 0;
        case ARG_MAX_CONNECTIONS:
                if (parse_uint64(arg, 1, 10 * 1000 * 1000, &v) < 0)
                        return usage_error("--max-connections", arg);
                o->settings.server.max_connections = (unsigned) v;
                return 0;
        case ARG_MAX_COUNTERS:
                if (parse_uint64(arg, 0, UINT64_MAX, &v) < 0)
                        return usage_error("--max-counters", arg);
                o->settings.store.max_counters = v;
                return 0;
        case ARG_IDLE_TIMEOUT:
                if (parse_uint64(arg, 0, 365ULL * 24 * 3600, &v) < 0)
                        return usage_error("--idle-timeout", arg);
                o->settings.server.idle_timeout_usec = v * 1000 * 1000;
                return 0;
        case ARG_REQUEST_TIMEOUT:
                if (parse_uint64(arg, 0, 365ULL * 24 * 3600, &v) < 0)
                        return usage_error("--request-timeout", arg);
                o->settings.server.request_timeout_usec = v * 1000 * 1000;
                return 0;
        case ARG_CLIENT_TIME_MAX_AGE:
                if (parse_uint64(arg, 0, 365ULL * 24 * 3600, &v) < 0)
                        return usage_error("--client-time-max-age (0 .. 31536000, a year)", arg);
                o->settings.server.client_time_max_age_usec = v * 1000 * 1000;
                return 0;
        case ARG_INSPECT:
                if (parse_two_words(arg, "admin", "all", &o->settings.server.inspect_admin) < 0)
                        return usage_error("--inspect (all or admin)", arg);
                return 0;
        case ARG_OUTPUT_LIMIT:
                if (parse_size(arg, &v) < 0 || v < 1024 || v > (1ULL << 30))
                        return usage_error("--output-limit (1K .. 1G)", arg);
                o->settings.server.output_limit = (size_t) v;
                return 0;
        case ARG_SWEEP_INTERVAL:
                if (parse_uint64(arg, 1, 3600 * 1000, &v) < 0)
                        return usage_error("--sweep-interval", arg);
                o->settings.sweep_interval_usec = v * 1000;
                return 0;
        case ARG_CHECKPOINT_JOURNAL_MAX:
                if (parse_size(arg, &v) < 0 || v == 0)
                        return usage_error("--checkpoint-journal-max", arg);
                o->settings.store.checkpoint_journal_max = v;
                return 0;
        case ARG_CHECKPOINT_FORMAT:
                if (strcmp(arg, "snapshot") != 0 && strcmp(arg, "lmdb") != 0)
                        return usage_error("--checkpoint-format (snapshot or lmdb)", arg);
                o->settings.store.snapshot = strcmp(arg, "snapshot") == 0;
                return 0;
        case ARG_CHECKPOINT_INTERVAL:
                if (parse_uint64(arg, 1, 365ULL * 24 * 3600, &v) < 0)
                        return usage_error("--checkpoint-interval", arg);
                o->settings.store.checkpoint_interval_usec = v * 1000 * 1000;
                return 0;
        case ARG_JOURNAL_SEGMENT_SIZE:
                if (parse_size(arg, &v) < 0 || v < 64 * 1024 || v > WAL_SEGMENT_SIZE_MAX)
                        return usage_error("--journal-segment-size (64K .. 1G)", arg);
                o->settings.store.journal_segment_size = v;
                return 0;
        case ARG_STORE:
                if (strcmp(arg, "local") == 0)
                        o->settings.remote.url = NULL;
                else if (!redis_url_is_redis(arg))
                        return usage_error("--store (local, redis://, redis+unix://, redis+sentinel:// or "
                                           "redis+cluster://)",
                                           arg);
                else
                        o->settings.remote.url = arg;
                return 0;
        case ARG_STORE_PASSWORD_FILE:
                if (read_password_file(arg, o->password, sizeof o->password) < 0)
                        return 2;
                o->settings.remote.password = o->password;
                return 0;
        case ARG_BACKEND_TIMEOUT:
                if (parse_uint64(arg, 1, 60 * 1000, &v) < 0)
                        return usage_error("--backend-timeout (1 .. 60000 ms)", arg);
                o->settings.remote.timeout_usec = v * 1000;
                return 0;
        case ARG_ON_BACKEND_ERROR: {
                RuleOnError p = rule_on_error_from_string(arg);
                if (p <= RULE_ON_ERROR_DEFAULT)
                        return usage_error("--on-backend-error (allow, deny or local)", arg);
                o->settings.remote.on_error = p;
                return 0;
        }
        default:
                return 1;
        }
}

/* The statsd and HTTP options, as parse_serving_option(). */
static int parse_metrics_option(int c, const char *arg, Options *o) {
        uint64_t v;

        switch (c) {
        case ARG_STATSD_HOST:
                if (arg[0] == '\0')
                        return usage_error("--statsd-host", arg);
                o->settings.statsd.host = arg;
                return 0;
        case ARG_STATSD_PORT:
                if (parse_uint64(arg, 1, 65535, &v) < 0)
                        return usage_error("--statsd-port", arg);
                o->statsd_port = arg;
                return 0;
        case ARG_STATSD_PREFIX:
                if (strlen(arg) >= STATSD_PREFIX_MAX)
                        return usage_error("--statsd-prefix (too long)", arg);
                o->settings.statsd.prefix = arg;
                return 0;
        case ARG_STATSD_TCP:
                o->statsd_tcp = true;
                return 0;
        case ARG_STATSD_INTERVAL:
                if (parse_uint64(arg, 10, 3600 * 1000, &v) < 0)
                        return usage_error("--statsd-interval (10 .. 3600000)", arg);
                o->settings.statsd.interval_usec = v * 1000;
                return 0;
        case ARG_HTTP_PORT:
                if (parse_uint64(arg, 0, 65535, &v) < 0)
                        return usage_error("--http-port", arg);
                o->http_port = arg;
                return 0;
        case ARG_HTTP_ADDRESS: {
                struct in6_addr a6; /* either family fits */

                /* checked here, not only when the endpoint starts: a bad value is a usage error */
                if (inet_pton(AF_INET, arg, &a6) != 1 && inet_pton(AF_INET6, arg, &a6) != 1)
                        return usage_error("--http-address (a numeric IPv4 or IPv6 address, no brackets)",
                                           arg);
                o->settings.http.address = arg;
                return 0;
        }
        /* RESP (issue #17) */
        case ARG_RESP:
                if (parse_two_words(arg, "on", "off", &o->settings.server.resp) < 0)
                        return usage_error("--resp (on or off)", arg);
                return 0;
        case ARG_ALLOW_CLIENT_LIMITS:
                o->settings.server.allow_client_limits = true;
                return 0;
        case ARG_GRPC:
                if (o->n_grpc >= LISTEN_MAX)
                        return usage_error("--grpc (at most 64)", arg);
                if (listen_address_parse(arg, &o->grpc_addresses[o->n_grpc]) < 0)
                        return usage_error("--grpc (expected [admin:]tcp:HOST:PORT or [admin:]unix:PATH)",
                                           arg);
                o->grpc_addresses[o->n_grpc++].grpc = true;
                return 0;
        case ARG_GRPC_ALLOW_REFUNDS:
                o->settings.server.grpc_allow_refunds = true;
                return 0;
        case ARG_GRPC_RATELIMIT_HEADERS:
                o->settings.server.grpc_ratelimit_headers = true;
                return 0;
        case ARG_GRPC_BACKEND_ERROR:
                if (parse_two_words(arg, "unavailable", "rules",
                                    &o->settings.server.grpc_backend_unavailable) < 0)
                        return usage_error("--grpc-backend-error (rules or unavailable)", arg);
                return 0;
        case ARG_METRICS_PATH:
                if (arg[0] != '/')
                        return usage_error("--metrics-path (must start with '/')", arg);
                o->settings.http.metrics_path = arg;
                return 0;
        default:
                return 1;
        }
}

/* Parses the command line into o. Returns -1 to go on, or the exit status: EXIT_SUCCESS
 * after --help or --version, 2 after a usage error (printed). */
static int parse_args(int argc, char *argv[], Options *o) {
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                { "check-config", no_argument, NULL, 'n' },
                { "dump-config", no_argument, NULL, ARG_DUMP_CONFIG },
                { "listen", required_argument, NULL, 'l' },
                { "unix-mode", required_argument, NULL, ARG_UNIX_MODE },
                { "admin-unix-mode", required_argument, NULL, ARG_ADMIN_UNIX_MODE },
                { "inspect", required_argument, NULL, ARG_INSPECT },
                /* Envoy's rate limit service over gRPC (issue #34) */
                { "grpc", required_argument, NULL, ARG_GRPC },
                { "grpc-allow-refunds", no_argument, NULL, ARG_GRPC_ALLOW_REFUNDS },
                { "grpc-ratelimit-headers", no_argument, NULL, ARG_GRPC_RATELIMIT_HEADERS },
                { "grpc-backend-error", required_argument, NULL, ARG_GRPC_BACKEND_ERROR },
                { "db", required_argument, NULL, 'd' },
                { "map-size", required_argument, NULL, ARG_MAP_SIZE },
                { "map-size-max", required_argument, NULL, ARG_MAP_SIZE_MAX },
                { "sync", required_argument, NULL, ARG_SYNC },
                { "sync-interval", required_argument, NULL, ARG_SYNC_INTERVAL },
                { "max-connections", required_argument, NULL, ARG_MAX_CONNECTIONS },
                { "max-counters", required_argument, NULL, ARG_MAX_COUNTERS },
                { "idle-timeout", required_argument, NULL, ARG_IDLE_TIMEOUT },
                { "request-timeout", required_argument, NULL, ARG_REQUEST_TIMEOUT },
                { "client-time-max-age", required_argument, NULL, ARG_CLIENT_TIME_MAX_AGE },
                { "output-limit", required_argument, NULL, ARG_OUTPUT_LIMIT },
                { "sweep-interval", required_argument, NULL, ARG_SWEEP_INTERVAL },
                { "checkpoint-journal-max", required_argument, NULL, ARG_CHECKPOINT_JOURNAL_MAX },
                { "checkpoint-interval", required_argument, NULL, ARG_CHECKPOINT_INTERVAL },
                { "checkpoint-format", required_argument, NULL, ARG_CHECKPOINT_FORMAT },
                { "journal-segment-size", required_argument, NULL, ARG_JOURNAL_SEGMENT_SIZE },
                { "debug", no_argument, NULL, ARG_DEBUG },
                { "statsd-host", required_argument, NULL, ARG_STATSD_HOST },
                { "statsd-port", required_argument, NULL, ARG_STATSD_PORT },
                { "statsd-prefix", required_argument, NULL, ARG_STATSD_PREFIX },
                { "statsd-tcp", no_argument, NULL, ARG_STATSD_TCP },
                { "statsd-interval", required_argument, NULL, ARG_STATSD_INTERVAL },
                { "http-port", required_argument, NULL, ARG_HTTP_PORT },
                { "http-address", required_argument, NULL, ARG_HTTP_ADDRESS },
                { "metrics-path", required_argument, NULL, ARG_METRICS_PATH },
                { "allow-root", no_argument, NULL, ARG_ALLOW_ROOT },
                { "compat", required_argument, NULL, ARG_COMPAT },
                { "store", required_argument, NULL, ARG_STORE },
                { "store-password-file", required_argument, NULL, ARG_STORE_PASSWORD_FILE },
                { "backend-timeout", required_argument, NULL, ARG_BACKEND_TIMEOUT },
                { "on-backend-error", required_argument, NULL, ARG_ON_BACKEND_ERROR },
                /* RESP (issue #17) */
                { "resp", required_argument, NULL, ARG_RESP },
                { "allow-client-limits", no_argument, NULL, ARG_ALLOW_CLIENT_LIMITS },
                { "http-api", required_argument, NULL, ARG_HTTP_API },
                {},
        };
        char *end;
        int c, r;

        while ((c = getopt_long(argc, argv, "hnl:d:", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return EXIT_SUCCESS;
                case ARG_VERSION:
                        printf("divvyd %s\n", PACKAGE_VERSION);
                        return EXIT_SUCCESS;
                case 'n':
                        o->action = ACTION_CHECK_CONFIG;
                        break;
                case ARG_DUMP_CONFIG:
                        o->action = ACTION_DUMP_CONFIG;
                        break;
                case 'l':
                        if (o->n_listen >= LISTEN_MAX) {
                                fprintf(stderr, "divvyd: at most %d --listen options.\n", LISTEN_MAX);
                                return 2;
                        }
                        if (listen_address_parse(optarg, &o->addresses[o->n_listen]) < 0)
                                return usage_error(
                                        "--listen (expected [admin:]tcp:HOST:PORT or [admin:]unix:PATH)",
                                        optarg);
                        o->n_listen++;
                        break;
                case ARG_HTTP_API:
                        if (o->n_http_api >= HTTP_API_LISTEN_MAX) {
                                fprintf(stderr, "divvyd: at most %d --http-api options.\n",
                                        HTTP_API_LISTEN_MAX);
                                return 2;
                        }
                        if (listen_address_parse(optarg, &o->http_api[o->n_http_api]) < 0)
                                return usage_error(
                                        "--http-api (expected [admin:]tcp:HOST:PORT or [admin:]unix:PATH)",
                                        optarg);
                        o->n_http_api++;
                        break;
                case ARG_UNIX_MODE:
                case ARG_ADMIN_UNIX_MODE: {
                        unsigned long mode;
                        errno = 0;
                        mode = strtoul(optarg, &end, 8);
                        if (errno != 0 || optarg[0] < '0' || optarg[0] > '7' || *end != '\0' || mode > 07777)
                                return usage_error(c == ARG_UNIX_MODE ? "--unix-mode" : "--admin-unix-mode",
                                                   optarg);
                        if (c == ARG_UNIX_MODE)
                                o->settings.unix_mode = (mode_t) mode;
                        else
                                o->settings.admin_unix_mode = (mode_t) mode;
                        break;
                }
                case 'd':
                        if (optarg[0] == '\0')
                                return usage_error("--db", optarg);
                        o->settings.store.path = optarg;
                        break;
                case ARG_DEBUG:
                        o->settings.server.debug = true;
                        break;
                case ARG_ALLOW_ROOT:
                        o->allow_root = true;
                        break;
                case ARG_COMPAT:
                        if (strcmp(optarg, "divvy") != 0)
                                return usage_error("--compat (the one accepted value is 'divvy')", optarg);
                        o->compat_divvy = true;
                        break;
                case '?':
                        fprintf(stderr, "Try 'divvyd --help'.\n");
                        return 2;
                default:
                        r = parse_serving_option(c, optarg, o);
                        if (r == 1)
                                r = parse_metrics_option(c, optarg, o);
                        if (r == 1) {
                                fprintf(stderr, "Try 'divvyd --help'.\n");
                                return 2;
                        }
                        if (r != 0)
                                return r;
                }

        if (o->compat_divvy && o->action != ACTION_CHECK_CONFIG) {
                fprintf(stderr, "divvyd: --compat is an option of --check-config. Try 'divvyd --help'.\n");
                return 2;
        }
        if (optind != argc - 1) {
                fprintf(stderr, "divvyd: expected exactly one CONFIG file argument. Try 'divvyd --help'.\n");
                return 2;
        }
        o->settings.config_path = argv[optind];
        return -1;
}

/* --compat=divvy: prints on stderr every rule Node divvy 1.7 would decide otherwise or not
 * read. Returns 0 or a negative errno. */
static int check_divvy(const char *path, const RuleSet *rules) {
        Diag diag;

        diag_init(&diag, path);
        return diag_finish(&diag, path, config_check_divvy(rules, &diag));
}

/* --check-config: prints on stderr the rules whose divvy keys in Redis can meet (warnings: the
 * exit status stays). */
static void warn_divvy_keys(const char *path, const RuleSet *rules) {
        Diag diag;

        diag_init(&diag, path);
        if (config_check_divvy_keys(rules, &diag) < 0)
                fprintf(stderr, "%s: cannot check the divvy keys: %s\n", path, strerror(ENOMEM));
        diag_print(&diag, stderr);
        diag_done(&diag);
}

/* --check-config and --dump-config. Returns the exit status. */
static int run_config_action(const Options *o) {
        const char *path = o->settings.config_path;
        RuleSet *rules = NULL;
        int ret = EXIT_SUCCESS;

        if (load_rules(path, &rules) < 0)
                return EXIT_FAILURE;
        if (o->action == ACTION_CHECK_CONFIG)
                warn_divvy_keys(path, rules);
        if (o->action == ACTION_CHECK_CONFIG && o->compat_divvy && check_divvy(path, rules) < 0)
                ret = EXIT_FAILURE;
        else if (o->action == ACTION_CHECK_CONFIG) {
                char summary[256], details[RULE_DESCRIBE_MAX + 192];
                printf("%s: OK, %s\n", path, config_summary(rules, summary, sizeof summary));
                /* Then a line for each rule using an algorithm or policy divvy did not have. */
                for (size_t i = 0; i < rules->n_rules; i++)
                        if (config_rule_details(&rules->rules[i], details, sizeof details))
                                printf("%s:%u: %s\n", ruleset_rule_file(rules, &rules->rules[i]),
                                       rules->rules[i].line, details);
        } else if (config_dump_json(rules, stdout) < 0 || fflush(stdout) != 0) {
                fprintf(stderr, "divvyd: failed to write JSON\n");
                ret = EXIT_FAILURE;
        }
        ruleset_free(rules);
        return ret;
}

/* A rate limiter needs no privilege: sockets are passed by systemd or unprivileged, the
 * database directory is its own. As root, a bug or a hostile client would hold the whole
 * machine, so root must be asked for. Returns 0 or -EPERM (logged). */
static int check_root(const Options *o) {
        if (geteuid() != 0)
                return 0;
        if (!o->allow_root) {
                log_error("Refusing to run as root: divvyd needs no privileges. Run it as an "
                          "unprivileged user (the packaged unit uses User=divvy), or pass "
                          "--allow-root.");
                return -EPERM;
        }
        log_warning("Running as root (--allow-root)");
        return 0;
}

/* statsd and HTTP: divvy's environment variables, unless the options said otherwise.
 * Returns 0 or -EINVAL (logged). */
static int metrics_settings_from_env(Options *o) {
        ManagerSettings *settings = &o->settings;
        const char *e;
        uint64_t v;

        if (!settings->statsd.host && (e = getenv("STATSD_HOST")) && e[0] != '\0')
                settings->statsd.host = e;
        if (!o->statsd_port && (e = getenv("STATSD_PORT")) && e[0] != '\0')
                o->statsd_port = e;
        if (!settings->statsd.prefix && (e = getenv("STATSD_PREFIX")))
                settings->statsd.prefix = e;
        if (!o->statsd_tcp && (e = getenv("STATSD_USE_TCP")) && e[0] != '\0')
                o->statsd_tcp = true;
        if (settings->statsd.host && o->statsd_port) {
                if (parse_uint64(o->statsd_port, 1, 65535, &v) < 0)
                        return log_error_errno(EINVAL,
                                               "Invalid statsd port '%s': expected a port number 1..65535",
                                               o->statsd_port);
                settings->statsd.port = (uint16_t) v;
                settings->statsd.tcp = o->statsd_tcp;
        } else {
                /* Like divvy: statsd needs both. */
                if (settings->statsd.host || o->statsd_port)
                        log_warning("statsd needs both a host and a port (STATSD_HOST, STATSD_PORT); not "
                                    "sending statsd metrics");
                settings->statsd.host = NULL;
        }

        if (!o->http_port && (e = getenv("HTTP_SERVICE_PORT")) && e[0] != '\0')
                o->http_port = e;
        if (!settings->http.metrics_path && (e = getenv("PROMETHEUS_METRICS_PATH")) && e[0] != '\0')
                settings->http.metrics_path = e;
        if (o->http_port) {
                if (parse_uint64(o->http_port, 0, 65535, &v) < 0)
                        return log_error_errno(EINVAL,
                                               "Invalid HTTP port '%s': expected a port number 0..65535",
                                               o->http_port);
                settings->http.port = (uint16_t) v;
                if (!settings->http.metrics_path)
                        settings->http.metrics_path = "/metrics";
                if (settings->http.metrics_path[0] != '/')
                        return log_error_errno(EINVAL, "Invalid metrics path '%s': must start with '/'",
                                               settings->http.metrics_path);
        } else {
                if (settings->http.metrics_path || settings->http.address)
                        log_warning("No HTTP port (HTTP_SERVICE_PORT or --http-port): not serving metrics");
                settings->http.metrics_path = NULL;
        }
        return 0;
}

/* The defaults that come from the environment: $DEBUG, $STATE_DIRECTORY, $PORT, and the
 * metrics' variables. Returns 0 or -EINVAL (logged). */
static int settings_from_env(Options *o) {
        static char state_dir[PATH_MAX];
        ManagerSettings *settings = &o->settings;
        const char *e = getenv("DEBUG");

        if (e && strstr(e, "divvy"))
                settings->server.debug = true;
        if (settings->server.debug)
                log_set_max_level(LOG_DEBUG);

        if (!settings->store.path) {
                /* $STATE_DIRECTORY may list several directories separated by ':'; we want the first. */
                e = getenv("STATE_DIRECTORY");
                if (e && e[0] != '\0' && e[0] != ':') {
                        snprintf(state_dir, sizeof state_dir, "%.*s", (int) strcspn(e, ":"), e);
                        settings->store.path = state_dir;
                } else
                        settings->store.path = DB_DEFAULT;
        }

        if (settings->remote.url && !settings->remote.password && (e = getenv("DIVVYD_STORE_PASSWORD")) &&
            e[0] != '\0')
                settings->remote.password = e;
        if (settings->remote.on_error == RULE_ON_ERROR_DEFAULT)
                settings->remote.on_error = RULE_ON_ERROR_LOCAL;
        /* the peers' arithmetic (client-limits.c: 64-bit integers) does not run in Redis's Lua */
        if (settings->remote.url && settings->server.allow_client_limits)
                return log_error_errno(EINVAL, "--allow-client-limits needs the local store, not --store");

        if (o->n_listen == 0) {
                char addr[64];
                uint64_t port = DIVVY_PROTO_PORT;

                e = getenv("PORT");
                if (e && e[0] != '\0' && parse_uint64(e, 1, 65535, &port) < 0)
                        return log_error_errno(EINVAL, "Invalid $PORT '%s': expected a port number 1..65535",
                                               e);
                snprintf(addr, sizeof addr, "tcp:127.0.0.1:%" PRIu64, port);
                if (listen_address_parse(addr, &o->addresses[0]) < 0)
                        return -EINVAL;
                o->n_listen = 1;
        }
        /* the --grpc listeners after the others */
        if (o->n_listen + o->n_grpc > LISTEN_MAX)
                return log_error_errno(EINVAL, "At most %d --listen and --grpc options", LISTEN_MAX);
        for (size_t i = 0; i < o->n_grpc; i++)
                o->addresses[o->n_listen++] = o->grpc_addresses[i];
        settings->listen = o->addresses;
        settings->n_listen = o->n_listen;
        settings->http_api = o->http_api;
        settings->n_http_api = o->n_http_api;

        return metrics_settings_from_env(o);
}

/* Serves until stopped. Returns the exit status. */
static int run(const ManagerSettings *settings) {
        Manager *m = NULL;

        if (manager_new(settings, &m) < 0)
                return EXIT_FAILURE;
        int r = manager_run(m);
        manager_free(m);
        return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}

int main(int argc, char *argv[]) {
        static Options o = {
                .settings = {
                        .unix_mode = UNIX_MODE_DEFAULT,
                        .admin_unix_mode = LISTEN_ADMIN_MODE_DEFAULT,
                        .store = {
                                .sync = STORE_SYNC_PERIODIC,
                                .sync_interval_usec = STORE_SYNC_INTERVAL_DEFAULT_USEC,
                                .snapshot = true, /* --checkpoint-format=snapshot */
                        },
                        .server = {
                                .max_connections = MAX_CONNECTIONS_DEFAULT,
                                .output_limit = OUTPUT_LIMIT_DEFAULT,
                                .request_timeout_usec = SERVER_REQUEST_TIMEOUT_DEFAULT_USEC,
                                .resp = true, /* RESP (issue #17) */
                        },
                        .sweep_interval_usec = MANAGER_SWEEP_INTERVAL_DEFAULT_USEC,
                },
        };
        int r;

        r = parse_args(argc, argv, &o);
        if (r >= 0)
                return r;
        if (o.action != ACTION_RUN)
                return run_config_action(&o);
        if (check_root(&o) < 0 || settings_from_env(&o) < 0)
                return EXIT_FAILURE;
        return run(&o.settings);
}
