/* SPDX-License-Identifier: MIT */
/* config.c, config-ini.c, config-json.c: the examples and fixtures in both formats,
 * every error path with its file:line message, INI/JSON equivalence, dump round trips. */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config.h"
#include "check-run.h"

/* ---- helpers ---- */

static char *src_path(const char *rel) {
        const char *top = getenv("top_srcdir");
        char *p;
        ck_assert_int_ge(asprintf(&p, "%s/%s", top ? top : ".", rel), 0);
        return p;
}

/* True if some message is exactly "<file>:<line>: ..." (line 0: "<file>: ...")
 * and contains what. */
static bool diag_has(const Diag *d, unsigned line, const char *what) {
        char prefix[4096];

        if (line > 0)
                snprintf(prefix, sizeof prefix, "%s:%u: ", d->file, line);
        else
                snprintf(prefix, sizeof prefix, "%s: ", d->file);
        for (size_t i = 0; i < d->n_messages; i++)
                if (strncmp(d->messages[i], prefix, strlen(prefix)) == 0 && strstr(d->messages[i], what))
                        return true;
        return false;
}

static void diag_dump(const Diag *d) {
        for (size_t i = 0; i < d->n_messages; i++)
                fprintf(stderr, "  diag: %s\n", d->messages[i]);
}

static void assert_diag_has(const Diag *d, unsigned line, const char *what) {
        if (diag_has(d, line, what))
                return;
        diag_dump(d);
        ck_abort_msg("no message \"%s:%u: ...%s...\"", d->file, line, what);
}

/* Loads path (relative to top_srcdir unless absolute); returns config_load()'s result. */
static int load(const char *path, RuleSet **ret, Diag *diag) {
        char *p = path[0] == '/' ? strdup(path) : src_path(path);
        diag_init(diag, p);
        int r = config_load(p, ret, diag);
        free(p);
        return r;
}

static void assert_rules_equal(const RuleSet *a, const RuleSet *b) {
        ck_assert_uint_eq(a->n_rules, b->n_rules);
        for (size_t i = 0; i < a->n_rules; i++) {
                const Rule *x = &a->rules[i], *y = &b->rules[i];
                ck_assert_mem_eq(x->id, y->id, RULE_ID_SIZE);
                ck_assert_uint_eq(x->n_patterns, y->n_patterns);
                for (size_t j = 0; j < x->n_patterns; j++) {
                        ck_assert_str_eq(x->patterns[j].key, y->patterns[j].key);
                        ck_assert_str_eq(x->patterns[j].value, y->patterns[j].value);
                        ck_assert_int_eq(x->patterns[j].kind, y->patterns[j].kind);
                }
                ck_assert_uint_eq(x->credit_limit, y->credit_limit);
                ck_assert_uint_eq(x->reset_seconds, y->reset_seconds);
                ck_assert_int_eq(x->match_policy, y->match_policy);
                ck_assert_pstr_eq(x->actor_field, y->actor_field);
                ck_assert_pstr_eq(x->label, y->label);
                ck_assert_pstr_eq(x->comment, y->comment);
                ck_assert_int_eq(x->algo.algorithm, y->algo.algorithm);
                ck_assert_uint_eq(x->algo.credit_limit, y->algo.credit_limit);
                ck_assert_uint_eq(x->algo.reset_seconds, y->algo.reset_seconds);
                ck_assert_uint_eq(x->algo.burst, y->algo.burst);
                ck_assert_uint_eq(x->algo.refill_seconds, y->algo.refill_seconds);
                ck_assert(x->algo.strict == y->algo.strict);
                ck_assert_int_eq(x->algo.window, y->algo.window);
                ck_assert_int_eq(x->on_backend_error, y->on_backend_error);
                ck_assert_int_eq(x->match_keys, y->match_keys);
                ck_assert_uint_eq(x->n_actor_fields, y->n_actor_fields);
        }
}

static char *dump(const RuleSet *rs, size_t *ret_len) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(config_dump_json(rs, f), 0);
        ck_assert_int_eq(fclose(f), 0);
        *ret_len = len;
        return buf;
}

/* Parses text with the given loader and finalizes; returns the first error. */
static int parse_text(bool json, const char *text, size_t len, RuleSet **ret, Diag *diag) {
        RuleSet *rs = NULL;
        int r;

        ck_assert_int_eq(ruleset_new(diag->file, &rs), 0);
        r = json ? config_json_parse(text, len, rs, diag) : config_ini_parse(text, len, rs, diag);
        if (r >= 0)
                r = ruleset_finalize(rs, diag);
        if (r < 0 || !ret)
                ruleset_free(rs);
        else
                *ret = rs;
        return r;
}

/* ---- files that load ---- */

static const struct {
        const char *path;
        const char *summary;
} good_files[] = {
        { "examples/example-config.ini", "5 rules (0 canary, 3 with actor, 2 labelled)" },
        { "examples/example-config.json", "5 rules (0 canary, 3 with actor, 2 labelled)" },
        { "examples/canary-config.ini", "4 rules (1 canary, 2 with actor, 1 labelled)" },
        { "examples/canary-config.json", "4 rules (1 canary, 2 with actor, 1 labelled)" },
        { "tests/data/quoting.ini", "4 rules (1 canary, 1 with actor, 1 labelled)" },
        { "tests/data/quoting.json", "4 rules (1 canary, 1 with actor, 1 labelled)" },
        { "tests/data/non-string-operation.json", "2 rules (0 canary, 0 with actor, 0 labelled)" },
        { "tests/data/divvy-compat.ini", "6 rules (1 canary, 2 with actor, 1 labelled)" },
        { "tests/data/divvy-compat.json", "6 rules (1 canary, 2 with actor, 1 labelled)" },
        { "examples/algorithms-config.ini",
          "7 rules (1 canary, 6 with actor, 6 labelled, 1 continue, 1 sliding-window, 4 token-bucket)" },
        { "examples/algorithms-config.json",
          "7 rules (1 canary, 6 with actor, 6 labelled, 1 continue, 1 sliding-window, 4 token-bucket)" },
        { "tests/data/canary-then-stop.ini", "5 rules (1 canary, 0 with actor, 0 labelled, 1 continue)" },
        { "tests/data/canary-then-stop.json", "5 rules (1 canary, 0 with actor, 0 labelled, 1 continue)" },
};

