/* SPDX-License-Identifier: MIT */
/*
 * A minimal libdivvy program: asks divvyd whether user USER may send one more email.
 *
 *   cc client.c $(pkg-config --cflags --libs libdivvy) -o divvy-example
 *   ./divvy-example unix:/run/divvyd/divvyd.sock alice
 *
 * Exit status: 0 allowed, 1 denied, 2 error.
 */

#include <divvy.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

int main(int argc, char **argv) {
        const char *address = argc > 1 ? argv[1] : "127.0.0.1:8321";
        const char *user = argc > 2 ? argv[2] : "alice";
        divvy_pair op[] = {
                { .key = "method", .value = "POST" },
                { .key = "path", .value = "/email/send" },
                { .key = "user", .value = user },
        };
        divvy_result res;
        divvy *d;
        int r;

        r = divvy_new(address, &d);
        if (r < 0) {
                fprintf(stderr, "bad address %s\n", address);
                return 2;
        }
        divvy_set_timeout(d, 2 * 1000000); /* microseconds */

        r = divvy_hit(d, op, sizeof op / sizeof op[0], &res);
        if (r == -EPROTO)
                fprintf(stderr, "server refused: %s %s\n", divvy_server_error_code(d),
                        divvy_server_error_reason(d));
        else if (r < 0)
                fprintf(stderr, "%s\n", divvy_last_error(d));
        else
                printf("%s, %" PRIu64 " left, resets in %" PRId64 " s\n", res.allowed ? "allowed" : "denied",
                       res.credit, res.reset_seconds);

        divvy_free(d);
        return r < 0 ? 2 : res.allowed ? 0 : 1;
}
