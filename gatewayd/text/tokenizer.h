/* tokenizer.h: the gateway's tokenizer, the HF tokenizer.json byte-level BPE
 * of the Qwen family (GPT-2 byte mapping, merges by rank, added and special
 * tokens matched first, NFC, a pre-tokenizer regex read from the file).
 *
 * What "right" is: @huggingface/tokenizers' `encode(text).ids` and
 * `decode(ids)` on the same tokenizer.json (tests/tokenizer/). The HF
 * behaviours kept on purpose are written next to the code that keeps them
 * (tok_encode.c); the known divergences of the JS oracle are listed in
 * tests/tokenizer/README.md.
 *
 * Errors: 0 is success; -errno for system errors (a missing file is -ENOENT);
 * MOOR_EFORMAT (malformed JSON or UTF-8), MOOR_EMISSING (a required field is
 * absent), MOOR_EUNSUP (a model, normalizer or pre-tokenizer we do not
 * implement), MOOR_ERANGE (an id outside the vocabulary), MOOR_ENOSPACE (the
 * regex ran out of its match budget on a pathological input). */
#ifndef GW_TOKENIZER_H
#define GW_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "moor.h"

typedef struct gw_tok gw_tok;

/* Load a tokenizer.json. On success *out is a tokenizer the caller frees with
 * gw_tok_free(); on failure *out is NULL and err (MOOR_ERRLEN bytes, may be
 * NULL) says what went wrong, naming the file and the field. */
int gw_tok_load(const char *tokenizer_json_path, gw_tok **out, char *err);
void gw_tok_free(gw_tok *tok); /* NULL is fine */

/* Encode UTF-8 text (len bytes, NUL bytes allowed) as HF's default encode
 * does: added and special tokens that occur in the text are matched first
 * (leftmost, longest), the rest is normalized, pre-tokenized and merged. No
 * BOS/EOS is added (the Qwen post-processor adds none).
 *
 * On success *ids is a malloc'd array of *n ids that the caller frees with
 * free() (NULL when *n is 0). On failure *ids is NULL and *n is 0; invalid
 * UTF-8 is MOOR_EFORMAT.
 *
 * Thread-safe: the tokenizer is read-only after gw_tok_load(); every call
 * keeps its own scratch, regex match data and word cache. */
int gw_tok_encode(const gw_tok *tok, const char *text, size_t len,
		  int32_t **ids, size_t *n);

/* Decode ids to UTF-8 as HF's decode (skip_special_tokens false): vocab
 * tokens through the byte-level reverse mapping, added and special tokens as
 * their content, invalid byte sequences each replaced by U+FFFD (the
 * maximal-subpart rule of WHATWG's TextDecoder and Rust's from_utf8_lossy).
 *
 * On success *text is a malloc'd, NUL-terminated string of *len bytes that
 * the caller frees with free(); on failure *text is NULL. An id outside
 * [0, gw_tok_vocab_size()) or one that names no token is MOOR_ERANGE. */
int gw_tok_decode(const gw_tok *tok, const int32_t *ids, size_t n, char **text,
		  size_t *len);

/* The tokenizer's normalizer (NFC for the Qwen families) over s[0, n),
 * each byte with a tag (tag[i]: for the end alignment, the row the byte
 * came from). On success *out and *out_tag are the normalized bytes and
 * their tags, malloc'd, *outn bytes each, or both NULL (*outn = n) when s
 * is already normalized or is not whole UTF-8. A span the normalizer
 * rewrites takes the tag of its first byte (NFC: from the stable starter
 * before an unstable code point to the next stable one, tok_nfc_init);
 * under another normalizer each run of one tag is normalized alone.
 * -ENOMEM. The copy a client sends back is tokenized normalized, so a
 * model's answer that is not NFC (a CJK compatibility ideograph, combining
 * marks out of canonical order) reaches the rows again only this way. */
int gw_tok_normalize_tagged(const gw_tok *tok, const char *s, size_t n,
			    const uint32_t *tag, char **out, uint32_t **out_tag,
			    size_t *outn);

/* The id of the token whose text is `token` (NUL-terminated raw UTF-8, not
 * the byte-level "Ġ" spelling): an added token's content first, then the BPE
 * vocabulary. -1 if there is none. */
int32_t gw_tok_token_id(const gw_tok *tok, const char *token);

/* One more than the largest id (the BPE vocabulary and the added tokens:
 * 151,669 for Qwen3). Ids below it may still name no token. */
int32_t gw_tok_vocab_size(const gw_tok *tok);

/* The raw bytes id decodes to, borrowed from tok (valid until gw_tok_free);
 * NULL (and *len 0) for an id that names no token. */
const char *gw_tok_token_bytes(const gw_tok *tok, int32_t id, size_t *len);

/* Whether id is an added token marked special (e.g. <|im_end|>; not
 * <think>, which Qwen3 adds as a non-special token). */
int gw_tok_is_special(const gw_tok *tok, int32_t id);

/* Incremental decoding for streams: feed ids one at a time; every piece it
 * hands out is whole UTF-8 characters. An incomplete trailing sequence is
 * held back until a later token completes it (or proves it invalid, when it
 * becomes U+FFFD); gw_tok_stream_flush() ends the stream. The concatenation
 * of all pieces, flush included, equals gw_tok_decode() of all the ids.
 *
 * Caller-allocated; _fini is safe on zeroed memory. The fields are private. */
typedef struct gw_tok_stream {
	const gw_tok *tok;
	uint8_t pend[4];	     /* the bytes of the incomplete character */
	uint8_t npend, need, lo, hi; /* WHATWG decoder state */
	char *buf;		     /* the last piece; [cap] */
	size_t cap;
} gw_tok_stream;

int gw_tok_stream_init(gw_tok_stream *s, const gw_tok *tok);
/* Feed one id. *piece (borrowed from s, valid until the next call on s) gets
 * *len bytes, possibly 0. MOOR_ERANGE for an unknown id (the state is kept). */
int gw_tok_stream_push(gw_tok_stream *s, int32_t id, const char **piece,
		       size_t *len);
/* End of stream: U+FFFD for a held-back incomplete character, then the
 * state is reset (the stream can be reused). */
int gw_tok_stream_flush(gw_tok_stream *s, const char **piece, size_t *len);
void gw_tok_stream_fini(gw_tok_stream *s);

#endif
