#!/usr/bin/env python3
"""Checks that every fenced block in README.md and docs/*.md comes from a file the build
compiles or CI runs, so the docs never show code that does not build.

    docs_sync.py SOURCE_ROOT BUILD_ROOT

The line right above each opening fence must say where the block comes from:

  <!-- snippet: PATH -->        the block is PATH without its leading comment lines
                                (// lines for C++, # lines for scripts and CMake)
  <!-- snippet: PATH#NAME -->   the block is the region of PATH between a line ending in
                                `doc-snippet: NAME` and the next line ending in
                                `end doc-snippet` (comment markers of PATH's language),
                                without its common indentation
  <!-- output: PATH -->         output that PATH asserts: every non-empty line of the block
                                occurs in PATH (a test that checks the text); "..." in a
                                line elides a part the test does not pin down
  <!-- output of a run: PATH -->  output of a program run on data or a machine the tests do
                                not have (the training examples on full corpora); PATH must
                                exist, and the block is marked ```text
  <!-- compile_fail: CASE COMPILER -->
                                a compiler's message for tests/compile_fail/CASE.cpp;
                                the compile_fail suite compares it with what COMPILER
                                (g++ or clang++) prints today (check.py --doc)
  <!-- commands -->             shell commands: every `bash PATH` names a script of the
                                tree, every build/... a target of the build, every
                                `--suite S` a test suite
  <!-- commands: SCRIPT runs these -->
                                the same, and SCRIPT (run by CI) reads this block by its
                                marker and runs its lines (tests/install/check_plain.sh)

A PATH of a snippet must be compiled or run: a source of a target or a file a test runs
(meson's introspection of BUILD_ROOT), a script .ci/run names, or a file a meson.build names. Prints one line per problem and exits 1 if there is any.
"""
import json
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1]).resolve()
problems = []

FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
MARK = re.compile(r"^<!--\s*(snippet|output of a run|output|compile_fail|commands)\s*:?\s*(.*?)\s*-->\s*$")

# What the build compiles and runs, from meson's introspection of the build directory.
build = pathlib.Path(sys.argv[2]).resolve()
info = build / "meson-info"
targets = json.loads((info / "intro-targets.json").read_text())
tests = json.loads((info / "intro-tests.json").read_text())
compiled = {pathlib.Path(src).resolve() for t in targets for ts in t["target_sources"]
            for src in ts.get("sources", [])}
target_files = {pathlib.Path(f).resolve() for t in targets for f in t["filename"]}
test_args = {pathlib.Path(a).resolve() for t in tests for a in t["cmd"] if a.startswith("/")}
suites = {s.split(":")[-1] for t in tests for s in t["suite"]}
ci_text = (root / ".ci" / "run").read_text()
# scripts .ci/run runs (tools/*.sh, tests/install/*.sh), and what they name
ci_scripts = "\n".join((root / m).read_text() for m in set(re.findall(r"[\w/.-]+\.sh", ci_text))
                       if (root / m).is_file())
build_text = "\n".join(p.read_text() for p in root.glob("*/**/meson.build")
                       if not p.relative_to(root).parts[0].startswith("build"))


def comment_prefix(path):
    return "//" if path.suffix in (".cpp", ".hpp", ".cu", ".h") else "#"


def built_or_run(path):
    """A source of a target, a file a test runs, a script .ci/run runs, a file a meson.build
    names (examples/seed_embedding.hpp), or a file in a folder that a script .ci/run runs
    names (tests/install/cmake_user/CMakeLists.txt)."""
    path = path.resolve()
    rel = str(path.relative_to(root))
    return (path in compiled or path in test_args or rel in ci_text
            or re.search(r"\b" + re.escape(path.name) + r"\b", build_text)
            or path.parent.name in ci_scripts and path.parent != root)


def dedent(lines):
    ind = min((len(l) - len(l.lstrip()) for l in lines if l.strip()), default=0)
    return [l[ind:] for l in lines]


def snippet_text(spec, where):
    path_s, _, name = spec.partition("#")
    path = root / path_s
    if not path.is_file():
        problems.append(f"{where}: snippet source {path_s} does not exist")
        return None
    if not built_or_run(path):
        problems.append(f"{where}: {path_s} is not named by any meson.build or .ci/run")
        return None
    lines = path.read_text().splitlines()
    c = comment_prefix(path)
    if not name:
        i = 0
        while i < len(lines) and (lines[i].startswith(c) and not lines[i].startswith("#include")
                                   or lines[i].startswith("#!")):
            i += 1
        return "\n".join(lines[i:]).rstrip("\n") + "\n"
    starts = [i for i, l in enumerate(lines) if l.rstrip().endswith("doc-snippet: " + name)
              and l.strip().startswith(c)]
    if len(starts) != 1:
        problems.append(f"{where}: {path_s} has {len(starts)} regions named '{name}' (want 1)")
        return None
    s = starts[0]
    for e in range(s + 1, len(lines)):
        if lines[e].strip().startswith(c) and lines[e].rstrip().endswith("end doc-snippet"):
            return "\n".join(dedent(lines[s + 1:e])).rstrip("\n") + "\n"
    problems.append(f"{where}: region '{name}' of {path_s} has no 'end doc-snippet' line")
    return None


