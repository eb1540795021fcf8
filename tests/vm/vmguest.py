"""Boot one Debian kernel under virtme-ng (QEMU TCG) and run the in-guest test suite.

The guest runs on the host's root filesystem, read-only through 9p. Results come
back through a --rwdir shared directory, because vng does not pass the guest
command's exit status back in this setup: the guest writes `status` last, so a
missing file means the guest died or timed out.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import progress
import vmkernels

REPO = Path(__file__).resolve().parents[2]
# Kernel log lines that fail a guest run however the tests went.
BAD_DMESG = re.compile(r"BUG:|WARNING:|Oops|self-detected stall|detected stalls? on CPU")

# The guest's FUTEXTRACE_CACHE. The host's root is read-only in the guest, and the guest
# mounts a tmpfs over /var/cache: there its program cache can be written, so each
# program variant is compiled once per guest (a minute each under TCG). A host cache
# elsewhere (FUTEXTRACE_CACHE=/some/dir) was read-only in the guest: nothing was cached,
# every recording compiled, and the guests ran out of time.
GUEST_CACHE = Path("/var/cache/futextrace")

GUEST_SCRIPT = """\
#!/bin/bash
# Runs inside the guest. Everything it prints lands in guest.log.
exec >{out}/guest.log 2>&1
# fentry: expected where futex_hash returns a pointer (6.17-7.1), see tests/host/test_fidelity.py
export FUTEXTRACE_IN_VM=1 FUTEXTRACE_EXPECT_METHODS=fentry,kprobe,tracepoint
export FUTEXTRACE_CACHE={guest_cache} PYTHONDONTWRITEBYTECODE=1
export FUTEXTRACE_VM_CPUS={cpus} FUTEXTRACE_VM_NODES={nodes}
echo "guest: $(uname -r), $(nproc) cpus, nodes: $(ls -d /sys/devices/system/node/node* | wc -l)"
cp /sys/kernel/btf/vmlinux {out}/vmlinux.btf && uname -r > {out}/release
export FUTEXTRACE_PROGRESS={out}/progress.log PYTHONPATH={repo}/tests/vm
rc=99
if cd {repo}; then
    {command}
    rc=$?
else
    echo "guest: the checkout {repo} is not visible in the guest"
