"""The header tree BCC compiles against, prepared from nothing: an empty cache,
no $BCC_KERNEL_SOURCE, Debian's split linux-headers packages. CI machines
usually have a warm cache, which once hid a merge that failed on every fresh
machine; this test always starts cold."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
              pytest.mark.skipif(not glob.glob("/usr/src/linux-headers-*-amd64"),
                                 reason="needs Debian's linux-headers-amd64")]

# Runs in a fresh interpreter: headers.CACHE is read from the environment at import.
PREPARE = """
import json
from futextrace.kernel import headers
tree = headers._merge_debian_split()
found = headers.find_header_tree(prepare=False)
print(json.dumps({"merged": str(tree) if tree else None,
                  "found": str(found.path) if found else None}))
"""

COMPILE = """
from bcc import BPF
b = BPF(text='#include <linux/sched.h>\\n'
             'int f(struct __sk_buff *skb) { return sizeof(struct task_struct) > 0; }')
b.load_func("f", BPF.SOCKET_FILTER)
print("compiled")
"""


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Merge into an empty cache that already holds a merge in progress (dot
    name) and a half-written tree under the final name: neither may be used."""
    cache = tmp_path_factory.mktemp("cache")
    newest = sorted(glob.glob("/usr/src/linux-headers-*-amd64"), reverse=True)[0]
    name = os.path.basename(newest).removeprefix("linux-headers-")
    partial = cache / "headers" / f".{name}.inprogress"
    (partial / "include/linux").mkdir(parents=True)
    (partial / "include/linux/kconfig.h").write_text("/* half */\n")
    half = cache / "headers" / name
    (half / "include/linux").mkdir(parents=True)
    (half / "include/linux/kconfig.h").write_text("/* half */\n")
    env = {k: v for k, v in os.environ.items() if k != "BCC_KERNEL_SOURCE"}
    env["FUTEXTRACE_CACHE"] = str(cache)
    p = subprocess.run([sys.executable, "-c", PREPARE], capture_output=True, text=True,
                       env=env, timeout=900)
    assert p.returncode == 0, p.stderr
    return cache, name, json.loads(p.stdout), env


def test_merge_replaces_a_half_written_tree(prepared):
    cache, name, res, _ = prepared
    tree = cache / "headers" / name
    assert res["merged"] == str(tree)
    assert (tree / "include/generated/autoconf.h").is_file()
    assert (tree / "arch/x86/include").is_dir()
    assert "half" not in (tree / "include/linux/kconfig.h").read_text()


def test_only_complete_trees_are_found(prepared):
    cache, name, res, _ = prepared
    assert res["found"] == str(cache / "headers" / name)
    # The merge's own temporary directory is gone; the dot-named one we planted
    # stays (it may be another merge's) and was never taken.
    dot = sorted(p.name for p in (cache / "headers").iterdir() if p.name.startswith("."))
    assert dot == [f".{name}.inprogress"]


def test_every_link_resolves(prepared):
    """Debian's relative links (scripts, tools -> ../../lib/linux-kbuild-X) must
    point where they resolve from the cache."""
    cache, name, _, _ = prepared
    tree = cache / "headers" / name
    links = [Path(d) / n for d, dirs, files in os.walk(tree) for n in dirs + files
             if (Path(d) / n).is_symlink()]
    dangling = [str(p) for p in links if not p.exists()]
    assert not dangling, dangling[:10]
    for top in ("scripts", "tools"):
        if (tree / top).is_symlink():
            assert (tree / top).resolve().is_dir()


def test_bcc_compiles_against_the_fresh_tree(prepared):
    cache, name, _, env = prepared
    env = {**env, "BCC_KERNEL_SOURCE": str(cache / "headers" / name)}
    p = subprocess.run([sys.executable, "-c", COMPILE], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "compiled", p.stderr[-2000:]
