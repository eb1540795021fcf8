"""`futextrace explain`: record, then say why each bucket count was chosen."""
from __future__ import annotations

import click

from futextrace.output.text.explain_text import explained, render
from futextrace.errors import EXIT_CODES_HELP, TargetError, UsageError
from futextrace.commands.options import SECONDS, json_option, refuse_quiet_without_output, text_wanted
from futextrace.commands.record import say_target_exited
from futextrace.output.jsonio import open_output
from futextrace.record.recorder import RecordOptions, record_command, record_pids

EXAMPLES = """\b
Examples:
  futextrace explain -- ./myservice       # run it, then explain every resize
  futextrace explain -p 1234 -d 10        # watch PID 1234 for 10 seconds
  futextrace explain -p 1234 -p 99 -d 10  # two running processes
  futextrace explain --json e.json -- ./myservice
"""


@click.command(epilog=EXAMPLES + "\n" + EXIT_CODES_HELP)
@click.option("-p", "--pid", "pids", type=int, multiple=True, help="explain this running process (repeatable)")
@click.option("-d", "--duration", type=SECONDS, help="stop after this many seconds")
@json_option("the explanation and the recording")
@click.option("-q", "--quiet", is_flag=True, help="no text (with --json)")
@click.option("-v", "--verbose", is_flag=True,
              help="one line per event (default: runs of events with the same outcome as one line)")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def command(pids, duration, json_path, quiet, verbose, command):
    """Explain every bucket count a process's futex hash had: the kernel's
    sizing formula with the real inputs, why a clone did not resize, prctl
    results, how long each resize waited for its pivot; then a suggested
    PR_FUTEX_HASH_SET_SLOTS value from what was measured.

    With -- COMMAND, runs the command until it exits; with -p, watches a
    running process, starting from its hash as the kernel holds it at
    attach (read by a BPF task iterator) and what that implies about the
    history before. A what-if table shows how the recorded futexes would
    spread over each size 16 ... 131072."""
    if bool(pids) == bool(command):
        raise UsageError("give either -p PID or -- COMMAND")
    if pids and not duration:
        raise UsageError("-p needs -d/--duration (how long to watch)")
    refuse_quiet_without_output(quiet, json_path)
    json_out = open_output(json_path) if json_path else None
    # explain is about why: exact prctl results are worth their cost here.
    opts = RecordOptions(pids=list(pids), duration=duration, method="auto", exact_prctl=True,
                         call_sites=True, command_stdout_to_stderr=json_path == "-")
    rec = record_command(list(command), opts) if command else record_pids(opts)
    expl = explained(rec, json_path)   # `diff` reads the recording in explain's JSON: the "before"
    if pids:   # only the asked-for processes, not the children they forked
        expl["processes"] = [p for p in expl["processes"] if p["pid"] in pids]
    if text_wanted(json_path, quiet):
        click.echo(render(expl, verbose))
    if json_out:
        json_out.write_json({"explanation": expl, "recording": rec})
    if rec.get("error"):
        raise TargetError(rec["error"])
    say_target_exited(rec)
