"""The program cache (futextrace/loading/progcache.py) against the real kernel:
a replayed program is the compiled one, and a recording made from it counts
exactly what a freshly compiled one counts.

Instructions are compared function by function after the test's own decoding
of every map reference (ld_imm64 with src_reg 1) back to its map's name,
through each BPF object's own fds; the counts come from the workload's own
futex addresses and the test's own jhash2 (test_record.check_counts).
"""
from __future__ import annotations

import json
import os
import struct

import pytest

from tests.helpers.host import in_vm_guest, kprobes_missing
from tests.helpers.recordings import ITERS, check_counts, exact_counts, ran, record_workloads

pytestmark = pytest.mark.root


def table_names(compiled_bpf) -> list[bytes]:
    """The maps a program compiled by BCC declares, as its compiled module lists them."""
    import ctypes as ct
    from bcc import lib
    name_of = ct.CFUNCTYPE(ct.c_char_p, ct.c_void_p, ct.c_ulonglong)(("bpf_table_name", lib))
    count = ct.CFUNCTYPE(ct.c_ulonglong, ct.c_void_p)(("bpf_num_tables", lib))
    return [name_of(compiled_bpf.module, i) for i in range(count(compiled_bpf.module))]


def by_map_name(insns: bytes, bpf, names: list[bytes]) -> list[tuple]:
    """The instructions, each map fd replaced by the name of the map it is in
    `bpf` (BCC's table objects: each holds its map's fd)."""
    names = {bpf[name].map_fd: name for name in names}
    out = []
    for k in range(0, len(insns), 8):
        code, regs, off, imm = struct.unpack_from("<BBhi", insns, k)
        if code == 0x18 and regs >> 4 == 1:
            out.append((code, regs, off, names[imm]))     # KeyError: a reference to no map we know
        else:
            out.append((code, regs, off, imm))
    return out


@pytest.fixture
def compiled(tmp_path, monkeypatch, kernel_model):
    """compile_program for the tracepoint text, into an empty program cache."""
    from futextrace.kernel.headers import bcc_environment
    from futextrace.kernel.layout import header_text
    from futextrace.loading.loader import Filters, cflags_for, source_for
    from futextrace.loading.progcache import compile_program
    bcc_environment()       # the header tree from the usual cache, before it moves
    monkeypatch.setenv("FUTEXTRACE_CACHE", str(tmp_path))
    monkeypatch.delenv("FUTEXTRACE_NO_PROG_CACHE", raising=False)
    text, flags = source_for("tracepoint"), cflags_for(kernel_model, "tracepoint", Filters(), 4096)
    objs = []

    def compile_once():
        objs.append(compile_program(text, flags, header_text()))
        return objs[-1]
    yield compile_once
    for b in objs:
        b.cleanup()


def test_replayed_instructions_are_the_compiled_ones(compiled):
    from bcc import lib
    full = compiled()
    assert full.compile_cache == "miss"
    again = compiled()
    assert again.compile_cache == "hit"
    names = [lib.bpf_function_name(full.module, i) for i in range(lib.bpf_num_functions(full.module))]
    assert b"ft_btf_sys_enter" in names and b"ft_btf_waitv_chunk" in names
    maps = table_names(full)
    for name in names:
        assert by_map_name(again.dump_func(name), again, maps) == by_map_name(full.dump_func(name), full, maps), name
    # The replay's maps are its own, not the first object's.
    assert again[b"futexes_index"].map_fd != full[b"futexes_index"].map_fd


def test_an_entry_whose_maps_cannot_be_made_is_compiled_again(compiled, tmp_path):
    compiled().cleanup()
    (entry_path,) = (tmp_path / "prog").glob("*.json")
    entry = json.loads(entry_path.read_text())
    (futexes,) = [t for t in entry["tables"] if t["name"] == "futexes_index"]
    futexes["type"] = 9999                       # no such map type: BPF_MAP_CREATE refuses it
    entry_path.write_text(json.dumps(entry))
    assert compiled().compile_cache == "stale"
    assert compiled().compile_cache == "hit"   # and the fresh compile was cached


def test_an_entry_others_could_write_is_not_used(compiled, tmp_path):
    compiled().cleanup()
    (entry_path,) = (tmp_path / "prog").glob("*.json")
    os.chmod(entry_path, 0o666)
    assert compiled().compile_cache == "miss"


def fentry_refusal() -> str | None:
    """Why the fentry method cannot run here (a minimal fexit load, the layout), or None."""
    if os.geteuid() != 0:
        return "needs root"
    from futextrace.kernel.modelcache import load_running
    from futextrace.loading import fentry
    return fentry.refusal(load_running()[0])


METHODS = ["tracepoint", pytest.param("kprobe", marks=pytest.mark.skipif(
    bool(kprobes_missing()), reason=kprobes_missing() or "")),
    # fentry programs are loaded by futextrace itself from the replayed instructions.
    pytest.param("fentry", marks=pytest.mark.skipif(bool(fentry_refusal()), reason=fentry_refusal() or ""))]


@pytest.mark.parametrize("method", METHODS)
def test_a_recording_from_the_cache_counts_exactly(tmp_path, method):
    """Compiled in full (cache off), then twice with the cache: the second is a
    hit, and both count each bucket exactly. In a VM guest the full compile is
    left out (the first of each program variant there is one, checked by the
    tests that ran it), as each costs a minute under TCG."""
    plan = {"cold": {"FUTEXTRACE_NO_PROG_CACHE": "1"}, "warm": {}, "hit": {}}
    if in_vm_guest():
        del plan["cold"]
    runs = {}
    for name, env in plan.items():
        (tmp_path / name).mkdir()
        runs[name] = record_workloads(tmp_path / name, ["--method", method], {"b64": exact_counts(64)}, env=env)
    if "cold" in runs:
        assert runs["cold"].rec["compile_cache"] == "off"
    assert runs["hit"].rec["compile_cache"] == "hit"
    for name in set(runs) - {"warm"}:
        check_counts(runs[name].rec, ran(runs[name], "b64"), 64, ITERS)
        assert runs[name].rec["totals"]["kernel_mismatch"] == 0
