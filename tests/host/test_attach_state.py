"""`record -p` and `explain -p` start from each process's hash at attach
(issue 12), against the real kernel.

Every process is started BEFORE the tracer, one per case (tests/helpers/holders.py),
and reports its own PR_FUTEX_HASH_GET_SLOTS and thread count. The what-if table
is checked against the tests' own jhash2 (fidelity_ref.py) over the addresses
the process itself says it used. Nothing expected comes from futextrace's formulas.
"""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import fidelity_ref
from tests.helpers.holders import ask, one_of_each, start
from tests.helpers.host import FT

pytestmark = pytest.mark.root
CLI_TIMEOUT_S = 600      # under QEMU/TCG (tests/vm) one command takes minutes


@pytest.fixture(scope="module")
def procs():
    with one_of_each() as ps:
        yield ps


def traced(cmd: str, procs, *args, during=None) -> tuple[dict, str]:
    """Run `futextrace CMD -p PID...` with --json to a file; `during(procs)`
    once attached. Several processes share one run: under QEMU/TCG (tests/vm)
    each command costs tens of seconds."""
    procs = procs if isinstance(procs, list) else [procs]
    out = Path(f"/tmp/futextrace-attach-{procs[0].pid}-{cmd}.json")
    pids = [a for p in procs for a in ("-p", str(p.pid))]
    t = subprocess.Popen([*FT, cmd, *pids, "--json", str(out), *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if during:
            for line in iter(t.stderr.readline, ""):
                if line.startswith("Tracing"):   # attached, the attach state read
                    break
            during(procs)
        text, err = t.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        t.kill()
    assert t.returncode == 0, err
    data = json.loads(out.read_text())
    out.unlink()
    return data, text


def section(text: str, p) -> str:
    """The part of explain's text about process `p` (from its "PID n" line to the next)."""
    blocks = [b for b in text.split("\n\n") if b.startswith(f"PID {p.pid} ")]
    assert len(blocks) == 1, text
    return blocks[0]


def state_of(rec: dict, p) -> dict:
    att = rec["hash_at_attach"]
    assert att["source"] == "iterator", att["note"]
    return att["processes"][str(p.pid)]


def test_record_stores_the_state_at_attach(procs):
    rec, _ = traced("record", list(procs.values()), "-d", "1", "-q")
    for mode, p in procs.items():
        st, own = state_of(rec, p), p.own
        assert st["threads"] == own["threads"], mode
        if mode in ("custom", "auto"):
            assert (st["kind"], st["buckets"], st["mode"]) == ("private", own["slots"], mode)
        elif mode == "global":
            assert own["set"] == 0 and (st["kind"], st["mode"]) == ("global", "custom")
        else:
            assert own["slots"] == 0 and st["kind"] == "none"


@pytest.fixture(scope="module")
def watched(procs):
    """One `explain` of two custom-hash processes started before it: the
    module's custom holder starts 3 more threads, a fresh one (16 buckets)
    wakes 7 futex words, both once attached. Returns (explanation JSON, text,
    what each process said)."""
    woken = start("custom", 16)
    said = {}

    def during(ps):
        said["grown"] = ask(ps[0], "more 3")
        said["woken"] = ask(ps[1], "wake 7")["woken"]
    try:
        expl, text = traced("explain", [procs["custom"], woken], "-d", "3", during=during)
    finally:
        woken.kill()
        woken.wait()
    return expl, text, said, woken


def test_custom_hash_then_more_threads_is_not_a_new_allocation(procs, watched):
    p = procs["custom"]
    expl, full_text, said, _ = watched
    grown, text = said["grown"], section(full_text, p)
    slots = p.own["slots"]
    assert grown["slots"] == slots and grown["threads"] == p.own["threads"] + 3   # the process's own view
    rec = expl["recording"]
    assert [r for r in rec["resizes"] if r["pid"] == p.pid] == []
    news = [t for t in rec["threads"] if t["pid"] == p.pid and t["event"] == "new"]
    assert len(news) == 3
    assert f"now {slots} buckets (custom)" in text
    assert f"set with prctl(SET_SLOTS, {slots}) before the recording began" in text
    assert "custom hash: no automatic resize" in text
    assert "0 → " not in text and "to stop further automatic resizes" not in text
    # Grouped: the 3 threads are one line in the text, three events in --json.
    proc = next(x for x in expl["explanation"]["processes"] if x["pid"] == p.pid)
    assert sum(s["kind"] == "no_resize" for s in proc["steps"]) == 3
    assert "3 × thread created" in text


def test_explain_tells_each_history_from_before(procs):
    modes = ("auto", "global", "idle")
    expl, text = traced("explain", [procs[m] for m in modes], "-d", "1")
    assert sorted(p["pid"] for p in expl["explanation"]["processes"]) == sorted(procs[m].pid for m in modes)
    texts = {m: section(text, procs[m]) for m in modes}
    auto = procs["auto"].own
    assert f"now {auto['slots']} buckets (automatic)" in texts["auto"]
    assert "automatic, sized before the recording began" in texts["auto"]
    assert "now global (chosen with prctl, for good)" in texts["global"]
    assert "global for good" in texts["global"]
    assert "no private hash at attach (1 thread)" in texts["idle"]
    assert procs["idle"].own == {"slots": 0, "set": None, "threads": 1}


def test_whatif_table_against_an_independent_jhash2(watched):
    expl, full_text, said, p = watched
    woken, text = said["woken"], section(full_text, p)
    proc = next(x for x in expl["recording"]["processes"] if x["pid"] == p.pid)
    listed = {f["uaddr"]: f["lookups"] for f in proc["futex_list"]["listed"]}
    # 256 words: the lookup cache holds their counts until a slot is flushed,
    # so the per-futex list holds a part of their calls; the buckets hold
    # them all (plus the interpreter's own futexes).
    calls_per_bucket = Counter()
    for addr, calls in woken.items():
        calls_per_bucket[fidelity_ref.private_bucket(int(addr, 16), 15)] += calls
        assert listed.get(addr, 0) <= calls, addr
    h16 = next(h for h in proc["hashes"] if h["kind"] == "private" and h["buckets"] == 16)
    seen = {int(b): n for b, n in h16["bucket_counts"].items()}
    assert all(seen.get(b, 0) >= n for b, n in calls_per_bucket.items()), (seen, calls_per_bucket)
    table = next(x for x in expl["explanation"]["processes"] if x["pid"] == p.pid)["recommendation"]["whatif"]
    total = sum(listed.values())
    hot = [a for a, n in listed.items() if n >= 0.01 * total]
    for row in table["rows"]:
        size = row["buckets"]
        bucket = {a: fidelity_ref.private_bucket(int(a, 16), size - 1) for a in listed}
        used = set(bucket.values())
        per_bucket = {b: sum(n for a, n in listed.items() if bucket[a] == b) for b in used}
        members = {b: sum(1 for a in listed if bucket[a] == b) for b in used}
        assert row["buckets_used"] == len(used) and row["futexes_sharing"] == len(listed) - len(used), size
        assert row["busiest_share"] == round(max(per_bucket.values()) / total, 4), size
        assert row["hot_sharing"] == sum(1 for a in hot if members[bucket[a]] > 1), size
    assert "what-if sizing" in text


SET_THEN_THREAD = r"""
import ctypes, threading
libc = ctypes.CDLL(None, use_errno=True)
print(libc.prctl(78, 1, ctypes.c_ulong(128), 0, 0), libc.prctl(78, 2, 0, 0, 0), flush=True)
t = threading.Thread(target=print, args=("thread",)); t.start(); t.join()
"""


def test_launched_set_slots_then_clone_is_told_once():
    """Inferred prctl results (record's default): one allocation, by the prctl."""
    out = Path("/tmp/futextrace-attach-launched.json")
    p = subprocess.run([*FT, "record", "-q", "--method", "tracepoint", "--json", str(out), "--",
                        sys.executable, "-c", SET_THEN_THREAD],
                       capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert p.returncode == 0, p.stderr
    rec = json.loads(out.read_text())
    out.unlink()
    set_ret, slots = map(int, rec["command"]["stdout_tail"].split()[:2])   # the process's own view
    assert set_ret == 0
    pid = rec["command"]["pid"]
    assert rec["hash_at_attach"]["processes"][str(pid)]["launched"]
    assert rec["method"]["prctl_results"] == "inferred"
    rs = [(r["trigger"], r["result"], r["new_buckets"]) for r in rec["resizes"] if r["pid"] == pid]
    assert rs == [("prctl", 0, slots)]


def test_falls_back_and_says_so_where_iterators_are_refused(procs):
    from futextrace.output.text import explain_text as T
    from futextrace.kernel import modelcache
    from futextrace.record.recorder import RecordOptions, record_pids
    model = modelcache.load_running()[0]    # a copy of this boot's model (slow to build under TCG)
    model.iter_btf_ids = {}       # as on a kernel whose BTF has no bpf_iter_task
    p = procs["custom"]
    rec = record_pids(RecordOptions(pids=[p.pid], duration=0.5, announce=False), model=model)
    att = rec["hash_at_attach"]
    assert (att["source"], att["processes"], att["complete"]) == ("unavailable", {}, False)
    assert "no bpf_iter_task" in att["note"]
    text = T.render(T.explained(rec))
    assert "hash at attach: not read: " in text and f"PID {p.pid}" in text
