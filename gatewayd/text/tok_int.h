/* tok_int.h: the tokenizer's internals, shared by tokenizer.c (loading,
 * decoding, streams) and tok_encode.c (encoding). Everything here is
 * read-only once gw_tok_load() returns. */
#ifndef GW_TOK_INT_H
#define GW_TOK_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer.h"

/* gw_tok.flags[id] */
enum {
	TOK_PRESENT = 1, /* some token has this id */
	TOK_ADDED = 2,	 /* an added token: matched in text, decoded raw */
	TOK_SPECIAL = 4,
	TOK_BYTELEVEL = 8, /* a BPE token spelled in the byte-level alphabet */
	TOK_WHOLE = 16,	   /* merging its bytes gives this token back */
};

/* One added token in a matching set. */
typedef struct tok_added {
	const uint8_t *s; /* content (normalized for the normalized set) */
	uint32_t len;
	int32_t id;
	uint8_t lstrip, rstrip, single_word;
	uint8_t owned; /* s is malloc'd (a normalized copy) */
} tok_added;

/* The added tokens matched against one form of the text: HF matches those
 * with normalized=false in the raw text, those with normalized=true in the
 * normalized text. */
typedef struct tok_addset {
	tok_added *v; /* [n], longest content first */
	uint32_t n;
	uint8_t first[256]; /* nonzero for bytes some content starts with */
} tok_addset;

/* Normalization forms (utf8proc). */
enum { TOK_NFC, TOK_NFD, TOK_NFKC, TOK_NFKD };
#define TOK_MAX_NORM 8

/* One pre-tokenizer step: HF's Split, or ByteLevel's own prefix space and
 * regex. Steps run in order, each on every piece the previous one made. */
enum { TOK_ISOLATED, TOK_REMOVED };
typedef struct tok_step {
	pcre2_code *re;	  /* NULL: no split (ByteLevel with use_regex false) */
	int behavior;	  /* TOK_ISOLATED or TOK_REMOVED */
	int prefix_space; /* ByteLevel add_prefix_space */
} tok_step;
#define TOK_MAX_STEPS 8

/* The merge table: open addressing on the pair of ids. */
typedef struct tok_merge {
	uint64_t key;  /* (uint64_t)left << 32 | right */
	uint32_t rank; /* the merge's line in model.merges */
	int32_t id;    /* the merged token; -1: empty slot */
} tok_merge;

struct gw_tok {
	int32_t n_ids;	  /* ids are [0, n_ids) */
	uint32_t *off;	  /* [n_ids] offset of the token's raw bytes in blob */
	uint32_t *len;	  /* [n_ids] */
	uint8_t *flags;	  /* [n_ids] TOK_* */
	uint8_t *blob;	  /* every token's raw bytes */
	uint32_t max_len; /* the longest token, bytes */
	int32_t byte_id[256]; /* the token of each single byte */
	int32_t unk_id;	      /* -1: none */
	int ignore_merges;

	int32_t *vslot; /* [vmask+1] the BPE vocab by raw bytes; -1 empty */
	uint32_t vmask;
	tok_merge *mslot; /* [mmask+1] */
	uint32_t mmask;

	tok_addset raw, norm;
	pcre2_code
	    *word_re; /* \w as HF's single_word sees it; NULL if unused */

	int norm_form[TOK_MAX_NORM]; /* the normalizer: forms in order */
	int n_norm;
	uint8_t *nfc_unstable; /* [0x110000 / 8] bits; tok_nfc_init() */

	tok_step step[TOK_MAX_STEPS];
	int n_steps;
};

static inline uint64_t tok_hash_bytes(const uint8_t *s, size_t n)
{
	/* FNV-1a, then a multiply to spread the low bits: words are short. */
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ s[i]) * 0x100000001b3ull;
	return (h ^ (h >> 29)) * 0x9e3779b97f4a7c15ull;
}

static inline uint64_t tok_hash_pair(uint64_t key)
{
	key ^= key >> 31;
	key *= 0x9e3779b97f4a7c15ull;
	return key ^ (key >> 29);
}

/* The merge of (a, b), or NULL. */
static inline const tok_merge *tok_merge_find(const gw_tok *t, int32_t a,
					      int32_t b)
{
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	for (uint64_t i = tok_hash_pair(key);; i++) {
		const tok_merge *m = &t->mslot[i & t->mmask];
		if (m->id < 0)
			return NULL;
		if (m->key == key)
			return m;
	}
}

/* Build nfc_unstable (the normalizer is exactly NFC). */
int tok_nfc_init(gw_tok *t);

/* Normalize s[0..n) with the tokenizer's normalizer. *out is NULL when the
 * text is already normalized, else a malloc'd copy of *outn bytes. */
int tok_normalize(const gw_tok *t, const uint8_t *s, size_t n, uint8_t **out,
		  size_t *outn);

/* Mark TOK_WHOLE (after the merges are loaded). */
int tok_whole_init(gw_tok *t);

/* The BPE vocabulary's id for raw bytes, or -1; h is tok_hash_bytes(s, n). */
int32_t tok_vocab_find_h(const gw_tok *t, const uint8_t *s, size_t n,
			 uint64_t h);
static inline int32_t tok_vocab_find(const gw_tok *t, const uint8_t *s,
				     size_t n)
{
	return tok_vocab_find_h(t, s, n, tok_hash_bytes(s, n));
}

#endif
