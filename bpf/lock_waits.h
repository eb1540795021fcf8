/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Bucket-lock contention, shared by every attach method: lock:contention_begin
 * and lock:contention_end (tp_btf where the kernel takes it, else raw
 * tracepoints; the loader picks). Appended to the method's text by
 * loader.source_for(), after the hot-path headers, whose hash_private(), LOAD-free
 * read_ptr() and filters it uses.
 *
 * A wait is a bucket-lock wait only by address: the lock lies inside the
 * current mm's private hash (futex_phash, or futex_phash_new while a resize
 * waits for its pivot), at &queues[i].lock for some i < hash_mask + 1. The
 * spinning task is the waiter, in its own syscall (a spinlock's slow path
 * does not sleep), so its futex is the syscall argument whose private bucket
 * is i. The futex hot path keeps no state for this.
 *
 * Not seen: waits on the global hash's bucket locks (shared futexes, processes
 * without a private hash): the global table's address is not in kallsyms
 * without CONFIG_KALLSYMS_ALL; and whose futex the holder was using.
 */

BPF_PERCPU_HASH(lock_waits, struct lock_wait_key, struct lock_wait_stat, LOCK_WAITS_MAX);
BPF_PERCPU_ARRAY(lock_counters, u64, FTL_NR);
/* The bucket-lock wait in progress on this CPU (lock 0: none). */
struct lock_inflight { u64 lock; u64 ts; struct lock_wait_key key; };
BPF_PERCPU_ARRAY(lock_inflight, struct lock_inflight, 1);


#define LCK_NR_futex 202
#define LCK_NR_futex_waitv 449
#define LCK_NR_futex_wake 454
#define LCK_NR_futex_wait 455
#define LCK_NR_futex_requeue 456
#define LCK_WAITV_SCAN 4     /* futex_waitv entries tried for the waiter's futex */
#define LOCK_WAIT_SANE_NS 1000000000ULL

static __always_inline void lock_count(u32 idx)
{
	u64 *c = lock_counters.lookup(&idx);
	if (c)
		(*c)++;
}

/* Is `lock` a bucket lock of the private hash at `fph`? Its bucket and mask. */
static __always_inline int bucket_lock_of(u64 fph, u64 lock, u32 *bucket, u32 *hmask)
{
	if (!fph)
		return 0;
	u32 mask = 0;
	if (bpf_probe_read_kernel(&mask, sizeof(mask), (void *)(fph + OFF_FPH_MASK)))
		return 0;
	u64 first = fph + OFF_FPH_QUEUES + OFF_HB_LOCK;
	if (lock < first)
		return 0;
	u64 d = lock - first;
	if (d >= ((u64)mask + 1) * BUCKET_SIZE || d % BUCKET_SIZE)
		return 0;
	*bucket = d / BUCKET_SIZE;
	*hmask = mask;
	return 1;
}

/* A private futex at `uaddr` hashes to `bucket` (the kernel's
 * __futex_hash_private: jhash2 over the page address, the offset as seed). */
static __always_inline int in_bucket(u64 uaddr, u32 bucket, u32 hmask)
{
	if (!uaddr || (uaddr & 3))
		return 0;
	u32 offset = uaddr % PAGE_SIZE_;
	return (hash_private(uaddr - offset, offset) & hmask) == bucket;
}

/* The waiter's futex: the argument of its futex syscall whose bucket is the
 * lock's (two-futex commands hash two keys); 0 when none matches. */
