"""Futex names in the text outputs, on a recorded fixture given names by hand:
the hottest-buckets legend, the bucket-lock wait table, explain's colliding
lines; without names, nothing changes."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from futextrace.output.report_html import page
from futextrace.output.text import explain_text as T
from futextrace.output.text.lockwaits_text import lockwait_lines
from futextrace.output.text.names_text import LEGEND_MAX, name_text, short_name
from futextrace.output.text.render import render_text

DATA = Path(__file__).parent.parent / "data"


def named(rec: dict) -> dict:
    """The fixture with every hottest address of its first process named, in turn
    a symbol, a stripped file's .bss offset and heap memory."""
    rec = copy.deepcopy(rec)
    p = rec["processes"][0]
    addrs = [a for h in p["hashes"] for b in h.get("hottest", []) for a in b["addresses"]]
    kinds = [
        {"mapping": "/opt/app/myapp", "kind": "file", "section": ".bss", "symbol": "ledger_gate", "offset": 0,
         "why_unknown": None},
        {"mapping": "/opt/app/myapp", "kind": "file", "section": ".bss", "symbol": None, "offset": 0x4480,
         "why_unknown": "stripped: no .symtab and no separate debug file found"},
        {"mapping": "[heap]", "kind": "heap", "section": None, "symbol": None, "offset": 0x2a0,
         "why_unknown": "heap memory (brk): allocated at run time, no symbol names it"},
    ]
    p["futex_names"] = {a: kinds[i % 3] for i, a in enumerate(addrs)}
    return rec


def one_bucket_waits(cause: str, futexes: list[dict]) -> dict:
    """A contention section: PID 7 waited in bucket 1 of 2 on these futexes."""
    waits, ns = sum(f["waits"] for f in futexes), sum(f["wait_ns"] for f in futexes)
    zero = {k: {"waits": 0, "wait_ns": 0} for k in ("collision", "same_futex", "unknown")}
    return {"status": "attached (tp_btf)", "waits": waits, "wait_ns": ns, "wait_ms_per_s": ns / 1e6,
            "window_s": 1.0, "by_cause": zero,
            "processes": [{"pid": 7, "comm": "myapp", "waits": waits, "wait_ns": ns, "wait_ms_per_s": ns / 1e6,
                           "by_cause": zero, "buckets_waited": 1,
                           "buckets": [{"bucket": 1, "buckets": 2, "waits": waits, "wait_ns": ns, "max_ns": 1000,
                                        "cause": cause, "futexes": futexes}]}]}


def test_words_of_a_name():
    names = named(json.loads((DATA / "recording-tp-auto.json").read_text()))["processes"][0]["futex_names"]
    sym, stripped, heap = list(names.values())[:3]
    assert name_text(sym) == "ledger_gate (myapp .bss)"
    assert name_text(stripped) == "myapp .bss+0x4480 (no symbol: stripped)"
    assert short_name(heap) == "[heap]+0x2a0"
    assert short_name({"kind": "thread_stack", "tid": 12, "mapping": "[anon]"}) == "stack of thread 12"


def test_the_hottest_table_gets_a_legend_of_the_addresses_it_shows():
    rec = json.loads((DATA / "recording-tp-auto.json").read_text())
    plain, text = render_text(rec), render_text(named(rec))
    assert "the addresses above:" not in plain
    legend = text.split("the addresses above:\n")[1].split("\n  global hash")[0].splitlines()
    shown = [a for b in rec["processes"][0]["hashes"][0]["hottest"] for a in b["addresses"][:4]]
    names = named(rec)["processes"][0]["futex_names"]
    assert legend[0].split()[0] == shown[0] and legend[0].endswith(name_text(names[shown[0]]))
    assert len(legend) == LEGEND_MAX + 1 and legend[-1].endswith("more named in the JSON (futex_names)")
    # everything else is as before
    assert text.replace("    the addresses above:\n" + "\n".join(legend) + "\n", "") == plain


def test_the_lock_wait_table_names_the_waiting_futexes():
    c = one_bucket_waits("collision", [{"uaddr": "0x10", "waits": 2, "wait_ns": 2000},
                                       {"uaddr": "0x20", "waits": 1, "wait_ns": 1000}])
    names = {7: {"0x10": {"mapping": "/opt/myapp", "kind": "file", "section": ".data", "symbol": "orders_mutex",
                          "offset": 0, "why_unknown": None}}}
    plain = "\n".join(lockwait_lines(c))
    text = "\n".join(lockwait_lines(c, names=names))
    assert "0x10 (2), 0x20 (1)" in plain
    assert "0x10 orders_mutex (2), 0x20 (1)" in text


