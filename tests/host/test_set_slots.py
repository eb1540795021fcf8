"""`futextrace run --slots` and `futextrace set -p`, against the kernel's own answer:
each target prints its own PR_FUTEX_HASH GET_SLOTS (tests/data/waiter.c, t_slots.c).
The live target has a main thread blocked in FUTEX_WAIT while others make futex calls."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from futextrace.workload.build import workload_path
from tests.helpers.host import FT, REPO, needs_bpf, needs_private_hash, one_line_error
pytestmark = [needs_private_hash,
              pytest.mark.skipif(os.geteuid() != 0, reason="ptrace of another user's process needs root"),
              pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 only")]
SLOTS_C = "#include <stdio.h>\n#include <sys/prctl.h>\nint main(){printf(\"slots=%d\\n\",prctl(78,2,0,0,0));return 7;}\n"


@pytest.fixture(scope="module")
def bins(tmp_path_factory):
    d = tmp_path_factory.mktemp("bins")
    (d / "t_slots.c").write_text(SLOTS_C)
    out = {"dynamic": d / "t_dyn", "static": d / "t_static", "waiter": d / "waiter",
           "musl-static": d / "t_musl"}
    subprocess.run(["gcc", "-O2", "-o", out["dynamic"], d / "t_slots.c"], check=True)
    subprocess.run(["gcc", "-O2", "-static", "-o", out["static"], d / "t_slots.c"], check=True)
    if shutil.which("musl-gcc"):    # no rt_sigreturn sequence in it: the pop-%rax fallback
        subprocess.run(["musl-gcc", "-O2", "-static", "-o", out["musl-static"], d / "t_slots.c"], check=True)
    subprocess.run(["gcc", "-O2", "-pthread", "-o", out["waiter"], REPO / "tests/data/waiter.c"], check=True)
    return out


def ft(*args, **kw):
    """futextrace ARGS; kw: subprocess.run's (`input` for a target that reads stdin)."""
    return subprocess.run(FT + list(args), capture_output=True, text=True, timeout=60, cwd=REPO, **kw)


@pytest.mark.parametrize("kind", ["dynamic", "static", "musl-static"])
@pytest.mark.parametrize("size", ["2", "64", "4096", "global"])
def test_run_sets_the_size_before_the_program_runs(bins, kind, size):
    if not bins[kind].exists():
        pytest.skip("needs musl-gcc (musl-tools, scripts/bootstrap.sh --vm)")
    flag = ["--global"] if size == "global" else ["--slots", size]
    r = ft("run", *flag, "--", str(bins[kind]))
    assert r.returncode == 7, r.stderr          # the program's own exit status
    assert r.stdout.strip() == f"slots={0 if size == 'global' else size}", r.stdout + r.stderr


@pytest.mark.parametrize("flag, want", [(["--slots", "64"], 64), (["--slots", "2"], 2),
                                        (["--global"], 0), (["--auto"], None)])
def test_the_builtin_workload_under_run(flag, want):
    """Its own GET_SLOTS before its threads start and after they joined: a custom size
    stays through thread creation; the automatic one grows as the kernel sizes it."""
    r = ft("run", *flag, "--", str(workload_path()), "-t", "2", "-f", "16", "-r", "0.2")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    if want is None:
        assert got["slots_before_threads"] == 0 and got["slots_after"] >= 16, got
    else:
        assert (got["slots_before_threads"], got["slots_after"]) == (want, want), got


def test_children_get_the_size_only_when_asked(bins, tmp_path):
    script = tmp_path / "tree.sh"
    script.write_text(f"#!/bin/sh\n{bins['dynamic']}\n{bins['static']}\n( {bins['dynamic']} ) &\nwait\n")
    script.chmod(0o755)
    followed = ft("run", "--slots", "32", "--children", "--", str(script))
    alone = ft("run", "--slots", "32", "--", str(script))
    assert followed.returncode == 0 and alone.returncode == 0, followed.stderr + alone.stderr
    assert followed.stdout.split() == ["slots=32"] * 3, followed.stdout
    assert alone.stdout.split() == ["slots=0"] * 3, alone.stdout   # not inherited (futex_mm_init)
    assert "32 buckets set in" in followed.stderr, followed.stderr


def test_run_auto_sets_nothing(bins):
    r = ft("run", "--auto", "--", str(bins["dynamic"]))
    assert (r.returncode, r.stdout.strip()) == (7, "slots=0"), r.stderr


def test_run_refused_size_does_not_start_the_program(bins):
    r = ft("run", "--slots", "100", "--", str(bins["dynamic"]))
    assert r.returncode == 6 and r.stdout == "", r.stdout
    assert r.stderr.count("\n") == 1 and "EINVAL" in r.stderr and "not started" in r.stderr, r.stderr


def test_run_keeps_the_answer_in_json(bins, tmp_path):
    out = tmp_path / "a.json"
    r = ft("run", "--slots", "32", "--json", str(out), "--", str(bins["dynamic"]))
    doc = json.loads(out.read_text())
    assert r.returncode == 7 and doc["after_slots"] == 32 and doc["result"] == "ok", doc


