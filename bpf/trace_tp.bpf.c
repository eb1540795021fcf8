/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Tracepoint method: for kernels that refuse function tracing. The raw
 * `sys_enter` tracepoint (cheaper than syscalls:sys_enter_futex) sees every
 * futex syscall; the bucket is computed here with the kernel's own jhash2 over
 * the key, reading current->mm's private hash with offsets from BTF.
 *
 * Blind spots (printed by the tool): futex ops issued by the kernel itself
 * (io_uring futex ops, robust-list/exit wakes, PI handoffs), retries inside one
 * syscall, and the bucket of shared (non-private) futexes.
 */
/* This method keeps a memo of the current task (task_memo.h), where the
 * loader compiles it in (-DTASK_MEMO). */

#define NR_futex 202
#define NR_prctl 157
#define NR_futex_waitv 449
#define NR_futex_wake 454
#define NR_futex_wait 455
#define NR_futex_requeue 456
#define PR_FUTEX_HASH_ 78
#define PR_FUTEX_HASH_SET_SLOTS_ 1
/* futex(2)'s op word: the command, and flags that do not change its keys. */
#define FUTEX_WAIT_ 0
#define FUTEX_WAKE_ 1
#define FUTEX_REQUEUE_ 3
#define FUTEX_CMP_REQUEUE_ 4
#define FUTEX_WAKE_OP_ 5
#define FUTEX_LOCK_PI_ 6
#define FUTEX_UNLOCK_PI_ 7
#define FUTEX_TRYLOCK_PI_ 8
#define FUTEX_WAIT_BITSET_ 9
#define FUTEX_WAKE_BITSET_ 10
#define FUTEX_WAIT_REQUEUE_PI_ 11
#define FUTEX_CMP_REQUEUE_PI_ 12
#define FUTEX_LOCK_PI2_ 13
#define FUTEX_PRIVATE_FLAG_ 128
#define FUTEX_CLOCK_REALTIME_ 256
/* futex2's flags (futex_wait, futex_wake, futex_waitv entries). */
#define FUTEX2_SIZE_MASK_ 0x03
#define FUTEX2_NUMA_ 0x04
#define FUTEX2_MPOL_ 0x08
#define FUTEX2_PRIVATE_ 128
#define FUTEX_WAITV_MAX_ 128
#define MAX_NUMNODES_ 1024   /* the kernel's bound on a FUTEX2_NUMA node, before node_possible() */
/* A futex2 key the kernel rejects before hashing (misaligned, bad node). */
#define NO_LOOKUP (-3)
/* The node word could not be read here (page not present): unknown. */
#define NODE_UNREADABLE (-4)

#include "maps.h"
#include "filters.h"
#include "futex_hash.h"
#include "tiers.h"
#include "seen_filter.h"
#include "call_sites.h"
#include "lookup_cache.h"
#include "task_memo.h"
#include "task_events.h"

struct futex_waitv_ { u64 val; u64 uaddr; u32 flags; u32 reserved; };

#ifdef PRCTL_EXIT
/* prctl(PR_FUTEX_HASH) calls in flight, by tid, so the exit side reports only ours. */
BPF_HASH(prctl_pending, u32, u8, 1024);
#endif

/* futex_waitv/futex_requeue entries, WAITV_CHUNK at a time through a program
 * that tail-calls itself (see account_waitv). The verifier walks the loop once
 * per entry: 8 verify in ~40 ms, beside sys_enter (~80 ms), where 32 took
 * 90-120 ms and were a warm start's longest step. 128 entries are 16 tail
 * calls, within the kernel's 33. */
#define WAITV_CHUNK 8
struct waitv_work { u64 waiters; u64 has_phash; u32 tgid; u32 hmask; u32 hstate; u32 n; u32 next; u32 is_waitv; };
BPF_PERCPU_ARRAY(waitv_work, struct waitv_work, 1);
BPF_PROG_ARRAY(waitv_progs, 1);



/*
 * The node of a futex2 key, as get_futex_key() sets it: FUTEX2_NUMA reads a
 * node from the u32 after the futex word (-1: the node of the CPU making the
 * call, numa_node_id()); FUTEX2_MPOL without a node asks the VMA's memory
 * policy, which sys_enter cannot see: counted (FTC_MPOL_ASSUMED) and taken as
 * "no policy", i.e. -1 without FUTEX2_NUMA, this CPU's node with it.
 */
