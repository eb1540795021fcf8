/* SPDX-License-Identifier: GPL-2.0 */
/*
 * futextrace: the one definition of every map key/value and event shared by
 * the BPF programs and the Python side. Python never restates these layouts:
 * it reads them through the ctypes types BCC generates from this file, and the
 * enum values through futextrace/kernel/layout.py, which parses this header.
 */
#ifndef FUTEXTRACE_H
#define FUTEXTRACE_H

/* Which hash a lookup went to (futex_stat_key.kind). */
enum ft_kind {
	FT_PRIVATE = 0,       /* the process's private hash, bucket computed */
	FT_GLOBAL = 1,        /* global hash, private futex key: bucket computed */
	FT_GLOBAL_SHARED = 2, /* global hash, shared futex key (inode/mm-shared): bucket unknown */
	FT_GLOBAL_NUMA = 3,   /* FUTEX2_NUMA futex: global hash on the node it names, or
	                       * (node -1) on the node of the CPU making the call */
};

/* Per-CPU counters (the `counters` array), index = enum ft_counter. */
enum ft_counter {
	FTC_PRIVATE = 0,      /* private-hash lookups no map could hold (user space adds
	                       * those of the buckets map and the cache: the total) */
	FTC_GLOBAL,           /* ... the same for the global hash */
	FTC_UNATTRIBUTED,     /* lookups whose bucket could not be stored: buckets map full */
	FTC_LOST_EVENTS,      /* ring buffer full: events dropped */
	FTC_REF_GET_PERCPU,   /* private hash reference taken on the per-CPU counter */
	FTC_REF_GET_ATOMIC,   /* ... taken on the shared atomic (hash being replaced) */
	FTC_REF_PUT_PERCPU,
	FTC_REF_PUT_ATOMIC,
	FTC_KERNEL_MISMATCH,  /* kprobe method: computed bucket != kernel's bucket */
	FTC_READ_FAULTS,      /* a kernel/user read failed */
	FTC_UNATTR_UNREADABLE, /* lookups whose key sits in user memory BPF could not read
	                       * (a futex_waitv entry or a FUTEX2_NUMA node word on a page
	                       * not present: the kernel faults it in, BPF cannot); hash
	                       * unknown, so in neither FTC_PRIVATE nor FTC_GLOBAL */
	FTC_MPOL_ASSUMED,     /* FUTEX2_MPOL lookups (tracepoint method): the VMA's memory
	                       * policy is not visible from sys_enter, so each is counted
	                       * where it goes when the VMA has none (futex_mpol() gives
	                       * no node); with a policy the kernel uses its node's table */
	FTC_FUTEXES_FULL,     /* per CPU, a flag: an insert into `futexes` failed (map
	                       * full), so this CPU attempts no more: per-futex detail
	                       * stops growing, the bucket counts stay exact */
	FTC_BUCKETS_FULL,     /* per CPU, a flag: the same for `buckets` (its later new
	                       * buckets are counted as unattributed) */
	FTC_CALL_SITES,       /* call sites stored by this CPU (bpf/call_sites.h): its budget used */
	FTC_CALL_SITES_OVER,  /* call sites not taken: this CPU's budget was spent */
	FTC_CALL_SITES_LOST,  /* call sites not stored: no user stack, or `call_sites` full */
	FTC_NR,
};

/*
 * The flush rule: where a lookup's count is. At any moment each lookup is
 * counted in exactly one of four tiers, so a bucket's exact count is their
 * sum (futextrace/loading/exact.py, the one place that adds them up):
 *   futex_cache   struct cache_slot    the lookup cache: per CPU, one futex a slot
 *   bucket_cache   struct bucket_cache_slot   the per-bucket cache: per CPU, one bucket a slot
 *   futexes  futex_stat_key -> futex_stat   the bounded per-futex list (a row table, maps.h)
 *   buckets  bucket_key -> bucket_stat      the per-bucket counts (a row table)
 * - An evicted lookup-cache slot goes to exactly one place: its futex's
 *   `futexes` entry if the slot had more than one lookup and the entry
 *   exists, else its bucket's `bucket_cache` slot (flush_slot).
 * - A `bucket_cache` slot taken over by another bucket goes to `buckets`
 *   (bucket_cache_slot); a lookup that misses the lookup cache while both its ways
 *   are taken is counted in its bucket's `bucket_cache` slot (the stream path).
 * - A futex's first lookup, told by the first-seen filter `seen`, is the only
 *   one that may insert into `futexes` (count_first); when the list cannot
 *   take it, it is counted in its bucket as bucket_stat.unlisted. So a cached
 *   futex that `futexes` does not hold is counted per bucket only, and a
 *   futex's count is its `futexes` entry plus its lookup-cache slots.
 * - futex_waitv entries skip both caches: `futexes` (as above), else `buckets`.
 * - A count no map can take (`buckets` full) is FTC_UNATTRIBUTED.
 */

