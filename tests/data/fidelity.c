/* Test-only workload for tests/host/test_fidelity.py: every futex lookup
 * kind the tracer models, on futex words at known addresses, each issued a
 * known number of times. Prints one JSON line: per case the addresses, how
 * many lookups of each the kernel makes, the hash kind and node expected.
 *
 *   fidelity OUT ITERS CPU [MPOL_NODE]
 * OUT: the file the JSON goes to. CPU: the CPU the process is pinned to (FUTEX2_NUMA node -1 resolves to its
 * node). MPOL_NODE: also run a FUTEX2_MPOL case on a page whose memory policy
 * prefers that node (mbind), which only the kprobe method can see.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NR_futex_waitv 449
#define NR_futex_wake 454
#define NR_futex_wait 455
#define NR_futex_requeue 456
#define F2_U32 0x02
#define F2_NUMA 0x04
#define F2_MPOL 0x08
#define F2_PRIVATE 128
#define PR_FUTEX_HASH_ 78
#define MPOL_PREFERRED_ 1
#define WAITV_MAX 128

struct waitv { uint64_t val; uint64_t uaddr; uint32_t flags; uint32_t reserved; };

static int iters;
static int first_case = 1;

static void begin_case(const char *name, const char *kind, int node)
{
	printf("%s{\"name\":\"%s\",\"kind\":\"%s\",\"node\":", first_case ? "" : ",", name, kind);
	if (node < 0)
		printf("null");
	else
		printf("%d", node);
	printf(",\"futexes\":[");
	first_case = 0;
}

/* One futex word: its address and how many lookups of it the kernel made. */
static void futex_entry(int i, void *addr, long lookups)
{
	printf("%s{\"addr\":\"%p\",\"lookups\":%ld}", i ? "," : "", addr, lookups);
}

static void end_case(long ret)
{
	printf("],\"last_ret\":%ld}", ret);
}

static long sys_wake2(void *uaddr, unsigned int flags)
{
	return syscall(NR_futex_wake, uaddr, 0xffffffffUL, 1, flags);
}

/* futex_wake on n futex words (stride `stride` u32s) with futex2 `flags`. */
static void wake2_case(const char *name, const char *kind, int node, uint32_t *words,
		       int n, int stride, unsigned int flags)
{
	long ret = 0, ok = 1;
	for (int it = 0; it < iters; it++)
		for (int i = 0; i < n; i++) {
			ret = sys_wake2(&words[i * stride], flags);
			ok &= ret >= 0;
		}
	begin_case(name, kind, node);
	for (int i = 0; i < n; i++)
		futex_entry(i, &words[i * stride], ok ? iters : 0);
	end_case(ret);
}

static void wait2_case(uint32_t *words, int n)
{
	long ret = 0;
	for (int it = 0; it < iters; it++)
		for (int i = 0; i < n; i++)   /* value 0, expected 1: EAGAIN after the lookup */
			ret = syscall(NR_futex_wait, &words[i], 1UL, 0xffffffffUL, F2_U32 | F2_PRIVATE, NULL, 0);
	begin_case("futex_wait", "private", -1);
	for (int i = 0; i < n; i++)
		futex_entry(i, &words[i], ret == -1 && errno == EAGAIN ? iters : 0);
	end_case(ret);
}

/* futex_waitv over n entries; entries from `mismatch` on are never hashed
 * (the kernel stops at the first word that does not hold its value). */
static void waitv_case(const char *name, uint32_t *words, int n, int mismatch)
{
	static struct waitv w[WAITV_MAX];
	struct timespec past = { 0, 0 };   /* absolute CLOCK_MONOTONIC 0: expired */
	long ret = 0;
	for (int i = 0; i < n; i++) {
		w[i].uaddr = (uintptr_t)&words[i];
		w[i].val = i == mismatch ? 7 : 0;
		w[i].flags = F2_U32 | F2_PRIVATE;
	}
	for (int it = 0; it < iters; it++)
		ret = syscall(NR_futex_waitv, w, n, 0, &past, CLOCK_MONOTONIC);
	begin_case(name, "private", -1);
	for (int i = 0; i < n; i++)
		futex_entry(i, &words[i], mismatch >= 0 && i > mismatch ? 0 : iters);
	end_case(ret);
}

static void requeue2_case(uint32_t *words)
{
	struct waitv w[2] = {
		{ 0, (uintptr_t)&words[0], F2_U32 | F2_PRIVATE, 0 },
		{ 0, (uintptr_t)&words[1], F2_U32 | F2_PRIVATE, 0 },
	};
	long ret = 0;
	for (int it = 0; it < iters; it++)
		ret = syscall(NR_futex_requeue, w, 0, 1, 0);
	begin_case("futex_requeue", "private", -1);
	futex_entry(0, &words[0], iters);
	futex_entry(1, &words[1], iters);
	end_case(ret);
}

