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

from futextrace.loading.bpfsys import BPF_PROG_LOAD, BPF_RAW_TRACEPOINT_OPEN, bpf
from futextrace.errors import KernelRefused

_BPF_PROG_TYPE_TRACING = 26
_BPF_TRACE_RAW_TP = 23
_ATTR_SIZE = 128               # up to attach_btf_id and then some; the kernel zero-checks the tail


def _load(insns: bytes, fn_name: str, btf_id: int, log_level: int) -> int:
    """BPF_PROG_LOAD as tp_btf; returns the program fd. A refusal raises
    OSError with `verifier_says`: the verifier's reason when log_level is 1."""
    code = ctypes.create_string_buffer(insns, len(insns))
    license_ = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(1 << 20 if log_level else 1)
    attr = bytearray(_ATTR_SIZE)
    # union bpf_attr, BPF_PROG_LOAD: prog_type, insn_cnt, insns, license,
    # log_level, log_size, log_buf, kern_version, prog_flags, prog_name[16]
    struct.pack_into("<IIQQIIQII16s", attr, 0, _BPF_PROG_TYPE_TRACING, len(insns) // 8,
                     ctypes.addressof(code), ctypes.addressof(license_), log_level,
                     len(log) if log_level else 0, ctypes.addressof(log) if log_level else 0,
                     0, 0, fn_name.encode()[:15])
    struct.pack_into("<I", attr, 68, _BPF_TRACE_RAW_TP)     # expected_attach_type
    struct.pack_into("<I", attr, 108, btf_id)               # attach_btf_id
    try:
        return bpf(BPF_PROG_LOAD, attr)
    except OSError as e:
        lines = [ln for ln in log.value.decode(errors="replace").splitlines() if ln.strip()]
        e.verifier_says = lines[-2] if len(lines) >= 2 else (lines[-1] if lines else "")
        raise


def attach(bcc, fn_name: str, btf_id: int) -> tuple[int, int]:
    """Load BCC function `fn_name` as tp_btf on the tracepoint whose
    `btf_trace_<name>` typedef has BTF id `btf_id`, and attach it. Returns
    (attachment fd, program fd): closing the attachment detaches; the program
    fd stays open for its run statistics (bpfsys.prog_stats)."""
    prog_fd = load(bcc, fn_name, btf_id)
    try:
        link = bytearray(16)
        struct.pack_into("<QI", link, 0, 0, prog_fd)          # name NULL: tp_btf
        return bpf(BPF_RAW_TRACEPOINT_OPEN, link), prog_fd
    except OSError as e:
        os.close(prog_fd)
        raise KernelRefused(f"the kernel refused to attach tp_btf program {fn_name} ({e.strerror})")


def load(bcc, fn_name: str, btf_id: int) -> int:
    """Load BCC function `fn_name` as a tp_btf program for `btf_id` without
    attaching it (also for a program another one tail-calls); its fd."""
    try:
        insns = bcc.dump_func(fn_name.encode())
    except Exception as e:  # BCC raises bare Exceptions
        raise KernelRefused(f"tp_btf program {fn_name} did not compile: {e}")
    try:
        # No verifier log on the first try: logging every instruction it checks
        # made the load take 0.76 s instead of 0.1 s. A refusal is retried with
        # the log, for the reason to show.
        return _load(insns, fn_name, btf_id, log_level=0)
    except OSError:
        try:
            return _load(insns, fn_name, btf_id, log_level=1)
        except OSError as e:
            raise KernelRefused(f"the kernel refused tp_btf program {fn_name} ({e.strerror})"
                                + (f": {e.verifier_says}" if getattr(e, "verifier_says", "") else ""))


def fill_tail_call(bcc, table: str, fn_btf: str, fn_raw: str, btf_id: int | None) -> None:
    """Put the program `table`[0] tail-calls in place, of its caller's type:
    tp_btf for `btf_id`, else a raw tracepoint. The prog array holds its own
    reference, dropped with the array when the programs are unloaded."""
    if btf_id is None:
        from bcc import BPF
        bcc[table][ctypes.c_int(0)] = ctypes.c_int(bcc.load_func(fn_raw.encode(), BPF.RAW_TRACEPOINT).fd)
        return
    fd = load(bcc, fn_btf, btf_id)
    try:
        bcc[table][ctypes.c_int(0)] = ctypes.c_int(fd)
    finally:
        os.close(fd)