def check_commands(body, where):
    for line in body.splitlines():
        code = line.split(" #")[0].strip()
        if not code or code.startswith("#"):
            continue
        for m in re.finditer(r"\bbash\s+(\S+)", code):
            if not (root / m.group(1)).is_file():
                problems.append(f"{where}: `bash {m.group(1)}`: no such script")
        for m in re.finditer(r"\bbuild/([\w/]+)", code):
            if (build / m.group(1)).resolve() not in target_files:
                problems.append(f"{where}: build/{m.group(1)} is not a target of the build")
        for m in re.finditer(r"\bninja -C build (\S+)", code):
            if (build / m.group(1)).resolve() not in target_files:
                problems.append(f"{where}: ninja target {m.group(1)} is not a target of the build")
        for m in re.finditer(r"--suite\s+(\S+)", code):
            if m.group(1) not in suites:
                problems.append(f"{where}: no meson suite named '{m.group(1)}'")
        for m in re.finditer(r"\btools/\S+", code):
            if not (root / m.group(0)).exists():
                problems.append(f"{where}: {m.group(0)} does not exist")


docs = [root / "README.md"] + sorted((root / "docs").glob("**/*.md"))
blocks = 0
for doc in docs:
    rel = doc.relative_to(root)
    lines = doc.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != indent + "```":
            j += 1
        if j == len(lines):
            problems.append(f"{rel}:{i + 1}: unterminated code block")
            break
        # a block inside a list item is indented; compare it without that indentation
        body = "\n".join(l[len(indent):] if l.startswith(indent) else l
                         for l in lines[i + 1:j]) + "\n"
        where = f"{rel}:{i + 1}"
        blocks += 1
        mk = MARK.match(lines[i - 1].strip()) if i > 0 else None
        if not mk:
            problems.append(f"{where}: code block without a source marker on the line above "
                            "(<!-- snippet: PATH -->, see tests/docs/docs_sync.py)")
        else:
            kind, arg = mk.group(1), mk.group(2)
            if kind == "snippet":
                want = snippet_text(arg, where)
                if want is not None and body != want:
                    problems.append(f"{where}: block differs from {arg}; it should read:\n{want}")
            elif kind == "output":
                p = root / arg
                if not p.is_file():
                    problems.append(f"{where}: {arg} does not exist")
                else:
                    text = p.read_text()
                    for l in body.splitlines():
                        # "..." elides a part the test does not pin down (a float's tail)
                        if l.strip() and not all(piece.strip() in text
                                                 for piece in l.strip().split("...")):
                            problems.append(f"{where}: output line not found in {arg}: {l.strip()}")
            elif kind == "output of a run":
                if not (root / arg.split()[0]).is_file():
                    problems.append(f"{where}: {arg.split()[0]} does not exist")
                if lang != "text":
                    problems.append(f"{where}: mark an output block ```text")
            elif kind == "compile_fail":
                parts = arg.split()
                if len(parts) != 2 or parts[1] not in ("g++", "clang++"):
                    problems.append(f"{where}: write <!-- compile_fail: CASE g++|clang++ -->")
                elif not (root / "tests" / "compile_fail" / (parts[0] + ".cpp")).is_file():
                    problems.append(f"{where}: no tests/compile_fail/{parts[0]}.cpp")
                elif lang != "text":
                    problems.append(f"{where}: mark a compiler message ```text")
                elif str(rel) not in (root / "tests" / "compile_fail" / "meson.build").read_text():
                    problems.append(f"{where}: tests/compile_fail/meson.build does not pass {rel} "
                                    "to check.py --doc, so nothing compares this block")
                elif not body.strip():
                    problems.append(f"{where}: empty compiler message (fill it: "
                                    "GRADIX_UPDATE_DOCS=1 meson test --suite compile_fail "
                                    "--num-processes 1)")
            elif kind == "commands":
                if lang != "sh":
                    problems.append(f"{where}: mark commands ```sh")
                check_commands(body, where)
                # "commands: SCRIPT runs these": SCRIPT reads this block by its marker
                runner = arg.split()[0] if arg else None
                if runner and not ((root / runner).is_file() and built_or_run(root / runner)
                                   and lines[i - 1].strip() in
                                   (root / runner).read_text().replace("\\/", "/")):
                    problems.append(f"{where}: {runner} does not run this block (it must exist, "
                                    "be run by CI, and look for this marker)")
        i = j + 1

for p in problems:
    print(p)
print(f"{blocks} code blocks in {len(docs)} files; {len(problems)} problems")
sys.exit(1 if problems else 0)
