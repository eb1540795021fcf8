#!/usr/bin/env bash
# Sets everything up, then traces the built-in futex-hash workload.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/scripts/bootstrap.sh"
exec "$here/.venv/bin/futextrace" bench --threads 2 --futexes 1024 --runtime 3 "$@"
