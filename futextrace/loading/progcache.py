"""Skip BCC's compiler when the same program was compiled before.

BCC compiles a program's C text with clang and LLVM on every run: 1.1 of the
1.5 s `record` takes to attach on a 2-CPU machine, over 30 s in a QEMU/TCG
guest. What the compiler produces is BPF instructions per function, and they
name each map by the file descriptor BCC created for it (ld_imm64 with
src_reg BPF_PSEUDO_MAP_FD). So the first compile's instructions are kept
under $FUTEXTRACE_CACHE/prog with each map reference recorded by map name,
keyed by everything that decides them: the text, the shared header, every -D
flag (the kernel's offsets among them), BCC's library and the header tree.

A later run compiles only the map declarations (the same text with
-DFT_MAPS_ONLY, which leaves every function out: bpf/*.c), so BCC creates
the maps and its table objects as usual; each cached map reference is then
patched with the new map's fd and the instructions are loaded through BCC's
own bcc_func_load. The kernel's verifier checks them as it checks any load.
Where the new maps differ from the cached description in any way, the text
is compiled in full, as without a cache. FUTEXTRACE_NO_PROG_CACHE=1 turns
the cache off.

Each entry also records what it was built for (`built_for`: kernel release,
a digest of the kernel's BTF, BCC's library, the text and every flag) and a
read checks it against this start's, refusing (and compiling in full) on any
difference: the key is only the file's name, a claim. A file copied in from
another machine or image, renamed, or keyed by an older futextrace that left
something out would otherwise load on its name alone.
"""
from __future__ import annotations

import ctypes as ct
import hashlib
import json
import os
import stat
import struct
from pathlib import Path

from futextrace.kernel import modelcache
from futextrace.kernel.model import VMLINUX_BTF

FORMAT = 2                   # 2: built_for recorded and checked
LD_IMM64 = 0x18              # BPF_LD | BPF_IMM | BPF_DW: the only insn that carries a map
PSEUDO_MAP_FD = 1            # its src_reg when imm is a map fd
MAX_ENTRY_BYTES = 16 << 20   # a cache file larger than this is not ours
# Function-name prefixes BCC attaches by itself inside BPF() (its _trace_autoload).
AUTOLOAD = ("kprobe__", "kretprobe__", "tracepoint__", "raw_tracepoint__")
NOT_CACHED = ("kfunc__", "kretfunc__", "lsm__")   # attach targets BCC finds from its own compile


def cache_dir() -> Path:
    return Path(os.environ.get("FUTEXTRACE_CACHE", "/var/cache/futextrace")) / "prog"


def _bcc_library() -> str:
    """Path, size and mtime of the libbcc this process mapped: a new BCC, a new key."""
    try:
        with open("/proc/self/maps") as f:
            path = next((ln.split()[-1] for ln in f if "libbcc.so" in ln), "")
        st = os.stat(path)
        return f"{path}:{st.st_size}:{st.st_mtime_ns}"
    except (OSError, StopIteration):
        return "unknown"


def btf_digest(path: str = VMLINUX_BTF) -> str:
    """The kernel's BTF digest (its types: the kernel build, beyond its release
    string), read once per process with the model's; "none" where there is none."""
    return (modelcache.btf_digest(path) or "none")[:32]


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def built_for(text: str, cflags: list[str], header: str) -> dict:
    """What an entry is made for, recorded in it and checked on read."""
    return {"release": os.uname().release, "btf": btf_digest(), "bcc": _bcc_library(),
            "kernel_source": os.environ.get("BCC_KERNEL_SOURCE", ""),
            "source": _digest(text, header), "cflags": list(cflags)}


def key_of(made_for: dict) -> str:
    """The entry's file name: a digest of everything it is built for (built_for)."""
    b = made_for
    return _digest(str(FORMAT), b["source"], *b["cflags"], b["kernel_source"], b["release"], b["btf"], b["bcc"])


def cache_key(text: str, cflags: list[str], header: str) -> str:
    return key_of(built_for(text, cflags, header))


def mismatch(entry: dict, wanted: dict) -> str | None:
    """The first field of `wanted` that `entry` was not built for, or None."""
    have = entry.get("built_for")
    if not isinstance(have, dict):
        return "built_for"
    return next((k for k, v in wanted.items() if have.get(k) != v), None)


