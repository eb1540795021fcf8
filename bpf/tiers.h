/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The tiers a count moves through and the flush rule (stated in
 * futextrace.h): a lookup-cache slot, when evicted, goes to the per-futex
 * list (`futexes`) or to its bucket's slot of the per-bucket cache, never
 * both; a per-bucket cache slot, when taken over, goes to the exact counts
 * (`buckets`); a count no map could hold is counted as unattributed.
 */
/* The per-bucket cache, beside the lookup cache: direct-mapped, BUCKET_CACHE_SLOTS slots
 * per CPU, CPU n's at [n * BUCKET_CACHE_SLOTS]; memory-mapped by user space too. */
BPF_F_TABLE("array", u32, struct bucket_cache_slot, bucket_cache, BUCKET_CACHE_SLOTS * NR_CPU_IDS, BPF_F_MMAPABLE_);


/* Lookups no map could hold: counted by hash kind (the totals stay right)
 * and as unattributed. */
static __always_inline void count_unattributed(u32 kind, u64 n)
{
	u32 idx = kind == FT_PRIVATE ? FTC_PRIVATE : FTC_GLOBAL;
	u64 *c = counters.lookup(&idx);
	if (c)
		*c += n;
	idx = FTC_UNATTRIBUTED;
	c = counters.lookup(&idx);
	if (c)
		*c += n;
}

/* Fullness flags (per CPU, in `counters`): set once an insert failed with the
 * map full, so a full map costs no failing insert per lookup afterwards. */
static __always_inline int flag_set(u32 idx)
{
	u64 *c = counters.lookup(&idx);
	return c && *c;
}

static __always_inline void set_flag(u32 idx)
{
	u64 *c = counters.lookup(&idx);
	if (c)
		*c = 1;
}

static __always_inline void add_bucket_stat(struct bucket_stat *bs, struct bucket_stat *add)
{
	bs->lookups += add->lookups;
	bs->atomic_lookups += add->atomic_lookups;
	bs->kernel_checked += add->kernel_checked;
	bs->unlisted += add->unlisted;
}

/* The exact counts: `add` added to its bucket's row, inserted while the
 * table has room (then counted as unattributed). */
static __always_inline void add_to_buckets(struct bucket_key *key, struct bucket_stat *add)
{
	struct bucket_key bk = *key;          /* on the stack: the helpers' key */
	struct bucket_stat v = *add;
	u32 row;
	u32 *found = buckets_index.lookup(&bk);
	if (found) {
		row = *found;
	} else if (flag_set(FTC_BUCKETS_FULL) || insert_bucket_row(&bk, &row)) {
		if (!flag_set(FTC_BUCKETS_FULL))
			set_flag(FTC_BUCKETS_FULL);
		count_unattributed(bk.kind, v.lookups);
		return;
	}
	struct bucket_stat *bs = bucket_row(row);
	if (bs)
		add_bucket_stat(bs, &v);
	else
		count_unattributed(bk.kind, v.lookups);   /* a CPU beyond NR_CPU_IDS: cannot happen */
}

/* A lookup-cache slot's bucket and counts. */
static __always_inline void slot_bucket(struct cache_slot *cs, struct bucket_key *bk, struct bucket_stat *add)
{
	bk->tgid = cs->key.tgid;
	bk->kind = cs->key.kind;
	bk->hash_mask = cs->key.hash_mask;
	bk->bucket = cs->st.bucket;
	bk->node = cs->st.node;
	bk->pad = 0;
	add->lookups = cs->st.lookups;
	add->atomic_lookups = cs->st.atomic_lookups;
	add->kernel_checked = cs->st.kernel_bucket != ~0U ? cs->st.lookups : 0;
	add->unlisted = 0;
}

/* The per-futex list: a slot's counts added to its futex in `futexes` (0:
 * not there, counted nowhere here). Only a first lookup may insert
 * (may_insert; the flush rule in futextrace.h): a futex the full list turned
 * away then is already counted as unlisted, and a later insert (another
 * CPU's full flag not yet set, or the kernel's approximate count letting it
 * in) would count it twice. */
static __always_inline int flush_to_futexes(struct cache_slot *cs, int may_insert)
{
	if (may_insert && flag_set(FTC_FUTEXES_FULL))
		return 0;
	u32 row;
	u32 *found = futexes_index.lookup(&cs->key);
	if (found) {
		row = *found;
	} else {
		if (!may_insert)
			return 0;
		if (insert_futex_row(&cs->key, &row)) {
			set_flag(FTC_FUTEXES_FULL);
			return 0;
		}
	}
	struct futex_stat *st = futex_row(row);
	if (!st)
		return 0;       /* a CPU beyond NR_CPU_IDS: cannot happen */
	/* Each CPU's stat of a row starts at zero: the first flush of a futex
	 * on this CPU (a new row, or its thread migrated here) gives it its
	 * bucket fields, or user space would file these lookups under bucket 0. */
	if (!st->lookups) {
		st->bucket = cs->st.bucket;
		st->node = cs->st.node;
		st->hash_mask = cs->st.hash_mask;
		st->kernel_bucket = cs->st.kernel_bucket;
	}
	st->lookups += cs->st.lookups;
	st->atomic_lookups += cs->st.atomic_lookups;
	return 1;
}

/* This CPU's slot of the per-bucket cache for a bucket: the hash instance
 * (process, kind, size, node) picks a base and its buckets follow on from
 * there, so the buckets of one hash never evict one another (up to
 * BUCKET_CACHE_SLOTS of them), and the base is ready before jhash2's bucket. */
