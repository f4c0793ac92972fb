#!/usr/bin/env python3
"""Checks one compile-fail case of gradix (STYLE.md section 6).

    check.py CASE.cpp [--run EXE] [--max-errors N] [--max-lines N] -- COMPILER ARGS...

CASE.cpp holds its bad line under `#ifdef GRADIX_SHOULD_FAIL`, right below one or more
`// expect: <text>` comments. The check compiles CASE.cpp with COMPILER ARGS plus
`-DGRADIX_SHOULD_FAIL -fsyntax-only` and passes only if

  1. compilation fails;
  2. every expect text occurs in a diagnostic message (not in a quoted source line or a
     file path), and an `error:` message carries one that starts with "gradix" (the error
     is gradix's own: its static_assert texts start with "gradix: " or "gradix::<fn>: ");
  3. the diagnostics point at the marked line (the first code line after the expect
     comments): some diagnostic located in CASE.cpp is on that line and is an error, a g++
     "required from here" or a clang "... requested here" note; and no diagnostic located
     in CASE.cpp is on any other line;
  4. there are at most --max-errors `error:` lines (default 1: gradix guards its checks so
     that a mistake gives one error) and at most --max-lines non-empty lines of output
     (default 30; gradix's messages take 8-12 lines with g++ 12 and 12-21 with clang 16).

With --run EXE, EXE (the case built without the macro) must also run and exit with 0.

With --doc FILE (docs/compile_errors.md; repeatable), a block of FILE marked
`<!-- compile_fail: CASE g++ -->` (or clang++, the compiler in use) must equal the
compiler's diagnostic lines as doc_text() writes them: paths relative to --root, no line
and column inside gradix's headers (they move with every edit there), no quoted source
lines or include chains. With GRADIX_UPDATE_DOCS=1 in the environment the check writes the
block instead (run the suite with --num-processes 1 then).
On failure the script prints the reasons, the command and the whole compiler output.
"""

import argparse
import os
import re
import subprocess
import sys

# A diagnostic located in a file: "path:line:col: ..." (g++ and clang).
LOCATED = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?P<col>\d+):\s*(?P<rest>.*)$")
# A context header without a line: "path: In instantiation of ...".
HEADER = re.compile(r"^(?P<file>[^\s:][^:]*): (?P<rest>In .*)$")
# An error line: "path:l:c: error: ...", "cc1plus: error: ...", "fatal error: ...".
ERROR = re.compile(r"^(?:[^\s:][^:]*(?::\d+)*: )?(?:fatal )?error: ")
ERROR_TEXT = re.compile(r"^(?:fatal )?error: ")
# (g++ places an error inside a gradix macro at the macro's definition, with an "in expansion
# of macro" note at the user's line.)
ANCHOR = re.compile(
    r"^(?:(?:fatal )?error: |required from here|note: .*requested here|note: in expansion of macro)")
EXPECT = re.compile(r"^\s*//\s*expect:\s*(?P<text>.*?)\s*$")


