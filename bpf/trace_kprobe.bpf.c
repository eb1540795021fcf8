/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kprobe method: probes on the futex hash functions themselves, for kernels
 * with CONFIG_KPROBES (Debian's). Attach points are chosen by
 * futextrace/loading/kprobes.py from the kernel model; this file is compiled with
 * HASH_RETURNS_REF (futex_hash returns struct futex_bucket_ref {hb, fph} by
 * value, 7.2+: hb in rax, fph in rdx) or BUCKET_HAS_PRIV (6.17-7.1: the bucket
 * points at its private hash through hb->priv).
 *
 * Each lookup is accounted like the tracepoint method does (jhash2 over the
 * key) and the kernel's own bucket, (hb - fph->queues) / sizeof(*hb), is kept
 * beside it: FTC_KERNEL_MISMATCH counts lookups where the two differ.
 */
#include <uapi/linux/ptrace.h>
/* The kernel returns the bucket it chose: check ours against it on every lookup. */
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

BPF_HASH(inflight, u64, struct key_copy, 10240);
/* The last put probe each task hit (count_put). */
struct put_mark { u64 ret; u64 lo; u64 hi; u32 level; u32 pad; };
BPF_TABLE("lru_hash", u32, struct put_mark, put_marks, 4096);


int kp_futex_hash(struct pt_regs *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	if (!task_wanted(id >> 32, (u32)id))
		return 0;
	struct key_copy k = {};
	bpf_probe_read_kernel(&k, sizeof(k), (void *)PT_REGS_PARM1(ctx));
	inflight.update(&id, &k);
	return 0;
}

int kr_futex_hash(struct pt_regs *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	struct key_copy *k = inflight.lookup(&id);
	if (!k)
		return 0;
	struct key_copy key = *k;
	inflight.delete(&id);

	/* First sight of this process's hash, or a new one: an event (snapshot
	 * and explain read the hash each process had from these). */
	check_hash(id >> 32, current_hash_ident());

	u64 hb = PT_REGS_RC(ctx);
#ifdef HASH_RETURNS_REF
	u64 fph = ctx->dx;
#else
	u64 fph = 0;
#ifdef BUCKET_HAS_PRIV
	fph = read_ptr(hb + OFF_HB_PRIV);
#endif
#endif
	u32 mask = 0, state = 0, kbucket = ~0;
	s32 knode = -1;
	if (fph) {
		struct fph_head h = {};
		bpf_probe_read_kernel(&h, sizeof(h), (void *)(fph + OFF_FPH_STATE));
		mask = h.hash_mask;
		state = h.state;
		kbucket = (hb - fph - OFF_FPH_QUEUES) / BUCKET_SIZE;
		/* futex_hash() took a reference on the private hash for this lookup;
		 * per-CPU or atomic is fph->state as read here, at the probe. */
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

/* futex_private_hash(mm): the other way a reference is taken (waitv, exit). */
int kr_futex_private_hash(struct pt_regs *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	if (!task_wanted(id >> 32, (u32)id))
		return 0;
	u64 fph = PT_REGS_RC(ctx);
	if (!fph)
		return 0;
	u32 state = 0;
	bpf_probe_read_kernel(&state, 4, (void *)(fph + OFF_FPH_STATE));
	count(state ? FTC_REF_GET_ATOMIC : FTC_REF_GET_PERCPU);
	return 0;
}

#ifdef BUCKET_HAS_PRIV
/* futex_hash_get(hb) (6.17-7.1): the extra reference futex_unlock_pi and
 * requeue-PI take (q->drop_hb_ref), dropped by futex_hash_put. */
int kp_futex_hash_get(struct pt_regs *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	if (!task_wanted(id >> 32, (u32)id))
		return 0;
	u64 fph = read_ptr(PT_REGS_PARM1(ctx) + OFF_HB_PRIV);
	if (!fph)
		return 0;
	u32 state = 0;
	bpf_probe_read_kernel(&state, 4, (void *)(fph + OFF_FPH_STATE));
	count(state ? FTC_REF_GET_ATOMIC : FTC_REF_GET_PERCPU);
	return 0;
}
#endif

/*
 * Puts: futex_hash_put(hb) (6.17-7.1) calls futex_private_hash_put(fph),
 * which GCC may inline there or not, and may split so that its body is
 * `futex_private_hash_put.part.0`, which core.c callers can reach directly.
 * Every one that has a symbol is probed, and each put counted once. Levels
 * 0, 1, 2 in that calling order: a probe continues the put of the last probed
 * function of this task at a lower level when its return address is the one
 * that function saw (a tail jump from it) or lies inside that function's text
 * (a call from it). PUT_*_LO/HI: each function's text range, from kallsyms.
 */

static __always_inline int count_put(struct pt_regs *ctx, u64 fph, u32 level, u64 lo, u64 hi)
{
	u64 id = bpf_get_current_pid_tgid();
	if (!task_wanted(id >> 32, (u32)id))
		return 0;
	u32 tid = id;
	u64 ret = 0;
	bpf_probe_read_kernel(&ret, sizeof(ret), (void *)PT_REGS_SP(ctx));
	struct put_mark *m = put_marks.lookup(&tid);
	if (m && m->level < level && (ret == m->ret || (ret >= m->lo && ret < m->hi))) {
		m->ret = ret;
		m->lo = lo;
		m->hi = hi;
		m->level = level;
		return 0;
	}
	struct put_mark now = { .ret = ret, .lo = lo, .hi = hi, .level = level };
	put_marks.update(&tid, &now);
	if (!fph)
		return 0;
	/* Per-CPU or atomic: fph->state as read here, at the probe. */
	u32 state = 0;
	bpf_probe_read_kernel(&state, 4, (void *)(fph + OFF_FPH_STATE));
	count(state ? FTC_REF_PUT_ATOMIC : FTC_REF_PUT_PERCPU);
	return 0;
}

int kp_futex_private_hash_put(struct pt_regs *ctx)
{
	return count_put(ctx, PT_REGS_PARM1(ctx), 1, PUT_FPH_LO, PUT_FPH_HI);
}

int kp_futex_private_hash_put_part(struct pt_regs *ctx)
{
	return count_put(ctx, PT_REGS_PARM1(ctx), 2, PUT_PART_LO, PUT_PART_HI);
}

#ifdef BUCKET_HAS_PRIV
int kp_futex_hash_put(struct pt_regs *ctx)
{
	return count_put(ctx, read_ptr(PT_REGS_PARM1(ctx) + OFF_HB_PRIV), 0, PUT_HB_LO, PUT_HB_HI);
}
#endif

/* futex_hash_allocate(hash_slots, flags): every resize request. */

int kp_futex_hash_allocate(struct pt_regs *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	if (!task_wanted(id >> 32, (u32)id))
		return 0;
	emit_task_event(FTE_ALLOC_ENTER, (u32)PT_REGS_PARM1(ctx), (u32)PT_REGS_PARM2(ctx), 0);
	return 0;
}

int kr_futex_hash_allocate(struct pt_regs *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	if (!task_wanted(id >> 32, (u32)id))
		return 0;
	emit_task_event(FTE_ALLOC_EXIT, 0, 0, (s32)PT_REGS_RC(ctx));
	return 0;
}

/* __futex_pivot_hash(mm, new): true when `new` took over. */
int kr_futex_pivot_hash(struct pt_regs *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	if (!task_wanted(id >> 32, (u32)id))
		return 0;
	emit_task_event(FTE_PIVOT, 0, 0, PT_REGS_RC(ctx) & 1);
	return 0;
}

