"""The exporter's batched map read (futextrace/export/mapread.py) against
BCC's own key-by-key walk of the same map, on the real kernel: a workload is
traced, then stopped (SIGSTOP) so its counts cannot move, and both reads must
give the same entries and per-CPU values. 40000 futexes: more than the
per-CPU cache in front of the map holds, so the map fills."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
              pytest.mark.skipif(not Path("/sys/kernel/btf/vmlinux").exists(), reason="needs BTF")]


def walk(table) -> dict:
    return {(k.tgid, k.kind, k.uaddr, k.hash_mask):
            [[v.lookups, v.atomic_lookups, v.bucket, v.node, v.kernel_bucket] for v in vals]
            for k, vals in table.items()}


def test_batched_read_equals_the_bcc_walk():
    from futextrace.export.mapread import BatchRecorder
    from futextrace.record.recorder import RecordOptions
    from futextrace.workload.build import workload_path
    wl = subprocess.Popen([str(workload_path()), "-t", "2", "-f", "20000", "-r", "60"],
                          stdout=subprocess.DEVNULL)
    rec = None
    try:
        time.sleep(0.3)   # its threads exist, so the -p filter sees them
        rec = BatchRecorder(RecordOptions(pids=[wl.pid], method="tracepoint"))
        rec.start()
        time.sleep(1.5)
        wl.send_signal(signal.SIGSTOP)
        time.sleep(0.3)
        rec.maps._cache_items = lambda: []   # the map alone: the per-CPU cache is read the same way by both
        fast = {(f["tgid"], f["kind"], f["uaddr"], f["hash_mask"]): f["per_cpu"] for f in rec.dump_futexes()}
        slow = walk(rec.program.bpf["futexes"])
        assert len(slow) >= 10000 and {k[0] for k in slow} == {wl.pid}
        assert fast == slow
    finally:
        wl.kill()
        wl.wait()
        if rec is not None:
            rec.close()
