/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * log.c: the daemon's logging. One line per message on stderr, prefixed with the
 * sd-daemon priority ("<3>" error, "<4>" warning, "<6>" info, "<7>" debug) so that
 * journald keeps the level. Only the daemon (src/daemon/: main, manager, server,
 * batch, listeners, statsd, http) logs; library-like modules report through return
 * codes and Diag lists.
 *
 * The *_errno() variants set errno from error (so "%m" prints it) and return
 * -abs(error), for `return log_error_errno(r, "Failed to ...: %m");`.
 */

#include <syslog.h>

#define LOG_LINE_MAX                                                                                        \
        2048 /* bytes: one message is formatted into a stack buffer of this size and truncated */

void log_set_max_level(int level); /* LOG_ERR .. LOG_DEBUG; default LOG_INFO */
int log_get_max_level(void);

/* Formats and writes one line if level <= the max level. Returns -abs(error) (0 if error is 0). */
int log_internal(int level, int error, const char *format, ...) __attribute__((format(printf, 3, 4)));

/* The level test is inlined so that a disabled debug message costs no call and no formatting. */
#define log_full_errno(level, error, ...)                                                                   \
        ({                                                                                                  \
                int _level = (level), _e = (error);                                                         \
                (_level <= log_get_max_level()) ? log_internal(_level, _e, __VA_ARGS__)                     \
                                                : (_e > 0 ? -_e : _e);                                      \
        })

#define log_debug(...)   log_full_errno(LOG_DEBUG, 0, __VA_ARGS__)
#define log_info(...)    log_full_errno(LOG_INFO, 0, __VA_ARGS__)
#define log_notice(...)  log_full_errno(LOG_NOTICE, 0, __VA_ARGS__)
#define log_warning(...) log_full_errno(LOG_WARNING, 0, __VA_ARGS__)
#define log_error(...)   log_full_errno(LOG_ERR, 0, __VA_ARGS__)

#define log_debug_errno(error, ...)   log_full_errno(LOG_DEBUG, error, __VA_ARGS__)
#define log_info_errno(error, ...)    log_full_errno(LOG_INFO, error, __VA_ARGS__)
#define log_warning_errno(error, ...) log_full_errno(LOG_WARNING, error, __VA_ARGS__)
#define log_error_errno(error, ...)   log_full_errno(LOG_ERR, error, __VA_ARGS__)
