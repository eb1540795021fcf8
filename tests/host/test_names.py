"""Futex names against the real kernel: tests/data/named_futexes.c has its
futex words in named globals (.data, .bss, some in the .bss tail past the
file's pages), on the heap and on its threads' stacks. It runs under
`record --slots 2 --json F -- ./named_futexes` (and `explain`, which sets 2
buckets through the workload's own prctl) and exits before the run ends: its
names must come from the maps read while it lived.

Ground truth is the workload's own: the addresses it prints, the symbols and
sections of its ELF read here with pyelftools, and the bucket of each address
from the test's own jhash2 (fidelity_ref.private_bucket).
"""
from __future__ import annotations

import json

import pytest
from elftools.elf.elffile import ELFFile

from tests.helpers.host import cli, needs_bpf, needs_private_hash
from tests.helpers.fidelity_ref import private_bucket

pytestmark = [pytest.mark.root, needs_bpf, needs_private_hash]

GLOBALS = ("orders_mutex", "stock_latch", "ledger_gate", "audit_flag", "tail_gate")
MASK = 1          # two buckets


def elf_truth(path) -> dict[str, tuple[int, str]]:
    """name -> (st_value, section) of the globals, from the workload's own .symtab."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        syms = {s.name: s for s in elf.get_section_by_name(".symtab").iter_symbols() if s.name in GLOBALS}
        return {n: (s["st_value"], elf.get_section(s["st_shndx"]).name) for n, s in syms.items()}


def rw_file_end(path) -> int:
    """The first address (unrelocated) past the pages the file itself backs in its RW segment."""
    with open(path, "rb") as f:
        rw = [s for s in ELFFile(f).iter_segments() if s["p_type"] == "PT_LOAD" and s["p_flags"] & 2][0]
    return (rw["p_vaddr"] + rw["p_filesz"] + 4095) // 4096 * 4096


def printed(rec: dict) -> list[tuple[str, str]]:
    """("orders_mutex", "0x55...") lines the workload printed (command.stdout_tail)."""
    return [tuple(line.split()) for line in rec["command"]["stdout_tail"].splitlines() if line.strip()]


def same_bucket_pairs(addrs: dict[str, str]) -> list[set[str]]:
    by_bucket: dict[int, set[str]] = {}
    for name, a in addrs.items():
        by_bucket.setdefault(private_bucket(int(a, 16), MASK), set()).add(name)
    return [names for names in by_bucket.values() if len(names) > 1]


@pytest.fixture(scope="module")
def recorded(named_futexes, tmp_path_factory):
    path = tmp_path_factory.mktemp("names-rec") / "rec.json"
    r = cli("record", "--slots", "2", "--json", path, "--", named_futexes, "--seconds", "1")
    assert r.returncode == 0, r.stderr
    return json.loads(path.read_text()), r.stdout


def test_each_global_futex_carries_its_symbol_section_and_mapping(named_futexes, recorded):
    rec, _text = recorded
    assert not rec["command"]["stopped_by_futextrace"]        # it exited before the run ended
    proc = next(p for p in rec["processes"] if p["pid"] == rec["command"]["pid"])
    names = proc["futex_names"]
    truth = elf_truth(named_futexes)
    lines = printed(rec)
    globals_ = {n: a for n, a in lines if n in GLOBALS}
    assert set(globals_) == set(GLOBALS)
    base = {int(a, 16) - truth[n][0] for n, a in globals_.items()}
    assert len(base) == 1                                      # one load bias: the test reads the right file
    for name, addr in globals_.items():
        got = names[addr]
        assert (got["symbol"], got["section"], got["offset"], got["kind"]) == (name, truth[name][1], 0, "file"), got
        assert got["mapping"] == str(named_futexes) and got["why_unknown"] is None
    # the premise of the .bss-tail case: at least one named global past the file's pages
    assert any(truth[n][0] >= rw_file_end(named_futexes) for n in GLOBALS)
    for _n, addr in (x for x in lines if x[0] == "heap"):
        assert (names[addr]["kind"], names[addr]["mapping"], names[addr]["symbol"]) == ("heap", "[heap]", None)
    stacks = [a for n, a in lines if n == "stack"]         # each worker's local word, as it printed it
    assert len(stacks) == 2 and all(names[a]["kind"] == "thread_stack" for a in stacks), names
    assert not [a for a, n in names.items() if n["kind"] == "unmapped"], names


def test_the_colliding_globals_are_named_in_the_text(recorded):
    rec, text = recorded
    globals_ = {n: a for n, a in printed(rec) if n in GLOBALS}
    pairs = same_bucket_pairs(globals_)
    assert pairs                                   # five words in two buckets
    legend = text.split("the addresses above:")[1].split("\n\n")[0]
    # The table shows a bucket's 4 busiest listed futexes (per-futex counts are lower
    # bounds, so a heap word may outrank a global): one pair shown is what is asked.
    shown = [[n for n in names if f"{globals_[n]}  {n} (named_futexes ." in legend] for names in pairs]
    assert any(len(s) >= 2 for s in shown), (pairs, legend)
    for n, a in globals_.items():        # every global the legend lists carries its own name
        if a in legend:
            assert f"{a}  {n} (named_futexes ." in legend, legend


def test_explain_names_the_futexes_that_collide(named_futexes, tmp_path):
    path = tmp_path / "explain.json"
    r = cli("explain", "--json", path, "--", named_futexes, "--slots", "2", "--seconds", "1")
    assert r.returncode == 0, r.stderr
    out = json.loads(path.read_text())
    rec = out["recording"]
    globals_ = {n: a for n, a in printed(rec) if n in GLOBALS}
    pid = rec["command"]["pid"]
    rcm = next(p for p in out["explanation"]["processes"] if p["pid"] == pid)["recommendation"]
    lines = rcm["colliding"]
    pairs = same_bucket_pairs(globals_)
    # a line names two globals the kernel's hash puts in one bucket
    assert any(sum(f"{n} (named_futexes ." in line for n in names) >= 2 for line in lines for names in pairs), lines
    assert any(line in r.stdout for line in lines) and "colliding in bucket" in r.stdout
