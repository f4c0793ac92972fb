"""Includes point one way (docs/architecture.md, "Layers"): every `#include "gradix/..."` of a
header under include/gradix/ names a header of its own layer or of a layer below it.

    python3 tests/docs/layers.py SOURCE_ROOT

The layer order, written once (here; docs/architecture.md shows it):

    config  <  core  <  op  <  grad  <  expr  <  ad  <  eval  <  exec  <  backend  <  api  <  top

`config` is include/gradix/config.hpp and version.hpp; `top` the umbrella and feature
headers directly under include/gradix/ (gradix.hpp, optim.hpp, dist.hpp, checkpoint.hpp,
device.hpp), dist/ and training/; interop/ may include anything below `top`. KNOWN lists
includes allowed to point up (none since issue 33, "one executor"); the check fails on any
other one, and on a KNOWN entry that is gone (so the list only shrinks). Prints
one line per problem and exits 1 if there is any. It also fails on a header of more than
MAX_LINES lines (700): one concern per file.
"""
import pathlib
import re
import sys

MAX_LINES = 700  # no header over this (issue 33)
ORDER = ['config', 'core', 'op', 'grad', 'expr', 'ad', 'eval', 'exec', 'backend', 'api', 'top']
KNOWN = set()  # (issue 33 removed the last one; an entry here is an exception to justify)


def layer(rel):
    parts = rel.split('/')
    if len(parts) == 1:
        return 'config' if rel in ('config.hpp', 'version.hpp') else 'top'
    if parts[0] in ('dist', 'training'):
        return 'top'
    if parts[0] == 'interop':
        return 'interop'
    return parts[0]


def rank(l):
    return len(ORDER) - 1.5 if l == 'interop' else ORDER.index(l)


def main():
    root = pathlib.Path(sys.argv[1]).resolve() / 'include' / 'gradix'
    problems = []
    seen = set()
    headers = sorted(root.rglob('*.hpp')) + sorted(root.rglob('*.cuh'))
    for h in headers:
        rel = h.relative_to(root).as_posix()
        lh = layer(rel)
        if lh not in ORDER and lh != 'interop':
            problems.append('%s: a folder with no layer (add it to ORDER in tests/docs/layers.py)' % rel)
            continue
        text = h.read_text().splitlines()
        if len(text) > MAX_LINES:
            problems.append('include/gradix/%s: %d lines, over %d (split it by concern; docs/architecture.md)'
                            % (rel, len(text), MAX_LINES))
        for n, line in enumerate(text, 1):
            m = re.match(r'\s*#\s*include\s+"gradix/([^"]+)"', line)
            if not m:
                continue
            tgt = m.group(1)
            lt = layer(tgt)
            if lt not in ORDER and lt != 'interop':
                problems.append('include/gradix/%s:%d: includes %s, in a folder with no layer' % (rel, n, tgt))
                continue
            if rank(lt) > rank(lh):
                if (rel, tgt) in KNOWN:
                    seen.add((rel, tgt))
                else:
                    problems.append('include/gradix/%s:%d: includes gradix/%s, which points up (%s above %s)'
                                    % (rel, n, tgt, lt, lh))
    for gone in sorted(KNOWN - seen):
        problems.append('%s -> %s is no longer included: remove it from KNOWN in tests/docs/layers.py' % gone)
    for p in problems:
        print(p)
    print('%d headers; %d known upward includes; %d problems' % (len(headers), len(seen), len(problems)))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
