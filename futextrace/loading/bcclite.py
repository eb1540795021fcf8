"""BCC's Python package without its compiler: a warm start maps no LLVM.

`import bcc` loads libbcc.so, which links libLLVM and libclang (81 MiB of
pages once a compile touched them, 61 MiB for the import alone). What a warm
start needs from BCC is its table classes, its attach and ring-buffer code
and the map and program system calls, and BCC ships those without a compiler:
libbcc_bpf.so. This module runs BCC's own Python sources (bcc/libbcc.py and
the package they import) over libbcc_bpf.so, privately: the package it
builds is never `sys.modules["bcc"]`, so an `import bcc` elsewhere (a cold
compile, doctor) still gets the real one, and each keeps its own library.

What libbcc_bpf.so lacks is the compiled module BCC's classes ask about
(`lib.bpf_table_type_id(module, id)` and the like). Those calls are answered
from a program-cache entry's description of its maps (CachedModule), whose
maps this process creates itself with bpf(2); any other call into the
missing part raises NeedsCompiler: while the replay is built, the start then
compiles instead; later, the error names the call.
"""
from __future__ import annotations

import ctypes as ct
import hashlib
import importlib.util
import marshal
import os
import sys
import types
import warnings
from pathlib import Path

from futextrace.loading import bpfsys, cachefiles, earlymaps, earlyprograms

LIBRARY = "libbcc_bpf.so.0"
# The line of bcc/libbcc.py that loads the compiler's library (BCC 0.1x to 0.3x).
LOAD_LINE = 'ct.CDLL("libbcc.so.0", use_errno=True)'
CODE_MAX_BYTES = 4 << 20       # BCC's __init__.py compiles to ~90 KB


class NeedsCompiler(Exception):
    """A call only BCC's compiled module (libbcc.so) can answer."""


class Unavailable(Exception):
    """BCC's package cannot be run without its compiler here."""


class CachedModule:
    """A compiled module's answers, from a cache entry: the maps it declares,
    created here with bpf(2) in the entry's order, and its functions' names."""

    def __init__(self, entry: dict):
        self.tables = entry["tables"]          # [{name, type, max_entries, flags, key_desc, ...}]
        self.by_name = {t["name"].encode(): i for i, t in enumerate(self.tables)}
        self.functions = [name.encode() for name in entry["functions"]]
        self.license = entry["license"].encode()
        self.kern_version = entry["kern_version"]
        self.fds: list[int] = []
        self.early_programs: dict[tuple[str, int], int] = {}   # (function, BTF id) -> fd, loaded early
        # The whole entry, its tp_btf programs loaded, where the command line
        # began replaying this very entry before its imports (earlyprograms).
        early_entry = earlyprograms.claim(entry)
        if early_entry is not None:
            self.fds, self.early_programs, self.early_maps = early_entry
            return
        # The big ones the command line began creating before its imports
        # (earlymaps); the rest at once, a thread each up to the CPU count
        # (the system call lets go of the GIL).
        early = {i: e for i, e in enumerate(map(earlymaps.claim, self.tables)) if e is not None}
        self.early_maps = 0     # maps taken from earlymaps, made in time
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
            made = {i: pool.submit(_create, t) for i, t in enumerate(self.tables) if i not in early}
        failed = None
        for i, t in enumerate(self.tables):
            try:
                fd = made[i].result() if i in made else early[i].result()
                self.early_maps += i in early and fd is not None
                self.fds.append(fd if fd is not None else _create(t))   # early failed: the reason
            except OSError as e:
                failed = failed or e
        if failed:
            self.destroy()
            raise failed

    def destroy(self) -> None:
        while self.early_programs:
            os.close(self.early_programs.popitem()[1])
        while self.fds:
            os.close(self.fds.pop())

    def table(self, name: bytes) -> dict | None:
        i = self.by_name.get(name)
        return None if i is None else self.tables[i]


def _create(table: dict) -> int:
    return bpfsys.create_map(table["type"], table["key_size"], table["leaf_size"],
                             table["max_entries"], table["flags"], table["name"])


_modules: dict[int, CachedModule] = {}


def register(module: CachedModule) -> int:
    """A handle for `module` that BCC's classes pass back as `bpf.module`."""
    handle = id(module)
    _modules[handle] = module
    return handle


def _module(handle) -> CachedModule:
    module = _modules.get(handle)
    if module is None:
        raise NeedsCompiler("a BCC module this process did not build from the cache")
    return module


def early_maps(handle) -> int:
    """How many of its maps a module register() handed out took from earlymaps."""
    return _module(handle).early_maps


def take_early_program(handle, function: str, btf_id: int) -> int | None:
    """The fd of `function` loaded for `btf_id` before the imports
    (earlyprograms), now the caller's; or None."""
    return _module(handle).early_programs.pop((function, btf_id), None)


def fds_by_name(handle) -> dict[str, int]:
    """Map name -> fd of a module register() handed out."""
    module = _module(handle)
    return {t["name"]: fd for t, fd in zip(module.tables, module.fds)}


def _destroy(handle) -> None:
    module = _modules.pop(handle, None)
    if module is not None:
        module.destroy()


