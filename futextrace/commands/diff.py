"""`futextrace diff A B`: two saved recordings side by side."""
from __future__ import annotations

import click

from futextrace.analysis.compare import compare
from futextrace.commands.options import json_option, refuse_quiet_without_output, text_wanted
from futextrace.errors import EXIT_CODES_HELP
from futextrace.output.text.diff_text import render
from futextrace.output.jsonio import open_output
from futextrace.output.plots.figure import plot_path
from futextrace.output.plots.diff import plot_diff
from futextrace.output.report import load_carried

EXAMPLES = """\b
Examples:
  futextrace record -p 1234 -d 10 -i 1 --json before.json
  futextrace set -p 1234 --slots 256
  futextrace record -p 1234 -d 10 -i 1 --json after.json
  futextrace diff before.json after.json            # side by side, differences, ratios
  futextrace diff a.json b.json --plot diff.png     # the main figures as bars
  futextrace diff a.json b.json --json - | jq '.processes[0].figures.lookups_per_s'
"""


@click.command(epilog=EXAMPLES + "\n" + EXIT_CODES_HELP)
@click.argument("file_a", metavar="A")
@click.argument("file_b", metavar="B")
@json_option("the comparison")
@click.option("--plot", "plot_file", metavar="FILE",
              help="write the main figures as side-by-side bars (.png or .svg)")
@click.option("-q", "--quiet", is_flag=True, help="no text on stdout")
def command(file_a, file_b, json_path, plot_file, quiet):
    """Compare two recordings (record --json, bench --json or explain --json
    files): per process and per hash, each figure in A and in B, B−A and B/A,
    with the noise each recording knows for it (the spread over its -i
    intervals, the benchmark's stddev). Processes are paired by pid, else by
    command name; a figure a recording does not have is shown as "-"."""
    refuse_quiet_without_output(quiet, json_path, plot_file)
    if plot_file:
        plot_path(plot_file)          # a bad suffix is refused before any file is read
    json_out = open_output(json_path) if json_path else None
    rec_a, bench_a = load_carried(file_a)
    rec_b, bench_b = load_carried(file_b)
    cmp = compare(rec_a, rec_b, bench_a, bench_b, files=(file_a, file_b))
    if text_wanted(json_path, quiet):
        click.echo(render(cmp))
    if plot_file:
        click.echo(f"wrote {plot_diff(cmp, plot_file)}", err=True)
    if json_out:
        json_out.write_json(cmp)
