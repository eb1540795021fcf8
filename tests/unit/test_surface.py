"""The command line's common surface: every command's help has examples and the
exit codes, --json means the same everywhere, option help is written alike,
a method the kernel cannot serve is refused with its reason, and attach failures share one exit
code. Pure Python; no BPF is loaded."""
from __future__ import annotations

from pathlib import Path

import click
import pytest

from futextrace.cli import COMMANDS, cli
from futextrace.errors import EXIT_KERNEL, EnvironmentProblem, KernelRefused
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
        # report reads JSON; serve serves metrics over HTTP; cache fills a directory:
        # none writes a JSON document.
        assert name in ("report", "serve", "cache"), f"{name} has no --json"
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


class _Func:
    def __init__(self, name, ret="pointer", btf=True, symbol=True):
        self.name, self.in_btf, self.has_symbol = name, btf, symbol
        self.symbol = name if symbol else None
        self.return_kind, self.return_type, self.fragments = ret, f"{ret} type", []


class _Layout:
    """A kernel model with only what methods.py and fentry.py read."""

    def __init__(self, ret="pointer", priv=True, btf_id=None):
        self.functions = {"futex_hash": _Func("futex_hash", ret)}
        self.bucket_has_priv = priv
        self.func_btf_ids = {"futex_hash": btf_id} if btf_id else {}

    def probeable(self, name):
        return name in self.functions


@pytest.mark.parametrize("layout, words", [
    (_Layout(ret="struct"), "by value"),          # 7.2+: futex_bucket_ref
    (_Layout(priv=False, btf_id=7), "no priv member"),
])
def test_fentry_refused_for_the_layout_with_the_reason(layout, words, monkeypatch):
    from futextrace.loading import fentry
    monkeypatch.setattr(fentry, "trial", lambda *_: (0, ""))   # no bpf(2) here: the layout decides
    assert words in fentry.static_refusal(layout)
    with pytest.raises(EnvironmentProblem, match=f"method fentry is not available here: .*{words}.*--method auto"):
        methods.choose_method(layout, "fentry")


def test_auto_prefers_fentry_then_kprobe_then_tracepoint(monkeypatch):
    monkeypatch.setattr(methods, "fentry_precondition", lambda m: None)
    monkeypatch.setattr(methods, "PRECONDITION", {"fentry": lambda m: None, "kprobe": lambda m: None})
    assert [m for m, _ in methods.candidates(_Layout(), "auto")] == ["fentry", "kprobe", "tracepoint"]
    monkeypatch.setattr(methods, "PRECONDITION", {"fentry": lambda m: "refused (EPERM)",
                                                  "kprobe": lambda m: "no kprobes"})
    (only,) = methods.candidates(_Layout(), "auto")
    assert only[0] == "tracepoint" and "fentry not usable: refused (EPERM)" in only[1]
    assert methods.candidates(_Layout(), "tracepoint") == [("tracepoint", "asked for with --method")]


@pytest.mark.parametrize("proven, expect", [
    ({"fentry", "kprobe", "tp_btf"}, "fentry"),          # trampolines first: no trap
    ({"kprobe", "tp_btf"}, "kprobe"),
    ({"fentry", "tp_btf", "raw_tracepoint"}, "fentry"),
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