/* FUTEX_WAIT_REQUEUE_PI hashes uaddr only; FUTEX_CMP_REQUEUE_PI both. */
static void requeue_pi_cases(uint32_t *words)
{
	long ret = 0;
	for (int it = 0; it < iters; it++)   /* *uaddr 0 != 1: EAGAIN after hashing uaddr */
		ret = syscall(SYS_futex, &words[0], FUTEX_WAIT_REQUEUE_PI | FUTEX_PRIVATE_FLAG, 1, NULL,
			      &words[1], 0);
	begin_case("wait_requeue_pi", "private", -1);
	futex_entry(0, &words[0], iters);
	futex_entry(1, &words[1], 0);
	end_case(ret);
	for (int it = 0; it < iters; it++)   /* cmpval 5 != 0: EAGAIN after hashing both */
		ret = syscall(SYS_futex, &words[2], FUTEX_CMP_REQUEUE_PI | FUTEX_PRIVATE_FLAG, 1,
			      (void *)0UL, &words[3], 5);
	begin_case("cmp_requeue_pi", "private", -1);
	futex_entry(0, &words[2], iters);
	futex_entry(1, &words[3], iters);
	end_case(ret);
}

static void legacy_case(const char *name, const char *kind, uint32_t *words, int n, int op)
{
	long ret = 0;
	for (int it = 0; it < iters; it++)
		for (int i = 0; i < n; i++)
			ret = syscall(SYS_futex, &words[i], op, 1, NULL, NULL, 0);
	begin_case(name, kind, -1);
	for (int i = 0; i < n; i++)
		futex_entry(i, &words[i], ret >= 0 ? iters : 0);
	end_case(ret);
}

static int cpu_node(int cpu)
{
	unsigned int c, node;
	if (syscall(SYS_getcpu, &c, &node, NULL) == 0 && (int)c == cpu)
		return node;
	return -1;
}

/* FUTEX2_NUMA futexes: {word, node} pairs, 8-byte aligned. */
static void numa_cases(uint32_t *pairs, int cpu)
{
	int here = cpu_node(cpu);
	for (int i = 0; i < 4; i++) {
		pairs[2 * i + 1] = 0;              /* node 0: always possible */
		pairs[8 + 2 * i + 1] = (uint32_t)-1; /* the calling CPU's node (written back) */
	}
	wake2_case("numa_node0", "global_numa", 0, pairs, 4, 2, F2_U32 | F2_PRIVATE | F2_NUMA);
	wake2_case("numa_local", "global_numa", here, pairs + 8, 4, 2, F2_U32 | F2_PRIVATE | F2_NUMA);
}

/* FUTEX2_MPOL on a page whose policy prefers `node`: global hash, that node. */
static void mpol_bind_case(int node)
{
	uint32_t *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned long mask = 1UL << node;
	if (page == MAP_FAILED || syscall(SYS_mbind, page, 4096, MPOL_PREFERRED_, &mask, 64, 0)) {
		fprintf(stderr, "mbind: %s\n", strerror(errno));
		exit(3);
	}
	wake2_case("mpol_preferred", "global_numa", node, page, 4, 1, F2_U32 | F2_PRIVATE | F2_MPOL);
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: fidelity OUT ITERS CPU [MPOL_NODE]\n");
		return 2;
	}
	if (!freopen(argv[1], "w", stdout)) {
		perror(argv[1]);
		return 3;
	}
	iters = atoi(argv[2]);
	int cpu = atoi(argv[3]);
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set)) {
		perror("sched_setaffinity");
		return 3;
	}
	if (prctl(PR_FUTEX_HASH_, 1, 64, 0, 0)) {   /* a private hash of 64 buckets */
		perror("prctl(PR_FUTEX_HASH_SET_SLOTS, 64)");
		return 3;
	}
	static uint32_t wake_w[8], wait_w[8], waitv_w[WAITV_MAX], mis_w[16], rq_w[2], pi_w[4];
	static uint32_t legacy_w[8], mpol_w[4], global_w[8];
	static uint32_t numa_w[16] __attribute__((aligned(8)));
	uint32_t *shared_w = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shared_w == MAP_FAILED)
		return 3;
	printf("{\"pid\":%d,\"cpu\":%d,\"cases\":[", getpid(), cpu);
	wake2_case("futex_wake", "private", -1, wake_w, 8, 1, F2_U32 | F2_PRIVATE);
	wait2_case(wait_w, 8);
	waitv_case("waitv_128", waitv_w, WAITV_MAX, -1);
	waitv_case("waitv_stops_at_mismatch", mis_w, 16, 5);
	requeue2_case(rq_w);
	requeue_pi_cases(pi_w);
	legacy_case("futex_wake_private", "private", legacy_w, 8, FUTEX_WAKE_PRIVATE);
	numa_cases(numa_w, cpu);
	/* No memory policy on these pages: futex_mpol() gives no node. */
	wake2_case("mpol_no_policy", "private", -1, mpol_w, 4, 1, F2_U32 | F2_PRIVATE | F2_MPOL);
	if (argc > 4)
		mpol_bind_case(atoi(argv[4]));
	if (prctl(PR_FUTEX_HASH_, 1, 0, 0, 0)) {    /* switch to the global hash */
		perror("prctl(PR_FUTEX_HASH_SET_SLOTS, 0)");
		return 3;
	}
	legacy_case("global_private", "global", global_w, 8, FUTEX_WAKE_PRIVATE);
	legacy_case("global_shared", "global_shared", shared_w, 8, FUTEX_WAKE);
	printf("]}\n");
	return 0;
}
