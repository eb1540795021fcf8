#!/usr/bin/env python3
"""Write a BTF digest: a small JSON subset of a kernel's BTF with everything
futextrace's kernel model reads (tests/data/btf/*.json), or inspect BTF.

    scripts/btf_digest.py --digest [--system-map FILE] [--release R] [BTF]
    scripts/btf_digest.py --struct mm_struct [BTF]
    scripts/btf_digest.py --func futex_hash [BTF]

Dev and test machinery: the package only reads digests (futextrace.kernel.btf.Digest).
scripts/extract-btf.py and tests/unit/test_btf.py import digest() from here.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from futextrace.kernel.btf import Btf, BtfType, Digest, Member, TypeSource  # noqa: E402

# --- digests ---------------------------------------------------------------
# Structs whose names contain one of these are kept in full (all members).
FUTEX_WORDS = ("futex",)
# Big structs of which only these members are kept (offsets stay exact).
PRUNED = {"task_struct": {"mm", "pid", "tgid", "signal", "futex", "comm", "flags", "group_leader"},
          "signal_struct": {"nr_threads"},
          "mm_struct": None,    # None: keep members whose name starts with "futex"
          "pt_regs": "all",
          "bpf_iter_meta": {"seq"}}   # the task iterator's context
SYMBOL_WORDS = ("futex", "mmput", "copy_process", "kernel_clone")


def _keep_member(struct_name: str, name: str) -> bool:
    rule = PRUNED[struct_name]
    if rule == "all":
        return True
    if rule is None:
        return name.startswith("futex") or name in ("futex", "owner")
    return name in rule


def digest(btf: TypeSource, symbols: list[tuple[str, str]] | None = None, meta: dict | None = None) -> dict:
    """A small JSON-able subset of `btf` with everything futextrace's model reads."""
    keep: dict[int, BtfType] = {}

    def add(tid: int, full: bool) -> None:
        if tid == 0 or (tid in keep and (keep[tid].members is not None or not full)):
            return
        t = btf.get(tid)
        if t.kind in ("STRUCT", "UNION"):
            if not full and t.name:       # a named struct seen through a member: name and size only
                keep.setdefault(tid, BtfType(t.id, t.kind, t.name, size=t.size, vlen=t.vlen))
                return
            keep[tid] = t
            for m in t.members:
                add(m.type, full=(m.name == "" or any(w in btf.type_str(m.type) for w in FUTEX_WORDS)))
            return
        keep[tid] = t
        if t.kind == "ARRAY":
            add(t.array[0], full=False)
            add(t.array[1], full=False)
        elif t.kind == "FUNC_PROTO":
            add(t.ref, full=False)
            for _, ptid in t.params:
                add(ptid, full=False)
        elif t.kind == "PTR":
            add(t.ref, full=False)
        elif t.ref:
            add(t.ref, full=full)

    def add_pruned(t: BtfType) -> None:
        members = []

        def walk(s: BtfType, out: list, base_bits: int) -> None:
            for m in s.members:
                if m.name and _keep_member(t.name, m.name):
                    out.append(Member(m.name, m.type, base_bits + m.bit_offset, m.bitfield_size))
                    add(m.type, full=m.name.startswith("futex"))
                elif not m.name:
                    inner = btf.resolve(m.type)
                    if inner is not None and inner.kind in ("STRUCT", "UNION"):
                        walk(inner, out, base_bits + m.bit_offset)   # flattened: offsets stay exact

        walk(t, members, 0)
        keep[t.id] = BtfType(t.id, t.kind, t.name, size=t.size, vlen=len(members), members=members)

    names = btf._by_name if isinstance(btf, Digest) else None
    if isinstance(btf, Btf):
        btf.ids_named("")  # build the index
        names = btf._by_name
    for name, ids in names.items():
        if not any(w in name for w in FUTEX_WORDS):
            continue
        for tid in ids:
            t = btf.get(tid)
            if t.kind in ("STRUCT", "UNION", "ENUM", "TYPEDEF"):
                add(tid, full=True)
            elif t.kind == "FUNC":
                keep[tid] = t
                add(t.ref, full=False)
    for sname in PRUNED:
        t = btf.struct(sname)
        if t is not None and t.members is not None:
            add_pruned(t) if PRUNED[sname] != "all" else add(t.id, full=True)
    out = {"schema": "futextrace-btf-digest", "schema_version": 1, **(meta or {})}
    if symbols is not None:
        out["symbols"] = sorted({f"{ty} {n}" for ty, n in symbols
                                 if any(w in n for w in SYMBOL_WORDS)})
    out["types"] = [keep[i].to_json() for i in sorted(keep)]
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="scripts/btf_digest.py",
                                 description="Inspect BTF or write a digest of its futex types.")
    ap.add_argument("file", nargs="?", default="/sys/kernel/btf/vmlinux")
    ap.add_argument("--digest", action="store_true", help="print a JSON digest")
    ap.add_argument("--system-map", help="System.map or kallsyms to take symbol names from")
    ap.add_argument("--release", default="", help="kernel release to record in the digest")
    ap.add_argument("--struct", help="print a struct's members")
    ap.add_argument("--func", help="print a function prototype")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    btf = Btf.from_file(a.file)
    t1 = time.perf_counter()
    if a.digest:
        syms = None
        if a.system_map:
            from futextrace.kernel.kallsyms import Kallsyms
            ks = Kallsyms.from_file(a.system_map)
            syms = [(s.type, s.name) for s in ks.symbols]
        print(json.dumps(digest(btf, syms, {"release": a.release, "source": Path(a.file).name}),
                         separators=(",", ":"), indent=None))
        return 0
    if a.struct:
        t = btf.struct(a.struct)
        if t is None:
            print(f"no struct {a.struct}", file=sys.stderr)
            return 1
        print(f"{t.kind.lower()} {t.name} size={t.size}")
        for m in t.members or []:
            print(f"  {m.bit_offset // 8:6d} {m.name or '(anon)'}: {btf.type_str(m.type)}")
        return 0
    if a.func:
        print(btf.func(a.func))
        return 0
    print(f"{len(btf)} types, parsed in {(t1 - t0) * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
