"""Naming futex addresses (futextrace/naming/): a small ELF built here with gcc,
mapped by a fake /proc/PID/maps text laid out from its own PT_LOAD segments.
The expected symbols and sections come from the ELF itself (pyelftools read
directly here), never from the module under test."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from elftools.elf.elffile import ELFFile

from futextrace.naming import resolve
from futextrace.naming.capture import CHANGED_S, REFRESH_S, TARGET_REFRESH_S, NameCapture
from futextrace.naming.elfsyms import ElfCache
from futextrace.naming.maps import Snapshot, parse_maps, stack_pointer
from futextrace.naming.resolve import Namer

pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc")

SOURCE = r"""
int orders_mutex = 1;
int ledger_gate;
int orders_array[4] = {1, 2, 3, 4};
char bss_pad[3 * 4096];
int tail_word;
__attribute__((aligned(256))) int aligned_word = 7;
int main(void) { return orders_mutex + ledger_gate + tail_word + bss_pad[5] + orders_array[1] + aligned_word; }
"""
BASE = 0x555555554000
PAGE = 4096
PID = 4242


def _down(x: int) -> int:
    return x - x % PAGE


def _up(x: int) -> int:
    return _down(x + PAGE - 1)


def build(tmp_path, name="app", extra="") -> str:
    src = tmp_path / f"{name}.c"
    src.write_text(SOURCE + extra)
    out = str(tmp_path / name)
    subprocess.run(["gcc", "-O0", "-fPIE", "-pie", "-o", out, str(src)], check=True)
    return out


def elf_symbols(path: str) -> dict[str, tuple[int, int, str]]:
    """name -> (st_value, st_size, section name), from the ELF's own .symtab."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        out = {}
        for s in elf.get_section_by_name(".symtab").iter_symbols():
            if s["st_info"]["type"] == "STT_OBJECT" and s["st_size"] and isinstance(s["st_shndx"], int):
                out[s.name] = (s["st_value"], s["st_size"], elf.get_section(s["st_shndx"]).name)
        return out


def fake_maps(path: str, base: int = BASE, deleted: bool = False) -> str:
    """/proc/PID/maps lines as the kernel lays the file out: one mapping per
    PT_LOAD, and the .bss past the file's pages as an anonymous mapping."""
    ino = os.stat(path).st_ino
    lines = []
    with open(path, "rb") as f:
        loads = [s for s in ELFFile(f).iter_segments() if s["p_type"] == "PT_LOAD"]
    for s in loads:
        flags = s["p_flags"]
        perms = ("r" if flags & 4 else "-") + ("w" if flags & 2 else "-") + ("x" if flags & 1 else "-") + "p"
        lo, hi = base + _down(s["p_vaddr"]), base + _up(s["p_vaddr"] + s["p_filesz"])
        name = path + (" (deleted)" if deleted else "")
        lines.append(f"{lo:x}-{hi:x} {perms} {_down(s['p_offset']):08x} fe:00 {ino} {name}")
        tail = base + _up(s["p_vaddr"] + s["p_memsz"])
        if tail > hi:
            lines.append(f"{hi:x}-{tail:x} rw-p 00000000 00:00 0 ")
    lines += ["7f0000000000-7f0000021000 rw-p 00000000 00:00 0                          [heap]",
              "7f1000000000-7f1000800000 rw-p 00000000 00:00 0 ",
              "7f2000000000-7f2000010000 rwxp 00000000 00:00 0 ",
              "7f3000000000-7f3000001000 rw-s 00000000 00:1a 77 /dev/shm/ledger",
              "7f4000000000-7f4000001000 ---p 00000000 00:00 0 ",
              "7f4000001000-7f4000801000 rw-p 00000000 00:00 0 ",
              "7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]"]
    return "\n".join(lines) + "\n"


def snap_of(path: str, **kw) -> Snapshot:
    return parse_maps(PID, fake_maps(path, **{k: v for k, v in kw.items() if k != "stacks"}),
                      stacks=kw.get("stacks"))


