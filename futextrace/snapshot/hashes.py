"""The futex hash each running process uses now (`futextrace snapshot`).

Read from the kernel at once by the BPF task iterator (loading/iterator.py):
buckets, custom or automatic, global by prctl, the refcount mode and a
replacement waiting for its pivot, for every process, idle ones included.
Where the kernel refuses iterators, the fallback watches futex calls for a
moment (HASH_SEEN events, as `record` sees them) and says so: a process that
makes no futex call while watched is then "not seen".

This module: the entry point. Rows: procs/hashrows.py; reading and its checks:
procs/hashread.py (both shared with record/attachstate.py); the fallback:
hashwatch.py; `--watch`: watcher.py; the table's text: output/text/hashes_text.py.
"""
from __future__ import annotations

from futextrace.kernel import modelcache
from futextrace.loading.iterator import ITERATOR
from futextrace.procs.hashread import check_ready, header, open_iterator
from futextrace.procs.hashrows import iterator_rows
from futextrace.snapshot.hashwatch import read_by_watching


def read_hashes(pids: list[int], duration: float = 1.0, model=None) -> dict:
    model = model or modelcache.load_running()[0]     # this boot's cached model
    check_ready(model, pids)
    it, why = open_iterator(model)
    if it is None:
        return read_by_watching(pids, duration, model, why)
    with it:
        rows = iterator_rows(it.read(), list(pids))
    return {**header(model, ITERATOR, "read from the kernel by a BPF task iterator"),
            "processes": rows, "note": None}
