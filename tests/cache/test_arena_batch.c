/* test_arena_batch: the CUDA mover's batch rules (cached/arena_batch.h)
 * on the CPU, where no GPU is.
 *   - arena_runs_meet (do two sides of 2D copies share a byte) equals a
 *     byte-by-byte check over random runs in 2 KiB (equal pitches, the
 *     O(1) path, half the time; rows that overlap each other count as
 *     their span, never less than the bytes);
 *   - a mover that gathers as arena_cuda.c does (arena_batch_before, then
 *     arena_batch_add or one piece now) over a runtime that runs a
 *     batch's copies in reverse order gives, for each vector, the bytes
 *     of the copies done one by one in the order given: a bounce written
 *     then read on the CPU (host to host), a device region copied to
 *     pageable memory (a piece alone) after a batched copy into it, a
 *     chain through a bounce, the park's swap (rows out of a region and
 *     others into it) in one call. The same vectors gathered with the
 *     rules of before (a flush only when full or at the end) give other
 *     bytes, so each case would catch that bug;
 *   - a vector of independent copies (rows of interleaved views, 2D with
 *     equal pitches, as cache_rows_add makes them) fills its batches
 *     (no flush before one is full), and a line says what the check
 *     costs a piece there. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "arena_batch.h"
#include "t.h"

static uint32_t rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(*s >> 33);
}

/* The bytes of r's runs in a bitmap of [0, 2048) (addresses offset by
 * base). */
static void mark(const arena_runs *r, uintptr_t base, uint8_t *bits)
{
	for (size_t i = 0; i < r->h; i++)
		for (size_t k = 0; k < r->w; k++)
			bits[r->p - base + i * r->pitch + k] = 1;
}

static void test_meet(void)
{
	static uint8_t A[2048], B[2048];
	uintptr_t base = 1u << 20;
	uint64_t s = 1;
	int bad = 0, n = 0, exact_meets = 0;
	for (int t = 0; t < 100000; t++) {
		arena_runs r[2];
		size_t P = 1 + rnd(&s) % 96;
		for (int k = 0; k < 2; k++) {
			size_t h = 1 + rnd(&s) % 12;
			size_t pitch = rnd(&s) % 2 ? P : 1 + rnd(&s) % 96;
			size_t w =
			    1 + rnd(&s) % (rnd(&s) % 8 ? pitch : 2 * pitch);
			r[k] = (arena_runs){base + rnd(&s) % 800, pitch, w, h};
		}
		memset(A, 0, sizeof A);
		memset(B, 0, sizeof B);
		mark(&r[0], base, A);
		mark(&r[1], base, B);
		int want = 0;
		for (size_t i = 0; i < sizeof A && !want; i++)
			want = A[i] && B[i];
		int exact = (r[0].h == 1 || r[0].w <= r[0].pitch) &&
			    (r[1].h == 1 || r[1].w <= r[1].pitch);
		int got = arena_runs_meet(r[0], r[1]);
		if (got != arena_runs_meet(r[1], r[0]) ||
		    (exact ? got != want : got < want)) {
			if (bad++ < 5)
				fprintf(stderr,
					"meet(%zu+%zu*%zu x%zu, %zu+%zu*%zu "
					"x%zu) = %d, bytes say %d\n",
					(size_t)(r[0].p - base), r[0].pitch,
					r[0].h, r[0].w, (size_t)(r[1].p - base),
					r[1].pitch, r[1].h, r[1].w, got, want);
		}
		n += exact;
		exact_meets += exact && want;
	}
	CHECK(bad == 0, "arena_runs_meet against the bytes: %d wrong", bad);
	CHECK(n > 50000 && exact_meets > 5000 && exact_meets < n - 5000,
	      "the cases cover both answers: %d exact, %d meet", n,
	      exact_meets);
}

/* ---- a mover over host memory with arena_cuda.c's gathering ---- */

enum { JOIN, ALONE, CPU }; /* how a piece is issued (arena_cuda.c) */

typedef struct sim {
	arena_batch b;
	arena_copy pend[4];
	uintptr_t span[4][4];
	int rules; /* 0: the rules of before */
} sim;

static void run_copy(const arena_copy *x)
{
	for (size_t i = 0; i < x->height; i++)
		memmove((char *)x->dst + i * x->dpitch,
			(const char *)x->src + i * x->spitch, x->width);
}

/* The runtime: a batch's copies in no order (here: reversed). */
static void sim_flush(sim *m)
{
	for (size_t i = m->b.n; i-- > 0;)
		run_copy(&m->b.pend[i]);
	m->b.n = 0;
}

/* arena_cuda.c's put() (and the host copy's flush in mv_copyv). */
static void sim_put(sim *m, const arena_copy *x, int how)
{
	int join = how == JOIN;
	if (m->rules ? arena_batch_before(&m->b, x, join)
		     : join && m->b.n == m->b.max)
		sim_flush(m);
	if (join)
		arena_batch_add(&m->b, x);
	else
		run_copy(x);
}

static void sim_copyv(sim *m, const arena_copy *v, const int *how, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sim_put(m, &v[i], how[i]);
	sim_flush(m);
}

/* v done one by one in order, then by the mover with and without the
 * rules, from the same bytes; whether each matches the first. */
