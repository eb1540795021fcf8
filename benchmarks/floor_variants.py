#!/usr/bin/env python3
"""Write the cut-down builds behind docs/figures.md's "The floor of the hook"
(benchmarks/results/ab-intel-floor.txt) as variant directories for
ab_variants.py, each a copy of the tree's bpf/trace_tp.bpf.c and the headers
it includes with one early return:

  empty     ft_btf_sys_enter returns at once (the empty tp_btf hook)
  memoonly  futex_call returns at once: syscall number, task epoch and memo,
            nothing counted
  cutmiss   account_lookup returns when both lookup-cache ways miss (a miss
            counts nothing: wrong counts, a floor only)
  same      the tree as it is

    .venv/bin/python benchmarks/floor_variants.py OUT
    sudo .venv/bin/python benchmarks/ab_variants.py --base OUT/empty --variant OUT/memoonly \\
        --sizes 16,1024,16384,1048576 --rounds 10
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from futextrace.loading.loader import HOT_PATH_HEADERS  # noqa: E402

BPF = Path(__file__).resolve().parents[1] / "bpf"

# variant -> (file, the text the early return goes after, what is inserted)
CUTS = {
    "empty": ("trace_tp.bpf.c", "int ft_btf_sys_enter(u64 *ctx)\n{\n", "\treturn 0;\n"),
    "memoonly": ("trace_tp.bpf.c", "\t\t\t\t      void *regs)\n{\n", "\treturn 0;\n"),
    "cutmiss": ("lookup_cache.h",
                "#ifndef CHECK_KERNEL_BUCKET\n\tif (slot_hit(a, &key, atomic) || slot_hit(b, &key, atomic))\n"
                "\t\treturn;\n#endif\n",
                "\treturn;\n"),
    "same": (None, None, None),
}


def write_variant(out: Path, name: str) -> None:
    target, anchor, insert = CUTS[name]
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    for f in (*HOT_PATH_HEADERS, "lock_waits.h", "trace_tp.bpf.c"):
        text = (BPF / f).read_text()
        if f == target:
            if text.count(anchor) != 1:
                sys.exit(f"floor_variants: {name}: the cut's place is not found once in bpf/{f}; "
                         "update CUTS to the current source")
            text = text.replace(anchor, anchor + insert, 1)
        (d / f).write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="directory to write the variant directories into")
    args = ap.parse_args()
    for name in CUTS:
        write_variant(args.out, name)
    print(" ".join(str(args.out / n) for n in CUTS))


if __name__ == "__main__":
    main()
