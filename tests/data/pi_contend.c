/*
 * PI handoff workload for tests/host/test_pi_refcount.py: THREADS threads take and
 * release one private PI futex ITERS times each, always through the syscalls
 * (FUTEX_LOCK_PI, FUTEX_UNLOCK_PI), so every unlock with a waiter hands the lock
 * over in the kernel (futex_unlock_pi -> the extra bucket reference that
 * futex_hash_get takes on 6.17-7.1, futex_private_hash_get on 7.2+).
 *
 *   pi_contend OUT ITERS      writes {"pid","threads","lock_calls","unlock_calls","contended","errors"}
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#define THREADS 4

static _Atomic uint32_t pi_word;
static atomic_long lock_calls, unlock_calls, contended, errors;
static long iters;
static pthread_barrier_t start;

static void *worker(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&start);
	for (long i = 0; i < iters; i++) {
		if (atomic_load(&pi_word))          /* owned: this call waits for a handoff */
			atomic_fetch_add(&contended, 1);
		if (syscall(SYS_futex, &pi_word, FUTEX_LOCK_PI | FUTEX_PRIVATE_FLAG, 0, NULL, NULL, 0))
			atomic_fetch_add(&errors, 1);
		else
			atomic_fetch_add(&lock_calls, 1);
		for (volatile int spin = 0; spin < 2000; spin++)
			;                               /* hold it a moment: others queue up */
		if (syscall(SYS_futex, &pi_word, FUTEX_UNLOCK_PI | FUTEX_PRIVATE_FLAG, 0, NULL, NULL, 0))
			atomic_fetch_add(&errors, 1);
		else
			atomic_fetch_add(&unlock_calls, 1);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s OUT ITERS\n", argv[0]);
		return 2;
	}
	iters = atol(argv[2]);
	pthread_t t[THREADS];
	pthread_barrier_init(&start, NULL, THREADS);
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, worker, NULL);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	FILE *f = fopen(argv[1], "w");
	if (!f)
		return 1;
	fprintf(f, "{\"pid\":%d,\"threads\":%d,\"lock_calls\":%ld,\"unlock_calls\":%ld,"
		   "\"contended\":%ld,\"errors\":%ld}\n", getpid(), THREADS, atomic_load(&lock_calls),
		atomic_load(&unlock_calls), atomic_load(&contended), atomic_load(&errors));
	return fclose(f) ? 1 : 0;
}
