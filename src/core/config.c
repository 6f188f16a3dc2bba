/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "shared/macro.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

typedef enum ConfigFormat {
        CONFIG_FORMAT_INI,
        CONFIG_FORMAT_JSON,
        CONFIG_FORMAT_YAML, /* envoyproxy/ratelimit's, config-yaml.c */
        _CONFIG_FORMAT_MAX,
        _CONFIG_FORMAT_INVALID = -EINVAL,
} ConfigFormat;

/* By extension of the last path component, case-insensitively (".INI" is a
 * Windows habit, not a different format). */
static ConfigFormat config_format_from_path(const char *path) {
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        const char *dot = strrchr(base, '.');

        if (!dot || dot == base)
                return _CONFIG_FORMAT_INVALID;
        if (strcasecmp(dot, ".ini") == 0)
                return CONFIG_FORMAT_INI;
        if (strcasecmp(dot, ".json") == 0)
                return CONFIG_FORMAT_JSON;
        if (strcasecmp(dot, ".yaml") == 0 || strcasecmp(dot, ".yml") == 0)
                return CONFIG_FORMAT_YAML;
        return _CONFIG_FORMAT_INVALID;
}

/* Reads fd to its end into a NUL-terminated buffer the caller frees, never more than
 * max_size bytes: the file may change size after fstat(), so size (what fstat() said)
 * is only where to start. Errors go to diag. */
static int read_all_limited(int fd, size_t size, size_t max_size, char **ret, size_t *ret_len, Diag *diag) {
        /* One spare byte beyond the NUL lets us see EOF without growing. */
        size_t allocated = size + 2, len = 0;
        char *buf;
        int r;

        buf = malloc(allocated);
        if (!buf)
                return -ENOMEM;
        for (;;) {
                if (len + 1 >= allocated) {
                        if (len >= max_size) {
                                r = -EFBIG;
                                (void) diag_add(diag, 0, "file too large (grew past the limit of %zu bytes)",
                                                max_size);
                                goto fail;
                        }
                        size_t n = allocated < max_size / 2 ? allocated * 2 : max_size + 2;
                        char *p = realloc(buf, n);
                        if (!p) {
                                r = -ENOMEM;
                                goto fail;
                        }
                        buf = p;
                        allocated = n;
                }
                ssize_t k = read(fd, buf + len, allocated - 1 - len);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        r = -errno;
                        (void) diag_add(diag, 0, "cannot read: %s", strerror(-r));
                        goto fail;
                }
                if (k == 0)
                        break;
                len += (size_t) k;
        }
        buf[len] = '\0';
        *ret = buf;
        *ret_len = len;
        return 0;

fail:
        free(buf);
        return r;
}

/* Reads a whole regular file of at most max_size bytes into a NUL-terminated
 * buffer the caller frees. Errors go to diag. */
static int read_config_file(const char *path, size_t max_size, char **ret, size_t *ret_len, Diag *diag) {
        struct stat st;
        int fd, r;

        /* O_NONBLOCK: opening a FIFO must not wait for a writer; we refuse it below. */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0) {
                r = -errno;
                (void) diag_add(diag, 0, "cannot open: %s", strerror(-r));
                return r;
        }
        if (fstat(fd, &st) < 0) {
                r = -errno;
                (void) diag_add(diag, 0, "cannot stat: %s", strerror(-r));
        } else if (S_ISDIR(st.st_mode)) {
                r = -EISDIR;
                (void) diag_add(diag, 0, "is a directory, expected a rules file");
        } else if (!S_ISREG(st.st_mode)) {
                r = -EBADFD;
                (void) diag_add(diag, 0, "not a regular file (a FIFO, socket or device?)");
        } else if ((uintmax_t) st.st_size > max_size) {
                r = -EFBIG;
                (void) diag_add(diag, 0, "file too large (%jd bytes, limit %zu)", (intmax_t) st.st_size,
                                max_size);
        } else
                r = read_all_limited(fd, (size_t) st.st_size, max_size, ret, ret_len, diag);
        close(fd);
        return r;
}

/* Points diag's messages at file from now on. Returns 0 or -ENOMEM. */
static int diag_set_file(Diag *diag, const char *file) {
        char *copy = strdup(file);

        if (!copy)
                return -ENOMEM;
        free(diag->file);
        diag->file = copy;
        return 0;
}

