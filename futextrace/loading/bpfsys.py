"""The bpf(2) system call, for what BCC 0.26 does not do or should not be
loaded for: load a BTF-attached tracing program (tp_btf in tpbtf.py, the task
iterator in iterator.py), create the maps and load the programs of a cached
program without BCC's compiler (bcclite.py, progcache.py), and read a
program's run statistics."""
from __future__ import annotations

import ctypes
import os
import struct
from typing import NamedTuple

_NR_BPF = 321                  # x86_64
BPF_MAP_CREATE = 0
BPF_PROG_LOAD = 5
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_RAW_TRACEPOINT_OPEN = 17

# struct bpf_prog_info (uapi, append-only): run_time_ns, run_cnt and
# recursion_misses are three u64 at offset 192 since Linux 5.12.
_PROG_INFO_SIZE = 216
_RUN_STATS_OFF = 192

BPF_PROG_TYPE_KPROBE = 2
BPF_PROG_TYPE_TRACEPOINT = 5
BPF_PROG_TYPE_RAW_TRACEPOINT = 17
BPF_PROG_TYPE_TRACING = 26
BPF_TRACE_RAW_TP = 23          # expected_attach_type of a tp_btf program
BPF_TRACE_ITER = 28            # ... of an iterator
ATTR_SIZE = 128                # up to attach_btf_id and then some; the kernel zero-checks the tail

_libc = ctypes.CDLL(None, use_errno=True)


def bpf(cmd: int, attr: bytes | bytearray) -> int:
    """Run bpf(cmd, attr); returns its result (a new fd for the commands that make one)."""
    buf = ctypes.create_string_buffer(bytes(attr), len(attr))
    ret = _libc.syscall(_NR_BPF, cmd, buf, len(attr))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


def create_map(map_type: int, key_size: int, value_size: int, max_entries: int,
               flags: int, name: str) -> int:
    """BPF_MAP_CREATE, as BCC creates a declared map (no BTF: none of ours
    holds a lock, timer or kernel pointer); the map's fd."""
    attr = bytearray(ATTR_SIZE)
    # union bpf_attr, BPF_MAP_CREATE: map_type, key_size, value_size,
    # max_entries, map_flags, inner_map_fd, numa_node, map_name[16]
    struct.pack_into("<IIIIIII16s", attr, 0, map_type, key_size, value_size, max_entries,
                     flags, 0, 0, name.encode()[:15])
    return bpf(BPF_MAP_CREATE, attr)


def load_program(insns: bytes, name: str, prog_type: int, license_: str, kern_version: int) -> int:
    """BPF_PROG_LOAD of compiled `insns` as `prog_type` (a kprobe, tracepoint
    or raw tracepoint program: no BTF attach point); the program fd. A refusal
    raises OSError with `verifier_says` (load_tracing)."""
    return _load(insns, name, prog_type, license_, kern_version, 0, 0)


def load_tracing(insns: bytes, name: str, attach_type: int, btf_id: int) -> int:
    """BPF_PROG_LOAD of BCC-compiled `insns` as BPF_PROG_TYPE_TRACING with
    `attach_type` on BTF id `btf_id`; returns the program fd. No verifier log on
    the first try: logging every instruction it checks made a tp_btf load take
    0.76 s instead of 0.1 s. A refusal is retried with the log, and the OSError
    raised carries `verifier_says`: the verifier's reason."""
    return _load(insns, name, BPF_PROG_TYPE_TRACING, "GPL", 0, attach_type, btf_id)


def _load(insns: bytes, name: str, prog_type: int, license_: str, kern_version: int,
          attach_type: int, btf_id: int) -> int:
    code = ctypes.create_string_buffer(insns, len(insns))
    license_buf = ctypes.create_string_buffer(license_.encode())
    log = None       # 1 MiB, made for the retry with the verifier's log only
    for log_level in (0, 1):
        if log_level:
            log = ctypes.create_string_buffer(1 << 20)
        attr = bytearray(ATTR_SIZE)
        # union bpf_attr, BPF_PROG_LOAD: prog_type, insn_cnt, insns, license,
        # log_level, log_size, log_buf, kern_version, prog_flags, prog_name[16]
        struct.pack_into("<IIQQIIQII16s", attr, 0, prog_type, len(insns) // 8,
                         ctypes.addressof(code), ctypes.addressof(license_buf), log_level,
                         len(log) if log_level else 0, ctypes.addressof(log) if log_level else 0,
                         kern_version, 0, name.encode()[:15])
        struct.pack_into("<I", attr, 68, attach_type)   # expected_attach_type
        struct.pack_into("<I", attr, 108, btf_id)       # attach_btf_id
        try:
            return bpf(BPF_PROG_LOAD, attr)
        except OSError as e:
            err = e
    lines = [ln for ln in log.value.decode(errors="replace").splitlines() if ln.strip()]
    err.verifier_says = lines[-2] if len(lines) >= 2 else (lines[-1] if lines else "")
    raise err


def with_map_fds(function: dict, fds: dict[str, int]) -> bytes:
    """A cached function's instructions (progcache's entry: hex `insns`, and
    `maps`, the [index, map name] of each map reference) with each reference's
    immediate holding its map's fd, ready for BPF_PROG_LOAD."""
    insns = bytearray.fromhex(function["insns"])
    for index, table in function["maps"]:
        struct.pack_into("<i", insns, index * 8 + 4, fds[table])
    return bytes(insns)


class ProgStats(NamedTuple):
    run_time_ns: int        # 0 unless kernel.bpf_stats_enabled
    run_cnt: int            # 0 unless kernel.bpf_stats_enabled
    recursion_misses: int   # runs the kernel skipped: the program was already running on that CPU


def prog_stats(prog_fd: int) -> ProgStats:
    info = ctypes.create_string_buffer(_PROG_INFO_SIZE)
    attr = struct.pack("<IIQ", prog_fd, _PROG_INFO_SIZE, ctypes.addressof(info))
    bpf(BPF_OBJ_GET_INFO_BY_FD, attr)
    return ProgStats(*struct.unpack_from("<QQQ", info.raw, _RUN_STATS_OFF))
