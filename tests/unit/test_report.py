"""`futextrace report`: recognising recordings, the text again, the pictures, the HTML page.
No root, no BPF: works on the saved sample recordings."""
import base64
import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from futextrace.errors import EXIT_IO, FileProblem
from futextrace.output.text.render import render_text
from futextrace.output.report import load_recording

DATA = Path(__file__).parent.parent / "data"
SAMPLES = [DATA / "recording-tp-64.json", DATA / "recording-tp-auto.json"]
PNG = b"\x89PNG\r\n\x1a\n"


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "futextrace.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def _with_resizes(tmp_path) -> Path:
    """A sample with a clone resize, a deferred prctl resize and a refused one."""
    rec = json.loads(SAMPLES[1].read_text())
    base = rec["resizes"][0]
    rec["resizes"] += [
        {**base, "t": 0.1, "trigger": "prctl", "requested": 128, "custom": True, "old_buckets": 16,
         "new_buckets": 128, "pivot_t": 0.15, "pending_s": 0.05},
        {**base, "t": 0.3, "trigger": "prctl", "requested": 3, "custom": True, "result": -22,
         "old_buckets": 128, "new_buckets": 128, "pivot_t": None, "pending_s": None},
    ]
    p = tmp_path / "resizes.json"
    p.write_text(json.dumps(rec))
    return p


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_samples_load_and_render(path):
    rec = load_recording(str(path))
    assert "Lookups:" in render_text(rec)


@pytest.mark.parametrize("content, why", [
    ("not json at all", "not JSON"),
    ("[1, 2]", "schema is 'list'"),
    ('{"schema": "something-else", "schema_version": 1}', "schema is 'something-else'"),
    ('{"schema": "futextrace-recording", "schema_version": 99}', "schema_version 99"),
    ('{"schema": "futextrace-recording", "schema_version": 1}', "missing method"),
])
def test_not_a_recording(tmp_path, content, why):
    p = tmp_path / "x.json"
    p.write_text(content)
    with pytest.raises(FileProblem) as e:
        load_recording(str(p))
    msg = str(e.value)
    assert msg.startswith(f"{p} is not a futextrace recording (") and why in msg
    assert "\n" not in msg and e.value.exit_code == EXIT_IO


def test_missing_file(tmp_path):
    with pytest.raises(FileProblem, match="cannot read"):
        load_recording(str(tmp_path / "nope.json"))


def test_cli_text_states_the_recordings_figures():
    """The text says what the recording holds: figures computed here from the
    JSON (bucket_counts), not the renderer compared with itself."""
    rec = json.loads(SAMPLES[0].read_text())
    r = _cli("report", SAMPLES[0])
    assert r.returncode == 0, r.stderr
    t = rec["totals"]
    assert f"Lookups: {t['lookups']:,} in" in r.stdout
    assert f"private hash {t['private']:,}, global hash {t['global']:,}" in r.stdout
    for proc in rec["processes"]:
        assert f"PID {proc['pid']} ({proc['comm']}): {proc['lookups']:,} lookups" in r.stdout
        for h in (h for h in proc["hashes"] if h["kind"] == "private"):
            counts = list(h["bucket_counts"].values())
            assert (f"private hash, {h['buckets']} buckets: {sum(counts):,} lookups, "
                    f"{h['distinct_futexes']:,} distinct futexes") in r.stdout
            assert f"buckets used {sum(1 for c in counts if c)} of {h['buckets']}" in r.stdout
            hot = max(h["bucket_counts"], key=h["bucket_counts"].get)
            # A private hash's buckets have no node: no node column.
            assert re.search(rf"^\s+{hot}\s+{h['bucket_counts'][hot]:,}\s", r.stdout, re.M)


def test_text_names_each_unattributed_cause():
    rec = json.loads(SAMPLES[0].read_text())
    assert "map full" not in render_text(rec) and "could not read" not in render_text(rec)
    rec["totals"].update(unattributed=7, unattributed_causes={"map_full": 4, "user_memory_unreadable": 3},
                         mpol_assumed_no_policy=5)
    text = render_text(rec)
    assert "4 lookups not attributed to a bucket: buckets map full" in text
    assert "3 lookups not attributed: their key" in text and "BPF could not read" in text
    assert "5 FUTEX2_MPOL lookups counted as if their memory had no NUMA policy" in text


def test_cli_bad_file_one_line_exit_5(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"hello": 1}')
    r = _cli("report", p)
    assert r.returncode == EXIT_IO
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a futextrace recording" in lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_cli_plots_and_html(tmp_path):
    src = _with_resizes(tmp_path)
    out = tmp_path / "plots"
    page = tmp_path / "r.html"
    r = _cli("report", src, "--plot", out, "--html", page, "-q")
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == ["bucket-time.png", "buckets.png", "cpus.png", "rates.png", "resizes.png", "whatif.png"]
    for p in out.iterdir():
        assert p.read_bytes().startswith(PNG) and p.stat().st_size > 10_000
    html = page.read_text()
    imgs = html.count('src="data:image/png;base64,')
    assert imgs == 6 and "Lookups:" in html and "<script" not in html
    first = html.split('src="data:image/png;base64,', 1)[1].split('"', 1)[0]
    assert base64.b64decode(first).startswith(PNG)


def test_plots_without_lookups_or_resizes(tmp_path):
    """An empty recording still draws (with a note), rather than failing."""
    rec = copy.deepcopy(json.loads(SAMPLES[0].read_text()))
    rec["processes"], rec["resizes"], rec["per_cpu"] = [], [], []
    from futextrace.output.plots.recording import plot_recording
    paths = plot_recording(rec, tmp_path)
    assert all(p.read_bytes().startswith(PNG) for p in paths)


def test_incomplete_futex_list_prints_bounds():
    """A hash whose per-futex list missed lookups prints its futex figures as
    ranges labelled estimates; the bucket counts are printed as they are."""
    from futextrace.record.aggregate import build_recording
    futex = {"tgid": 7, "kind": 0, "uaddr": 0x1000, "hash_mask": 15,
             "per_cpu": [[5, 0, 3, -1, 0xFFFFFFFF]]}
    bucket = {"tgid": 7, "kind": 0, "hash_mask": 15, "bucket": 3, "node": -1, "per_cpu": [[12, 0, 0]]}
    raw = {"counters": {"PRIVATE": [12], "FUTEXES_FULL": [1]}, "futexes": [futex], "buckets": [bucket],
           "futex_capacity": 4096}
    rec = build_recording(raw, {"cpu_node": {"0": 0}}, {"name": "tracepoint"}, 1.0, "now")
    h = rec["processes"][0]["hashes"][0]
    assert h["bucket_counts"] == {"3": 12} and h["lookups"] == 12
    assert h["futex_detail"] == {"complete": False, "futexes_listed": 1, "lookups_listed": 5, "lookups_missed": 7}
    assert h["estimates"]["distinct_futexes"] == {"low": 1, "high": 8}
    fl = rec["totals"]["futex_list"]
    assert fl["full"] and fl["lookups_missed"] == 7 and fl["capacity"] == 4096
    rec["method"].update(why="test", probes=[], blind_spots=[])
    rec.update(resizes=[], threads=[], hash_states=[])
    text = render_text(rec)
    assert "1..8 distinct futexes (estimate" in text
    assert "7 lookups not in it" in text
