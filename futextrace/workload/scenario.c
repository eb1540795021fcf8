/* scenario: drive the futex private hash through the cases `futextrace explain`
 * explains, and print the kernel's own answer (PR_FUTEX_HASH_GET_SLOTS) after
 * every step, one JSON line per step.
 *
 *   scenario threads  [-t MAX]        threads kept alive, growing 1, 2, 4, ... MAX
 *   scenario custom   [-b SLOTS] [-t MAX]   SET_SLOTS(15) (-EINVAL), SET_SLOTS(SLOTS), then threads
 *   scenario global   [-t MAX]        SET_SLOTS(0), SET_SLOTS(32) (-EBUSY), then threads
 *   scenario noresize                 vfork, fork, clone(CLONE_VM) without CLONE_THREAD, then a thread
 *   scenario results  [-b SLOTS]      every SET_SLOTS answer: -EINVAL, -ENOMEM, 0, 0 (global), -EBUSY
 *   -o FILE  also append the JSON lines to FILE
 *
 * Lines: {"step":..., "tid":T (new task, 0 if none), "threads":N, "requested":R,
 *         "ret":R (prctl result, -errno), "slots":S}
 * Every new task and the main thread make futex calls after each step, so a
 * tracer sees the hash, and a deferred resize gets its chance to pivot.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PR_FUTEX_HASH 78
#define PR_FUTEX_HASH_SET_SLOTS 1
#define PR_FUTEX_HASH_GET_SLOTS 2
#define MAX_THREADS 256

static FILE *copy_out;
static atomic_int stop;
static int word;                 /* the futex everyone touches */
static int nthreads = 1;         /* main thread included */
static pthread_t threads[MAX_THREADS];

static long futex_op(int *uaddr, int op, int val, const struct timespec *ts)
{
	return syscall(SYS_futex, uaddr, op | FUTEX_PRIVATE_FLAG, val, ts, NULL, 0);
}

static int get_slots(void)
{
	int r = prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_GET_SLOTS, 0, 0, 0);
	return r < 0 ? -errno : r;
}

static int set_slots(unsigned long n)
{
	int r = prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_SET_SLOTS, n, 0, 0);
	return r < 0 ? -errno : r;
}

/* Futex calls spread over ~100 ms: a resize parked in futex_phash_new pivots
 * on the first lookup after the old hash's references drained (RCU). */
static void settle(void)
{
	struct timespec ts = {0, 10 * 1000 * 1000};
	for (int i = 0; i < 10; i++) {
		futex_op(&word, FUTEX_WAKE, 1, NULL);
		nanosleep(&ts, NULL);
	}
}

static void emit(const char *step, long tid, long requested, int ret)
{
	char line[256];
	snprintf(line, sizeof(line),
		 "{\"step\":\"%s\",\"tid\":%ld,\"threads\":%d,\"requested\":%ld,\"ret\":%d,\"slots\":%d}\n",
		 step, tid, nthreads, requested, ret, get_slots());
	fputs(line, stdout);
	fflush(stdout);
	if (copy_out) {
		fputs(line, copy_out);
		fflush(copy_out);
	}
}

struct tinfo { atomic_long tid; };

static void *thread_fn(void *arg)
{
	struct tinfo *ti = arg;
	struct timespec ts = {0, 20 * 1000 * 1000};
	futex_op(&word, FUTEX_WAKE, 1, NULL);   /* at least one futex call after creation */
	atomic_store(&ti->tid, syscall(SYS_gettid));
	while (!atomic_load(&stop))
		futex_op(&word, FUTEX_WAIT, word, &ts);   /* times out: a lookup every 20 ms */
	return NULL;
}

static long add_thread(void)
{
	static struct tinfo infos[MAX_THREADS];
	struct tinfo *ti = &infos[nthreads];
	if (nthreads >= MAX_THREADS || pthread_create(&threads[nthreads], NULL, thread_fn, ti) != 0) {
		fprintf(stderr, "scenario: pthread_create failed\n");
		exit(1);
	}
	nthreads++;
	while (!atomic_load(&ti->tid))
		sched_yield();
	return atomic_load(&ti->tid);
}

