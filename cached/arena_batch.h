/* arena_batch.h: the CUDA mover's batch (`arena_batch_`): the pieces of a
 * copyv gathered for one cudaMemcpy3DBatchAsync (arena_cuda.c), and the
 * rules that keep a copyv's order with it. Plain C, header only, so that
 * a CPU test checks the rules (test_arena_batch) where no GPU is.
 *
 * Why rules. The runtime runs the copies of one batch in no order, maybe
 * side by side: "copies within a batch are not guaranteed to execute in
 * any specific order; dependent copies within a batch are undefined
 * behaviour". The batch as a whole runs in its stream's order. The mover
 * issues the pieces of a copyv three ways: into the batch (both sides in
 * the arenas it knows), on the stream alone (a side in pageable memory,
 * which the runtime stages before the call returns) and on the CPU (host
 * to host: the stream waited for, then memcpy). So the gathered pieces go
 * to the stream (a flush) before the next piece when:
 *   - that piece does not join the batch: issued alone or on the CPU it
 *     would run before the pieces gathered before it (a host copy would
 *     read a bounce buffer before the batched copy that fills it was even
 *     issued);
 *   - it conflicts with a gathered piece (arena_copy_conflict: one writes
 *     a byte the other reads or writes): a vector whose copies depend on
 *     each other (a bounce written and read in one call; rows copied out
 *     of a region and others into it) then still runs in the order given.
 *     arena.h's copyv asks callers for independent copies, and cached's
 *     give that (each vector copies one way between the live buffers and
 *     other memory); this keeps the order where one does not;
 *   - the batch is full.
 * A batch so flushed holds independent copies only, which is also what
 * lets the mover replay a batch the runtime refused one copy a call.
 *
 * The check costs O(1) a piece where its bytes lie apart from the hulls
 * of the gathered ones (a copyv that goes one way), else a test against
 * each gathered piece: O(1) where their spans are apart or their pitches
 * equal (rows of the same buffers), else a step a run of the shorter. */
#ifndef ARENA_BATCH_H
#define ARENA_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"

/* One side of a 2D copy: h runs of w bytes from p, pitch apart. */
typedef struct arena_runs {
	uintptr_t p;
	size_t pitch, w, h;
} arena_runs;

static inline arena_runs arena_runs_dst(const arena_copy *x)
{
	return (arena_runs){(uintptr_t)x->dst, x->dpitch, x->width, x->height};
}

static inline arena_runs arena_runs_src(const arena_copy *x)
{
	return (arena_runs){(uintptr_t)x->src, x->spitch, x->width, x->height};
}

/* [*lo, *hi): from the first run's start to the last run's end (start +
 * (h - 1) * pitch + w); empty for no bytes. */
static inline void arena_runs_span(const arena_runs *r, uintptr_t *lo,
				   uintptr_t *hi)
{
	*lo = r->p;
	*hi = r->w && r->h ? r->p + (r->h - 1) * r->pitch + r->w : r->p;
}

/* Whether [x, x + w) meets a run of r (r's runs apart: r->w <= pitch). Run
 * j is the first that ends after x; the later ones start later still. */
static inline int arena_runs_hit(const arena_runs *r, uintptr_t x, size_t w)
{
	size_t j = 0;
	if (x >= r->p + r->w)
		j = (x - r->p - r->w) / r->pitch + 1;
	return j < r->h && r->p + j * r->pitch < x + w;
}

/* Whether a and b share a byte. Exact where each side's runs lie apart
 * (w <= pitch, or one run); a side whose runs overlap each other counts
 * as its whole span (never less than exact). */
