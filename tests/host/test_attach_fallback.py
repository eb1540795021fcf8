"""The tracepoint method compiles its raw sys_enter hook only when tp_btf is
refused (the first compile leaves it out to save time): the fallback must
still attach and count."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from futextrace.errors import KernelRefused

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
              pytest.mark.skipif(not Path("/sys/kernel/btf/vmlinux").exists(), reason="needs BTF")]


def test_refused_tp_btf_falls_back_to_a_raw_tracepoint(monkeypatch):
    from futextrace.kernel.modelcache import load_running
    from futextrace.loading import tpbtf
    from futextrace.loading.loader import Filters, Program
    model, _ = load_running()
    if "sys_enter" not in model.tp_btf_ids:
        pytest.skip("no tp_btf attach point here: the raw hook is the first choice anyway")

    def refuse(*_):
        raise KernelRefused("refused for the test")
    monkeypatch.setattr(tpbtf, "attach_loaded", refuse)
    from futextrace.workload.build import workload_path
    with Program(model, "tracepoint", Filters()) as prog:
        assert prog.probes[0] == "raw_tracepoint:sys_enter"
        assert prog.fallback_reason == "refused for the test"
        assert b"ft_raw_sys_enter" in [prog.bpf.funcs[k].name for k in prog.bpf.funcs]
        # Counting works on the recompiled programs: the workload's futexes appear.
        subprocess.run([str(workload_path()), "-t", "2", "-n", "1000"], check=True,
                       capture_output=True, timeout=60)
        assert len(prog.bpf["futexes_index"].items()) + len(list(cache_slots_used(prog))) > 0


def cache_slots_used(prog):
    """Slots of the per-CPU lookup cache holding a futex (it is tried before the map)."""
    return (v for v in prog.bpf["futex_cache"].values() if v.st.lookups)
