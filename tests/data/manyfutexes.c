/* More distinct private futexes than any of futextrace's maps holds, each used
 * a known number of times: futex i gets 1 + i % 3 FUTEX_WAIT_PRIVATE calls with
 * a value that never matches (-EAGAIN: one hash lookup each). The process sets
 * a custom private hash first (64 slots, never resized automatically) and
 * stays single-threaded, so libc makes no futex call of its own. One more
 * futex, `hot`, gets a call after each of the others' (n calls): a hot futex
 * amid a stream of cold ones, which the per-futex list should name.
 * Usage: manyfutexes OUT.json [N [DELAY_MS]]: DELAY_MS waits before the calls.
 * Prints {"pid", "base", "hot", "futexes", "slots"} to the file named by argv[1]. */
#define _GNU_SOURCE
#include <linux/futex.h>
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
	long n = argc > 2 ? atol(argv[2]) : 100000;
	uint32_t *words = calloc(n, sizeof(*words)), *hot = calloc(1, sizeof(*hot));
	if (argc < 2 || !words || !hot)
		return 2;
	if (prctl(PR_FUTEX_HASH_, SET_SLOTS, 64, 0, 0) != 0)
		return 3;
	if (argc > 3)
		usleep(atol(argv[3]) * 1000);
	for (long i = 0; i < n; i++) {
		for (int k = 0; k <= i % 3; k++)
			syscall(SYS_futex, &words[i], FUTEX_WAIT_PRIVATE, 1, NULL, NULL, 0);
		syscall(SYS_futex, hot, FUTEX_WAIT_PRIVATE, 1, NULL, NULL, 0);
	}
	FILE *f = fopen(argv[1], "w");
	if (!f)
		return 4;
	fprintf(f, "{\"pid\": %d, \"base\": %lu, \"hot\": %lu, \"futexes\": %ld, \"slots\": %d}\n",
		getpid(), (unsigned long)(uintptr_t)words, (unsigned long)(uintptr_t)hot, n,
		prctl(PR_FUTEX_HASH_, GET_SLOTS, 0, 0, 0));
	return fclose(f) ? 5 : 0;
}
