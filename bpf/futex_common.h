/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Code shared by every attach method: the kernel's futex hash (jhash2) and
 * bucket formulas, filters, the per-futex map, counters and events.
 *
 * Everything about the running kernel arrives as -D macros computed from its
 * BTF by futextrace/loading/loader.py (OFF_* offsets, GLOBAL_* geometry, FILTER_*),
 * never from the headers BCC compiles against, which may be another kernel's.
 */
#include "futextrace.h"

#define PAGE_SIZE_ 4096
#define FUTEX_PRIVATE_FLAG_ 128
#define FUTEX_CLOCK_REALTIME_ 256
#define FUTEX2_SIZE_MASK_ 0x03
#define FUTEX2_NUMA_ 0x04
#define FUTEX2_MPOL_ 0x08
#define FUTEX2_PRIVATE_ 128
#define CLONE_VM_ 0x00000100
#define CLONE_THREAD_ 0x00010000

BPF_PERCPU_HASH(futexes, struct futex_stat_key, struct futex_stat, MAX_FUTEXES);
BPF_PERCPU_HASH(buckets, struct bucket_key, struct bucket_stat, MAX_BUCKETS);
BPF_PERCPU_ARRAY(counters, u64, FTC_NR);
/* The lookup cache: FUTEX_CACHE_SLOTS slots per CPU, CPU n's at [n * FUTEX_CACHE_SLOTS].
 * A plain array, not a per-CPU one: its slots are contiguous (a per-CPU
 * array's elements are separate allocations reached through a pointer table),
 * which measurably saves a cache miss per lookup. Each CPU writes only its
 * own range, and the kernel runs one instance of a program per CPU at a time.
 * Memory-mapped by user space, which reads it without a syscall per slot. */
#define BPF_F_MMAPABLE_ (1U << 10)
BPF_F_TABLE("array", u32, struct cache_slot, futex_cache, FUTEX_CACHE_SLOTS * NR_CPU_IDS, BPF_F_MMAPABLE_);
/* Beside it, per CPU, the per-bucket cache: direct-mapped, BUCKET_CACHE_SLOTS slots
 * per CPU, CPU n's at [n * BUCKET_CACHE_SLOTS]; memory-mapped by user space too. */
BPF_F_TABLE("array", u32, struct bucket_cache_slot, bucket_cache, BUCKET_CACHE_SLOTS * NR_CPU_IDS, BPF_F_MMAPABLE_);
/* The first-seen filter (see futextrace.h): 2^SEEN_WORDS_LOG2 words shared by
 * all CPUs, set once per futex and read on lookup-cache misses only.
 * Memory-mapped by user space, which reads its fill for the error bound. */
BPF_F_TABLE("array", u32, u64, seen, 1 << SEEN_WORDS_LOG2, BPF_F_MMAPABLE_);
BPF_RINGBUF_OUTPUT(events, RINGBUF_PAGES);
/* Traced processes that have exited (their main thread): a lookup-cache way
 * filled before the latest exit may hold a futex nobody will use again, so a
 * miss may take it over (account_lookup) instead of going the stream path. */
BPF_ARRAY(exits, u64, 1);

/* The tracepoint method's memo of the current task (trace_tp.bpf.c,
 * TASK_MEMO) holds while `gen` stays. It moves at every task creation (a new
 * task may get a freed task's kernel stack, whose pt_regs address names a
 * memo entry, and a clone may resize its process's hash), every exec (a new
 * mm, maybe a new tgid) and every prctl(PR_FUTEX_HASH)'s return (told by its
 * caller's next futex or prctl call, clone or exit: prctl_closed).
 * `prctls` counts those prctls not yet told returned (by tid in
 * `prctl_open`): while one is, no memo is used. */
struct task_epoch { u64 gen; u64 prctls; };
BPF_ARRAY(task_epoch, struct task_epoch, 1);
BPF_HASH(prctl_open, u32, u8, 1024);

/* Which private hash each process had when last seen: resize detection. The
 * per-CPU `last_hash` cache keeps the hot path off this shared map. */
