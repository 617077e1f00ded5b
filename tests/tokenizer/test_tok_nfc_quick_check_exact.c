/* test_tok_nfc_quick_check_exact: the NFC fast path (only spans around
 * NFC-unstable code points go through utf8proc) gives what utf8proc's NFC of
 * the whole text gives: every code point from U+0000 to U+10FFFF in seven
 * contexts (before and after starters, marks, Hangul jamo and syllables),
 * and random strings of letters, marks, jamo and precomposed characters.
 *
 * utf8proc 2.8 alone composes an LV syllable with U+11A7 (the Hangul TBase,
 * not a trailing consonant) and drops the U+11A7; ICU, and so node, keep
 * both. map_form() (the reference here) works around it; both paths are
 * also checked against ICU's answer for it, and gen_corpus.js has those
 * strings for the node oracle. */
#include "tok_encode.c"
#include "tokenizer.c"

#include "tok_test.h"

static size_t put_cp(uint8_t *o, uint32_t c)
{
	return (size_t)utf8proc_encode_char((utf8proc_int32_t)c, o);
}

static size_t bad;

static void check(const gw_tok *t, const uint8_t *s, size_t n, uint32_t tag)
{
	uint8_t *fast, *full;
	size_t fn, un;
	REQUIRE(nfc(t, s, n, &fast, &fn) == 0, "nfc");
	REQUIRE(map_form(s, n, TOK_NFC, &full, &un) == 0, "utf8proc");
	const uint8_t *f = fast ? fast : s;
	if (!fast)
		fn = n;
	if (fn != un || memcmp(f, full, un) != 0) {
		if (bad++ < 10)
			fprintf(stderr, "NFC differs (block/seed %x)\n", tag);
	}
	free(fast);
	free(full);
}

int main(void)
{
	gw_tok t = {0};
	REQUIRE(tok_nfc_init(&t) == 0, "init");
	size_t unstable = 0;
	for (uint32_t c = 0; c < 0x110000; c++)
		unstable += nfc_unstable(&t, c);
	/* contexts: a c, c a, c U+0301, e c U+0301, U+1100 c, c U+1161,
	 * U+AC00 c */
	static const uint32_t ctx[7][3] = {
	    {'a', 0, 0},    {0, 'a', 0},    {0, 0x301, 0},  {'e', 0, 0x301},
	    {0x1100, 0, 0}, {0, 0x1161, 0}, {0xac00, 0, 0},
	};
	uint8_t *buf = malloc(256 * 7 * 12);
	for (uint32_t blk = 0; blk < 0x110000; blk += 256) {
		size_t n = 0;
		for (uint32_t c = blk; c < blk + 256; c++) {
			if (c >= 0xd800 && c <= 0xdfff)
				continue;
			for (int k = 0; k < 7; k++) {
				if (ctx[k][0])
					n += put_cp(buf + n, ctx[k][0]);
				n += put_cp(buf + n, c);
				if (ctx[k][1])
					n += put_cp(buf + n, ctx[k][1]);
				if (ctx[k][2])
					n += put_cp(buf + n, ctx[k][2]);
			}
		}
		check(&t, buf, n, blk);
	}
	/* random mixtures */
	static const uint32_t pool[] = {
	    'a',    'e',     'o',     ' ',    0x300,  0x301,  0x323,  0x345,
	    0x3b1,  0x1f00,  0xe9,    0x1e9b, 0x1100, 0x1161, 0x11a8, 0xac00,
	    0xac01, 0x0bc6,  0x0bbe,  0x0b47, 0x0b3e, 0x09c7, 0x09be, 0xf900,
	    0x212b, 0x2126,  0x0f73,  0x0f71, 0x0f72, 0x0344, 0x05b0, 0x05bc,
	    0xfb2c, 0x0915,  0x093c,  0x0958, 0x1b05, 0x1b35, 0x3099, 0x304b,
	    0x309a, 0x1d15e, 0x1d165, 0x0340, 0x0374, 0x037e, 0x0387, 0x2add,
	    0x0338, '>',     '=',     0x1026, 0x102e, 0x0cc6, 0x0cc2, 0x0cd5,
	};
	uint32_t x = 99;
	for (int r = 0; r < 20000; r++) {
		size_t n = 0, len = 1 + r % 24;
		for (size_t i = 0; i < len; i++) {
			x ^= x << 13;
			x ^= x >> 17;
			x ^= x << 5;
			n += put_cp(buf + n,
				    pool[x % (sizeof pool / sizeof *pool)]);
		}
		check(&t, buf, n, (uint32_t)r);
	}
	/* utf8proc's bug, not ours: the fast path and map_form() */
	static const struct {
		const char *in, *want;
	} cases11a7[] = {
	    {"\xea\xb0\x80\xe1\x86\xa7", "\xea\xb0\x80\xe1\x86\xa7"},
	    {"\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa7",
	     "\xea\xb0\x80\xe1\x86\xa7"},
	};
	for (int i = 0; i < 2; i++) {
		uint8_t *o;
		size_t on, n = strlen(cases11a7[i].in);
		REQUIRE(nfc(&t, (const uint8_t *)cases11a7[i].in, n, &o, &on) ==
			    0,
			"nfc");
		const uint8_t *r = o ? o : (const uint8_t *)cases11a7[i].in;
		CHECK((o ? on : n) == strlen(cases11a7[i].want) &&
			  memcmp(r, cases11a7[i].want,
				 strlen(cases11a7[i].want)) == 0,
		      "U+11A7 case %d", i);
		free(o);
	}
	CHECK(bad == 0, "%zu differences", bad);
	printf("NFC fast path: %zu NFC-unstable code points (utf8proc %s); "
	       "0x110000 code points x 7 contexts and 20000 random strings "
	       "checked\n",
	       unstable, utf8proc_unicode_version());
	free(buf);
	free(t.nfc_unstable);
	return t_done("test_tok_nfc_quick_check_exact");
}
