"""Boot each selected Debian kernel (tests/vm/kernels.py) and run tests/host inside it.

One guest boot per kernel; the tests below judge its results. Guests run single-
threaded TCG, one host CPU each, so the matrix boots them side by side:
FUTEXTRACE_VM_JOBS guests at once (default: one per host CPU).
"""
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

import kernels
import vmguest

pytestmark = pytest.mark.vm
SPECS = kernels.selected()
JOBS = int(os.environ.get("FUTEXTRACE_VM_JOBS", "0")) or max(1, min(len(SPECS), os.cpu_count() or 1))
# The first test of a kernel also fetches (download + unpack) and boots it, and may
# wait for a free slot behind other guests.
GUEST_LIMIT = max([s.timeout_s for s in SPECS], default=0) * -(-len(SPECS) // JOBS) + 600
_runs = {}


def _boot_all() -> None:
    """Start every selected guest; _runs maps spec id -> future of its GuestRun."""
    # Fetch one after another: the fetches share one private apt state.
    for spec in SPECS:
        vmguest.vmkernels.fetch(spec.series, log=print)
    pool = ThreadPoolExecutor(max_workers=JOBS)
    # FUTEXTRACE_VM_PYTEST_ARGS (e.g. "-k 'doctor or smoke'") narrows the in-guest run.
    args = os.environ.get("FUTEXTRACE_VM_PYTEST_ARGS", "")
    for spec in SPECS:
        _runs[spec.id] = pool.submit(vmguest.boot, spec, pytest_args=args)
    pool.shutdown(wait=False)


@pytest.fixture(scope="module", params=SPECS, ids=[s.id for s in SPECS])
def guest(request):
    if not _runs:                   # one boot per kernel, whatever order the tests run in
        _boot_all()
    return _runs[request.param.id].result()


def progress_line(guest) -> str:
    """Which in-guest tests finished and which one was running (tests/vm/progress.py)."""
    prog = guest.progress_log()
    return prog.summary() if prog else "(no progress.log: pytest never started in the guest)"


@pytest.mark.timeout(GUEST_LIMIT)
def test_guest_suite_passed(guest):
    how = "hung in its boot, twice: no guest.log" if guest.hung_boot else "died or timed out"
    assert guest.status is not None, (
        f"the guest wrote no status ({how} after {guest.wall_s:.0f} s)\n"
        f"{progress_line(guest)}\n"
        f"--- kernel log problems\n" + "\n".join(guest.bad_dmesg_lines()[:20]) + "\n"
        f"--- guest.log\n{guest.tail()}\n--- vng.log\n{guest.tail('vng.log')}")
    has_junit = (guest.out / "junit.xml").exists()
    problems = "\n".join(guest.junit_problems()) if has_junit else "(no junit.xml)"
    assert guest.status == 0, (f"in-guest pytest exit status {guest.status} "
                               f"(124: in-guest timeout)\n{progress_line(guest)}\n{problems}\n"
                               f"--- guest.log\n{guest.tail(n=30)}")
    totals = guest.junit_totals()
    assert totals["tests"] - totals["skipped"] > 0, f"no test ran in the guest: {totals}"
    assert totals["failures"] == totals["errors"] == 0, f"{totals}\n{guest.tail()}"


@pytest.mark.timeout(GUEST_LIMIT)
def test_guest_kernel_log_clean(guest):
    bad = guest.bad_dmesg_lines()     # falls back to the console when dmesg.txt is missing
    assert guest.kernel_log(), "the guest left no kernel log (no dmesg.txt, empty vng.log)"
    assert not bad, "guest kernel log:\n" + "\n".join(bad[:40])


@pytest.mark.timeout(GUEST_LIMIT)
def test_guest_btf_captured(guest):
    """The guest's BTF lands in $FUTEXTRACE_CACHE/btf/<release>.btf (for BTF digests)."""
    dest = vmguest.vmkernels.cache_root() / "btf" / f"{guest.kernel.release}.btf"
    assert dest.is_file() and dest.read_bytes()[:2] == b"\x9f\xeb", f"{dest} missing or not BTF"
