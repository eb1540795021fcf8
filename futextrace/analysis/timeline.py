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

from errno import EBUSY, EINVAL, ENOMEM

from futextrace.kernel.constants import FH_CUSTOM, PR_FUTEX_HASH_SET_SLOTS
from futextrace.kernel.layout import EVENT
from futextrace.kernel.sizing import auto_buckets, buckets_of, threads_before_clone


def _buckets(mask: int, present: bool) -> int:
    """Bucket count of a private hash (0 = global hash)."""
    return buckets_of(mask) if present and mask else 0


def _now_buckets(ev: dict) -> int:
    return _buckets(ev["hash_mask"], bool(ev["hash"]))


def _resize(t: float, ev: dict, trigger: str, *, clone_flags: int | None, threads: int,
            online: int | None, requested, custom: bool, result: int | None, inferred: bool,
            old_buckets: int, new_buckets: int) -> dict:
    """One entry of the `resizes` list (docs/json-schema.md), not yet pivoted."""
    return {"t": t, "pid": ev["tgid"], "comm": ev["comm"], "trigger": trigger,
            "clone_flags": clone_flags, "threads": threads, "online_cpus": online,
            "requested": requested, "custom": custom, "result": result,
            "result_inferred": inferred, "old_buckets": old_buckets, "new_buckets": new_buckets,
            "pivot_t": None, "pending_s": None}


def _pivoted(r: dict, t: float) -> None:
    """The resize's hash took over at time t."""
    r["pivot_t"], r["pending_s"] = t, round(t - r["t"], 6)


# `_Proc.hash` for a hash read at attach whose kernel address no event has shown yet.
AT_ATTACH = -1


class _Proc:
    def __init__(self):
        self.hash = None        # kernel address of the hash in use (None: unknown yet, 0: none)
        self.seen = False       # a hash state was recorded (NEWTASK/prctl alone set `hash`)
        self.buckets = 0
        self.custom = False
        self.pending = None     # open resize entry waiting for its pivot
        self.prctl = {}         # tid -> prctl enter event
        self.awaiting = []      # (resize, caller tid, slots, hash at the call): inferred results not yet seen

    def settle(self, ev: dict) -> None:
        """The process now runs on ev's hash: close a pending resize."""
        new_hash, buckets = ev["hash"], _now_buckets(ev)
        if self.hash is not None and new_hash != self.hash and self.pending is not None:
            _pivoted(self.pending, ev["t"])
            self.pending["new_buckets"] = buckets
            self.pending = None
        self.hash, self.buckets, self.custom = new_hash, buckets, bool(ev["custom"])

    def start_from(self, state: dict) -> None:
        """The hash the task iterator read at attach (hash_at_attach)."""
        present = state["kind"] != "none"
        self.hash = AT_ATTACH if present else 0
        self.buckets, self.custom = state["buckets"] or 0, state["mode"] == "custom"

    def adopt(self, ev: dict) -> None:
        """The first event showing the hash read at attach gives its address. One
        of another size or kind is a new hash: it stays a change for the handlers."""
        if (self.hash == AT_ATTACH and ev["hash"] and _now_buckets(ev) == self.buckets
                and bool(ev["custom"]) == self.custom):
            self.hash = ev["hash"]


def _static_prctl_result(enter: dict) -> int | None:
    """-EINVAL/-EBUSY as futex_hash_prctl() decides them before allocating, or None."""
    slots = enter["arg0"] & 0xFFFFFFFF          # the kernel takes an unsigned int
    if enter["ret"] != 0 or slots == 1 or slots & (slots - 1):   # ret: the enter event's arg4
        return -EINVAL
    if enter["hash"] and not enter["hash_mask"]:
        return -EBUSY                           # the global hash was chosen: no way back
    return None


def _resolve_prctl(p: _Proc, ev: dict) -> None:
    """Settle inferred SET_SLOTS results against a later sight of the hash."""
    for item in list(p.awaiting):
        r, tid, slots, old_hash = item
        # A new hash: a custom request of the size in use still replaces it.
        wanted = (bool(ev["hash"]) and ev["hash"] != old_hash and bool(ev["custom"])
                  and ev["hash_mask"] == (slots - 1 if slots else 0))
        if wanted:
            r["result"], r["new_buckets"] = 0, _buckets(ev["hash_mask"], True)
            _pivoted(r, ev["t"])
        elif ev["tid"] == tid:
            r["result"] = -ENOMEM               # back from prctl, and the hash is not the one asked for
        else:
            continue
        p.awaiting.remove(item)


