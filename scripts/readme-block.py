#!/usr/bin/env python3
"""Prints the code blocks of README.md in one language (```LANG fences), so that CI
compiles and runs the README's examples as they are written. Usage: readme-block.py LANG
[README]. Fails when the README has no such block."""
import re
import sys

lang = sys.argv[1]
path = sys.argv[2] if len(sys.argv) > 2 else "README.md"
blocks = re.findall(r"^```" + re.escape(lang) + r"\n(.*?)^```", open(path).read(), re.S | re.M)
if not blocks:
    sys.exit(f"{path}: no ```{lang} block")
print("\n".join(blocks), end="")
