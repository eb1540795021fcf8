"""Read every process's futex hash from the kernel, now: a BPF task iterator.

bpf/iter_task.bpf.c is compiled by BCC, then loaded with bpf(2) as a tracing
program of attach type BPF_TRACE_ITER on the BTF func `bpf_iter_task`
(BCC 0.26 cannot create iterator links). BPF_LINK_CREATE makes the link,
BPF_ITER_CREATE an fd whose read() runs the program over every task; it writes
one `struct ft_iter_task` (bpf/futextrace.h) per process.

The program uses no map, so its instructions do not depend on the load: they
are cached with the record's layout (BCC's description of the struct) under
$FUTEXTRACE_CACHE/iter, keyed and checked as the program cache's entries are
(progcache.built_for: the source, every -D flag, the kernel and BCC), and
later runs skip the compiler. Everything is closed when `TaskIterator.close()` runs.
"""
from __future__ import annotations

import ctypes
import json
import os
import struct
from pathlib import Path

from futextrace.errors import EnvironmentProblem, KernelRefused
from futextrace.kernel.headers import bcc_environment
from futextrace.kernel.layout import bpf_dir
from futextrace.loading.bpfsys import ATTR_SIZE, BPF_TRACE_ITER, bpf, load_tracing
from futextrace.loading import bcclite, progcache

# A snapshot read by this iterator says so: its "method" (record/hashread.py header()),
# which output/text/hashes_text.py reads back.
ITERATOR = "iterator"
BPF_LINK_CREATE = 28
BPF_ITER_CREATE = 33
_FN = "ft_iter_task"

# -D macro -> kernel model offset key.
OFFSETS = {
    "OFF_TASK_MM": "task_struct.mm", "OFF_TASK_TGID": "task_struct.tgid",
    "OFF_TASK_PID": "task_struct.pid", "OFF_TASK_SIGNAL": "task_struct.signal",
    "OFF_TASK_COMM": "task_struct.comm", "OFF_TASK_GROUP_LEADER": "task_struct.group_leader",
    "OFF_SIGNAL_NR_THREADS": "signal_struct.nr_threads",
    "OFF_MM_PHASH": "mm_struct.futex_phash", "OFF_MM_PHASH_NEW": "mm_struct.futex_phash_new",
    "OFF_MM_ATOMIC": "mm_struct.futex_atomic",
    "OFF_FPH_STATE": "futex_private_hash.state", "OFF_FPH_MASK": "futex_private_hash.hash_mask",
    "OFF_FPH_CUSTOM": "futex_private_hash.custom", "OFF_META_SEQ": "bpf_iter_meta.seq",
}


def cflags(model) -> list[str]:
    missing = [key for key in OFFSETS.values() if model.offsets.get(key) is None]
    if missing:
        raise EnvironmentProblem(f"this kernel's BTF has no {missing[0]}: the task iterator cannot "
                                 "read its futex hash (run `futextrace doctor` for details)")
    return [f"-D{macro}={int(model.offsets[key])}" for macro, key in OFFSETS.items()]


def _cache_dir() -> Path:
    return Path(os.environ.get("FUTEXTRACE_CACHE", "/var/cache/futextrace")) / "iter"


def _compile(source: str, flags: list[str]) -> dict:
    """BCC compiles; we keep the instructions and the record's layout."""
    bcc_environment()
    from bcc import BPF, lib
    try:
        b = BPF(text=source.encode(), cflags=flags)
    except Exception as e:  # BCC raises bare Exceptions
        raise KernelRefused(f"the task iterator program did not compile: {str(e).splitlines()[0]}")
    try:
        insns = b.dump_func(_FN.encode())
        leaf = lib.bpf_table_leaf_desc(b.module, b"iter_layout").decode()
    finally:
        b.cleanup()
    return {"format": progcache.FORMAT, "insns": insns.hex(), "leaf": leaf}


def _entry_path(made_for: dict) -> Path:
    return _cache_dir() / f"task-{progcache.key_of(made_for)}.json"


