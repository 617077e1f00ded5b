/* tokenizer.c: loading a tokenizer.json (jansson), decoding ids to text, the
 * incremental stream decoder, and the small lookups of tokenizer.h. Encoding
 * is tok_encode.c.
 *
 * Load is strict: a field we would silently ignore but HF would honour (a
 * truncation, a template post-processor, a Split behaviour we do not
 * implement) is refused with MOOR_EUNSUP rather than tokenized differently. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "buf.h"
#include "tok_int.h"

/* ------------------------------------------------------------------------ */
/* The GPT-2 byte-level alphabet */

/* bytes_to_unicode(): the printable bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF
 * stand for themselves; the other 68 take U+0100.. in byte order. */
static int byte_printable(int b)
{
	return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) ||
	       (b >= 0xae && b <= 0xff);
}

#define BL_NCP 0x144 /* byte-level characters are below U+0144 */

static void byte_level_tables(int16_t cp_to_byte[BL_NCP])
{
	for (int i = 0; i < BL_NCP; i++)
		cp_to_byte[i] = -1;
	int n = 0;
	for (int b = 0; b < 256; b++) {
		if (byte_printable(b))
			cp_to_byte[b] = (int16_t)b;
		else
			cp_to_byte[256 + n++] = (int16_t)b;
	}
}

/* Decode one UTF-8 character of s[0..n) (valid UTF-8, as jansson hands it
 * out); returns its length. */
static size_t utf8_get(const uint8_t *s, size_t n, uint32_t *cp)
{
	uint8_t c = s[0];
	size_t k = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
	if (k > n)
		k = n;
	uint32_t v = k == 1 ? c : k == 2 ? c & 0x1f : k == 3 ? c & 0x0f : c & 7;
	for (size_t i = 1; i < k; i++)
		v = v << 6 | (s[i] & 0x3f);
	*cp = v;
	return k;
}

/* A byte-level spelling ("Ġworld") to raw bytes (" world"), out[] at least n
 * bytes. Returns the length, or -1 if some character is not byte-level. */
static long byte_level_decode(const int16_t cp_to_byte[BL_NCP],
			      const uint8_t *s, size_t n, uint8_t *out)
{
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		i += utf8_get(s + i, n - i, &cp);
		if (cp >= BL_NCP || cp_to_byte[cp] < 0)
			return -1;
		out[k++] = (uint8_t)cp_to_byte[cp];
	}
	return (long)k;
}

/* ------------------------------------------------------------------------ */
/* The vocabulary index */

int32_t tok_vocab_find_h(const gw_tok *t, const uint8_t *s, size_t n,
			 uint64_t h)
{
	for (uint64_t i = h;; i++) {
		int32_t id = t->vslot[i & t->vmask];
		if (id < 0)
			return -1;
		if (t->len[id] == n && memcmp(t->blob + t->off[id], s, n) == 0)
			return id;
	}
}

static void vocab_insert(gw_tok *t, int32_t id)
{
	const uint8_t *s = t->blob + t->off[id];
	size_t n = t->len[id];
	for (uint64_t i = tok_hash_bytes(s, n);; i++) {
		int32_t *slot = &t->vslot[i & t->vmask];
		if (*slot < 0) {
			*slot = id;
			return;
		}
		if (t->len[*slot] == n &&
		    memcmp(t->blob + t->off[*slot], s, n) == 0)
			return; /* two spellings of the same bytes: first wins
				 */
	}
}

static uint32_t pow2_at_least(uint64_t n)
{
	uint64_t p = 16;
	while (p < n)
		p <<= 1;
	return (uint32_t)p;
}

/* ------------------------------------------------------------------------ */
/* Regex: Oniguruma syntax to PCRE2 */

/* HF compiles patterns with Oniguruma (Ruby syntax). PCRE2 with UTF, UCP and
 * MULTILINE agrees on what Qwen's patterns use, except for a few escapes,
 * rewritten here to what Oniguruma means (and what @huggingface/tokenizers
 * rewrites them to for JavaScript):
 *   \s \S   Unicode White_Space (PCRE2's \s misses U+0085),
 *   \h \H   hex digits (PCRE2's \h is horizontal space),
 *   \w \W   Oniguruma's word set, \b \B its boundaries,
 *   \uHHHH  a code point (PCRE2 spells it \x{HHHH}).
 * Everything else is copied. */
#define ONIG_WORD                                                              \
	"\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{" \
	"BE}"

static int is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
	       (c >= 'A' && c <= 'F');
}

