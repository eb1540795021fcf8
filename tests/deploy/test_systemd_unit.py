"""deploy/systemd/futextrace.service: systemd accepts it, and its ExecStart really runs
with exactly its capabilities.

systemd is not PID 1 on the build machines, so the unit cannot be started there.
`systemd-analyze verify` checks it against a root that holds this machine's unit
tree and the unit's ExecStart binary. Then the unit's own ExecStart (read from the
file) runs as uid 0 with exactly the unit's capability set as bounding, permitted,
effective, inheritable and ambient set, and NoNewPrivileges, through util-linux's
setpriv: it must attach, answer a scrape of /metrics with the lookups of a workload
it traced, and detach on SIGTERM (the unit's KillSignal). Each capability is then
taken away in turn: without it `serve` must fail, or build a poorer kernel model.
Not emulated: ProtectSystem/ProtectHome/PrivateTmp and LimitMEMLOCK (it ran under
this machine's 8 MiB memlock limit: kernels 5.11+ do not charge BPF maps to it).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.deployfiles import (INSTALL_DIR, REPO, UNIT, unit_capabilities, unit_entries, unit_environment,
                                     unit_value)
from tests.helpers.host import bpf_missing, programs_left, wait_until
from tests.helpers.serve import progs_held_by

CAPABILITY_H = Path("/usr/include/linux/capability.h")   # linux-libc-dev, from libc6-dev
SYSTEMD_UNITS = Path("/usr/lib/systemd/system")
STARTUP_S = 180


def kernel_cap_numbers() -> dict[str, int]:
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^#define (CAP_\w+)\s+(\d+)\s*$", CAPABILITY_H.read_text(), re.M)}


def test_unit_file_is_what_the_readme_describes():
    argv = shlex.split(unit_value("ExecStart"))
    assert argv[0] == f"{INSTALL_DIR}/.venv/bin/futextrace" and argv[1] == "serve"
    assert unit_value("NoNewPrivileges") == "yes" and unit_value("KillSignal") == "SIGTERM"
    assert unit_value("CacheDirectory") == "futextrace"   # /var/cache/futextrace, the default cache
    assert ("WantedBy", "multi-user.target") in unit_entries()["Install"]
    known = kernel_cap_numbers()
    assert all(c in known for c in unit_capabilities()), (unit_capabilities(), CAPABILITY_H)


def verify(unit_text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """`systemd-analyze verify` on a root holding this machine's units, the unit and a
    copy of the venv's `futextrace` script where ExecStart names it."""
    root = tmp_path / "root"
    shutil.copytree(SYSTEMD_UNITS, root / SYSTEMD_UNITS.relative_to("/"), symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    (root / "etc/systemd/system/futextrace.service").write_text(unit_text)
    exe = root / INSTALL_DIR.lstrip("/") / ".venv/bin/futextrace"
    exe.parent.mkdir(parents=True)
    shutil.copy2(REPO / ".venv/bin/futextrace", exe)
    return subprocess.run(["systemd-analyze", "verify", "--man=no", f"--root={root}", "futextrace.service"],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze missing: run scripts/bootstrap.sh --vm")
def test_systemd_analyze_verify_accepts_the_unit(tmp_path):
    res = verify(UNIT.read_text(), tmp_path)
    # Unknown keys and bad values are only warnings (exit 0): any output fails.
    assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), res.stderr


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze missing: run scripts/bootstrap.sh --vm")
def test_systemd_analyze_verify_catches_a_misspelt_key(tmp_path):
    res = verify(UNIT.read_text().replace("CacheDirectory=", "CacheDirectry="), tmp_path)
    assert "Unknown key 'CacheDirectry'" in res.stderr, res.stderr


# --- the unit's ExecStart with exactly its capabilities -----------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()
    except OSError:
        return None


def cap_mask(caps: list[str]) -> int:
    numbers = kernel_cap_numbers()
    return sum(1 << numbers[c] for c in caps)


def status_caps(pid: int) -> dict[str, int]:
    text = Path(f"/proc/{pid}/status").read_text()
    return {k: int(v, 16) for k, v in re.findall(r"^(Cap\w+):\s+([0-9a-f]+)$", text, re.M)}


def exec_start(port: int) -> list[str]:
    """The unit's ExecStart, with the checkout in place of /opt/futextrace, a free loopback
    port, and every process labelled: on a busy machine the workload need not be among the
    unit's top N, and the test looks for its own series."""
    argv = shlex.split(unit_value("ExecStart"))
    argv[0] = str(REPO / Path(argv[0]).relative_to(INSTALL_DIR))
    for option, value in (("--listen", f"127.0.0.1:{port}"), ("--max-processes", "1000")):
        argv[argv.index(option) + 1] = value
    return argv


def with_caps(caps: list[str], argv: list[str]) -> list[str]:
    """setpriv as systemd would run the unit: uid 0, these capabilities in every set, no
    new privileges (NoNewPrivileges=yes), no supplementary groups."""
    spec = ",".join(["-all"] + [f"+{c.removeprefix('CAP_').lower()}" for c in caps])
    nnp = ["--no-new-privs"] if unit_value("NoNewPrivileges") == "yes" else []
    return ["setpriv", "--reuid=0", "--regid=0", "--clear-groups", f"--bounding-set={spec}",
            f"--inh-caps={spec}", f"--ambient-caps={spec}", *nnp, "--", *argv]


def environment(cache: Path) -> dict[str, str]:
    """A fresh cache, as CacheDirectory= gives a new host: the kernel model and the programs
    are built under these capabilities, not taken from a root run. The header tree is the
    one scripts/bootstrap.sh prepared (what /var/cache/futextrace holds on such a host)."""
    from futextrace.kernel.headers import find_header_tree
    tree = find_header_tree(prepare=True)
    assert tree is not None, "no kernel header tree: run scripts/bootstrap.sh"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(FUTEXTRACE_CACHE=str(cache), BCC_KERNEL_SOURCE=str(tree.path))
    env.update(unit_environment())
    return env


class Run:
    """The unit's ExecStart under `caps`, until it serves /metrics or exits."""

    def __init__(self, caps: list[str], tmp: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        self.cache = tmp / "cache"
        self.err = tmp / "serve.err"
        self.proc = subprocess.Popen(with_caps(caps, exec_start(self.port)), env=environment(self.cache),
                                     stdout=subprocess.DEVNULL, stderr=self.err.open("w"))
        self.serving = wait_until(lambda: self.proc.poll() is not None or "futextrace_info" in (scrape(self.url) or ""),
                                  timeout=STARTUP_S, step=0.5) and self.proc.poll() is None
        self.ours = progs_held_by(self.proc.pid) if self.serving else set()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(getattr(signal, unit_value("KillSignal")))
        try:
            return self.proc.wait(timeout=float(unit_value("TimeoutStopSec")))
        except subprocess.TimeoutExpired:
            self.proc.kill()    # what systemd does after TimeoutStopSec
            self.proc.wait()
            raise

    def model(self) -> dict:
        models = list((self.cache / "model").glob("*.json"))
        assert len(models) == 1, models
        return json.loads(models[0].read_text())


def available(caps: list[str]) -> list[str]:
    """Those of `caps` this test process can hand on (its own bounding set)."""
    have = status_caps(os.getpid())["CapBnd"]
    numbers = kernel_cap_numbers()
    return [c for c in caps if have >> numbers[c] & 1]


needs_root_bpf = [pytest.mark.root,
                  pytest.mark.skipif(bpf_missing() is not None, reason=bpf_missing() or ""),
                  pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv (util-linux)"),
                  pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    caps = unit_capabilities()
    missing = sorted(set(caps) - set(available(caps)))
    assert not missing, f"this test process lacks {missing}: the unit's set cannot be tried here"
    run = Run(caps, tmp_path_factory.mktemp("unit"))
    yield run
    if run.proc.poll() is None:
        run.stop()


def without_topology(model: dict) -> dict:
    return {k: v for k, v in model.items() if k != "topology"}   # re-read on every start


def with_marks(marks):
    def wrap(fn):
        for m in marks:
            fn = m(fn)
        return fn
    return wrap


@with_marks(needs_root_bpf)
def test_exec_start_serves_with_exactly_the_units_capabilities(full_run):
    run = full_run
    assert run.serving, run.err.read_text()
    mask = cap_mask(unit_capabilities())
    caps = status_caps(run.proc.pid)
    assert caps == {"CapInh": mask, "CapPrm": mask, "CapEff": mask, "CapBnd": mask, "CapAmb": mask}, caps
    assert "NoNewPrivs:\t1" in Path(f"/proc/{run.proc.pid}/status").read_text()
    assert run.ours, "serve holds no BPF program"
    # A workload with a known number of lookups, counted by the exporter under these caps.
    from futextrace.workload.build import workload_path
    done = subprocess.run([str(workload_path()), "-t", "2", "-f", "8", "-n", "3000", "-b", "64"],
                          capture_output=True, text=True, timeout=120, check=True)
    wl = json.loads(done.stdout.strip().splitlines()[-1])
    series = f'futextrace_lookups_total{{comm="{Path(workload_path()).name[:15]}",hash="private",pid="{wl["pid"]}"}} '

    def counted():
        line = next((l for l in (scrape(run.url) or "").splitlines() if l.startswith(series)), None)
        return line is not None and float(line.rsplit(" ", 1)[1]) >= wl["total_ops"]
    assert wait_until(counted, timeout=60, step=1.0), (wl, scrape(run.url))
    # CAP_SYSLOG's share: kallsyms showed the futex symbols' addresses to the model.
    assert run.model()["futex_symbols"], "kallsyms showed no futex symbol addresses"
    assert run.stop() == 0, run.err.read_text()
    assert not programs_left(run.ours), "programs still loaded after SIGTERM"


@with_marks(needs_root_bpf)
@pytest.mark.parametrize("dropped", unit_capabilities())
def test_each_capability_is_needed(dropped, full_run, tmp_path):
    """Without any one of the unit's capabilities `serve` fails with an error, or
    starts with a poorer view of the kernel (the model it built differs)."""
    run = Run([c for c in unit_capabilities() if c != dropped], tmp_path)
    try:
        if not run.serving:
            err = run.err.read_text()
            assert run.proc.returncode not in (0, None) and "Traceback" not in err, err
            assert err.strip().splitlines()[-1].startswith("futextrace: error: "), err
            return
        assert run.stop() == 0
        assert not programs_left(run.ours)
        assert without_topology(run.model()) != without_topology(full_run.model()), \
            f"serve runs without {dropped} and sees the same kernel: the unit does not need it here"
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()
