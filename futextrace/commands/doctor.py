"""`futextrace doctor`: what this kernel offers and which attach method works here."""
from __future__ import annotations

import click

from futextrace.commands.options import json_option, text_wanted
from futextrace.errors import EXIT_CODES_HELP, KernelRefused
from futextrace.loading import doctor as doc
from futextrace.loading import preconditions
from futextrace.output.text.doctor_text import doctor_text
from futextrace.output.jsonio import open_output, write_json


EXAMPLES = """\b
Examples:
  futextrace doctor                        # the kernel model and the attach methods that work
  futextrace doctor --json doctor.json     # the text, and the same report as JSON
  futextrace doctor --json - | jq .recommended
  futextrace doctor --btf tests/data/btf/debian-7.2.6.json   # another kernel's layout
"""


@click.command("doctor", epilog=EXAMPLES + "\n" + EXIT_CODES_HELP)
@json_option("the report")
@click.option("--btf", "btf_path", metavar="FILE",
              help="read the kernel model from this BTF file (raw BTF, vmlinux ELF or a digest) "
                   "instead of /sys/kernel/btf/vmlinux; methods are still probed on this kernel")
def command(json_path: str | None, btf_path: str | None):
    """Show what the kernel offers and which attach method works here, each
    method proven by loading and attaching a tiny BPF program."""
    json_out = open_output(json_path) if json_path else None
    r = doc.run(btf_path)
    model = r.pop("_model")
    if text_wanted(json_path):
        click.echo(doctor_text(r))
    if json_out:
        write_json(json_out, r)
    if not any(m["works"] for m in r["methods"]):
        raise KernelRefused("no attach method works on this kernel (see the reasons above)")
    if btf_path is None:
        preconditions.require_private_hash(model)
