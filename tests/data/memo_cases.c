/* Hash changes that the tracepoint method's task memo (bpf/trace_tp.bpf.c,
 * TASK_MEMO) must notice: each case makes N futex calls, changes the hash
 * under the calling task's feet, then makes N more, and reports the hash the
 * kernel has (PR_FUTEX_HASH_GET_SLOTS) before and after. Every call is a
 * FUTEX_WAKE_PRIVATE on one word (one lookup, no waiter).
 *
 * Usage: memo_cases prctl OUT.json N
 *   main starts a thread (an automatic hash) and calls N times; then, on a
 *   pipe from main, the thread sets a custom hash of 128 slots and answers
 *   on another; main reads that and calls N times more: those are in the
 *   128-slot hash.
 * Usage: memo_cases thread OUT.json N
 *   single-threaded (no private hash), calls N times, starts a thread (the
 *   kernel gives the process an automatic hash) and calls N times more.
 * Usage: memo_cases exec OUT.json N
 *   single-threaded: sets 64 slots, calls N times, then execs itself as
 *   `memo_cases after OUT.json N`, which calls N times with no private hash.
 * Writes {"pid", "before": slots, "after": slots, "calls": N} (after: the
 * exec'd image's). Every task runs on the CPU main started on. */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
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

static uint32_t word;
static int go[2], done[2];

static void calls(long n)
{
	for (long i = 0; i < n; i++)
		syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static long slots(void)
{
	return prctl(PR_FUTEX_HASH_, GET_SLOTS, 0, 0, 0);
}

static void *idle(void *arg)
{
	(void)arg;
	pause();
	return NULL;
}

static void *resizer(void *arg)
{
	char c = 1;
	(void)arg;
	if (read(go[0], &c, 1) != 1)
		perror("read");
	if (prctl(PR_FUTEX_HASH_, SET_SLOTS, 128, 0, 0))
		perror("prctl");
	/* This thread's next prctl: the memo learns there that the resize
	 * returned (it is not told by other syscalls, such as the write). */
	prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
	if (write(done[1], &c, 1) != 1)
		perror("write");
	pause();
	return NULL;
}

static void report(const char *out, long before, long after, long n)
{
	FILE *f = fopen(out, "w");
	fprintf(f, "{\"pid\": %d, \"before\": %ld, \"after\": %ld, \"calls\": %ld}\n", getpid(), before, after, n);
	fclose(f);
}

int main(int argc, char **argv)
{
	if (argc < 4)
		return 2;
	long n = atol(argv[3]);
	/* One CPU for every task here: the memo is per CPU, and a stale one is
	 * seen only where the task calls again. */
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(sched_getcpu(), &one);
	sched_setaffinity(0, sizeof(one), &one);
	if (!strcmp(argv[1], "prctl")) {
		pthread_t t;
		char c = 1;
		if (pipe(go) || pipe(done))
			return 1;
		if (pthread_create(&t, NULL, resizer, NULL))
			return 1;
		usleep(100000);     /* the thread's clone and its hash settle */
		long before = slots();
		calls(n);
		if (write(go[1], &c, 1) != 1 || read(done[0], &c, 1) != 1)
			return 1;
		calls(n);
		report(argv[2], before, slots(), n);
		return 0;
	}
	if (!strcmp(argv[1], "thread")) {
		pthread_t t;
		long before = slots();
		calls(n);
		if (pthread_create(&t, NULL, idle, NULL))
			return 1;
		calls(n);
		report(argv[2], before, slots(), n);
		return 0;
	}
	if (!strcmp(argv[1], "exec")) {
		if (prctl(PR_FUTEX_HASH_, SET_SLOTS, 64, 0, 0))
			return 1;
		calls(n);
		char before[32];
		snprintf(before, sizeof(before), "%ld", slots());
		execl("/proc/self/exe", argv[0], "after", argv[2], argv[3], before, (char *)NULL);
		return 1;
	}
	if (!strcmp(argv[1], "after")) {
		calls(n);
		report(argv[2], argc > 4 ? atol(argv[4]) : -1, slots(), n);
		return 0;
	}
	return 2;
}
