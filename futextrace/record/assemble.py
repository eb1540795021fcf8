"""A recording from a tracing session (record/session.py) and its map reader
(loading/maps.py): the reader's dump, the session's events and window, and
the `kernel` and `method` sections, through aggregate.build_recording."""
from __future__ import annotations

from futextrace.loading.loader import BLIND_SPOTS, PRCTL_INFERRED
from futextrace.procs import targets
from futextrace.record.aggregate import KIND_NAMES, build_recording
from futextrace.record.lockwaits import lockwaits_section
from futextrace.recording import Recording


def kernel_facts(model) -> dict:
    """The recording's `kernel` section: what the model learned."""
    topo, g = model.topology, model.global_hash
    return {"release": model.release, "online_cpus": topo.online_cpus,
            "cpu_node": {str(k): v for k, v in topo.cpu_node.items()}, "nodes": topo.nodes,
            "global_hash": {"buckets_per_node": g.buckets_per_node, "shift": g.shift,
                            "nodes": g.nodes, "source": g.source},
            "clone_rule": model.clone_rule,
            "futex_hash_bucket_size": model.sizes.get("futex_hash_bucket"), "hash_returns": model.hash_returns,
            "mm_layout": model.mm_layout}


def method_facts(session) -> dict:
    """The recording's `method` section: what was attached, why, and its blind spots."""
    program = session.program
    inferred = session.method == "tracepoint" and not program.exact_prctl
    probes = program.probes
    return {"name": session.method, "why": session.why,
            "blind_spots": BLIND_SPOTS[session.method] + ([PRCTL_INFERRED] if inferred else []),
            "prctl_results": "inferred" if inferred else "exit",
            "probes": probes,
            "probes_fallback": program.fallback_reason,
            **({"comm_filter": session.comm_how} if session.comm_how else {}),
            "refcount_probes": [p for p in probes
                                if p.startswith(("k", "fentry:", "fexit:"))
                                and ("private_hash" in p or "hash_put" in p or "hash_get" in p
                                     or p.endswith(":futex_hash"))]}


def raw_dump(session, reader, intervals: list[dict]) -> dict:
    """Everything the kernel side holds, as plain data (see aggregate.py):
    the reader's dump of the maps, the session's events, the -i rows."""
    return {**reader.dump(), "events": session.events, "intervals": intervals}


def recording(session, reader, duration: float, intervals: list[dict] | None = None) -> Recording:
    """The recording (docs/json-schema.md) of a session whose counting has stopped."""
    opts = session.opts
    raw = raw_dump(session, reader, intervals if intervals is not None else [])
    if opts.hash_kind != "all":
        keep = ("private",) if opts.hash_kind == "private" else ("global", "global_shared", "global_numa")
        raw["futexes"] = [f for f in raw["futexes"] if KIND_NAMES.get(f["kind"]) in keep]
        raw["buckets"] = [b for b in raw["buckets"] if KIND_NAMES.get(b["kind"]) in keep]
    kernel, method = kernel_facts(session.model), method_facts(session)
    for pid in {e["tgid"] for e in session.events} | set(opts.pids):
        session.comms.setdefault(pid, targets.comm_label(pid))
    raw["hash_at_attach"] = session.attach_state
    rec = build_recording(raw, kernel, method, duration, session.started_at, session.comms)
    rec["contention"] = lockwaits_section(raw, duration, session.comms)
    # Only private-hash bucket locks are traced: with no private lookup, a wait count is unknown, not 0.
    rec["contention"]["private_lookups"] = rec["totals"]["private"]
    rec["totals"]["thread_events_dropped"] = session.thread_events_dropped
    rec["attach_s"] = session.attach_s
    rec["monotonic_start_ns"] = session.t0_ns   # t = 0: lines up a workload's CLOCK_MONOTONIC stamps
    rec["window"] = session.window()
    rec["attach_phases_s"] = dict(session.timings)
    rec["compile_cache"] = session.compile_cache
    rec["early_maps"] = session.early_maps
    rec["early_programs"] = session.early_programs
    rec["kernel"]["model_cached"] = session.model_cached
    return rec
