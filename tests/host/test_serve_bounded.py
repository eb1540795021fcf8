"""`futextrace serve` forgets exited processes, on the real kernel.

A churn of many short-lived multi-threaded processes (threads born and dying,
a private hash each, resizes) runs under a real exporter. While they run,
the exporter tracks them all and its recorder retains their history; once
they are gone for the grace period, the processes it tracks, the series it
serves and the history it retains must be back to a small bound, and the
system-wide lookup counter must still add up: their lookups are folded, not
lost (a later run's lookups still show up in full on top of theirs).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.host import wait_until
from tests.helpers.serve import SLOW, Exporter, http_get

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
              pytest.mark.skipif(not shutil.which("bpftool"), reason="needs bpftool"),
              pytest.mark.skipif(not Path("/sys/kernel/btf/vmlinux").exists(), reason="needs BTF"),
              pytest.mark.timeout(1200)]

PROCESSES = 40
GRACE_S = 8 * SLOW
MAX_PROCESSES = 3


def metrics(url: str) -> dict:
    """{(name, frozenset(labels)): value} of one scrape."""
    text = http_get(url, timeout=30) or ""
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def exporter_state(m: dict) -> dict:
    """The exporter's own figures, for failure messages."""
    return {k: v for k, v in m.items() if k[0].startswith(("futextrace_exporter", "futextrace_lookups"))}


def value(m: dict, name: str, **labels) -> float:
    return m.get((name, frozenset(labels.items())), 0.0)


def run_workload(path: str) -> dict:
    out = subprocess.run([path, "-t", "4", "-f", "16", "-n", "300"], capture_output=True,
                         text=True, timeout=120 * SLOW, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_exited_processes_are_forgotten_after_the_grace_period(tmp_path):
    from futextrace.workload.build import workload_path
    # A name of its own: other tests on this host run the workload too.
    path = str(tmp_path / f"ftchurn{os.getpid() % 100000}")
    shutil.copy(workload_path(), path)
    exp = Exporter(tmp_path, "--comm", Path(path).name[:15], "--max-processes", str(MAX_PROCESSES),
                   "--grace", str(GRACE_S), "--min-interval", "0.2")
    try:
        with ThreadPoolExecutor(8) as pool:
            runs = list(pool.map(run_workload, [path] * PROCESSES))
        assert len({r["pid"] for r in runs}) == PROCESSES
        ops = sum(r["total_ops"] for r in runs)
        # Within the grace period the exporter still holds them: what is
        # measured below does see the churn (this is what must shrink).
        during = metrics(exp.url)
        time.sleep(0.5)
        during = metrics(exp.url)
        held = value(during, "futextrace_exporter_retained", kind="comms")
        assert held >= PROCESSES / 2, exporter_state(during)
        assert value(during, "futextrace_exporter_processes", state="tracked") >= PROCESSES / 2

        def forgotten():
            m = metrics(exp.url)
            return (value(m, "futextrace_exporter_retained", kind="comms") == 0
                    and value(m, "futextrace_exporter_retained", kind="events") == 0
                    and value(m, "futextrace_exporter_processes", state="tracked") == 0)
        assert wait_until(forgotten, timeout=GRACE_S * 3 + 30 * SLOW, step=0.5), \
            exporter_state(metrics(exp.url))
        after = metrics(exp.url)
        lookups_series = [k for k in after if k[0] == "futextrace_lookups_total"]
        assert len(lookups_series) <= 2, lookups_series   # comm="other", one per hash
        assert value(after, "futextrace_exporter_retained", kind="forgotten") <= PROCESSES
        system = value(after, "futextrace_system_lookups_total", hash="private")
        assert system >= ops, (system, ops)

        # Folded, not lost: one more run's lookups add on top in full.
        again = run_workload(path)
        def counted():
            return value(metrics(exp.url), "futextrace_system_lookups_total", hash="private")
        assert wait_until(lambda: counted() >= system + again["total_ops"], timeout=30 * SLOW, step=0.5), \
            (counted(), system, again["total_ops"])
    finally:
        exp.stop()
