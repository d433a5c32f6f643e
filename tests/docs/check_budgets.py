#!/usr/bin/python3
"""Fails when a top-level page grows past its line budget (ctest docs_budgets).

README.md is a newcomer's page (what tutti is, install, test, one example per
API, where the rest is) and BENCHMARKS.md the current figures; the details go
to docs/ and dated runs to docs/history/. Usage: check_budgets.py REPO_ROOT
"""

import os
import sys

BUDGETS = {"README.md": 300, "BENCHMARKS.md": 400}


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    over = []
    for name, budget in BUDGETS.items():
        with open(os.path.join(root, name), encoding="utf-8") as f:
            lines = sum(1 for _ in f)
        print("%s: %d lines (budget %d)" % (name, lines, budget))
        if lines > budget:
            over.append("%s has %d lines, %d over its budget of %d: move details to docs/ "
                        "(dated figures to docs/history/)" % (name, lines, lines - budget, budget))
    for message in over:
        print("FAIL: " + message)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