static int cmp_name(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

static void names_free(char **names, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        free(names);
}

/* The names of dir's YAML files (*.yaml, *.yml, not hidden), sorted bytewise. Errors go to
 * diag. */
static int yaml_file_names(const char *dir, char ***ret, size_t *ret_n, Diag *diag) {
        size_t n = 0, allocated = 0;
        char **names = NULL;
        struct dirent *e;
        DIR *d;
        int r = 0;

        d = opendir(dir);
        if (!d) {
                r = -errno;
                (void) diag_add(diag, 0, "cannot open the directory: %s", strerror(-r));
                return r;
        }
        while ((errno = 0, e = readdir(d))) {
                if (e->d_name[0] == '.' || config_format_from_path(e->d_name) != CONFIG_FORMAT_YAML)
                        continue;
                if (n == allocated) {
                        size_t a = allocated ? allocated * 2 : 16;
                        char **v = n >= CONFIG_DIR_FILES_MAX ? NULL : realloc(names, a * sizeof(char *));
                        if (!v) {
                                r = n >= CONFIG_DIR_FILES_MAX ? -EFBIG : -ENOMEM;
                                break;
                        }
                        names = v;
                        allocated = a;
                }
                names[n] = strdup(e->d_name);
                if (!names[n]) {
                        r = -ENOMEM;
                        break;
                }
                n++;
        }
        if (r == 0 && errno != 0)
                r = -errno;
        closedir(d);
        if (r == -EFBIG)
                (void) diag_add(diag, 0, "more than %d YAML files", CONFIG_DIR_FILES_MAX);
        else if (r < 0 && r != -ENOMEM)
                (void) diag_add(diag, 0, "cannot read the directory: %s", strerror(-r));
        else if (r == 0 && n == 0) {
                r = -ENOENT;
                (void) diag_add(diag, 0, "no YAML files (*.yaml, *.yml) in the directory");
        }
        if (r < 0) {
                names_free(names, n);
                return r;
        }
        qsort(names, n, sizeof(char *), cmp_name);
        *ret = names;
        *ret_n = n;
        return 0;
}

/* One YAML file of a directory, its messages under its own name: loaded on its own first
 * (with the default, finalized: the whole-config checks name this file), then into rs. The
 * domain it configures goes to *ret_domain (owned) and its line to *ret_line. */
static int load_yaml_file(const char *file, size_t max_size, RuleSet *rs, char **ret_domain,
                          unsigned *ret_line, Diag *diag) {
        _cleanup_(ruleset_freep) RuleSet *alone = NULL;
        char *text = NULL;
        size_t len = 0;
        int r;

        r = diag_set_file(diag, file);
        if (r >= 0)
                r = read_config_file(file, max_size, &text, &len, diag);
        if (r >= 0)
                r = ruleset_new(file, &alone);
        if (r >= 0)
                r = config_yaml_parse(text, len, alone, diag);
        if (r >= 0)
                r = ruleset_finalize(alone, diag);
        if (r >= 0)
                r = config_yaml_load(text, len, rs, diag, ret_domain, ret_line);
        free(text);
        return r;
}

/* Every YAML file of dir into rs, in name order, then the default; a domain in two files
 * is refused with both names. */
static int load_yaml_dir(const char *dir, size_t max_size, RuleSet *rs, Diag *diag) {
        char **names = NULL, **domains = NULL, *file = NULL;
        unsigned *lines = NULL;
        size_t n = 0;
        int r, q = 0;

        r = yaml_file_names(dir, &names, &n, diag);
        if (r < 0)
                return r;
        domains = calloc(n, sizeof(char *));
        lines = calloc(n, sizeof(unsigned));
        if (!domains || !lines)
                r = -ENOMEM;
        for (size_t i = 0; i < n && r != -ENOMEM; i++) {
                free(file);
                if (asprintf(&file, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", names[i]) < 0) {
                        file = NULL;
                        r = -ENOMEM;
                        break;
                }
                size_t from = rs->n_rules;

                q = load_yaml_file(file, max_size, rs, &domains[i], &lines[i], diag);
                if (q >= 0)
                        q = ruleset_set_file(rs, from, file);
                if (q == -ENOMEM) {
                        r = q;
                        break;
                }
                if (q < 0) {
                        r = -EINVAL;
                        continue;
                }
                for (size_t j = 0; j < i; j++)
                        if (domains[j] && strcmp(domains[j], domains[i]) == 0) {
                                r = -EINVAL;
                                if (diag_add(diag, lines[i], "duplicate domain '%s': %s configures it too",
                                             domains[i], names[j]) < 0)
                                        r = -ENOMEM;
                                break;
                        }
        }
        if (r >= 0)
                r = diag_set_file(diag, dir);
        if (r >= 0)
                r = config_yaml_add_default(rs, diag);
        free(file);
        names_free(domains, domains ? n : 0);
        names_free(names, n);
        free(lines);
        return r;
}

int config_load_limited(const char *path, size_t max_size, RuleSet **ret, Diag *diag) {
        _cleanup_(ruleset_freep) RuleSet *rs = NULL;
        struct stat st;
        char *text = NULL;
        size_t len = 0;
        int r;

        ConfigFormat format = config_format_from_path(path);

        /* A directory: envoyproxy/ratelimit's layout, a YAML file per domain (one named like
         * an INI or JSON file is a mistake, refused below as a directory). */
        if (format != CONFIG_FORMAT_INI && format != CONFIG_FORMAT_JSON && stat(path, &st) == 0 &&
            S_ISDIR(st.st_mode)) {
                r = ruleset_new(path, &rs);
                if (r >= 0)
                        r = load_yaml_dir(path, max_size, rs, diag);
                if (r >= 0)
                        r = ruleset_finalize(rs, diag);
                if (r >= 0) {
                        *ret = rs;
                        rs = NULL;
                }
                return r;
        }

        if (format < 0) {
                (void) diag_add(
                        diag, 0,
                        "unknown file extension, expected .ini, .json, .yaml or .yml (or a directory of "
                        "YAML files)");
                return -EPROTONOSUPPORT;
        }

        r = read_config_file(path, max_size, &text, &len, diag);
        if (r < 0)
                return r;

        r = ruleset_new(path, &rs);
        if (r < 0)
                goto finish;

        if (format == CONFIG_FORMAT_INI)
                r = config_ini_parse(text, len, rs, diag);
        else if (format == CONFIG_FORMAT_JSON)
                r = config_json_parse(text, len, rs, diag);
        else
                r = config_yaml_parse(text, len, rs, diag);
        /* Whole-config checks only on rules that all loaded: with one missing, "no
         * default rule" or "unreachable" would be noise, not news. */
        if (r >= 0)
                r = ruleset_finalize(rs, diag);
        if (r >= 0) {
                *ret = rs;
                rs = NULL;
        }

finish:
        free(text);
        return r;
}

int config_load(const char *path, RuleSet **ret, Diag *diag) {
        return config_load_limited(path, CONFIG_FILE_MAX, ret, diag);
}

/* ---- dump ---- */

/* Rules hold no control characters (rules.c refuses them), but escape them anyway. */
static void json_write_string(FILE *f, const char *s, size_t len) {
        fputc('"', f);
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char) s[i];
                if (c == '"' || c == '\\')
                        fprintf(f, "\\%c", c);
                else if (c < 0x20 || c == 0x7f)
                        fprintf(f, "\\u%04x", c);
                else
                        fputc(c, f);
        }
        fputc('"', f);
}