static __always_inline u32 bslot_of(u32 tgid, u32 kind, u32 hash_mask, s32 node, u32 bucket)
{
	u64 x = ((u64)tgid << 32) ^ ((u64)kind << 24) ^ hash_mask ^ ((u64)(u32)node << 40);
	u32 base = (x * 0x9E3779B97F4A7C15ULL) >> (64 - BUCKET_CACHE_BITS);
	return bpf_get_smp_processor_id() * BUCKET_CACHE_SLOTS + ((base + bucket) & (BUCKET_CACHE_SLOTS - 1));
}

/* The per-bucket cache's slot `i`, holding the bucket whose key is the three
 * words w0..w2 (struct bucket_key's layout): a slot held by another bucket
 * goes to `buckets` first (the flush rule in futextrace.h) and is taken over.
 * NULL: a CPU beyond NR_CPU_IDS (cannot happen). */
static __always_inline struct bucket_cache_slot *bucket_cache_slot(u32 i, u64 w0, u64 w1, u64 w2)
{
	struct bucket_cache_slot *b = bucket_cache.lookup(&i);
	if (!b)
		return 0;
	u64 *k = (u64 *)&b->key;
	if ((k[0] ^ w0) | (k[1] ^ w1) | (k[2] ^ w2)) {
		if (b->st.lookups)
			add_to_buckets(&b->key, &b->st);
		k[0] = w0;
		k[1] = w1;
		k[2] = w2;
		b->st.lookups = 0;
		b->st.atomic_lookups = 0;
		b->st.kernel_checked = 0;
		b->st.unlisted = 0;
	}
	return b;
}

/* A slot's counts added up in the per-bucket cache: an array slot, no map
 * update. `unlisted`: 1 for a futex's first lookup that the per-futex list
 * could not take. */
static __always_inline void flush_to_bucket_cache(struct cache_slot *cs, u32 unlisted)
{
	struct bucket_key bk;
	struct bucket_stat add;
	slot_bucket(cs, &bk, &add);
	add.unlisted = unlisted;
	u64 *w = (u64 *)&bk;
	struct bucket_cache_slot *b = bucket_cache_slot(bslot_of(bk.tgid, bk.kind, bk.hash_mask, bk.node, bk.bucket),
					    w[0], w[1], w[2]);
	if (!b) {
		/* A CPU beyond NR_CPU_IDS: cannot happen. Not add_to_buckets: one
		 * more inlined copy of its insert path per lookup site cost the
		 * verifier time at every start. */
		count_unattributed(bk.kind, add.lookups);
		return;
	}
	add_bucket_stat(&b->st, &add);
}

/* An evicted lookup-cache slot, to one place (the flush rule in
 * futextrace.h), with no map insert at any size of the futex set: a futex
 * seen once per stay in the cache (a set far larger than the cache) is in
 * the per-bucket counts only, and the per-futex list keeps the hot ones. */
static __always_inline void flush_slot(struct cache_slot *cs)
{
	if (cs->st.lookups > 1 && flush_to_futexes(cs, 0))
		return;
	flush_to_bucket_cache(cs, 0);
}

/*
 * The stream path: a lookup that missed the lookup cache while both its ways
 * are taken is counted in its bucket's slot of the per-bucket cache (the
 * flush rule in futextrace.h), with no eviction, no refill and no map
 * update. Every ADMIT_EVERY-th such
 * miss of a slot is not counted here (0): the caller admits that futex to the
 * lookup cache instead. So a stream of futexes seen once (a set far larger than the cache)
 * costs jhash2 and one slot update each, while a hot futex takes a way after
 * a few dozen misses of its bucket and stays (the way with fewer lookups is
 * the one evicted).
 * The key words are built in registers in bucket_key's layout.
 */
static __always_inline int count_streamed(struct futex_stat_key *key, u32 bucket, s32 bnode,
					  u32 atomic, u32 kernel_bucket)
{
	struct bucket_cache_slot *b = bucket_cache_slot(bslot_of(key->tgid, key->kind, key->hash_mask, bnode, bucket),
					    key->tgid | ((u64)key->kind << 32),
					    key->hash_mask | ((u64)bucket << 32),
					    (u32)bnode);             /* node, pad 0 */
	if (!b || !(++b->misses & (ADMIT_EVERY - 1)))
		return 0;
	b->st.lookups++;
	b->st.atomic_lookups += atomic;
#ifdef CHECK_KERNEL_BUCKET
	if (kernel_bucket != ~0U)
		b->st.kernel_checked++;
#endif
	return 1;
}

/* A slot's contents for a key's lookup: a lookup-cache way's, or one on the
 * stack on its way to a map. */
static __always_inline void fill_slot(struct cache_slot *cs, struct futex_stat_key *key,
				      u32 atomic, u32 bucket, s32 bnode, u32 kernel_bucket, u64 gen)
{
	cs->gen = gen;
	cs->key = *key;
	cs->st.lookups = 1;
	cs->st.atomic_lookups = atomic;
	cs->st.bucket = bucket;
	cs->st.node = bnode;
	cs->st.hash_mask = key->kind == FT_PRIVATE ? key->hash_mask : 0;
	cs->st.kernel_bucket = kernel_bucket;
}

/* A futex's first lookup: to the per-futex list, or when it is full to the
 * bucket as unlisted (the flush rule in futextrace.h). */
static __always_inline void count_first(struct futex_stat_key *key, u32 atomic, u32 bucket,
					s32 bnode, u32 kernel_bucket)
{
	struct cache_slot cs;
	fill_slot(&cs, key, atomic, bucket, bnode, kernel_bucket, 0);
	if (!flush_to_futexes(&cs, 1))
		flush_to_bucket_cache(&cs, 1);
}

