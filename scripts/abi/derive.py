#!/usr/bin/env python3
"""Derives the libibverbs/librdmacm ABI softroce must serve from a
distribution's own files, not from memory.

    scripts/abi/derive.py SUITE ROOT OUTDIR

For the root of a Debian release (`/` for the machine's own, or a root made
by scripts/distro/root.sh), writes two lists into OUTDIR:

- SUITE.exports: every symbol the real libibverbs.so.1 and librdmacm.so.1
  define, one `SYMBOL NODE default|compat` a line (`default` is `@@NODE`);
- SUITE.imports: every libibverbs/librdmacm symbol that any ELF file of the
  root needs, one `SYMBOL NODE FILE` a line (FILE: the first importer, by
  path, and how many files import it).

Needs binutils' readelf. The lists are committed; tests/symbols.rs checks
the built library against them.
"""

import os
import re
import subprocess
import sys
from collections import defaultdict

NODE = re.compile(r"^(IBVERBS_[0-9A-Z_.]+|RDMACM_[0-9.]+)$")
LIBS = ("libibverbs.so.1", "librdmacm.so.1")
SEARCH = ("usr/lib", "usr/bin", "usr/sbin", "usr/libexec", "lib", "bin", "sbin")


def dyn_syms(path):
    """(name, version, is_default, defined) for each dynamic symbol."""
    out = subprocess.run(
        ["readelf", "-W", "--dyn-syms", path], capture_output=True, text=True, check=False
    ).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) < 8 or not f[0].endswith(":"):
            continue
        name = f[7]
        ndx = f[6]
        if "@@" in name:
            sym, ver, default = *name.split("@@", 1), True
        elif "@" in name:
            sym, ver, default = *name.split("@", 1), False
        else:
            continue
        ver = ver.split(" ")[0]
        yield sym, ver, default, ndx != "UND"


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    suite, root, outdir = sys.argv[1:]
    libdir = os.path.join(root, "usr/lib/x86_64-linux-gnu")

    exports = set()
    for lib in LIBS:
        path = os.path.join(libdir, lib)
        if not os.path.exists(path):
            sys.exit(f"derive.py: {path} is missing (install libibverbs1 and librdmacm1)")
        for sym, ver, default, defined in dyn_syms(path):
            if defined and NODE.match(ver) and sym != ver:
                exports.add((sym, ver, "default" if default else "compat"))

    importers = defaultdict(list)
    seen = set()
    for top in SEARCH:
        base = os.path.join(root, top)
        if os.path.islink(base) or not os.path.isdir(base):
            continue
        for dirpath, _, files in os.walk(base):
            for fn in files:
                path = os.path.join(dirpath, fn)
                if os.path.islink(path) or not is_elf(path):
                    continue
                real = os.path.realpath(path)
                if real in seen:
                    continue
                seen.add(real)
                if os.path.basename(path).startswith(LIBS):
                    continue
                rel = "/" + os.path.relpath(path, root)
                for sym, ver, _, defined in dyn_syms(path):
                    if not defined and NODE.match(ver):
                        importers[(sym, ver)].append(rel)

    os.makedirs(outdir, exist_ok=True)
    head = f"# Derived by scripts/abi/derive.py from Debian {suite}'s packages; do not edit.\n"
    with open(os.path.join(outdir, f"{suite}.exports"), "w") as f:
        f.write(head + "# SYMBOL NODE default|compat\n")
        for sym, ver, kind in sorted(exports, key=lambda e: (e[1], e[0], e[2])):
            f.write(f"{sym} {ver} {kind}\n")
    with open(os.path.join(outdir, f"{suite}.imports"), "w") as f:
        f.write(head + "# SYMBOL NODE FIRST-IMPORTER IMPORTERS\n")
        for (sym, ver), files in sorted(importers.items(), key=lambda e: (e[0][1], e[0][0])):
            files.sort()
            f.write(f"{sym} {ver} {files[0]} {len(files)}\n")
    print(f"{suite}: {len(exports)} exports, {len(importers)} imported symbols from {len(seen)} ELF files")


if __name__ == "__main__":
    main()
