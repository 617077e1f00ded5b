/* test_kern_pool_one_cpu: the CPU backend's pool (common/pool.c) where its
 * threads outnumber the CPUs they get, the 2-vCPU CI machine whose other
 * vCPU runs other work.
 *
 * The process is pinned to one CPU before the pools are made, and their
 * spin set to 100 us (what a machine with a CPU per thread gets), so the
 * thread a spinner waits for is runnable on the spinner's CPU. A spinner
 * that only pauses keeps it off that CPU for its whole spin: each run of
 * two tasks then costs at least one caller spin plus one worker spin
 * (measured: 208 us). The spinner yields instead, so a run costs a few
 * context switches.
 *
 *  1. 2000 runs of two tiny tasks on a 2-thread pool, every task hit once
 *     per run; the median run under 50 us (half the spin: a pool whose
 *     spinners hold the CPU cannot get there). The median, not the total,
 *     so that the other processes of a busy machine taking the CPU now and
 *     then fail nothing.
 *  2. The CPU backend with 3 threads on that one CPU: a matmul of the
 *     decode step's shape (T = 1, N = 768, K = 256, bf16) and of a prefill
 *     chunk's (T = 64) give the bits of a 1-thread backend, and the decode
 *     matmul's median stays within 0.15 ms of the 1-thread backend's
 *     (measured: 0.03 ms in all; 0.34 ms with pause-only spinners), the
 *     two timed in turns, in up to three attempts. */
#include "kt.h"
#include "pool.h"

#include <sched.h>
#include <stdatomic.h>

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

struct hits {
	atomic_int n[2];
};

static void hit(void *arg, int i)
{
	struct hits *h = arg;
	atomic_fetch_add_explicit(&h->n[i], 1, memory_order_relaxed);
}

static int pin_one_cpu(void)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof set, &set))
		return -1;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set)) {
			CPU_ZERO(&set);
			CPU_SET(c, &set);
			return sched_setaffinity(0, sizeof set, &set) ? -1 : c;
		}
	return -1;
}

int main(void)
{
	enum { RUNS = 2000, MMR = 200 };
	/* pinned first, so the pools' threads inherit the one CPU */
	int cpu = pin_one_cpu();
	ASSERT(cpu >= 0, "pinning to one CPU");
	moor_pool *p = moor_pool_new(2);
	ASSERT(p, "moor_pool_new(2)");
	kt_be b3 = kt_open(3), b1 = kt_open(1);
	/* the spin of a machine with a CPU per thread (a pool of more
	 * threads than CPUs at its start gets 0) */
	moor_pool_set_spin_us(p, 100);
	moor_pool_set_spin_us(b3.ctx->pool, 100);

	static double d[RUNS];
	struct hits h;
	int miss = 0;
	for (int r = 0; r < RUNS; r++) {
		atomic_init(&h.n[0], 0);
		atomic_init(&h.n[1], 0);
		double t0 = moor_now();
		moor_pool_run(p, 2, hit, &h);
		d[r] = moor_now() - t0;
		miss += atomic_load(&h.n[0]) != 1 || atomic_load(&h.n[1]) != 1;
	}
	qsort(d, RUNS, sizeof *d, cmp_dbl);
	ASSERT(miss == 0, "%d runs did not hit each task once", miss);
	ASSERT(d[RUNS / 2] < 50e-6,
	       "median run of two tasks on one CPU %.1f us (>= 50 us: the "
	       "spinners hold the CPU the other thread needs)",
	       1e6 * d[RUNS / 2]);
	printf("one CPU (%d): run of two tasks, median %.1f us, p90 %.1f us\n",
	       cpu, 1e6 * d[RUNS / 2], 1e6 * d[RUNS * 9 / 10]);

	int N = 768, K = 256;
	void *W;
	float *wf = kt_weights((size_t)N * K, KERN_BF16, -1, 1, &W);
	float *x = malloc((size_t)64 * K * 4);
	kt_fill(x, (size_t)64 * K, -1, 1);
	float *y3 = malloc((size_t)64 * N * 4),
	      *y1 = malloc((size_t)64 * N * 4);
	ASSERT(b3.o->matmul(b3.q, y3, N, x, K, W, KERN_BF16, 1, N, K,
			    KERN_ACT_F32) == 0 &&
		   b1.o->matmul(b1.q, y1, N, x, K, W, KERN_BF16, 1, N, K,
				KERN_ACT_F32) == 0,
	       "matmul T = 1 failed");
	ASSERT(memcmp(y1, y3, (size_t)N * 4) == 0,
	       "T = 1 on 3 threads on one CPU differs from 1 thread");
	ASSERT(b3.o->matmul(b3.q, y3, N, x, K, W, KERN_BF16, 64, N, K,
			    KERN_ACT_F32) == 0 &&
		   b1.o->matmul(b1.q, y1, N, x, K, W, KERN_BF16, 64, N, K,
				KERN_ACT_F32) == 0,
	       "matmul T = 64 failed");
	ASSERT(memcmp(y1, y3, (size_t)64 * N * 4) == 0,
	       "T = 64 on 3 threads on one CPU differs from 1 thread");
	/* the bound is the 1-thread backend's own median plus 0.15 ms of the
	 * pool's (pause-only spinners add 0.3 ms): the matmul's own time
	 * depends on the build (0.03 ms released, 0.2 ms under ASan). The
	 * two are timed in turns, so that both medians see the same load
	 * (timed one after the other, the 3-thread runs once met a busier
	 * machine under ASan: 0.632 against 0.382 ms); a pool that holds the
	 * CPU pays its spin every run, so it fails every attempt of three */
	static double m[MMR], m1[MMR];
	for (int att = 0; att < 3; att++) {
		for (int r = 0; r < MMR; r++) {
			double t0 = moor_now();
			int rc = b3.o->matmul(b3.q, y3, N, x, K, W, KERN_BF16,
					      1, N, K, KERN_ACT_F32);
			double t1 = moor_now();
			b1.o->matmul(b1.q, y1, N, x, K, W, KERN_BF16, 1, N, K,
				     KERN_ACT_F32);
			m[r] = t1 - t0;
			m1[r] = moor_now() - t1;
			ASSERT(rc == 0, "matmul: %d", rc);
		}
		qsort(m, MMR, sizeof *m, cmp_dbl);
		qsort(m1, MMR, sizeof *m1, cmp_dbl);
		if (m[MMR / 2] < m1[MMR / 2] + 0.15e-3)
			break;
		printf("one CPU: attempt %d: 3 threads %.3f ms, 1 thread "
		       "%.3f ms\n",
		       att + 1, 1e3 * m[MMR / 2], 1e3 * m1[MMR / 2]);
	}
	ASSERT(m[MMR / 2] < m1[MMR / 2] + 0.15e-3,
	       "decode matmul on 3 threads, one CPU: median %.3f ms, on 1 "
	       "thread %.3f ms",
	       1e3 * m[MMR / 2], 1e3 * m1[MMR / 2]);
	printf("one CPU: matmul 1x768x256 on 3 threads, median %.3f ms (1 "
	       "thread %.3f ms)\n",
	       1e3 * m[MMR / 2], 1e3 * m1[MMR / 2]);

	free(W);
	free(wf);
	free(x);
	free(y1);
	free(y3);
	b1.o->destroy(b1.ctx);
	b3.o->destroy(b3.ctx);
	moor_pool_free(p);
	return kt_done("test_kern_pool_one_cpu");
}