struct mm_seen { u64 hash; };
BPF_TABLE("lru_hash", u32, struct mm_seen, mm_hash, 16384);
struct last_seen { u64 tgid; u64 hash; };
BPF_PERCPU_ARRAY(last_hash, struct last_seen, 1);

#ifdef FILTER_TGID
BPF_HASH(tgid_filter, u32, u8, 1024);
#endif
#ifdef FILTER_TID
BPF_HASH(tid_filter, u32, u8, 1024);
#endif
#ifdef FILTER_CGROUP
BPF_HASH(cgroup_filter, u64, u8, 64);
#endif
#if defined(FILTER_COMM) || defined(COMM_AT_EXEC)
struct comm_key { char comm[16]; };
BPF_HASH(comm_filter, struct comm_key, u8, 64);
#endif


/* Never loaded. BCC learns the type Python decodes ring-buffer records with
 * (struct ft_event) from a ringbuf_output call, and this one stays in the
 * maps-only text a cached program is replayed with (progcache.py). */
int ft_event_layout(void *ctx)
{
	struct ft_event e = {};
	events.ringbuf_output(&e, sizeof(e), 0);
	return 0;
}

#ifndef FT_MAPS_ONLY   /* -DFT_MAPS_ONLY: the maps alone, for a cached program (futextrace/loading/progcache.py) */

static __always_inline void count(u32 idx)
{
	u64 *c = counters.lookup(&idx);
	if (c)
		(*c)++;
}

/*
 * jhash2 in 64-bit registers whose upper halves may hold garbage (BCC emits
 * no 32-bit ALU instructions, and BPF has no rotate): add, subtract, xor and
 * left shifts are right modulo 2^32 whatever the upper half holds, so only
 * a right shift masks its input. A rotate's two parts have disjoint bits, so
 * `x -= rol32(y, s)` is two subtractions and `x ^= rol32(y, s)` two xors:
 * three dependent instructions per step instead of four (mask, shift, or,
 * subtract). jhash2 is most of what a lookup-cache miss costs.
 */
#define FT_ROL_HI(y, s) ((y) << (s))                          /* rol32's upper part */
#define FT_ROL_LO(y, s) (((y) & 0xffffffffULL) >> (32 - (s)))  /* its lower part */
#define FT_SUB_ROL(x, y, s) ((x) - FT_ROL_HI(y, s) - FT_ROL_LO(y, s))
#define FT_XOR_ROL(x, y, s) ((x) ^ FT_ROL_HI(y, s) ^ FT_ROL_LO(y, s))

#define JHASH_MIX(a, b, c) {                                     \
	a = FT_XOR_ROL(a - c, c, 4);   c += b;                      \
	b = FT_XOR_ROL(b - a, a, 6);   a += c;                      \
	c = FT_XOR_ROL(c - b, b, 8);   b += a;                      \
	a = FT_XOR_ROL(a - c, c, 16);  c += b;                      \
	b = FT_XOR_ROL(b - a, a, 19);  a += c;                      \
	c = FT_XOR_ROL(c - b, b, 4);   b += a; }
#define JHASH_FINAL(a, b, c) {                                   \
	c = FT_SUB_ROL(c ^ b, b, 14);                               \
	a = FT_SUB_ROL(a ^ c, c, 11);                               \
	b = FT_SUB_ROL(b ^ a, a, 25);                               \
	c = FT_SUB_ROL(c ^ b, b, 16);                               \
	a = FT_SUB_ROL(a ^ c, c, 4);                                \
	b = FT_SUB_ROL(b ^ a, a, 14);                               \
	c = FT_SUB_ROL(c ^ b, b, 24); }
#define JHASH_INITVAL_ 0xdeadbeef

/* __futex_hash_private(): jhash2(&key->private.address, 2, key->both.offset) */
static __always_inline u32 hash_private(u64 address, u32 offset)
{
	u64 a, b, c;
	a = b = c = JHASH_INITVAL_ + (2 << 2) + offset;
	b += address >> 32;
	a += address;
	JHASH_FINAL(a, b, c);
	return c;
}