# Events whose hash fields show the hash in use.
_ADOPTING = {EVENT["FTE_HASH_SEEN"], EVENT["FTE_NEWTASK"], EVENT["FTE_PRCTL_ENTER"]}
# Events after which an inferred prctl result may be settled.
_RESOLVING = {EVENT["FTE_HASH_SEEN"], EVENT["FTE_NEWTASK"], EVENT["FTE_EXIT"], EVENT["FTE_PRCTL_ENTER"]}


class _Timeline:
    """Walks the events in time order; one handler per event kind."""

    def __init__(self, events: list[dict], kernel: dict, infer_prctl: bool, at_attach: dict | None):
        self.online = len(kernel.get("online_cpus", [])) or None
        self.gsize = kernel.get("global_hash", {}).get("buckets_per_node")
        self.infer_prctl = infer_prctl
        self.procs: dict[int, _Proc] = {}
        at_attach = at_attach or {}
        for pid, state in at_attach.get("processes", {}).items():
            self.procs.setdefault(int(pid), _Proc()).start_from(state)
        # Complete (iterator, system-wide or -p): a process not listed had no hash at attach.
        self.none_at_attach = bool(at_attach.get("complete"))
        self.resizes, self.threads, self.states = [], [], []
        # With the kprobe method futex_hash_allocate() itself is probed: its
        # events replace the resizes inferred from clone()/prctl().
        self.probed = {e["tgid"] for e in events if e["type"] == EVENT["FTE_ALLOC_ENTER"]}
        self.handlers = {
            EVENT["FTE_HASH_SEEN"]: self.on_hash_seen, EVENT["FTE_NEWTASK"]: self.on_newtask,
            EVENT["FTE_EXIT"]: self.on_exit, EVENT["FTE_PRCTL_ENTER"]: self.on_prctl_enter,
            EVENT["FTE_PRCTL_EXIT"]: self.on_prctl_exit, EVENT["FTE_ALLOC_ENTER"]: self.on_alloc_enter,
            EVENT["FTE_ALLOC_EXIT"]: self.on_alloc_exit, EVENT["FTE_PIVOT"]: self.on_pivot,
        }

    def feed(self, ev: dict) -> None:
        p = self.procs.get(ev["tgid"])
        if p is None:
            p = self.procs[ev["tgid"]] = _Proc()
            if self.none_at_attach:
                p.hash = 0
        if ev["type"] in _ADOPTING:
            p.adopt(ev)
        if p.awaiting and ev["type"] in _RESOLVING:
            _resolve_prctl(p, ev)
        handler = self.handlers.get(ev["type"])
        if handler is not None:
            handler(p, ev)

    def on_hash_seen(self, p: _Proc, ev: dict) -> None:
        # Not `p.hash is None`: a NEWTASK or prctl before the first futex call
        # sets p.hash, and the process would then never get a state.
        first = not p.seen
        p.seen = True
        if first or ev["hash"] != p.hash:
            now = _now_buckets(ev)
            self.states.append({"t": ev["t"], "pid": ev["tgid"], "comm": ev["comm"],
                                "buckets": now, "custom": bool(ev["custom"]),
                                "private": bool(ev["hash"]) and now > 0, "first_seen": first})
        p.settle(ev)

    def on_newtask(self, p: _Proc, ev: dict) -> None:
        flags, nr = ev["arg0"], ev["nr_threads"]
        self.threads.append({"t": ev["t"], "pid": ev["tgid"], "tid": ev["arg1"], "event": "new",
                             "clone_flags": flags, "nr_threads": nr})
        now = _now_buckets(ev)
        new_pending = _buckets(ev["hash_new_mask"], bool(ev["hash_new"])) if ev["hash_new"] else None
        changed = p.hash is not None and ev["hash"] != p.hash
        first_alloc = p.hash in (None, 0) and ev["hash"] and now
        # A clone never installs a custom hash: one seen here was installed by a
        # prctl (its inferred result is settled above), not by this clone.
        by_prctl = bool(ev["custom"]) and not new_pending
        if ev["tgid"] not in self.probed and not by_prctl and (changed or first_alloc
                                                               or (new_pending and p.pending is None)):
            before = threads_before_clone(nr, flags)
            formula = auto_buckets(before, self.online, self.gsize) if self.online and self.gsize else None
            r = _resize(ev["t"], ev, "clone", clone_flags=flags, threads=before, online=self.online,
                        requested=formula["buckets"] if formula else None, custom=False, result=0,
                        inferred=False, old_buckets=p.buckets if p.hash is not None else 0,
                        new_buckets=now if not new_pending else new_pending)
            if new_pending:
                p.pending = r
            else:
                r["pivot_t"], r["pending_s"] = ev["t"], 0.0   # installed at once
            self.resizes.append(r)
        p.settle(ev)

    def on_exit(self, p: _Proc, ev: dict) -> None:
        self.threads.append({"t": ev["t"], "pid": ev["tgid"], "tid": ev["tid"], "event": "exit",
                             "clone_flags": 0, "nr_threads": ev["nr_threads"]})

    def on_prctl_enter(self, p: _Proc, ev: dict) -> None:
        p.prctl[ev["tid"]] = ev
        now = _now_buckets(ev)
        if p.hash is None:
            p.hash, p.buckets, p.custom = ev["hash"], now, bool(ev["custom"])
        if not (self.infer_prctl and ev["arg1"] == PR_FUTEX_HASH_SET_SLOTS and ev["tgid"] not in self.probed):
            return
        r = _resize(ev["t"], ev, "prctl", clone_flags=None, threads=ev["nr_threads"], online=self.online,
                    requested=ev["arg0"], custom=True, result=_static_prctl_result(ev), inferred=True,
                    old_buckets=now, new_buckets=now)
        if r["result"] is None:
            p.awaiting.append((r, ev["tid"], ev["arg0"] & 0xFFFFFFFF, ev["hash"]))
        self.resizes.append(r)

    def on_prctl_exit(self, p: _Proc, ev: dict) -> None:
        enter = p.prctl.pop(ev["tid"], None)
        if enter is None or enter["arg1"] != PR_FUTEX_HASH_SET_SLOTS or ev["tgid"] in self.probed:
            return
        old = _now_buckets(enter)
        r = _resize(enter["t"], ev, "prctl", clone_flags=None, threads=enter["nr_threads"],
                    online=self.online, requested=enter["arg0"], custom=True, result=ev["ret"],
                    inferred=False, old_buckets=old, new_buckets=old)
        if ev["ret"] == 0:
            # A custom request waits in prctl() until its hash has taken over.
            r["new_buckets"] = _now_buckets(ev)
            _pivoted(r, ev["t"])
        self.resizes.append(r)
        p.settle(ev)

    def on_alloc_enter(self, p: _Proc, ev: dict) -> None:
        p.prctl[("alloc", ev["tid"])] = ev

    def on_alloc_exit(self, p: _Proc, ev: dict) -> None:
        enter = p.prctl.pop(("alloc", ev["tid"]), None)
        if enter is None:
            return
        custom = bool(enter["arg1"] & FH_CUSTOM)
        old = _now_buckets(enter)
        r = _resize(enter["t"], ev, "prctl" if custom else "clone", clone_flags=None,
                    threads=enter["nr_threads"], online=self.online, requested=enter["arg0"],
                    custom=custom, result=ev["ret"], inferred=False, old_buckets=old, new_buckets=old)
        if ev["ret"] == 0:
            if ev["hash"] != enter["hash"] and not ev["hash_new"]:
                r["new_buckets"] = _now_buckets(ev)
                _pivoted(r, ev["t"])
                p.hash, p.buckets = ev["hash"], r["new_buckets"]
            elif ev["hash_new"]:
                r["new_buckets"] = _buckets(ev["hash_new_mask"], True)
                p.pending = r
            # else nothing to do: already this size (new_buckets stays old)
        self.resizes.append(r)

    def on_pivot(self, p: _Proc, ev: dict) -> None:
        if ev["ret"] and p.pending is not None:
            _pivoted(p.pending, ev["t"])
            p.pending = None


def build_timeline(events: list[dict], kernel: dict, infer_prctl: bool = False,
                   at_attach: dict | None = None) -> dict:
    """Resizes, thread births/exits and hash states, from the events in time order,
    each process starting from its hash at attach where that was read."""
    tl = _Timeline(events, kernel, infer_prctl, at_attach)
    for ev in sorted(events, key=lambda e: e["t"]):
        tl.feed(ev)
    return {"resizes": tl.resizes, "threads": tl.threads, "hash_states": tl.states}