static __always_inline u64 waiter_futex(u32 bucket, u32 hmask)
{
	struct task_struct *task = bpf_get_current_task_btf();
	u64 regs = (u64)bpf_task_pt_regs(task);
	u64 nr = read_ptr(regs + OFF_REGS_ORIG_AX);
	u64 a0 = read_ptr(regs + OFF_REGS_DI);
	if (nr == LCK_NR_futex || nr == LCK_NR_futex_wait || nr == LCK_NR_futex_wake) {
		if (in_bucket(a0, bucket, hmask))
			return a0;
		if (nr != LCK_NR_futex)
			return 0;
		u64 a4 = read_ptr(regs + OFF_REGS_R8);     /* uaddr2 */
		return in_bucket(a4, bucket, hmask) ? a4 : 0;
	}
	if (nr != LCK_NR_futex_waitv && nr != LCK_NR_futex_requeue)
		return 0;
	/* struct futex_waitv { u64 val; u64 uaddr; u32 flags; u32 reserved; }[] */
	u64 n = nr == LCK_NR_futex_requeue ? 2 : read_ptr(regs + OFF_REGS_SI);
	for (int i = 0; i < LCK_WAITV_SCAN; i++) {
		if (i >= n)
			break;
		u64 u = 0;
		if (bpf_probe_read_user(&u, sizeof(u), (void *)(a0 + i * 24 + 8)))
			break;
		if (in_bucket(u, bucket, hmask))
			return u;
	}
	return 0;
}

static __always_inline int on_contention_begin(u64 lock)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;
	u64 mm = read_ptr(bpf_get_current_task() + OFF_TASK_MM);
	if (!mm || !task_wanted(tgid, (u32)id))
		return 0;
	u32 bucket = 0, hmask = 0;
	if (!bucket_lock_of(read_ptr(mm + OFF_MM_PHASH), lock, &bucket, &hmask) &&
	    !bucket_lock_of(read_ptr(mm + OFF_MM_PHASH_NEW), lock, &bucket, &hmask))
		return 0;                       /* not a futex bucket lock of ours */
	u32 zero = 0;
	struct lock_inflight *in = lock_inflight.lookup(&zero);
	if (!in)
		return 0;
	in->key.tgid = tgid;
	in->key.hash_mask = hmask;
	in->key.bucket = bucket;
	in->key.pad = 0;
	in->key.uaddr = waiter_futex(bucket, hmask);
	in->lock = lock;
	in->ts = bpf_ktime_get_ns();
	return 0;
}

static __always_inline int on_contention_end(void *ctx, u64 lock)
{
	u32 zero = 0;
	struct lock_inflight *in = lock_inflight.lookup(&zero);
	if (!in || !in->lock)
		return 0;
	if (in->lock != lock)
		return 0;                       /* another lock's end (nested in an interrupt) */
	u64 dt = bpf_ktime_get_ns() - in->ts;
	struct lock_wait_key key = in->key;
	in->lock = 0;
	/* A begin whose own end the kernel skipped (one of our programs already
	 * running on this CPU) would pair with a much later end: no spinlock is
	 * waited for a second without a lockup report. */
	if (dt > LOCK_WAIT_SANE_NS) {
		lock_count(FTL_WAITS_LOST);
		return 0;
	}
	struct lock_wait_stat *st = lock_waits.lookup(&key);
	if (!st) {
		struct lock_wait_stat init = {};
		lock_waits.insert(&key, &init);
		st = lock_waits.lookup(&key);
		if (!st) {
			lock_count(FTL_WAITS_LOST);
			return 0;
		}
	}
	st->waits++;
	st->wait_ns += dt;
	if (dt > st->max_ns)
		st->max_ns = dt;
	/* The waiter is still in its syscall: its user stack is the wait's call site. */
	if (key.uaddr && st->waits <= CALL_SITE_WAITS)
		capture_call_site(ctx, key.tgid, key.uaddr, FT_SITE_WAIT, st->waits);
	return 0;
}

/* lock:contention_begin(void *lock, unsigned int flags), contention_end(void *lock, int ret) */
int ft_btf_contention_begin(u64 *ctx)
{
	return on_contention_begin(ctx[0]);
}

int ft_btf_contention_end(u64 *ctx)
{
	return on_contention_end(ctx, ctx[0]);
}

int ft_raw_contention_begin(struct bpf_raw_tracepoint_args *ctx)
{
	return on_contention_begin(ctx->args[0]);
}

int ft_raw_contention_end(struct bpf_raw_tracepoint_args *ctx)
{
	return on_contention_end(ctx, ctx->args[0]);
}