/* Returns 0, -ENOMEM, or MOOR_EUNSUP with *what naming the construct. */
static int onig_to_pcre2(const char *src, size_t n, moor_buf *out,
			 const char **what)
{
	int in_class = 0;
	for (size_t i = 0; i < n;) {
		char c = src[i];
		if (c == '\\' && i + 1 < n) {
			char e = src[i + 1];
			const char *rep = NULL;
			switch (e) {
			case 's':
				rep = "\\p{White_Space}";
				break;
			case 'S':
				rep = "\\P{White_Space}";
				break;
			case 'h':
				rep = in_class ? "0-9A-Fa-f" : "[0-9A-Fa-f]";
				break;
			case 'H':
				if (in_class) {
					*what = "\\H inside a character class";
					return MOOR_EUNSUP;
				}
				rep = "[^0-9A-Fa-f]";
				break;
			case 'w':
				rep = in_class ? ONIG_WORD : "[" ONIG_WORD "]";
				break;
			case 'W':
				if (in_class) {
					*what = "\\W inside a character class";
					return MOOR_EUNSUP;
				}
				rep = "[^" ONIG_WORD "]";
				break;
			case 'b':
				if (!in_class)
					rep = "(?:(?<![" ONIG_WORD
					      "])(?=[" ONIG_WORD
					      "])|(?<=[" ONIG_WORD
					      "])(?![" ONIG_WORD "]))";
				break;
			case 'B':
				if (!in_class)
					rep = "(?:(?<![" ONIG_WORD
					      "])(?![" ONIG_WORD
					      "])|(?<=[" ONIG_WORD
					      "])(?=[" ONIG_WORD "]))";
				break;
			case 'u':
				if (i + 5 < n && is_hex(src[i + 2]) &&
				    is_hex(src[i + 3]) && is_hex(src[i + 4]) &&
				    is_hex(src[i + 5])) {
					moor_buf_puts(out, "\\x{");
					moor_buf_put(out, src + i + 2, 4);
					moor_buf_puts(out, "}");
					i += 6;
					continue;
				}
				break;
			}
			if (rep) {
				moor_buf_puts(out, rep);
			} else {
				moor_buf_put(out, src + i, 2);
			}
			i += 2;
			continue;
		}
		if (!in_class && c == '[') {
			in_class = 1;
			moor_buf_put(out, src + i, 1);
			i++;
			/* a leading ']' (after an optional '^') is literal */
			if (i < n && src[i] == '^') {
				moor_buf_put(out, src + i, 1);
				i++;
			}
			if (i < n && src[i] == ']') {
				moor_buf_put(out, src + i, 1);
				i++;
			}
			continue;
		}
		if (in_class && c == '[') {
			if (i + 1 < n && src[i + 1] == ':') {
				/* a POSIX class [:alpha:] : copy through ":]"
				 */
				const char *end = strstr(src + i + 2, ":]");
				size_t k =
				    end ? (size_t)(end - src) + 2 - i : 1;
				moor_buf_put(out, src + i, k);
				i += k;
				continue;
			}
			*what = "a nested character class";
			return MOOR_EUNSUP;
		}
		if (in_class && c == ']')
			in_class = 0;
		if (in_class && c == '&' && i + 1 < n && src[i + 1] == '&') {
			*what = "a character-class intersection (&&)";
			return MOOR_EUNSUP;
		}
		moor_buf_put(out, src + i, 1);
		i++;
	}
	return out->err;
}

/* Compile a Split pattern. is_regex: a "Regex" (Oniguruma syntax) rather
 * than a "String" (a literal). */
