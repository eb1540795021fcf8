"""The kernel model cache is not shared between processes that see the kernel differently.

A process without CAP_SYSLOG (the systemd unit, deploy/systemd/futextrace.service, if an
operator drops it) reads kallsyms with its addresses zeroed when kptr_restrict or
perf_event_paranoid says so, and cannot read the boot log under dmesg_restrict: the
model it builds lacks the futex symbols' addresses and the boot log's global hash size.
Such a model must not be cached under the key a root run uses, nor the other way round.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
              pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv (util-linux)")]

BUILD = ("import json; from futextrace.kernel import modelcache as m; "
         "model, _ = m.load_running(); print(json.dumps([m.cache_key(), bool(model.futex_symbols)]))")
KALLSYMS_ADDRESSES = ("print(any(int(l.split()[0], 16) for l in open('/proc/kallsyms') if 'futex' in l))")


def run(code: str, cache, caps: str | None) -> str:
    cmd = [sys.executable, "-c", code]
    if caps:
        cmd = ["setpriv", f"--bounding-set=-all,{caps}", f"--inh-caps=-all,{caps}",
               f"--ambient-caps=-all,{caps}", "--", *cmd]
    env = dict(os.environ, FUTEXTRACE_CACHE=str(cache))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True, env=env).stdout.strip()


def test_a_model_built_without_cap_syslog_has_its_own_key(tmp_path):
    root_key, root_symbols = json.loads(run(BUILD, tmp_path, None))
    key, symbols = json.loads(run(BUILD, tmp_path, "+bpf,+perfmon"))
    assert key != root_key
    assert len(list((tmp_path / "model").glob("*.json"))) == 2
    # What the kernel shows each of them decides what each model holds.
    assert root_symbols is (run(KALLSYMS_ADDRESSES, tmp_path, None) == "True")
    assert symbols is (run(KALLSYMS_ADDRESSES, tmp_path, "+bpf,+perfmon") == "True")
    # Each finds its own model again.
    assert json.loads(run(BUILD, tmp_path, "+bpf,+perfmon")) == [key, symbols]
    assert json.loads(run(BUILD, tmp_path, None)) == [root_key, root_symbols]