def test_each_global_gets_its_own_symbol_and_section(tmp_path):
    app = build(tmp_path)
    syms = elf_symbols(app)
    snap = snap_of(app)
    namer = Namer()
    for name in ("orders_mutex", "ledger_gate", "orders_array", "tail_word", "aligned_word"):
        value, _size, section = syms[name]
        got = namer.name(BASE + value, [snap], alive=False)
        assert (got["symbol"], got["section"], got["offset"], got["kind"]) == (name, section, 0, "file"), got
        assert got["mapping"] == app and got["why_unknown"] is None
    # inside an array: the array's name and the offset into it
    value, _size, _ = syms["orders_array"]
    assert namer.name(BASE + value + 8, [snap], False)["symbol"] == "orders_array"
    assert namer.name(BASE + value + 8, [snap], False)["offset"] == 8


def test_the_bss_tail_mapping_is_the_files_bss(tmp_path):
    app = build(tmp_path)
    value, _size, section = elf_symbols(app)["tail_word"]
    snap = snap_of(app)
    m = snap.find(BASE + value)
    assert m.path == "" and m.inode == 0          # the test's premise: the anonymous tail
    got = Namer().name(BASE + value, [snap], False)
    assert (got["symbol"], got["section"], got["mapping"]) == ("tail_word", section, app)


def test_an_address_no_symbol_covers_is_never_given_a_neighbours_name(tmp_path):
    app = build(tmp_path)
    syms = elf_symbols(app)
    covered = {a for v, s, _ in syms.values() for a in range(v, v + s)}
    with open(app, "rb") as f:
        data = ELFFile(f).get_section_by_name(".data")
        lo, hi = data["sh_addr"], data["sh_addr"] + data["sh_size"]
    gap = next(a for a in range(lo, hi) if a not in covered)   # padding before aligned_word
    got = Namer().name(BASE + gap, [snap_of(app)], False)
    assert got["symbol"] is None and got["section"] == ".data" and got["offset"] == gap - lo
    assert "no data symbol covers it in .symtab" in got["why_unknown"]


def test_a_stripped_copy_says_no_symbol_and_why(tmp_path):
    app = build(tmp_path)
    value, _size, section = elf_symbols(app)["ledger_gate"]
    subprocess.run(["strip", app], check=True)
    got = Namer().name(BASE + value, [snap_of(app)], False)
    assert got["symbol"] is None and got["section"] == section
    assert got["why_unknown"].startswith("stripped: no .symtab")


def test_a_debug_file_named_by_debuglink_gives_the_symbols_back(tmp_path):
    app = build(tmp_path)
    value, _size, section = elf_symbols(app)["ledger_gate"]
    dbg = app + ".debug"
    subprocess.run(["objcopy", "--only-keep-debug", app, dbg], check=True)
    subprocess.run(["strip", app], check=True)
    subprocess.run(["objcopy", f"--add-gnu-debuglink={dbg}", app], cwd=tmp_path, check=True)
    got = Namer().name(BASE + value, [snap_of(app)], False)
    assert (got["symbol"], got["section"]) == ("ledger_gate", section)


def test_a_replaced_file_is_unknown_with_the_reason(tmp_path):
    app = build(tmp_path)
    value, _size, _ = elf_symbols(app)["ledger_gate"]
    snap = snap_of(app)
    with open(app, "rb") as f:
        from_map_files = ELFFile(f).get_section_by_name(".note.gnu.build-id")
        mapped_id = next(from_map_files.iter_notes())["n_desc"]
    other = build(tmp_path, "other", extra="int another_global = 3;\n")
    os.replace(other, app)                      # a new inode, a new build id at the same path
    m = snap.find(BASE + value)
    # with the build id read while the process lived
    got = Namer(build_ids={(m.dev, m.inode, m.path): mapped_id}).name(BASE + value, [snap], False)
    assert got["symbol"] is None and "replaced after it was mapped (build id" in got["why_unknown"]
    # without one: the inode tells
    got = Namer().name(BASE + value, [snap], False)
    assert got["symbol"] is None and "replaced after it was mapped (another inode)" in got["why_unknown"]


