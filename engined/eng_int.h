/* eng_int.h: what the engine's own files share beyond eng.h (the sampler's
 * insides, for the model's device sampling). Not for callers. */
#ifndef ENG_INT_H
#define ENG_INT_H

#include <stdint.h>

#include "ops.h"

struct eng_sampler {
	int vocab;
	kern_sampling k;
	uint64_t s[4]; /* xoshiro256** state */
	void *work;    /* kern_sample_work_bytes(vocab), host; NULL if greedy */
};

/* Greedy: the rule draws nothing. */
int eng_sampler_greedy(const struct eng_sampler *s);
/* The next 64 random bits (0 and no draw when greedy). */
uint64_t eng_sampler_draw(struct eng_sampler *s);

#endif