static int compile_pattern(const char *path, const char *src, size_t n,
			   int is_regex, pcre2_code **out, char *err)
{
	moor_buf b = {0};
	const char *what = NULL;
	uint32_t opts = PCRE2_UTF | PCRE2_NO_UTF_CHECK;
	int rc = 0;
	if (is_regex) {
		rc = onig_to_pcre2(src, n, &b, &what);
		if (rc == MOOR_EUNSUP) {
			moor_errf(err, "%s: pre_tokenizer pattern uses %s",
				  path, what);
			goto out;
		}
		if (rc) {
			moor_errf(err, "%s: %s", path, moor_strerror(rc));
			goto out;
		}
		/* Oniguruma's Ruby syntax: ^ and $ are line anchors. */
		opts |= PCRE2_UCP | PCRE2_MULTILINE;
	} else {
		moor_buf_put(&b, src, n);
		if (b.err) {
			rc = b.err;
			moor_errf(err, "%s: %s", path, moor_strerror(rc));
			goto out;
		}
		opts |= PCRE2_LITERAL;
	}
	pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
	if (!cc) {
		rc = -ENOMEM;
		moor_errf(err, "%s: %s", path, moor_strerror(rc));
		goto out;
	}
	pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
	int ec;
	PCRE2_SIZE eoff;
	pcre2_code *re =
	    pcre2_compile((PCRE2_SPTR)b.p, b.len, opts, &ec, &eoff, cc);
	pcre2_compile_context_free(cc);
	if (!re) {
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(ec, msg, sizeof msg);
		moor_errf(err,
			  "%s: pre_tokenizer pattern does not compile "
			  "(PCRE2, at offset %zu of \"%s\"): %s",
			  path, (size_t)eoff, b.p, (char *)msg);
		rc = MOOR_EFORMAT;
		goto out;
	}
	/* JIT where the platform has it; pcre2_match() falls back to the
	 * interpreter by itself when it does not. */
	pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
	*out = re;
out:
	free(b.p);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Loading */

typedef struct loader {
	const char *path;
	char *err;
	gw_tok *t;
	int16_t cp_to_byte[BL_NCP];
	uint8_t *scratch; /* [scap] */
	size_t scap;
} loader;

#define FAIL(code, ...)                                                        \
	do {                                                                   \
		moor_errf(L->err, __VA_ARGS__);                                \
		return (code);                                                 \
	} while (0)

static uint8_t *scratch(loader *L, size_t n)
{
	if (n > L->scap) {
		uint8_t *p = realloc(L->scratch, n);
		if (!p)
			return NULL;
		L->scratch = p;
		L->scap = n;
	}
	return L->scratch;
}

static const char *type_of(json_t *o)
{
	json_t *ty = json_object_get(o, "type");
	return json_is_string(ty) ? json_string_value(ty) : NULL;
}

/* A boolean field that may be absent (def). Returns 0 or MOOR_EFORMAT. */
static int get_bool(loader *L, json_t *o, const char *key, int def, int *v,
		    const char *where)
{
	json_t *x = json_object_get(o, key);
	if (!x || json_is_null(x)) {
		*v = def;
		return 0;
	}
	if (!json_is_boolean(x))
		FAIL(MOOR_EFORMAT, "%s: %s.%s is not a boolean", L->path, where,
		     key);
	*v = json_is_true(x);
	return 0;
}

static int check_model(loader *L, json_t *model)
{
	if (!model || json_is_null(model))
		FAIL(MOOR_EMISSING, "%s: model is missing", L->path);
	if (!json_is_object(model))
		FAIL(MOOR_EFORMAT, "%s: model is not an object", L->path);
	json_t *ty = json_object_get(model, "type");
	if (!ty)
		FAIL(MOOR_EMISSING, "%s: model.type is missing", L->path);
	if (!json_is_string(ty))
		FAIL(MOOR_EFORMAT, "%s: model.type is not a string", L->path);
	if (strcmp(json_string_value(ty), "BPE") != 0)
		FAIL(MOOR_EUNSUP,
		     "%s: model.type is \"%s\"; only BPE is supported", L->path,
		     json_string_value(ty));
	json_t *d = json_object_get(model, "dropout");
	if (d && !json_is_null(d) &&
	    !(json_is_number(d) && json_number_value(d) == 0))
		FAIL(MOOR_EUNSUP,
		     "%s: model.dropout is set (BPE dropout is "
		     "random; not supported)",
		     L->path);
	const char *affix[] = {"continuing_subword_prefix",
			       "end_of_word_suffix"};
	for (int i = 0; i < 2; i++) {
		json_t *a = json_object_get(model, affix[i]);
		if (a && !json_is_null(a) &&
		    !(json_is_string(a) && json_string_length(a) == 0))
			FAIL(MOOR_EUNSUP, "%s: model.%s is set; not supported",
			     L->path, affix[i]);
	}
	return 0;
}

/* Pass 1 over the vocab and added tokens: the id range and blob size. */
static int size_tokens(loader *L, json_t *vocab, json_t *added, int64_t *max_id,
		       size_t *bytes)
{
	const char *key;
	size_t klen;
	json_t *v;
	*max_id = -1;
	*bytes = 0;
	json_object_keylen_foreach(vocab, key, klen, v)
	{
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) >= INT32_MAX)
			FAIL(MOOR_EFORMAT,
			     "%s: model.vocab[\"%s\"] is not an id", L->path,
			     key);
		if (json_integer_value(v) > *max_id)
			*max_id = json_integer_value(v);
		*bytes += klen;
	}
	size_t i;
	json_array_foreach(added, i, v)
	{
		json_t *id = json_object_get(v, "id");
		json_t *c = json_object_get(v, "content");
		if (!json_is_integer(id) || json_integer_value(id) < 0 ||
		    json_integer_value(id) >= INT32_MAX)
			FAIL(id ? MOOR_EFORMAT : MOOR_EMISSING,
			     "%s: added_tokens[%zu].id is %s", L->path, i,
			     id ? "not an id" : "missing");
		if (!json_is_string(c) || json_string_length(c) == 0)
			FAIL(c ? MOOR_EFORMAT : MOOR_EMISSING,
			     "%s: added_tokens[%zu].content is %s", L->path, i,
			     c ? "not a non-empty string" : "missing");
		if (json_integer_value(id) > *max_id)
			*max_id = json_integer_value(id);
		*bytes += json_string_length(c);
	}
	return 0;
}

static int load_vocab(loader *L, json_t *vocab, size_t *used)
{
	gw_tok *t = L->t;
	const char *key;
	size_t klen;
	json_t *v;
	json_object_keylen_foreach(vocab, key, klen, v)
	{
		int32_t id = (int32_t)json_integer_value(v);
		if (t->flags[id] & TOK_PRESENT)
			FAIL(MOOR_EFORMAT,
			     "%s: model.vocab gives id %d to two tokens",
			     L->path, id);
		uint8_t *dst = t->blob + *used;
		long n = byte_level_decode(L->cp_to_byte, (const uint8_t *)key,
					   klen, dst);
		if (n < 0) {
			/* Not byte-level: no byte string pre-tokenizes to it;
			 * it decodes to its own UTF-8, as HF's ByteLevel
			 * decoder does. */
			memcpy(dst, key, klen);
			n = (long)klen;
			t->flags[id] = TOK_PRESENT;
		} else {
			t->flags[id] = TOK_PRESENT | TOK_BYTELEVEL;
		}
		t->off[id] = (uint32_t)*used;
		t->len[id] = (uint32_t)n;
		*used += (size_t)n;
		if ((uint32_t)n > t->max_len)
			t->max_len = (uint32_t)n;
	}
	return 0;
}

/* The index holds byte-level spellings only (a raw-UTF-8 fallback token
 * must not shadow the byte-level token with the same bytes); the lowest id
 * wins a tie. */
static void index_vocab(gw_tok *t)
{
	for (uint32_t i = 0; i <= t->vmask; i++)
		t->vslot[i] = -1;
	for (int32_t id = 0; id < t->n_ids; id++)
		if (t->flags[id] & TOK_BYTELEVEL)
			vocab_insert(t, id);
}

