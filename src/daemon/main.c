/* SPDX-License-Identifier: MIT */
/* main.c: command-line options only; everything else lives in the core library. */

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/diag.h"
#include "listener.h"
#include "log.h"
#include "manager.h"
#include "core/rules.h"

#define LISTEN_MAX              64 /* --listen options: more is a mistake, not a configuration */
#define DB_DEFAULT              "/var/lib/divvyd"
#define UNIX_MODE_DEFAULT       0660
#define MAX_CONNECTIONS_DEFAULT 4096
#define OUTPUT_LIMIT_DEFAULT    (1u << 20) /* bytes */

static void help(void) {
        printf("Usage: divvyd [OPTIONS] CONFIG\n"
               "\n"
               "Rate-limit and quota daemon speaking the divvy protocol.\n"
               "CONFIG is a rules file, .ini or .json (see divvyd.rules(5)).\n"
               "\n"
               "  -l, --listen=ADDR        Listen on tcp:HOST:PORT (HOST may be [IPv6]) or unix:PATH;\n"
               "                           repeatable (default tcp:127.0.0.1:$PORT, else port %d;\n"
               "                           ignored when socket-activated)\n"
               "      --unix-mode=MODE     Octal mode of Unix sockets we create (default 0%o)\n"
               "  -d, --db=DIR             LMDB directory (default $STATE_DIRECTORY, else %s)\n"
               "      --map-size=BYTES     Initial LMDB map size, suffixes K M G (default 64M)\n"
               "      --map-size-max=BYTES Map growth cap (default 16G; hits may use 7/8 of it)\n"
               "      --sync=MODE          none, periodic or always (default periodic)\n"
               "      --sync-interval=MS   Periodic mode: fsync at most this often (default 100)\n"
               "      --max-connections=N  Refuse clients beyond N (default %d)\n"
               "      --idle-timeout=SEC   Close connections idle this long (default 0 = never)\n"
               "      --output-limit=BYTES Stop reading a client whose unsent replies exceed this\n"
               "                           (default 1M)\n"
               "      --sweep-interval=MS  How often expired counters are swept (default 1000)\n"
               "      --debug              Log each HIT with its deciding rule (also DEBUG=divvy)\n"
               "      --allow-root         Run even as root (refused otherwise: it needs no privilege)\n"
               "      --statsd-host=HOST   Send statsd metrics to HOST (also $STATSD_HOST)\n"
               "      --statsd-port=PORT   ... on PORT (also $STATSD_PORT; both are needed)\n"
               "      --statsd-prefix=P    Prefix of every statsd name, a '.' is added unless P is\n"
               "                           empty or ends in one (also $STATSD_PREFIX)\n"
               "      --statsd-tcp         Use TCP instead of UDP (also non-empty $STATSD_USE_TCP)\n"
               "      --statsd-interval=MS Flush aggregated statsd metrics this often (default 1000)\n"
               "      --http-port=PORT     Serve Prometheus metrics over HTTP (also $HTTP_SERVICE_PORT)\n"
               "      --http-address=ADDR  ... on this numeric address (default 127.0.0.1)\n"
               "      --metrics-path=PATH  ... at PATH (also $PROMETHEUS_METRICS_PATH; default /metrics)\n"
               "  -n, --check-config       Validate CONFIG, print a one-line summary, exit\n"
               "      --dump-config        Print CONFIG's rules as normalized JSON, exit\n"
               "  -h, --help               Show this help and exit\n"
               "      --version            Show the version and exit\n",
               DIVVY_PROTO_PORT, UNIX_MODE_DEFAULT, DB_DEFAULT, MAX_CONNECTIONS_DEFAULT);
}

typedef enum Action {
        ACTION_RUN,
        ACTION_CHECK_CONFIG,
        ACTION_DUMP_CONFIG,
} Action;

/* Loads path and prints every error to stderr. Returns 0 or a negative errno. */
static int load_rules(const char *path, RuleSet **ret) {
        Diag diag;
        int r;

        diag_init(&diag, path);
        r = config_load(path, ret, &diag);
        if (r < 0) {
                if (diag_count(&diag) > 0)
                        diag_print(&diag, stderr);
                else
                        fprintf(stderr, "%s: %s\n", path, strerror(-r));
        }
        diag_done(&diag);
        return r;
}

