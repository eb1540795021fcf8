"""futextrace/recording.py declares every key a recording holds: the recorded
fixtures (tests/data/recording-*.json, made by `futextrace record`) and the
pictures' synthetic recordings are walked key by key against its TypedDicts
(tests/helpers/recording_types.py, written for the test), and an undeclared key,
a missing required key or a value of another type is found."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from futextrace.recording import Recording
from tests.helpers import synthetic
from tests.helpers.recording_types import problems

DATA = Path(__file__).resolve().parents[1] / "data"
FIXTURES = sorted(DATA.glob("recording-*.json"))


def test_there_are_fixtures():
    # The modern fixture holds intervals, contention, the window and the first-seen filter.
    assert len(FIXTURES) >= 3
    modern = json.loads((DATA / "recording-tp-32-intervals.json").read_text())
    for key in ("intervals", "contention", "window", "hash_at_attach", "resize_cost", "command"):
        assert modern[key], key
    assert modern["totals"]["futex_list"]["seen_filter"]
    assert modern["intervals"][0]["lock_waits"]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_fixture_keys_are_declared(path):
    assert problems(json.loads(path.read_text()), Recording) == []


@pytest.mark.parametrize("kw", [{}, {"processes": 5, "cpus": 8, "resizes": 3, "nodes": 2}])
def test_synthetic_recordings_are_declared(kw):
    assert problems(synthetic.recording(**kw), Recording) == []


def test_an_undeclared_key_is_found():
    rec = synthetic.recording()
    rec["processes"][0]["hashes"][0]["imbalance"]["spread"] = 1.0
    rec["totals"]["futex_list"] = {"complete": True, "seen_filter": {"words": 8, "fill": 0.1}}
    rec["intervals"][0]["processes"][0]["bucket_count"] = {"3": 1}
    rec["surprise"] = {}
    assert sorted(problems(rec, Recording)) == [
        ".intervals[0].processes[0].bucket_count: not declared in IntervalProcess",
        ".processes[0].hashes[0].imbalance.spread: not declared in Imbalance",
        ".surprise: not declared in Recording",
        ".totals.futex_list.seen_filter.fill: not declared in SeenFilter",
    ]


def test_a_missing_required_key_and_a_wrong_type_are_found():
    rec = copy.deepcopy(synthetic.recording())
    del rec["refcount"]["get_atomic"]
    rec["per_cpu"][1]["lookups"] = "many"
    rec["resizes"] = {"t": 1.0}
    rec["processes"][0]["hashes"][0]["hottest"][0]["node"] = "0"
    assert sorted(problems(rec, Recording)) == [
        ".per_cpu[1].lookups: 'many' is not int",
        ".processes[0].hashes[0].hottest[0].node: '0' is not int",
        ".refcount.get_atomic: required by Refcount, absent",
        ".resizes: dict, declared a list",
    ]


@pytest.mark.parametrize("seen", [None, {"words": 1024, "bits_per_key": 4, "words_per_key": 2,
                                         "false_positive_rate": 0.2}])
def test_built_recording_is_declared(seen):
    """What aggregate.build_recording writes, from a small dump: with the first-seen
    filter (estimates as {value, error_pct}), and without it (bounds)."""
    from futextrace.record.aggregate import build_recording
    futex = {"tgid": 7, "kind": 0, "uaddr": 0x1000, "hash_mask": 15, "per_cpu": [[5, 0, 3, -1, 0xFFFFFFFF]]}
    bucket = {"tgid": 7, "kind": 0, "hash_mask": 15, "bucket": 3, "node": -1, "per_cpu": [[12, 0, 0, 2]]}
    raw = {"counters": {"PRIVATE": [12], "FUTEXES_FULL": [1]}, "futexes": [futex], "buckets": [bucket],
           "futex_capacity": 4096, **({"seen_filter": seen} if seen else {})}
    rec = build_recording(raw, {"cpu_node": {"0": 0}}, {"name": "tracepoint"}, 1.0, "now", {7: "w"})
    assert "estimates" in rec["processes"][0]["hashes"][0]
    assert problems(rec, Recording) == []


def test_the_types_import_nothing_from_futextrace():
    """Every layer (kernel to commands) may import futextrace.recording: it sits below them all."""
    from tests.helpers.importgraph import load_script
    edges, _ = load_script().graph()
    assert edges["futextrace.recording"] == set()
    users = {m for m, ts in edges.items() if "futextrace.recording" in ts}
    for module in ("futextrace.record.aggregate", "futextrace.output.jsonio", "futextrace.output.report",
                   "futextrace.output.text.render", "futextrace.output.text.lockwaits_text", "futextrace.output.report_html",
                   "futextrace.output.plots.recording", "futextrace.export.reading"):
        assert module in users, module
