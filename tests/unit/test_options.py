"""What to trace is built once and only read: the options (record/session.py
RecordOptions), the programs' filters (loading/loader.py Filters, made in one
step by filters_for), and the probe list, derived from the compiled flags
(loader.task_event_probes) with the task memo's rule stated once (loader.task_memo)."""
from __future__ import annotations

import dataclasses

import pytest

from futextrace.loading.loader import Filters, filter_cflags, task_event_probes, task_memo
from futextrace.record.session import RecordOptions, filters_for

EXEC = "raw_tracepoint:sched_process_exec"


def test_options_and_filters_are_read_only():
    opts = RecordOptions(pids=[1, 2], comms=["a"])
    assert opts.pids == (1, 2) and opts.comms == ("a",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.pids = (3,)
    f = Filters(pids=[1], exec_comms=["x"])
    assert f.pids == (1,) and f.exec_comms == ("x",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.comms = ("y",)
    # A launched command's PID goes into a copy (recorder.record_command).
    assert dataclasses.replace(opts, pids=(9, *opts.pids)).pids == (9, 1, 2) and opts.pids == (1, 2)


def test_filters_for_names_kept_as_tgids_or_compared_in_bpf():
    opts = RecordOptions(pids=[1], tids=[2], comms=["mysqld"])
    watched = filters_for(opts, (7,), names_as_tgids=True)
    assert (watched.comms, watched.tgid_map, watched.exec_comms) == ((), True, ("mysqld",))
    assert (watched.pids, watched.tids, watched.cgroup_ids) == ((1,), (2,), (7,))
    compared = filters_for(opts, (), names_as_tgids=False)
    assert (compared.comms, compared.tgid_map, compared.exec_comms) == (("mysqld",), False, ())


CASES = [Filters(), Filters(pids=[1]), Filters(tids=[1]), Filters(comms=["x"]), Filters(cgroup_ids=[1]),
         Filters(tgid_map=True), Filters(tgid_map=True, exec_comms=["x"]),
         Filters(pids=[1], tgid_map=True, exec_comms=["x"])]


@pytest.mark.parametrize("f", CASES)
def test_memo_rule_and_probe_list_as_before(f):
    """The tracepoint method's list as the loader wrote it by hand before: the exec
    hook for --comm's exec rule or the memo, which a name, cgroup or live tgid
    filter rules out; no memo for the other methods."""
    memo = not (f.comms or f.cgroup_ids or f.tgid_map)
    assert task_memo("tracepoint", f) == memo
    assert not task_memo("kprobe", f) and not task_memo("fentry", f)
    comm_at_exec = f.tgid_map and bool(f.exec_comms)
    probes = task_event_probes(filter_cflags("tracepoint", f))
    assert probes == ["raw_tracepoint:task_newtask", *([EXEC] if comm_at_exec or memo else []),
                      "raw_tracepoint:sched_process_exit"]
    for method in ("kprobe", "fentry"):
        assert (EXEC in task_event_probes(filter_cflags(method, f))) == comm_at_exec
