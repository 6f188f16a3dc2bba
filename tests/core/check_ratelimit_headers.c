/* SPDX-License-Identifier: MIT */
/* ratelimit-headers.c: the RateLimit-Policy and RateLimit values of draft-ietf-httpapi-ratelimit-
 * headers-11, byte for byte, and every value read back by a parser of RFC 9651's grammar for an
 * sf-list of sf-items (the string escapes, the parameter keys, the 15-digit integers), so that a
 * client's structured-field parser accepts what we send. */

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/ratelimit-headers.h"
#include "check-run.h"

/* ---- RFC 9651's grammar for what we send: sf-list = list-member *( OWS "," OWS list-member ),
 * list-member = sf-item, sf-item = bare-item parameters, parameters = *( ";" *SP key [ "=" bare-item ] ),
 * key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" ); bare items: sf-string or
 * sf-integer (the only two the draft uses here). ---- */

typedef struct SfParam {
        char key[16];
        uint64_t value;
} SfParam;

typedef struct SfItem {
        char name[2 * RATELIMIT_NAME_MAX + 1];
        SfParam params[8];
        size_t n_params;
} SfItem;

static bool sf_integer(const char **p, uint64_t *ret) {
        size_t n = 0;
        uint64_t v = 0;

        if (**p == '-')
                return false; /* never negative here */
        while (**p >= '0' && **p <= '9') {
                if (++n > 15)
                        return false;
                v = v * 10 + (uint64_t) (*(*p)++ - '0');
        }
        *ret = v;
        return n > 0;
}

static bool sf_string(const char **p, char *out) {
        size_t n = 0;

        if (*(*p)++ != '"')
                return false;
        for (;;) {
                char c = *(*p)++;
                if (c == '\\') {
                        c = *(*p)++;
                        if (c != '"' && c != '\\')
                                return false;
                } else if (c == '"') {
                        out[n] = '\0';
                        return true;
                } else if (c < 0x20 || c > 0x7E)
                        return false;
                out[n++] = c;
        }
}

/* Parses a whole sf-list of one item (what we send) into *ret; false if it is not one. */
static bool sf_parse_one_item_list(const char *s, SfItem *ret) {
        const char *p = s;

        memset(ret, 0, sizeof *ret);
        if (!sf_string(&p, ret->name))
                return false;
        while (*p == ';') {
                SfParam *prm = &ret->params[ret->n_params++];
                size_t k = 0;

                p++;
                while (*p == ' ')
                        p++;
                if (!((*p >= 'a' && *p <= 'z') || *p == '*'))
                        return false;
                while ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || strchr("_-.*", *p)) {
                        if (*p == '\0' || k + 1 >= sizeof prm->key)
                                break;
                        prm->key[k++] = *p++;
                }
                if (*p++ != '=' || !sf_integer(&p, &prm->value))
                        return false;
        }
        return *p == '\0';
}

static bool sf_param(const SfItem *it, const char *key, uint64_t *ret) {
        for (size_t i = 0; i < it->n_params; i++)
                if (strcmp(it->params[i].key, key) == 0) {
                        *ret = it->params[i].value;
                        return true;
                }
        return false;
}

static const struct {
        const char *name;
        uint64_t quota, window, remaining, reset;
        const char *policy, *limit;
        const char *name_back; /* the name as a parser reads it back */
} cases[] = {
        /* the draft's own examples (sections 3.2 and 4.2) */
        { "default", 100, 10, 50, 30, "\"default\";q=100;w=10", "\"default\";r=50;t=30", "default" },
        { "permin", 50, 60, 0, 60, "\"permin\";q=50;w=60", "\"permin\";r=0;t=60", "permin" },
        /* a window of 0 is not a valid w: left out; t may be 0 */
        { "burst", 5, 0, 5, 0, "\"burst\";q=5", "\"burst\";r=5;t=0", "burst" },
        /* escapes: '"' and '\' take a backslash; bytes outside printable ASCII are left out */
        { "a\"b\\c", 1, 1, 1, 1, "\"a\\\"b\\\\c\";q=1;w=1", "\"a\\\"b\\\\c\";r=1;t=1", "a\"b\\c" },
        { "tab\there\xc3\xa9\n", 1, 1, 1, 1, "\"tabhere\";q=1;w=1", "\"tabhere\";r=1;t=1", "tabhere" },
        /* a rule without a label is named by its index */
        { "#3", 10, 60, 9, 60, "\"#3\";q=10;w=60", "\"#3\";r=9;t=60", "#3" },
        /* the empty name is a valid sf-string; no name at all is "default" */
        { "", 1, 1, 0, 1, "\"\";q=1;w=1", "\"\";r=0;t=1", "" },
        { NULL, 1, 1, 0, 1, "\"default\";q=1;w=1", "\"default\";r=0;t=1", "default" },
        /* beyond sf-integer's 15 digits: the largest one */
        { "big", UINT64_MAX, 1000000000000000ULL, UINT64_MAX, 999999999999999ULL,
          "\"big\";q=999999999999999;w=999999999999999", "\"big\";r=999999999999999;t=999999999999999",
          "big" },
};

