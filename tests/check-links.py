#!/usr/bin/env python3
"""Every relative link of the documentation resolves: the file exists and, for a
`#anchor`, the target Markdown file has a heading with that anchor.

Checked: README.md, NEWS, HACKING.md, STORE-DESIGN.md, docs/*.md and bench/*.md.
Anchors follow GitHub's rule for headings: lower case, every character that is
not a letter, a digit, a blank, `-` or `_` dropped, blanks turned into `-`, and
`-1`, `-2`, ... appended to repeated headings. Links to other sites
(`scheme:`) are not followed. Usage: check-links.py [ROOT] (default: this
script's source tree). Exit status 0 when every link resolves, 1 otherwise.
"""
import glob
import os
import re
import sys

LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def outside_fences(text):
    """The lines of a Markdown text with their numbers, fenced code left out."""
    fenced = False
    for number, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading):
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen = {}
        found = set()
        with open(path, encoding="utf-8") as f:
            for _, line in outside_fences(f.read()):
                m = HEADING.match(line)
                if not m:
                    continue
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else "%s-%d" % (base, n))
        cache[path] = found
    return cache[path]


def check(root):
    files = [os.path.join(root, name) for name in
             ("README.md", "NEWS", "HACKING.md", "STORE-DESIGN.md")]
    files += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    files += sorted(glob.glob(os.path.join(root, "bench", "*.md")))
    dead = []
    checked = 0
    for path in files:
        if not os.path.exists(path):
            dead.append("%s: missing" % os.path.relpath(path, root))
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        # Fenced code blanked and code spans masked, offsets kept: a link's
        # text may run over a line break.
        lines = [""] * (text.count("\n") + 1)
        for number, line in outside_fences(text):
            lines[number - 1] = re.sub(r"`[^`]*`", lambda m: "x" * len(m.group()), line)
        prose = "\n".join(lines)
        for m in LINK.finditer(prose):
            target = m.group(1)
            if SCHEME.match(target):
                continue
            checked += 1
            number = prose.count("\n", 0, m.start(1)) + 1
            where = "%s:%d: %s" % (os.path.relpath(path, root), number, target)
            name, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), name)) if name else path
            if not os.path.exists(dest):
                dead.append("%s: no such file" % where)
            elif anchor:
                if not dest.endswith(".md") and dest != os.path.join(root, "NEWS"):
                    dead.append("%s: an anchor into a file that is not Markdown" % where)
                elif anchor not in anchors(dest):
                    dead.append("%s: no heading with this anchor in %s"
                                % (where, os.path.relpath(dest, root)))
    return checked, dead


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(here)
    checked, dead = check(root)
    for d in dead:
        print("DEAD LINK: " + d)
    print("%d links checked, %d dead" % (checked, len(dead)))
    return 1 if dead else 0


if __name__ == "__main__":
    sys.exit(main())
