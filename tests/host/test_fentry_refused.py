"""Where the kernel refuses fentry (the build machines: every BPF_PROG_TYPE_TRACING
load on a function gets EPERM), `record --method fentry` stops with one line
that says why, leaves nothing in the kernel, and `--method auto` falls back to
the next method and says why in the recording, as `doctor` does.

Where fentry does load (6.17-7.1 guests) these tests skip: test_fidelity.py
proves the method there.
"""
from __future__ import annotations

import json
import subprocess

import pytest

from tests.helpers.host import cli, needs_bpf, needs_private_hash, one_line_error

pytestmark = [pytest.mark.root, needs_bpf, needs_private_hash]
# Names only the fentry method's programs (and its trial load) carry: BPF keeps 15 characters.
FENTRY_NAMES = ("fx_futex_", "fe_futex_", "ft_trial")


@pytest.fixture(scope="module")
def refusal():
    from futextrace.kernel.modelcache import load_running
    from futextrace.loading import fentry
    why = fentry.refusal(load_running()[0])
    if why is None:
        pytest.skip("fentry loads on this kernel: tests/host/test_fidelity.py[fentry] proves it")
    return why


def fentry_programs() -> list[str]:
    progs = json.loads(subprocess.run(["bpftool", "-j", "prog", "list"], capture_output=True,
                                      text=True, check=True).stdout or "[]")
    return [p.get("name", "") for p in progs if p.get("name", "").startswith(FENTRY_NAMES)]


def test_method_fentry_is_one_line_and_attaches_nothing(refusal):
    r = cli("record", "--method", "fentry", "-d", "1", timeout=120)
    line = one_line_error(r, code=3)
    assert "method fentry is not available here" in line and refusal in line
    assert "--method auto" in line
    assert "Tracing" not in r.stderr           # it never got as far as attaching
    assert fentry_programs() == []


def test_auto_falls_back_and_says_why(refusal, tmp_path):
    out = tmp_path / "rec.json"
    r = cli("record", "-q", "-d", "1", "--json", str(out), timeout=300)
    assert r.returncode == 0, r.stderr
    method = json.loads(out.read_text())["method"]
    assert method["name"] in ("kprobe", "tracepoint")
    assert f"fentry not usable: {refusal}" in method["why"]
    assert fentry_programs() == []


def test_doctor_says_why_and_recommends_another(refusal):
    r = cli("doctor", "--json", "-", timeout=300)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    fe = next(m for m in rep["methods"] if m["name"] == "fentry")
    assert not fe["works"] and fe["reason"]
    # The same fact in both words: a refused load is named by its errno in each.
    errno = refusal.split("(")[1].split(")")[0].split(":")[0] if "refused" in refusal else None
    if errno:
        assert f"({errno}" in fe["reason"]
    assert rep["recommended"] in ("kprobe", "tracepoint")
