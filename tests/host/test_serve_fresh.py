"""The exporter collects on the scrape (issue 27, item 4), and `futextrace_info`
is an info metric (item 9a), seen by a real Prometheus scraping every second.

The workload's own count and exit time are the expected values: the first
sample Prometheus took after the workload exited already holds its final
count (before, a scrape served the previous read, so the count arrived one
scrape later).
"""
from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import pytest

from tests.helpers.host import wait_until
from tests.helpers.serve import PROMETHEUS, SERVE_MARKS, SLOW, Exporter, Prometheus  # noqa: F401

pytestmark = SERVE_MARKS


@pytest.fixture(scope="module")
def exporter(tmp_path_factory):
    e = Exporter(tmp_path_factory.mktemp("serve-fresh"), "--max-processes", "20")
    yield e
    e.stop()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory, exporter):
    if not PROMETHEUS:
        pytest.skip("prometheus is not installed: run scripts/bootstrap.sh --vm")
    p = Prometheus(tmp_path_factory.mktemp("prometheus-fresh"), exporter.port)
    yield p
    p.stop()


def samples(prometheus, series: str, window_s: int = 60) -> list[tuple[float, float]]:
    r = prometheus.query(f"{series}[{window_s}s]")
    return [(float(t), float(v)) for t, v in r[0]["values"]] if r else []


def test_first_scrape_after_exit_has_the_final_count(exporter, prometheus):
    from futextrace.workload.build import workload_path
    assert wait_until(lambda: prometheus.value('up{job="futextrace"}') == 1, timeout=30 * SLOW)
    run = subprocess.run([str(workload_path()), "-t", "2", "-f", "8", "-n", "20000", "-b", "64"],
                         capture_output=True, text=True, timeout=120 * SLOW, check=True)
    exited = time.time()      # the workload's own end: it has exited when run() returns
    wl = json.loads(run.stdout.strip().splitlines()[-1])
    series = f'futextrace_lookups_total{{job="futextrace",pid="{wl["pid"]}",hash="private"}}'
    assert wait_until(lambda: any(t > exited + 2.5 for t, _ in samples(prometheus, series)),
                      timeout=30 * SLOW), f"no sample after the exit: {samples(prometheus, series)}"
    got = samples(prometheus, series)
    # Prometheus' first successful scrape after the exit (up 0: the scrape itself
    # failed, e.g. timed out on a starved host, and stored nothing).
    first = min(t for t, v in samples(prometheus, 'up{job="futextrace"}') if t > exited and v == 1)
    final = max(v for _, v in got)
    # Its own count: 2 threads x 8 futexes x 20000 ops, libc's few own lookups on top.
    assert wl["total_ops"] == 2 * 8 * 20000 and wl["total_ops"] <= final < wl["total_ops"] + 16
    age = dict(samples(prometheus, 'futextrace_exporter_read_age_seconds{job="futextrace"}'))
    # Fresh: the final count. Or, only where the read exceeded its budget, a read
    # from before the exit that says so: its age reaches back past the exit.
    fresh = dict(got).get(first) == final
    said = age.get(first) is not None and age[first] >= first - exited
    assert fresh or said, (
        f"the first scrape, {first - exited:.2f} s after the exit, had {dict(got).get(first)} "
        f"(final {final}; read age then {age.get(first)}): {got}")
    if not fresh:
        print(f"over budget: the first scrape after the exit served a read {age[first]:.2f} s old")


def test_exporters_own_pid_has_no_series(exporter, prometheus):
    """Left out, like BCC tools leave out their own pid (Python's locks are futexes)."""
    assert wait_until(lambda: prometheus.value('up{job="futextrace"}') == 1, timeout=30 * SLOW)
    time.sleep(2)
    own = prometheus.query(f'futextrace_lookups_total{{pid="{exporter.proc.pid}"}}')
    assert own == []


def test_info_is_typed_info_where_the_format_has_the_type(exporter, prometheus):
    """OpenMetrics (what Prometheus asks for) types it `info`; the classic text
    format has no info type, where prometheus_client writes a gauge of value 1."""
    req = urllib.request.Request(exporter.url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    with urllib.request.urlopen(req, timeout=10) as r:
        text = r.read().decode()
    assert "# TYPE futextrace info\n" in text
    assert "futextrace_info{" in text
    with urllib.request.urlopen(exporter.url, timeout=10) as r:
        classic = r.read().decode()
    assert "# TYPE futextrace_info gauge\n" in classic
    assert wait_until(lambda: prometheus.value('futextrace_info{job="futextrace"}') == 1, timeout=30 * SLOW)
    url = f"http://127.0.0.1:{prometheus.port}/api/v1/targets/metadata?metric=futextrace"
    meta = wait_until(lambda: json.loads(urllib.request.urlopen(url, timeout=10).read())["data"],
                      timeout=30 * SLOW)
    assert {m["type"] for m in meta} == {"info"}, meta
