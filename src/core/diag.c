/* SPDX-License-Identifier: MIT */
#include "diag.h"
#include "shared/utf8.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void diag_init(Diag *d, const char *file) {
        *d = (Diag){ .file = file ? strdup(file) : NULL };
}

void diag_done(Diag *d) {
        for (size_t i = 0; i < d->n_messages; i++)
                free(d->messages[i]);
        free(d->messages);
        free(d->file);
        *d = (Diag){};
}

int diag_add(Diag *d, unsigned line, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = diag_vadd_in(d, NULL, line, fmt, ap);
        va_end(ap);
        return r;
}

int diag_add_in(Diag *d, const char *file, unsigned line, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = diag_vadd_in(d, file, line, fmt, ap);
        va_end(ap);
        return r;
}

int diag_vadd_in(Diag *d, const char *file, unsigned line, const char *fmt, va_list ap) {
        char *text = NULL, *msg = NULL;
        int r;

        if (d->n_messages >= DIAG_MAX) {
                d->n_dropped++;
                return 0;
        }

        r = vasprintf(&text, fmt, ap);
        if (r < 0)
                return -ENOMEM;

        file = file ? file : d->file ? d->file : "<config>";
        if (line > 0)
                r = asprintf(&msg, "%s:%u: %s", file, line, text);
        else
                r = asprintf(&msg, "%s: %s", file, text);
        free(text);
        if (r < 0)
                return -ENOMEM;
        /* Messages quote the file (a JSON key may hold "\n", an INI line an escape or a CR): a
         * message is one line of --check-config, one log line and the value of STATUS= in
         * an sd_notify datagram, where a line break would start an assignment of the file's
         * choosing. Control bytes other than tab become '?'. */
        text_mask_controls(msg);

        if (d->n_messages % 8 == 0) {
                char **m = realloc(d->messages, (d->n_messages + 8) * sizeof(char *));
                if (!m) {
                        free(msg);
                        return -ENOMEM;
                }
                d->messages = m;
        }
        d->messages[d->n_messages++] = msg;
        return 0;
}

size_t diag_count(const Diag *d) {
        return d->n_messages + d->n_dropped;
}

void diag_print(const Diag *d, FILE *f) {
        for (size_t i = 0; i < d->n_messages; i++)
                fprintf(f, "%s\n", d->messages[i]);
        if (d->n_dropped > 0)
                fprintf(f, "%s: ... and %zu more errors\n", d->file ? d->file : "<config>", d->n_dropped);
}