def _stack(*frames, trusted=None, count=None) -> dict:
    """A symbolized stack (naming/callsites.py's shape) of (function, offset) frames."""
    fr = [{"ip": hex(0x1000 + i), "function": f, "offset": o, "mapping": "/opt/myapp", "trusted": True,
           "why_unknown": None} for i, (f, o) in enumerate(frames)]
    out = {"frames": fr, "trusted_frames": len(fr) if trusted is None else trusted, "ends": "the stack ends here"}
    return out if count is None else {**out, "count": count}


def test_call_sites_follow_the_name_in_the_legend_and_the_wait_table():
    rec = named(json.loads((DATA / "recording-tp-auto.json").read_text()))
    names = rec["processes"][0]["futex_names"]
    first = next(iter(names))
    names[first] = {**names[first], "call_sites": {
        "first_lookup": _stack(("touch", 0x1c), ("settle_accounts", 0x18), ("worker", 0x9)),
        "lock_waits": []}}
    legend = render_text(rec).split("the addresses above:\n")[1].splitlines()
    assert legend[0].endswith("ledger_gate (myapp .bss) ← touch+0x1c ← settle_accounts+0x18"), legend[0]
    assert not legend[1].count("←")                         # no stack taken: nothing invented
    # waits: two stacks that differ past the frames shown are one line, their counts added;
    # an untrusted caller is shown as "?"
    waits = [_stack(("touch", 0x22), ("settle_accounts", 0x10), ("worker", 1), count=2),
             _stack(("touch", 0x22), ("settle_accounts", 0x10), ("worker", 9), count=2),
             _stack(("syscall", 0x1d), ("main", 0x40), trusted=1, count=3)]
    c = one_bucket_waits("same_futex", [{"uaddr": "0x10", "waits": 7, "wait_ns": 7000}])
    names = {7: {"0x10": {"mapping": "/opt/myapp", "kind": "file", "section": ".data", "symbol": "orders_mutex",
                          "offset": 0, "why_unknown": None, "call_sites": {"first_lookup": None, "lock_waits": waits}}}}
    text = lockwait_lines(c, names=names)
    assert text[text.index("    waited on from:") + 1] == \
        "      0x10 orders_mutex ← touch+0x22 ← settle_accounts+0x10 | syscall+0x1d ← ?"


def test_explain_names_the_futexes_sharing_a_bucket_only_with_names():
    rec = json.loads((DATA / "recording-tp-auto.json").read_text())
    plain = T.explained(rec)["processes"][0]["recommendation"]
    assert "colliding" not in plain
    rcm = T.explained(named(rec))["processes"][0]["recommendation"]
    hottest = rec["processes"][0]["hashes"][0]["hottest"][0]
    assert rcm["colliding"][0].startswith(f"bucket {hottest['bucket']} of 16 (lookups): ledger_gate (myapp .bss)")
    assert rcm["colliding"][0].endswith(f"and {hottest['futexes'] - 4} more")
    assert "    colliding in bucket" in T.render(T.explained(named(rec)))


def test_the_html_report_names_the_futexes_sharing_a_bucket():
    rec = json.loads((DATA / "recording-tp-auto.json").read_text())
    assert "No named futexes share a bucket" in page(rec, "t", "", [], {})
    rec = named(rec)
    names = rec["processes"][0]["futex_names"]
    first = next(iter(names))
    names[first] = {**names[first], "call_sites": {
        "first_lookup": _stack(("touch", 0x1c), ("settle_accounts", 0x18)), "lock_waits": []}}
    html = page(rec, "t", "", [], {})
    section = html.split("<h2>Colliding futexes, named</h2>")[1].split("<h2>")[0]
    shared = [b for h in rec["processes"][0]["hashes"] for b in h.get("hottest", []) if b["futexes"] > 1]
    assert shared and f"<code>{first}</code> ledger_gate (myapp .bss) ← touch+0x1c ← settle_accounts+0x18" in section
    assert "myapp .bss+0x4480 (no symbol: stripped)" in section
