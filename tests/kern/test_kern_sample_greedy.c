/* test_kern_sample_greedy: the CPU backend's greedy sample() (blocks of
 * indices on the pool, four lanes each; kernels/cpu/backend.c) picks the
 * token of ops.h's rule, the lowest index among the maxima with NaN as
 * -inf, as kern_sample_host's sequential loop does, on 1, 2 and 3 threads.
 *
 * Logits of V = 1 .. 9, 4095 .. 4101, 16383 .. 16385, 151669 and 248320
 * (the tiny model's and the 248k family's vocabularies: several blocks,
 * the last partial), each drawn so that the maximum lands in a lane, in a
 * block's tail, at a block's first or last index, or nowhere in particular;
 * with ties of the maximum spread over lanes and blocks (the lowest index
 * must win), NaNs (never picked, not even at index 0), -0 against +0 (a
 * tie), +inf, and all -inf or all NaN (index 0). dev_id gets the same
 * token. */
#include "kt.h"

static kt_be be[3];
static int cases;

static void check(const float *l, int V, const char *what)
{
	kern_sampling g = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f};
	int32_t want = kern_sample_host(l, V, &g, 0, NULL);
	for (int b = 0; b < 3; b++) {
		int32_t got = -1, dev = -1;
		int rc = be[b].o->sample(be[b].q, l, V, &g, 7, &dev, &got);
		ASSERT(rc == 0, "sample: %s", moor_strerror(rc));
		ASSERT(got == want && dev == want,
		       "%s, V %d, %d thread(s): token %d (device %d), the rule "
		       "says %d",
		       what, V, b + 1, got, dev, want);
	}
	cases++;
}

int main(void)
{
	for (int i = 0; i < 3; i++)
		be[i] = kt_open(i + 1);
	kt_seed(31);
	const int Vs[] = {1,	 2,	3,     4,     5,      6,     7,
			  8,	 9,	4095,  4096,  4097,   4101,  16383,
			  16384, 16385, 32768, 32769, 151669, 248320};
	float *l = malloc(248320 * sizeof *l);
	for (size_t vi = 0; vi < sizeof Vs / sizeof *Vs; vi++) {
		int V = Vs[vi];
		/* the maximum at each of a few telling places */
		int where[] = {
		    0,	   1,	  2,	 3,	    V / 2,	  V - 1,
		    V - 2, 16383, 16384, V - V % 4, V - V % 4 - 1};
		for (size_t w = 0; w < sizeof where / sizeof *where; w++) {
			int at = where[w];
			if (at < 0 || at >= V)
				continue;
			kt_fill(l, (size_t)V, -10, 10);
			l[at] = 11.0f;
			check(l, V, "one maximum");
			/* a tie later and earlier than it: the earlier wins */
			if (V > 1) {
				l[(at + V / 3 + 1) % V] = 11.0f;
				check(l, V, "a tie of the maximum");
			}
			l[at] = INFINITY;
			check(l, V, "+inf");
		}
		/* NaNs everywhere but one value, NaN at index 0 */
		for (int i = 0; i < V; i++)
			l[i] = i % 3 ? NAN : kt_unif(-5, 5);
		l[0] = NAN;
		check(l, V, "NaNs among the values");
		/* -0 and +0 are the same key: the first of them wins */
		for (int i = 0; i < V; i++)
			l[i] = -1.0f;
		l[V - 1] = 0.0f;
		l[V / 2] = -0.0f;
		check(l, V, "-0 against +0");
		for (int i = 0; i < V; i++)
			l[i] = -INFINITY;
		check(l, V, "all -inf");
		for (int i = 0; i < V; i++)
			l[i] = NAN;
		check(l, V, "all NaN");
		/* ties of the maximum in every lane of every block */
		for (int i = 0; i < V; i++)
			l[i] = (i * 7919) % 13 == 5 ? 3.0f : kt_unif(-5, 2);
		check(l, V, "ties everywhere");
	}
	printf("%d logit vectors\n", cases);
	free(l);
	for (int i = 0; i < 3; i++)
		be[i].o->destroy(be[i].ctx);
	return kt_done("test_kern_sample_greedy");
}
