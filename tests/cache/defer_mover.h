/* defer_mover.h: a mover with the CUDA mover's semantics on host memory
 * (`dm_`): every copy is queued and done, in order, only at sync() (a
 * stream); and one with its lanes (`dl_`, below). Code that reads a staging buffer before a sync, or refills or
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

/* ---- with lanes (`dl_`): the CUDA mover's lanes on host memory ----
 *
 * Every call is queued on its lane (copy, copy2d, zero: lane 0; copyv:
 * its lane, a batch's copies queued in reverse, as they are in no order)
 * and nothing runs before sync(). sync() then runs the lanes' queues as
 * the marks and afters allow and no further: at each step the head of
 * some lane that may run, which one chosen by `pick` (a lane order to
 * prefer, or a random one from `seed`). A swap that leaves out a mark or
 * an after reads bytes before they are written under some order, and a
 * bit-for-bit check after it fails. */

enum { DL_COPY, DL_ZERO, DL_MARK, DL_AFTER };

typedef struct dl_op {
	int kind;
	char *dst;
	const char *src;
	size_t dp, sp, w, h;
	uint64_t pt; /* DL_MARK: its point; DL_AFTER: the one waited for */
} dl_op;

typedef struct dlanes {
	dl_op *q[ARENA_LANES];
	size_t n[ARENA_LANES], cap[ARENA_LANES];
	uint64_t seq[ARENA_LANES]; /* marks queued on a lane */
	int pick[ARENA_LANES];	   /* lanes in the order preferred */
	uint32_t seed;		   /* != 0: a random lane each step */
	uint64_t syncs, copyvs, marks, afters;
} dlanes;

static inline int dl_push(dlanes *d, int lane, dl_op o)
{
	if (d->n[lane] == d->cap[lane]) {
		size_t cap = d->cap[lane] ? 2 * d->cap[lane] : 256;
		dl_op *q = realloc(d->q[lane], cap * sizeof *q);
		if (!q)
			return -ENOMEM;
		d->q[lane] = q;
		d->cap[lane] = cap;
	}
	d->q[lane][d->n[lane]++] = o;
	return 0;
}

static inline int dl_copy2d(void *ctx, void *dst, size_t dp, const void *src,
			    size_t sp, size_t w, size_t h)
{
	return dl_push(ctx, 0, (dl_op){DL_COPY, dst, src, dp, sp, w, h, 0});
}

static inline int dl_copy(void *ctx, void *dst, const void *src, size_t n)
{
	return dl_copy2d(ctx, dst, n, src, n, n, 1);
}

static inline int dl_zero(void *ctx, void *dst, size_t n)
{
	return dl_push(ctx, 0, (dl_op){DL_ZERO, dst, NULL, n, 0, n, 1, 0});
}

static inline int dl_copyv(void *ctx, int lane, const arena_copy *v, size_t n)
{
	dlanes *d = ctx;
	d->copyvs++;
	for (size_t i = n; i-- > 0;) {
		const arena_copy *x = &v[i];
		int rc = dl_push(d, lane,
				 (dl_op){DL_COPY, x->dst, x->src, x->dpitch,
					 x->spitch, x->width, x->height, 0});
		if (rc)
			return rc;
	}
	return 0;
}

static inline int dl_mark(void *ctx, int lane, uint64_t *pt)
{
	dlanes *d = ctx;
	d->marks++;
	*pt = d->seq[lane]++ << 2 | (uint64_t)lane;
	return dl_push(d, lane, (dl_op){.kind = DL_MARK, .pt = *pt});
}

static inline int dl_after(void *ctx, int lane, uint64_t pt)
{
	dlanes *d = ctx;
	d->afters++;
	return dl_push(d, lane, (dl_op){.kind = DL_AFTER, .pt = pt});
}

static inline int dl_sync(void *ctx)
{
	dlanes *d = ctx;
	size_t head[ARENA_LANES] = {0};
	uint64_t passed[ARENA_LANES] = {0}; /* marks run on a lane */
	uint64_t base[ARENA_LANES];	    /* the first mark queued now */
	for (int l = 0; l < ARENA_LANES; l++) {
		base[l] = d->seq[l];
		for (size_t i = 0; i < d->n[l]; i++)
			base[l] -= d->q[l][i].kind == DL_MARK;
	}
	for (;;) {
		int ready[ARENA_LANES], nr = 0, left = 0;
		for (int l = 0; l < ARENA_LANES; l++) {
			ready[l] = 0;
			if (head[l] == d->n[l])
				continue;
			left = 1;
			const dl_op *o = &d->q[l][head[l]];
			int from = (int)(o->pt & 3);
			ready[l] = o->kind != DL_AFTER ||
				   (o->pt >> 2) < base[from] + passed[from];
			nr += ready[l];
		}
		if (!left)
			break;
		if (!nr)
			return -EDEADLK; /* an after no mark will pass */
		int l = -1;
		if (d->seed) {
			d->seed = d->seed * 1664525u + 1013904223u;
			int k = (int)((d->seed >> 16) % (uint32_t)nr);
			for (l = 0; !ready[l] || k--; l++)
				;
		} else {
			for (int i = 0; i < ARENA_LANES && l < 0; i++)
				if (ready[d->pick[i]])
					l = d->pick[i];
			for (int i = 0; l < 0; i++)
				if (ready[i])
					l = i;
		}
		const dl_op *o = &d->q[l][head[l]++];
		if (o->kind == DL_MARK)
			passed[l]++;
		for (size_t r = 0; o->kind <= DL_ZERO && r < o->h; r++)
			if (o->kind == DL_ZERO)
				memset(o->dst + r * o->dp, 0, o->w);
			else
				memcpy(o->dst + r * o->dp, o->src + r * o->sp,
				       o->w);
	}
	for (int l = 0; l < ARENA_LANES; l++)
		d->n[l] = 0;
	d->syncs++;
	return 0;
}

/* The mover over d (zeroed by the caller, then pick or seed set). */
static inline arena_mover dl_mover(dlanes *d)
{
	return (arena_mover){.name = "deferred lanes", .ctx = d,
			     .copy = dl_copy, .copy2d = dl_copy2d,
			     .zero = dl_zero, .sync = dl_sync,
			     .copyv = dl_copyv, .mark = dl_mark,
			     .after = dl_after};
}

static inline void dl_free(dlanes *d)
{
	for (int l = 0; l < ARENA_LANES; l++)
		free(d->q[l]);
}

#endif