static __always_inline s32 futex2_node(u64 uaddr, u32 flags)
{
	if (!(flags & (FUTEX2_NUMA_ | FUTEX2_MPOL_)))
		return -1;
	s32 node = -1;
	if (flags & FUTEX2_NUMA_) {
		u32 size = 1 << (flags & FUTEX2_SIZE_MASK_);
		if (uaddr & (2 * size - 1))
			return NO_LOOKUP;            /* -EINVAL: futex + node not naturally aligned */
		if (bpf_probe_read_user(&node, sizeof(node), (void *)(uaddr + size)))
			return NODE_UNREADABLE;
		if (node != -1 && ((u32)node >= MAX_NUMNODES_ || !NODE_POSSIBLE(node)))
			return NO_LOOKUP;            /* -EINVAL */
	}
	if (node == -1 && (flags & FUTEX2_MPOL_))
		count(FTC_MPOL_ASSUMED);
	if (node == -1 && (flags & FUTEX2_NUMA_))
		node = bpf_get_numa_node_id();
	return node;
}

/* One futex2 key: futex_wait/futex_wake through the cache, a
 * futex_waitv/futex_requeue entry (`direct`) straight into the map. */
static __always_inline void account_futex2(void *ctx, u32 tgid, u64 has_phash, u32 hmask, u32 hstate,
					   u64 uaddr, u32 flags, int direct)
{
	s32 node = futex2_node(uaddr, flags);
	if (node == NO_LOOKUP)
		return;
	if (node == NODE_UNREADABLE) {
		count(FTC_UNATTR_UNREADABLE);
		return;
	}
	if (direct)
		account_direct(ctx, tgid, has_phash, hmask, hstate, uaddr, !!(flags & FUTEX2_PRIVATE_), node);
	else
		account_lookup(ctx, tgid, 0, has_phash, hmask, hstate, uaddr, !!(flags & FUTEX2_PRIVATE_), node,
			       ~0, -1);
}

/* How many keys each futex(2) command hashes: uaddr, and uaddr2 for the
 * two-futex commands (FUTEX_WAIT_REQUEUE_PI takes uaddr2's key but hashes
 * only uaddr's); 0 for commands that fail before hashing. */
static __always_inline int futex_cmd_keys(u32 cmd)
{
	switch (cmd) {
	case FUTEX_WAIT_: case FUTEX_WAKE_: case FUTEX_LOCK_PI_: case FUTEX_UNLOCK_PI_:
	case FUTEX_TRYLOCK_PI_: case FUTEX_WAIT_BITSET_: case FUTEX_WAKE_BITSET_:
	case FUTEX_WAIT_REQUEUE_PI_: case FUTEX_LOCK_PI2_:
		return 1;
	case FUTEX_REQUEUE_: case FUTEX_CMP_REQUEUE_: case FUTEX_WAKE_OP_: case FUTEX_CMP_REQUEUE_PI_:
		return 2;
	}
	return 0;
}

/*
 * futex_waitv(waiters, nr, flags, ...) and futex_requeue(waiters[2], ...):
 * one key per struct futex_waitv entry, all up to FUTEX_WAITV_MAX_. The
 * verifier walks a loop once per iteration, and 128 entries in one program
 * exceed its budget (BCC cannot relocate a bpf_loop callback), so the entries
 * go WAITV_CHUNK at a time through a program that tail-calls itself
 * (waitv_progs[0], filled by the loader), with its progress in `waitv_work`.
 * The kernel copies the whole array before hashing any entry (-EFAULT:
 * nothing hashed); an entry BPF cannot read (page not present) is counted as
 * unattributed for that cause. futex_waitv hashes entries in order and stops
 * at the first whose futex no longer holds its expected value (-EAGAIN), so
 * that value is read here too; futex_requeue hashes both keys before it
 * compares anything.
 */

static __always_inline void account_waitv(void *ctx, u32 tgid, u64 has_phash, u32 hmask, u32 hstate,
					  u64 waiters, u32 n, u32 is_waitv)
{
	if (n == 0 || n > FUTEX_WAITV_MAX_)
		return;                             /* -EINVAL before any lookup */
	u32 zero = 0;
	struct waitv_work *w = waitv_work.lookup(&zero);
	if (!w)
		return;
	w->waiters = waiters;
	w->has_phash = has_phash;
	w->tgid = tgid;
	w->hmask = hmask;
	w->hstate = hstate;
	w->n = n;
	w->next = 0;
	w->is_waitv = is_waitv;
	waitv_progs.call(ctx, 0);
	/* Only reached if the tail call failed: no chunk program loaded. */
	u32 idx = FTC_UNATTR_UNREADABLE;
	u64 *c = counters.lookup(&idx);
	if (c)
		*c += n;
}

