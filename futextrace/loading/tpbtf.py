"""Attach a BCC-compiled function as a BTF-enabled tracepoint (tp_btf).

BCC 0.26 loads raw tracepoints only as BPF_PROG_TYPE_RAW_TRACEPOINT, whose
arguments are untyped numbers. A tp_btf program (BPF_PROG_TYPE_TRACING,
attach type BPF_TRACE_RAW_TP) gets the tracepoint's arguments as BTF-typed
pointers the verifier lets it read with plain loads. BCC compiles the function
(map fds already in its instructions); this module loads and attaches it with
the bpf(2) syscall. The attachment is a file descriptor: it goes away when it
is closed or the process dies, like BCC's own.
"""
from __future__ import annotations

import ctypes
import os
import struct

from futextrace.loading.bpfsys import (BPF_PROG_TYPE_RAW_TRACEPOINT, BPF_RAW_TRACEPOINT_OPEN, BPF_TRACE_RAW_TP,
                                       bpf, load_tracing)
from futextrace.errors import KernelRefused
from futextrace.loading import bcclite

def attach(bcc, fn_name: str, btf_id: int) -> tuple[int, int]:
    """Load BCC function `fn_name` as tp_btf on the tracepoint whose
    `btf_trace_<name>` typedef has BTF id `btf_id`, and attach it. Returns
    (attachment fd, program fd): closing the attachment detaches; the program
    fd stays open for its run statistics (bpfsys.prog_stats)."""
    prog_fd = load(bcc, fn_name, btf_id)
    try:
        return attach_loaded(prog_fd, fn_name), prog_fd
    except KernelRefused:
        os.close(prog_fd)
        raise


def attach_loaded(prog_fd: int, name: str | None = None) -> int:
    """Attach a loaded tp_btf program (its fd; `name` for the error); the
    attachment's fd."""
    link = bytearray(16)
    struct.pack_into("<QI", link, 0, 0, prog_fd)          # name NULL: tp_btf
    try:
        return bpf(BPF_RAW_TRACEPOINT_OPEN, link)
    except OSError as e:
        raise KernelRefused(f"the kernel refused to attach tp_btf program {name or f'fd {prog_fd}'} ({e.strerror})")


def prefetch(bcc, wanted: list[tuple[str, int]]) -> None:
    """Start loading these tp_btf programs ((function, BTF id) each) at once,
    one thread each up to the CPU count: the verifier runs in the loading
    thread, and ctypes lets go of the GIL during the system call, so on two
    CPUs two programs are verified at the same time (the tracepoint method's
    four took 0.33 s one after another). load() takes them from here; what
    nothing took is closed by drop_prefetched()."""
    if not wanted:
        return
    from concurrent.futures import Future, ThreadPoolExecutor
    bcc._ft_prefetched = {}
    for fn, btf_id in wanted:     # those the command line loaded before its imports (earlyprograms)
        fd = early_program(bcc, fn, btf_id)
        if fd is not None:
            bcc._ft_prefetched[(fn, btf_id)] = Future()
            bcc._ft_prefetched[(fn, btf_id)].set_result(fd)
    bcc.early_programs = len(bcc._ft_prefetched)
    wanted = [w for w in wanted if w not in bcc._ft_prefetched]
    if not wanted:
        return
    pool = ThreadPoolExecutor(max_workers=max(1, min(len(wanted), os.cpu_count() or 1)))
    bcc._ft_prefetched.update({(fn, btf_id): pool.submit(_load_now, bcc.dump_func(fn.encode()), fn, btf_id)
                               for fn, btf_id in wanted})
    pool.shutdown(wait=False)


def early_program(bcc, fn: str, btf_id: int) -> int | None:
    """The program fd earlyprograms loaded for this replay, if any."""
    if not getattr(bcc, "compile_cache", None) == "hit":
        return None
    return bcclite.take_early_program(bcc.module, fn, btf_id)


def drop_prefetched(bcc) -> None:
    """Close the prefetched programs no load() took (once they are loaded)."""
    pending = getattr(bcc, "_ft_prefetched", None) or {}
    while pending:
        _, future = pending.popitem()
        try:
            os.close(future.result())
        except KernelRefused:
            pass


def load(bcc, fn_name: str, btf_id: int) -> int:
    """Load BCC function `fn_name` as a tp_btf program for `btf_id` without
    attaching it (also for a program another one tail-calls); its fd. One
    prefetch() started is waited for instead."""
    pending = (getattr(bcc, "_ft_prefetched", None) or {}).pop((fn_name, btf_id), None)
    if pending is not None:
        return pending.result()
    try:
        insns = bcc.dump_func(fn_name.encode())
    except Exception as e:  # BCC raises bare Exceptions
        raise KernelRefused(f"tp_btf program {fn_name} did not compile: {e}")
    return _load_now(insns, fn_name, btf_id)


def _load_now(insns: bytes, fn_name: str, btf_id: int) -> int:
    try:
        return load_tracing(insns, fn_name, BPF_TRACE_RAW_TP, btf_id)
    except OSError as e:
        raise KernelRefused(f"the kernel refused tp_btf program {fn_name} ({e.strerror})"
                            + (f": {e.verifier_says}" if e.verifier_says else ""))


def fill_tail_call(bcc, table: str, fn_btf: str, fn_raw: str, btf_id: int | None) -> None:
    """Put the program `table`[0] tail-calls in place, of its caller's type:
    tp_btf for `btf_id`, else a raw tracepoint. The prog array holds its own
    reference, dropped with the array when the programs are unloaded."""
    if btf_id is None:
        bcc[table][ctypes.c_int(0)] = ctypes.c_int(bcc.load_func(fn_raw.encode(), BPF_PROG_TYPE_RAW_TRACEPOINT).fd)
        return
    fd = load(bcc, fn_btf, btf_id)
    try:
        bcc[table][ctypes.c_int(0)] = ctypes.c_int(fd)
    finally:
        os.close(fd)
