#!/usr/bin/env python3
"""What a full `futexes` map costs to read, and what could cost less
(issue 44, item 4: 30 ms of CPU per scrape with full maps).

Maps of `futexes`' very key and value (bpf/futextrace.h) and capacity
(65,536) are made and filled here, so the figures are the kernel's and numpy's
cost of the reading alone, with no tracer running. Each way is timed R times
(this process's CPU time, user + system: the kernel's copy counts) and the
median, min and max printed:

  batch per-CPU      BPF_MAP_LOOKUP_BATCH of the per-CPU hash into kept buffers
                     (loading/batchread.py, BATCH entries a call), then numpy
                     adds up the CPUs of every entry: the floor of what the
                     exporter does with a full map today;
  batch shared       the same read of a plain hash (one value per entry, as a
                     map updated with atomic adds would be);
  mmap array         the same entries as rows (key, each CPU's stat) of one
                     BPF_F_MMAPABLE array, read in place through a memory
                     mapping kept between reads: numpy finds the used rows and
                     adds up their CPUs (no copy by the kernel at all);
  iter-walk          a BPF map-element iterator visits every entry of the per-CPU
                     hash and adds up its CPUs in the kernel, writing nothing;
  iter-all           ... writing every entry (key, summed lookups and atomic
                     lookups); Python reads the file, numpy views the rows;
  iter-changed       ... writing an entry only where its sums differ from those
                     it wrote the last time (kept in a second hash, `last`):
                     with no entry changed, and with every one changed.

It also times the creation of each kind of map (what a start waits for, issue 44 item 3):
the per-CPU hash, a plain hash of the same key with a 4-byte value (an index
of rows), and the array of rows (BPF_MAP_CREATE, median of R).

The iterator lines need a kernel that loads map-element iterators (5.9+, and
no policy against them: the build machines refuse them, as they refuse fentry).
Usage: sudo .venv/bin/python benchmarks/map_read_cost.py [-r R]
"""
from __future__ import annotations

import argparse
import ctypes as ct
import os
import statistics
import struct
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from futextrace.kernel.headers import bcc_environment  # noqa: E402
from futextrace.kernel.layout import bpf_dir  # noqa: E402
from futextrace.loading.batchread import BatchBuffers, lookup_batch  # noqa: E402
from futextrace.loading.bpfsys import ATTR_SIZE, BPF_TRACE_ITER, bpf, load_tracing  # noqa: E402

ENTRIES = 65536
BPF_LINK_CREATE, BPF_ITER_CREATE = 28, 33
MODES = {"walk": 0, "all": 1, "changed": 2}

SOURCE = r"""
#include "futextrace.h"
BPF_PERCPU_HASH(futexes, struct futex_stat_key, struct futex_stat, ENTRIES);
BPF_HASH(shared, struct futex_stat_key, struct futex_stat, ENTRIES);
/* The same entries as rows of one memory-mapped array: key, then each CPU's stat. */
struct row_of_cpus { struct futex_stat_key key; struct futex_stat st[NCPUS]; };
BPF_F_TABLE("array", u32, struct row_of_cpus, rows, ENTRIES, (1U << 10) /* BPF_F_MMAPABLE */);
struct sums { u64 lookups; u64 atomic; };
BPF_HASH(last, struct futex_stat_key, struct sums, ENTRIES);
struct row { struct futex_stat_key key; struct sums s; };

int iter_futexes(u64 *ctx)
{
	void *meta = (void *)ctx[0];
	struct futex_stat_key *k = (void *)ctx[2];
	struct futex_stat *v = (void *)ctx[3];
	if (!k || !v)
		return 0;
	struct row r = {};
	r.key = *k;
#pragma unroll
	for (int c = 0; c < NCPUS; c++) {
		r.s.lookups += v[c].lookups;
		r.s.atomic += v[c].atomic_lookups;
	}
	if (MODE == 2) {
		struct sums *was = last.lookup(&r.key);
		if (was && was->lookups == r.s.lookups && was->atomic == r.s.atomic)
			return 0;
		last.update(&r.key, &r.s);
	}
	if (MODE != 0)
		bpf_seq_write(*(void **)meta, &r, sizeof(r));
	return 0;
}
"""


class Refused(Exception):
    """No map-element iterator on this kernel: the iterator lines are left out."""


def possible_cpus() -> int:
    n = 0
    for part in Path("/sys/devices/system/cpu/possible").read_text().strip().split(","):
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


