/* test_tok_encode_threads_equal: one gw_tok shared by four threads that
 * encode the whole corpus at once gives each thread the ids a lone caller
 * gets (the tokenizer is read-only; the scratch and cache are per call). */
#include <pthread.h>

#include "tok_test.h"

enum { NT = 4 };
static gw_tok *tok;
static tt_str *corpus;
static size_t n;
static int32_t **ref;
static size_t *refn;

static void *run(void *arg)
{
	size_t bad = 0;
	for (size_t r = 0; r < n; r++) {
		size_t i = (r + (size_t)(uintptr_t)arg * 97) % n;
		int32_t *ids;
		size_t m;
		if (gw_tok_encode(tok, corpus[i].s, corpus[i].n, &ids, &m) ||
		    m != refn[i] || memcmp(ids, ref[i], m * sizeof *ids))
			bad++;
		free(ids);
	}
	return (void *)(uintptr_t)bad;
}

int main(void)
{
	tt_require_oracles();
	tt_gen_corpus("tok-threads-corpus.json");
	char err[MOOR_ERRLEN];
	REQUIRE(gw_tok_load(tt_src(TT_QWEN "tokenizer.json"), &tok, err) == 0,
		"%s", err);
	json_t *cj = tt_load_json("tok-threads-corpus.json");
	corpus = tt_strings(cj, &n);
	ref = calloc(n, sizeof *ref);
	refn = calloc(n, sizeof *refn);
	for (size_t i = 0; i < n; i++)
		REQUIRE(gw_tok_encode(tok, corpus[i].s, corpus[i].n, &ref[i],
				      &refn[i]) == 0,
			"encode");
	pthread_t th[NT];
	for (int i = 0; i < NT; i++)
		REQUIRE(pthread_create(&th[i], NULL, run,
				       (void *)(uintptr_t)i) == 0,
			"thread");
	size_t bad = 0;
	for (int i = 0; i < NT; i++) {
		void *r;
		pthread_join(th[i], &r);
		bad += (size_t)(uintptr_t)r;
	}
	CHECK(bad == 0, "%zu encodes differ under %d threads", bad, NT);
	for (size_t i = 0; i < n; i++)
		free(ref[i]);
	free(ref);
	free(refn);
	free(corpus);
	json_decref(cj);
	gw_tok_free(tok);
	return t_done("test_tok_encode_threads_equal");
}
