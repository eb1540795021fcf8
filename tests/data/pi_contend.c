/*
 * PI handoff workload for tests/host/test_pi_refcount.py.
 * 1. THREADS threads take and release one private PI futex ITERS times each,
 *    always through the syscalls (FUTEX_LOCK_PI, FUTEX_UNLOCK_PI), so unlocks
 *    with waiters hand the lock over in the kernel (futex_unlock_pi).
 * 2. ITERS requeue-PI handoffs: a thread waits in FUTEX_WAIT_REQUEUE_PI, the
 *    main thread's FUTEX_CMP_REQUEUE_PI finds the PI futex free and gives it to
 *    the waiter (requeue_pi_wake_futex: the extra bucket reference that
 *    futex_hash_get takes on 6.17-7.1, futex_private_hash_get on 7.2+; the
 *    waiter drops it). futex_unlock_pi takes that reference only in a race.
 *
 *   pi_contend OUT ITERS   writes {"pid","threads","lock_calls","unlock_calls","contended",
 *                                  "requeue_handoffs","errors"}
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
static _Atomic uint32_t cond_word, rq_pi_word;
static atomic_long requeue_handoffs;
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
		usleep(50);     /* hold it asleep: the others run and queue up (a spin did not under TCG) */
		if (syscall(SYS_futex, &pi_word, FUTEX_UNLOCK_PI | FUTEX_PRIVATE_FLAG, 0, NULL, NULL, 0))
			atomic_fetch_add(&errors, 1);
		else
			atomic_fetch_add(&unlock_calls, 1);
	}
	return NULL;
}

/* Waits on cond_word until requeued onto rq_pi_word, which it then owns. */
static void *requeue_waiter(void *arg)
{
	(void)arg;
	if (syscall(SYS_futex, &cond_word, FUTEX_WAIT_REQUEUE_PI | FUTEX_PRIVATE_FLAG, 0, NULL,
		    &rq_pi_word, 0))
		atomic_fetch_add(&errors, 1);
	else if (syscall(SYS_futex, &rq_pi_word, FUTEX_UNLOCK_PI | FUTEX_PRIVATE_FLAG, 0, NULL, NULL, 0))
		atomic_fetch_add(&errors, 1);
	return NULL;
}

static void requeue_handoff(void)
{
	pthread_t t;
	pthread_create(&t, NULL, requeue_waiter, NULL);
	for (;;) {      /* until the waiter is queued: then the kernel hands it the free PI futex */
		long n = syscall(SYS_futex, &cond_word, FUTEX_CMP_REQUEUE_PI | FUTEX_PRIVATE_FLAG, 1,
				 (void *)0, &rq_pi_word, 0);
		if (n > 0) {
			atomic_fetch_add(&requeue_handoffs, 1);
			break;
		}
		if (n < 0) {
			atomic_fetch_add(&errors, 1);
			break;
		}
		usleep(1000);
	}
	pthread_join(t, NULL);
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
	for (long i = 0; i < iters; i++)
		requeue_handoff();
	FILE *f = fopen(argv[1], "w");
	if (!f)
		return 1;
	fprintf(f, "{\"pid\":%d,\"threads\":%d,\"lock_calls\":%ld,\"unlock_calls\":%ld,"
		   "\"contended\":%ld,\"requeue_handoffs\":%ld,\"errors\":%ld}\n", getpid(), THREADS,
		atomic_load(&lock_calls), atomic_load(&unlock_calls), atomic_load(&contended),
		atomic_load(&requeue_handoffs), atomic_load(&errors));
	return fclose(f) ? 1 : 0;
}
