#!/usr/bin/env bash
# Sets up everything futextrace needs on a Debian 12 machine, idempotently:
# Debian packages, a kernel header tree BCC can compile against, and the venv.
#   scripts/bootstrap.sh          packages for tracing and benchmarks
#   scripts/bootstrap.sh --vm     also what the VM tests need (QEMU, kmod, virtme-ng)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
want_vm=0
[ "${1:-}" = "--vm" ] && want_vm=1
cache=${FUTEXTRACE_CACHE:-/var/cache/futextrace}

say() { printf 'bootstrap: %s\n' "$*" >&2; }
die() { printf 'bootstrap: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (BPF tracing and apt-get need it), e.g. sudo $0"
command -v apt-get >/dev/null || die "this script supports Debian 12 (apt-get not found)"

# --- Debian packages -------------------------------------------------------
pkgs=(python3-bpfcc python3-venv bpftool linux-headers-amd64 gcc libc6-dev linux-perf)
# VM tests: virtme-ng boots Debian kernels whose 9p modules load from an initramfs it
# builds with busybox; depmod (kmod) indexes their modules; `file` reads the image's version.
[ $want_vm = 1 ] && pkgs+=(qemu-system-x86 kmod busybox-static file)
# The exporter's tests scrape it with a real Prometheus server they start themselves.
[ $want_vm = 1 ] && pkgs+=(prometheus)
# `futextrace set` must refuse a process already under strace: the tests start one.
[ $want_vm = 1 ] && pkgs+=(strace)
# `run --slots` on a musl static binary (no rt_sigreturn sequence in it: the fallback path).
[ $want_vm = 1 ] && pkgs+=(musl-tools)
# The HTML report's test renders it in a real headless browser.
[ $want_vm = 1 ] && pkgs+=(chromium)
# tests/deploy: systemd-analyze verifies the unit (systemd: on any Debian 12 host, not in
# a container); setpriv (util-linux, essential) runs its ExecStart with its capabilities.
[ $want_vm = 1 ] && pkgs+=(systemd)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing Debian packages: ${missing[*]}"
    apt-get update -q >/dev/null
    # policy-rc.d exit 101: no package's postinst starts its service (prometheus would
    # otherwise run on :9090 for good); the tests start their own server.
    rc_policy=/usr/sbin/policy-rc.d
    [ -e "$rc_policy" ] || { printf '#!/bin/sh\nexit 101\n' > "$rc_policy"; chmod +x "$rc_policy"; trap 'rm -f "$rc_policy"' EXIT; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
# The postinst may still have enabled it for the next boot: undo that, only when this run
# installed it (a Prometheus someone runs on purpose is left alone).
if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null \
        && systemctl is-enabled -q prometheus 2>/dev/null; then
    systemctl disable --now -q prometheus 2>/dev/null || true
fi

# --- kernel headers for BCC --------------------------------------------------
# BCC compiles every program against a kernel header tree. futextrace takes all
# futex/mm offsets from BTF, so any tree works; Debian's is split into -common
# and -amd64, which BCC only accepts merged (see futextrace/headers.py).
mkdir -p "$cache"

# --- venv -----------------------------------------------------------------
venv="$here/.venv"
stamp="$venv/.futextrace-installed"
want_stamp=$(sha256sum "$here/pyproject.toml" | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want_stamp" ]; then
    say "creating the venv in $venv"
    # The Debian interpreter, because python3-bpfcc's libbcc is built for it.
    /usr/bin/python3 -m venv "$venv"
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    # Expose only BCC from the distro, not all of dist-packages.
    ln -sfn /usr/lib/python3/dist-packages/bcc "$site/bcc"
    "$venv/bin/pip" install -q --disable-pip-version-check -e "$here[test]"
    [ $want_vm = 1 ] && "$venv/bin/pip" install -q --disable-pip-version-check 'virtme-ng>=1.30'
    echo "$want_stamp" > "$stamp"
fi
if [ $want_vm = 1 ] && [ ! -x "$venv/bin/vng" ]; then
    "$venv/bin/pip" install -q --disable-pip-version-check 'virtme-ng>=1.30'
fi
# An editable install leaves the package's own modules uncompiled, and where
# PYTHONDONTWRITEBYTECODE is set no run ever writes their .pyc files: every start
# would then compile ~80 modules (0.07-0.14 s of a 0.25 s warm start). Only
# stale or missing files are written.
"$venv/bin/python" -m compileall -q "$here/futextrace" >/dev/null
"$venv/bin/python" -m futextrace.kernel.headers --prepare >/dev/null
say "ready ($venv)"
