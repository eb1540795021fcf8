"""Skip BCC's compiler when the same program was compiled before.

BCC compiles a program's C text with clang and LLVM on every run: 1.1 of the
1.5 s `record` takes to attach on a 2-CPU machine, over 30 s in a QEMU/TCG
guest, and 81 MiB of compiler pages that stay mapped. What the compiler
produces is BPF instructions per function, and they name each map by the
file descriptor BCC created for it (ld_imm64 with src_reg
BPF_PSEUDO_MAP_FD). So the first compile's instructions are kept under
$FUTEXTRACE_CACHE/prog with each map reference recorded by map name and
every map described (type, sizes, flags, BCC's type descriptions), keyed by
everything that decides them: the text, the shared header, every -D flag
(the kernel's offsets among them), the kernel, BCC's library and the header
tree.

A later run needs no compiler at all (CachedBPF): the maps are created from
their description with bpf(2), each cached map reference is patched with the
new map's fd, and the instructions are loaded with bpf(2); BCC's own table,
attach and ring-buffer code runs over its compiler-free library
(loading/bcclite.py), so LLVM is never mapped. The kernel's verifier checks
the instructions as it checks any load. Where that cannot be done (BCC's
package will not run without its compiler, a map cannot be created, a
program is refused), the text is compiled in full, as without a cache.
FUTEXTRACE_NO_PROG_CACHE=1 turns the cache off.

Each entry also records what it was built for (`built_for`: kernel release,
a digest of the kernel's BTF, BCC's library, the text and every flag) and a
read checks it against this start's, refusing (and compiling in full) on any
difference: the key is only the file's name, a claim. A file copied in from
another machine or image, renamed, or keyed by an older futextrace that left
something out would otherwise load on its name alone.
"""
from __future__ import annotations

import atexit
import ctypes as ct
import functools
import hashlib
import json
import os
import struct
from pathlib import Path

from futextrace.kernel import modelcache
from futextrace.kernel.model import VMLINUX_BTF
from futextrace.loading import bcclite, bpfsys, cachefiles, earlymaps, earlyprograms

FORMAT = 3                   # 2: built_for recorded and checked; 3: maps described in full (sizes)
LD_IMM64 = 0x18              # BPF_LD | BPF_IMM | BPF_DW: the only insn that carries a map
PSEUDO_MAP_FD = 1            # its src_reg when imm is a map fd
MAX_ENTRY_BYTES = 16 << 20   # a cache file larger than this is not ours
# Function-name prefixes BCC attaches by itself inside BPF() (its _trace_autoload).
AUTOLOAD = ("kprobe__", "kretprobe__", "tracepoint__", "raw_tracepoint__")
NOT_CACHED = ("kfunc__", "kretfunc__", "lsm__")   # attach targets BCC finds from its own compile


def cache_dir() -> Path:
    return cachefiles.prog_cache_dir()


@functools.lru_cache(maxsize=None)
def _bcc_library() -> str:
    """Path, size and mtime of BCC's libbcc.so, found beside the compiler-free
    libbcc_bpf.so (one package ships both) so that a warm start, which never
    loads libbcc.so, keys its entry as the compile that wrote it: a new BCC, a
    new key."""
    try:
        ct.CDLL(bcclite.LIBRARY)      # mapped by the replay anyway; 0.4 MiB, no compiler
        with open("/proc/self/maps") as f:
            path = next((ln.split()[-1] for ln in f if bcclite.LIBRARY.split(".")[0] + ".so" in ln), "")
        compiler = os.path.realpath(os.path.join(os.path.dirname(path), "libbcc.so.0"))
        st = os.stat(compiler)
        return f"{compiler}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
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
    for name, restype in (("bpf_table_name", ct.c_char_p), ("bpf_table_key_size_id", ct.c_size_t),
                          ("bpf_table_leaf_size_id", ct.c_size_t)):
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = [ct.c_void_p, ct.c_ulonglong]
    return lib


def tables(module) -> list[dict]:
    """Every map a compiled module declares, in its order, as CachedBPF
    creates it and BCC's table classes describe it: type, max entries, flags,
    key and value sizes, key and value type descriptions, ring/perf buffer
    record fields."""
    lib = _lib()
    out = []
    for i in range(lib.bpf_num_tables(module)):
        name = lib.bpf_table_name(module, i)
        out.append({"name": name.decode(), "type": lib.bpf_table_type_id(module, i),
                    "max_entries": lib.bpf_table_max_entries_id(module, i),
                    "flags": lib.bpf_table_flags_id(module, i),
                    "key_size": lib.bpf_table_key_size_id(module, i),
                    "leaf_size": lib.bpf_table_leaf_size_id(module, i),
                    "key_desc": (lib.bpf_table_key_desc(module, name) or b"").decode(),
                    "leaf_desc": (lib.bpf_table_leaf_desc(module, name) or b"").decode(),
                    "fields": [lib.bpf_perf_event_field(module, name, k).decode()
                               for k in range(lib.bpf_perf_event_fields(module, name))]})
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
    fd_names = {lib.bpf_table_fd(bpf.module, t["name"].encode()): t["name"] for t in described}
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
    """A cache entry this user wrote (cachefiles.read_trusted), or None."""
    data = cachefiles.read_trusted(path, MAX_ENTRY_BYTES)
    try:
        entry = json.loads(data) if data is not None else None
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
    cachefiles.write_atomic(path, json.dumps(entry).encode())


