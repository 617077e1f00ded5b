/* logprobs.h: a generation's logprobs (`gw_lp_`), kept as engined's STEP
 * entries come and written in OpenAI's shapes: a chat's
 * choices[0].logprobs {"content": [{token, logprob, bytes, top_logprobs:
 * [{token, logprob, bytes}]}], "refusal": null} and a completion's
 * {"tokens", "token_logprobs", "top_logprobs", "text_offset"}. A pure step,
 * no HTTP and no loop: reply.c and sse.c write whole replies and chunks
 * with it, tests/gateway/test_gw_logprobs_json.c runs it alone.
 *
 * Choices written down:
 *   - Which tokens are kept is reply.c's call (every token whose text is
 *     part of the output: not the one that stopped the generation, the
 *     one where a stop string matched and none after it; reasoning
 *     tokens too, as vLLM's chat logprobs cover every output token).
 *   - "token" is the token's own text: its bytes (gw_tok_token_bytes)
 *     decoded alone by the reply's decoder (gw_tok_stream), so a byte-level
 *     BPE piece of a character is U+FFFD, one per maximal invalid subpart;
 *     a chat's "bytes" keeps the exact bytes as integers. An id that names
 *     no token: "" and [].
 *   - A logprob below -9999 (-inf, a token the model rules out) or not
 *     finite is written -9999.0, as vLLM does: JSON has no infinity.
 *   - A chat's top_logprobs: the request's top_logprobs likeliest, by
 *     (logprob desc, id asc) as engined sent them. A completion's
 *     top_logprobs dict (OpenAI's legacy shape, as vLLM): the sampled token
 *     first, then the request's logprobs likeliest; a key already there
 *     (the sampled token among the likeliest, or two ids of one text)
 *     keeps its first logprob, so a dict has at most logprobs + 1 keys.
 *   - text_offset: the characters (code points, as OpenAI's Python API
 *     counts) of the generated text before the token, counted on the
 *     decoded text (a U+FFFD is one). A token that starts inside a
 *     character (the second piece of a split one) has that character's
 *     offset. After a stop string the offsets stay those of the text as
 *     generated, so a token that starts in the cut part (the one where
 *     the match completed, the held-back ones before it) has an offset at
 *     or past the cut text's end (vLLM's offsets, sums of the tokens'
 *     lengths, do too).
 *
 * Memory: two moor_bufs that grow as tokens come (a token costs 24 bytes
 * and 8 a kept alternative); a failed growth is sticky (gw_lp_add returns
 * -ENOMEM from then on) and the caller ends the request with an error:
 * a reply whose logprobs miss tokens is never sent. A whole reply keeps
 * every entry to its end; a stream drops the ones a chunk carried
 * (gw_lp_drop), so it holds only those not yet sent: nothing after a
 * chunk reads them (no entry is ever taken back, a stop string's cut
 * included: the held-back tokens before it keep theirs), and text_offset
 * is the character count lp->chars, not the entries. The JSON is written
 * as text straight into the reply's or the chunk's buffer, in place of
 * its dump's null (gw_lp_splice_into); gw_lp_token_bytes says what a
 * token can cost, kept and written, for the stated RSS bound (limits.c).
 */
#ifndef GW_LOGPROBS_H
#define GW_LOGPROBS_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "proto.h"
#include "tokenizer.h"

/* JSON's stand-in for -inf (vLLM's) */
#define GW_LP_FLOOR (-9999.0)

/* One kept alternative. */
typedef struct gw_lp_alt {
	int32_t id;
	float lp;
} gw_lp_alt;

/* One kept token. */
typedef struct gw_lp_tok {
	int32_t token;
	float logprob;
	uint32_t n_top;	  /* its alternatives: alts[top_at, top_at + n_top) */
	uint32_t top_at;  /* an index into the alternatives, not bytes */
	uint64_t char_at; /* text_offset: the text's characters before it */
} gw_lp_tok;

/* A generation's logprobs: caller-allocated, zeroed is empty and valid. */
typedef struct gw_lp {
	moor_buf toks; /* gw_lp_tok [n] */
	moor_buf alts; /* gw_lp_alt [the sum of n_top] */
	size_t n;
	uint64_t chars; /* the characters the generated text has so far */
} gw_lp;

