/* fuzz_request.c: libFuzzer target for what a client's bytes reach before
 * any model runs (issue 13's fuzzing): the request parser (the body's
 * value count scanned, parsed, counted, read into gw_params for a chat and
 * for a completion: the template rendered, the prompt tokenized) and the
 * tokenizer's input (the bytes encoded as text, then streamed back
 * through the decoder). No h2o, no event loop. Every input must end in a
 * result or a clean refusal (a gw_fail with a 4xx/5xx status); the
 * sanitizers catch the rest.
 *
 * MOOR_FUZZ_MODEL: the checkpoint dir (tokenizer.json, its template). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw.h"

#define FUZZ_ASSERT(x)                                                         \
	do {                                                                   \
		if (!(x))                                                      \
			abort();                                               \
	} while (0)

static gw_tok *tok;
static gw_params_env env;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	const char *dir = getenv("MOOR_FUZZ_MODEL");
	char err[MOOR_ERRLEN], p[4096];
	if (!dir) {
		fprintf(stderr, "fuzz_request: set MOOR_FUZZ_MODEL\n");
		abort();
	}
	snprintf(p, sizeof p, "%s/tokenizer.json", dir);
	if (gw_tok_load(p, &tok, err)) {
		fprintf(stderr, "fuzz_request: %s\n", err);
		abort();
	}
	gw_tmpl_family fam;
	if (gw_tmpl_choose(dir, NULL, &fam, err)) {
		fprintf(stderr, "fuzz_request: %s\n", err);
		abort();
	}
	env = (gw_params_env){.served = "tiny",
			      .defs = {.temperature = 1, .top_p = 1},
			      .tok = tok,
			      .family = fam,
			      .window = 4096,
			      .default_max_tokens = 16,
			      .max_logprobs = PROTO_MAX_TOP};
	moor_log_level = MOOR_LOG_ERROR;
	return 0;
}

static void read_body(const uint8_t *data, size_t size)
{
	gw_fail f = {0};
	if (gw_limits_scan((const char *)data, size, &f)) {
		FUZZ_ASSERT(f.status == 400);
		return;
	}
	json_t *b = gw_params_parse((const char *)data, size, &f);
	if (!b) {
		FUZZ_ASSERT(f.status >= 400);
		return;
	}
	if (!gw_limits_check(b, &f)) {
		static const int kinds[] = {GW_KIND_CHAT, GW_KIND_COMPLETION};
		for (int k = 0; k < 2; k++) {
			gw_params p;
			gw_fail g = {0};
			int rc = gw_params_read(&env, kinds[k], b, "fuzz", 1, &p,
						&g);
			FUZZ_ASSERT(rc == 0 ? g.status == 0 && p.n_ids > 0
					    : g.status >= 400);
			gw_params_fini(&p);
		}
	}
	json_decref(b);
}

static void tokenize(const uint8_t *data, size_t size)
{
	int32_t *ids = NULL;
	size_t n = 0;
	if (gw_tok_encode(tok, (const char *)data, size, &ids, &n) == 0) {
		gw_tok_stream ts;
		if (gw_tok_stream_init(&ts, tok) == 0) {
			size_t out = 0;
			for (size_t i = 0; i < n; i++) {
				const char *piece = NULL;
				size_t pl = 0;
				FUZZ_ASSERT(gw_tok_stream_push(&ts, ids[i],
							       &piece, &pl) == 0);
				out += pl;
			}
			const char *piece = NULL;
			size_t pl = 0;
			FUZZ_ASSERT(gw_tok_stream_flush(&ts, &piece, &pl) == 0);
			/* every id came from the encoder: text comes back
			 * (a byte-level BPE drops nothing) */
			FUZZ_ASSERT(size == 0 || out + pl > 0);
			gw_tok_stream_fini(&ts);
		}
	}
	free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	read_body(data, size);
	tokenize(data, size);
	return 0;
}