def _compile_only_class(BPF):
    class CompileOnlyBPF(BPF):
        """BCC's object without its autoload: `cache build` loads and attaches nothing."""

        def _trace_autoload(self):
            pass

    return CompileOnlyBPF


@functools.lru_cache(maxsize=None)
def _cached_class(BPF):
    class CachedBPF(BPF):
        """BCC's BPF object for a cache entry, with no compiler: its maps
        created from the entry's description (bcclite.CachedModule), its
        functions the entry's instructions, each map reference patched with
        the new map's fd. BCC's own code does the rest: tables, attach,
        autoload, ring buffers, cleanup."""

        def __init__(self, entry: dict, attach: bool = True):
            # What BPF.__init__ sets up, without its compile.
            for name in ("kprobe_fds", "uprobe_fds", "tracepoint_fds", "raw_tracepoint_fds",
                         "kfunc_entry_fds", "kfunc_exit_fds", "lsm_fds", "perf_buffers",
                         "open_perf_events", "funcs", "tables"):
                setattr(self, name, {})
            self._ringbuf_manager, self.tracefile, self.debug, self.module = None, None, 0, None
            self._entry = entry
            atexit.register(self.cleanup)
            self.module = bcclite.register(bcclite.CachedModule(entry))
            if attach:
                self._trace_autoload()

        def _insns(self, func_name: bytes) -> bytes:
            fn = self._entry["functions"].get(func_name.decode())
            if fn is None:
                raise Exception(f"Unknown program {func_name}")   # as BCC says it
            return bpfsys.with_map_fds(fn, bcclite.fds_by_name(self.module))

        def dump_func(self, func_name):
            return self._insns(func_name if isinstance(func_name, bytes) else func_name.encode())

        def load_func(self, func_name, prog_type, device=None, attach_type=-1):
            func_name = func_name if isinstance(func_name, bytes) else func_name.encode()
            if func_name in self.funcs:
                return self.funcs[func_name]
            try:
                fd = bpfsys.load_program(self._insns(func_name), func_name.decode(), prog_type,
                                         self._entry["license"], self._entry["kern_version"])
            except OSError as e:     # as BCC says it, with the verifier's reason
                raise Exception(f"Failed to load BPF program {func_name}: {e.strerror}"
                                + (f": {e.verifier_says}" if getattr(e, "verifier_says", "") else ""))
            fn = BPF.Function(self, func_name, fd)
            self.funcs[func_name] = fn
            return fn

    return CachedBPF


def _replay(entry: dict, attach: bool):
    """The entry as a BPF object made without BCC's compiler, or None where
    it cannot be (then the text is compiled): BCC's package will not run
    over its compiler-free library, a map cannot be created, or a program
    autoloaded with the maps is refused."""
    try:
        cls = _cached_class(bcclite.bcc().BPF)
    except bcclite.Unavailable:
        return None
    b = cls.__new__(cls)
    try:
        b.__init__(entry, attach)
    except Exception:  # noqa: BLE001 - BCC raises bare Exceptions; bpf(2) OSError
        b.cleanup()
        return None
    return b


def _compile(text: str, cflags: list[str], attach: bool):
    """BCC's BPF object for `text`, compiled by clang and LLVM (libbcc.so)."""
    from bcc import BPF
    return (BPF if attach else _compile_only_class(BPF))(text=text.encode(), cflags=cflags)


def compile_program(text: str, cflags: list[str], header: str, method: str = "", attach: bool = True):
    """BCC's BPF object for `text`: from the cache, with no compiler, where it
    has this program, else compiled (and cached). Its `compile_cache`
    attribute says which: "hit", "miss" (compiled, now cached), "stale" (the
    entry could not be loaded without the compiler: compiled), "mismatch"
    (the entry was built for another kernel, BCC, text or flags: compiled),
    "off"; its `early_maps` how many of its maps it took from those the
    command line began creating before its imports (loading/earlymaps.py),
    its `map_tables` the entry's description of its maps (None: not cached).
    `attach=False` (cache build): nothing is attached or loaded, not even
    BCC's autoloaded functions."""
    if os.environ.get("FUTEXTRACE_NO_PROG_CACHE"):
        b = _compile(text, cflags, attach)
        b.compile_cache, b.cacheable, b.early_maps, b.map_tables = "off", False, 0, None
        b.cache_entry_name = None
        return b
    made_for = built_for(text, cflags, header)      # read once: the key and the check are both of it
    path = cache_dir() / f"{key_of(made_for)}.json"
    entry = read_entry(path)
    status = "miss"
    if entry is not None and mismatch(entry, made_for):
        entry, status = None, "mismatch"
    b = _replay(entry, attach) if entry is not None else None
    # What the replay did not take; a compile creates its own. The programs
    # first: their thread may still be waiting on an early map.
    earlyprograms.close_untaken()
    earlymaps.close_untaken()
    if b is not None:
        b.compile_cache, b.cacheable, b.cache_entry_name = "hit", True, path.name
        b.early_maps, b.map_tables = bcclite.early_maps(b.module), entry["tables"]
        earlymaps.remember(entry["tables"])
        return b
    if entry is not None:
        status = "stale"
    b = _compile(text, cflags, attach)
    fresh = cache_entry(b, made_for, method)
    if fresh is not None:
        write_entry(path, fresh)
        earlymaps.remember(fresh["tables"])
    b.compile_cache, b.early_maps = status, 0
    b.cache_entry_name = path.name if fresh is not None else None
    b.map_tables = fresh["tables"] if fresh is not None else None
    b.cacheable = fresh is not None
    return b
