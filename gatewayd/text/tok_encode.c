/* tok_encode.c: text to ids, the way HF's tokenizers do it for a byte-level
 * BPE tokenizer.json:
 *
 *   1. added tokens with normalized=false are found in the raw text
 *      (leftmost, longest; lstrip/rstrip/single_word as HF's
 *      added_vocabulary.rs);
 *   2. each stretch between them is normalized (NFC for Qwen), then added
 *      tokens with normalized=true are found in the normalized stretch;
 *   3. each remaining stretch goes through the pre-tokenizer steps (Qwen: the
 *      file's Split regex, Isolated; ByteLevel only maps bytes);
 *   4. each piece is merged by rank: the lowest-ranked adjacent pair first,
 *      the leftmost of equal pairs first (HF's BPE::merge_word).
 *
 * The byte-level mapping of step 3 never materializes: vocab and merges were
 * decoded to raw bytes at load, so pieces are merged as the bytes they are.
 *
 * Per call: the output, the regex match data, the merge scratch and a word
 * cache (piece bytes to ids), so concurrent calls share only the read-only
 * gw_tok. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "buf.h"
#include "tok_int.h"

/* ------------------------------------------------------------------------ */
/* UTF-8 */

/* Strict validation (what a Rust &str or a JS string guarantees): no
 * overlong forms, no surrogates, nothing above U+10FFFF. */
static int utf8_valid(const uint8_t *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		if (i + 8 <= n) {
			uint64_t w;
			memcpy(&w, s + i, 8);
			if (!(w & 0x8080808080808080ull)) {
				i += 8;
				continue;
			}
		}
		uint8_t c = s[i];
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t k;
		uint8_t lo = 0x80, hi = 0xbf;
		if (c >= 0xc2 && c <= 0xdf) {
			k = 1;
		} else if (c >= 0xe0 && c <= 0xef) {
			k = 2;
			if (c == 0xe0)
				lo = 0xa0;
			if (c == 0xed)
				hi = 0x9f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			k = 3;
			if (c == 0xf0)
				lo = 0x90;
			if (c == 0xf4)
				hi = 0x8f;
		} else {
			return 0;
		}
		if (i + k >= n)
			return 0;
		if (s[i + 1] < lo || s[i + 1] > hi)
			return 0;
		for (size_t j = 2; j <= k; j++)
			if ((s[i + j] & 0xc0) != 0x80)
				return 0;
		i += k + 1;
	}
	return 1;
}

static size_t utf8_len(uint8_t c)
{
	return c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
}

static uint32_t utf8_cp(const uint8_t *s, size_t *k)
{
	uint8_t c = s[0];
	*k = utf8_len(c);
	uint32_t v = *k == 1   ? c
		     : *k == 2 ? c & 0x1f
		     : *k == 3 ? c & 0x0f
			       : c & 7;
	for (size_t i = 1; i < *k; i++)
		v = v << 6 | (s[i] & 0x3f);
	return v;
}

/* Unicode White_Space (what HF's lstrip/rstrip strip: the regex crate's
 * \s). */
