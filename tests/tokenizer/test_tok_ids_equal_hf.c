/* test_tok_ids_equal_hf: on the real Qwen3 tokenizer.json, our ids equal
 * @huggingface/tokenizers' for every string of the corpus (gen_corpus.js),
 * id for id; decode(ids) equals HF's decode, and equals the string itself
 * after NFC (all corpus strings are valid UTF-8). */
#include "tok_test.h"

int main(void)
{
	tt_require_oracles();
	const char *tok_json = tt_src(TT_QWEN "tokenizer.json");
	tt_gen_corpus("tok-ids-corpus.json");
	tt_oracle(tok_json, "tok-ids-corpus.json", "tok-ids-hf.json");

	char err[MOOR_ERRLEN];
	gw_tok *tok;
	int rc = gw_tok_load(tok_json, &tok, err);
	REQUIRE(rc == 0, "load: %s", err);
	CHECK(gw_tok_vocab_size(tok) == 151669, "vocab size %d",
	      gw_tok_vocab_size(tok));
	CHECK(gw_tok_token_id(tok, "<|im_start|>") == 151644, "im_start");
	CHECK(gw_tok_token_id(tok, "<|im_end|>") == 151645, "im_end");
	CHECK(gw_tok_token_id(tok, "<think>") == 151667, "think");
	CHECK(gw_tok_token_id(tok, " world") == 1879, "' world'");
	CHECK(gw_tok_token_id(tok, "no such token at all") == -1, "absent");
	CHECK(gw_tok_is_special(tok, 151645) && !gw_tok_is_special(tok, 151667),
	      "special flags");

	json_t *cj = tt_load_json("tok-ids-corpus.json");
	json_t *hf = tt_load_json("tok-ids-hf.json");
	size_t n;
	tt_str *corpus = tt_strings(cj, &n);
	json_t *hids = json_object_get(hf, "ids");
	json_t *hdec = json_object_get(hf, "decoded");
	json_t *hnfc = json_object_get(hf, "nfc");
	REQUIRE(json_array_size(hids) == n && json_array_size(hdec) == n &&
		    json_array_size(hnfc) == n,
		"oracle answered %zu of %zu", json_array_size(hids), n);
	CHECK(n >= 1000, "only %zu corpus strings", n);

	size_t bad_ids = 0, bad_dec = 0, bad_trip = 0, bytes = 0, tokens = 0;
	for (size_t i = 0; i < n; i++) {
		int32_t *ids;
		size_t k;
		rc = gw_tok_encode(tok, corpus[i].s, corpus[i].n, &ids, &k);
		REQUIRE(rc == 0, "encode %zu: %s", i, moor_strerror(rc));
		size_t hk;
		int32_t *want = tt_ids(json_array_get(hids, i), &hk);
		bytes += corpus[i].n;
		tokens += k;
		size_t d = 0;
		while (d < k && d < hk && ids[d] == want[d])
			d++;
		if (d != k || d != hk) {
			if (bad_ids++ < 10) {
				fprintf(stderr, "string %zu ", i);
				tt_show(stderr, corpus[i].s, corpus[i].n, 120);
				fprintf(stderr,
					"\n  differs at token %zu\n  ours ", d);
				tt_show_ids(stderr, ids + (d > 3 ? d - 3 : 0),
					    k - (d > 3 ? d - 3 : 0), 12);
				fprintf(stderr, "\n  hf   ");
				tt_show_ids(stderr, want + (d > 3 ? d - 3 : 0),
					    hk - (d > 3 ? d - 3 : 0), 12);
				fprintf(stderr, "\n");
			}
		}
		char *text;
		size_t tn;
		rc = gw_tok_decode(tok, ids, k, &text, &tn);
		REQUIRE(rc == 0, "decode %zu: %s", i, moor_strerror(rc));
		json_t *hd = json_array_get(hdec, i);
		if (k && (tn != json_string_length(hd) ||
			  memcmp(text, json_string_value(hd), tn) != 0)) {
			if (bad_dec++ < 5) {
				fprintf(stderr,
					"string %zu: decode differs: ", i);
				tt_show(stderr, text, tn, 80);
				fprintf(stderr, " vs hf ");
				tt_show(stderr, json_string_value(hd),
					json_string_length(hd), 80);
				fprintf(stderr, "\n");
			}
		}
		json_t *nf = json_array_get(hnfc, i);
		if (tn != json_string_length(nf) ||
		    memcmp(text, json_string_value(nf), tn) != 0) {
			if (bad_trip++ < 5) {
				fprintf(stderr,
					"string %zu: decode(encode(s)) != "
					"NFC(s): ",
					i);
				tt_show(stderr, text, tn, 80);
				fprintf(stderr, "\n");
			}
		}
		free(text);
		free(ids);
		free(want);
	}
	CHECK(bad_ids == 0, "%zu of %zu strings encode differently", bad_ids,
	      n);
	CHECK(bad_dec == 0, "%zu of %zu strings decode differently", bad_dec,
	      n);
	CHECK(bad_trip == 0, "%zu of %zu strings do not round-trip", bad_trip,
	      n);
	printf("compared %zu strings (%zu bytes, %zu tokens) with "
	       "@huggingface/tokenizers: %zu differ\n",
	       n, bytes, tokens, bad_ids);
	free(corpus);
	json_decref(cj);
	json_decref(hf);
	gw_tok_free(tok);
	return t_done("test_tok_ids_equal_hf");
}