/* Frees what lp holds and zeroes it; safe on a zeroed struct. */
void gw_lp_fini(gw_lp *lp);

/* Keeps e's token and logprob and its first min(e->n_top, top)
 * alternatives, at the text's character count so far (call it before
 * gw_lp_text of the token's piece). 0, or -ENOMEM with nothing kept
 * (sticky: every later call fails too). */
int gw_lp_add(gw_lp *lp, const proto_step_entry *e, uint32_t top);

/* Forgets the entries kept (a stream's chunk carried them): n is 0, the
 * buffers are kept for the next ones (a stream holds at most what is
 * pending), the character count goes on and a failure stays sticky. */
void gw_lp_drop(gw_lp *lp);

/* The generated text grew by piece (len bytes of whole UTF-8 characters,
 * as gw_tok_stream hands them out): text_offset's count. */
void gw_lp_text(gw_lp *lp, const char *piece, size_t len);

/* The entry i (i < lp->n), borrowed until the next gw_lp_add. */
const gw_lp_tok *gw_lp_at(const gw_lp *lp, size_t i);

/* Appends to out the logprobs object of entries [from, to) (to <= lp->n)
 * as compact JSON text: a chat's (chat nonzero) or a completion's shape,
 * every list empty when from == to. Text, not a jansson tree: a whole
 * reply of 32k tokens with 20 alternatives each is ~50 MB of text and
 * would be ~8 times that as nodes. 0, or -ENOMEM (out's err: sticky, a
 * part may have been written). tok is read only. */
int gw_lp_write(const gw_lp *lp, const gw_tok *tok, int chat, size_t from,
		size_t to, moor_buf *out);

/* Appends to out the compact JSON dump[0, n) of a reply or chunk whose
 * choice says "logprobs":null with the text lp[0, lp_len) (gw_lp_write's)
 * in place of that null. Why a search is sound: a dump escapes every
 * quote inside a string, so the bytes "logprobs": occur only as a key,
 * and no object of a reply but its choice has that key; there is one
 * choice. 0 or -ENOMEM (out's err). */
int gw_lp_splice(moor_buf *out, const char *dump, size_t n, const char *lp,
		 size_t lp_len);

/* gw_lp_splice of gw_lp_write's text of entries [from, to), written into
 * out in place (no copy of the logprobs' text: a whole reply's is the
 * most a request holds). 0, or -ENOMEM with out cut back to what it held
 * before the call (its err cleared): the caller may write the frame
 * another way. */
int gw_lp_splice_into(moor_buf *out, const char *dump, size_t n,
		      const gw_lp *lp, const gw_tok *tok, int chat, size_t from,
		      size_t to);

/* The most bytes one token's logprobs can cost with top alternatives: its
 * entry (gw_lp_tok and top gw_lp_alt) and its JSON in the larger of the
 * two shapes (a chat's entry or a completion's four list items), for the
 * worst tokens tok has (what each id's bytes can become as an escaped
 * string, U+FFFD and \u00XX included, and as a bytes list; the sampled
 * token the costliest, the alternatives the top costliest distinct ids,
 * each logprob its longest form, GW_LP_NUM_MAX). Reads the whole
 * vocabulary: once, at start. */
uint64_t gw_lp_token_bytes(const gw_tok *tok, uint32_t top);

/* A logprob's longest text (put_num): "%.17g" of a double, a sign, 17
 * digits, the point and "e-45" at most, 23 bytes; with room. */
#define GW_LP_NUM_MAX 24

/* The fault seam (tests only; 0 in production, where nothing sets it):
 * when nonzero, the gw_lp_add call of that number (1: the first, counted
 * over every lp while it is set) fails as a failed growth does: -ENOMEM,
 * sticky for its lp. Once. gatewayd sets it from MOOR_GW_LP_FAULT at
 * start, so it counts the process's calls
 * (tests/gateway/test_gw_logprobs_oom.c). The loop thread's: not
 * atomic. */
extern uint64_t gw_lp_fault_at;

#endif
