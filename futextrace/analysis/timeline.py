"""Resize timeline and thread history from the BPF events.

A resize is requested either by clone() (futex_hash_allocate_default) or by
prctl(PR_FUTEX_HASH_SET_SLOTS). If the process already has a hash, the new one
waits in mm->futex_phash_new until the old one's references drain; it takes
over ("pivot") later. We see: the hash before/after each clone and prctl, and
every change of the hash a process's futex calls run on.

prctl results come from prctl's exit where it is hooked (kprobe method,
--exact-prctl). Otherwise they are inferred the way the kernel decides them
(futex_hash_prctl, futex_hash_allocate): -EINVAL from the arguments, -EBUSY
from the hash at entry (the global one was chosen), 0 once the process is
seen on the custom hash it asked for (a custom request returns only after
its hash has taken over), -ENOMEM once the caller is seen again without it.
"""
from __future__ import annotations

import errno

from futextrace.kernel.jhash import auto_buckets
from futextrace.loading.layout import EVENT

CLONE_VM = 0x00000100
CLONE_VFORK = 0x00004000
CLONE_THREAD = 0x00010000
PR_FUTEX_HASH_SET_SLOTS = 1


def buckets_of(mask: int, present: bool) -> int:
    """Bucket count of a private hash (0 = global hash)."""
    return mask + 1 if present and mask else 0


class _Proc:
    def __init__(self):
        self.hash = None        # kernel address of the hash in use (None: unknown yet)
        self.seen = False       # a hash state was recorded (NEWTASK/prctl alone set `hash`)
        self.buckets = 0
        self.custom = False
        self.pending = None     # open resize entry waiting for its pivot
        self.prctl = {}         # tid -> prctl enter event
        self.awaiting = []      # (resize, caller tid, slots): inferred results not yet seen


def _static_prctl_result(enter: dict) -> int | None:
    """-EINVAL/-EBUSY as futex_hash_prctl() decides them before allocating, or None."""
    slots = enter["arg0"] & 0xFFFFFFFF          # the kernel takes an unsigned int
    if enter["ret"] != 0 or slots == 1 or slots & (slots - 1):   # ret: the enter event's arg4
        return -errno.EINVAL
    if enter["hash"] and not enter["hash_mask"]:
        return -errno.EBUSY                     # the global hash was chosen: no way back
    return None


def _resolve_prctl(p: _Proc, ev: dict) -> None:
    """Settle inferred SET_SLOTS results against a later sight of the hash."""
    for item in list(p.awaiting):
        r, tid, slots = item
        wanted = bool(ev["hash"]) and bool(ev["custom"]) and ev["hash_mask"] == (slots - 1 if slots else 0)
        if wanted:
            r["result"], r["new_buckets"] = 0, buckets_of(ev["hash_mask"], True)
            r["pivot_t"], r["pending_s"] = ev["t"], round(ev["t"] - r["t"], 6)
        elif ev["tid"] == tid:
            r["result"] = -errno.ENOMEM         # back from prctl, and the hash is not the one asked for
        else:
            continue
        p.awaiting.remove(item)


