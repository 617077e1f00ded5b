/* sample.c: the host implementation of sample()'s rule (ops.h), used by the
 * CPU backend's sample op and by eng_sample(); the CUDA backend implements
 * the same rule on the device with the same arithmetic (sample_rule.h). */
#include <stdlib.h>
#include <string.h>

#include "moor.h"
#include "ops.h"
#include "sample_rule.h"

double kern_exp_det(double x)
{
	return ksr_exp(x);
}

double kern_log_det(double x)
{
	return ksr_log(x);
}

float kern_fill_value(uint64_t seed, uint64_t i, float lo, float hi)
{
	return ksr_fill(seed, i, lo, hi);
}

/* ---- the candidates in the rule's order, without sorting them all ----
 *
 * The rule (ops.h) orders the candidates by (logit desc, index asc) and
 * sums their weights in that order, so its bits depend on the order of
 * every candidate whose weight can change a sum, but on the indices only
 * through the token it picks. So the keys alone are sorted, mapped to 32
 * bits that grow as the key falls (kdesc): ascending kdesc is the rule's
 * order of the keys, and the candidate at a position is the j-th index in
 * index order among those of its key, j its distance from the first
 * position of that key (id_at).
 *
 * kern_sample_host below sorts only the first np candidates of that order
 * (a histogram selection gathers their keys, an LSD radix sort orders
 * them), where np is top_k's n cut further to the end of the block of the
 * last candidate whose weight is not negligible: x = (l - mx) /
 * temperature >= -50 (the x the rule computes). Every candidate past that
 * block has x < -50 and weighs under 1.5 * 2^-72 (kern_exp_det's 2^n with
 * n <= -72 times e^r < 1.5), so a whole block of them sums to under 2^-63
 * while the prefix it is added to holds w_0 = 1: half an ulp of P_b >= 1
 * is 2^-53, the add gives P_b back, and C(k) = C(np) for every k >= np.
 * Where that argument does not settle a step (a min_p below 2^-60 walking
 * past np, the draw's fallback past np), the call starts again with every
 * candidate sorted. The weights run on vector lanes (AVX-512F, AVX2)
 * where the CPU has them, the same operations as ksr_exp lane by lane;
 * every sum stays the rule's sequential one.
 *
 * test_kern_sample_exact holds the tokens to the first implementation
 * (a qsort of every candidate, kept in the test) and the weights to
 * ksr_exp by memcmp. */

#define RDX_BITS 11
#define RDX_N (1 << RDX_BITS)
#define SEL_N 65536 /* the selection's histogram: the top 16 bits of kdesc */

/* Branch-free: the sign of a logit is a coin toss to the predictor. */
static uint32_t kdesc(float k)
{
	uint32_t u;
	memcpy(&u, &k, sizeof u);
	uint32_t ord = u ^ (-(u >> 31) | 0x80000000u);
	return ~ord;
}

static float key_of(uint32_t d)
{
	uint32_t ord = ~d;
	uint32_t u = ord ^ (((ord >> 31) - 1u) | 0x80000000u);
	float k;
	memcpy(&k, &u, sizeof k);
	return k;
}

/* ksr_exp (sample_rule.h) with its two branches as selects, so that the
 * compiler can run it on vector lanes: the same operations on the same x,
 * hence the same bits (IEEE operations are the same on a lane and in a
 * scalar register, and -ffp-contract=off keeps every product rounded). */
