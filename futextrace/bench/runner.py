"""Run the futex-hash workload (built-in or perf) and normalise its result.

`run()` is the one entry point for `bench` and `sweep`. A traced run goes
through futextrace.record.recorder.record_command (`trace_command()`).
"""
from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import tempfile
from dataclasses import asdict, dataclass

from futextrace.bench import perfbench
from futextrace.errors import EnvironmentProblem, KernelRefused, TargetError, UsageError
from futextrace.kernel import errnos
from futextrace.record.recorder import RecordOptions, record_command
from futextrace.workload import workload_path

AUTO, GLOBAL = -1, 0
MAX_BUCKETS = 1 << 31   # SET_SLOTS takes an unsigned int; bigger values would be truncated


@dataclass
class WorkloadOptions:
    threads: int | None = None      # None: one per online CPU, like perf
    futexes: int = 1024
    runtime: float = 10.0
    buckets: int = AUTO             # AUTO, GLOBAL or a power of two >= 2
    shared: bool = False
    mlockall: bool = False
    iterations: int | None = None   # builtin only: exact passes instead of runtime

    def validate(self) -> "WorkloadOptions":
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"threads must be at least 1, got {self.threads}")
        if self.futexes < 1:
            raise UsageError(f"futexes must be at least 1, got {self.futexes}")
        if not self.runtime > 0:
            raise UsageError(f"runtime must be a positive number of seconds, got {self.runtime:g}")
        if self.iterations is not None and self.iterations < 1:
            raise UsageError(f"iterations must be at least 1, got {self.iterations}")
        check_buckets(self.buckets)
        return self


def check_buckets(n: int) -> int:
    if n in (AUTO, GLOBAL):
        return n
    if n < 2 or n & (n - 1):
        raise UsageError(f"buckets must be a power of two >= 2 (or auto/global), got {n}")
    if n > MAX_BUCKETS:
        raise UsageError(f"buckets must be at most {MAX_BUCKETS} (2^31), got {n}")
    return n


def parse_buckets(text: str) -> int:
    """'auto' -> AUTO, 'global' -> GLOBAL, '64' / '0x40' / '2^6' -> 64 (validated)."""
    t = text.strip().lower()
    if t in ("auto", "-1"):
        return AUTO
    if t == "global":
        return GLOBAL
    try:
        n = 2 ** int(t[2:]) if t.startswith("2^") else int(t, 0)
    except ValueError:
        raise UsageError(f"buckets: expected a power of two, 'auto' or 'global', got '{text}'") \
            from None
    return check_buckets(n)


def buckets_label(n: int) -> str:
    return {AUTO: "auto", GLOBAL: "global"}.get(n, str(n))


# ---------------------------------------------------------------- argv per runner

def builtin_argv(o: WorkloadOptions, addrs: bool = False, wait_fd: int | None = None) -> list[str]:
    """argv of the built-in workload. `addrs`: report every futex address.
    `wait_fd`: the workload blocks reading this fd (one byte or EOF) before its
    prctl and threads, so a tracer that starts it can attach first (pass_fds)."""
    argv = [str(workload_path()), "-f", str(o.futexes), "-b", str(o.buckets)]
    if o.threads is not None:
        argv += ["-t", str(o.threads)]
    argv += ["-n", str(o.iterations)] if o.iterations else ["-r", repr(float(o.runtime))]
    if o.shared:
        argv.append("-S")
    if o.mlockall:
        argv.append("-m")
    if addrs:
        argv.append("--addrs")
    if wait_fd is not None:
        argv += ["--wait-fd", str(wait_fd)]
    return argv


def perf_argv(o: WorkloadOptions) -> list[str]:
    if o.iterations:
        raise UsageError("perf has no iteration count; use --runtime")
    threads = o.threads if o.threads is not None else os.sysconf("SC_NPROCESSORS_ONLN")
    return perfbench.perf_argv(threads, o.futexes, o.runtime, o.buckets, o.shared, o.mlockall)


# ---------------------------------------------------------------- parse per runner

