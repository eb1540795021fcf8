"""`futextrace doctor`'s report in words: the kernel model, privileges, headers,
PR_FUTEX_HASH and each attach method (loading/doctor.py gathers the facts)."""
from __future__ import annotations

from futextrace.loading import doctor as doc


def _yes(b) -> str:
    return "yes" if b else "no"


def doctor_text(r: dict) -> str:
    """The report of loading/doctor.run() (its JSON, less `_model`) as lines."""
    k = r["kernel"]
    out = [f"kernel {k['release'] or '(from ' + k['btf_source'] + ')'}  (model from {k['btf_source']}, "
           f"symbols from {k['symbols_source']})"]
    out.append(f"  private futex hash: {_yes(k['private_hash'])}; mm_struct layout: {k['mm_layout']}; "
               f"bucket has priv: {_yes(k['bucket_has_priv'])}")
    fh = k["functions"]["futex_hash"]
    if fh["return_type"]:
        out.append(f"  futex_hash returns {fh['return_type']}"
                   + (" (by value)" if fh["return_kind"] == "struct" else ""))
    out.append("  functions (symbol / inlined):")
    for f in k["functions"].values():
        if not f["in_btf"] and not f["has_symbol"]:
            out.append(f"    {f['name']}: inlined (no symbol)")
            continue
        ret = f"{f['return_type']} " if f["return_type"] else ""
        params = ", ".join((f"{t}{n}" if t.endswith("*") else f"{t} {n}").strip()
                           for n, t in f["params"]) or "void"
        sym = f["symbol"] if f["has_symbol"] else "no symbol"
        out.append(f"    {ret}{f['name']}({params})  [{sym}]")
    out.append("  offsets: " + ", ".join(f"{key}={v}" for key, v in k["offsets"].items()
                                         if not key.startswith("pt_regs")))
    out.append("  sizes: " + ", ".join(f"{key}={v}" for key, v in k["sizes"].items()))
    g = k["global_hash"]
    if g:
        out.append(f"  global hash: {g['buckets_per_node']} buckets per node (shift {g['shift']}), "
                   f"{g['nodes']} node(s), from {g['source']}")
    t = k["topology"]
    if t:
        out.append(f"  CPUs online {t['online_cpus']}, possible {t['possible_cpus']}; "
                   f"nodes {t['nodes']}; cpu->node {t['cpu_node']}")
    out.append(f"  clone rule: {k['clone_rule']} ({k['clone_rule_source']})")
    for n in k["notes"]:
        out.append(f"  note: {n}")
    p = r["privileges"]
    out.append("privileges: " + ", ".join(f"{n} {_yes(v)}" for n, v in p.items()))
    h = r["headers"]
    if h["path"]:
        match = "match the running kernel" if h["matches_running"] else \
            "do NOT match the running kernel (fine: offsets come from BTF)"
        out.append(f"BCC compiles against headers {h['version'] or '?'} at {h['path']}: they {match}")
    else:
        out.append("BCC headers: none found (run scripts/bootstrap.sh)")
    pr = r["prctl"]
    out.append("PR_FUTEX_HASH: " + (f"works (GET_SLOTS here = {pr['get_slots']})" if pr["works"]
                                    else f"fails ({pr['error']})"))
    out.append("attach methods (each proven by loading and attaching a tiny BPF program):")
    for m in r["methods"]:
        fired = f"; saw our test futex call {m['fired']}x" if m["fired"] is not None else ""
        out.append(f"  {doc.LABELS[m['name']]:17} {'works' if m['works'] else 'NO':5}  {m['reason']}{fired}")
    rec = r["recommended"]
    out.append(f"recommended method: {doc.LABELS.get(rec, rec) if rec else 'none'}")
    return "\n".join(out)