static void json_write_cstring(FILE *f, const char *s) {
        json_write_string(f, s, strlen(s));
}

/* One rule as a JSON object at the given indent, attributes in a fixed order,
 * only those set (matchPolicy only when not the default "stop"; the algorithm and its
 * parameters, the window, matchKeys and onBackendError, only when not the defaults, so that a
 * dump of an older config is unchanged). */
static void dump_rule(FILE *f, const Rule *r, const char *indent, bool with_operation) {
        fprintf(f, "{\n");
        if (with_operation) {
                fprintf(f, "%s  \"operation\": {", indent);
                for (size_t i = 0; i < r->n_patterns; i++) {
                        fprintf(f, "%s\n%s    ", i > 0 ? "," : "", indent);
                        json_write_string(f, r->patterns[i].key, r->patterns[i].key_len);
                        fputs(": ", f);
                        json_write_string(f, r->patterns[i].value, r->patterns[i].value_len);
                }
                if (r->n_patterns > 0)
                        fprintf(f, "\n%s  ", indent);
                fprintf(f, "},\n");
        }
        fprintf(f, "%s  \"creditLimit\": %" PRIu64 ",\n", indent, r->credit_limit);
        fprintf(f, "%s  \"resetSeconds\": %" PRIu64, indent, r->reset_seconds);
        if (r->algo.algorithm != ALGORITHM_FIXED_WINDOW) {
                fprintf(f, ",\n%s  \"algorithm\": ", indent);
                json_write_cstring(f, algorithm_to_string(r->algo.algorithm));
        }
        if (r->algo.burst != 0 && r->algo.burst != r->credit_limit)
                fprintf(f, ",\n%s  \"burst\": %" PRIu64, indent, r->algo.burst);
        if (r->algo.refill_seconds != 0)
                fprintf(f, ",\n%s  \"refillSeconds\": %" PRIu64, indent, r->algo.refill_seconds);
        if (r->algo.strict)
                fprintf(f, ",\n%s  \"strict\": true", indent);
        if (r->algo.window != ALGO_WINDOW_FIRST_HIT) {
                fprintf(f, ",\n%s  \"window\": ", indent);
                json_write_cstring(f, algo_window_to_string(r->algo.window));
        }
        if (r->actor_field) {
                fprintf(f, ",\n%s  \"actorField\": ", indent);
                json_write_string(f, r->actor_field, r->actor_field_len);
        }
        if (r->match_policy != MATCH_POLICY_STOP) {
                fprintf(f, ",\n%s  \"matchPolicy\": ", indent);
                json_write_cstring(f, match_policy_to_string(r->match_policy));
        }
        if (r->match_keys != MATCH_KEYS_SUBSET) {
                fprintf(f, ",\n%s  \"matchKeys\": ", indent);
                json_write_cstring(f, match_keys_to_string(r->match_keys));
        }
        if (r->on_backend_error != RULE_ON_ERROR_DEFAULT) {
                fprintf(f, ",\n%s  \"onBackendError\": ", indent);
                json_write_cstring(f, rule_on_error_to_string(r->on_backend_error));
        }
        if (r->label) {
                fprintf(f, ",\n%s  \"label\": ", indent);
                json_write_cstring(f, r->label);
        }
        if (r->comment) {
                fprintf(f, ",\n%s  \"comment\": ", indent);
                json_write_cstring(f, r->comment);
        }
        fprintf(f, "\n%s}", indent);
}

