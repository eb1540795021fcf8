"""The row tables of bpf/maps.h, read in place: the per-futex list
(`futexes_*`) and the exact per-bucket counts (`buckets_*`).

A row table holds what a per-CPU hash held, in rows that keep their place:
a plain hash from key to row (written once per key, by BPF), the rows' keys
in one memory-mapped array, and each CPU's stat of each row in another
(CPU n's of row r at [n * max_rows + r]). Reading one is a scan of memory
this process maps, not a copy by the kernel (a per-CPU hash of 65,536
entries took ~27 ms to batch-copy on the 2-CPU build machine, and 35-90 ms to
create: docs/design.md).

What the hash did by itself is done here:
- which rows hold a key: those with lookups on some CPU (a row is counted on
  as soon as it is inserted; one given back after losing an insert race, or
  zeroed for reuse, has none);
- deleting a key (`serve` forgets a gone process): its index entry goes at
  once, and its row is given back (zeroed, then pushed onto the table's
  free queue, where BPF takes new rows first) at a read at least
  GIVE_BACK_AFTER_S later, so that no BPF program still holds it. Lookups
  counted into it in between are handed to the caller then, as those of
  the deletion were. A table that was full takes new keys again then (its
  per-CPU full flags are cleared).
"""
from __future__ import annotations

import ctypes as ct
import mmap
import time

import numpy as np

from futextrace.kernel.layout import COUNTER
from futextrace.loading import bcclite

ROWS_FUTEXES, ROWS_BUCKETS = 0, 1          # row_next's index of each table (bpf/maps.h)
GIVE_BACK_AFTER_S = 0.1     # a BPF program holds a row for microseconds