START_TEST (test_good_file_loads) {
        RuleSet *rs = NULL;
        char buf[128];
        Diag diag;

        int r = load(good_files[_i].path, &rs, &diag);
        if (r < 0)
                diag_dump(&diag);
        ck_assert_int_eq(r, 0);
        ck_assert_uint_eq(diag_count(&diag), 0);
        ck_assert(rs->finalized);
        ck_assert_str_eq(config_summary(rs, buf, sizeof buf), good_files[_i].summary);
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

/* Dump, read the dump back: an equal set; dump that: the same bytes. */
START_TEST (test_dump_round_trip) {
        RuleSet *rs = NULL, *back = NULL;
        size_t len1, len2;
        Diag diag, diag2;

        ck_assert_int_eq(load(good_files[_i].path, &rs, &diag), 0);
        char *text1 = dump(rs, &len1);

        diag_init(&diag2, "dump.json");
        int r = parse_text(true, text1, len1, &back, &diag2);
        if (r < 0) {
                diag_dump(&diag2);
                fprintf(stderr, "%s\n", text1);
        }
        ck_assert_int_eq(r, 0);
        assert_rules_equal(rs, back);

        char *text2 = dump(back, &len2);
        ck_assert_uint_eq(len1, len2);
        ck_assert_str_eq(text1, text2);

        free(text1);
        free(text2);
        ruleset_free(rs);
        ruleset_free(back);
        diag_done(&diag);
        diag_done(&diag2);
}
END_TEST

static const struct {
        const char *ini, *json;
} equivalent[] = {
        { "examples/example-config.ini", "examples/example-config.json" },
        { "examples/canary-config.ini", "examples/canary-config.json" },
        { "tests/data/quoting.ini", "tests/data/quoting.json" },
        { "examples/algorithms-config.ini", "examples/algorithms-config.json" },
        { "tests/data/canary-then-stop.ini", "tests/data/canary-then-stop.json" },
};

START_TEST (test_ini_json_equivalent) {
        RuleSet *a = NULL, *b = NULL;
        Diag da, db;

        ck_assert_int_eq(load(equivalent[_i].ini, &a, &da), 0);
        ck_assert_int_eq(load(equivalent[_i].json, &b, &db), 0);
        assert_rules_equal(a, b);
        ruleset_free(a);
        ruleset_free(b);
        diag_done(&da);
        diag_done(&db);
}
END_TEST

START_TEST (test_quoting_and_comments) {
        RuleSet *rs = NULL;
        Diag diag;

        ck_assert_int_eq(load("tests/data/quoting.ini", &rs, &diag), 0);
        const Rule *r = &rs->rules[0];
        ck_assert_uint_eq(r->n_patterns, 2);
        ck_assert_str_eq(r->patterns[0].key, "method");
        ck_assert_str_eq(r->patterns[1].key, "path");
        ck_assert_str_eq(r->patterns[1].value, "/a b");
        ck_assert_uint_eq(r->credit_limit, 5);
        ck_assert_uint_eq(r->reset_seconds, 60);
        ck_assert_str_eq(r->comment, "has # and ; inside quotes");
        ck_assert_str_eq(r->label, "quoted-op");

        r = &rs->rules[1];
        ck_assert_str_eq(r->patterns[1].value, "/issue#42");
        ck_assert_uint_eq(r->credit_limit, 2);
        ck_assert_uint_eq(r->reset_seconds, 30);
        ck_assert_str_eq(r->actor_field, "ip");
        ck_assert_str_eq(r->comment, "issue#42;kept whole");

        /* divvy README: "matchPolicy = canary  # <----- Canary this rule, ..." */
        ck_assert_int_eq(rs->rules[2].match_policy, MATCH_POLICY_CANARY);
        ck_assert_uint_eq(rs->rules[3].n_patterns, 0);
        ck_assert_str_eq(rs->rules[3].comment, "Default accept!");
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

START_TEST (test_json_operation_values_stringified) {
        static const char *const want[][2] = {
                { "beta", "true" }, { "big", "1000" }, { "ratio", "0.5" }, { "version", "3" }
        };
        RuleSet *rs = NULL;
        Diag diag;

        ck_assert_int_eq(load("tests/data/non-string-operation.json", &rs, &diag), 0);
        const Rule *r = &rs->rules[0];
        ck_assert_uint_eq(r->n_patterns, 4);
        for (size_t i = 0; i < 4; i++) {
                ck_assert_str_eq(r->patterns[i].key, want[i][0]);
                ck_assert_str_eq(r->patterns[i].value, want[i][1]);
        }
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

/* ---- files that do not load: each expected message, by file and line ---- */

static const struct {
        const char *path;
        int error;
        unsigned line; /* 0: a message about the whole file */
        const char *reason;
} bad_files[] = {
        { "tests/data/rules.toml", -EPROTONOSUPPORT, 0,
          "unknown file extension, expected .ini, .json, .yaml or .yml" },
        { "tests/data/no-such-file.ini", -ENOENT, 0, "cannot open: No such file or directory" },
        { "tests/data/unknown-key.ini", -EINVAL, 4,
          "unknown attribute \"maxBurst\" (accepted: creditLimit," },
        { "tests/data/typo-creditlimit.ini", -EINVAL, 3,
          "unknown attribute \"creditlimit\" (did you mean \"creditLimit\"?)" },
        { "tests/data/duplicate-section.ini", -EINVAL, 11,
          "duplicate section: same header as the section on line 1" },
        { "tests/data/duplicate-key.ini", -EINVAL, 4, "sets creditLimit twice (first on line 2)" },
        { "tests/data/bad-number.ini", -EINVAL, 2,
          "creditLimit \"10k\" is not a non-negative decimal integer" },
        { "tests/data/bad-number.ini", -EINVAL, 7, "rule [default] resetSeconds \"-1\"" },
        { "tests/data/bad-label.ini", -EINVAL, 4, "invalid label \"not a slug!\"" },
        { "tests/data/bad-policy.ini", -EINVAL, 4, "unknown matchPolicy \"sometimes\"" },
        { "tests/data/missing-default.ini", -EINVAL, 5, "is the last rule but not a default" },
        { "tests/data/default-not-last.ini", -EINVAL, 5, "rule [default] must be the last rule" },
        { "tests/data/unreachable.ini", -EINVAL, 6,
          "rule [method=GET path=/pantry/cookies/*] is unreachable: rule [method=GET path=/pantry/*] (line "
          "1)" },
        { "tests/data/syntax.ini", -EINVAL, 1, "'creditLimit = 1' outside of any section" },
        { "tests/data/syntax.ini", -EINVAL, 2, "section header without closing ']'" },
        { "tests/data/syntax.ini", -EINVAL, 4, "section [method=GET path=/x]: unexpected text after ']'" },
        { "tests/data/syntax.ini", -EINVAL, 5, "section [method==GET]: invalid operation" },
        { "tests/data/syntax.ini", -EINVAL, 6, "section [ip=1 ip=2]: a key appears twice in the operation" },
        { "tests/data/syntax.ini", -EINVAL, 7, "empty section header []; the catch-all rule is [default]" },
        { "tests/data/syntax.ini", -EINVAL, 9,
          "rule [method=PUT]: expected 'key = value', got 'creditLimit'" },
        { "tests/data/syntax.ini", -EINVAL, 10,
          "rule [method=PUT]: resetSeconds: unterminated quoted value" },
        { "tests/data/syntax.ini", -EINVAL, 11, "comment: unexpected text after the closing quote" },
        { "tests/data/syntax.json", -EINVAL, 7, "JSON syntax error" },
        { "tests/data/missing-default.json", -EINVAL, 0, "missing \"default\" rule" },
        { "tests/data/not-an-object.json", -EINVAL, 1,
          "expected an object with \"overrides\" and \"default\"" },
        { "tests/data/wrong-types.json", -EINVAL, 4,
          "overrides[0]: operation: 'tags': expected a string, number or boolean, got an array" },
        { "tests/data/wrong-types.json", -EINVAL, 10,
          "rule [method=PUT]: creditLimit: expected a number, got a boolean" },
        { "tests/data/wrong-types.json", -EINVAL, 12,
          "rule [method=PUT]: label: expected a string, got a number" },
        { "tests/data/wrong-types.json", -EINVAL, 15,
          "overrides[2]: operation: expected an object, got a string" },
        { "tests/data/wrong-types.json", -EINVAL, 19, "overrides[3]: missing \"operation\"" },
        { "tests/data/wrong-types.json", -EINVAL, 22, "overrides[3] has an unknown attribute \"maxBurst\"" },
        { "tests/data/wrong-types.json", -EINVAL, 24, "overrides[4]: expected an object, got a string" },
        { "tests/data/wrong-types.json", -EINVAL, 26, "default: operation: must be empty" },
        { "tests/data/wrong-types.json", -EINVAL, 27,
          "unknown key 'version' (accepted: overrides, default)" },
};

START_TEST (test_bad_file) {
        RuleSet *rs = NULL;
        Diag diag;

        int r = load(bad_files[_i].path, &rs, &diag);
        ck_assert_int_eq(r, bad_files[_i].error);
        ck_assert_ptr_null(rs);
        assert_diag_has(&diag, bad_files[_i].line, bad_files[_i].reason);
        diag_done(&diag);
}
END_TEST

/* Every problem of a file is reported, not just the first. */
START_TEST (test_all_errors_reported) {
        RuleSet *rs = NULL;
        Diag diag;

        ck_assert_int_eq(load("tests/data/syntax.ini", &rs, &diag), -EINVAL);
        ck_assert_uint_eq(diag_count(&diag), 11);
        diag_done(&diag);
        ck_assert_int_eq(load("tests/data/wrong-types.json", &rs, &diag), -EINVAL);
        ck_assert_uint_eq(diag_count(&diag), 9);
        diag_done(&diag);
}
END_TEST

/* ---- what is not a readable regular file, made in a temporary directory ---- */

typedef enum SpecialKind {
        SPECIAL_DIRECTORY,
        SPECIAL_FIFO,
        SPECIAL_SPARSE_HUGE,
        SPECIAL_SYMLINK_TO_EXAMPLE,
} SpecialKind;

static const struct {
        const char *name;
        SpecialKind kind;
        int error;
        const char *reason;
} specials[] = {
        { "rules.ini", SPECIAL_DIRECTORY, -EISDIR, "is a directory" },
        /* No writer ever opens it: a blocking open() would hang the test. */
        { "rules.json", SPECIAL_FIFO, -EBADFD, "not a regular file" },
        /* Sparse: one byte over the limit costs no disk space. */
        { "huge.ini", SPECIAL_SPARSE_HUGE, -EFBIG, "file too large" },
        /* Extensions are case-insensitive. */
        { "RULES.JSON", SPECIAL_SYMLINK_TO_EXAMPLE, 0, NULL },
};

START_TEST (test_special_file) {
        char dir[] = "/tmp/check-config-XXXXXX", *path, *example = src_path("examples/example-config.json");
        RuleSet *rs = NULL;
        Diag diag;
        int fd;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        ck_assert_int_ge(asprintf(&path, "%s/%s", dir, specials[_i].name), 0);
        switch (specials[_i].kind) {
        case SPECIAL_DIRECTORY:
                ck_assert_int_eq(mkdir(path, 0700), 0);
                break;
        case SPECIAL_FIFO:
                ck_assert_int_eq(mkfifo(path, 0600), 0);
                break;
        case SPECIAL_SPARSE_HUGE:
                fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
                ck_assert_int_ge(fd, 0);
                ck_assert_int_eq(ftruncate(fd, (off_t) CONFIG_FILE_MAX + 1), 0);
                close(fd);
                break;
        case SPECIAL_SYMLINK_TO_EXAMPLE:
                ck_assert_int_eq(symlink(example, path), 0);
                break;
        }

        ck_assert_int_eq(load(path, &rs, &diag), specials[_i].error);
        if (specials[_i].reason) {
                ck_assert_ptr_null(rs);
                assert_diag_has(&diag, 0, specials[_i].reason);
        } else {
                ck_assert_uint_eq(rs->n_rules, 5);
                ruleset_free(rs);
        }
        diag_done(&diag);
        ck_assert_int_eq(remove(path), 0);
        ck_assert_int_eq(rmdir(dir), 0);
        free(path);
        free(example);
}
END_TEST

START_TEST (test_size_limit_is_inclusive) {
        char *path = src_path("examples/example-config.ini");
        RuleSet *rs = NULL;
        struct stat st;
        Diag diag;

        ck_assert_int_eq(stat(path, &st), 0);
        diag_init(&diag, path);
        ck_assert_int_eq(config_load_limited(path, (size_t) st.st_size - 1, &rs, &diag), -EFBIG);
        assert_diag_has(&diag, 0, "file too large");
        diag_done(&diag);

        diag_init(&diag, path);
        ck_assert_int_eq(config_load_limited(path, (size_t) st.st_size, &rs, &diag), 0);
        ck_assert_uint_eq(rs->n_rules, 5);
        ruleset_free(rs);
        diag_done(&diag);
        free(path);
}
END_TEST

/* ---- texts: edge cases of each syntax ---- */

#define DEFAULT_INI "[default]\ncreditLimit = 0\nresetSeconds = 0\n"
#define LONG40      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define NUL_INI     "[a=1]\ncreditLimit = 1\x00\nresetSeconds = 1\n" DEFAULT_INI
#define NUL_JSON    "{\"default\": {\"creditLimit\": 0, \"resetSeconds\": 0}}\x00junk"
/* An INI rule [a=1] with its limits on lines 2-3, then the lines given (from line 4). */
#define INI_A1(...) "[a=1]\ncreditLimit = 10\nresetSeconds = 60\n" __VA_ARGS__ DEFAULT_INI
/* A JSON override [a=1] whose attributes given start on line 4 (one per line, each
 * preceded by ",\n"), then the default. */
#define JSON_A1(...)                                                                                        \
        "{\"overrides\": [\n{\"operation\": {\"a\": \"1\"},\n\"creditLimit\": 10, \"resetSeconds\": "       \
        "60" __VA_ARGS__ "}],\n\"default\": {\"creditLimit\": 0, \"resetSeconds\": 0}}"

/* A JSON override on line 1 with the operation's members given, then the default. */
#define JSON_OP(members)                                                                                    \
        "{\"overrides\": [{\"operation\": {" members "}, \"creditLimit\": 1, \"resetSeconds\": 1}],\n"      \
        "\"default\": {\"creditLimit\": 0, \"resetSeconds\": 0}}"

static const struct {
        bool json;
        const char *text;
        size_t len;    /* 0: strlen(text) */
        unsigned line; /* of the expected message; 0 with reason NULL: loads */
        const char *reason;
} texts[] = {
        /* inih would truncate this section name to 49 bytes and split the long line. */
        { false, "[path=/" LONG40 LONG40 " ip=*]\ncreditLimit = 1\nresetSeconds = 1\n"
                 "comment = '" LONG40 LONG40 LONG40 LONG40 LONG40 LONG40 "'\n" DEFAULT_INI },
        { false, "\xef\xbb\xbf[method=GET]\r\ncreditLimit = 1\r\nresetSeconds = 1\r\n" DEFAULT_INI },
        { false, "[path=\"/a]b\"]\ncreditLimit=1\nresetSeconds=1\n" DEFAULT_INI },
        { false,
          "[default]\ncreditLimit = 0\nresetSeconds = 0\n\n[default]\ncreditLimit = 1\nresetSeconds = 0\n",
          0, 5, "duplicate section: same header as the section on line 1" },
        { false, NUL_INI, sizeof NUL_INI - 1, 2, "NUL byte in line" },
        { false, "", 0, 0, "no rules" },
        { false, "[a=1]\n= 3\n" DEFAULT_INI, 0, 2, "missing key before '='" },
        /* A rule named by its section (the operation did not parse) quotes a long unknown
         * name cut, like any rule does, not whole. */
        { false, "[a==b]\n" LONG40 LONG40 " = 1\n" DEFAULT_INI, 0, 2,
          "section [a==b] has an unknown attribute \"" LONG40 "aaaaaaaaaaaaaaaaaaaaaaaa...\" (accepted: " },
        { true, "{\"overrides\": [], \"default\": {\"creditLimit\": 0, \"resetSeconds\": 0}}" },
        { true, "\xef\xbb\xbf{\"default\": {\"creditLimit\": 0, \"resetSeconds\": 0, \"operation\": {}}}" },
        { true, "", 0, 1, "JSON syntax error at column 1: unexpected end of file" },
        { true, "{\n\"default\": {\"creditLimit\": 0,\n \"resetSeconds\": 0}", 0, 3,
          "unexpected end of file" },
        { true, "{\"default\": {\"creditLimit\": 0, \"resetSeconds\": 0}}\n\nx", 0, 3,
          "JSON syntax error at column 1" },
        { true, "{\"default\": {\"creditLimit\": 0, \"resetSeconds\": 0, \"comment\": \"a\\u0000b\"}}", 0, 1,
          "\\u0000 in a string is not allowed" },
        { true, NUL_JSON, sizeof NUL_JSON - 1, 1, "NUL byte in file" },
        { true, "{\"default\": {\"creditLimit\": 0, \"resetSeconds\": 0},\n\"default\": {}}", 0, 2,
          "duplicate key 'default' (first on line 1)" },
        { true, "{\"overrides\": {}, \"default\": {\"creditLimit\": 0, \"resetSeconds\": 0}}", 0, 1,
          "overrides: expected an array, got an object" },
        { true, "{\"default\": {\"creditLimit\": 1.5, \"resetSeconds\": -2}}", 0, 1,
          "creditLimit \"1.5\" is not a non-negative decimal integer" },
        { true, "{\"default\": {\"creditLimit\": 1e300, \"resetSeconds\": 0}}", 0, 1,
          "creditLimit \"1e+300\"" },
        /* integers a double cannot hold are quoted as written, not as their rounded neighbour */
        { true, JSON_A1(",\n\"burst\": 9007199254740993, \"algorithm\": \"token-bucket\""), 0, 4,
          "rule [a=1] burst 9007199254740993 is above the maximum 9007199254740991" },
        { true, "{\"default\": {\"creditLimit\": 0, \"resetSeconds\": -18446744073709551617}}", 0, 1,
          "resetSeconds \"-18446744073709551617\" is not a non-negative decimal integer" },
        { true, "{\"default\": {\"creditLimit\": 90071992547409930e0, \"resetSeconds\": 0}}", 0, 1,
          "creditLimit 90071992547409936 is above the maximum" }, /* an exponent: the double */
        { true, "{\"default\": {\"creditLimit\": \"7\", \"resetSeconds\": 0, \"creditLimit\": 8}}", 0, 1,
          "sets creditLimit twice" },
        { true,
          "{\"overrides\": [{\"creditLimit\": 1,\n \"creditLimit\": 2, \"resetSeconds\": 1}],\n"
          " \"default\": {\"creditLimit\": 0, \"resetSeconds\": 0}}",
          0, 2, "overrides[0] sets creditLimit twice (first on line 1)" },
        { true,
          "{\"overrides\": [\n\n  {\"operation\": {\"a\": \"x\", \"a\": \"y\"},\n   \"creditLimit\": 1, "
          "\"resetSeconds\": 1}],\n \"default\": {\"creditLimit\": 0, \"resetSeconds\": 0}}",
          0, 3, "operation: 'a': appears twice" },
        { true,
          "{\"overrides\": [{\"operation\": {\"a\": null}, \"creditLimit\": 1, \"resetSeconds\": 1}],\n"
          " \"default\": {\"creditLimit\": 0, \"resetSeconds\": 0}}",
          0, 1, "got null" },
        /* Lines of rules after multi-line strings and escaped quotes still match. */
        { true,
          "{\"overrides\": [\n {\"operation\": {\"k\": \"a\\\"b\\\\\"},\n  \"creditLimit\": 1, "
          "\"resetSeconds\": 1, "
          "\"comment\": \"x\"},\n {\"operation\": {\"k\": \"z\"},\n  \"creditLimit\": \"many\", "
          "\"resetSeconds\": 1}],\n \"default\": {\"creditLimit\": 0, \"resetSeconds\": 0}}",
          0, 5, "creditLimit \"many\"" },

        /* INI, issue #15: the same operation with its keys in another order is another
         * rule, judged by the rules' validation; only identical header texts are
         * duplicate sections. */
        { false, "[method=GET path=/x]\ncreditLimit = 1\nresetSeconds = 1\nmatchPolicy = canary\n"
                 "[path=/x method=GET]\ncreditLimit = 1\nresetSeconds = 1\n" DEFAULT_INI },
        { false, "[method=GET path=/x]\ncreditLimit = 1\nresetSeconds = 1\nmatchPolicy = continue\n"
                 "[path=/x   method=GET]\ncreditLimit = 1\nresetSeconds = 1\n" DEFAULT_INI },
        { false,
          "[method=GET path=/x]\ncreditLimit = 1\nresetSeconds = 1\n"
          "[path=/x method=GET]\ncreditLimit = 1\nresetSeconds = 1\n" DEFAULT_INI,
          0, 4,
          "rule [method=GET path=/x] is unreachable: rule [method=GET path=/x] (line 1) matches every "
          "request it "
          "matches" },
        { false,
          "[method=GET path=/x]\ncreditLimit = 1\nresetSeconds = 1\n"
          "[path=/x method=GET]\ncreditLimit = 1\nresetSeconds = 1\nmatchPolicy = canary\n" DEFAULT_INI,
          0, 4, "rule [method=GET path=/x] is unreachable: rule [method=GET path=/x] (line 1)" },
        { false,
          "[method=GET path=/x]\ncreditLimit = 1\nresetSeconds = 1\nmatchPolicy = canary\n"
          "[method=GET path=/x]\ncreditLimit = 1\nresetSeconds = 1\n" DEFAULT_INI,
          0, 5, "duplicate section: same header as the section on line 1" },
        { false,
          "[method=GET path=/x]\ncreditLimit = 1\nresetSeconds = 1\nmatchPolicy = canary\n"
          "[ method=GET path=/x\t]\ncreditLimit = 1\nresetSeconds = 1\n" DEFAULT_INI,
          0, 5, "duplicate section: same header as the section on line 1" },

        /* INI: the new attributes, good and bad, each message at the attribute's line. */
        { false, INI_A1("algorithm = fixed-window\n") },
        { false, INI_A1("algorithm = sliding-window  # comment\n") },
        { false, INI_A1("algorithm = token-bucket\nburst = 20\nrefillSeconds = 6\nstrict = true\n") },
        { false, INI_A1("algorithm = 'gcra'\nstrict = \"false\"\n") },
        { false, INI_A1("matchPolicy = continue\n") },
        { false, INI_A1("algorithm = leaky-bucket\n"), 0, 4,
          "t.ini:4: rule [a=1] has an unknown algorithm \"leaky-bucket\" (accepted: fixed-window, "
          "sliding-window, "
          "token-bucket, gcra)" },
        { false, INI_A1("burst = 20\n"), 0, 4,
          "rule [a=1] sets burst, which only the token-bucket algorithm uses (this rule's algorithm is "
          "fixed-window, the default)" },
        { false, INI_A1("algorithm = sliding-window\nrefillSeconds = 6\n"), 0, 5,
          "rule [a=1] sets refillSeconds, which only the token-bucket algorithm uses (this rule's algorithm "
          "is "
          "sliding-window)" },
        { false, INI_A1("strict = true\nalgorithm = fixed-window\n"), 0, 4,
          "rule [a=1] sets strict, which only the token-bucket algorithm uses (this rule's algorithm is "
          "fixed-window)" },
        { false, INI_A1("algorithm = token-bucket\nburst = 0\n"), 0, 5,
          "rule [a=1] burst 0 is below the minimum 1 (leave burst out for a capacity of creditLimit)" },
        { false, INI_A1("algorithm = token-bucket\nburst = 1e3\n"), 0, 5,
          "rule [a=1] burst \"1e3\" is not a non-negative decimal integer" },
        { false, INI_A1("algorithm = token-bucket\nrefillSeconds = 3155760001\n"), 0, 5,
          "rule [a=1] refillSeconds 3155760001 is above the maximum 3155760000" },
        { false, INI_A1("algorithm = token-bucket\n\nstrict = on\n"), 0, 6,
          "rule [a=1] has an invalid strict \"on\" (accepted: true, false)" },
        { false, INI_A1("algorithm = token-bucket\nBurst = 3\n"), 0, 5,
          "rule [a=1] has an unknown attribute \"Burst\" (did you mean \"burst\"?)" },
        { false, INI_A1("algorithm = token-bucket\nrefillseconds = 3\n"), 0, 5,
          "rule [a=1] has an unknown attribute \"refillseconds\" (did you mean \"refillSeconds\"?)" },
        { false, INI_A1("algorithm = token-bucket\nalgorithm = gcra\n"), 0, 5,
          "rule [a=1] sets algorithm twice (first on line 4)" },
        { false, INI_A1("maxBurst = 3\n"), 0, 4,
          "(accepted: creditLimit, resetSeconds, actorField, matchPolicy, label, comment, algorithm, burst, "
          "refillSeconds, strict, onBackendError, window, matchKeys)" },
        /* Refused by algo_params_prepare(), at the line of the attribute its reason names first. */
        { false, INI_A1("algorithm = token-bucket\nrefillSeconds = 7\n"), 0, 5,
          "t.ini:5: rule [a=1] refillSeconds does not divide resetSeconds into whole credits (creditLimit * "
          "refillSeconds / resetSeconds must be an integer)" },
        { false,
          "[a=1]\nalgorithm = sliding-window\nresetSeconds = 1\ncreditLimit = 4294967296\n" DEFAULT_INI, 0,
          4,
          "t.ini:4: rule [a=1] creditLimit above 4294967295 is not supported by algorithm sliding-window" },
        { false, "[default]\ncreditLimit = 0\nresetSeconds = 0\nmatchPolicy = continue\n", 0, 4,
          "rule [default] is a default rule (empty operation) and must have matchPolicy stop" },
        /* issue #34's attributes: each refusal at its own line */
        { false, INI_A1("actorField = ip user\nwindow = aligned\nmatchKeys = exact\n") },
        { false, INI_A1("algorithm = gcra\n\nwindow = aligned\n"), 0, 6,
          "t.ini:6: rule [a=1] sets window aligned, which only the fixed-window and sliding-window "
          "algorithms "
          "have (a token bucket has no windows)" },
        { false, INI_A1("window = clock\n"), 0, 4,
          "t.ini:4: rule [a=1] has an unknown window \"clock\" (accepted: first-hit, aligned)" },
        { false, INI_A1("comment = x\nmatchKeys = exactly\n"), 0, 5,
          "t.ini:5: rule [a=1] has an unknown matchKeys \"exactly\" (accepted: subset, exact)" },
        { false, INI_A1("actorField = ip  user\n"), 0, 4,
          "t.ini:4: rule [a=1] has an empty field name in actorField \"ip  user\" (separate the names by "
          "single spaces)" },
        { false, INI_A1("actorField = \"ip \"\n"), 0, 4,
          "t.ini:4: rule [a=1] has an empty field name in actorField \"ip \"" },
        { false, INI_A1("actorField = user ip user\n"), 0, 4,
          "t.ini:4: rule [a=1] names the field \"user\" twice in actorField" },
        { false, "[default]\ncreditLimit = 0\nresetSeconds = 0\nmatchKeys = exact\n", 0, 4,
          "t.ini:4: rule [default] is a default rule (empty operation) and must have matchKeys subset" },
        { true,
          JSON_A1(",\n\"actorField\": \"ip user\",\n\"window\": \"aligned\",\n\"matchKeys\": \"exact\"") },
        { true, JSON_A1(",\n\"algorithm\": \"sliding-window\",\n\"window\": \"aligned\"") },
        { true, JSON_A1(",\n\"algorithm\": \"token-bucket\",\n\"window\": \"aligned\""), 0, 5,
          "t.json:5: rule [a=1] sets window aligned, which only the fixed-window and sliding-window "
          "algorithms have" },
        { true, JSON_A1(",\n\"window\": true"), 0, 4,
          "rule [a=1]: window: expected a string, got a boolean" },
        { true, JSON_A1(",\n\"matchKeys\": \"Exact\""), 0, 4,
          "t.json:4: rule [a=1] has an unknown matchKeys \"Exact\" (accepted: subset, exact)" },
        { true, JSON_A1(",\n\"actorField\": \"ip\\tuser \""), 0, 4,
          "t.json:4: rule [a=1] has an empty field name in actorField \"ip?user \"" },

        /* JSON: the same, with JSON's types (strict a boolean or a string). */
        { true, JSON_A1(",\n\"algorithm\": \"token-bucket\",\n\"burst\": 20,\n\"refillSeconds\": "
                        "6,\n\"strict\": true") },
        { true, JSON_A1(",\n\"algorithm\": \"gcra\",\n\"burst\": \"20\",\n\"strict\": \"false\"") },
        { true, JSON_A1(",\n\"algorithm\": \"token-bucket\",\n\"refillSeconds\": 6.0,\n\"strict\": false") },
        { true, JSON_A1(",\n\"algorithm\": \"sliding-window\",\n\"matchPolicy\": \"continue\"") },
        { true, JSON_A1(",\n\"algorithm\": \"Sliding-Window\""), 0, 4,
          "rule [a=1] has an unknown algorithm \"Sliding-Window\"" },
        { true, JSON_A1(",\n\"algorithm\": 2"), 0, 4,
          "rule [a=1]: algorithm: expected a string, got a number" },
        { true, JSON_A1(",\n\"algorithm\": \"token-bucket\",\n\"strict\": 1"), 0, 5,
          "rule [a=1]: strict: expected true or false, got a number" },
        { true, JSON_A1(",\n\"algorithm\": \"token-bucket\",\n\"strict\": null"), 0, 5,
          "rule [a=1]: strict: expected true or false, got null" },
        { true, JSON_A1(",\n\"algorithm\": \"token-bucket\",\n\"strict\": \"yes\""), 0, 5,
          "rule [a=1] has an invalid strict \"yes\" (accepted: true, false)" },
        { true, JSON_A1(",\n\"algorithm\": \"token-bucket\",\n\"burst\": true"), 0, 5,
          "rule [a=1]: burst: expected a number, got a boolean" },
        { true, JSON_A1(",\n\"algorithm\": \"token-bucket\",\n\"burst\": 1.5"), 0, 5,
          "rule [a=1] burst \"1.5\" is not a non-negative decimal integer" },
        { true, JSON_A1(",\n\"algorithm\": \"token-bucket\",\n\"refillSeconds\": -6"), 0, 5,
          "rule [a=1] refillSeconds \"-6\" is not a non-negative decimal integer" },
        { true, JSON_A1(",\n\"algorithm\": \"token-bucket\",\n\"refillSeconds\": [6]"), 0, 5,
          "rule [a=1]: refillSeconds: expected a number, got an array" },
        { true, JSON_A1(",\n\"burst\": 20"), 0, 4,
          "rule [a=1] sets burst, which only the token-bucket algorithm uses (this rule's algorithm is "
          "fixed-window, the default)" },
        { true, JSON_A1(",\n\"strict\": false,\n\"algorithm\": \"sliding-window\""), 0, 4,
          "rule [a=1] sets strict, which only the token-bucket algorithm uses (this rule's algorithm is "
          "sliding-window)" },
        { true,
          "{\"default\": {\"algorithm\": \"gcra\",\n\"resetSeconds\": 1,\n\"creditLimit\": 2000000,\n"
          "\"burst\": 1}}",
          0, 3,
          "t.json:3: rule [default] creditLimit per resetSeconds gives an interval under 1 microsecond" },
        { true, "{\"default\": {\"creditLimit\": 0, \"resetSeconds\": 0,\n\"matchPolicy\": \"continue\"}}",
          0, 2, "rule [default] is a default rule (empty operation) and must have matchPolicy stop" },
        /* onBackendError (issue #16): every value in both formats, bad ones at their line. */
        { false, INI_A1("onBackendError = allow\n") },
        { false, INI_A1("onBackendError = deny  ; comment\n") },
        { false, INI_A1("onBackendError = 'local'\n") },
        { false, INI_A1("algorithm = token-bucket\nonBackendError = \"deny\"\n") },
        { false, INI_A1("\nonBackendError = fail\n"), 0, 5,
          "t.ini:5: rule [a=1] has an unknown onBackendError \"fail\" (accepted: allow, deny, local)" },
        { false, INI_A1("onBackendError = Allow\n"), 0, 4,
          "t.ini:4: rule [a=1] has an unknown onBackendError \"Allow\" (accepted: allow, deny, local)" },
        { false, INI_A1("onBackendError =\n"), 0, 4,
          "t.ini:4: rule [a=1] has an unknown onBackendError \"\" (accepted: allow, deny, local)" },
        { false, INI_A1("onbackenderror = deny\n"), 0, 4,
          "t.ini:4: rule [a=1] has an unknown attribute \"onbackenderror\" (did you mean "
          "\"onBackendError\"?)" },
        { false, INI_A1("onBackendError = deny\nonBackendError = allow\n"), 0, 5,
          "t.ini:5: rule [a=1] sets onBackendError twice (first on line 4)" },
        { true, JSON_A1(",\n\"onBackendError\": \"allow\"") },
        { true, JSON_A1(",\n\"onBackendError\": \"deny\"") },
        { true, JSON_A1(",\n\"onBackendError\": \"local\"") },
        { true, JSON_A1(",\n\"onBackendError\": \"LOCAL\""), 0, 4,
          "t.json:4: rule [a=1] has an unknown onBackendError \"LOCAL\" (accepted: allow, deny, local)" },
        { true, JSON_A1(",\n\"comment\": \"x\",\n\"onBackendError\": \"default\""), 0, 5,
          "t.json:5: rule [a=1] has an unknown onBackendError \"default\" (accepted: allow, deny, local)" },
        { true, JSON_A1(",\n\"onBackendError\": false"), 0, 4,
          "t.json:4: rule [a=1]: onBackendError: expected a string, got a boolean" },
        { true, JSON_A1(",\n\"onBackendError\": null"), 0, 4,
          "t.json:4: rule [a=1]: onBackendError: expected a string, got null" },
        { true,
          "{\"default\": {\"creditLimit\": 0, \"resetSeconds\": 0,\n\"onBackendError\": \"deny\",\n"
          "\"onBackendError\": \"allow\"}}",
          0, 3, "t.json:3: rule [default] sets onBackendError twice (first on line 2)" },
        /* A message is one line whatever the file quotes into it (STATUS=, the log, the
         * output of --check-config): control bytes from the file come out as '?'. */
        { true, "{\"x\\nREADY=1\": 1, \"default\": {\"creditLimit\": 0, \"resetSeconds\": 0}}", 0, 1,
          "t.json:1: unknown key 'x?READY=1' (accepted: overrides, default)" },
        { false, "[path=/a\x1b[31m]\ncreditLimit=1\nresetSeconds=1\n" DEFAULT_INI, 0, 1,
          "t.ini:1: section [path=/a?[31m]: invalid operation: control character in request" },
        /* JSON operations no request can carry are refused, as in an INI header; tab, '=',
         * spaces and UTF-8 are not. */
        { true, JSON_OP("\"path\": \"/a\\nb\""), 0, 1,
          "t.json:1: overrides[0]: operation: 'path': value contains a control character, which a request "
          "cannot carry" },
        { true, JSON_OP("\"pa\\\"th\": \"/a\""), 0, 1,
          "t.json:1: overrides[0]: operation: 'pa\"th': key contains '\"', which a request cannot carry" },
        { true, JSON_OP("\"path\": \"/\xff\""), 0, 1,
          "t.json:1: overrides[0]: operation: 'path': value is not valid UTF-8, which a request cannot "
          "carry" },
        { true, JSON_OP("\"p\\u0001\": \"/a\""), 0, 1,
          "t.json:1: overrides[0]: operation: 'p?': key contains a control character, which a request "
          "cannot "
          "carry" },
        { true, JSON_OP("\"path\": \"/\xc3\xa9 =\\tx\"") },
        /* JSON accepted a canary before a stop rule on one operation all along. */
        { true,
          "{\"overrides\": [{\"operation\": {\"method\": \"GET\", \"path\": \"/x\"}, \"creditLimit\": 1,"
          " \"resetSeconds\": 1, \"matchPolicy\": \"canary\"},\n"
          " {\"operation\": {\"method\": \"GET\", \"path\": \"/x\"}, \"creditLimit\": 1, \"resetSeconds\": "
          "1}],\n"
          " \"default\": {\"creditLimit\": 0, \"resetSeconds\": 0}}" },
};

START_TEST (test_text) {
        size_t len = texts[_i].len ? texts[_i].len : strlen(texts[_i].text);
        RuleSet *rs = NULL;
        Diag diag;

        diag_init(&diag, texts[_i].json ? "t.json" : "t.ini");
        int r = parse_text(texts[_i].json, texts[_i].text, len, &rs, &diag);
        if (!texts[_i].reason) {
                if (r < 0)
                        diag_dump(&diag);
                ck_assert_int_eq(r, 0);
                ck_assert_uint_eq(diag_count(&diag), 0);
                ruleset_free(rs);
        } else {
                ck_assert_int_eq(r, -EINVAL);
                assert_diag_has(&diag, texts[_i].line, texts[_i].reason);
        }
        diag_done(&diag);
}
END_TEST

START_TEST (test_long_section_kept_whole) {
        static const char text[] =
                "[path=/" LONG40 LONG40 " ip=*]\ncreditLimit = 1\nresetSeconds = 1\n" DEFAULT_INI;
        RuleSet *rs = NULL;
        Diag diag;

        diag_init(&diag, "t.ini");
        ck_assert_int_eq(parse_text(false, text, strlen(text), &rs, &diag), 0);
        ck_assert_uint_eq(rs->rules[0].n_patterns, 2);
        ck_assert_str_eq(rs->rules[0].patterns[1].value, "/" LONG40 LONG40);
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

START_TEST (test_ini_section_count_bounded) {
        /* Reliability: a huge file of sections stops at RULES_MAX + 2 of them, with a message.
         * Every section is a valid, distinct rule, so that the limit is the only thing to
         * report: had the loader read on, each section past RULES_MAX would add its own
         * "one too many" (and the end-of-file duplicate check would run). */
        size_t n = RULES_MAX + 10, len = 0, size = n * 64;
        char *text = malloc(size), want[2][160];
        RuleSet *rs = NULL;
        Diag diag;

        ck_assert_ptr_nonnull(text);
        for (size_t i = 1; i <= n; i++) {
                int k = snprintf(text + len, size - len, "[a=%zu]\ncreditLimit = 1\nresetSeconds = 1\n", i);
                ck_assert_int_gt(k, 0);
                len += (size_t) k;
        }
        diag_init(&diag, "t.ini");
        ck_assert_int_eq(ruleset_new("t.ini", &rs), 0);
        ck_assert_int_eq(config_ini_parse(text, len, rs, &diag), -EINVAL);

        /* Section k starts on line 3k - 2: rule RULES_MAX + 1 is refused by rules.c when
         * the next header ends it, and that header is where the loader stops. */
        snprintf(want[0], sizeof want[0],
                 "t.ini:%d: rule [a=%d] is one too many: a config has at most %d rules",
                 3 * (RULES_MAX + 1) - 2, RULES_MAX + 1, RULES_MAX);
        snprintf(want[1], sizeof want[1], "t.ini:%d: more than %d sections: a config has at most %d rules",
                 3 * (RULES_MAX + 2) - 2, RULES_MAX, RULES_MAX);
        if (diag.n_messages != 2)
                diag_dump(&diag);
        ck_assert_uint_eq(diag.n_messages, 2);
        ck_assert_uint_eq(diag.n_dropped, 0);
        ck_assert_str_eq(diag.messages[0], want[0]);
        ck_assert_str_eq(diag.messages[1], want[1]);
        ck_assert_uint_eq(rs->n_rules, RULES_MAX);
        ruleset_free(rs);
        diag_done(&diag);
        free(text);
}
END_TEST

START_TEST (test_summary_singular) {
        static const char text[] = DEFAULT_INI "label = all\nactorField = ip\n";
        RuleSet *rs = NULL;
        char buf[128];
        Diag diag;

        diag_init(&diag, "t.ini");
        ck_assert_int_eq(parse_text(false, text, strlen(text), &rs, &diag), 0);
        ck_assert_str_eq(config_summary(rs, buf, sizeof buf), "1 rule (0 canary, 1 with actor, 1 labelled)");
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

START_TEST (test_dump_escapes) {
        static const char text[] = "[path=\"a\\\\b\" q=\"x y\"]\ncreditLimit = 1\nresetSeconds = 1\n"
                                   "comment = 'caf\xc3\xa9 \"quoted\" back\\\\slash'\n" DEFAULT_INI;
        RuleSet *rs = NULL, *back = NULL;
        size_t len;
        Diag diag;

        diag_init(&diag, "t.ini");
        ck_assert_int_eq(parse_text(false, text, strlen(text), &rs, &diag), 0);
        char *json = dump(rs, &len);
        ck_assert_ptr_nonnull(strstr(json, "\"comment\": \"caf\xc3\xa9 \\\"quoted\\\" back\\\\\\\\slash\""));
        ck_assert_int_eq(parse_text(true, json, len, &back, &diag), 0);
        assert_rules_equal(rs, back);
        free(json);
        ruleset_free(rs);
        ruleset_free(back);
        diag_done(&diag);
}
END_TEST

/* The new attributes are dumped only when not the defaults: exactly this text. */
START_TEST (test_dump_algorithms) {
        static const char text[] =
                "[a=1]\ncreditLimit = 10\nresetSeconds = 60\nalgorithm = gcra\nburst = 25\n"
                "refillSeconds = 6\nstrict = true\nmatchPolicy = continue\n"
                "[a=2]\ncreditLimit = 10\nresetSeconds = 60\nalgorithm = token-bucket\n"
                "burst = 10\nrefillSeconds = 0\nstrict = false\n"
                "[a=3]\ncreditLimit = 10\nresetSeconds = 60\nalgorithm = sliding-window\n"
                "[a=4]\ncreditLimit = 10\nresetSeconds = 60\nalgorithm = fixed-window\n"
                "[default]\ncreditLimit = 0\nresetSeconds = 0\nalgorithm = token-bucket\n"
                "burst = 3\n";
        static const char want[] = "{\n"
                                   "  \"overrides\": [\n"
                                   "    {\n"
                                   "      \"operation\": {\n"
                                   "        \"a\": \"1\"\n"
                                   "      },\n"
                                   "      \"creditLimit\": 10,\n"
                                   "      \"resetSeconds\": 60,\n"
                                   "      \"algorithm\": \"token-bucket\",\n"
                                   "      \"burst\": 25,\n"
                                   "      \"refillSeconds\": 6,\n"
                                   "      \"strict\": true,\n"
                                   "      \"matchPolicy\": \"continue\"\n"
                                   "    },\n"
                                   "    {\n"
                                   "      \"operation\": {\n"
                                   "        \"a\": \"2\"\n"
                                   "      },\n"
                                   "      \"creditLimit\": 10,\n"
                                   "      \"resetSeconds\": 60,\n"
                                   "      \"algorithm\": \"token-bucket\"\n"
                                   "    },\n"
                                   "    {\n"
                                   "      \"operation\": {\n"
                                   "        \"a\": \"3\"\n"
                                   "      },\n"
                                   "      \"creditLimit\": 10,\n"
                                   "      \"resetSeconds\": 60,\n"
                                   "      \"algorithm\": \"sliding-window\"\n"
                                   "    },\n"
                                   "    {\n"
                                   "      \"operation\": {\n"
                                   "        \"a\": \"4\"\n"
                                   "      },\n"
                                   "      \"creditLimit\": 10,\n"
                                   "      \"resetSeconds\": 60\n"
                                   "    }\n"
                                   "  ],\n"
                                   "  \"default\": {\n"
                                   "    \"creditLimit\": 0,\n"
                                   "    \"resetSeconds\": 0,\n"
                                   "    \"algorithm\": \"token-bucket\",\n"
                                   "    \"burst\": 3\n"
                                   "  }\n"
                                   "}\n";
        RuleSet *rs = NULL, *back = NULL;
        size_t len;
        Diag diag;

        diag_init(&diag, "t.ini");
        ck_assert_int_eq(parse_text(false, text, strlen(text), &rs, &diag), 0);
        char *json = dump(rs, &len);
        ck_assert_str_eq(json, want);
        /* dump -> load: the same rules, the same counter ids */
        ck_assert_int_eq(parse_text(true, json, len, &back, &diag), 0);
        assert_rules_equal(rs, back);
        free(json);
        ruleset_free(rs);
        ruleset_free(back);
        diag_done(&diag);
}
END_TEST

/* ---- --check-config --compat=divvy ---- */

#define DIVVY_MAX 4 /* messages a case expects */
#define NOT_DIVVY "is not divvy-compatible: "

/* Each case: a text that loads, and every message config_check_divvy() gives for it,
 * exactly (none: accepted). Each claim about divvy 1.7 was tried against divvy 1.7's
 * config.js with npm ini 1.3. */
static const struct {
        const char *name;
        const char *file; /* "t.ini" or "t.json": the format, and rs->source */
        const char *text;
        const char *msgs[DIVVY_MAX];
} divvy_cases[] = {
        /* accepted: what divvy 1.7 reads and decides alike */
        { "plain rules",
          "t.ini",
          "[method=GET path=/a]\ncreditLimit = 10\nresetSeconds = 60\nlabel = a\ncomment = x#y\n"
          "[method=GET path=/b/*]\ncreditLimit = 1\nresetSeconds = 1\nactorField = ip\nmatchPolicy = canary "
          " # c\n"
          "[path=/c]\ncreditLimit = 0\nresetSeconds = 60\nalgorithm = fixed-window\n" DEFAULT_INI,
          {} },
        { "quotes divvy strips alike",
          "t.ini",
          INI_A1("actorField = 'ip'\nmatchPolicy = \"canary\"\nlabel = '123'\ncomment = 'a # b' # c\n"),
          {} },
        { "JSON as divvy writes it",
          "t.json",
          "{\"overrides\": [{\"operation\": {\"a\": \"1\", \"n\": 2, \"b\": true}, \"creditLimit\": 10, "
          "\"resetSeconds\": \"60\", \"actorField\": \"ip\", \"matchPolicy\": \"stop\"}],\n"
          "\"default\": {\"operation\": {}, \"creditLimit\": 0, \"resetSeconds\": 0}}",
          {} },
        /* attributes divvy 1.7 does not know */
        { "sliding window",
          "t.ini",
          INI_A1("algorithm = sliding-window\n"),
          { "t.ini:1: rule [a=1] " NOT_DIVVY
            "algorithm sliding-window (divvy 1.7 counts in fixed windows only)" } },
        { "token bucket and its parameters",
          "t.json",
          "{\"overrides\": [\n{\"operation\": {\"a\": \"1\"}, \"creditLimit\": 10, \"resetSeconds\": 60,\n"
          "\"algorithm\": \"gcra\", \"burst\": 20, \"refillSeconds\": 6, \"strict\": true}],\n"
          "\"default\": {\"operation\": {}, \"creditLimit\": 0, \"resetSeconds\": 0}}",
          { "t.json:2: rule [a=1] " NOT_DIVVY
            "algorithm token-bucket (divvy 1.7 counts in fixed windows only)" } },
        { "matchPolicy continue",
          "t.ini",
          INI_A1("matchPolicy = continue\n"),
          { "t.ini:1: rule [a=1] " NOT_DIVVY
            "matchPolicy continue (divvy 1.7 knows stop and canary only)" } },
        /* onBackendError: divvy 1.7 ignores it, and decides nothing while Redis is down */
        { "onBackendError in JSON",
          "t.json",
          "{\"overrides\": [],\n\"default\": {\"operation\": {}, \"creditLimit\": 0, \"resetSeconds\": 0, "
          "\"onBackendError\": \"deny\"}}",
          {} },
        { "onBackendError in INI",
          "t.ini",
          "[a=1]\ncreditLimit = 5\nresetSeconds = 60\nonBackendError = 'allow' ; fail open\n"
          "[a=2]\ncreditLimit = 5\nresetSeconds = 60\nonBackendError = local\n" DEFAULT_INI,
          {} },
        /* validation */
        { "resetSeconds 0 with a limit",
          "t.ini",
          "[a=1]\ncreditLimit = 5\nresetSeconds = 0\n" DEFAULT_INI,
          { "t.ini:1: rule [a=1] " NOT_DIVVY
            "resetSeconds 0 with creditLimit 5 (divvy 1.7 refuses a resetSeconds "
            "under 1 unless creditLimit is 0)" } },
        /* matching */
        { "key=*",
          "t.ini",
          "[ip=* method=GET]\ncreditLimit = 5\nresetSeconds = 1\nactorField = ip\n" DEFAULT_INI,
          { "t.ini:1: rule [ip=* method=GET] " NOT_DIVVY
            "ip=* (divvy 1.7 also matches requests without ip)" } },
        { "glob with a * inside",
          "t.ini",
          "[path=/a/*/c]\ncreditLimit = 5\nresetSeconds = 1\n" DEFAULT_INI,
          { "t.ini:1: rule [path=/a/*/c] " NOT_DIVVY
            "path=/a/*/c (divvy 1.7 reads a glob as the prefix before its "
            "first * and the rest as a regular expression, unanchored: only a single * at the end matches "
            "alike)" } },
        { "glob with a leading *",
          "t.json",
          "{\"overrides\": [{\"operation\": {\"path\": \"*.png\"}, \"creditLimit\": 5, \"resetSeconds\": "
          "1}],\n"
          "\"default\": {\"operation\": {}, \"creditLimit\": 0, \"resetSeconds\": 0}}",
          { "t.json:1: rule [path=*.png] " NOT_DIVVY
            "path=*.png (divvy 1.7 reads a glob as the prefix before its "
            "first * and the rest as a regular expression, unanchored: only a single * at the end matches "
            "alike)" } },
        { "two trailing stars",
          "t.ini",
          "[path=/a/**]\ncreditLimit = 5\nresetSeconds = 1\n" DEFAULT_INI,
          { "t.ini:1: rule [path=/a/**] " NOT_DIVVY
            "path=/a/** (divvy 1.7 reads a glob as the prefix before its "
            "first * and the rest as a regular expression, unanchored: only a single * at the end matches "
            "alike)" } },
        { "a prefix of undefined",
          "t.ini",
          "[a=und*]\ncreditLimit = 5\nresetSeconds = 1\n" DEFAULT_INI,
          { "t.ini:1: rule [a=und*] " NOT_DIVVY
            "a=und* (divvy 1.7 also matches requests without a, whose a it reads "
            "as \"undefined\")" } },
        { "an inherited name",
          "t.ini",
          "[toString=f*]\ncreditLimit = 5\nresetSeconds = 1\n" DEFAULT_INI,
          { "t.ini:1: rule [toString=f*] " NOT_DIVVY "toString=f* (divvy 1.7 also matches requests without "
            "toString, whose toString it reads as \"function toString() { [native code] }\")" } },
        { "__proto__ in the operation",
          "t.ini",
          "[__proto__=x b=1]\ncreditLimit = 5\nresetSeconds = 1\n" DEFAULT_INI,
          { "t.ini:1: rule [__proto__=x b=1] " NOT_DIVVY
            "operation key __proto__ (divvy 1.7 drops it: a JavaScript "
            "object's prototype)" } },
        { "an inherited actorField",
          "t.ini",
          INI_A1("actorField = constructor\n"),
          { "t.ini:1: rule [a=1] " NOT_DIVVY
            "actorField constructor (divvy 1.7 counts the requests without it under "
            "another actor: every JavaScript object has a constructor)" } },
        /* how divvy 1.7's INI reader reads the text */
        { "blanks before a header",
          "t.ini",
          "  [a=1]\ncreditLimit = 5\nresetSeconds = 1\n" DEFAULT_INI,
          { "t.ini:1: rule [a=1] " NOT_DIVVY
            "its section header (divvy 1.7 reads only a bare [key=value ...] line as "
            "this operation: no blanks or comment around it, no quotes, no . ; # \\ ] or other spaces in "
            "it)" } },
        { "comment after a header",
          "t.ini",
          "[a=1] # c\ncreditLimit = 5\nresetSeconds = 1\n" DEFAULT_INI,
          { "t.ini:1: rule [a=1] " NOT_DIVVY "its section header" } },
        { "quoted header value",
          "t.ini",
          "[path=\"/a b\"]\ncreditLimit = 5\nresetSeconds = 1\n" DEFAULT_INI,
          { "t.ini:1: rule [path=\"/a b\"] " NOT_DIVVY "its section header" } },
        { "dot in a header",
          "t.ini",
          "[path=/a.json]\ncreditLimit = 5\nresetSeconds = 1\n" DEFAULT_INI,
          { "t.ini:1: rule [path=/a.json] " NOT_DIVVY "its section header" } },
        { "no-break space in a header",
          "t.ini",
          "[a=x\xc2\xa0y]\ncreditLimit = 5\nresetSeconds = 1\n" DEFAULT_INI,
          { "t.ini:1: rule [a=x\xc2\xa0y] " NOT_DIVVY "its section header" } },
        { "quoted value then a comment",
          "t.ini",
          "[a=1]\ncreditLimit = '5' # c\nresetSeconds = 1\n" DEFAULT_INI,
          { "t.ini:1: rule [a=1] " NOT_DIVVY
            "the value of creditLimit as written (divvy 1.7 reads it otherwise)" } },
        { "null and escapes",
          "t.ini",
          INI_A1("actorField = a\\;b\nlabel = null\n"),
          { "t.ini:1: rule [a=1] " NOT_DIVVY "the value of actorField, label as written (divvy 1.7 reads it "
            "otherwise)" } },
        { "a # without a blank",
          "t.ini",
          INI_A1("actorField = ip#4\n"),
          { "t.ini:1: rule [a=1] " NOT_DIVVY
            "the value of actorField as written (divvy 1.7 reads it otherwise)" } },
        { "byte order mark",
          "t.ini",
          "\xef\xbb\xbf[a=1]\ncreditLimit = 5\nresetSeconds = 1\n" DEFAULT_INI,
          { "t.ini:1: rule [a=1] " NOT_DIVVY
            "the file starts with a byte order mark (divvy 1.7 cannot read this rule "
            "after it)" } },
        { "byte order mark before a comment",
          "t.ini",
          "\xef\xbb\xbf# c\n[a=1]\ncreditLimit = 5\nresetSeconds = 1\n" DEFAULT_INI,
          {} },
        /* and its JSON */
        { "JSON byte order mark",
          "t.json",
          "\xef\xbb\xbf{\"default\": {\"operation\": {}, \"creditLimit\": 0, \"resetSeconds\": 0}, "
          "\"overrides\": []}",
          { "t.json:1: rule [default] " NOT_DIVVY
            "the file starts with a byte order mark (divvy 1.7 cannot read this "
            "rule after it)" } },
        { "JSON default without operation, no overrides",
          "t.json",
          "{\"default\": {\"creditLimit\": 0, \"resetSeconds\": 0}}",
          { "t.json:1: rule [default] " NOT_DIVVY
            "no \"operation\" (divvy 1.7 needs \"operation\": {} here); no "
            "\"overrides\" in the file (divvy 1.7 needs the array, even empty)" } },
        { "JSON limit as a string divvy writes alike",
          "t.json",
          "{\"overrides\": [{\"operation\": {\"a\": 1.5}, \"creditLimit\": \"10\", \"resetSeconds\": 1}],\n"
          "\"default\": {\"operation\": {}, \"creditLimit\": 0, \"resetSeconds\": 0}}",
          {} },
        { "JSON exponent in an operation",
          "t.json",
          "{\"overrides\": [{\"operation\": {\"a\": 1e-7}, \"creditLimit\": \"010\", \"resetSeconds\": "
          "1}],\n"
          "\"default\": {\"operation\": {}, \"creditLimit\": 0, \"resetSeconds\": 0}}",
          { "t.json:1: rule [a=1e-07] " NOT_DIVVY "the value of creditLimit as written (divvy 1.7 reads it "
            "otherwise); an operation value written as a number with an exponent (divvy 1.7 turns it into "
            "other "
            "text)" } },
        /* several reasons: one message per rule, each rule its own */
        { "one message per rule",
          "t.ini",
          "[ip=*]\ncreditLimit = 5\nresetSeconds = 0\nmatchPolicy = continue\nonBackendError = allow\n"
          "[b=1]\ncreditLimit = 5\nresetSeconds = 60\nalgorithm = token-bucket\n" DEFAULT_INI,
          { "t.ini:1: rule [ip=*] " NOT_DIVVY "matchPolicy continue (divvy 1.7 knows stop and canary only); "
            "resetSeconds 0 with creditLimit 5 (divvy 1.7 refuses a resetSeconds under 1 unless creditLimit "
            "is "
            "0); ip=* (divvy 1.7 also matches requests without ip)",
            "t.ini:6: rule [b=1] " NOT_DIVVY
            "algorithm token-bucket (divvy 1.7 counts in fixed windows only)" } },
        /* the file's name */
        { "upper-case extension",
          "t.INI",
          "[a=1]\ncreditLimit = 5\nresetSeconds = 1\n" DEFAULT_INI,
          { "t.INI: divvy 1.7 reads only files whose names end in .ini or .json, in lower case" } },
};

START_TEST (test_divvy_compat) {
        const char *text = divvy_cases[_i].text;
        bool json = strstr(divvy_cases[_i].file, ".json") != NULL;
        RuleSet *rs = NULL;
        size_t n = 0;
        Diag diag;

        diag_init(&diag, divvy_cases[_i].file);
        if (parse_text(json, text, strlen(text), &rs, &diag) < 0) {
                diag_dump(&diag);
                ck_abort_msg("case \"%s\" does not load", divvy_cases[_i].name);
        }
        int r = config_check_divvy(rs, &diag);
        while (n < DIVVY_MAX && divvy_cases[_i].msgs[n])
                n++;
        if (r != (n > 0 ? -EINVAL : 0) || diag.n_messages != n)
                diag_dump(&diag);
        ck_assert_int_eq(r, n > 0 ? -EINVAL : 0);
        ck_assert_uint_eq(diag.n_messages, n);
        for (size_t i = 0; i < n; i++) {
                /* exact, or a prefix for cases that repeat an exact message's reason */
                const char *want = divvy_cases[_i].msgs[i];
                if (strncmp(diag.messages[i], want, strlen(want)) != 0 || strlen(want) < 60)
                        ck_assert_str_eq(diag.messages[i], want);
        }
        ck_assert_int_eq(config_check_divvy(rs, NULL), r); /* no diag: the same verdict */
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

/* The bundled examples and the fixtures: which divvy 1.7 decides alike, and the lines of the rules it
 * would not. */
static const struct {
        const char *path;
        unsigned lines[8]; /* lines of the refused rules, 0-terminated */
} divvy_files[] = {
        { "tests/data/divvy-compat.ini", { 0 } },
        { "tests/data/divvy-compat.json", { 0 } },
        /* ip=* / userId=*: divvy 1.7 also matches requests without the key */
        { "examples/example-config.ini", { 13, 20, 26, 0 } },
        { "examples/canary-config.ini", { 12, 18, 0 } },
        { "examples/algorithms-config.ini", { 8, 19, 28, 37, 47, 56, 0 } },
        /* and divvyd's JSON examples leave the default's operation out */
        { "examples/example-config.json", { 13, 25, 36, 48, 0 } },
        { "examples/canary-config.json", { 14, 25, 37, 0 } },
        { "examples/algorithms-config.json", { 3, 12, 21, 30, 39, 49, 57, 0 } },
};

START_TEST (test_divvy_compat_files) {
        RuleSet *rs = NULL;
        size_t n = 0;
        Diag diag;

        ck_assert_int_eq(load(divvy_files[_i].path, &rs, &diag), 0);
        while (divvy_files[_i].lines[n])
                n++;
        ck_assert_int_eq(config_check_divvy(rs, &diag), n > 0 ? -EINVAL : 0);
        if (diag.n_messages != n)
                diag_dump(&diag);
        ck_assert_uint_eq(diag.n_messages, n);
        for (size_t i = 0; i < n; i++)
                assert_diag_has(&diag, divvy_files[_i].lines[i], NOT_DIVVY);
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

/* Rules whose divvy keys can meet in Redis (config_check_divvy_keys()): each case's text and
 * every warning, exactly. */
#define R3(op, extra) "[" op "]\ncreditLimit = 3\nresetSeconds = 60\n" extra "\n"
#define SHARES        "warning: rule "
#define APART         ", which the local store keeps apart"
static const struct {
        const char *name;
        const char *text; /* INI, or JSON when it starts with '{' */
        const char *msgs[DIVVY_MAX];
} divvy_key_cases[] = {
        { "the issue's: an actor holding ':' meets a longer operation",
          R3("path=/x", "actorField = user") R3("path=/x:y", "actorField = user") DEFAULT_INI,
          { "t.ini:1: " SHARES
            "[path=/x] shares divvy keys with rule [path=/x:y] (line 5): in Redis its actor "
            "\"y:X\" and that rule's actor \"X\" are one counter, \"divvy:path=/x:y:X:3:60\"" APART } },
        { "the longer one without an actor",
          R3("path=/x:y", "") R3("path=/x", "actorField = user") DEFAULT_INI,
          { "t.ini:5: " SHARES
            "[path=/x] shares divvy keys with rule [path=/x:y] (line 1): in Redis its actor "
            "\"y:\" and that rule's counter are one counter, \"divvy:path=/x:y::3:60\"" APART } },
        { "other limits: other keys",
          R3("path=/x", "actorField = user") "[path=/x:y]\ncreditLimit = 4\nresetSeconds = 60\nactorField = "
                                             "user\n" DEFAULT_INI,
          {} },
        { "no actor on the shorter one: its key ends where the other's goes on",
          R3("path=/x", "") R3("path=/x:y", "actorField = user") DEFAULT_INI,
          {} },
        { "other algorithms have divvyd's own keys",
          R3("path=/x", "actorField = user\nalgorithm = sliding-window") R3("path=/x:y", "actorField = user")
                  DEFAULT_INI,
          {} },
        { "aligned windows have divvyd's own keys",
          R3("path=/x", "actorField = user\nwindow = aligned") R3("path=/x:y", "actorField = user")
                  DEFAULT_INI,
          {} },
        { "an actor of several fields has divvyd's own keys",
          R3("path=/x", "actorField = user ip") R3("path=/x:y", "actorField = user") DEFAULT_INI,
          {} },
        { "a rule without a counter",
          "[path=/x]\ncreditLimit = 0\nresetSeconds = 60\nactorField = user\n" R3("path=/x:y", "")
                  DEFAULT_INI,
          {} },
        { "several longer ones: the first and a count; a space sorts between",
          R3("a=1", "actorField = u\nmatchPolicy = canary") R3("a=1 b=2", "actorField = u") R3("a=1:3", "")
                  R3("a=1:2", "") DEFAULT_INI,
          { "t.ini:1: " SHARES
            "[a=1] shares divvy keys with rule [a=1:2] (line 14, and 1 more): in Redis its "
            "actor \"2:\" and that rule's counter are one counter, \"divvy:a=1:2::3:60\"" APART } },
        { "one operation, two actorFields",
          R3("m=1 path=/q", "actorField = ip\nmatchPolicy = canary") R3("path=/q m=1", "actorField = user")
                  DEFAULT_INI,
          { "t.ini:1: " SHARES
            "[m=1 path=/q] shares divvy keys with rule [m=1 path=/q] (line 6): in Redis its "
            "actor \"X\" and that rule's actor \"X\" are one counter, \"divvy:m=1 "
            "path=/q:X:3:60\"" APART } },
        { "one operation, with and without an actor",
          R3("m=1 path=/q", "matchPolicy = canary") R3("path=/q m=1", "actorField = user") DEFAULT_INI,
          { "t.ini:1: " SHARES
            "[m=1 path=/q] shares divvy keys with rule [m=1 path=/q] (line 5): in Redis its "
            "counter and that rule's actor \"\" are one counter, \"divvy:m=1 path=/q::3:60\"" APART } },
        { "one operation, one identity: one counter in the local store too",
          R3("m=1 path=/q", "actorField = ip\nmatchPolicy = canary") R3("path=/q m=1", "actorField = ip")
                  DEFAULT_INI,
          {} },
        { "values that read as other pairs",
          "{\"overrides\": [\n{\"operation\": {\"a\": \"1 b=2\"}, \"creditLimit\": 3, \"resetSeconds\": "
          "60},\n"
          "{\"operation\": {\"a\": \"1\", \"b\": \"2\"}, \"creditLimit\": 3, \"resetSeconds\": 60}],\n"
          "\"default\": {\"operation\": {}, \"creditLimit\": 0, \"resetSeconds\": 0}}",
          { "t.json:2: " SHARES
            "[a=\"1 b=2\"] shares divvy keys with rule [a=1 b=2] (line 3): in Redis its counter "
            "and that rule's counter are one counter, \"divvy:a=1 b=2::3:60\"" APART } },
};

START_TEST (test_divvy_keys) {
        const char *text = divvy_key_cases[_i].text;
        bool json = text[0] == '{';
        RuleSet *rs = NULL;
        size_t n = 0;
        Diag diag;

        diag_init(&diag, json ? "t.json" : "t.ini");
        if (parse_text(json, text, strlen(text), &rs, &diag) < 0) {
                diag_dump(&diag);
                ck_abort_msg("case \"%s\" does not load", divvy_key_cases[_i].name);
        }
        while (n < DIVVY_MAX && divvy_key_cases[_i].msgs[n])
                n++;
        int r = config_check_divvy_keys(rs, &diag);
        if (diag.n_messages != n)
                diag_dump(&diag);
        ck_assert_int_eq(r, (int) n);
        ck_assert_uint_eq(diag.n_messages, n);
        for (size_t i = 0; i < n; i++)
                ck_assert_str_eq(diag.messages[i], divvy_key_cases[_i].msgs[i]);
        ck_assert_int_eq(config_check_divvy_keys(rs, NULL), r); /* no diag: the same count */
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

/* onBackendError is dumped when set, reads back the same, and leaves the rule's id alone. */
START_TEST (test_dump_on_backend_error) {
        static const char text[] = "[a=1]\ncreditLimit = 10\nresetSeconds = 60\nonBackendError = allow\n"
                                   "[a=2]\ncreditLimit = 10\nresetSeconds = 60\nonBackendError = deny\n"
                                   "[a=3]\ncreditLimit = 10\nresetSeconds = 60\n"
                                   "[default]\ncreditLimit = 0\nresetSeconds = 0\nonBackendError = local\n";
        static const char plain[] = "[a=1]\ncreditLimit = 10\nresetSeconds = 60\n"
                                    "[a=2]\ncreditLimit = 10\nresetSeconds = 60\n"
                                    "[a=3]\ncreditLimit = 10\nresetSeconds = 60\n" DEFAULT_INI;
        static const char want[] = "{\n"
                                   "  \"overrides\": [\n"
                                   "    {\n"
                                   "      \"operation\": {\n"
                                   "        \"a\": \"1\"\n"
                                   "      },\n"
                                   "      \"creditLimit\": 10,\n"
                                   "      \"resetSeconds\": 60,\n"
                                   "      \"onBackendError\": \"allow\"\n"
                                   "    },\n"
                                   "    {\n"
                                   "      \"operation\": {\n"
                                   "        \"a\": \"2\"\n"
                                   "      },\n"
                                   "      \"creditLimit\": 10,\n"
                                   "      \"resetSeconds\": 60,\n"
                                   "      \"onBackendError\": \"deny\"\n"
                                   "    },\n"
                                   "    {\n"
                                   "      \"operation\": {\n"
                                   "        \"a\": \"3\"\n"
                                   "      },\n"
                                   "      \"creditLimit\": 10,\n"
                                   "      \"resetSeconds\": 60\n"
                                   "    }\n"
                                   "  ],\n"
                                   "  \"default\": {\n"
                                   "    \"creditLimit\": 0,\n"
                                   "    \"resetSeconds\": 0,\n"
                                   "    \"onBackendError\": \"local\"\n"
                                   "  }\n"
                                   "}\n";
        RuleSet *rs = NULL, *back = NULL, *without = NULL;
        size_t len;
        Diag diag;

        diag_init(&diag, "t.ini");
        ck_assert_int_eq(parse_text(false, text, strlen(text), &rs, &diag), 0);
        ck_assert_int_eq(rs->rules[0].on_backend_error, RULE_ON_ERROR_ALLOW);
        ck_assert_int_eq(rs->rules[1].on_backend_error, RULE_ON_ERROR_DENY);
        ck_assert_int_eq(rs->rules[2].on_backend_error, RULE_ON_ERROR_DEFAULT);
        ck_assert_int_eq(rs->rules[3].on_backend_error, RULE_ON_ERROR_LOCAL);
        char *json = dump(rs, &len);
        ck_assert_str_eq(json, want);
        ck_assert_int_eq(parse_text(true, json, len, &back, &diag), 0);
        assert_rules_equal(rs, back);
        /* the same rules without the attribute: the same counter ids */
        ck_assert_int_eq(parse_text(false, plain, strlen(plain), &without, &diag), 0);
        for (size_t i = 0; i < rs->n_rules; i++)
                ck_assert_mem_eq(rs->rules[i].id, without->rules[i].id, RULE_ID_SIZE);
        free(json);
        ruleset_free(rs);
        ruleset_free(back);
        ruleset_free(without);
        diag_done(&diag);
}
END_TEST

/* An older config: neither its dump nor its summary mention anything new. */
START_TEST (test_dump_old_unchanged) {
        RuleSet *rs = NULL;
        char buf[256];
        size_t len;
        Diag diag;

        ck_assert_int_eq(load("examples/canary-config.ini", &rs, &diag), 0);
        char *json = dump(rs, &len);
        ck_assert_ptr_null(strstr(json, "algorithm"));
        ck_assert_ptr_null(strstr(json, "burst"));
        ck_assert_ptr_null(strstr(json, "refillSeconds"));
        ck_assert_ptr_null(strstr(json, "strict"));
        ck_assert_ptr_null(strstr(json, "continue"));
        ck_assert_ptr_null(strstr(json, "onBackendError"));
        ck_assert_ptr_null(strstr(json, "window"));
        ck_assert_ptr_null(strstr(json, "matchKeys"));
        for (size_t i = 0; i < rs->n_rules; i++)
                ck_assert_ptr_null(config_rule_details(&rs->rules[i], buf, sizeof buf));
        free(json);
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

/* --check-config's line per rule that uses an algorithm or policy divvy did not have. */
START_TEST (test_rule_details) {
        static const char *const want[] = {
                "rule [ip=* method=POST path=/login]: token-bucket 5 per 300 s, burst 5, continuous refill, "
                "strict, matchPolicy stop",
                "rule [path=/api/* user=*]: sliding-window 1000 per 3600 s, matchPolicy continue",
                "rule [method=GET path=/api/* user=*]: token-bucket 100 per 60 s, burst 200, continuous "
                "refill, "
                "matchPolicy stop",
                "rule [method=POST path=/api/export user=*]: token-bucket 10 per 3600 s, burst 10, refill "
                "every "
                "360 s, matchPolicy stop",
                "rule [ip=* path=/search]: token-bucket 30 per 60 s, burst 10, continuous refill, "
                "matchPolicy canary",
                NULL,
                NULL,
        };
        RuleSet *rs = NULL;
        char buf[256], tiny[12];
        Diag diag;

        ck_assert_int_eq(load("examples/algorithms-config.ini", &rs, &diag), 0);
        ck_assert_uint_eq(rs->n_rules, sizeof want / sizeof want[0]);
        for (size_t i = 0; i < rs->n_rules; i++)
                ck_assert_pstr_eq(config_rule_details(&rs->rules[i], buf, sizeof buf), want[i]);
        /* cut, never overrun */
        ck_assert_str_eq(config_rule_details(&rs->rules[0], tiny, sizeof tiny), "rule [ip=* ");
        ck_assert_str_eq(config_summary(rs, tiny, sizeof tiny), "7 rules (1 ");
        ruleset_free(rs);
        diag_done(&diag);

        static const char text[] =
                "[a=1]\ncreditLimit = 0\nresetSeconds = 9\nalgorithm = sliding-window\n"
                "[default]\ncreditLimit = 5\nresetSeconds = 0\nalgorithm = gcra\nburst = 7\n";
        diag_init(&diag, "t.ini");
        ck_assert_int_eq(parse_text(false, text, strlen(text), &rs, &diag), 0);
        ck_assert_str_eq(
                config_rule_details(&rs->rules[0], buf, sizeof buf),
                "rule [a=1]: sliding-window 0 per 9 s, always denies (creditLimit 0), matchPolicy stop");
        ck_assert_str_eq(config_rule_details(&rs->rules[1], buf, sizeof buf),
                         "rule [default]: token-bucket 5 per 0 s, burst 7, continuous refill, always allows "
                         "(resetSeconds 0), matchPolicy stop");
        ruleset_free(rs);
        diag_done(&diag);
}
END_TEST

/* Issue #34's attributes: dumped only when not the defaults, read back the same (INI and JSON
 * alike), shown by --check-config, refused by --compat=divvy; the window changes the counter
 * ids, matchKeys does not. */
START_TEST (test_dump_issue34) {
        static const char text[] = "[domain=api path=*]\ncreditLimit = 10\nresetSeconds = 60\n"
                                   "window = aligned\nactorField = path user\nmatchKeys = exact\n"
                                   "[domain=api]\ncreditLimit = 5\nresetSeconds = 60\n"
                                   "algorithm = sliding-window\nwindow = aligned\n"
                                   "[domain=web]\ncreditLimit = 5\nresetSeconds = 60\nwindow = first-hit\n"
                                   "matchKeys = subset\nactorField = ip\n"
                                   "[default]\ncreditLimit = 0\nresetSeconds = 0\n";
        static const char plain[] = "[domain=api path=*]\ncreditLimit = 10\nresetSeconds = 60\n"
                                    "actorField = path user\n"
                                    "[domain=api]\ncreditLimit = 5\nresetSeconds = 60\n"
                                    "algorithm = sliding-window\n"
                                    "[domain=web]\ncreditLimit = 5\nresetSeconds = 60\nactorField = ip\n"
                                    "[default]\ncreditLimit = 0\nresetSeconds = 0\n";
        static const char want[] = "{\n"
                                   "  \"overrides\": [\n"
                                   "    {\n"
                                   "      \"operation\": {\n"
                                   "        \"domain\": \"api\",\n"
                                   "        \"path\": \"*\"\n"
                                   "      },\n"
                                   "      \"creditLimit\": 10,\n"
                                   "      \"resetSeconds\": 60,\n"
                                   "      \"window\": \"aligned\",\n"
                                   "      \"actorField\": \"path user\",\n"
                                   "      \"matchKeys\": \"exact\"\n"
                                   "    },\n"
                                   "    {\n"
                                   "      \"operation\": {\n"
                                   "        \"domain\": \"api\"\n"
                                   "      },\n"
                                   "      \"creditLimit\": 5,\n"
                                   "      \"resetSeconds\": 60,\n"
                                   "      \"algorithm\": \"sliding-window\",\n"
                                   "      \"window\": \"aligned\"\n"
                                   "    },\n"
                                   "    {\n"
                                   "      \"operation\": {\n"
                                   "        \"domain\": \"web\"\n"
                                   "      },\n"
                                   "      \"creditLimit\": 5,\n"
                                   "      \"resetSeconds\": 60,\n"
                                   "      \"actorField\": \"ip\"\n"
                                   "    }\n"
                                   "  ],\n"
                                   "  \"default\": {\n"
                                   "    \"creditLimit\": 0,\n"
                                   "    \"resetSeconds\": 0\n"
                                   "  }\n"
                                   "}\n";
        RuleSet *rs = NULL, *back = NULL, *without = NULL;
        char buf[256];
        size_t len;
        Diag diag;

        diag_init(&diag, "t.ini");
        ck_assert_int_eq(parse_text(false, text, strlen(text), &rs, &diag), 0);
        ck_assert_int_eq(rs->rules[0].algo.window, ALGO_WINDOW_ALIGNED);
        ck_assert_int_eq(rs->rules[0].match_keys, MATCH_KEYS_EXACT);
        ck_assert_uint_eq(rs->rules[0].n_actor_fields, 2);
        ck_assert_int_eq(rs->rules[1].algo.window, ALGO_WINDOW_ALIGNED);
        ck_assert_int_eq(rs->rules[2].algo.window, ALGO_WINDOW_FIRST_HIT);
        ck_assert_int_eq(rs->rules[2].match_keys, MATCH_KEYS_SUBSET);
        ck_assert_uint_eq(rs->rules[2].n_actor_fields, 1);
        char *json = dump(rs, &len);
        ck_assert_str_eq(json, want);
        ck_assert_int_eq(parse_text(true, json, len, &back, &diag), 0);
        assert_rules_equal(rs, back);
        /* without window and matchKeys: the aligned rules count elsewhere, the others alike */
        ck_assert_int_eq(parse_text(false, plain, strlen(plain), &without, &diag), 0);
        ck_assert(memcmp(rs->rules[0].id, without->rules[0].id, RULE_ID_SIZE) != 0);
        ck_assert(memcmp(rs->rules[1].id, without->rules[1].id, RULE_ID_SIZE) != 0);
        ck_assert_mem_eq(rs->rules[2].id, without->rules[2].id, RULE_ID_SIZE);
        ck_assert_mem_eq(rs->rules[3].id, without->rules[3].id, RULE_ID_SIZE);

        ck_assert_str_eq(
                config_rule_details(&rs->rules[0], buf, sizeof buf),
                "rule [domain=api path=*]: fixed-window 10 per 60 s, windows aligned to the clock, one "
                "counter per combination of path, user, matchKeys exact, matchPolicy stop");
        ck_assert_str_eq(config_rule_details(&rs->rules[1], buf, sizeof buf),
                         "rule [domain=api]: sliding-window 5 per 60 s, windows aligned to the clock, "
                         "matchPolicy stop");
        ck_assert_ptr_null(config_rule_details(&rs->rules[2], buf, sizeof buf));
        ck_assert_str_eq(
                config_summary(rs, buf, sizeof buf),
                "4 rules (0 canary, 2 with actor, 0 labelled, 1 sliding-window, 2 window aligned, 1 "
                "matchKeys exact)");

        ck_assert_int_eq(config_check_divvy(rs, &diag), -EINVAL);
        ck_assert_uint_eq(diag.n_messages, 2);
        ck_assert_str_eq(
                diag.messages[0],
                "t.ini:1: rule [domain=api path=*] " NOT_DIVVY
                "matchKeys exact (divvy 1.7 also matches requests with other fields); window aligned "
                "(divvy 1.7 starts a window at its first hit); actorField of 2 fields (divvy 1.7 reads "
                "\"path user\" as the name of one field); path=* (divvy 1.7 also matches requests "
                "without path)");
        ck_assert_str_eq(diag.messages[1],
                         "t.ini:7: rule [domain=api] " NOT_DIVVY
                         "algorithm sliding-window (divvy 1.7 counts in fixed windows only); "
                         "window aligned (divvy 1.7 starts a window at its first hit)");
        free(json);
        ruleset_free(rs);
        ruleset_free(back);
        ruleset_free(without);
        diag_done(&diag);
}
END_TEST

int main(void) {
        Suite *s = suite_create("config");

        TCase *tc = tcase_create("files");
        tcase_add_loop_test(tc, test_good_file_loads, 0, sizeof good_files / sizeof good_files[0]);
        tcase_add_loop_test(tc, test_dump_round_trip, 0, sizeof good_files / sizeof good_files[0]);
        tcase_add_loop_test(tc, test_ini_json_equivalent, 0, sizeof equivalent / sizeof equivalent[0]);
        tcase_add_test(tc, test_quoting_and_comments);
        tcase_add_test(tc, test_json_operation_values_stringified);
        tcase_add_loop_test(tc, test_bad_file, 0, sizeof bad_files / sizeof bad_files[0]);
        tcase_add_test(tc, test_all_errors_reported);
        suite_add_tcase(s, tc);

        tc = tcase_create("io");
        tcase_add_loop_test(tc, test_special_file, 0, sizeof specials / sizeof specials[0]);
        tcase_add_test(tc, test_size_limit_is_inclusive);
        suite_add_tcase(s, tc);

        tc = tcase_create("texts");
        tcase_add_loop_test(tc, test_text, 0, sizeof texts / sizeof texts[0]);
        tcase_add_test(tc, test_long_section_kept_whole);
        tcase_add_test(tc, test_summary_singular);
        tcase_add_test(tc, test_ini_section_count_bounded);
        tcase_add_test(tc, test_dump_escapes);
        tcase_add_test(tc, test_dump_algorithms);
        tcase_add_test(tc, test_dump_old_unchanged);
        tcase_add_test(tc, test_dump_on_backend_error);
        tcase_add_test(tc, test_dump_issue34);
        tcase_add_loop_test(tc, test_divvy_compat, 0, sizeof divvy_cases / sizeof divvy_cases[0]);
        tcase_add_loop_test(tc, test_divvy_compat_files, 0, sizeof divvy_files / sizeof divvy_files[0]);
        tcase_add_loop_test(tc, test_divvy_keys, 0, sizeof divvy_key_cases / sizeof divvy_key_cases[0]);
        tcase_add_test(tc, test_rule_details);
        suite_add_tcase(s, tc);

        return check_run_suite(s);
}
