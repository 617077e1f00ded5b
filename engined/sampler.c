/* sampler.c: token selection on the host (eng_sample).
 *
 * Greedy takes the lowest index among equal maxima. Otherwise the logits are
 * divided by the temperature, softmaxed in double, filtered by top-k, min-p
 * and top-p over a candidate list sorted by (probability desc, index asc)
 * (a total order, so the list is the same on every run), and one uniform
 * draw from a xoshiro256** stream seeded once per sampler picks the token.
 * The same seed and the same logits give the same tokens. */
#include <math.h>
#include <stdlib.h>

#include "eng.h"
#include "moor.h"

typedef struct cand {
	float logit;
	int32_t id;
} cand;

struct eng_sampler {
	int vocab;
	eng_sampling p;
	uint64_t s[4];
	cand *c;
	double *prob;
};

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t next(uint64_t *s)
{
	uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

eng_sampler *eng_sampler_new(int vocab, const eng_sampling *p)
{
	if (vocab <= 0 || !p)
		return NULL;
	eng_sampler *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->vocab = vocab;
	s->p = *p;
	uint64_t x = p->seed;
	for (int i = 0; i < 4; i++)
		s->s[i] = splitmix(&x);
	s->c = malloc((size_t)vocab * sizeof *s->c);
	s->prob = malloc((size_t)vocab * sizeof *s->prob);
	if (!s->c || !s->prob) {
		eng_sampler_free(s);
		return NULL;
	}
	return s;
}

void eng_sampler_free(eng_sampler *s)
{
	if (!s)
		return;
	free(s->c);
	free(s->prob);
	free(s);
}

static int32_t argmax(const float *x, int n)
{
	int32_t best = 0;
	for (int i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}

static int cmp_cand(const void *a, const void *b)
{
	const cand *x = a, *y = b;
	if (x->logit != y->logit)
		return x->logit > y->logit ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

int32_t eng_sample(eng_sampler *s, const float *logits)
{
	const eng_sampling *p = &s->p;
	int V = s->vocab;
	if (p->temperature <= 0.0f || p->top_k == 1)
		return argmax(logits, V);
	/* candidates: NaN logits never win */
	int n = 0;
	for (int i = 0; i < V; i++)
		if (logits[i] == logits[i])
			s->c[n++] = (cand){logits[i], i};
	if (n == 0)
		return 0;
	qsort(s->c, (size_t)n, sizeof *s->c, cmp_cand);
	if (p->top_k > 0 && p->top_k < n)
		n = p->top_k;
	double mx = s->c[0].logit, sum = 0;
	for (int i = 0; i < n; i++) {
		s->prob[i] = exp(((double)s->c[i].logit - mx) / p->temperature);
		sum += s->prob[i];
	}
	for (int i = 0; i < n; i++)
		s->prob[i] /= sum;
	if (p->min_p > 0) {
		double floor = p->min_p * s->prob[0];
		int k = 1;
		while (k < n && s->prob[k] >= floor)
			k++;
		n = k;
	}
	if (p->top_p > 0 && p->top_p < 1) {
		double acc = 0;
		int k = 0;
		while (k < n) {
			acc += s->prob[k++];
			if (acc >= p->top_p)
				break;
		}
		n = k;
	}
	double total = 0;
	for (int i = 0; i < n; i++)
		total += s->prob[i];
	/* 53 random bits -> [0, total) */
	double u = (double)(next(s->s) >> 11) * (1.0 / 9007199254740992.0) *
		   total;
	double acc = 0;
	for (int i = 0; i < n; i++) {
		acc += s->prob[i];
		if (u < acc)
			return s->c[i].id;
	}
	return s->c[n - 1].id;
}
