"""Options that mean the same in every command."""
from __future__ import annotations

import click


def json_option(what: str):
    """--json FILE: write `what` as JSON to FILE; '-' writes it to stdout in place of the text."""
    return click.option("--json", "json_path", metavar="FILE", type=click.Path(dir_okay=False),
                        help=f"write {what} as JSON to FILE ('-': stdout, instead of the text)")


def text_wanted(json_path: str | None, quiet: bool = False) -> bool:
    """The text summary goes to stdout unless -q, or unless the JSON goes there."""
    return not quiet and json_path != "-"
