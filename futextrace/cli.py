"""The `futextrace` command line: one click group, one module per subcommand."""
from __future__ import annotations

import ctypes
import importlib
import signal
import sys

from futextrace.loading import earlyprograms


M_ARENA_MAX = -8      # glibc's mallopt parameter


def one_malloc_arena() -> None:
    """What MALLOC_ARENA_MAX=1 does (the systemd unit and the image set it),
    for every command: glibc gives each thread that allocates its own malloc
    arena, kept for the process's life: the early maps' and programs'
    threads, the program loads', the ring buffer's and the HTTP server's (a
    new thread per scrape) held 9 MiB of `serve`'s RSS (62.5 against 53.6 MiB
    with one arena; 40 MiB over a 1 s soak before, docs/figures.md). None of
    them allocates much or often, so they share the main one; before any
    thread starts."""
    try:
        ctypes.CDLL(None).mallopt(M_ARENA_MAX, 1)
    except (OSError, AttributeError):
        pass      # not glibc: its allocator's own way


one_malloc_arena()
# Before the imports: a warm start's big maps take the kernel longer to create,
# and its programs the verifier longer to check, than Python takes to import
# what the command needs (loading/earlymaps.py, loading/earlyprograms.py).
earlyprograms.start_from_command_line(sys.argv)

import click  # noqa: E402

from futextrace import __version__  # noqa: E402
from futextrace.errors import EXIT_CODES_HELP, FutextraceError  # noqa: E402

# Subcommand name -> module in futextrace.commands exporting `command`.
COMMANDS = ["doctor", "record", "bench", "sweep", "explain", "snapshot", "report", "serve", "diff",
            "run", "set", "cache"]


class LazyGroup(click.Group):
    """Imports a subcommand's module only when it is used, so `--help` stays fast
    and a command whose module is broken cannot take the others down."""

    def list_commands(self, ctx):
        return [c for c in COMMANDS if importlib.util.find_spec(f"futextrace.commands.{c}")]

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        try:
            mod = importlib.import_module(f"futextrace.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"futextrace.commands.{name}":
                return None
            raise
        return mod.command


@click.group(cls=LazyGroup, epilog=EXIT_CODES_HELP,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version")
def cli():
    """See what the Linux kernel's futex hash is doing: how lookups spread over
    buckets, per CPU and NUMA node; refcount traffic; every resize and why."""


def main(argv=None):
    # SIGINT ends a run at every stage, as the tracing loop's own handler does.
    # Started with it ignored (`futextrace ... &` in a non-interactive shell),
    # Python leaves it ignored: a Ctrl-C during the start-up was lost, and one
    # a moment later ended the run.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        cli.main(args=argv, prog_name="futextrace", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("futextrace: aborted", err=True)
        sys.exit(130)
    except click.UsageError as e:
        # One line, as every futextrace error (click's own form is a usage block of four).
        where = f" (see '{e.ctx.command_path} --help')" if e.ctx else ""
        click.echo(f"futextrace: error: {e.format_message()}{where}", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except FutextraceError as e:
        click.echo(f"futextrace: error: {e}", err=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    sys.exit(0)


if __name__ == "__main__":
    main()
