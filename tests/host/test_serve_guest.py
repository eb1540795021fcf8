"""`futextrace serve --method kprobe`: the refcount metrics measured, not inferred.

Needs kprobes, so it runs in a VM guest (the build machines refuse them: it
skips there, and fails in a guest that was told kprobes must work). Opt-in
in the guests (FUTEXTRACE_VM_SERVE=1, see tests/vm/vmguest.py): the
exporter's BCC compile alone takes minutes under QEMU/TCG.

The workload's count is the reference: its lookups series must match it, and
every private-hash lookup takes a reference on the process's hash
(futex_private_hash_get) and drops it, so the measured gets and puts are at
least the workload's count.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.host import require_kprobes, wait_until
from tests.helpers.serve import SLOW, Exporter, http_get

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
              pytest.mark.skipif(not Path("/sys/kernel/btf/vmlinux").exists(), reason="needs BTF"),
              pytest.mark.timeout(1500)]

THREADS, FUTEXES, ITERATIONS = 2, 8, 2000


def samples(url: str) -> dict:
    text = http_get(url, timeout=60) or ""
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_serve_kprobe_refcount_is_measured_and_lookups_match(tmp_path):
    require_kprobes()
    from futextrace.workload.build import workload_path
    path = str(tmp_path / "ftserveguest")   # a name of its own for --comm
    shutil.copy(workload_path(), path)
    exp = Exporter(tmp_path, "--method", "kprobe", "--comm", Path(path).name,
                   "--min-interval", "0.5", "--grace", "3600")
    try:
        run = subprocess.run([path, "-t", str(THREADS), "-f", str(FUTEXES), "-n", str(ITERATIONS),
                              "-b", "64"], capture_output=True, text=True, timeout=300 * SLOW, check=True)
        wl = json.loads(run.stdout.strip().splitlines()[-1])
        ops, pid = wl["total_ops"], wl["pid"]
        assert ops == THREADS * FUTEXES * ITERATIONS
        key = ("futextrace_lookups_total", frozenset({"pid": str(pid), "comm": Path(path).name,
                                                      "hash": "private"}.items()))
        seen = []

        def settled():
            seen.append(samples(exp.url).get(key))
            return seen[-1] is not None and seen[-1] >= ops and len(seen) >= 2 and seen[-2] == seen[-1]
        assert wait_until(settled, timeout=120 * SLOW, step=2), seen[-5:]
        m = samples(exp.url)
        info = [labels for (name, labels) in m if name == "futextrace_info"]
        assert info and dict(info[0])["method"] == "kprobe", info
        missed = m.get(("futextrace_missed_runs_total", frozenset()), 0)
        assert seen[-1] - ops in range(-int(missed), 16), (seen[-1], ops, missed)

        ref = {(dict(labels)["op"], dict(labels)["path"]): (dict(labels)["source"], v)
               for (name, labels), v in m.items() if name == "futextrace_refcount_ops_total"}
        assert set(ref) == {(op, path) for op in ("get", "put") for path in ("percpu", "atomic")}, ref
        assert {source for source, _ in ref.values()} == {"measured"}, ref
        for op in ("get", "put"):
            taken = ref[(op, "percpu")][1] + ref[(op, "atomic")][1]
            assert taken >= ops - missed, (op, taken, ops, ref)
    finally:
        assert exp.stop() == 0