static void case_order(const char *what, uint8_t *mem, size_t len,
		       const arena_copy *v, const int *how, size_t n)
{
	uint8_t *init = malloc(len), *want = malloc(len);
	REQUIRE(init && want, "oom");
	uint64_t s = 42;
	for (size_t i = 0; i < len; i++)
		mem[i] = init[i] = (uint8_t)rnd(&s);
	for (size_t i = 0; i < n; i++)
		run_copy(&v[i]);
	memcpy(want, mem, len);
	int same[2];
	for (int rules = 0; rules < 2; rules++) {
		memcpy(mem, init, len);
		sim m = {.rules = rules};
		m.b = (arena_batch){.pend = m.pend, .span = m.span, .max = 4};
		sim_copyv(&m, v, how, n);
		same[rules] = memcmp(mem, want, len) == 0;
	}
	CHECK(same[1], "%s: the mover's bytes are those of the order given",
	      what);
	CHECK(!same[0],
	      "%s: without the rules they are not (the case has "
	      "teeth)",
	      what);
	free(init);
	free(want);
}

static void test_orders(void)
{
	enum { K = 256 };
	static uint8_t mem[8 * K];
	uint8_t *D = mem, *D2 = mem + K, *B = mem + 2 * K, *H = mem + 3 * K,
		*P = mem + 4 * K, *A = mem + 5 * K;
	/* device -> bounce, bounce -> host on the CPU */
	arena_copy bounce[2] = {{B, D, K, K, K, 1}, {H, B, K, K, K, 1}};
	int how_b[2] = {JOIN, CPU};
	case_order("a bounce read on the CPU", mem, sizeof mem, bounce, how_b,
		   2);
	/* host arena -> device, device -> pageable (a piece alone) */
	arena_copy alone[2] = {{D, H, K, K, K, 1}, {P, D, K, K, K, 1}};
	int how_a[2] = {JOIN, ALONE};
	case_order("a pageable piece after a batched one", mem, sizeof mem,
		   alone, how_a, 2);
	/* a chain through a bounce, both batched */
	arena_copy chain[2] = {{B, D, K, K, K, 1}, {D2, B, K, K, K, 1}};
	int how_c[2] = {JOIN, JOIN};
	case_order("a chain through a bounce in one batch", mem, sizeof mem,
		   chain, how_c, 2);
	/* the swap: rows of 4 views (pitch 64) out to a bounce, then A's in
	 * over them, as one vector */
	arena_copy swap[2] = {{B, D, 32, 64, 32, 4}, {D, A, 64, 32, 32, 4}};
	case_order("the park's swap in one vector", mem, sizeof mem, swap,
		   how_c, 2);
}

/* Rows of nv views (W rows of 256 bytes, `heads` runs each) in blocks of
 * 128 rows from a host span: every block a 2D copy a view. */
static size_t restore_vector(arena_copy *v, uintptr_t live, uintptr_t host,
			     int nv, int heads, int blocks)
{
	size_t W = 32768, inner = 256, n = 0, blk = 128;
	for (int j = 0; j < blocks; j++)
		for (int i = 0; i < nv; i++)
			v[n++] = (arena_copy){
			    (void *)(live + (size_t)i * heads * W * inner +
				     j * blk * inner),
			    (void *)(host + ((size_t)j * nv + i) * heads * blk *
						inner),
			    W * inner,
			    blk * inner,
			    blk * inner,
			    heads};
	return n;
}

static void test_full_batches(void)
{
	enum { NV = 32, HEADS = 8, BLOCKS = 64, N = NV * BLOCKS };
	static arena_copy v[N], pend[256];
	static uintptr_t span[256][4];
	size_t n = restore_vector(v, (uintptr_t)1 << 40, (uintptr_t)1 << 44, NV,
				  HEADS, BLOCKS);
	arena_batch b = {.pend = pend, .span = span, .max = 256};
	int early = 0, reps = 20;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int r = 0; r < reps; r++)
		for (size_t i = 0; i < n; i++) {
			if (arena_batch_before(&b, &v[i], 1)) {
				early += b.n != b.max;
				b.n = 0;
			}
			arena_batch_add(&b, &v[i]);
		}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK(early == 0,
	      "independent copies fill their batches: %d flushed "
	      "early",
	      early);
	double ns = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 +
		     (double)(t1.tv_nsec - t0.tv_nsec)) /
		    ((double)reps * (double)n);
	printf("test_arena_batch: the rules cost %.0f ns a piece (a restore of "
	       "%d views x %d heads, %d blocks, batches of 256)\n",
	       ns, NV, HEADS, BLOCKS);
	/* the same views' rows, blocks of a second host span going into the
	 * same rows: the first conflicting piece flushes */
	b.n = 0;
	arena_batch_add(&b, &v[0]);
	arena_copy again = v[0];
	again.src = (char *)again.src + ((size_t)1 << 30);
	CHECK(arena_batch_before(&b, &again, 1),
	      "a piece writing rows a gathered piece writes flushes first");
	CHECK(!arena_batch_before(&b, &v[NV], 1),
	      "the next block of the same view does not");
}

int main(void)
{
	test_meet();
	test_orders();
	test_full_batches();
	return t_done("test_arena_batch");
}
