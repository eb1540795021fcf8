"""Call sites (futextrace/naming/callsites.py): stacks of return addresses
named and marked trusted or not, against a program built here with gcc: two
functions with frame pointers (touch, worker), one compiled apart without
(nofp_wait), mapped by a fake /proc/PID/maps text laid out from its own
PT_LOAD segments, or run for real. The expected names, offsets and prologues
come from the ELF itself (pyelftools read directly here), never from the
module under test."""
from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest
from elftools.elf.elffile import ELFFile

from futextrace.naming import callsites, resolve
from futextrace.naming.callsites import dedup, label, symbolize
from futextrace.naming.elfsyms import ElfCache
from futextrace.naming.maps import parse_maps, read_snapshot
from futextrace.naming.resolve import Namer

pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc")

MAIN = r"""
#include <unistd.h>
int nofp_wait(int *p, int n);
volatile int sink;
int touch(int *p) { int r = nofp_wait(p, 3); sink = r; return r + 1; }
/* aligned: padding before it that no function covers */
__attribute__((aligned(64))) int worker(int *p) { int r = touch(p) * 2; sink = r; return r; }
int main(int argc, char **argv) { int x = argc; if (argc > 1) pause(); return worker(&x); }
static int impl(void) { return 1; }
static void *pick_impl(void) { return (void *)impl; }
int picked(void) __attribute__((ifunc("pick_impl")));
"""
NOFP = r"""
#include <unistd.h>
extern volatile int sink;
int nofp_wait(int *p, int n) { int s = 0; for (int i = 0; i < n; i++) { s += p[0] * i; sink = s; } return s; }
"""
BASE = 0x555555554000
PAGE = 4096
PID = 4242
JIT = 0x7f2000000040
HEAP = 0x7f0000000010


def build(tmp_path, name="app", extra="") -> str:
    (tmp_path / "main.c").write_text(MAIN + extra)
    (tmp_path / "nofp.c").write_text(NOFP)
    obj, out = str(tmp_path / "nofp.o"), str(tmp_path / name)
    subprocess.run(["gcc", "-O1", "-fomit-frame-pointer", "-fPIE", "-c", "-o", obj, str(tmp_path / "nofp.c")],
                   check=True)
    subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-fPIE", "-pie", "-o", out,
                    str(tmp_path / "main.c"), obj], check=True)
    return out


def functions(path: str) -> dict[str, tuple[int, int]]:
    """name -> (st_value, st_size) of the sized functions (FUNC, IFUNC) in the ELF's own .symtab."""
    with open(path, "rb") as f:
        return {s.name: (s["st_value"], s["st_size"])
                for s in ELFFile(f).get_section_by_name(".symtab").iter_symbols()
                if s["st_info"]["type"] in ("STT_FUNC", "STT_GNU_IFUNC", "STT_LOOS") and s["st_size"]}


def code(path: str, vaddr: int, n: int = 8) -> bytes:
    """n bytes of the file at vaddr, through the PT_LOAD that holds it."""
    with open(path, "rb") as f:
        for s in ELFFile(f).iter_segments():
            if s["p_type"] == "PT_LOAD" and s["p_vaddr"] <= vaddr < s["p_vaddr"] + s["p_filesz"]:
                f.seek(vaddr - s["p_vaddr"] + s["p_offset"])
                return f.read(n)
    raise AssertionError(f"{vaddr:#x} is in no PT_LOAD")


def has_frame_pointer(path: str, name: str) -> bool:
    b = code(path, functions(path)[name][0])
    b = b[4:] if b.startswith(b"\xf3\x0f\x1e\xfa") else b       # endbr64
    return b.startswith(b"\x55\x48\x89\xe5")                    # push %rbp; mov %rsp,%rbp


