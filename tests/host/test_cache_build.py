"""`futextrace cache build` against this kernel: after it, every program the
commands ask for is a cache hit at its first start; an entry is never used for
other options or another kernel (loading/progcache.py's recorded `built_for`).

Every test has its own empty $FUTEXTRACE_CACHE. The hits are what each real
`record`/`explain` run's recording says; the kernel a rebuilt entry claims is
compared with os.uname() and the BTF file itself.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import pytest

from tests.helpers.host import cli, needs_bpf, needs_private_hash, one_line_error

pytestmark = [pytest.mark.root, needs_bpf, needs_private_hash]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A cache filled by `cache build`, and the build's output."""
    cache = tmp_path_factory.mktemp("cache")
    res = cli("cache", "build", env={"FUTEXTRACE_CACHE": str(cache)}, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    return cache, res.stdout


def variant_lines(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith(("fentry: ", "kprobe: ", "tracepoint: "))
            and "skipped" not in ln]


def test_build_says_what_it_built_and_lists_it(built):
    cache, out = built
    lines = variant_lines(out)
    assert lines and all(" built (" in ln and ln.endswith(" s)") for ln in lines), out
    # At least the tracepoint method's 7 filter shapes x call sites on/off x --exact-prctl on/off.
    assert sum(ln.startswith("tracepoint: ") for ln in lines) == 28
    assert len(list((cache / "prog").glob("*.json"))) == len(lines)
    listed = cli("cache", "list", env={"FUTEXTRACE_CACHE": str(cache)})
    rows = listed.stdout.splitlines()[1:]
    assert len(rows) == len(lines) and all(os.uname().release in r and "this kernel" in r for r in rows)


def own_cgroup() -> str:
    """This process's cgroup v2 directory: its "0::" path under the cgroup2
    mount (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host)."""
    mount = next((ln.split()[1] for ln in open("/proc/self/mounts") if ln.split()[2] == "cgroup2"), None)
    if mount is None:
        pytest.skip("no cgroup v2 mount")
    line = next(ln for ln in open("/proc/self/cgroup") if ln.startswith("0::"))
    return mount.rstrip("/") + line[3:].strip()


RUNS = {"everything": [], "--comm": ["--comm", "sleep"], "--exact-prctl": ["--exact-prctl"],
        "--no-call-sites": ["--no-call-sites"], "--cgroup": ["--cgroup", "CGROUP"], "-p": ["-p", "PID"],
        "--tid": ["--tid", "PID"], "-p --comm": ["-p", "PID", "--comm", "sleep"]}


@pytest.mark.parametrize("name", list(RUNS))
def test_every_record_run_hits_after_the_build(built, tmp_path, sleeper, name):
    cache, _ = built
    args = [{"PID": str(sleeper), "CGROUP": own_cgroup()}.get(a, a) for a in RUNS[name]]
    out = tmp_path / "rec.json"
    res = cli("record", "-q", "-d", "0.3", "--json", out, *args, env={"FUTEXTRACE_CACHE": str(cache)})
    assert res.returncode == 0, res.stderr
    assert json.loads(out.read_text())["compile_cache"] == "hit"


def test_explain_hits_after_the_build(built, tmp_path, sleeper):
    cache, _ = built
    out = tmp_path / "e.json"
    res = cli("explain", "-q", "-p", sleeper, "-d", "0.3", "--json", out, env={"FUTEXTRACE_CACHE": str(cache)})
    assert res.returncode == 0, res.stderr
    assert json.loads(out.read_text())["recording"]["compile_cache"] == "hit"


def test_the_build_leaves_record_and_serve_their_early_maps(built):
    """The first start after an image build gets the head start too: the
    build describes the default variants' big maps (loading/earlymaps.py).
    No serve runs here, so its description can only be the build's."""
    cache, _ = built
    hint = json.loads((cache / "prog" / "early-maps").read_text())
    for command in ("record", "serve"):
        names = {spec[0] for spec in hint[command]}
        assert {"futexes_index", "buckets_index", "lock_waits"} <= names, (command, hint)


def test_a_second_build_compiles_nothing(built):
    cache, _ = built
    res = cli("cache", "build", env={"FUTEXTRACE_CACHE": str(cache)})
    lines = variant_lines(res.stdout)
    assert res.returncode == 0 and lines and all(" already cached (" in ln for ln in lines), res.stdout


def test_bad_input_is_one_line():
    one_line_error(cli("cache", "build", "--method", "nope"), 2)
    one_line_error(cli("cache", "build", user=65534), 3)
    assert "FUTEXTRACE_NO_PROG_CACHE" in one_line_error(
        cli("cache", "build", env={"FUTEXTRACE_NO_PROG_CACHE": "1"}), 3)


# --- the entries themselves: never for other options, never for another kernel -----
@pytest.fixture
def compile_into(tmp_path, monkeypatch, kernel_model):
    """compile_program (loading and attaching nothing) for the tracepoint text with
    the given flags, into an empty cache; returns the compile_cache it says."""
    from futextrace.kernel.headers import bcc_environment
    from futextrace.kernel.layout import header_text
    from futextrace.loading.loader import source_for
    from futextrace.loading.progcache import compile_program
    bcc_environment()
    monkeypatch.setenv("FUTEXTRACE_CACHE", str(tmp_path))
    monkeypatch.delenv("FUTEXTRACE_NO_PROG_CACHE", raising=False)

    def compile_once(flags):
        b = compile_program(source_for("tracepoint"), flags, header_text(), "tracepoint", attach=False)
        b.cleanup()
        return b.compile_cache
    return compile_once


@pytest.fixture
def flags(kernel_model):
    from futextrace.loading.loader import start_flags
    return start_flags(kernel_model, "tracepoint")


def entry_files(tmp_path) -> dict:
    return {p: json.loads(p.read_text()) for p in (tmp_path / "prog").glob("*.json")}


def test_another_option_is_another_entry(compile_into, flags, tmp_path):
    assert compile_into(flags) == "miss"
    assert compile_into(flags + ["-DFILTER_TID"]) == "miss"     # not the unfiltered program
    assert len(entry_files(tmp_path)) == 2
    assert compile_into(flags) == "hit" and compile_into(flags + ["-DFILTER_TID"]) == "hit"


def test_a_kernel_whose_offsets_differ_is_another_entry(compile_into, flags, tmp_path, kernel_model):
    from futextrace.loading.loader import start_flags
    off = kernel_model.offsets["task_struct.mm"]
    moved = dataclasses.replace(kernel_model, offsets={**kernel_model.offsets, "task_struct.mm": off + 8})
    assert compile_into(flags) == "miss"
    assert compile_into(start_flags(moved, "tracepoint")) == "miss"
    assert len(entry_files(tmp_path)) == 2


def btf_sha() -> str:
    with open("/sys/kernel/btf/vmlinux", "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.mark.parametrize("field, claim", [("release", "5.10.0-another-kernel"), ("btf", "0" * 32)])
def test_an_entry_claiming_another_kernel_is_refused_and_rebuilt(compile_into, flags, tmp_path, field, claim):
    assert compile_into(flags) == "miss"
    ((path, entry),) = entry_files(tmp_path).items()
    entry["built_for"][field] = claim
    path.write_text(json.dumps(entry))
    assert compile_into(flags) == "mismatch"       # not loaded: compiled in full
    rebuilt = json.loads(path.read_text())["built_for"]
    assert rebuilt["release"] == os.uname().release and btf_sha().startswith(rebuilt["btf"])
    assert compile_into(flags) == "hit"


def test_an_entry_renamed_to_another_programs_key_is_refused(compile_into, flags, tmp_path):
    from futextrace.kernel.layout import header_text
    from futextrace.loading.loader import source_for
    from futextrace.loading.progcache import cache_key
    assert compile_into(flags) == "miss"
    ((path, _),) = entry_files(tmp_path).items()
    other = flags + ["-DFILTER_TID"]
    path.rename(path.with_name(cache_key(source_for("tracepoint"), other, header_text()) + ".json"))
    assert compile_into(other) == "mismatch"       # the unfiltered program is not loaded for --tid
    assert compile_into(other) == "hit"