int config_dump_json(const RuleSet *rs, FILE *f) {
        /* The format has a place for exactly one default, last: anything else
         * would not read back. */
        if (rs->n_rules == 0 || rs->rules[rs->n_rules - 1].n_patterns > 0)
                return -EINVAL;

        fprintf(f, "{\n  \"overrides\": [");
        for (size_t i = 0; i + 1 < rs->n_rules; i++) {
                fprintf(f, "%s\n    ", i > 0 ? "," : "");
                dump_rule(f, &rs->rules[i], "    ", true);
        }
        fprintf(f, "%s],\n  \"default\": ", rs->n_rules > 1 ? "\n  " : "");
        dump_rule(f, &rs->rules[rs->n_rules - 1], "  ", false);
        fprintf(f, "\n}\n");

        return ferror(f) ? -EIO : 0;
}

/* snprintf() at buf + *len, keeping *len within size (output is cut, never overrun). */
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...) {
        va_list ap;
        int n;

        if (*len + 1 >= size)
                return;
        va_start(ap, fmt);
        n = vsnprintf(buf + *len, size - *len, fmt, ap);
        va_end(ap);
        if (n > 0)
                *len = *len + (size_t) n < size ? *len + (size_t) n : size - 1;
}

const char *config_summary(const RuleSet *rs, char *buf, size_t size) {
        size_t canary = 0, cont = 0, actor = 0, labelled = 0, by_algorithm[_ALGORITHM_MAX] = { 0 }, len = 0,
               aligned = 0, exact = 0;

        if (!buf || size == 0)
                return buf;
        for (size_t i = 0; i < rs->n_rules; i++) {
                const Rule *r = &rs->rules[i];
                canary += r->match_policy == MATCH_POLICY_CANARY;
                cont += r->match_policy == MATCH_POLICY_CONTINUE;
                actor += r->actor_field != NULL;
                labelled += r->label != NULL;
                aligned += r->algo.window != ALGO_WINDOW_FIRST_HIT;
                exact += r->match_keys != MATCH_KEYS_SUBSET;
                if (r->algo.algorithm >= 0 && r->algo.algorithm < _ALGORITHM_MAX)
                        by_algorithm[r->algo.algorithm]++;
        }
        buf[0] = '\0';
        append(buf, size, &len, "%zu rule%s (%zu canary, %zu with actor, %zu labelled", rs->n_rules,
               rs->n_rules == 1 ? "" : "s", canary, actor, labelled);
        /* What older configs cannot have is named only when used: their summary is unchanged. */
        if (cont > 0)
                append(buf, size, &len, ", %zu continue", cont);
        for (int a = 0; a < _ALGORITHM_MAX; a++)
                if (a != ALGORITHM_FIXED_WINDOW && by_algorithm[a] > 0)
                        append(buf, size, &len, ", %zu %s", by_algorithm[a],
                               algorithm_to_string((Algorithm) a));
        if (aligned > 0)
                append(buf, size, &len, ", %zu window aligned", aligned);
        if (exact > 0)
                append(buf, size, &len, ", %zu matchKeys exact", exact);
        append(buf, size, &len, ")");
        return buf;
}

