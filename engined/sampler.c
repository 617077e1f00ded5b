/* sampler.c: the engine's sampler (eng.h): the parameters and the random
 * stream. The rule itself is the kernels' (kern_ops.sample, ops.h), so a
 * token picked on the host (eng_sample) and one picked on the device
 * (eng_model_sample) agree for the same draw and logits. The stream is
 * xoshiro256** seeded once from the request's seed through SplitMix64;
 * greedy picks draw nothing. */
#include <stdlib.h>

#include "eng.h"
#include "eng_int.h"
#include "moor.h"

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
	s->k = (kern_sampling){.temperature = p->temperature,
			       .top_k = p->top_k,
			       .top_p = p->top_p,
			       .min_p = p->min_p};
	uint64_t x = p->seed;
	for (int i = 0; i < 4; i++)
		s->s[i] = splitmix(&x);
	if (!eng_sampler_greedy(s) &&
	    !(s->work = malloc(kern_sample_work_bytes(vocab)))) {
		free(s);
		return NULL;
	}
	return s;
}

void eng_sampler_free(eng_sampler *s)
{
	if (!s)
		return;
	free(s->work);
	free(s);
}

int eng_sampler_greedy(const struct eng_sampler *s)
{
	return s->k.temperature <= 0.0f || s->k.top_k == 1;
}

uint64_t eng_sampler_draw(eng_sampler *s)
{
	return eng_sampler_greedy(s) ? 0 : next(s->s);
}

int32_t eng_sample(eng_sampler *s, const float *logits)
{
	return kern_sample_host(logits, s->vocab, &s->k, eng_sampler_draw(s),
				s->work);
}