static int load_merges(loader *L, json_t *merges)
{
	gw_tok *t = L->t;
	size_t n = json_array_size(merges);
	t->mmask = pow2_at_least((uint64_t)n * 2 + 1) - 1;
	t->mslot = malloc(((size_t)t->mmask + 1) * sizeof *t->mslot);
	if (!t->mslot)
		FAIL(-ENOMEM, "%s: %s", L->path, moor_strerror(-ENOMEM));
	for (uint32_t i = 0; i <= t->mmask; i++)
		t->mslot[i].id = -1;
	size_t r;
	json_t *m;
	json_array_foreach(merges, r, m)
	{
		const char *a, *b;
		size_t an, bn;
		if (json_is_string(m)) {
			/* the legacy "a b" form */
			a = json_string_value(m);
			const char *sp = memchr(a, ' ', json_string_length(m));
			if (!sp)
				FAIL(MOOR_EFORMAT,
				     "%s: model.merges[%zu] \"%s\" is not "
				     "two tokens",
				     L->path, r, a);
			an = (size_t)(sp - a);
			b = sp + 1;
			bn = json_string_length(m) - an - 1;
			const char *sp2 = memchr(b, ' ', bn);
			if (sp2) /* HF keeps the first two parts */
				bn = (size_t)(sp2 - b);
		} else if (json_is_array(m) && json_array_size(m) == 2 &&
			   json_is_string(json_array_get(m, 0)) &&
			   json_is_string(json_array_get(m, 1))) {
			a = json_string_value(json_array_get(m, 0));
			an = json_string_length(json_array_get(m, 0));
			b = json_string_value(json_array_get(m, 1));
			bn = json_string_length(json_array_get(m, 1));
		} else {
			FAIL(MOOR_EFORMAT,
			     "%s: model.merges[%zu] is not a pair of tokens",
			     L->path, r);
		}
		uint8_t *s = scratch(L, an + bn);
		if (!s && an + bn)
			FAIL(-ENOMEM, "%s: %s", L->path,
			     moor_strerror(-ENOMEM));
		long la =
		    byte_level_decode(L->cp_to_byte, (const uint8_t *)a, an, s);
		long lb =
		    la < 0 ? -1
			   : byte_level_decode(L->cp_to_byte,
					       (const uint8_t *)b, bn, s + la);
		int32_t ia = la < 0 ? -1 : tok_vocab_find(t, s, (size_t)la);
		int32_t ib =
		    lb < 0 ? -1 : tok_vocab_find(t, s + la, (size_t)lb);
		int32_t im = ia < 0 || ib < 0
				 ? -1
				 : tok_vocab_find(t, s, (size_t)(la + lb));
		if (im < 0) /* HF refuses these too */
			FAIL(MOOR_EFORMAT,
			     "%s: model.merges[%zu] (\"%.*s\" \"%.*s\") names "
			     "a token that is not in model.vocab",
			     L->path, r, (int)an, a, (int)bn, b);
		uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
		for (uint64_t h = tok_hash_pair(key);; h++) {
			tok_merge *e = &t->mslot[h & t->mmask];
			if (e->id < 0 || e->key == key) {
				/* a repeated pair: the later rank wins, as in
				 * HF's HashMap::insert */
				e->key = key;
				e->rank = (uint32_t)r;
				e->id = im;
				break;
			}
		}
	}
	return 0;
}

