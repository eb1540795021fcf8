"""Each precondition has one check and one wording: root and the futex private
hash (loading/preconditions.py), a process's name (procs/targets.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from futextrace.errors import EXIT_ENV, EnvironmentProblem
from futextrace.loading import preconditions
from futextrace.procs import targets

PACKAGE = Path(__file__).resolve().parents[2] / "futextrace"


def sources_saying(words: str) -> list[str]:
    return sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if words in p.read_text())


# words -> the only modules that may spell them
OWNERS = {"futextrace needs root": ["loading/preconditions.py"],
          "has no futex private hash": ["loading/preconditions.py"],
          "has no private futex hash": [],
          "geteuid() != 0": ["loading/preconditions.py"],
          # doctor reports the privileges it has; headers mounts tracefs when it can
          "geteuid() == 0": ["kernel/headers.py", "loading/doctor.py"]}


@pytest.mark.parametrize("words", sorted(OWNERS))
def test_each_precondition_is_worded_and_checked_in_one_module(words):
    assert sources_saying(words) == OWNERS[words]


def test_no_private_hash_is_an_environment_problem():
    with pytest.raises(EnvironmentProblem) as e:
        preconditions.require_private_hash(SimpleNamespace(private_hash=None))
    assert str(e.value) == ("this kernel has no futex private hash (CONFIG_FUTEX_PRIVATE_HASH, "
                            "Linux 6.17+): nothing for futextrace to show")
    assert e.value.exit_code == EXIT_ENV
    preconditions.require_private_hash(SimpleNamespace(private_hash=object()))


def test_root_check_follows_the_effective_uid(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(EnvironmentProblem, match="^futextrace needs root "):
        preconditions.require_root()
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    preconditions.require_root()


def test_comm_is_exact_while_alive_and_none_once_gone():
    # A child named "ab c " by itself: inner and trailing spaces are part of the name.
    code = ("import ctypes, sys; ctypes.CDLL(None).prctl(15, b'ab c ', 0, 0, 0); "
            "print('named', flush=True); sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "named\n"
        assert targets.comm_of(child.pid) == "ab c "
        assert targets.comm_label(child.pid) == "ab c "
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    assert targets.comm_of(child.pid) is None
    assert targets.comm_label(child.pid) == ""
