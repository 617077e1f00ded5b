/* test_kern_sample_exact: kern_sample_host (kernels/sample.c: a histogram
 * selection and a radix sort of only the candidates that can matter) picks
 * the same token as the rule's first implementation, which qsorts every
 * candidate; that implementation is kept below, verbatim, as ref_sample.
 *
 * Over random logit vectors of V = 1 .. 248320 (uniform, wide, peaked so
 * that most candidates weigh nothing, bf16-rounded with many ties, few
 * distinct values, -inf, NaN, -0 against +0, huge values, all equal) and
 * random parameters (temperature 1e-30 .. 1e30, +inf and NaN; top_k 0, 1,
 * 2, around a block, V - 1, V, past V; top_p off, 1e-6 .. 0.999999; min_p
 * off, 1e-30 .. 1) and draws (0, all ones, random), the tokens must be
 * equal; the sampler returns no logprob, so the token is the whole result.
 * A few cases go through the CPU backend's sample op too. Last, the ms per
 * call of both (thread CPU time: the machine is shared) at the tiny
 * model's and the 248k family's vocabularies. */
#include "kt.h"

#include <time.h>

#include "sample_rule.h"

/* ---- the reference: kernels/sample.c before the selection ---- */

typedef struct cand {
	float key;
	int32_t id;
} cand;

static size_t ref_work_bytes(int V)
{
	return (size_t)V * (sizeof(cand) + sizeof(double)) +
	       ((size_t)V / KERN_SAMPLE_BLOCK + 2) * sizeof(double);
}

