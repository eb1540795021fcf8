"""The BTF reader, digests and the kernel model on real BTF of several layouts."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest

from futextrace.kernel import model as kmodel
from futextrace.kernel.btf import Btf, BtfError, Digest, elf_section
from futextrace.kernel.kallsyms import Kallsyms
from futextrace.kernel.topology import parse_cpulist

DATA = Path(__file__).resolve().parent.parent / "data" / "btf"
SCRIPTS = Path(__file__).resolve().parent.parent.parent / "scripts"


def _digest_generator():
    """scripts/btf_digest.py: dev machinery that writes tests/data/btf, kept out of the package."""
    spec = importlib.util.spec_from_file_location("btf_digest", SCRIPTS / "btf_digest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


digest = _digest_generator().digest
VMLINUX = Path("/sys/kernel/btf/vmlinux")
needs_vmlinux = pytest.mark.skipif(not VMLINUX.exists(), reason="no /sys/kernel/btf/vmlinux")


# --- a synthetic BTF with every kind ------------------------------------------
class Builder:
    def __init__(self):
        self.strings = b"\0"
        self.types = b""
        self.n = 0

    def s(self, name: str) -> int:
        if not name:
            return 0
        off = len(self.strings)
        self.strings += name.encode() + b"\0"
        return off

    def t(self, name, kind, vlen=0, kflag=0, size_or_type=0, tail=b"") -> int:
        info = (kflag << 31) | (kind << 24) | vlen
        self.types += struct.pack("<III", self.s(name), info, size_or_type) + tail
        self.n += 1
        return self.n

    def bytes(self) -> bytes:
        hdr = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(self.types),
                          len(self.types), len(self.strings))
        return hdr + self.types + self.strings


def synthetic() -> bytes:
    b = Builder()
    i_int = b.t("int", 1, size_or_type=4, tail=struct.pack("<I", (1 << 24) | 32))       # 1
    i_bool = b.t("_Bool", 1, size_or_type=1, tail=struct.pack("<I", (4 << 24) | 8))     # 2
    p_int = b.t("", 2, size_or_type=i_int)                                              # 3
    arr = b.t("", 3, tail=struct.pack("<III", i_int, i_int, 4))                         # 4
    # union { int a; int *p; } (anonymous), then struct outer { int x; union {...}; int bf:3; }
    un = b.t("", 5, vlen=2, size_or_type=8,
             tail=struct.pack("<III", b.s("a"), i_int, 0) + struct.pack("<III", b.s("p"), p_int, 0))  # 5
    outer = b.t("outer", 4, vlen=4, kflag=1, size_or_type=32,
                tail=struct.pack("<III", b.s("x"), i_int, 0)
                + struct.pack("<III", 0, un, 64)
                + struct.pack("<III", b.s("bf"), i_int, (3 << 24) | 128)
                + struct.pack("<III", b.s("arr"), arr, 160 - 32))                       # 6
    b.t("color", 6, vlen=2, size_or_type=4,
        tail=struct.pack("<Ii", b.s("RED"), 0) + struct.pack("<Ii", b.s("BLUE"), -1))   # 7
    b.t("later", 7)                                                                     # 8 FWD
    td = b.t("outer_t", 8, size_or_type=outer)                                          # 9
    vol = b.t("", 9, size_or_type=td)                                                   # 10
    cst = b.t("", 10, size_or_type=vol)                                                 # 11
    b.t("", 11, size_or_type=p_int)                                                     # 12 RESTRICT
    proto = b.t("", 13, vlen=2, size_or_type=cst,
                tail=struct.pack("<II", b.s("a"), i_int) + struct.pack("<II", 0, 0))    # 13 (varargs)
    b.t("get_outer", 12, vlen=1, size_or_type=proto)                                    # 14 FUNC
    var = b.t("counter", 14, size_or_type=i_int, tail=struct.pack("<I", 1))             # 15
    b.t(".data", 15, vlen=1, size_or_type=4, tail=struct.pack("<III", var, 0, 4))       # 16
    b.t("double", 16, size_or_type=8)                                                   # 17
    b.t("tag", 17, size_or_type=outer, tail=struct.pack("<i", -1))                      # 18
    b.t("user", 18, size_or_type=i_int)                                                 # 19
    b.t("big", 19, vlen=1, size_or_type=8, tail=struct.pack("<III", b.s("HUGE"), 1, 2))  # 20
    proto2 = b.t("", 13, vlen=0, size_or_type=i_bool)                                   # 21
    b.t("is_on", 12, size_or_type=proto2)                                               # 22
    return b.bytes()


def test_synthetic_every_kind():
    btf = Btf(synthetic())
    assert len(btf) == 23
    assert [btf.get(i).kind for i in range(1, 21)] == [
        "INT", "INT", "PTR", "ARRAY", "UNION", "STRUCT", "ENUM", "FWD", "TYPEDEF", "VOLATILE",
        "CONST", "RESTRICT", "FUNC_PROTO", "FUNC", "VAR", "DATASEC", "FLOAT", "DECL_TAG",
        "TYPE_TAG", "ENUM64"]
    # Through the anonymous union; bitfield offsets from kind_flag members.
    assert btf.member("outer", "p") == (8, 3)
    assert btf.offsetof("outer", "a") == 8
    outer = btf.struct("outer")
    assert [(m.name, m.bit_offset, m.bitfield_size) for m in outer.members][2] == ("bf", 128, 3)
    assert btf.offsetof("outer", "nope") is None
    assert btf.sizeof(4) == 16 and btf.sizeof(3) == 8
    assert btf.get(7).values == [("RED", 0), ("BLUE", 4294967295)]
    assert btf.get(20).values == [("HUGE", (2 << 32) | 1)]
    f = btf.func("get_outer")
    assert (f.return_kind, f.return_type, f.return_size) == ("struct", "const volatile outer_t", 32)
    assert f.params == [("a", "int"), ("", "...")]
    assert btf.func("is_on").return_kind == "bool"
    assert btf.get(15).extra == 1 and btf.get(18).extra == -1
    assert btf.type_str(12) == "restrict int *"


def test_bad_input():
    with pytest.raises(BtfError):
        Btf(b"\0" * 40)
    with pytest.raises(BtfError):
        Btf(synthetic()[:60])
    with pytest.raises(BtfError):
        Digest.from_json({"schema": "something-else"})


# --- real BTF -----------------------------------------------------------------
@needs_vmlinux
def test_vmlinux_parses_fast():
    t0 = time.perf_counter()
    btf = Btf.from_file(VMLINUX)
    btf.struct("task_struct")        # includes building the name index
    elapsed = time.perf_counter() - t0
    assert elapsed < 2.0, f"parsing vmlinux BTF took {elapsed:.2f} s"
    assert len(btf) > 10000
    assert btf.offsetof("pt_regs", "di") == 112      # x86-64 ABI, fixed for decades
    assert btf.size_of_struct("list_head") == 16
    assert btf.func("schedule").return_kind == "void"


@needs_vmlinux
@pytest.mark.skipif(not shutil.which("objcopy") or not shutil.which("cc"), reason="needs cc and objcopy")
def test_elf_btf_section(tmp_path):
    obj = tmp_path / "x.o"
    subprocess.run(["cc", "-c", "-x", "c", "-", "-o", str(obj)], input=b"int x;", check=True)
    subprocess.run(["objcopy", "--add-section", f".BTF={VMLINUX}", str(obj)], check=True)
    assert elf_section(obj.read_bytes(), ".BTF") == VMLINUX.read_bytes()
    btf = Btf.from_file(obj)
    assert btf.offsetof("pt_regs", "di") == 112


@needs_vmlinux
def test_digest_answers_like_the_full_btf(tmp_path):
    full = Btf.from_file(VMLINUX)
    d = digest(full, None, {"release": "x"})
    path = tmp_path / "d.json"
    path.write_text(json.dumps(d))
    assert path.stat().st_size < 100_000
    small = Btf.from_file(path)
    for key, (sname, paths) in kmodel.OFFSETS.items():
        for p in paths:
            assert small.offsetof(sname, p) == full.offsetof(sname, p), key
    for name in kmodel.FUNCTIONS:
        assert small.func(name) == full.func(name), name
    a = kmodel.load(str(path), live=False).to_dict()
    b = kmodel.load(str(VMLINUX), live=False).to_dict()
    for x in (a, b):
        x.pop("btf_source"), x.pop("release"), x.pop("symbols_source")
    assert a == b


# --- the model on kept digests of real kernels ----------------------------------
# Facts per layout, from futex-kernel-facts.md §1-§2 and §8.
LAYOUTS = {
    "debian-6.17.13.json": dict(mm_layout="flat", hash_returns="pointer", bucket_has_priv=True),
    "debian-6.18.15.json": dict(mm_layout="flat", hash_returns="pointer", bucket_has_priv=True),
    "debian-7.2.6.json": dict(mm_layout="nested", hash_returns="bucket_ref", bucket_has_priv=False),
    "debian-7.3.4.json": dict(mm_layout="nested", hash_returns="bucket_ref", bucket_has_priv=False),
    "host-6.18.44-fc-v1045.json": dict(mm_layout="flat", hash_returns="bucket_ref", bucket_has_priv=False),
}


def test_at_least_three_layouts_kept():
    kept = {p.name for p in DATA.glob("*.json")}
    assert len(kept & set(LAYOUTS)) >= 3
    assert len({tuple(v.values()) for k, v in LAYOUTS.items() if k in kept}) >= 3


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_model_from_digest(name):
    path = DATA / name
    if not path.exists():
        pytest.skip(f"{name} not kept")
    m = kmodel.load(str(path), live=False)
    for k, v in LAYOUTS[name].items():
        assert getattr(m, k) == v, k
    assert m.private_hash
    assert m.offsets["futex_private_hash.hash_mask"] == 4
    assert m.offsets["futex_private_hash.queues"] == 64
    assert m.sizes["futex_hash_bucket"] == 64 and m.sizes["futex_key"] == 24
    assert m.offsets["futex_key.both.offset"] == 16 and m.offsets["futex_key.private.address"] == 8
    assert m.offsets["pt_regs.di"] == 112 and m.offsets["pt_regs.dx"] == 96
    assert all(m.offsets[k] is not None for k in
               ("task_struct.mm", "task_struct.tgid", "mm_struct.futex_phash", "mm_struct.futex_ref"))
    fh = m.functions["futex_hash"]
    assert fh.in_btf and fh.has_symbol
    if m.hash_returns == "bucket_ref":
        assert fh.return_type == "struct futex_bucket_ref" and fh.return_size == 16
        assert m.offsets["futex_bucket_ref.fph"] == 8 and m.sizes["futex_bucket_ref"] == 16
    else:
        assert fh.return_type == "struct futex_hash_bucket *"
        assert m.sizes["futex_bucket_ref"] is None
    if m.mm_layout == "nested":
        assert m.functions["futex_mm_init"].return_kind == "void"     # 7.2+: void futex_mm_init()
    json.dumps(m.to_dict())


def test_host_digest_symbols():
    """The build machines' kernel: §1 'Symbols actually emitted' and §8."""
    m = kmodel.load(str(DATA / "host-6.18.44-fc-v1045.json"), live=False)
    assert m.symbols_source == "digest"
    assert not m.functions["futex_private_hash_get"].has_symbol
    assert not m.functions["futex_pivot_hash"].has_symbol
    assert m.functions["__futex_hash"].has_symbol
    assert m.functions["futex_private_hash_put"].fragments == ["futex_private_hash_put.part.0"]
    assert len(m.functions["__futex_hash"].params) == 3


