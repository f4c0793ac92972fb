#!/usr/bin/env python3
"""Prints the one-line summary of meson test runs: `N passed, N failed, N skipped`.

usage: testlog_summary.py [--passed N] [--failed N] [--skipped N] [BUILD_DIR ...]

Reads BUILD_DIR/meson-logs/testlog.json (one JSON object per test, with a `result` field)
for every BUILD_DIR and sums the counts; --passed/--failed/--skipped add results that did not
come from meson (CI stages such as the install check). OK and EXPECTEDFAIL count as passed;
FAIL, TIMEOUT, ERROR, UNEXPECTEDPASS and any unknown result as failed; SKIP as skipped. A
missing or unreadable testlog counts as one failure. Exits 1 when anything failed.
"""

import argparse
import json
import os
import sys

PASSED = {"OK", "EXPECTEDFAIL"}
SKIPPED = {"SKIP"}


def count(build_dir):
    """Returns (passed, failed, skipped) for one build directory."""
    path = os.path.join(build_dir, "meson-logs", "testlog.json")
    passed = failed = skipped = 0
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line for line in f if line.strip()]
    except OSError as e:
        print(f"testlog_summary: cannot read {path}: {e.strerror}", file=sys.stderr)
        return 0, 1, 0
    for n, line in enumerate(lines, 1):
        try:
            result = str(json.loads(line).get("result", ""))
        except (ValueError, AttributeError):
            print(f"testlog_summary: {path}:{n}: not a JSON object", file=sys.stderr)
            failed += 1
            continue
        if result in PASSED:
            passed += 1
        elif result in SKIPPED:
            skipped += 1
        else:
            failed += 1
    return passed, failed, skipped


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build_dirs", nargs="*", metavar="BUILD_DIR")
    ap.add_argument("--passed", type=int, default=0, help="add N passed results")
    ap.add_argument("--failed", type=int, default=0, help="add N failed results")
    ap.add_argument("--skipped", type=int, default=0, help="add N skipped results")
    args = ap.parse_args(argv)
    passed, failed, skipped = args.passed, args.failed, args.skipped
    for d in args.build_dirs:
        p, f, s = count(d)
        passed, failed, skipped = passed + p, failed + f, skipped + s
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
