"""The VM kernel matrix: which Debian kernels the guests boot, and with what topology.

Each entry covers a futex private-hash layout variant (see futex-kernel-facts.md):
  6.17  futex_hash() returns a bucket pointer, buckets carry hb->priv
  6.18  the build machines' own base (6.18.15 was checked by hand)
  7.2   futex_hash() returns struct futex_bucket_ref by value
  7.3   runtime-constant hashing, the global hash variables moved (newest)

CI boots one kernel of each private-hash layout: 6.18 (`hb->priv`, futex_hash
returns a pointer) and 7.3 (struct futex_bucket_ref by value), side by side,
then a 32-CPU 7.3 guest for the automatic hash's growth and upper clamp.
FUTEXTRACE_VM_KERNELS selects: unset = those two (CI), "all" = the matrix,
"none" = no guests, or a comma list of series ("6.18,7.3"), or "6.18-8cpu",
"6.18-16cpu", "7.3-clamp" (EXTRA: opt-in variants).
FUTEXTRACE_VM_TIMEOUT_S overrides each guest's time limit (a machine busy with
other work runs single-threaded TCG guests several times slower).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class GuestSpec:
    series: str             # newest <series>.x complete -amd64 kernel in the index
    cpus: int = 4
    memory: str = "4G"      # overlay writes live in guest RAM; 2G died once mid-suite
    numa_nodes: int = 1     # > 1: fake NUMA (numa=fake=N), so per-node figures see a real topology
    timeout_s: int = 2700   # host-side limit for one guest run: TCG makes every BCC compile slow
    tests: str = ""         # in-guest pytest selection; "" = vmguest.GUEST_TESTS minus its deselects

    @property
    def append(self) -> list[str]:
        return [f"numa=fake={self.numa_nodes}"] if self.numa_nodes > 1 else []

    @property
    def id(self) -> str:
        return f"{self.series}-{self.cpus}cpu-{self.numa_nodes}node"


MATRIX = [
    GuestSpec("6.17"),
    GuestSpec("6.18"),
    GuestSpec("7.2", numa_nodes=2),
    GuestSpec("7.3", numa_nodes=2),
]
NEWEST = MATRIX[-1]
# Opt-in (FUTEXTRACE_VM_KERNELS=6.18-8cpu): the automatic hash grows past 16
# only with more than 4 CPUs, so resizes that wait for their pivot while
# threads run need this guest (tests/host/test_ramp.py; slow under TCG).
# "6.18-16cpu": 4 x min(threads, 16 CPUs) reaches 64, so the automatic hash
# grows 16 -> 32 -> 64 (tests/host/test_explain.py::test_threads_in_steps
# against the kernel's GET_SLOTS). "7.3-clamp": 128 fake nodes make the
# per-node global hash 256 x 16 / 128 = 32 buckets, so 4 x 16 = 64 is clamped
# to 32 (the formula's upper clamp, which no ordinary machine reaches).
EXTRA = {"6.18-8cpu": GuestSpec("6.18", cpus=8),
         "6.18-16cpu": GuestSpec("6.18", cpus=16),
         "7.3-clamp": GuestSpec("7.3", cpus=16, numa_nodes=128, memory="8G")}
# "7.3-growth": 32 CPUs and 128 fake nodes (global size 256 x 32 / 128 = 64),
# so the automatic hash grows 16 -> 32 -> 64 and 4 x 32 = 128 is clamped to
# 64, each step against GET_SLOTS. In CI with only that test (~3.5 min).
GROWTH = GuestSpec("7.3", cpus=32, numa_nodes=128, memory="8G", timeout_s=900,
                   tests=("tests/host/test_guest_smoke.py tests/host/test_explain.py "
                          "-k 'topology or threads_in_steps'"))
EXTRA["7.3-growth"] = GROWTH
CI = [MATRIX[1], NEWEST, GROWTH]   # one kernel per layout (pointer + hb->priv, bucket ref by value), and growth


def selected() -> list[GuestSpec]:
    limit = int(os.environ.get("FUTEXTRACE_VM_TIMEOUT_S", "0"))
    return [replace(s, timeout_s=limit) if limit > 0 else s for s in _selected()]


def _selected() -> list[GuestSpec]:
    want = os.environ.get("FUTEXTRACE_VM_KERNELS", "").strip()
    if not want:
        return list(CI)
    if want == "all":
        return list(MATRIX)
    if want == "none":
        return []
    by_series = {g.series: g for g in MATRIX}
    # A series outside the matrix still runs, with the default topology.
    return [EXTRA.get(s) or by_series.get(s, GuestSpec(s)) for s in (x.strip() for x in want.split(",")) if s]
