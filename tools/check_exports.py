#!/usr/bin/env python3
"""Checks libotter.so's boundary: it exports only otter_* symbols, and every function declared in
include/otter/*.h is among them (a public declaration without OTTER_API would be hidden).

Usage: check_exports.py LIBOTTER_SO GCC INCLUDE_DIR

The declarations come from GCC's -aux-info (one line per prototype, with the header it came from),
so no C parsing is done here."""
import os
import re
import subprocess
import sys
import tempfile

# Symbols the linker itself defines in every shared object.
LINKER_SYMBOLS = {"_init", "_fini", "_edata", "_end", "__bss_start"}


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 3:
            names.add(fields[2].split("@")[0])
    return names


def declared(gcc, include_dir):
    headers = sorted(f for f in os.listdir(os.path.join(include_dir, "otter")) if f.endswith(".h"))
    with tempfile.TemporaryDirectory() as tmp:
        src, aux = os.path.join(tmp, "all.c"), os.path.join(tmp, "aux.txt")
        with open(src, "w") as f:
            f.writelines(f'#include "otter/{h}"\n' for h in headers)
        subprocess.run([gcc, "-std=c11", "-fsyntax-only", "-aux-info", aux, "-I", include_dir, src], check=True)
        with open(aux) as f:
            text = f.read()
    decls = {}
    for m in re.finditer(r"^/\* (\S+):(\d+):\S+ \*/ extern .*?\b(\w+) \(", text, re.M):
        path, line, name = m.groups()
        if os.sep + "otter" + os.sep in path:
            decls[name] = f"{os.path.relpath(path, include_dir)}:{line}"
    return headers, decls


def main():
    lib, gcc, include_dir = sys.argv[1:4]
    names = exported(lib)
    headers, decls = declared(gcc, include_dir)
    failed = False

    internal = sorted(n for n in names - LINKER_SYMBOLS if not n.startswith("otter_"))
    if internal:
        failed = True
        print(f"FAIL: {lib} exports {len(internal)} symbols outside the otter_* API:")
        for n in internal:
            print("   ", n)

    misnamed = sorted(n for n in decls if not n.startswith("otter_"))
    if misnamed:
        failed = True
        print(f"FAIL: {len(misnamed)} public functions are not named otter_*:")
        for n in misnamed:
            print(f"    {n} ({decls[n]})")

    hidden = sorted(n for n in decls if n not in names)
    if hidden:
        failed = True
        print(f"FAIL: {len(hidden)} public declarations are not exported (missing OTTER_API, or never defined):")
        for n in hidden:
            print(f"    {n} ({decls[n]})")

    if not decls:
        failed = True
        print(f"FAIL: found no function declarations in {include_dir}/otter")

    # OTTER_API belongs on public headers only: an export no public header declares is a leak too.
    undeclared = sorted(n for n in names if n.startswith("otter_") and n not in decls)
    if undeclared:
        failed = True
        print(f"FAIL: {len(undeclared)} exported symbols have no declaration in include/otter:")
        for n in undeclared:
            print("   ", n)

    print(f"{len(headers)} public headers declare {len(decls)} functions; {lib} exports {len(names)} symbols: "
          f"{len(internal)} internal, {len(hidden)} public ones missing, {len(undeclared)} undeclared")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
