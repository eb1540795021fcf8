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
/* The memo of the current task (below): not with filters whose answer may
 * change without a task event (the name, the cgroup, a tgid set that user
 * space keeps as processes come and go: --comm). */
#if !defined(FILTER_COMM) && !defined(FILTER_CGROUP) && !defined(FILTER_TGID_LIVE)
#define TASK_MEMO
#endif
#include "futex_common.h"

#define NR_futex 202
#define NR_prctl 157
#define NR_futex_waitv 449
#define NR_futex_wake 454
#define NR_futex_wait 455
#define NR_futex_requeue 456
#define PR_FUTEX_HASH_ 78
#define PR_FUTEX_HASH_SET_SLOTS_ 1
#define FUTEX_WAITV_MAX_ 128
#define MAX_NUMNODES_ 1024   /* the kernel's bound on a FUTEX2_NUMA node, before node_possible() */
/* A futex2 key the kernel rejects before hashing (misaligned, bad node). */
#define NO_LOOKUP (-3)
/* The node word could not be read here (page not present): unknown. */
#define NODE_UNREADABLE (-4)

struct futex_waitv_ { u64 val; u64 uaddr; u32 flags; u32 reserved; };

#ifdef PRCTL_EXIT
/* prctl(PR_FUTEX_HASH) calls in flight, by tid, so the exit side reports only ours. */
BPF_HASH(prctl_pending, u32, u8, 1024);
#endif

/* futex_waitv/futex_requeue entries, WAITV_CHUNK at a time through a program
 * that tail-calls itself (see account_waitv). */
#define WAITV_CHUNK 32
struct waitv_work { u64 waiters; u64 hash; u32 tgid; u32 hmask; u32 hstate; u32 n; u32 next; u32 is_waitv; };
BPF_PERCPU_ARRAY(waitv_work, struct waitv_work, 1);
BPF_PROG_ARRAY(waitv_progs, 1);

#ifdef TASK_MEMO
/* Per CPU, the last task whose futex call took the full path: its pt_regs
 * address (its kernel stack's, unique among live tasks), its process, whether
 * it is traced, and its private hash (present, size) while that is settled
 * (no replacement pending, per-CPU refcount). Good while task_epoch's gen is
 * `gen`: a later call of that task on this CPU needs no
 * bpf_get_current_task_btf(), a real call on kernels that do not inline it.
 * At most MEMO_HITS calls in a row: a change the epoch missed (a prctl whose
 * sys_enter run the kernel skipped) lasts that long at most. */
#define MEMO_HITS 64
struct task_memo { u64 regs; u64 gen; u32 tgid; u32 hmask; u16 has_hash; u16 wanted; u32 left; };
BPF_PERCPU_ARRAY(task_memo, struct task_memo, 1);

static __always_inline void memo_fill(struct task_memo *m, void *regs, u64 gen, u32 tgid, u32 hmask,
				      u16 has_hash, u16 wanted)
{
	m->regs = (u64)regs;
	m->gen = gen;
	m->tgid = tgid;
	m->hmask = hmask;
	m->has_hash = has_hash;
	m->wanted = wanted;
	m->left = MEMO_HITS;
}
#endif

#ifndef FT_MAPS_ONLY   /* -DFT_MAPS_ONLY: the maps alone, for a cached program (futextrace/loading/progcache.py) */

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
static __always_inline void account_futex2(u32 tgid, u64 hash, u32 hmask, u32 hstate,
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
		account_direct(tgid, hash, hmask, hstate, uaddr, !!(flags & FUTEX2_PRIVATE_), node);
	else
		account_lookup(tgid, 0, hash, hmask, hstate, uaddr, !!(flags & FUTEX2_PRIVATE_), node,
			       ~0, -1);
}

/* How many keys each futex(2) command hashes: uaddr, and uaddr2 for the
 * two-futex commands (FUTEX_WAIT_REQUEUE_PI takes uaddr2's key but hashes
 * only uaddr's); 0 for commands that fail before hashing. */
