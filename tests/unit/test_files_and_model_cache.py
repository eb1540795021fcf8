"""Bounded reads and one-line write errors (output/jsonio.py), the kallsyms
fragment index, and the kernel model's round trip through its cache format."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from futextrace.errors import EXIT_IO, FileProblem
from futextrace.kernel import model as kmodel
from futextrace.kernel.kallsyms import FRAGMENT_SUFFIX, Kallsyms
from futextrace.output import jsonio

DATA = Path(__file__).parent.parent / "data" / "btf"


def test_read_bounded_regular_file(tmp_path):
    f = tmp_path / "r.json"
    f.write_bytes(b"x" * 100)
    assert jsonio.read_bounded(str(f), limit=100) == b"x" * 100
    with pytest.raises(FileProblem, match="more than the 0 MiB"):
        jsonio.read_bounded(str(f), limit=99)


@pytest.mark.parametrize("make, words", [
    (lambda d: "/dev/zero", "is a character device"),
    (lambda d: str(d), "is a directory"),
    (lambda d: (os.mkfifo(d / "p"), str(d / "p"))[1], "is a FIFO"),
    (lambda d: str(d / "missing"), "cannot read"),
])
def test_read_bounded_refuses(tmp_path, make, words):
    with pytest.raises(FileProblem, match=words) as e:
        jsonio.read_bounded(make(tmp_path), "recording")
    assert e.value.exit_code == EXIT_IO


def test_read_bounded_sparse_file_over_the_cap(tmp_path):
    f = tmp_path / "huge"
    with open(f, "wb") as fh:
        fh.truncate(jsonio.MAX_READ_BYTES + 1)
    with pytest.raises(FileProblem, match="more than the 512 MiB a recording may be"):
        jsonio.read_bounded(str(f), "recording")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_write_to_full_disk_is_one_file_problem():
    out = jsonio.open_output("/dev/full")
    with pytest.raises(FileProblem, match="cannot write /dev/full: No space left on device"):
        out.write_json({"a": 1})


def test_write_to_broken_pipe_is_one_file_problem():
    r, w = os.pipe()
    os.close(r)
    out = jsonio.Output(os.fdopen(w, "w"), "the pipe")
    with pytest.raises(FileProblem, match="cannot write the pipe: Broken pipe"):
        out.write_jsonl({"a": 1})


def test_open_output_unwritable():
    with pytest.raises(FileProblem, match="cannot write /nonexistent/x.json"):
        jsonio.open_output("/nonexistent/x.json")


KALLSYMS = """\
ffffffff81000000 T futex_wake
ffffffff81000010 t futex_wake.part.0
ffffffff81000020 t futex_wake.cold
ffffffff81000030 t futex_wait.isra.0
ffffffff81000040 t futex_wait.isra.0.part.0
ffffffff81000050 t futex_wake_op
ffffffff81000060 t futex_wakeup.part.1
ffffffff81000070 T other_function.cold
ffffffffc0000000 t futex_mod_fn\t[somemod]
"""


def brute_fragments(names, name):
    """The definition: names that start with name + "." and end like a fragment."""
    return [n for n in names if n.startswith(name + ".") and FRAGMENT_SUFFIX.search(n)]


def test_fragment_index_matches_the_definition(tmp_path):
    f = tmp_path / "kallsyms"
    f.write_text(KALLSYMS)
    ks = Kallsyms.from_file(f)
    names = [s.name for s in ks.symbols]
    for name in ("futex_wake", "futex_wait", "futex_wait.isra.0", "futex_wakeup",
                 "other_function", "futex_wake_op", "nothing"):
        assert ks.fragments(name) == brute_fragments(names, name), name
    assert ks.function("futex_wait") == ("futex_wait.isra.0", True)


def test_kallsyms_containing_keeps_only_those_lines(tmp_path):
    f = tmp_path / "kallsyms"
    f.write_text(KALLSYMS)
    ks = Kallsyms.from_file(f, containing="futex")
    assert [s.name for s in ks.symbols] == [ln.split()[2] for ln in KALLSYMS.splitlines()
                                           if "futex" in ln and "[" not in ln]


def test_every_model_symbol_contains_futex():
    """The model reads only kallsyms lines containing "futex"."""
    assert all("futex" in name for name in kmodel.FUNCTIONS)


@pytest.mark.parametrize("digest", sorted(p.name for p in DATA.glob("*.json")))
def test_model_round_trip(digest):
    from futextrace.kernel import topology
    m = kmodel.load(str(DATA / digest), live=False)
    m.topology = topology.Topology([0, 1, 4], 8, {0: 0, 1: 0, 4: 1}, [0, 1], [0, 1])
    back = kmodel.KernelModel.from_dict(json.loads(json.dumps(m.to_dict())))
    assert back == m


def test_model_cache_keeps_the_newest(tmp_path):
    """Every boot (and VM guest) adds a model: only the newest KEEP stay."""
    from futextrace.kernel import modelcache
    m = kmodel.load(str(DATA / "debian-7.3.4.json"), live=False)
    d = tmp_path / "model"
    d.mkdir()
    for i in range(modelcache.KEEP + 3):
        f = d / f"old{i}.json"
        f.write_text("{}")
        os.utime(f, (1000 + i, 1000 + i))
    modelcache._write(d / "new.json", m)
    left = sorted(p.name for p in d.glob("*.json"))
    assert len(left) == modelcache.KEEP and "new.json" in left
    assert "old0.json" not in left and f"old{modelcache.KEEP + 2}.json" in left
