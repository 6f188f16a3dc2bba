#!/usr/bin/env python3
"""The manual pages and the guide name the options the programs have.

- Every option `divvyd --help` lists is described in divvyd(8), and every option divvyd(8)
  describes (an entry of its OPTIONS section) is in `divvyd --help`; the same for divvy(1)
  and `divvy --help`.
- Every `--option` the README, NEWS, HACKING.md, STORE-DESIGN.md and docs/*.md name is an
  option of one of this project's programs and scripts (their --help) or of one of the
  other tools listed in OTHER_TOOLS below.

Needs the built programs: $top_builddir (default: the source tree) /src/divvyd and
/src/divvy. Exit status 0 when everything agrees, 1 otherwise.
"""
import glob
import os
import re
import subprocess
import sys

# Options of other programs the guide shows in commands (pkg-config, systemctl,
# systemd-tmpfiles, systemd-socket-activate, systemd-analyze, valgrind, libtool, configure,
# packaging/build-deb.sh's own, and a heading's words).
OTHER_TOOLS = {"--cflags", "--libs", "--now", "--create", "--fdname", "--offline", "--tool",
               "--with-systemdsystemunitdir", "--with-sysusersdir", "--with-tmpfilesdir",
               "--nocheck", "--error-exitcode", "--pipe", "--cluster", "--as", "--enable-werror",
               "--enable-sanitizers", "--deps-only", "--run", "--mode",
               "--unix-socket"}
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")


def help_options(argv):
    out = subprocess.run(argv + ["--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, timeout=30).stdout
    return set(OPTION.findall(out))


def man_options(path):
    """(every option the page names, the options its OPTIONS section describes)."""
    text = re.sub(r"\\f[BIRP]", "", open(path, encoding="utf-8").read()).replace("\\-", "-")
    named = set(OPTION.findall(text))
    described = set()
    section = None
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith(".SH "):
            section = line[4:].strip().strip('"')
        elif section == "OPTIONS" and line.startswith(".TP") and i + 1 < len(lines):
            described.update(OPTION.findall(lines[i + 1]))
    return named, described


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    top = os.environ.get("top_srcdir") or os.path.dirname(here)
    build = os.environ.get("top_builddir") or top
    problems = []
    known = set(OTHER_TOOLS)
    for program, page in (("divvyd", "divvyd.8"), ("divvy", "divvy.1")):
        helped = help_options([os.path.join(build, "src", program)])
        named, described = man_options(os.path.join(top, "man", page))
        known |= helped | described
        for o in sorted(helped - named):
            problems.append("%s --help lists %s, man/%s does not describe it" % (program, o, page))
        for o in sorted(described - helped):
            problems.append("man/%s describes %s, %s --help does not list it" % (page, o, program))
    for tool in ("bench/divvy-benchmark", "bench/grpc-load"):
        known |= help_options([os.path.join(build, tool)])
    for script in ("bench/run-bench.sh", "bench/sync-ab.sh", "bench/run-bench-resp.sh", "bench/run-bench-grpc.sh"):
        path = os.path.join(top, script)
        if os.path.exists(path):
            known |= set(OPTION.findall(open(path, encoding="utf-8").read()))
    docs = [os.path.join(top, n) for n in ("README.md", "NEWS", "HACKING.md", "STORE-DESIGN.md")]
    docs += sorted(glob.glob(os.path.join(top, "docs", "*.md")))
    for path in docs:
        for number, line in enumerate(open(path, encoding="utf-8"), 1):
            for o in OPTION.findall(line):
                if o not in known:
                    problems.append("%s:%d: %s is no option of divvyd, divvy or the bench tools"
                                    % (os.path.relpath(path, top), number, o))
    for p in problems:
        print("MISMATCH: " + p)
    print("%d options known, %d mismatches" % (len(known), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
