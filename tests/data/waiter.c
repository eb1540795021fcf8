/* The target of tests/host/test_set_slots.py: a multi-threaded process making futex
 * calls while its main thread is blocked in FUTEX_WAIT, as futextrace set meets it.
 *   stdout "ready <pid>": the main thread is about to wait
 *   stdin "wake\n": a worker sets the word and wakes the main thread, which prints
 *   "woke ret=R errno=E eintr=N usr1=U slots=S xmm=OK|BAD" and exits 0.
 * EINTR from the main thread's wait would mean the injection failed a syscall instead
 * of restarting it; usr1 counts SIGUSR1s delivered; slots is its own GET_SLOTS; xmm
 * checks a value held in a vector register across the wait.
 * With argv[1] == "seccomp" it installs an allow-all seccomp filter first. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static _Atomic int word, stop_workers, busy[64];
static volatile sig_atomic_t usr1;

static void on_usr1(int s) { (void)s; usr1++; }

static void *churn(void *arg)
{
	_Atomic int *mine = arg;
	while (!stop_workers)
		syscall(SYS_futex, mine, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	return NULL;
}

static void *waker(void *arg)
{
	char line[16];
	(void)arg;
	if (fgets(line, sizeof line, stdin)) {
		word = 1;
		syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[4], w;
	int eintr = 0, ret = 0, err = 0;
	if (argc > 1 && !strcmp(argv[1], "seccomp")) {
		struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
		struct sock_fprog prog = { 1, &allow };
		prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
		prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
	}
	signal(SIGUSR1, on_usr1);       /* SA_RESTART: a restarted wait is what glibc asks for */
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, churn, &busy[i * 16]);
	pthread_create(&w, NULL, waker, NULL);
	double v = 1.0 + argc;           /* kept live across the wait */
	__asm__ volatile("" : "+x"(v));
	printf("ready %d\n", getpid());
	fflush(stdout);
	while (!word) {
		ret = syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
		err = ret < 0 ? errno : 0;
		if (err == EINTR)
			eintr++;
	}
	__asm__ volatile("" : "+x"(v));
	stop_workers = 1;
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	printf("woke ret=%d errno=%d eintr=%d usr1=%d slots=%d xmm=%s\n", ret, err, eintr, (int)usr1,
	       (int)prctl(78, 2, 0, 0, 0), v == 1.0 + argc ? "OK" : "BAD");
	return 0;
}
