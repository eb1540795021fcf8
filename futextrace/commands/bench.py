"""`futextrace bench`: the futex-hash workload's throughput beside what the tracer saw."""
from __future__ import annotations

import click

from futextrace.bench.ramp import RampOptions, run as run_ramp
from futextrace.output.plots.ramp import plot_ramp
from futextrace.bench import runner as bench
from futextrace.commands.options import json_option, text_wanted
from futextrace.errors import EXIT_CODES_HELP, UsageError
from futextrace.output.text.bench_text import cross_check, format_result
from futextrace.output.jsonio import open_output
from futextrace.output.plots.figure import PLOT_SUFFIXES
from futextrace.output.text.render import render_text


class BucketsType(click.ParamType):
    name = "BUCKETS"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        return bench.parse_buckets(value)


def workload_options(f):
    """Options shared by bench and sweep's workload (sweep omits -b)."""
    f = click.option("-m", "--mlockall", is_flag=True, help="lock all memory (mlockall)")(f)
    f = click.option("-S", "--shared", is_flag=True,
                     help="shared futexes (no FUTEX_PRIVATE_FLAG): always the global hash")(f)
    f = click.option("-r", "--runtime", type=float, default=10.0, show_default=True,
                     help="seconds to run (builtin runner: fractions allowed)")(f)
    f = click.option("-f", "--futexes", type=int, default=1024, show_default=True,
                     help="futexes per thread")(f)
    f = click.option("-t", "--threads", type=int, default=None,
                     help="worker threads [default: online CPUs]")(f)
    return f


def write_json(path: str, doc: dict) -> None:
    """Through output/jsonio.py: every write error is one line, exit 5."""
    open_output(path).write_json(doc, indent=2)


EXAMPLES = """\b
Examples:
  futextrace bench -t 4 -r 5              # 4 threads for 5 s, kernel-sized hash, traced
  futextrace bench -b 64 --no-trace       # 64 buckets set with prctl, throughput only
  futextrace bench --runner perf -t 2     # Debian's perf bench futex hash instead
  futextrace bench --json - -b global | jq .result.avg_ops_per_sec
  futextrace bench --ramp -t 8 -r 2 --plot ramp.png   # threads one by one: auto vs set at start
"""


@click.command("bench", epilog=EXAMPLES + "\n" + EXIT_CODES_HELP)
@workload_options
@click.option("-b", "--buckets", type=BucketsType(), default="auto", show_default=True,
              help="hash buckets: a power of two >= 2, 'auto' (kernel sizes it) or 'global'")
@click.option("--runner", type=click.Choice(["builtin", "perf"]), default="builtin",
              show_default=True, help="built-in workload or the system's perf bench futex hash")
@json_option("the result and its recording")
@click.option("--no-trace", is_flag=True, help="only measure throughput; do not trace")
@click.option("--ramp", is_flag=True, help="start the threads one by one, sample throughput, and run "
              "twice: automatic hash, then its final size (or -b N) set at start")
@click.option("--ramp-ms", type=int, default=50, show_default=True, help="with --ramp: a new thread every MS")
@click.option("--interval-ms", type=int, default=50, show_default=True, help="with --ramp: a sample every MS")
@click.option("--resize-at", metavar="MS:SLOTS", help="with --ramp: also SET_SLOTS SLOTS at MS, mid-run, "
              "from a thread of the workload's own")
@click.option("--plot", "plot_file", metavar="FILE", help="with --ramp: write the picture (.png or .svg)")
def command(threads, futexes, runtime, shared, mlockall, buckets, runner, json_path, no_trace,
            ramp, ramp_ms, interval_ms, resize_at, plot_file):
    """Run the futex-hash workload (like `perf bench futex hash`) and print its
    throughput beside what the tracer recorded."""
    if ramp:
        return ramp_command(bench.WorkloadOptions(threads=threads, futexes=futexes, runtime=runtime,
                                                  buckets=buckets, shared=shared, mlockall=mlockall),
                            runner, no_trace, RampOptions(ramp_ms, interval_ms, resize_at),
                            plot_file, json_path)
    if plot_file or resize_at:
        raise UsageError("--plot and --resize-at go with --ramp (sweep has its own --plot)")
    opts = bench.WorkloadOptions(threads=threads, futexes=futexes, runtime=runtime,
                                 buckets=buckets, shared=shared, mlockall=mlockall)
    if runner == "perf" and runtime != int(runtime):
        raise UsageError("--runner perf takes whole seconds for --runtime")
    doc = bench.run(opts, runner=runner, trace=not no_trace)
    for note in doc["notes"]:
        click.echo(f"note: {note}", err=True)
    if text_wanted(json_path):
        click.echo(format_result(doc["result"], bench.buckets_label(doc["result"]["buckets_requested"])))
        if doc["recording"] is not None:
            click.echo(cross_check(doc["result"], doc["recording"]))
            click.echo("\n" + render_text(doc["recording"]))
    if json_path:
        write_json(json_path, {"schema": "futextrace-bench", "schema_version": 1, **doc})


def ramp_command(opts, runner, no_trace, ramp_opts, plot_file, json_path):
    """`bench --ramp`: see futextrace/bench/ramp.py."""
    if runner != "builtin" or no_trace:
        raise UsageError("--ramp needs the builtin runner and tracing (no --runner perf, no --no-trace)")
    if plot_file and not plot_file.lower().endswith(PLOT_SUFFIXES):
        raise UsageError(f"--plot: file must end in .png or .svg, got '{plot_file}'")
    doc = run_ramp(opts, ramp_opts)
    if text_wanted(json_path):
        for line in doc["summary"]:
            click.echo(line)
    if plot_file:
        click.echo(f"plot written to {plot_ramp(doc, plot_file)}", err=not text_wanted(json_path))
    if json_path:
        write_json(json_path, {"schema": "futextrace-bench-ramp", "schema_version": 1, **doc})
