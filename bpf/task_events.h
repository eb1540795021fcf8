/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Task events to user space (struct ft_event, through `events`): a task's
 * creation, exec and exit, and a process's first sight of a private hash or
 * a new one (resize detection). Slow paths only.
 */
#define CLONE_VM_ 0x00000100
#define CLONE_THREAD_ 0x00010000

/* Which private hash each process had when last seen: resize detection. The
 * per-CPU `last_hash` cache keeps the hot path off this shared map. */
struct mm_seen { u64 hash; };
BPF_TABLE("lru_hash", u32, struct mm_seen, mm_hash, 16384);
struct last_seen { u64 tgid; u64 hash; };
BPF_PERCPU_ARRAY(last_hash, struct last_seen, 1);


/* The private hash header: state (int) and hash_mask (uint) are adjacent
 * (checked by the loader), so one 8-byte read fetches both. */
struct fph_head { u32 state; u32 hash_mask; };

/* One event with the task's futex hash state: the hash in use and any
 * replacement waiting for its pivot, with their sizes. Slow paths only. */
static __always_inline void emit_task_event(u32 type, s64 arg0, s64 arg1, s64 ret)
{
	u64 id = bpf_get_current_pid_tgid();
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	u64 mm = read_ptr((u64)task + OFF_TASK_MM);
	struct ft_event *e = events.ringbuf_reserve(sizeof(struct ft_event));
	if (!e) {
		count(FTC_LOST_EVENTS);
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ts = bpf_ktime_get_ns();
	e->type = type;
	e->tgid = id >> 32;
	e->tid = (u32)id;
	e->cpu = bpf_get_smp_processor_id();
	e->mm = mm;
	e->arg0 = arg0;
	e->arg1 = arg1;
	e->ret = ret;
	u64 signal = read_ptr((u64)task + OFF_TASK_SIGNAL);
	if (signal)
		bpf_probe_read_kernel(&e->nr_threads, 4, (void *)(signal + OFF_SIGNAL_NR_THREADS));
	if (mm) {
		e->hash = read_ptr(mm + OFF_MM_PHASH);
		e->hash_new = read_ptr(mm + OFF_MM_PHASH_NEW);
	}
	if (e->hash) {
		struct fph_head h = {};
		bpf_probe_read_kernel(&h, sizeof(h), (void *)(e->hash + OFF_FPH_STATE));
		e->hash_mask = h.hash_mask;
		e->state = h.state;
		bpf_probe_read_kernel(&e->custom, 1, (void *)(e->hash + OFF_FPH_CUSTOM));
	}
	if (e->hash_new) {
		bpf_probe_read_kernel(&e->hash_new_mask, 4, (void *)(e->hash_new + OFF_FPH_MASK));
		bpf_probe_read_kernel(&e->new_custom, 1, (void *)(e->hash_new + OFF_FPH_CUSTOM));
	}
	bpf_get_current_comm(&e->comm, sizeof(e->comm));
	events.ringbuf_submit(e, 0);
}

/* The same instance name as the tracepoint method computes from its direct
 * loads, read with probe reads (kprobe programs have no typed task). */
static __always_inline u64 current_hash_ident(void)
{
	u64 mm = current_mm();
	u64 fph = mm ? read_ptr(mm + OFF_MM_PHASH) : 0;
	if (!fph)
		return 0;
	struct fph_head h = {};
	u8 custom = 0;
	bpf_probe_read_kernel(&h, sizeof(h), (void *)(fph + OFF_FPH_STATE));
	bpf_probe_read_kernel(&custom, 1, (void *)(fph + OFF_FPH_CUSTOM));
	return (1ULL << 40) | ((u64)custom << 32) | h.hash_mask;
}

/* Resize detection: has this mm's private hash changed since we last looked?
 * `ident` names the hash instance cheaply (size, custom, present); the per-CPU
 * cache answers the common case without touching a shared map, and only a
 * change reads the hash pointer itself for the event. */
static __always_inline void check_hash(u32 tgid, u64 ident)
{
	u32 zero = 0;
	struct last_seen *ls = last_hash.lookup(&zero);
	if (!ls || (ls->tgid == tgid && ls->hash == ident))
		return;
	ls->tgid = tgid;
	ls->hash = ident;
	struct mm_seen *seen = mm_hash.lookup(&tgid);
	if (seen && seen->hash == ident)
		return;
	struct mm_seen now = { .hash = ident };
	mm_hash.update(&tgid, &now);
	emit_task_event(FTE_HASH_SEEN, 0, 0, 0);
}

/* Raw tracepoints for the task events: no tracefs format needed, and they run
 * only on task creation/exit, never on the futex path. current = the parent. */
RAW_TRACEPOINT_PROBE(task_newtask)
{
	task_epoch_moves();   /* before the filter: any task may reuse a stack */
	u64 id = bpf_get_current_pid_tgid();
	prctl_closed((u32)id);   /* a prctl caller that goes on to start threads */
	u32 child = 0;
	bpf_probe_read_kernel(&child, 4, (void *)(ctx->args[0] + OFF_TASK_PID));
	u64 flags = ctx->args[1];
#if defined(FOLLOW_FORKS) || defined(COMM_AT_EXEC)
	/* A new process forked by a traced one is traced too (with --comm: it
	 * starts with its parent's name). */
	u32 tgid = id >> 32;
	if (!(flags & CLONE_THREAD_) && tgid_filter.lookup(&tgid)) {
		u8 one = 1;
		tgid_filter.update(&child, &one);
	}
#endif
	if (!task_wanted(id >> 32, (u32)id))
		return 0;
	emit_task_event(FTE_NEWTASK, flags, child, 0);
	return 0;
}

/* An exec gives the task a new mm (the memo's epoch moves: task_memo.h).
 * With --comm and the tgid set kept by user space (record/commwatch.py): a process
 * that execs under a wanted name is added here, at once, so none of its calls
 * are missed before user space hears of the exec (the proc connector's event
 * comes later: the test_serve_bounded churn lost ~4% of lookups without this).
 * User space removes processes at exit and at an exec under another name.
 * The name is already the new one here (begin_new_exec set it). */
#if defined(COMM_AT_EXEC) || defined(TASK_MEMO)   /* the loader lists it by the same flags (task_event_probes) */
RAW_TRACEPOINT_PROBE(sched_process_exec)
{
	task_epoch_moves();
#ifdef COMM_AT_EXEC
	struct comm_key ck = {};
	bpf_get_current_comm(&ck.comm, sizeof(ck.comm));
	if (comm_filter.lookup(&ck)) {
		u32 tgid = bpf_get_current_pid_tgid() >> 32;
		u8 one = 1;
		tgid_filter.update(&tgid, &one);
	}
#endif
	return 0;
}
#endif

RAW_TRACEPOINT_PROBE(sched_process_exit)
{
	u64 id = bpf_get_current_pid_tgid();
	prctl_closed((u32)id);   /* a prctl caller that exits without another syscall */
	if (!task_wanted(id >> 32, (u32)id))
		return 0;
	if ((u32)id == id >> 32) {
		u32 zero = 0;
		u64 *exited = exits.lookup(&zero);
		if (exited)
			__sync_fetch_and_add(exited, 1);
	}
	emit_task_event(FTE_EXIT, 0, 0, 0);
	return 0;
}

