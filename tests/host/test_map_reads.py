"""The map reader's strategies on the real kernel: the batched read of the
futexes map (loading/batchread.py) against BCC's own key-by-key walk of the
same map (both must give the same entries and per-CPU values); and the
exporter's lean reading (loading/maparrays.py, export/summary.py) against the
full recording (record/assemble.py) of the same stopped workloads."""
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
    """The futexes map filled here, 12000 entries with distinct per-CPU values
    (the traced hot path lists only futexes with repeated lookups while cached,
    so a workload would not fill it reliably), read both ways."""
    from futextrace.loading.maps import MapReader, batched_futex_map
    from futextrace.record.session import RecordOptions, TraceSession
    rec = reader = None
    try:
        rec = TraceSession(RecordOptions(pids=[os.getpid()], method="tracepoint", announce=False))
        rec.start()
        reader = MapReader(rec.program, futex_read=batched_futex_map)
        table = rec.program.bpf["futexes"]
        ncpu = len(table.Leaf()) if hasattr(table.Leaf(), "__len__") else 1
        for i in range(12000):
            key = table.Key(tgid=os.getpid(), kind=1, uaddr=0x7f0000000000 + 4 * i, hash_mask=63)
            vals = table.Leaf()
            for cpu in range(ncpu):
                vals[cpu].lookups = i * 7 + cpu + 1
                vals[cpu].atomic_lookups = cpu
                vals[cpu].bucket = i % 64
                vals[cpu].node = -1
                vals[cpu].hash_mask = 63
                vals[cpu].kernel_bucket = 0xFFFFFFFF
            table[key] = vals
        fast = {(f["tgid"], f["kind"], f["uaddr"], f["hash_mask"]): f["per_cpu"]
                for f in reader.futex_map()}   # the map alone: the per-CPU cache is read the same way by both
        slow = walk(table)
        assert len(slow) >= 12000 and {k[0] for k in slow} == {os.getpid()}
        assert fast == slow
    finally:
        if reader is not None:
            reader.close()
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
    from futextrace.record.assemble import recording
    from futextrace.record.session import RecordOptions
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
        full = from_recording(recording(rec.session, rec.reader, 1.0))
        assert set(full.processes) == {wl.pid for wl in wls}
        assert lean.processes == full.processes
        # 12000 futexes per thread: far more than the lookup cache holds, so
        # most are counted per bucket only (the list keeps those it admitted).
        assert full.processes[wls[0].pid].buckets == 64 and full.processes[wls[0].pid].futexes >= 100
        assert (lean.lookups, lean.refcount, lean.totals) == (full.lookups, full.refcount, full.totals)
        assert (lean.resizes, lean.info, lean.refcount_source) == (full.resizes, full.info, full.refcount_source)
        # The batch buffers' pages handed back between reads (as the exporter
        # does after each scrape): the next read fills them again, the same.
        rec.release_read_buffers()
        again = from_recording(rec.recording(1.0))
        assert (again.processes, again.totals) == (lean.processes, lean.totals)
    finally:
        for wl in wls:
            wl.kill()
            wl.wait()
        if rec is not None:
            rec.close()
