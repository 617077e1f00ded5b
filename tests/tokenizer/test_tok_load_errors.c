/* test_tok_load_errors: gw_tok_load() refuses what it cannot tokenize as HF
 * would, with the right code and a message that names the file and the
 * field: a missing file, malformed JSON, a model other than BPE, missing
 * fields, merges outside the vocabulary, a regex that does not compile, and
 * the components and options we do not implement. A small valid file built
 * here loads and merges. */
#include "tok_test.h"

static json_t *model(json_t *j)
{
	return json_object_get(j, "model");
}

static json_t *split(json_t *j)
{
	return json_array_get(
	    json_object_get(json_object_get(j, "pre_tokenizer"),
			    "pretokenizers"),
	    0);
}

static int cases, failures;

/* Write j, load it, expect code and every needle in the message. */
static void expect_json(const char *name, json_t *j, int code,
			const char *needle)
{
	char path[128];
	snprintf(path, sizeof path, "tok-err-%s.json", name);
	REQUIRE(json_dump_file(j, path, 0) == 0, "write %s", path);
	json_decref(j);
	char err[MOOR_ERRLEN] = "";
	gw_tok *t = (gw_tok *)1;
	int rc = gw_tok_load(path, &t, err);
	cases++;
	int ok =
	    rc == code && t == NULL && strstr(err, path) && strstr(err, needle);
	CHECK(ok, "%s: rc %d (%s), want %d (%s); message \"%s\", want \"%s\"",
	      name, rc, moor_strerror(rc), code, moor_strerror(code), err,
	      needle);
	failures += !ok;
	if (ok)
		printf("%-22s %s\n", name, err);
	gw_tok_free(rc == 0 ? t : NULL);
}

static void expect_text(const char *name, const char *text, int code,
			const char *needle)
{
	char path[128];
	snprintf(path, sizeof path, "tok-err-%s.json", name);
	FILE *f = fopen(path, "w");
	REQUIRE(f, "write %s", path);
	fputs(text, f);
	fclose(f);
	char err[MOOR_ERRLEN] = "";
	gw_tok *t = (gw_tok *)1;
	int rc = gw_tok_load(path, &t, err);
	cases++;
	CHECK(rc == code && t == NULL && strstr(err, path) &&
		  strstr(err, needle),
	      "%s: rc %d, message \"%s\"", name, rc, err);
	printf("%-22s %s\n", name, err);
}