def fake_maps(path: str, base: int = BASE) -> str:
    """/proc/PID/maps lines as the kernel lays the file out (one mapping per
    PT_LOAD), then a heap and an anonymous rwx mapping (JIT code)."""
    ino = os.stat(path).st_ino
    with open(path, "rb") as f:
        loads = [s for s in ELFFile(f).iter_segments() if s["p_type"] == "PT_LOAD"]
    lines = []
    for s in loads:
        flags = s["p_flags"]
        perms = ("r" if flags & 4 else "-") + ("w" if flags & 2 else "-") + ("x" if flags & 1 else "-") + "p"
        lo = base + s["p_vaddr"] - s["p_vaddr"] % PAGE
        hi = base + -(-(s["p_vaddr"] + s["p_filesz"]) // PAGE) * PAGE
        lines.append(f"{lo:x}-{hi:x} {perms} {s['p_offset'] - s['p_offset'] % PAGE:08x} fe:00 {ino} {path}")
    lines += ["7f0000000000-7f0000021000 rw-p 00000000 00:00 0                          [heap]",
              "7f2000000000-7f2000010000 rwxp 00000000 00:00 0 "]
    return "\n".join(lines) + "\n"


def inside(path: str, name: str) -> int:
    """An offset in the middle of the function: past its prologue, before its end."""
    size = functions(path)[name][1]
    assert size // 2 >= 8, (name, size)
    return size // 2


def at(path: str, name: str, base: int = BASE) -> int:
    """An address in the middle of the function, mapped at `base`."""
    return base + functions(path)[name][0] + inside(path, name)


def test_the_premise_one_function_keeps_a_frame_pointer_the_other_does_not(tmp_path):
    app = build(tmp_path)
    assert has_frame_pointer(app, "touch") and has_frame_pointer(app, "worker")
    assert not has_frame_pointer(app, "nofp_wait")


def test_functions_are_kept_apart_from_data_symbols(tmp_path):
    app = build(tmp_path)
    info = ElfCache().load(app)
    assert set(functions(app)) <= set(info.functions.names)
    assert "picked" in info.functions.names                 # STT_GNU_IFUNC
    assert "sink" in info.symbols.names and "sink" not in info.functions.names
    assert not {"touch", "worker", "main"} & set(info.symbols.names)


@pytest.mark.parametrize("base", [BASE, 0x7f5a12340000])
def test_frames_are_named_with_the_load_bias(tmp_path, base):
    app = build(tmp_path)
    names = ["touch", "worker", "main"]
    snap = parse_maps(PID, fake_maps(app, base))
    got = symbolize([at(app, n, base) for n in names], [snap], Namer(), alive=False)
    assert [(f["function"], f["offset"], f["mapping"], f["why_unknown"]) for f in got["frames"]] == \
        [(n, inside(app, n), app, None) for n in names]
    assert got["frames"][0]["ip"] == hex(at(app, "touch", base))
    assert [f["trusted"] for f in got["frames"]] == [True, True, True]
    assert got["trusted_frames"] == 3 and got["ends"] == "the stack ends here"
    kept = symbolize([at(app, n, base) for n in names], [snap], Namer(), False, max_frames=3)
    assert kept["ends"] == "futextrace keeps 3 frames: the stack may go on past them"


def test_trust_stops_after_the_function_without_a_frame_pointer(tmp_path):
    app = build(tmp_path)
    snap = parse_maps(PID, fake_maps(app))
    names = ["touch", "nofp_wait", "worker", "main"]
    got = symbolize([at(app, n) for n in names], [snap], Namer(), False)
    assert [f["function"] for f in got["frames"]] == names          # untrusted frames are kept, named
    assert [f["trusted"] for f in got["frames"]] == [True, True, False, False]
    assert got["trusted_frames"] == 2
    assert got["ends"] == (f"app's nofp_wait+{inside(app, 'nofp_wait'):#x} sets up no frame pointer: "
                           "the frames past it may skip or invent a caller")
    # frame 0 in it: nothing past it is trusted
    got = symbolize([at(app, "nofp_wait"), at(app, "touch")], [snap], Namer(), False)
    assert [f["trusted"] for f in got["frames"]] == [True, False] and got["trusted_frames"] == 1
    # the last frame without one: the walk may have ended early
    got = symbolize([at(app, "touch"), at(app, "nofp_wait")], [snap], Namer(), False)
    assert got["trusted_frames"] == 2 and got["ends"].endswith("the walk may have stopped short of its callers")


def test_frame_0_inside_the_prologue_is_not_walked_past(tmp_path):
    app = build(tmp_path)
    start = BASE + functions(app)["touch"][0]
    got = symbolize([start, at(app, "worker")], [parse_maps(PID, fake_maps(app))], Namer(), False)
    assert (got["frames"][0]["function"], got["frames"][0]["offset"]) == ("touch", 0)
    assert got["trusted_frames"] == 1
    assert got["ends"].startswith("app's touch+0x0 is inside its prologue")


def test_an_address_in_no_function_is_never_given_a_neighbours_name(tmp_path):
    app = build(tmp_path)
    fns = functions(app)
    end = fns["touch"][0] + fns["touch"][1]
    covered = {a for v, s in fns.values() for a in range(v, v + s)}
    assert end not in covered and end < fns["worker"][0]          # the premise: padding after touch
    snap = parse_maps(PID, fake_maps(app))
    got = symbolize([BASE + end, at(app, "worker")], [snap], Namer(), False)
    gap = got["frames"][0]
    assert (gap["function"], gap["offset"], gap["mapping"]) == (None, None, app)
    assert gap["why_unknown"].startswith("no function symbol covers it in .symtab")
    assert got["trusted_frames"] == 1 and got["ends"].startswith(f"{BASE + end:#x} is in no known function")
    # the same address as a return address: the call was touch's last instruction
    got = symbolize([at(app, "worker"), BASE + end], [snap], Namer(), False)
    assert (got["frames"][1]["function"], got["frames"][1]["offset"]) == ("touch", fns["touch"][1])


def test_memory_that_is_not_a_files_code(tmp_path):
    app = build(tmp_path)
    snap = parse_maps(PID, fake_maps(app))
    got = symbolize([at(app, "touch"), JIT, at(app, "worker")], [snap], Namer(), False)
    jit = got["frames"][1]
    assert (jit["function"], jit["mapping"], jit["trusted"]) == (None, "[anon]", True)
    assert jit["why_unknown"] == resolve.ANON_EXEC
    assert got["trusted_frames"] == 2 and got["ends"].startswith(f"{JIT:#x} is in no known function")
    frames = symbolize([at(app, "touch"), HEAP, 0x1000], [snap], Namer(), False)["frames"]
    assert frames[1]["why_unknown"] == callsites.NOT_CODE and frames[1]["mapping"] == "[heap]"
    assert frames[2]["why_unknown"] == resolve.NOT_MAPPED and frames[2]["mapping"] is None
    assert symbolize([0x1000], [], Namer(), False)["frames"][0]["why_unknown"] == resolve.NO_SNAPSHOT


def test_a_stripped_copy_says_no_function_and_why(tmp_path):
    app = build(tmp_path)
    ips = [at(app, "touch"), at(app, "worker")]
    subprocess.run(["strip", app], check=True)
    got = symbolize(ips, [parse_maps(PID, fake_maps(app))], Namer(), False)
    assert got["frames"][0]["function"] is None and got["frames"][0]["mapping"] == app
    assert got["frames"][0]["why_unknown"].startswith("stripped: no .symtab")
    assert "no exported function in .dynsym covers it" in got["frames"][0]["why_unknown"]
    assert got["trusted_frames"] == 1


def test_a_debug_file_gives_the_functions_back(tmp_path):
    app = build(tmp_path)
    ips, size = [at(app, "touch"), at(app, "nofp_wait")], inside(app, "touch")
    dbg = app + ".debug"
    subprocess.run(["objcopy", "--only-keep-debug", app, dbg], check=True)
    subprocess.run(["strip", app], check=True)
    subprocess.run(["objcopy", f"--add-gnu-debuglink={dbg}", app], cwd=tmp_path, check=True)
    got = symbolize(ips, [parse_maps(PID, fake_maps(app))], Namer(), False)
    assert (got["frames"][0]["function"], got["frames"][0]["offset"]) == ("touch", size)
    assert got["trusted_frames"] == 2          # the prologue read from the stripped file itself


def test_a_replaced_file_is_unknown_with_the_reason(tmp_path):
    app = build(tmp_path)
    snap = parse_maps(PID, fake_maps(app))
    ip = at(app, "touch")
    with open(app, "rb") as f:
        mapped_id = next(ELFFile(f).get_section_by_name(".note.gnu.build-id").iter_notes())["n_desc"]
    (tmp_path / "o").mkdir()
    other = build(tmp_path / "o", "other", extra="int another(void) { return 3; }\n")
    os.replace(other, app)
    m = snap.find(ip)
    got = symbolize([ip], [snap], Namer(build_ids={(m.dev, m.inode, m.path): mapped_id}), False)
    assert got["frames"][0]["function"] is None
    assert "replaced after it was mapped (build id" in got["frames"][0]["why_unknown"]
    got = symbolize([ip], [snap], Namer(), False)
    assert "replaced after it was mapped (another inode)" in got["frames"][0]["why_unknown"]


def test_a_live_process_is_read_through_map_files_even_when_its_file_is_replaced(tmp_path):
    app = build(tmp_path)
    names = ["touch", "worker"]
    fns, offs = functions(app), [inside(app, n) for n in names]     # read now: the path is replaced below
    stripped = str(tmp_path / "stripped")
    shutil.copy(app, stripped)
    subprocess.run(["strip", stripped], check=True)
    proc = subprocess.Popen([app, "wait"])
    try:
        deadline = time.monotonic() + 10
        while open(f"/proc/{proc.pid}/syscall").read().split()[0] != "34":     # blocked in pause(2)
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.01)
        snap = read_snapshot(proc.pid)
        base = next(m.start for m in snap.mappings if m.path == app and m.offset == 0)
        ips = [base + fns[n][0] + off for n, off in zip(names, offs)]
        os.replace(stripped, app)              # the path now holds a copy with no symbols
        live = symbolize(ips, [snap], Namer(), alive=True)
        assert [(f["function"], f["offset"]) for f in live["frames"]] == list(zip(names, offs))
        assert live["trusted_frames"] == 2     # touch's prologue read from the mapped file too
    finally:
        proc.kill()
        proc.wait()
    gone = symbolize(ips, [snap], Namer(), alive=False)      # exited: only the path, and it was replaced
    assert gone["frames"][0]["function"] is None
    assert "replaced after it was mapped (another inode)" in gone["frames"][0]["why_unknown"]


