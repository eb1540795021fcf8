"""deploy/Containerfile: its setup is scripts/bootstrap.sh, the script a Debian 12 host runs.

The build machines reach no container registry, so the image is not built here. What is
checked instead: the image starts from Debian 12 (the distribution bootstrap.sh supports)
and installs nothing except through bootstrap.sh; the build context holds what
bootstrap.sh and `pip install -e .` read; the entry point is the venv bootstrap.sh makes;
and the step that makes the header tree for BCC_KERNEL_SOURCE, run here as the image runs
it, gives a tree BCC accepts."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.deployfiles import (INSTALL_DIR, REPO, containerfile_instructions, dockerignore_excludes,
                                     unit_environment)

# The commands the RUN may use besides bootstrap.sh: link the header tree, clean up.
HOUSEKEEPING = {"ln", "rm"}


def instructions(kind: str) -> list[str]:
    return [args for k, args in containerfile_instructions() if k == kind]


def test_base_is_debian_12():
    (base,) = instructions("FROM")
    assert re.fullmatch(r"(docker\.io/)?(library/)?debian:(12|bookworm)(-slim)?(@sha256:[0-9a-f]+)?", base), base


def test_setup_is_bootstrap_sh_and_nothing_else():
    (run,) = instructions("RUN")
    assert instructions("WORKDIR") == [INSTALL_DIR] and instructions("COPY") == [". ."]
    commands = []
    for part in run.split("&&"):
        words = [w for w in shlex.split(part) if not re.match(r"^[A-Z_]+=", w)]   # drop VAR=value
        commands.append((words[0], words[1:]))
    assert commands[0] == ("./scripts/bootstrap.sh", []), commands   # the host's setup, without --vm
    assert {c for c, _ in commands[1:]} <= HOUSEKEEPING, commands
    assert "pip" not in run and "apt-get" not in run, run
    # Nothing else may install or fetch: every instruction is one of these.
    assert {k for k, _ in containerfile_instructions()} <= {"FROM", "WORKDIR", "COPY", "RUN", "ENV", "EXPOSE",
                                                             "ENTRYPOINT", "CMD", "LABEL"}


def test_build_context_holds_what_bootstrap_and_pip_read():
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    needed = [p for p in tracked if p.split("/")[0] in ("futextrace", "bpf", "scripts")]
    needed += ["pyproject.toml", "README.md"]             # README.md: pyproject's readme
    assert needed and not [p for p in needed if dockerignore_excludes(p)]
    assert dockerignore_excludes(".venv/bin/python")     # the image makes its own venv
    assert dockerignore_excludes(".git/HEAD")


def test_entrypoint_is_the_venv_bootstrap_makes():
    (entry,) = instructions("ENTRYPOINT")
    assert json.loads(entry) == [f"{INSTALL_DIR}/.venv/bin/futextrace"]
    assert 'venv="$here/.venv"' in (REPO / "scripts/bootstrap.sh").read_text()
    (cmd,) = instructions("CMD")
    assert json.loads(cmd)[0] == "serve"


def test_header_step_gives_bcc_a_tree(tmp_path):
    """The RUN's second half, here: with the image's cache, the headers module prepares a
    tree from Debian's linux-headers (what bootstrap.sh installed), and the link
    BCC_KERNEL_SOURCE names resolves to it."""
    from futextrace.kernel import headers
    if headers.find_header_tree(prepare=False) is None and not list(Path("/usr/src").glob("linux-headers-*-amd64")):
        pytest.skip("no Debian linux-headers here: run scripts/bootstrap.sh")
    (run,) = instructions("RUN")
    env_line = dict(e.split("=", 1) for e in instructions("ENV"))
    link = env_line["BCC_KERNEL_SOURCE"]
    m = re.search(r'ln -sn "\$\(FUTEXTRACE_CACHE=(\S+) \.venv/bin/python -m futextrace\.kernel\.headers --prepare\)" '
                  rf"{re.escape(link)}", run)
    assert m, run
    cache = tmp_path / Path(m.group(1)).name
    env = {k: v for k, v in os.environ.items() if k != "BCC_KERNEL_SOURCE"}
    env["FUTEXTRACE_CACHE"] = str(cache)
    out = subprocess.run([sys.executable, "-m", "futextrace.kernel.headers", "--prepare"], env=env,
                         capture_output=True, text=True, timeout=600, check=True).stdout.strip()
    tree = Path(out)
    assert headers._usable(tree), out
    running_build = Path("/lib/modules") / os.uname().release / "build"
    if not headers._usable(running_build):      # the image has no /lib/modules: it merges into its cache
        assert tree.is_relative_to(cache), out


def test_image_environment_matches_the_unit():
    """What the unit sets for the exporter's process, the image sets too."""
    image_env = dict(e.split("=", 1) for e in instructions("ENV"))
    assert unit_environment() and unit_environment().items() <= image_env.items()
