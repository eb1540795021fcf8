"""pyroute2's proc connector classes without the rest of pyroute2.

`import pyroute2` (and so any `pyroute2.x.y`, which runs the package's
__init__ first) imports every socket family it supports: 0.25-0.6 s of CPU
and ~22 MiB RSS measured, against ~0.13 s and ~12 MiB for the connector's
own modules (most of that is asyncio, which pyroute2's netlink core needs).
A resident tracer pays that for three names (issue 44).

So the package is registered without running its __init__, and its
submodules imported from it. Anyone who later asks the package for a name it
defines (`from pyroute2 import IPRoute`) gets the real __init__ run then, in
place, through a module __getattr__: the package stays whole for other users.
"""
from __future__ import annotations

import importlib.util
import sys
import threading

_lock = threading.RLock()


def proc_connector():
    """(ProcEventSocket, ProcEventMarshal, NetlinkError) from pyroute2; raises
    ImportError when pyroute2 is not installed."""
    with _lock:
        if "pyroute2" not in sys.modules:
            _register_package_lazily("pyroute2")
    from pyroute2.netlink.connector.cn_proc import ProcEventMarshal, ProcEventSocket
    from pyroute2.netlink.exceptions import NetlinkError
    return ProcEventSocket, ProcEventMarshal, NetlinkError


def _register_package_lazily(name: str) -> None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"No module named '{name}'", name=name)
    package = importlib.util.module_from_spec(spec)

    def finish(attr: str):
        # A submodule (`from pyroute2 import config` looks for it here first) or
        # an interpreter probe is not the package's own name: no __init__ for it.
        if (attr.startswith("__") and attr not in ("__version__", "__all__")) \
                or importlib.util.find_spec(f"{name}.{attr}") is not None:
            raise AttributeError(f"module '{name}' has no attribute '{attr}'")
        # First name asked of the package itself: run its __init__ now.
        with _lock:
            if package.__dict__.pop("__getattr__", None) is not None:
                spec.loader.exec_module(package)
        return getattr(package, attr)

    package.__getattr__ = finish
    sys.modules[name] = package
