"""What works here: the kernel model, and each attach method proven by a real load.

Nothing is guessed from versions or feature flags: `BPF.support_kfunc()` says True
on kernels that refuse every fentry load, so each method loads (and attaches) a
tiny program, fires it with one futex call where it can, and detaches at once.
"""
from __future__ import annotations

import ctypes
import os
import tempfile
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from futextrace.kernel import model as kmodel
from futextrace.kernel import errnos, prctl
from futextrace.errors import EnvironmentProblem, FutextraceError
from futextrace.kernel.headers import bcc_environment, ensure_tracefs, find_header_tree
from futextrace.loading import fentry, methods, preconditions, tpbtf
from futextrace.loading.iterator import TaskIterator
from futextrace.loading.methods import KPROBE_PMU

LABELS = {"fentry": "fentry/fexit", "kprobe": "kprobe/kretprobe",
          "tracepoint": "tracepoint", "raw_tracepoint": "raw tracepoint",
          "tp_btf": "BTF tracepoint", "task_iterator": "task iterator"}
CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39



@dataclass
class MethodStatus:
    name: str          # "fentry" | "kprobe" | "tracepoint" | "raw_tracepoint" | "tp_btf"
    works: bool
    reason: str        # plain words: what was tried and what happened
    target: str = ""   # function or tracepoint that was tried
    fired: int | None = None   # hits counted while one futex call ran (None: not counted)


# --- helpers ----------------------------------------------------------------
@contextmanager
def _quiet_stderr():
    """libbcc and clang write straight to fd 2; keep that out of the report but
    hand it back (as a list of lines) for the reasons."""
    captured: list[str] = []
    with tempfile.TemporaryFile(mode="w+") as tmp:
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            captured.extend(ln.strip() for ln in tmp.read().splitlines() if ln.strip())


def _futex_call() -> None:
    """One FUTEX_WAKE_PRIVATE on a local word: enough to fire every futex hook."""
    libc = ctypes.CDLL(None, use_errno=True)
    word = ctypes.c_uint32(0)
    libc.syscall(202, ctypes.byref(word), 129, 1, None, None, 0)


def capabilities() -> dict:
    caps = 0
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                caps = int(line.split()[1], 16)
    except OSError:
        pass
    has = lambda bit: bool(caps >> bit & 1)  # noqa: E731
    return {"root": os.geteuid() == 0, "CAP_SYS_ADMIN": has(CAP_SYS_ADMIN),
            "CAP_BPF": has(CAP_BPF), "CAP_PERFMON": has(CAP_PERFMON)}


def _bpf_class():
    bcc_environment()
    from bcc import BPF

    class ManualBPF(BPF):
        # BCC attaches kfunc__/tracepoint__ programs inside BPF(); a failure there
        # would leave a half-built object we could not clean up. We attach ourselves.
        def _trace_autoload(self):
            pass

    return BPF, ManualBPF


# Every hook doctor proves, in one text: BCC's compile is the slow part (a
# third of a second here, tens of seconds under QEMU/TCG), so it runs once.
# Each hook counts, in its own slot, hits from this process only: "fired"
# proves our own futex call was seen by that hook.
HOOK_SLOTS = {"kprobe": 0, "tracepoint": 1, "raw_tracepoint": 2, "tp_btf": 3, "fentry": 4}
HOOKS_TEXT = """BPF_ARRAY(hits, u64, 5);
static inline void hit(int k) {
    if ((bpf_get_current_pid_tgid() >> 32) != %d) return;
    u64 *v = hits.lookup(&k); if (v) __sync_fetch_and_add(v, 1);
}
int f(void *ctx) { return 0; }
int on_entry(struct pt_regs *ctx) { hit(0); return 0; }
int on_return(struct pt_regs *ctx) { return 0; }
int on_tp(void *ctx) { hit(1); return 0; }
int on_raw(struct bpf_raw_tracepoint_args *ctx) { if (ctx->args[1] == 202) hit(2); return 0; }
int on_btf(u64 *ctx) { if (ctx[1] == 202) hit(3); return 0; }
int on_fexit(u64 *ctx) { hit(4); return 0; }
"""


