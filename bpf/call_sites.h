/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Call sites: the user stack of a futex's first lookup (told by the
 * first-seen filter, so once per futex and hash instance) and of its first
 * CALL_SITE_WAITS bucket-lock waits per CPU. Compiled in with -DCALL_SITES
 * (record's --no-call-sites leaves it out: the program is then the one
 * without it, instruction for instruction).
 *
 * Bounded twice: a CPU stores at most CALL_SITES_PER_CPU stacks (then counts
 * FTC_CALL_SITES_OVER and takes no stack at all, so the cost stops too), and
 * `call_sites` holds at most CALL_SITES_MAX. The stack is what
 * bpf_get_stack(BPF_F_USER_STACK) walks: the user ip from the task's saved
 * registers, then frame pointers; user space judges which frames to trust
 * (futextrace/naming/callsites.py). A futex's first stack is kept, a later
 * one for the same key is not stored (insert, not update).
 */
BPF_HASH(call_sites, struct call_site_key, struct call_site, CALL_SITES_MAX);
BPF_PERCPU_ARRAY(call_site_scratch, struct call_site, 1);   /* too big for the BPF stack */

#ifdef CALL_SITES
#define FT_EEXIST 17      /* the key has its stack already */

static __always_inline void capture_call_site(void *ctx, u32 tgid, u64 uaddr, u32 what, u32 nth)
{
	u32 idx = FTC_CALL_SITES, zero = 0;
	u64 *used = counters.lookup(&idx);
	if (!used)
		return;
	if (*used >= CALL_SITES_PER_CPU) {
		count(FTC_CALL_SITES_OVER);
		return;
	}
	struct call_site *cs = call_site_scratch.lookup(&zero);
	if (!cs)
		return;
	long n = bpf_get_stack(ctx, cs->ips, sizeof(cs->ips), BPF_F_USER_STACK);
	if (n <= 0) {
		count(FTC_CALL_SITES_LOST);
		return;
	}
	cs->nr_frames = n / sizeof(u64);
	struct call_site_key key = {};
	key.tgid = tgid;
	key.what = what;
	key.nth = nth;
	key.uaddr = uaddr;
	long err = call_sites.insert(&key, cs);
	if (!err)
		(*used)++;
	else if (err != -FT_EEXIST)
		count(FTC_CALL_SITES_LOST);
}

#else
#define capture_call_site(ctx, tgid, uaddr, what, nth) do { } while (0)
#endif /* CALL_SITES */
