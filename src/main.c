/* SPDX-License-Identifier: MIT */
/* main.c: command-line options only; everything else lives in the core library. */

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "diag.h"
#include "rules.h"

static void help(void) {
        printf("Usage: divvyd [OPTIONS] CONFIG\n"
               "\n"
               "Rate-limit and quota daemon speaking the divvy protocol.\n"
               "CONFIG is a rules file, .ini or .json (see divvyd.rules(5)).\n"
               "\n"
               "  -n, --check-config     Validate CONFIG, print a one-line summary, exit\n"
               "      --dump-config      Print CONFIG's rules as normalized JSON, exit\n"
               "  -h, --help             Show this help and exit\n"
               "      --version          Show the version and exit\n");
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

int main(int argc, char *argv[]) {
        enum { ARG_VERSION = 0x100, ARG_DUMP_CONFIG };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                { "check-config", no_argument, NULL, 'n' },
                { "dump-config", no_argument, NULL, ARG_DUMP_CONFIG },
                {},
        };
        Action action = ACTION_RUN;
        int c;

        while ((c = getopt_long(argc, argv, "hn", options, NULL)) >= 0)
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
                default:
                        fprintf(stderr, "Try 'divvyd --help'.\n");
                        return 2;
                }

        if (optind != argc - 1) {
                fprintf(stderr, "divvyd: expected exactly one CONFIG file argument. Try 'divvyd --help'.\n");
                return 2;
        }
        const char *path = argv[optind];

        RuleSet *rules = NULL;
        if (load_rules(path, &rules) < 0)
                return EXIT_FAILURE;

        int ret = EXIT_SUCCESS;
        switch (action) {
        case ACTION_CHECK_CONFIG: {
                char summary[256];
                printf("%s: OK, %s\n", path, config_summary(rules, summary, sizeof summary));
                break;
        }
        case ACTION_DUMP_CONFIG:
                if (config_dump_json(rules, stdout) < 0 || fflush(stdout) != 0) {
                        fprintf(stderr, "divvyd: failed to write JSON\n");
                        ret = EXIT_FAILURE;
                }
                break;
        case ACTION_RUN:
                /* The server arrives with the daemon issue; until then only the config
                 * checks are available, and saying so beats pretending to serve. */
                fprintf(stderr, "divvyd: serving is not implemented yet; use --check-config\n");
                ret = EXIT_FAILURE;
                break;
        }

        ruleset_free(rules);
        return ret;
}
