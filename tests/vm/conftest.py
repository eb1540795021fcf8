"""VM tests: skip cleanly where a guest cannot be booted (never inside a guest)."""
import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))   # for `import kernels, vmguest`


def pytest_collection_modifyitems(config, items):
    why = None
    if os.environ.get("FUTEXTRACE_IN_VM"):
        why = "already inside a VM guest"
    elif os.geteuid() != 0:
        why = "needs root (virtme-ng shares the host root filesystem, BPF needs root)"
    elif not shutil.which("qemu-system-x86_64"):
        why = "qemu-system-x86 is not installed: run scripts/bootstrap.sh --vm"
    elif not (Path(sys.executable).parent / "vng").exists():
        why = "virtme-ng is not in the venv: run scripts/bootstrap.sh --vm"
    if why:
        for item in items:
            if "vm" in item.keywords:
                item.add_marker(pytest.mark.skip(reason=why))


def pytest_terminal_summary(terminalreporter):
    """Per-kernel guest wall times (the CI budget depends on them)."""
    import vmguest
    if vmguest.RUNS:
        terminalreporter.section("VM guests")
    for spec_id, run in vmguest.RUNS:
        terminalreporter.write_line(
            f"{spec_id}: kernel {run.kernel.release}, status {run.status}, "
            f"{run.wall_s:.0f} s wall, {run.cpu_s:.0f} s host CPU, results in {run.out}")
        prog = run.progress_log()
        if prog:
            terminalreporter.write_line(f"  {prog.summary()}; slowest:")
            for nodeid, outcome, secs in prog.slowest(8):
                terminalreporter.write_line(f"    {secs:6.1f} s  {outcome:7} {nodeid}")
