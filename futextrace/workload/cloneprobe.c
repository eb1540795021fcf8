/* cloneprobe: learn which clones make the kernel give a process its private
 * futex hash (futex_hash_allocate_default in copy_process).
 *
 * Step 1: vfork (CLONE_VM|CLONE_VFORK). Upstream 7.1 excludes it; some
 *         backports (seen on a 6.18-based kernel) allocate on it too.
 * Step 2: raw clone(CLONE_VM|SIGCHLD), no CLONE_THREAD. 7.1+ (and backports)
 *         allocate on it; 6.17-7.0 need CLONE_THREAD too.
 * Step 3: a pthread (CLONE_VM|CLONE_THREAD), which allocates on every kernel with
 *         the private hash.
 * Each step only tells while no earlier step allocated (the hash never goes
 * away). Prints one JSON line:
 * {"before":N,"after_vfork":N,"after_vm_clone":N,"after_thread":N}
 * (-errno where prctl failed). Exit 0 unless something else failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define PR_FUTEX_HASH 78
#define PR_FUTEX_HASH_GET_SLOTS 2

static int get_slots(void)
{
	int r = prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_GET_SLOTS, 0, 0, 0);
	return r < 0 ? -errno : r;
}

static int child_fn(void *arg)
{
	(void)arg;
	_exit(0);   /* shares our memory: touch nothing */
}

static void *thread_fn(void *arg) { return arg; }

int main(void)
{
	static char stack[64 * 1024] __attribute__((aligned(16)));
	int before = get_slots();
	pid_t pid = vfork();
	if (pid == 0)
		_exit(0);
	if (pid < 0 || waitpid(pid, NULL, 0) < 0) {
		perror("cloneprobe: vfork");
		return 1;
	}
	int after_vfork = get_slots();
	pid = clone(child_fn, stack + sizeof(stack), CLONE_VM | SIGCHLD, NULL);
	if (pid < 0) {
		perror("cloneprobe: clone");
		return 1;
	}
	if (waitpid(pid, NULL, 0) < 0) {
		perror("cloneprobe: waitpid");
		return 1;
	}
	int after_vm = get_slots();
	pthread_t t;
	if (pthread_create(&t, NULL, thread_fn, NULL) != 0) {
		fprintf(stderr, "cloneprobe: pthread_create failed\n");
		return 1;
	}
	pthread_join(t, NULL);
	printf("{\"before\":%d,\"after_vfork\":%d,\"after_vm_clone\":%d,\"after_thread\":%d}\n",
	       before, after_vfork, after_vm, get_slots());
	return 0;
}
