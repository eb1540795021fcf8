"""tests/vm/progress.py without a guest: the plugin's lines and what the host reads from them.

The live case runs a real pytest with the plugin on a test that hangs and kills
it with SIGKILL, as the host's time limit kills a guest: no junit, no summary,
only the progress file, which must name the hung test.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import progress

HERE = Path(__file__).resolve().parent


def test_finished_and_running_tests():
    text = ("session 100.0\n"
            "start 101.0 tests/host/a.py::test_one\n"
            "end 103.5 passed tests/host/a.py::test_one\n"
            "start 104.0 tests/host/a.py::test_two[x]\n"
            "end 104.0 skipped tests/host/a.py::test_two[x]\n"
            "start 105.0 tests/host/b.py::test_bad[args3-cannot start]\n"
            "end 106.0 passed tests/host/b.py::test_bad[args3-cannot start]\n"
            "start 110.0 tests/host/b.py::test_hangs[a b]\n")
    p = progress.parse_progress(text)
    assert p.finished == [("tests/host/a.py::test_one", "passed", 2.5),
                          ("tests/host/a.py::test_two[x]", "skipped", 0.0),
                          ("tests/host/b.py::test_bad[args3-cannot start]", "passed", 1.0)]
    assert p.hung() == "tests/host/b.py::test_hangs[a b] (started 10 s into the run, never finished)"
    assert p.slowest(1) == [("tests/host/a.py::test_one", "passed", 2.5)]
    assert p.summary() == ("tests finished: 2 passed, 1 skipped; still running: "
                           "tests/host/b.py::test_hangs[a b] (started 10 s into the run, never finished)")


def test_torn_last_line_and_clean_end():
    p = progress.parse_progress("session 1\nstart 2 t::a\nend 3 failed t::a\nstart 4 t::b\nend 4.")
    assert p.finished == [("t::a", "failed", 1.0)]
    assert p.running == [("t::b", 4.0)]
    done = progress.parse_progress("session 1\nstart 2 t::a\nend 3 passed t::a\n")
    assert done.hung() is None and done.summary() == "tests finished: 1 passed"


def test_missing_file_is_none(tmp_path):
    assert progress.read_progress(tmp_path / "progress.log") is None


def test_plugin_names_the_test_a_kill_interrupted(tmp_path):
    (tmp_path / "test_sample.py").write_text(textwrap.dedent("""\
        import time
        import pytest

        def test_quick():
            pass

        @pytest.mark.skip(reason="not here")
        def test_skipped():
            pass

        def test_broken_fixture(missing_fixture):
            pass

        def test_hangs():
            open("started", "w").close()
            time.sleep(600)
        """))
    log = tmp_path / "progress.log"
    env = {**os.environ, progress.ENV: str(log), "PYTHONPATH": str(HERE)}
    cmd = [sys.executable, "-m", "pytest", "-p", "progress", "-p", "no:cacheprovider", "-q",
           "-o", "addopts=", "test_sample.py"]
    p = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):                 # up to 60 s for the hanging test to begin
            if (tmp_path / "started").exists() or p.poll() is not None:
                break
            subprocess.run(["sleep", "0.1"])
    finally:
        p.kill()
        p.wait()
    got = progress.read_progress(log)
    assert got is not None, "the plugin wrote nothing"
    assert [(n, o) for n, o, _ in got.finished] == [
        ("test_sample.py::test_quick", "passed"), ("test_sample.py::test_skipped", "skipped"),
        ("test_sample.py::test_broken_fixture", "error")]
    assert got.hung().startswith("test_sample.py::test_hangs (started ")
