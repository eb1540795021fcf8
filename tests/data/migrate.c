/* One thread that hops between CPUs while it reuses one futex set: every round
 * pins it to the next online CPU, then makes CALLS FUTEX_WAIT_PRIVATE calls in a
 * row on each of N futexes (a value that never matches: -EAGAIN, one hash lookup
 * each). The set is larger than futextrace's per-CPU lookup cache, so the same
 * futex is evicted to the per-futex list from every CPU in turn, as a server's
 * migrating threads do. A custom 16-slot private hash is set first; the process
 * stays single-threaded, so libc makes no futex call of its own.
 * Usage: migrate OUT.json [N [ROUNDS [CALLS]]]
 * Prints {"pid", "base", "futexes", "rounds", "calls", "slots", "cpus"} to OUT.json. */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PR_FUTEX_HASH_ 78
#define SET_SLOTS 1
#define GET_SLOTS 2

int main(int argc, char **argv)
{
	long n = argc > 2 ? atol(argv[2]) : 4096;
	int rounds = argc > 3 ? atoi(argv[3]) : 8, calls = argc > 4 ? atoi(argv[4]) : 3;
	uint32_t *words = calloc(n, sizeof(*words));
	cpu_set_t online;
	int cpus[CPU_SETSIZE], ncpus = 0;
	if (argc < 2 || !words || sched_getaffinity(0, sizeof(online), &online))
		return 2;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &online))
			cpus[ncpus++] = c;
	if (prctl(PR_FUTEX_HASH_, SET_SLOTS, 16, 0, 0) != 0)
		return 3;
	for (int r = 0; r < rounds; r++) {
		cpu_set_t one;
		CPU_ZERO(&one);
		CPU_SET(cpus[r % ncpus], &one);
		if (sched_setaffinity(0, sizeof(one), &one))
			return 4;
		for (long i = 0; i < n; i++)
			for (int k = 0; k < calls; k++)
				syscall(SYS_futex, &words[i], FUTEX_WAIT_PRIVATE, 1, NULL, NULL, 0);
	}
	FILE *f = fopen(argv[1], "w");
	if (!f)
		return 5;
	fprintf(f, "{\"pid\": %d, \"base\": %lu, \"futexes\": %ld, \"rounds\": %d, \"calls\": %d, "
		"\"slots\": %d, \"cpus\": %d}\n", getpid(), (unsigned long)(uintptr_t)words, n, rounds,
		calls, prctl(PR_FUTEX_HASH_, GET_SLOTS, 0, 0, 0), ncpus);
	return fclose(f) ? 6 : 0;
}
