/* SPDX-License-Identifier: MIT */
/*
 * divvy: the command-line client, for shell scripts, cron jobs and workers.
 *
 *   divvy hit [ADDRESS OPTIONS] [--json] [--quiet] [--wait[=MAX_SECONDS]] [--timeout SEC] key=value...
 *   divvy ping [ADDRESS OPTIONS] [--timeout SEC]
 *
 * Exit status: 0 allowed (ping: reachable), 1 denied, 2 error (one line on stderr).
 */

#include "libdivvy/divvy.h"

#include "shared/clock.h"
#include "shared/macro.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_ALLOWED 0
#define EXIT_DENIED  1
#define EXIT_ERROR   2

#define PACKAGED_SOCKET "/run/divvyd/divvyd.sock" /* where the packaged divvyd.socket listens */
#define FALLBACK_ADDRESS                                                                                    \
        "127.0.0.1:" STRINGIFY(                                                                             \
                DIVVY_PORT_DEFAULT) /* divvy's port, on loopback: the daemon's own default listener */
#define ADDRESS_MAX 512             /* bytes: an address built from --host/--port or --socket */
#define WAIT_RETRY_USEC                                                                                     \
        (250ULL * 1000ULL)     /* 250 ms: pause before retrying a denial that reported no reset time        \
                                * (reset 0), so --wait never spins */
#define SECONDS_MAX 31536000.0 /* one year: the largest --wait/--timeout we accept */

typedef enum Verb {
        VERB_HIT,
        VERB_PING,
} Verb;

typedef struct Args {
        Verb verb;
        const char *socket_path, *host, *port, *address;
        bool json, quiet, wait;
        double wait_max; /* seconds; < 0: no limit */
        double timeout;  /* seconds; < 0: the library's default */
        char **pairs;
        size_t n_pairs;
} Args;

static void help(void) {
        printf("Usage: divvy hit [OPTIONS] key=value ...\n"
               "       divvy ping [OPTIONS]\n"
               "\n"
               "Asks divvyd whether an operation is allowed and consumes its quota.\n"
               "Prints \"ALLOWED CREDIT RESET\" (e.g. \"true 2 3600\"); exits 0 when allowed,\n"
               "1 when denied, 2 on error.\n"
               "\n"
               "  -s, --socket=PATH       connect to the Unix socket PATH\n"
               "  -H, --host=HOST         connect to HOST over TCP (default 127.0.0.1)\n"
               "  -p, --port=PORT         TCP port (default " STRINGIFY(
                       DIVVY_PORT_DEFAULT) ")\n"
                                           "  -a, --address=ADDR      unix:PATH, tcp:HOST:PORT, /PATH or "
                                           "HOST:PORT\n"
                                           "  -j, --json              print "
                                           "{\"allowed\":true,\"credit\":2,\"reset\":3600}\n"
                                           "  -q, --quiet             print nothing; only the exit status "
                                           "tells\n"
                                           "  -w, --wait[=SECONDS]    when denied, sleep until the window "
                                           "resets and retry,\n"
                                           "                          for at most SECONDS in total "
                                           "(default: no limit)\n"
                                           "  -t, --timeout=SECONDS   per request, connect included "
                                           "(default 5)\n"
                                           "  -h, --help              show this help\n"
                                           "      --version           show the version\n"
                                           "\n"
                                           "Default address: $DIVVY_ADDRESS, else %s if it exists, else "
                                           "%s.\n"
                                           "Values with spaces or '=' are quoted for you; '\"' and line "
                                           "breaks cannot be sent.\n",
               PACKAGED_SOCKET, FALLBACK_ADDRESS);
}

/* Prints "divvy: <message>" to stderr and returns EXIT_ERROR. */
static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
        va_list ap;

        fputs("divvy: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        return EXIT_ERROR;
}

static int parse_seconds(const char *s, const char *what, double *ret) {
        char *end;
        double v;

        errno = 0;
        v = strtod(s, &end);
        if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v < 0 || v > SECONDS_MAX)
                return fail("Invalid %s '%s': expected seconds between 0 and %.0f", what, s, SECONDS_MAX);
        *ret = v;
        return 0;
}

/* The options before the command. Returns 0 to go on, or -1 with the exit status (after
 * --help/--version too) in *ret_exit. */
