/* SPDX-License-Identifier: GPL-2.0 */
/* The first-seen filter (see futextrace.h): 2^SEEN_WORDS_LOG2 words shared by
 * all CPUs, set once per futex and read on lookup-cache misses only.
 * Memory-mapped by user space, which reads its fill for the error bound. */
BPF_F_TABLE("array", u32, u64, seen, 1 << SEEN_WORDS_LOG2, BPF_F_MMAPABLE_);


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