class HookProgram:
    """The hook programs, compiled once. Each hook is attached on its own
    (`attach`), then one futex call fires them all (`fire`), and `result`
    tells each: attached or why not, and its hits. Use as a context manager:
    closing detaches everything."""

    def __init__(self):
        BPF, Manual = _bpf_class()
        self.links: list[int] = []           # fds of attachments we made ourselves (tp_btf)
        self.errors: dict[str, str] = {}
        self.hits: dict[str, int] = {}
        with _quiet_stderr():
            try:
                self.bpf = Manual(text=(HOOKS_TEXT % os.getpid()).encode())
            except Exception as e:   # noqa: BLE001 - BCC raises bare Exception
                raise EnvironmentProblem(
                    f"BCC could not compile a test program ({str(e).splitlines()[0]}); "
                    "run scripts/bootstrap.sh to install BCC and kernel headers") from None
            try:
                # A socket filter is the least any BPF use needs: if it is refused, nothing loads.
                self.bpf.load_func(b"f", BPF.SOCKET_FILTER)
            except Exception as e:   # noqa: BLE001
                self.close()
                code = errnos.name_in_message(str(e)) or str(e)
                raise EnvironmentProblem(
                    f"the kernel refused a minimal BPF program ({code}): run as root on a "
                    "machine (or container) that allows bpf()") from None

    def attach(self, name: str, attach) -> None:
        with _quiet_stderr():
            try:
                got = attach(self.bpf)
            except Exception as e:   # noqa: BLE001 - BCC raises bare Exception
                self.errors[name] = (str(e).splitlines()[0] if str(e) else type(e).__name__)
                return
        if isinstance(got, tuple):
            self.links.extend(fd for fd in got if isinstance(fd, int))

    def fire(self) -> None:
        _futex_call()
        counts = [v.value for v in self.bpf[b"hits"].values()]
        self.hits = {name: counts[slot] for name, slot in HOOK_SLOTS.items()}

    def result(self, name: str) -> tuple[bool, str, int | None]:
        if name in self.errors:
            return False, self.errors[name], None
        return True, "", self.hits.get(name)

    def close(self) -> None:
        while self.links:
            os.close(self.links.pop())
        if getattr(self, "bpf", None) is not None:
            self.bpf.cleanup()       # detaches everything BCC attached
            self.bpf = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# --- the methods ------------------------------------------------------------
def _hash_targets(model: kmodel.KernelModel) -> list[str]:
    return [n for n in ("futex_hash", "__futex_hash") if model.probeable(n)]


def probe_fentry(model: kmodel.KernelModel, hooks: HookProgram) -> MethodStatus:
    """fexit on futex_hash, the fentry method's one required program: refused
    by the kernel (a minimal load says why), unusable for the layout
    (futex_hash returning a struct on 7.2+), or attached and fired."""
    layout = fentry.static_refusal(model)
    err, says = fentry.trial(model)
    if err > 0:
        why = f"the kernel refused fentry programs ({errnos.name(err)}" + (f": {says})" if says else ")")
        if says and layout:
            why = f"the verifier refused fexit on futex_hash ({errnos.name(err)}: {says})"
        return MethodStatus("fentry", False, "; ".join([why, *([layout] if layout else [])]), "futex_hash")
    if layout:
        return MethodStatus("fentry", False, layout, "futex_hash")
    ok, msg, fired = hooks.result("fentry")
    if not ok:
        return MethodStatus("fentry", False, f"attaching fexit to futex_hash failed: {msg}", "futex_hash")
    return MethodStatus("fentry", True, "fexit on futex_hash loaded and attached (no trap; other "
                        "syscalls pay nothing)", "futex_hash", fired)


def attach_hooks(model: kmodel.KernelModel, hooks: HookProgram) -> None:
    """Attach each hook the methods below report on (what each is, is theirs to say)."""
    targets = _hash_targets(model)
    if targets:
        sym = model.functions[targets[0]].symbol.encode()
        hooks.attach("kprobe", lambda b: (b.attach_kprobe(event=sym, fn_name=b"on_entry"),
                                          b.attach_kretprobe(event=sym, fn_name=b"on_return")))
    ensure_tracefs()
    hooks.attach("tracepoint", lambda b: b.attach_tracepoint(tp=TRACEPOINT.encode(), fn_name=b"on_tp"))
    hooks.attach("raw_tracepoint", lambda b: b.attach_raw_tracepoint(tp=b"sys_enter", fn_name=b"on_raw"))
    tp_id = model.tp_btf_ids.get("sys_enter")
    if tp_id is not None:
        hooks.attach("tp_btf", lambda b: tpbtf.attach(b, "on_btf", tp_id))
    if fentry.static_refusal(model) is None:
        fh = model.func_btf_ids["futex_hash"]
        hooks.attach("fentry", lambda b: fentry.load_attach(b, "on_fexit", fentry.BPF_TRACE_FEXIT, fh))


TRACEPOINT = "syscalls:sys_enter_futex"


