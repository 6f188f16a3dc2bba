/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * diag.c: a list of configuration error messages, each naming file, line and
 * reason ('rules.ini:12: rule [method=GET] creditLimit "x" is not a non-negative decimal
 * integer').
 * Loaders and the rule validator append; callers print or log them all at once,
 * so one run of --check-config reports every error, not just the first.
 */

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#define DIAG_MAX                                                                                            \
        100 /* messages kept; later ones are counted but dropped so that a                                  \
             * garbage file cannot make us allocate without bound */

typedef struct Diag {
        char *file; /* owned; may be NULL */
        char **messages;
        size_t n_messages;
        size_t n_dropped;
} Diag;

/* file may be NULL; it is copied. */
void diag_init(Diag *d, const char *file);
void diag_done(Diag *d);

/* Appends "FILE:LINE: <formatted>" (line 0: "FILE: ..."; no file: "<config>"), one line:
 * control bytes other than tab, which may come from the file, as '?'.
 * Past DIAG_MAX messages it only counts. Returns 0 or -ENOMEM. */
int diag_add(Diag *d, unsigned line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* diag_add() for a message about a line of another file than d's (a YAML file of a directory);
 * file NULL: d's. */
int diag_add_in(Diag *d, const char *file, unsigned line, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
/* The va_list form of diag_add_in(). */
int diag_vadd_in(Diag *d, const char *file, unsigned line, const char *fmt, va_list ap)
        __attribute__((format(printf, 4, 0)));

size_t diag_count(const Diag *d); /* n_messages + n_dropped */

/* Writes each message on its own line, plus a line for dropped ones. */
void diag_print(const Diag *d, FILE *f);
