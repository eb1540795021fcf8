"""One-line user-facing errors with documented exit codes."""

# Exit codes, documented in `futextrace --help`.
EXIT_OK = 0
EXIT_USAGE = 2          # bad option or argument
EXIT_ENV = 3            # environment cannot run this (no root, no BPF, no BTF, no private hash)
EXIT_TARGET = 4         # the process/command/cgroup to trace is missing or unusable
EXIT_IO = 5             # a file cannot be read or written, or is not a recording
EXIT_KERNEL = 6         # the kernel refused a load/attach or a prctl

EXIT_CODES_HELP = """\b
Exit codes:
  0  success
  2  bad option or argument
  3  this machine cannot run it (not root, BPF refused, no BTF, no futex private hash)
  4  target problem (PID missing or a kernel thread, command cannot start, bad cgroup)
  5  file problem (cannot write output, JSON file is not a futextrace recording)
  6  the kernel refused (BPF load/attach or prctl failed)"""


class FutextraceError(Exception):
    """An error the user can act on; printed as one line, never as a traceback."""

    exit_code = EXIT_ENV

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(FutextraceError):
    exit_code = EXIT_USAGE


class EnvironmentProblem(FutextraceError):
    exit_code = EXIT_ENV


class TargetError(FutextraceError):
    exit_code = EXIT_TARGET


class FileProblem(FutextraceError):
    exit_code = EXIT_IO


class KernelRefused(FutextraceError):
    exit_code = EXIT_KERNEL
