"""Attach the kprobe method's programs to the futex hash functions the
running kernel really has (names and clones from the kernel model)."""
from __future__ import annotations

from futextrace.errors import EnvironmentProblem, KernelRefused

# (kernel function, BPF function, kind, needed). Optional probes that the
# kernel inlined are reported as missing; a required one stops the method.
PROBES = [
    ("futex_hash", "kp_futex_hash", "entry", True),
    ("futex_hash", "kr_futex_hash", "return", True),
    ("futex_private_hash", "kr_futex_private_hash", "return", False),
    ("futex_private_hash_put", "kp_futex_private_hash_put", "entry", False),
    ("futex_hash_put", "kp_futex_hash_put", "entry", False),   # 6.17-7.1 only (hb->priv)
    ("futex_hash_allocate", "kp_futex_hash_allocate", "entry", False),
    ("futex_hash_allocate", "kr_futex_hash_allocate", "return", False),
    ("__futex_pivot_hash", "kr_futex_pivot_hash", "return", False),
]


def cflags(model) -> list[str]:
    flags = []
    if model.hash_returns == "bucket_ref":
        flags.append("-DHASH_RETURNS_REF")
    elif model.bucket_has_priv:
        flags += ["-DBUCKET_HAS_PRIV", f"-DOFF_HB_PRIV={model.offsets['futex_hash_bucket.priv']}"]
    return flags


def attach_kprobes(bpf, model, method: str) -> list[str]:
    attached, missing = [], []
    for func, fn, kind, needed in PROBES:
        if fn == "kp_futex_hash_put" and not model.bucket_has_priv:
            continue   # 7.2+: no futex_hash_put, puts go through futex_private_hash_put
        info = model.functions.get(func)
        sym = info.symbol if info and info.has_symbol and info.symbol else None
        if sym is None:
            if needed:
                raise EnvironmentProblem(f"{func} has no symbol on this kernel (inlined): "
                                         "use --method tracepoint")
            missing.append(func)
            continue
        try:
            if kind == "entry":
                bpf.attach_kprobe(event=sym, fn_name=fn)
            else:
                bpf.attach_kretprobe(event=sym, fn_name=fn, maxactive=64)
        except Exception as e:
            if needed:
                raise KernelRefused(f"the kernel refused a kprobe on {sym}: {e}")
            missing.append(func)
            continue
        attached.append(f"{'kretprobe' if kind == 'return' else 'kprobe'}:{sym}")
    attached += ["raw_tracepoint:task_newtask", "raw_tracepoint:sched_process_exit"]
    attached += [f"(not probed, inlined: {m})" for m in missing]
    return attached
