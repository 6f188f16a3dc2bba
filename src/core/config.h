/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * config.c: loads a rules file into a finalized RuleSet, choosing the format by
 * extension (".ini" -> config-ini.c, ".json" -> config-json.c, ".yaml"/".yml" ->
 * config-yaml.c), or a directory of YAML files (envoyproxy/ratelimit's layout, one file per
 * domain), and writes a RuleSet back out as normalized JSON (--dump-config).
 * Pure apart from reading the file or directory; never logs: every problem goes to diag.
 * Calls go one way: config.c calls the loaders, the loaders call down into rules.c
 * (drafts and their messages), never back into config.c (tests/check-layout.sh).
 */

#include <stdio.h>

#include "diag.h"
#include "rules.h"

#define CONFIG_FILE_MAX                                                                                     \
        (64u * 1024u * 1024u) /* bytes: larger files are refused before                                     \
                               * parsing, so a wrong path (a log, a disk                                    \
                               * image) cannot exhaust memory */

#define CONFIG_DIR_FILES_MAX 10000 /* YAML files in a config directory: bounds load time */

/* Loads and validates path. Returns 0 and a finalized set in *ret, or a negative
 * errno with every problem in diag (which the caller has diag_init()ed with path):
 * -EINVAL invalid content, -EPROTONOSUPPORT unknown extension, -EFBIG too large,
 * -EBADFD not a regular file (FIFO, socket, device), -ENOMEM, or the errno of
 * open/fstat/read, -EISDIR a directory named *.ini or *.json. path may be another directory:
 * every *.yaml and *.yml file in it (not hidden),
 * in bytewise name order, then the default that allows (config_yaml_add_default()); a
 * domain in two files is refused with both names; -ENOENT if it holds none. A message
 * about one of its files names that file (diag's file is changed to it), the whole-config
 * checks after them the directory. *ret is untouched on failure. */
int config_load(const char *path, RuleSet **ret, Diag *diag);

/* Format loaders, on a NUL-terminated buffer of len bytes (for tests and fuzzers):
 * they append rules to rs (not finalized) and report into diag. Return 0 or -EINVAL
 * / -ENOMEM. */
int config_ini_parse(const char *text, size_t len, RuleSet *rs, Diag *diag);
int config_json_parse(const char *text, size_t len, RuleSet *rs, Diag *diag);

/* config-yaml.c: one envoyproxy/ratelimit YAML file (a domain's descriptors) as rules,
 * appended to rs, without a default; every refusal into diag with its line. The domain, a
 * copy the caller frees, into *ret_domain and its line into *ret_line when they are not NULL
 * and the file is valid. Returns 0, -EINVAL or -ENOMEM. */
int config_yaml_load(const char *text, size_t len, RuleSet *rs, Diag *diag, char **ret_domain,
                     unsigned *ret_line);
/* Appends the default of a YAML configuration: no limit (creditLimit 4294967295,
 * resetSeconds 0: always allows), as envoyproxy/ratelimit answers a request no descriptor
 * matches. Returns what ruleset_add() returns. */
int config_yaml_add_default(RuleSet *rs, Diag *diag);
/* One YAML file as a whole config: config_yaml_load(), then config_yaml_add_default(). */
int config_yaml_parse(const char *text, size_t len, RuleSet *rs, Diag *diag);

/* Writes {"overrides": [...], "default": {...}} — a file config_json_parse() reads
 * back into an equal RuleSet. Returns 0, -EINVAL if rs does not end with a default
 * rule (the format has no place for anything else there; a finalized set always
 * does), or -EIO if writing to f failed. */
int config_dump_json(const RuleSet *rs, FILE *f);

/* One-line summary for --check-config and logs, into buf; returns buf:
 * "12 rules (2 canary, 3 with actor, 1 labelled)", followed by the number of continue
 * rules, of rules of each algorithm but fixed-window, of rules with window aligned and with
 * matchKeys exact, only when not 0:
 * "12 rules (2 canary, 3 with actor, 1 labelled, 1 continue, 4 token-bucket, 2 window aligned,
 * 2 matchKeys exact)". */
const char *config_summary(const RuleSet *rs, char *buf, size_t size);

/* For --check-config, one line about a rule that uses what issues #15 and #34 added (an
 * algorithm other than fixed-window, matchPolicy continue, window aligned, an actorField of
 * several fields, matchKeys exact), into buf; NULL for any other rule:
 * "rule [method=POST]: token-bucket 10 per 60 s, burst 20, refill every 6 s, strict,
 * matchPolicy continue"; "rule [domain=api path=*]: fixed-window 10 per 60 s, windows aligned
 * to the clock, one counter per combination of path, user, matchKeys exact". */
const char *config_rule_details(const Rule *r, char *buf, size_t size);

/* --check-config --compat=divvy: may Node divvy 1.7 serve the same counters with this config
 * (the Redis store's divvy keys, behind one load balancer with divvyd)? Refuses every rule
 * divvy 1.7 would decide otherwise or could not read, one message per rule into diag
 * (which may be NULL), at the rule's line: 'FILE:LINE: rule [ip=*] is not divvy-compatible:
 * <reason>; <reason>'; and, at line 0, a file name divvy 1.7 would not read. rs is as
 * config_load() returned it: the format comes from rs->source's extension, and what the
 * loaders saw in the text is in each rule's divvy_notes and divvy_attrs. Pure: no I/O.
 * Returns 0, -EINVAL if anything was refused, or -ENOMEM. */
int config_check_divvy(const RuleSet *rs, Diag *diag);

/* --check-config, with or without --compat=divvy: pairs of rules whose divvy keys (the Redis
 * store's keys of fixed-window rules, Node divvy 1.7's format, which escapes nothing) can be
 * one key, so that in Redis one rule's counter counts the other's hits where the local store
 * keeps them apart (rules with rule_divvy_keys() only): two rules of the same creditLimit and
 * resetSeconds whose operations read
 * alike (another actorField, or values holding ' ' and '='), or one with an actorField whose
 * operation followed by ':' begins the other's ([path=/x] with actorField user meets
 * [path=/x:y] when user is "y:" and the other's actor). One warning per pair, at the first
 * rule's line, naming a key both can write: 'FILE:LINE: warning: rule [path=/x] shares divvy
 * keys with rule [path=/x:y] (line 5): ...'; a rule whose operation begins many others' is
 * reported with the first and their count. Pure. Returns the number of warnings, or -ENOMEM.
 * O(n log n) in the rules. */
int config_check_divvy_keys(const RuleSet *rs, Diag *diag);

/* config_load() with another size limit (tests use a small one). */
int config_load_limited(const char *path, size_t max_size, RuleSet **ret, Diag *diag);
