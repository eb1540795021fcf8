"""Processes started BEFORE the tracer, one per case, that report their own
state: PR_FUTEX_HASH_GET_SLOTS and the return of their own SET_SLOTS call, and
their thread count from /proc/self/task, read by the process itself after it
set itself up. Nothing expected in the tests comes from futextrace's formulas.
Shared by test_snapshot_iter.py and test_attach_state.py."""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys

# The process under test: sets itself up as `mode` says, prints what the
# kernel tells it (one JSON line), then idles without futex calls (sleeping
# threads, a main thread in select) until killed, its stdin closes, or
# `exit_after` s pass; then it exits with `code`. A line "more K" on stdin
# starts K more threads and prints the state again; "wake N" makes
# FUTEX_WAKE_PRIVATE calls on futex words of its own (a known set of
# addresses) and prints them with the calls made on each.
HOLDER = r"""
import ctypes, json, os, select, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
def prctl(op, arg=0):
    r = libc.prctl(78, op, ctypes.c_ulong(arg), 0, 0)
    return r if r >= 0 else -ctypes.get_errno()
def spawn(n):
    for _ in range(n):
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
def state():
    time.sleep(0.2)             # let threads start before counting them
    return {"slots": prctl(2), "set": set_ret, "threads": len(os.listdir("/proc/self/task"))}
WORDS = (ctypes.c_uint32 * 4096)()
def wake(n):
    # 256 words 64 bytes apart across 4 pages; word i gets i % 7 + 1 calls in all.
    done = {}
    for r in range(n):
        for i in range(0, 4096, 16):
            if r < i % 7 + 1:
                libc.syscall(202, ctypes.byref(WORDS, 4 * i), 1 | 128, 1, None, None, 0)
                done[ctypes.addressof(WORDS) + 4 * i] = done.get(ctypes.addressof(WORDS) + 4 * i, 0) + 1
    return {"woken": {hex(a): c for a, c in done.items()}}
mode, n, exit_after, code = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
set_ret = None
if mode == "custom":            # custom N, then more threads
    set_ret = prctl(1, n); spawn(2); spawn(3)
elif mode == "auto":            # an automatic hash, grown by threads
    spawn(n)
elif mode == "global":          # the global hash, chosen with prctl
    set_ret = prctl(1, 0); spawn(2)
print(json.dumps(state()), flush=True)
while True:
    if not select.select([sys.stdin], [], [], exit_after if exit_after > 0 else None)[0]:
        break
    line = sys.stdin.readline().split()
    if not line:
        break
    if line[0] == "more":
        spawn(int(line[1]))
        print(json.dumps(state()), flush=True)
    elif line[0] == "wake":
        print(json.dumps(wake(int(line[1]))), flush=True)
sys.exit(code)
"""


def start(mode: str, n: int = 0, exit_after: float = 0, code: int = 0) -> subprocess.Popen:
    """A holder process; its own report of itself is in `.own`."""
    p = subprocess.Popen([sys.executable, "-c", HOLDER, mode, str(n), str(exit_after), str(code)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    p.own = json.loads(p.stdout.readline())
    return p


def ask(p: subprocess.Popen, line: str) -> dict:
    """Send a holder one command; its JSON answer."""
    p.stdin.write(line + "\n")
    p.stdin.flush()
    return json.loads(p.stdout.readline())


@contextlib.contextmanager
def one_of_each():
    """One holder per hash state, all started before any tracer: a custom
    hash (SET_SLOTS 64), an automatic one (6 threads), global by prctl, and an
    idle process with no hash. Killed on the way out."""
    ps = {"custom": start("custom", 64), "auto": start("auto", 6), "global": start("global"),
          "idle": start("idle")}
    try:
        yield ps
    finally:
        for p in ps.values():
            p.kill()
            p.wait()