static int is_white_space(uint32_t c)
{
	return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xa0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
	       c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* ------------------------------------------------------------------------ */
/* Normalization */

static const utf8proc_option_t form_opts[4] = {
    [TOK_NFC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE,
    [TOK_NFD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE,
    [TOK_NFKC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
    [TOK_NFKD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT,
};

/* moor_buf's put, skipping empty pieces (a put of 0 bytes allocates, and
 * nfc() reads a buffer never allocated as "nothing changed"); its error. */
static int buf_put(moor_buf *b, const void *s, size_t n)
{
	if (n)
		moor_buf_put(b, s, n);
	return b->err;
}

static int map_one(const uint8_t *s, size_t n, int form, uint8_t **out,
		   size_t *outn)
{
	utf8proc_uint8_t *dst = NULL;
	utf8proc_ssize_t r =
	    utf8proc_map(s, (utf8proc_ssize_t)n, &dst, form_opts[form]);
	if (r < 0)
		return r == UTF8PROC_ERROR_NOMEM ? -ENOMEM : MOOR_EFORMAT;
	*out = dst;
	*outn = (size_t)r;
	return 0;
}

/* utf8proc 2.8 composes an LV Hangul syllable with U+11A7 (the TBase, not
 * a trailing consonant) and drops the U+11A7; ICU and Rust keep both. U+11A7
 * composes with nothing and blocks nothing across it, so the composing forms
 * are exact when applied to the text between U+11A7s. */
static const uint8_t tbase[3] = {0xe1, 0x86, 0xa7};

static int map_form(const uint8_t *s, size_t n, int form, uint8_t **out,
		    size_t *outn)
{
	const uint8_t *t = memmem(s, n, tbase, 3);
	if (!t || form == TOK_NFD || form == TOK_NFKD)
		return map_one(s, n, form, out, outn);
	moor_buf b = {0};
	int rc = 0;
	for (;;) {
		size_t k = t ? (size_t)(t - s) : n;
		uint8_t *o;
		size_t on;
		if ((rc = map_one(s, k, form, &o, &on)))
			break;
		rc = buf_put(&b, o, on);
		free(o);
		if (rc || !t || (rc = buf_put(&b, tbase, 3)))
			break;
		s += k + 3;
		n -= k + 3;
		t = memmem(s, n, tbase, 3);
	}
	if (!rc) {
		moor_buf_put(&b, "", 0); /* allocated, NUL-terminated */
		rc = b.err;
	}
	if (rc) {
		moor_buf_fini(&b);
		return rc;
	}
	*out = (uint8_t *)b.p; /* NUL-terminated, as utf8proc's */
	*outn = b.len;
	return 0;
}

/* A code point is NFC-stable here when NFC leaves it alone and it cannot
 * join what precedes it: a starter (combining class 0) that is its own NFC
 * and never the second of a canonical pair. A string of NFC-stable code
 * points is its own NFC: its decomposition recomposes piecewise, with
 * nothing to reorder or compose across the boundaries. So NFC only has to
 * look at spans that contain an unstable code point, each from the stable
 * starter before it to the next stable code point. */
int tok_nfc_init(gw_tok *t)
{
	t->nfc_unstable = calloc(0x110000 / 8, 1);
	if (!t->nfc_unstable)
		return -ENOMEM;
	for (uint32_t c = 0x300; c < 0x110000; c++) {
		if (c >= 0xd800 && c <= 0xdfff)
			continue;
		const utf8proc_property_t *p =
		    utf8proc_get_property((utf8proc_int32_t)c);
		int bad =
		    p->combining_class != 0 ||
		    (p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) ||
		    (c >= 0x1161 && c <= 0x1175) || /* Hangul V */
		    (c >= 0x11a8 && c <= 0x11c2);   /* Hangul T */
		if (!bad && p->decomp_seqindex != UINT16_MAX &&
		    p->decomp_type == 0) {
			/* a canonical decomposition: stable only if it
			 * recomposes to c (not a singleton or excluded) */
			uint8_t u[4], *o;
			size_t k = (size_t)utf8proc_encode_char(
			    (utf8proc_int32_t)c, u);
			size_t on;
			int rc = map_form(u, k, TOK_NFC, &o, &on);
			if (rc)
				return rc;
			bad = on != k || memcmp(o, u, k) != 0;
			free(o);
		}
		if (bad)
			t->nfc_unstable[c >> 3] |= (uint8_t)(1u << (c & 7));
	}
	return 0;
}

static int nfc_unstable(const gw_tok *t, uint32_t c)
{
	return c >= 0x300 && (t->nfc_unstable[c >> 3] >> (c & 7) & 1);
}

/* NFC through the stable spans (see tok_nfc_init). */
static int nfc(const gw_tok *t, const uint8_t *s, size_t n, uint8_t **out,
	       size_t *outn)
{
	moor_buf b = {0};
	size_t done = 0;    /* s[0..done) is in b (or unchanged) */
	size_t starter = 0; /* where the last stable code point began */
	size_t i = 0;
	int rc = 0;
	while (i < n) {
		if (s[i] < 0xcc) { /* below U+0300 */
			starter = i;
			i += utf8_len(s[i]);
			continue;
		}
		size_t k;
		uint32_t c = utf8_cp(s + i, &k);
		if (!nfc_unstable(t, c)) {
			starter = i;
			i += k;
			continue;
		}
		/* an unstable run from the stable starter before it */
		size_t a = starter < done ? done : starter;
		if (starter < done)
			a = i; /* the starter is already in b: start here */
		size_t e = i + k;
		while (e < n) {
			uint32_t c2 = utf8_cp(s + e, &k);
			if (!nfc_unstable(t, c2))
				break;
			e += k;
		}
		uint8_t *o;
		size_t on;
		if ((rc = buf_put(&b, s + done, a - done)) ||
		    (rc = map_form(s + a, e - a, TOK_NFC, &o, &on)))
			goto fail;
		rc = buf_put(&b, o, on);
		free(o);
		if (rc)
			goto fail;
		done = e;
		i = e;
		starter = e;
	}
	if (!b.p) {
		*out = NULL; /* already NFC */
		return 0;
	}
	if ((rc = buf_put(&b, s + done, n - done)))
		goto fail;
	*out = (uint8_t *)b.p;
	*outn = b.len;
	return 0;
fail:
	moor_buf_fini(&b);
	return rc;
}

int tok_normalize(const gw_tok *t, const uint8_t *s, size_t n, uint8_t **out,
		  size_t *outn)
{
	*out = NULL;
	*outn = n;
	if (!t->n_norm)
		return 0;
	size_t i = 0;
	while (i < n && s[i] < 0x80) /* ASCII is every form's fixed point */
		i++;
	if (i == n)
		return 0;
	if (t->n_norm == 1 && t->norm_form[0] == TOK_NFC)
		return nfc(t, s, n, out, outn);
	uint8_t *cur = NULL;
	size_t cn = n;
	for (int f = 0; f < t->n_norm; f++) {
		uint8_t *o;
		size_t on;
		int rc = map_form(cur ? cur : s, cn, t->norm_form[f], &o, &on);
		free(cur);
		if (rc)
			return rc;
		cur = o;
		cn = on;
	}
	*out = cur;
	*outn = cn;
	return 0;
}

/* Bytes with a tag each, for gw_tok_normalize_tagged. */
typedef struct tagged {
	moor_buf b;
	uint32_t *tag; /* [b.cap] */
	size_t tcap;
} tagged;

/* Appends s[0, n): with tags[i] each, or all with tag one when tags is
 * NULL. */
static int tagged_put(tagged *o, const uint8_t *s, size_t n,
		      const uint32_t *tags, uint32_t one)
{
	if (n == 0)
		return 0;
	size_t at = o->b.len;
	int rc = buf_put(&o->b, s, n);
	if (rc)
		return rc;
	if (o->tcap < o->b.cap) {
		uint32_t *t = realloc(o->tag, o->b.cap * sizeof *t);
		if (!t)
			return -ENOMEM;
		o->tag = t;
		o->tcap = o->b.cap;
	}
	for (size_t i = 0; i < n; i++)
		o->tag[at + i] = tags ? tags[i] : one;
	return 0;
}

/* Normalizes u[a, e) as one span and appends it: unchanged bytes keep
 * their tags, a rewritten span takes the tag of its first byte. */
static int tagged_span(const gw_tok *t, tagged *o, const uint8_t *u,
		       const uint32_t *tag, size_t a, size_t e, int *changed)
{
	uint8_t *ns;
	size_t nn;
	int rc = tok_normalize(t, u + a, e - a, &ns, &nn);
	if (rc)
		return rc;
	if (!ns)
		return tagged_put(o, u + a, e - a, tag + a, 0);
	*changed = 1;
	rc = tagged_put(o, ns, nn, NULL, tag[a]);
	free(ns);
	return rc;
}

int gw_tok_normalize_tagged(const gw_tok *t, const char *s, size_t n,
			    const uint32_t *tag, char **out, uint32_t **out_tag,
			    size_t *outn)
{
	*out = NULL;
	*out_tag = NULL;
	*outn = n;
	const uint8_t *u = (const uint8_t *)s;
	if (!t->n_norm || !utf8_valid(u, n))
		return 0;
	tagged o = {0};
	int changed = 0, rc = 0;
	if (t->nfc_unstable) {
		/* exactly NFC: only the unstable spans (tok_nfc_init) */
		size_t done = 0, starter = 0, i = 0;
		while (i < n && !rc) {
			size_t k = 1;
			uint32_t c =
			    u[i] < 0xcc ? 0 : utf8_cp(u + i, &k); /* < U+0300 */
			if (u[i] < 0xcc || !nfc_unstable(t, c)) {
				starter = i;
				i += utf8_len(u[i]);
				continue;
			}
			size_t a = starter < done ? i : starter;
			size_t e = i + k;
			while (e < n) {
				uint32_t c2 = utf8_cp(u + e, &k);
				if (!nfc_unstable(t, c2))
					break;
				e += k;
			}
			rc = tagged_put(&o, u + done, a - done, tag + done, 0);
			if (!rc)
				rc = tagged_span(t, &o, u, tag, a, e, &changed);
			done = i = starter = e;
		}
		if (!rc)
			rc = tagged_put(&o, u + done, n - done, tag + done, 0);
	} else {
		/* another normalizer: each run of one tag alone */
		for (size_t a = 0, e; a < n && !rc; a = e) {
			for (e = a + 1; e < n && tag[e] == tag[a]; e++)
				;
			rc = tagged_span(t, &o, u, tag, a, e, &changed);
		}
	}
	if (rc || !changed) {
		free(o.b.p);
		free(o.tag);
		return rc;
	}
	*out = (char *)o.b.p;
	*out_tag = o.tag;
	*outn = o.b.len;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* The per-call state */

/* The word cache: piece bytes to the ids BPE made of them. */
typedef struct cache_ent {
	uint64_t h;
	uint32_t koff, klen; /* in keys; klen 0: empty slot */
	uint32_t ioff, nids; /* in ids */
} cache_ent;

#ifndef CACHE_MAX_WORD	   /* tests may override it, and BPE_SCAN_MAX */
#define CACHE_MAX_WORD 128 /* longer pieces are rare; not cached */
#endif
#define CACHE_MAX_ENTS (1u << 20) /* then it stops growing */

typedef struct enc {
	const gw_tok *t;
	int32_t *out; /* [cap] the result */
	size_t n, cap;

	pcre2_match_data *md;
	pcre2_match_context *mctx; /* with jit, made on a JIT stack overflow */
	pcre2_jit_stack *jit;

	/* merge scratch, [scap] each */
	int32_t *id, *prev, *next, *mid;
	uint32_t *rank;
	uint64_t *heap; /* [3 * scap] (rank << 32 | pos) */
	size_t scap;

	cache_ent *ce; /* [cmask + 1] */
	uint32_t cmask, cn;
	moor_buf keys;
	int32_t *cids;
	size_t cids_n, cids_cap;
} enc;

static int emit(enc *e, int32_t id)
{
	if (e->n == e->cap) {
		size_t cap = e->cap ? e->cap * 2 : 256;
		int32_t *p = realloc(e->out, cap * sizeof *p);
		if (!p)
			return -ENOMEM;
		e->out = p;
		e->cap = cap;
	}
	e->out[e->n++] = id;
	return 0;
}

static void enc_fini(enc *e)
{
	free(e->out);
	if (e->md)
		pcre2_match_data_free(e->md);
	if (e->mctx)
		pcre2_match_context_free(e->mctx);
	if (e->jit)
		pcre2_jit_stack_free(e->jit);
	free(e->id);
	free(e->prev);
	free(e->next);
	free(e->mid);
	free(e->rank);
	free(e->heap);
	free(e->ce);
	moor_buf_fini(&e->keys);
	free(e->cids);
}

/* ------------------------------------------------------------------------ */
/* BPE */

static int scratch_reserve(enc *e, size_t n)
{
	if (n <= e->scap)
		return 0;
	size_t cap = n * 2;
	int32_t *id = realloc(e->id, cap * sizeof *id);
	if (id)
		e->id = id;
	int32_t *prev = realloc(e->prev, cap * sizeof *prev);
	if (prev)
		e->prev = prev;
	int32_t *next = realloc(e->next, cap * sizeof *next);
	if (next)
		e->next = next;
	int32_t *mid = realloc(e->mid, cap * sizeof *mid);
	if (mid)
		e->mid = mid;
	uint32_t *rank = realloc(e->rank, cap * sizeof *rank);
	if (rank)
		e->rank = rank;
	uint64_t *heap = realloc(e->heap, 3 * cap * sizeof *heap);
	if (heap)
		e->heap = heap;
	if (!id || !prev || !next || !mid || !rank || !heap)
		return -ENOMEM;
	e->scap = cap;
	return 0;
}

/* The rank of the pair starting at symbol i (and the merged id in mid[i]);
 * UINT32_MAX when there is no pair or no merge. */
static void pair_rank(enc *e, int32_t i)
{
	int32_t j = i < 0 ? -1 : e->next[i];
	if (i < 0)
		return;
	if (j < 0) {
		e->rank[i] = UINT32_MAX;
		return;
	}
	const tok_merge *m = tok_merge_find(e->t, e->id[i], e->id[j]);
	e->rank[i] = m ? m->rank : UINT32_MAX;
	e->mid[i] = m ? m->id : -1;
}

/* Merge symbol i with the one after it. */
static void merge_at(enc *e, int32_t i)
{
	int32_t j = e->next[i];
	e->id[i] = e->mid[i];
	e->next[i] = e->next[j];
	if (e->next[j] >= 0)
		e->prev[e->next[j]] = i;
	e->id[j] = -1;
	e->rank[j] = UINT32_MAX;
	pair_rank(e, i);
	pair_rank(e, e->prev[i]);
}

static void bpe_init(enc *e, const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		e->id[i] = e->t->byte_id[s[i]];
		e->prev[i] = (int32_t)i - 1;
		e->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
	}
	for (size_t i = 0; i < n; i++)
		pair_rank(e, (int32_t)i);
}

/* Short pieces: scan the list for the lowest rank each round (the leftmost
 * wins a tie, positions grow along the list). O(n^2) compares, no heap. */
static void bpe_scan(enc *e, size_t n)
{
	(void)n;
	for (;;) {
		uint32_t best = UINT32_MAX;
		int32_t at = -1;
		for (int32_t i = 0; i >= 0; i = e->next[i])
			if (e->rank[i] < best) {
				best = e->rank[i];
				at = i;
			}
		if (at < 0)
			return;
		merge_at(e, at);
	}
}

static void heap_push(uint64_t *h, size_t *hn, uint64_t v)
{
	size_t i = (*hn)++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (h[p] <= v)
			break;
		h[i] = h[p];
		i = p;
	}
	h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *hn)
{
	uint64_t top = h[0], v = h[--*hn];
	size_t i = 0, n = *hn;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && h[c + 1] < h[c])
			c++;
		if (v <= h[c])
			break;
		h[i] = h[c];
		i = c;
	}
	if (n)
		h[i] = v;
	return top;
}

/* Long pieces: a min-heap of (rank, position). An entry is stale when its
 * position's pair has changed since: the pair at a position never returns
 * once changed (the left symbol only grows), so equal rank means current. */
static void bpe_heap(enc *e, size_t n)
{
	size_t hn = 0;
	for (size_t i = 0; i < n; i++)
		if (e->rank[i] != UINT32_MAX)
			heap_push(e->heap, &hn,
				  (uint64_t)e->rank[i] << 32 | (uint32_t)i);
	while (hn) {
		uint64_t top = heap_pop(e->heap, &hn);
		int32_t i = (int32_t)(uint32_t)top;
		uint32_t r = (uint32_t)(top >> 32);
		if (e->id[i] < 0 || e->rank[i] != r)
			continue;
		merge_at(e, i);
		if (e->rank[i] != UINT32_MAX)
			heap_push(e->heap, &hn,
				  (uint64_t)e->rank[i] << 32 | (uint32_t)i);
		int32_t p = e->prev[i];
		if (p >= 0 && e->rank[p] != UINT32_MAX)
			heap_push(e->heap, &hn,
				  (uint64_t)e->rank[p] << 32 | (uint32_t)p);
	}
}

#ifndef BPE_WHOLE /* 0: no TOK_WHOLE shortcut (a test's switch) */
#define BPE_WHOLE 1
#endif
#ifndef BPE_SCAN_MAX
#define BPE_SCAN_MAX 48 /* pieces up to this many bytes use bpe_scan */
#endif

static int bpe_uncached(enc *e, const uint8_t *s, size_t n, int use_heap)
{
	int rc = scratch_reserve(e, n);
	if (rc)
		return rc;
	bpe_init(e, s, n);
	if (use_heap)
		bpe_heap(e, n);
	else
		bpe_scan(e, n);
	for (int32_t i = 0; i >= 0; i = e->next[i])
		if ((rc = emit(e, e->id[i])))
			return rc;
	return 0;
}

static cache_ent *cache_slot(enc *e, const uint8_t *s, size_t n, uint64_t h)
{
	for (uint64_t i = h;; i++) {
		cache_ent *c = &e->ce[i & e->cmask];
		if (!c->klen)
			return c;
		if (c->h == h && c->klen == n &&
		    memcmp(e->keys.p + c->koff, s, n) == 0)
			return c;
	}
}

static int cache_grow(enc *e)
{
	uint32_t cap = e->ce ? (e->cmask + 1) * 2 : 1024;
	cache_ent *ce = calloc(cap, sizeof *ce);
	if (!ce)
		return -ENOMEM;
	cache_ent *old = e->ce;
	uint32_t oldcap = e->ce ? e->cmask + 1 : 0;
	e->ce = ce;
	e->cmask = cap - 1;
	for (uint32_t i = 0; i < oldcap; i++)
		if (old[i].klen)
			*cache_slot(e, (const uint8_t *)e->keys.p + old[i].koff,
				    old[i].klen, old[i].h) = old[i];
	free(old);
	return 0;
}

static int bpe(enc *e, const uint8_t *s, size_t n)
{
	const gw_tok *t = e->t;
	if (n == 0)
		return 0;
	if (n == 1)
		return emit(e, t->byte_id[s[0]]);
	uint64_t h = tok_hash_bytes(s, n);
	if (n <= t->max_len) {
		/* HF's ignore_merges takes a piece that is a vocab token
		 * whole. Without it, a token whose own merges rebuild it
		 * (TOK_WHOLE, found at load) is what the merges would make:
		 * most words are one such token. */
		int32_t id = tok_vocab_find_h(t, s, n, h);
		if (id >= 0 && (t->ignore_merges ||
				(BPE_WHOLE && (t->flags[id] & TOK_WHOLE))))
			return emit(e, id);
	}
	if (n > CACHE_MAX_WORD)
		return bpe_uncached(e, s, n, n > BPE_SCAN_MAX);
	cache_ent *c = NULL;
	if (e->ce) {
		c = cache_slot(e, s, n, h);
		if (c->klen) {
			for (uint32_t i = 0; i < c->nids; i++) {
				int rc = emit(e, e->cids[c->ioff + i]);
				if (rc)
					return rc;
			}
			return 0;
		}
	}
	size_t start = e->n;
	int rc = bpe_uncached(e, s, n, n > BPE_SCAN_MAX);
	if (rc || e->cn >= CACHE_MAX_ENTS)
		return rc;
	if (!e->ce || (e->cn + 1) * 2 > e->cmask + 1) {
		if ((rc = cache_grow(e)))
			return rc;
	}
	c = cache_slot(e, s, n, h);
	size_t k = e->n - start;
	if (e->cids_n + k > e->cids_cap) {
		size_t cap = (e->cids_n + k) * 2 + 1024;
		int32_t *p = realloc(e->cids, cap * sizeof *p);
		if (!p)
			return -ENOMEM;
		e->cids = p;
		e->cids_cap = cap;
	}
	uint32_t koff = (uint32_t)e->keys.len;
	if ((rc = buf_put(&e->keys, s, n)))
		return rc;
	memcpy(e->cids + e->cids_n, e->out + start, k * sizeof *e->cids);
	*c = (cache_ent){.h = h,
			 .koff = koff,
			 .klen = (uint32_t)n,
			 .ioff = (uint32_t)e->cids_n,
			 .nids = (uint32_t)k};
	e->cids_n += k;
	e->cn++;
	return 0;
}

/* Mark the tokens that merging their own bytes gives back (TOK_WHOLE). */
int tok_whole_init(gw_tok *t)
{
	enc e = {.t = t};
	int rc = 0;
	for (int32_t id = 0; id < t->n_ids && !rc; id++) {
		if (!(t->flags[id] & TOK_BYTELEVEL) || t->len[id] < 2)
			continue;
		e.n = 0;
		rc = bpe_uncached(&e, t->blob + t->off[id], t->len[id],
				  t->len[id] > BPE_SCAN_MAX);
		if (!rc && e.n == 1 && e.out[0] == id)
			t->flags[id] |= TOK_WHOLE;
	}
	enc_fini(&e);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Pre-tokenization */

/* One match of re in s[0..n) at or after off: 1 found, 0 none, <0 error. */
static int find(enc *e, const pcre2_code *re, const uint8_t *s, size_t n,
		size_t off, size_t *ms, size_t *me)
{
	for (;;) {
		int rc = pcre2_match(re, s, n, off, PCRE2_NO_UTF_CHECK, e->md,
				     e->mctx);
		if (rc == PCRE2_ERROR_NOMATCH)
			return 0;
		if (rc >= 0) { /* 0: the ovector is short, pair 0 is set */
			PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
			*ms = ov[0];
			*me = ov[1];
			return 1;
		}
		if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !e->jit) {
			/* a long run needs more than the default 32 KiB */
			e->mctx = pcre2_match_context_create(NULL);
			e->jit =
			    pcre2_jit_stack_create(256 << 10, 256 << 20, NULL);
			if (!e->mctx || !e->jit)
				return -ENOMEM;
			pcre2_jit_stack_assign(e->mctx, NULL, e->jit);
			continue;
		}
		return rc == PCRE2_ERROR_NOMEMORY ? -ENOMEM : MOOR_ENOSPACE;
	}
}

static int pretok(enc *e, const uint8_t *s, size_t n, int k);

/* One step: split s by the step's regex; HF's Isolated keeps the matches
 * and the text between them as pieces, Removed drops the matches. An empty
 * match splits but adds nothing, and the search goes on one character
 * later (JavaScript's matchAll). */
static int split(enc *e, const tok_step *st, const uint8_t *s, size_t n, int k)
{
	size_t prev = 0, off = 0;
	int rc;
	while (off <= n) {
		size_t ms, me;
		rc = find(e, st->re, s, n, off, &ms, &me);
		if (rc < 0)
			return rc;
		if (rc == 0)
			break;
		if (ms > prev && (rc = pretok(e, s + prev, ms - prev, k + 1)))
			return rc;
		if (me > ms && st->behavior == TOK_ISOLATED &&
		    (rc = pretok(e, s + ms, me - ms, k + 1)))
			return rc;
		prev = me;
		off = me;
		if (me == ms) {
			if (me >= n)
				break;
			off = me + utf8_len(s[me]);
		}
	}
	if (prev < n)
		return pretok(e, s + prev, n - prev, k + 1);
	return 0;
}

static int pretok(enc *e, const uint8_t *s, size_t n, int k)
{
	const gw_tok *t = e->t;
	if (k == t->n_steps)
		return bpe(e, s, n);
	const tok_step *st = &t->step[k];
	if (st->prefix_space && (n == 0 || s[0] != ' ')) {
		/* ByteLevel add_prefix_space: the piece gets a leading ' ' */
		uint8_t *p = malloc(n + 1);
		if (!p)
			return -ENOMEM;
		p[0] = ' ';
		memcpy(p + 1, s, n);
		int rc = st->re ? split(e, st, p, n + 1, k)
				: pretok(e, p, n + 1, k + 1);
		free(p);
		return rc;
	}
	if (n == 0)
		return 0;
	return st->re ? split(e, st, s, n, k) : pretok(e, s, n, k + 1);
}

/* ------------------------------------------------------------------------ */
/* Added tokens */

/* The longest content of set that starts s[0..n), or NULL. */
static const tok_added *added_at(const tok_addset *set, const uint8_t *s,
				 size_t n)
{
	for (uint32_t i = 0; i < set->n; i++) {
		const tok_added *a = &set->v[i];
		if (a->len <= n && a->s[0] == s[0] &&
		    memcmp(a->s, s, a->len) == 0)
			return a;
	}
	return NULL;
}

static int is_word_at(enc *e, const uint8_t *s, size_t n, size_t at)
{
	int rc = pcre2_match(e->t->word_re, s, n, at,
			     PCRE2_NO_UTF_CHECK | PCRE2_ANCHORED, e->md, NULL);
	return rc >= 0;
}

typedef int (*seg_fn)(enc *e, const uint8_t *s, size_t n);

/* HF's AddedVocabulary::find_matches: leftmost-longest matches, each kept
 * or not (single_word: no word character touching either end), widened over
 * whitespace (lstrip: back to the previous match at most; rstrip), and the
 * text between them handed to seg. */
static int split_added(enc *e, const tok_addset *set, const uint8_t *s,
		       size_t n, seg_fn seg)
{
	size_t done = 0, i = 0;
	int rc;
	while (i < n) {
		const tok_added *a =
		    set->first[s[i]] ? added_at(set, s + i, n - i) : NULL;
		if (!a) {
			i++;
			continue;
		}
		size_t ms = i, me = i + a->len;
		i = me;
		if (a->single_word) {
			/* the character before the match, and the one after */
			size_t b = ms;
			if (b > 0) {
				b--;
				while (b > 0 && (s[b] & 0xc0) == 0x80)
					b--;
			}
			if ((ms > 0 && is_word_at(e, s, n, b)) ||
			    (me < n && is_word_at(e, s, n, me)))
				continue;
		}
		if (a->lstrip) {
			size_t b = ms;
			while (b > done) {
				size_t c0 = b - 1;
				while (c0 > 0 && (s[c0] & 0xc0) == 0x80)
					c0--;
				size_t k;
				if (!is_white_space(utf8_cp(s + c0, &k)))
					break;
				b = c0;
			}
			ms = b;
		}
		if (a->rstrip) {
			while (me < n) {
				size_t k;
				if (!is_white_space(utf8_cp(s + me, &k)))
					break;
				me += k;
			}
			i = me;
		}
		if (ms > done && (rc = seg(e, s + done, ms - done)))
			return rc;
		if ((rc = emit(e, a->id)))
			return rc;
		done = me;
	}
	if (done < n)
		return seg(e, s + done, n - done);
	return 0;
}

static int seg_normalized(enc *e, const uint8_t *s, size_t n)
{
	return pretok(e, s, n, 0);
}

static int seg_raw(enc *e, const uint8_t *s, size_t n)
{
	uint8_t *ns;
	size_t nn;
	int rc = tok_normalize(e->t, s, n, &ns, &nn);
	if (rc)
		return rc;
	const uint8_t *p = ns ? ns : s;
	if (e->t->norm.n)
		rc = split_added(e, &e->t->norm, p, nn, seg_normalized);
	else
		rc = pretok(e, p, nn, 0);
	free(ns);
	return rc;
}

int gw_tok_encode(const gw_tok *t, const char *text, size_t len, int32_t **ids,
		  size_t *n)
{
	*ids = NULL;
	*n = 0;
	const uint8_t *s = (const uint8_t *)text;
	if (!utf8_valid(s, len))
		return MOOR_EFORMAT;
	enc e = {.t = t};
	e.md = pcre2_match_data_create(1, NULL);
	if (!e.md)
		return -ENOMEM;
	int rc = split_added(&e, &t->raw, s, len, seg_raw);
	if (rc) {
		enc_fini(&e);
		return rc;
	}
	*ids = e.n ? e.out : NULL;
	*n = e.n;
	if (!e.n)
		free(e.out);
	e.out = NULL;
	enc_fini(&e);
	return 0;
}
