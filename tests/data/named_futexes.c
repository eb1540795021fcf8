/* A workload whose futex words have names: globals in .data and .bss (some
 * past the file's pages, in the anonymous .bss tail mapping, whichever the
 * linker puts after bss_ballast), words on the heap and on each thread's stack. Two threads call FUTEX_WAIT with a value the word does not
 * hold (the kernel hashes the word, takes its bucket's lock, compares, returns
 * EAGAIN) and FUTEX_WAKE on each word, for --seconds S (default 1).
 * `--slots N` sets the process's futex hash to N buckets itself (prctl).
 * Prints "NAME 0xADDRESS" for every word, for tests/host/test_names.py.
 *
 * Call sites: touch() makes the syscall itself (no libc wrapper, which is
 * built without frame pointers), so a user stack walked by frame pointers
 * reads touch ← its caller: settle_accounts (orders_mutex, ledger_gate),
 * reserve_stock (stock_latch, audit_flag, tail_gate), drain_queue (the heap
 * words) and worker (its stack word, printed as "stack 0x..." by each
 * worker). None of them is inlined.
 *
 *   gcc -O1 -pthread -fno-omit-frame-pointer -o named_futexes named_futexes.c
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int orders_mutex = 1;               /* .data */
int stock_latch = 2;                /* .data */
int ledger_gate;                    /* .bss */
int audit_flag;                     /* .bss */
char bss_ballast[3 * 4096];         /* pushes what follows past the file's pages */
int tail_gate;                      /* .bss */

static int *heap_words;
static double seconds = 1.0;
static volatile int stop;

static long futex_call(int *w, long op, long val)
{
	register long timeout __asm__("r10") = 0;
	long ret;
	__asm__ volatile("syscall" : "=a"(ret) : "0"((long)SYS_futex), "D"(w), "S"(op), "d"(val), "r"(timeout)
			 : "rcx", "r11", "memory");
	return ret;
}

/* Not a leaf: GCC gives a leaf function no frame pointer even with
 * -fno-omit-frame-pointer, and a walk past it skips its caller. */
__attribute__((noinline)) void touched(int *w)
{
	__asm__ volatile("" : : "r"(w) : "memory");
}

/* futex_call is inlined here on purpose: the syscall's user ip is in touch. */
__attribute__((noinline)) void touch(int *w)
{
	futex_call(w, FUTEX_WAIT_PRIVATE, *w + 1);
	futex_call(w, FUTEX_WAKE_PRIVATE, 1);
	touched(w);
}

__attribute__((noinline)) void settle_accounts(void)
{
	touch(&orders_mutex);
	touch(&ledger_gate);
}

__attribute__((noinline)) void reserve_stock(void)
{
	touch(&stock_latch);
	touch(&audit_flag);
	touch(&tail_gate);
}

__attribute__((noinline)) void drain_queue(void)
{
	touch(&heap_words[0]);
	touch(&heap_words[16]);
}

static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg)
{
	int local_word = 5;         /* on this thread's stack */
	(void)arg;
	pthread_mutex_lock(&print_lock);
	printf("stack %p\n", (void *)&local_word);
	fflush(stdout);
	pthread_mutex_unlock(&print_lock);
	while (!stop) {
		/* The globals three times as often: they lead their buckets' address lists. */
		for (int i = 0; i < 3; i++) {
			settle_accounts();
			reserve_stock();
		}
		drain_queue();
		touch(&local_word);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--slots") && i + 1 < argc) {
			long n = atol(argv[++i]);
			if (prctl(78 /* PR_FUTEX_HASH */, 1 /* SET_SLOTS */, n, 0, 0))
				perror("prctl(PR_FUTEX_HASH_SET_SLOTS)");
		} else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
			seconds = atof(argv[++i]);
		}
	}
	heap_words = calloc(64, sizeof(int));
	printf("orders_mutex %p\nstock_latch %p\nledger_gate %p\naudit_flag %p\ntail_gate %p\n",
	       (void *)&orders_mutex, (void *)&stock_latch, (void *)&ledger_gate, (void *)&audit_flag,
	       (void *)&tail_gate);
	printf("heap %p\nheap %p\n", (void *)&heap_words[0], (void *)&heap_words[16]);
	fflush(stdout);
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, worker, NULL);
	struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
	nanosleep(&ts, NULL);
	stop = 1;
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	return bss_ballast[7];
}