static __always_inline int futex_cmd_keys(u32 cmd)
{
	switch (cmd) {
	case 0: case 1: case 6: case 7: case 8: case 9: case 10: case 11: case 13:
		return 1;
	case 3: case 4: case 5: case 12:
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

static __always_inline void account_waitv(void *ctx, u32 tgid, u64 hash, u32 hmask, u32 hstate,
					  u64 waiters, u32 n, u32 is_waitv)
{
	if (n == 0 || n > FUTEX_WAITV_MAX_)
		return;                             /* -EINVAL before any lookup */
	u32 zero = 0;
	struct waitv_work *w = waitv_work.lookup(&zero);
	if (!w)
		return;
	w->waiters = waiters;
	w->hash = hash;
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
		account_futex2(w->tgid, w->hash, w->hmask, w->hstate, e.uaddr, e.flags, 1);
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

static __always_inline int futex_call(void *ctx, u64 nr, u32 tgid, u64 hash, u32 hmask, u32 hstate,
				      void *regs);

/* The full path: the task's ids and hash through BTF-typed loads; `m` (may
 * be NULL) is the memo to fill when the hash is settled, `gen` the epoch read
 * before any of it. */
static __always_inline int on_sys_enter(void *ctx, u64 nr, struct task_struct *task, void *regs,
					void *m, u64 gen)
{
	u32 tgid = LOAD(u32, task, OFF_TASK_TGID);
	u32 tid = LOAD(u32, task, OFF_TASK_PID);
	u32 wanted = task_wanted(tgid, tid);
#ifdef TASK_MEMO
	struct task_memo *tm = m;
	if (tm && !wanted && nr != NR_prctl) {
		memo_fill(tm, regs, gen, tgid, 0, 0, 0);
		return 0;
	}
#endif
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
#ifdef TASK_MEMO
			/* Only SET_SLOTS changes a hash; the GET sub-commands (a
			 * sampler's GET_SLOTS, then silence) leave memos on. */
			if (LOAD(u64, regs, OFF_REGS_SI) == PR_FUTEX_HASH_SET_SLOTS_)
				prctl_opened(tid);
#endif
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
	u64 hash = fph ? 1 : 0;
	if (!mmp)
		return 0;
	check_hash(tgid, ident);
#ifdef TASK_MEMO
	if (tm && (!fph || (!hstate && !LOAD(void *, mmp, OFF_MM_PHASH_NEW))))
		memo_fill(tm, regs, gen, tgid, hmask, hash, 1);
#endif
	return futex_call(ctx, nr, tgid, hash, hmask, hstate, regs);
}

/* A futex syscall of a traced task: its keys to account_lookup. */
static __always_inline int futex_call(void *ctx, u64 nr, u32 tgid, u64 hash, u32 hmask, u32 hstate,
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
		account_lookup(tgid, mm, hash, hmask, hstate, uaddr, priv, -1, ~0, -1);
		if (nkeys == 2) {
			u64 uaddr2 = LOAD(u64, regs, OFF_REGS_R8);
			if (!(uaddr2 & 3))
				account_lookup(tgid, mm, hash, hmask, hstate, uaddr2, priv, -1, ~0, -1);
		}
		return 0;
	}
	if (nr == NR_futex_wait || nr == NR_futex_wake) {
		/* futex_wake(uaddr, mask, nr, flags); futex_wait(uaddr, val, mask, flags, ...) */
		account_futex2(tgid, hash, hmask, hstate, uaddr, LOAD(u64, regs, OFF_REGS_R10), 0);
		return 0;
	}
	if (nr == NR_futex_requeue)
		account_waitv(ctx, tgid, hash, hmask, hstate, uaddr, 2, 0);
	else
		account_waitv(ctx, tgid, hash, hmask, hstate, uaddr, (u32)arg1, 1);
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
#ifdef TASK_MEMO
	/* Other syscalls stop here and read no map (what they still pay over an
	 * empty hook: docs/figures.md, "A second build machine"). */
	if (!traced_nr(ctx[1]))
		return 0;
	u32 zero = 0;
	struct task_epoch *ep = task_epoch.lookup(&zero);
	if (!ep)
		return 0;
	u64 gen = ep->gen, prctls = ep->prctls;
	if (prctls)   /* a prctl(PR_FUTEX_HASH) caller's next futex or prctl call? */
		prctl_closed(LOAD(u32, bpf_get_current_task_btf(), OFF_TASK_PID));
	struct task_memo *m = task_memo.lookup(&zero);   /* not on other syscalls' path */
	if (!m)
		return 0;
	/* Opaque to the compiler, so that after the compare below it still
	 * reads through this typed pointer, not the memo's equal number. */
	void *regs = (void *)ctx[0];
	asm volatile("" : "+r"(regs));
	if (m->regs == ctx[0] && m->gen == gen && m->left && !prctls && ctx[1] != NR_prctl) {
		m->left--;
		return m->wanted ? futex_call(ctx, ctx[1], m->tgid, m->has_hash, m->hmask, 0, regs) : 0;
	}
	return on_sys_enter(ctx, ctx[1], bpf_get_current_task_btf(), regs, prctls ? 0 : m, gen);
#else
	if (!traced_nr(ctx[1]))
		return 0;
	return on_sys_enter(ctx, ctx[1], bpf_get_current_task_btf(), (void *)ctx[0], 0, 0);
#endif
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

#endif /* FT_MAPS_ONLY */
