/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the methods that see futex_hash() itself share (kprobe and fentry):
 * the key as the kernel passes it, and where the bucket the kernel returned
 * lies, to check our own jhash2 against. Pasted into the program text by
 * futextrace/loading/loader.py (source_for), after the hot-path headers (loader.HOT_PATH_HEADERS).
 */
#define FUT_OFF_INODE_ 1
#define FUT_OFF_MMSHARED_ 2

/* union futex_key as the kernel passes it to futex_hash(). */
struct key_copy {
	u64 ptr;      /* private.mm / shared.i_seq */
	u64 word;     /* private.address / shared.pgoff */
	u32 offset;   /* page offset | FUT_OFF_* */
	s32 node;
};


/*
 * Which node's global table, and which bucket in it, a returned hb is: the
 * table bases are read from the kernel's own pointers (GLOBAL_TABLES: the
 * address of __futex_data.queues[], or with GLOBAL_TABLES_INDIRECT of
 * __futex_queues, 7.3's pointer to its nr_node_ids-entry array; from
 * kallsyms). Without them (no CONFIG_KALLSYMS_ALL) the bucket stays unknown
 * (~0) and is not checked. An hb in no table is a mismatch.
 */
static __always_inline void global_bucket_of(u64 hb, u32 *bucket, s32 *node)
{
#ifdef GLOBAL_TABLES
	u64 tables = GLOBAL_TABLES;
#ifdef GLOBAL_TABLES_INDIRECT
	tables = read_ptr(tables);
#endif
	u64 span = (u64)(GLOBAL_MASK + 1) * BUCKET_SIZE;
	for (u32 n = 0; n < NR_NODE_IDS && n < 64; n++) {
		u64 base = read_ptr(tables + n * 8);
		if (base && hb >= base && hb < base + span) {
			*bucket = (hb - base) / BUCKET_SIZE;
			*node = n;
			return;
		}
	}
	count(FTC_KERNEL_MISMATCH);
#endif
}

/* A shared key (inode or mm-shared) has all its hash input in the key here:
 * check the kernel's global bucket against our jhash2 of it too. */
static __always_inline void check_shared(struct key_copy *k, u32 kbucket, s32 knode)
{
	if (kbucket == ~0U)
		return;
	u32 h = hash_global(k->ptr, k->word, k->offset);
	s32 node = k->node >= 0 ? k->node : hash_node(h);
	if ((h & GLOBAL_MASK) != kbucket || node != knode)
		count(FTC_KERNEL_MISMATCH);
}