static int cmp_added(const void *a, const void *b)
{
	const tok_added *x = a, *y = b;
	if (x->len != y->len)
		return x->len > y->len ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static int set_add(tok_addset *set, const tok_added *a)
{
	for (uint32_t i = 0; i < set->n; i++)
		if (set->v[i].len == a->len &&
		    memcmp(set->v[i].s, a->s, a->len) == 0)
			return 1; /* the same content twice: the first wins */
	tok_added *v = realloc(set->v, (set->n + 1) * sizeof *v);
	if (!v)
		return -ENOMEM;
	set->v = v;
	set->v[set->n++] = *a;
	set->first[a->s[0]] = 1;
	return 0;
}

static int load_added(loader *L, json_t *added, size_t *used)
{
	gw_tok *t = L->t;
	size_t i;
	json_t *a;
	int any_single = 0;
	json_array_foreach(added, i, a)
	{
		char where[48];
		snprintf(where, sizeof where, "added_tokens[%zu]", i);
		int special, lstrip, rstrip, single, normalized;
		int rc;
		if ((rc = get_bool(L, a, "special", 0, &special, where)) ||
		    (rc = get_bool(L, a, "lstrip", 0, &lstrip, where)) ||
		    (rc = get_bool(L, a, "rstrip", 0, &rstrip, where)) ||
		    (rc = get_bool(L, a, "single_word", 0, &single, where)) ||
		    (rc = get_bool(L, a, "normalized", !special, &normalized,
				   where)))
			return rc;
		int32_t id =
		    (int32_t)json_integer_value(json_object_get(a, "id"));
		json_t *c = json_object_get(a, "content");
		size_t n = json_string_length(c);
		memcpy(t->blob + *used, json_string_value(c), n);
		t->off[id] = (uint32_t)*used;
		t->len[id] = (uint32_t)n;
		t->flags[id] =
		    TOK_PRESENT | TOK_ADDED | (special ? TOK_SPECIAL : 0);
		if (n > t->max_len)
			t->max_len = (uint32_t)n;
		tok_added e = {
		    .s = t->blob + *used,
		    .len = (uint32_t)n,
		    .id = id,
		    .lstrip = (uint8_t)lstrip,
		    .rstrip = (uint8_t)rstrip,
		    .single_word = (uint8_t)single,
		};
		*used += n;
		any_single |= single;
		if (normalized && t->n_norm) {
			uint8_t *ns = NULL;
			size_t nn = 0;
			rc = tok_normalize(t, e.s, e.len, &ns, &nn);
			if (rc)
				FAIL(rc, "%s: %s.content: %s", L->path, where,
				     moor_strerror(rc));
			if (ns) {
				/* owned by the normalized set */
				if (nn == 0) {
					free(ns);
					continue;
				}
				e.s = ns;
				e.len = (uint32_t)nn;
				e.owned = 1;
			}
			rc = set_add(&t->norm, &e);
			if (rc && ns)
				free(ns); /* not stored */
			if (rc < 0)
				FAIL(rc, "%s: %s", L->path, moor_strerror(rc));
		} else {
			rc = set_add(&t->raw, &e);
			if (rc < 0)
				FAIL(rc, "%s: %s", L->path, moor_strerror(rc));
		}
	}
	if (t->raw.n)
		qsort(t->raw.v, t->raw.n, sizeof *t->raw.v, cmp_added);
	if (t->norm.n)
		qsort(t->norm.v, t->norm.n, sizeof *t->norm.v, cmp_added);
	if (any_single) {
		/* HF tests "is a word character" with the regex crate's
		 * Unicode \w. */
		int ec;
		PCRE2_SIZE eoff;
		static const char w[] = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}"
					"\\x{200C}\\x{200D}]";
		t->word_re = pcre2_compile(
		    (PCRE2_SPTR)w, sizeof w - 1,
		    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK | PCRE2_ANCHORED,
		    &ec, &eoff, NULL);
		if (!t->word_re)
			FAIL(-ENOMEM, "%s: %s", L->path,
			     moor_strerror(-ENOMEM));
	}
	return 0;
}

static int load_normalizer(loader *L, json_t *n, int depth)
{
	gw_tok *t = L->t;
	if (!n || json_is_null(n))
		return 0;
	const char *ty = type_of(n);
	if (!ty)
		FAIL(MOOR_EFORMAT, "%s: normalizer has no type", L->path);
	static const char *forms[] = {"NFC", "NFD", "NFKC", "NFKD"};
	for (int i = 0; i < 4; i++) {
		if (strcmp(ty, forms[i]) == 0) {
			if (t->n_norm == TOK_MAX_NORM)
				FAIL(MOOR_EUNSUP,
				     "%s: normalizer: too many steps", L->path);
			t->norm_form[t->n_norm++] = i;
			return 0;
		}
	}
	if (strcmp(ty, "Sequence") == 0 && depth < 4) {
		json_t *list = json_object_get(n, "normalizers");
		if (!json_is_array(list))
			FAIL(MOOR_EMISSING,
			     "%s: normalizer Sequence has no normalizers",
			     L->path);
		size_t i;
		json_t *x;
		json_array_foreach(list, i, x)
		{
			int rc = load_normalizer(L, x, depth + 1);
			if (rc)
				return rc;
		}
		return 0;
	}
	FAIL(MOOR_EUNSUP,
	     "%s: normalizer \"%s\" is not supported (NFC, NFD, NFKC, NFKD "
	     "and Sequence are)",
	     L->path, ty);
}

static int add_step(loader *L, tok_step s)
{
	if (L->t->n_steps == TOK_MAX_STEPS) {
		if (s.re)
			pcre2_code_free(s.re);
		FAIL(MOOR_EUNSUP, "%s: pre_tokenizer: too many steps", L->path);
	}
	L->t->step[L->t->n_steps++] = s;
	return 0;
}

/* HF's ByteLevel pre-tokenizer regex (use_regex true): part of ByteLevel's
 * definition (tokenizers' byte_level.rs), not of any model's file. */
static const char byte_level_re[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)|\\s+";