# The compiled-module calls BCC's Python classes make, answered from CachedModule.
ANSWERS = {
    "bpf_module_destroy": _destroy,
    "bpf_module_license": lambda m: _module(m).license,
    "bpf_module_kern_version": lambda m: _module(m).kern_version,
    "bpf_num_functions": lambda m: len(_module(m).functions),
    "bpf_function_name": lambda m, i: _module(m).functions[i],
    "bpf_num_tables": lambda m: len(_module(m).tables),
    "bpf_table_name": lambda m, i: _module(m).tables[i]["name"].encode(),
    "bpf_table_id": lambda m, name: _module(m).by_name.get(name, -1),
    "bpf_table_fd": lambda m, name: (lambda i: -1 if i is None else _module(m).fds[i])(
        _module(m).by_name.get(name)),
    "bpf_table_fd_id": lambda m, i: _module(m).fds[i],
    "bpf_table_type_id": lambda m, i: _module(m).tables[i]["type"],
    "bpf_table_max_entries_id": lambda m, i: _module(m).tables[i]["max_entries"],
    "bpf_table_flags_id": lambda m, i: _module(m).tables[i]["flags"],
    "bpf_table_key_desc": lambda m, name: ((_module(m).table(name) or {}).get("key_desc", "")).encode(),
    "bpf_table_leaf_desc": lambda m, name: ((_module(m).table(name) or {}).get("leaf_desc", "")).encode(),
    "bpf_perf_event_fields": lambda m, name: len((_module(m).table(name) or {}).get("fields", [])),
    "bpf_perf_event_field": lambda m, name, i: _module(m).table(name)["fields"][i].encode(),
}


class _Missing:
    """A libbcc.so function libbcc_bpf.so does not have: BCC's sources may set
    its argtypes; a call is answered from CachedModule or refused."""

    def __init__(self, name: str):
        self.name = name
        self.argtypes = self.restype = None

    def __call__(self, *args):
        answer = ANSWERS.get(self.name)
        if answer is None:
            raise NeedsCompiler(f"{self.name} needs BCC's compiler (libbcc.so)")
        return answer(*args)


class _Library:
    """libbcc_bpf.so, with the functions only libbcc.so has stood in for (_Missing)."""

    def __init__(self, cdll):
        self._cdll = cdll

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            fn = getattr(self._cdll, name)
        except AttributeError:
            fn = _Missing(name)
        setattr(self, name, fn)     # kept: BCC sets argtypes once and calls many times
        return fn


_package: types.ModuleType | None = None


def _run(name: str, path: Path, namespace: dict | None = None, source: str | None = None) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = str(path)
    module.__package__ = "bcc"
    if namespace:
        module.__dict__.update(namespace)
    sys.modules[name] = module
    exec(_code(source if source is not None else path.read_text(), path), module.__dict__)
    return module


def _code(source: str, path: Path):
    """BCC's source compiled here (it runs under our own module objects, so
    Python keeps no .pyc of it), its own SyntaxWarnings (escapes in regexes)
    not ours to print. The compiled code is kept in the program cache, keyed
    by the source (as we change it) and the interpreter: compiling
    bcc/__init__.py took 12 of a warm start's ~300 ms, loading it 0.4."""
    use_cache = not os.environ.get("FUTEXTRACE_NO_PROG_CACHE")
    key = hashlib.sha256("\0".join((sys.version, str(path), source)).encode()).hexdigest()[:32]
    kept = cachefiles.prog_cache_dir() / f"bcc-code-{key}.marshal"
    data = cachefiles.read_trusted(kept, CODE_MAX_BYTES) if use_cache else None
    if data is not None:
        try:
            return marshal.loads(data)
        except (EOFError, ValueError, TypeError):
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        code = compile(source, str(path), "exec")
    if use_cache:
        cachefiles.write_atomic(kept, marshal.dumps(code))
    return code


def _build() -> types.ModuleType:
    spec = importlib.util.find_spec("bcc")
    if spec is None or not spec.submodule_search_locations:
        raise Unavailable("BCC's Python package (python3-bpfcc) is not installed")
    where = Path(list(spec.submodule_search_locations)[0])
    source = (where / "libbcc.py").read_text()
    if LOAD_LINE not in source:
        raise Unavailable(f"this BCC's libbcc.py does not load its library as {LOAD_LINE}")
    try:
        library = _Library(ct.CDLL(LIBRARY, use_errno=True))
    except OSError as e:
        raise Unavailable(f"{LIBRARY} cannot be loaded: {e}")
    # BCC's modules import each other as `bcc.*`: they run under those names,
    # then the names go back to whatever held them (nothing, or the real BCC).
    held = {k: sys.modules.pop(k) for k in list(sys.modules) if k == "bcc" or k.startswith("bcc.")}
    try:
        package = types.ModuleType("bcc")
        package.__path__ = [str(where)]
        package.__file__ = str(where / "__init__.py")
        package.__package__ = "bcc"
        sys.modules["bcc"] = package
        _run("bcc.libbcc", where / "libbcc.py", {"_futextrace_library": library},
             source.replace(LOAD_LINE, "_futextrace_library", 1))
        exec(_code((where / "__init__.py").read_text(), where / "__init__.py"), package.__dict__)
        return package
    except Exception as e:  # noqa: BLE001 - BCC's own sources, any version
        raise Unavailable(f"BCC's package did not run without its compiler: {e}")
    finally:
        for k in [k for k in sys.modules if k == "bcc" or k.startswith("bcc.")]:
            del sys.modules[k]
        sys.modules.update(held)


def bcc() -> types.ModuleType:
    """BCC's package over libbcc_bpf.so (built once per process); Unavailable
    where it cannot be (then the real package compiles)."""
    global _package
    if _package is None:
        _package = _build()
    return _package


def lib():
    """The library for calls on map and program fds: libbcc_bpf.so through
    BCC's own declarations, or the real BCC's where this one is unavailable."""
    try:
        return bcc().lib
    except Unavailable:
        from bcc import lib as real
        return real