def probe_kprobe(model: kmodel.KernelModel, hooks: HookProgram) -> MethodStatus:
    targets = _hash_targets(model)
    if not targets:
        return MethodStatus("kprobe", False, "futex_hash and __futex_hash are inlined (no symbol)")
    sym = model.functions[targets[0]].symbol
    ok, msg, fired = hooks.result("kprobe")
    if not KPROBE_PMU.exists():
        why = f"kernel built without CONFIG_KPROBES (no {KPROBE_PMU})"
        return MethodStatus("kprobe", ok, why if not ok else f"{why}, yet attaching worked", sym, fired)
    if not ok:
        return MethodStatus("kprobe", False, f"attaching a kprobe/kretprobe to {sym} failed: {msg}", sym)
    return MethodStatus("kprobe", True, f"kprobe+kretprobe on {sym} loaded and attached", sym, fired)


def _hook_status(hooks: HookProgram, name: str, target: str, what: str, note: str = "") -> MethodStatus:
    ok, msg, fired = hooks.result(name)
    if not ok:
        return MethodStatus(name, False, f"attaching to {what} failed: {msg}", target)
    return MethodStatus(name, True, f"{what} loaded and attached{note}", target, fired)


def probe_tracepoint(model: kmodel.KernelModel, hooks: HookProgram) -> MethodStatus:
    return _hook_status(hooks, "tracepoint", TRACEPOINT, TRACEPOINT)


def probe_raw_tracepoint(model: kmodel.KernelModel, hooks: HookProgram) -> MethodStatus:
    return _hook_status(hooks, "raw_tracepoint", "sys_enter", "raw tracepoint sys_enter")


def probe_tp_btf(model: kmodel.KernelModel, hooks: HookProgram) -> MethodStatus:
    """The hook the tracepoint method prefers for sys_enter (typed registers)."""
    if model.tp_btf_ids.get("sys_enter") is None:
        return MethodStatus("tp_btf", False, "no btf_trace_sys_enter in the kernel's BTF", "sys_enter")
    return _hook_status(hooks, "tp_btf", "sys_enter", "tp_btf sys_enter", " (the tracepoint method's futex hook)")


def probe_task_iterator(model: kmodel.KernelModel) -> MethodStatus:
    """What `snapshot` reads: load the task iterator and read every process once;
    it must find this very process."""
    try:
        with TaskIterator(model) as it:
            records = it.read()
    except FutextraceError as e:
        return MethodStatus("task_iterator", False, str(e), "bpf_iter_task")
    me = records.get(os.getpid())
    if me is None:
        return MethodStatus("task_iterator", False, f"read {len(records)} processes, but not this one",
                            "bpf_iter_task")
    return MethodStatus("task_iterator", True, f"loaded, attached and read {len(records)} processes, this "
                        f"one with {me['nr_threads']} threads (snapshot's source)", "bpf_iter_task")


def probe_methods(model: kmodel.KernelModel, hooks: HookProgram | None = None) -> list[MethodStatus]:
    """Each attach method, proven by a real load+attach on the running kernel."""
    if hooks is None:
        with HookProgram() as own:
            return probe_methods(model, own)
    attach_hooks(model, hooks)
    hooks.fire()
    statuses = [probe_fentry(model, hooks), probe_kprobe(model, hooks), probe_tracepoint(model, hooks),
                probe_raw_tracepoint(model, hooks), probe_tp_btf(model, hooks)]
    hooks.close()        # detached before the iterator loads on its own
    return [*statuses, probe_task_iterator(model)]


def recommended_method(statuses: list[MethodStatus]) -> str | None:
    """What `record --method auto` picks where these statuses hold: one order of
    preference for both, kept in loading/methods.py (fentry, kprobe, tracepoint)."""
    return methods.recommended({s.name for s in statuses if s.works})


# --- the report ---------------------------------------------------------------
def prctl_status() -> dict:
    try:
        return {"works": True, "get_slots": prctl.get_slots()}
    except OSError as e:
        return {"works": False, "error": f"{errnos.name(e.errno)}: {e.strerror}"}


def headers_status() -> dict:
    t = find_header_tree(prepare=True)
    if t is None:
        return {"path": None, "version": None, "matches_running": False}
    return {"path": str(t.path), "version": t.version, "source": t.source,
            "matches_running": t.matches_running}


def run(btf_path: str | None = None) -> dict:
    """Everything `doctor` reports. Raises FutextraceError for the fatal cases."""
    preconditions.require_root()   # the rule record and serve apply: doctor answers for them
    caps = capabilities()
    model = kmodel.load(btf_path=btf_path, live=btf_path is None)
    with HookProgram() as hooks:     # fails first, in one line, where BPF cannot work at all
        statuses = probe_methods(model, hooks)
    return {"kernel": model.to_dict(), "privileges": caps, "headers": headers_status(),
            "prctl": prctl_status(), "methods": [asdict(s) for s in statuses],
            "recommended": recommended_method(statuses), "_model": model}