static inline int arena_runs_meet(arena_runs a, arena_runs b)
{
	uintptr_t alo, ahi, blo, bhi;
	arena_runs_span(&a, &alo, &ahi);
	arena_runs_span(&b, &blo, &bhi);
	if (alo == ahi || blo == bhi || ahi <= blo || bhi <= alo)
		return 0;
	if (a.h == 1)
		a.pitch = a.w;
	if (b.h == 1)
		b.pitch = b.w;
	if (a.w > a.pitch || b.w > b.pitch)
		return 1;
	if (a.h > b.h) {
		arena_runs t = a;
		a = b;
		b = t;
	}
	if (a.pitch == b.pitch && a.h > 1) {
		/* rows i of a and j of b meet iff -b.w < d + m P < a.w for
		 * m = j - i in [-(a.h - 1), b.h - 1], d = b.p - a.p: the
		 * largest m under a.w's bound, within range, is the one to
		 * try (a smaller m only lowers d + m P) */
		int64_t P = (int64_t)a.pitch, d = (int64_t)(b.p - a.p);
		int64_t n = (int64_t)a.w - 1 - d;
		int64_t m = n / P - (n % P != 0 && n < 0);
		if (m > (int64_t)b.h - 1)
			m = (int64_t)b.h - 1;
		return m >= -((int64_t)a.h - 1) && d + m * P > -(int64_t)b.w;
	}
	for (size_t i = 0; i < a.h; i++)
		if (arena_runs_hit(&b, a.p + i * a.pitch, a.w))
			return 1;
	return 0;
}

/* Whether copies a and b cannot be in one batch: one writes a byte the
 * other reads or writes. */
static inline int arena_copy_conflict(const arena_copy *a, const arena_copy *b)
{
	arena_runs ad = arena_runs_dst(a), bd = arena_runs_dst(b);
	return arena_runs_meet(ad, bd) ||
	       arena_runs_meet(ad, arena_runs_src(b)) ||
	       arena_runs_meet(arena_runs_src(a), bd);
}

/* The gathered pieces: pend [max] and span [max] (the caller's memory),
 * n of them; span[i] holds pend[i]'s spans, written [0, 1) and read
 * [2, 3); the hulls of all of them: written (wlo, whi), read (rlo, rhi). */
typedef struct arena_batch {
	arena_copy *pend;
	uintptr_t (*span)[4];
	size_t n, max;
	uintptr_t wlo, whi, rlo, rhi;
} arena_batch;

/* Whether the gathered pieces must go to the stream before piece x (the
 * rules above). join: whether x would go into the batch (0: issued
 * alone or on the CPU). 0 when nothing is gathered. */
static inline int arena_batch_before(const arena_batch *b, const arena_copy *x,
				     int join)
{
	if (!b->n)
		return 0;
	if (!join || b->n == b->max)
		return 1;
	uintptr_t dlo, dhi, slo, shi;
	arena_runs xd = arena_runs_dst(x), xs = arena_runs_src(x);
	arena_runs_span(&xd, &dlo, &dhi);
	arena_runs_span(&xs, &slo, &shi);
	int ww = dlo < b->whi && b->wlo < dhi; /* x writes near a write */
	int wr = dlo < b->rhi && b->rlo < dhi; /* ... near a read */
	int rw = slo < b->whi && b->wlo < shi; /* x reads near a write */
	if (!ww && !wr && !rw)
		return 0;
	for (size_t i = 0; i < b->n; i++) {
		const uintptr_t *q = b->span[i];
		/* spans that meet (branch-free: most do not) */
		int pw = ww & (q[0] < dhi) & (dlo < q[1]);
		int ps = rw & (q[0] < shi) & (slo < q[1]);
		int pr = wr & (q[2] < dhi) & (dlo < q[3]);
		if (!(pw | ps | pr))
			continue;
		arena_runs pd = arena_runs_dst(&b->pend[i]);
		if ((pw && arena_runs_meet(xd, pd)) ||
		    (ps && arena_runs_meet(xs, pd)) ||
		    (pr && arena_runs_meet(xd, arena_runs_src(&b->pend[i]))))
			return 1;
	}
	return 0;
}

/* x into the batch (after arena_batch_before said 0 for it with join). */
static inline void arena_batch_add(arena_batch *b, const arena_copy *x)
{
	uintptr_t *q = b->span[b->n];
	arena_runs xd = arena_runs_dst(x), xs = arena_runs_src(x);
	arena_runs_span(&xd, &q[0], &q[1]);
	arena_runs_span(&xs, &q[2], &q[3]);
	if (!b->n) {
		b->wlo = q[0];
		b->whi = q[1];
		b->rlo = q[2];
		b->rhi = q[3];
	} else {
		b->wlo = q[0] < b->wlo ? q[0] : b->wlo;
		b->whi = q[1] > b->whi ? q[1] : b->whi;
		b->rlo = q[2] < b->rlo ? q[2] : b->rlo;
		b->rhi = q[3] > b->rhi ? q[3] : b->rhi;
	}
	b->pend[b->n++] = *x;
}

#endif