static inline double exp_sel(double x)
{
	int ok = x > -745.0; /* NaN too: 0 */
	double y = ok ? x : 0.0;
	y = y > 709.0 ? 709.0 : y;
	const double magic = 6755399441055744.0; /* 1.5 * 2^52 */
	double t = y * 1.4426950408889634074;
	double nd = (t + magic) - magic;
	const double ln2_hi = 6.93147180369123816490e-01;
	const double ln2_lo = 1.90821492927058770002e-10;
	double r = y - nd * ln2_hi;
	r = r - nd * ln2_lo;
	double p = 1.6059043836821614599e-10;
	p = p * r + 2.0876756987868098979e-09;
	p = p * r + 2.5052108385441718775e-08;
	p = p * r + 2.7557319223985890653e-07;
	p = p * r + 2.7557319223985890653e-06;
	p = p * r + 2.4801587301587301587e-05;
	p = p * r + 1.9841269841269841270e-04;
	p = p * r + 1.3888888888888888889e-03;
	p = p * r + 8.3333333333333333333e-03;
	p = p * r + 4.1666666666666666667e-02;
	p = p * r + 1.6666666666666666667e-01;
	p = p * r + 5.0000000000000000000e-01;
	p = p * r + 1.0;
	p = p * r + 1.0;
	int64_t n = (int64_t)nd;
	int64_t n1 = n / 2, n2 = n - n1;
	uint64_t b1 = (uint64_t)(n1 + 1023) << 52, b2 = (uint64_t)(n2 + 1023)
							<< 52;
	double s1, s2;
	memcpy(&s1, &b1, sizeof s1);
	memcpy(&s2, &b2, sizeof s2);
	double e = (p * s1) * s2;
	return ok ? e : 0.0;
}

