"""The exporter end to end on recorded data: a recorder stand-in hands the
collector recordings made by `futextrace record` (tests/data), the registry
renders /metrics text, and prometheus_client's own parser reads it back.
Expected values are computed here from the recording's fields."""
import copy
import json
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from futextrace.export.collector import FutexCollector

DATA = Path(__file__).parent.parent / "data"


class RecordedRecorder:
    """Serves a list of recordings in turn, like Recorder.recording() would."""

    def __init__(self, recordings):
        self.recordings = list(recordings)
        self.reads = 0

    def recording(self, duration):
        rec = self.recordings[min(self.reads, len(self.recordings) - 1)]
        self.reads += 1
        return rec


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def scrape(registry) -> dict:
    """{(name, frozenset(labels)): value} from the rendered text."""
    text = generate_latest(registry).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def collector_for(recordings, **kw):
    clock = Clock()
    rec = RecordedRecorder(recordings)
    c = FutexCollector(rec, kw.get("max_processes", 10), kw.get("grace_s", 60), kw.get("min_interval", 1.0),
                       clock=clock, alive=kw.get("alive", lambda pid: True),
                       background=kw.get("background", False))
    registry = CollectorRegistry()
    registry.register(c)
    return c, rec, clock, registry


def test_recorded_values_are_served():
    recording = json.loads((DATA / "recording-tp-64.json").read_text())
    _, _, _, registry = collector_for([recording])
    m = scrape(registry)
    proc = recording["processes"][0]
    labels = {"pid": str(proc["pid"]), "comm": proc["comm"]}
    private = sum(h["lookups"] for h in proc["hashes"] if h["kind"] == "private")
    assert m[("futextrace_lookups_total", frozenset({**labels, "hash": "private"}.items()))] == private
    # The prctl'd size (64) is the process's hash, reported custom by the resize in the recording.
    rz = recording["resizes"][0]
    assert (rz["trigger"], rz["result"], rz["new_buckets"]) == ("prctl", 0, 64)
    assert m[("futextrace_resizes_total", frozenset({"trigger": "prctl", "result": "ok"}.items()))] == 1
    buckets = [(dict(l)["kind"], v) for (n, l), v in m.items()
               if n == "futextrace_hash_buckets" and ("pid", labels["pid"]) in l]
    assert buckets == [("custom", 64)]
    rc = recording["refcount"]
    assert m[("futextrace_refcount_ops_total", frozenset(
        {"op": "get", "path": "percpu", "source": "inferred"}.items()))] == rc["get_percpu"]
    assert m[("futextrace_system_lookups_total", frozenset({"hash": "private"}.items()))] == \
        recording["totals"]["private"]
    info = [l for (n, l) in m if n == "futextrace_info"][0]
    assert dict(info)["method"] == recording["method"]["name"]


def test_maps_are_read_at_most_once_per_min_interval():
    recording = json.loads((DATA / "recording-tp-64.json").read_text())
    _, rec, clock, registry = collector_for([recording], min_interval=1.0)
    for t in (0.0, 0.3, 0.9):
        clock.t = t
        scrape(registry)
    assert rec.reads == 1
    clock.t = 1.0
    scrape(registry)
    assert rec.reads == 2


def churned(base: dict, step: int) -> dict:
    """The recorded process as 8 processes whose activity moves around: at
    step s process i makes ((i + s) % 8) * 100 lookups, so the busiest rotates."""
    rec = copy.deepcopy(base)
    proto = base["processes"][0]
    procs, total = [], 0
    for i in range(1, 9):
        p = copy.deepcopy(proto)
        p["pid"] = 1000 + i
        n = sum(((i + s) % 8) * 100 for s in range(step + 1))   # the busiest one rotates
        for h in p["hashes"]:
            h["lookups"] = n if h["kind"] == "private" else 0
        p["lookups"] = n
        total += n
        procs.append(p)
    rec["processes"] = procs
    rec["totals"]["private"] = total
    return rec


def test_other_never_goes_backwards_over_scrapes():
    base = json.loads((DATA / "recording-tp-auto.json").read_text())
    steps = [churned(base, k) for k in range(12)]
    _, _, clock, registry = collector_for(steps, max_processes=2)
    last = {}
    for k in range(12):
        clock.t = float(k)
        m = scrape(registry)
        lookups = {l: v for (n, l), v in m.items() if n == "futextrace_lookups_total"}
        for labels, v in lookups.items():
            assert v >= last.get(labels, 0), (k, dict(labels))
        last.update(lookups)
        assert len([l for l in lookups if dict(l)["comm"] != "other"]) <= 2 * 2
        # Everything is accounted for: exported series plus counts of demoted
        # processes (kept, not exported) add up to what the recording says.
        assert sum(lookups.values()) <= steps[k]["totals"]["private"]
    other = frozenset({"pid": "", "comm": "other", "hash": "private"}.items())
    assert last[other] > 0


def test_a_slow_read_raises_the_floor():
    """A read that takes 0.4 s of CPU: the next one waits COST_FACTOR times that, not --min-interval."""
    import time as _time
    from futextrace.export.collector import COST_FACTOR
    recording = json.loads((DATA / "recording-tp-64.json").read_text())
    c, rec, clock, registry = collector_for([recording], min_interval=0.5)
    slow = rec.recording

    def busy(d):
        end = _time.thread_time() + 0.4
        while _time.thread_time() < end:
            pass
        return slow(d)
    rec.recording = busy
    scrape(registry)
    assert c.stats["floor_s"] >= COST_FACTOR * 0.4
    clock.t = COST_FACTOR * 0.4 - 0.1
    scrape(registry)
    assert rec.reads == 1
    clock.t = COST_FACTOR * 0.4 + 0.1
    scrape(registry)
    assert rec.reads == 2


