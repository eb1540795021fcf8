"""Options that mean the same in every command."""
from __future__ import annotations

import math

import click

from futextrace.errors import UsageError


def json_option(what: str):
    """--json FILE: write `what` as JSON to FILE; '-' writes it to stdout in place of the text."""
    return click.option("--json", "json_path", metavar="FILE", type=click.Path(dir_okay=False),
                        help=f"write {what} as JSON to FILE ('-': stdout, instead of the text)")


def text_wanted(json_path: str | None, quiet: bool = False) -> bool:
    """The text summary goes to stdout unless -q, or unless the JSON goes there."""
    return not quiet and json_path != "-"


class Seconds(click.ParamType):
    """A length of time in seconds: a finite number above 0. click's FLOAT takes
    "nan" and "inf", and a run with either would never end (nan > 0 is false,
    so "-d nan" would pass a `<= 0` check)."""

    name = "seconds"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            seconds = value
        else:
            try:
                seconds = float(value)
            except (TypeError, ValueError):
                self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or seconds <= 0:
            self.fail(f"{value!r}: give a finite number of seconds above 0", param, ctx)
        return seconds


SECONDS = Seconds()


def refuse_quiet_without_output(quiet: bool, *outputs) -> None:
    """-q drops the text; with nothing else asked for, the run would show nothing."""
    if quiet and not any(outputs):
        raise UsageError("-q drops the text summary, and nothing else was asked for: "
                         "add --json FILE (or --jsonl FILE, -i SECONDS), or leave out -q")
