"""Call sites: a user stack the BPF side captured (raw instruction pointers:
frame 0 the ip at the futex call, then the return addresses a frame-pointer
walk found, as bpf_get_stack(BPF_F_USER_STACK) gives them), each frame named
by the function that covers it, and how far the stack can be believed.

Naming goes through the same snapshots, files and checks as a data address
(resolve.py's Namer.mapped_file: a file replaced on disk or deleted after its
process exited is not read). Only a function whose [start, start+size) covers
the address names it, never a neighbour. A return address (frames after 0) is
looked up one byte back: a call that is its function's last instruction (to a
noreturn function) returns to the next function's first byte. The offset shown
is the ip's own, as gdb and perf show it.

Trust ("stacks end honestly"): the walk reads frame k+1's return address at
rbp+8, rbp being frame k's function's frame. That holds only when frame k's
function set one up: its code starts with x86-64's prologue ([endbr64] push
%rbp; mov %rsp,%rbp) and the ip is past it. A function built without frame
pointers (Debian's libc) leaves its caller's rbp in place, so the walk skips
its caller or reads a stale word as one. Frame 0 (the registers' ip) is
trusted; frame k+1 only while frame k is trusted and set up a frame pointer.
Untrusted frames are kept, marked. An ip between a function's `leave` and its
`ret` cannot be told from the code's start alone; a futex call is not there.
"""
from __future__ import annotations

import os
from weakref import WeakKeyDictionary

from futextrace.naming.maps import Mapping, Snapshot
from futextrace.naming.resolve import (ANON_EXEC, NO_SNAPSHOT, NOT_MAPPED, MappedFile, Namer,
                                       no_symbol_why)

ENDBR64 = b"\xf3\x0f\x1e\xfa"
PUSH_MOV = (b"\x55\x48\x89\xe5", b"\x55\x48\x8b\xec")   # push %rbp; mov %rsp,%rbp (both encodings)
PROLOGUE_BYTES = 8           # the longest prologue: endbr64 + push + mov
CODE_MEMO = 16384            # function starts whose prologue one Namer's symbolizing keeps

NOT_CODE = ("not executable memory: no code runs there (a word the frame-pointer walk read "
            "as a return address that is not one)")
MAY_BE_WRONG = "the frames past it may skip or invent a caller"

# Per Namer (whose files they are): (dev, inode, path, build id, function start) -> prologue length or 0.
_prologues: WeakKeyDictionary[Namer, dict] = WeakKeyDictionary()


def symbolize(ips: list[int], snaps: list[Snapshot], namer: Namer, alive: bool,
              max_frames: int | None = None) -> dict:
    """One captured stack named, its frames marked trusted or not. `max_frames`:
    how many frames the capture keeps (a stack that long may go on past them)."""
    frames, stop = [], None
    for k, ip in enumerate(ips):
        entry, where = _frame(ip, k, snaps, namer, alive)
        entry["trusted"] = k == 0 or (frames[-1]["trusted"] and stop is None)
        if entry["trusted"]:
            stop = _stop(entry, where, namer)
        frames.append(entry)
    trusted = next((i for i, f in enumerate(frames) if not f["trusted"]), len(frames))
    return {"frames": frames, "trusted_frames": trusted, "ends": _ends(frames, trusted, stop, max_frames)}


def _ends(frames: list[dict], trusted: int, stop: str | None, max_frames: int | None) -> str:
    """One sentence: why the trustworthy part of the stack stops where it does."""
    if not frames:
        return "no frame was captured"
    if stop is not None:
        return stop + (f": {MAY_BE_WRONG}" if trusted < len(frames) else ": the walk may have stopped short of its callers")
    if max_frames and len(frames) >= max_frames:
        return f"futextrace keeps {max_frames} frames: the stack may go on past them"
    return "the stack ends here"