def map_elem_btf_id() -> int:
    """The BTF id of FUNC bpf_iter_bpf_map_elem, the map-element iterator's
    target, found as the kernel model finds the task iterator's."""
    from futextrace.kernel.btf import Btf
    from futextrace.kernel.model import VMLINUX_BTF, _func_ids
    ids = _func_ids(Btf.from_file(VMLINUX_BTF), ["bpf_map_elem"], "bpf_iter_")
    if "bpf_map_elem" not in ids:
        raise Refused("this kernel's BTF has no bpf_iter_bpf_map_elem: no map iterators")
    return ids["bpf_map_elem"]


class MapIterator:
    """One compiled module; with `mode`, its iterator program loaded and linked
    to the `futexes` map of `maps` (the module filled), or of its own."""

    def __init__(self, mode: int | None, ncpus: int, btf_id: int | None = None, maps=None):
        bcc_environment()    # the kernel headers BCC compiles against (futextrace's own)
        from bcc import BPF
        flags = [f"-I{bpf_dir()}", f"-DENTRIES={ENTRIES}", f"-DNCPUS={ncpus}", f"-DMODE={mode or 0}",
                 "-Wno-macro-redefined"]
        self.b = BPF(text=SOURCE, cflags=flags)
        self.table, self.shared = ((maps or self).b[n] for n in ("futexes", "shared"))
        self.prog = self.link = None
        if mode is None:
            return
        insns = self.b.dump_func(b"iter_futexes")
        try:
            self.prog = load_tracing(insns, "iter_futexes", BPF_TRACE_ITER, btf_id)
        except OSError as e:
            self.b.cleanup()
            # The build machines' kernel refuses these as it refuses fentry: EPERM
            # before the verifier looks at an instruction (task iterators load).
            raise Refused(f"the kernel refused the map-element iterator ({e.strerror})") from None
        info = struct.pack("<I", self.table.map_fd)
        self._info = ct.create_string_buffer(info, len(info))
        attr = bytearray(ATTR_SIZE)
        struct.pack_into("<IIIIQI", attr, 0, self.prog, 0, BPF_TRACE_ITER, 0,
                         ct.addressof(self._info), len(info))
        self.link = bpf(BPF_LINK_CREATE, attr)

    def read(self) -> bytes:
        fd = bpf(BPF_ITER_CREATE, struct.pack("<II", self.link, 0))
        chunks = []
        try:
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
        finally:
            os.close(fd)
        return b"".join(chunks)

    def close(self):
        for fd in (self.link, self.prog):
            if fd is not None:
                os.close(fd)
        self.b.cleanup()


def fill(table, ncpus: int, bump: int = 0, per_cpu: bool = True) -> None:
    """Every entry present, each CPU's lookups different (bump: all of them change)."""
    n = ENTRIES
    keys = (table.Key * n)()
    values = (table.Leaf * n)()
    for i in range(n):
        keys[i].tgid, keys[i].kind, keys[i].uaddr, keys[i].hash_mask = 1000 + i % 7, 0, 0x5000 + 64 * i, 255
        for c in range(ncpus if per_cpu else 1):
            v = values[i][c] if per_cpu else values[i]
            v.lookups, v.atomic_lookups = 1 + i + c + bump, i % 3
    table.items_update_batch(keys, values)


def timed(fn, repeat: int, between=None, clock=time.process_time) -> tuple[list[float], object]:
    out, res = [], None
    for _ in range(repeat):
        if between:
            between()
        t = clock()
        res = fn()
        out.append((clock() - t) * 1000)
    return out, res


def show(name: str, ms: list[float], note: str) -> None:
    print(f"{name:<34} {statistics.median(ms):7.1f} ms  (min {min(ms):.1f}, max {max(ms):.1f})  {note}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-r", "--repeat", type=int, default=9)
    args = ap.parse_args()
    ncpus = possible_cpus()
    maps = MapIterator(None, ncpus)
    fill(maps.table, ncpus)
    fill(maps.shared, ncpus, per_cpu=False)
    print(f"futexes map: {ENTRIES:,} entries, full; {ncpus} possible CPUs; kernel {os.uname().release}")
    try:
        creations(maps, ncpus, args.repeat)
        batches(maps, ncpus, args.repeat)
        mapped_array(maps, ncpus, args.repeat)
        iterators(maps, ncpus, args.repeat)
    finally:
        maps.close()


ROW = np.dtype([("tgid", "<u4"), ("kind", "<u4"), ("uaddr", "<u8"), ("hash_mask", "<u4"),
                ("pad", "<u4"), ("lookups", "<u8"), ("atomic", "<u8")])
