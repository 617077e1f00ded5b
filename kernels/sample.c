/* sample.c: the host implementation of sample()'s rule (ops.h), used by the
 * CPU backend's sample op and by eng_sample(); the CUDA backend implements
 * the same rule on the device with the same arithmetic (sample_rule.h). */
#include <stdlib.h>

#include "moor.h"
#include "ops.h"
#include "sample_rule.h"

typedef struct cand {
	float key;
	int32_t id;
} cand;

double kern_exp_det(double x)
{
	return ksr_exp(x);
}

float kern_fill_value(uint64_t seed, uint64_t i, float lo, float hi)
{
	return ksr_fill(seed, i, lo, hi);
}

size_t kern_sample_work_bytes(int V)
{
	if (V <= 0)
		return 0;
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
	cand *c = work;
	double *w = (double *)(c + V);
	double *P = w + V;
	for (int i = 0; i < V; i++)
		c[i] = (cand){ksr_key(logits[i]), i};
	qsort(c, (size_t)V, sizeof *c, cmp_cand);
	int n = p->top_k > 0 && p->top_k < V ? p->top_k : V;
	double mx = c[0].key;
	if (mx != mx || mx == INFINITY || mx == -INFINITY)
		return c[0].id; /* nothing to weigh against */
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
