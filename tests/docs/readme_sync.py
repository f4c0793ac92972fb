#!/usr/bin/env python3
"""Checks that the README's C++ example is exactly examples/readme.cpp minus its comment
header, so the README never shows code that does not compile."""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
readme = (root / "README.md").read_text()
source = (root / "examples" / "readme.cpp").read_text()
blocks = re.findall(r"```cpp\n(.*?)```", readme, re.S)
code = "".join(l + "\n" for l in source.splitlines() if not l.startswith("//"))
if code not in blocks:
    print("README.md has no ```cpp block equal to examples/readme.cpp (without // lines):")
    print(code)
    sys.exit(1)
print("README example matches examples/readme.cpp")
