#!/usr/bin/env python3
"""futextrace's call sites against an independent stack, taken at the same
time: bpftrace's `ustack` at every futex(2) call of the process, per address.

Starts `futextrace record -p PID -d S` and bpftrace (`@[args->uaddr,
ustack(perf, DEPTH)] = count()` on syscalls:sys_enter_futex for PID) at the
same moment. For every futex futextrace names with a first-lookup stack, its
trusted frames must be the first frames of one of the stacks bpftrace saw on
that address (the same addresses: both walk the same frame pointers), and
the function futextrace names for each frame must be the one bpftrace's
symbolizer names (where bpftrace names one). Prints one line per futex and a
summary; exit status 1 when a futex disagrees.

    sudo .venv/bin/python benchmarks/call_sites_vs_bpftrace.py -p $(pidof mariadbd) -d 10
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEPTH = 6
FRAME = re.compile(r"^\s*([0-9a-f]+)\s+(\S+?)(?:\+(\d+))?\s+\((.*)\)\s*$")


def bpftrace_stacks(out: str) -> dict[int, list[list[tuple[int, str | None]]]]:
    """uaddr -> its stacks [[(ip, function or None, offset)]] from bpftrace's JSON map."""
    got: dict[int, list] = {}
    for line in out.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if doc.get("type") != "map":
            continue
        for key in next(iter(doc["data"].values())):
            uaddr, _, stack = key.partition(",")
            frames = []
            for fl in stack.splitlines():
                m = FRAME.match(fl)
                if m:
                    sym = None if m.group(2).startswith("0x") or m.group(2) == "[unknown]" else m.group(2)
                    frames.append((int(m.group(1), 16), sym, int(m.group(3) or 0)))
            if frames:
                got.setdefault(int(uaddr, 0), []).append(frames)
    return got


def compare(names: dict, theirs: dict) -> tuple[int, int, int]:
    """(agree, disagree, not seen by bpftrace), one line printed per futex."""
    agree = bad = unseen = 0
    for addr, n in names.items():
        first = (n.get("call_sites") or {}).get("first_lookup")
        if not first:
            continue
        ours = [f for f in first["frames"][:min(first["trusted_frames"], DEPTH)]]
        stacks = theirs.get(int(addr, 16))
        if not stacks:
            unseen += 1
            continue
        match = next((s for s in stacks if [fr[0] for fr in s[:len(ours)]] == [int(f["ip"], 16) for f in ours]),
                     None)
        # The same function: the same name, or an alias at the same start (libc's
        # __GI___lll_lock_wait is __lll_lock_wait): the same ip at the same offset.
        names_ok = match is not None and all(sym is None or f["function"] is None or sym == f["function"]
                                             or off == f["offset"] for (_, sym, off), f in zip(match, ours))
        ok = match is not None and names_ok
        agree += ok
        bad += not ok
        shown = " ← ".join(f"{f['function'] or f['ip']}+{(f['offset'] or 0):#x}" for f in ours)
        theirs_shown = " ← ".join(f"{s or hex(ip)}+{off:#x}" for ip, s, off in (match or stacks[0])[:len(ours)])
        print(f"{'agree   ' if ok else 'DISAGREE'} {addr} {n.get('symbol') or n['kind']}: futextrace {shown} | "
              f"bpftrace {theirs_shown}")
    return agree, bad, unseen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-p", "--pid", type=int, required=True)
    ap.add_argument("-d", "--duration", type=float, default=10)
    a = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("bpftrace"):
        sys.exit("call_sites_vs_bpftrace.py: needs root and bpftrace (apt-get install bpftrace)")
    prog = (f"tracepoint:syscalls:sys_enter_futex /pid == {a.pid}/ "
            f"{{ @s[args->uaddr, ustack(perf, {DEPTH})] = count(); }} "
            f"interval:s:{int(a.duration)} {{ exit(); }}")
    with tempfile.TemporaryDirectory() as d:
        rec_path = Path(d) / "rec.json"
        bt = subprocess.Popen(["bpftrace", "-f", "json", "-e", prog], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        time.sleep(2)      # bpftrace attaches in ~1-2 s; futextrace's window is then inside bpftrace's
        ft = subprocess.run([sys.executable, "-m", "futextrace.cli", "record", "-q", "-p", str(a.pid),
                             "-d", str(a.duration - 4), "--json", str(rec_path)],
                            cwd=REPO, capture_output=True, text=True)
        out, err = bt.communicate(timeout=a.duration + 300)   # it symbolizes every stack at exit
        if ft.returncode != 0:
            sys.exit(f"futextrace failed: {ft.stderr.strip()}")
        rec = json.loads(rec_path.read_text())
    proc = next(p for p in rec["processes"] if p["pid"] == a.pid)
    theirs = bpftrace_stacks(out)
    if not theirs:
        sys.exit(f"bpftrace printed no stack: {err.strip()[:300]}")
    agree, bad, unseen = compare(proc.get("futex_names", {}), theirs)
    print(f"# {agree} futexes agree, {bad} disagree, {unseen} not seen by bpftrace "
          f"(its window starts 2 s earlier and ends 2 s later; futex2 calls are not in its probe)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
