"""The signals that end a run (SIGINT, SIGTERM, SIGHUP), taken over for its
duration and given back after."""
from __future__ import annotations

import contextlib
import signal

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def routed_to(handler):
    """Inside, each stop signal calls `handler(signum, frame)`; after, the old
    handlers are back. A SIGHUP that was ignored stays ignored: under `nohup`
    a run must outlive its terminal."""
    old = {}
    try:
        for s in STOP_SIGNALS:
            if s == signal.SIGHUP and signal.getsignal(s) is signal.SIG_IGN:
                continue
            old[s] = signal.signal(s, handler)
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
