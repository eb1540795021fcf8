"""The tax on a syscall that is not a futex call: a C loop of getppid() that
prints the ns per call (used by futexset.py and fentry_cost.py)."""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

GETPPID_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
int main(int argc, char **argv) {
    long n = atol(argv[1]); struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) syscall(SYS_getppid);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
    return 0;
}
"""


def build_getppid() -> str:
    """The loop compiled into a temporary directory: its path."""
    d = Path(tempfile.mkdtemp(prefix="ft-getppid-"))
    src, out = d / "getppid.c", d / "getppid"
    src.write_text(GETPPID_C)
    subprocess.run(["cc", "-O2", "-o", str(out), str(src)], check=True)
    return str(out)


def getppid_ns(binary: str, n: int) -> float:
    """ns per getppid() over n calls."""
    return float(subprocess.run([binary, str(n)], capture_output=True, text=True, check=True).stdout)