class RowTable:
    """One row table of a loaded Program; close() drops its mapping of row_next.

    The keys and stats are mapped for each read and unmapped after it, and
    only the rows in use: a mapping of a BPF array holds every page of it in
    the process's RSS from the mmap() on (2 x 5.5 MiB for the two tables at 2
    CPUs, whatever they hold), which is more than the exporter's budget can
    spare; mapping the rows in use costs well under a millisecond."""

    in_place_from = 0.5    # share of the stats' span in use from which a read maps it (_in_place)

    def __init__(self, program, name: str, which: int, max_rows: int):
        bpf = program.bpf
        self.name, self.which, self.max_rows = name, which, max_rows
        self.ncpu = program.ncpu_ids
        self._index = bpf[f"{name}_index"]
        self._free = bpf[f"{name}_free"]
        keys, stats = bpf[f"{name}_keys"], bpf[f"{name}_stats"]
        self._keys_fd, self._stats_fd = keys.map_fd, stats.map_fd
        self.Key = keys.Leaf
        self.key_dtype, self.stat_dtype = np.dtype(keys.Leaf), np.dtype(stats.Leaf)
        # Both are whole 8-byte words (bpf/futextrace.h: no holes, u64 counts first).
        assert self.key_dtype.itemsize % 8 == 0 and self.stat_dtype.itemsize % 8 == 0
        self._lookups_word = self.stat_dtype.fields["lookups"][1] // 8
        self._next = mmap.mmap(bpf["row_next"].map_fd, mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ)
        # The per-CPU flag with which a CPU stops inserting once the table had no row left.
        self._counters = bpf["counters"]
        self._full_flag = COUNTER["FTC_FUTEXES_FULL" if name == "futexes" else "FTC_BUCKETS_FULL"]
        # (when, rows, their lookups and atomic lookups then), per deletion not yet given back
        self._deleted: list[tuple[float, np.ndarray, np.ndarray, np.ndarray]] = []
        self._open: list[mmap.mmap] = []   # mappings the last read's views are of (release())
        self.bytes_scanned = 0

    def close(self) -> None:
        self.release()
        if self._next is not None:
            self._next.close()
            self._next = None

    def release(self) -> None:
        """Unmap what the last read's views are of, once the caller has built
        its results (copies): a mapping still viewed (BufferError) waits for
        the next call, unmapped then."""
        still = []
        for m in self._open:
            try:
                m.close()
            except BufferError:
                still.append(m)
        self._open = still

    def used_rows(self) -> int:
        """Rows handed out so far (row_next, at most max_rows)."""
        return min(self.max_rows, int(np.frombuffer(self._next, dtype=np.uint64, count=2)[self.which]))

    def _copy(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys (n, words), stats (ncpu, n, words)) of the first n rows, as
        8-byte words, copied out of a mapping of just those rows. Rows are
        picked and moved as words, not as structured elements, which numpy
        copies one field at a time (the read of a full list took 16 ms
        instead of 3)."""
        kw, sw = self.key_dtype.itemsize // 8, self.stat_dtype.itemsize // 8
        keys, stats = np.empty((n, kw), dtype=np.uint64), np.empty((self.ncpu, n, sw), dtype=np.uint64)
        if n:
            with _rows_mapped(self._keys_fd, 0, n * kw * 8) as m:
                keys[:] = np.frombuffer(m, dtype=np.uint64, count=n * kw).reshape(n, kw)
            for c, m in self._each_cpu_stats(n):
                stats[c] = np.frombuffer(m, dtype=np.uint64, count=n * sw).reshape(n, sw)
        self.bytes_scanned += keys.nbytes + stats.nbytes
        return keys, stats

    def _each_cpu_stats(self, n: int, write: bool = False):
        """(CPU, a mapping of its stats of the first n rows), one CPU at a time:
        CPU c's are [c * max_rows, c * max_rows + n)."""
        size = self.stat_dtype.itemsize
        for c in range(self.ncpu):
            with _rows_mapped(self._stats_fd, c * self.max_rows * size, n * size, write) as m:
                yield c, m

    def _in_place(self, n: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(keys, stats) as _copy gives them, but views of mappings kept until
        release(), where the rows in use are most of the table: a full list's
        5.5 MiB (2 CPUs) copied at every read were ~1,100 page faults of fresh
        heap (the exporter hands its heap back after each read) and 4 ms of a
        30 ms scrape. One mapping spans every CPU's stats up to the last one's
        n-th row; its pages are filled when it is made (no faults), and
        mapping a mostly empty table's span would cost more than a copy of
        its few rows: None then."""
        kw, sw = self.key_dtype.itemsize // 8, self.stat_dtype.itemsize // 8
        span = (self.ncpu - 1) * self.max_rows + n
        if not n or n * self.ncpu < self.in_place_from * span:
            return None
        km = _map_rows(self._keys_fd, 0, n * kw * 8)
        self._open.append(km)
        sm = _map_rows(self._stats_fd, 0, span * sw * 8)
        self._open.append(sm)
        keys = np.frombuffer(km, dtype=np.uint64, count=n * kw).reshape(n, kw)
        flat = np.frombuffer(sm, dtype=np.uint64, count=span * sw)
        stats = np.lib.stride_tricks.as_strided(flat, shape=(self.ncpu, n, sw),
                                                strides=(self.max_rows * sw * 8, sw * 8, 8), writeable=False)
        self.bytes_scanned += keys.nbytes + n * self.ncpu * sw * 8
        return keys, stats

    def read(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, keys, stats (rows, ncpu)) of every key the table holds.
        The stats are stored CPU by CPU, as in the map (an array (ncpu, rows)
        turned round): a CPU's column, which the totals walk, is contiguous.
        They may be views of the map's memory, valid until release()."""
        self.release()
        n = self.used_rows()
        keys, stats = self._in_place(n) or self._copy(n)
        live = (stats[:, :, self._lookups_word] != 0).any(axis=0)
        for _, rows, _, _ in self._deleted:
            live[rows[rows < len(live)]] = False
        if live.all():       # a full or never-thinned table: no gather
            rows = np.arange(len(live))
        else:
            rows = np.flatnonzero(live)
            keys, stats = keys[rows], stats[:, rows]
        return (rows, *self._as_rows(keys, stats))

    def _as_rows(self, keys: np.ndarray, stats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Words (keys (n, words), stats (ncpu, n, words)) as structured keys
        (n,) and stats (n, ncpu), the latter turned round, not copied."""
        return (keys.view(self.key_dtype).reshape(-1),
                stats.view(self.stat_dtype).reshape(self.ncpu, stats.shape[1]).T)

    def delete(self, rows: np.ndarray, keys: np.ndarray, stats: np.ndarray) -> np.ndarray:
        """Delete these rows' keys (as read() gave them, with their `stats`
        then, to tell later counts apart) from the index; their rows are
        given back by a later give_back(). Which rows' keys were there."""
        lib = bcclite.lib()
        raw = np.ascontiguousarray(keys).tobytes()
        size = self.key_dtype.itemsize
        done = np.zeros(len(rows), dtype=bool)
        for i in range(len(rows)):
            key = self.Key.from_buffer_copy(raw, i * size)
            done[i] = lib.bpf_delete_elem(self._index.map_fd, ct.byref(key)) == 0
        if done.any():
            self._deleted.append((time.monotonic(), rows[done], *row_totals(stats[done])))
        return done

    def give_back(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Zero the rows deleted at least GIVE_BACK_AFTER_S ago and push them
        onto the free queue. For each deletion: (keys, lookups, atomic
        lookups) counted into its rows after it (a program that had found a
        row just before): the caller counts them as it counted the deletion."""
        now, late = time.monotonic(), []
        due = [d for d in self._deleted if now - d[0] >= GIVE_BACK_AFTER_S]
        if not due:
            return late
        self._deleted = [d for d in self._deleted if now - d[0] < GIVE_BACK_AFTER_S]
        n = int(max(d[1].max() for d in due)) + 1      # rows up to the highest one given back
        keys, stats = self._as_rows(*self._copy(n))
        for _, rows, lookups, atomic in due:
            now_lookups, now_atomic = row_totals(stats[rows])
            if (now_lookups != lookups).any():
                late.append((keys[rows], now_lookups - lookups, now_atomic - atomic))
        given = np.concatenate([d[1] for d in due])
        kw, sw = self.key_dtype.itemsize // 8, self.stat_dtype.itemsize // 8
        with _rows_mapped(self._keys_fd, 0, n * kw * 8, write=True) as m:
            _zero(m, n, kw, given)
        for _, m in self._each_cpu_stats(n, write=True):
            _zero(m, n, sw, given)
        for r in given.tolist():
            self._free.push(ct.c_uint32(r))
        self._clear_full_flag()
        return late

    def _clear_full_flag(self) -> None:
        """Let every CPU insert again: the table has free rows now. A CPU that
        finds none again sets its flag again. Only a key's first lookup
        inserts (bpf/tiers.h), so what was turned away while full stays
        counted where it was (unlisted, unattributed), never twice."""
        zero = self._counters.Leaf()      # one zero per possible CPU
        bcclite.lib().bpf_update_elem(self._counters.map_fd, ct.byref(ct.c_uint32(self._full_flag)),
                                      ct.byref(zero), 0)


def _zero(buf, n: int, words: int, rows: np.ndarray) -> None:
    """Zero these rows of a mapping of n rows of `words` 8-byte words (the view
    goes with this call: the mapping can close after it)."""
    np.frombuffer(buf, dtype=np.uint64, count=n * words).reshape(n, words)[rows] = 0


def row_totals(stats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lookups and atomic lookups of per-CPU stats (rows, ncpu), CPUs summed."""
    return (stats["lookups"].sum(axis=1, dtype=np.uint64), stats["atomic_lookups"].sum(axis=1, dtype=np.uint64))


def _map_rows(fd: int, offset: int, length: int, write: bool = False) -> mmap.mmap:
    """A mapping of `length` bytes of a memory-mappable BPF array from byte
    `offset` (a multiple of the page size: the kernel's rule)."""
    prot = mmap.PROT_READ | (mmap.PROT_WRITE if write else 0)
    return mmap.mmap(fd, -(-length // mmap.PAGESIZE) * mmap.PAGESIZE, mmap.MAP_SHARED, prot, offset=offset)


class _rows_mapped:
    """`length` bytes of a memory-mappable BPF array from byte `offset`, for a
    `with` block: a mapping from the page that holds that byte (a CPU's stats
    begin on a page boundary only where max_rows times their size is a
    multiple of the page size: --max-futexes 2000 is not)."""

    def __init__(self, fd: int, offset: int, length: int, write: bool = False):
        start = offset - offset % mmap.PAGESIZE
        self._m = _map_rows(fd, start, offset - start + length, write)
        self._view = memoryview(self._m)[offset - start:offset - start + length]

    def __enter__(self) -> memoryview:
        return self._view

    def __exit__(self, *exc) -> None:
        self._view.release()
        self._m.close()