static int parse_options(int argc, char **argv, Args *a, int *ret_exit) {
        enum { ARG_VERSION = 0x100 };
        static const struct option options[] = {
                { "socket", required_argument, NULL, 's' },
                { "host", required_argument, NULL, 'H' },
                { "port", required_argument, NULL, 'p' },
                { "address", required_argument, NULL, 'a' },
                { "json", no_argument, NULL, 'j' },
                { "quiet", no_argument, NULL, 'q' },
                { "wait", optional_argument, NULL, 'w' },
                { "timeout", required_argument, NULL, 't' },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                {},
        };
        int c;

        *a = (Args){ .wait_max = -1, .timeout = -1 };
        *ret_exit = EXIT_ERROR;
        opterr = 0; /* our own one-line messages */

        while ((c = getopt_long(argc, argv, "s:H:p:a:jqw::t:h", options, NULL)) >= 0) {
                switch (c) {
                case 's':
                        a->socket_path = optarg;
                        break;
                case 'H':
                        a->host = optarg;
                        break;
                case 'p':
                        a->port = optarg;
                        break;
                case 'a':
                        a->address = optarg;
                        break;
                case 'j':
                        a->json = true;
                        break;
                case 'q':
                        a->quiet = true;
                        break;
                case 'w':
                        a->wait = true;
                        if (optarg && parse_seconds(optarg, "--wait", &a->wait_max) != 0)
                                return -1;
                        break;
                case 't':
                        if (parse_seconds(optarg, "--timeout", &a->timeout) != 0)
                                return -1;
                        break;
                case 'h':
                        help();
                        *ret_exit = EXIT_SUCCESS;
                        return -1;
                case ARG_VERSION:
                        printf("divvy %s (libdivvy %s)\n", PACKAGE_VERSION, divvy_version());
                        *ret_exit = EXIT_SUCCESS;
                        return -1;
                case '?':
                        if (optopt && optopt < ARG_VERSION && strchr("sHpat", optopt))
                                fail("Option -%c needs a value (see divvy --help)", optopt);
                        else
                                fail("Invalid option '%s' (see divvy --help)", argv[optind - 1]);
                        return -1;
                default:
                        return -1;
                }
        }

        return 0;
}

/* The command and its key=value arguments, from argv[optind] on. Returns 0 or -1 (the
 * message printed). */
static int parse_command(int argc, char **argv, Args *a) {
        const char *verb;

        if (optind >= argc) {
                fail("Missing command: hit or ping (see divvy --help)");
                return -1;
        }
        verb = argv[optind++];
        if (strcmp(verb, "hit") == 0)
                a->verb = VERB_HIT;
        else if (strcmp(verb, "ping") == 0)
                a->verb = VERB_PING;
        else {
                fail("Unknown command '%s': expected hit or ping (see divvy --help)", verb);
                return -1;
        }

        if ((a->socket_path != NULL) + (a->host || a->port) + (a->address != NULL) > 1) {
                fail("--socket, --host/--port and --address exclude each other");
                return -1;
        }

        a->pairs = argv + optind;
        a->n_pairs = (size_t) (argc - optind);
        if (a->verb == VERB_PING && a->n_pairs > 0) {
                fail("ping takes no key=value arguments");
                return -1;
        }
        if (a->n_pairs > DIVVY_PAIRS_MAX) {
                fail("Too many key=value arguments: %zu (at most %d)", a->n_pairs, DIVVY_PAIRS_MAX);
                return -1;
        }
        for (size_t i = 0; i < a->n_pairs; i++) {
                char *eq = strchr(a->pairs[i], '=');
                if (!eq || eq == a->pairs[i]) {
                        fail("Invalid argument '%s': expected key=value", a->pairs[i]);
                        return -1;
                }
        }
        return 0;
}

/* Returns 0 to go on, or -1 with the exit status (after --help/--version too) in *ret_exit. */
static int parse_args(int argc, char **argv, Args *a, int *ret_exit) {
        if (parse_options(argc, argv, a, ret_exit) < 0)
                return -1;
        return parse_command(argc, argv, a);
}