STAT = np.dtype([("lookups", "<u8"), ("atomic", "<u8"), ("rest", "V16")])


def creations(maps, ncpus: int, repeat: int) -> None:
    from futextrace.loading.bpfsys import create_map
    key = ct.sizeof(maps.table.Key)
    kinds = [("per-CPU hash", 5, key, ct.sizeof(maps.table.Leaf) // ncpus, 0),
             ("plain hash, 4-byte value", 1, key, 4, 0),
             ("array of rows, mmapable", 2, 4, ct.sizeof(maps.b["rows"].Leaf), 1 << 10)]
    for name, map_type, k, v, flags in kinds:
        def make():
            os.close(create_map(map_type, k, v, ENTRIES, flags, "ft_cost"))
        ms, _ = timed(make, repeat, clock=time.perf_counter)
        show(f"create {name}", ms, f"{ENTRIES:,} entries, wall time")


def batches(maps, ncpus: int, repeat: int) -> None:
    from futextrace.loading import batchread
    bufs = BatchBuffers()

    def batch(table, per: int):
        kb, vb, n = lookup_batch(table, bufs)
        v = np.frombuffer(vb, dtype=STAT, count=n * per).reshape(n, per)
        return n, int(v["lookups"].sum())

    kept = batchread.BATCH
    try:
        for size in sorted({kept, ENTRIES}):
            batchread.BATCH = size
            ms, (n, total) = timed(lambda: batch(maps.table, ncpus), repeat)
            show(f"batch per-CPU, {size}", ms, f"{n:,} entries, lookups {total:,}")
            ms, (n, total) = timed(lambda: batch(maps.shared, 1), repeat)
            show(f"batch shared, {size}", ms, f"{n:,} entries, lookups {total:,}")
    finally:
        batchread.BATCH = kept


def mapped_array(maps, ncpus: int, repeat: int) -> None:
    import mmap
    table = maps.b["rows"]
    size = ct.sizeof(table.Leaf) * ENTRIES
    page = mmap.PAGESIZE
    mm = mmap.mmap(table.map_fd, (size + page - 1) // page * page, mmap.MAP_SHARED,
                   mmap.PROT_READ | mmap.PROT_WRITE)
    rowdt = np.dtype([("tgid", "<u4"), ("kind", "<u4"), ("uaddr", "<u8"), ("hash_mask", "<u4"),
                      ("pad", "<u4"), ("st", STAT, (ncpus,))])
    assert rowdt.itemsize == ct.sizeof(table.Leaf)
    rows = np.frombuffer(mm, dtype=rowdt, count=ENTRIES)
    i = np.arange(ENTRIES)
    rows["tgid"], rows["uaddr"], rows["hash_mask"] = 1000 + i % 7, 0x5000 + 64 * i, 255
    for c in range(ncpus):
        rows["st"]["lookups"][:, c] = 1 + i + c
        rows["st"]["atomic"][:, c] = i % 3
    del rows

    def read():
        r = np.frombuffer(mm, dtype=rowdt, count=ENTRIES)
        used = r[r["tgid"] != 0]
        return len(used), int(used["st"]["lookups"].sum())

    ms, (n, total) = timed(read, repeat)
    show("mmap array", ms, f"{n:,} rows, lookups {total:,}")
    mm.close()


def iterators(maps, ncpus: int, repeat: int) -> None:
    its = {}
    try:
        btf_id = map_elem_btf_id()
        for m in MODES:
            its[m] = MapIterator(MODES[m], ncpus, btf_id, maps=maps)
    except Refused as e:
        print(f"iterators: left out: {e}")
        return
    try:
        def via(it):
            r = np.frombuffer(it.read(), dtype=ROW)
            return len(r), int(r["lookups"].sum())

        ms, _ = timed(its["walk"].read, repeat)
        show("iter-walk", ms, "nothing written")
        ms, (n, total) = timed(lambda: via(its["all"]), repeat)
        show("iter-all", ms, f"{n:,} rows, lookups {total:,}")
        via(its["changed"])   # the first pass writes every entry and keeps its sums
        ms, (n, _) = timed(lambda: via(its["changed"]), repeat)
        show("iter-changed, none", ms, f"{n:,} rows")
        bumps = iter(range(1, repeat + 1))
        ms, (n, _) = timed(lambda: via(its["changed"]), repeat,
                           between=lambda: fill(maps.table, ncpus, next(bumps)))
        show("iter-changed, all", ms, f"{n:,} rows")
    finally:
        for it in its.values():
            it.close()


if __name__ == "__main__":
    main()
