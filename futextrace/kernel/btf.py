"""A small reader for BTF (the kernel's BPF Type Format).

Why our own: no maintained PyPI library reads BTF (see docs/btf-choice.md), and we
need only a few queries: types by name, member offsets along dotted paths (through
anonymous structs/unions), sizes and function prototypes.

Speed: one pass over the type section records where each type starts; records are
decoded only when asked for, and the name index is built on first lookup.
vmlinux BTF (~5 MB, ~150k types) loads in a fraction of a second.

Inputs: raw BTF (/sys/kernel/btf/vmlinux), an ELF file with a .BTF section
(vmlinux), or a JSON digest written by `python -m futextrace.kernel.btf --digest FILE`
(a small subset of the futex-related types, used as test data).
"""
from __future__ import annotations

import json
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

BTF_MAGIC = 0xEB9F

KINDS = ["UNKN", "INT", "PTR", "ARRAY", "STRUCT", "UNION", "ENUM", "FWD", "TYPEDEF",
         "VOLATILE", "CONST", "RESTRICT", "FUNC", "FUNC_PROTO", "VAR", "DATASEC", "FLOAT",
         "DECL_TAG", "TYPE_TAG", "ENUM64"]
KIND = {name: i for i, name in enumerate(KINDS)}
# Kinds that only qualify or rename another type: skipped when resolving.
MODIFIERS = {"TYPEDEF", "VOLATILE", "CONST", "RESTRICT", "TYPE_TAG"}
INT_SIGNED, INT_CHAR, INT_BOOL = 1, 2, 4


class BtfError(Exception):
    """The input is not BTF we can read (bad magic, truncated, unknown kind)."""


@dataclass
class Member:
    name: str
    type: int
    bit_offset: int
    bitfield_size: int = 0


