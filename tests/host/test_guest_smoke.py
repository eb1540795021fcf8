"""Smoke test for the BPF attach points futextrace builds on, on whatever kernel runs this.

On the build machines only the raw tracepoint part can run (no kprobes there); in a
VM guest (FUTEXTRACE_EXPECT_METHODS=kprobe,...) a missing kprobe is a failure, not a skip.
"""
import ctypes
import os
from pathlib import Path

import pytest

from tests.helpers.host import bpf_missing, in_vm_guest, require_kprobes

pytestmark = pytest.mark.root

SYS_futex = 202                 # x86_64
FUTEX_WAKE_PRIVATE = 1 | 128    # FUTEX_WAKE | FUTEX_PRIVATE_FLAG
CALLS = 50

COUNTER = """
BPF_ARRAY(hits, u64, 1);
static inline void count(void) {
    if ((bpf_get_current_pid_tgid() >> 32) != TGID)
        return;
    int zero = 0;
    u64 *v = hits.lookup(&zero);
    if (v)
        __sync_fetch_and_add(v, 1);
}
"""
RAW_TP = COUNTER + """
RAW_TRACEPOINT_PROBE(sys_enter) {
    if (ctx->args[1] == 202)    /* args: struct pt_regs *, long id */
        count();
    return 0;
}
"""
KPROBE = COUNTER + """
int kprobe__futex_hash(struct pt_regs *ctx) { count(); return 0; }
"""


@pytest.fixture(scope="module")
def BPF():
    if bpf_missing():
        pytest.skip(bpf_missing())
    from futextrace.kernel.headers import bcc_environment
    bcc_environment()       # before BCC compiles anything
    from bcc import BPF
    return BPF


def futex_wakes(n: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    word = ctypes.c_int(0)
    for _ in range(n):
        r = libc.syscall(ctypes.c_long(SYS_futex), ctypes.byref(word), FUTEX_WAKE_PRIVATE,
                         1, None, None, 0)
        assert r == 0, f"futex(FUTEX_WAKE_PRIVATE) returned {r}, errno {ctypes.get_errno()}"


def count_with(BPF, text: str) -> int:
    b = BPF(text=text.encode(), cflags=[f"-DTGID={os.getpid()}"])
    try:
        futex_wakes(CALLS)
        return sum(v.value for v in b[b"hits"].values())
    finally:
        b.cleanup()


def test_raw_tracepoint_counts_futex_calls(BPF):
    assert count_with(BPF, RAW_TP) >= CALLS


def test_kprobe_on_futex_hash_counts_calls(BPF):
    require_kprobes()
    # Every FUTEX_WAKE hashes its key once; other futex traffic of this process may add more.
    assert count_with(BPF, KPROBE) >= CALLS


def test_vm_guest_topology_is_what_the_host_asked_for():
    """The harness passes FUTEXTRACE_VM_CPUS/_NODES; fake NUMA must really give the nodes."""
    if not in_vm_guest():
        pytest.skip("only inside a VM guest (tests/vm)")
    nodes = len(list(Path("/sys/devices/system/node").glob("node[0-9]*")))
    assert os.cpu_count() == int(os.environ["FUTEXTRACE_VM_CPUS"])
    assert nodes == int(os.environ["FUTEXTRACE_VM_NODES"])