def _kept_digest_for(release: str) -> Path | None:
    """The kept digest of the running kernel's build: the same Debian version,
    or the build hosts' 6.18.44-fc series (one build number apart or more)."""
    for p in sorted(DATA.glob("*.json")):
        kept = json.loads(p.read_text())["release"]
        if kept == release or kept.split("-fc-")[0] + "-fc-" == release.split("-fc-")[0] + "-fc-":
            return p
    return None


LAYOUT_FIELDS = ("private_hash", "mm_layout", "hash_returns", "bucket_has_priv", "offsets", "sizes")


@needs_vmlinux
def test_kept_digest_describes_the_running_kernel():
    """The digest kept for this kernel (build host, or a Debian guest) gives the
    model the live BTF gives: the layout facts the other tests rely on are
    this kernel's, not a stale build's. Runs wherever the kernel has a futex
    private hash; a kernel without one has nothing to describe."""
    live = kmodel.load(str(VMLINUX), live=False)
    if not live.private_hash:
        pytest.skip("this kernel has no futex private hash (before 6.17)")
    path = _kept_digest_for(os.uname().release)
    assert path, f"no digest of {os.uname().release} in {DATA}: keep one (futextrace.kernel.btf.digest)"
    kept = kmodel.load(str(path), live=False)
    for field in LAYOUT_FIELDS:
        assert getattr(kept, field) == getattr(live, field), field
    for name in kmodel.FUNCTIONS:
        a, b = kept.functions[name], live.functions[name]
        assert (a.in_btf, a.return_type, a.params) == (b.in_btf, b.return_type, b.params), name


# --- small helpers ---------------------------------------------------------------
def test_kallsyms_suffixes(tmp_path):
    p = tmp_path / "kallsyms"
    p.write_text("0000000000000000 T futex_hash\n0000000000000000 t foo.isra.0\n"
                 "0000000000000000 t bar.part.0\n0000000000000000 t bar.cold\n"
                 "ffffffffc0000000 t modfn\t[somemod]\n")
    ks = Kallsyms.from_file(p)
    assert ks.function("futex_hash") == ("futex_hash", False)
    assert ks.function("foo") == ("foo.isra.0", True)
    assert ks.function("bar") == (None, False)           # fragments are not entry points
    assert sorted(ks.fragments("bar")) == ["bar.cold", "bar.part.0"]
    assert ks.lookup("futex_hash").address is None       # 0 = hidden address
    assert not ks.addresses_visible
    assert ks.lookup("modfn") is None


def test_cpulist_and_formula():
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == []
    assert kmodel.global_hash_formula(2, 1) == 512       # dmesg on the build machines: 512
    assert kmodel.global_hash_formula(3, 1) == 1024
    assert kmodel.global_hash_formula(64, 2) == 8192
    assert kmodel.global_hash_formula(1, 64) == 4
