"""`futextrace cache`: build the program cache ahead of time, and list it."""
from __future__ import annotations

import os
import time

import click

from futextrace.errors import EXIT_CODES_HELP, EnvironmentProblem, KernelRefused
from futextrace.kernel import modelcache
from futextrace.loading import preconditions, progcache
from futextrace.loading.methods import PREFERENCE
from futextrace.record import cacheprep

EXAMPLES = """\b
Examples:
  futextrace cache build                    # every program record/serve/explain can ask for here
  futextrace cache build --method tracepoint
  futextrace cache list                     # what is cached, and for which kernel
  FUTEXTRACE_CACHE=/image/var/cache/futextrace futextrace cache build
\b
Build at install time or in an image build (on the kernel it will run) so
that no start compiles: a start then loads the cached instructions with no
compiler at all (no LLVM in its memory).
Filter values (PIDs, names, cgroups) are filled in at run time: one entry
serves every value. Entries for another kernel are never loaded.
"""


@click.group("cache", epilog=EXAMPLES + "\n" + EXIT_CODES_HELP)
def command():
    """The program cache ($FUTEXTRACE_CACHE/prog): BCC's compiled
    instructions, replayed by later starts instead of compiling."""


@command.command("build", epilog=EXAMPLES + "\n" + EXIT_CODES_HELP)
@click.option("--method", "methods", type=click.Choice(PREFERENCE), multiple=True,
              help="build this method's programs only (repeatable; default: every method usable here)")
@click.option("--max-futexes", type=click.IntRange(1024, 1 << 22), default=None,
              help="as given to record/serve (a size is compiled in; default: theirs)")
def build(methods, max_futexes):
    """Compile every program variant the commands can ask for on this kernel
    into the cache, loading and attaching nothing. One line per variant:
    built, already cached, or skipped with the reason."""
    if os.environ.get("FUTEXTRACE_NO_PROG_CACHE"):
        raise EnvironmentProblem("FUTEXTRACE_NO_PROG_CACHE is set: starts would not read the cache "
                                 "(unset it to build)")
    preconditions.require_root()
    t0 = time.monotonic()
    model, _ = modelcache.load_running()
    preconditions.require_private_hash(model)
    click.echo(f"program cache: {progcache.cache_dir()}")
    failed = built = 0
    for method, why_not in cacheprep.usable_methods(model, methods):
        if why_not:
            click.echo(f"{method}: skipped ({why_not})")
            continue
        for v in cacheprep.variants(model, method, max_futexes):
            said, seconds = cacheprep.build(v)
            click.echo(f"{v.label()}: {said} ({seconds:.2f} s)")
            failed += said.startswith("failed")
            built += 1
    click.echo(f"{built} variants in {time.monotonic() - t0:.1f} s")
    if failed:
        raise KernelRefused(f"{failed} of {built} variants failed to compile (see above)")


@command.command("list", epilog=EXAMPLES + "\n" + EXIT_CODES_HELP)
def list_():
    """One line per cached program: its key, method, the kernel it was built
    for (and whether that is this one), and its compiled-in switches."""
    rows = progcache.entries()
    click.echo(f"program cache: {progcache.cache_dir()} ({len(rows)} entries)")
    for path, entry in rows:
        if entry is None:
            click.echo(f"{path.stem}  not usable (unreadable, writable by others, or another format)")
            continue
        made = entry.get("built_for") or {}
        here = "this kernel" if progcache.for_this_kernel(entry) else "another kernel"
        switches = " ".join(f[2:] for f in made.get("cflags", []) if f.startswith("-D") and "=" not in f)
        click.echo(f"{path.stem}  {entry.get('method') or '?':10}  {made.get('release', '?')} "
                   f"(BTF {str(made.get('btf', '?'))[:12]}, {here})  {switches or '-'}")