/* w[i] = ksr_exp(x of the key of c[i]) for i < m. */
static inline void weights_body(double *w, const uint32_t *c, int m, double mx,
				double temp)
{
	for (int i = 0; i < m; i++) {
		uint32_t ord = ~c[i];
		uint32_t u = ord ^ (((ord >> 31) - 1u) | 0x80000000u);
		float k;
		memcpy(&k, &u, sizeof k);
		w[i] = exp_sel(((double)k - mx) / temp);
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
typedef double v4d __attribute__((vector_size(32)));
typedef int64_t v4l __attribute__((vector_size(32)));
typedef uint64_t v4u __attribute__((vector_size(32)));
typedef uint32_t v4w __attribute__((vector_size(16)));
typedef float v4f __attribute__((vector_size(16)));
typedef double v8d __attribute__((vector_size(64)));
typedef int64_t v8l __attribute__((vector_size(64)));
typedef uint64_t v8u __attribute__((vector_size(64)));
typedef uint32_t v8w __attribute__((vector_size(32)));
typedef float v8f __attribute__((vector_size(32)));

/* exp_sel on four (AVX2) or eight (AVX-512) lanes, operation for
 * operation: the selects as masks, n from the bits of t + 1.5 * 2^52
 * (= 1.5 * 2^52 + n exactly, as nd's subtraction says), n / 2 rounded
 * toward zero as C's division does. The two widths are one text: VEXP
 * and VWEIGHTS make each from its vector types (D doubles, L and U their
 * signed and unsigned words, W and F the 32-bit keys) and width N. */
#define VEXP(TGT, NAME, D, L, U)                                               \
	__attribute__((target(TGT))) static inline D NAME(D x)                 \
	{                                                                      \
		const D magic = (D){0} + 6755399441055744.0;                   \
		L ok = x > -745.0;                                             \
		D y = (D)((L)x & ok);                                          \
		L big = y > 709.0;                                             \
		D c709 = (D){0} + 709.0;                                       \
		y = (D)(((L)y & ~big) | ((L)c709 & big));                      \
		D t = y * 1.4426950408889634074;                               \
		D tm = t + magic;                                              \
		D nd = tm - magic;                                             \
		D r = y - nd * 6.93147180369123816490e-01;                     \
		r = r - nd * 1.90821492927058770002e-10;                       \
		D p = r * 1.6059043836821614599e-10 + 2.0876756987868098979e-09; \
		p = p * r + 2.5052108385441718775e-08;                         \
		p = p * r + 2.7557319223985890653e-07;                         \
		p = p * r + 2.7557319223985890653e-06;                         \
		p = p * r + 2.4801587301587301587e-05;                         \
		p = p * r + 1.9841269841269841270e-04;                         \
		p = p * r + 1.3888888888888888889e-03;                         \
		p = p * r + 8.3333333333333333333e-03;                         \
		p = p * r + 4.1666666666666666667e-02;                         \
		p = p * r + 1.6666666666666666667e-01;                         \
		p = p * r + 5.0000000000000000000e-01;                         \
		p = p * r + 1.0;                                               \
		p = p * r + 1.0;                                               \
		L n = (L)tm - (L)magic;                                        \
		/* n in [-1075, 1023]: + 2048 keeps the shifted value positive */ \
		L n1 = (L)((U)(n + (L)((U)n >> 63) + 2048) >> 1) - 1024;       \
		L n2 = n - n1;                                                 \
		D s1 = (D)((U)(n1 + 1023) << 52);                              \
		D s2 = (D)((U)(n2 + 1023) << 52);                              \
		D e = (p * s1) * s2;                                           \
		return (D)((L)e & ok);                                         \
	}

#define VWEIGHTS(TGT, NAME, EXP, N, D, W, F)                                   \
	__attribute__((target(TGT))) static void NAME(                         \
	    double *w, const uint32_t *c, int m, double mx, double temp)       \
	{                                                                      \
		int i = 0;                                                     \
		for (; i + N <= m; i += N) {                                   \
			W d;                                                   \
			memcpy(&d, c + i, sizeof d);                           \
			W ord = ~d;                                            \
			W u = ord ^ (((ord >> 31) - 1u) | 0x80000000u);        \
			D k = __builtin_convertvector((F)u, D);                \
			D x = (k - mx) / temp;                                 \
			D e = EXP(x);                                          \
			memcpy(w + i, &e, sizeof e);                           \
		}                                                              \
		weights_body(w + i, c + i, m - i, mx, temp);                   \
	}

VEXP("avx2", exp4, v4d, v4l, v4u)
VWEIGHTS("avx2", weights_avx2, exp4, 4, v4d, v4w, v4f)
VEXP("avx512f", exp8, v8d, v8l, v8u)
VWEIGHTS("avx512f", weights_avx512f, exp8, 8, v8d, v8w, v8f)
#endif

static void weights(double *w, const uint32_t *c, int m, double mx, double temp)
{
#if defined(__x86_64__) && defined(__GNUC__)
	/* asked on every call (a few loads against a call's
	 * milliseconds), so that no static is shared between threads */
	int isa = 0; /* 1 AVX2, 2 AVX-512F */
	if (!getenv("MOOR_CPU_NO_AVX2") && __builtin_cpu_supports("avx2"))
		isa = !getenv("MOOR_CPU_NO_AVX512") &&
			      __builtin_cpu_supports("avx512f")
			  ? 2
			  : 1;
	if (isa == 2) {
		weights_avx512f(w, c, m, mx, temp);
		return;
	}
	if (isa == 1) {
		weights_avx2(w, c, m, mx, temp);
		return;
	}
#endif
	weights_body(w, c, m, mx, temp);
}

/* Test seam (test_kern_sample_exact; not in ops.h): the weights of c[0..m)
 * (kdesc keys) as kern_sample_host computes them, to be held to ksr_exp bit for
 * bit. */
void kern_sample_weights_seam(double *w, const uint32_t *c, int m, double mx,
			      double temp);
void kern_sample_weights_seam(double *w, const uint32_t *c, int m, double mx,
			      double temp)
{
	weights(w, c, m, mx, temp);
}

/* The scratch (kern_sample_work_bytes): two candidate arrays [V], w [V],
 * P [V / B + 2], the radix sort's histograms and the selection's. */
typedef struct smp_work {
	uint32_t *a, *b; /* kdesc keys */
	double *w, *P;
	uint32_t *hist; /* [3][RDX_N] */
	uint32_t *sel;	/* [SEL_N] */
} smp_work;

size_t kern_sample_work_bytes(int V)
{
	if (V <= 0)
		return 0;
	return (size_t)V * (2 * sizeof(uint32_t) + sizeof(double)) +
	       ((size_t)V / KERN_SAMPLE_BLOCK + 2) * sizeof(double) +
	       (3 * RDX_N + SEL_N) * sizeof(uint32_t);
}

static smp_work carve(void *work, int V)
{
	smp_work s;
	s.w = work;
	s.P = s.w + V;
	s.a = (uint32_t *)(s.P + V / KERN_SAMPLE_BLOCK + 2);
	s.b = s.a + V;
	s.hist = s.b + V;
	s.sel = s.hist + 3 * RDX_N;
	return s;
}

/* LSD radix sort of the keys x[0..m), 11 + 11 + 10 bits; a pass whose
 * digit is the same for all is skipped. tmp holds m. Returns where the
 * sorted keys are (x or tmp). */
static uint32_t *radix_sort(uint32_t *x, uint32_t *tmp, int m, uint32_t *h)
{
	memset(h, 0, 3 * RDX_N * sizeof *h);
	for (int i = 0; i < m; i++) {
		uint32_t d = x[i];
		h[d & (RDX_N - 1)]++;
		h[RDX_N + ((d >> RDX_BITS) & (RDX_N - 1))]++;
		h[2 * RDX_N + (d >> 2 * RDX_BITS)]++;
	}
	for (int p = 0; p < 3; p++) {
		uint32_t *hp = h + p * RDX_N, sum = 0;
		int skip = 0;
		for (int j = 0; j < RDX_N; j++) {
			uint32_t c = hp[j];
			if (c == (uint32_t)m)
				skip = 1;
			hp[j] = sum;
			sum += c;
		}
		if (skip)
			continue;
		int sh = p * RDX_BITS;
		for (int i = 0; i < m; i++) {
			uint32_t v = x[i];
			tmp[hp[(v >> sh) & (RDX_N - 1)]++] = v;
		}
		uint32_t *t = x;
		x = tmp;
		tmp = t;
	}
	return x;
}

/* The keys of logits in index order into s->a, the histogram of their top
 * 16 bits into s->sel; returns the first candidate in the rule's order as
 * kdesc << 32 | index. */
static uint64_t build(const float *logits, int V, smp_work *s)
{
	uint32_t *sel = s->sel;
	memset(sel, 0, SEL_N * sizeof *sel);
	uint64_t first = UINT64_MAX;
	for (int i = 0; i < V; i++) {
		uint32_t d = kdesc(ksr_key(logits[i]));
		uint64_t v = (uint64_t)d << 32 | (uint32_t)i;
		s->a[i] = d;
		sel[d >> 16]++;
		first = v < first ? v : first;
	}
	return first;
}

/* Gathers into out every key of x[0..m) whose top 16 bits are at most
 * those of the want-th in the rule's order (1 <= want <= m; sel: build()'s
 * histogram of x): a superset of the first want, holding all ties of the
 * want-th. Returns how many. */
static int select_top(const uint32_t *x, int m, int want, uint32_t *out,
		      const uint32_t *sel)
{
	uint32_t cum = 0;
	int bkt = 0;
	for (; bkt < SEL_N - 1; bkt++) {
		cum += sel[bkt];
		if (cum >= (uint32_t)want)
			break;
	}
	int g = 0;
	for (int i = 0; i < m; i++) {
		out[g] = x[i];
		g += (int)(x[i] >> 16) <= bkt;
	}
	return g;
}

/* x of the rule for the key kdesc d. */
static double x_of(uint32_t d, double mx, double temp)
{
	return ((double)key_of(d) - mx) / temp;
}

/* How many candidates can have x >= -50, at least: those whose top 16
 * bits of kdesc are at most those of the last key with x >= -50, found by
 * bisection over kdesc (x falls as kdesc grows; kdesc(mx) has x = 0,
 * kdesc(-inf) has x = -inf for a finite temperature). */
static int count_live(const uint32_t *sel, uint32_t dmx, double mx, double temp)
{
	uint32_t lo = dmx, hi = kdesc(-INFINITY);
	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (x_of(mid, mx, temp) >= -50.0)
			lo = mid;
		else
			hi = mid;
	}
	int64_t m = 0;
	for (uint32_t b = 0; b <= lo >> 16; b++)
		m += sel[b];
	return (int)m;
}

/* The index of the candidate at position i of the rule's order, given
 * the sorted keys ks[0..i]: the j-th index with key ks[i], where j counts
 * the equal keys before position i. */
static int32_t id_at(const float *logits, int V, const uint32_t *ks, int i)
{
	uint32_t d = ks[i];
	int j = i;
	while (j > 0 && ks[j - 1] == d)
		j--;
	j = i - j;
	for (int t = 0; t < V; t++)
		if (kdesc(ksr_key(logits[t])) == d && j-- == 0)
			return t;
	return 0; /* cannot happen: ks holds keys of logits */
}

/* Walks C(1), C(2), ... of ops.h's rule (the running in-block sum r is the
 * same sequence of adds a fresh sum of the block's start would make). */
typedef struct walk {
	const double *w, *P;
	int k;	  /* C(k) is the current value */
	double r; /* R_k */
} walk;

static double walk_next(walk *a)
{
	int i = a->k++;
	if (i % KERN_SAMPLE_BLOCK == 0)
		a->r = 0.0;
	a->r += a->w[i];
	int b = a->k / KERN_SAMPLE_BLOCK;
	/* at a block's end R_k starts again from 0: C(k) = P_b + 0 */
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

/* The rule over the first np of the n candidates (np == n: all of them).
 * -1 where the first np do not settle the token (see above). */
static int32_t sample_np(const float *logits, int V, int n, int np,
			 const kern_sampling *p, uint64_t draw, double mx,
			 smp_work *s)
{
	uint32_t *c;
	if (np < V) {
		int g = select_top(s->a, V, np, s->b, s->sel);
		c = radix_sort(s->b, s->a, g, s->hist);
	} else {
		c = radix_sort(s->a, s->b, V, s->hist);
	}
	double *w = s->w, *P = s->P;
	double temp = p->temperature;
	weights(w, c, np, mx, temp);
	if (np < n && w[0] != 1.0)
		return -1; /* cannot happen: x = 0 gives exactly 1 */
	int nb = np / KERN_SAMPLE_BLOCK;
	P[0] = 0.0;
	for (int b = 0; b < nb; b++) {
		double sum = 0.0;
		for (int i = b * KERN_SAMPLE_BLOCK;
		     i < (b + 1) * KERN_SAMPLE_BLOCK; i++)
			sum += w[i];
		P[b + 1] = P[b] + sum;
	}
	int kept = n;
	if (p->min_p > 0) {
		int k = 1;
		while (k < np && w[k] >= (double)p->min_p)
			k++;
		if (k == np && np < n && !((double)p->min_p > 0x1p-60))
			return -1; /* a weight past np might still pass */
		kept = k;
	}
	/* C(n) = C(np): np < n only where the blocks past np add nothing */
	double cn = prefix_at(w, P, np);
	if (p->top_p > 0 && p->top_p < 1) {
		double target = (double)p->top_p * cn;
		walk a = {w, P, 0, 0.0};
		int k = 1;
		while (walk_next(&a) < target && k < kept) {
			if (k == np)
				return -1; /* C(np) >= target: not reached */
			k++;
		}
		kept = k;
	}
	double total = kept < np ? prefix_at(w, P, kept) : cn;
	double u = (double)(draw >> 11) * (1.0 / 9007199254740992.0) * total;
	walk a = {w, P, 0, 0.0};
	int lim = kept < np ? kept : np;
	for (int i = 0; i < lim; i++)
		if (u < walk_next(&a))
			return id_at(logits, V, c, i);
	if (kept > np)
		return -1; /* the last kept is past np */
	return id_at(logits, V, c, kept - 1);
}

int32_t kern_sample_host(const float *logits, int V, const kern_sampling *p,
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
	smp_work s = carve(work, V);
	uint64_t first = build(logits, V, &s);
	int n = p->top_k > 0 && p->top_k < V ? p->top_k : V;
	double mx = key_of((uint32_t)(first >> 32));
	if (mx != mx || mx == INFINITY || mx == -INFINITY)
		return (int32_t)(uint32_t)first; /* nothing to weigh against */
	double temp = p->temperature;
	int np = n;
	if (temp == temp && temp < INFINITY) {
		/* at least the candidates with x >= -50, x computed as the
		 * rule computes it (never fewer than 1: the first has x = 0) */
		int m1 = count_live(s.sel, (uint32_t)(first >> 32), mx, temp);
		int64_t end = ((int64_t)m1 + KERN_SAMPLE_BLOCK - 1) /
			      KERN_SAMPLE_BLOCK * KERN_SAMPLE_BLOCK;
		if (end < np)
			np = (int)end;
	}
	int32_t t = sample_np(logits, V, n, np, p, draw, mx, &s);
	if (t < 0) {
		/* select_top and radix_sort moved s.a: build it again */
		build(logits, V, &s);
		t = sample_np(logits, V, n, n, p, draw, mx, &s);
	}
	return t;
}

/* ---- logprobs() ----
 *
 * One pass finds mx and the n_top first candidates in the rule's order
 * (kdesc << 32 | index ascending, kept sorted by insertion: past the first
 * few hundred logits a candidate rarely beats the last kept); a second
 * sums the weights a block at a time, the block's keys through weights()
 * at temperature 1 (x / 1 is x: the rule's x), the block's sum in order. */
int kern_logprobs_host(const float *logits, int V, int32_t tok, int n_top,
		       float *lp, int32_t *ids)
{
	if (!logits || V <= 0 || tok < 0 || tok >= V || n_top < 0 ||
	    n_top > KERN_LOGPROBS_MAX || n_top > V || !lp || (n_top && !ids))
		return MOOR_ERANGE;
	uint64_t top[KERN_LOGPROBS_MAX + 1];
	int kept = 0;
	uint32_t dmx = UINT32_MAX;
	for (int i = 0; i < V; i++) {
		uint32_t d = kdesc(ksr_key(logits[i]));
		dmx = d < dmx ? d : dmx;
		if (!n_top)
			continue;
		uint64_t v = (uint64_t)d << 32 | (uint32_t)i;
		if (kept == n_top && v >= top[kept - 1])
			continue;
		int j = kept < n_top ? kept++ : n_top - 1;
		for (; j > 0 && top[j - 1] > v; j--)
			top[j] = top[j - 1];
		top[j] = v;
	}
	float mx = key_of(dmx);
	double lnS = 0.0;
	if (mx > -INFINITY && mx < INFINITY) {
		uint32_t c[KERN_SAMPLE_BLOCK];
		double w[KERN_SAMPLE_BLOCK];
		double S = 0.0;
		for (int b0 = 0; b0 < V; b0 += KERN_SAMPLE_BLOCK) {
			int m = V - b0 < KERN_SAMPLE_BLOCK ? V - b0
							   : KERN_SAMPLE_BLOCK;
			for (int i = 0; i < m; i++)
				c[i] = kdesc(ksr_key(logits[b0 + i]));
			weights(w, c, m, mx, 1.0);
			double r = 0.0;
			for (int i = 0; i < m; i++)
				r += w[i];
			S += r;
		}
		lnS = ksr_log(S); /* S >= 1: mx's own weight is 1 */
	}
	lp[0] = ksr_lp(ksr_key(logits[tok]), mx, lnS);
	for (int r = 0; r < n_top; r++) {
		ids[r] = (int32_t)(uint32_t)top[r];
		lp[1 + r] = ksr_lp(key_of((uint32_t)(top[r] >> 32)), mx, lnS);
	}
	return 0;
}
