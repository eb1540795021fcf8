/*
 * futexbench: the futextrace built-in workload, modelled on `perf bench futex hash`.
 *
 * N threads each hammer F futexes of their own with FUTEX_WAIT and a value that
 * never matches (expected 1234, memory holds 0), so every call returns EAGAIN
 * right after the hash lookup: the benchmark measures hashing, not sleeping.
 *
 * Differences from perf, all deliberate:
 *   -n ITER      exact passes per thread instead of a runtime (exact-count tests)
 *   -r SECS      may be fractional (short test runs)
 *   --addrs      report every futex address (tracers check the hash against them)
 *   --wait-fd N  block reading fd N (one byte or EOF) before the prctl and the
 *                threads, so a tracer that started us can attach first and still
 *                see the whole run, including the auto-resize at thread creation.
 *   -S           futexes live in a MAP_SHARED mapping (perf uses heap memory).
 *   --ramp-ms X  start the threads one by one, one every X ms (as a service does
 *                when it starts), instead of all at once behind a barrier; -r
 *                counts from the first thread.
 *   --interval-ms I  every I ms record the ops done so far, the threads started
 *                and PR_FUTEX_HASH_GET_SLOTS, with a CLOCK_MONOTONIC stamp
 *                ("samples" in the JSON; a tracer lines them up with its events).
 *   --resize-at MS:N  a thread of its own calls PR_FUTEX_HASH_SET_SLOTS N at MS
 *                after the start, while the workers run: the replacement waits
 *                for its pivot (refcounts atomic meanwhile) and prctl returns
 *                after it; the call's and return's stamps are in "resize".
 * The result is ONE JSON object on stdout; errors are one line on stderr:
 *   exit 2  bad option            exit 3  PR_FUTEX_HASH_SET_SLOTS failed
 *   exit 1  anything else (allocation, thread creation, wait-fd read)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <linux/futex.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* uapi values, absent from older libc headers */
#define PR_FUTEX_HASH 78
#define PR_FUTEX_HASH_SET_SLOTS 1
#define PR_FUTEX_HASH_GET_SLOTS 2

#define CACHELINE 64

struct worker {
	pthread_t thread;
	int index;
	int cpu;                 /* pinned CPU, -1 when not pinned */
	uint32_t *futex;         /* own cache-line-aligned block, like perf */
	unsigned long ops;
	_Atomic unsigned long live_ops;  /* ops so far, published every 256 and per pass (samples) */
	double elapsed;          /* seconds from the common start (ramp: its own) to its end */
	double began;            /* ramp: seconds from the start to this thread's first call */
} __attribute__((aligned(CACHELINE)));  /* no false sharing between workers' counters */

static struct {
	long threads, futexes, iterations;   /* iterations 0: run for `runtime` */
	double runtime;
	long buckets;                        /* -1 auto, 0 global, else SET_SLOTS */
	int shared, mlock, addrs, pin, wait_fd;
	long ramp_ms, interval_ms;           /* 0: all threads at once; no samples */
	long resize_at_ms, resize_slots;     /* resize_at_ms -1: no mid-run SET_SLOTS */
} opt = { .threads = -1, .futexes = 1024, .runtime = 10.0, .buckets = -1,
	  .pin = 1, .wait_fd = -1, .resize_at_ms = -1 };

/* --resize-at: what the mid-run SET_SLOTS did. */
static struct { long long call_ns, return_ns; long result; pthread_t thread; } resize;

/* One --interval-ms sample. */
struct sample {
	long long mono_ns;       /* CLOCK_MONOTONIC */
	unsigned long ops;       /* all threads' ops so far */
	long threads, slots;     /* threads started; GET_SLOTS at that moment */
};
static struct sample *samples;
static long nsamples, max_samples;

static atomic_int done;
static pthread_barrier_t start_barrier;
static struct timespec t_start;
static int futex_flag;

static void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(int code, const char *fmt, ...)
{
	va_list ap;
	fputs("futexbench: error: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

static double now_since(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) + (t.tv_nsec - t0->tv_nsec) / 1e9;
}

static long parse_long(const char *s, const char *what, long min, long max)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 0);
	if (errno || end == s || *end)
		die(2, "%s: not a number: '%s'", what, s);
	if (v < min || v > max)
		die(2, "%s must be between %ld and %ld, got %ld", what, min, max, v);
	return v;
}

