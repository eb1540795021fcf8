"""Run the system's `perf bench futex hash` and parse what it prints.

Output format (tools/perf/bench/futex-hash.c, futex.c; facts §6):
  Run summary [PID 123]: 2 threads, each operating on 1024 [private] futexes for 1 secs.
  [thread  0] futexes: 0x55... ... 0x55... [ 3618672 ops/sec ]
  Averaged 3618672 operations/sec (+- 0.00%), total secs = 1
  Futex hashing: global hash | 64 hash buckets | auto resized to 16 buckets   (6.16+ only)
"""
from __future__ import annotations

import functools
import re
import shutil
import subprocess

from futextrace.errors import EnvironmentProblem, KernelRefused, UsageError

_SUMMARY = re.compile(r"Run summary \[PID (\d+)\]: (\d+) threads, each operating on (\d+) "
                      r"\[(shared|private)\] futexes for (\d+) secs")
_THREAD = re.compile(r"\[thread\s+(\d+)\] futex(?:es)?: (0x[0-9a-f]+|\(nil\))"
                     r"(?: \.\.\. (0x[0-9a-f]+))? \[ (\d+) ops/sec \]")
_AVERAGE = re.compile(r"Averaged (\d+) operations/sec \(\+- ([0-9.]+)%\), total secs = (\d+)")
_HASHING = re.compile(r"Futex hashing: (?:(global hash)|(\d+) hash buckets(?: \((immutable)\))?"
                      r"|auto resized to (\d+) buckets)")
_SET_FAILED = re.compile(r"Requesting (-?\d+) hash buckets failed: (-?\d+)/(.*)")


def parse_output(text: str) -> dict:
    """Parse perf's stdout+stderr into the fields futextrace reports.

    Missing parts are None (perf -s drops the per-thread lines; perf before 6.16
    prints no "Futex hashing" line)."""
    out: dict = {"pid": None, "threads": None, "futexes": None, "shared": None,
                 "runtime": None, "per_thread": [], "avg_ops_per_sec": None,
                 "stddev_pct": None, "total_secs": None, "hashing": None, "slots": None,
                 "immutable": False, "error": None}
    if m := _SUMMARY.search(text):
        out.update(pid=int(m[1]), threads=int(m[2]), futexes=int(m[3]),
                   shared=m[4] == "shared", runtime=int(m[5]))
    for m in _THREAD.finditer(text):
        out["per_thread"].append({"thread": int(m[1]), "first_addr": m[2],
                                  "last_addr": m[3] or m[2], "ops_per_sec": int(m[4])})
    if m := _AVERAGE.search(text):
        out.update(avg_ops_per_sec=int(m[1]), stddev_pct=float(m[2]), total_secs=int(m[3]))
    if m := _HASHING.search(text):
        if m[1]:
            out.update(hashing="global", slots=0)
        elif m[2]:
            out.update(hashing="custom", slots=int(m[2]), immutable=bool(m[3]))
        else:
            out.update(hashing="auto", slots=int(m[4]))
    if m := _SET_FAILED.search(text):
        out["error"] = {"buckets": int(m[1]), "result": int(m[2]), "message": m[3].strip()}
    return out


def perf_binary() -> str:
    path = shutil.which("perf")
    if not path:
        raise EnvironmentProblem("no 'perf' in PATH; install linux-perf or use --runner builtin")
    return path


@functools.lru_cache(maxsize=None)
def supported_options(perf: str) -> frozenset[str]:
    """Short options this perf's `bench futex hash` knows (6.1 lacks -b)."""
    res = subprocess.run([perf, "bench", "futex", "hash", "-h"], capture_output=True, text=True)
    return frozenset(re.findall(r"^\s+-(\w), --", res.stdout + res.stderr, re.M))


def perf_argv(threads: int, futexes: int, runtime: float, buckets: int = -1,
              shared: bool = False, mlockall: bool = False, silent: bool = False,
              perf: str | None = None) -> list[str]:
    """argv for `perf bench futex hash`; buckets -1 = automatic, 0 = global."""
    perf = perf or perf_binary()
    if runtime != int(runtime):
        raise UsageError(f"perf takes whole seconds as runtime, got {runtime:g}")
    argv = [perf, "bench", "futex", "hash", "-t", str(threads), "-f", str(futexes),
            "-r", str(int(runtime))]
    if buckets != -1:
        if "b" not in supported_options(perf):
            raise UsageError("this perf has no -b/--buckets (added in perf 6.16); "
                             "use --runner builtin to set the bucket count")
        argv += ["-b", str(buckets)]
    if shared:
        argv.append("-S")
    if mlockall:
        argv.append("-m")
    if silent:
        argv.append("-s")
    return argv


def check_result(parsed: dict, returncode: int, text: str) -> dict:
    """Raise a one-line error if perf failed; otherwise return `parsed`."""
    if parsed["error"]:
        e = parsed["error"]
        raise KernelRefused(f"perf: requesting {e['buckets']} hash buckets failed: "
                            f"{e['result']} ({e['message']})")
    if returncode != 0 or parsed["avg_ops_per_sec"] is None:
        last = (text.strip().splitlines() or ["no output"])[-1]
        raise EnvironmentProblem(f"perf bench futex hash failed (exit {returncode}): {last}")
    return parsed
