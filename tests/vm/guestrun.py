"""Boot one kernel of the VM matrix and run a command in the guest, in this checkout.

For what needs kprobes or another kernel but is not a test: a benchmark
(benchmarks/kprobe_overhead.py), a look at the guest's kallsyms. The guest is the
one the tests boot (tests/vm/kernels.py: CPUs, memory, NUMA nodes, time limit);
the command's output is printed when the guest ends.

    sudo .venv/bin/python tests/vm/guestrun.py 7.3 -- .venv/bin/python benchmarks/kprobe_overhead.py
    sudo .venv/bin/python tests/vm/guestrun.py 7.3-32cpu -- ...    # the same guest with 32 CPUs
"""
from __future__ import annotations

import os
import shlex
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import kernels  # noqa: E402
import vmguest  # noqa: E402


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") != 1 or len(argv) < 3:
        print("usage: guestrun.py SERIES[-Ncpu] -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    series, command = argv[0], argv[2:]
    series, _, cpus = series.partition("-")     # "7.3-32cpu": the same guest with 32 CPUs
    spec = next((s for s in kernels.MATRIX if s.series == series), kernels.GuestSpec(series))
    if cpus:
        n = int(cpus.removesuffix("cpu"))
        spec = replace(spec, cpus=n, memory="8G" if n > 16 else spec.memory)
    limit = int(os.environ.get("FUTEXTRACE_VM_TIMEOUT_S", "0"))    # as for the tests
    spec = replace(spec, timeout_s=limit or spec.timeout_s)
    line = f"timeout -k 30 {spec.timeout_s - 60} {shlex.join(command)}"
    run = vmguest.boot(spec, command=line, log=lambda m: print(m, file=sys.stderr))
    print(run.text("guest.log") or "(no guest.log: the guest died before the command ran)")
    print(f"guestrun: kernel {run.kernel.release}, {spec.id}, {run.wall_s:.0f} s wall, "
          f"exit status {run.status}, files in {run.out}", file=sys.stderr)
    return 0 if run.status == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
