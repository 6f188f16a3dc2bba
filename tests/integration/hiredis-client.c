/* SPDX-License-Identifier: MIT */
/*
 * hiredis from C against divvyd's RESP (issue #17), run by tests/integration/test_resp.py:
 *
 *   hiredis-client PORT 'CMD ARG ...' ['CMD ARG ...' ...]
 *
 * Connects to 127.0.0.1:PORT, pipelines every command (its words split at spaces) with
 * redisAppendCommandArgv(), then reads the replies with hiredis's reader and prints one line
 * per reply: i:<n>, s:<status>, e:<error>, b:<bulk>, nil, or [<elements>, ...]. Exits 1 if the
 * connection fails or a reply cannot be read.
 */

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORDS_MAX 64

static void print_reply(const redisReply *r) {
        switch (r->type) {
        case REDIS_REPLY_INTEGER:
                printf("i:%lld", r->integer);
                break;
        case REDIS_REPLY_STATUS:
                printf("s:%s", r->str);
                break;
        case REDIS_REPLY_ERROR:
                printf("e:%s", r->str);
                break;
        case REDIS_REPLY_STRING:
                printf("b:%.*s", (int) r->len, r->str);
                break;
        case REDIS_REPLY_NIL:
                printf("nil");
                break;
        case REDIS_REPLY_ARRAY:
                printf("[");
                for (size_t i = 0; i < r->elements; i++) {
                        if (i > 0)
                                printf(", ");
                        print_reply(r->element[i]);
                }
                printf("]");
                break;
        default:
                printf("?%d", r->type);
        }
}

int main(int argc, char *argv[]) {
        struct timeval tv = { .tv_sec = 10 };
        redisContext *c;

        if (argc < 3) {
                fprintf(stderr, "usage: %s PORT 'CMD ARG ...' ...\n", argv[0]);
                return 2;
        }
        c = redisConnectWithTimeout("127.0.0.1", atoi(argv[1]), tv);
        if (!c || c->err) {
                fprintf(stderr, "connect: %s\n", c ? c->errstr : "out of memory");
                return 1;
        }
        (void) redisSetTimeout(c, tv);
        for (int i = 2; i < argc; i++) {
                char *words[WORDS_MAX], *save = NULL, *copy = strdup(argv[i]);
                int n = 0;

                for (char *w = strtok_r(copy, " ", &save); w && n < WORDS_MAX;
                     w = strtok_r(NULL, " ", &save))
                        words[n++] = w;
                if (redisAppendCommandArgv(c, n, (const char **) words, NULL) != REDIS_OK) {
                        fprintf(stderr, "append: %s\n", c->errstr);
                        return 1;
                }
                free(copy);
        }
        for (int i = 2; i < argc; i++) {
                redisReply *r = NULL;

                if (redisGetReply(c, (void **) &r) != REDIS_OK || !r) {
                        fprintf(stderr, "reply %d: %s\n", i - 1, c->errstr);
                        return 1;
                }
                print_reply(r);
                printf("\n");
                freeReplyObject(r);
        }
        redisFree(c);
        return 0;
}
