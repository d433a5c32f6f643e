#!/usr/bin/python3
"""Checks that the repository's Markdown links resolve (ctest docs_links).

    tests/docs/check_links.py [REPO]

Reads README.md, BENCHMARKS.md, launcher/README.md and every docs/**/*.md of
REPO (default: two folders up from this file). Two kinds of reference must
name an existing file or folder:
  - a relative Markdown link or image, [text](path) or [text](path#anchor),
    resolved from the folder of the file that holds it (http(s), mailto and
    pure #anchor links are not checked);
  - a page named in the text as docs/NAME.md (backticks or not), resolved
    from REPO, since that is how the pages name each other.
Prints one line per broken reference (file:line: what) and exits 1 if there
is any, else prints how many references it checked and exits 0.
"""
import os
import re
import sys

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
DOC_NAME = re.compile(r"(?<![\w/.])(docs/[\w./-]+\.md)\b")


def pages(repo):
    names = ["README.md", "BENCHMARKS.md", os.path.join("launcher", "README.md")]
    for folder, _, files in os.walk(os.path.join(repo, "docs")):
        names += [os.path.relpath(os.path.join(folder, f), repo) for f in files if f.endswith(".md")]
    return sorted(n for n in names if os.path.isfile(os.path.join(repo, n)))


def check(repo):
    broken, checked = [], 0
    for name in pages(repo):
        here = os.path.dirname(os.path.join(repo, name))
        in_code = False
        with open(os.path.join(repo, name), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if line.lstrip().startswith("```"):
                    in_code = not in_code
                    continue
                if in_code:
                    continue
                for target in LINK.findall(line):
                    if re.match(r"^(https?:|mailto:|#)", target):
                        continue
                    checked += 1
                    path = target.split("#", 1)[0]
                    if not os.path.exists(os.path.normpath(os.path.join(here, path))):
                        broken.append("%s:%d: link to %s: no such file" % (name, number, target))
                for target in DOC_NAME.findall(LINK.sub("", line)):
                    checked += 1
                    if not os.path.exists(os.path.join(repo, target)):
                        broken.append("%s:%d: names %s: no such file" % (name, number, target))
    return broken, checked


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(here))
    broken, checked = check(repo)
    for line in broken:
        print(line)
    if broken:
        print("%d broken of %d references" % (len(broken), checked))
        return 1
    print("all %d references resolve" % checked)
    return 0


if __name__ == "__main__":
    sys.exit(main())