/* The exact counts: one row per bucket a process's lookups went to (per
 * hash instance and NUMA node), the row table `buckets` (maps.h), with a
 * stat per CPU. Its size is bounded by the hash sizes, not by how many
 * futexes a process touches. */
struct bucket_key {
	u32 tgid;
	u32 kind;             /* enum ft_kind */
	u32 hash_mask;        /* as futex_stat_key.hash_mask */
	u32 bucket;           /* bucket index in its table (~0: not computable) */
	s32 node;             /* NUMA node of the bucket (global hash), -1 private */
	u32 pad;
};

struct bucket_stat {
	u64 lookups;
	u64 atomic_lookups;   /* lookups while the private hash ref was in atomic mode */
	u64 kernel_checked;   /* kprobe method: lookups whose bucket the kernel also returned */
	u64 unlisted;         /* futexes first seen (the `seen` filter) in this bucket that
	                       * the per-futex list could not take (full): distinct futexes
	                       * of a bucket = its entries in `futexes` + these */
};

/* Per-futex detail, bounded: one entry per futex (per process, per hash
 * instance) until the map `futexes` is full, then no more inserts (see
 * FTC_FUTEXES_FULL). Each futex enters it at its first lookup (the flush
 * rule above; `seen` is a Bloom filter: SEEN_K bits in each of two 64-bit
 * words per key), so the list holds every futex while it has room. Its lookup counts
 * are lower bounds; the exact lookups are per bucket. A row table (maps.h)
 * with a stat per CPU, so the traced hot path shares no cache line.
 * Three 8-byte words with no holes: the cache compares it word by word. */
struct futex_stat_key {
	u32 tgid;
	u32 kind;             /* enum ft_kind */
	u64 uaddr;            /* user address of the futex word */
	u32 hash_mask;        /* private hash size - 1 (0: global); the bucket
	                       * is a function of (uaddr, hash_mask). FT_GLOBAL_NUMA:
	                       * the node, so one futex used from two nodes' CPUs with
	                       * node -1 is two entries */
	u32 pad;
};

struct futex_stat {
	u64 lookups;
	u64 atomic_lookups;   /* lookups while the private hash ref was in atomic mode */
	u32 bucket;           /* bucket index in its table */
	s32 node;             /* NUMA node of the bucket (global hash), -1 private */
	u32 hash_mask;        /* private hash_mask (buckets-1), 0 for global */
	u32 kernel_bucket;    /* kprobe method: the bucket the kernel returned, ~0 unknown */
};

/* A slot of the per-CPU cache in front of `futexes`: one 64-byte cache line. */
struct cache_slot {
	struct futex_stat_key key;
	struct futex_stat st;
	u64 gen;              /* `exits` when filled: an older one may be an exited process's */
};

/* A slot of the per-CPU per-bucket cache `bucket_cache`: lookups added up per
 * bucket before any map update (what goes there: the flush rule above). One
 * 64-byte line. */
struct bucket_cache_slot {
	struct bucket_key key;
	struct bucket_stat st;
	u64 misses;           /* lookup-cache misses counted here: every ADMIT_EVERY-th is admitted */
};

/* Events sent through the ring buffer (slow path only). */
enum ft_event_type {
	FTE_HASH_SEEN = 1,    /* first sight of a process's hash, or it changed (pivot) */
	FTE_NEWTASK,          /* task created (copy_process done) */
	FTE_EXIT,             /* task exited */
	FTE_PRCTL_ENTER,      /* prctl(PR_FUTEX_HASH, ...) called */
	FTE_PRCTL_EXIT,       /* ... and returned */
	FTE_ALLOC_ENTER,      /* kprobe method: futex_hash_allocate(slots, flags) */
	FTE_ALLOC_EXIT,
	FTE_PIVOT,            /* kprobe method: __futex_pivot_hash(mm, new) returned */
	FTE_ALLOC_DEFAULT,    /* kprobe method: futex_hash_allocate_default() called */
};