static long prctl_ret(long r)
{
	return r < 0 ? -errno : r;   /* kernel convention: 0 / value / -errno */
}

static long get_slots(void)
{
	return prctl_ret(prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_GET_SLOTS, 0, 0, 0));
}

static void *workerfn(void *arg)
{
	struct worker *w = arg;
	unsigned long ops = 0;   /* local: keep the counter out of shared cache lines */
	long f, n = opt.futexes;

	/* Pinned here, not through the thread attribute: with an affinity
	 * attribute glibc starts the thread stopped on a lock of its own that
	 * the creator releases (futex calls on an address nobody reports). */
	if (w->cpu >= 0) {
		cpu_set_t one;
		CPU_ZERO(&one);
		CPU_SET(w->cpu, &one);
		sched_setaffinity(0, sizeof(one), &one);
	}
	pthread_barrier_wait(&start_barrier);
	w->began = opt.ramp_ms ? now_since(&t_start) : 0;
	if (opt.iterations) {
		for (long it = 0; it < opt.iterations; it++)
			for (f = 0; f < n; f++, ops++)
				syscall(SYS_futex, &w->futex[f], FUTEX_WAIT | futex_flag, 1234,
					NULL, NULL, 0);
	} else {
		/* like perf: check the stop flag once per pass over the futexes;
		 * the ops are published every 256 calls too, so that samples
		 * stay fine-grained when a pass is long (a million futexes) */
		do {
			for (f = 0; f < n; f++, ops++) {
				syscall(SYS_futex, &w->futex[f], FUTEX_WAIT | futex_flag, 1234,
					NULL, NULL, 0);
				if (!(ops & 255))
					atomic_store_explicit(&w->live_ops, ops, memory_order_relaxed);
			}
			atomic_store_explicit(&w->live_ops, ops, memory_order_relaxed);
		} while (!atomic_load_explicit(&done, memory_order_relaxed));
	}
	w->elapsed = now_since(&t_start) - w->began;
	w->ops = ops;
	return NULL;
}

static void usage(FILE *out)
{
	fputs("usage: futexbench [-t THREADS] [-f FUTEXES] [-r SECONDS | -n ITERATIONS]\n"
	      "                  [-b BUCKETS] [-S] [-m] [--addrs] [--no-affinity] [--wait-fd FD]\n"
	      "                  [--ramp-ms MS] [--interval-ms MS]\n"
	      "  -b: -1 automatic (default), 0 global hash, else PR_FUTEX_HASH_SET_SLOTS\n",
	      out);
}

static void parse_resize(char *arg)
{
	char *colon = strchr(arg, ':');
	if (!colon)
		die(2, "resize-at: expected MS:SLOTS, got '%s'", arg);
	*colon = 0;
	opt.resize_at_ms = parse_long(arg, "resize-at milliseconds", 0, 3600 * 1000);
	opt.resize_slots = parse_long(colon + 1, "resize-at slots", 0, 1L << 32);
}

