"""benchmarks/futexset.py's hot_path_detached() (Program.detach_counting_hook and
reattach_counting_hook), with which it runs untraced
and traced workloads side by side with one loaded program: while detached, a
workload's futex calls are not counted; attached again, the next workload's
calls are counted exactly, and what was counted before is kept."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
              pytest.mark.skipif(not Path("/sys/kernel/btf/vmlinux").exists(), reason="needs BTF")]

PASSES, FUTEXES = 200, 16        # futexbench -n: exactly PASSES * FUTEXES calls per thread


def run_bench() -> dict:
    """futexbench's report of itself: pid, hash size, futex addresses (each
    gets PASSES calls)."""
    from futextrace.workload.build import workload_path
    out = subprocess.run([str(workload_path()), "-t", "1", "-f", str(FUTEXES), "-n", str(PASSES), "--addrs"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_detached_runs_are_not_counted_and_counts_are_kept():
    from benchmarks.futexset import hot_path_detached
    from futextrace.kernel import model as kmodel
    from futextrace.record.recorder import Recorder, RecordOptions
    from tests.helpers.recordings import check_counts     # per bucket, from the test's own jhash2
    rec = Recorder(RecordOptions(method="tracepoint", announce=False), kmodel.load())
    rec.start()
    try:
        if not rec.session.program.probes[0].startswith("tp_btf"):
            pytest.skip("the kernel refused tp_btf: nothing to detach")
        before = run_bench()
        with hot_path_detached(rec.session.program):
            detached = run_bench()
        after = run_bench()
        rec.run(until=lambda: True)
        recording = rec.recording(1.0)
        assert recording["totals"]["missed_runs"] == 0
        check_counts(recording, before, before["slots_after"], PASSES)   # counted before, and kept
        assert detached["pid"] not in {p["pid"] for p in recording["processes"]}  # nothing while detached
        check_counts(recording, after, after["slots_after"], PASSES)     # counted again after
    finally:
        rec.close()
