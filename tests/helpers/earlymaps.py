"""Early maps (futextrace/loading/earlymaps.py) for a test: the module's state
reset and its cache directory the test's own, and a cache entry's map
description to feed it."""
from __future__ import annotations

from futextrace.loading import earlymaps, earlyprograms

BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_PERCPU_HASH = 2, 5


def isolate(monkeypatch, cache) -> None:
    """No command started yet, no early map or program pending, the program cache in `cache`."""
    monkeypatch.setenv("FUTEXTRACE_CACHE", str(cache))
    monkeypatch.delenv("FUTEXTRACE_NO_PROG_CACHE", raising=False)
    monkeypatch.setattr(earlymaps, "_command", None)
    monkeypatch.setattr(earlymaps, "_shape", None)
    monkeypatch.setattr(earlymaps, "_early", {})
    monkeypatch.setattr(earlyprograms, "_pending", None)


def map_table(name="futexes", map_type=BPF_MAP_TYPE_PERCPU_HASH, key=24, leaf=32, entries=65536,
              flags=0) -> dict:
    """A map as a cache entry describes it (progcache.tables)."""
    return {"name": name, "type": map_type, "key_size": key, "leaf_size": leaf, "max_entries": entries,
            "flags": flags, "key_desc": "", "leaf_desc": "", "fields": []}