struct ft_event {
	u64 ts;               /* bpf_ktime_get_ns() */
	u32 type;             /* enum ft_event_type */
	u32 tgid;
	u32 tid;
	u32 cpu;
	u64 mm;
	u64 hash;             /* current private hash pointer (0: none) */
	u64 hash_new;         /* pending replacement hash (0: none) */
	u32 hash_mask;
	u32 hash_new_mask;
	s64 arg0;             /* prctl/alloc: slots; newtask: clone flags low bits */
	s64 arg1;             /* prctl: sub-command; alloc: flags; newtask: new tid */
	s64 ret;              /* prctl/alloc/pivot result */
	u32 nr_threads;       /* current->signal->nr_threads */
	u8 custom;            /* hash->custom */
	u8 new_custom;
	u8 state;             /* hash->state (0 per-CPU, 1 atomic) */
	u8 pad;
	char comm[16];
};

/* One process's futex hash as the task iterator (bpf/iter_task.bpf.c) reads
 * it from the kernel, written with bpf_seq_write. One record per thread-group
 * leader; where the leader has exited but threads live on, each live thread
 * writes one and user space keeps one per tgid. */
struct ft_iter_task {
	u32 tgid;
	u32 nr_threads;       /* signal->nr_threads */
	u32 hash_mask;        /* private hash: buckets - 1; 0 with has_hash: global chosen by prctl */
	u32 new_hash_mask;    /* pending replacement (mm's futex_phash_new): buckets - 1 */
	s64 atomic;           /* mm's futex_atomic: the shared count while state is atomic */
	u8 has_hash;          /* mm's futex_phash is set */
	u8 custom;            /* set by prctl(PR_FUTEX_HASH_SET_SLOTS) */
	u8 state;             /* refcount mode: 0 per-CPU (FR_PERCPU), 1 atomic (FR_ATOMIC) */
	u8 has_new;           /* a replacement waits for its pivot */
	u8 new_custom;
	u8 pad[3];
	char comm[16];        /* the leader's (or the writing thread's) comm */
};

/* Bucket-lock contention (bpf/lock_waits.h): waits on a private-hash bucket's
 * hb->lock, from lock:contention_begin/end, per (process, hash size, bucket,
 * waiting futex). The waiter's futex is the syscall argument whose bucket is
 * the lock's bucket; 0 when none is (futex_waitv beyond its first entries,
 * kernel paths such as exit), which user space shows as unknown. */
struct lock_wait_key {
	u32 tgid;
	u32 hash_mask;        /* private hash size - 1 of the hash whose lock it was */
	u32 bucket;           /* bucket index: (lock - &queues[0].lock) / sizeof(bucket) */
	u32 pad;
	u64 uaddr;            /* the waiter's futex (user address), 0: unknown */
};

struct lock_wait_stat {
	u64 waits;            /* contention_begin .. contention_end pairs */
	u64 wait_ns;          /* their total duration */
	u64 max_ns;           /* the longest one (per CPU: user space takes the max) */
};

/* Per-CPU counters of the contention programs (the `lock_counters` array). */
enum ft_lock_counter {
	FTL_WAITS_LOST = 0,   /* bucket-lock waits not stored: lock_waits map full, or a
	                       * begin/end pair over a second apart (an end the kernel skipped) */
	FTL_NR,
};

/* Call sites (bpf/call_sites.h): the user stack of a futex's first lookup
 * (what FT_SITE_FIRST, nth 0) and of its first bucket-lock waits (FT_SITE_WAIT,
 * nth 1..CALL_SITE_WAITS, counted per CPU: a few stacks, user space dedups). */
/* Frames kept per stack; bucket-lock waits per CPU and futex whose stack is taken. */
#define CALL_SITE_DEPTH 16
#define CALL_SITE_WAITS 3

enum ft_site_what {
	FT_SITE_FIRST = 0,
	FT_SITE_WAIT = 1,
};

struct call_site_key {
	u32 tgid;
	u16 what;             /* enum ft_site_what */
	u16 nth;
	u64 uaddr;            /* the futex (user address) */
};

struct call_site {
	u32 nr_frames;        /* ips[] filled: frame 0 is the user ip at the syscall, then
	                       * return addresses found by walking frame pointers */
	u32 pad;
	u64 ips[CALL_SITE_DEPTH];
};

#endif /* FUTEXTRACE_H */