def parse_case(path):
    """Returns (expect texts, marked line number) or raises ValueError."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    starts = [i for i, l in enumerate(lines) if l.strip() == "#ifdef GRADIX_SHOULD_FAIL"]
    if len(starts) != 1:
        raise ValueError("expected exactly one '#ifdef GRADIX_SHOULD_FAIL' line")
    expects, marked = [], None
    for i in range(starts[0] + 1, len(lines)):
        s = lines[i].strip()
        if s.startswith("#endif"):
            break
        m = EXPECT.match(lines[i])
        if m:
            if marked is not None:
                raise ValueError("only one marked line per case: found a second '// expect:'")
            expects.append(m.group("text"))
        elif expects and marked is None and s and not s.startswith("//"):
            marked = i + 1  # 1-based, as compilers print it
    if not expects or not all(expects):
        raise ValueError("no (non-empty) '// expect: <text>' comment under GRADIX_SHOULD_FAIL")
    if marked is None:
        raise ValueError("no code line after the '// expect:' comments")
    return expects, marked


def same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.basename(a) == os.path.basename(b)


def check(case, expects, marked, out, max_errors, max_lines):
    """Returns (reasons why the output does not pass (none: it passes), errors, lines)."""
    reasons = []
    lines = [l for l in out.splitlines() if l.strip()]
    # The text of each diagnostic without its location (so that an expect text cannot match
    # a path), leaving out quoted source lines and "In file included from" chains.
    diag = []
    for l in lines:
        m = LOCATED.match(l) or HEADER.match(l)
        if m and not l.startswith("In file included from "):
            diag.append(m.group("rest"))
        elif ERROR.match(l):  # "cc1plus: error: ...", "clang: error: ..."
            diag.append(l.split(": ", 1)[1] if not l.startswith(("error:", "fatal")) else l)
    errors = [d for d in diag if ERROR_TEXT.match(d)]

    for text in expects:
        if not any(text in l for l in diag):
            reasons.append(f"expected text not found in the diagnostics: {text!r}")
    if not any(text in l for text in expects if text.startswith("gradix") for l in errors):
        reasons.append("no error line carries an expected text that starts with 'gradix' "
                       "(the error is not gradix's own message)")

    anchored, elsewhere = False, set()
    for l in lines:
        m = LOCATED.match(l)
        if not m or l.startswith("In file included from "):
            continue
        if not same_file(m.group("file"), case):
            continue
        if int(m.group("line")) != marked:
            elsewhere.add(int(m.group("line")))
        elif ANCHOR.match(m.group("rest")):
            anchored = True
    if not anchored:
        reasons.append(f"no error, 'required from here' or 'requested here' at line {marked} "
                       f"of {os.path.basename(case)}")
    if elsewhere:
        reasons.append(f"diagnostics at other lines of {os.path.basename(case)}: "
                       f"{sorted(elsewhere)} (marked line: {marked})")
    if len(errors) > max_errors:
        reasons.append(f"{len(errors)} error lines (at most {max_errors})")
    if len(lines) > max_lines:
        reasons.append(f"{len(lines)} lines of diagnostics (at most {max_lines})")
    return reasons, len(errors), len(lines)


def compiler_family(cmd):
    r = subprocess.run(cmd[:1] + ["--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, errors="replace")
    return "clang++" if "clang" in r.stdout else "g++"


def doc_text(out, root):
    """The diagnostics as docs/compile_errors.md shows them."""
    keep = []
    for l in out.splitlines():
        if l.startswith("In file included from ") or l.lstrip().startswith("from "):
            continue
        m = LOCATED.match(l) or HEADER.match(l)
        if not m:
            if ERROR.match(l):
                keep.append(l)
            continue
        path = os.path.relpath(os.path.abspath(m.group("file")), root)
        if path.startswith("include" + os.sep):
            where = path
        elif "line" in m.groupdict() and m.group("line"):
            where = f"{path}:{m.group('line')}:{m.group('col')}"
        else:
            where = path
        keep.append(f"{where}: {m.group('rest')}")
    return "\n".join(keep) + "\n"


def doc_block(doc, name, family):
    """(lines of doc, index of the block's first line, index of its closing fence) or None."""
    lines = open(doc, encoding="utf-8").read().split("\n")
    marker = f"<!-- compile_fail: {name} {family} -->"
    for i, l in enumerate(lines):
        if l.strip() == marker and i + 1 < len(lines) and lines[i + 1].startswith("```"):
            for j in range(i + 2, len(lines)):
                if lines[j].rstrip() == "```":
                    return lines, i + 2, j
    return None


def check_doc(doc, root, case, family, out):
    """Returns a reason string if the doc's block for this case disagrees, else None."""
    name = os.path.splitext(os.path.basename(case))[0]
    found = doc_block(doc, name, family)
    if found is None:
        return None
    lines, b, e = found
    want = doc_text(out, root)
    have = "\n".join(lines[b:e]) + "\n"
    if have == want:
        return None
    if os.environ.get("GRADIX_UPDATE_DOCS") == "1":
        lines[b:e] = want.rstrip("\n").split("\n")
        with open(doc, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        print(f"updated the {family} block of {name} in {doc}")
        return None
    return (f"{os.path.basename(doc)}'s {family} block for {name} differs from what the "
            f"compiler prints now (update: GRADIX_UPDATE_DOCS=1 meson test --suite "
            f"compile_fail --num-processes 1); it should read:\n{want}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("case")
    ap.add_argument("--run", help="the case built without GRADIX_SHOULD_FAIL; must exit 0")
    ap.add_argument("--max-errors", type=int, default=1)
    ap.add_argument("--max-lines", type=int, default=30)
    ap.add_argument("--doc", action="append", default=[],
                    help="a doc (docs/compile_errors.md) whose block for this case must match")
    ap.add_argument("--root", help="the source root (paths in --doc are relative to it)")
    argv = sys.argv[1:]
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        ap.error("no compiler command after --")
    cmd = argv[argv.index("--") + 1:]
    a = ap.parse_args(argv[:argv.index("--")])
    name = os.path.basename(a.case)

    try:
        expects, marked = parse_case(a.case)
    except (OSError, ValueError) as e:
        print(f"FAIL {name}: bad case file: {e}")
        return 1

    if a.run:
        r = subprocess.run([a.run], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            print(f"FAIL {name}: the valid program (without GRADIX_SHOULD_FAIL) exited with "
                  f"{r.returncode}:\n{r.stdout}")
            return 1

    env = dict(os.environ, LC_ALL="C", LANG="C", LANGUAGE="C")  # plain ASCII quotes from g++
    env.pop("GCC_COLORS", None)
    full = cmd + ["-fdiagnostics-color=never", "-DGRADIX_SHOULD_FAIL", "-fsyntax-only", a.case]
    r = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       errors="replace", env=env)
    out = r.stdout
    if r.returncode == 0:
        reasons, n_err, n_lines = ["the case compiled, but it must fail"], 0, len(out.splitlines())
    else:
        reasons, n_err, n_lines = check(a.case, expects, marked, out, a.max_errors, a.max_lines)
        family = compiler_family(cmd) if a.doc else None
        for doc in a.doc:
            why = check_doc(doc, a.root or os.getcwd(), a.case, family, out)
            if why:
                reasons.append(why)

    summary = f"{name}:{marked}: {n_err} error line(s), {n_lines} line(s) of diagnostics"
    if reasons:
        print(f"FAIL {summary}")
        for why in reasons:
            print(f"  - {why}")
        print("command: " + " ".join(full))
        print("---- compiler output " + "-" * 58)
        print(out, end="" if out.endswith("\n") else "\n")
        print("-" * 79)
        return 1
    print(f"ok {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
