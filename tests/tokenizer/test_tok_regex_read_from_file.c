/* test_tok_regex_read_from_file: the pre-tokenizer comes from tokenizer.json,
 * not from our code. Modified copies of the Qwen3 file are encoded by us and
 * by @huggingface/tokenizers and must agree id for id:
 *
 *   248k:  the Split regex of the 248k-token family (SOURCES.md), which adds
 *          \p{M} to the letter runs: the ids change exactly on strings with
 *          combining marks, and only there;
 *   gpt2:  no Split, ByteLevel with add_prefix_space and its own regex, NFKC;
 *   lines: Split on the literal "\n" (a String pattern), NFD.
 *
 * Split's behavior Removed is checked without the oracle: tokenizers.js
 * compiles a String pattern with a capturing group, so its split() keeps
 * the separators that HF's Rust code removes (README.md). */
#include "tok_test.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

static const char p248k[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|"
    "\\s+";

/* Strings where the \p{M} regex changes the ids: Thai and Arabic, whose
 * vowel signs and harakat are marks that Qwen3's vocabulary merges with the
 * letters before them once they are in one piece. */
static const char *visible[] = {
    "\xe0\xb8\xaa\xe0\xb8\xa7\xe0\xb8\xb1\xe0\xb8\xaa\xe0\xb8\x94"
    "\xe0\xb8\xb5\xe0\xb8\x8a\xe0\xb8\xb2\xe0\xb8\xa7\xe0\xb9\x82"
    "\xe0\xb8\xa5\xe0\xb8\x81", /* สวัสดีชาวโลก */
    "\xe0\xb8\x99\xe0\xb9\x89\xe0\xb8\xb3\xe0\xb8\x81\xe0\xb8\xb4"
    "\xe0\xb8\x99", /* น้ำกิน */
    "\xe0\xb9\x84\xe0\xb8\xa1\xe0\xb9\x88\xe0\xb8\xa1\xe0\xb8\xb5"
    "\xe0\xb8\x8a\xe0\xb9\x88\xe0\xb8\xad\xe0\xb8\x87\xe0\xb8\xa7"
    "\xe0\xb9\x88\xe0\xb8\xb2\xe0\xb8\x87", /* ไม่มีช่องว่าง */
    "\xd8\xa8\xd9\x90\xd8\xb3\xd9\x92\xd9\x85\xd9\x90 \xd8\xa7\xd9\x84"
    "\xd9\x84\xd9\x8e\xd9\x91\xd9\x87\xd9\x90", /* بِسْمِ اللَّهِ */
    "\xd9\x85\xd9\x8f\xd8\xad\xd9\x8e\xd9\x85\xd9\x8e\xd9\x91\xd8\xaf",
    /* مُحَمَّد */
};

/* More marks: with no precomposed form, Indic vowel signs, marks after
 * digits. Here the pieces change but Qwen3's vocabulary, trained on its own
 * regex, has no merge across the old boundaries: the ids stay. */
static const char *marks[] = {
    "q\xcc\x81 x\xcc\x82 j\xcc\x87",
    "\xe0\xa4\xb9\xe0\xa4\xbf\xe0\xa4\xa8\xe0\xa5\x8d\xe0\xa4\xa6\xe0\xa5"
    "\x80 \xe0\xa4\xad\xe0\xa4\xbe\xe0\xa4\xb7\xe0\xa4\xbe", /* हिन्दी भाषा */
    "\xe0\xb8\x99\xe0\xb9\x89\xe0\xb8\xb3\xe0\xb8\x81\xe0\xb8\xb4\xe0\xb8"
    "\x99", /* น้ำกิน */
    "\xd7\x91\xd6\xb0\xd6\xbc\xd7\xa8\xd6\xb5\xd7\x90\xd7\xa9\xd6\xb4\xd7"
    "\x81\xd7\x99\xd7\xaa", /* בְּרֵאשִׁית */
    "\xd8\xa8\xd9\x90\xd8\xb3\xd9\x92\xd9\x85\xd9\x90", /* بِسْمِ */
    "a\xcc\xb2"
    "b\xcc\xb2"
    "c\xcc\xb2 d\xcc\xb2",
    "Z\xcc\xb7\xcc\xa2\xcc\x9b\xcc\xaa"
    "a\xcc\xb4\xcc\xa7l\xcc\xb5g\xcc\xb8"
    "o\xcc\xb7",
    "hello\xcc\x81world and more\xcc\x83 text",
    "\xe0\xa6\x95\xe0\xa7\x8b \xe0\xae\x95\xe0\xaf\x8a", /* কো கொ */
    "1\xe2\x83\xa3 keycap",
    "x\xe2\x83\x9d circled",
};

static json_t *pretok(json_t *root)
{
	return json_object_get(root, "pre_tokenizer");
}

static void write_variant(json_t *orig, const char *name, const char *path)
{
	json_t *j = json_deep_copy(orig);
	REQUIRE(j, "copy");
	if (strcmp(name, "248k") == 0) {
		json_t *split = json_array_get(
		    json_object_get(pretok(j), "pretokenizers"), 0);
		json_t *pat = json_object_get(split, "pattern");
		REQUIRE(json_is_string(json_object_get(pat, "Regex")),
			"Qwen3's first pre-tokenizer is a Split regex");
		json_object_set_new(pat, "Regex", json_string(p248k));
	} else if (strcmp(name, "gpt2") == 0) {
		json_object_set_new(j, "pre_tokenizer",
				    json_pack("{s:s, s:b, s:b, s:b}", "type",
					      "ByteLevel", "add_prefix_space",
					      1, "trim_offsets", 0, "use_regex",
					      1));
		json_object_set_new(j, "normalizer",
				    json_pack("{s:s}", "type", "NFKC"));
	} else {
		json_t *pts = json_object_get(pretok(j), "pretokenizers");
		json_array_set_new(
		    pts, 0,
		    json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split",
			      "pattern", "String", "\n", "behavior",
			      strcmp(name, "removed") == 0 ? "Removed"
							   : "Isolated",
			      "invert", 0));
		json_object_set_new(j, "normalizer",
				    json_pack("{s:s, s:[{s:s}]}", "type",
					      "Sequence", "normalizers", "type",
					      "NFD"));
	}
	REQUIRE(json_dump_file(j, path, JSON_COMPACT) == 0, "write %s", path);
	json_decref(j);
}