class Waiter:
    """The live target: a main thread in FUTEX_WAIT, four threads making FUTEX_WAKE calls."""

    def __init__(self, binary: Path, *args: str):
        self.p = subprocess.Popen([str(binary), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.pid = int(self.p.stdout.readline().split()[1])
        deadline = time.time() + 10
        while self.syscall() != "202" and time.time() < deadline:   # in futex(): blocked
            time.sleep(0.02)

    def syscall(self) -> str:
        return Path(f"/proc/{self.pid}/task/{self.pid}/syscall").read_text().split()[0]

    def finish(self) -> dict:
        self.p.stdin.write("wake\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline().split()
        self.p.wait(timeout=10)
        return dict(kv.split("=") for kv in line[1:])

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


@pytest.fixture
def waiter(bins):
    w = Waiter(bins["waiter"])
    yield w
    w.kill()


def test_set_on_a_live_process_restarts_its_wait(waiter):
    r = ft("set", "-p", str(waiter.pid), "--slots", "256")
    assert r.returncode == 0, r.stderr
    assert "-> 256 buckets" in r.stdout, r.stdout
    time.sleep(0.2)
    assert waiter.syscall() == "202", "the main thread should be back in its futex wait"
    got = waiter.finish()
    assert got == {"ret": "0", "errno": "0", "eintr": "0", "usr1": "0", "slots": "256", "xmm": "OK"}, got


def test_set_twice_and_shrink(waiter):
    for n in ("1024", "4"):
        assert ft("set", "-p", str(waiter.pid), "--slots", n).returncode == 0
    assert waiter.finish()["slots"] == "4"


def test_a_signal_sent_during_the_injection_is_delivered(waiter):
    env = dict(os.environ, FUTEXTRACE_INJECT_PAUSE="regs-set-1:1.0")
    p = subprocess.Popen(FT + ["set", "-p", str(waiter.pid), "--slots", "64"], cwd=REPO, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert "test pause" in p.stdout.readline()
    os.kill(waiter.pid, signal.SIGUSR1)        # the thread is held by futextrace right now
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    got = waiter.finish()
    assert (got["usr1"], got["eintr"], got["slots"], got["xmm"]) == ("1", "0", "64", "OK"), got


@pytest.mark.parametrize("stage", ["stopped", "regs-set-2", "regs-set-1", "in-call-1"])
def test_futextrace_killed_mid_injection_leaves_the_target_running(waiter, stage):
    env = dict(os.environ, FUTEXTRACE_INJECT_PAUSE=f"{stage}:30")
    p = subprocess.Popen(FT + ["set", "-p", str(waiter.pid), "--slots", "128"], cwd=REPO, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert "test pause" in p.stdout.readline()
    p.kill()
    p.wait()
    time.sleep(0.3)
    state = Path(f"/proc/{waiter.pid}/status").read_text()
    assert "TracerPid:\t0" in state and "State:\tS" in state, state
    got = waiter.finish()
    assert (got["ret"], got["eintr"], got["xmm"]) == ("0", "0", "OK"), got
    # Killed once the SET call's registers were set, the thread finishes it by itself;
    # killed before (at the stop, or at the GET before it) nothing was set.
    assert (got["slots"] == "128") == stage.endswith("-1"), got


def one_line_refusal(r, code: int, words: str):
    assert words in one_line_error(r, code), r.stderr


def test_refusals_of_the_kernel(waiter):
    one_line_refusal(ft("set", "-p", str(waiter.pid), "--slots", "100"), 6, "EINVAL")
    assert ft("set", "-p", str(waiter.pid), "--global").returncode == 0
    one_line_refusal(ft("set", "-p", str(waiter.pid), "--slots", "16"), 6, "EBUSY")
    assert waiter.finish()["slots"] == "0"


def test_refuses_a_seccomp_filtered_process_unless_forced(bins):
    w = Waiter(bins["waiter"], "seccomp")
    try:
        one_line_refusal(ft("set", "-p", str(w.pid), "--slots", "32"), 4, "seccomp filter")
        assert ft("set", "-p", str(w.pid), "--slots", "32", "--force").returncode == 0
        assert w.finish()["slots"] == "32"
    finally:
        w.kill()


@pytest.mark.skipif(not Path("/usr/bin/strace").exists(), reason="needs strace (scripts/bootstrap.sh --vm)")
def test_refuses_a_process_under_strace(waiter):
    s = subprocess.Popen(["strace", "-p", str(waiter.pid), "-o", "/dev/null"], stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while "TracerPid:\t0" in Path(f"/proc/{waiter.pid}/status").read_text() and time.time() < deadline:
            time.sleep(0.05)
        one_line_refusal(ft("set", "-p", str(waiter.pid), "--slots", "32"), 4, "already traced by strace")
    finally:
        s.terminate()
        s.wait()
    assert waiter.finish()["slots"] != "32"


def test_refuses_a_zombie_a_kernel_thread_and_a_missing_pid():
    z = subprocess.Popen(["true"])
    while "State:\tZ" not in Path(f"/proc/{z.pid}/status").read_text():
        time.sleep(0.01)
    try:
        one_line_refusal(ft("set", "-p", str(z.pid), "--slots", "32"), 4, "zombie")
    finally:
        z.wait()
    one_line_refusal(ft("set", "-p", "2", "--slots", "32"), 4, "kernel thread")
    one_line_refusal(ft("set", "-p", "999999999", "--slots", "32"), 4, "no process with PID")


def test_dry_run_changes_nothing(waiter):
    r = ft("set", "-p", str(waiter.pid), "--slots", "512", "--dry-run")
    assert r.returncode == 0 and "nothing done" in r.stdout, r.stderr
    assert waiter.finish()["slots"] != "512"


@needs_bpf
def test_record_slots_keeps_the_kernels_answer(bins, tmp_path):
    out = tmp_path / "r.json"
    r = ft("record", "--slots", "512", "-q", "--json", str(out), "--", str(bins["waiter"]),
           input="wake\n")
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    got = doc["command"]["futex_hash_set"]
    assert (got["result"], got["after_slots"]) == ("ok", 512), got
    assert "slots=512" in r.stderr + r.stdout      # the program's own GET_SLOTS (its stdout: stderr)
