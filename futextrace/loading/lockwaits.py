"""Load, attach and read the bucket-lock contention programs (bpf/lock_waits.h).

lock:contention_begin/end are hooked as tp_btf where the kernel takes them
(BPF_PROG_TYPE_TRACING: arguments as plain loads, the same attach path as
sys_enter), else as raw tracepoints; both see the same arguments. Every attach
method (tracepoint, kprobe) uses the same two programs: the wait is
attributed by the lock's address, not by anything the hot path keeps.
"""
from __future__ import annotations

import ctypes as ct
import os
import struct

from futextrace.errors import KernelRefused
from futextrace.kernel.layout import enum
from futextrace.loading import tpbtf
from futextrace.loading.batchread import lookup_batch, struct_format

# Entries of the per-CPU lock_waits map: one per (process, hash size, bucket,
# waiting futex). Waits beyond it are counted (FTL_WAITS_LOST), not stored.
LOCK_WAITS_MAX = 16384
TRACEPOINTS = ("contention_begin", "contention_end")


def lockwait_macros(model) -> dict[str, int]:
    """-D macros: where hb->lock sits in a bucket, the map's size."""
    off = model.offsets.get("futex_hash_bucket.lock")
    return {"OFF_HB_LOCK": int(off) if off is not None else 0, "LOCK_WAITS_MAX": LOCK_WAITS_MAX}


def supported(model) -> str | None:
    """None when bucket-lock waits can be traced here, else why not."""
    if model.offsets.get("futex_hash_bucket.lock") is None:
        return "this kernel's BTF has no futex_hash_bucket.lock"
    if os.environ.get("FUTEXTRACE_NO_CONTENTION"):
        return "turned off (FUTEXTRACE_NO_CONTENTION)"
    return None


def tp_btf_programs(model) -> list[tuple[str, int]]:
    """(function, BTF id) of the tp_btf programs attach() will load, for
    tpbtf.prefetch(); none where it will not try tp_btf."""
    ids = [model.tp_btf_ids.get(tp) for tp in TRACEPOINTS]
    if os.environ.get("FUTEXTRACE_NO_TP_BTF") or supported(model) or None in ids:
        return []
    return [(f"ft_btf_{tp}", btf_id) for tp, btf_id in zip(TRACEPOINTS, ids)]


def attach(bcc, model, links: list[tuple[int, int]]) -> tuple[list[str], str | None, list[int]]:
    """Attach begin and end: tp_btf when both BTF ids are known and the
    kernel takes them (their fds appended to `links`), else raw tracepoints.
    Returns (probe names, why tp_btf was not used, the two programs' fds)."""
    ids = [model.tp_btf_ids.get(tp) for tp in TRACEPOINTS]
    why = None
    if os.environ.get("FUTEXTRACE_NO_TP_BTF"):
        why = "tp_btf turned off (FUTEXTRACE_NO_TP_BTF)"
    elif all(i is not None for i in ids):
        mine: list[tuple[int, int]] = []
        try:
            for tp, btf_id in zip(TRACEPOINTS, ids):
                mine.append(tpbtf.attach(bcc, f"ft_btf_{tp}", btf_id))
            links.extend(mine)
            return [f"tp_btf:{tp}" for tp in TRACEPOINTS], None, [prog for _, prog in mine]
        except KernelRefused as e:
            why = str(e)
            for pair in mine:
                for fd in pair:
                    os.close(fd)
    else:
        why = "no BTF ids for the lock tracepoints"
    try:
        for tp in TRACEPOINTS:
            bcc.attach_raw_tracepoint(tp=tp.encode(), fn_name=f"ft_raw_{tp}".encode())
    except Exception as e:  # BCC raises bare Exceptions
        raise KernelRefused(f"the kernel refused the lock contention tracepoints: {str(e).splitlines()[0]}")
    return ([f"raw_tracepoint:{tp}" for tp in TRACEPOINTS], why,
            [bcc.funcs[f"ft_raw_{tp}".encode()].fd for tp in TRACEPOINTS])


def read_waits(bcc) -> list[dict]:
    """The lock_waits map, summed over CPUs (max: the largest CPU's), in the
    map's order; read in batches where the kernel allows (a contended workload
    fills it: key by key, 15,000 entries cost 0.2 s of CPU, in batches 0.07 s),
    else key by key."""
    table = bcc["lock_waits"]
    batch = lookup_batch(table)
    if batch is None:
        return _walk_waits(table)
    keys, values, n = batch
    kfmt, knames = struct_format(table.Key)
    sfmt, snames = struct_format(table.sLeaf)
    ncpu = ct.sizeof(table.Leaf) // ct.sizeof(table.sLeaf)
    ki = [knames.index(f) for f in ("tgid", "hash_mask", "bucket", "uaddr")]
    waits_i, ns_i, max_i = (snames.index(f) for f in ("waits", "wait_ns", "max_ns"))
    stats = list(struct.iter_unpack(sfmt, values))
    rows = []
    for i, k in enumerate(struct.iter_unpack(kfmt, keys)):
        per_cpu = stats[i * ncpu:(i + 1) * ncpu]
        waits = sum(v[waits_i] for v in per_cpu)
        if not waits:
            continue
        rows.append({"tgid": k[ki[0]], "hash_mask": k[ki[1]], "bucket": k[ki[2]], "uaddr": k[ki[3]],
                     "waits": waits, "wait_ns": sum(v[ns_i] for v in per_cpu),
                     "max_ns": max(v[max_i] for v in per_cpu)})
    return rows


def _walk_waits(table) -> list[dict]:
    rows = []
    for k, per_cpu in _items(table):
        waits = sum(v.waits for v in per_cpu)
        if not waits:
            continue
        rows.append({"tgid": k.tgid, "hash_mask": k.hash_mask, "bucket": k.bucket, "uaddr": k.uaddr,
                     "waits": waits, "wait_ns": sum(v.wait_ns for v in per_cpu),
                     "max_ns": max(v.max_ns for v in per_cpu)})
    return rows


def _items(table):
    for k in table.keys():
        try:
            yield k, table.getvalue(k)
        except KeyError:
            continue


def read_counters(bcc) -> dict[str, int]:
    table = bcc["lock_counters"]
    out = {}
    for name, idx in enum("ft_lock_counter").items():
        if name == "FTL_NR":
            continue
        out[name.removeprefix("FTL_")] = sum(table.getvalue(table.Key(idx)))
    return out


def status(program) -> str:
    """"attached (tp_btf)", "attached (raw_tracepoint: why)" or why not attached."""
    if program.contention != "attached":
        return f"not attached: {program.contention}"
    if program.contention_fallback:
        return f"attached (raw_tracepoint: {program.contention_fallback})"
    return "attached (tp_btf)"


def attached(program) -> bool:
    return program is not None and program.bpf is not None and program.contention == "attached"


def dump(program) -> dict:
    """The raw dump's part for bucket-lock waits (empty lists when not attached)."""
    if not attached(program):
        return {"lock_waits": [], "lock_counters": {},
                "contention_status": status(program) if program else "not attached"}
    return {"lock_waits": read_waits(program.bpf), "lock_counters": read_counters(program.bpf),
            "contention_status": status(program)}


def delete_waits(bcc, tgids: set[int]) -> None:
    """Drop lock_waits entries of these processes, so the map follows the live ones."""
    if not tgids:
        return
    table = bcc["lock_waits"]
    for k in [k for k in table.keys() if k.tgid in tgids]:
        try:
            del table[k]
        except KeyError:
            pass
