"""Kernel ABI numbers futextrace needs, in one place (include/uapi/linux/sched.h,
include/uapi/linux/prctl.h, kernel/futex/futex.h)."""

# clone() flags, as the task_newtask tracepoint reports them.
CLONE_VM = 0x00000100
CLONE_VFORK = 0x00004000
CLONE_THREAD = 0x00010000

# prctl(PR_FUTEX_HASH, op, ...)
PR_FUTEX_HASH = 78
PR_FUTEX_HASH_SET_SLOTS = 1
PR_FUTEX_HASH_GET_SLOTS = 2

# futex_hash_allocate()'s `flags` argument: a prctl (custom) request, not an automatic one.
FH_CUSTOM = 0x01
