/* pool.c: the thread pool of pool.h. Workers sleep on a condition variable;
 * a run hands out task indices through a counter under the mutex-free atomic
 * fetch-add, which only decides who runs a task, never what it computes. */
#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct moor_pool {
	int n;
	pthread_t *th;
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	unsigned long gen;
	int quit;
	int active; /* workers still in the current run */
	moor_task_fn fn;
	void *ctx;
	int ntasks;
	atomic_int next;
};

static void drain(moor_pool *p)
{
	for (;;) {
		int i = atomic_fetch_add(&p->next, 1);
		if (i >= p->ntasks)
			return;
		p->fn(p->ctx, i);
	}
}

static void *worker(void *arg)
{
	moor_pool *p = arg;
	unsigned long seen = 0;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->quit && p->gen == seen)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->quit)
			break;
		seen = p->gen;
		pthread_mutex_unlock(&p->mu);
		drain(p);
		pthread_mutex_lock(&p->mu);
		if (--p->active == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

moor_pool *moor_pool_new(int nthreads)
{
	if (nthreads < 1)
		nthreads = 1;
	moor_pool *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->n = nthreads;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	if (nthreads > 1) {
		p->th = calloc((size_t)nthreads - 1, sizeof *p->th);
		if (!p->th) {
			free(p);
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
	pthread_mutex_lock(&p->mu);
	p->quit = 1;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->n - 1; i++)
		pthread_join(p->th[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	free(p->th);
	free(p);
}

int moor_pool_threads(const moor_pool *p)
{
	return p ? p->n : 1;
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
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->ctx = ctx;
	p->ntasks = ntasks;
	atomic_store(&p->next, 0);
	p->active = p->n - 1;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	drain(p);
	pthread_mutex_lock(&p->mu);
	while (p->active > 0)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}