def compiled(model) -> tuple[bytes, type]:
    """(instructions, ctypes type of struct ft_iter_task), from the cache when it has them."""
    source = (bpf_dir() / "iter_task.bpf.c").read_text()
    flags = cflags(model) + [f"-I{bpf_dir()}", "-Wno-macro-redefined"]
    header = (bpf_dir() / "futextrace.h").read_text()
    made_for = progcache.built_for(source, flags, header)
    path = _entry_path(made_for)
    # The program cache's reading, writing and checking: only entries this
    # user wrote, best effort, never one built for another kernel or flags.
    entry = progcache.read_entry(path)
    if entry is None or progcache.mismatch(entry, made_for):
        entry = {**_compile(source, flags), "built_for": made_for}
        progcache.write_entry(path, entry)
    return bytes.fromhex(entry["insns"]), decode_type(json.loads(entry["leaf"]))


def decode_type(desc):
    """BCC's own turning of its layout description into ctypes: from its
    compiler-free package where it runs (no LLVM on a warm start)."""
    try:
        BPF = bcclite.bcc().BPF
    except bcclite.Unavailable:
        from bcc import BPF
    return BPF._decode_table_type(desc)


def _load(insns: bytes, btf_id: int) -> int:
    """The iterator program as BPF_PROG_TYPE_TRACING / BPF_TRACE_ITER on `btf_id`."""
    try:
        return load_tracing(insns, _FN, BPF_TRACE_ITER, btf_id)
    except OSError as e:
        raise KernelRefused(f"the kernel refused the task iterator ({e.strerror})"
                            + (f": {e.verifier_says}" if e.verifier_says else ""))


class TaskIterator:
    """A loaded task iterator; `read()` returns one record per process. Use as a context manager."""

    def __init__(self, model):
        btf_id = model.iter_btf_ids.get("task")
        if btf_id is None:
            raise KernelRefused("no bpf_iter_task in the kernel's BTF: this kernel has no task iterator")
        insns, self.Record = compiled(model)
        self._links: list[int] = []
        self._prog_fd = _load(insns, btf_id)
        try:
            attr = bytearray(ATTR_SIZE)
            struct.pack_into("<IIII", attr, 0, self._prog_fd, 0, BPF_TRACE_ITER, 0)
            self._links.append(bpf(BPF_LINK_CREATE, attr))
        except OSError as e:
            self.close()
            raise KernelRefused(f"the kernel refused to create the task iterator link ({e.strerror})")

    def read_raw(self) -> bytes:
        """One pass over every task: the records the program wrote."""
        return b"".join(self._read_link(fd) for fd in self._links)

    def _read_link(self, link_fd: int) -> bytes:
        try:
            fd = bpf(BPF_ITER_CREATE, struct.pack("<II", link_fd, 0))
        except OSError as e:
            raise KernelRefused(f"the kernel refused to start the task iterator ({e.strerror})")
        chunks = []
        try:
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
        except OSError as e:
            raise KernelRefused(f"reading the task iterator failed ({e.strerror})")
        finally:
            os.close(fd)

    def read(self) -> dict[int, dict]:
        """tgid -> its record as a dict (first record wins: a tgid whose leader
        exited is written by each of its live threads)."""
        data, size = self.read_raw(), ctypes.sizeof(self.Record)
        out: dict[int, dict] = {}
        for off in range(0, len(data) - len(data) % size, size):
            r = self.Record.from_buffer_copy(data, off)
            if r.tgid in out:
                continue
            rec = {name: getattr(r, name) for name, _ in r._fields_ if name not in ("pad", "comm")}
            rec["comm"] = bytes(r.comm).split(b"\0", 1)[0].decode(errors="replace")
            out[r.tgid] = rec
        return out

    def close(self):
        while getattr(self, "_links", None):
            os.close(self._links.pop())
        if getattr(self, "_prog_fd", None) is not None:
            os.close(self._prog_fd)
            self._prog_fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
