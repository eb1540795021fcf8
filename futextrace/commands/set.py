"""`futextrace set`: set a running process's futex hash size, from one of its threads."""
from __future__ import annotations

import click

from futextrace.acting import gadgets, inject, preflight
from futextrace.commands.options import json_option, text_wanted
from futextrace.errors import EXIT_CODES_HELP, KernelRefused, TargetError
from futextrace.output.text import acting_text
from futextrace.output.jsonio import open_output, write_json

EXAMPLES = """\b
Examples:
  futextrace set -p 1234 --slots 256        # 256 buckets, custom (automatic resizing stops)
  futextrace set -p 1234 --global           # the shared global hash, for good
  futextrace set -p 1234 --slots 256 --dry-run
\b
What it does to the process: one thread stops for a moment (the others run on),
calls prctl(PR_FUTEX_HASH) through its own code, and resumes where it was; a
syscall it was blocked in is restarted, signals that arrive meanwhile are delivered.
The call itself waits until no futex operation holds the old hash. Refused: a
process under a seccomp filter (unless --force), already traced (strace, gdb),
stopped, a zombie, a kernel thread, or ptrace forbidden (Yama, no CAP_SYS_PTRACE).
"""


def slots_choice(slots: int | None, to_global: bool) -> int:
    """--slots N or --global (the same as --slots 0), exactly one."""
    if (slots is None) == (not to_global):
        raise click.UsageError("give either --slots N or --global")
    return 0 if to_global else slots


@click.command(epilog=EXAMPLES + "\n" + EXIT_CODES_HELP)
@click.option("-p", "--pid", type=int, required=True, help="the process")
@click.option("--tid", type=int, help="the thread to make the call (default: the main thread)")
@click.option("--slots", type=click.IntRange(min=0), metavar="N",
              help="buckets: a power of two, at least 2 (the kernel judges)")
@click.option("--global", "to_global", is_flag=True, help="the global hash instead, for good")
@click.option("--force", is_flag=True, help="also a process under a seccomp filter that allows prctl")
@click.option("--dry-run", is_flag=True, help="check everything and say what would be done; do nothing")
@json_option("the kernel's answers")
def command(pid, tid, slots, to_global, force, dry_run, json_path):
    """Set the futex hash size of running process PID without restarting it.

    Prints the size before and after, as the process's own GET_SLOTS reports them,
    or the kernel's refusal (EBUSY once a process went global, EINVAL for a size it
    does not take)."""
    want = slots_choice(slots, to_global)
    target = preflight.check_target(pid, tid, force)
    if dry_run:
        return _dry_run(target, want)
    try:
        answer = inject.set_slots(target.pid, target.tid, want)
    except inject.InjectionFailed as e:
        raise TargetError(f"{target.comm} ({pid}): {e}; it was left running as it was") from None
    except PermissionError:
        raise TargetError(f"the kernel did not let futextrace attach to {target.comm} ({pid}) "
                          "(ptrace: EPERM): check kernel.yama.ptrace_scope, CAP_SYS_PTRACE, "
                          "and an LSM (AppArmor, SELinux)") from None
    doc = answer.as_json(want, target.comm, pid)
    if json_path:
        write_json(open_output(json_path), doc)
    why = acting_text.refusal(doc)
    if text_wanted(json_path) and not why:
        click.echo(acting_text.result_line(doc, "set while it runs"))
    if why:
        raise KernelRefused(f"{target.comm} ({pid}): {why}")


def _dry_run(target, want: int) -> None:
    found = gadgets.find(target.pid)
    back = (f"rt_sigreturn at {found.sigreturn:#x}" if found and found.sigreturn is not None else
            f"`pop %rax; ret` at {found.pop_rax:#x} into rt_sigreturn" if found else "")
    how = (f"through `syscall; ret` at {found.syscall_ret:#x} and {back} in {found.where}" if found else
           "but its code has no `syscall; ret` with a way to rt_sigreturn: it would be refused")
    click.echo(f"would stop thread {target.tid} of {target.comm} ({target.pid}) for a moment, call "
               f"prctl(PR_FUTEX_HASH, SET_SLOTS, {want}) for {acting_text.asked_words(want)} {how}, "
               "and resume it where it was; nothing done")
