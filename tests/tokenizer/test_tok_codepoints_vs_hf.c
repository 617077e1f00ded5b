/* test_tok_codepoints_vs_hf: every code point of planes 0-3 and 14 (and
 * samples of the others), each next to letters, digits and spaces, encoded
 * by us and by @huggingface/tokenizers on the Qwen3 file. They agree except
 * where the Unicode versions differ: PCRE2 10.42 classifies by Unicode 14,
 * node by its own (newer) Unicode, so a letter assigned since 14 is \p{L}
 * to node and unassigned to us. The test fails on any difference that no
 * such code point explains, and prints the ranges of those that do. */
#include "tok_test.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

static uint32_t cp_at(const char *s, size_t *k)
{
	const uint8_t *u = (const uint8_t *)s;
	uint8_t c = u[0];
	*k = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
	uint32_t v = *k == 1   ? c
		     : *k == 2 ? c & 0x1f
		     : *k == 3 ? c & 0xf
			       : c & 7;
	for (size_t i = 1; i < *k; i++)
		v = v << 6 | (u[i] & 0x3f);
	return v;
}

int main(void)
{
	tt_require_oracles();
	const char *tok_json = tt_src(TT_QWEN "tokenizer.json");
	tt_run("'%s' '%s' --codepoints tok-cp-corpus.json", tt_node(),
	       tt_src("tests/tokenizer/gen_corpus.js"));
	tt_oracle(tok_json, "tok-cp-corpus.json", "tok-cp-hf.json");
	char err[MOOR_ERRLEN];
	gw_tok *tok;
	REQUIRE(gw_tok_load(tok_json, &tok, err) == 0, "%s", err);

	/* node's assigned code points */
	json_t *aj = tt_load_json("tok-cp-corpus.json.assigned");
	uint8_t *node_assigned = calloc(0x110000, 1);
	size_t i;
	json_t *r;
	json_array_foreach(json_object_get(aj, "ranges"), i, r)
	{
		json_int_t lo = json_integer_value(json_array_get(r, 0));
		json_int_t hi = json_integer_value(json_array_get(r, 1));
		for (json_int_t c = lo; c <= hi; c++)
			node_assigned[c] = 1;
	}
	/* PCRE2's (Unicode 14) */
	int ec;
	PCRE2_SIZE eo;
	pcre2_code *cn = pcre2_compile(
	    (PCRE2_SPTR) "\\p{Cn}", PCRE2_ZERO_TERMINATED,
	    PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &ec, &eo, NULL);
	pcre2_match_data *md = pcre2_match_data_create(1, NULL);

	json_t *cj = tt_load_json("tok-cp-corpus.json");
	json_t *hf = tt_load_json("tok-cp-hf.json");
	size_t n;
	tt_str *corpus = tt_strings(cj, &n);
	json_t *hids = json_object_get(hf, "ids");
	REQUIRE(json_array_size(hids) == n, "oracle answers");
	size_t differ = 0, unexplained = 0, newer = 0, cps = 0;
	char ranges[4096] = "";
	for (i = 0; i < n; i++) {
		int32_t *ids;
		size_t m, hm;
		REQUIRE(
		    gw_tok_encode(tok, corpus[i].s, corpus[i].n, &ids, &m) == 0,
		    "encode");
		int32_t *want = tt_ids(json_array_get(hids, i), &hm);
		/* the chunk's code points follow each "a" at a line start */
		int explained = 0;
		uint32_t chunk_new[16];
		size_t nchunk = 0;
		for (size_t p = 0; p < corpus[i].n;) {
			size_t k;
			uint32_t c = cp_at(corpus[i].s + p + 1, &k);
			cps++;
			int pcre_cn =
			    pcre2_match(cn, (PCRE2_SPTR)corpus[i].s,
					corpus[i].n, p + 1, 0, md, NULL) >= 0;
			if (pcre_cn && node_assigned[c]) {
				explained = 1;
				newer++;
				if (nchunk < 16)
					chunk_new[nchunk++] = c;
			}
			/* "a" c "a " c "1 " c c "\n" */
			p += 1 + k + 2 + k + 2 + 2 * k + 1;
		}
		if (m != hm || memcmp(ids, want, m * sizeof *ids)) {
			differ++;
			for (size_t q = 0; q < nchunk; q++)
				snprintf(ranges + strlen(ranges),
					 sizeof ranges - strlen(ranges),
					 " U+%04X", chunk_new[q]);
			snprintf(ranges + strlen(ranges),
				 sizeof ranges - strlen(ranges), ";");
			if (!explained && unexplained++ < 10) {
				fprintf(stderr,
					"chunk %zu differs, no newer "
					"code point in it: ",
					i);
				tt_show(stderr, corpus[i].s, corpus[i].n, 60);
				fprintf(stderr, "\n");
			}
		}
		free(ids);
		free(want);
	}
	CHECK(unexplained == 0,
	      "%zu chunks differ from HF without a code point newer than "
	      "PCRE2's Unicode",
	      unexplained);
	char v[32];
	pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, v);
	printf("%zu code points in %zu chunks; %zu code points are assigned "
	       "by node's Unicode and not by PCRE2's (%s); %zu chunks "
	       "differ from HF, each holding some of those (in them:%s)\n",
	       cps, n, newer, v, differ, ranges);
	pcre2_match_data_free(md);
	pcre2_code_free(cn);
	free(node_assigned);
	free(corpus);
	json_decref(aj);
	json_decref(cj);
	json_decref(hf);
	gw_tok_free(tok);
	return t_done("test_tok_codepoints_vs_hf");
}
