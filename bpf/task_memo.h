/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The tracepoint method's memo of the current task (TASK_MEMO): a futex
 * call of the task a CPU last saw takes its ids and hash from the memo,
 * not from the task (memo_lookup). Everything the memo needs is here; the
 * method's sys_enter hook asks memo_lookup() and fills the memo on its full
 * path (trace_tp.bpf.c on_sys_enter).
 */
/* -DTASK_MEMO comes from the loader, where its rule is stated once
 * (futextrace/loading/loader.py task_memo(): the tracepoint method, not with
 * filters whose answer may change without a task event); the loader reads the
 * same flag for the probes it lists (task_event_probes). */

/* The memo (below) holds while `gen` stays. It moves at every task creation (a new
 * task may get a freed task's kernel stack, whose pt_regs address names a
 * memo entry, and a clone may resize its process's hash), every exec (a new
 * mm, maybe a new tgid) and every prctl(PR_FUTEX_HASH)'s return (told by its
 * caller's next futex or prctl call, clone or exit: prctl_closed).
 * `prctls` counts those prctls not yet told returned (by tid in
 * `prctl_open`): while one is, no memo is used. Every method moves it at
 * task creation (task_events.h). */
struct task_epoch { u64 gen; u64 prctls; };
BPF_ARRAY(task_epoch, struct task_epoch, 1);
BPF_HASH(prctl_open, u32, u8, 1024);

/* Per CPU, the last task whose futex call took the full path: its pt_regs
 * address (its kernel stack's, unique among live tasks), its process, whether
 * it is traced, and its private hash (present, size) while that is settled
 * (no replacement pending, per-CPU refcount). Good while task_epoch's gen is
 * `gen`: a later call of that task on this CPU needs no
 * bpf_get_current_task_btf(), a real call on kernels that do not inline it.
 * At most MEMO_HITS calls in a row: a change the epoch missed (a prctl whose
 * sys_enter run the kernel skipped) lasts that long at most. */
#define MEMO_HITS 64
struct task_memo { u64 regs; u64 gen; u32 tgid; u32 hmask; u16 has_phash; u16 wanted; u32 left; };
#ifdef TASK_MEMO
BPF_PERCPU_ARRAY(task_memo, struct task_memo, 1);
#endif


static __always_inline void task_epoch_moves(void)
{
	u32 zero = 0;
	struct task_epoch *ep = task_epoch.lookup(&zero);
	if (ep)
		__sync_fetch_and_add(&ep->gen, 1);
}

/* A prctl(PR_FUTEX_HASH) of `tid` has returned: memos may be used again
 * once no other is in flight. Told lazily, so that other syscalls pay
 * nothing for it: by the caller's next futex or prctl call, its next clone,
 * or its exit. Until then no memo is used, which costs time, not counts. */
static __always_inline void prctl_closed(u32 tid)
{
#ifdef TASK_MEMO
	u32 zero = 0;
	struct task_epoch *ep = task_epoch.lookup(&zero);
	/* None open (the common case at every clone and exit): no hash lookup. */
	if (!ep || !ep->prctls || !prctl_open.lookup(&tid))
		return;
	prctl_open.delete(&tid);
	__sync_fetch_and_add(&ep->gen, 1);
	__sync_fetch_and_add(&ep->prctls, -1);
#endif
}

/* A prctl(PR_FUTEX_HASH_SET_SLOTS) of `tid` is about to run: no memo is
 * used until it returns. A full `prctl_open` turns memos off for good. */
static __always_inline void prctl_opened(u32 tid)
{
#ifdef TASK_MEMO
	u32 zero = 0;
	u8 one = 1;
	struct task_epoch *ep = task_epoch.lookup(&zero);
	if (!ep || prctl_open.lookup(&tid))
		return;
	if (prctl_open.update(&tid, &one))
		__sync_fetch_and_add(&ep->prctls, 1ULL << 40);
	else
		__sync_fetch_and_add(&ep->prctls, 1);
#endif
}

static __always_inline void memo_fill(struct task_memo *m, void *regs, u64 gen, u32 tgid, u32 hmask,
				      u16 has_phash, u16 wanted)
{
	m->regs = (u64)regs;
	m->gen = gen;
	m->tgid = tgid;
	m->hmask = hmask;
	m->has_phash = has_phash;
	m->wanted = wanted;
	m->left = MEMO_HITS;
}

/* What memo_lookup() found for a futex or prctl call: `hit`, the memo that
 * answers it, or NULL and the full path's arguments (its `fill`: the memo
 * to fill, NULL: none). `none`: neither (no map: cannot happen). */
struct memo_found {
	struct task_memo *hit;
	struct task_struct *task;
	void *regs;
	u64 nr;
	struct task_memo *fill;
	u64 gen;
	int none;
};

/* The memo for a call to sys_enter (`ctx`: its tp_btf arguments). Without
 * TASK_MEMO: never a hit, nothing to fill. */
static __always_inline struct memo_found memo_lookup(u64 *ctx)
{
	struct memo_found f = {};
#ifdef TASK_MEMO
	u32 zero = 0;
	struct task_epoch *ep = task_epoch.lookup(&zero);
	if (!ep) {
		f.none = 1;
		return f;
	}
	u64 gen = ep->gen, prctls = ep->prctls;
	if (prctls)   /* a prctl(PR_FUTEX_HASH) caller's next futex or prctl call? */
		prctl_closed(LOAD(u32, bpf_get_current_task_btf(), OFF_TASK_PID));
	struct task_memo *m = task_memo.lookup(&zero);   /* not on other syscalls' path */
	if (!m) {
		f.none = 1;
		return f;
	}
	/* Opaque to the compiler, so that after the compare below it still
	 * reads through this typed pointer, not the memo's equal number. */
	void *regs = (void *)ctx[0];
	asm volatile("" : "+r"(regs));
	f.regs = regs;
	f.gen = gen;
	if (m->regs == ctx[0] && m->gen == gen && m->left && !prctls && ctx[1] != NR_prctl) {
		m->left--;
		f.hit = m;
		return f;
	}
	f.fill = prctls ? 0 : m;
	f.nr = ctx[1];
	f.task = bpf_get_current_task_btf();
#else
	/* In the order they were always read: nr before the call, regs after. */
	f.nr = ctx[1];
	f.task = bpf_get_current_task_btf();
	f.regs = (void *)ctx[0];
#endif
	return f;
}

