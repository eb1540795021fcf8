"""7.3's global futex tables, found without data symbols: the runtime constant
patched into __futex_hash's own text.

7.3 hashes the global table through runtime constants (futex-kernel-facts.md
section 7): `__futex_queues` (the pointer to the nr_node_ids-entry array of
per-node tables) is written at boot into the immediate of a
`movabs $imm64, %reg` in __futex_hash, in place of the placeholder
0x0123456789abcdef. Without CONFIG_KALLSYMS_ALL the variable has no symbol,
but __futex_hash (a text symbol) has, and /proc/kcore lets root read its
bytes: the one kernel-address imm64 there is the array's address.
"""
from __future__ import annotations

import os
import struct

KCORE = "/proc/kcore"
PLACEHOLDER = 0x0123456789ABCDEF
# The kernel half of the address space with 5-level paging (4-level: from
# 0xffff800000000000); QEMU offers LA57, and 7.3.4 guests map RAM at 0xff11...
KERNEL_HALF = 0xFF00000000000000
PT_LOAD = 1


def read_kernel(addr: int, size: int, path: str = KCORE) -> bytes | None:
    """`size` bytes at kernel virtual address `addr` from /proc/kcore (an ELF
    core file: one PT_LOAD segment per mapped range), or None. Exact preads:
    a buffered read past the wanted bytes may reach a page kcore refuses."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        head = os.pread(fd, 64, 0)
        if head[:4] != b"\x7fELF" or head[4] != 2:
            return None
        phoff, = struct.unpack_from("<Q", head, 32)
        phentsize, phnum = struct.unpack_from("<HH", head, 54)
        table = os.pread(fd, phentsize * phnum, phoff)
        for i in range(phnum):
            ptype, _, off, vaddr, _, filesz = struct.unpack_from("<IIQQQQ", table, i * phentsize)
            if ptype == PT_LOAD and vaddr <= addr and addr + size <= vaddr + filesz:
                data = os.pread(fd, size, off + addr - vaddr)
                return data if len(data) == size else None
    except OSError:
        return None
    finally:
        os.close(fd)
    return None


def movabs_immediates(code: bytes) -> list[int]:
    """Every imm64 of a `REX.W B8+r imm64` (movabs to a register) in `code`."""
    out = []
    for i in range(len(code) - 9):
        if code[i] in (0x48, 0x49) and 0xB8 <= code[i + 1] <= 0xBF:
            out.append(struct.unpack_from("<Q", code, i + 2)[0])
    return out


def futex_queues_array(text_start: int, text_end: int, path: str = KCORE) -> int | None:
    """The address of 7.3's per-node table pointer array, read from the patched
    immediate in __futex_hash's text [text_start, text_end); None when the text
    cannot be read, is not patched yet, or holds no single kernel pointer."""
    if not text_start or text_end <= text_start or text_end - text_start > 4096:
        return None
    code = read_kernel(text_start, text_end - text_start, path)
    if code is None:
        return None
    found = {v for v in movabs_immediates(code) if v >= KERNEL_HALF and v != PLACEHOLDER}
    if len(found) != 1:
        return None
    array = found.pop()
    first = read_kernel(array, 8, path)     # node 0's table: a kernel pointer, or not the array
    return array if first and struct.unpack("<Q", first)[0] >= KERNEL_HALF else None
