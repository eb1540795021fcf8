/* SPDX-License-Identifier: GPL-2.0 */
/*
 * fentry method: the kprobe method's view (the bucket the kernel returned,
 * refcount gets and puts, resize requests and pivots) through BPF
 * trampolines instead of breakpoint traps, for kernels that allow
 * BPF_PROG_TYPE_TRACING on functions (6.17-7.1, where futex_hash returns a
 * pointer; fexit cannot read 7.2+'s struct futex_bucket_ref return, and there
 * futextrace uses the kprobe method). Nothing runs on other syscalls.
 *
 * Each function here is loaded by futextrace/loading/fentry.py as fentry or
 * fexit on the BTF function its name gives (no BCC autoload: the loader
 * picks which exist). `ctx` is the trampoline's u64 array of arguments, then
 * the return value; bpf_get_func_arg/ret (inlined by the verifier) read them
 * as plain numbers, which may enter arithmetic and maps.
 */
#define CHECK_KERNEL_BUCKET
#include "maps.h"
#include "filters.h"
#include "futex_hash.h"
#include "tiers.h"
#include "seen_filter.h"
#include "call_sites.h"
#include "lookup_cache.h"
#include "task_memo.h"
#include "task_events.h"
#include "kernel_bucket.h"

/* Tasks inside futex_hash_put(hb), where put_plan is 'marked': the
 * futex_private_hash_put() it calls is the same put, counted once. */
BPF_TABLE("lru_hash", u32, u8, in_hash_put, 4096);


static __always_inline u64 arg_of(u64 *ctx, u32 n)
{
	u64 v = 0;
	bpf_get_func_arg(ctx, n, &v);
	return v;
}

static __always_inline u64 ret_of(u64 *ctx)
{
	u64 v = 0;
	bpf_get_func_ret(ctx, &v);
	return v;
}

/* The instance name the tracepoint method computes, from the task's typed
 * pointers (plain loads, as in trace_tp.bpf.c). */
static __always_inline u64 task_hash_ident(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	void *mmp = LOAD(void *, task, OFF_TASK_MM);
	void *fph = mmp ? LOAD(void *, mmp, OFF_MM_PHASH) : 0;
	if (!fph)
		return 0;
	return (1ULL << 40) | ((u64)LOAD(u8, fph, OFF_FPH_CUSTOM) << 32) | LOAD(u32, fph, OFF_FPH_MASK);
}

static __always_inline u32 fph_state(u64 fph)
{
	u32 state = 0;
	bpf_probe_read_kernel(&state, 4, (void *)(fph + OFF_FPH_STATE));
	return state;
}

/* fexit futex_hash(key) -> hb: key and the kernel's bucket in one run (the
 * kprobe method needs an entry probe and a map for the key). */
int fx_futex_hash(u64 *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	if (!task_wanted(id >> 32, (u32)id))
		return 0;
	struct key_copy key = {};
	bpf_probe_read_kernel(&key, sizeof(key), (void *)arg_of(ctx, 0));
	check_hash(id >> 32, task_hash_ident());

	u64 hb = ret_of(ctx);
	u64 fph = read_ptr(hb + OFF_HB_PRIV);
	u32 mask = 0, state = 0, kbucket = ~0;
	s32 knode = -1;
	if (fph) {
		struct fph_head h = {};
		bpf_probe_read_kernel(&h, sizeof(h), (void *)(fph + OFF_FPH_STATE));
		mask = h.hash_mask;
		state = h.state;
		kbucket = (hb - fph - OFF_FPH_QUEUES) / BUCKET_SIZE;
		/* futex_hash() took a reference on the private hash for this lookup. */
		count(state ? FTC_REF_GET_ATOMIC : FTC_REF_GET_PERCPU);
	} else {
		global_bucket_of(hb, &kbucket, &knode);
	}
	int priv = !(key.offset & (FUT_OFF_INODE_ | FUT_OFF_MMSHARED_));
	if (!priv)
		check_shared(&key, kbucket, knode);
	u64 uaddr = key.word + (key.offset & ~3U);
	account_lookup(ctx, id >> 32, priv ? key.ptr : 0, fph, mask, state, uaddr, priv, key.node,
		       kbucket, knode);
	return 0;
}

/* fexit futex_private_hash(...) -> fph: the other way a reference is taken. */
int fx_futex_private_hash(u64 *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	if (!task_wanted(id >> 32, (u32)id))
		return 0;
	u64 fph = ret_of(ctx);
	if (fph)
		count(fph_state(fph) ? FTC_REF_GET_ATOMIC : FTC_REF_GET_PERCPU);
	return 0;
}

/* fentry futex_hash_get(hb): requeue-PI's and unlock-PI's extra reference. */
int fe_futex_hash_get(u64 *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	if (!task_wanted(id >> 32, (u32)id))
		return 0;
	u64 fph = read_ptr(arg_of(ctx, 0) + OFF_HB_PRIV);
	if (fph)
		count(fph_state(fph) ? FTC_REF_GET_ATOMIC : FTC_REF_GET_PERCPU);
	return 0;
}

static __always_inline void count_put(u64 fph)
{
	/* Per-CPU or atomic: fph->state as read here, at the put's entry. */
	if (fph)
		count(fph_state(fph) ? FTC_REF_PUT_ATOMIC : FTC_REF_PUT_PERCPU);
}

/* fentry futex_hash_put(hb): a put. Hooked only where it does not call
 * futex_private_hash_put (loading/fentry.py put_plan), or, where its text
 * could not be read (FENTRY_HASH_PUT), with an fexit that ends a mark. */
int fe_futex_hash_put(u64 *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	if (!task_wanted(id >> 32, (u32)id))
		return 0;
#ifdef FENTRY_HASH_PUT
	u32 tid = id;
	u8 one = 1;
	in_hash_put.update(&tid, &one);
#endif
	count_put(read_ptr(arg_of(ctx, 0) + OFF_HB_PRIV));
	return 0;
}

#ifdef FENTRY_HASH_PUT
int fx_futex_hash_put(u64 *ctx)
{
	u32 tid = bpf_get_current_pid_tgid();
	in_hash_put.delete(&tid);
	return 0;
}
#endif

/* fentry futex_private_hash_put(fph): a put, unless futex_hash_put (above)
 * already counted it. */
int fe_futex_private_hash_put(u64 *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	if (!task_wanted(id >> 32, (u32)id))
		return 0;
#ifdef FENTRY_HASH_PUT
	u32 tid = id;
	if (in_hash_put.lookup(&tid))
		return 0;
#endif
	count_put(arg_of(ctx, 0));
	return 0;
}

/* futex_hash_allocate(hash_slots, flags): every resize request. */
int fe_futex_hash_allocate(u64 *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	if (!task_wanted(id >> 32, (u32)id))
		return 0;
	emit_task_event(FTE_ALLOC_ENTER, (u32)arg_of(ctx, 0), (u32)arg_of(ctx, 1), 0);
	return 0;
}

int fx_futex_hash_allocate(u64 *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	if (!task_wanted(id >> 32, (u32)id))
		return 0;
	emit_task_event(FTE_ALLOC_EXIT, 0, 0, (s32)ret_of(ctx));
	return 0;
}

/* __futex_pivot_hash(mm, new): true when `new` took over. */
int fx_futex_pivot_hash(u64 *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	if (!task_wanted(id >> 32, (u32)id))
		return 0;
	emit_task_event(FTE_PIVOT, 0, 0, ret_of(ctx) & 1);
	return 0;
}

