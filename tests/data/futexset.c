/* A known set of distinct private futexes, used round-robin: the lookup
 * patterns that defeat a small lookup cache. Single-threaded, so libc makes
 * no futex call of its own: every private futex of the process is one of
 * the N words here. A custom hash (SET_SLOTS) is set first and never
 * resized. Each call is a FUTEX_WAKE_PRIVATE (one hash lookup, no waiter).
 *
 * Usage: futexset OUT.json N ROUNDS SLOTS [grow]
 *   round-robin: ROUNDS passes over all N futexes, in order;
 *   grow: pass r uses the first min(N, 16 << r) futexes, then ROUNDS more
 *         passes over all N: a set that grows during the run.
 * Writes {"pid", "base", "futexes", "slots", "lookups"} to OUT.json: futex i
 * is at base + 4 * i; `slots` is what PR_FUTEX_HASH_GET_SLOTS returns. */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PR_FUTEX_HASH_ 78
#define SET_SLOTS 1
#define GET_SLOTS 2

static unsigned long pass(uint32_t *words, long n)
{
	for (long i = 0; i < n; i++)
		syscall(SYS_futex, &words[i], FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	return n;
}

int main(int argc, char **argv)
{
	if (argc < 5)
		return 2;
	long n = atol(argv[2]), rounds = atol(argv[3]), slots = atol(argv[4]);
	int grow = argc > 5 && !strcmp(argv[5], "grow");
	uint32_t *words = calloc(n, sizeof(*words));
	unsigned long lookups = 0;
	if (!words || n <= 0)
		return 2;
	if (prctl(PR_FUTEX_HASH_, SET_SLOTS, slots, 0, 0) != 0)
		return 3;
	for (long r = 0; grow && (16L << r) < n; r++)
		lookups += pass(words, 16L << r);
	for (long r = 0; r < rounds; r++)
		lookups += pass(words, n);
	FILE *f = fopen(argv[1], "w");
	if (!f)
		return 4;
	fprintf(f, "{\"pid\": %d, \"base\": %lu, \"futexes\": %ld, \"slots\": %d, \"lookups\": %lu}\n",
		getpid(), (unsigned long)(uintptr_t)words, n, prctl(PR_FUTEX_HASH_, GET_SLOTS, 0, 0, 0),
		lookups);
	return fclose(f) ? 5 : 0;
}
