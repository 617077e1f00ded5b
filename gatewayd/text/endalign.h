/* endalign.h: the end alignment of a client's copy (`gw_align_`).
 *
 * The end anchor (cached) holds the state after the last generation: the
 * rows' ids are the prompt as it was rendered then plus the ids the engine
 * generated. A client sends that text back, the template renders it again
 * and the tokenizer splits it, and the ids need not be the rows' ids:
 * byte-level BPE has many spellings of one string and a model may pick any
 * of them, so a copy whose every byte is the rows' own parts from the rows
 * inside the answer and the turn resumes at a grid anchor.
 *
 * Where it runs, and why: in gatewayd, before the request goes to engined.
 * The alignment compares bytes, and the gateway is the process with the
 * tokenizer (an id's bytes) and the template (the think tags); cached has
 * the rows' ids and keeps, with the end anchor, its marks (the generation
 * regions and the hidden spans, cache.h). So the gateway asks cached for
 * the end anchor's record (PROTO_END_GET: the rows' ids from where the copy
 * parts, the marks), aligns here, and sends the rows' ids up to the end
 * anchor followed by the rest of the copy; cached then finds every id up to
 * the end anchor in place and resumes there, with no special case in the
 * planner. What the engine reads is the rows' tokens (the context it had);
 * usage.prompt_tokens stays the client's count.
 *
 * The rule (the seed's replay, glue and end alignment):
 *   - every byte of the copy up to the end anchor is the rows' own, in the
 *     rows' order, whatever tokens the copy's spelling chose; the rows'
 *     bytes as the client received them (U+FFFD for a sequence that is
 *     not UTF-8) and normalized as the tokenizer normalizes the copy
 *     (NFC: a model may write a compatibility ideograph, or marks out of
 *     canonical order, which the client's copy then holds normalized);
 *   - hidden spans (rows the client never received) are skipped on the
 *     rows' side (the replay puts them back);
 *   - a run of whitespace-only tokens of the rows next to a skipped span
 *     (the glue) matches any run of whitespace in the copy, none included:
 *     the template trims and adds newlines around a span;
 *   - a second pass, when the first fails, aligns a copy that leaves
 *     earlier answers' reasoning out: for each generation region whose
 *     reasoning ends at a </think>, the copy may hold it (as the rows), or
 *     hold the tags with nothing between them (Qwen3.8's preserve_thinking
 *     writes <think>\n\n</think>\n\n), or leave the whole block out
 *     (Qwen3's and Qwen3.5's templates for an answer before the last user
 *     message). Each region takes the first of the three that matches up to
 *     the next region; every other non-whitespace byte must still be the
 *     rows' own. The rows' reasoning is served (the engine's context).
 * The end anchor may fall inside one of the copy's tokens (a copy that
 * spells the answer's last bytes and the text after them as one token):
 * the rest of that token's bytes are tokenized alone.
 *
 * Pure: no I/O, no state; tests/tokenizer/test_end_align.c runs it on the
 * tokenizer alone. */
#ifndef GW_ENDALIGN_H
#define GW_ENDALIGN_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

enum { GW_MARK_GEN = 1, GW_MARK_HIDDEN = 2 }; /* = PROTO_MARK_* */

typedef struct gw_align_mark {
	uint64_t start, len;
	uint32_t kind;
} gw_align_mark;

typedef struct gw_align_in {
	const gw_tok *tok;
	const int32_t *copy; /* the copy's ids [0, n_copy) */
	size_t n_copy;
	size_t common;	     /* the copy and the rows agree on [0, common) */
	const int32_t *tail; /* the rows' ids [common, end) */
	size_t end;
	const gw_align_mark *marks; /* below end; ascending starts */
	size_t n_marks;
	int reasoning_pass; /* 0: the first pass alone */
} gw_align_in;

typedef struct gw_align_out {
	int pass;	    /* 1 or 2: aligned by that pass; 0: not */
	int32_t *ids;	    /* the prompt to serve (malloc'd), or NULL */
	size_t n;
	size_t hidden;	    /* hidden-span tokens put back */
	size_t reasoning;   /* rows' reasoning tokens the copy left out */
	size_t copy_at_end; /* the copy's tokens up to the end anchor */
	/* not aligned (pass 0): where the first pass stopped, for the log: a
	 * row (the rows' token whose byte differs, or end when the copy ran
	 * out) and the copy's token there */
	size_t fail_row, fail_copy;
} gw_align_out;

/* Aligns in->copy to the end anchor. 0 with out filled (out->pass 0 and no
 * ids when it does not align: serve the copy as sent), -ENOMEM. */
int gw_end_align(const gw_align_in *in, gw_align_out *out);
void gw_align_out_fini(gw_align_out *out);

#endif
