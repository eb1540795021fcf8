/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Task iterator (iter/task): every process's futex hash, read from the kernel
 * now, for `futextrace snapshot`. Reading the iterator's file runs this once
 * per task; it writes one struct ft_iter_task (bpf/futextrace.h) per process.
 *
 * Offsets arrive as -D macros computed from the running kernel's BTF
 * (futextrace/loading/iterator.py); every load below is a BTF-checked direct
 * load the verifier makes fault-safe. The iterator runs under rcu_read_lock(),
 * and a replaced hash is freed only after an RCU grace period (kvfree_rcu).
 * The program uses no map, so its instructions are the same on every load
 * (iterator.py caches them and skips the compiler on later runs).
 */
#include "futextrace.h"

#define LOAD(type, base, off) (*(type *)((void *)(base) + (off)))

/* Never referenced by the program: it only makes BCC describe struct
 * ft_iter_task to Python (the map's leaf type) from this very header. */
BPF_ARRAY(iter_layout, struct ft_iter_task, 1);

static __always_inline void read_hash(struct ft_iter_task *r, void *mm)
{
	void *fph = LOAD(void *, mm, OFF_MM_PHASH);
	void *fresh = LOAD(void *, mm, OFF_MM_PHASH_NEW);
	if (fph) {
		r->has_hash = 1;
		r->hash_mask = LOAD(u32, fph, OFF_FPH_MASK);
		r->custom = LOAD(u8, fph, OFF_FPH_CUSTOM);
		r->state = LOAD(u32, fph, OFF_FPH_STATE);
	}
	if (fresh) {
		r->has_new = 1;
		r->new_hash_mask = LOAD(u32, fresh, OFF_FPH_MASK);
		r->new_custom = LOAD(u8, fresh, OFF_FPH_CUSTOM);
	}
	r->atomic = LOAD(s64, mm, OFF_MM_ATOMIC);
}

/* ctx is struct bpf_iter__task {meta, task}, read as two u64 words as tp_btf
 * programs read theirs; task is NULL on the final call. */
int ft_iter_task(u64 *ctx)
{
	void *meta = (void *)ctx[0];
	void *task = (void *)ctx[1];
	if (!task)
		return 0;
	void *mm = LOAD(void *, task, OFF_TASK_MM);
	if (!mm)
		return 0;                     /* kernel thread, or a task past exit_mm() */
	u32 tgid = LOAD(u32, task, OFF_TASK_TGID);
	u32 pid = LOAD(u32, task, OFF_TASK_PID);
	if (pid != tgid) {
		/* A thread speaks for its process only when the leader has
		 * exited (leader's mm gone) and no longer writes a record. */
		void *leader = LOAD(void *, task, OFF_TASK_GROUP_LEADER);
		if (leader && LOAD(void *, leader, OFF_TASK_MM))
			return 0;
	}
	struct ft_iter_task r = {};
	r.tgid = tgid;
	void *signal = LOAD(void *, task, OFF_TASK_SIGNAL);
	if (signal)
		r.nr_threads = LOAD(u32, signal, OFF_SIGNAL_NR_THREADS);
	bpf_probe_read_kernel(r.comm, sizeof(r.comm), (void *)task + OFF_TASK_COMM);
	read_hash(&r, mm);
	bpf_seq_write(LOAD(void *, meta, OFF_META_SEQ), &r, sizeof(r));
	return 0;
}
