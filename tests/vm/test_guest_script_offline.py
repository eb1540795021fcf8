"""The in-guest command line, without booting anything: the test files and the
tests left out in guests still exist (a rename would silently run nothing or
run everything), and a command given to a guest replaces pytest."""
import re
from pathlib import Path

import kernels
import vmguest


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
    script = vmguest.GUEST_SCRIPT.format(out=tmp_path, cache="/c", repo=vmguest.REPO, cpus=4, nodes=2,
                                         command="echo hi")
    assert "\n    echo hi\n" in script and "-m pytest" not in script
    assert script.rstrip().endswith(f"mv {tmp_path}/status.tmp {tmp_path}/status")
