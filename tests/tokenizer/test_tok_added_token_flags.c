/* test_tok_added_token_flags: added tokens' single_word, lstrip, rstrip and
 * normalized behave as in HF's Rust added_vocabulary.rs; the cases are its
 * own unit tests (test_single_word_is_correct,
 * test_single_word_is_unicode_correct, test_lstrip_unicode_space,
 * options_use_cases), with the lowercasing normalizer left out. Qwen's added
 * tokens have all four false, and tokenizers.js implements none of
 * single_word, so there is no node oracle here: the expected ids are the
 * splits those tests state, each stretch encoded by the same tokenizer
 * without added tokens. */
#include "tok_test.h"

typedef struct tokdef {
	const char *content;
	int lstrip, rstrip, single_word, normalized, special;
} tokdef;

/* The tiny base with these added tokens (ids 300, 301, ...). */
static gw_tok *make(const char *name, const tokdef *defs, int n)
{
	json_t *j = tt_tiny_base();
	json_t *added = json_object_get(j, "added_tokens");
	if (n < 0)
		json_array_clear(added);
	for (int i = 0; i < n; i++)
		json_array_append_new(
		    added,
		    json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id",
			      300 + i, "content", defs[i].content,
			      "single_word", defs[i].single_word, "lstrip",
			      defs[i].lstrip, "rstrip", defs[i].rstrip,
			      "normalized", defs[i].normalized, "special",
			      defs[i].special));
	char path[128], err[MOOR_ERRLEN];
	snprintf(path, sizeof path, "tok-flags-%s.json", name);
	REQUIRE(json_dump_file(j, path, 0) == 0, "write");
	json_decref(j);
	gw_tok *t;
	REQUIRE(gw_tok_load(path, &t, err) == 0, "%s", err);
	return t;
}

static gw_tok *plain;

/* A split: an added token's id, or a stretch of text (id < 0). */
typedef struct part {
	int id;
	const char *text;
} part;

static void expect(gw_tok *t, const char *name, const char *text,
		   const part *parts, int np)
{
	int32_t want[512];
	size_t nw = 0;
	for (int i = 0; i < np; i++) {
		if (parts[i].id >= 0) {
			want[nw++] = parts[i].id;
			continue;
		}
		int32_t *ids;
		size_t n;
		REQUIRE(gw_tok_encode(plain, parts[i].text,
				      strlen(parts[i].text), &ids, &n) == 0,
			"plain");
		memcpy(want + nw, ids, n * sizeof *ids);
		nw += n;
		free(ids);
	}
	int32_t *ids;
	size_t n;
	REQUIRE(gw_tok_encode(t, text, strlen(text), &ids, &n) == 0, "encode");
	int ok = n == nw && memcmp(ids, want, n * sizeof *ids) == 0;
	CHECK(ok, "%s", name);
	if (!ok) {
		fprintf(stderr, "  ours ");
		tt_show_ids(stderr, ids, n, 40);
		fprintf(stderr, "\n  want ");
		tt_show_ids(stderr, want, nw, 40);
		fprintf(stderr, "\n");
	}
	free(ids);
}

#define P(...) ((const part[]){__VA_ARGS__})
#define NP(...) (int)(sizeof((const part[]){__VA_ARGS__}) / sizeof(part))
#define EXPECT(t, name, text, ...)                                             \
	expect(t, name, text, P(__VA_ARGS__), NP(__VA_ARGS__))

int main(void)
{
	plain = make("plain", NULL, -1);

	/* test_single_word_is_correct */
	gw_tok *t = make("single", (tokdef[]){{"<mask>", 0, 0, 1, 0, 0}}, 1);
	EXPECT(t, "single_word",
	       "<mask> my name <mask> a<mask> <mask>ony <mask>", {300, 0},
	       {-1, " my name "}, {300, 0}, {-1, " a<mask> <mask>ony "},
	       {300, 0});
	/* test_single_word_is_unicode_correct: punctuation and dashes are
	 * not word characters, a combining mark is */
	EXPECT(t, "single_word unicode",
	       "<mask>, <mask>- \xe2\x97\x8c\xcc\xb0<mask>", {300, 0},
	       {-1, ", "}, {300, 0}, {-1, "- \xe2\x97\x8c\xcc\xb0<mask>"});
	gw_tok_free(t);

	/* test_lstrip_unicode_space: the stripped whitespace goes with the
	 * token, U+2000 counts, a previous match's rstrip is not taken
	 * twice */
	t = make("strip", (tokdef[]){{"<mask>", 1, 1, 1, 0, 0}}, 1);
	EXPECT(t, "lstrip rstrip",
	       "hi <mask> there\t<mask>\t<mask>\xe2\x80\x80", {-1, "hi"},
	       {300, 0}, {-1, "there"}, {300, 0}, {300, 0});
	gw_tok_free(t);

	/* options_use_cases; "my" is normalized (NFC here) and matched in
	 * the normalized text */
	t = make("options",
		 (tokdef[]){{"my", 1, 1, 0, 1, 0},
			    {"name", 0, 0, 0, 1, 0},
			    {"ony", 0, 0, 1, 1, 0},
			    {"[CLS]", 0, 0, 0, 0, 1},
			    {"[SEP]", 0, 0, 0, 0, 1}},
		 5);
	EXPECT(t, "options", "[CLS] my name is anthony [SEP]", {303, 0},
	       {300, 0}, {301, 0}, {-1, " is anthony "}, {304, 0});
	gw_tok_free(t);

	/* normalized: an NFD content matches NFC and NFD text when normalized
	 * (both sides are normalized), only the exact NFD bytes when not */
	t = make("normalized",
		 (tokdef[]){{"cafe\xcc\x81", 0, 0, 0, 1, 0},
			    {"nai\xcc\x88ve", 0, 0, 0, 0, 0}},
		 2);
	EXPECT(t, "normalized NFC text", "a caf\xc3\xa9!", {-1, "a "}, {300, 0},
	       {-1, "!"});
	EXPECT(t, "normalized NFD text", "a cafe\xcc\x81!", {-1, "a "},
	       {300, 0}, {-1, "!"});
	EXPECT(t, "raw NFD text", "x nai\xcc\x88ve", {-1, "x "}, {301, 0});
	EXPECT(t, "raw, NFC text", "x na\xc3\xafve", {-1, "x na\xc3\xafve"});
	/* leftmost, then longest */
	gw_tok_free(t);
	t = make("longest",
		 (tokdef[]){{"ab", 0, 0, 0, 0, 0},
			    {"abc", 0, 0, 0, 0, 0},
			    {"bcd", 0, 0, 0, 0, 0}},
		 3);
	EXPECT(t, "leftmost longest", "xabcd abd bcd", {-1, "x"}, {301, 0},
	       {-1, "d "}, {300, 0}, {-1, "d "}, {302, 0});
	int32_t id = gw_tok_token_id(t, "abc");
	CHECK(id == 301 && !gw_tok_is_special(t, id), "token_id(abc) %d", id);
	gw_tok_free(t);
	gw_tok_free(plain);
	return t_done("test_tok_added_token_flags");
}
