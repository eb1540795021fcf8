"""Fixtures of the tests against this machine's kernel; the helpers they share
(skip guards, command helpers) are in tests/helpers/host.py."""
from __future__ import annotations

import subprocess

import pytest

from tests.helpers.host import REPO, compile_c


@pytest.fixture(scope="session")
def kernel_model():
    """futextrace's kernel model, loaded once per session (BTF and kallsyms scans
    take tens of seconds under QEMU/TCG)."""
    from futextrace.kernel import model as kmodel
    return kmodel.load()


@pytest.fixture
def sleeper():
    """The pid of a process that makes no futex call, for -p (killed after the test)."""
    p = subprocess.Popen(["sleep", "600"])
    yield p.pid
    p.kill()
    p.wait()


@pytest.fixture(scope="session")
def named_futexes(tmp_path_factory):
    """tests/data/named_futexes.c built with frame pointers (test_names.py, test_call_sites.py)."""
    return compile_c(REPO / "tests/data/named_futexes.c", tmp_path_factory.mktemp("named") / "named_futexes",
                     "-O1", "-pthread", "-fno-omit-frame-pointer")


# --- commands ---------------------------------------------------------------------
