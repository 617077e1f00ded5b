/* replystream.h: a generation's text, as it streams, read into the deltas
 * of an OpenAI chat stream (`gw_rs_`).
 *
 * The gateway feeds the decoded pieces of a generation as they come (whole
 * UTF-8 characters: gw_tok_stream) and the stream hands back events:
 * reasoning text, content text and tool calls, each as soon as it is known
 * and never taken back. Over a whole generation the events are exactly what
 * gw_reply_parse() makes of the whole text (the invariant, tested over
 * random splits of real and made-up replies):
 *
 *   - the REASONING texts concatenated are gw_reply.reasoning;
 *   - the CONTENT texts concatenated are gw_reply.content;
 *   - the TOOL_START events in order are gw_reply.tool_calls (index, id,
 *     function name), and the TOOL_ARGS texts of index i concatenated are
 *     call i's arguments (a JSON string's contents).
 *
 * So text that may still turn out to be a tag (a prefix of "<think>",
 * "</think>", "<tool_call>"), a stop string, or whitespace the whole-text
 * parse would trim is held back until it is known. A <tool_call> block is
 * held whole until its close tag and then either emitted as one TOOL_START
 * and its TOOL_ARGS, or, when it does not parse, as content (as
 * gw_reply_parse keeps a malformed block).
 *
 * Stop strings are matched on the raw generated text, before the reasoning
 * and tool split (as vLLM does); the text from the first match on is
 * dropped, the push returns GW_RS_STOPPED, and the caller cancels the
 * generation. "First" is the first to complete as the text grows (of stops
 * that end at the same byte, the longest), so the cut does not depend on
 * how the text was split into pieces. Raw mode (family GW_TMPL_UNKNOWN,
 * /v1/completions) parses neither reasoning nor tools and emits CONTENT only,
 * stops applied; the whitespace of the text is kept as generated.
 *
 * Errors: -ENOMEM; a callback's non-zero return is handed back as is and
 * the stream stays usable: that event and the ones after it stay queued and
 * are handed over first by the next push or finish (a push of 0 bytes just
 * retries them). Not thread-safe: one stream per request.
 */
#ifndef GW_REPLYSTREAM_H
#define GW_REPLYSTREAM_H

#include <jansson.h>
#include <stddef.h>

#include "template.h"

typedef enum gw_rs_kind {
	GW_RS_REASONING = 1,
	GW_RS_CONTENT,
	GW_RS_TOOL_START, /* index, id, name; the arguments follow */
	GW_RS_TOOL_ARGS,  /* index, text: a piece of the arguments string */
} gw_rs_kind;

typedef struct gw_rs_event {
	gw_rs_kind kind;
	int index;	  /* the tool call (TOOL_*), else 0 */
	const char *text; /* borrowed for the callback; len bytes */
	size_t len;
	const char *id, *name; /* TOOL_START; NUL-terminated, borrowed */
} gw_rs_event;

/* Called for each event, in order; a non-zero return ends the call that
 * made the event and is returned by it. */
typedef int (*gw_rs_cb)(void *arg, const gw_rs_event *ev);

typedef struct gw_rs_cfg {
	gw_tmpl_family family;	 /* GW_TMPL_UNKNOWN: raw mode */
	int think_open;		 /* the prompt ended inside <think> */
	const json_t *tools;	 /* the request's tools (NULL: none); borrowed
				  * for the stream's life */
	const char *id_prefix;	 /* tool call ids: prefix + index (NULL:
				  * "call_"); copied */
	const char *const *stop; /* stop strings (copied); empty ones are
				  * ignored */
	size_t n_stop;
} gw_rs_cfg;

typedef struct gw_rs gw_rs;

#define GW_RS_STOPPED 1

int gw_rs_new(const gw_rs_cfg *cfg, gw_rs **out);
void gw_rs_free(gw_rs *r); /* NULL is fine */

/* Feed one piece (len bytes, whole characters). Returns 0, GW_RS_STOPPED
 * when a stop string matched in this piece (the events up to the match are
 * out; later pushes are ignored and return GW_RS_STOPPED again), a
 * callback's non-zero, or -ENOMEM. */
int gw_rs_push(gw_rs *r, const char *piece, size_t len, gw_rs_cb cb, void *arg);

/* The generation ended: what was held back goes out (an unclosed
 * <tool_call> block as content, reasoning of a generation that stopped
 * while thinking as reasoning). After it, only the queries below. */
int gw_rs_finish(gw_rs *r, gw_rs_cb cb, void *arg);

/* The raw text taken in so far, stop strings cut (what gw_reply_parse
 * reads); borrowed. */
const char *gw_rs_text(const gw_rs *r, size_t *len);

/* Tool calls emitted so far (the finish_reason is "tool_calls" when > 0). */
int gw_rs_n_tool_calls(const gw_rs *r);

/* Every tool call taken so far, as gw_reply.tool_calls has them (an
 * OpenAI tool_calls array; borrowed, valid until gw_rs_free). */
const json_t *gw_rs_tool_calls(const gw_rs *r);

/* Whether a stop string ended the text. */
int gw_rs_stopped(const gw_rs *r);

/* The stop matcher's work so far: bytes of stop strings it compared (its
 * bound in tests: a small multiple of the text's bytes times the stop
 * strings, whatever their lengths). */
uint64_t gw_rs_stop_work(const gw_rs *r);

#endif