static int load_pretok(loader *L, json_t *p, int *saw_byte_level, int depth)
{
	const char *ty = type_of(p);
	if (!ty)
		FAIL(MOOR_EFORMAT, "%s: pre_tokenizer has no type", L->path);
	if (*saw_byte_level)
		FAIL(MOOR_EUNSUP,
		     "%s: pre_tokenizer \"%s\" after ByteLevel is not "
		     "supported (ByteLevel must come last)",
		     L->path, ty);
	if (strcmp(ty, "Sequence") == 0 && depth < 4) {
		json_t *list = json_object_get(p, "pretokenizers");
		if (!json_is_array(list))
			FAIL(MOOR_EMISSING,
			     "%s: pre_tokenizer Sequence has no pretokenizers",
			     L->path);
		size_t i;
		json_t *x;
		json_array_foreach(list, i, x)
		{
			int rc = load_pretok(L, x, saw_byte_level, depth + 1);
			if (rc)
				return rc;
		}
		return 0;
	}
	if (strcmp(ty, "Split") == 0) {
		json_t *pat = json_object_get(p, "pattern");
		json_t *re = json_object_get(pat, "Regex");
		json_t *str = json_object_get(pat, "String");
		json_t *src = json_is_string(re) ? re : str;
		if (!json_is_string(src))
			FAIL(MOOR_EMISSING,
			     "%s: pre_tokenizer Split has no pattern.Regex or "
			     "pattern.String",
			     L->path);
		json_t *beh = json_object_get(p, "behavior");
		if (!json_is_string(beh))
			FAIL(MOOR_EMISSING,
			     "%s: pre_tokenizer Split has no behavior",
			     L->path);
		tok_step s = {0};
		const char *b = json_string_value(beh);
		if (strcmp(b, "Isolated") == 0)
			s.behavior = TOK_ISOLATED;
		else if (strcmp(b, "Removed") == 0)
			s.behavior = TOK_REMOVED;
		else
			FAIL(MOOR_EUNSUP,
			     "%s: pre_tokenizer Split behavior \"%s\" is not "
			     "supported (Isolated and Removed are)",
			     L->path, b);
		int invert;
		int rc = get_bool(L, p, "invert", 0, &invert, "pre_tokenizer");
		if (rc)
			return rc;
		if (invert)
			FAIL(MOOR_EUNSUP,
			     "%s: pre_tokenizer Split with invert is not "
			     "supported",
			     L->path);
		rc = compile_pattern(L->path, json_string_value(src),
				     json_string_length(src), src == re, &s.re,
				     L->err);
		if (rc)
			return rc;
		return add_step(L, s);
	}
	if (strcmp(ty, "ByteLevel") == 0) {
		int prefix, use_regex;
		int rc;
		if ((rc = get_bool(L, p, "add_prefix_space", 1, &prefix,
				   "pre_tokenizer")) ||
		    (rc = get_bool(L, p, "use_regex", 1, &use_regex,
				   "pre_tokenizer")))
			return rc;
		*saw_byte_level = 1;
		tok_step s = {.behavior = TOK_ISOLATED, .prefix_space = prefix};
		if (use_regex) {
			rc = compile_pattern(L->path, byte_level_re,
					     sizeof byte_level_re - 1, 1, &s.re,
					     L->err);
			if (rc)
				return rc;
		}
		if (!s.re && !s.prefix_space)
			return 0; /* only the byte mapping: no step */
		return add_step(L, s);
	}
	FAIL(MOOR_EUNSUP,
	     "%s: pre_tokenizer \"%s\" is not supported (Sequence, Split "
	     "and ByteLevel are)",
	     L->path, ty);
}

static int check_rest(loader *L, json_t *root)
{
	json_t *d = json_object_get(root, "decoder");
	if (!d || json_is_null(d))
		FAIL(MOOR_EMISSING, "%s: decoder is missing", L->path);
	if (!type_of(d) || strcmp(type_of(d), "ByteLevel") != 0)
		FAIL(MOOR_EUNSUP,
		     "%s: decoder \"%s\" is not supported (ByteLevel is)",
		     L->path, type_of(d) ? type_of(d) : "?");
	json_t *pp = json_object_get(root, "post_processor");
	if (pp && !json_is_null(pp) &&
	    (!type_of(pp) || strcmp(type_of(pp), "ByteLevel") != 0))
		FAIL(MOOR_EUNSUP,
		     "%s: post_processor \"%s\" is not supported (ByteLevel "
		     "or none)",
		     L->path, type_of(pp) ? type_of(pp) : "?");
	const char *off[] = {"truncation", "padding"};
	for (int i = 0; i < 2; i++) {
		json_t *x = json_object_get(root, off[i]);
		if (x && !json_is_null(x))
			FAIL(MOOR_EUNSUP, "%s: %s is set; not supported",
			     L->path, off[i]);
	}
	return 0;
}