const char *config_rule_details(const Rule *r, char *buf, size_t size) {
        char desc[RULE_DESCRIBE_MAX];
        size_t len = 0;

        if (!buf || size == 0 ||
            (r->algo.algorithm == ALGORITHM_FIXED_WINDOW && r->match_policy != MATCH_POLICY_CONTINUE &&
             r->algo.window == ALGO_WINDOW_FIRST_HIT && r->match_keys == MATCH_KEYS_SUBSET &&
             r->n_actor_fields <= 1))
                return NULL;
        buf[0] = '\0';
        append(buf, size, &len, "rule %s: %s %" PRIu64 " per %" PRIu64 " s",
               rule_describe(r, desc, sizeof desc), algorithm_to_string(r->algo.algorithm), r->credit_limit,
               r->reset_seconds);
        if (r->algo.algorithm == ALGORITHM_TOKEN_BUCKET) {
                append(buf, size, &len, ", burst %" PRIu64, r->algo.burst);
                if (r->algo.refill_seconds)
                        append(buf, size, &len, ", refill every %" PRIu64 " s", r->algo.refill_seconds);
                else
                        append(buf, size, &len, ", continuous refill");
                if (r->algo.strict)
                        append(buf, size, &len, ", strict");
        }
        if (r->algo.window != ALGO_WINDOW_FIRST_HIT)
                append(buf, size, &len, ", windows aligned to the clock");
        if (r->n_actor_fields > 1) {
                append(buf, size, &len, ", one counter per combination of");
                for (size_t i = 0; i < r->n_actor_fields; i++)
                        append(buf, size, &len, "%s %.*s", i > 0 ? "," : "", (int) r->actor_fields[i].len,
                               r->actor_fields[i].ptr);
        }
        if (r->match_keys == MATCH_KEYS_EXACT)
                append(buf, size, &len, ", matchKeys exact");
        if (rule_trivial_decision(r) == RULE_TRIVIAL_DENY)
                append(buf, size, &len, ", always denies (creditLimit 0)");
        else if (rule_trivial_decision(r) == RULE_TRIVIAL_ALLOW)
                append(buf, size, &len, ", always allows (resetSeconds 0)");
        append(buf, size, &len, ", matchPolicy %s", match_policy_to_string(r->match_policy));
        return buf;
}

/* ---- --check-config --compat=divvy ------------------------------------------------------ */

/* Names every JavaScript object inherits from Object.prototype: divvy 1.7 keeps a request's
 * pairs in a plain object, so a request without such a key still "has" it. */
static const char *const js_inherited[] = {
        "constructor",      "hasOwnProperty",   "isPrototypeOf",    "propertyIsEnumerable",
        "toLocaleString",   "toString",         "valueOf",          "__defineGetter__",
        "__defineSetter__", "__lookupGetter__", "__lookupSetter__", "__proto__",
};

static bool js_is_inherited(const char *key) {
        for (size_t i = 0; i < sizeof js_inherited / sizeof js_inherited[0]; i++)
                if (strcmp(key, js_inherited[i]) == 0)
                        return true;
        return false;
}

/* The text divvy 1.7's glob test sees for a request without key: String(operation[key]). */
static const char *js_absent_text(const char *key, char *buf, size_t size) {
        if (strcmp(key, "__proto__") == 0)
                snprintf(buf, size, "[object Object]");
        else if (js_is_inherited(key))
                snprintf(buf, size, "function %s() { [native code] }", key);
        else
                snprintf(buf, size, "undefined");
        return buf;
}