static int cmp_cand(const void *a, const void *b)
{
	const cand *x = a, *y = b;
	if (x->key != y->key)
		return x->key > y->key ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

typedef struct walk {
	const double *w, *P;
	int k;
	double r;
} walk;

static double walk_next(walk *a)
{
	int i = a->k++;
	if (i % KERN_SAMPLE_BLOCK == 0)
		a->r = 0.0;
	a->r += a->w[i];
	int b = a->k / KERN_SAMPLE_BLOCK;
	return a->k % KERN_SAMPLE_BLOCK == 0 ? a->P[b] + 0.0 : a->P[b] + a->r;
}

static double prefix_at(const double *w, const double *P, int k)
{
	int b = k / KERN_SAMPLE_BLOCK;
	double r = 0.0;
	for (int i = b * KERN_SAMPLE_BLOCK; i < k; i++)
		r += w[i];
	return P[b] + r;
}

static int32_t ref_sample(const float *logits, int V, const kern_sampling *p,
			  uint64_t draw, void *work)
{
	if (V <= 0)
		return 0;
	if (p->temperature <= 0.0f || p->top_k == 1) {
		int32_t best = 0;
		float bk = ksr_key(logits[0]);
		for (int i = 1; i < V; i++) {
			float k = ksr_key(logits[i]);
			if (k > bk) {
				bk = k;
				best = i;
			}
		}
		return best;
	}
	cand *c = work;
	double *w = (double *)(c + V);
	double *P = w + V;
	for (int i = 0; i < V; i++)
		c[i] = (cand){ksr_key(logits[i]), i};
	qsort(c, (size_t)V, sizeof *c, cmp_cand);
	int n = p->top_k > 0 && p->top_k < V ? p->top_k : V;
	double mx = c[0].key;
	if (mx != mx || mx == INFINITY || mx == -INFINITY)
		return c[0].id;
	double temp = p->temperature;
	for (int i = 0; i < n; i++)
		w[i] = ksr_exp(((double)c[i].key - mx) / temp);
	int nb = n / KERN_SAMPLE_BLOCK;
	P[0] = 0.0;
	for (int b = 0; b < nb; b++) {
		double s = 0.0;
		for (int i = b * KERN_SAMPLE_BLOCK;
		     i < (b + 1) * KERN_SAMPLE_BLOCK; i++)
			s += w[i];
		P[b + 1] = P[b] + s;
	}
	int kept = n;
	if (p->min_p > 0) {
		int k = 1;
		while (k < n && w[k] >= (double)p->min_p)
			k++;
		kept = k;
	}
	if (p->top_p > 0 && p->top_p < 1) {
		double target = (double)p->top_p * prefix_at(w, P, n);
		walk a = {w, P, 0, 0.0};
		int k = 1;
		while (walk_next(&a) < target && k < kept)
			k++;
		kept = k;
	}
	double total = prefix_at(w, P, kept);
	double u = (double)(draw >> 11) * (1.0 / 9007199254740992.0) * total;
	walk a = {w, P, 0, 0.0};
	for (int i = 0; i < kept; i++)
		if (u < walk_next(&a))
			return c[i].id;
	return c[kept - 1].id;
}

/* kernels/sample.c's test seam: its weights, on AVX2 four lanes at a time. */
void kern_sample_weights_seam(double *w, const uint32_t *c, int m, double mx,
			      double temp);

static float bf16(float x);

static uint32_t kdesc(float k)
{
	uint32_t u;
	memcpy(&u, &k, sizeof u);
	uint32_t ord = u & 0x80000000u ? ~u : u | 0x80000000u;
	return ~ord;
}

/* The weights against ksr_exp by memcmp, x from -inf to past the clamp,
 * NaN, subnormal results, over a length that leaves a scalar tail. */
static void check_weights(void)
{
	enum { M = 1003 };
	static uint32_t c[M];
	static float k[M];
	static double w[M], want[M];
	static const double temps[] = {1.0, 0.7,  1e-3,	    1e-30, 3.0,
				       1e6, 1e30, INFINITY, NAN};
	int bad = 0;
	for (int rep = 0; rep < 40; rep++) {
		for (int i = 0; i < M; i++) {
			uint64_t r = kt_next() % 20;
			float v = r == 0   ? -INFINITY
				  : r == 1 ? 0.0f
				  : r == 2 ? -0.0f
				  : r == 3 ? kt_unif(-1e-38f, 1e-38f)
				  : r < 8  ? kt_unif(-1000, 1000)
				  : r < 12 ? bf16(kt_unif(-50, 50))
					   : kt_unif(-20, 20);
			k[i] = ksr_key(v);
			c[i] = kdesc(k[i]);
		}
		double mx = rep % 3 == 0 ? 0.0 : kt_unif(-30, 30);
		double temp = temps[rep % (sizeof temps / sizeof *temps)];
		for (int i = 0; i < M; i++)
			want[i] = ksr_exp(((double)k[i] - mx) / temp);
		kern_sample_weights_seam(w, c, M, mx, temp);
		for (int i = 0; i < M; i++)
			bad += memcmp(&w[i], &want[i], sizeof w[i]) != 0;
	}
	ASSERT(bad == 0, "%d weights differ from ksr_exp's bits", bad);
}

/* ---- the cases ---- */

#define VMAX 248320

static void *work_ref, *work_new;
static int cases, distinct_pick;

static float bf16(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
	memcpy(&x, &u, 4);
	return x;
}

/* One of the logit shapes, kind 0 .. 9. */
static void make_logits(float *l, int V, int kind)
{
	int nan_fill;
	switch (kind) {
	case 0: /* uniform */
		kt_fill(l, (size_t)V, -10, 10);
		break;
	case 1: /* wide: most candidates weigh nothing at temperature 1 */
		kt_fill(l, (size_t)V, -200, 30);
		break;
	case 2: /* peaked: a few near the top, the rest far below */
		for (int i = 0; i < V; i++)
			l[i] =
			    kt_next() % 64 ? kt_unif(-80, -40) : kt_unif(-3, 3);
		break;
	case 3: /* bf16-rounded: many ties */
		for (int i = 0; i < V; i++)
			l[i] = bf16(kt_unif(-12, 12));
		break;
	case 4: /* a few distinct values */
		for (int i = 0; i < V; i++)
			l[i] = (float)(int)(kt_next() % 7) - 3.0f;
		break;
	case 5: /* -inf, NaN, -0 and +0 among uniform values */
		for (int i = 0; i < V; i++) {
			uint64_t r = kt_next() % 16;
			l[i] = r == 0	? -INFINITY
			       : r == 1 ? NAN
			       : r == 2 ? -0.0f
			       : r == 3 ? 0.0f
					: kt_unif(-4, 1);
		}
		break;
	case 6: /* huge magnitudes */
		for (int i = 0; i < V; i++)
			l[i] = kt_unif(-1, 1) * 1e30f;
		break;
	case 7: /* all equal */
		for (int i = 0; i < V; i++)
			l[i] = 1.5f;
		break;
	case 8: /* all -inf or all NaN, with one or two values or none */
		nan_fill = kt_next() % 2;
		for (int i = 0; i < V; i++)
			l[i] = nan_fill ? NAN : -INFINITY;
		if (kt_next() % 3) {
			l[kt_next() % (uint64_t)V] = 2.0f;
			l[kt_next() % (uint64_t)V] = 2.0f;
		}
		break;
	default: /* x near -50 at temperature 1: around the cut */
		for (int i = 0; i < V; i++)
			l[i] = kt_next() % 4
				   ? 10.0f - 50.0f + kt_unif(-1e-4f, 1e-4f)
				   : kt_unif(7, 10);
		l[kt_next() % (uint64_t)V] = 10.0f;
		break;
	}
}

static kern_sampling make_params(int V)
{
	static const float temps[] = {1e-30f, 1e-6f,	0.05f, 0.3f,  0.7f,
				      1.0f,   1.0f,	1.5f,  10.0f, 1e6f,
				      1e30f,  INFINITY, NAN,   -1.0f};
	static const float tops[] = {1.0f, 1.0f, 0.0f,	1e-6f,	   0.1f,
				     0.5f, 0.9f, 0.95f, 0.999999f, 2.0f};
	static const float mins[] = {0.0f,  0.0f,  0.0f, 1e-30f, 1e-20f,
				     1e-5f, 0.05f, 0.5f, 1.0f};
	int ks[] = {0, 0, 0, 1, 2, 5, 50, 255, 256, 257, 1000, V - 1, V, V + 5};
	kern_sampling p;
	p.temperature = temps[kt_next() % (sizeof temps / sizeof *temps)];
	p.top_p = tops[kt_next() % (sizeof tops / sizeof *tops)];
	p.min_p = mins[kt_next() % (sizeof mins / sizeof *mins)];
	p.top_k = ks[kt_next() % (sizeof ks / sizeof *ks)];
	return p;
}

static uint64_t make_draw(void)
{
	uint64_t r = kt_next() % 8;
	return r == 0 ? 0 : r == 1 ? UINT64_MAX : kt_next();
}

static void check(const float *l, int V, const kern_sampling *p, uint64_t draw,
		  int kind)
{
	int32_t want = ref_sample(l, V, p, draw, work_ref);
	int32_t got = kern_sample_host(l, V, p, draw, work_new);
	ASSERT(got == want,
	       "V %d, logits kind %d, temperature %g, top_k %d, top_p %g, "
	       "min_p %g, draw %016llx: token %d, the reference says %d",
	       V, kind, (double)p->temperature, p->top_k, (double)p->top_p,
	       (double)p->min_p, (unsigned long long)draw, got, want);
	if (want != ref_sample(l, V, &(kern_sampling){0}, 0, work_ref))
		distinct_pick++; /* not merely the argmax */
	cases++;
}

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void bench(float *l, int V)
{
	static const struct {
		const char *name;
		kern_sampling p;
	} ps[] = {
	    {"t 1", {1.0f, 0, 1.0f, 0.0f}},
	    {"t 0.7 top_p 0.9", {0.7f, 0, 0.9f, 0.0f}},
	    {"t 0.7 top_k 50", {0.7f, 50, 1.0f, 0.0f}},
	    {"t 1 min_p 0.05", {1.0f, 0, 1.0f, 0.05f}},
	    {"t 0.3 top_p 0.95", {0.3f, 0, 0.95f, 0.0f}},
	};
	/* logits shaped like a model's: a bulk near 0, a tail above */
	for (int i = 0; i < V; i++)
		l[i] = kt_next() % 1000 ? kt_unif(-6, 6) : kt_unif(6, 18);
	for (size_t j = 0; j < sizeof ps / sizeof *ps; j++) {
		enum { reps = 10, more = 10 };
		int32_t tok[reps];
		uint64_t draw[reps];
		for (int r = 0; r < reps; r++)
			draw[r] = kt_next();
		double t0 = now_ms();
		for (int r = 0; r < reps; r++)
			tok[r] = ref_sample(l, V, &ps[j].p, draw[r], work_ref);
		double t1 = now_ms();
		for (int r = 0; r < reps * more; r++) {
			int32_t t = kern_sample_host(l, V, &ps[j].p,
						     draw[r % reps], work_new);
			ASSERT(t == tok[r % reps],
			       "bench %s: token %d, the "
			       "reference says %d",
			       ps[j].name, t, tok[r % reps]);
		}
		double t2 = now_ms();
		double t_old = (t1 - t0) / reps,
		       t_new = (t2 - t1) / (reps * more);
		printf("V %6d, %-18s: old %7.3f ms, new %7.3f ms a call\n", V,
		       ps[j].name, t_old, t_new);
	}
}

int main(void)
{
	kt_seed(47);
	float *l = malloc(VMAX * sizeof *l);
	work_ref = malloc(ref_work_bytes(VMAX));
	work_new = malloc(kern_sample_work_bytes(VMAX));
	ASSERT(l && work_ref && work_new, "out of memory");
	check_weights();
	static const struct {
		int V, vectors, draws;
	} plan[] = {
	    {1, 40, 20},     {2, 40, 20},    {3, 40, 20},     {17, 100, 20},
	    {255, 100, 20},  {256, 100, 20}, {257, 100, 20},  {1000, 100, 20},
	    {4096, 100, 10}, {65537, 20, 4}, {151669, 20, 3}, {248320, 10, 2},
	};
	for (size_t pi = 0; pi < sizeof plan / sizeof *plan; pi++) {
		int V = plan[pi].V;
		for (int v = 0; v < plan[pi].vectors; v++) {
			int kind = v % 10;
			make_logits(l, V, kind);
			for (int d = 0; d < plan[pi].draws; d++) {
				kern_sampling p = make_params(V);
				check(l, V, &p, make_draw(), kind);
			}
			/* the common settings on every vector */
			check(l, V, &(kern_sampling){0.7f, 0, 0.9f, 0.0f},
			      make_draw(), kind);
			check(l, V, &(kern_sampling){1.0f, 0, 1.0f, 0.0f},
			      make_draw(), kind);
			check(l, V, &(kern_sampling){1.0f, 40, 0.95f, 0.05f},
			      make_draw(), kind);
		}
	}
	/* through the CPU backend's sample op */
	kt_be be = kt_open(2);
	kern_limits lim = {.rows = 1, .vocab = 151669};
	ASSERT(be.o->reserve(be.ctx, &lim) == 0, "reserve");
	for (int v = 0; v < 10; v++) {
		make_logits(l, 151669, v);
		kern_sampling p = {0.8f, 0, 0.9f, 0.0f};
		uint64_t draw = kt_next();
		int32_t got = -1, dev = -1;
		int rc = be.o->sample(be.q, l, 151669, &p, draw, &dev, &got);
		int32_t want = ref_sample(l, 151669, &p, draw, work_ref);
		ASSERT(rc == 0 && got == want && dev == want,
		       "sample op, kind %d: rc %d, token %d (device %d), the "
		       "reference says %d",
		       v, rc, got, dev, want);
	}
	be.o->destroy(be.ctx);
	printf("%d cases, %d of them not the argmax\n", cases, distinct_pick);
	ASSERT(distinct_pick > cases / 4, "too few cases sample at all");
	bench(l, 151669);
	bench(l, 248320);
	free(l);
	free(work_ref);
	free(work_new);
	return kt_done("test_kern_sample_exact");
}
