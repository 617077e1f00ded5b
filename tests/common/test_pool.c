/* test_pool: the thread pool runs every task of every run exactly once,
 * with 1 to 4 threads, across runs that follow each other within the spin,
 * runs after an idle long enough that every worker sleeps, runs whose
 * workers outlast the caller's spin (the caller sleeps), with the spin off
 * and on, and a pool freed while its workers spin, sleep or never ran. */
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"
#include "t.h"

#define MAXTASKS 300

struct job {
	atomic_int hits[MAXTASKS];
	int slow_task;  /* this task sleeps slow_us, or -1 */
	int slow_us;
};

static void task(void *arg, int i)
{
	struct job *j = arg;
	if (i == j->slow_task)
		usleep((useconds_t)j->slow_us);
	atomic_fetch_add_explicit(&j->hits[i], 1, memory_order_relaxed);
}

static void sleep_us(long us)
{
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
	nanosleep(&ts, NULL);
}

/* One run of n tasks; every index must be hit once and none beyond n. */
static int run_once(moor_pool *p, struct job *j, int n)
{
	for (int i = 0; i < MAXTASKS; i++)
		atomic_store(&j->hits[i], 0);
	moor_pool_run(p, n, task, j);
	int bad = 0;
	for (int i = 0; i < MAXTASKS; i++)
		bad += atomic_load(&j->hits[i]) != (i < n ? 1 : 0);
	return bad;
}

int main(void)
{
	static struct job j;
	j.slow_task = -1;

	/* No pool: serial, same coverage. */
	CHECK(run_once(NULL, &j, 17) == 0, "serial run");
	CHECK(moor_pool_threads(NULL) == 1, "NULL pool counts one thread");
	moor_pool_free(NULL);
	moor_pool_set_spin_us(NULL, 10);

	for (int nt = 1; nt <= 4; nt++) {
		moor_pool *p = moor_pool_new(nt);
		REQUIRE(p, "moor_pool_new(%d)", nt);
		CHECK(moor_pool_threads(p) == nt, "threads %d", nt);
		/* Spinning even where the threads outnumber the CPUs (the
		 * default there is 0): every path, at every count. */
		moor_pool_set_spin_us(p, MOOR_POOL_SPIN_US_DEFAULT);

		/* Back-to-back runs of many sizes, within the spin. */
		unsigned x = 12345u + (unsigned)nt;
		int bad = 0;
		for (int r = 0; r < 5000; r++) {
			x = x * 1103515245u + 12345u;
			bad += run_once(p, &j, (int)((x >> 8) % MAXTASKS));
		}
		CHECK(bad == 0, "%d thread(s): %d task(s) missed or repeated "
		      "in back-to-back runs", nt, bad);

		/* After idles shorter than, around and longer than the spin
		 * (the workers spin, are about to sleep, sleep). */
		static const long idle_us[] = {0, 20, 90, 100, 110, 200,
					       1000, 30000};
		for (int k = 0; k < (int)(sizeof idle_us / sizeof *idle_us);
		     k++)
			for (int r = 0; r < 20; r++) {
				sleep_us(idle_us[k]);
				CHECK(run_once(p, &j, 2 * nt + r) == 0,
				      "%d thread(s): run after %ld us idle", nt,
				      idle_us[k]);
			}

		/* A long task: whoever does not run it outlasts its spin
		 * (a worker sleeps on go, or the caller on done). */
		moor_pool_set_spin_us(p, 20);
		j.slow_us = 500;
		for (int r = 0; r < 40; r++) {
			j.slow_task = r % 8;
			CHECK(run_once(p, &j, 8) == 0,
			      "%d thread(s): run with a slow task", nt);
		}
		j.slow_task = -1;

		/* Spin off: every wait is on a condition variable. */
		moor_pool_set_spin_us(p, 0);
		bad = 0;
		for (int r = 0; r < 3000; r++)
			bad += run_once(p, &j, 1 + r % 64);
		CHECK(bad == 0, "%d thread(s), spin 0: %d bad", nt, bad);
		moor_pool_set_spin_us(p, MOOR_POOL_SPIN_US_DEFAULT);
		CHECK(run_once(p, &j, 50) == 0, "spin back on");

		/* Freed right after a run: the workers are still spinning. */
		moor_pool_free(p);

		/* Freed after an idle: the workers sleep. */
		p = moor_pool_new(nt);
		REQUIRE(p, "moor_pool_new(%d)", nt);
		CHECK(run_once(p, &j, 40) == 0, "run before idle free");
		sleep_us(20000);
		moor_pool_free(p);

		/* Freed without a run. */
		moor_pool_free(moor_pool_new(nt));
	}
	return t_done("test_pool");
}
