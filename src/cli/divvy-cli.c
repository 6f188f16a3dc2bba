/* SPDX-License-Identifier: MIT */
/*
 * divvy: the command-line client, for shell scripts, cron jobs and workers.
 *
 *   divvy hit [ADDRESS OPTIONS] [--json] [--quiet] [--wait[=MAX_SECONDS]] [--timeout SEC] key=value...
 *   divvy take N | peek [N] | charge N | refund N  [OPTIONS] key=value...   (protocol version 2)
 *   divvy reset | explain [OPTIONS] key=value...
 *   divvy hello | ping [ADDRESS OPTIONS] [--timeout SEC]
 *
 * Exit status: 0 allowed (ping, hello, reset, explain: done), 1 denied, 2 error (one line on
 * stderr).
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
        VERB_HELLO,
        VERB_TAKE,
        VERB_PEEK,
        VERB_CHARGE,
        VERB_REFUND,
        VERB_RESET,
        VERB_EXPLAIN,
        _VERB_MAX,
} Verb;

static const struct {
        const char *name;
        bool pairs; /* takes key=value arguments */
        int count;  /* 0: none; 1: required N >= 1; 2: optional N >= 0 */
} verbs[_VERB_MAX] = {
        [VERB_HIT] = { "hit", true, 0 },         [VERB_PING] = { "ping", false, 0 },
        [VERB_HELLO] = { "hello", false, 0 },    [VERB_TAKE] = { "take", true, 1 },
        [VERB_PEEK] = { "peek", true, 2 },       [VERB_CHARGE] = { "charge", true, 1 },
        [VERB_REFUND] = { "refund", true, 1 },   [VERB_RESET] = { "reset", true, 0 },
        [VERB_EXPLAIN] = { "explain", true, 0 },
};

typedef struct Args {
        Verb verb;
        uint64_t count; /* TAKE, PEEK, CHARGE, REFUND */
        const char *socket_path, *host, *port, *address;
        bool json, quiet, wait;
        unsigned tries;  /* --wait: most requests in all; 0: no limit */
        double wait_max; /* seconds; < 0: no limit */
        double timeout;  /* seconds; < 0: the library's default */
        char **pairs;
        size_t n_pairs;
} Args;