static void parse_args(int argc, char **argv)
{
	enum { O_ADDRS = 256, O_NOAFF, O_WAITFD, O_RAMP, O_INTERVAL, O_RESIZE };
	static const struct option longopts[] = {
		{"threads", required_argument, 0, 't'}, {"futexes", required_argument, 0, 'f'},
		{"runtime", required_argument, 0, 'r'}, {"iterations", required_argument, 0, 'n'},
		{"buckets", required_argument, 0, 'b'}, {"shared", no_argument, 0, 'S'},
		{"mlockall", no_argument, 0, 'm'}, {"addrs", no_argument, 0, O_ADDRS},
		{"no-affinity", no_argument, 0, O_NOAFF}, {"wait-fd", required_argument, 0, O_WAITFD},
		{"ramp-ms", required_argument, 0, O_RAMP},
		{"interval-ms", required_argument, 0, O_INTERVAL},
		{"resize-at", required_argument, 0, O_RESIZE},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
	};
	int c;
	char *end;

	opterr = 0;   /* we print our own one-line errors */
	while ((c = getopt_long(argc, argv, ":t:f:r:n:b:Smh", longopts, NULL)) != -1) {
		switch (c) {
		case 't': opt.threads = parse_long(optarg, "threads", 1, 1 << 16); break;
		case 'f': opt.futexes = parse_long(optarg, "futexes", 1, 1L << 24); break;
		case 'n': opt.iterations = parse_long(optarg, "iterations", 1, 1L << 40); break;
		case 'b': opt.buckets = parse_long(optarg, "buckets", -1, 1L << 32); break;
		case 'r':
			errno = 0;
			opt.runtime = strtod(optarg, &end);
			if (errno || end == optarg || *end || isnan(opt.runtime))
				die(2, "runtime: not a number: '%s'", optarg);
			if (opt.runtime <= 0 || opt.runtime > 86400)
				die(2, "runtime must be > 0 and at most 86400 seconds, got %s", optarg);
			break;
		case 'S': opt.shared = 1; break;
		case 'm': opt.mlock = 1; break;
		case O_ADDRS: opt.addrs = 1; break;
		case O_NOAFF: opt.pin = 0; break;
		case O_WAITFD: opt.wait_fd = parse_long(optarg, "wait-fd", 0, 1 << 20); break;
		case O_RAMP: opt.ramp_ms = parse_long(optarg, "ramp-ms", 1, 3600 * 1000); break;
		case O_INTERVAL: opt.interval_ms = parse_long(optarg, "interval-ms", 1, 3600 * 1000); break;
		case O_RESIZE: parse_resize(optarg); break;
		case 'h': usage(stdout); exit(0);
		case ':': die(2, "option '%s' needs a value", argv[optind - 1]);
		default: die(2, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		die(2, "unexpected argument '%s'", argv[optind]);
	if ((opt.ramp_ms || opt.interval_ms || opt.resize_at_ms >= 0) && opt.iterations)
		die(2, "--ramp-ms, --interval-ms and --resize-at need a runtime (-r), not -n");
	if (opt.threads < 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);   /* perf's default */
		opt.threads = n > 0 ? n : 1;
	}
}

/* Per-thread futex blocks: each its own cache-line-aligned allocation (private),
 * or slices of one MAP_SHARED mapping (-S) so the kernel keys them by inode. */
static void alloc_futexes(struct worker *w)
{
	size_t block = ((opt.futexes * sizeof(uint32_t) + CACHELINE - 1) / CACHELINE) * CACHELINE;
	char *shm = NULL;

	if (opt.shared) {
		shm = mmap(NULL, block * opt.threads, PROT_READ | PROT_WRITE,
			   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (shm == MAP_FAILED)
			die(1, "mmap of shared futex memory failed: %s", strerror(errno));
	}
	for (long i = 0; i < opt.threads; i++) {
		if (shm) {
			w[i].futex = (uint32_t *)(shm + i * block);
		} else {
			w[i].futex = aligned_alloc(CACHELINE, block);
			if (!w[i].futex)
				die(1, "out of memory for %ld futexes", opt.futexes);
			memset(w[i].futex, 0, block);
		}
	}
}

static void wait_for_go(void)
{
	char b;
	ssize_t r;
	do
		r = read(opt.wait_fd, &b, 1);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		die(1, "reading wait-fd %d failed: %s", opt.wait_fd, strerror(errno));
	close(opt.wait_fd);
}

static void print_samples(void)
{
	printf("\"ramp_ms\": %ld, \"interval_ms\": %ld, \"t_start_ns\": %lld, \"samples\": [",
	       opt.ramp_ms, opt.interval_ms,
	       (long long)(t_start.tv_sec * 1000000000LL + t_start.tv_nsec));
	for (long i = 0; i < nsamples; i++)
		printf("%s{\"mono_ns\": %lld, \"ops\": %lu, \"threads\": %ld, \"slots\": %ld}",
		       i ? ", " : "", samples[i].mono_ns, samples[i].ops, samples[i].threads,
		       samples[i].slots);
	printf("], ");
	if (opt.resize_at_ms >= 0)
		printf("\"resize\": {\"at_ms\": %ld, \"slots\": %ld, \"call_ns\": %lld, "
		       "\"return_ns\": %lld, \"result\": %ld}, ", opt.resize_at_ms, opt.resize_slots,
		       resize.call_ns, resize.return_ns, resize.result);
}

static void print_json(struct worker *w, long prctl_result, long slots_before, long slots_after,
		       double runtime)
{
	double sum = 0, mean, m2 = 0, rel = 0;
	unsigned long total = 0;
	long i, f;

	for (i = 0; i < opt.threads; i++) {
		sum += w[i].elapsed > 0 ? w[i].ops / w[i].elapsed : 0;
		total += w[i].ops;
	}
	mean = sum / opt.threads;
	for (i = 0; i < opt.threads; i++) {
		double d = (w[i].elapsed > 0 ? w[i].ops / w[i].elapsed : 0) - mean;
		m2 += d * d;
	}
	/* perf's "+- x%": stddev of the mean (sample variance / n), relative to the mean */
	if (opt.threads > 1 && mean > 0)
		rel = 100.0 * sqrt(m2 / (opt.threads - 1) / opt.threads) / mean;

	printf("{\"pid\": %d, \"threads\": %ld, \"futexes\": %ld, \"shared\": %s, "
	       "\"mlockall\": %s, \"pinned\": %s, ",
	       getpid(), opt.threads, opt.futexes, opt.shared ? "true" : "false",
	       opt.mlock ? "true" : "false", opt.pin ? "true" : "false");
	if (opt.iterations)
		printf("\"iterations\": %ld, \"runtime_requested\": null, ", opt.iterations);
	else
		printf("\"iterations\": null, \"runtime_requested\": %.6f, ", opt.runtime);
	printf("\"buckets_requested\": %ld, ", opt.buckets);
	if (opt.buckets == -1)
		printf("\"prctl_result\": null, ");
	else
		printf("\"prctl_result\": %ld, ", prctl_result);
	if (opt.addrs) {
		/* The start barrier's words: glibc's own private futex calls (how
		 * many depends on who waits), the only others this process makes. */
		printf("\"barrier_words\": [");
		for (f = 0; f < (long)(sizeof(start_barrier) / sizeof(uint32_t)); f++)
			printf("%s\"%p\"", f ? ", " : "", (void *)((uint32_t *)&start_barrier + f));
		printf("], ");
	}
	if (opt.ramp_ms || opt.interval_ms || opt.resize_at_ms >= 0)
		print_samples();
	printf("\"slots_before_threads\": %ld, \"slots_after\": %ld, \"runtime\": %.6f, "
	       "\"total_ops\": %lu, \"avg_ops_per_sec\": %.1f, \"stddev_pct\": %.4f, "
	       "\"per_thread\": [",
	       slots_before, slots_after, runtime, total, mean, rel);
	for (i = 0; i < opt.threads; i++) {
		printf("%s{\"thread\": %ld, \"cpu\": %d, \"ops\": %lu, \"elapsed\": %.6f, "
		       "\"ops_per_sec\": %.1f",
		       i ? ", " : "", i, w[i].cpu, w[i].ops, w[i].elapsed,
		       w[i].elapsed > 0 ? w[i].ops / w[i].elapsed : 0.0);
		if (opt.addrs) {
			printf(", \"addrs\": [");
			for (f = 0; f < opt.futexes; f++)
				printf("%s\"%p\"", f ? ", " : "", (void *)&w[i].futex[f]);
			printf("]");
		}
		printf("}");
	}
	printf("]}\n");
}

static void start_worker(struct worker *w, long i, const int *cpus, int ncpus)
{
	pthread_attr_t attr;
	int err;

	pthread_attr_init(&attr);
	w[i].index = i;
	w[i].cpu = -1;
	if (ncpus)
		w[i].cpu = cpus[i % ncpus];   /* the thread pins itself (workerfn) */
	err = pthread_create(&w[i].thread, &attr, workerfn, &w[i]);
	pthread_attr_destroy(&attr);
	if (err)
		die(1, "creating thread %ld failed: %s", i, strerror(err));
}

static long long mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void take_sample(const struct worker *w, long started)
{
	struct sample *s;
	if (nsamples >= max_samples)
		return;
	s = &samples[nsamples++];
	s->mono_ns = mono_ns();
	s->ops = 0;
	for (long i = 0; i < started; i++)
		s->ops += atomic_load_explicit(&w[i].live_ops, memory_order_relaxed);
	s->threads = started;
	s->slots = get_slots();
}


static void sleep_until(double t_rel)
{
	long long ns = (long long)(t_start.tv_sec * 1000000000LL + t_start.tv_nsec) + (long long)(t_rel * 1e9);
	struct timespec ts = { ns / 1000000000LL, ns % 1000000000LL };
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static void *resizerfn(void *arg)
{
	(void)arg;
	sleep_until(opt.resize_at_ms / 1e3);
	resize.call_ns = mono_ns();
	resize.result = prctl_ret(prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_SET_SLOTS,
					(unsigned long)opt.resize_slots, 0, 0));
	resize.return_ns = mono_ns();
	return NULL;
}

/* Run for opt.runtime from now: start a thread every ramp_ms (all at once
 * when 0, through the start barrier) and take a sample every interval_ms. */
static void run_timed(struct worker *w, const int *cpus, int ncpus)
{
	double step = opt.ramp_ms / 1e3, every = opt.interval_ms / 1e3;
	double next_thread = 0, next_sample = every;
	long started = opt.ramp_ms ? 0 : opt.threads;

	clock_gettime(CLOCK_MONOTONIC, &t_start);
	if (opt.resize_at_ms >= 0 && pthread_create(&resize.thread, NULL, resizerfn, NULL))
		die(1, "creating the resize thread failed");
	if (!opt.ramp_ms)
		pthread_barrier_wait(&start_barrier);
	for (;;) {
		double now = now_since(&t_start), wake = opt.runtime;
		if (now >= opt.runtime)
			break;
		if (started < opt.threads && now >= next_thread) {
			start_worker(w, started++, cpus, ncpus);
			next_thread += step;
			continue;
		}
		if (every > 0 && now >= next_sample) {
			take_sample(w, started);
			next_sample += every;
			continue;
		}
		if (started < opt.threads && next_thread < wake)
			wake = next_thread;
		if (every > 0 && next_sample < wake)
			wake = next_sample;
		sleep_until(wake);
	}
	atomic_store(&done, 1);
	for (long i = started; i < opt.threads; i++)   /* ramp cut short by -r: start the rest */
		start_worker(w, i, cpus, ncpus);
	if (opt.resize_at_ms >= 0)
		pthread_join(resize.thread, NULL);
}

int main(int argc, char **argv)
{
	long prctl_result = 0, slots_before, slots_after, i;
	struct worker *w;
	cpu_set_t allowed;
	int ncpus = 0, cpus[CPU_SETSIZE];
	double runtime;

	parse_args(argc, argv);
	futex_flag = opt.shared ? 0 : FUTEX_PRIVATE_FLAG;

	if (opt.wait_fd >= 0)
		wait_for_go();

	if (opt.mlock && mlockall(MCL_CURRENT | MCL_FUTURE))
		die(1, "mlockall failed: %s", strerror(errno));

	/* like perf: size the private hash before any thread exists */
	if (opt.buckets != -1) {
		prctl_result = prctl_ret(prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_SET_SLOTS,
					       (unsigned long)opt.buckets, 0, 0));
		if (prctl_result < 0)
			die(3, "PR_FUTEX_HASH_SET_SLOTS %ld failed: errno=%ld %s (%s)", opt.buckets,
			    -prctl_result, strerrorname_np(-prctl_result) ?: "?",
			    strerror(-prctl_result));
	}
	slots_before = get_slots();

	w = aligned_alloc(CACHELINE, sizeof(*w) * opt.threads);
	if (!w)
		die(1, "out of memory for %ld threads", opt.threads);
	memset(w, 0, sizeof(*w) * opt.threads);
	alloc_futexes(w);

	/* like perf: pin thread i to the i-th allowed CPU, round robin */
	if (opt.pin && sched_getaffinity(0, sizeof(allowed), &allowed) == 0)
		for (i = 0; i < CPU_SETSIZE; i++)
			if (CPU_ISSET(i, &allowed))
				cpus[ncpus++] = i;

	/* A ramp has no common start: each thread passes a barrier of one. */
	if (pthread_barrier_init(&start_barrier, NULL, opt.ramp_ms ? 1 : opt.threads + 1))
		die(1, "pthread_barrier_init failed");
	if (opt.interval_ms) {
		max_samples = (long)(opt.runtime * 1000 / opt.interval_ms) + 2;
		samples = calloc(max_samples, sizeof(*samples));
		if (!samples)
			die(1, "out of memory for %ld samples", max_samples);
	}
	if (!opt.ramp_ms)
		for (i = 0; i < opt.threads; i++)
			start_worker(w, i, cpus, ncpus);

	if (opt.iterations) {
		clock_gettime(CLOCK_MONOTONIC, &t_start);
		pthread_barrier_wait(&start_barrier);
	} else {
		run_timed(w, cpus, ncpus);
	}
	for (i = 0; i < opt.threads; i++)
		pthread_join(w[i].thread, NULL);
	runtime = now_since(&t_start);
	slots_after = get_slots();   /* like perf: after join, to see auto resizes */

	print_json(w, prctl_result, slots_before, slots_after, runtime);
	return 0;
}
