"""The exporter and the Prometheus server the serve tests start, and how they wait (tests/host/test_serve*.py)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.host import FT, wait_until

SERVE_MARKS = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
              pytest.mark.skipif(not shutil.which("bpftool"), reason="needs bpftool"),
              pytest.mark.skipif(not Path("/sys/kernel/btf/vmlinux").exists(), reason="needs BTF"),
              pytest.mark.timeout(1200)]   # the first test also starts the exporter (minutes under TCG)


PROMETHEUS = shutil.which("prometheus")
STARTUP_S = 480 if os.environ.get("FUTEXTRACE_IN_VM") else 120
SLOW = 4 if os.environ.get("FUTEXTRACE_IN_VM") else 1   # QEMU/TCG guests: everything waits longer


def prog_ids() -> set[int]:
    out = subprocess.run(["bpftool", "-j", "prog", "list"], capture_output=True, text=True,
                         check=True).stdout
    return {p["id"] for p in json.loads(out or "[]")}


def links_held_by(pid: int) -> set[int]:
    """BPF links (attachments: tp_btf, raw tracepoints, iterators) the process
    holds a file descriptor of (fdinfo's link_id)."""
    return _fdinfo_ids(pid, "link_id:")


def progs_held_by(pid: int) -> set[int]:
    """BPF programs the process holds a file descriptor of (fdinfo's prog_id)."""
    return _fdinfo_ids(pid, "prog_id:")


def _fdinfo_ids(pid: int, field: str) -> set[int]:
    """The ids after `field` in the process's fdinfo files."""
    ids = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return ids
    for fd in fds:
        try:
            text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        ids |= {int(l.split()[1]) for l in text.splitlines() if l.startswith(field)}
    return ids


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5.0) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read().decode()
    except OSError:
        return None


class Exporter:
    def __init__(self, tmp: Path, *args: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        self.err = tmp / f"serve-{self.port}.err"
        self.proc = subprocess.Popen([*FT, "serve", "--listen", f"127.0.0.1:{self.port}", *args],
                                     stdout=subprocess.DEVNULL, stderr=self.err.open("w"))
        # Compiling with BCC takes minutes in a TCG guest on a loaded host.
        ready = wait_until(lambda: self.proc.poll() is not None or "futextrace_info" in (http_get(self.url) or ""),
                           timeout=STARTUP_S)
        if not (ready and self.proc.poll() is None):
            self.proc.kill()    # a failed start must not leave an exporter attached
            self.proc.wait()
            raise AssertionError(self.err.read_text())
        self.ours = progs_held_by(self.proc.pid)

    def stop(self, sig=signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=60)


class Prometheus:
    def __init__(self, tmp: Path, target_port: int):
        self.port = free_port()
        cfg = tmp / "prometheus.yml"
        cfg.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                       "scrape_configs:\n  - job_name: futextrace\n    static_configs:\n"
                       f"      - targets: ['127.0.0.1:{target_port}']\n")
        self.log = tmp / "prometheus.log"
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=self.log.open("w"))
        ready = wait_until(lambda: self.proc.poll() is not None or
                           http_get(f"http://127.0.0.1:{self.port}/-/ready") is not None, timeout=60 * SLOW)
        assert ready and self.proc.poll() is None, self.log.read_text()[-2000:]

    def query(self, promql: str) -> list[dict]:
        q = urllib.parse.urlencode({"query": promql})
        body = http_get(f"http://127.0.0.1:{self.port}/api/v1/query?{q}")
        data = json.loads(body) if body else {"status": "unreachable"}
        assert data["status"] == "success", data
        return data["data"]["result"]

    def value(self, promql: str) -> float | None:
        r = self.query(promql)
        return float(r[0]["value"][1]) if r else None

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
