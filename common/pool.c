/* pool.c: the thread pool of pool.h. A run hands out task indices through an
 * atomic counter, which only decides who runs a task, never what it
 * computes.
 *
 * Waiting. A decode step of the tiny model is some forty runs of well under
 * a millisecond each, and waking a thread from a condition variable costs
 * tens of microseconds on a quiet machine and milliseconds on a busy VM. So
 * both sides spin first: a worker watches the generation counter for
 * spin_ns after its last run, the caller watches the count of tasks done;
 * only then does either fall back to the mutex and a condition
 * variable. A run that follows the last within the spin never enters the
 * kernel to wait.
 *
 * A spinner yields its CPU (sched_yield) after every POOL_LOOKS_PER_CLOCK
 * looks. Where the pool's threads outnumber the CPUs they get (a VM whose
 * other vCPU is busy with other processes), the thread a spinner waits for
 * may be runnable on the spinner's own CPU: a pure pause loop kept it off
 * for the whole spin, so the caller spun its 100 us, slept, the worker ran
 * and then spun its own 100 us before the caller ran again. Measured on the
 * 2-vCPU CI machine under the other agents' load, a run of two 1 us tasks:
 * 208 us median with pauses alone, 6 us with the yield, 10 us with no spin;
 * the tiny model's decode step (few-row matmul in) 15 ms median before,
 * 4.8 ms after. With a CPU to itself the yield returns at once (nothing
 * else to run), a look every microsecond or so.
 *
 * Why no wake-up is lost. Each side announces that it is going to sleep
 * (sleepers, caller_sleeps) under the mutex, then rechecks the condition
 * under the mutex before it waits; the other side first publishes its
 * change (gen, done), then reads the announcement, and takes the mutex to
 * signal only when someone announced. Both the publication and the
 * announcement are sequentially consistent atomics, so at least one side
 * sees the other's write: either the waker sees the announcement and
 * signals under the mutex (which the sleeper holds from its recheck until
 * it waits), or the sleeper's recheck sees the change and it does not wait.
 *
 * A run is done when its tasks are, whoever ran them: the caller waits
 * for `done` to reach the task count, not for every worker to check in. A
 * worker the scheduler kept off a CPU (the other vCPU busy with other
 * processes) costs the run nothing: the caller claims the tasks it would
 * have run (under the same load, a run of two 1 us tasks: 6.0 us median
 * waiting for the worker's check-in, 1.7 us without). Such a
 * worker may wake into a later run, so a claim says which run it is: one
 * 64-bit word holds the run's task count (high half) and the next index
 * (low half), published with a release store after fn and ctx. A worker's
 * fetch_add on it either finds the index past the count and stops, having
 * read nothing else, or claims a task of the run that published the word;
 * that run cannot finish (and its fn and ctx cannot be rewritten) before
 * the claimed task is done, so the fn and ctx read after the claim are
 * that run's. Each thread fails at most one claim per look, so the index
 * never carries into the count. done is reset before the word is
 * published, and only increments for claimed tasks, each before the run
 * it belongs to is complete. */
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* What a spinning thread does between two looks: tell the core it spins
 * (a pause on x86, a yield hint on Arm), or give the CPU away elsewhere. */
#if defined(__x86_64__) || defined(__i386__)
static inline void pool_relax(void) { __builtin_ia32_pause(); }
#elif defined(__aarch64__) || defined(__arm__)
static inline void pool_relax(void) { __asm__ __volatile__("yield"); }
#else
static inline void pool_relax(void) { sched_yield(); }
#endif

/* Looks between two readings of the clock while spinning (a reading costs
 * about as much as a few dozen pauses). */
#define POOL_LOOKS_PER_CLOCK 32

struct moor_pool {
	int n; /* threads, the caller included */
	pthread_t *th;  /* [n - 1] */
	atomic_long spin_ns; /* how long either side spins before it sleeps;
			      * idle workers read it, set_spin writes it */
	pthread_mutex_t mu;
	pthread_cond_t go, done_cv;

	/* Written by the caller, read by the workers. */
	_Alignas(64) atomic_ulong gen; /* bumped once per run */
	atomic_int quit;
	moor_task_fn fn;
	void *ctx;
	atomic_int sleepers; /* workers that announced a wait on go */

	/* ntasks << 32 | the next task index to hand out */
	_Alignas(64) atomic_ullong claim;

	_Alignas(64) atomic_int done; /* tasks of the current run finished */
	atomic_int caller_sleeps;     /* the caller announced a wait */
};

static long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long)ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Spins until *a is n or spin_ns pass; returns whether it is n. */
static int spin_until(atomic_int *a, int n, long spin_ns)
{
	if (atomic_load_explicit(a, memory_order_acquire) == n)
		return 1;
	if (spin_ns <= 0)
		return 0;
	long end = now_ns() + spin_ns;
	for (;;) {
		for (int i = 0; i < POOL_LOOKS_PER_CLOCK; i++) {
			pool_relax();
			if (atomic_load_explicit(a, memory_order_acquire) == n)
				return 1;
		}
		if (now_ns() >= end)
			return 0;
		sched_yield();
	}
}