def build_timeline(events: list[dict], kernel: dict, infer_prctl: bool = False) -> dict:
    online = len(kernel.get("online_cpus", [])) or None
    gsize = kernel.get("global_hash", {}).get("buckets_per_node")
    procs: dict[int, _Proc] = {}
    resizes, threads, states = [], [], []
    # With the kprobe method futex_hash_allocate() itself is probed: its
    # events replace the resizes inferred from clone()/prctl().
    probed = {e["tgid"] for e in events if e["type"] == EVENT["FTE_ALLOC_ENTER"]}
    FH_CUSTOM = 1

    def settle(p: _Proc, ev: dict, new_hash: int, buckets: int, custom: bool):
        """The process now runs on `new_hash`: close a pending resize."""
        if p.hash is not None and new_hash != p.hash and p.pending is not None:
            r = p.pending
            r["pivot_t"] = ev["t"]
            r["pending_s"] = round(ev["t"] - r["t"], 6)
            r["new_buckets"] = buckets
            p.pending = None
        p.hash, p.buckets, p.custom = new_hash, buckets, custom

    for ev in sorted(events, key=lambda e: e["t"]):
        typ = ev["type"]
        p = procs.setdefault(ev["tgid"], _Proc())
        now_buckets = buckets_of(ev["hash_mask"], bool(ev["hash"]))
        if p.awaiting and typ in (EVENT["FTE_HASH_SEEN"], EVENT["FTE_NEWTASK"], EVENT["FTE_EXIT"],
                                  EVENT["FTE_PRCTL_ENTER"]):
            _resolve_prctl(p, ev)
        if typ == EVENT["FTE_HASH_SEEN"]:
            # Not `p.hash is None`: a NEWTASK or prctl before the first futex call
            # sets p.hash, and the process would then never get a state.
            first = not p.seen
            p.seen = True
            if first or ev["hash"] != p.hash:
                states.append({"t": ev["t"], "pid": ev["tgid"], "comm": ev["comm"],
                               "buckets": now_buckets, "custom": bool(ev["custom"]),
                               "private": bool(ev["hash"]) and now_buckets > 0,
                               "first_seen": first})
            settle(p, ev, ev["hash"], now_buckets, bool(ev["custom"]))
        elif typ == EVENT["FTE_NEWTASK"]:
            flags, child = ev["arg0"], ev["arg1"]
            nr = ev["nr_threads"]
            # nr_threads already counts the new thread; the kernel's formula saw the count before.
            before = nr - 1 if flags & CLONE_THREAD else nr
            threads.append({"t": ev["t"], "pid": ev["tgid"], "tid": child, "event": "new",
                            "clone_flags": flags, "nr_threads": nr})
            old_hash, old_buckets = p.hash, p.buckets
            new_pending = buckets_of(ev["hash_new_mask"], bool(ev["hash_new"])) if ev["hash_new"] else None
            changed = old_hash is not None and ev["hash"] != old_hash
            first_alloc = old_hash in (None, 0) and ev["hash"] and now_buckets
            if ev["tgid"] not in probed and (changed or first_alloc or (new_pending and p.pending is None)):
                formula = auto_buckets(before, online, gsize) if online and gsize else None
                r = {"t": ev["t"], "pid": ev["tgid"], "comm": ev["comm"], "trigger": "clone",
                     "clone_flags": flags, "threads": before, "online_cpus": online,
                     "requested": formula["buckets"] if formula else None, "custom": False,
                     "result": 0, "result_inferred": False,
                     "old_buckets": old_buckets if old_hash is not None else 0,
                     "new_buckets": now_buckets if not new_pending else new_pending,
                     "pivot_t": None, "pending_s": None}
                if new_pending:
                    p.pending = r
                else:
                    r["pivot_t"], r["pending_s"] = ev["t"], 0.0
                resizes.append(r)
            settle(p, ev, ev["hash"], now_buckets, bool(ev["custom"]))
        elif typ == EVENT["FTE_EXIT"]:
            threads.append({"t": ev["t"], "pid": ev["tgid"], "tid": ev["tid"], "event": "exit",
                            "clone_flags": 0, "nr_threads": ev["nr_threads"]})
        elif typ == EVENT["FTE_PRCTL_ENTER"]:
            p.prctl[ev["tid"]] = ev
            if p.hash is None:
                p.hash, p.buckets, p.custom = ev["hash"], now_buckets, bool(ev["custom"])
            if infer_prctl and ev["arg1"] == PR_FUTEX_HASH_SET_SLOTS and ev["tgid"] not in probed:
                r = {"t": ev["t"], "pid": ev["tgid"], "comm": ev["comm"], "trigger": "prctl",
                     "clone_flags": None, "threads": ev["nr_threads"], "online_cpus": online,
                     "requested": ev["arg0"], "custom": True, "result": _static_prctl_result(ev),
                     "result_inferred": True, "old_buckets": now_buckets, "new_buckets": now_buckets,
                     "pivot_t": None, "pending_s": None}
                if r["result"] is None:
                    p.awaiting.append((r, ev["tid"], ev["arg0"] & 0xFFFFFFFF))
                resizes.append(r)
        elif typ == EVENT["FTE_PRCTL_EXIT"]:
            enter = p.prctl.pop(ev["tid"], None)
            if enter is None or enter["arg1"] != PR_FUTEX_HASH_SET_SLOTS or ev["tgid"] in probed:
                continue
            old_buckets = buckets_of(enter["hash_mask"], bool(enter["hash"]))
            r = {"t": enter["t"], "pid": ev["tgid"], "comm": ev["comm"], "trigger": "prctl",
                 "clone_flags": None, "threads": enter["nr_threads"], "online_cpus": online,
                 "requested": enter["arg0"], "custom": True, "result": ev["ret"], "result_inferred": False,
                 "old_buckets": old_buckets, "new_buckets": old_buckets,
                 "pivot_t": None, "pending_s": None}
            if ev["ret"] == 0:
                # A custom request waits in prctl() until its hash has taken over.
                r["new_buckets"] = now_buckets
                r["pivot_t"] = ev["t"]
                r["pending_s"] = round(ev["t"] - enter["t"], 6)
            resizes.append(r)
            settle(p, ev, ev["hash"], now_buckets, bool(ev["custom"]))
        elif typ == EVENT["FTE_ALLOC_ENTER"]:
            p.prctl[("alloc", ev["tid"])] = ev
        elif typ == EVENT["FTE_ALLOC_EXIT"]:
            enter = p.prctl.pop(("alloc", ev["tid"]), None)
            if enter is None:
                continue
            custom = bool(enter["arg1"] & FH_CUSTOM)
            old = buckets_of(enter["hash_mask"], bool(enter["hash"]))
            r = {"t": enter["t"], "pid": ev["tgid"], "comm": ev["comm"],
                 "trigger": "prctl" if custom else "clone", "clone_flags": None,
                 "threads": enter["nr_threads"], "online_cpus": online, "requested": enter["arg0"],
                 "custom": custom, "result": ev["ret"], "result_inferred": False,
                 "old_buckets": old, "new_buckets": old,
                 "pivot_t": None, "pending_s": None}
            if ev["ret"] == 0:
                if ev["hash"] != enter["hash"] and not ev["hash_new"]:
                    r["new_buckets"], r["pivot_t"], r["pending_s"] = now_buckets, ev["t"], round(ev["t"] - enter["t"], 6)
                    p.hash, p.buckets = ev["hash"], now_buckets
                elif ev["hash_new"]:
                    r["new_buckets"] = buckets_of(ev["hash_new_mask"], True)
                    p.pending = r
                else:
                    r["new_buckets"] = old   # nothing to do: already this size
            resizes.append(r)
        elif typ == EVENT["FTE_PIVOT"]:
            if ev["ret"] and p.pending is not None:
                r = p.pending
                r["pivot_t"], r["pending_s"] = ev["t"], round(ev["t"] - r["t"], 6)
                p.pending = None
    return {"resizes": resizes, "threads": threads, "hash_states": states}
