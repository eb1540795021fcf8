"""The fentry method: BPF trampolines on the futex hash functions.

It sees what the kprobe method sees (the bucket futex_hash returned, refcount
gets and puts, resize requests and pivots) without a breakpoint trap, and
nothing runs on other syscalls. It needs a kernel that allows
BPF_PROG_TYPE_TRACING on functions, a futex_hash that returns a pointer
(6.17-7.1: fexit cannot read 7.2+'s struct futex_bucket_ref, the verifier
refuses struct returns) and hb->priv to find the private hash.

Functions of bpf/trace_fentry.bpf.c are compiled by BCC and loaded here with
bpf(2) as fentry/fexit on a BTF FUNC id (the tp_btf way, tpbtf.py): BCC's
name-based kfunc autoload would pick attach points by itself. Whether the
kernel allows it is decided by loading a two-instruction fexit program first
(`refusal`), never by BPF.support_kfunc(), which says True on kernels that
refuse every fentry load.
"""
from __future__ import annotations

import os
import struct

from futextrace.errors import KernelRefused
from futextrace.kernel import errnos
from futextrace.kernel.runtimeconst import read_kernel
from futextrace.loading.bpfsys import load_tracing
from futextrace.kernel.kallsyms import futex_kallsyms
from futextrace.loading.kprobes import text_range
from futextrace.loading.tpbtf import attach_loaded

BPF_TRACE_FENTRY = 24
BPF_TRACE_FEXIT = 25
KIND = {BPF_TRACE_FENTRY: "fentry", BPF_TRACE_FEXIT: "fexit"}

# (kernel function, BPF function, attach type, needed). The optional ones are
# attached where BTF has the function and kallsyms its exact name (a GCC clone
# or an inlined function has no trampoline target); the others are listed as not probed.
PROGRAMS = [
    ("futex_hash", "fx_futex_hash", BPF_TRACE_FEXIT, True),
    ("futex_private_hash", "fx_futex_private_hash", BPF_TRACE_FEXIT, False),
    ("futex_hash_get", "fe_futex_hash_get", BPF_TRACE_FENTRY, False),
    ("futex_hash_put", "fe_futex_hash_put", BPF_TRACE_FENTRY, False),
    ("futex_hash_put", "fx_futex_hash_put", BPF_TRACE_FEXIT, False),
    ("futex_private_hash_put", "fe_futex_private_hash_put", BPF_TRACE_FENTRY, False),
    ("futex_hash_allocate", "fe_futex_hash_allocate", BPF_TRACE_FENTRY, False),
    ("futex_hash_allocate", "fx_futex_hash_allocate", BPF_TRACE_FEXIT, False),
    ("__futex_pivot_hash", "fx_futex_pivot_hash", BPF_TRACE_FEXIT, False),
]

# r0 = 0; exit: the least program there is, to ask the kernel whether it allows fexit here.
_TRIAL = struct.pack("<QQ", 0x00000000000000B7, 0x0000000000000095)


def attachable(model, func: str) -> bool:
    """BTF knows `func` and kallsyms has it under that very name (a trampoline's target)."""
    f = model.functions.get(func)
    return bool(f and f.in_btf and f.has_symbol and f.symbol == func
                and model.func_btf_ids.get(func) is not None)


def static_refusal(model) -> str | None:
    """Why the fentry method cannot work on this kernel's layout, or None."""
    fh = model.functions.get("futex_hash")
    if fh and fh.return_kind == "struct":
        return (f"futex_hash returns {fh.return_type} by value (as since 7.2, or a backport): "
                "the kernel refuses trampolines on "
                "functions returning a struct (btf_distill_func_proto): on this kernel only kprobes can hook it")
    if not attachable(model, "futex_hash"):
        return "futex_hash has no BTF function with a symbol of that name (inlined or cloned): no fexit target"
    if fh.return_kind != "pointer":
        return f"futex_hash returns {fh.return_type}, not a bucket pointer"
    if not model.bucket_has_priv:
        return "struct futex_hash_bucket has no priv member: the private hash of a bucket is not visible"
    return None


def trial(model, func: str = "futex_hash") -> tuple[int, str]:
    """Load a two-instruction fexit program on `func`: (0, "") when the kernel
    takes it, else (errno, what the verifier said)."""
    btf_id = model.func_btf_ids.get(func)
    if btf_id is None:
        return -1, f"no BTF id for {func}"
    try:
        fd = load_tracing(_TRIAL, "ft_trial", BPF_TRACE_FEXIT, btf_id)
    except OSError as e:
        return e.errno, getattr(e, "verifier_says", "")
    os.close(fd)
    return 0, ""


def refusal(model) -> str | None:
    """Why the fentry method is not available here, or None: the layout first,
    then a real load (the kernel may refuse tracing programs altogether)."""
    why = static_refusal(model)
    err, says = trial(model, "futex_hash") if model.func_btf_ids.get("futex_hash") else (0, "")
    if err:
        refused = f"the kernel refused a minimal fexit program on futex_hash ({errnos.name(err)}" + \
            (f": {says})" if says else ")")
        return f"{refused}; {why}" if why else refused
    return why