static __always_inline int waitv_chunk(void *ctx)
{
	u32 zero = 0;
	struct waitv_work *w = waitv_work.lookup(&zero);
	if (!w)
		return 0;
	u32 start = w->next, n = w->n;
	for (u32 j = 0; j < WAITV_CHUNK; j++) {
		u32 i = start + j;
		if (i >= n || i >= FUTEX_WAITV_MAX_)
			return 0;
		struct futex_waitv_ e = {};
		if (bpf_probe_read_user(&e, sizeof(e), (void *)(w->waiters + i * sizeof(e)))) {
			u32 idx = FTC_UNATTR_UNREADABLE;
			u64 *c = counters.lookup(&idx);
			if (c)
				*c += n - i;
			return 0;
		}
		account_futex2(ctx, w->tgid, w->has_phash, w->hmask, w->hstate, e.uaddr, e.flags, 1);
		u32 now = 0;
		if (w->is_waitv && !bpf_probe_read_user(&now, sizeof(now), (void *)e.uaddr) &&
		    now != (u32)e.val)
			return 0;
	}
	w->next = start + WAITV_CHUNK;
	if (w->next < n)
		waitv_progs.call(ctx, 0);
	return 0;
}

int ft_btf_waitv_chunk(u64 *ctx)
{
	return waitv_chunk(ctx);
}

int ft_raw_waitv_chunk(struct bpf_raw_tracepoint_args *ctx)
{
	return waitv_chunk(ctx);
}

/*
 * The futex syscall hot path. Every helper call costs a call and a return
 * (with return-thunk mitigations, several ns each), so the task comes from the
 * one helper that gives a BTF-typed pointer, and tgid/pid/regs are plain loads.
 */
static __always_inline int traced_nr(u64 nr)
{
	return nr == NR_futex || nr == NR_futex_wait || nr == NR_futex_wake ||
	       nr == NR_futex_waitv || nr == NR_futex_requeue || nr == NR_prctl;
}

static __always_inline int futex_call(void *ctx, u64 nr, u32 tgid, u64 has_phash, u32 hmask, u32 hstate,
				      void *regs);

/* The full path: the task's ids and hash through BTF-typed loads; `m` (may
 * be NULL) is the memo to fill when the hash is settled, `gen` the epoch read
 * before any of it. */
static __always_inline int on_sys_enter(void *ctx, u64 nr, struct task_struct *task, void *regs,
					struct task_memo *m, u64 gen)
{
	u32 tgid = LOAD(u32, task, OFF_TASK_TGID);
	u32 tid = LOAD(u32, task, OFF_TASK_PID);
	u32 wanted = task_wanted(tgid, tid);
	if (m && !wanted && nr != NR_prctl) {   /* the memo remembers an untraced task too */
		memo_fill(m, regs, gen, tgid, 0, 0, 0);
		return 0;
	}
	if (!wanted)
		return 0;

	if (nr == NR_prctl) {
		if (LOAD(u64, regs, OFF_REGS_DI) == PR_FUTEX_HASH_) {
#ifdef PRCTL_EXIT
			u8 one = 1;
			prctl_pending.update(&tid, &one);
#endif
			/* arg0 = slots, arg1 = sub-command, ret = arg4 (must be 0):
			 * with the hash state, enough to tell -EINVAL and -EBUSY. */
			emit_task_event(FTE_PRCTL_ENTER, LOAD(u64, regs, OFF_REGS_DX),
					LOAD(u64, regs, OFF_REGS_SI), LOAD(u64, regs, OFF_REGS_R10));
			/* Only SET_SLOTS changes a hash; the GET sub-commands (a
			 * sampler's GET_SLOTS, then silence) leave memos on. */
			if (LOAD(u64, regs, OFF_REGS_SI) == PR_FUTEX_HASH_SET_SLOTS_)
				prctl_opened(tid);
		}
		return 0;
	}

	/* Typed pointers may not enter arithmetic or maps: the hash instance is
	 * named by (present, custom, hash_mask), and the mm address that the global
	 * hash needs is read as a number only on that path (account_lookup). */
	void *mmp = LOAD(void *, task, OFF_TASK_MM);
	void *fph = mmp ? LOAD(void *, mmp, OFF_MM_PHASH) : 0;
	u32 hmask = 0, hstate = 0;
	u64 ident = 0;
	if (fph) {
		hmask = LOAD(u32, fph, OFF_FPH_MASK);
		hstate = LOAD(u32, fph, OFF_FPH_STATE);
		ident = (1ULL << 40) | ((u64)LOAD(u8, fph, OFF_FPH_CUSTOM) << 32) | hmask;
	}
	u64 has_phash = fph ? 1 : 0;
	if (!mmp)
		return 0;
	check_hash(tgid, ident);
	if (m && (!fph || (!hstate && !LOAD(void *, mmp, OFF_MM_PHASH_NEW))))   /* settled */
		memo_fill(m, regs, gen, tgid, hmask, has_phash, 1);
	return futex_call(ctx, nr, tgid, has_phash, hmask, hstate, regs);
}

