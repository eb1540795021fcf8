"""`futextrace run`: start a program with its futex hash size set before it runs."""
from __future__ import annotations

import os
import signal
import sys

import click

from futextrace.acting import follow, launch
from futextrace.commands.options import json_option
from futextrace.commands.set import slots_choice
from futextrace.errors import EXIT_CODES_HELP, KernelRefused
from futextrace.output.text import acting_text
from futextrace.output.jsonio import open_output, write_json
from futextrace.procs.targets import StoppedChild

EXAMPLES = """\b
Examples:
  futextrace run --slots 256 -- ./myservice --port 8080
  futextrace run --global -- ./myservice     # the shared global hash
  futextrace run --auto -- ./myservice       # the kernel's automatic size: the control run
\b
The size is set in the new program image before its first instruction (the process
stops at its exec for a moment): dynamically and statically linked programs alike,
with no preload and an untouched environment. Without --children it holds for that
process only: a process it forks or execs starts with the kernel's automatic hash
(the kernel gives every new address space its own). With --children futextrace stays
the tracer of the program's tree (as strace -f) and sets each new process too, until
the program exits. A set-user-ID program needs futextrace as root.
futextrace prints one line on stderr and exits with the program's status.
"""


@click.command(epilog=EXAMPLES + "\n" + EXIT_CODES_HELP)
@click.option("--slots", type=click.IntRange(min=0), metavar="N",
              help="buckets: a power of two, at least 2 (the kernel judges)")
@click.option("--global", "to_global", is_flag=True, help="the global hash, for good")
@click.option("--auto", "automatic", is_flag=True, help="set nothing: the kernel's automatic size")
@click.option("--children", is_flag=True,
              help="also every process it starts (futextrace stays its tracer, as strace -f, "
                   "until it exits); without it they get the kernel's automatic hash")
@json_option("the kernel's answers")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def command(slots, to_global, automatic, children, json_path, command):
    """Start COMMAND with the given futex hash size."""
    if automatic and (slots is not None or to_global or children):
        raise click.UsageError("--auto sets nothing: leave out --slots/--global/--children")
    want = None if automatic else slots_choice(slots, to_global)
    if want is not None:
        launch.check_command(command[0])
    if children:
        return _run_followed(list(command), want, json_path)
    out = open_output(json_path) if json_path else None
    child = StoppedChild(list(command), stdout_to_stderr=json_path == "-")
    try:
        answer = launch.start(child, want)
    except BaseException:
        child.kill()
        raise
    name = os.path.basename(command[0])
    if want is None:
        click.echo(f"futextrace: {name} ({child.pid}): the kernel's automatic hash, nothing set", err=True)
    else:
        doc = answer.as_json(want, name, child.pid)
        why = acting_text.refusal(doc)
        if not why:
            click.echo("futextrace: " + acting_text.result_line(doc, "before its first instruction"),
                       err=True)
        if out is not None:
            write_json(out, doc)
        if why:
            raise KernelRefused(f"{name} was not started: {why}")
    sys.exit(_wait(child))


def _run_followed(argv: list[str], want: int, json_path: str | None) -> None:
    """run --children: the program and every process it starts (acting/follow.py)."""
    out = open_output(json_path) if json_path else None
    child = StoppedChild(argv, stdout_to_stderr=json_path == "-")
    try:
        launch.seize_child(child.pid, follow.OPTIONS)
        child.go()
    except BaseException:
        child.kill()
        raise
    for s in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(s, signal.SIG_IGN)
    follower = follow.Follower(child.pid, want)
    status = follower.run()
    click.echo("futextrace: " + acting_text.tree_summary(follower.answers, want), err=True)
    if out is not None:
        write_json(out, {"processes": follower.answers})
    root = next((d for d in follower.answers if d["pid"] == child.pid), None)
    if root and acting_text.refusal(root):
        raise KernelRefused(f"{root['comm']} was not started: {acting_text.refusal(root)}")
    sys.exit(128 - status if status < 0 else status)


def _wait(child: StoppedChild) -> int:
    """The program's exit status; Ctrl-C and the like are the program's to handle
    (it shares our process group), so they only wait here, as under `time`."""
    for s in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(s, signal.SIG_IGN)
    while not child.exited():
        try:
            os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            break
    status = child.status()
    child.output_tail()
    return 128 - status if status is not None and status < 0 else (status or 0)