static int load(loader *L, json_t *root)
{
	gw_tok *t = L->t;
	int rc;
	if (!json_is_object(root))
		FAIL(MOOR_EFORMAT, "%s: not a JSON object", L->path);
	json_t *model = json_object_get(root, "model");
	if ((rc = check_model(L, model)))
		return rc;
	json_t *vocab = json_object_get(model, "vocab");
	json_t *merges = json_object_get(model, "merges");
	if (!json_is_object(vocab))
		FAIL(vocab ? MOOR_EFORMAT : MOOR_EMISSING,
		     "%s: model.vocab is %s", L->path,
		     vocab ? "not an object" : "missing");
	if (!json_is_array(merges))
		FAIL(merges ? MOOR_EFORMAT : MOOR_EMISSING,
		     "%s: model.merges is %s", L->path,
		     merges ? "not an array" : "missing");
	json_t *added = json_object_get(root, "added_tokens");
	json_t *none = json_array();
	if (!none)
		FAIL(-ENOMEM, "%s: %s", L->path, moor_strerror(-ENOMEM));
	if (!added || json_is_null(added)) {
		added = none;
	} else if (!json_is_array(added)) {
		json_decref(none);
		FAIL(MOOR_EFORMAT, "%s: added_tokens is not an array", L->path);
	}
	if ((rc = check_rest(L, root)) ||
	    (rc = load_normalizer(L, json_object_get(root, "normalizer"), 0)))
		goto out;
	if (t->n_norm == 1 && t->norm_form[0] == TOK_NFC &&
	    (rc = tok_nfc_init(t))) {
		moor_errf(L->err, "%s: %s", L->path, moor_strerror(rc));
		goto out;
	}
	json_t *pt = json_object_get(root, "pre_tokenizer");
	int saw_bl = 0;
	if (pt && !json_is_null(pt) && (rc = load_pretok(L, pt, &saw_bl, 0)))
		goto out;
	if (!saw_bl) {
		moor_errf(L->err,
			  "%s: pre_tokenizer has no ByteLevel step; only "
			  "byte-level BPE is supported",
			  L->path);
		rc = MOOR_EUNSUP;
		goto out;
	}

	int64_t max_id;
	size_t bytes;
	if ((rc = size_tokens(L, vocab, added, &max_id, &bytes)))
		goto out;
	t->n_ids = (int32_t)(max_id + 1);
	t->off = calloc((size_t)t->n_ids + 1, sizeof *t->off);
	t->len = calloc((size_t)t->n_ids + 1, sizeof *t->len);
	t->flags = calloc((size_t)t->n_ids + 1, 1);
	t->blob = malloc(bytes + 1);
	t->vmask = pow2_at_least((uint64_t)json_object_size(vocab) * 2 + 1) - 1;
	t->vslot = malloc(((size_t)t->vmask + 1) * sizeof *t->vslot);
	if (!t->off || !t->len || !t->flags || !t->blob || !t->vslot) {
		rc = -ENOMEM;
		moor_errf(L->err, "%s: %s", L->path, moor_strerror(rc));
		goto out;
	}
	size_t used = 0;
	if ((rc = load_vocab(L, vocab, &used)))
		goto out;
	index_vocab(t);
	for (int b = 0; b < 256; b++) {
		uint8_t c = (uint8_t)b;
		t->byte_id[b] = tok_vocab_find(t, &c, 1);
		if (t->byte_id[b] < 0) {
			moor_errf(L->err,
				  "%s: model.vocab has no token for byte "
				  "0x%02x; not a byte-level vocabulary",
				  L->path, b);
			rc = MOOR_EUNSUP;
			goto out;
		}
	}
	if ((rc = load_merges(L, merges)))
		goto out;
	if ((rc = tok_whole_init(t))) {
		moor_errf(L->err, "%s: %s", L->path, moor_strerror(rc));
		goto out;
	}
	if ((rc = load_added(L, added, &used)))
		goto out;
	int ig;
	if ((rc = get_bool(L, model, "ignore_merges", 0, &ig, "model")))
		goto out;
	t->ignore_merges = ig;
	t->unk_id = -1;
	json_t *unk = json_object_get(model, "unk_token");
	if (json_is_string(unk))
		t->unk_id = gw_tok_token_id(t, json_string_value(unk));
out:
	json_decref(none);
	return rc;
}

