"""`futextrace doctor` on the real kernel, checked against independent readings.

Every host-specific expectation is tied to a fact this file detects itself
(kprobe PMU present? fentry load refused by a raw bpf() call? what bpftool says
futex_hash returns?), so the same tests hold on the build machines (no kprobes,
fentry EPERM, futex_hash returning struct futex_bucket_ref) and in Debian guests.
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.host import KPROBE_PMU, VMLINUX, cli, in_vm_guest, kernel_symbols, needs_bpf, one_line_error

pytestmark = [pytest.mark.root, needs_bpf]


# --- an independent reading of the BTF, through bpftool -------------------------
class RawBtf:
    """Parses `bpftool btf dump format raw`: '[id] KIND 'name' k=v...' + member lines."""

    HEAD = re.compile(r"^\[(\d+)\] (\w+) '([^']*)'(.*)$")
    MEMBER = re.compile(r"^\s+'([^']*)' (.*)$")

    def __init__(self, text: str):
        self.types: dict[int, dict] = {}
        self.by_name: dict[str, list[int]] = {}
        cur = None
        for line in text.splitlines():
            m = self.HEAD.match(line)
            if m:
                tid = int(m.group(1))
                cur = {"kind": m.group(2), "name": m.group(3), "members": [],
                       **dict(kv.split("=", 1) for kv in m.group(4).split() if "=" in kv)}
                self.types[tid] = cur
                self.by_name.setdefault(cur["name"], []).append(tid)
                continue
            m = self.MEMBER.match(line)
            if m and cur is not None:
                attrs = dict(kv.split("=", 1) for kv in m.group(2).split() if "=" in kv)
                cur["members"].append((m.group(1), attrs))

    def named(self, name, kinds):
        for tid in self.by_name.get(name, []):
            if self.types[tid]["kind"] in kinds:
                return tid
        return None

    def strip(self, tid):
        while self.types[tid]["kind"] in ("TYPEDEF", "CONST", "VOLATILE", "RESTRICT", "TYPE_TAG"):
            tid = int(self.types[tid]["type_id"])
        return tid

    def offset(self, struct, path):
        tid = self.named(struct, ("STRUCT", "UNION"))
        bits = 0
        for part in path.split("."):
            hit = self._find(self.strip(tid), part)
            if hit is None:
                return None
            bits += hit[0]
            tid = hit[1]
        return bits // 8

    def _find(self, tid, name):
        members = self.types[tid]["members"]
        for mname, a in members:
            if mname == name:
                return int(a["bits_offset"]), int(a["type_id"])
        for mname, a in members:
            if mname == "(anon)":
                inner = self.strip(int(a["type_id"]))
                if self.types[inner]["kind"] in ("STRUCT", "UNION"):
                    hit = self._find(inner, name)
                    if hit:
                        return int(a["bits_offset"]) + hit[0], hit[1]
        return None

    def size(self, struct):
        tid = self.named(struct, ("STRUCT", "UNION"))
        return None if tid is None else int(self.types[tid]["size"])

    def return_type(self, func):
        """'struct NAME', 'pointer', 'int ...' for a FUNC's return type."""
        proto = self.types[int(self.types[self.named(func, ("FUNC",))]["type_id"])]
        ret = int(proto["ret_type_id"])
        if ret == 0:
            return "void"
        t = self.types[self.strip(ret)]
        if t["kind"] in ("STRUCT", "UNION"):
            return f"{t['kind'].lower()} {t['name']}"
        return t["kind"].lower()


@pytest.fixture(scope="module")
def raw():
    out = subprocess.run(["bpftool", "btf", "dump", "file", VMLINUX, "format", "raw"],
                         capture_output=True, text=True, check=True).stdout
    return RawBtf(out)


@pytest.fixture(scope="module")
def report():
    r = cli("doctor", "--json", "-")   # '-': the JSON on stdout, in place of the text
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def text_report(report):
    """`doctor`'s text. In a VM guest, the JSON run's report rendered by the function
    the CLI prints it with: a second doctor run costs minutes of compiles under TCG."""
    if in_vm_guest():
        from futextrace.output.text.doctor_text import doctor_text
        return doctor_text(report) + "\n"
    r = cli("doctor")
    assert r.returncode == 0, r.stderr
    return r.stdout


