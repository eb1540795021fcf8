#!/usr/bin/env python3
"""What naming futexes costs (futextrace/naming/): reading a process's maps,
parsing each file once (cold), and naming N addresses once the files are
parsed. Runs without root and without BPF.

    .venv/bin/python benchmarks/naming_cost.py [--addresses 10000] [--big 100000]

--big N builds a binary with N named globals (gcc) to time a large symbol
table; 0 skips it.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time

from futextrace.naming.elfsyms import ElfCache
from futextrace.naming.maps import read_snapshot
from futextrace.naming.resolve import Namer


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def timed(fn, repeat: int = 1):
    """(median seconds, last result)."""
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def maps_cost(pid: int) -> None:
    t, snap = timed(lambda: read_snapshot(pid), repeat=20)
    threads = len(os.listdir(f"/proc/{pid}/task"))
    print(f"read /proc/{pid}/maps + {threads} threads' stack pointers: {len(snap.mappings)} mappings, "
          f"{_ms(t)} (median of 20)")


def parse_cost(paths: list[str]) -> None:
    for path in paths:
        cache = ElfCache()
        t, info = timed(lambda: cache.with_debug_symbols(cache.load(path)))
        t2, _ = timed(lambda: cache.with_debug_symbols(cache.load(path)), repeat=20)
        print(f"parse {path}: {len(info.symbols.starts):,} data symbols from {' + '.join(info.tables)}: "
              f"{_ms(t)} cold, {_ms(t2)} cached")


def naming_cost(n: int) -> None:
    """N addresses spread over this process's own file mappings, named."""
    snap = read_snapshot(os.getpid())
    files = [m for m in snap.mappings if m.is_file and "w" in m.perms]
    rng = random.Random(1)
    addrs = [rng.randrange(m.start, m.end) & ~3 for m in rng.choices(files, k=n)]
    namer = Namer(ElfCache())
    t_cold, names = timed(lambda: [namer.name(a, [snap], True) for a in addrs])
    parsed = namer.cache.parsed
    t, names = timed(lambda: [namer.name(a, [snap], True) for a in addrs], repeat=3)
    named = sum(1 for x in names if x["symbol"])
    print(f"name {n:,} addresses in {len(files)} writable file mappings of this process "
          f"({named:,} got a symbol): {_ms(t_cold)} the first time ({parsed} files parsed, "
          f"{namer.cache.parsed - parsed} more after), then {_ms(t)} ({t / n * 1e6:.1f} us each)")


def big_binary(n: int, tmp: str) -> str | None:
    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc or not n:
        return None
    src = os.path.join(tmp, "big.c")
    with open(src, "w") as f:
        f.writelines(f"int global_word_{i} = {i};\n" for i in range(n))
        f.write("int main(void) { return global_word_0; }\n")
    out = os.path.join(tmp, "big")
    subprocess.run([cc, "-O0", "-o", out, src], check=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--addresses", type=int, default=10000)
    ap.add_argument("--big", type=int, default=100000, help="named globals in a built binary (0: none)")
    args = ap.parse_args()
    maps_cost(os.getpid())
    paths = ["/usr/lib/x86_64-linux-gnu/libc.so.6", os.path.realpath("/proc/self/exe")]
    with tempfile.TemporaryDirectory() as tmp:
        big = big_binary(args.big, tmp)
        parse_cost([p for p in paths if os.path.exists(p)] + ([big] if big else []))
    naming_cost(args.addresses)


if __name__ == "__main__":
    main()