int gw_tok_load(const char *path, gw_tok **out, char *err)
{
	*out = NULL;
	FILE *f = fopen(path, "rb");
	if (!f) {
		int rc = -errno;
		moor_errf(err, "%s: %s", path, moor_strerror(rc));
		return rc;
	}
	/* read it whole: jansson's stream reader takes a getc per byte */
	char *text = NULL;
	size_t n = 0, cap = 0;
	for (;;) {
		if (n == cap) {
			cap = cap ? cap * 2 : 1 << 20;
			char *p = realloc(text, cap);
			if (!p) {
				free(text);
				fclose(f);
				moor_errf(err, "%s: %s", path,
					  moor_strerror(-ENOMEM));
				return -ENOMEM;
			}
			text = p;
		}
		size_t k = fread(text + n, 1, cap - n, f);
		n += k;
		if (k == 0)
			break;
	}
	int rerr = ferror(f) ? -EIO : 0;
	fclose(f);
	if (rerr) {
		free(text);
		moor_errf(err, "%s: %s", path, moor_strerror(rerr));
		return rerr;
	}
	json_error_t je;
	json_t *root = json_loadb(text, n, JSON_ALLOW_NUL, &je);
	free(text);
	if (!root) {
		moor_errf(err, "%s:%d:%d: not valid JSON: %s", path, je.line,
			  je.column, je.text);
		return MOOR_EFORMAT;
	}
	gw_tok *t = calloc(1, sizeof *t);
	if (!t) {
		json_decref(root);
		moor_errf(err, "%s: %s", path, moor_strerror(-ENOMEM));
		return -ENOMEM;
	}
	loader L = {.path = path, .err = err, .t = t};
	byte_level_tables(L.cp_to_byte);
	int rc = load(&L, root);
	free(L.scratch);
	json_decref(root);
	if (rc) {
		gw_tok_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

void gw_tok_free(gw_tok *t)
{
	if (!t)
		return;
	for (int i = 0; i < t->n_steps; i++)
		pcre2_code_free(t->step[i].re);
	if (t->word_re)
		pcre2_code_free(t->word_re);
	for (uint32_t i = 0; i < t->norm.n; i++)
		if (t->norm.v[i].owned)
			free((void *)t->norm.v[i].s);
	free(t->raw.v);
	free(t->norm.v);
	free(t->off);
	free(t->len);
	free(t->flags);
	free(t->blob);
	free(t->vslot);
	free(t->mslot);
	free(t->nfc_unstable);
	free(t);
}

/* ------------------------------------------------------------------------ */
/* Lookups */

int32_t gw_tok_vocab_size(const gw_tok *t)
{
	return t->n_ids;
}

int32_t gw_tok_token_id(const gw_tok *t, const char *token)
{
	size_t n = strlen(token);
	const tok_addset *sets[2] = {&t->raw, &t->norm};
	for (int k = 0; k < 2; k++)
		for (uint32_t i = 0; i < sets[k]->n; i++) {
			int32_t id = sets[k]->v[i].id;
			if (t->len[id] == n &&
			    memcmp(t->blob + t->off[id], token, n) == 0)
				return id;
		}
	return tok_vocab_find(t, (const uint8_t *)token, n);
}

const char *gw_tok_token_bytes(const gw_tok *t, int32_t id, size_t *len)
{
	if (id < 0 || id >= t->n_ids || !(t->flags[id] & TOK_PRESENT)) {
		*len = 0;
		return NULL;
	}
	*len = t->len[id];
	return (const char *)t->blob + t->off[id];
}

int gw_tok_is_special(const gw_tok *t, int32_t id)
{
	return id >= 0 && id < t->n_ids && (t->flags[id] & TOK_SPECIAL);
}

/* ------------------------------------------------------------------------ */
/* Decoding */

/* WHATWG's UTF-8 decoder (TextDecoder, errors='replace'), one byte at a
 * time: it replaces each maximal invalid subpart with one U+FFFD, as Rust's
 * from_utf8_lossy does. Writes what b completes to o (at most 6 bytes). */
static size_t utf8_feed(gw_tok_stream *s, uint8_t b, uint8_t *o)
{
	static const uint8_t fffd[3] = {0xef, 0xbf, 0xbd};
	size_t k = 0;
again:
	if (s->need == 0) {
		s->lo = 0x80;
		s->hi = 0xbf;
		if (b < 0x80) {
			o[k++] = b;
			return k;
		}
		if (b >= 0xc2 && b <= 0xdf) {
			s->need = 1;
		} else if (b >= 0xe0 && b <= 0xef) {
			s->need = 2;
			if (b == 0xe0)
				s->lo = 0xa0;
			if (b == 0xed)
				s->hi = 0x9f;
		} else if (b >= 0xf0 && b <= 0xf4) {
			s->need = 3;
			if (b == 0xf0)
				s->lo = 0x90;
			if (b == 0xf4)
				s->hi = 0x8f;
		} else {
			memcpy(o + k, fffd, 3);
			return k + 3;
		}
		s->pend[0] = b;
		s->npend = 1;
		return k;
	}
	if (b < s->lo || b > s->hi) {
		/* the sequence so far is one error; b starts afresh */
		s->need = 0;
		s->npend = 0;
		memcpy(o + k, fffd, 3);
		k += 3;
		goto again;
	}
	s->lo = 0x80;
	s->hi = 0xbf;
	s->pend[s->npend++] = b;
	if (s->npend == s->need + 1) {
		memcpy(o + k, s->pend, s->npend);
		k += s->npend;
		s->need = 0;
		s->npend = 0;
	}
	return k;
}

static size_t utf8_end(gw_tok_stream *s, uint8_t *o)
{
	if (!s->need)
		return 0;
	s->need = 0;
	s->npend = 0;
	memcpy(o, "\xef\xbf\xbd", 3);
	return 3;
}

int gw_tok_decode(const gw_tok *t, const int32_t *ids, size_t n, char **text,
		  size_t *len)
{
	*text = NULL;
	*len = 0;
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		if (ids[i] < 0 || ids[i] >= t->n_ids ||
		    !(t->flags[ids[i]] & TOK_PRESENT))
			return MOOR_ERANGE;
		total += t->len[ids[i]];
	}
	/* each byte writes at most 3 (a U+FFFD) net of what it completes */
	uint8_t *o = malloc(3 * total + 4);
	if (!o)
		return -ENOMEM;
	gw_tok_stream st = {0};
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		const uint8_t *s = t->blob + t->off[ids[i]];
		for (uint32_t j = 0; j < t->len[ids[i]]; j++) {
			if (s[j] < 0x80 && !st.need)
				o[k++] = s[j]; /* the common case */
			else
				k += utf8_feed(&st, s[j], o + k);
		}
	}
	k += utf8_end(&st, o + k);
	o[k] = 0;
	*text = (char *)o;
	*len = k;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Streams */

int gw_tok_stream_init(gw_tok_stream *s, const gw_tok *t)
{
	memset(s, 0, sizeof *s);
	s->cap = 6 * (size_t)t->max_len + 8;
	s->buf = malloc(s->cap);
	if (!s->buf)
		return -ENOMEM;
	s->tok = t;
	return 0;
}

int gw_tok_stream_push(gw_tok_stream *s, int32_t id, const char **piece,
		       size_t *len)
{
	const gw_tok *t = s->tok;
	*piece = s->buf;
	*len = 0;
	if (id < 0 || id >= t->n_ids || !(t->flags[id] & TOK_PRESENT))
		return MOOR_ERANGE;
	const uint8_t *b = t->blob + t->off[id];
	uint8_t *o = (uint8_t *)s->buf;
	size_t k = 0;
	for (uint32_t j = 0; j < t->len[id]; j++)
		k += utf8_feed(s, b[j], o + k);
	*len = k;
	return 0;
}

int gw_tok_stream_flush(gw_tok_stream *s, const char **piece, size_t *len)
{
	*piece = s->buf;
	*len = utf8_end(s, (uint8_t *)s->buf);
	return 0;
}

void gw_tok_stream_fini(gw_tok_stream *s)
{
	free(s->buf);
	s->buf = NULL;
	s->cap = 0;
}
