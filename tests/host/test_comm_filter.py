"""`record --comm NAME` follows processes by name through the proc connector.

Two copies of one program, named differently, both started after futextrace
attached: the one named NAME is traced, with exactly the lookups it made (its
own account: futex i called 1 + i % 3 times), the other not at all. The
recording says how names were matched.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.host import needs_bpf, needs_private_hash
from tests.helpers.host import FT

pytestmark = [pytest.mark.root, needs_bpf, needs_private_hash]
DATA = Path(__file__).parent.parent / "data"
NFUTEXES = 3000
DELAY_MS = 300   # the program waits before its calls: the exec is seen by then


def test_comm_resolved_to_tgids_as_processes_exec(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler: run scripts/bootstrap.sh"
    yes, no = tmp_path / "ftcomm-yes", tmp_path / "ftcomm-no"
    subprocess.run([cc, "-O2", "-o", str(yes), str(DATA / "manyfutexes.c")], check=True)
    shutil.copy(yes, no)
    rec_path = tmp_path / "rec.json"
    tracer = subprocess.Popen([*FT, "record", "-q", "--comm", yes.name, "--json", str(rec_path)],
                              stderr=subprocess.PIPE, text=True)
    try:
        assert "Tracing" in tracer.stderr.readline()      # attached
        for exe in (yes, no):
            subprocess.run([str(exe), str(tmp_path / f"{exe.name}.json"), str(NFUTEXES), str(DELAY_MS)],
                           check=True, timeout=120)
    finally:
        tracer.send_signal(2)
        _, err = tracer.communicate(timeout=300)
    assert tracer.returncode == 0, err
    rec = json.loads(rec_path.read_text())
    wl_yes = json.loads((tmp_path / f"{yes.name}.json").read_text())
    wl_no = json.loads((tmp_path / f"{no.name}.json").read_text())
    assert "proc connector" in rec["method"]["comm_filter"]
    procs = {p["pid"]: p for p in rec["processes"]}
    assert wl_no["pid"] not in procs
    # futex i 1 + i % 3 times, the hot futex once after each (manyfutexes.c)
    assert procs[wl_yes["pid"]]["lookups"] == sum(1 + i % 3 for i in range(NFUTEXES)) + NFUTEXES
    assert set(procs) == {wl_yes["pid"]}
