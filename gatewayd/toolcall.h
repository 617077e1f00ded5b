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
 * no <function=...>) stays in the content as the model wrote it, and an
 * unclosed <think> in a prompt that did not open one is content too.
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

/* think_open: the prompt ended inside <think> (gw_prompt.think_open). Then
 * the text up to the first </think> is reasoning (a leading "<think>" the
 * model repeats is dropped), and without any </think> all of it is (the
 * generation stopped while thinking). Otherwise a text that starts with
 * <think> (after whitespace) and has a </think> is split there; one with a
 * </think> but no <think> has its reasoning before it (a template that
 * opened <think> in the prompt); anything else is all content. */
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
