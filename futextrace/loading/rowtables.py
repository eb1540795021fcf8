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
  the deletion were.
"""
from __future__ import annotations

import ctypes as ct
import mmap
import time

import numpy as np

from futextrace.loading import bcclite

ROWS_FUTEXES, ROWS_BUCKETS = 0, 1          # row_next's index of each table (bpf/maps.h)
GIVE_BACK_AFTER_S = 0.1     # a BPF program holds a row for microseconds


class RowTable:
    """One row table of a loaded Program; close() drops its mappings."""

    def __init__(self, program, name: str, which: int, max_rows: int):
        bpf = program.bpf
        self.name, self.which, self.max_rows = name, which, max_rows
        self.ncpu = program.ncpu_ids
        self._index = bpf[f"{name}_index"]
        self._free = bpf[f"{name}_free"]
        keys, stats = bpf[f"{name}_keys"], bpf[f"{name}_stats"]
        self.Key = keys.Leaf
        self.key_dtype, self.stat_dtype = np.dtype(keys.Leaf), np.dtype(stats.Leaf)
        # Both are whole 8-byte words (bpf/futextrace.h: no holes, u64 counts first).
        assert self.key_dtype.itemsize % 8 == 0 and self.stat_dtype.itemsize % 8 == 0
        self._lookups_word = self.stat_dtype.fields["lookups"][1] // 8
        self._maps = [_mapping(t, ct.sizeof(t.Leaf) * t.max_entries) for t in (keys, stats, bpf["row_next"])]
        # (when, rows, their lookups and atomic lookups then), per deletion not yet given back
        self._deleted: list[tuple[float, np.ndarray, np.ndarray, np.ndarray]] = []
        self.bytes_scanned = 0

    def close(self) -> None:
        while self._maps:
            self._maps.pop().close()

    def used_rows(self) -> int:
        """Rows handed out so far (row_next, at most max_rows)."""
        return min(self.max_rows, int(np.frombuffer(self._maps[2], dtype=np.uint64, count=2)[self.which]))

    def _views(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys (n, words), stats (ncpu, n, words)) of the rows handed out, as
        8-byte words: views of the mappings. Rows are picked and moved as
        words, not as structured elements, which numpy copies one field at a
        time (the read of a full list took 16 ms instead of 3)."""
        n = self.used_rows()
        kw, sw = self.key_dtype.itemsize // 8, self.stat_dtype.itemsize // 8
        keys = np.frombuffer(self._maps[0], dtype=np.uint64, count=n * kw).reshape(n, kw)
        stats = np.frombuffer(self._maps[1], dtype=np.uint64,
                              count=self.ncpu * self.max_rows * sw).reshape(self.ncpu, self.max_rows, sw)[:, :n]
        self.bytes_scanned += keys.nbytes + stats.nbytes
        return keys, stats

    def read(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, keys, stats (rows, ncpu)) of every key the table holds, copies."""
        keys, stats = self._views()
        live = (stats[:, :, self._lookups_word] != 0).any(axis=0)
        for _, rows, _, _ in self._deleted:
            live[rows[rows < len(live)]] = False
        if live.all():       # a full or never-thinned table: slices, no gather
            rows = np.arange(len(live))
            k, st = keys.copy(), np.ascontiguousarray(stats.transpose(1, 0, 2))
        else:
            rows = np.flatnonzero(live)
            k, st = keys[rows], np.ascontiguousarray(stats[:, rows].transpose(1, 0, 2))
        del keys, stats      # a mapping cannot close while a view of it exists
        return rows, k.view(self.key_dtype).reshape(-1), st.view(self.stat_dtype).reshape(len(rows), self.ncpu)

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
            self._deleted.append((time.monotonic(), rows[done], *_totals(stats[done])))
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
        keys = np.frombuffer(self._maps[0], dtype=self.key_dtype, count=self.max_rows)
        stats = np.frombuffer(self._maps[1], dtype=self.stat_dtype,
                              count=self.ncpu * self.max_rows).reshape(self.ncpu, self.max_rows)
        for _, rows, lookups, atomic in due:
            now_lookups, now_atomic = _totals(stats[:, rows].T)
            if (now_lookups != lookups).any():
                late.append((keys[rows].copy(), now_lookups - lookups, now_atomic - atomic))
            stats[:, rows] = np.zeros(1, dtype=self.stat_dtype)
            keys[rows] = np.zeros(1, dtype=self.key_dtype)
            for r in rows.tolist():
                self._free.push(ct.c_uint32(r))
        del keys, stats
        return late


def _totals(stats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lookups and atomic lookups of per-CPU stats (rows, ncpu), CPUs summed."""
    return (stats["lookups"].sum(axis=1, dtype=np.uint64), stats["atomic_lookups"].sum(axis=1, dtype=np.uint64))


def _mapping(table, size: int) -> mmap.mmap:
    return mmap.mmap(table.map_fd, max(size, mmap.PAGESIZE), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
