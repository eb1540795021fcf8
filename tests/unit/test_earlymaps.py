"""The early maps' bookkeeping (loading/earlymaps.py), without a kernel: what
counts as big, the hint file's trust and shape, and who starts them. That a
warm start takes them is checked on the kernel (tests/host/test_warm_start.py,
tests/host/test_earlymaps.py)."""
from __future__ import annotations

import json
import os

import pytest

from futextrace.loading import earlymaps
from tests.helpers.earlymaps import isolate, map_table as table


@pytest.fixture
def cache(tmp_path, monkeypatch):
    isolate(monkeypatch, tmp_path)
    started = []
    monkeypatch.setattr(earlymaps, "_begin", started.extend)
    return started


def test_big_means_a_preallocated_hash_of_a_mebibyte_or_more():
    assert earlymaps.is_big(table(), ncpus=2)                        # 65,536 x (24 + 2 x 32) bytes
    assert not earlymaps.is_big(table(entries=1024), ncpus=2)        # 90 KiB
    assert earlymaps.is_big(table(entries=8192), ncpus=4)            # 1.2 MiB: per CPU counts
    assert not earlymaps.is_big(table(entries=8192), ncpus=1)
    assert not earlymaps.is_big(table(flags=earlymaps.BPF_F_NO_PREALLOC), ncpus=2)
    assert not earlymaps.is_big(table(map_type=2, key=4, entries=1 << 19), ncpus=2)   # an array


def test_what_a_start_remembers_the_next_start_of_that_command_creates(cache):
    earlymaps.start("record")
    earlymaps.remember([table(), table("counters", 6, 4, 8, 18), table("buckets")], ncpus=2)
    assert json.loads(earlymaps.hint_path().read_text()) == {
        "record": [["futexes", 5, 24, 32, 65536, 0], ["buckets", 5, 24, 32, 65536, 0]]}
    earlymaps._command = None
    earlymaps.start("record")
    assert cache == [("futexes", 5, 24, 32, 65536, 0), ("buckets", 5, 24, 32, 65536, 0)]
    earlymaps._command = None
    earlymaps.start("serve")           # another command: nothing remembered for it
    assert len(cache) == 2


def test_an_unchanged_hint_is_not_written_again(cache):
    earlymaps.start("record")
    earlymaps.remember([table()], ncpus=2)
    os.utime(earlymaps.hint_path(), (1, 1))
    earlymaps.remember([table()], ncpus=2)
    assert earlymaps.hint_path().stat().st_mtime == 1


def test_a_hint_others_could_write_or_out_of_shape_is_ignored(cache):
    path = earlymaps.hint_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"record": [["futexes", 5, 24, 32, 65536, 0]]}))
    path.chmod(0o666)
    earlymaps.start("record")
    assert cache == []
    path.chmod(0o644)
    path.write_text(json.dumps({"record": [["futexes", 2, 24, 32, 65536, 0],      # an array
                                           ["huge", 5, 24, 32, 1 << 30, 0],        # too many entries
                                           ["bad", 5, -1, 32, 65536, 0], "x"]}))
    earlymaps._command = None
    earlymaps.start("record")
    assert cache == []


def test_only_the_futextrace_command_line_starts_them(cache, monkeypatch):
    asked = []
    monkeypatch.setattr(earlymaps, "start", lambda command, shape: asked.append((command, shape)))
    earlymaps.start_from_command_line(["/usr/bin/pytest", "record"])
    earlymaps.start_from_command_line(["/venv/bin/futextrace", "report", "x.json"])
    earlymaps.start_from_command_line(["/venv/bin/futextrace", "record", "-p", "1"])
    earlymaps.start_from_command_line(["/src/futextrace/cli.py", "serve"])
    earlymaps.start_from_command_line(["/venv/bin/futextrace", "record", "--help"])
    assert asked == [("record", "record -p"), ("serve", "serve")]


def test_a_shape_is_the_command_and_its_option_names_without_values():
    assert earlymaps.shape_of("record", ["-p", "1", "-d", "0.5"]) == "record -d -p"
    assert earlymaps.shape_of("serve", ["--listen=127.0.0.1:9", "-p1234", "-p", "7"]) == "serve --listen -p"
    assert earlymaps.shape_of("run", ["-t", "2", "--", "./bench", "--threads", "-x"]) == "run -t"
    assert earlymaps.shape_of("record", ["-d", "-1"]) == "record -d"        # a negative value is no option


def test_each_shape_creates_what_its_own_last_start_made(cache):
    """A `serve` after a `serve -p` (another program, other maps) makes its
    own last start's maps; a shape not seen yet makes its command's last."""
    for shape, entries in (("serve -p", 16384), ("serve --listen", 65536)):
        earlymaps._command = None
        earlymaps.start("serve", shape)
        earlymaps.remember([table(entries=entries)], ncpus=2)
    cache.clear()
    for shape in ("serve -p", "serve --listen", "serve --listen -p"):
        earlymaps._command = None
        earlymaps.start("serve", shape)
    assert [spec[4] for spec in cache] == [16384, 65536, 65536]


def test_the_hint_keeps_the_shapes_written_last(cache, monkeypatch):
    monkeypatch.setattr(earlymaps, "MOST_KEYS", 3)
    for shape in ("record -a", "record -b", "record -c", "record -d"):
        earlymaps.update_hint({shape: []})
    earlymaps.update_hint({"record -b": [["futexes", 5, 24, 32, 65536, 0]]})
    assert list(json.loads(earlymaps.hint_path().read_text())) == ["record -c", "record -d", "record -b"]


def test_the_program_cache_switch_turns_them_off(cache, monkeypatch):
    earlymaps.start("record")
    earlymaps.remember([table()], ncpus=2)
    earlymaps._command = None
    monkeypatch.setenv("FUTEXTRACE_NO_PROG_CACHE", "1")
    earlymaps.start("record")
    assert cache == []
