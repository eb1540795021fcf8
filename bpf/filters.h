/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Which tasks are traced: --pid (FILTER_TGID, and the tgid set --comm keeps
 * up to date), --tid, --cgroup, --comm.
 */
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

