"""The bpf(2) system call, for the few things BCC 0.26 does not do: load a
tp_btf program (tpbtf.py) and read a program's run statistics."""
from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import dataclass

_NR_BPF = 321                  # x86_64
BPF_PROG_LOAD = 5
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_RAW_TRACEPOINT_OPEN = 17

# struct bpf_prog_info (uapi, append-only): run_time_ns, run_cnt and
# recursion_misses are three u64 at offset 192 since Linux 5.12.
_PROG_INFO_SIZE = 216
_RUN_STATS_OFF = 192

_libc = ctypes.CDLL(None, use_errno=True)


def bpf(cmd: int, attr: bytes | bytearray) -> int:
    """Run bpf(cmd, attr); returns its result (a new fd for the commands that make one)."""
    buf = ctypes.create_string_buffer(bytes(attr), len(attr))
    ret = _libc.syscall(_NR_BPF, cmd, buf, len(attr))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


@dataclass(frozen=True)
class ProgStats:
    run_time_ns: int        # 0 unless kernel.bpf_stats_enabled
    run_cnt: int            # 0 unless kernel.bpf_stats_enabled
    recursion_misses: int   # runs the kernel skipped: the program was already running on that CPU


def prog_stats(prog_fd: int) -> ProgStats:
    info = ctypes.create_string_buffer(_PROG_INFO_SIZE)
    attr = struct.pack("<IIQ", prog_fd, _PROG_INFO_SIZE, ctypes.addressof(info))
    bpf(BPF_OBJ_GET_INFO_BY_FD, attr)
    return ProgStats(*struct.unpack_from("<QQQ", info.raw, _RUN_STATS_OFF))
