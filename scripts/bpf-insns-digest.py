#!/usr/bin/env python3
"""Print a sha256 of every compiled BPF function, for every method and the
main option variants: a refactoring of bpf/ that must not change the code
compares this output before and after.

    scripts/bpf-insns-digest.py [--only METHOD] > digests.txt

Compiles with BCC (root: BCC creates the maps) without loading or attaching
anything. Map references (ld_imm64, src_reg 1) are written as the map's
name, not its fd, so the digests do not depend on fd numbering. Each variant
is also compiled with -DFT_MAPS_ONLY (what a cached program is replayed
with, futextrace/loading/progcache.py): its maps must be the full text's.
The tree measured is the one this script sits in. --stack-blind also
writes every stack offset (r10-relative loads, stores and `rX = r10; rX +=
imm` address computations) as 0: two builds that differ only in their stack
frame's layout then have the same digests.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from futextrace.kernel.headers import bcc_environment  # noqa: E402
from futextrace.loading.loader import Filters, cflags_for, source_for  # noqa: E402
from futextrace.loading.progcache import tables  # noqa: E402

# (name, Filters keyword arguments, extra cflags) per method.
VARIANTS = {
    "tracepoint": [
        ("plain", {}, []),
        ("tp-btf-only", {}, ["-DTP_BTF_ONLY"]),
        ("exact-prctl", {}, ["-DPRCTL_EXIT"]),
        ("pids", {"pids": [1]}, []),
        ("pids-no-follow", {"pids": [1], "follow_forks": False}, []),
        ("tids", {"tids": [1]}, []),
        ("cgroup", {"cgroup_ids": [1]}, []),
        ("comm", {"comms": ["x"]}, []),
        ("comm-live", {"comms": ["x"], "tgid_map": True}, []),
        ("comm-at-exec", {"tgid_map": True, "exec_comms": ["x"]}, ["-DTP_BTF_ONLY"]),
        ("pids-tids-prctl", {"pids": [1], "tids": [1]}, ["-DPRCTL_EXIT", "-DTP_BTF_ONLY"]),
        ("call-sites", {}, ["-DCALL_SITES"]),
        ("call-sites-comm", {"comms": ["x"]}, ["-DCALL_SITES", "-DTP_BTF_ONLY"]),
    ],
    "kprobe": [
        ("plain", {}, []),
        ("pids", {"pids": [1]}, []),
        ("comm-at-exec", {"tgid_map": True, "exec_comms": ["x"]}, []),
        ("hash-returns-ref", {}, ["-UBUCKET_HAS_PRIV", "-DHASH_RETURNS_REF"]),
        ("bucket-has-priv", {}, ["-UHASH_RETURNS_REF", "-DBUCKET_HAS_PRIV", "-DOFF_HB_PRIV=8"]),
        ("call-sites", {}, ["-DCALL_SITES"]),
    ],
    # The fentry method's kernels (6.17-7.1) have hb->priv: its offset, made up where absent.
    "fentry": [
        ("plain", {}, ["-UHASH_RETURNS_REF", "-DBUCKET_HAS_PRIV", "-DOFF_HB_PRIV=8"]),
        ("comm", {"comms": ["x"]}, ["-UHASH_RETURNS_REF", "-DBUCKET_HAS_PRIV", "-DOFF_HB_PRIV=8"]),
        ("hash-put", {}, ["-UHASH_RETURNS_REF", "-DBUCKET_HAS_PRIV", "-DOFF_HB_PRIV=8", "-DFENTRY_HASH_PUT"]),
        ("call-sites", {}, ["-UHASH_RETURNS_REF", "-DBUCKET_HAS_PRIV", "-DOFF_HB_PRIV=8", "-DCALL_SITES"]),
    ],
}


def normalized(insns: bytes, fd_names: dict[int, str], stack_blind: bool = False) -> bytes:
    """The instructions with each map fd replaced by its map's name."""
    out = bytearray()
    frame_reg = -1                  # the register just set to r10, if any
    for k in range(0, len(insns) - 7, 8):
        code, regs, off, imm = struct.unpack_from("<BBhi", insns, k)
        dst, src = regs & 15, regs >> 4
        if stack_blind and (code & 7) in (1, 2, 3) and 10 in (dst, src):   # LDX, ST, STX on the frame
            out += struct.pack("<BBhi", code, regs, 0, imm)
        elif stack_blind and code == 0x07 and dst == frame_reg:                # rX += imm after rX = r10
            out += struct.pack("<BBhi", code, regs, off, 0)
        elif code == 0x18 and src == 1 and imm in fd_names:
            out += struct.pack("<BBh", code, regs, off) + b"map:" + fd_names[imm].encode() + b";"
        else:
            out += insns[k:k + 8]
        frame_reg = dst if code == 0xbf and src == 10 else -1
    return bytes(out)


def digests(BPF, text: str, flags: list[str], stack_blind: bool = False) -> tuple[dict[str, str], dict]:
    """sha256 of each function's instructions, and the maps' descriptions."""
    from bcc import lib
    b = BPF(text=text.encode(), cflags=flags)
    try:
        described = tables(b.module)
        fd_names = {lib.bpf_table_fd(b.module, n.encode()): n for n in described}
        funcs = {}
        for i in range(lib.bpf_num_functions(b.module)):
            name = lib.bpf_function_name(b.module, i).decode()
            funcs[name] = hashlib.sha256(normalized(b.dump_func(name.encode()), fd_names, stack_blind)).hexdigest()[:16]
        return funcs, described
    finally:
        b.cleanup()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=sorted(VARIANTS), help="one method's variants")
    ap.add_argument("--stack-blind", action="store_true", help="stack offsets written as 0")
    ap.add_argument("--maps", action="store_true", help="print each map's description too")
    a = ap.parse_args()
    from futextrace.kernel import model as kmodel
    bcc_environment()
    from bcc import BPF
    model = kmodel.load()
    status = 0
    for method, variants in VARIANTS.items():
        if a.only and method != a.only:
            continue
        text = source_for(method)
        for name, fkw, extra in variants:
            sites = "-DCALL_SITES" in extra       # with the call-site map sized as record sizes it
            flags = cflags_for(model, method, Filters(**fkw), 4096, 4, sites) + [x for x in extra if x != "-DCALL_SITES"]
            funcs, described = digests(BPF, text, flags, a.stack_blind)
            _, maps_only = digests(BPF, text, flags + ["-DFT_MAPS_ONLY"])
            maps = hashlib.sha256(json.dumps(sorted(described.items())).encode()).hexdigest()[:16]
            same = "same" if maps_only == described else "DIFFERENT"
            status |= maps_only != described
            print(f"{method}/{name} maps {maps} (FT_MAPS_ONLY: {same})")
            for m in sorted(described) if a.maps else ():
                print(f"{method}/{name} map {m} {json.dumps(described[m])}")
            for fn in sorted(funcs):
                print(f"{method}/{name} {fn} {funcs[fn]}")
            sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