int main(void)
{
	/* the base loads, merges, and matches its added token */
	json_t *b = tt_tiny_base();
	REQUIRE(json_dump_file(b, "tok-err-base.json", 0) == 0, "write");
	json_decref(b);
	char err[MOOR_ERRLEN];
	gw_tok *t;
	int rc = gw_tok_load("tok-err-base.json", &t, err);
	REQUIRE(rc == 0, "base: %s", err);
	int32_t *ids;
	size_t n;
	REQUIRE(gw_tok_encode(t, "help<|end|>he", 13, &ids, &n) == 0, "enc");
	CHECK(n == 4 && ids[0] == 257 && ids[1] == 'p' && ids[2] == 258 &&
		  ids[3] == 256,
	      "base encodes help<|end|>he as [hel p <|end|> he], got %zu ids",
	      n);
	free(ids);
	CHECK(gw_tok_encode(t, "\xc3\x28", 2, &ids, &n) == MOOR_EFORMAT &&
		  !ids && !n,
	      "invalid UTF-8 is refused");
	int32_t bad[] = {3, 259};
	char *text = (char *)1;
	size_t tn;
	CHECK(gw_tok_decode(t, bad, 2, &text, &tn) == MOOR_ERANGE && !text,
	      "an id past the vocabulary");
	gw_tok_free(t);

	/* no file; err may be NULL */
	rc = gw_tok_load("no/such/tokenizer.json", &t, err);
	CHECK(rc == -ENOENT && !t && strstr(err, "no/such/tokenizer.json") &&
		  strstr(err, "No such file"),
	      "missing file: %d %s", rc, err);
	printf("%-22s %s\n", "missing file", err);
	CHECK(gw_tok_load("no/such/tokenizer.json", &t, NULL) == -ENOENT,
	      "err NULL");

	expect_text("truncated", "{\"model\": {\"type\": \"BPE\", ",
		    MOOR_EFORMAT, "not valid JSON");
	expect_text("empty", "", MOOR_EFORMAT, "not valid JSON");
	expect_text("array", "[1, 2]", MOOR_EFORMAT, "not a JSON object");

	json_t *j;
	j = tt_tiny_base();
	json_object_set_new(model(j), "type", json_string("WordPiece"));
	expect_json("wordpiece", j, MOOR_EUNSUP,
		    "model.type is \"WordPiece\"; only BPE is supported");
	j = tt_tiny_base();
	json_object_del(j, "model");
	expect_json("no-model", j, MOOR_EMISSING, "model is missing");
	j = tt_tiny_base();
	json_object_del(model(j), "type");
	expect_json("no-type", j, MOOR_EMISSING, "model.type is missing");
	j = tt_tiny_base();
	json_object_del(model(j), "vocab");
	expect_json("no-vocab", j, MOOR_EMISSING, "model.vocab is missing");
	j = tt_tiny_base();
	json_object_del(model(j), "merges");
	expect_json("no-merges", j, MOOR_EMISSING, "model.merges is missing");
	j = tt_tiny_base();
	json_object_set_new(model(j), "vocab", json_string("x"));
	expect_json("vocab-string", j, MOOR_EFORMAT,
		    "model.vocab is not an object");
	j = tt_tiny_base();
	json_object_set_new(json_object_get(model(j), "vocab"), "q",
			    json_string("7"));
	expect_json("vocab-id", j, MOOR_EFORMAT, "is not an id");
	j = tt_tiny_base();
	json_array_append_new(json_object_get(model(j), "merges"),
			      json_pack("[s,s]", "x", "y"));
	expect_json("merge-oov", j, MOOR_EFORMAT,
		    "model.merges[2] (\"x\" \"y\") names a token that is not "
		    "in model.vocab");
	j = tt_tiny_base();
	json_array_append_new(json_object_get(model(j), "merges"),
			      json_string("nospace"));
	expect_json("merge-form", j, MOOR_EFORMAT,
		    "model.merges[2] \"nospace\" is not two tokens");
	j = tt_tiny_base();
	json_object_del(json_object_get(model(j), "vocab"), "\xc4\xa0");
	expect_json("not-byte-level", j, MOOR_EUNSUP,
		    "no token for byte 0x20; not a byte-level vocabulary");
	j = tt_tiny_base();
	json_object_set_new(model(j), "dropout", json_real(0.1));
	expect_json("dropout", j, MOOR_EUNSUP, "model.dropout is set");
	j = tt_tiny_base();
	json_object_set_new(model(j), "end_of_word_suffix",
			    json_string("</w>"));
	expect_json("suffix", j, MOOR_EUNSUP, "model.end_of_word_suffix");
	j = tt_tiny_base();
	json_object_del(json_array_get(json_object_get(j, "added_tokens"), 0),
			"content");
	expect_json("added-no-content", j, MOOR_EMISSING,
		    "added_tokens[0].content is missing");
	j = tt_tiny_base();
	json_object_set_new(
	    json_array_get(json_object_get(j, "added_tokens"), 0), "lstrip",
	    json_string("yes"));
	expect_json("added-flag", j, MOOR_EFORMAT,
		    "added_tokens[0].lstrip is not a boolean");
	j = tt_tiny_base();
	json_object_set_new(json_object_get(split(j), "pattern"), "Regex",
			    json_string("(\\p{L}+"));
	expect_json("bad-regex", j, MOOR_EFORMAT,
		    "pre_tokenizer pattern does not compile");
	j = tt_tiny_base();
	json_object_set_new(json_object_get(split(j), "pattern"), "Regex",
			    json_string("[\\w&&[^a]]"));
	expect_json("onig-intersection", j, MOOR_EUNSUP,
		    "character-class intersection");
	j = tt_tiny_base();
	json_object_del(json_object_get(split(j), "pattern"), "Regex");
	expect_json("no-pattern", j, MOOR_EMISSING,
		    "Split has no pattern.Regex or pattern.String");
	j = tt_tiny_base();
	json_object_set_new(split(j), "behavior",
			    json_string("MergedWithPrevious"));
	expect_json("behavior", j, MOOR_EUNSUP,
		    "Split behavior \"MergedWithPrevious\" is not supported");
	j = tt_tiny_base();
	json_object_set_new(split(j), "invert", json_true());
	expect_json("invert", j, MOOR_EUNSUP, "Split with invert");
	j = tt_tiny_base();
	json_object_set_new(j, "pre_tokenizer",
			    json_pack("{s:s}", "type", "Whitespace"));
	expect_json("whitespace", j, MOOR_EUNSUP,
		    "pre_tokenizer \"Whitespace\" is not supported");
	j = tt_tiny_base();
	json_object_set_new(j, "pre_tokenizer", json_null());
	expect_json("no-byte-level", j, MOOR_EUNSUP,
		    "pre_tokenizer has no ByteLevel step");
	j = tt_tiny_base();
	json_object_set_new(j, "normalizer",
			    json_pack("{s:s}", "type", "Lowercase"));
	expect_json("lowercase", j, MOOR_EUNSUP,
		    "normalizer \"Lowercase\" is not supported");
	j = tt_tiny_base();
	json_object_set_new(j, "decoder", json_pack("{s:s}", "type", "BPE"));
	expect_json("decoder", j, MOOR_EUNSUP,
		    "decoder \"BPE\" is not supported");
	j = tt_tiny_base();
	json_object_del(j, "decoder");
	expect_json("no-decoder", j, MOOR_EMISSING, "decoder is missing");
	j = tt_tiny_base();
	json_object_set_new(j, "post_processor",
			    json_pack("{s:s}", "type", "TemplateProcessing"));
	expect_json("template", j, MOOR_EUNSUP,
		    "post_processor \"TemplateProcessing\" is not supported");
	j = tt_tiny_base();
	json_object_set_new(j, "truncation",
			    json_pack("{s:i}", "max_length", 16));
	expect_json("truncation", j, MOOR_EUNSUP, "truncation is set");

	printf("%d error cases, %d wrong\n", cases, failures);
	return t_done("test_tok_load_errors");
}