def methods(report):
    return {m["name"]: m for m in report["methods"]}


# --- an independent fentry load through the raw bpf() syscall ---------------------
def fentry_load_errno(raw: RawBtf) -> int:
    """0 if a minimal fentry program on futex_hash_prctl loads, else the errno."""
    target = raw.named("futex_hash_prctl", ("FUNC",)) or raw.named("schedule", ("FUNC",))
    insns = (ctypes.c_uint64 * 2)(0x00000000000000B7, 0x0000000000000095)  # r0 = 0; exit
    lic = ctypes.c_char_p(b"GPL")
    attr = (ctypes.c_uint8 * 128)()
    def put(off, fmt_size, val):
        ctypes.memmove(ctypes.addressof(attr) + off, ctypes.byref(fmt_size(val)), ctypes.sizeof(fmt_size))
    put(0, ctypes.c_uint32, 26)                          # BPF_PROG_TYPE_TRACING
    put(4, ctypes.c_uint32, 2)                           # insn_cnt
    put(8, ctypes.c_uint64, ctypes.addressof(insns))
    put(16, ctypes.c_uint64, ctypes.cast(lic, ctypes.c_void_p).value)
    put(68, ctypes.c_uint32, 24)                         # expected_attach_type = BPF_TRACE_FENTRY
    put(108, ctypes.c_uint32, target)                    # attach_btf_id
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    fd = libc.syscall(321, 5, ctypes.byref(attr), 128)   # bpf(BPF_PROG_LOAD)
    if fd >= 0:
        os.close(fd)
        return 0
    return ctypes.get_errno()


# --- the tests ----------------------------------------------------------------------
def test_tracepoint_works_and_fires(report):
    tp = methods(report)["tracepoint"]
    assert tp["works"], tp["reason"]
    assert tp["fired"] == 1          # our own single futex call, filtered by tgid


def test_fentry_status_matches_an_independent_load(report, raw):
    fe = methods(report)["fentry"]
    err = fentry_load_errno(raw)
    if err == 1:                     # EPERM, as on the build machines
        assert not fe["works"]
        assert "the kernel refused fentry programs (EPERM)" in fe["reason"]
    elif err == 0:
        # The fentry method's one required program is fexit on futex_hash: the
        # kernel takes it where futex_hash returns a pointer (not a struct, 7.2+).
        pointer_lookup = bool(raw.named("futex_hash", ("FUNC",))) and raw.return_type("futex_hash") == "ptr"
        assert fe["works"] == pointer_lookup, fe["reason"]
        if fe["works"]:
            assert fe["fired"] == 1, fe     # our own futex call, through the trampoline
    else:
        assert not fe["works"]


def test_kprobe_status_matches_the_kprobe_pmu(report):
    kp = methods(report)["kprobe"]
    if not KPROBE_PMU.exists():
        assert not kp["works"]
        assert "CONFIG_KPROBES" in kp["reason"]
    else:
        assert kp["works"] == bool({"futex_hash", "__futex_hash"} & kernel_symbols()), kp["reason"]


def test_futex_hash_return_type_matches_bpftool(report, raw, text_report):
    fh = report["kernel"]["functions"]["futex_hash"]
    want = raw.return_type("futex_hash")
    if want.startswith("struct "):
        assert fh["return_type"] == want and fh["return_kind"] == "struct"
        assert report["kernel"]["hash_returns"] == "bucket_ref"
        assert f"futex_hash returns {want}" in text_report
        assert "by value (as since 7.2, or a backport): the kernel refuses" in methods(report)["fentry"]["reason"]
    else:
        assert want == "ptr" and fh["return_kind"] == "pointer"