/* Threads in steps 1, 2, 4, ... max: one line per created thread. */
static void grow(int max)
{
	for (int target = 2; target <= max; target *= 2)
		while (nthreads < target) {
			long tid = add_thread();
			settle();
			emit("thread", tid, 0, 0);
		}
}

static void stop_threads(void)
{
	atomic_store(&stop, 1);
	for (int i = 1; i < nthreads; i++)
		pthread_join(threads[i], NULL);
}

static int child_fn(void *arg)
{
	(void)arg;
	futex_op(&word, FUTEX_WAKE, 1, NULL);   /* shares our mm: a lookup in our hash */
	_exit(0);
}

static void no_resize(void)
{
	static char stack[64 * 1024] __attribute__((aligned(16)));
	/* vfork: CLONE_VM|CLONE_VFORK: upstream never allocates on it, some backports do. */
	pid_t pid = vfork();
	if (pid == 0)
		_exit(0);
	waitpid(pid, NULL, 0);
	settle();
	emit("vfork", pid, 0, 0);
	/* fork: a new mm, nothing to allocate for ours. */
	pid = fork();
	if (pid == 0) {
		futex_op(&word, FUTEX_WAKE, 1, NULL);
		_exit(0);
	}
	waitpid(pid, NULL, 0);
	settle();
	emit("fork", pid, 0, 0);
	/* clone(CLONE_VM) without CLONE_THREAD: allocates only under the 7.1+ rule. */
	pid = clone(child_fn, stack + sizeof(stack), CLONE_VM | SIGCHLD, NULL);
	if (pid < 0) {
		perror("scenario: clone");
		exit(1);
	}
	waitpid(pid, NULL, 0);
	settle();
	emit("clone_vm", pid, 0, 0);
	long tid = add_thread();
	settle();
	emit("thread", tid, 0, 0);
}

static void usage(void)
{
	fprintf(stderr, "usage: scenario threads|custom|global|noresize|results [-t MAX] [-b SLOTS] [-o FILE]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int max = 8, opt;
	long slots = 64;
	if (argc < 2)
		usage();
	const char *name = argv[1];
	optind = 2;
	while ((opt = getopt(argc, argv, "t:b:o:")) != -1) {
		switch (opt) {
		case 't': max = atoi(optarg); break;
		case 'b': slots = atol(optarg); break;
		case 'o':
			copy_out = fopen(optarg, "a");
			if (!copy_out) {
				perror("scenario: -o");
				return 1;
			}
			break;
		default: usage();
		}
	}
	if (max < 1 || max > MAX_THREADS)
		usage();
	settle();
	emit("start", 0, 0, 0);
	if (!strcmp(name, "threads")) {
		grow(max);
	} else if (!strcmp(name, "custom")) {
		emit("prctl", 0, 15, set_slots(15));      /* not a power of two: -EINVAL */
		emit("prctl", 0, slots, set_slots(slots));
		grow(max);
	} else if (!strcmp(name, "global")) {
		emit("prctl", 0, 0, set_slots(0));        /* the global hash, for good */
		settle();
		emit("prctl", 0, 32, set_slots(32));      /* -EBUSY */
		grow(max);
	} else if (!strcmp(name, "noresize")) {
		no_resize();
	} else if (!strcmp(name, "results")) {
		emit("prctl", 0, 3, set_slots(3));                   /* not a power of two: -EINVAL */
		emit("prctl", 0, 1L << 29, set_slots(1UL << 29));    /* over kvmalloc's INT_MAX: -ENOMEM */
		emit("prctl", 0, slots, set_slots(slots));
		settle();
		emit("prctl", 0, 0, set_slots(0));                   /* the global hash, for good */
		settle();
		emit("prctl", 0, 32, set_slots(32));                 /* -EBUSY */
	} else {
		usage();
	}
	stop_threads();
	return 0;
}
