#!/usr/bin/env python3
"""Checks the relative links of the Markdown documentation: README.md, BENCHMARKS.md, docs/*.md.

Every link `[text](target)` outside code that is not a URL must name a file (or directory) of
the checkout, and a `#fragment` must name a heading of that file (GitHub's anchor for it) or an
explicit `<a id="...">`. Prints each broken link and exits 1 when there is one.

Usage: scripts/check-doc-links.py   (from the checkout's root; .ci/run calls it)
"""

import glob
import os
import re
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.*?) *#*$")
EXPLICIT = re.compile(r'<a id="([^"]+)"')


def prose_lines(path):
    """The file's lines outside fenced code blocks, with inline code spans blanked."""
    fenced = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if not fenced:
                yield number, re.sub(r"`[^`]*`", "``", line)


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path):
    found, seen = set(), {}
    for _, line in prose_lines(path):
        found.update(EXPLICIT.findall(line))
    fenced = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            match = None if fenced else HEADING.match(line.rstrip("\n"))
            if match:
                base = slug(match.group(1))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
    return found


def main():
    pages = ["README.md", "BENCHMARKS.md"] + sorted(glob.glob("docs/*.md"))
    broken = 0
    for page in pages:
        for number, line in prose_lines(page):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # a URL
                file, _, fragment = target.partition("#")
                resolved = os.path.normpath(os.path.join(os.path.dirname(page), file)) if file else page
                problem = None
                if not os.path.exists(resolved):
                    problem = "no such file"
                elif fragment and (not os.path.isfile(resolved) or fragment not in anchors(resolved)):
                    problem = f"no heading or anchor #{fragment} in {resolved}"
                if problem:
                    broken += 1
                    print(f"{page}:{number}: {target}: {problem}")
    print(f"{len(pages)} pages checked, {broken} broken link(s)")
    sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()
