"""The in-guest command line, without booting anything: the test files and the
tests left out in guests still exist (a rename would silently run nothing or
run everything), and a command given to a guest replaces pytest."""
import os
import re
import subprocess
import time
from pathlib import Path

import kernels
import vmguest
import vmkernels


def test_guest_tests_and_deselected_tests_exist():
    for path in vmguest.GUEST_TESTS.split():
        assert (vmguest.REPO / path).is_file(), path
    for nodeid in vmguest.GUEST_DESELECT:
        path, _, name = nodeid.partition("::")
        name, _, param = name.partition("[")          # a parametrized case: its function
        assert path in vmguest.GUEST_TESTS.split(), nodeid
        assert re.search(rf"^def {name}\(", (vmguest.REPO / path).read_text(), re.M), nodeid
        assert not param or param.rstrip("]") in (vmguest.REPO / path).read_text(), nodeid


def test_pytest_command_deselects_unless_tests_are_named(monkeypatch):
    spec = kernels.CI[0]
    monkeypatch.delenv("FUTEXTRACE_VM_TESTS", raising=False)
    cmd = vmguest.pytest_command(spec, Path("/out"), "-k doctor")
    assert cmd.count("--deselect ") == len(vmguest.GUEST_DESELECT)
    assert "tests/host/test_fidelity.py" in cmd and "tests/host/test_pi_refcount.py" in cmd
    assert f"timeout -s INT -k 60 {spec.timeout_s - 120} " in cmd and cmd.endswith("-k doctor")
    monkeypatch.setenv("FUTEXTRACE_VM_TESTS", "tests/host")
    assert "--deselect" not in vmguest.pytest_command(spec, Path("/out"))


def test_a_command_replaces_pytest(tmp_path):
    script = vmguest.GUEST_SCRIPT.format(out=tmp_path, guest_cache="/c", repo=vmguest.REPO, cpus=4, nodes=2,
                                         command="echo hi")
    assert "\n    echo hi\n" in script and "-m pytest" not in script
    assert script.rstrip().endswith(f"mv {tmp_path}/status.tmp {tmp_path}/status")


def test_the_guest_cache_is_its_own_whatever_the_hosts(tmp_path):
    """With FUTEXTRACE_CACHE elsewhere on the host (a fresh-machine check), the
    guest still gets a cache it can write (its tmpfs /var/cache) and the host's
    header tree at that cache's place: a read-only cache made every recording
    in the guest compile, and both guests ran out of time."""
    host_cache = tmp_path / "elsewhere"
    (host_cache / "headers").mkdir(parents=True)
    kernel = vmkernels.Kernel(release="6.18.15+deb13-amd64", root=tmp_path / "k")
    (tmp_path / "k" / "boot").mkdir(parents=True)
    (tmp_path / "k" / "boot" / f"vmlinuz-{kernel.release}").touch()
    cmd = vmguest.vng_command(kernel, kernels.CI[0], tmp_path / "out", host_cache)
    assert "--rodir=/var/cache/futextrace/headers=" + str(host_cache / "headers") in cmd
    assert not any(str(host_cache) in a for a in cmd if not a.startswith("--rodir="))
    script = vmguest.GUEST_SCRIPT.format(out=tmp_path, guest_cache=vmguest.GUEST_CACHE, repo=vmguest.REPO,
                                         cpus=4, nodes=1, command="true")
    assert "export FUTEXTRACE_CACHE=/var/cache/futextrace " in script


def test_a_hung_boot_is_stopped_with_its_process_group(tmp_path, monkeypatch):
    """No guest.log within the boot limit: SIGTERM reaches the whole group under
    `timeout` (QEMU is vng's child there), and the run reads as a hung boot."""
    monkeypatch.setattr(vmguest, "BOOT_LIMIT_S", 1)
    grandchild = tmp_path / "grandchild.pid"
    t0 = time.monotonic()
    p = subprocess.Popen(["timeout", "--kill-after=5", "60", "sh", "-c",
                          f"sleep 60 & echo $! > {grandchild}; wait"])
    status, _, hung = vmguest._wait_watching_boot(p, tmp_path / "guest.log", t0)
    assert hung and time.monotonic() - t0 < 10
    assert os.waitstatus_to_exitcode(status) != 0
    time.sleep(0.5)
    pid = int(grandchild.read_text())
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_a_guest_whose_script_started_runs_to_its_end(tmp_path, monkeypatch):
    monkeypatch.setattr(vmguest, "BOOT_LIMIT_S", 1)
    (tmp_path / "guest.log").write_text("guest: started\n")
    t0 = time.monotonic()
    p = subprocess.Popen(["sh", "-c", "sleep 4; exit 3"])
    status, _, hung = vmguest._wait_watching_boot(p, tmp_path / "guest.log", t0)
    assert not hung and time.monotonic() - t0 >= 4
    assert os.waitstatus_to_exitcode(status) == 3
