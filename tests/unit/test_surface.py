"""The command line's common surface: every command's help has examples and the
exit codes, --json means the same everywhere, option help is written alike,
`--method fentry` is refused with a reason, and attach failures share one exit
code. Pure Python; no BPF is loaded."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from futextrace.cli import COMMANDS, cli
from futextrace.errors import EXIT_KERNEL, EXIT_USAGE, KernelRefused, UsageError
from futextrace.loading import kprobes, methods

ROOT = Path(__file__).resolve().parents[2]


def command(name: str) -> click.Command:
    return cli.get_command(click.Context(cli), name)


def help_text(name: str) -> str:
    with click.Context(command(name), info_name=name) as ctx:
        return command(name).get_help(ctx)


@pytest.mark.parametrize("name", COMMANDS)
def test_help_has_examples_and_exit_codes(name):
    text = help_text(name)
    assert "Examples:" in text and "Exit codes:" in text
    examples = text.split("Examples:")[1].split("Exit codes:")[0]
    assert f"futextrace {name}" in examples


@pytest.mark.parametrize("name", COMMANDS)
def test_json_takes_a_file_everywhere(name):
    opts = {o.name: o for o in command(name).params if isinstance(o, click.Option)}
    if "json_path" not in opts:
        # report reads JSON; serve serves metrics over HTTP: neither writes a JSON document.
        assert name in ("report", "serve"), f"{name} has no --json"
        return
    o = opts["json_path"]
    assert o.opts == ["--json"] and not o.is_flag and o.metavar == "FILE"
    assert o.help.endswith("('-': stdout, instead of the text)")


@pytest.mark.parametrize("name", COMMANDS)
def test_option_help_starts_lowercase(name):
    for o in command(name).params:
        words = (getattr(o, "help", None) or "x").split()
        first = words[0].strip("(:,")
        # Lower case, or a name written in capitals (PR_FUTEX_HASH, BTF, ...).
        assert first[0].islower() or first.isupper(), f"{name} {o.opts}: {o.help!r}"


def test_fentry_is_refused_with_the_reason():
    with pytest.raises(UsageError, match="no fentry programs.*--method kprobe"):
        methods.choose_method(None, "fentry")
    r = subprocess.run([sys.executable, "-m", "futextrace.cli", "record", "--method", "fentry", "-d", "1"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == EXIT_USAGE
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "fentry" in lines[0] and "kprobe" in lines[0], r.stderr


@pytest.mark.parametrize("proven, expect", [
    ({"fentry", "kprobe", "tp_btf"}, "kprobe"),          # fentry loads, yet record has no fentry programs
    ({"fentry", "tp_btf", "raw_tracepoint"}, "tracepoint"),
    ({"raw_tracepoint"}, "tracepoint"),                 # the tracepoint method's fallback hook
    ({"tracepoint"}, None),                             # sys_enter_futex alone serves no method
    (set(), None),
])
def test_recommendation_follows_records_order(proven, expect):
    assert methods.recommended(proven) == expect


class _Fn:
    def __init__(self, name):
        self.has_symbol, self.symbol = True, name


class _Model:
    bucket_has_priv = False
    futex_symbols: dict = {}
    functions = {p[0]: _Fn(p[0]) for p in kprobes.PROBES}


class _RefusingBpf:
    def attach_kprobe(self, **_):
        raise Exception("Failed to attach BPF program kp_futex_hash to kprobe futex_hash")

    attach_kretprobe = attach_kprobe


def test_kprobe_attach_failure_exits_like_a_tracepoint_one():
    """Both are the kernel refusing an attach: KernelRefused, exit 6 (loader.py
    raises it for the tracepoint hooks)."""
    with pytest.raises(KernelRefused) as e:
        kprobes.attach_kprobes(_RefusingBpf(), _Model(), "kprobe")
    assert e.value.exit_code == EXIT_KERNEL and "futex_hash" in str(e.value)
