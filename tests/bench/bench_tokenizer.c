/* bench_tokenizer: gw_tok_encode's MB/s against @huggingface/tokenizers in
 * node, on the same generated mixed corpus (gen_corpus.js --bench: prose
 * of many scripts, code, emoji, whitespace, numbers, special tokens; 2-8 KB
 * documents), in the same run; one thread each.
 *
 *   bench_tokenizer [MB]    (default 8)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_test.h"

int main(int argc, char **argv)
{
	int mb = argc > 1 ? atoi(argv[1]) : 8;
	tt_require_oracles();
	const char *tok_json = tt_src(TT_QWEN "tokenizer.json");
	tt_run("'%s' '%s' --bench %d tok-bench-docs.json", tt_node(),
	       tt_src("tests/tokenizer/gen_corpus.js"), mb);

	char err[MOOR_ERRLEN];
	gw_tok *tok;
	double t0 = moor_now();
	REQUIRE(gw_tok_load(tok_json, &tok, err) == 0, "%s", err);
	double load_s = moor_now() - t0;
	json_t *dj = tt_load_json("tok-bench-docs.json");
	size_t n;
	tt_str *docs = tt_strings(dj, &n);
	size_t bytes = 0, tokens = 0;
	for (size_t i = 0; i < n; i++)
		bytes += docs[i].n;
	for (size_t i = 0; i < n && i < 20; i++) { /* warm-up, as node's */
		int32_t *ids;
		size_t m;
		REQUIRE(gw_tok_encode(tok, docs[i].s, docs[i].n, &ids, &m) == 0,
			"encode");
		free(ids);
	}
	t0 = moor_now();
	for (size_t i = 0; i < n; i++) {
		int32_t *ids;
		size_t m;
		REQUIRE(gw_tok_encode(tok, docs[i].s, docs[i].n, &ids, &m) == 0,
			"encode");
		tokens += m;
		free(ids);
	}
	double ours = moor_now() - t0;

	char cmd[4096];
	snprintf(cmd, sizeof cmd,
		 "'%s' '%s' '%s' '%s' '%s' tok-bench-docs.json", tt_node(),
		 tt_src("tests/bench/bench_tokenizer.js"), tt_src(TT_ORACLES),
		 tok_json, tt_src(TT_QWEN "tokenizer_config.json"));
	FILE *p = popen(cmd, "r");
	REQUIRE(p, "popen");
	char line[1024] = "";
	REQUIRE(fgets(line, sizeof line, p), "no answer from node");
	REQUIRE(pclose(p) == 0, "node failed");
	json_error_t je;
	json_t *hj = json_loads(line, 0, &je);
	REQUIRE(hj, "node said: %s", line);
	double hf_s = json_number_value(json_object_get(hj, "seconds"));
	size_t hf_tokens =
	    (size_t)json_integer_value(json_object_get(hj, "tokens"));

	double our_mbps = bytes / 1e6 / ours, hf_mbps = bytes / 1e6 / hf_s;
	printf("tokenizer encode, %zu documents, %.2f MB, one thread\n", n,
	       bytes / 1e6);
	printf("%-28s %10s %10s %12s\n", "", "seconds", "MB/s", "tokens");
	printf("%-28s %10.3f %10.2f %12zu\n", "moor gw_tok_encode", ours,
	       our_mbps, tokens);
	printf("%-28s %10.3f %10.2f %12zu\n", "@huggingface/tokenizers", hf_s,
	       hf_mbps, hf_tokens);
	printf("%-28s %10s %9.2fx\n", "ratio (moor / HF)", "",
	       our_mbps / hf_mbps);
	printf("(gw_tok_load: %.2f s)\n", load_s);
	CHECK(tokens == hf_tokens, "token counts differ: %zu vs %zu", tokens,
	      hf_tokens);
	json_decref(hj);
	json_decref(dj);
	free(docs);
	gw_tok_free(tok);
	return t_done("bench_tokenizer");
}