def test_offsets_match_bpftool(report, raw):
    off, sizes = report["kernel"]["offsets"], report["kernel"]["sizes"]
    flat = raw.offset("mm_struct", "futex_phash")
    want = flat if flat is not None else raw.offset("mm_struct", "futex.phash.hash")
    assert want is not None
    assert off["mm_struct.futex_phash"] == want
    assert report["kernel"]["mm_layout"] == ("flat" if flat is not None else "nested")
    assert off["futex_private_hash.hash_mask"] == raw.offset("futex_private_hash", "hash_mask")
    assert off["futex_private_hash.queues"] == raw.offset("futex_private_hash", "queues")
    assert sizes["futex_hash_bucket"] == raw.size("futex_hash_bucket")
    assert off["task_struct.mm"] == raw.offset("task_struct", "mm")
    assert off["futex_key.both.offset"] == raw.offset("futex_key", "both.offset")
    assert off["futex_hash_bucket.priv"] == raw.offset("futex_hash_bucket", "priv")


def test_report_sections(report, text_report):
    assert report["privileges"]["root"]
    assert report["prctl"]["works"]
    assert report["kernel"]["clone_rule"] in ("thread+vm", "vm-not-vfork", "vm")
    assert report["kernel"]["global_hash"]["buckets_per_node"] >= 4
    assert report["headers"]["path"]
    lines = text_report.strip().splitlines()
    assert lines[-1].startswith("recommended method: ")
    # The method `record --method auto` picks: fentry where it loads, kprobes where
    # they work, else the tracepoint method, whose sys_enter hook is a tp_btf or a raw tracepoint.
    works = {name for name, m in methods(report).items() if m["works"]}
    expect = ("fentry" if "fentry" in works else "kprobe" if "kprobe" in works
              else "tracepoint" if works & {"tp_btf", "raw_tracepoint"} else None)
    assert report["recommended"] == expect


def test_json_file_beside_the_text(tmp_path, report):
    """--json FILE means what it means in every command: the text on stdout, the JSON in FILE."""
    out = tmp_path / "doctor.json"
    r = cli("doctor", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("recommended method: ")
    saved = json.loads(out.read_text())
    assert saved.keys() == report.keys() and saved["recommended"] == report["recommended"]


def test_nothing_stays_attached():
    """Probe in this process (fds stay open if BCC did not clean up), then look."""
    from futextrace.loading import doctor
    from futextrace.kernel import model as kmodel
    from futextrace.kernel.btf import Btf
    model = kmodel.load(live=False)
    # live=False skips the tp_btf ids (they name the running kernel's BTF): add them.
    model.tp_btf_ids = {"sys_enter": Btf.from_file(kmodel.VMLINUX_BTF).ids_named("btf_trace_sys_enter")[0]}
    assert next(s for s in doctor.probe_methods(model) if s.name == "tp_btf").works
    ours = {"on_tp", "on_raw", "on_btf", "on_entry", "on_return", "on_fexit", "ft_trial"}
    # The kernel frees a detached program after an RCU grace period: poll briefly.
    for _ in range(50):
        progs = json.loads(subprocess.run(["bpftool", "prog", "show", "--json"],
                                          capture_output=True, text=True, check=True).stdout)
        left = [p["name"] for p in progs if p.get("name") in ours
                or p.get("name", "").startswith(("kfunc__", "kretfunc__"))]
        if not left:
            break
        time.sleep(0.1)
    assert left == []


def test_btf_missing_file():
    assert "does not exist" in one_line_error(cli("doctor", "--btf", "/nonexistent/vmlinux"))


def test_btf_not_btf(tmp_path):
    junk = tmp_path / "junk"
    junk.write_bytes(b"this is not BTF at all" * 10)
    assert "not a BTF file" in one_line_error(cli("doctor", "--btf", str(junk)))
    cut = tmp_path / "truncated"
    cut.write_bytes(Path(VMLINUX).read_bytes()[:4096])
    one_line_error(cli("doctor", "--btf", str(cut)))


@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv")
def test_not_root_is_one_line():
    r = cli("doctor", user=65534, timeout=120)
    assert "needs root" in one_line_error(r)
    assert r.returncode == 3
