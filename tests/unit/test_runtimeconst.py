"""Finding 7.3's global table array in a /proc/kcore-format file (built here:
an ELF core with PT_LOAD segments, as the kernel writes it)."""
from __future__ import annotations

import struct

from futextrace.kernel import runtimeconst

TEXT = 0xFFFFFFFF81448870
ARRAY = 0xFFFF888003A41000
TABLE0 = 0xFFFF888100000000


def kcore(tmp_path, segments: list[tuple[int, bytes]]):
    """An ELF64 core file whose PT_LOAD segments map each (vaddr, bytes)."""
    phoff, phentsize = 64, 56
    data_off = phoff + phentsize * len(segments)
    head = bytearray(64)
    head[:5] = b"\x7fELF\x02"
    struct.pack_into("<Q", head, 32, phoff)
    struct.pack_into("<HH", head, 54, phentsize, len(segments))
    phdrs, blob = b"", b""
    for vaddr, content in segments:
        phdrs += struct.pack("<IIQQQQQQ", 1, 7, data_off + len(blob), vaddr, 0, len(content), len(content), 4096)
        blob += content
    path = tmp_path / "kcore"
    path.write_bytes(bytes(head) + phdrs + blob)
    return str(path)


def futex_hash_text(imm: int) -> bytes:
    # shr $0xc,%eax; movabs $imm,%rdx; and $mask,%eax; ret: the shape of 7.3's __futex_hash
    return (b"\x90" * 16 + b"\xc1\xe8\x0c" + b"\x48\xba" + struct.pack("<Q", imm)
            + b"\x25\xff\x03\x00\x00" + b"\xc3" + b"\xcc" * 40)


def test_patched_immediate_is_the_array(tmp_path):
    code = futex_hash_text(ARRAY)
    path = kcore(tmp_path, [(TEXT, code), (ARRAY, struct.pack("<Q", TABLE0))])
    assert runtimeconst.futex_queues_array(TEXT, TEXT + len(code), path) == ARRAY


def test_five_level_paging_addresses(tmp_path):
    array = 0xFF11796781A7F710      # a 7.3.4 guest's array (LA57 direct map)
    code = futex_hash_text(array)
    path = kcore(tmp_path, [(TEXT, code), (array, struct.pack("<Q", 0xFF11796790000000))])
    assert runtimeconst.futex_queues_array(TEXT, TEXT + len(code), path) == array


def test_unpatched_placeholder_or_a_bad_array_is_not_taken(tmp_path):
    code = futex_hash_text(runtimeconst.PLACEHOLDER)
    path = kcore(tmp_path, [(TEXT, code), (ARRAY, struct.pack("<Q", TABLE0))])
    assert runtimeconst.futex_queues_array(TEXT, TEXT + len(code), path) is None
    code = futex_hash_text(ARRAY)
    path = kcore(tmp_path, [(TEXT, code), (ARRAY, struct.pack("<Q", 0))])   # node 0 has no table
    assert runtimeconst.futex_queues_array(TEXT, TEXT + len(code), path) is None


def test_unreadable_text_gives_none(tmp_path):
    path = kcore(tmp_path, [(ARRAY, struct.pack("<Q", TABLE0))])
    assert runtimeconst.futex_queues_array(TEXT, TEXT + 64, path) is None
    assert runtimeconst.futex_queues_array(TEXT, TEXT + 64, str(tmp_path / "missing")) is None
    assert runtimeconst.read_kernel(ARRAY, 16, path) is None       # past the segment's end
