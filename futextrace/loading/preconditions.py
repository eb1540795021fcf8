"""What every command that loads BPF or reads the hashes needs, each checked in
one place with one wording: uid 0, and a kernel with the futex private hash."""
from __future__ import annotations

import os

from futextrace.errors import EnvironmentProblem

NEEDS_ROOT = "futextrace needs root (CAP_BPF and CAP_PERFMON): run it with sudo"
NO_PRIVATE_HASH = ("this kernel has no futex private hash (CONFIG_FUTEX_PRIVATE_HASH, "
                   "Linux 6.17+): nothing for futextrace to show")


def require_root() -> None:
    """uid 0 (README, Deployment). The capabilities beside it are not checked
    here: a kernel that lacks one refuses the load and says so."""
    if os.geteuid() != 0:
        raise EnvironmentProblem(NEEDS_ROOT)


def require_private_hash(model) -> None:
    if not model.private_hash:
        raise EnvironmentProblem(NO_PRIVATE_HASH)
