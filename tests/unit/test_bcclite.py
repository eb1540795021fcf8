"""BCC's package over its compiler-free library (futextrace/loading/bcclite.py),
without root: it runs, maps no compiler, stays out of sys.modules["bcc"], and
refuses the compiled module's calls it cannot answer. Each check runs in a
fresh interpreter, whose own /proc/self/maps says what it mapped; the cache
of BCC's compiled sources is checked in this one."""
from __future__ import annotations

import marshal
import subprocess
import sys
import textwrap

import pytest

from futextrace.loading import bcclite

pytest.importorskip("bcc")


def run(code: str) -> str:
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_the_package_runs_without_mapping_the_compiler():
    out = run("""
        import sys
        from futextrace.loading import bcclite
        pkg = bcclite.bcc()
        assert pkg.BPF.RAW_TRACEPOINT == 17 and hasattr(pkg, "table")
        assert "bcc" not in sys.modules and not any(k.startswith("bcc.") for k in sys.modules)
        maps = open("/proc/self/maps").read()
        print("libbcc_bpf" in maps, "libLLVM" in maps or "libclang" in maps or "libbcc.so" in maps)
    """)
    assert out == "True False"


def test_the_real_package_still_imports_beside_it():
    out = run("""
        from futextrace.loading import bcclite
        lite = bcclite.bcc()
        import bcc
        print(bcc is not lite, bcc.lib is not lite.lib, "libLLVM" in open("/proc/self/maps").read())
    """)
    assert out == "True True True"


def test_a_compiled_modules_call_it_cannot_answer_is_refused():
    out = run("""
        from futextrace.loading import bcclite
        lib = bcclite.bcc().lib
        try:
            lib.bpf_module_create_c_from_string(b"int x;", 0, None, 0, True, None)
        except bcclite.NeedsCompiler as e:
            print("refused:", e)
        try:
            lib.bpf_table_fd(12345, b"futexes")
        except bcclite.NeedsCompiler:
            print("unknown module refused")
    """)
    assert out.splitlines() == ["refused: bpf_module_create_c_from_string needs BCC's compiler (libbcc.so)",
                                "unknown module refused"]


def test_bccs_type_descriptions_decode_as_bcc_decodes_them():
    out = run("""
        import ctypes as ct, json
        from futextrace.loading import bcclite
        desc = ["key", [["tgid", "unsigned int"], ["pad", "unsigned int"], ["uaddr", "unsigned long long"],
                        ["comm", "char", [16]]], "struct"]
        t = bcclite.bcc().BPF._decode_table_type(desc)
        print(ct.sizeof(t), [f[0] for f in t._fields_])
    """)
    assert out == "32 ['tgid', 'pad', 'uaddr', 'comm']"


def test_bccs_compiled_sources_are_kept_in_the_cache(tmp_path, monkeypatch):
    """BCC's sources bcclite runs are compiled once (marshal in the program
    cache) and read back after; a kept file others could write is not read,
    and FUTEXTRACE_NO_PROG_CACHE keeps nothing."""
    monkeypatch.setenv("FUTEXTRACE_CACHE", str(tmp_path))
    monkeypatch.delenv("FUTEXTRACE_NO_PROG_CACHE", raising=False)
    source, where = "x = 6 * 7\n", tmp_path / "mod.py"
    first = bcclite._code(source, where)
    kept = list((tmp_path / "prog").glob("bcc-code-*.marshal"))
    assert len(kept) == 1
    namespace = {}
    exec(bcclite._code(source, where), namespace)
    assert namespace["x"] == 42 and first.co_filename == str(where)
    kept[0].write_bytes(marshal.dumps(compile("x = 1\n", str(where), "exec")))
    exec(bcclite._code(source, where), namespace)
    assert namespace["x"] == 1                    # read back, not compiled again
    kept[0].chmod(0o666)
    exec(bcclite._code(source, where), namespace)
    assert namespace["x"] == 42                   # not trusted: compiled
    monkeypatch.setenv("FUTEXTRACE_NO_PROG_CACHE", "1")
    kept[0].unlink()
    bcclite._code(source, where)
    assert not list((tmp_path / "prog").glob("bcc-code-*.marshal"))
