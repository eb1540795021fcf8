"""`futextrace serve` on the real kernel, scraped by a real Prometheus server.

The exporter is started as a user would start it; Prometheus (Debian's
package) runs with its own temporary config and data directory, scraping it
every second; the built-in workload runs a known number of futex calls, and
the counter Prometheus stored is compared with the workload's own count.
"""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from futextrace.errors import EXIT_ENV, EXIT_USAGE
from tests.helpers.host import wait_until
from tests.helpers.host import FT
from tests.helpers.serve import (PROMETHEUS, SERVE_MARKS, SLOW, Exporter, Prometheus, free_port, http_get,
                                  links_held_by, prog_ids)

pytestmark = SERVE_MARKS

@pytest.fixture(scope="module")
def exporter(tmp_path_factory):
    e = Exporter(tmp_path_factory.mktemp("serve"), "--max-processes", "10")
    yield e
    e.stop()


@pytest.fixture(scope="module")
def workload():
    from futextrace.workload.build import workload_path
    return str(workload_path())


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory, exporter):
    if not PROMETHEUS:
        pytest.skip("prometheus is not installed: run scripts/bootstrap.sh --vm")
    p = Prometheus(tmp_path_factory.mktemp("prometheus"), exporter.port)
    yield p
    p.stop()


def test_prometheus_stores_the_workloads_count(exporter, prometheus, workload):
    assert wait_until(lambda: prometheus.value('up{job="futextrace"}') == 1, timeout=30 * SLOW)
    run = subprocess.run([workload, "-t", "2", "-f", "8", "-n", "5000", "-b", "64"],
                         capture_output=True, text=True, timeout=120 * SLOW, check=True)
    wl = json.loads(run.stdout.strip().splitlines()[-1])
    ops, pid = wl["total_ops"], wl["pid"]
    assert ops == 2 * 8 * 5000
    series = f'futextrace_lookups_total{{job="futextrace",pid="{pid}",hash="private"}}'
    # The workload has exited; its series keeps its final value for --grace seconds.
    # Wait until two scrapes in a row agree: the maps were read after it ended.
    stable = []

    def settled():
        v = prometheus.value(series)
        stable.append(v)
        return v is not None and v >= ops and len(stable) >= 2 and stable[-2] == v
    assert wait_until(settled, timeout=40 * SLOW, step=1.5), stable
    stored = stable[-1]
    missed = prometheus.value('futextrace_missed_runs_total{job="futextrace"}') or 0
    # libc adds a few lookups of its own (thread join); skipped probe runs are reported.
    assert stored - ops in range(-int(missed), 16), (stored, ops, missed)
    comm = prometheus.query(series)[0]["metric"]["comm"]
    assert comm == Path(workload).name[:15]
    buckets = prometheus.query(f'futextrace_hash_buckets{{pid="{pid}"}}')
    assert [(b["metric"]["kind"], b["value"][1]) for b in buckets] == [("custom", "64")]
    resizes = prometheus.value('futextrace_resizes_total{trigger="prctl",result="ok"}')
    assert resizes and resizes >= 1


def test_metrics_page_has_help_and_types(exporter):
    text = http_get(exporter.url)
    for family in ("futextrace_lookups", "futextrace_hash_buckets", "futextrace_refcount_ops",
                   "futextrace_resizes", "futextrace_unattributed_lookups", "futextrace_lost_events",
                   "futextrace_missed_runs", "futextrace_bucket_max_over_mean"):
        assert f"# HELP {family}" in text and f"# TYPE {family}" in text, family
    assert "futextrace_info{" in text and 'comm="other"' in text


def test_slow_and_aborted_scrapes_do_not_hurt(exporter):
    stuck = socket.create_connection(("127.0.0.1", exporter.port))    # connects, sends nothing
    half = socket.create_connection(("127.0.0.1", exporter.port))
    half.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")            # never ends its headers
    slow = socket.create_connection(("127.0.0.1", exporter.port))
    slow.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
    slow.recv(10)                                                      # reads 10 bytes, then waits
    for _ in range(5):                                                 # hang up mid-answer, with a reset
        s = socket.create_connection(("127.0.0.1", exporter.port))
        s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()
    t0 = time.monotonic()
    text = http_get(exporter.url, timeout=10 * SLOW)
    assert text and "futextrace_lookups_total" in text
    assert time.monotonic() - t0 < 5 * SLOW, "a stuck scraper delayed another scrape"
    for s in (stuck, half, slow):
        s.close()
    assert exporter.proc.poll() is None
    assert http_get(exporter.url)
    assert "Traceback" not in exporter.err.read_text()


