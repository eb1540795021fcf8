"""Fixtures of the tests against this machine's kernel; the helpers they share
(skip guards, command helpers) are in tests/helpers/host.py."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def kernel_model():
    """futextrace's kernel model, loaded once per session (BTF and kallsyms scans
    take tens of seconds under QEMU/TCG)."""
    from futextrace.kernel import model as kmodel
    return kmodel.load()


# --- commands ---------------------------------------------------------------------