/* A futex syscall of a traced task: its keys to account_lookup. */
static __always_inline int futex_call(void *ctx, u64 nr, u32 tgid, u64 has_phash, u32 hmask, u32 hstate,
				      void *regs)
{
	u64 mm = 0;
	u64 uaddr = LOAD(u64, regs, OFF_REGS_DI);
	u64 arg1 = LOAD(u64, regs, OFF_REGS_SI);
	if (nr == NR_futex) {
		u32 op = arg1;
		int nkeys = futex_cmd_keys(op & ~(FUTEX_PRIVATE_FLAG_ | FUTEX_CLOCK_REALTIME_));
		int priv = !!(op & FUTEX_PRIVATE_FLAG_);
		if (nkeys == 0 || (uaddr & 3))
			return 0;
		account_lookup(ctx, tgid, mm, has_phash, hmask, hstate, uaddr, priv, -1, ~0, -1);
		if (nkeys == 2) {
			u64 uaddr2 = LOAD(u64, regs, OFF_REGS_R8);
			if (!(uaddr2 & 3))
				account_lookup(ctx, tgid, mm, has_phash, hmask, hstate, uaddr2, priv, -1, ~0, -1);
		}
		return 0;
	}
	if (nr == NR_futex_wait || nr == NR_futex_wake) {
		/* futex_wake(uaddr, mask, nr, flags); futex_wait(uaddr, val, mask, flags, ...) */
		account_futex2(ctx, tgid, has_phash, hmask, hstate, uaddr, LOAD(u64, regs, OFF_REGS_R10), 0);
		return 0;
	}
	if (nr == NR_futex_requeue)
		account_waitv(ctx, tgid, has_phash, hmask, hstate, uaddr, 2, 0);
	else
		account_waitv(ctx, tgid, has_phash, hmask, hstate, uaddr, (u32)arg1, 1);
	return 0;
}

#ifdef PRCTL_EXIT
static __always_inline int on_sys_exit(struct task_struct *task, s64 ret)
{
	/* Only answers to our prctl: the enter side recorded it by tid. */
	u32 tid = LOAD(u32, task, OFF_TASK_PID);
	u8 *pending = prctl_pending.lookup(&tid);
	if (!pending)
		return 0;
	prctl_pending.delete(&tid);
	emit_task_event(FTE_PRCTL_EXIT, 0, 0, ret);
	return 0;
}
#endif

/*
 * Entry points. Preferred: the BTF-enabled sys_enter tracepoint (tp_btf),
 * whose pt_regs argument is a typed pointer read with plain loads. Where the
 * kernel refuses it, the raw tracepoint takes over and gets regs from a
 * helper. None is attached by BCC's name-based autoload: the loader picks.
 */
int ft_btf_sys_enter(u64 *ctx)
{
	/* Other syscalls stop here and read no map (what they still pay over an
	 * empty hook: docs/figures.md, "A second build machine"). */
	if (!traced_nr(ctx[1]))
		return 0;
	struct memo_found f = memo_lookup(ctx);
	if (f.none)
		return 0;
	if (f.hit)
		return f.hit->wanted ? futex_call(ctx, ctx[1], f.hit->tgid, f.hit->has_phash, f.hit->hmask, 0, f.regs) : 0;
	return on_sys_enter(ctx, f.nr, f.task, f.regs, f.fill, f.gen);
}

/* Left out while tp_btf is tried: a quarter of the compile time (loader.py). */
#ifndef TP_BTF_ONLY
int ft_raw_sys_enter(struct bpf_raw_tracepoint_args *ctx)
{
	if (!traced_nr(ctx->args[1]))
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	return on_sys_enter(ctx, ctx->args[1], task, (void *)bpf_task_pt_regs(task), 0, 0);
}
#endif

#ifdef PRCTL_EXIT
/* --exact-prctl: prctl's result from its own syscall tracepoint, which the
 * kernel filters by syscall number, so no program runs on other syscalls'
 * exits. Enabling it still puts the syscall-exit tracepoint on every
 * syscall's path (~12 ns each, measured), hence opt-in; without it the
 * result is inferred from the hash state (futextrace/analysis/timeline.py). */
int ft_tp_sys_exit_prctl(struct tracepoint__syscalls__sys_exit_prctl *args)
{
	return on_sys_exit(bpf_get_current_task_btf(), args->ret);
}
#endif

