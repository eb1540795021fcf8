"""The map reader on the real kernel: the row tables (bpf/maps.h,
loading/rowtables.py) read back what the test wrote into them through
bpf(2); and the exporter's lean reading (loading/maparrays.py, export/summary.py) against the
full recording (record/assemble.py) of the same stopped workloads."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
              pytest.mark.skipif(not Path("/sys/kernel/btf/vmlinux").exists(), reason="needs BTF")]


def write_rows(bpf, name: str, rows: dict[int, tuple], ncpu: int, max_rows: int, which: int) -> None:
    """Fill a row table (bpf/maps.h) as BPF would: each row's key, its index
    entry, each CPU's stat at [cpu * max_rows + row], and row_next past them.
    `rows`: row -> (key fields, [per-CPU stat fields])."""
    index, keys, stats = bpf[f"{name}_index"], bpf[f"{name}_keys"], bpf[f"{name}_stats"]
    for row, (key, per_cpu) in rows.items():
        keys[ctypes.c_uint32(row)] = keys.Leaf(**key)
        index[index.Key(**key)] = ctypes.c_uint32(row)
        for cpu, stat in enumerate(per_cpu):
            stats[ctypes.c_uint32(cpu * max_rows + row)] = stats.Leaf(**stat)
    bpf["row_next"][ctypes.c_uint32(which)] = ctypes.c_uint64(max(rows) + 1)


@pytest.fixture(params=["copied", "in place"])
def row_reads(request, monkeypatch):
    """Row tables read both ways (RowTable._in_place): copied out of a
    mapping of the rows in use, or viewed in a mapping held for the read;
    the list of which way each read went."""
    from futextrace.loading.rowtables import RowTable
    monkeypatch.setattr(RowTable, "in_place_from", 2.0 if request.param == "copied" else 0.0)
    ways, real = [], RowTable._in_place

    def spy(self, n):
        got = real(self, n)
        if n:     # an empty table has nothing to read either way
            ways.append("in place" if got is not None else "copied")
        return got
    monkeypatch.setattr(RowTable, "_in_place", spy)
    return request.param, ways


def test_row_tables_read_back_what_was_written(row_reads, sleeper):
    """The per-futex list and the exact counts' row tables filled here with
    12,000 and 3,000 rows of distinct per-CPU values (the traced hot path
    lists only futexes with repeated lookups while cached, so a workload would
    not fill them reliably), some rows left without lookups as a given-back
    row is: MapReader reads back exactly the rows with lookups, per CPU,
    whether the rows are copied or viewed where they are."""
    from futextrace.loading.loader import MAX_BUCKETS
    from futextrace.loading.maps import MapReader
    from futextrace.loading.rowtables import ROWS_BUCKETS, ROWS_FUTEXES
    from futextrace.record.session import RecordOptions, TraceSession
    rec = reader = None
    pid = 0x7ffffff0     # no such process: nothing traced adds rows of it
    try:
        # A process that makes no futex call: the tables hold only what is written here.
        rec = TraceSession(RecordOptions(pids=[sleeper], method="tracepoint", announce=False))
        rec.start()
        reader = MapReader(rec.program)
        ncpu, nf = rec.program.ncpu_ids, rec.program.max_futexes
        futexes = {}
        for i in range(12000):
            key = dict(tgid=pid, kind=1, uaddr=0x7f0000000000 + 4 * i, hash_mask=63)
            stats = [dict(lookups=0 if i % 1000 == 7 else i * 7 + cpu + 1, atomic_lookups=cpu,
                          bucket=i % 64, node=-1, hash_mask=63, kernel_bucket=0xFFFFFFFF) for cpu in range(ncpu)]
            futexes[i] = (key, stats)
        write_rows(rec.program.bpf, "futexes", futexes, ncpu, nf, ROWS_FUTEXES)
        buckets = {i: (dict(tgid=pid, kind=0, hash_mask=4095, bucket=i, node=-1),
                       [dict(lookups=i + cpu + 1, atomic_lookups=cpu, kernel_checked=0, unlisted=i % 3)
                        for cpu in range(ncpu)]) for i in range(3000)}
        write_rows(rec.program.bpf, "buckets", buckets, ncpu, MAX_BUCKETS, ROWS_BUCKETS)

        got = {(f["tgid"], f["kind"], f["uaddr"], f["hash_mask"]): f["per_cpu"] for f in reader.futex_map()}
        want = {(k["tgid"], k["kind"], k["uaddr"], k["hash_mask"]):
                [[s["lookups"], s["atomic_lookups"], s["bucket"], s["node"], s["kernel_bucket"]] for s in st]
                for k, st in futexes.values() if st[0]["lookups"]}
        assert len(want) == 12000 - 12 and got == want
        got = {(b["tgid"], b["kind"], b["hash_mask"], b["bucket"], b["node"]): b["per_cpu"]
               for b in reader.bucket_map()}
        want = {tuple(k.values()): [[s["lookups"], s["atomic_lookups"], s["kernel_checked"], s["unlisted"]]
                                    for s in st] for k, st in buckets.values()}
        assert got == want
        way, ways = row_reads
        assert ways == [way, way]
        assert not any(t._open for t in reader._rows.values())   # nothing left mapped after the reads
    finally:
        if reader is not None:
            reader.close()
        if rec is not None:
            rec.close()


def test_lean_reading_equals_the_full_recordings(row_reads):
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
        assert not any(t._open for t in rec.reader._rows.values())
        again = from_recording(rec.recording(1.0))
        assert (again.processes, again.totals) == (lean.processes, lean.totals)
        way, ways = row_reads
        assert ways and set(ways) == {way}
    finally:
        for wl in wls:
            wl.kill()
            wl.wait()
        if rec is not None:
            rec.close()
