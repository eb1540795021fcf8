"""What a warm start leaves out (issue 44): the BTF hashed once per boot
(kernel/btfdigest.py), pyroute2's connector without the rest of the package
(procs/connector_import.py), and `record`'s start without numpy or elftools."""
from __future__ import annotations

import hashlib
import subprocess
import sys

from futextrace.kernel import btfdigest


def run_python(code: str) -> str:
    """In a fresh interpreter: what is imported is the point."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def fake_running_btf(tmp_path, monkeypatch, content: bytes, boot: str):
    btf, boot_id = tmp_path / "vmlinux", tmp_path / "boot_id"
    btf.write_bytes(content)
    boot_id.write_text(boot + "\n")
    monkeypatch.setattr(btfdigest, "VMLINUX_BTF", str(btf))
    monkeypatch.setattr(btfdigest, "BOOT_ID", boot_id)
    return btf, boot_id


def test_the_running_btf_is_hashed_once_per_boot(tmp_path, monkeypatch):
    btf, boot_id = fake_running_btf(tmp_path, monkeypatch, b"a" * 64, "boot-1")
    memo = tmp_path / "cache"
    assert btfdigest.sha256_of(str(btf), memo) == hashlib.sha256(b"a" * 64).hexdigest()
    assert (memo / btfdigest.MEMO_NAME).exists()
    btf.write_bytes(b"b" * 64)          # same boot, same size: the kept digest
    assert btfdigest.sha256_of(str(btf), memo) == hashlib.sha256(b"a" * 64).hexdigest()
    boot_id.write_text("boot-2\n")      # another boot: hashed again
    assert btfdigest.sha256_of(str(btf), memo) == hashlib.sha256(b"b" * 64).hexdigest()
    btf.write_bytes(b"c" * 65)          # another size: hashed again
    assert btfdigest.sha256_of(str(btf), memo) == hashlib.sha256(b"c" * 65).hexdigest()


def test_a_damaged_memo_or_another_file_is_hashed(tmp_path, monkeypatch):
    btf, _ = fake_running_btf(tmp_path, monkeypatch, b"a" * 64, "boot-1")
    memo = tmp_path / "cache"
    memo.mkdir()
    (memo / btfdigest.MEMO_NAME).write_text(f"boot-1 64 {'z' * 64}\n")
    assert btfdigest.sha256_of(str(btf), memo) == hashlib.sha256(b"a" * 64).hexdigest()
    other = tmp_path / "other"
    other.write_bytes(b"x")
    assert btfdigest.sha256_of(str(other), tmp_path / "none") == hashlib.sha256(b"x").hexdigest()
    assert not (tmp_path / "none").exists()
    assert btfdigest.sha256_of(str(tmp_path / "missing"), memo) is None


def test_the_proc_connector_comes_without_the_rest_of_pyroute2():
    out = run_python(
        "import sys\n"
        "from futextrace.procs.connector_import import proc_connector\n"
        "sock, marshal, err = proc_connector()\n"
        "print(sock.__name__, marshal.__name__, err.__name__)\n"
        "print(sorted({'pyroute2.ipdb', 'pyroute2.ndb.main', 'pyroute2.iproute'} & set(sys.modules)))\n"
        "from pyroute2 import IPRoute\n"          # anyone else still gets the whole package
        "import pyroute2\n"
        "print(IPRoute.__name__, bool(pyroute2.__version__), 'pyroute2.ndb.main' in sys.modules)\n")
    assert out.splitlines() == ["ProcEventSocket ProcEventMarshal NetlinkError", "[]", "IPRoute True True"]


def test_record_attaches_without_numpy_elftools_or_pyroute2():
    """Everything `record -p` imports before "Tracing": its command module and
    what the session and the recorder's start import."""
    out = run_python(
        "import sys\n"
        "import futextrace.commands.record, futextrace.record.recorder, futextrace.record.session\n"
        "print(sorted(m for m in ('numpy', 'elftools', 'pyroute2', 'matplotlib') if m in sys.modules))\n")
    assert out.strip() == "[]"