def test_each_scrape_a_second_apart_gets_its_own_read():
    """Prometheus' guidance: collect on the scrape. Every 1 s scrape reads the
    maps, and what it answers is that read (age 0)."""
    first = json.loads((DATA / "recording-tp-64.json").read_text())
    recs = []
    for k in range(5):
        r = copy.deepcopy(first)
        r["processes"][0]["hashes"][0]["lookups"] += 100 * k
        recs.append(r)
    _, rec, clock, registry = collector_for(recs, min_interval=0.5)
    p = first["processes"][0]
    key = ("futextrace_lookups_total", frozenset({"pid": str(p["pid"]), "comm": p["comm"],
                                                  "hash": "private"}.items()))
    for k in range(5):
        clock.t = float(k)
        m = scrape(registry)
        assert m[key] == p["hashes"][0]["lookups"] + 100 * k
        assert m[("futextrace_exporter_read_age_seconds", frozenset())] == 0
    assert rec.reads == 5


def test_a_read_over_budget_serves_the_last_read_and_its_age():
    import threading
    import time as _time
    first = json.loads((DATA / "recording-tp-64.json").read_text())
    second = copy.deepcopy(first)
    second["processes"][0]["hashes"][0]["lookups"] += 1000
    c, rec, clock, registry = collector_for([first, second], background=True)
    c.budget = 0.2
    gate = threading.Event()
    plain = rec.recording
    rec.recording = lambda d: (rec.reads and gate.wait(10), plain(d))[1]   # the second read blocks
    key = ("futextrace_lookups_total", frozenset({"pid": str(first["processes"][0]["pid"]),
                                                  "comm": first["processes"][0]["comm"], "hash": "private"}.items()))
    assert scrape(registry)[key] == 16009       # the first scrape waits for the first read
    clock.t = 5.0
    t0 = _time.monotonic()
    m = scrape(registry)                        # its read blocks: the last read after the budget
    assert 0.2 <= _time.monotonic() - t0 < 2 and c.reader.is_alive()
    assert m[key] == 16009
    assert m[("futextrace_exporter_read_age_seconds", frozenset())] == 5.0
    assert m[("futextrace_exporter_reads_over_budget_total", frozenset())] == 1
    gate.set()
    c.reader.join(5)
    clock.t = 5.5
    m = scrape(registry)                        # the finished read, 0.5 s old: within the floor
    assert m[key] == 16009 + 1000
    assert m[("futextrace_exporter_read_age_seconds", frozenset())] == 0.5
    assert rec.reads == 2


def test_the_exporters_own_pid_has_no_series_unless_asked():
    import os
    recording = copy.deepcopy(json.loads((DATA / "recording-tp-64.json").read_text()))
    own = copy.deepcopy(recording["processes"][0])
    own["pid"], own["comm"] = os.getpid(), "futextrace"
    recording["processes"].append(own)
    for include, present in ((False, False), (True, True)):
        c, _, _, registry = collector_for([recording])
        c.own_pid = os.getpid() if not include else None
        pids = {dict(l).get("pid") for (n, l) in scrape(registry) if n == "futextrace_lookups_total"}
        assert (str(os.getpid()) in pids) == present, pids


def test_a_failed_read_keeps_the_last_one_and_is_counted(capsys):
    recording = json.loads((DATA / "recording-tp-64.json").read_text())
    c, rec, clock, registry = collector_for([recording])
    before = scrape(registry)
    rec.recording = lambda d: (_ for _ in ()).throw(OSError(9, "Bad file descriptor"))
    clock.t = 5.0
    after = scrape(registry)
    errors = ("futextrace_exporter_map_read_errors_total", frozenset())
    assert after[errors] == 1
    lookups = {k: v for k, v in after.items() if k[0] == "futextrace_lookups_total"}
    assert lookups == {k: v for k, v in before.items() if k[0] == "futextrace_lookups_total"}
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("futextrace: warning: reading the maps failed")


def test_retention_forgets_the_gone_once_after_the_grace_period():
    from futextrace.export.collector import Retention
    r = Retention(grace_s=10)
    alive = {1: True, 2: False, 3: False}
    assert r.expired({1, 2}, now=0, alive=alive.get) == set()
    assert r.expired({1, 2, 3}, now=5, alive=alive.get) == set()
    assert r.expired({1, 2, 3}, now=10, alive=alive.get) == {2}      # gone since 0
    assert r.expired({1, 3}, now=14, alive=alive.get) == set()       # 3 gone since 5
    assert r.expired({1, 3}, now=15, alive=alive.get) == {3}
    assert r.expired({1}, now=100, alive=alive.get) == set() and r.gone == {}   # the living stay


def test_each_read_serves_the_bytes_it_read_and_its_cpu():
    """futextrace_exporter_map_read_bytes: what this read added to the map
    reader's cumulative counts, by way; the read's CPU time beside it."""
    from types import SimpleNamespace
    recording = json.loads((DATA / "recording-tp-64.json").read_text())
    c, rec, clock, registry = collector_for([recording])
    rec.reader = SimpleNamespace(bytes_read={"syscall": 1000, "mapping": 50})
    reading = rec.recording

    def read_more(duration):
        rec.reader.bytes_read["syscall"] += 700
        rec.reader.bytes_read["mapping"] += 4096
        return reading(duration)
    rec.recording = read_more
    m = scrape(registry)
    assert m[("futextrace_exporter_map_read_bytes", frozenset({("via", "syscall")}))] == 700
    assert m[("futextrace_exporter_map_read_bytes", frozenset({("via", "mapping")}))] == 4096
    assert m[("futextrace_exporter_map_read_cpu_seconds", frozenset())] >= 0
