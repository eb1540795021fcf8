/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The per-CPU lookup cache and account_lookup(), where every method counts a
 * futex key lookup.
 */
/* The lookup cache: FUTEX_CACHE_SLOTS slots per CPU, CPU n's at [n * FUTEX_CACHE_SLOTS].
 * A plain array, not a per-CPU one: its slots are contiguous (a per-CPU
 * array's elements are separate allocations reached through a pointer table),
 * which measurably saves a cache miss per lookup. Each CPU writes only its
 * own range, and the kernel runs one instance of a program per CPU at a time.
 * Memory-mapped by user space, which reads it without a syscall per slot. */
BPF_F_TABLE("array", u32, struct cache_slot, futex_cache, FUTEX_CACHE_SLOTS * NR_CPU_IDS, BPF_F_MMAPABLE_);


/* The key as three words (it has no padding holes: see futextrace.h), so a
 * slot is matched with three compares. An unused slot has tgid 0, which no
 * task making syscalls has. */
static __always_inline int slot_hit(struct cache_slot *cs, struct futex_stat_key *key, u32 atomic)
{
	u64 *x = (u64 *)&cs->key, *y = (u64 *)key;
	if ((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]))
		return 0;
	cs->st.lookups++;
	if (atomic)
		cs->st.atomic_lookups++;
	return 1;
}

/* This CPU's first cache way for a key: a multiplicative hash of the address
 * and process, cheap enough that a hit needs no jhash2 at all. */
static __always_inline u32 slot_of(struct futex_stat_key *key)
{
	u64 x = (key->uaddr >> 2) ^ ((u64)key->tgid << 32) ^ key->hash_mask;
	u32 way = (x * 0x9E3779B97F4A7C15ULL) >> (64 - FUTEX_CACHE_BITS);
	return bpf_get_smp_processor_id() * FUTEX_CACHE_SLOTS + (way & (FUTEX_CACHE_SLOTS - 2));
}

/*
 * Account one futex key lookup as the kernel's __futex_hash() would do it.
 * `ctx` is the program's, for the call site of a futex's first lookup
 * (bpf/call_sites.h). `phash` is nonzero when mm has a private hash (its address in the kprobe
 * and fentry methods, the has_phash flag in the tracepoint method),
 * `hmask`/`hstate` its hash_mask and state; `flags_private` says the key is a private one (FUTEX_PRIVATE_FLAG /
 * FUTEX2_PRIVATE); `node` is the NUMA node of the key (FUTEX2_NUMA, or what
 * the kernel resolved it to; -1: none).
 *
 * The count goes to this CPU's part of a small two-way set-associative cache
 * (an array: the verifier inlines its lookups; small enough to stay in the
 * CPU's first-level cache); the bounded `futexes` map is updated only when a
 * slot is taken over by another futex, and user space adds both up. The
 * bucket (jhash2 of the key) is computed only on a miss: a cache hit is a few
 * compares and an increment. A miss takes an empty way, else goes the stream
 * path (count_streamed), which now and then admits it over the way with fewer
 * lookups. With CHECK_KERNEL_BUCKET (kprobe method) the bucket is computed
 * every time and checked against the bucket and node the kernel returned
 * (kernel_node -1: the private hash).
 */
static __always_inline void account_lookup(void *ctx, u32 tgid, u64 mm, u64 phash, u32 hmask, u32 hstate,
					   u64 uaddr, int flags_private, s32 node,
					   u32 kernel_bucket, s32 kernel_node)
{
	struct futex_stat_key key = {};
	u32 atomic = 0;
	key.tgid = tgid;
	key.uaddr = uaddr;
	classify(&key, &atomic, phash, hmask, hstate, flags_private, node);

	u32 s0 = slot_of(&key), s1 = s0 ^ 1;
	struct cache_slot *a = futex_cache.lookup(&s0);
	struct cache_slot *b = futex_cache.lookup(&s1);
	if (!a || !b) {
		count_unattributed(key.kind, 1);   /* a CPU number beyond NR_CPU_IDS: cannot happen */
		return;
	}
#ifndef CHECK_KERNEL_BUCKET
	if (slot_hit(a, &key, atomic) || slot_hit(b, &key, atomic))
		return;
#endif
	u32 bucket;
	s32 bnode;
	bucket_of(&key, mm, node, &bucket, &bnode);
#ifdef CHECK_KERNEL_BUCKET
	/* Our jhash2 of the key against the bucket and node the kernel chose. */
	if (key.kind != FT_GLOBAL_SHARED && kernel_bucket != ~0U &&
	    (bucket != kernel_bucket || bnode != kernel_node))
		count(FTC_KERNEL_MISMATCH);
	if (slot_hit(a, &key, atomic) || slot_hit(b, &key, atomic))
		return;
#endif
	if (first_seen(&key)) {
		capture_call_site(ctx, key.tgid, key.uaddr, FT_SITE_FIRST, 0);
		count_first(&key, atomic, bucket, bnode, kernel_bucket);
		return;
	}
	/* Miss: take an empty way, or one filled before a process exited; else
	 * the stream path, or (when it admits the futex) evict the way with
	 * fewer lookups. */
	u32 zero = 0;
	u64 *exited = exits.lookup(&zero);
	u64 gen = exited ? *exited : 0;
	struct cache_slot *cs = !a->st.lookups ? a : (!b->st.lookups ? b :
				(a->gen != gen ? a : (b->gen != gen ? b : 0)));
	if (!cs) {
		if (count_streamed(&key, bucket, bnode, atomic, kernel_bucket))
			return;
		cs = a->st.lookups <= b->st.lookups ? a : b;
	}
	if (cs->st.lookups)
		flush_slot(cs);
	fill_slot(cs, &key, atomic, bucket, bnode, kernel_bucket, gen);
}

/* The same, straight into the maps, bypassing the cache: for the
 * futex_waitv loop, where the cache's branches would multiply the states the
 * verifier walks per entry past its limit. Not a hot path. */
static __always_inline void account_direct(void *ctx, u32 tgid, u64 phash, u32 hmask, u32 hstate,
					   u64 uaddr, int flags_private, s32 node)
{
	struct cache_slot cs = {};
	struct futex_stat_key key = {};
	u32 atomic = 0, bucket;
	s32 bnode;
	key.tgid = tgid;
	key.uaddr = uaddr;
	classify(&key, &atomic, phash, hmask, hstate, flags_private, node);
	bucket_of(&key, 0, node, &bucket, &bnode);
	fill_slot(&cs, &key, atomic, bucket, bnode, ~0, 0);
	u32 first = first_seen(&key);
	if (first)
		capture_call_site(ctx, key.tgid, key.uaddr, FT_SITE_FIRST, 0);
	/* Straight to the maps: the per-bucket cache's branches, too, would
	 * multiply the verifier's states per entry. */
	if (!flush_to_futexes(&cs, first)) {
		struct bucket_key bk;
		struct bucket_stat add;
		slot_bucket(&cs, &bk, &add);
		add.unlisted = first;
		add_to_buckets(&bk, &add);
	}
}


