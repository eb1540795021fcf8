"""`futextrace snapshot`: the futex hash running processes use right now."""
from __future__ import annotations

import click

from futextrace.errors import EXIT_CODES_HELP
from futextrace.output.jsonio import open_output

EXAMPLES = """\b
Examples:
  futextrace snapshot -p 1234             # PID 1234's hash, watched for 1 s
  futextrace snapshot -d 3                # every process making futex calls within 3 s
"""


@click.command(epilog=EXAMPLES + "\n" + EXIT_CODES_HELP)
@click.option("-p", "--pid", "pids", type=int, multiple=True, help="this process (repeatable)")
@click.option("-d", "--duration", type=click.FloatRange(min=0, min_open=True), default=1.0,
              show_default=True, help="seconds to watch")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write JSON ('-' = stdout)")
def command(pids, duration, json_path):
    """Bucket count, custom/auto and private/global of running processes.

    The kernel answers PR_FUTEX_HASH_GET_SLOTS only for the calling process, so
    this watches futex calls for a moment: a process that makes none is "not seen"."""
    from futextrace.record.snapshot import render, snapshot
    json_out = open_output(json_path) if json_path else None
    snap = snapshot(list(pids), duration)
    if json_out is not None:
        json_out.write_json(snap)
    if json_path != "-":
        click.echo(render(snap))
    if snap.get("note") and json_path != "-":
        click.echo(f"note: {snap['note']}; the watch ended early")
