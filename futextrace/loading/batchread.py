"""Reading a per-CPU hash (the bucket-lock waits, `lock_waits`) fast enough
to serve it every second.

BCC's walk goes through a per-CPU hash one key at a time (a get-next-key and
a lookup syscall per entry, and ctypes objects for every CPU's value): ~7 s
for a full 65536-entry map on the 2-CPU build machine. Here the map comes out
in a few BPF_MAP_LOOKUP_BATCH calls into one buffer, and keys and per-CPU
values are unpacked with struct formats derived from BCC's ctypes view of
bpf/futextrace.h (no second layout definition). Kernels that refuse batch
lookups get the walk. (The per-futex list and the exact counts are row
tables, read in place: loading/rowtables.py.)
"""
from __future__ import annotations

import ctypes as ct
import errno
import mmap
import struct

from futextrace.loading import bcclite

_CODES = {ct.c_uint8: "B", ct.c_int8: "b", ct.c_uint16: "H", ct.c_int16: "h", ct.c_uint32: "I",
          ct.c_int32: "i", ct.c_uint64: "Q", ct.c_int64: "q"}
BATCH = 4096   # entries per syscall


def struct_format(ctype) -> tuple[str, list[str]]:
    """A struct module format for a flat ctypes Structure of integers, with
    explicit padding from the field offsets; and the field names in order."""
    fmt, names, at = "<", [], 0
    for name, ftype in ctype._fields_:
        field_ = getattr(ctype, name)
        code = next((c for t, c in _CODES.items() if ct.sizeof(t) == ct.sizeof(ftype)
                     and t._type_ == ftype._type_), None)
        if code is None:
            raise TypeError(f"{ctype.__name__}.{name}: not a plain integer")
        fmt += "x" * (field_.offset - at) + code
        names.append(name)
        at = field_.offset + field_.size
    fmt += "x" * (ct.sizeof(ctype) - at)
    assert struct.calcsize(fmt) == ct.sizeof(ctype)
    return fmt, names


class BatchBuffers:
    """Key and value buffers of whole maps, kept from one read to the next:
    a full map's are megabytes, and making them anew every scrape (zeroed,
    then faulted in page by page) cost more CPU than the read itself. A
    read's views are only good until the next read of the same map.
    They are anonymous memory mappings, not ctypes' own (zero-filled, so all
    resident): a page is resident once the kernel has written an entry into
    it, so a map that holds 4,000 of its 65,536 entries costs 0.4 MiB of RSS,
    not 5.8 (13 MiB for the exporter's three maps)."""

    def __init__(self):
        self._by_fd: dict[int, tuple] = {}

    def of(self, table) -> tuple:
        bufs = self._by_fd.get(table.map_fd)
        if bufs is None:
            n = table.max_entries
            keys, values = (mmap.mmap(-1, max(1, ct.sizeof(t) * n)) for t in (table.Key, table.Leaf))
            bufs = self._by_fd[table.map_fd] = ((table.Key * n).from_buffer(keys),
                                                (table.Leaf * n).from_buffer(values), keys, values)
        return bufs[:2]

    def release(self) -> None:
        """Hand the buffers' pages back (MADV_DONTNEED), keeping the mappings:
        between reads a full map's buffers held 7 MiB of the exporter's RSS,
        and the next read faults in, zeroed, only the pages the kernel fills
        (1-2 ms for a full map). Only once nothing uses the last read's views:
        they read zeros from then on."""
        for _, _, keys, values in self._by_fd.values():
            keys.madvise(mmap.MADV_DONTNEED)
            values.madvise(mmap.MADV_DONTNEED)


def lookup_batch(table, buffers: BatchBuffers | None = None) -> tuple[memoryview, memoryview, int] | None:
    """(keys buffer, values buffer, count) of the whole map, or None where
    the kernel has no batch lookup for it. With `buffers`, read into the
    buffers kept there (the views are then only good until the next read)."""
    lib = bcclite.lib()
    n = table.max_entries
    if buffers is None:
        keys = (table.Key * n)()
        values = (table.Leaf * n)()     # BCC's PerCpuHash leaf: one value per possible CPU
    else:
        keys, values = buffers.of(table)
    token_in, token_out, count = ct.c_uint32(0), ct.c_uint32(0), ct.c_uint32(0)
    total, first = 0, True
    while total < n:
        count.value = min(BATCH, n - total)
        res = lib.bpf_lookup_batch(table.map_fd, None if first else ct.byref(token_in),
                                   ct.byref(token_out),
                                   ct.byref(keys, ct.sizeof(table.Key) * total),
                                   ct.byref(values, ct.sizeof(table.Leaf) * total), ct.byref(count))
        err = ct.get_errno()
        total += count.value
        if res != 0:
            if err == errno.ENOENT:
                break   # the whole map was read
            if first and err in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, 524):
                return None
            raise OSError(err, f"BPF_MAP_LOOKUP_BATCH failed on {table.name if hasattr(table, 'name') else 'map'}")
        token_in.value, first = token_out.value, False
    # Views, not copies: a full map's buffers are megabytes, read every scrape.
    return (memoryview(keys).cast("B")[:ct.sizeof(table.Key) * total],
            memoryview(values).cast("B")[:ct.sizeof(table.Leaf) * total], total)