@dataclass
class BtfType:
    id: int
    kind: str
    name: str
    size: int | None = None       # INT, STRUCT, UNION, ENUM, ENUM64, FLOAT, DATASEC
    ref: int | None = None        # PTR, TYPEDEF, modifiers, FUNC, VAR, DECL_TAG; FUNC_PROTO: return type
    vlen: int = 0
    kind_flag: bool = False
    int_encoding: int = 0
    int_bits: int = 0
    array: tuple[int, int, int] | None = None          # (elem type, index type, nelems)
    members: list[Member] | None = None                # STRUCT/UNION (None: left out of a digest)
    params: list[tuple[str, int]] | None = None        # FUNC_PROTO
    values: list[tuple[str, int]] | None = None        # ENUM/ENUM64
    extra: int | None = None                           # VAR linkage, DECL_TAG component_idx

    def to_json(self) -> dict:
        d = {"id": self.id, "kind": self.kind, "name": self.name}
        for k in ("size", "ref", "array", "params", "values", "extra"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        if self.kind_flag:
            d["kind_flag"] = True
        if self.kind == "INT":
            d["int"] = [self.int_encoding, self.int_bits]
        if self.members is not None:
            d["members"] = [[m.name, m.type, m.bit_offset, m.bitfield_size] for m in self.members]
        elif self.kind in ("STRUCT", "UNION"):
            d["shallow"] = True
        return d

    @classmethod
    def from_json(cls, d: dict) -> "BtfType":
        t = cls(id=d["id"], kind=d["kind"], name=d["name"], size=d.get("size"), ref=d.get("ref"),
                kind_flag=d.get("kind_flag", False), extra=d.get("extra"))
        if "int" in d:
            t.int_encoding, t.int_bits = d["int"]
        if "array" in d:
            t.array = tuple(d["array"])
        if "members" in d:
            t.members = [Member(*m) for m in d["members"]]
        if "params" in d:
            t.params = [tuple(p) for p in d["params"]]
        if "values" in d:
            t.values = [tuple(v) for v in d["values"]]
        return t


@dataclass
class FuncProto:
    name: str
    return_kind: str              # "pointer" | "struct" | "int" | "bool" | "void" | "other"
    return_type: str              # C spelling, e.g. "struct futex_bucket_ref"
    return_size: int              # bytes (0 for void)
    params: list[tuple[str, str]] = field(default_factory=list)


class TypeSource:
    """Queries shared by the full reader and a digest; subclasses supply
    `get(id)`, `ids_named(name)` and `__len__`."""

    def get(self, tid: int) -> BtfType:
        raise NotImplementedError

    def ids_named(self, name: str) -> list[int]:
        raise NotImplementedError

    # --- lookups ----------------------------------------------------------
    def find(self, name: str, kind: str | None = None) -> list[BtfType]:
        out = [self.get(i) for i in self.ids_named(name)]
        return [t for t in out if kind is None or t.kind == kind]

    def find_one(self, name: str, kind: str | tuple[str, ...]) -> BtfType | None:
        """First type of that name and kind; a full definition beats a FWD/shallow one."""
        kinds = (kind,) if isinstance(kind, str) else kind
        cands = [t for t in self.find(name) if t.kind in kinds]
        cands.sort(key=lambda t: (t.kind in ("STRUCT", "UNION") and t.members is None))
        return cands[0] if cands else None

    def struct(self, name: str) -> BtfType | None:
        return self.find_one(name, ("STRUCT", "UNION"))

    def resolve(self, tid: int) -> BtfType | None:
        """Follow typedefs and qualifiers; None for void (id 0)."""
        for _ in range(64):
            if tid == 0:
                return None
            t = self.get(tid)
            if t.kind not in MODIFIERS:
                return t
            tid = t.ref
        raise BtfError(f"type loop at id {tid}")

    def sizeof(self, tid: int) -> int:
        t = self.resolve(tid)
        if t is None:
            return 0
        if t.kind == "PTR":
            return 8   # 64-bit kernels only (x86-64)
        if t.kind == "ARRAY":
            return t.array[2] * self.sizeof(t.array[0])
        if t.size is None:
            raise BtfError(f"type {t.kind} {t.name!r} has no size")
        return t.size

    def _find_member(self, t: BtfType, name: str) -> tuple[int, int] | None:
        """(bit offset, type id) of `name` in t, searching anonymous members too."""
        if t.members is None:
            raise KeyError(f"{t.kind.lower()} {t.name} is not in this digest")
        for m in t.members:
            if m.name == name:
                return m.bit_offset, m.type
        for m in t.members:
            if m.name == "":
                inner = self.resolve(m.type)
                if inner is not None and inner.kind in ("STRUCT", "UNION"):
                    hit = self._find_member(inner, name)
                    if hit is not None:
                        return m.bit_offset + hit[0], hit[1]
        return None

    def member(self, struct_name: str, path: str) -> tuple[int, int] | None:
        """(byte offset, type id) of a dotted member path, or None if absent."""
        t = self.struct(struct_name)
        if t is None:
            return None
        bits = 0
        tid = t.id
        for part in path.split("."):
            cur = self.resolve(tid)
            if cur is None or cur.kind not in ("STRUCT", "UNION"):
                return None
            hit = self._find_member(cur, part)
            if hit is None:
                return None
            bits += hit[0]
            tid = hit[1]
        return bits // 8, tid

    def offsetof(self, struct_name: str, path: str) -> int | None:
        hit = self.member(struct_name, path)
        return None if hit is None else hit[0]

    def size_of_struct(self, name: str) -> int | None:
        t = self.struct(name)
        return None if t is None else t.size

    def type_str(self, tid: int) -> str:
        """C-like spelling of a type, for humans and reports."""
        if tid == 0:
            return "void"
        t = self.get(tid)
        if t.kind == "PTR":
            inner = self.type_str(t.ref)
            return inner + ("*" if inner.endswith("*") else " *")
        if t.kind in ("CONST", "VOLATILE", "RESTRICT"):
            return f"{t.kind.lower()} {self.type_str(t.ref)}"
        if t.kind == "TYPE_TAG":
            return self.type_str(t.ref)
        if t.kind == "ARRAY":
            return f"{self.type_str(t.array[0])}[{t.array[2]}]"
        if t.kind in ("STRUCT", "UNION", "ENUM", "ENUM64"):
            kw = {"ENUM64": "enum"}.get(t.kind, t.kind.lower())
            return f"{kw} {t.name or '(anon)'}"
        if t.kind == "FWD":
            return ("union " if t.kind_flag else "struct ") + t.name
        if t.kind == "FUNC_PROTO":
            return "function"
        return t.name or t.kind.lower()

    def func(self, name: str) -> FuncProto | None:
        fn = self.find_one(name, "FUNC")
        if fn is None:
            return None
        proto = self.get(fn.ref)
        ret = self.resolve(proto.ref)
        if ret is None:
            kind, size = "void", 0
        else:
            size = self.sizeof(proto.ref)
            if ret.kind == "PTR":
                kind = "pointer"
            elif ret.kind in ("STRUCT", "UNION"):
                kind = "struct"
            elif ret.kind == "INT" and (ret.int_encoding & INT_BOOL or ret.name == "_Bool"):
                kind = "bool"
            elif ret.kind in ("INT", "ENUM", "ENUM64"):
                kind = "int"
            else:
                kind = "other"
        params = [(pname, self.type_str(ptid) if ptid else "...") for pname, ptid in proto.params]
        return FuncProto(name, kind, self.type_str(proto.ref), size, params)


class Btf(TypeSource):
    """Raw BTF: header, type section, string section (little-endian only)."""

    def __init__(self, data: bytes):
        if len(data) < 24:
            raise BtfError("file too short for a BTF header")
        magic, version, _flags, hdr_len = struct.unpack_from("<HBBI", data, 0)
        if magic != BTF_MAGIC:
            raise BtfError("not BTF (bad magic)")
        type_off, type_len, str_off, str_len = struct.unpack_from("<IIII", data, 8)
        base = hdr_len
        self._data = data
        self._strings = data[base + str_off: base + str_off + str_len]
        if len(self._strings) != str_len or base + type_off + type_len > len(data):
            raise BtfError("truncated BTF")
        self._index(base + type_off, base + type_off + type_len)
        self._by_name: dict[str, list[int]] | None = None
        self._cache: dict[int, BtfType] = {}

    @classmethod
    def from_file(cls, path: str | Path) -> "TypeSource":
        """Raw BTF, an ELF with .BTF, or a JSON digest."""
        data = Path(path).read_bytes()
        if data[:4] == b"\x7fELF":
            data = elf_section(data, ".BTF")
        elif data[:1] == b"{":
            return Digest.from_json(json.loads(data))
        return cls(data)

    def _index(self, pos: int, end: int) -> None:
        # One pass: record each type's start, kind and name offset. Id 0 is void.
        data = self._data
        unpack = struct.Struct("<III").unpack_from
        starts, kinds, names = [0], [0], [0]
        # Bytes of trailing data per kind, as (fixed, per vlen item).
        extra = {1: (4, 0), 3: (12, 0), 4: (0, 12), 5: (0, 12), 6: (0, 8), 13: (0, 8),
                 14: (4, 0), 15: (0, 12), 17: (4, 0), 19: (0, 12)}
        while pos < end:
            name_off, info, _ = unpack(data, pos)
            kind = (info >> 24) & 0x1F
            if kind == 0 or kind >= len(KINDS):
                raise BtfError(f"unknown BTF kind {kind} at byte {pos}")
            starts.append(pos)
            kinds.append(kind)
            names.append(name_off)
            fixed, per = extra.get(kind, (0, 0))
            pos += 12 + fixed + per * (info & 0xFFFF)
        if pos != end:
            raise BtfError("type section does not end on a type boundary")
        self._starts, self._kinds, self._names = starts, kinds, names

    def __len__(self) -> int:
        return len(self._starts)

    def _str(self, off: int) -> str:
        s = self._strings
        return s[off:s.index(b"\0", off)].decode("utf-8", "replace")

    def ids_named(self, name: str) -> list[int]:
        if self._by_name is None:
            # name_off -> ids, then strings only for offsets actually used.
            by_off: dict[int, list[int]] = {}
            for tid, off in enumerate(self._names):
                if off:
                    by_off.setdefault(off, []).append(tid)
            self._by_name = {}
            for off, ids in by_off.items():
                self._by_name.setdefault(self._str(off), []).extend(ids)
        return self._by_name.get(name, [])

    def get(self, tid: int) -> BtfType:
        t = self._cache.get(tid)
        if t is None:
            t = self._cache[tid] = self._decode(tid)
        return t

    def _decode(self, tid: int) -> BtfType:
        if tid == 0:
            return BtfType(0, "UNKN", "void")
        d, pos = self._data, self._starts[tid]
        name_off, info, size_or_type = struct.unpack_from("<III", d, pos)
        kind = KINDS[(info >> 24) & 0x1F]
        vlen, kflag = info & 0xFFFF, bool(info >> 31)
        t = BtfType(tid, kind, self._str(name_off), vlen=vlen, kind_flag=kflag)
        p = pos + 12
        if kind in ("INT", "STRUCT", "UNION", "ENUM", "ENUM64", "FLOAT", "DATASEC"):
            t.size = size_or_type
        else:
            t.ref = size_or_type
        if kind == "INT":
            (v,) = struct.unpack_from("<I", d, p)
            t.int_encoding, t.int_bits = (v >> 24) & 0xF, v & 0xFF
        elif kind == "ARRAY":
            t.array = struct.unpack_from("<III", d, p)
        elif kind in ("STRUCT", "UNION"):
            t.members = []
            for i in range(vlen):
                mname, mtype, moff = struct.unpack_from("<III", d, p + 12 * i)
                bits, bsize = (moff & 0xFFFFFF, moff >> 24) if kflag else (moff, 0)
                t.members.append(Member(self._str(mname), mtype, bits, bsize))
        elif kind == "ENUM":
            signed = kflag
            t.values = []
            for i in range(vlen):
                n, v = struct.unpack_from("<Ii" if signed else "<II", d, p + 8 * i)
                t.values.append((self._str(n), v))
        elif kind == "ENUM64":
            t.values = []
            for i in range(vlen):
                n, lo, hi = struct.unpack_from("<III", d, p + 12 * i)
                t.values.append((self._str(n), (hi << 32) | lo))
        elif kind == "FUNC_PROTO":
            t.params = [(self._str(n), ty) for n, ty in
                        (struct.unpack_from("<II", d, p + 8 * i) for i in range(vlen))]
        elif kind == "DATASEC":
            t.params = [(str(ty), off) for ty, off, _sz in
                        (struct.unpack_from("<III", d, p + 12 * i) for i in range(vlen))]
        elif kind in ("VAR", "DECL_TAG"):
            (t.extra,) = struct.unpack_from("<i", d, p)
        return t

    def all_ids_of_kind(self, kind: str) -> list[int]:
        k = KIND[kind]
        return [i for i, kk in enumerate(self._kinds) if kk == k]


class Digest(TypeSource):
    """A subset of types kept as JSON; ids are those of the original BTF."""

    def __init__(self, types: dict[int, BtfType], meta: dict):
        self.types, self.meta = types, meta
        self._by_name: dict[str, list[int]] = {}
        for t in sorted(types.values(), key=lambda t: t.id):
            if t.name:
                self._by_name.setdefault(t.name, []).append(t.id)

    @classmethod
    def from_json(cls, d: dict) -> "Digest":
        if d.get("schema") != "futextrace-btf-digest":
            raise BtfError("JSON file is not a futextrace BTF digest")
        types = {t["id"]: BtfType.from_json(t) for t in d["types"]}
        return cls(types, {k: v for k, v in d.items() if k != "types"})

    def __len__(self) -> int:
        return len(self.types)

    def get(self, tid: int) -> BtfType:
        if tid == 0:
            return BtfType(0, "UNKN", "void")
        try:
            return self.types[tid]
        except KeyError:
            raise KeyError(f"type id {tid} is not in this digest") from None

    def ids_named(self, name: str) -> list[int]:
        return self._by_name.get(name, [])


def elf_section(data: bytes, name: str) -> bytes:
    """Contents of one section of a little-endian ELF64 file."""
    if data[4] != 2 or data[5] != 1:
        raise BtfError("only little-endian ELF64 is supported")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def sh(i):  # (name, offset, size)
        b = shoff + i * shentsize
        n, = struct.unpack_from("<I", data, b)
        off, size = struct.unpack_from("<QQ", data, b + 0x18)
        return n, off, size

    _, stroff, strsize = sh(shstrndx)
    for i in range(shnum):
        n, off, size = sh(i)
        end = data.index(b"\0", stroff + n)
        if data[stroff + n:end].decode() == name:
            return data[off:off + size]
    raise BtfError(f"ELF file has no {name} section")


# --- digests ---------------------------------------------------------------
# Structs whose names contain one of these are kept in full (all members).
FUTEX_WORDS = ("futex",)
# Big structs of which only these members are kept (offsets stay exact).
PRUNED = {"task_struct": {"mm", "pid", "tgid", "signal", "futex", "comm", "flags", "group_leader"},
          "signal_struct": {"nr_threads"},
          "mm_struct": None,    # None: keep members whose name starts with "futex"
          "pt_regs": "all",
          "bpf_iter_meta": {"seq"}}   # the task iterator's context
SYMBOL_WORDS = ("futex", "mmput", "copy_process", "kernel_clone")


def _keep_member(struct_name: str, name: str) -> bool:
    rule = PRUNED[struct_name]
    if rule == "all":
        return True
    if rule is None:
        return name.startswith("futex") or name in ("futex", "owner")
    return name in rule


def digest(btf: TypeSource, symbols: list[tuple[str, str]] | None = None, meta: dict | None = None) -> dict:
    """A small JSON-able subset of `btf` with everything futextrace's model reads."""
    keep: dict[int, BtfType] = {}

    def add(tid: int, full: bool) -> None:
        if tid == 0 or (tid in keep and (keep[tid].members is not None or not full)):
            return
        t = btf.get(tid)
        if t.kind in ("STRUCT", "UNION"):
            if not full and t.name:       # a named struct seen through a member: name and size only
                keep.setdefault(tid, BtfType(t.id, t.kind, t.name, size=t.size, vlen=t.vlen))
                return
            keep[tid] = t
            for m in t.members:
                add(m.type, full=(m.name == "" or any(w in btf.type_str(m.type) for w in FUTEX_WORDS)))
            return
        keep[tid] = t
        if t.kind == "ARRAY":
            add(t.array[0], full=False)
            add(t.array[1], full=False)
        elif t.kind == "FUNC_PROTO":
            add(t.ref, full=False)
            for _, ptid in t.params:
                add(ptid, full=False)
        elif t.kind == "PTR":
            add(t.ref, full=False)
        elif t.ref:
            add(t.ref, full=full)

    def add_pruned(t: BtfType) -> None:
        members = []

        def walk(s: BtfType, out: list, base_bits: int) -> None:
            for m in s.members:
                if m.name and _keep_member(t.name, m.name):
                    out.append(Member(m.name, m.type, base_bits + m.bit_offset, m.bitfield_size))
                    add(m.type, full=m.name.startswith("futex"))
                elif not m.name:
                    inner = btf.resolve(m.type)
                    if inner is not None and inner.kind in ("STRUCT", "UNION"):
                        walk(inner, out, base_bits + m.bit_offset)   # flattened: offsets stay exact

        walk(t, members, 0)
        keep[t.id] = BtfType(t.id, t.kind, t.name, size=t.size, vlen=len(members), members=members)

    names = btf._by_name if isinstance(btf, Digest) else None
    if isinstance(btf, Btf):
        btf.ids_named("")  # build the index
        names = btf._by_name
    for name, ids in names.items():
        if not any(w in name for w in FUTEX_WORDS):
            continue
        for tid in ids:
            t = btf.get(tid)
            if t.kind in ("STRUCT", "UNION", "ENUM", "TYPEDEF"):
                add(tid, full=True)
            elif t.kind == "FUNC":
                keep[tid] = t
                add(t.ref, full=False)
    for sname in PRUNED:
        t = btf.struct(sname)
        if t is not None and t.members is not None:
            add_pruned(t) if PRUNED[sname] != "all" else add(t.id, full=True)
    out = {"schema": "futextrace-btf-digest", "schema_version": 1, **(meta or {})}
    if symbols is not None:
        out["symbols"] = sorted({f"{ty} {n}" for ty, n in symbols
                                 if any(w in n for w in SYMBOL_WORDS)})
    out["types"] = [keep[i].to_json() for i in sorted(keep)]
    return out


def main(argv: list[str]) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m futextrace.kernel.btf",
                                 description="Inspect BTF or write a digest of its futex types.")
    ap.add_argument("file", nargs="?", default="/sys/kernel/btf/vmlinux")
    ap.add_argument("--digest", action="store_true", help="print a JSON digest")
    ap.add_argument("--system-map", help="System.map or kallsyms to take symbol names from")
    ap.add_argument("--release", default="", help="kernel release to record in the digest")
    ap.add_argument("--struct", help="print a struct's members")
    ap.add_argument("--func", help="print a function prototype")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    btf = Btf.from_file(a.file)
    t1 = time.perf_counter()
    if a.digest:
        syms = None
        if a.system_map:
            from futextrace.kernel.kallsyms import Kallsyms
            ks = Kallsyms.from_file(a.system_map)
            syms = [(s.type, s.name) for s in ks.symbols]
        print(json.dumps(digest(btf, syms, {"release": a.release, "source": Path(a.file).name}),
                         separators=(",", ":"), indent=None))
        return 0
    if a.struct:
        t = btf.struct(a.struct)
        if t is None:
            print(f"no struct {a.struct}", file=sys.stderr)
            return 1
        print(f"{t.kind.lower()} {t.name} size={t.size}")
        for m in t.members or []:
            print(f"  {m.bit_offset // 8:6d} {m.name or '(anon)'}: {btf.type_str(m.type)}")
        return 0
    if a.func:
        print(btf.func(a.func))
        return 0
    print(f"{len(btf)} types, parsed in {(t1 - t0) * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