def parse_builtin(rc: int, out: str, err: str) -> dict:
    err_line = (err.strip().splitlines() or [""])[-1].removeprefix("futexbench: error: ")
    if rc == 3:
        m = re.search(r"SET_SLOTS (-?\d+) failed: errno=(\d+)", err_line)
        if m:
            n, e = int(m[1]), int(m[2])
            hint = {errno.EINVAL: "not a power of two >= 2", errno.ENOMEM: "too many buckets for kernel memory",
                    errno.EBUSY: "the process already switched to the global hash"}.get(e, "")
            raise KernelRefused(f"the kernel refused {n} hash buckets: -{errnos.name(e)}"
                                + (f" ({hint})" if hint else ""))
        raise KernelRefused(f"workload: {err_line}")
    if rc == 2:
        raise UsageError(f"workload: {err_line}")
    if rc != 0:
        raise TargetError(f"workload failed (exit {rc}): {err_line or 'no message'}")
    try:
        raw = json.loads(out)
    except json.JSONDecodeError:
        raise TargetError("workload printed no result (expected one JSON object)") from None
    slots = raw["slots_after"]
    return {"runner": "builtin", "threads": raw["threads"], "futexes": raw["futexes"],
            "shared": raw["shared"], "runtime": raw["runtime"],
            "buckets_requested": raw["buckets_requested"], "slots": slots,
            "hashing": _hashing(raw["buckets_requested"], slots),
            "avg_ops_per_sec": raw["avg_ops_per_sec"], "stddev_pct": raw["stddev_pct"],
            "total_ops": raw["total_ops"], "per_thread": raw["per_thread"], "pid": raw["pid"],
            "raw": raw}


def parse_perf(rc: int, out: str, err: str, o: WorkloadOptions) -> dict:
    text = out + "\n" + err
    p = perfbench.check_result(perfbench.parse_output(text), rc, text)
    # perf 6.1 prints no "Futex hashing" line: the slots in use are then unknown.
    return {"runner": "perf", "threads": p["threads"], "futexes": p["futexes"],
            "shared": p["shared"], "runtime": p["total_secs"], "buckets_requested": o.buckets,
            "slots": p["slots"], "hashing": p["hashing"] or "unknown",
            "avg_ops_per_sec": float(p["avg_ops_per_sec"]), "stddev_pct": p["stddev_pct"],
            "total_ops": None, "per_thread": p["per_thread"], "pid": p["pid"], "raw": p}


def _hashing(requested: int, slots: int) -> str:
    if slots <= 0:
        return "global"
    return "auto" if requested == AUTO else "custom"


# ---------------------------------------------------------------- running

def run(o: WorkloadOptions, runner: str = "builtin", trace: bool = False,
        record_options: dict | None = None) -> dict:
    """Run once. Returns {"options", "result", "recording" (or None), "notes" [str]}."""
    o.validate()
    argv = builtin_argv(o) if runner == "builtin" else perf_argv(o)
    notes: list[str] = []   # the schema's place for remarks about the run; none today
    recording = None
    if trace:
        rc, out, err, recording = trace_command(argv, record_options or {})
    else:
        rc, out, err = _run_plain(argv)
    result = parse_builtin(rc, out, err) if runner == "builtin" else parse_perf(rc, out, err, o)
    return {"options": asdict(o), "result": result, "recording": recording, "notes": notes}


def _run_plain(argv: list[str]) -> tuple[int, str, str]:
    try:
        res = subprocess.run(argv, capture_output=True, text=True)
    except OSError as e:
        raise EnvironmentProblem(f"cannot run {argv[0]}: {e.strerror}") from None
    return res.returncode, res.stdout, res.stderr


def trace_command(argv: list[str], options) -> tuple[int, str, str, dict]:
    """Run argv under record_command: it starts the command, traces it to the
    end and returns a recording. The command is wrapped in
    `sh -c 'exec ... >out 2>err'` so its own output reaches us whatever the
    recorder does with stdio; `exec` keeps the traced PID.
    Returns (returncode, stdout, stderr, recording)."""
    # record_command traces a copy with the child's PID added: options are only read.
    opts = RecordOptions(**options) if isinstance(options, dict) else options
    with tempfile.TemporaryDirectory(prefix="futextrace-bench-") as tmp:
        out_f, err_f = os.path.join(tmp, "out"), os.path.join(tmp, "err")
        wrapped = ["/bin/sh", "-c", 'o=$1 e=$2; shift 2; exec "$@" >"$o" 2>"$e"', "sh",
                   out_f, err_f, *argv]
        recording = record_command(wrapped, opts)
        out = _read(out_f)
        err = _read(err_f)
    # Always set: record_command reaps the command, or kills it (-9) when tracing stops first.
    rc = recording["command"]["exit_status"]
    return rc, out, err, recording


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""
