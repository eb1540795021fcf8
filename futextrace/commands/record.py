"""`futextrace record`: trace the futex hash of a command or of running processes."""
from __future__ import annotations

import click

from futextrace.errors import EXIT_CODES_HELP, FileProblem, KernelRefused, TargetError, UsageError
from futextrace.acting import launch
from futextrace.commands.options import SECONDS, json_option, refuse_quiet_without_output, text_wanted
from futextrace.output import jsonio
from futextrace.output.text import acting_text
from futextrace.output.text.live_text import LiveView
from futextrace.record.recorder import RecordOptions, RecordOutputs, record_command, record_pids
from futextrace.record.startup import set_rt_priority
from futextrace.recording import Recording

EXAMPLES = """\b
Examples:
  futextrace record -- ./myservice        # trace a command until it exits
  futextrace record -p 1234 -d 10         # trace PID 1234 for 10 seconds
  futextrace record -i 1 -T               # everything, per-second rates with timestamps
  futextrace record --json out.json -- perf bench futex hash -r 2
"""


@click.command(epilog=EXAMPLES + "\n" + EXIT_CODES_HELP,
               context_settings={"ignore_unknown_options": False})
@click.option("-p", "--pid", "pids", type=int, multiple=True, help="trace this process (repeatable)")
@click.option("--tid", "tids", type=int, multiple=True, help="trace only this thread (repeatable)")
@click.option("--comm", "comms", multiple=True,
              help="trace only processes with this name (repeatable): followed as they fork, exec "
                   "and exit (proc connector); with -p, tasks whose name matches, compared in BPF")
@click.option("--cgroup", "cgroups", multiple=True, help="trace only tasks in this cgroup v2 path")
@click.option("--hash", "hash_kind", type=click.Choice(["all", "private", "global"]), default="all",
              show_default=True, help="report lookups of this hash only")
@click.option("-d", "--duration", type=SECONDS, help="stop after this many seconds")
@click.option("-i", "--interval", type=SECONDS, help="print rates every INTERVAL seconds")
@click.option("-T", "--timestamps", is_flag=True, help="timestamps on interval lines")
@click.option("--jsonl", "jsonl_path", type=click.Path(dir_okay=False),
              help="write per-interval JSON lines here ('-' = stdout)")
@json_option("the recording")
@click.option("--method", type=click.Choice(["auto", "fentry", "kprobe", "tracepoint"]), default="auto",
              show_default=True,
              help="auto: fentry/fexit where the kernel loads them (6.17-7.1), else kprobes, else the "
                   "tracepoint method (see `futextrace doctor`)")
@click.option("--max-futexes", type=click.IntRange(1024, 1 << 22), default=None,
              help="distinct futexes kept in the per-futex list; beyond that, bucket and process counts "
                   "stay exact and futex counts, distinct futexes and collisions are reported as bounds "
                   "[default: 65536 up to 8 CPUs, halved per doubling of CPUs beyond, at least "
                   "4096: the per-CPU map stays under 32 MiB]")
@click.option("--exact-prctl", is_flag=True,
              help="tracepoint method: hook prctl's exit for exact PR_FUTEX_HASH results and pivot times, "
                   "at a cost on every syscall (~12 ns measured); without it they are inferred")
@click.option("--rt-priority", type=int, metavar="N",
              help="run the tracer itself under SCHED_FIFO priority N (1-99), for when real-time "
                   "threads hold every CPU; the traced command keeps its normal policy")
@click.option("-q", "--quiet", is_flag=True,
              help="no text summary (with --json, --jsonl, -i or -- COMMAND; alone it is refused: "
                   "nothing would show)")
@click.option("-v", "--verbose", is_flag=True,
              help="list every process in the summary (processes under 1% of the lookups, or beyond "
                   "the 10 busiest, are otherwise folded into one line)")
@click.option("--slots", "command_slots", type=click.IntRange(min=0), metavar="N",
              help="with -- COMMAND: start it with N futex hash buckets (0: the global hash), "
                   "set before its first instruction as `futextrace run` does; kept in the JSON")