static void help(void) {
        printf("Usage: divvy hit [OPTIONS] key=value ...\n"
               "       divvy take N [OPTIONS] key=value ...\n"
               "       divvy peek [N] [OPTIONS] key=value ...\n"
               "       divvy charge N | refund N [OPTIONS] key=value ...\n"
               "       divvy reset | explain [OPTIONS] key=value ...\n"
               "       divvy hello | ping [OPTIONS]\n"
               "\n"
               "Asks divvyd whether an operation is allowed and consumes its quota.\n"
               "hit prints \"ALLOWED CREDIT RESET\" (e.g. \"true 2 3600\"); take, peek, charge and\n"
               "refund (N credits; protocol version 2) print \"allowed=true credit=7 limit=10\n"
               "reset=42 retry=0 rule=LABEL\"; reset prints \"reset=COUNTERS\", explain the rules\n"
               "that match. Exits 0 when allowed (or done), 1 when denied, 2 on error.\n"
               "\n"
               "  -s, --socket=PATH       connect to the Unix socket PATH\n"
               "  -H, --host=HOST         connect to HOST over TCP (default 127.0.0.1)\n"
               "  -p, --port=PORT         TCP port (default %d)\n"
               "  -a, --address=ADDR      unix:PATH, tcp:HOST:PORT, /PATH or HOST:PORT\n"
               "  -j, --json              print JSON, e.g. {\"allowed\":true,\"credit\":2,\"reset\":3600}\n"
               "  -q, --quiet             print nothing; only the exit status tells\n"
               "  -w, --wait[=SECONDS]    hit, take: when denied, sleep for the retry-after and\n"
               "                          try again, for at most SECONDS in total (default: no limit)\n"
               "      --tries=N           take --wait: send at most N requests (default: no limit)\n"
               "  -t, --timeout=SECONDS   per request, connect included (default 5)\n"
               "  -h, --help              show this help\n"
               "      --version           show the version\n"
               "\n"
               "Default address: $DIVVY_ADDRESS, else %s if it exists, else %s.\n"
               "Values with spaces or '=' are quoted for you; '\"' and line breaks cannot be sent.\n",
               DIVVY_PORT_DEFAULT, PACKAGED_SOCKET, FALLBACK_ADDRESS);
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
        enum { ARG_VERSION = 0x100, ARG_TRIES };
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
                { "tries", required_argument, NULL, ARG_TRIES },
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
                case ARG_TRIES: {
                        char *end;
                        unsigned long v;

                        errno = 0;
                        v = strtoul(optarg, &end, 10);
                        if (errno != 0 || end == optarg || *end != '\0' || optarg[0] == '-' || v == 0 ||
                            v > 1000000) {
                                fail("Invalid --tries '%s': expected a number from 1 to 1000000", optarg);
                                return -1;
                        }
                        a->tries = (unsigned) v;
                        break;
                }
                case ARG_VERSION:
                        printf("divvy %s (libdivvy %s)\n", PACKAGE_VERSION, divvy_version());
                        *ret_exit = EXIT_SUCCESS;
                        return -1;
                case '?':
                        if (optopt == ARG_TRIES)
                                fail("Option --tries needs a value (see divvy --help)");
                        else if (optopt && optopt < ARG_VERSION && strchr("sHpat", optopt))
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

/* A count argument: decimal digits only, at most DIVVY_COUNT_MAX. */
static bool parse_count(const char *s, uint64_t *ret) {
        uint64_t v = 0;

        if (!*s || strlen(s) > 16)
                return false;
        for (const char *p = s; *p; p++) {
                if (*p < '0' || *p > '9')
                        return false;
                v = v * 10 + (uint64_t) (*p - '0');
        }
        if (v > DIVVY_COUNT_MAX)
                return false;
        *ret = v;
        return true;
}

/* The command, its count and its key=value arguments, from argv[optind] on. Returns 0 or -1
 * (the message printed). */
static int parse_command(int argc, char **argv, Args *a) {
        const char *verb;
        int v;

        if (optind >= argc) {
                fail("Missing command: hit, take, peek, charge, refund, reset, explain, hello or ping "
                     "(see divvy --help)");
                return -1;
        }
        verb = argv[optind++];
        for (v = 0; v < _VERB_MAX; v++)
                if (strcmp(verb, verbs[v].name) == 0)
                        break;
        if (v == _VERB_MAX) {
                fail("Unknown command '%s': expected hit, take, peek, charge, refund, reset, explain, hello "
                     "or ping (see divvy --help)",
                     verb);
                return -1;
        }
        a->verb = (Verb) v;

        if ((a->socket_path != NULL) + (a->host || a->port) + (a->address != NULL) > 1) {
                fail("--socket, --host/--port and --address exclude each other");
                return -1;
        }
        if (a->wait && a->verb != VERB_HIT && a->verb != VERB_TAKE) {
                fail("--wait works with hit and take only");
                return -1;
        }
        if (a->tries > 0 && (a->verb != VERB_TAKE || !a->wait)) {
                fail("--tries works with take --wait only");
                return -1;
        }

        /* The count: the first argument, when it holds no '='. */
        a->count = 1;
        if (verbs[v].count > 0 && optind < argc && !strchr(argv[optind], '=')) {
                const char *n = argv[optind++];
                if (!parse_count(n, &a->count) || (verbs[v].count == 1 && a->count == 0)) {
                        fail("Invalid count '%s' for %s: expected a whole number from %d to %llu", n, verb,
                             verbs[v].count == 1, DIVVY_COUNT_MAX);
                        return -1;
                }
        } else if (verbs[v].count == 1) {
                fail("%s needs a count: divvy %s N key=value ...", verb, verb);
                return -1;
        }

        a->pairs = argv + optind;
        a->n_pairs = (size_t) (argc - optind);
        if (!verbs[v].pairs && a->n_pairs > 0) {
                fail("%s takes no key=value arguments", verb);
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
        else if (access(PACKAGED_SOCKET, F_OK) == 0 || errno == EACCES)
                /* EACCES: /run/divvyd (0750) hides it from users outside the divvy group. Falling
                 * back to TCP would report "connection refused" on 127.0.0.1; connecting reports
                 * the real reason, "Permission denied". */
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

/* A reset or retry-after the server reported, in µs to sleep: at most UINT64_MAX (a server
 * may report any 63-bit count of seconds; a product that wrapped would retry at once), or
 * WAIT_RETRY_USEC when it is 0. */
static uint64_t pause_usec(int64_t seconds) {
        if (seconds <= 0)
                return WAIT_RETRY_USEC;
        return (uint64_t) seconds > UINT64_MAX / 1000000ULL ? UINT64_MAX : (uint64_t) seconds * 1000000ULL;
}

/* True if sleeping pause now would end past --wait's limit, counted from start. */
static bool past_limit(const Args *a, uint64_t start, uint64_t pause) {
        uint64_t elapsed = clock_usec(CLOCK_MONOTONIC) - start, limit = (uint64_t) (a->wait_max * 1e6);

        return elapsed > limit || pause > limit - elapsed;
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

/* Splits the key=value arguments (argv is ours to write into). */
static void split_pairs(const Args *a, divvy_pair pairs[DIVVY_PAIRS_MAX]) {
        for (size_t i = 0; i < a->n_pairs; i++) {
                char *eq = strchr(a->pairs[i], '=');
                *eq = '\0';
                pairs[i] = (divvy_pair){ .key = a->pairs[i], .value = eq + 1 };
        }
}

static int run_hit(const Args *a, divvy *d) {
        divvy_pair pairs[DIVVY_PAIRS_MAX];
        uint64_t start = clock_usec(CLOCK_MONOTONIC), pause;
        divvy_result res;
        int r;

        split_pairs(a, pairs);

        for (;;) {
                r = divvy_hit(d, pairs, a->n_pairs, &res);
                if (r < 0)
                        return report_failure(d, r);
                if (res.allowed || !a->wait || res.reset_seconds < 0) /* -1: always denied */
                        break;

                pause = pause_usec(res.reset_seconds);
                if (a->wait_max >= 0 && past_limit(a, start, pause))
                        break; /* the window resets after the limit: give up now */
                sleep_usec(pause);
        }

        print_result(a, &res);
        return res.allowed ? EXIT_ALLOWED : EXIT_DENIED;
}

/* Prints s as a JSON string (quotes included). */
static void print_json_string(const char *s, size_t len) {
        putchar('"');
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char) s[i];
                if (c == '"' || c == '\\')
                        printf("\\%c", c);
                else if (c < 0x20 || c == 0x7f)
                        printf("\\u%04x", c);
                else
                        putchar(c); /* UTF-8 as is; a server's cut may leave a broken sequence */
        }
        putchar('"');
}

/* Prints s in double quotes with the server's escapes (\\ \" \t \xHH): one line. */
static void print_quoted(const char *s, size_t len, bool cut) {
        putchar('"');
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char) s[i];
                if (c == '"' || c == '\\')
                        printf("\\%c", c);
                else if (c == '\t')
                        fputs("\\t", stdout);
                else if (c < 0x20 || c == 0x7f)
                        printf("\\x%02x", c);
                else
                        putchar(c);
        }
        if (cut)
                fputs("\\...", stdout);
        putchar('"');
}