START_TEST (test_format) {
        char buf[RATELIMIT_HEADER_MAX];
        const char *name = cases[_i].name;
        size_t len = name ? strlen(name) : 0;
        SfItem it;
        uint64_t v;
        size_t n;

        n = ratelimit_header_policy(buf, name, len, cases[_i].quota, cases[_i].window);
        ck_assert_str_eq(buf, cases[_i].policy);
        ck_assert_uint_eq(n, strlen(cases[_i].policy));
        ck_assert_msg(sf_parse_one_item_list(buf, &it), "case %d: policy %s is not an sf-list", _i, buf);
        ck_assert_str_eq(it.name, cases[_i].name_back);
        ck_assert(sf_param(&it, "q", &v));
        ck_assert_uint_eq(v,
                          cases[_i].quota > RATELIMIT_INTEGER_MAX ? RATELIMIT_INTEGER_MAX : cases[_i].quota);
        ck_assert_int_eq(sf_param(&it, "w", &v), cases[_i].window > 0);

        n = ratelimit_header_state(buf, name, len, cases[_i].remaining, cases[_i].reset);
        ck_assert_str_eq(buf, cases[_i].limit);
        ck_assert_uint_eq(n, strlen(cases[_i].limit));
        ck_assert_msg(sf_parse_one_item_list(buf, &it), "case %d: limit %s is not an sf-list", _i, buf);
        ck_assert_str_eq(it.name, cases[_i].name_back);
        ck_assert(sf_param(&it, "r", &v));
        ck_assert(sf_param(&it, "t", &v));
        ck_assert_uint_eq(it.n_params, 2);
}
END_TEST

/* The longest name, every byte escaped, fits RATELIMIT_HEADER_MAX; a longer one is cut. */
START_TEST (test_longest) {
        char name[RATELIMIT_NAME_MAX + 10], buf[RATELIMIT_HEADER_MAX];
        SfItem it;
        size_t n;

        memset(name, '"', sizeof name);
        n = ratelimit_header_policy(buf, name, sizeof name, UINT64_MAX, UINT64_MAX);
        ck_assert_uint_eq(n, 2 + 2 * RATELIMIT_NAME_MAX + 2 * 18);
        ck_assert_uint_lt(n, RATELIMIT_HEADER_MAX);
        ck_assert_uint_eq(strlen(buf), n);
        ck_assert(sf_parse_one_item_list(buf, &it));
        ck_assert_uint_eq(strlen(it.name), RATELIMIT_NAME_MAX);
        n = ratelimit_header_state(buf, name, sizeof name, UINT64_MAX, UINT64_MAX);
        ck_assert_uint_lt(n, RATELIMIT_HEADER_MAX);
        ck_assert(sf_parse_one_item_list(buf, &it));
}
END_TEST

START_TEST (test_retry_after) {
        char buf[21];

        ck_assert_uint_eq(ratelimit_header_retry_after(buf, 30), 2);
        ck_assert_str_eq(buf, "30");
        ck_assert_uint_eq(ratelimit_header_retry_after(buf, UINT64_MAX), 20);
        ck_assert_str_eq(buf, "18446744073709551615");
}
END_TEST

/* The grammar checker itself refuses what is not an sf-list of one item. */
START_TEST (test_checker) {
        SfItem it;

        ck_assert(!sf_parse_one_item_list("default;q=1", &it));              /* a token, not a string */
        ck_assert(!sf_parse_one_item_list("\"a\";Q=1", &it));                /* keys are lowercase */
        ck_assert(!sf_parse_one_item_list("\"a\";q=1234567890123456", &it)); /* 16 digits */
        ck_assert(!sf_parse_one_item_list("\"a\\b\";q=1", &it));             /* \b is no escape */
        ck_assert(!sf_parse_one_item_list("\"a\";q=1 ", &it));               /* trailing blank */
        ck_assert(sf_parse_one_item_list("\"a\";q=1;w=2", &it));
}
END_TEST

int main(void) {
        Suite *s = suite_create("ratelimit_headers");
        TCase *tc = tcase_create("format");

        tcase_add_loop_test(tc, test_format, 0, sizeof cases / sizeof cases[0]);
        tcase_add_test(tc, test_longest);
        tcase_add_test(tc, test_retry_after);
        tcase_add_test(tc, test_checker);
        suite_add_tcase(s, tc);
        return check_run_suite(s);
}
