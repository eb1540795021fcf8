"""`futextrace report`: render a saved recording again, as text, PNGs or one HTML page."""
from __future__ import annotations

import tempfile
from pathlib import Path

import click

from futextrace.errors import EXIT_CODES_HELP, FileProblem
from futextrace.output.jsonio import echo
from futextrace.output.text.render import render_text
from futextrace.output.report import load_recording, write_html

EXAMPLES = """\b
Examples:
  futextrace record --json run.json -q -- ./myservice
  futextrace report run.json                      # the text summary again
  futextrace report run.json --plot plots/        # buckets, CPUs, resizes, rates, what-if
  futextrace report run.json --html run.html      # one self-contained page
"""


@click.command(epilog=EXAMPLES + "\n" + EXIT_CODES_HELP)
@click.argument("file")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False),
              help="write PNG pictures into this directory (created if missing)")
@click.option("--html", "html_path", type=click.Path(dir_okay=False),
              help="write one HTML page with the text and the pictures embedded")
@click.option("-q", "--quiet", is_flag=True, help="no text on stdout")
@click.option("-v", "--verbose", is_flag=True, help="list every process (small ones are otherwise folded into one line)")
def command(file, plot_dir, html_path, quiet, verbose):
    """Render a recording saved with `futextrace record --json FILE`."""
    rec = load_recording(file)
    text = render_text(rec, verbose)
    if not quiet:
        echo(text)
    images = []
    if plot_dir or html_path:
        from futextrace.output.plots.recording import plot_recording   # matplotlib: only for pictures
        tmp = None if plot_dir else tempfile.TemporaryDirectory(prefix="futextrace-report-")
        out = Path(plot_dir) if plot_dir else Path(tmp.name)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise FileProblem(f"cannot create {out}: {e.strerror}")
        images = plot_recording(rec, out)
        if plot_dir:
            for p in images:
                click.echo(f"wrote {p}", err=True)
    if html_path:
        write_html(html_path, rec, f"futextrace report: {Path(file).name}", text, images)
        click.echo(f"wrote {html_path}", err=True)
    if images and not plot_dir:
        tmp.cleanup()
