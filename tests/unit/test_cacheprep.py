"""`cache build`'s variants (record/cacheprep.py): the flags a start compiles
follow the filters' shape, never their values; every single-filter shape the
commands can ask for is built; and a kernel whose offsets differ gets other
flags, so another cache key. No BPF: the kernel model is a kept BTF digest
(tests/data/btf) with a made-up topology and global hash."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from futextrace.kernel import model as kmodel
from futextrace.kernel import topology
from futextrace.loading import progcache
from futextrace.loading.loader import Filters, start_flags
from futextrace.record import cacheprep
from futextrace.record.session import RecordOptions, filters_for, program_args

DIGEST = Path(__file__).resolve().parents[1] / "data" / "btf" / "host-6.18.44-fc-v1045.json"


@pytest.fixture(scope="module")
def model():
    m = kmodel.load(str(DIGEST), live=False)
    return dataclasses.replace(m, global_hash=kmodel.GlobalHash(256, 8, 1, "test"),
                               topology=topology.Topology([0, 1], 2, {0: 0, 1: 0}, [0], [0]))


# One filter given with two different values: the same program.
SAME_SHAPE = [(Filters(pids=[1]), Filters(pids=[4242, 77])),
              (Filters(tids=[1]), Filters(tids=[9, 10, 11])),
              (Filters(comms=["a"]), Filters(comms=["postgres", "mysqld"])),
              (Filters(cgroup_ids=[1]), Filters(cgroup_ids=[123456789])),
              (Filters(tgid_map=True, exec_comms=["a"]), Filters(tgid_map=True, exec_comms=["b", "c"]))]


@pytest.mark.parametrize("one, other", SAME_SHAPE)
def test_filter_values_are_not_compiled_in(model, one, other):
    assert start_flags(model, "tracepoint", one) == start_flags(model, "tracepoint", other)
    assert start_flags(model, "tracepoint", one) != start_flags(model, "tracepoint", Filters())


@pytest.fixture(scope="module")
def built(model):
    """method -> the variants `cache build` compiles (kprobe's flags read kallsyms: once)."""
    return {m: cacheprep.variants(model, m) for m in ("tracepoint", "kprobe", "fentry")}


def flags_of(model, opts: RecordOptions, as_tgids: bool = False, method: str = "tracepoint") -> tuple:
    """What a session with these options compiles first (session.py's own steps)."""
    ids = tuple(range(100, 100 + len(opts.cgroups)))
    return tuple(start_flags(model, method, **program_args(opts, filters_for(opts, ids, as_tgids))))


# The options the commands build, as each command builds them (other values).
COMMANDS = {
    "record": RecordOptions(call_sites=True),
    "record -p": RecordOptions(pids=[31337, 2], call_sites=True),
    "record --tid": RecordOptions(tids=[5], call_sites=True),
    "record --cgroup": RecordOptions(cgroups=["/sys/fs/cgroup/a"], call_sites=True),
    "record --comm in BPF": RecordOptions(comms=["nginx"], call_sites=True),
    "record -p --comm": RecordOptions(pids=[8], comms=["nginx"], call_sites=True),
    "record --exact-prctl --no-call-sites": RecordOptions(exact_prctl=True),
    "explain -p": RecordOptions(pids=[77], exact_prctl=True, call_sites=True),
    "serve": RecordOptions(),
    "serve --cgroup": RecordOptions(cgroups=["/x"]),
    "snapshot": RecordOptions(pids=[3], method="auto"),
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
@pytest.mark.parametrize("method", ["tracepoint", "kprobe", "fentry"])
def test_every_command_shape_is_built(model, built, name, method):
    flags = {v.flags for v in built[method]}
    assert flags_of(model, COMMANDS[name], method=method) in flags
    comm_watched = RecordOptions(comms=["x", "y"], call_sites=True)   # the proc connector's shape
    assert flags_of(model, comm_watched, as_tgids=True, method=method) in flags


def test_combined_filters_are_left_to_their_first_start(model, built):
    """Only single filters (and -p with --comm) are built: a combination
    compiles at its first start, then is cached like any other."""
    flags = {v.flags for v in built["tracepoint"]}
    assert flags_of(model, RecordOptions(tids=[1], cgroups=["/a"], call_sites=True)) not in flags


def test_exact_prctl_makes_a_variant_of_the_tracepoint_method_only(built):
    # 7 filter shapes x call sites on/off, x --exact-prctl on/off for the tracepoint method.
    assert {m: len(v) for m, v in built.items()} == {"tracepoint": 28, "kprobe": 14, "fentry": 14}
    assert all(len(v.shapes) == 2 for v in built["kprobe"])   # with and without --exact-prctl


def test_a_kernel_whose_offsets_differ_gets_another_key(model):
    moved = dataclasses.replace(model, offsets={**model.offsets,
                                                "task_struct.mm": model.offsets["task_struct.mm"] + 8})
    flags, moved_flags = start_flags(model, "tracepoint"), start_flags(moved, "tracepoint")
    assert f"-DOFF_TASK_MM={model.offsets['task_struct.mm'] + 8}" in moved_flags
    assert progcache.cache_key("t", flags, "h") != progcache.cache_key("t", moved_flags, "h")
