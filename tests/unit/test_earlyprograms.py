"""The early programs' hint (loading/earlyprograms.py), without a kernel: what
a start remembers, and when the next start of the command acts on it: only
in the boot the hint was written in, and only on a well-formed hint this
user wrote. That a warm start takes the programs, and closes what it does
not take, is checked on the kernel (tests/host/test_earlyprograms.py)."""
from __future__ import annotations

import json
import os

import pytest

from futextrace.loading import earlymaps, earlyprograms
from tests.helpers.earlymaps import isolate

PROGRAMS = [("ft_btf_sys_enter", 11320), ("ft_btf_waitv_chunk", 11320), ("ft_btf_contention_begin", 10840)]


@pytest.fixture
def begun(tmp_path, monkeypatch):
    """The programs a start() began loading (nothing is loaded: no thread work)."""
    isolate(monkeypatch, tmp_path)
    monkeypatch.setattr(earlyprograms, "boot_id", lambda: "boot-a")
    seen = []
    monkeypatch.setattr(earlyprograms._EarlyProgram, "run",
                        lambda self: (seen.append((self.entry_name, self.programs)), self.done.set()))
    yield seen
    earlyprograms._pending = None


def start_again(command="record", shape=None):
    earlyprograms._pending = None
    earlyprograms.start([shape, command] if shape else [command])


def test_what_a_start_remembers_the_next_start_of_that_command_loads(begun):
    earlyprograms.remember(["record"], "abc.json", PROGRAMS)
    assert json.loads(earlymaps.hint_path().read_text())["record programs"] == {
        "entry": "abc.json", "boot": "boot-a", "programs": [list(p) for p in PROGRAMS]}
    start_again()
    earlyprograms._pending.done.wait(5)
    assert begun == [("abc.json", PROGRAMS)]     # in the order remembered: sys_enter first
    start_again("serve")                         # another command: nothing remembered for it
    assert begun == [("abc.json", PROGRAMS)] and earlyprograms._pending is None


def test_a_shape_loads_what_its_own_last_start_loaded_and_a_new_shape_the_commands(begun):
    earlyprograms.remember(["serve -p", "serve"], "pid-filter.json", PROGRAMS[:1])
    earlyprograms.remember(["serve --listen", "serve"], "all.json", PROGRAMS[:2])
    start_again("serve", "serve -p")
    start_again("serve", "serve --listen")
    start_again("serve", "serve --listen -p")     # not seen yet: the command's last
    assert [entry for entry, _ in begun] == ["pid-filter.json", "all.json", "all.json"]


def test_nothing_is_loaded_from_a_hint_of_another_boot(begun, monkeypatch):
    earlyprograms.remember(["record"], "abc.json", PROGRAMS)
    monkeypatch.setattr(earlyprograms, "boot_id", lambda: "boot-b")    # rebooted, into any kernel
    start_again()
    assert earlyprograms._pending is None and begun == []


def test_a_hint_out_of_shape_or_others_could_write_is_ignored(begun):
    for bad in ({"entry": "../../etc/x.json", "boot": "boot-a", "programs": [list(PROGRAMS[0])]},
                {"entry": "abc", "boot": "boot-a", "programs": [list(PROGRAMS[0])]},
                {"entry": "abc.json", "boot": "boot-a", "programs": [["ft_btf_sys_enter", "11320"]]},
                {"entry": "abc.json", "boot": "boot-a", "programs": []},
                ["abc.json"]):
        earlymaps.update_hint({"record programs": bad})
        start_again()
        assert earlyprograms._pending is None, bad
    earlyprograms.remember(["record"], "abc.json", PROGRAMS)
    earlymaps.hint_path().chmod(0o666)
    start_again()
    assert earlyprograms._pending is None and begun == []


def test_an_unchanged_hint_is_not_written_again(begun):
    earlyprograms.remember(["record"], "abc.json", PROGRAMS)
    os.utime(earlymaps.hint_path(), (1, 1))
    earlyprograms.remember(["record"], "abc.json", PROGRAMS)
    assert earlymaps.hint_path().stat().st_mtime == 1


def test_no_program_cache_no_early_programs(begun, monkeypatch):
    earlyprograms.remember(["record"], "abc.json", PROGRAMS)
    monkeypatch.setenv("FUTEXTRACE_NO_PROG_CACHE", "1")
    start_again()
    assert earlyprograms._pending is None and begun == []


def test_a_replay_of_another_entry_gets_nothing_and_closes_what_was_made(begun, monkeypatch):
    """claim() hands the maps and programs over only for the very entry they
    were made from; otherwise they are closed (here: what close() was given)."""
    closed = []
    early = earlyprograms._EarlyProgram("abc.json", PROGRAMS)
    early.entry, early.fds, early.loaded = {"tables": [], "functions": {"f": 1}}, [], {PROGRAMS[0]: 99}
    early.done.set()
    monkeypatch.setattr(early, "close", lambda: closed.append(True))
    earlyprograms._pending = early
    assert earlyprograms.claim({"tables": [], "functions": {"f": 2}}) is None
    assert closed == [True] and earlyprograms._pending is None
    early2 = earlyprograms._EarlyProgram("abc.json", PROGRAMS)
    early2.entry, early2.fds, early2.loaded = {"tables": [], "functions": {"f": 1}}, [7], {PROGRAMS[0]: 99}
    early2.done.set()
    earlyprograms._pending = early2
    assert earlyprograms.claim({"tables": [], "functions": {"f": 1}}) == ([7], {PROGRAMS[0]: 99}, 0)