/* __futex_hash(), global part: jhash2(key, 4 words {mm, address}, offset) */
static __always_inline u32 hash_global(u64 mm, u64 address, u32 offset)
{
	u64 a, b, c;
	a = b = c = JHASH_INITVAL_ + (4 << 2) + offset;
	a += mm;
	b += mm >> 32;
	c += address;
	JHASH_MIX(a, b, c);
	a += address >> 32;
	JHASH_FINAL(a, b, c);
	return c;
}

/* Direct load through a BTF-typed kernel pointer (from bpf_get_current_task_btf()
 * and the pointers loaded from it): the verifier checks the offset against the
 * kernel's BTF and the JIT emits a plain load, several times cheaper than
 * bpf_probe_read_kernel() on the hot path. */
#define LOAD(type, base, off) (*(type *)((void *)(base) + (off)))

static __always_inline u64 read_ptr(u64 addr)
{
	u64 v = 0;
	if (bpf_probe_read_kernel(&v, sizeof(v), (void *)addr))
		count(FTC_READ_FAULTS);
	return v;
}

/* Filters compiled in only when asked for, so an unfiltered run pays nothing. */
static __always_inline int task_wanted(u32 tgid, u32 tid)
{
#ifdef FILTER_TGID
	if (!tgid_filter.lookup(&tgid))
		return 0;
#endif
#ifdef FILTER_TID
	if (!tid_filter.lookup(&tid))
		return 0;
#endif
#ifdef FILTER_CGROUP
	u64 cg = bpf_get_current_cgroup_id();
	if (!cgroup_filter.lookup(&cg))
		return 0;
#endif
#ifdef FILTER_COMM
	struct comm_key ck = {};
	bpf_get_current_comm(&ck.comm, sizeof(ck.comm));
	if (!comm_filter.lookup(&ck))
		return 0;
#endif
	return 1;
}

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

/* Resize detection: has this mm's private hash changed since we last looked?
 * `ident` names the hash instance cheaply (size, custom, present); the per-CPU
 * cache answers the common case without touching a shared map, and only a
 * change reads the hash pointer itself for the event. */
