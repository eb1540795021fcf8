"""Attach the kprobe method's programs to the futex hash functions the
running kernel really has (names and clones from the kernel model), and give
them what they need from kallsyms: the global tables' address and the text
range of each refcount-put function."""
from __future__ import annotations

from futextrace.errors import EnvironmentProblem, KernelRefused
from futextrace.kernel import runtimeconst
from futextrace.kernel.kallsyms import Kallsyms, futex_kallsyms

PUT_PART = "futex_private_hash_put.part.0"   # GCC's split body (7.2+ and backports)

# (kernel function, BPF function, kind, needed). Optional probes that the
# kernel inlined are reported as missing; a required one stops the method.
PROBES = [
    ("futex_hash", "kp_futex_hash", "entry", True),
    ("futex_hash", "kr_futex_hash", "return", True),
    ("futex_private_hash", "kr_futex_private_hash", "return", False),
    ("futex_hash_get", "kp_futex_hash_get", "entry", False),   # 6.17-7.1 only (hb->priv)
    ("futex_private_hash_put", "kp_futex_private_hash_put", "entry", False),
    (PUT_PART, "kp_futex_private_hash_put_part", "entry", False),
    ("futex_hash_put", "kp_futex_hash_put", "entry", False),   # 6.17-7.1 only (hb->priv)
    ("futex_hash_allocate", "kp_futex_hash_allocate", "entry", False),
    ("futex_hash_allocate", "kr_futex_hash_allocate", "return", False),
    ("__futex_pivot_hash", "kr_futex_pivot_hash", "return", False),
]
HB_PRIV_ONLY = {"kp_futex_hash_get", "kp_futex_hash_put"}   # 7.2+ removed both functions

# -D macro prefix -> the put function whose text range it names.
PUT_RANGES = {"PUT_HB": "futex_hash_put", "PUT_FPH": "futex_private_hash_put", "PUT_PART": PUT_PART}


def text_range(ks: Kallsyms | None, name: str) -> tuple[int, int]:
    """[start, next text symbol) of `name`; (0, 0) when unknown."""
    sym = ks.lookup(name) if ks else None
    if sym is None or not sym.address:
        return 0, 0
    return sym.address, sym.next_text or sym.address + 1


def global_table_flags(ks: Kallsyms | None) -> list[str]:
    """Where the global hash's per-node table pointers are: __futex_data.queues
    (6.17-7.2: after `unsigned long hashmask; unsigned int hashshift;`, offset
    16 on 64-bit) or, 7.3, __futex_queues, a pointer to the array. Data
    symbols need CONFIG_KALLSYMS_ALL (Debian's kernels have it); 7.3 without them:
    the patched immediate in __futex_hash (kernel/runtimeconst.py); else
    global buckets are not checked against the kernel's."""
    data = ks.lookup("__futex_data") if ks else None
    if data and data.address:
        return [f"-DGLOBAL_TABLES={data.address + 16:#x}ULL"]
    queues = ks.lookup("__futex_queues") if ks else None
    if queues and queues.address:
        return [f"-DGLOBAL_TABLES={queues.address:#x}ULL", "-DGLOBAL_TABLES_INDIRECT"]
    # 7.3 without the data symbol: __futex_queues' value, patched into __futex_hash
    # (one movabs there in Debian's 7.3.4, checked by disassembling its vmlinuz).
    array = runtimeconst.futex_queues_array(*text_range(ks, "__futex_hash"))
    return [f"-DGLOBAL_TABLES={array:#x}ULL"] if array else []


def cflags(model) -> list[str]:
    flags = []
    if model.hash_returns == "bucket_ref":
        flags.append("-DHASH_RETURNS_REF")
    elif model.bucket_has_priv:
        flags += ["-DBUCKET_HAS_PRIV", f"-DOFF_HB_PRIV={model.offsets['futex_hash_bucket.priv']}"]
    ks = futex_kallsyms(model)
    flags += global_table_flags(ks)
    for macro, func in PUT_RANGES.items():
        lo, hi = text_range(ks, func)
        flags += [f"-D{macro}_LO={lo:#x}ULL", f"-D{macro}_HI={hi:#x}ULL"]
    return flags


def _symbol(model, ks: Kallsyms | None, func: str) -> str | None:
    if func == PUT_PART:   # a fragment, not in the model's function list
        return PUT_PART if ks and ks.lookup(PUT_PART) else None
    info = model.functions.get(func)
    return info.symbol if info and info.has_symbol and info.symbol else None


def attach_kprobes(bpf, model, method: str, stamps: dict | None = None,
                   task_probes: list[str] | tuple = ()) -> list[str]:
    """Attach PROBES; `stamps` gets "counting": CLOCK_MONOTONIC ns around the
    attach of the probe that counts lookups (futex_hash's return), and
    "event": its BCC event name, for Program.stop_counting. `task_probes`:
    the task-event hooks BCC attached at load (loader.task_event_probes), listed
    after the probes."""
    import time
    stamps = {} if stamps is None else stamps
    attached, missing = [], []
    ks = futex_kallsyms(model)
    # The probe that counts lookups goes last: the window starts once the rest is in place.
    for func, fn, kind, needed in sorted(PROBES, key=lambda p: p[1] == "kr_futex_hash"):
        if fn in HB_PRIV_ONLY and not model.bucket_has_priv:
            continue
        sym = _symbol(model, ks, func)
        if sym is None:
            if needed:
                raise EnvironmentProblem(f"{func} has no symbol on this kernel (inlined): "
                                         "use --method tracepoint")
            if func != PUT_PART:   # most kernels have no split body: nothing missing
                missing.append(func)
            continue
        try:
            if kind == "entry":
                bpf.attach_kprobe(event=sym, fn_name=fn)
            elif fn == "kr_futex_hash":   # where lookups are counted: the window starts here
                t0 = time.monotonic_ns()
                bpf.attach_kretprobe(event=sym, fn_name=fn, maxactive=64)
                stamps["counting"] = (t0, time.monotonic_ns())
                stamps["event"] = b"r_" + sym.encode().replace(b"+", b"_").replace(b".", b"_")
            else:
                bpf.attach_kretprobe(event=sym, fn_name=fn, maxactive=64)
        except Exception as e:
            if needed:
                raise KernelRefused(f"the kernel refused a kprobe on {sym}: {e}")
            missing.append(func)
            continue
        attached.append(f"{'kretprobe' if kind == 'return' else 'kprobe'}:{sym}")
    attached += task_probes
    attached += [f"(not probed, inlined: {m})" for m in missing]
    if not global_table_flags(ks):
        attached.append("(global buckets unchecked: neither __futex_data (6.17-7.2) nor __futex_queues "
                        "(7.3) in kallsyms, nor 7.3's patched table address in __futex_hash via /proc/kcore)")
    return attached
