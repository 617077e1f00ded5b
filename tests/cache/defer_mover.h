/* defer_mover.h: a mover with the CUDA mover's semantics on host memory
 * (`dm_`): every copy is queued and done, in order, only at sync() (a
 * stream). Code that reads a staging buffer before a sync, or refills or
 * frees it before the copies out of it are done, reads or writes other
 * bytes under it, and a bit-for-bit check after fails. CPU only (host
 * pointers). Header-only: each test is one program. */
#ifndef DEFER_MOVER_H
#define DEFER_MOVER_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"

typedef struct dop {
	int kind; /* 0 copy2d, 1 zero */
	char *dst;
	const char *src;
	size_t dp, sp, w, h;
} dop;

typedef struct defer {
	dop *q;
	size_t n, cap;
	uint64_t syncs;
} defer;

static inline int d_push(defer *d, dop o)
{
	if (d->n == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 256;
		dop *q = realloc(d->q, cap * sizeof *q);
		if (!q)
			return -ENOMEM;
		d->q = q;
		d->cap = cap;
	}
	d->q[d->n++] = o;
	return 0;
}

static inline int d_copy2d(void *ctx, void *dst, size_t dp, const void *src,
			   size_t sp, size_t w, size_t h)
{
	return d_push(ctx, (dop){0, dst, src, dp, sp, w, h});
}

static inline int d_copy(void *ctx, void *dst, const void *src, size_t n)
{
	return d_copy2d(ctx, dst, n, src, n, n, 1);
}

static inline int d_zero(void *ctx, void *dst, size_t n)
{
	return d_push(ctx, (dop){1, dst, NULL, n, 0, n, 1});
}

static inline int d_sync(void *ctx)
{
	defer *d = ctx;
	for (size_t i = 0; i < d->n; i++) {
		dop *o = &d->q[i];
		for (size_t r = 0; r < o->h; r++)
			if (o->kind)
				memset(o->dst + r * o->dp, 0, o->w);
			else
				memcpy(o->dst + r * o->dp, o->src + r * o->sp,
				       o->w);
	}
	d->n = 0;
	d->syncs++;
	return 0;
}

/* The mover over d (zeroed by the caller). */
static inline arena_mover dm_mover(defer *d)
{
	return (arena_mover){.name = "deferred", .ctx = d, .copy = d_copy,
			     .copy2d = d_copy2d, .zero = d_zero,
			     .sync = d_sync};
}

#endif
