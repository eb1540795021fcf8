"""`futextrace serve`: attach once, serve Prometheus/OpenMetrics metrics."""
from __future__ import annotations

import click

from futextrace.errors import EXIT_CODES_HELP
from futextrace.export import server as http
from futextrace.export.collector import FutexCollector
from futextrace.export.serve_recorder import ServeRecorder
from futextrace.export.server import DEFAULT_LISTEN
from futextrace.procs import targets
from futextrace.record.session import RecordOptions

EXAMPLES = f"""\b
Examples:
  futextrace serve                              # everything, on http://{DEFAULT_LISTEN}/metrics
  futextrace serve --listen 0.0.0.0:9477        # reachable from other hosts (mind the firewall)
  futextrace serve --comm postgres --max-processes 20

\b
Series: the --max-processes processes with the most lookups since the previous
scrape get their own pid/comm labels; the others are summed into comm="other".
An exited process keeps its last value for --grace seconds, then its series
goes. A port in use exits with 3, a bad --listen with 2.
SIGINT/SIGTERM/SIGHUP detach everything and exit 0.
"""


@click.command(epilog=EXAMPLES + "\n" + EXIT_CODES_HELP)
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, metavar="ADDR:PORT",
              help="address to serve /metrics on; 0.0.0.0:PORT or [::]:PORT to listen on every "
                   "interface")
@click.option("-p", "--pid", "pids", type=int, multiple=True, help="trace this process (repeatable)")
@click.option("--comm", "comms", multiple=True, help="trace only tasks with this name (repeatable)")
@click.option("--cgroup", "cgroups", multiple=True, help="trace only tasks in this cgroup v2 path")
@click.option("--max-processes", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="processes with their own series; the rest are summed in comm=\"other\"")
@click.option("--grace", "grace_s", type=click.FloatRange(0), default=120.0, show_default=True,
              help="seconds an exited process's series is still served")
@click.option("--min-interval", type=click.FloatRange(0.1), default=0.5, show_default=True,
              help="read the kernel maps at most once per this many seconds, and never more "
                   "often than 5 times the CPU the last read took (scrapes in between get the last "
                   "read); each scrape further apart gets a read of its own")
@click.option("--read-budget", type=click.FloatRange(0.01), default=0.5, show_default=True,
              help="seconds a scrape waits for its read; a slower read goes on in the background "
                   "and the scrape gets the last complete read (futextrace_exporter_read_age_seconds "
                   "says how old)")
@click.option("--include-self", is_flag=True,
              help="give the exporter's own lookups (its pid) a series too; by default they are left "
                   "out of the per-process series, as BCC tools leave out their own pid")
@click.option("--method", type=click.Choice(["auto", "fentry", "kprobe", "tracepoint"]), default="auto",
              show_default=True)
@click.option("--max-futexes", type=click.IntRange(1024, 1 << 22), default=None,
              help="distinct futexes kept (see `futextrace record --help`)")
def command(listen, pids, comms, cgroups, max_processes, grace_s, min_interval, read_budget,
            include_self, method, max_futexes):
    """Serve futex hash metrics for Prometheus on /metrics.

    Attaches once (like `record`, with the same filters) and reads the kernel
    maps when scraped (each scrape gets a read of its own, within --read-budget),
    never per event. Runs until SIGINT/SIGTERM/SIGHUP."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.process_collector import ProcessCollector

    addr, port = http.parse_listen(listen)
    for pid in pids:
        targets.check_pid(pid)
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)   # the exporter's own CPU and memory
    httpd = http.bind(addr, port, registry)   # before attaching: a busy port leaves nothing behind
    serving = None
    try:
        rec = ServeRecorder(RecordOptions(pids=list(pids), comms=list(comms), cgroups=list(cgroups),
                                     method=method, max_futexes=max_futexes, announce=False))
        rec.start()
        collector = FutexCollector(rec, max_processes, grace_s, min_interval, budget=read_budget,
                                   include_self=include_self)
        try:
            registry.register(collector)
            serving = http.serve(httpd)
            host = f"[{addr}]" if ":" in addr else addr
            click.echo(f"futextrace: serving http://{host}:{port}/metrics (method {rec.method}); "
                       "Ctrl-C to stop", err=True)
            rec.run()
        finally:
            collector.close()
            rec.close()
    finally:
        if serving is not None:
            httpd.shutdown()   # serve_forever's loop ends; in-flight scrapes get no futextrace metrics
        httpd.server_close()