static int pick_address(const Args *a, char *buf, size_t size, const char **ret) {
        const char *env;
        int n;

        if (a->address)
                *ret = a->address;
        else if (a->socket_path) {
                n = snprintf(buf, size, "unix:%s", a->socket_path);
                if (n < 0 || (size_t) n >= size)
                        return fail("Socket path too long: %s", a->socket_path);
                *ret = buf;
        } else if (a->host || a->port) {
                const char *host = a->host ? a->host : "127.0.0.1";
                n = snprintf(buf, size, strchr(host, ':') && host[0] != '[' ? "[%s]:%s" : "%s:%s", host,
                             a->port ? a->port : STRINGIFY(DIVVY_PORT_DEFAULT));
                if (n < 0 || (size_t) n >= size)
                        return fail("Host name too long: %s", host);
                *ret = buf;
        } else if ((env = getenv("DIVVY_ADDRESS")) && *env)
                *ret = env;
        else if (access(PACKAGED_SOCKET, F_OK) == 0)
                *ret = "unix:" PACKAGED_SOCKET;
        else
                *ret = FALLBACK_ADDRESS;
        return 0;
}

static void print_result(const Args *a, const divvy_result *res) {
        if (a->quiet)
                return;
        if (a->json)
                printf("{\"allowed\":%s,\"credit\":%" PRIu64 ",\"reset\":%" PRId64 "}\n",
                       res->allowed ? "true" : "false", res->credit, res->reset_seconds);
        else
                printf("%s %" PRIu64 " %" PRId64 "\n", res->allowed ? "true" : "false", res->credit,
                       res->reset_seconds);
}

static void sleep_usec(uint64_t usec) {
        struct timespec ts = { .tv_sec = (time_t) (usec / 1000000ULL),
                               .tv_nsec = (long) (usec % 1000000ULL) * 1000L };

        while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
                ;
}

static int report_failure(divvy *d, int r) {
        if (r == -EINVAL || r == -E2BIG)
                return fail("%s", divvy_last_error(d));
        return fail("%s", divvy_last_error(d)[0] ? divvy_last_error(d) : strerror(-r));
}

static int run_hit(const Args *a, divvy *d) {
        divvy_pair pairs[DIVVY_PAIRS_MAX];
        uint64_t start = clock_usec(CLOCK_MONOTONIC), elapsed, pause, limit;
        divvy_result res;
        int r;

        for (size_t i = 0; i < a->n_pairs; i++) {
                char *eq = strchr(a->pairs[i], '=');
                *eq = '\0'; /* argv is ours to split */
                pairs[i] = (divvy_pair){ .key = a->pairs[i], .value = eq + 1 };
        }

        for (;;) {
                r = divvy_hit(d, pairs, a->n_pairs, &res);
                if (r < 0)
                        return report_failure(d, r);
                if (res.allowed || !a->wait || res.reset_seconds < 0) /* -1: always denied */
                        break;

                pause = res.reset_seconds > 0 ? (uint64_t) res.reset_seconds * 1000000ULL : WAIT_RETRY_USEC;
                if (a->wait_max >= 0) {
                        elapsed = clock_usec(CLOCK_MONOTONIC) - start;
                        limit = (uint64_t) (a->wait_max * 1e6);
                        if (elapsed + pause > limit)
                                break; /* the window resets after the limit: give up now */
                }
                sleep_usec(pause);
        }

        print_result(a, &res);
        return res.allowed ? EXIT_ALLOWED : EXIT_DENIED;
}

int main(int argc, char **argv) {
        char buf[ADDRESS_MAX];
        const char *address = NULL;
        divvy *d = NULL;
        int r, status;
        Args a;

        if (parse_args(argc, argv, &a, &status) < 0)
                return status;
        if (pick_address(&a, buf, sizeof buf, &address) != 0)
                return EXIT_ERROR;

        r = divvy_new(address, &d);
        if (r < 0)
                return fail("Invalid address '%s': %s", address, strerror(-r));
        if (a.timeout >= 0)
                (void) divvy_set_timeout(d, a.timeout == 0 ? 0 : (uint64_t) (a.timeout * 1e6) + 1);

        if (a.verb == VERB_PING) {
                r = divvy_ping(d);
                if (r < 0)
                        status = report_failure(d, r);
                else {
                        if (!a.quiet)
                                printf("%s is alive\n", address);
                        status = EXIT_SUCCESS;
                }
        } else
                status = run_hit(&a, d);

        divvy_free(d);
        if (fflush(stdout) != 0 && status != EXIT_ERROR)
                return fail("Failed to write the result: %s", strerror(errno));
        return status;
}