static void print_decision(const Args *a, const divvy_decision *r) {
        if (a->quiet)
                return;
        if (a->json) {
                printf("{\"allowed\":%s,\"credit\":%" PRIu64 ",\"limit\":%" PRIu64 ",\"reset\":%" PRIu64
                       ",\"retry\":%" PRId64 ",\"rule\":",
                       r->allowed ? "true" : "false", r->credit, r->limit, r->reset_seconds,
                       r->retry_seconds);
                print_json_string(r->rule, strlen(r->rule));
                puts("}");
        } else
                printf("allowed=%s credit=%" PRIu64 " limit=%" PRIu64 " reset=%" PRIu64 " retry=%" PRId64
                       " rule=%s\n",
                       r->allowed ? "true" : "false", r->credit, r->limit, r->reset_seconds,
                       r->retry_seconds, r->rule);
}

/* take N with --wait: a denial sleeps exactly its retry-after and tries again, within --wait's
 * limit and --tries; retry -1 (never) stops at once. */
static int run_decision(const Args *a, divvy *d) {
        divvy_pair pairs[DIVVY_PAIRS_MAX];
        uint64_t start = clock_usec(CLOCK_MONOTONIC), pause;
        unsigned tries = 0;
        divvy_decision res;
        int r;

        split_pairs(a, pairs);
        for (;;) {
                switch (a->verb) {
                case VERB_TAKE:
                        r = divvy_take(d, a->count, pairs, a->n_pairs, &res);
                        break;
                case VERB_PEEK:
                        r = divvy_peek(d, a->count, pairs, a->n_pairs, &res);
                        break;
                case VERB_CHARGE:
                        r = divvy_charge(d, a->count, pairs, a->n_pairs, &res);
                        break;
                default:
                        r = divvy_refund(d, a->count, pairs, a->n_pairs, &res);
                        break;
                }
                if (r < 0)
                        return report_failure(d, r);
                tries++;
                if (res.allowed || !a->wait)
                        break;
                if (res.retry_seconds < 0) {
                        print_decision(a, &res);
                        if (!a->quiet) /* a denial, not an error: -q prints none */
                                fail("Denied, and %s %" PRIu64
                                     " can never pass under the server's rules (retry=-1): not "
                                     "waiting",
                                     verbs[a->verb].name, a->count);
                        return EXIT_DENIED;
                }
                if (a->tries > 0 && tries >= a->tries)
                        break;
                pause = pause_usec(res.retry_seconds);
                if (a->wait_max >= 0 && past_limit(a, start, pause))
                        break; /* it would pass only after the limit: give up now */
                sleep_usec(pause);
        }

        print_decision(a, &res);
        return res.allowed ? EXIT_ALLOWED : EXIT_DENIED;
}

