/* toolcall.h: a finished generation read back into an OpenAI assistant
 * message: the reasoning split off (<think>...</think> -> reasoning_content)
 * and the tool calls parsed out of the content, in the two formats the
 * template families teach the model:
 *
 *   qwen3     <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 *   qwen3.5+  <tool_call>\n<function=f>\n<parameter=p>\nvalue\n</parameter>
 *             \n</function>\n</tool_call>
 *
 * Pure functions over bytes: no I/O, no global state. Malformed output is
 * never an error: a block that does not parse (unclosed tags, invalid JSON,
 * no <function=...>) stays in the content as the model wrote it.
 *
 * The rules are the ones a stream can follow without taking anything back
 * (replystream.h reads a generation piece by piece into the same result):
 * whether text is reasoning is known from its start (a <think> there, or
 * the prompt's), so an unclosed <think> is reasoning that was cut short and
 * a </think> the text did not open is content.
 *
 * Round trips: a qwen3 call's arguments are the model's own bytes of the
 * "arguments" object, so the template (which prints a string argument
 * verbatim) re-renders the call as the model wrote it. A qwen3.5+ parameter
 * value is converted by the tool schema's type as vLLM's qwen3coder parser
 * does: "null" (any case) is null; string types (string, str, text,
 * varchar, char, enum) and parameters the schema does not name stay
 * strings; int* / uint* / long / short / unsigned parse as integers,
 * num* / float* as numbers (integers unless the text has '.' or 'e'),
 * boolean / bool / binary as true/false, anything else (object, array, ...)
 * as JSON; a value that does not parse as its type stays a string (vLLM
 * reads a junk boolean as false, we keep the text). One "\n" is stripped at
 * each end of a value, as the template writes them. */
#ifndef GW_TOOLCALL_H
#define GW_TOOLCALL_H

#include <jansson.h>
#include <stddef.h>

#include "template.h"

/* Where the reasoning and the content lie in a generation (offsets into
 * it; nothing is copied). */
typedef struct gw_think_split {
	int has_reasoning;
	size_t reasoning_off, reasoning_len; /* newlines at both ends cut */
	size_t content_off, content_len;     /* leading whitespace cut */
} gw_think_split;

/* A text starts thinking when think_open (the prompt ended inside <think>:
 * gw_prompt.think_open) or when it starts with <think> after whitespace
 * (dropped with it: the model opened it, or repeated the prompt's). Then the
 * text up to the first </think> is reasoning, and without any </think> all
 * of it is (the generation stopped while thinking). A text that does not
 * start thinking is all content, a </think> in it included (the prompt
 * would have said if it opened one). */
void gw_think_split_text(const char *text, size_t len, int think_open,
			 gw_think_split *out);

/* Parse the tool calls out of content (len bytes). tools: the request's
 * tool schemas (NULL or an array; qwen3.5+ converts values by them).
 * id_prefix: each call's id is id_prefix followed by its index (NULL is
 * "call_"). On success *calls is a new OpenAI tool_calls array ({id, type:
 * "function", function: {name, arguments: a JSON string}}), NULL when no
 * call parsed, and *rest is the content without the parsed calls (trailing
 * whitespace cut when a call was taken out; NULL and 0 when nothing is
 * left), malloc'd; the caller frees both (free, json_decref). -ENOMEM is
 * the only error; then both are NULL. */
int gw_toolcalls_parse(gw_tmpl_family f, const char *content, size_t len,
		       const json_t *tools, const char *id_prefix,
		       json_t **calls, char **rest, size_t *rest_len);

/* One <tool_call> block as gw_toolcalls_parse reads it: body is the n bytes
 * after "<tool_call>", up to "</tool_call>" (closed) or to the end of the
 * text (!closed: the generation ended inside the block). The calls it holds
 * are appended to calls (an array), their ids numbered on from its size.
 * Returns 0 when at least one call parsed, 1 when none did (the block stays
 * content; calls is unchanged), -ENOMEM. A body that is not UTF-8 does not
 * parse. What gw_toolcalls_parse is made of, for the stream parser. */
int gw_toolcall_block(gw_tmpl_family f, const char *body, size_t n, int closed,
		      const json_t *tools, const char *id_prefix,
		      json_t *calls);

/* A whole reply: the reasoning split, then the tool calls parsed from the
 * content. Every field is malloc'd (or NULL when empty / none); the caller
 * calls gw_reply_fini. */
typedef struct gw_reply {
	char *reasoning;
	size_t reasoning_len;
	char *content;
	size_t content_len;
	json_t *tool_calls;
} gw_reply;

int gw_reply_parse(gw_tmpl_family f, const char *text, size_t len,
		   int think_open, const json_t *tools, const char *id_prefix,
		   gw_reply *out);
void gw_reply_fini(gw_reply *r); /* zeroed or NULL is fine */

#endif
