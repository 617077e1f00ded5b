/* params.h: a request's body read into what the gateway sends engined
 * (`gw_params`): the sampling fields, the stop strings, the session, the
 * stream flags and the prompt's token ids (for a chat, the messages
 * rendered by the model's template and tokenized). A pure step: JSON and a
 * read-only environment in, a struct or an OpenAI-shaped error out. No
 * HTTP, no event loop, no engine: it runs on libuv's thread pool in
 * gatewayd and alone in tests (tests/gateway/test_gw_params_read.c).
 *
 * Choices written down:
 *   - What the server does not do is refused (400, code
 *     unsupported_parameter), never ignored: a logit_bias, nonzero
 *     penalties, a response_format other than text, n other than 1, echo,
 *     suffix, best_of other than 1, a completion's top_logprobs (a chat
 *     field; a completion asks with logprobs: N).
 *   - logprobs, as OpenAI and vLLM read them: a chat's logprobs is a
 *     boolean and its top_logprobs an integer in [0, 20] (PROTO_MAX_TOP)
 *     that needs logprobs true (vLLM's rule: a top_logprobs, 0 included,
 *     without it is 400); a completion's logprobs is an integer in
 *     [0, 20], the alternatives besides the sampled token, whose own
 *     logprob is always given (0: the sampled token's alone). null is
 *     absent. The values are the model's raw log-softmax (proto.h's STEP),
 *     before temperature and the other samplers, as vLLM's default. The
 *     server's --max-logprobs (env->max_logprobs, vLLM's flag) caps the
 *     alternatives: more is 400 naming top_logprobs (a completion's
 *     logprobs); at 0 any request for logprobs is 400 naming logprobs (a
 *     peek's body too: it is read as its chat would be).
 *   - tool_choice "none": the tools are not rendered into the prompt (the
 *     model is told of no tools, OpenAI's "the model will not call any
 *     tool"); "auto" or absent renders them; "required" and a named
 *     function are refused (400): nothing here can force a call.
 *   - max_tokens (or a chat's max_completion_tokens) absent: the default
 *     (a chat's is the server's --default-max-tokens, a completion's 16),
 *     capped by the room the window leaves after the prompt.
 *   - reasoning_budget (Qwen's spelling) or thinking_budget (vLLM's): the
 *     reasoning tokens after which the server closes the reasoning (with
 *     Qwen's close phrase, a hidden span, and </think>); absent: the
 *     server's --reasoning-budget; 0: none. Only a prompt that ends inside
 *     <think> has a budget.
 *   - cache_salt (vLLM's name): a non-empty string that keys this
 *     request's caches apart from every other salt's (auth.c).
 *   - The session: the body's conversation id (conversation_id, a
 *     conversation string or its id, metadata.conversation_id), else the
 *     x-session-id header, else "" (cached names it by the prompt).
 */
#ifndef GW_PARAMS_H
#define GW_PARAMS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "moor.h"
#include "template.h"
#include "tokenizer.h"

#define GW_MAX_STOP 4 /* stop strings per request (OpenAI) */
#define GW_MAX_CACHE_SALT 1024 /* a body's cache_salt, bytes */

/* What a job does. */
enum { GW_KIND_CHAT = 1, GW_KIND_COMPLETION, GW_KIND_ADMIN, GW_KIND_PEEK };

/* An HTTP error decided off the loop (the job's answer). */
typedef struct gw_fail {
	int status; /* 0: none */
	char type[48];
	char param[64];
	char code[48];
	char msg[MOOR_ERRLEN];
	int retry_after; /* seconds; 0: no header */
} gw_fail;

void gw_failf(gw_fail *f, int status, const char *type, const char *param,
	      const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Sampling defaults (generation_config.json when the model has one, else
 * OpenAI's: temperature 1, top_p 1). */
typedef struct gw_gen_defaults {
	double temperature, top_p, min_p;
	int32_t top_k;
} gw_gen_defaults;

/* What the read borrows from the server: read-only while requests run. */
typedef struct gw_params_env {
	const char *served; /* a body's "model", when given, must equal it */
	gw_gen_defaults defs;
	const gw_tok *tok;
	gw_tmpl_family family;	     /* the chat template */
	uint32_t window;	     /* engined's window, tokens */
	uint32_t default_max_tokens; /* a chat's max_tokens when unset */
	uint32_t reasoning_budget;   /* --reasoning-budget (0: none) */
	/* --max-logprobs: the most alternatives a token may list
	 * (<= PROTO_MAX_TOP); 0: logprobs are refused */
	uint32_t max_logprobs;
} gw_params_env;

/* What a request asked for. */
typedef struct gw_params {
	int stream, include_usage;
	uint32_t max_tokens;
	int max_tokens_set;
	float temperature, top_p, min_p;
	int32_t top_k;
	uint64_t seed;
	/* logprobs asked (a chat's logprobs true, a completion's logprobs
	 * not null); top_logprobs: the alternatives a token lists (a chat's
	 * top_logprobs, a completion's logprobs), <= PROTO_MAX_TOP */
	int logprobs;
	uint32_t top_logprobs;
	char *stop[GW_MAX_STOP]; /* [n_stop] malloc'd */
	size_t n_stop;
	int ignore_eos;
	char *session;	       /* malloc'd, "" when none */
	char *cache_salt;      /* the body's cache_salt, malloc'd; NULL: none */
	size_t cache_salt_len;
	const json_t *tools;   /* borrowed from the body; NULL: none */
	int think_open;	       /* the prompt ends inside <think> */
	uint32_t reasoning_budget; /* reasoning tokens before the server
				    * closes the reasoning; 0: none */
	gw_tmpl_family family; /* GW_TMPL_UNKNOWN for /v1/completions */
	int32_t *ids;	       /* [n_ids] the prompt, malloc'd */
	size_t n_ids;
	size_t n_system, n_tools; /* the prompt's first ids: a first system
				   * message and the tools in its header */
	/* where the last message of role "user" starts: a token index into
	 * ids (its <|im_start|>), for the disk tier's head anchors
	 * (proto_generate.user_at); 0: unknown (no user message, a
	 * completion) */
	size_t user_at;
} gw_params;

/* The body's bytes as a JSON object, or NULL with f filled (400: not JSON,
 * with the parser's line and column; not an object). The caller
 * json_decref()s it. */
json_t *gw_params_parse(const char *body, size_t len, gw_fail *f);

/* Reads body for a request of kind GW_KIND_CHAT, GW_KIND_PEEK (a chat body,
 * read alike) or GW_KIND_COMPLETION. hdr_session: the x-session-id header
 * or NULL; seed: the seed when the body gives none. Returns 0 with p
 * filled, or -1 with f filled (400 for a bad or unsupported field, 404 for
 * another model, 500 when the tokenizer or template fails for want of
 * memory). Either way the caller releases p with gw_params_fini; p->tools
 * borrows from body, which must outlive p. p is zeroed first. */
int gw_params_read(const gw_params_env *env, int kind, const json_t *body,
		   const char *hdr_session, uint64_t seed, gw_params *p,
		   gw_fail *f);

/* Frees what p owns and zeroes it; safe on a zeroed struct. */
void gw_params_fini(gw_params *p);

#endif
