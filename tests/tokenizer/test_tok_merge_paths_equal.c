/* test_tok_merge_paths_equal: the two merge loops (the list scan for short
 * pieces, the heap for long ones), the word cache and the whole-token
 * shortcut (TOK_WHOLE) change nothing: every corpus string encodes to the
 * same ids with every piece scanned, every piece heap-merged, no cache, and
 * no shortcut. Reaches tok_encode.c's statics by
 * including the tokenizer's sources (and links no gw_tok library). */
#include <stddef.h>

static size_t scan_max = 48, cache_max = 128;
static int whole = 1;
#define BPE_WHOLE whole
#define BPE_SCAN_MAX scan_max
#define CACHE_MAX_WORD cache_max
#include "tok_encode.c"
#include "tokenizer.c"

#include "tok_test.h"

int main(void)
{
	tt_require_oracles();
	tt_gen_corpus("tok-merge-corpus.json");
	char err[MOOR_ERRLEN];
	gw_tok *tok;
	REQUIRE(gw_tok_load(tt_src(TT_QWEN "tokenizer.json"), &tok, err) == 0,
		"%s", err);
	json_t *cj = tt_load_json("tok-merge-corpus.json");
	size_t n;
	tt_str *corpus = tt_strings(cj, &n);
	/* plus each string twice over, so the cache answers the second */
	static const struct {
		const char *name;
		size_t scan, cache;
		int whole;
	} cfg[] = {{"default", 48, 128, 1},
		   {"all scan", SIZE_MAX, 128, 0},
		   {"all heap", 0, 128, 0},
		   {"no cache", 48, 0, 0},
		   {"no shortcut", 48, 128, 0}};
	size_t bad = 0;
	for (size_t i = 0; i < n; i++) {
		size_t dn = 2 * corpus[i].n;
		char *dbl = malloc(dn + 1);
		memcpy(dbl, corpus[i].s, corpus[i].n);
		memcpy(dbl + corpus[i].n, corpus[i].s, corpus[i].n);
		int32_t *ref = NULL;
		size_t rn = 0;
		for (int c = 0; c < 5; c++) {
			scan_max = cfg[c].scan;
			cache_max = cfg[c].cache;
			whole = cfg[c].whole;
			int32_t *ids;
			size_t m;
			REQUIRE(gw_tok_encode(tok, dbl, dn, &ids, &m) == 0,
				"encode");
			if (c == 0) {
				ref = ids;
				rn = m;
				continue;
			}
			if (m != rn || memcmp(ids, ref, m * sizeof *ids)) {
				if (bad++ < 5) {
					fprintf(stderr, "%s differs on ",
						cfg[c].name);
					tt_show(stderr, corpus[i].s,
						corpus[i].n, 80);
					fprintf(stderr, "\n");
				}
			}
			free(ids);
		}
		free(ref);
		free(dbl);
	}
	CHECK(bad == 0, "%zu differences", bad);
	printf("%zu strings (doubled) under 5 merge configurations\n", n);
	free(corpus);
	json_decref(cj);
	gw_tok_free(tok);
	return t_done("test_tok_merge_paths_equal");
}
