/* pool.h: a fixed thread pool that runs n independent tasks and waits.
 *
 * Determinism is the caller's: a task's result must depend only on its
 * index, never on which thread ran it or how many threads there are. The
 * kernels partition work by output element for that reason. */
#ifndef MOOR_POOL_H
#define MOOR_POOL_H

typedef struct moor_pool moor_pool;
typedef void (*moor_task_fn)(void *ctx, int task);

/* nthreads >= 1 (the caller counts as one). Returns NULL on failure. */
moor_pool *moor_pool_new(int nthreads);
/* Safe on NULL. Joins every worker. */
void moor_pool_free(moor_pool *p);
int moor_pool_threads(const moor_pool *p);
/* Runs fn(ctx, i) for i in [0, ntasks) across the pool and returns when all
 * are done. Not reentrant: one caller at a time. p may be NULL (serial). */
void moor_pool_run(moor_pool *p, int ntasks, moor_task_fn fn, void *ctx);

#endif
