"""A warm start runs no compiler (issue 44). With its program in the cache,
`record` and `serve` attach with no page of libLLVM, libclang or BCC's
compiling libbcc.so mapped: read from their own /proc/PID/maps while they are
attached and once more just before they stop. From an empty cache the same
start takes the cold path: BCC compiles (the compiler is mapped, which also
shows that the check sees it where it is).

On the host the cold run starts from an empty cache of the test's own; in a
VM guest the cache is the guest's (empty at its boot: the guest's first
compile of each variant is a cold start), so the first run there may already
be warm, and the second must be. A warm start also takes the big maps its
command line began creating before its imports (loading/earlymaps.py).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.host import FT, in_vm_guest, kprobes_missing, limit, require_fentry
from tests.helpers.serve import Exporter, http_get

pytestmark = pytest.mark.root

COMPILER = re.compile(r"/(libLLVM[^/]*|libclang[^/]*|libbcc\.so[^/]*)$")


def compiler_mapped(pid: int) -> set[str]:
    """The compiler's libraries (LLVM, clang, libbcc.so: not libbcc_bpf.so) in the process's maps."""
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return set()
    return {m.group(1) for line in lines if (m := COMPILER.search(line.split()[-1] if line.split() else ""))}


def record_attached(tmp: Path, cache: Path, method: str) -> tuple[dict, set[str]]:
    """`record` of the built-in workload running 3 s: its recording, and the
    compiler libraries its maps held once it said it was tracing and near its end."""
    from futextrace.workload.build import workload_path
    out = tmp / f"rec-{time.monotonic_ns()}.json"
    env = {**os.environ, "FUTEXTRACE_CACHE": str(cache)}
    env.pop("FUTEXTRACE_NO_PROG_CACHE", None)
    p = subprocess.Popen([*FT, "record", "--method", method, "-q", "--json", str(out), "--",
                          str(workload_path()), "-t", "2", "-r", "3"],
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        said = []      # notes may come first (a slow start under TCG, a probe left out)
        while not (said and said[-1].startswith("Tracing")):
            said.append(p.stderr.readline())
            assert said[-1], "".join(said) + p.stderr.read()
        seen = compiler_mapped(p.pid)
        time.sleep(1.5)
        seen |= compiler_mapped(p.pid)
        assert p.wait(timeout=limit(120)) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
            p.wait(timeout=60)
    return json.loads(out.read_text()), seen


METHODS = [pytest.param("tracepoint", marks=pytest.mark.skipif(
    in_vm_guest(), reason="the build machines' kernel runs the tracepoint method's")),
    pytest.param("kprobe", marks=pytest.mark.skipif(bool(kprobes_missing()), reason=kprobes_missing() or "")),
    "fentry"]


def cache_for(tmp_path: Path) -> Path:
    return Path(os.environ["FUTEXTRACE_CACHE"]) if in_vm_guest() else tmp_path / "cache"


@pytest.mark.parametrize("method", METHODS)
def test_record_cold_then_warm(tmp_path, method):
    if method == "fentry":
        require_fentry()    # its programs: loaded by futextrace itself from the cached instructions
    cache = cache_for(tmp_path)
    rec, seen = record_attached(tmp_path, cache, method)
    if not in_vm_guest():
        assert rec["compile_cache"] == "miss"
    if rec["compile_cache"] == "miss":
        assert any(lib.startswith("libLLVM") for lib in seen), seen   # the cold path compiled
    rec, seen = record_attached(tmp_path, cache, method)
    assert rec["compile_cache"] == "hit"
    assert seen == set(), f"a warm start mapped the compiler: {seen}"
    # The first start left its big maps' description (earlymaps.remember): the
    # second began creating futexes and buckets before its imports and used them.
    assert rec["early_maps"] >= 2, rec["early_maps"]
    assert rec["totals"]["lookups"] > 0 and rec["method"]["name"] == method


def test_serve_cold_then_warm(tmp_path, monkeypatch):
    """serve, started twice on one cache: the second start maps no compiler
    once it answers a scrape."""
    monkeypatch.setenv("FUTEXTRACE_CACHE", str(cache_for(tmp_path)))
    monkeypatch.delenv("FUTEXTRACE_NO_PROG_CACHE", raising=False)
    for start in ("cold", "warm"):
        exporter = Exporter(tmp_path)      # waits for its first answer
        try:
            assert "futextrace_info" in (http_get(exporter.url) or "")
            seen = compiler_mapped(exporter.proc.pid)
        finally:
            assert exporter.stop() == 0
        if start == "cold" and not in_vm_guest():
            assert any(lib.startswith("libLLVM") for lib in seen), seen
    assert seen == set(), f"a warm serve mapped the compiler: {seen}"
