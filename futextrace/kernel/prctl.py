"""prctl(PR_FUTEX_HASH) through ctypes: read or set the calling process's private hash size."""
from __future__ import annotations

import ctypes
import os

from futextrace.kernel.constants import PR_FUTEX_HASH, PR_FUTEX_HASH_GET_SLOTS, PR_FUTEX_HASH_SET_SLOTS

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.prctl.restype = ctypes.c_int


def _prctl(op: int, arg3: int = 0, arg4: int = 0) -> int:
    r = _libc.prctl(PR_FUTEX_HASH, op, arg3, arg4, 0)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"prctl(PR_FUTEX_HASH, {op}, {arg3}): {os.strerror(e)}")
    return r


def get_slots() -> int:
    """Buckets of this process's private hash; 0 = it uses the global hash."""
    return _prctl(PR_FUTEX_HASH_GET_SLOTS)


def set_slots(n: int) -> int:
    """Ask for n buckets (0 = global hash for good). Raises OSError: EINVAL for a bad
    n or a kernel without the private hash, EBUSY once the global hash was chosen."""
    return _prctl(PR_FUTEX_HASH_SET_SLOTS, n)
