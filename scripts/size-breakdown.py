#!/usr/bin/env python3
"""Where the bytes of an (unstripped) outpost binary go, by section and by crate.

What `cargo bloat --crates` would say, without installing it: the symbol table of a
binary built with `CARGO_PROFILE_RELEASE_STRIP=false` (same code as the stripped one;
the symbols are what `strip` removes), read with the target's `nm`.

Usage: scripts/size-breakdown.py BINARY [--nm aarch64-linux-gnu-nm] [--top 25]

A symbol is counted for the crate its demangled path starts with (`<T as Trait>::f`
counts for T's crate); generic code instantiated from std types counts as std/core/
alloc, like cargo-bloat's default. C symbols: ring's C and assembly -> ring, the C
runtime's -> [C] runtime, the rest (the bundled SQLite's) -> [C] SQLite. Only symbols in text/data sections are
counted; the rest of the file (headers, .eh_frame, relocation and symbol tables) is
the section table's business.
"""
import argparse
import collections
import re
import subprocess
import sys


# ring's C and assembly (not all of it carries the `ring_core_` prefix).
RING_C = re.compile(
    r"ring_core_|nistz|ecp_|p256|p384|ChaCha20|chacha|poly1305|sha256_block|sha512_block"
    r"|bn_|aes_|gcm_|ghash|x25519|fiat_|limbs|LIMBS|OPENSSL|CRYPTO_|k25519|vpaes|ecp_nistz"
)


def crate_of(name: str) -> str:
    if "::" not in name and not name.startswith("_ZN") and not name.startswith("_R"):
        # C: ring's, the C runtime's (leading underscore), else the bundled SQLite
        # (its static functions have no `sqlite3` prefix).
        if RING_C.search(name):
            return "ring"
        if name.startswith("_") or name in ("frame_dummy", "deregister_tm_clones", "register_tm_clones"):
            return "[C] runtime"
        return "[C] SQLite"
    n = name
    while n.startswith("<") or n.startswith("&") or n.startswith("*const ") or n.startswith("*mut "):
        if n.startswith("<"):
            n = n[1:]
        elif n.startswith("&"):
            n = n[1:].removeprefix("mut ")
        else:
            n = n.split(" ", 1)[1]
    if n.startswith("dyn "):
        n = n[4:]
    m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)::", n)
    if m:
        return m.group(1)
    return "[other rust]"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--nm", default="nm")
    ap.add_argument("--size", default="size")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()

    sections = subprocess.run([a.size, "-A", a.binary], check=True, capture_output=True, text=True).stdout
    print("sections (bytes):")
    for line in sections.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith(".") and parts[1].isdigit() and int(parts[1]) >= 4096:
            print(f"  {parts[0]:<20} {int(parts[1]):>10,}")

    out = subprocess.run(
        [a.nm, "-S", "--size-sort", "-C", a.binary], check=True, capture_output=True, text=True
    ).stdout
    by_crate: collections.Counter = collections.Counter()
    total = 0
    for line in out.splitlines():
        parts = line.split(" ", 3)
        if len(parts) < 4:
            continue
        _addr, size, kind, name = parts
        if kind.lower() not in ("t", "r", "d", "b", "w", "v"):
            continue
        s = int(size, 16)
        by_crate[crate_of(name)] += s
        total += s
    if total == 0:
        print("\nno symbols: build with CARGO_PROFILE_RELEASE_STRIP=false for the crate breakdown")
        return 0
    print(f"\nsymbols by crate (bytes, {total:,} in named symbols):")
    for crate, s in by_crate.most_common(a.top):
        print(f"  {crate:<28} {s:>10,}  {100 * s / total:5.1f} %")
    rest = total - sum(s for _, s in by_crate.most_common(a.top))
    print(f"  {'(other crates)':<28} {rest:>10,}  {100 * rest / total:5.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