@click.option("--no-call-sites", "no_call_sites", is_flag=True,
              help="take no user stacks (the call site of each futex's first lookup and of its first "
                   "bucket-lock waits): saves their cost, a few microseconds per new futex and wait")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def command(pids, tids, comms, cgroups, hash_kind, duration, interval, timestamps, jsonl_path,
            json_path, method, max_futexes, exact_prctl, rt_priority, quiet, verbose, command_slots,
            no_call_sites, command):
    """Trace futex hash lookups, refcount traffic and resizes.

    With -- COMMAND, starts the command and traces it (and processes it forks)
    until it exits; with -p, traces running processes; with neither, traces
    every process until Ctrl-C or --duration."""
    # With a command, its own output remains (a run traced for its cost alone).
    refuse_quiet_without_output(quiet, json_path, jsonl_path, interval, command)
    if command_slots is not None and not command:
        raise UsageError("--slots sets the size of a command futextrace starts: add -- COMMAND "
                         "(for a running process: futextrace set -p PID --slots N)")
    if command_slots is not None:
        launch.check_command(command[0])
    if not quiet or interval or "-" in (json_path, jsonl_path):
        jsonio.require_stdout()
    jsonio.guard_closed_stdout()
    json_out = jsonio.open_output(json_path) if json_path else None
    jsonl = jsonio.open_output(jsonl_path) if jsonl_path else None
    if rt_priority is not None:
        set_rt_priority(rt_priority)
    opts = RecordOptions(pids=pids, tids=tids, comms=comms, cgroups=cgroups,
                         hash_kind=hash_kind, duration=duration, interval=interval, method=method,
                         max_futexes=max_futexes, timestamps=timestamps,
                         exact_prctl=exact_prctl, command_slots=command_slots,
                         call_sites=not no_call_sites, command_stdout_to_stderr="-" in (json_path, jsonl_path))
    outputs = RecordOutputs(live_out=LiveView(jsonio.stdout_output()), jsonl=jsonl)
    rec = (record_command(list(command), opts, outputs=outputs) if command
           else record_pids(opts, outputs=outputs))
    # A write error during the run ended it early: keep what was recorded
    # (the JSON first, then the summary), then report the error.
    output_error = rec.pop("output_error", None)
    _say_command_status(rec.get("command"))
    _say_hash_set(rec.get("command"))
    try:
        if jsonl:
            jsonl.close()   # complete: in place even with no interval line
        if json_out:
            jsonio.write_recording(json_out, rec)
        if text_wanted(json_path, quiet):   # `--json -` stays parseable
            # Imported once the run is over: the summary's naming pulls in numpy and
            # elftools, which the start (issue 44: attached within 0.3 s) has no use for.
            from futextrace.output.text.render import render_text
            jsonio.echo(render_text(rec, verbose))
    except FileProblem:
        if output_error is None:
            raise
    if output_error is not None:
        raise FileProblem(output_error)
    if rec.get("error"):
        raise TargetError(rec["error"])
    say_target_exited(rec)
    refused = acting_text.refusal((rec.get("command") or {}).get("futex_hash_set") or {"result": None})
    if refused:
        raise KernelRefused(f"{rec['command']['futex_hash_set']['comm']} was not started: {refused}")


def _say_hash_set(cmd: dict | None) -> None:
    """record --slots: the kernel's answer, on stderr as `futextrace run` says it."""
    got = (cmd or {}).get("futex_hash_set")
    if got and not acting_text.refusal(got):
        click.echo("futextrace: " + acting_text.result_line(got, "before its first instruction"), err=True)


def say_target_exited(rec: Recording) -> None:
    """A -p target that exits ends the run normally (exit 0): say so on stderr."""
    if rec.get("target_exited"):
        click.echo(f"futextrace: note: {rec['target_exited']['note']}", err=True)


def _say_command_status(cmd: dict | None) -> None:
    """Like strace: a command that failed says so (its status is also in the JSON)."""
    status = (cmd or {}).get("exit_status")
    if status and not cmd.get("stopped_by_futextrace"):
        how = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
        click.echo(f"futextrace: {cmd['argv'][0]} {how}", err=True)
