#!/usr/bin/env python3
"""How long `futextrace record -- true` takes to attach, phase by phase.

Runs `futextrace record -q --json F -- true` N times per condition and prints
medians of: the wall time from starting the process to the "Tracing..." line
on its stderr (measured here), the CPU time the process had used by then
(user + system, a guide to the idle figure when other work shares the
machine), `attach_s` (the recording's own figure, from the process's start)
and each phase in `attach_phases_s` (startup: interpreter and imports; model:
BTF/kallsyms/clone probe or the per-boot cache; compile: BCC, maps; attach:
program load and attach), and where the instructions came from
(`compile_cache`). Conditions, in one run:

  idle          the model cached for this boot and the program in the
                program cache (every run after the first)
  full-compile  as idle, with FUTEXTRACE_NO_PROG_CACHE=1: BCC compiles the
                whole program, as on the first run with new flags
  cold          a fresh cache directory each run: the model is built again
                and the program compiled in full (the header tree and the
                compiled helpers are shared, not rebuilt): a machine's first run
  busy          as idle, with one CPU kept busy by a spinning process started here

Target (issue 13): attached within 1.5 s on an idle 2-CPU machine.

    sudo .venv/bin/python benchmarks/attach.py -n 5
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = [sys.executable, "-m", "futextrace.cli"]
ROOT = Path(__file__).resolve().parents[1]
PHASES = ("startup", "model", "compile", "attach")


def one_run(env: dict) -> dict:
    """Wall time to the "Tracing..." line, and the recording's own figures."""
    with tempfile.TemporaryDirectory(prefix="futextrace-attach-") as tmp:
        out = Path(tmp) / "rec.json"
        t0 = time.monotonic()
        p = subprocess.Popen([*CLI, "record", "-q", "--json", str(out), "--", "true"],
                             stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        first = p.stderr.readline()
        seen = time.monotonic() - t0
        cpu = cpu_seconds(p.pid)
        rest = p.stderr.read()
        if p.wait() != 0 or not first.startswith("Tracing"):
            raise SystemExit(f"attach.py: futextrace failed: {first}{rest}")
        rec = json.loads(out.read_text())
    return {"wall": seen, "cpu": cpu, "attach_s": rec["attach_s"], **rec["attach_phases_s"],
            "cache": rec["compile_cache"]}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` so far (its own threads, not its children):
    on a machine busy with other work, a better guide to the idle wall time."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cold_env(base: dict, shared_cache: Path, tmp: Path) -> dict:
    """A cache directory without the model, sharing the headers and the built helpers."""
    for name in ("headers", "bin"):
        if (shared_cache / name).exists():
            (tmp / name).symlink_to(shared_cache / name)
    return {**base, "FUTEXTRACE_CACHE": str(tmp)}


def condition(name: str, runs: int, env: dict, fresh_cache: bool) -> dict[str, float]:
    shared = Path(env.get("FUTEXTRACE_CACHE", "/var/cache/futextrace"))
    results = []
    for _ in range(runs):
        if fresh_cache:
            with tempfile.TemporaryDirectory(prefix="futextrace-cache-") as tmp:
                results.append(one_run(cold_env(env, shared, Path(tmp))))
        else:
            results.append(one_run(env))
    medians = {k: statistics.median(r[k] for r in results) for k in results[0] if k != "cache"}
    return {**medians, "cache": "/".join(sorted({r["cache"] for r in results}))}


def busy_cpu() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--runs", type=int, default=5, help="runs per condition (median shown)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("attach.py: run as root (futextrace record needs it)", file=sys.stderr)
        return 1
    env = dict(os.environ)
    one_run(env)   # warm the model cache and the page cache: not counted
    rows = [("idle", condition("idle", a.runs, env, False)),
            ("full-compile", condition("full-compile", a.runs, {**env, "FUTEXTRACE_NO_PROG_CACHE": "1"}, False)),
            ("cold", condition("cold", a.runs, env, True))]
    spinner = busy_cpu()
    try:
        rows.append(("busy (1 CPU)", condition("busy", a.runs, env, False)))
    finally:
        spinner.kill()
        spinner.wait()
    print(f"futextrace record -- true: medians of {a.runs} runs, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} at the end")
    print(f"{'condition':<14}{'to Tracing':>11}{'CPU':>8}{'attach_s':>10}"
          + "".join(f"{p:>9}" for p in PHASES) + "  program")
    for name, m in rows:
        print(f"{name:<14}{m['wall']:>10.3f}s{m['cpu']:>7.2f}s{m['attach_s']:>9.3f}s"
              + "".join(f"{m[p]:>8.3f}s" for p in PHASES) + f"  {m['cache']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