def calls_into(model, caller: str, callee: str) -> bool | None:
    """Whether `caller`'s text calls or jumps to `callee`'s entry (call, jmp or
    jcc with a 32-bit displacement; the 16 bytes of padding before a function
    count as its entry, for call thunks). None when the text cannot be read
    (no kallsyms addresses, no /proc/kcore)."""
    ks = futex_kallsyms(model)
    lo, hi = text_range(ks, caller)
    target, _ = text_range(ks, callee)
    if not lo or not target or hi - lo > 4096:
        return None
    code = read_kernel(lo, hi - lo)
    return None if code is None else reaches(code, lo, target)


def reaches(code: bytes, base: int, target: int) -> bool:
    """`code`, at kernel address `base`, has a call, jmp or jcc (rel32) landing
    on `target` or the 16 bytes of padding before it."""
    for i in range(len(code) - 4):
        if code[i] in (0xE8, 0xE9):
            end, rel = i + 5, struct.unpack_from("<i", code, i + 1)[0]
        elif code[i] == 0x0F and 0x80 <= code[i + 1] <= 0x8F and i + 6 <= len(code):
            end, rel = i + 6, struct.unpack_from("<i", code, i + 2)[0]
        else:
            continue
        if target - 16 <= base + end + rel <= target:
            return True
    return False


def put_plan(model) -> str:
    """How refcount puts are counted once each. 'private': fentry on
    futex_private_hash_put alone, because futex_hash_put calls it (every put
    passes its entry). 'both': fentry on each, neither reaches the other's
    entry (one is absent or inlined the other, or calls only its split body).
    'marked': both, futex_hash_put marking the task for the put it nests
    (fentry+fexit and a map per put), where its text could not be read."""
    if not (attachable(model, "futex_hash_put") and attachable(model, "futex_private_hash_put")):
        return "both"
    return {True: "private", False: "both", None: "marked"}[calls_into(model, "futex_hash_put",
                                                                        "futex_private_hash_put")]


# Programs each put plan leaves out.
PLAN_SKIPS = {"private": {"fe_futex_hash_put", "fx_futex_hash_put"}, "both": {"fx_futex_hash_put"},
              "marked": set()}


def cflags(model) -> list[str]:
    # fe_futex_private_hash_put skips the put futex_hash_put already counted.
    return ["-DFENTRY_HASH_PUT"] if put_plan(model) == "marked" else []


def attach(bcc, model, task_probes: list[str]) -> tuple[list[tuple[int, int]], list[str]]:
    """Load and attach every program whose function is attachable. Returns
    ([(attachment fd, program fd)], probe names, `task_probes` among them: the
    task-event hooks BCC attached at load, loader.task_event_probes). On a
    refusal of the required fexit on futex_hash, everything attached so far is
    closed and KernelRefused raised; an optional one refused is listed as not probed."""
    links: list[tuple[int, int]] = []
    probes, missing = [], []
    plan = put_plan(model)
    if plan == "private":
        probes.append("(futex_hash_put not hooked: it calls futex_private_hash_put, whose hook counts its puts)")
    try:
        for func, fn, kind, needed in PROGRAMS:
            if fn in PLAN_SKIPS[plan]:
                continue
            if not attachable(model, func):
                if needed:
                    raise KernelRefused(f"fexit target {func} is not attachable here (run `futextrace doctor`)")
                if func not in missing:
                    missing.append(func)
                continue
            try:
                links.append(load_attach(bcc, fn, kind, model.func_btf_ids[func]))
            except KernelRefused:
                if needed:
                    raise
                missing.append(func)
                continue
            probes.append(f"{KIND[kind]}:{func}")
    except BaseException:
        close(links)
        raise
    probes += task_probes
    probes += [f"(not probed, inlined: {m})" for m in missing]
    split = [f for f in model.functions.get("futex_private_hash_put").fragments if ".part." in f] \
        if model.functions.get("futex_private_hash_put") else []
    probes += [f"(not probed, no BTF for GCC's split body: {f})" for f in split]
    return links, probes


def load_attach(bcc, fn: str, kind: int, btf_id: int) -> tuple[int, int]:
    try:
        insns = bcc.dump_func(fn.encode())
    except Exception as e:  # noqa: BLE001 - BCC raises bare Exceptions
        raise KernelRefused(f"{KIND[kind]} program {fn} did not compile: {e}")
    try:
        prog = load_tracing(insns, fn, kind, btf_id)
    except OSError as e:
        raise KernelRefused(f"the kernel refused {KIND[kind]} program {fn} ({errnos.name(e.errno)})"
                            + (f": {e.verifier_says}" if getattr(e, "verifier_says", "") else ""))
    try:
        return attach_loaded(prog, fn), prog
    except KernelRefused:
        os.close(prog)
        raise


def close(links: list[tuple[int, int]]) -> None:
    while links:
        for fd in links.pop():
            os.close(fd)