fi
dmesg > {out}/dmesg.txt
echo $rc > {out}/status.tmp && mv {out}/status.tmp {out}/status
"""


# What runs in each guest: the tests whose outcome depends on the kernel
# (attach methods, layouts, buckets against the kernel's own, resizes).
# Everything under QEMU/TCG is slow; FUTEXTRACE_VM_TESTS=tests/host runs all.
GUEST_TESTS = ("tests/host/test_guest_smoke.py tests/host/test_doctor.py tests/host/test_record.py "
               "tests/host/test_explain.py tests/host/test_fidelity.py tests/host/test_pi_refcount.py "
               "tests/host/test_attach_state.py tests/host/test_progcache.py tests/host/test_lockwaits.py "
               "tests/host/test_migrate.py tests/host/test_exact_futexes.py tests/host/test_call_sites.py "
               "tests/host/test_warm_start.py")
GUEST_TESTS += " tests/host/test_serve_guest.py" if os.environ.get("FUTEXTRACE_VM_SERVE") else ""  # opt-in

# Tests of the host list whose outcome does not depend on the kernel (the CLI's
# --json FILE, BTF file and permission errors): the build machines run them, and
# in a guest each costs tens of seconds of BCC compiles under TCG (57 s for the
# second doctor run alone, 6.18 guest). FUTEXTRACE_VM_TESTS given: nothing left out.
GUEST_DESELECT = ("tests/host/test_doctor.py::test_json_file_beside_the_text",
                  "tests/host/test_lockwaits.py::test_serve_series",   # the exporter's start: minutes under TCG
                  "tests/host/test_doctor.py::test_btf_missing_file",
                  "tests/host/test_doctor.py::test_btf_not_btf",
                  "tests/host/test_doctor.py::test_not_root_is_one_line",
                  "tests/host/test_record.py::test_bad_input_one_line_error",   # refused before any BPF
                  # A million futex calls and a million pure-Python jhash2s: minutes under
                  # TCG; 262,144 checks the same estimate there.
                  "tests/host/test_exact_futexes.py::test_beyond_the_list_an_estimate[1048576]",
                  # The cache's own bookkeeping and the tracepoint replay: the build machines'
                  # kernel runs them; the kprobe replay (kernel-specific) runs in the guests.
                  "tests/host/test_progcache.py::test_replayed_instructions_are_the_compiled_ones",
                  "tests/host/test_progcache.py::test_an_entry_whose_maps_cannot_be_made_is_compiled_again",
                  "tests/host/test_progcache.py::test_an_entry_others_could_write_is_not_used",
                  "tests/host/test_progcache.py::test_a_recording_from_the_cache_counts_exactly[tracepoint]",
                  # The exporter's first start compiles its own variant: minutes under TCG; the
                  # guests check a warm start without the compiler with `record`.
                  "tests/host/test_warm_start.py::test_serve_cold_then_warm")

# SIGINT first: pytest then still writes junit.xml with what it has. One limit for
# the run, not 600 s per test: a shared recording's fixture may take minutes on a
# busy host, and progress.log names the test that was running when time ran out.
PYTEST_COMMAND = ("timeout -s INT -k 60 {timeout} {python} -m pytest {tests} -m root -p no:cacheprovider "
                  "-p progress -ra --durations=25 --timeout={timeout} --junitxml={out}/junit.xml {args}")

RUNS: list = []     # (spec id, GuestRun) in boot order, for the terminal summary
# Seconds from QEMU's start to the guest script's first file (guest.log); about 40
# under TCG here, busy host or not. A guest that has not got there by then hung
# in its boot: once, 32 vCPUs stopped at 3.6 s of guest time in calibrate_delay
# for the rest of their 900 s, and the same guest booted in 40 s right after. It is
# stopped and booted once more instead of using up its whole time limit.
BOOT_LIMIT_S = int(os.environ.get("FUTEXTRACE_VM_BOOT_LIMIT_S", "300"))


@dataclass
class GuestRun:
    kernel: vmkernels.Kernel
    out: Path               # the shared directory
    wall_s: float
    vng_rc: int             # informational only (see module doc)
    cpu_s: float = 0.0      # host CPU the guest used: its wall time on a CPU of its own
    hung_boot: bool = False  # stopped: the guest script had not started BOOT_LIMIT_S after QEMU

    def text(self, name: str) -> str | None:
        p = self.out / name
        return p.read_text(errors="replace") if p.exists() else None

    @property
    def status(self) -> int | None:
        s = self.text("status")
        return int(s) if s and s.strip().lstrip("-").isdigit() else None

    def junit_totals(self) -> dict[str, int]:
        root = ET.parse(self.out / "junit.xml").getroot()
        suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
        return {k: sum(int(s.get(k, 0)) for s in suites)
                for k in ("tests", "failures", "errors", "skipped")}

    def junit_problems(self) -> list[str]:
        """'<test id>: <first line of the failure>' for each failed or errored in-guest test."""
        out = []
        for case in ET.parse(self.out / "junit.xml").getroot().iter("testcase"):
            for bad in list(case.findall("failure")) + list(case.findall("error")):
                first = (bad.get("message") or "").splitlines()[:1]
                out.append(f"{case.get('classname')}::{case.get('name')}: {' '.join(first)[:200]}")
        return out

    def progress_log(self) -> progress.Progress | None:
        """The in-guest tests' start/finish lines (tests/vm/progress.py), even after a timeout."""
        return progress.read_progress(self.out / "progress.log")

    def kernel_log(self) -> str:
        """dmesg.txt, or the console in vng.log when the guest died before writing it."""
        return self.text("dmesg.txt") or self.text("vng.log") or ""

    def bad_dmesg_lines(self) -> list[str]:
        return [ln for ln in self.kernel_log().splitlines() if BAD_DMESG.search(ln)]

    def tail(self, name: str = "guest.log", n: int = 60) -> str:
        return "\n".join((self.text(name) or f"(no {name})").splitlines()[-n:])


def vng_command(kernel: vmkernels.Kernel, spec, out: Path, cache: Path) -> list[str]:
    cmd = ["vng", "--run", str(kernel.vmlinuz), "--disable-kvm",   # /dev/kvm cannot run a guest here
           "--cpus", str(spec.cpus), "--memory", spec.memory, f"--rwdir={out}",
           "--verbose"]     # the guest console (a panic, an OOM) lands in vng.log
    # The guest's cache is GUEST_CACHE on the guest's own tmpfs, whatever the host's is:
    # share only the header tree BCC needs, read-only, at the place the guest looks.
    if (cache / "headers").is_dir():
        cmd.append(f"--rodir={GUEST_CACHE / 'headers'}={cache / 'headers'}")
    # Single-threaded TCG: with multi-threaded TCG a 7.3.4 guest died of "Oops: int3" at
    # __futex_hash+0x1 (an ftrace patch site) while probes came and went; single-threaded
    # TCG did not, and ran the same tests faster on the 2-CPU build machines.
    qemu_opts = os.environ.get("FUTEXTRACE_VM_QEMU_OPTS", "-accel tcg,thread=single")
    if qemu_opts:
        cmd.append(f"--qemu-opts={qemu_opts}")   # "=": the value starts with "-"
    for a in spec.append:
        cmd += ["--append", a]
    return cmd + ["--exec", f"bash {out}/run.sh"]


