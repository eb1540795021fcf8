/*
 * Bucket-lock contention workload for tests/host/test_lockwaits.py.
 *
 *   lockpair SECONDS ADDR_A ADDR_B [storm]
 *
 * Maps 64 KiB at LOCKPAIR_BASE (the test computes buckets for addresses in
 * it with its own jhash2), sets a 16-slot private hash, then runs one thread
 * per futex address, each looping FUTEX_WAIT_PRIVATE with a value that does
 * not match: the kernel takes the bucket lock, compares, returns EAGAIN.
 * ADDR_A == ADDR_B: both threads on one futex. ADDR 0: that thread idles.
 * "storm": two more threads contend a non-futex kernel lock (one epoll
 * instance, EPOLL_CTL_ADD/DEL of their own pipe ends) all the while.
 * LOCKPAIR_RT=1: the futex threads run SCHED_FIFO in 2 ms bursts (see boost()).
 * Prints "ready PID slots N" once the hash is set, "done CALLS" (futex calls
 * made by both threads) at the end.
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LOCKPAIR_BASE 0x7e0000000000UL
#define PR_FUTEX_HASH 78
#define PR_FUTEX_HASH_SET_SLOTS 1
#define PR_FUTEX_HASH_GET_SLOTS 2

static volatile int stop;
static unsigned long loops[2];   /* futex calls per thread, printed at the end */
static int epfd;

/* On a loaded machine two threads seldom run at once, and a lock is only
 * contended when they do. LOCKPAIR_RT=1 (root): the hammering threads run
 * SCHED_FIFO, which the other tasks' CPU shares do not hold back, in bursts
 * of 2 ms with 2 ms of sleep, so they leave half of each CPU to the rest. */
static int rt;

static void boost(void)
{
	struct sched_param sp = { .sched_priority = 1 };
	rt = getenv("LOCKPAIR_RT") && !pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint32_t *futex_of[2];

static void *hammer(void *arg)
{
	int me = (int)(uintptr_t)arg;
	uint32_t *f = futex_of[me];
	boost();
	while (!stop) {
		double until = now() + 0.002;
		while (!stop && (!rt || now() < until)) {
			syscall(SYS_futex, f, FUTEX_WAIT_PRIVATE, 12345, NULL, NULL, 0);
			loops[me]++;
		}
		if (rt)
			usleep(2000);
	}
	return NULL;
}

static void *storm(void *arg)
{
	(void)arg;
	int p[2];
	if (pipe(p))
		return NULL;
	struct epoll_event ev = { .events = EPOLLIN };
	while (!stop) {
		epoll_ctl(epfd, EPOLL_CTL_ADD, p[0], &ev);
		epoll_ctl(epfd, EPOLL_CTL_DEL, p[0], NULL);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: lockpair SECONDS ADDR_A ADDR_B [storm]\n");
		return 2;
	}
	double secs = atof(argv[1]);
	uintptr_t addr[2] = { strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0) };
	int with_storm = argc > 4 && !strcmp(argv[4], "storm");
	void *m = mmap((void *)LOCKPAIR_BASE, 65536, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (m != (void *)LOCKPAIR_BASE) {
		perror("mmap");
		return 1;
	}
	memset(m, 0, 65536);
	if (prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_SET_SLOTS, 16, 0, 0)) {
		perror("prctl SET_SLOTS 16");
		return 1;
	}
	epfd = epoll_create1(0);
	printf("ready %d slots %d\n", getpid(), (int)prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_GET_SLOTS, 0, 0, 0));
	fflush(stdout);
	usleep(300 * 1000);     /* the test attaches its reader meanwhile */
	pthread_t t[4];
	int n = 0;
	for (int i = 0; i < 2; i++) {
		futex_of[i] = (uint32_t *)addr[i];
		if (addr[i])
			pthread_create(&t[n++], NULL, hammer, (void *)(uintptr_t)i);
	}
	if (with_storm)
		for (int i = 0; i < 2; i++)
			pthread_create(&t[n++], NULL, storm, NULL);
	struct timespec ts = { (time_t)secs, (long)((secs - (time_t)secs) * 1e9) };
	nanosleep(&ts, NULL);
	stop = 1;
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	printf("done %lu\n", loops[0] + loops[1]);
	return 0;
}
