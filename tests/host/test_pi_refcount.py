"""The PI handoff path's bucket references, kprobe and fentry methods (VM guests).

tests/data/pi_contend.c makes threads contend on one private PI futex through
FUTEX_LOCK_PI/FUTEX_UNLOCK_PI (futex_unlock_pi hands the lock to a waiter),
then hands a free PI futex to a FUTEX_WAIT_REQUEUE_PI waiter with
FUTEX_CMP_REQUEUE_PI: requeue_pi_wake_futex takes the extra bucket reference
of the handoff, futex_hash_get() on 6.17-7.1 (`hb->priv` layout), dropped by
futex_hash_put(); on 7.2+ the `drop_fph` reference of futex_private_hash_get()
(futex_unlock_pi takes it only in a race with a waiter not yet blocked). Every
get must have its put (the kernel's own refcount invariant). Where
futex_hash_get has a symbol, a kprobe of the test's own (a BCC counter, not
futextrace's) counts its calls: at least one per requeue handoff, and the
recording must hold one get per syscall plus one per futex_hash_get.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.host import FT, REPO, kernel_symbols, limit, needs_bpf, require_fentry, require_kprobes

pytestmark = [pytest.mark.root, needs_bpf]
DATA = Path(__file__).parent.parent / "data"
ITERS = 150             # per thread: 4 threads, 2 syscalls each


@pytest.fixture(scope="module")
def workload(tmp_path_factory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler: run scripts/bootstrap.sh"
    out = tmp_path_factory.mktemp("pi") / "pi_contend"
    subprocess.run([cc, "-O2", "-pthread", "-o", str(out), str(DATA / "pi_contend.c")], check=True)
    return out


COUNTER = """
BPF_ARRAY(hits, u64, 1);
int on_call(struct pt_regs *ctx)
{
    int zero = 0;
    u64 *v = hits.lookup(&zero);
    if (v)
        __sync_fetch_and_add(v, 1);
    return 0;
}
"""


class CallCounter:
    """A kprobe of the test's own (BCC, not futextrace's programs) counting calls of `func`."""

    def __init__(self, func: str):
        from futextrace.kernel.headers import bcc_environment
        bcc_environment()
        from bcc import BPF
        self.bpf = BPF(text=COUNTER)
        self.bpf.attach_kprobe(event=func, fn_name="on_call")

    def hits(self) -> int:
        return sum(v.value for v in self.bpf["hits"].values())

    def remove(self) -> None:
        self.bpf.cleanup()




@pytest.fixture(scope="module", params=["kprobe", "fentry"])
def run(request, workload, tmp_path_factory):
    """(recording, the workload's own counts, the test's own futex_hash_get hits or None).
    The counter is a kprobe: both methods run where kprobes exist (the guests)."""
    method = request.param
    require_kprobes()
    if method == "fentry":
        require_fentry()
    tmp = tmp_path_factory.mktemp("pi-run")
    rec_path, wl_path = tmp / "rec.json", tmp / "wl.json"
    own = CallCounter("futex_hash_get") if "futex_hash_get" in kernel_symbols() else None
    try:
        p = subprocess.run([*FT, "record", "-q", "--method", method, "--json", str(rec_path), "--",
                            str(workload), str(wl_path), str(ITERS)],
                           capture_output=True, text=True, timeout=limit(120), cwd=REPO)
        hits = own.hits() if own else None
    finally:
        if own:
            own.remove()
    assert p.returncode == 0, p.stderr
    rec = json.loads(rec_path.read_text())
    assert rec["method"]["name"] == method, rec["method"]
    return rec, json.loads(wl_path.read_text()), hits


def test_the_lock_was_handed_over(run):
    _, wl, _ = run
    assert wl["errors"] == 0 and wl["lock_calls"] == wl["unlock_calls"] == wl["threads"] * ITERS
    assert wl["contended"] > 0, "no FUTEX_LOCK_PI call found the lock owned: no handoff happened"
    assert wl["requeue_handoffs"] == ITERS


def test_gets_equal_puts(run):
    """Each bucket reference taken on the PI paths is dropped once, and counted
    once, or its probe run is one the kernel skipped and the recording says so
    (missed_runs: a run of ours preempted, then entered again on that CPU)."""
    rec, wl, _ = run
    rc, missed = rec["refcount"], rec["totals"]["missed_runs"]
    gets, puts = rc["get_percpu"] + rc["get_atomic"], rc["put_percpu"] + rc["put_atomic"]
    assert abs(gets - puts) <= missed, (f"gets {gets}, puts {puts}, probe runs skipped {missed}: "
                                        f"{rc} {rec['totals']}")
    assert gets >= wl["lock_calls"] + wl["unlock_calls"], rc   # one per syscall's bucket at least


def test_futex_hash_get_probed_and_counted(run):
    """6.17-7.1: futex_hash_get is probed beside futex_hash_put, and the recording's
    gets include every call the test's own kprobe saw (in the guest only this
    workload uses PI futexes, so system-wide hits are its own)."""
    rec, wl, hits = run
    if hits is None:
        pytest.skip("futex_hash_get has no symbol here (7.2+: the handoff uses futex_private_hash_get)")
    probes = rec["method"]["probes"]
    entry = "kprobe" if rec["method"]["name"] == "kprobe" else "fentry"
    assert f"{entry}:futex_hash_get" in probes and f"{entry}:futex_hash_put" in probes, probes
    assert hits >= wl["requeue_handoffs"] > 0, "requeue-PI handoffs without futex_hash_get"
    rc = rec["refcount"]
    gets = rc["get_percpu"] + rc["get_atomic"]
    assert gets >= wl["lock_calls"] + wl["unlock_calls"] + hits, (rc, hits)
