"""Recordings of the test workloads and their checks against the tests' own jhash2
(tests/host/test_record.py, test_progcache.py, test_hot_path_detach.py)."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from futextrace.workload.build import workload_path
from tests.helpers.fidelity_ref import private_bucket  # the test's own jhash2, not futextrace's
from tests.helpers.host import (
    FT,
    limit,
    new_programs_left,
    prog_ids,
)


def record(tmp_path, *args, env=None) -> tuple[dict, subprocess.CompletedProcess]:
    out = tmp_path / "rec.json"
    before = prog_ids()
    p = subprocess.run([*FT, "record", "-q", "--json", str(out), *args],
                       capture_output=True, text=True, timeout=limit(600),
                       env=None if env is None else {**os.environ, **env})
    assert new_programs_left(before) == set(), "BPF programs left attached"
    assert "Traceback" not in p.stderr
    return (json.loads(out.read_text()) if out.exists() and out.stat().st_size else {}), p


@dataclass
class Shared:
    """One recording of several workloads; `results[name]` is a workload's own JSON
    (futexbench's result, or {"pid", "steps"} of a scenario)."""
    rec: dict
    proc: subprocess.CompletedProcess
    results: dict = field(default_factory=dict)


def record_workloads(tmp_path: Path, record_args: list[str], workloads: dict[str, list[str]],
                     env=None) -> Shared:
    """`futextrace record ARGS -- sh -c SCRIPT`, SCRIPT running each workload in turn.
    A scenario (whose lines carry no PID) writes its PID first, then execs."""
    lines = ["set -e"]
    for name, argv in workloads.items():
        out = tmp_path / name
        if "scenario" in Path(argv[0]).name:
            lines.append(f"sh -c 'echo $$ > {out}.pid; exec {shlex.join(argv)} -o {out}.steps' >/dev/null")
        else:
            lines.append(f"{shlex.join(argv)} > {out}.json")
    rec, p = record(tmp_path, *record_args, "--", "sh", "-c", "\n".join(lines), env=env)
    shared = Shared(rec, p)
    for name in workloads:
        out = tmp_path / name
        if out.with_suffix(".json").exists():
            shared.results[name] = json.loads(out.with_suffix(".json").read_text().strip().splitlines()[-1])
        elif out.with_suffix(".pid").exists():
            shared.results[name] = {
                "pid": int(out.with_suffix(".pid").read_text()),
                "steps": [json.loads(ln) for ln in out.with_suffix(".steps").read_text().splitlines()]}
    return shared


def ran(shared: Shared, name: str) -> dict:
    """The shared recording worked and workload `name` ran to its end in it."""
    assert shared.proc.returncode == 0, shared.proc.stderr
    assert shared.rec["command"]["exit_status"] == 0, shared.rec["command"]
    assert name in shared.results, (name, shared.rec["command"])
    return shared.results[name]


def private_hash_of(rec: dict, pid: int, buckets: int) -> dict:
    proc = next(p for p in rec["processes"] if p["pid"] == pid)
    return next(h for h in proc["hashes"] if h["kind"] == "private" and h["buckets"] == buckets)


def check_counts(rec: dict, wl: dict, buckets: int, iters: int) -> int:
    """Per-bucket counts equal an independent computation: the kernel's jhash2
    in Python over the workload's own futex addresses, `iters` lookups each.
    libc may add a few lookups of its own (thread join) on other addresses."""
    addrs = [int(a, 16) for t in wl["per_thread"] for a in t["addrs"]]
    expected = Counter()
    for a in addrs:     # one hash per address: pure-Python jhash2 is slow under TCG
        expected[private_bucket(a, buckets - 1)] += iters
    seen = {int(k): v for k, v in private_hash_of(rec, wl["pid"], buckets)["bucket_counts"].items()}
    # glibc's start barrier is the process's only other private futex: its
    # calls (a number that depends on scheduling) may share those buckets.
    barrier = {private_bucket(int(a, 16), buckets - 1) for a in wl["barrier_words"]}
    # A probe run the kernel skipped is reported, not hidden: allow exactly
    # those (each futex(2) call here hashes one key).
    missed = rec["totals"]["missed_runs"]
    for bucket, n in expected.items():
        extra = seen.get(bucket, 0) - n
        assert extra >= -missed and (extra <= 0 or bucket in barrier), (bucket, n, seen.get(bucket), missed)
    lost = sum(expected.values()) - sum(min(seen.get(b, 0), n) for b, n in expected.items())
    assert lost <= missed, (lost, missed)
    return lost


# Exact counts: workload arguments, and the prctl-sized hashes they are checked in.
ITERS, THREADS, NFUTEX = 997, 2, 23


def exact_counts(buckets: int) -> list[str]:
    return [str(workload_path()), "-t", str(THREADS), "-f", str(NFUTEX), "-n", str(ITERS),
            "-b", str(buckets), "--addrs"]
