/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The maps every part of the hot path shares, and the few helpers they all
 * go through. Each header under bpf/ declares its maps first, then its code.
 * A cached program is replayed with no compiler at all: its maps are created
 * from the description BCC gave at the first compile
 * (futextrace/loading/progcache.py).
 *
 * Everything about the running kernel arrives as -D macros computed from its
 * BTF by futextrace/loading/loader.py (OFF_* offsets, GLOBAL_* geometry, FILTER_*),
 * never from the headers BCC compiles against, which may be another kernel's.
 * BCC rewrites map calls only in the text it is given, so the loader pastes
 * these headers in place of their #include lines (loader.HOT_PATH_HEADERS).
 */
#include "futextrace.h"

#define BPF_F_MMAPABLE_ (1U << 10)   /* for the arrays user space memory-maps */

/*
 * The counts: the per-futex list (`futexes_*`) and the exact per-bucket
 * counts (`buckets_*`), each a row table; per-CPU counters.
 *
 * A row table holds what a per-CPU hash would, as rows that keep their place:
 *   <t>_index  key -> row, a plain hash written once per key (at its insert)
 *              and only read after, so the hot path shares no line through it;
 *   <t>_keys   row -> key, memory-mapped;
 *   <t>_stats  CPU n's stat of row r at [n * MAX + r], memory-mapped: each CPU
 *              writes its own range (as the lookup cache does), user space
 *              reads them all in place, no copy by the kernel.
 * Rows come from row_next[<t>], or from <t>_free: rows user space gave back
 * (zeroed) one read after it deleted their keys from the index (a process
 * `serve` forgot), so no program still holds one. Created in a millisecond
 * or two, where a preallocated per-CPU hash of 65,536 entries took 35-90 ms
 * (one per-CPU allocation per entry), and read in place at ~5 ms where a
 * batch copy of one took ~27 (docs/design.md).
 */
#define ROWS_FUTEXES 0
#define ROWS_BUCKETS 1
BPF_F_TABLE("array", u32, u64, row_next, 2, BPF_F_MMAPABLE_);   /* u64: a fetch-add of a u32 needs -mcpu=v3 */
BPF_HASH(futexes_index, struct futex_stat_key, u32, MAX_FUTEXES);
BPF_F_TABLE("array", u32, struct futex_stat_key, futexes_keys, MAX_FUTEXES, BPF_F_MMAPABLE_);
BPF_F_TABLE("array", u32, struct futex_stat, futexes_stats, MAX_FUTEXES * NR_CPU_IDS, BPF_F_MMAPABLE_);
BPF_QUEUE(futexes_free, u32, MAX_FUTEXES);
BPF_HASH(buckets_index, struct bucket_key, u32, MAX_BUCKETS);
BPF_F_TABLE("array", u32, struct bucket_key, buckets_keys, MAX_BUCKETS, BPF_F_MMAPABLE_);
BPF_F_TABLE("array", u32, struct bucket_stat, buckets_stats, MAX_BUCKETS * NR_CPU_IDS, BPF_F_MMAPABLE_);
BPF_QUEUE(buckets_free, u32, MAX_BUCKETS);
BPF_PERCPU_ARRAY(counters, u64, FTC_NR);
BPF_RINGBUF_OUTPUT(events, RINGBUF_PAGES);
/* Traced processes that have exited (their main thread): a lookup-cache way
 * filled before the latest exit may hold a futex nobody will use again, so a
 * miss may take it over (account_lookup) instead of going the stream path. */
BPF_ARRAY(exits, u64, 1);

/* Never loaded. BCC learns the type Python decodes ring-buffer records with
 * (struct ft_event) from a ringbuf_output call, and this one stays in the
 * maps-only text a cached program is replayed with (progcache.py). */
int ft_event_layout(void *ctx)
{
	struct ft_event e = {};
	events.ringbuf_output(&e, sizeof(e), 0);
	return 0;
}


static __always_inline void count(u32 idx)
{
	u64 *c = counters.lookup(&idx);
	if (c)
		(*c)++;
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

/* A new row of table `which` (ROWS_*, `max` rows): a given-back one first,
 * else the next never used; -1 when none is left. The shared counter is
 * touched only here, once per key, never on a count. */
static __always_inline int new_row(u32 which, u32 max, u32 *row)
{
	if (which == ROWS_FUTEXES ? !futexes_free.pop(row) : !buckets_free.pop(row))
		return 0;
	u64 *next = row_next.lookup(&which);
	if (!next || *next >= max)
		return -1;        /* full: tested before the atomic, which would move it on */
	u64 r = __sync_fetch_and_add(next, 1);
	if (r >= max)
		return -1;
	*row = r;
	return 0;
}

/* This CPU's stat of row `row` of the per-futex list or the exact counts
 * (the row tables in maps.h). */
static __always_inline struct futex_stat *futex_row(u32 row)
{
	u32 i = bpf_get_smp_processor_id() * MAX_FUTEXES + row;
	return futexes_stats.lookup(&i);
}

static __always_inline struct bucket_stat *bucket_row(u32 row)
{
	u32 i = bpf_get_smp_processor_id() * MAX_BUCKETS + row;
	return buckets_stats.lookup(&i);
}

/* A new key's row in a row table: a new row, its key written, then the
 * key's index entry; where another CPU inserted the key meanwhile, its row
 * (ours given back: zero counts, so readers skip it). -1: no row left. */
static __always_inline int insert_futex_row(struct futex_stat_key *key, u32 *row)
{
	if (new_row(ROWS_FUTEXES, MAX_FUTEXES, row))
		return -1;
	struct futex_stat_key *k = futexes_keys.lookup(row);
	if (!k)
		return -1;
	*k = *key;
	if (!futexes_index.insert(key, row))
		return 0;
	futexes_free.push(row, 0);
	u32 *other = futexes_index.lookup(key);
	if (!other)
		return -1;
	*row = *other;
	return 0;
}

static __always_inline int insert_bucket_row(struct bucket_key *key, u32 *row)
{
	if (new_row(ROWS_BUCKETS, MAX_BUCKETS, row))
		return -1;
	struct bucket_key *k = buckets_keys.lookup(row);
	if (!k)
		return -1;
	*k = *key;
	if (!buckets_index.insert(key, row))
		return 0;
	buckets_free.push(row, 0);
	u32 *other = buckets_index.lookup(key);
	if (!other)
		return -1;
	*row = *other;
	return 0;
}

static __always_inline u64 current_mm(void)
{
	return read_ptr(bpf_get_current_task() + OFF_TASK_MM);
}