static int run_reset(const Args *a, divvy *d) {
        divvy_pair pairs[DIVVY_PAIRS_MAX];
        uint64_t n = 0;
        int r;

        split_pairs(a, pairs);
        r = divvy_reset(d, pairs, a->n_pairs, &n);
        if (r < 0)
                return report_failure(d, r);
        if (!a->quiet)
                printf(a->json ? "{\"reset\":%" PRIu64 "}\n" : "reset=%" PRIu64 "\n", n);
        return EXIT_SUCCESS;
}

static void print_json_field(const char *key, const char *value, bool comma) {
        printf("%s\"%s\":", comma ? "," : "", key);
        print_json_string(value, strlen(value));
}

static int run_explain(const Args *a, divvy *d) {
        divvy_pair pairs[DIVVY_PAIRS_MAX];
        divvy_explanation e;
        int r;

        split_pairs(a, pairs);
        r = divvy_explain(d, pairs, a->n_pairs, &e);
        if (r < 0)
                return report_failure(d, r);
        if (a->quiet)
                return EXIT_SUCCESS;
        if (a->json) {
                putchar('{');
                print_json_field("rule", e.rule, false);
                printf(",\"index\":%" PRIu64, e.index);
                print_json_field("policy", e.policy, true);
                fputs(",\"actor\":", stdout);
                if (e.has_actor)
                        print_json_string(e.actor, e.actor_len);
                else
                        fputs("null", stdout);
                printf(",\"actor_cut\":%s", e.actor_cut ? "true" : "false");
                print_json_field("algorithm", e.algorithm, true);
                print_json_field("canaries", e.canaries, true);
                print_json_field("continue", e.continues, true);
                puts("}");
                return EXIT_SUCCESS;
        }
        printf("rule=%s index=%" PRIu64 " policy=%s actor=", e.rule, e.index, e.policy);
        if (e.has_actor)
                print_quoted(e.actor, e.actor_len, e.actor_cut);
        else
                putchar('-');
        printf(" algorithm=%s canaries=%s continue=%s\n", e.algorithm, e.canaries[0] ? e.canaries : "-",
               e.continues[0] ? e.continues : "-");
        return EXIT_SUCCESS;
}

static int run_hello(const Args *a, divvy *d) {
        int r = divvy_hello(d);

        if (r < 0)
                return report_failure(d, r);
        if (a->quiet)
                return EXIT_SUCCESS;
        if (a->json) {
                printf("{\"proto\":%d", r);
                print_json_field("server", divvy_server_name(d), true);
                puts("}");
        } else
                printf("proto=%d server=%s\n", r, divvy_server_name(d));
        return EXIT_SUCCESS;
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
        if (r < 0) {
                /* Name the variable: an operator who passed no address may not know it is set. */
                const char *env = getenv("DIVVY_ADDRESS");
                return fail("Invalid address '%s'%s: %s", address,
                            env && address == env ? " (from $DIVVY_ADDRESS)" : "",
                            r == -EINVAL ? "expected unix:PATH, /PATH, tcp:HOST[:PORT] or HOST[:PORT] "
                                           "(PORT 1 to 65535, IPv6 in brackets)"
                                         : strerror(-r));
        }
        if (a.timeout >= 0)
                (void) divvy_set_timeout(d, a.timeout == 0 ? 0 : (uint64_t) (a.timeout * 1e6) + 1);

        if (a.verb == VERB_PING) {
                r = divvy_ping(d);
                if (r < 0)
                        status = report_failure(d, r);
                else {
                        if (a.json && !a.quiet) {
                                printf("{\"alive\":true");
                                print_json_field("address", address, true);
                                puts("}");
                        } else if (!a.quiet)
                                printf("%s is alive\n", address);
                        status = EXIT_SUCCESS;
                }
        } else if (a.verb == VERB_HIT)
                status = run_hit(&a, d);
        else if (a.verb == VERB_HELLO)
                status = run_hello(&a, d);
        else if (a.verb == VERB_RESET)
                status = run_reset(&a, d);
        else if (a.verb == VERB_EXPLAIN)
                status = run_explain(&a, d);
        else
                status = run_decision(&a, d);

        divvy_free(d);
        if (fflush(stdout) != 0 && status != EXIT_ERROR)
                return fail("Failed to write the result: %s", strerror(errno));
        return status;
}