def test_a_deleted_file_of_an_exited_process_is_unknown(tmp_path):
    app = build(tmp_path)
    value, _size, _ = elf_symbols(app)["ledger_gate"]
    got = Namer().name(BASE + value, [snap_of(app, deleted=True)], False)
    assert got["mapping"] == app + " (deleted)" and got["symbol"] is None
    assert "deleted while mapped" in got["why_unknown"]


def test_memory_without_a_file(tmp_path):
    app = build(tmp_path)
    snap = snap_of(app, stacks={0x7f1000000000: 4243})
    n = Namer()
    heap = n.name(0x7f0000000010, [snap], False)
    assert (heap["kind"], heap["mapping"], heap["offset"]) == ("heap", "[heap]", 0x10)
    assert heap["why_unknown"] == resolve.HEAP
    th = n.name(0x7f10007fff00, [snap], False)
    assert (th["kind"], th["tid"]) == ("thread_stack", 4243)
    assert n.name(0x7ffc00020000, [snap], False)["kind"] == "stack"
    by_layout = n.name(0x7f4000800f00, [snap], False)      # above a guard page, no thread seen there
    assert (by_layout["kind"], by_layout["tid"]) == ("thread_stack", None)
    assert by_layout["why_unknown"] == resolve.STACK_BY_LAYOUT
    jit = n.name(0x7f2000000040, [snap], False)
    assert jit["kind"] == "anon" and jit["why_unknown"] == resolve.ANON_EXEC
    shm = n.name(0x7f3000000040, [snap], False)
    assert (shm["kind"], shm["mapping"], shm["offset"]) == ("shared_file", "/dev/shm/ledger", 0x40)
    gone = n.name(0x1000, [snap], False)
    assert gone["kind"] == "unmapped" and gone["why_unknown"] == resolve.NOT_MAPPED
    assert n.name(0x1000, [], False)["why_unknown"] == resolve.NO_SNAPSHOT


def test_malloc_arenas_are_not_taken_for_thread_stacks():
    """MariaDB showed it: glibc's thread arenas sit side by side, each 64 MiB-aligned
    with its unused rest reserved ---p, so an arena's rw- part sits right above the
    ---p rest of the arena below: a thread stack's layout (rw- above a ---p guard).
    The arena's mutex at +0x30 was named "a thread's stack"."""
    A, MiB = 0x7f0000000000, 1 << 20   # 64 MiB-aligned
    maps = (f"{A:x}-{A + 2 * MiB:x} rw-p 0 00:00 0 \n"                  # arena 1: 2 MiB used
            f"{A + 2 * MiB:x}-{A + 64 * MiB:x} ---p 0 00:00 0 \n"       # ... the rest reserved
            f"{A + 64 * MiB:x}-{A + 65 * MiB:x} rw-p 0 00:00 0 \n"     # arena 2, above arena 1's rest
            f"{A + 65 * MiB:x}-{A + 128 * MiB:x} ---p 0 00:00 0 \n"
            f"{A + 200 * MiB:x}-{A + 200 * MiB + 4096:x} ---p 0 00:00 0 \n"   # a guard page
            f"{A + 200 * MiB + 4096:x}-{A + 208 * MiB + 4096:x} rw-p 0 00:00 0 \n")  # its stack
    snap = parse_maps(7, maps)
    n = Namer()
    for arena in (A, A + 64 * MiB):
        got = n.name(arena + 0x30, [snap], False)
        assert (got["kind"], got["offset"], got["why_unknown"]) == ("malloc_arena", 0x30, resolve.ARENA), got
    stack = n.name(A + 208 * MiB, [snap], False)
    assert (stack["kind"], stack["why_unknown"]) == ("thread_stack", resolve.STACK_BY_LAYOUT)


def test_each_file_is_parsed_once(tmp_path):
    app = build(tmp_path)
    syms = elf_symbols(app)
    cache = ElfCache()
    namer = Namer(cache)
    snap = snap_of(app)
    for _ in range(50):
        for value, _size, _sec in syms.values():
            namer.name(BASE + value, [snap], False)
    assert cache.parsed == 1


