"""How the fentry method counts each refcount put once: whether futex_hash_put's
text calls futex_private_hash_put's entry decides which functions it hooks
(loading/fentry.py put_plan). Pure Python on synthetic machine code."""
from __future__ import annotations

import struct

import pytest

from futextrace.loading import fentry

BASE, TARGET = 0xFFFFFFFF81000100, 0xFFFFFFFF81000000


def rel32(op: bytes, at: int, to: int) -> bytes:
    """`op` rel32 placed at offset `at` of the caller, landing on `to`."""
    return op + struct.pack("<i", to - (BASE + at + len(op) + 4))


@pytest.mark.parametrize("op", [b"\xe8", b"\xe9", b"\x0f\x85"])   # call, tail jmp, jne
def test_a_call_or_jump_to_the_entry_is_found(op):
    code = b"\x90" * 7 + rel32(op, 7, TARGET) + b"\xc3"
    assert fentry.reaches(code, BASE, TARGET)


def test_the_padding_before_the_entry_counts_as_the_entry():
    code = rel32(b"\xe8", 0, TARGET - 16) + b"\xc3"     # a call thunk in __pfx_
    assert fentry.reaches(code, BASE, TARGET)


def test_a_call_elsewhere_is_not_a_call_of_the_target():
    code = rel32(b"\xe8", 0, TARGET + 0x40) + rel32(b"\xe9", 5, TARGET - 17) + b"\xc3"
    assert not fentry.reaches(code, BASE, TARGET)


class _Model:
    def __init__(self, calls):
        self.calls = calls


@pytest.mark.parametrize("calls, plan, skipped, flags", [
    (True, "private", {"fe_futex_hash_put", "fx_futex_hash_put"}, []),
    (False, "both", {"fx_futex_hash_put"}, []),
    (None, "marked", set(), ["-DFENTRY_HASH_PUT"]),           # text unreadable: mark the nesting
])
def test_put_plan_follows_the_call(monkeypatch, calls, plan, skipped, flags):
    monkeypatch.setattr(fentry, "attachable", lambda m, f: True)
    monkeypatch.setattr(fentry, "calls_into", lambda m, a, b: calls)
    assert fentry.put_plan(_Model(calls)) == plan
    assert fentry.PLAN_SKIPS[plan] == skipped
    assert fentry.cflags(_Model(calls)) == flags
