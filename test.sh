#!/usr/bin/env bash
# Sets everything up, lints, then runs the whole test suite: unit tests, tests that load
# real BPF programs into this kernel, and the VM tests: one Debian kernel of each
# futex private-hash layout (6.18 and 7.3, side by side; see tests/vm/kernels.py).
#   ./test.sh                 what CI runs
#   ./test.sh --all-kernels   the full VM kernel matrix (see tests/vm/kernels.py)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/scripts/bootstrap.sh" --vm
cd "$here"
if [ "${1:-}" = "--all-kernels" ]; then
    export FUTEXTRACE_VM_KERNELS=all
    shift
fi
# Lint first (pyproject.toml [tool.ruff]): any finding fails the run before a test starts.
"$here/.venv/bin/ruff" check futextrace tests benchmarks scripts
exec "$here/.venv/bin/python" -m pytest -ra "$@"