def _frame(ip: int, k: int, snaps: list[Snapshot], namer: Namer, alive: bool) -> tuple[dict, tuple | None]:
    """(the frame's entry, (mapped file, mapping, function start) when a function names it)."""
    entry = {"ip": hex(ip), "function": None, "offset": None, "mapping": None, "trusted": False,
             "why_unknown": None}
    found = next(((s, m) for s in snaps if (m := s.find(ip)) is not None), None)
    if found is None:
        entry["why_unknown"] = NOT_MAPPED if snaps else NO_SNAPSHOT
        return entry, None
    snap, m = found
    entry["mapping"] = (m.path or "[anon]") + (" (deleted)" if m.deleted else "")
    if "x" not in m.perms:
        entry["why_unknown"] = NOT_CODE
        return entry, None
    if not m.is_file:
        entry["why_unknown"] = ANON_EXEC if not m.path.startswith("[") else \
            f"the kernel's {m.path} mapping: futextrace reads no symbols of it"
        return entry, None
    mf = namer.mapped_file(m, snap, alive)
    if mf.info is None:
        entry["why_unknown"] = mf.why
        return entry, None
    vaddr = ip - mf.bias
    fn = mf.info.functions.covering(vaddr - 1 if k else vaddr)
    if fn is None:
        entry["why_unknown"] = no_symbol_why(mf.info, "function", "function symbol", mf.info.functions.truncated)
        return entry, None
    entry.update(function=fn[0], offset=vaddr - fn[1])
    return entry, (mf, m, fn[1])


def _stop(entry: dict, where: tuple | None, namer: Namer) -> str | None:
    """Why the walk past this (trusted) frame cannot be trusted, or None when
    its function set up a frame pointer before the ip."""
    if where is None:
        return (f"{entry['ip']} is in no known function ({entry['why_unknown']}), "
                "so whether it keeps a frame pointer is unknown")
    mf, m, start = where
    at = f"{os.path.basename(m.path)}'s {entry['function']}+{entry['offset']:#x}"
    if mf.info.machine != "EM_X86_64":
        return f"{at} is {mf.info.machine} code: futextrace checks only x86-64's frame-pointer prologue"
    length = _prologue(mf, m, start, namer)
    if isinstance(length, str):
        return f"the code of {at} could not be read ({length}), so whether it sets up a frame pointer is unknown"
    if not length:
        return f"{at} sets up no frame pointer"
    if entry["offset"] < length:
        return f"{at} is inside its prologue, before its frame pointer is set up"
    return None


def _prologue(mf: MappedFile, m: Mapping, start: int, namer: Namer) -> int | str:
    """The length of the frame-pointer prologue the function at `start` begins
    with (0: none), read from the very file mapped; a string says why not read."""
    memo = _prologues.setdefault(namer, {})
    key = (m.dev, m.inode, m.path, mf.info.build_id, start)
    if key in memo:
        return memo[key]
    off = mf.info.file_offset(start)
    if off is None:
        return "no loadable segment of the file holds its first bytes"
    try:
        with open(mf.place, "rb") as f:
            f.seek(off)
            code = f.read(PROLOGUE_BYTES)
    except OSError as e:
        return e.strerror or str(e)      # not kept: a later read (the path, not map_files) may do
    body = code[len(ENDBR64):] if code.startswith(ENDBR64) else code
    length = next((len(code) - len(body) + len(p) for p in PUSH_MOV if body.startswith(p)), 0)
    if len(memo) >= CODE_MEMO:
        memo.clear()
    memo[key] = length
    return length


def dedup(stacks: list[list[int]]) -> list[tuple[list[int], int]]:
    """The distinct stacks in first-seen order, each with how many times it came
    (BPF stack ids collide: two stacks may share one, so the ips themselves are compared)."""
    counts: dict[tuple[int, ...], int] = {}
    for ips in stacks:
        key = tuple(ips)
        counts[key] = counts.get(key, 0) + 1
    return [(list(ips), n) for ips, n in counts.items()]


def label(sym: dict, frames: int = 2) -> str:
    """A short text for tables: the first `frames` trusted frames, innermost
    first ("touch+0x1c ← worker+0x2a"), a bare ip where the function is unknown,
    and "?" after the last trusted frame when untrusted frames follow it."""
    if not sym["frames"]:
        return "(no stack)"
    shown = [f"{f['function']}+{f['offset']:#x}" if f["function"] else f["ip"]
             for f in sym["frames"][:min(frames, sym["trusted_frames"])]]
    if len(shown) == sym["trusted_frames"] < len(sym["frames"]):
        shown.append("?")
    return " ← ".join(shown)