/* Appends one reason to the rule's list, "; " between reasons. */
static void add_reason(char *buf, size_t size, size_t *len, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static void add_reason(char *buf, size_t size, size_t *len, const char *fmt, ...) {
        char reason[RULE_DESCRIBE_MAX * 2];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(reason, sizeof reason, fmt, ap);
        va_end(ap);
        append(buf, size, len, "%s%s", *len > 0 ? "; " : "", reason);
}

/* The attributes a rule has, as divvy 1.7 sees them: every attribute rules.c knows must be
 * decided on here. */
_Static_assert(_RULE_ATTR_MAX == 13, "a new rule attribute: decide in divvy_rule_reasons() whether divvy "
                                     "1.7 knows it");

/* Every reason divvy 1.7 would decide rule r otherwise, or could not read it, into buf. */
static void divvy_rule_reasons(const Rule *r, char *buf, size_t size) {
        char absent[64], k[RULE_EXCERPT_MAX + 4], v[RULE_EXCERPT_MAX + 4];
        size_t len = 0;

        buf[0] = '\0';
        /* Attributes divvy 1.7 does not know (it ignores algorithm, burst, refillSeconds,
         * strict and onBackendError, and refuses matchPolicy continue). onBackendError is
         * accepted: it decides only hits Redis does not answer, which divvy 1.7 answers with
         * an error, not a decision of its own. */
        if (r->algo.algorithm != ALGORITHM_FIXED_WINDOW)
                add_reason(buf, size, &len, "algorithm %s (divvy 1.7 counts in fixed windows only)",
                           algorithm_to_string(r->algo.algorithm));
        if (r->match_policy == MATCH_POLICY_CONTINUE)
                add_reason(buf, size, &len, "matchPolicy continue (divvy 1.7 knows stop and canary only)");
        if (r->match_keys == MATCH_KEYS_EXACT)
                add_reason(buf, size, &len,
                           "matchKeys exact (divvy 1.7 also matches requests with other fields)");
        if (r->algo.window != ALGO_WINDOW_FIRST_HIT)
                add_reason(buf, size, &len, "window %s (divvy 1.7 starts a window at its first hit)",
                           algo_window_to_string(r->algo.window));
        if (r->n_actor_fields > 1)
                add_reason(buf, size, &len,
                           "actorField of %zu fields (divvy 1.7 reads \"%s\" as the name of one field)",
                           r->n_actor_fields, rule_excerpt(r->actor_field, k));
        /* Validation: divvy 1.7 refuses resetSeconds 0 unless creditLimit is 0. */
        if (r->reset_seconds == 0 && r->credit_limit > 0)
                add_reason(buf, size, &len,
                           "resetSeconds 0 with creditLimit %" PRIu64
                           " (divvy 1.7 refuses a resetSeconds under 1 unless creditLimit is 0)",
                           r->credit_limit);
        /* Matching: docs/differences.md, "Rules and matching". */
        for (size_t i = 0; i < r->n_patterns; i++) {
                const RulePattern *p = &r->patterns[i];
                const char *star = memchr(p->value, '*', p->value_len);

                if (strcmp(p->key, "__proto__") == 0) {
                        add_reason(buf, size, &len,
                                   "operation key __proto__ (divvy 1.7 drops it: a JavaScript object's "
                                   "prototype)");
                        continue;
                }
                if (p->kind == PATTERN_ANY)
                        add_reason(buf, size, &len, "%s=* (divvy 1.7 also matches requests without %s)",
                                   rule_excerpt(p->key, k), k);
                else if (p->kind == PATTERN_GLOB && star != p->value + p->value_len - 1)
                        add_reason(buf, size, &len,
                                   "%s=%s (divvy 1.7 reads a glob as the prefix before its first * and "
                                   "the rest as a regular expression, unanchored: only a single * at the "
                                   "end matches alike)",
                                   rule_excerpt(p->key, k), rule_excerpt(p->value, v));
                else if (p->kind == PATTERN_GLOB && (js_absent_text(p->key, absent, sizeof absent),
                                                     rule_pattern_match(p, absent, strlen(absent))))
                        add_reason(buf, size, &len,
                                   "%s=%s (divvy 1.7 also matches requests without %s, whose %s it reads as "
                                   "\"%s\")",
                                   rule_excerpt(p->key, k), rule_excerpt(p->value, v), k, k, absent);
        }
        if (r->actor_field && js_is_inherited(r->actor_field))
                add_reason(buf, size, &len,
                           "actorField %s (divvy 1.7 counts the requests without it under another actor: "
                           "every JavaScript object has a %s)",
                           r->actor_field, r->actor_field); /* one of js_inherited[] */
        /* How divvy 1.7 reads the file's text: what the loader noted. */
        if (r->divvy_notes & RULE_DIVVY_BOM)
                add_reason(buf, size, &len,
                           "the file starts with a byte order mark (divvy 1.7 cannot read this rule "
                           "after it)");
        if (r->divvy_notes & RULE_DIVVY_INI_HEADER)
                add_reason(buf, size, &len,
                           "its section header (divvy 1.7 reads only a bare [key=value ...] line as "
                           "this operation: no blanks or comment around it, no quotes, no . ; # \\ ] "
                           "or other spaces in it)");
        if (r->divvy_attrs) {
                char names[256];
                size_t n = 0;
                names[0] = '\0';
                for (int a = 0; a < _RULE_ATTR_MAX; a++)
                        if (r->divvy_attrs & (1u << a))
                                append(names, sizeof names, &n, "%s%s", n > 0 ? ", " : "",
                                       rule_attr_to_string((RuleAttr) a));
                add_reason(buf, size, &len, "the value of %s as written (divvy 1.7 reads it otherwise)",
                           names);
        }
        if (r->divvy_notes & RULE_DIVVY_JSON_OPERATION_NUMBER)
                add_reason(buf, size, &len,
                           "an operation value written as a number with an exponent (divvy 1.7 turns it "
                           "into other text)");
        if (r->divvy_notes & RULE_DIVVY_JSON_NO_OPERATION)
                add_reason(buf, size, &len, "no \"operation\" (divvy 1.7 needs \"operation\": {} here)");
        if (r->divvy_notes & RULE_DIVVY_JSON_NO_OVERRIDES)
                add_reason(buf, size, &len,
                           "no \"overrides\" in the file (divvy 1.7 needs the array, even "
                           "empty)");
}

int config_check_divvy(const RuleSet *rs, Diag *diag) {
        char desc[RULE_DESCRIBE_MAX], reasons[4096];
        bool ok = true;
        int q;

        /* divvy 1.7 picks the format by the extension, in lower case only. */
        if (rs->source && config_format_from_path(rs->source) >= 0) {
                const char *dot = strrchr(rs->source, '.');
                if (strcmp(dot, ".ini") != 0 && strcmp(dot, ".json") != 0) {
                        ok = false;
                        q = diag ? diag_add(diag, 0,
                                            "divvy 1.7 reads only files whose names end in .ini or .json, "
                                            "in lower case")
                                 : 0;
                        if (q < 0)
                                return q;
                }
        }
        for (size_t i = 0; i < rs->n_rules; i++) {
                const Rule *r = &rs->rules[i];
                divvy_rule_reasons(r, reasons, sizeof reasons);
                if (reasons[0] == '\0')
                        continue;
                ok = false;
                q = diag ? diag_add_in(diag, r->file, r->line, "rule %s is not divvy-compatible: %s",
                                       rule_describe(r, desc, sizeof desc), reasons)
                         : 0;
                if (q < 0)
                        return q;
        }
        return ok ? 0 : -EINVAL;
}

/* Rules with a divvy key, ordered by creditLimit, resetSeconds, then bucket bytes. */
static int divvy_key_cmp(const void *a, const void *b) {
        const Rule *x = *(const Rule *const *) a, *y = *(const Rule *const *) b;
        size_t n = x->divvy_bucket_len < y->divvy_bucket_len ? x->divvy_bucket_len : y->divvy_bucket_len;
        int c;

        if (x->credit_limit != y->credit_limit)
                return x->credit_limit < y->credit_limit ? -1 : 1;
        if (x->reset_seconds != y->reset_seconds)
                return x->reset_seconds < y->reset_seconds ? -1 : 1;
        c = memcmp(x->divvy_bucket, y->divvy_bucket, n);
        if (c != 0)
                return c;
        return (x->divvy_bucket_len > y->divvy_bucket_len) - (x->divvy_bucket_len < y->divvy_bucket_len);
}

/* r's bucket against a's bucket + ':' on that many bytes: 0 if r's begins with it, else
 * the sign of the byte order (monotonic over divvy_key_cmp()'s order of one group). */
static int bucket_extends_cmp(const Rule *r, const Rule *a) {
        size_t la = a->divvy_bucket_len, lr = r->divvy_bucket_len;
        int c = memcmp(r->divvy_bucket, a->divvy_bucket, lr < la ? lr : la);

        if (c != 0)
                return c;
        if (lr <= la)
                return -1;
        return ((unsigned char) r->divvy_bucket[la] > ':') - ((unsigned char) r->divvy_bucket[la] < ':');
}

/* The first of v[lo, hi) whose bucket_extends_cmp() with a is >= 0 (past: > 0). */
static size_t bucket_search(const Rule *const *v, size_t lo, size_t hi, const Rule *a, bool past) {
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = bucket_extends_cmp(v[mid], a);

                if (c < 0 || (past && c == 0))
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

/* What of r writes the key: 'actor "<actor>"' or, without an actorField, 'counter'. */
static const char *key_writer(const Rule *r, const char *actor, char *buf, size_t size) {
        if (!r->actor_field)
                return "counter";
        snprintf(buf, size, "actor \"%s\"", actor);
        return buf;
}

/* One warning: a's a_actor and b's x write one key, "divvy:<b's bucket>:<x>:<limits>"; more:
 * other rules like b. */
static int warn_divvy_keys(Diag *diag, const Rule *a, const char *a_actor, const Rule *b, const char *x,
                           size_t more) {
        char da[RULE_DESCRIBE_MAX], db[RULE_DESCRIBE_MAX], ex[RULE_EXCERPT_MAX + 4], also[64] = "";
        char wa[RULE_EXCERPT_MAX + 32], wb[32];

        if (!diag)
                return 0;
        if (more > 0)
                snprintf(also, sizeof also, ", and %zu more", more);
        return diag_add_in(
                diag, a->file, a->line,
                "warning: rule %s shares divvy keys with rule %s (line %u%s): in Redis its %s and that "
                "rule's %s are one counter, \"divvy:%s:%s:%" PRIu64 ":%" PRIu64
                "\", which the local store keeps apart",
                rule_describe(a, da, sizeof da), rule_describe(b, db, sizeof db), b->line, also,
                key_writer(a, a_actor, wa, sizeof wa), key_writer(b, x, wb, sizeof wb),
                rule_excerpt(b->divvy_bucket, ex), x, b->credit_limit, b->reset_seconds);
}

int config_check_divvy_keys(const RuleSet *rs, Diag *diag) {
        const Rule **v;
        size_t n = 0, end = 0;
        int warnings = 0, q = 0;

        if (!rs || rs->n_rules == 0)
                return 0;
        v = malloc(rs->n_rules * sizeof(*v));
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < rs->n_rules; i++) {
                const Rule *r = &rs->rules[i];
                if (rule_divvy_keys(r) && r->divvy_bucket && rule_trivial_decision(r) == RULE_TRIVIAL_NONE)
                        v[n++] = r;
        }
        qsort(v, n, sizeof(*v), divvy_key_cmp);
        for (size_t i = 0; i < n && q >= 0; i++) {
                const Rule *a = v[i];
                char rest[RULE_EXCERPT_MAX + 8], ex[RULE_EXCERPT_MAX + 4];

                if (end <= i) /* the end of the rules of a's limits */
                        for (end = i + 1; end < n && v[end]->credit_limit == a->credit_limit &&
                                          v[end]->reset_seconds == a->reset_seconds;)
                                end++;
                /* The same bucket, another counter identity (another actorField, or values holding
                 * ' ' and '=' that read alike): the same key for the same actor. */
                if (i + 1 < end && divvy_key_cmp(&v[i], &v[i + 1]) == 0 &&
                    memcmp(a->id, v[i + 1]->id, RULE_ID_SIZE) != 0) {
                        const char *x = a->actor_field && v[i + 1]->actor_field ? "X" : "";
                        q = warn_divvy_keys(diag, a, x, v[i + 1], x, 0);
                        warnings++;
                }
                /* a's bucket + ':' begins b's: a's actor "<the rest of b's bucket>:X" is b's X. */
                if (a->actor_field && q >= 0) {
                        size_t first = bucket_search(v, i + 1, end, a, false);
                        size_t past = bucket_search(v, first, end, a, true);

                        if (first < past) {
                                const char *x = v[first]->actor_field ? "X" : "";
                                snprintf(rest, sizeof rest, "%s:%s",
                                         rule_excerpt(v[first]->divvy_bucket + a->divvy_bucket_len + 1, ex),
                                         x);
                                q = warn_divvy_keys(diag, a, rest, v[first], x, past - first - 1);
                                warnings++;
                        }
                }
        }
        free(v);
        return q < 0 ? q : warnings;
}