/* JavaScript's \s (in ByteLevel's built-in regex, which tokenizers.js does
 * not translate) has U+FEFF and lacks U+0085; Oniguruma's, like ours, is
 * White_Space. The gpt2 variant skips strings with either. */
static int js_space_quirk(const char *s, size_t n)
{
	return memmem(s, n, "\xef\xbb\xbf", 3) || memmem(s, n, "\xc2\x85", 2);
}

static int32_t *enc(gw_tok *t, const tt_str *s, size_t *m)
{
	int32_t *ids;
	int rc = gw_tok_encode(t, s->s, s->n, &ids, m);
	REQUIRE(rc == 0, "encode: %s", moor_strerror(rc));
	return ids;
}

int main(void)
{
	tt_require_oracles();
	const char *qwen = tt_src(TT_QWEN "tokenizer.json");
	tt_gen_corpus("tok-regex-corpus0.json");
	json_t *cj = tt_load_json("tok-regex-corpus0.json");
	size_t nvis = sizeof visible / sizeof *visible;
	for (size_t i = 0; i < sizeof marks / sizeof *marks; i++)
		json_array_append_new(cj, json_string(marks[i]));
	for (size_t i = 0; i < nvis; i++)
		json_array_append_new(cj, json_string(visible[i]));
	REQUIRE(json_dump_file(cj, "tok-regex-corpus.json", JSON_COMPACT) == 0,
		"write corpus");
	size_t n;
	tt_str *corpus = tt_strings(cj, &n);
	size_t first_vis = n - nvis;

	char err[MOOR_ERRLEN];
	gw_tok *orig;
	REQUIRE(gw_tok_load(qwen, &orig, err) == 0, "load: %s", err);
	json_t *root = tt_load_json(qwen);

	int ec;
	PCRE2_SIZE eo;
	pcre2_code *has_mark =
	    pcre2_compile((PCRE2_SPTR) "\\p{M}", PCRE2_ZERO_TERMINATED,
			  PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
	pcre2_match_data *md = pcre2_match_data_create(1, NULL);
	REQUIRE(has_mark && md, "pcre2");

	const char *variants[] = {"248k", "gpt2", "lines"};
	for (int v = 0; v < 3; v++) {
		char path[64], out[64];
		snprintf(path, sizeof path, "tok-regex-%s.json", variants[v]);
		snprintf(out, sizeof out, "tok-regex-%s-hf.json", variants[v]);
		write_variant(root, variants[v], path);
		tt_oracle(path, "tok-regex-corpus.json", out);
		gw_tok *t;
		REQUIRE(gw_tok_load(path, &t, err) == 0, "load %s: %s", path,
			err);
		json_t *hf = tt_load_json(out);
		json_t *hids = json_object_get(hf, "ids");
		REQUIRE(json_array_size(hids) == n, "oracle answers");
		size_t bad = 0, skipped = 0, changed = 0, changed_no_mark = 0,
		       mark_same = 0;
		for (size_t i = 0; i < n; i++) {
			if (v == 1 &&
			    js_space_quirk(corpus[i].s, corpus[i].n)) {
				skipped++;
				continue;
			}
			size_t m, hm;
			int32_t *ids = enc(t, &corpus[i], &m);
			int32_t *want = tt_ids(json_array_get(hids, i), &hm);
			if (m != hm || memcmp(ids, want, m * sizeof *ids)) {
				if (bad++ < 5) {
					fprintf(stderr, "%s: string %zu ",
						variants[v], i);
					tt_show(stderr, corpus[i].s,
						corpus[i].n, 80);
					fprintf(stderr, "\n  ours ");
					tt_show_ids(stderr, ids, m, 16);
					fprintf(stderr, "\n  hf   ");
					tt_show_ids(stderr, want, hm, 16);
					fprintf(stderr, "\n");
				}
			}
			if (v == 0) {
				size_t om;
				int32_t *o = enc(orig, &corpus[i], &om);
				int diff =
				    om != m || memcmp(o, ids, m * sizeof *ids);
				/* marks in the text the model sees (NFC
				 * makes some: U+FB2C is a letter, its NFC
				 * a letter and two marks) */
				json_t *nf = json_array_get(
				    json_object_get(hf, "nfc"), i);
				int mark =
				    pcre2_match(
					has_mark,
					(PCRE2_SPTR)json_string_value(nf),
					json_string_length(nf), 0, 0, md,
					NULL) >= 0;
				changed += diff;
				changed_no_mark += diff && !mark;
				if (i >= first_vis && !diff)
					mark_same++;
				free(o);
			}
			free(ids);
			free(want);
		}
		CHECK(bad == 0, "%s: %zu of %zu strings differ from HF",
		      variants[v], bad, n - skipped);
		printf("%s: %zu strings compared with HF (%zu skipped)",
		       variants[v], n - skipped, skipped);
		if (v == 0) {
			printf(", %zu encode differently from Qwen3's own "
			       "regex",
			       changed);
			CHECK(changed >= 100,
			      "the \\p{M} regex changed only "
			      "%zu strings",
			      changed);
			CHECK(changed_no_mark == 0,
			      "%zu strings without a mark changed",
			      changed_no_mark);
			CHECK(mark_same == 0,
			      "%zu Thai/Arabic strings did not change",
			      mark_same);
		}
		printf("\n");
		json_decref(hf);
		gw_tok_free(t);
	}
	/* Removed: the matches vanish; the rest is split there */
	write_variant(root, "removed", "tok-regex-removed.json");
	gw_tok *rm;
	REQUIRE(gw_tok_load("tok-regex-removed.json", &rm, err) == 0, "%s",
		err);
	tt_str ab = {"ab\ncd\n\nef\n", 10},
	       parts[3] = {{"ab", 2}, {"cd", 2}, {"ef", 2}};
	size_t m, pm, total = 0;
	int32_t *ids = enc(rm, &ab, &m);
	for (int i = 0; i < 3; i++) {
		int32_t *p = enc(rm, &parts[i], &pm);
		CHECK(total + pm <= m &&
			  memcmp(ids + total, p, pm * sizeof *p) == 0,
		      "removed: part %d", i);
		total += pm;
		free(p);
	}
	CHECK(total == m, "removed: %zu ids for the parts, %zu in all", total,
	      m);
	free(ids);
	gw_tok_free(rm);

	pcre2_match_data_free(md);
	pcre2_code_free(has_mark);
	json_decref(root);
	json_decref(cj);
	free(corpus);
	gw_tok_free(orig);
	return t_done("test_tok_regex_read_from_file");
}
