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


def test_lean_reading_equals_the_full_recordings():
    """What the exporter serves from summary.py's arrays is what it would
    serve from build_recording: two stopped workloads, one on a custom hash,
    one automatic, many futexes in the map and in the per-CPU cache. Traced
    by PID: another process's lookups could evict a slot of the cache into
    the map between the two reads."""
    from futextrace.export.serve_recorder import ServeRecorder
    from futextrace.export.reading import from_recording
    from futextrace.record.recorder import RecordOptions, Recorder
    from futextrace.workload.build import workload_path
    rec = None
    wls = [subprocess.Popen([str(workload_path()), "-t", "2", "-f", str(nf), "-r", "60", *more],
                            stdout=subprocess.DEVNULL)
           for nf, more in ((12000, ["-b", "64"]), (3000, []))]
    try:
        time.sleep(0.3)
        rec = ServeRecorder(RecordOptions(pids=[wl.pid for wl in wls], method="tracepoint", announce=False))
        rec.start()
        time.sleep(2.0)
        for wl in wls:
            wl.send_signal(signal.SIGSTOP)
        time.sleep(0.3)
        lean = from_recording(rec.recording(1.0))
        full = from_recording(Recorder.recording(rec, 1.0))
        assert set(full.processes) == {wl.pid for wl in wls}
        assert lean.processes == full.processes
        assert full.processes[wls[0].pid].buckets == 64 and full.processes[wls[0].pid].futexes >= 10000
        assert (lean.lookups, lean.refcount, lean.totals) == (full.lookups, full.refcount, full.totals)
        assert (lean.resizes, lean.info, lean.refcount_source) == (full.resizes, full.info, full.refcount_source)
    finally:
        for wl in wls:
            wl.kill()
            wl.wait()
        if rec is not None:
            rec.close()
