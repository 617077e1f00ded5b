/* pool.h: a fixed thread pool that runs n independent tasks and waits.
 *
 * Determinism is the caller's: a task's result must depend only on its
 * index, never on which thread ran it or how many threads there are. The
 * kernels partition work by output element for that reason. The pool only
 * decides who runs a task.
 *
 * Between runs the workers spin on the run counter for a while (the spin)
 * before they sleep on a condition variable, and the caller spins as long
 * for the workers to finish before it sleeps: runs that follow each other
 * closely, as the ops of a decode step do, never wait for the kernel to wake
 * a thread. A spinning thread keeps its CPU busy; spin 0 sleeps at once.
 * The spin is MOOR_POOL_SPIN_US microseconds when that is set where the pool
 * is made, else MOOR_POOL_SPIN_US_DEFAULT, or 0 for a pool of more threads
 * than the CPUs the process may use. */
#ifndef MOOR_POOL_H
#define MOOR_POOL_H

typedef struct moor_pool moor_pool;
typedef void (*moor_task_fn)(void *ctx, int task);

/* Measured with bench_prefill_decode --bound on 2 vCPUs: 0, 20, 50, 100,
 * 200 and 500 us; 100 was best for both the 16-token prefill and decode. */
#define MOOR_POOL_SPIN_US_DEFAULT 100

/* nthreads >= 1 (the caller counts as one). Returns NULL on failure. */
moor_pool *moor_pool_new(int nthreads);
/* Safe on NULL, and on a pool whose workers sleep. Joins every worker. */
void moor_pool_free(moor_pool *p);
int moor_pool_threads(const moor_pool *p);
/* Sets the spin in microseconds (< 0 is 0) for the runs that follow; call
 * it between runs. Safe on NULL. */
void moor_pool_set_spin_us(moor_pool *p, int us);
/* Runs fn(ctx, i) for i in [0, ntasks) across the pool and returns when all
 * are done. Not reentrant: one caller at a time. p may be NULL (serial). */
void moor_pool_run(moor_pool *p, int ntasks, moor_task_fn fn, void *ctx);

#endif