def _lib():
    from bcc import lib
    lib.bpf_num_tables.restype = ct.c_ulonglong
    lib.bpf_num_tables.argtypes = [ct.c_void_p]
    lib.bpf_table_name.restype = ct.c_char_p
    lib.bpf_table_name.argtypes = [ct.c_void_p, ct.c_ulonglong]
    return lib


def tables(module) -> dict[str, list]:
    """name -> [type, max entries, flags, key description, value description,
    ring/perf buffer record fields]: what must match."""
    lib = _lib()
    out = {}
    for i in range(lib.bpf_num_tables(module)):
        name = lib.bpf_table_name(module, i)
        fields = [lib.bpf_perf_event_field(module, name, k).decode()
                  for k in range(lib.bpf_perf_event_fields(module, name))]
        out[name.decode()] = [lib.bpf_table_type_id(module, i), lib.bpf_table_max_entries_id(module, i),
                              lib.bpf_table_flags_id(module, i),
                              (lib.bpf_table_key_desc(module, name) or b"").decode(),
                              (lib.bpf_table_leaf_desc(module, name) or b"").decode(), fields]
    return out


def map_references(insns: bytes, fd_names: dict[int, str]) -> list[list] | None:
    """[insn index, map name] for every map reference; None if one is not a known map fd."""
    refs = []
    for k in range(0, len(insns) - 7, 8):
        code, regs, _off, imm = struct.unpack_from("<BBhi", insns, k)
        if code != LD_IMM64 or not regs >> 4:
            continue
        if regs >> 4 != PSEUDO_MAP_FD or imm not in fd_names:
            return None          # map values, BTF ids, functions: not something to patch
        refs.append([k // 8, fd_names[imm]])
    return refs


def cache_entry(bpf, made_for: dict | None = None, method: str = "") -> dict | None:
    """The compiled module as a cache entry, or None when it cannot be replayed.
    `made_for` (built_for) is recorded and checked on every read: the key alone
    is not enough, as it is only the file's name. It hashes the same fields, but
    nothing ties a file's content to its name: an entry copied from an image
    built on another kernel, renamed, or written under an older key that left a
    field out would load on the name alone, with another kernel's offsets."""
    lib = _lib()
    described = tables(bpf.module)
    fd_names = {lib.bpf_table_fd(bpf.module, name.encode()): name for name in described}
    functions = {}
    for i in range(lib.bpf_num_functions(bpf.module)):
        name = lib.bpf_function_name(bpf.module, i).decode()
        if name.startswith(NOT_CACHED):
            return None
        insns = bpf.dump_func(name.encode())
        refs = map_references(insns, fd_names)
        if refs is None:
            return None
        functions[name] = {"insns": insns.hex(), "maps": refs}
    return {"format": FORMAT, "built_for": made_for or {}, "method": method,
            "license": lib.bpf_module_license(bpf.module).decode(),
            "kern_version": lib.bpf_module_kern_version(bpf.module),
            "tables": described, "functions": functions}


def read_entry(path: Path) -> dict | None:
    """A cache entry this user wrote (owned by us, writable by nobody else), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid()
                or st.st_mode & 0o022 or st.st_size > MAX_ENTRY_BYTES):
            return None
        try:
            entry = json.loads(f.read())
        except ValueError:
            return None
    return entry if isinstance(entry, dict) and entry.get("format") == FORMAT else None


def entries() -> list[tuple[Path, dict | None]]:
    """Every file in the cache with its entry (None: one a read would not trust or use)."""
    try:
        paths = sorted(cache_dir().glob("*.json"))
    except OSError:
        return []
    return [(p, read_entry(p)) for p in paths]


def for_this_kernel(entry: dict) -> bool:
    """Built for the running kernel: its release and its BTF."""
    have = entry.get("built_for") or {}
    return have.get("release") == os.uname().release and have.get("btf") == btf_digest()


def write_entry(path: Path, entry: dict) -> None:
    """Best effort: an unwritable cache costs the next run a compile, nothing more."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as f:
            json.dump(entry, f)
        tmp.replace(path)
    except OSError:
        pass


def _compile_only_class(BPF):
    class CompileOnlyBPF(BPF):
        """BCC's object without its autoload: `cache build` loads and attaches nothing."""

        def _trace_autoload(self):
            pass

    return CompileOnlyBPF


def _replay_class(BPF):
    lib = _lib()

    class ReplayBPF(BPF):
        """A BPF object whose maps BCC made from the declarations alone and
        whose functions come from a cache entry."""

        def __init__(self, entry: dict, attach: bool = True, **kwargs):
            self._entry = entry
            self._attach = attach
            self.maps_match = False
            super().__init__(**kwargs)

        def _trace_autoload(self):
            # Runs inside BPF.__init__, once the maps exist: check them before
            # anything is attached, then attach what BCC would have.
            self.maps_match = tables(self.module) == self._entry["tables"]
            if not (self.maps_match and self._attach):
                return
            for name in self._entry["functions"]:
                fn = name.encode()
                if name.startswith("kprobe__"):
                    self.attach_kprobe(event=self.fix_syscall_fnname(fn[8:]), fn_name=fn)
                elif name.startswith("kretprobe__"):
                    self.attach_kretprobe(event=self.fix_syscall_fnname(fn[11:]), fn_name=fn)
                elif name.startswith("tracepoint__"):
                    self.attach_tracepoint(tp=fn[len(b"tracepoint__"):].replace(b"__", b":"), fn_name=fn)
                elif name.startswith("raw_tracepoint__"):
                    self.attach_raw_tracepoint(tp=fn[len(b"raw_tracepoint__"):], fn_name=fn)

        def _insns(self, func_name: bytes) -> bytes:
            fn = self._entry["functions"].get(func_name.decode())
            if fn is None:
                raise Exception(f"Unknown program {func_name}")   # as BCC says it
            insns = bytearray.fromhex(fn["insns"])
            for index, table in fn["maps"]:
                struct.pack_into("<i", insns, index * 8 + 4, lib.bpf_table_fd(self.module, table.encode()))
            return bytes(insns)

        def dump_func(self, func_name):
            return self._insns(func_name if isinstance(func_name, bytes) else func_name.encode())

        def load_func(self, func_name, prog_type, device=None, attach_type=-1):
            func_name = func_name if isinstance(func_name, bytes) else func_name.encode()
            if func_name in self.funcs:
                return self.funcs[func_name]
            insns = self._insns(func_name)
            buf = ct.create_string_buffer(insns, len(insns))
            fd = lib.bcc_func_load(self.module, prog_type, func_name, buf, len(insns),
                                   self._entry["license"].encode(), self._entry["kern_version"],
                                   0, None, 0, device, attach_type)
            if fd < 0:
                raise Exception(f"Failed to load BPF program {func_name}: {os.strerror(ct.get_errno())}")
            fn = BPF.Function(self, func_name, fd)
            self.funcs[func_name] = fn
            return fn

    return ReplayBPF


def compile_program(BPF, text: str, cflags: list[str], header: str, method: str = "",
                    attach: bool = True):
    """BCC's BPF object for `text`: replayed from the cache where it has this
    program, else compiled (and cached). Its `compile_cache` attribute says
    which: "hit", "miss" (compiled, now cached), "stale" (the cached maps did
    not match: compiled), "mismatch" (the entry was built for another kernel,
    BCC, text or flags: compiled), "off". `attach=False` (cache build): BCC
    attaches and loads nothing, not even its autoloaded functions."""
    full_class = BPF if attach else _compile_only_class(BPF)    # what compiles the text in full
    if os.environ.get("FUTEXTRACE_NO_PROG_CACHE"):
        b = full_class(text=text.encode(), cflags=cflags)
        b.compile_cache, b.cacheable = "off", False
        return b
    made_for = built_for(text, cflags, header)      # read once: the key and the check are both of it
    path = cache_dir() / f"{key_of(made_for)}.json"
    entry = read_entry(path)
    status = "miss"
    if entry is not None and mismatch(entry, made_for):
        entry, status = None, "mismatch"
    if entry is not None:
        b = _replay_class(BPF)(entry, attach, text=text.encode(), cflags=cflags + ["-DFT_MAPS_ONLY"])
        if b.maps_match:
            b.compile_cache = "hit"
            return b
        b.cleanup()
        status = "stale"
    b = full_class(text=text.encode(), cflags=cflags)
    fresh = cache_entry(b, made_for, method)
    if fresh is not None:
        write_entry(path, fresh)
    b.compile_cache = status
    b.cacheable = fresh is not None
    return b
