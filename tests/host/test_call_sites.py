"""Call sites against the real kernel, with each attach method (the tracepoint
method here, fentry and kprobe in the VM guests): tests/data/named_futexes.c,
built with frame pointers, whose touch() makes each futex syscall itself,
runs under `record --method M --slots 2 -- ./named_futexes` and exits before
the run ends: its stacks are named from the maps read while it lived.

Ground truth is the workload's: its source's call graph (CALLER: which
function calls touch() on which word), its own symbol table read here with
pyelftools (each function's range), and the addresses it prints (the load
bias). Nothing expected comes from futextrace.
"""
from __future__ import annotations

import json

import pytest
from elftools.elf.elffile import ELFFile

from tests.helpers.host import cli, needs_bpf, needs_private_hash, require_method

pytestmark = [pytest.mark.root, needs_bpf, needs_private_hash]

CALLER = {"orders_mutex": "settle_accounts", "ledger_gate": "settle_accounts",
          "stock_latch": "reserve_stock", "audit_flag": "reserve_stock", "tail_gate": "reserve_stock",
          "heap": "drain_queue", "stack": "worker"}


def elf_symbols(path) -> dict[str, tuple[int, int]]:
    """name -> (st_value, st_size) of every function and object in its .symtab."""
    with open(path, "rb") as f:
        return {s.name: (s["st_value"], s["st_size"])
                for s in ELFFile(f).get_section_by_name(".symtab").iter_symbols()
                if s["st_info"]["type"] in ("STT_FUNC", "STT_OBJECT") and s["st_size"]}


def printed(rec: dict) -> list[tuple[str, str]]:
    return [tuple(line.split()) for line in rec["command"]["stdout_tail"].splitlines() if line.strip()]


@pytest.fixture(scope="module", params=["tracepoint", "kprobe", "fentry"])
def recorded(request, named_futexes, tmp_path_factory):
    method = request.param
    require_method(method)
    path = tmp_path_factory.mktemp(f"sites-{method}") / "rec.json"
    r = cli("record", "--method", method, "--slots", "2", "--json", path, "--", named_futexes, "--seconds", "1")
    assert r.returncode == 0, r.stderr
    rec = json.loads(path.read_text())
    syms = elf_symbols(named_futexes)
    words = printed(rec)
    bias = {int(a, 16) - syms[n][0] for n, a in words if n in syms}
    assert len(bias) == 1                      # one load bias: the right file
    proc = next(p for p in rec["processes"] if p["pid"] == rec["command"]["pid"])
    return rec, r.stdout, proc["futex_names"], words, syms, bias.pop()


def check_frame(frame: dict, function: str, syms, bias) -> None:
    """The frame is in `function` by the workload's own symbol table, at the offset it says."""
    start, size = syms[function]
    ip = int(frame["ip"], 16) - bias
    assert start <= ip < start + size, (frame, function)
    assert (frame["function"], frame["offset"], frame["trusted"]) == (function, ip - start, True), frame


def test_each_futex_s_first_lookup_names_touch_and_its_caller(recorded):
    """Globals, heap words and each worker's stack word (named by where it lives
    in test_names.py; here by the workload's own print)."""
    rec, _text, names, words, syms, bias = recorded
    assert not rec["command"]["stopped_by_futextrace"]        # it exited before the run ended
    assert sum(n == "stack" for n, _a in words) == 2
    for name, addr in words:
        first = names[addr]["call_sites"]["first_lookup"]
        assert first is not None, (name, names[addr])
        check_frame(first["frames"][0], "touch", syms, bias)
        check_frame(first["frames"][1], CALLER[name], syms, bias)
        assert first["trusted_frames"] >= 2
    budget = rec["call_sites"]
    assert budget["stacks"] >= len(words) and budget["over_budget"] == 0 and budget["lost"] == 0, budget


def test_bucket_lock_waits_carry_their_call_sites(recorded):
    rec, _text, names, words, syms, bias = recorded
    by_addr = {a: n for n, a in words}
    waited = {f["uaddr"] for c in rec["contention"]["processes"] if c["pid"] == rec["command"]["pid"]
              for b in c["buckets"] for f in b["futexes"] if f["uaddr"] in by_addr}
    for addr in waited:
        stacks = names[addr]["call_sites"]["lock_waits"]
        assert stacks, (by_addr[addr], names[addr])
        for s in stacks:
            check_frame(s["frames"][0], "touch", syms, bias)
            check_frame(s["frames"][1], CALLER[by_addr[addr]], syms, bias)
            assert s["count"] >= 1


def test_the_text_shows_the_call_site_beside_the_name(recorded):
    _rec, text, names, words, _syms, _bias = recorded
    legend = text.split("the addresses above:")[1].split("\n\n")[0]
    shown = [(n, a) for n, a in words if a in legend and n != "heap"]
    assert shown, legend
    for n, a in shown:
        first = names[a]["call_sites"]["first_lookup"]["frames"]
        assert f"← touch+{first[0]['offset']:#x} ← {CALLER[n]}+{first[1]['offset']:#x}" in legend, legend


def test_no_call_sites_takes_none(named_futexes, tmp_path):
    path = tmp_path / "rec.json"
    r = cli("record", "--method", "tracepoint", "--no-call-sites", "--json", path, "--", named_futexes,
            "--seconds", "0.3")
    assert r.returncode == 0, r.stderr
    rec = json.loads(path.read_text())
    proc = next(p for p in rec["processes"] if p["pid"] == rec["command"]["pid"])
    assert proc["futex_names"] and not any("call_sites" in n for n in proc["futex_names"].values())
    assert "call_sites" not in rec and " ← " not in r.stdout
