"""The tests' own jhash2 (fidelity_ref.py) against a C copy of the kernel's
jhash2 compiled here: the reference every fidelity test computes buckets with."""
from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from tests.helpers import fidelity_ref
from tests.helpers.host import compile_c

DATA = Path(__file__).parent.parent / "data"


@pytest.fixture(scope="module")
def c_jhash2(tmp_path_factory):
    return compile_c(DATA / "jhash2.c", tmp_path_factory.mktemp("jhash") / "jhash2", "-O2")


def test_python_jhash2_equals_the_kernels_c_for_every_length(c_jhash2):
    rnd = random.Random(14)
    cases = [(rnd.getrandbits(32), [rnd.getrandbits(32) for _ in range(n)])
             for n in list(range(0, 10)) * 200]
    # The futex keys: 2 words (private address), 4 words (mm, address), page offsets.
    cases += [(rnd.randrange(0, 4096, 4), [rnd.getrandbits(32) for _ in range(n)])
              for n in (2, 4) for _ in range(2000)]
    text = "".join(f"{iv:x} {' '.join(f'{w:x}' for w in ws)}\n" for iv, ws in cases)
    out = subprocess.run([str(c_jhash2)], input=text, capture_output=True, text=True, check=True)
    c_hashes = [int(x, 16) for x in out.stdout.split()]
    assert len(c_hashes) == len(cases)
    py = [fidelity_ref.jhash2(ws, iv) for iv, ws in cases]
    assert py == c_hashes
    assert len(set(c_hashes)) > 0.99 * len(cases)   # a hash, not a constant


def test_private_bucket_uses_page_address_and_offset():
    # Two futexes on one page differ only in the offset (jhash2's initval).
    a, b = 0x7F0000001000, 0x7F0000001004
    assert fidelity_ref.private_bucket(a, 0xFFFF) != fidelity_ref.private_bucket(b, 0xFFFF)
    h = fidelity_ref.jhash2([a & 0xFFFFFFFF, a >> 32], 0)
    assert fidelity_ref.private_bucket(a, 63) == h & 63