def test_capture_keeps_the_last_map_of_an_exited_process_and_older_ones():
    maps = {"now": "1000-2000 rw-p 00000000 00:00 0 [heap]\n3000-4000 rw-p 00000000 00:00 0 \n"}
    clock = [0.0]

    def read(pid):
        text = maps["now"]
        return parse_maps(pid, text) if text else None

    cap = NameCapture(clock=lambda: clock[0], read=read)
    cap.tick([7])
    assert cap.reads == 1 and cap.snapshots(7)[0].find(0x3100) is not None
    clock[0] += 0.01
    cap.tick([7])                        # not due yet
    assert cap.reads == 1
    maps["now"] = "1000-2000 rw-p 00000000 00:00 0 [heap]\n"     # munmap
    clock[0] += REFRESH_S
    cap.tick([7])
    maps["now"] = ""                     # exited: a zombie's maps are empty
    clock[0] += REFRESH_S
    cap.tick([7])
    snaps = cap.snapshots(7)
    assert len(snaps) == 2 and snaps[0].find(0x3100) is None
    got = Namer().name(0x3100, snaps, False)      # found in the older snapshot
    assert got["kind"] == "anon"


def test_stack_pointer_of_a_thread_in_a_system_call():
    assert stack_pointer("202 0x7f0 0x80 0x0 0x0 0x7ff 0x0 0x7ff3eb3c4eb8 0x7ff3eb4ca829") == 0x7ff3eb3c4eb8
    assert stack_pointer("running") is None
    assert stack_pointer("-1 0x7ffd1000 0x401000") == 0x7ffd1000


def test_a_process_with_a_new_event_is_read_again_at_once():
    clock = [0.0]
    cap = NameCapture(clock=lambda: clock[0], read=lambda pid: parse_maps(pid, "1000-2000 rw-p 0 00:00 0 [heap]\n"))
    cap.tick([7])
    clock[0] += 0.02                     # before REFRESH_S and TICK_S... but a thread was born
    cap.tick([7], changed={7})
    assert cap.reads == 2
    cap.tick([7], changed={7})           # the same instant: not again
    assert cap.reads == 2


def test_an_event_inside_the_changed_spell_is_read_when_the_spell_ends():
    """CI saw it: a process's exec and its thread births came within CHANGED_S,
    the births were dropped, the heap it had grown in between was never read
    and its heap futexes were named unmapped (the process exited before REFRESH_S)."""
    clock = [0.0]
    maps = {"now": "1000-2000 r-xp 0 00:00 0 \n"}
    cap = NameCapture(clock=lambda: clock[0], read=lambda pid: parse_maps(pid, maps["now"]))
    cap.tick([7], changed={7})           # exec: read at once
    assert cap.reads == 1
    maps["now"] += "5000-6000 rw-p 0 00:00 0 [heap]\n"
    clock[0] += CHANGED_S / 2
    cap.tick([7], changed={7})           # threads born, inside the spell: kept for later
    assert cap.reads == 1
    clock[0] += CHANGED_S
    cap.tick([7])                        # no new event, but one is owed
    assert cap.reads == 2 and cap.snapshots(7)[0].find(0x5100) is not None
    clock[0] += CHANGED_S
    cap.tick([7])                        # paid: nothing more until REFRESH_S
    assert cap.reads == 2


def test_the_run_s_targets_are_read_without_waiting_for_their_events():
    """A target's map changes (a heap grown by malloc) come with no event: it is
    read every TARGET_REFRESH_S, the rest every REFRESH_S."""
    clock = [0.0]
    cap = NameCapture(clock=lambda: clock[0], read=lambda pid: parse_maps(pid, "1000-2000 rw-p 0 00:00 0 [heap]\n"))
    cap.tick([7, 8], targets={7})
    assert cap.reads == 2
    clock[0] += TARGET_REFRESH_S
    cap.tick([7, 8], targets={7})        # no event: the target is read again, the other is not
    assert cap.reads == 3 and TARGET_REFRESH_S < REFRESH_S
    clock[0] += REFRESH_S
    cap.tick([7, 8], targets={7})
    assert cap.reads == 5