static __always_inline u64 current_mm(void)
{
	return read_ptr(bpf_get_current_task() + OFF_TASK_MM);
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

/* The exact counts' map: `add` added to its bucket in `buckets`, inserted
 * while the map has room (then counted as unattributed). */
static __always_inline void add_to_buckets(struct bucket_key *key, struct bucket_stat *add)
{
	struct bucket_key bk = *key;          /* on the stack: the helpers' key */
	struct bucket_stat v = *add;
	struct bucket_stat *bs = buckets.lookup(&bk);
	if (bs) {
		add_bucket_stat(bs, &v);
		return;
	}
	if (!flag_set(FTC_BUCKETS_FULL)) {
		if (!buckets.insert(&bk, &v))
			return;
		bs = buckets.lookup(&bk);   /* lost a race to another CPU's insert? */
		if (bs) {
			add_bucket_stat(bs, &v);
			return;
		}
		set_flag(FTC_BUCKETS_FULL);
	}
	count_unattributed(bk.kind, v.lookups);
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
	struct futex_stat *st = futexes.lookup(&cs->key);
	if (!st && !may_insert)
		return 0;
	if (!st && futexes.insert(&cs->key, &cs->st) == 0)
		return 1;
	if (!st)
		st = futexes.lookup(&cs->key);   /* lost a race to another insert? */
	if (st) {
		/* An insert fills only the inserting CPU's copy and zeroes the
		 * others: a futex flushed here first since then (its thread
		 * migrated) gets its bucket fields now, or user space would file
		 * these lookups under bucket 0. */
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
	set_flag(FTC_FUTEXES_FULL);
	return 0;
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
		add_to_buckets(&bk, &add);
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
 * The first-seen filter: 1 when no lookup of this futex (process, hash
 * instance, address) set all its bits before, and they are set now. A key
 * whose bits others happen to have set is taken as seen (a false positive):
 * user space bounds how often from the filter's fill. Two CPUs seeing one new
 * futex at once may both answer 1; the list keeps one entry.
 */
static __always_inline u64 fmix64(u64 x)
{
	x ^= x >> 33;                     /* murmur3's finalizer: every bit mixed */
	x *= 0xFF51AFD7ED558CCDULL;
	x ^= x >> 33;
	x *= 0xC4CEB9FE1A85EC53ULL;
	x ^= x >> 33;
	return x;
}

/* SEEN_K bit positions from the top 6 * SEEN_K bits of a hash. */
static __always_inline u64 seen_bits(u64 h)
{
	u64 bits = 0;
#pragma unroll
	for (int i = 0; i < SEEN_K; i++)
		bits |= 1ULL << ((h >> (58 - 6 * i)) & 63);
	return bits;
}

static __always_inline u32 first_seen(struct futex_stat_key *key)
{
	/* The futexes of one 2^SEEN_SPAN_SHIFT-byte span share two 64-byte
	 * lines of the filter, picked by the span's hash, one word of each per
	 * futex (its slot in the span, rotated by the span's hash): a program
	 * walking an array of futexes reads two filter lines per span, not two
	 * cache misses per futex, and keys share a word only with keys of other
	 * spans. A key is taken as seen only when both of its words have its
	 * bits: a crowded line alone no longer misses a futex, both lines must
	 * be (benchmarks/seen_filter_sim.py). */
	u64 x = fmix64((key->uaddr >> SEEN_SPAN_SHIFT) + key->tgid * 0x9E3779B97F4A7C15ULL +
		       (key->hash_mask | ((u64)key->kind << 32)) * 0xC2B2AE3D27D4EB4FULL);
	u64 y = fmix64(x ^ key->uaddr);
	u32 slot = ((key->uaddr >> 2) + x) & 7;
	u32 w1 = ((u32)(x >> (64 - SEEN_WORDS_LOG2 + 3)) << 3) | slot;
	u32 w2 = (((u32)(x >> 20) & ((1U << (SEEN_WORDS_LOG2 - 3)) - 1)) << 3) | slot;
	u64 *a = seen.lookup(&w1);
	u64 *b = seen.lookup(&w2);
	if (!a || !b)
		return 0;
	u64 bits1 = seen_bits(y), bits2 = seen_bits(y * 0x9E3779B97F4A7C15ULL);
	if ((*a & bits1) == bits1 && (*b & bits2) == bits2)
		return 0;
	*a |= bits1;
	*b |= bits2;
	return 1;
}

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

/* The node __futex_hash() derives for a global key without one: hash bits
 * above the mask, modulo nr_node_ids (possible nodes), and a node that is not
 * possible moved to the next possible one (NODE_WRAP, from the loader). */
static __always_inline s32 hash_node(u32 h)
{
	u32 n = (h >> GLOBAL_SHIFT) % NR_NODE_IDS;
	return NODE_WRAP(n);
}

/*
 * Account one futex key lookup as the kernel's __futex_hash() would do it.
 * `hash` is mm's private hash (0: none), `hmask`/`hstate` its hash_mask and
 * state; `flags_private` says the key is a private one (FUTEX_PRIVATE_FLAG /
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
static __always_inline void classify(struct futex_stat_key *key, u32 *atomic, u64 hash,
				     u32 hmask, u32 hstate, int flags_private, s32 node)
{
	if (hash && flags_private && node < 0 && hmask) {
		/* Private hash: one reference get and put around the lookup. */
		key->kind = FT_PRIVATE;
		key->hash_mask = hmask;
		*atomic = hstate != 0;
	} else if (!flags_private) {
		key->kind = FT_GLOBAL_SHARED;   /* inode or mm-shared key: hash input not visible */
	} else if (node >= 0) {
		key->kind = FT_GLOBAL_NUMA;
		key->hash_mask = node;          /* one entry per node (see futextrace.h) */
	} else {
		key->kind = FT_GLOBAL;
	}
}

/* The bucket and node, as __futex_hash() computes them (~0: not computable). */
static __always_inline void bucket_of(struct futex_stat_key *key, u64 mm, s32 node,
				      u32 *bucket, s32 *bnode)
{
	u32 offset = key->uaddr % PAGE_SIZE_;
	u64 address = key->uaddr - offset;
	*bucket = ~0;
	*bnode = -1;
	if (key->kind == FT_PRIVATE) {
		*bucket = hash_private(address, offset) & key->hash_mask;
	} else if (key->kind != FT_GLOBAL_SHARED) {
		if (!mm)
			mm = current_mm();
		u32 h = hash_global(mm, address, offset);
		*bucket = h & GLOBAL_MASK;
		*bnode = node >= 0 ? node : hash_node(h);
	}
}

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

static __always_inline void account_lookup(u32 tgid, u64 mm, u64 hash, u32 hmask, u32 hstate,
					   u64 uaddr, int flags_private, s32 node,
					   u32 kernel_bucket, s32 kernel_node)
{
	struct futex_stat_key key = {};
	u32 atomic = 0;
	key.tgid = tgid;
	key.uaddr = uaddr;
	classify(&key, &atomic, hash, hmask, hstate, flags_private, node);

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
static __always_inline void account_direct(u32 tgid, u64 hash, u32 hmask, u32 hstate,
					   u64 uaddr, int flags_private, s32 node)
{
	struct cache_slot cs = {};
	struct futex_stat_key key = {};
	u32 atomic = 0, bucket;
	s32 bnode;
	key.tgid = tgid;
	key.uaddr = uaddr;
	classify(&key, &atomic, hash, hmask, hstate, flags_private, node);
	bucket_of(&key, 0, node, &bucket, &bnode);
	fill_slot(&cs, &key, atomic, bucket, bnode, ~0, 0);
	u32 first = first_seen(&key);
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
	u32 zero = 0;
	struct task_epoch *ep = task_epoch.lookup(&zero);
	/* None open (the common case at every clone and exit): no hash lookup. */
	if (!ep || !ep->prctls || !prctl_open.lookup(&tid))
		return;
	prctl_open.delete(&tid);
	__sync_fetch_and_add(&ep->gen, 1);
	__sync_fetch_and_add(&ep->prctls, -1);
}

/* A prctl(PR_FUTEX_HASH) of `tid` is about to run: no memo is used until it
 * returns. A full `prctl_open` turns memos off for good. */
static __always_inline void prctl_opened(u32 tid)
{
	u32 zero = 0;
	u8 one = 1;
	struct task_epoch *ep = task_epoch.lookup(&zero);
	if (!ep || prctl_open.lookup(&tid))
		return;
	if (prctl_open.update(&tid, &one))
		__sync_fetch_and_add(&ep->prctls, 1ULL << 40);
	else
		__sync_fetch_and_add(&ep->prctls, 1);
}

/* Raw tracepoints for the task events: no tracefs format needed, and they run
 * only on task creation/exit, never on the futex path. current = the parent. */
RAW_TRACEPOINT_PROBE(task_newtask)
{
	task_epoch_moves();   /* before the filter: any task may reuse a stack */
	u64 id = bpf_get_current_pid_tgid();
#ifdef TASK_MEMO
	prctl_closed((u32)id);   /* a prctl caller that goes on to start threads */
#endif
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

#if defined(COMM_AT_EXEC) || defined(TASK_MEMO)
/* An exec gives the task a new mm (the memo's epoch moves). With --comm and
 * the tgid set kept by user space (record/commwatch.py): a process
 * that execs under a wanted name is added here, at once, so none of its calls
 * are missed before user space hears of the exec (the proc connector's event
 * comes later: the test_serve_bounded churn lost ~4% of lookups without this).
 * User space removes processes at exit and at an exec under another name.
 * The name is already the new one here (begin_new_exec set it). */
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
#ifdef TASK_MEMO
	prctl_closed((u32)id);   /* a prctl caller that exits without another syscall */
#endif
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

#endif /* FT_MAPS_ONLY */
