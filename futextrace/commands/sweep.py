"""`futextrace sweep`: workload throughput for each bucket count, plus auto and global."""
from __future__ import annotations

import click

from futextrace.bench import runner as bench
from futextrace.bench import sweep
from futextrace.output.plots.figure import PLOT_SUFFIXES, plot_sweep
from futextrace.commands.bench import workload_options, write_json
from futextrace.commands.options import json_option, text_wanted
from futextrace.errors import EXIT_CODES_HELP, UsageError


def sweep_table(doc: dict):
    """rich's Table of the sweep (rich is imported here: `futextrace --help` lists every
    command, and only `sweep` draws with it)."""
    from rich.table import Table
    trace_cols = list(dict.fromkeys(k for p in doc["points"] for k in p["trace"]))
    t = Table(title="futex hash throughput by bucket count", title_justify="left")
    t.add_column("buckets", justify="right")
    t.add_column("in use", justify="right")
    t.add_column("ops/s per thread", justify="right")
    t.add_column("+-", justify="right")
    t.add_column("vs auto", justify="right")
    for c in trace_cols:
        t.add_column(c, justify="right")
    auto = next((p["avg_ops_per_sec"] for p in doc["points"] if p["buckets"] == "auto"), None)
    for p in sorted(doc["points"], key=lambda p: (p["requested"] <= 0, p["requested"])):
        used = "?" if p["slots"] is None else ("global" if p["slots"] == 0 else str(p["slots"]))
        rel = f"{p['avg_ops_per_sec'] / auto:.2f}x" if auto else ""
        cells = [p["buckets"], used, f"{p['avg_ops_per_sec']:,.0f}",
                 f"{p['stddev_pct']:.2f}%", rel]
        cells += [_cell(p["trace"].get(c)) for c in trace_cols]
        t.add_row(*cells, end_section=p["buckets"] == str(doc["points"][-1]["requested"]))
    return t


def _cell(v) -> str:
    if v is None:
        return ""
    return f"{v:.2f}" if isinstance(v, float) else str(v)


EXAMPLES = """\b
Examples:
  futextrace sweep                                 # 2..131072 buckets, auto and global
  futextrace sweep --buckets 16-1024 -t 4 -r 2 --repeat 3
  futextrace sweep --buckets 2,64,4096 --trace --plot sweep.png
"""


@click.command("sweep", epilog=EXAMPLES + "\n" + EXIT_CODES_HELP)
@click.option("--buckets", "buckets_text", default=sweep.DEFAULT_BUCKETS, show_default=True,
              metavar="LIST", help="bucket counts: '2,4,64' and/or ranges 'LO-HI' (powers of two)")
@workload_options
@click.option("--repeat", type=int, default=1, show_default=True,
              help="runs per point (in rounds); the median run is reported")
@click.option("--trace", is_flag=True, help="trace each run and add imbalance/collision columns")
@json_option("all points")
@click.option("--plot", "plot_file", metavar="FILE", help="write a plot (.png or .svg)")
def command(buckets_text, threads, futexes, runtime, shared, mlockall, repeat, trace, json_path,
            plot_file):
    """Throughput of the futex-hash workload for each bucket count, plus the kernel's
    automatic size and the global hash; a table, and optionally JSON and a plot."""
    buckets = sweep.parse_bucket_list(buckets_text)
    if plot_file and not plot_file.lower().endswith(PLOT_SUFFIXES):
        raise UsageError(f"--plot: file must end in .png or .svg, got '{plot_file}'")
    base = bench.WorkloadOptions(threads=threads, futexes=futexes, runtime=runtime,
                                 shared=shared, mlockall=mlockall).validate()
    if shared:
        click.echo("note: shared futexes always use the global hash; bucket counts "
                   "will not matter", err=True)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    console = Console(stderr=not text_wanted(json_path))
    if not console.is_terminal:
        console.width = 120   # files and pipes: room for the --trace columns
    total = len(sweep.sweep_points(buckets)) * max(repeat, 1)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeRemainingColumn(), console=Console(stderr=True), transient=True)
    with progress:
        task = progress.add_task("sweep", total=total)

        def on_point(b, row):
            if row is None:
                progress.update(task, description=f"buckets {bench.buckets_label(b):>7}")
            else:
                progress.advance(task)

        doc = sweep.run_sweep(base, buckets, trace=trace, repeat=repeat, on_point=on_point)
    for note in doc["notes"]:
        click.echo(f"note: {note}", err=True)
    console.print(sweep_table(doc))
    if plot_file:
        path = plot_sweep(doc, plot_file)
        console.print(f"plot written to {path}")
    if json_path:
        write_json(json_path, doc)
