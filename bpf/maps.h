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

/* The counts: the per-futex list, the exact per-bucket counts, per-CPU counters. */
BPF_PERCPU_HASH(futexes, struct futex_stat_key, struct futex_stat, MAX_FUTEXES);
BPF_PERCPU_HASH(buckets, struct bucket_key, struct bucket_stat, MAX_BUCKETS);
BPF_PERCPU_ARRAY(counters, u64, FTC_NR);
#define BPF_F_MMAPABLE_ (1U << 10)   /* for the arrays user space memory-maps */
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

static __always_inline u64 current_mm(void)
{
	return read_ptr(bpf_get_current_task() + OFF_TASK_MM);
}

