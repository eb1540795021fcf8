/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The kernel's futex hash, __futex_hash(): which hash a key goes to
 * (classify), and its bucket and node there (bucket_of), with the kernel's
 * jhash2.
 */
#define PAGE_SIZE_ 4096


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
/* The node __futex_hash() derives for a global key without one: hash bits
 * above the mask, modulo nr_node_ids (possible nodes), and a node that is not
 * possible moved to the next possible one (NODE_WRAP, from the loader). */
static __always_inline s32 hash_node(u32 h)
{
	u32 n = (h >> GLOBAL_SHIFT) % NR_NODE_IDS;
	return NODE_WRAP(n);
}

/* Which hash a key goes to, as __futex_hash() picks it (the arguments:
 * account_lookup in lookup_cache.h). */
static __always_inline void classify(struct futex_stat_key *key, u32 *atomic, u64 phash,
				     u32 hmask, u32 hstate, int flags_private, s32 node)
{
	if (phash && flags_private && node < 0 && hmask) {
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

