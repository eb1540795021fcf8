"""`futextrace snapshot`: the futex hash running processes use right now."""
from __future__ import annotations

import time

import click

from futextrace.errors import EXIT_CODES_HELP
from futextrace.commands.options import SECONDS, json_option, text_wanted
from futextrace.kernel import modelcache
from futextrace.loading.iterator import ITERATOR
from futextrace.output.jsonio import open_output, write_json
from futextrace.output.text.hashes_text import format_row, render
from futextrace.procs import stopsignals
from futextrace.procs.hashread import header
from futextrace.procs.hashrows import sort_rows
from futextrace.procs.procevents import exit_text
from futextrace.snapshot.hashes import read_hashes
from futextrace.snapshot.watcher import Watcher

EXAMPLES = """\b
Examples:
  futextrace snapshot                     # every process with a private hash or the global one by prctl
  futextrace snapshot -p 1234 -p 5678     # these processes, idle or not
  futextrace snapshot --json -            # the same as JSON on stdout
  futextrace snapshot --watch -d 60       # then one line per process that comes, goes or changes
"""


@click.command(epilog=EXAMPLES + "\n" + EXIT_CODES_HELP)
@click.option("-p", "--pid", "pids", type=int, multiple=True, help="this process (repeatable)")
@click.option("-d", "--duration", type=SECONDS, default=None,
              help="with --watch: stop after this many seconds; without the task iterator: seconds "
                   "to watch futex calls (default 1)")
@click.option("-w", "--watch", is_flag=True,
              help="keep going: print each process that appears, exits or changes its hash "
                   "(re-read on fork/exec/exit events from the proc connector)")
@click.option("-i", "--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True,
              help="with --watch: also re-read this often (hash changes come with no process event)")
@json_option("the snapshot (with --watch: JSON lines, the snapshot then one per change)")
def command(pids, duration, watch, interval, json_path):
    """Threads, bucket count, custom/auto/global, refcount mode and pending
    replacement of running processes' futex hashes, most threads first.

    Read at once from the kernel by a BPF task iterator, idle processes
    included. Where the kernel refuses iterators, futex calls are watched for
    a moment instead (labelled): a process that makes none is "not seen"."""
    json_out = open_output(json_path) if json_path else None
    if watch:
        return watch_command(list(pids), duration, interval, json_out, json_path)
    snap = read_hashes(list(pids), duration or 1.0)
    if json_out is not None:
        write_json(json_out, snap)
    if text_wanted(json_path):
        click.echo(render(snap))
    if snap.get("note") and text_wanted(json_path):
        click.echo(f"note: {snap['note']}; the watch ended early")


def watch_command(pids, duration, interval, json_out, json_path):
    watcher = Watcher(modelcache.load_running()[0], pids, interval)
    to_text = json_path != "-"

    def line(obj: dict):
        if json_out is not None:
            json_out.write_jsonl(obj)

    def emit(t, change, row, status):
        line({"t": round(t, 3), "change": change, "exit_status": status, **row})
        if to_text:
            tail = f"  exited ({exit_text(status)})" if status is not None else (
                "  exited" if change == "gone" else "")
            mark = {"new": "+", "gone": "-", "changed": "~"}[change]
            click.echo(f"{time.strftime('%H:%M:%S')} +{t:.2f}s {mark}{format_row(row)}{tail}")

    try:
        with stopsignals.routed_to(watcher.stop):
            first = watcher.read()
            snap = {**header(watcher.model, ITERATOR, watcher.how),
                    "processes": sort_rows(list(first.values())), "note": None}
            line(snap)
            if to_text:
                click.echo(render(snap))
                click.echo("watching: + appeared, - exited, ~ changed (Ctrl-C stops)", nl=True)
            watcher.run(emit, duration, first)
    finally:
        watcher.close()