/* Decimal unsigned integer in [min, max]. */
static int parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *ret) {
        unsigned long long v;
        char *end;

        if (*s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno != 0 || *end != '\0' || v < min || v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

/* Bytes with an optional K, M or G suffix (powers of 1024). */
static int parse_size(const char *s, uint64_t *ret) {
        unsigned long long v;
        unsigned shift = 0;
        char *end;

        if (*s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno != 0)
                return -ERANGE;
        if (*end != '\0') {
                switch (*end) {
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
                default:
                        return -EINVAL;
                }
                if (end[1] != '\0')
                        return -EINVAL;
        }
        if (v > (UINT64_MAX >> shift))
                return -ERANGE;
        *ret = (uint64_t) v << shift;
        return 0;
}

static int usage_error(const char *option, const char *value) {
        fprintf(stderr, "divvyd: invalid value for %s: '%s'. Try 'divvyd --help'.\n", option, value);
        return 2;
}

int main(int argc, char *argv[]) {
        enum {
                ARG_VERSION = 0x100,
                ARG_DUMP_CONFIG,
                ARG_UNIX_MODE,
                ARG_MAP_SIZE,
                ARG_MAP_SIZE_MAX,
                ARG_SYNC,
                ARG_SYNC_INTERVAL,
                ARG_MAX_CONNECTIONS,
                ARG_IDLE_TIMEOUT,
                ARG_OUTPUT_LIMIT,
                ARG_SWEEP_INTERVAL,
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
        };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                { "check-config", no_argument, NULL, 'n' },
                { "dump-config", no_argument, NULL, ARG_DUMP_CONFIG },
                { "listen", required_argument, NULL, 'l' },
                { "unix-mode", required_argument, NULL, ARG_UNIX_MODE },
                { "db", required_argument, NULL, 'd' },
                { "map-size", required_argument, NULL, ARG_MAP_SIZE },
                { "map-size-max", required_argument, NULL, ARG_MAP_SIZE_MAX },
                { "sync", required_argument, NULL, ARG_SYNC },
                { "sync-interval", required_argument, NULL, ARG_SYNC_INTERVAL },
                { "max-connections", required_argument, NULL, ARG_MAX_CONNECTIONS },
                { "idle-timeout", required_argument, NULL, ARG_IDLE_TIMEOUT },
                { "output-limit", required_argument, NULL, ARG_OUTPUT_LIMIT },
                { "sweep-interval", required_argument, NULL, ARG_SWEEP_INTERVAL },
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
                {},
        };
        static ListenAddress addresses[LISTEN_MAX];
        size_t n_listen = 0;
        ManagerSettings settings = {
                .unix_mode = UNIX_MODE_DEFAULT,
                .store = {
                        .sync = STORE_SYNC_PERIODIC,
                        .sync_interval_usec = STORE_SYNC_INTERVAL_DEFAULT_USEC,
                },
                .server = {
                        .max_connections = MAX_CONNECTIONS_DEFAULT,
                        .output_limit = OUTPUT_LIMIT_DEFAULT,
                },
                .sweep_interval_usec = MANAGER_SWEEP_INTERVAL_DEFAULT_USEC,
        };
        Action action = ACTION_RUN;
        const char *statsd_port = NULL, *http_port = NULL;
        bool statsd_tcp = false, allow_root = false;
        uint64_t v;
        char *end;
        int c;

        while ((c = getopt_long(argc, argv, "hnl:d:", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return EXIT_SUCCESS;
                case ARG_VERSION:
                        printf("divvyd %s\n", PACKAGE_VERSION);
                        return EXIT_SUCCESS;
                case 'n':
                        action = ACTION_CHECK_CONFIG;
                        break;
                case ARG_DUMP_CONFIG:
                        action = ACTION_DUMP_CONFIG;
                        break;
                case 'l':
                        if (n_listen >= LISTEN_MAX) {
                                fprintf(stderr, "divvyd: at most %d --listen options.\n", LISTEN_MAX);
                                return 2;
                        }
                        if (listen_address_parse(optarg, &addresses[n_listen]) < 0)
                                return usage_error("--listen (expected tcp:HOST:PORT or unix:PATH)", optarg);
                        n_listen++;
                        break;
                case ARG_UNIX_MODE: {
                        unsigned long mode;
                        errno = 0;
                        mode = strtoul(optarg, &end, 8);
                        if (errno != 0 || end == optarg || *end != '\0' || mode > 07777)
                                return usage_error("--unix-mode", optarg);
                        settings.unix_mode = (mode_t) mode;
                        break;
                }
                case 'd':
                        if (optarg[0] == '\0')
                                return usage_error("--db", optarg);
                        settings.store.path = optarg;
                        break;
                case ARG_MAP_SIZE:
                        if (parse_size(optarg, &v) < 0 || v == 0)
                                return usage_error("--map-size", optarg);
                        settings.store.map_size = v;
                        break;
                case ARG_MAP_SIZE_MAX:
                        if (parse_size(optarg, &v) < 0 || v == 0)
                                return usage_error("--map-size-max", optarg);
                        settings.store.map_size_max = v;
                        break;
                case ARG_SYNC: {
                        StoreSync sync = store_sync_from_string(optarg);
                        if (sync < 0)
                                return usage_error("--sync (none, periodic or always)", optarg);
                        settings.store.sync = sync;
                        break;
                }
                case ARG_SYNC_INTERVAL:
                        if (parse_uint(optarg, 1, 3600 * 1000, &v) < 0)
                                return usage_error("--sync-interval", optarg);
                        settings.store.sync_interval_usec = v * 1000;
                        break;
                case ARG_MAX_CONNECTIONS:
                        if (parse_uint(optarg, 1, 10 * 1000 * 1000, &v) < 0)
                                return usage_error("--max-connections", optarg);
                        settings.server.max_connections = (unsigned) v;
                        break;
                case ARG_IDLE_TIMEOUT:
                        if (parse_uint(optarg, 0, 365ULL * 24 * 3600, &v) < 0)
                                return usage_error("--idle-timeout", optarg);
                        settings.server.idle_timeout_usec = v * 1000 * 1000;
                        break;
                case ARG_OUTPUT_LIMIT:
                        if (parse_size(optarg, &v) < 0 || v < 1024 || v > (1ULL << 30))
                                return usage_error("--output-limit (1K .. 1G)", optarg);
                        settings.server.output_limit = (size_t) v;
                        break;
                case ARG_SWEEP_INTERVAL:
                        if (parse_uint(optarg, 1, 3600 * 1000, &v) < 0)
                                return usage_error("--sweep-interval", optarg);
                        settings.sweep_interval_usec = v * 1000;
                        break;
                case ARG_DEBUG:
                        settings.server.debug = true;
                        break;
                case ARG_ALLOW_ROOT:
                        allow_root = true;
                        break;
                case ARG_STATSD_HOST:
                        if (optarg[0] == '\0')
                                return usage_error("--statsd-host", optarg);
                        settings.statsd.host = optarg;
                        break;
                case ARG_STATSD_PORT:
                        if (parse_uint(optarg, 1, 65535, &v) < 0)
                                return usage_error("--statsd-port", optarg);
                        statsd_port = optarg;
                        break;
                case ARG_STATSD_PREFIX:
                        if (strlen(optarg) >= STATSD_PREFIX_MAX)
                                return usage_error("--statsd-prefix (too long)", optarg);
                        settings.statsd.prefix = optarg;
                        break;
                case ARG_STATSD_TCP:
                        statsd_tcp = true;
                        break;
                case ARG_STATSD_INTERVAL:
                        if (parse_uint(optarg, 10, 3600 * 1000, &v) < 0)
                                return usage_error("--statsd-interval (10 .. 3600000)", optarg);
                        settings.statsd.interval_usec = v * 1000;
                        break;
                case ARG_HTTP_PORT:
                        if (parse_uint(optarg, 0, 65535, &v) < 0)
                                return usage_error("--http-port", optarg);
                        http_port = optarg;
                        break;
                case ARG_HTTP_ADDRESS:
                        settings.http.address = optarg;
                        break;
                case ARG_METRICS_PATH:
                        if (optarg[0] != '/')
                                return usage_error("--metrics-path (must start with '/')", optarg);
                        settings.http.metrics_path = optarg;
                        break;
                default:
                        fprintf(stderr, "Try 'divvyd --help'.\n");
                        return 2;
                }

        if (optind != argc - 1) {
                fprintf(stderr, "divvyd: expected exactly one CONFIG file argument. Try 'divvyd --help'.\n");
                return 2;
        }
        const char *path = argv[optind];

        if (action != ACTION_RUN) {
                RuleSet *rules = NULL;
                int ret = EXIT_SUCCESS;

                if (load_rules(path, &rules) < 0)
                        return EXIT_FAILURE;
                if (action == ACTION_CHECK_CONFIG) {
                        char summary[256];
                        printf("%s: OK, %s\n", path, config_summary(rules, summary, sizeof summary));
                } else if (config_dump_json(rules, stdout) < 0 || fflush(stdout) != 0) {
                        fprintf(stderr, "divvyd: failed to write JSON\n");
                        ret = EXIT_FAILURE;
                }
                ruleset_free(rules);
                return ret;
        }

        /* A rate limiter needs no privilege: sockets are passed by systemd or unprivileged, the
         * database directory is its own. As root, a bug or a hostile client would hold the whole
         * machine, so root must be asked for. */
        if (geteuid() == 0) {
                if (!allow_root) {
                        log_error("Refusing to run as root: divvyd needs no privileges. Run it as an "
                                  "unprivileged user (the packaged unit uses User=divvy), or pass "
                                  "--allow-root.");
                        return EXIT_FAILURE;
                }
                log_warning("Running as root (--allow-root)");
        }

        /* Defaults that come from the environment. */
        const char *e = getenv("DEBUG");
        if (e && strstr(e, "divvy"))
                settings.server.debug = true;
        if (settings.server.debug)
                log_set_max_level(LOG_DEBUG);

        static char state_dir[PATH_MAX];
        if (!settings.store.path) {
                /* $STATE_DIRECTORY may list several directories separated by ':'; we want the first. */
                e = getenv("STATE_DIRECTORY");
                if (e && e[0] != '\0' && e[0] != ':') {
                        snprintf(state_dir, sizeof state_dir, "%.*s", (int) strcspn(e, ":"), e);
                        settings.store.path = state_dir;
                } else
                        settings.store.path = DB_DEFAULT;
        }

        if (n_listen == 0) {
                char addr[64];
                uint64_t port = DIVVY_PROTO_PORT;

                e = getenv("PORT");
                if (e && e[0] != '\0' && parse_uint(e, 1, 65535, &port) < 0) {
                        log_error("Invalid $PORT '%s': expected a port number 1..65535", e);
                        return EXIT_FAILURE;
                }
                snprintf(addr, sizeof addr, "tcp:127.0.0.1:%" PRIu64, port);
                if (listen_address_parse(addr, &addresses[0]) < 0)
                        return EXIT_FAILURE;
                n_listen = 1;
        }

        /* Metrics: divvy's environment variables, unless the options said otherwise. */
        if (!settings.statsd.host && (e = getenv("STATSD_HOST")) && e[0] != '\0')
                settings.statsd.host = e;
        if (!statsd_port && (e = getenv("STATSD_PORT")) && e[0] != '\0')
                statsd_port = e;
        if (!settings.statsd.prefix && (e = getenv("STATSD_PREFIX")))
                settings.statsd.prefix = e;
        if (!statsd_tcp && (e = getenv("STATSD_USE_TCP")) && e[0] != '\0')
                statsd_tcp = true;
        if (settings.statsd.host && statsd_port) {
                if (parse_uint(statsd_port, 1, 65535, &v) < 0) {
                        log_error("Invalid statsd port '%s': expected a port number 1..65535", statsd_port);
                        return EXIT_FAILURE;
                }
                settings.statsd.port = (uint16_t) v;
                settings.statsd.tcp = statsd_tcp;
        } else {
                /* Like divvy: statsd needs both. */
                if (settings.statsd.host || statsd_port)
                        log_warning("statsd needs both a host and a port (STATSD_HOST, STATSD_PORT); not "
                                    "sending statsd metrics");
                settings.statsd.host = NULL;
        }

        if (!http_port && (e = getenv("HTTP_SERVICE_PORT")) && e[0] != '\0')
                http_port = e;
        if (!settings.http.metrics_path && (e = getenv("PROMETHEUS_METRICS_PATH")) && e[0] != '\0')
                settings.http.metrics_path = e;
        if (http_port) {
                if (parse_uint(http_port, 0, 65535, &v) < 0) {
                        log_error("Invalid HTTP port '%s': expected a port number 0..65535", http_port);
                        return EXIT_FAILURE;
                }
                settings.http.port = (uint16_t) v;
                if (!settings.http.metrics_path)
                        settings.http.metrics_path = "/metrics";
                if (settings.http.metrics_path[0] != '/') {
                        log_error("Invalid metrics path '%s': must start with '/'",
                                  settings.http.metrics_path);
                        return EXIT_FAILURE;
                }
        } else {
                if (settings.http.metrics_path || settings.http.address)
                        log_warning("No HTTP port (HTTP_SERVICE_PORT or --http-port): not serving metrics");
                settings.http.metrics_path = NULL;
        }

        settings.config_path = path;
        settings.listen = addresses;
        settings.n_listen = n_listen;

        Manager *m = NULL;
        if (manager_new(&settings, &m) < 0)
                return EXIT_FAILURE;
        int r = manager_run(m);
        manager_free(m);
        return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