@pytest.mark.parametrize("listen, code, words", [
    ("nonsense", EXIT_USAGE, "not ADDR:PORT"),
    ("127.0.0.1:0", EXIT_USAGE, "port 1-65535"),
    ("127.0.0.1:99999", EXIT_USAGE, "port 1-65535"),
    ("192.0.2.1:9477", EXIT_USAGE, "no such address"),
    ("no-such-host.invalid:9477", EXIT_USAGE, "cannot resolve"),
    ("IN_USE", EXIT_ENV, "port is in use"),
])
def test_bad_listen_one_line_error(listen, code, words, exporter):
    listen = f"127.0.0.1:{exporter.port}" if listen == "IN_USE" else listen
    p = subprocess.Popen([*FT, "serve", "--listen", listen], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    # The address is checked before anything is attached. (Programs the last
    # start loaded may be loaded ahead already, loading/earlyprograms.py: never
    # attached, gone with the process.)
    attached = set()
    while p.poll() is None:
        attached |= links_held_by(p.pid)
        time.sleep(0.02)
    _, err = p.communicate(timeout=60)
    lines = err.strip().splitlines()
    assert p.returncode == code, err
    assert len(lines) == 1 and lines[0].startswith("futextrace: error: ") and words in lines[0], err
    assert not attached, f"programs attached before the address was checked: {sorted(attached)}"
    assert f"  {code}  " in subprocess.run([*FT, "serve", "--help"], capture_output=True, text=True).stdout


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_signal_detaches_everything(tmp_path, sig):
    e = Exporter(tmp_path)
    assert e.ours, "serve runs but no program of its own is loaded"
    assert e.stop(sig) == 0, e.err.read_text()
    assert "Traceback" not in e.err.read_text()
    left = wait_until(lambda: not (e.ours & prog_ids()), timeout=10)
    assert left, f"BPF programs left attached: {sorted(e.ours & prog_ids())}"
    assert http_get(e.url, timeout=2) is None   # and the port is closed


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_signal_at_the_serving_line_ends_cleanly(sig):
    """A stop signal the moment "serving" is printed is a normal stop (exit 0),
    as it is once the loop runs: the handler is in place from the attach on."""
    p = subprocess.Popen([*FT, "serve", "--listen", f"127.0.0.1:{free_port()}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert "serving" in line, line + err
    assert p.returncode == 0, line + err


# --- the Grafana dashboard against the real /metrics page -----------------------
DASHBOARD = Path(__file__).parent.parent.parent / "dashboards" / "futextrace.json"
PROMQL_WORDS = {"sum", "max", "min", "avg", "count", "rate", "irate", "increase", "by", "without",
                "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                "topk", "bottomk", "label_values", "offset", "delta", "deriv", "clamp_min",
                "histogram_quantile", "time", "vector", "scalar", "abs", "round"}


def dashboard_queries() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for var in dash["templating"]["list"]:
        q = var.get("query")
        if isinstance(q, dict):
            exprs.append(q["query"])
    return exprs


def promql_metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL (or label_values) expression: identifiers left
    once strings, label matchers, groupings, ranges and functions are removed."""
    import re
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)          # strings
    s = re.sub(r"\{[^}]*\}", " ", s)                       # label matchers
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)                      # range selectors
    s = re.sub(r"label_values\(\s*([a-zA-Z_:][\w:]*)\s*,\s*\w+\s*\)", r" \1 ", s)
    names = set(re.findall(r"(?<![\w$])[a-zA-Z_:][\w:]*", s))
    return names - PROMQL_WORDS


def test_promql_metric_names_finds_names_and_only_names():
    assert promql_metric_names('sum by (pid, comm) (rate(futextrace_lookups_total{comm!="x"}[$__rate_interval]))') \
        == {"futextrace_lookups_total"}
    assert promql_metric_names("a_total / on(instance) b{c=\"d\"} offset 5m") == {"a_total", "b"}
    assert promql_metric_names("label_values(futextrace_info, instance)") == {"futextrace_info"}


def served_names(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            names.add(line.split()[2])
        elif line and not line.startswith("#"):
            names.add(line.split("{")[0].split()[0])
    return names


def test_every_dashboard_query_names_a_served_metric(exporter):
    served = served_names(http_get(exporter.url))
    assert "futextrace_lookups_total" in served
    queries = dashboard_queries()
    assert len(queries) >= 10
    for q in queries:
        names = promql_metric_names(q)
        assert names, f"no metric in {q!r}"
        assert names <= served, f"{q!r} names {sorted(names - served)}, not served by the exporter"


def test_dashboard_queries_parse_and_answer_in_prometheus(prometheus):
    """Prometheus itself parses each panel query (Grafana's variables filled in)
    and, once it has scraped the exporter for a while, returns data for it."""
    assert wait_until(lambda: prometheus.value('up{job="futextrace"}') == 1, timeout=30 * SLOW)
    time.sleep(3)   # a few scrapes, so rate() has two points
    empty = []
    for q in dashboard_queries():
        if q.startswith("label_values("):
            continue
        promql = q.replace("$instance", ".*").replace("$__rate_interval", "10s")
        if not prometheus.query(promql):   # asserts the query parsed
            empty.append(q)
    # A query can be empty only where nothing happened (no resize pending in the window).
    assert all("resizes" in q for q in empty), empty