def pytest_command(spec, out: Path, pytest_args: str = "") -> str:
    tests = os.environ.get("FUTEXTRACE_VM_TESTS") or spec.tests
    if not tests:
        tests = GUEST_TESTS + "".join(f" --deselect {shlex.quote(d)}" for d in GUEST_DESELECT)
    return PYTEST_COMMAND.format(timeout=spec.timeout_s - 120, python=sys.executable, out=out,
                                 tests=tests, args=pytest_args)


def boot(spec, pytest_args: str = "", log=print, command: str | None = None) -> GuestRun:
    """Boot `spec`'s kernel and run the in-guest tests, or `command` (a shell line, run in
    the checkout; its output lands in guest.log) in their place. A guest that hangs in
    its boot (BOOT_LIMIT_S) is booted once more; both runs stay in the cache's vm-runs."""
    run = _boot_once(spec, pytest_args, log, command)
    if not run.hung_boot:
        return run
    log(f"guest {spec.id}: the guest script had not started {BOOT_LIMIT_S} s after QEMU did "
        f"(a hung boot, console in {run.out}/vng.log): booting it once more")
    return _boot_once(spec, pytest_args, log, command)


def _boot_once(spec, pytest_args: str, log, command: str | None) -> GuestRun:
    cache = vmkernels.cache_root()
    kernel = vmkernels.fetch(spec.series, log=log)
    # A directory of its own: several checkouts may share the cache and boot the same spec.
    (cache / "vm-runs").mkdir(parents=True, exist_ok=True)
    out = Path(tempfile.mkdtemp(prefix=f"{spec.id}-", dir=cache / "vm-runs"))
    (out / "run.sh").write_text(GUEST_SCRIPT.format(
        out=out, guest_cache=GUEST_CACHE, repo=REPO, cpus=spec.cpus, nodes=spec.numa_nodes,
        command=command or pytest_command(spec, out, pytest_args)))
    env = dict(os.environ)
    # vng starts virtme-run through $PATH; the venv's bin is not on it under plain `.venv/bin/python`.
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    cmd = ["timeout", "--kill-after=30", str(spec.timeout_s)] + vng_command(kernel, spec, out, cache)
    log("guest: " + shlex.join(cmd))
    t0 = time.monotonic()
    with open(out / "vng.log", "wb") as vlog:
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=vlog, stderr=subprocess.STDOUT, env=env)
        status, usage, hung = _wait_watching_boot(p, out / "guest.log", t0)
        p.returncode = os.waitstatus_to_exitcode(status)
    run = GuestRun(kernel, out, time.monotonic() - t0, p.returncode, usage.ru_utime + usage.ru_stime,
                   hung_boot=hung)
    _keep_btf(run, cache)
    RUNS.append((spec.id, run))
    return run


def _wait_watching_boot(p: subprocess.Popen, first_file: Path, t0: float):
    """(wait status, rusage, hung) of the guest's `timeout` process. wait4 gives the
    CPU time of this guest alone (QEMU included), whatever else the host runs. Without
    `first_file` BOOT_LIMIT_S after the start, a hung boot: SIGTERM, which timeout
    passes to vng and QEMU (its process group), killing them 30 s later if need be."""
    while not first_file.exists():
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            return status, usage, False          # ended before its script: not a hang
        if time.monotonic() - t0 > BOOT_LIMIT_S:
            p.terminate()
            _, status, usage = os.wait4(p.pid, 0)
            return status, usage, True
        time.sleep(2)
    _, status, usage = os.wait4(p.pid, 0)
    return status, usage, False


def _keep_btf(run: GuestRun, cache: Path) -> None:
    """Store the guest's /sys/kernel/btf/vmlinux as $CACHE/btf/<release>.btf."""
    btf, release = run.out / "vmlinux.btf", (run.text("release") or "").strip()
    if btf.exists() and release:
        dest = cache / "btf" / f"{release}.btf"
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(".tmp")
        shutil.move(btf, tmp)
        tmp.rename(dest)