/* Spins until gen moves past seen, quit is set, or spin_ns pass. */
static void spin_for_run(moor_pool *p, unsigned long seen)
{
	long spin_ns = atomic_load_explicit(&p->spin_ns, memory_order_relaxed);
	if (spin_ns <= 0)
		return;
	long end = now_ns() + spin_ns;
	for (;;) {
		for (int i = 0; i < POOL_LOOKS_PER_CLOCK; i++) {
			if (atomic_load_explicit(&p->gen,
						 memory_order_acquire) != seen ||
			    atomic_load_explicit(&p->quit,
						 memory_order_relaxed))
				return;
			pool_relax();
		}
		if (now_ns() >= end)
			return;
		sched_yield();
	}
}

/* Runs tasks of the current run until none is left to claim. The thread
 * that finishes the last one wakes the caller if it went to sleep. */
static void drain(moor_pool *p)
{
	for (;;) {
		unsigned long long c = atomic_fetch_add_explicit(
		    &p->claim, 1, memory_order_acquire);
		int n = (int)(c >> 32), i = (int)(uint32_t)c;
		if (i >= n)
			return;
		p->fn(p->ctx, i);
		if (atomic_fetch_add(&p->done, 1) == n - 1 &&
		    atomic_load(&p->caller_sleeps)) {
			pthread_mutex_lock(&p->mu);
			pthread_cond_signal(&p->done_cv);
			pthread_mutex_unlock(&p->mu);
		}
	}
}

static void *worker(void *arg)
{
	moor_pool *p = arg;
	unsigned long seen = 0;
	for (;;) {
		spin_for_run(p, seen);
		unsigned long g = atomic_load(&p->gen);
		if (g == seen && !atomic_load(&p->quit)) {
			pthread_mutex_lock(&p->mu);
			atomic_fetch_add(&p->sleepers, 1);
			while (!atomic_load(&p->quit) &&
			       (g = atomic_load(&p->gen)) == seen)
				pthread_cond_wait(&p->go, &p->mu);
			atomic_fetch_sub(&p->sleepers, 1);
			pthread_mutex_unlock(&p->mu);
		}
		if (atomic_load(&p->quit))
			break;
		seen = g;
		drain(p);
	}
	return NULL;
}

/* CPUs this process may run on. */
static int cpus_available(void)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof set, &set) == 0)
		return CPU_COUNT(&set);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

/* MOOR_POOL_SPIN_US when set to a number in [0, 1e6]; else the default,
 * or 0 when the pool has more threads than CPUs: there a spinning thread
 * holds the CPU that a thread with work needs (measured on 2 vCPUs with 4
 * threads: a decode step took 30 ms spinning, 22 ms sleeping at once). */
static long spin_ns_for(int nthreads)
{
	const char *s = getenv("MOOR_POOL_SPIN_US");
	if (s && *s) {
		char *end;
		long us = strtol(s, &end, 10);
		if (!*end && us >= 0 && us <= 1000000)
			return us * 1000L;
	}
	if (nthreads > cpus_available())
		return 0;
	return MOOR_POOL_SPIN_US_DEFAULT * 1000L;
}

moor_pool *moor_pool_new(int nthreads)
{
	if (nthreads < 1)
		nthreads = 1;
	moor_pool *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->n = nthreads;
	atomic_init(&p->spin_ns, spin_ns_for(nthreads));
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done_cv, NULL);
	if (nthreads > 1) {
		p->th = calloc((size_t)nthreads - 1, sizeof *p->th);
		if (!p->th) {
			p->n = 1;
			moor_pool_free(p);
			return NULL;
		}
		for (int i = 0; i < nthreads - 1; i++) {
			if (pthread_create(&p->th[i], NULL, worker, p) != 0) {
				p->n = i + 1;
				moor_pool_free(p);
				return NULL;
			}
		}
	}
	return p;
}

void moor_pool_free(moor_pool *p)
{
	if (!p)
		return;
	atomic_store(&p->quit, 1);
	pthread_mutex_lock(&p->mu);
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->n - 1; i++)
		pthread_join(p->th[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done_cv);
	free(p->th);
	free(p);
}

int moor_pool_threads(const moor_pool *p)
{
	return p ? p->n : 1;
}

void moor_pool_set_spin_us(moor_pool *p, int us)
{
	if (p)
		atomic_store_explicit(&p->spin_ns, us < 0 ? 0 : (long)us * 1000L,
				      memory_order_relaxed);
}

void moor_pool_run(moor_pool *p, int ntasks, moor_task_fn fn, void *ctx)
{
	if (ntasks <= 0)
		return;
	if (!p || p->n == 1 || ntasks == 1) {
		for (int i = 0; i < ntasks; i++)
			fn(ctx, i);
		return;
	}
	p->fn = fn;
	p->ctx = ctx;
	atomic_store_explicit(&p->done, 0, memory_order_relaxed);
	/* Publishes the fields above to every worker that claims from it. */
	atomic_store_explicit(&p->claim, (unsigned long long)ntasks << 32,
			      memory_order_release);
	atomic_fetch_add(&p->gen, 1);
	if (atomic_load(&p->sleepers) > 0) {
		pthread_mutex_lock(&p->mu);
		pthread_cond_broadcast(&p->go);
		pthread_mutex_unlock(&p->mu);
	}
	drain(p);
	if (spin_until(&p->done, ntasks,
		       atomic_load_explicit(&p->spin_ns, memory_order_relaxed)))
		return;
	pthread_mutex_lock(&p->mu);
	atomic_store(&p->caller_sleeps, 1);
	while (atomic_load(&p->done) < ntasks)
		pthread_cond_wait(&p->done_cv, &p->mu);
	atomic_store(&p->caller_sleeps, 0);
	pthread_mutex_unlock(&p->mu);
}