def test_each_file_is_parsed_once_and_each_prologue_read_once(tmp_path, monkeypatch):
    app = build(tmp_path)
    opened = []
    monkeypatch.setattr(callsites, "open", lambda *a: opened.append(a[0]) or open(*a), raising=False)
    cache = ElfCache()
    namer = Namer(cache)
    snap = parse_maps(PID, fake_maps(app))
    ips = [at(app, n) for n in ("touch", "worker", "main")]
    for _ in range(20):
        assert symbolize(ips, [snap], namer, False)["trusted_frames"] == 3
    assert cache.parsed == 1 and opened == [app, app, app]


def test_dedup_counts_each_distinct_stack_in_first_seen_order():
    stacks = [[1, 2], [3], [1, 2], [1, 2, 3], [3], [1, 2]]
    assert dedup(stacks) == [([1, 2], 3), ([3], 2), ([1, 2, 3], 1)]
    assert dedup([]) == []


def test_label(tmp_path):
    app = build(tmp_path)
    snap = parse_maps(PID, fake_maps(app))
    off = {n: inside(app, n) for n in ("touch", "nofp_wait", "worker", "main")}
    full = symbolize([at(app, n) for n in ("touch", "worker", "main")], [snap], Namer(), False)
    assert label(full) == f"touch+{off['touch']:#x} ← worker+{off['worker']:#x}"
    cut = symbolize([at(app, n) for n in ("touch", "nofp_wait", "worker", "main")], [snap], Namer(), False)
    assert label(cut) == f"touch+{off['touch']:#x} ← nofp_wait+{off['nofp_wait']:#x} ← ?"
    assert label(cut, frames=1) == f"touch+{off['touch']:#x}"
    assert label(cut, frames=5) == label(cut)
    jit = symbolize([JIT, at(app, "worker")], [snap], Namer(), False)
    assert label(jit) == f"{JIT:#x} ← ?"
    assert label(symbolize([], [snap], Namer(), False)) == "(no stack)"
