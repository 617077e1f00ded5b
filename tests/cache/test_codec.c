/* test_codec: the NVMe tiers' codec (byte planes + zstd frames) is
 * lossless and checked:
 *   - round trips bit for bit (memcmp) for 0, 1 and 3 bytes, a bf16-like
 *     buffer, random bytes (stored raw: they do not shrink), and a buffer
 *     of nine frames and an odd tail (8 MiB + 5 bytes);
 *   - four planes: fp32-like values (Gaussian, a scale per row of 128)
 *     take them and shrink more than in two; bf16-like rows keep two (the
 *     bytes of before, byte for byte); fp32, bf16, the two mixed, random
 *     bytes and zeros round trip in frames of 64 KiB and 1 MiB, chosen
 *     and forced two and four, at 1, 3, 5, 4k + 1, 4k + 2, 4k + 3 bytes
 *     and over frames' seams; 1, 3 and 16 threads write the same bytes;
 *     a buffer of two planes built with zstd alone decodes;
 *   - a flag bit flipped in the length table (reserved, raw and four
 *     both, four set on a frame of two or cleared on one of four), a
 *     four-plane frame's length one off, a flipped byte in it and one
 *     that decodes short are MOOR_EFORMAT, never a crash;
 *   - the encoded bytes are the same on 1 thread, on 3 and on 16 (more
 *     threads than frames), in 1 MiB frames and in 64 KiB ones (each
 *     frame alone), and with a workspace kept across calls of other sizes
 *     (the spill's) as with buffers of the call's own;
 *   - bf16 rows of few exponents shrink (the planes' point);
 *   - the format (stored files outlive the code): the header, then each
 *     frame a plain zstd frame of the planes (or the planes raw, or of
 *     four planes: the frame's even bytes then its odd ones, no content
 *     size in its header), plane 0 the values' low bytes then plane 1 the
 *     high ones, the odd last byte at the end, read back with zstd alone;
 *   - the buffers of before (8 MiB frames, the header's `frame`) decode:
 *     one built here with zstd alone as the code of before wrote it, and
 *     codec_encode_framed's in 8 MiB frames, the same bytes;
 *   - a flipped byte in a frame, a cut buffer, a wrong decoded size, a bad
 *     magic and a frame size that is not a power of two within
 *     [CODEC_FRAME_MIN, CODEC_FRAME_MAX] or not the header's frame count's
 *     are MOOR_EFORMAT, never a crash. */
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "codec.h"
#include "moor.h"
#include "t.h"

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void bf16ish(uint8_t *p, uint64_t n, uint64_t seed)
{
	uint64_t x = seed | 1;
	for (uint64_t i = 0; i + 1 < n; i += 2) {
		/* values near +-1: a few exponents, random mantissas */
		float f = (float)((double)(rnd(&x) % 20000) / 10000.0 - 1.0);
		uint16_t h = moor_f32_to_bf16(f);
		memcpy(p + i, &h, 2);
	}
	if (n & 1)
		p[n - 1] = 0x5a;
}

/* fp32-like: values of 4 uniforms' sum (near Gaussian) times a scale per
 * row of 128 (2^-k, k in [0, 12)): a recurrent state's bytes, narrow
 * exponents and random mantissas */
static void fp32ish(uint8_t *p, uint64_t n, uint64_t seed)
{
	uint64_t x = seed | 1;
	float scale = 1;
	for (uint64_t i = 0; i + 4 <= n; i += 4) {
		if (i % 512 == 0)
			scale = 1.0f / (float)(1u << (rnd(&x) % 12));
		double u = 0;
		for (int k = 0; k < 4; k++)
			u += (double)(rnd(&x) >> 11) / 9007199254740992.0;
		float f = (float)(u - 2.0) * scale;
		memcpy(p + i, &f, 4);
	}
	for (uint64_t i = n & ~3ull; i < n; i++)
		p[i] = (uint8_t)(0x40 + i);
}

/* the workspace every round trip shares (grown and reused across sizes,
 * as the spill keeps it) */
static codec_ws ws;

static int roundtrip(const uint8_t *src, uint64_t n, moor_pool *pool,
		     uint64_t *enc_n, const char *what)
{
	uint8_t *e = malloc(codec_bound(n)), *d = malloc(n + 1);
	REQUIRE(e && d, "oom");
	REQUIRE(codec_encode(src, n, e, enc_n, pool, &ws) == 0, "%s: encode",
		what);
	CHECK(*enc_n <= codec_bound(n), "%s: within the bound", what);
	int rc = codec_decode(e, *enc_n, d, n, pool, &ws);
	CHECK(rc == 0, "%s: decode: %s", what, moor_strerror(rc));
	int ok = rc == 0 && memcmp(src, d, n) == 0;
	CHECK(ok, "%s: round trip bit for bit", what);
	free(e);
	free(d);
	return ok;
}

/* An encoded buffer enc[0, en) of src[0, n) read with zstd alone: each
 * frame a zstd frame of the planes with its content size, the planes raw
 * (bit 63), or a zstd frame without one of the frame's planes split
 * again, its even bytes then its odd ones then an odd last byte (bit 62);
 * the planes plane 0's low bytes, plane 1's high ones, the odd byte last.
 * 0 when it is so; *n4 (may be NULL) gets the frames of four planes. */
static int read_format4(const uint8_t *enc, uint64_t en, const uint8_t *src,
			uint64_t n, uint64_t *n4)
{
	codec_hdr h;
	memcpy(&h, enc, sizeof h);
	uint8_t *pl = malloc(n + 1), *q = malloc(h.frame);
	REQUIRE(pl && q, "oom");
	uint64_t o = sizeof h + h.n_frames * 8, bad = 0, four = 0;
	for (uint64_t f = 0; f < h.n_frames; f++) {
		uint64_t l, a = f * h.frame;
		uint64_t m = n - a < h.frame ? n - a : h.frame;
		memcpy(&l, enc + sizeof h + f * 8, 8);
		uint64_t el = l & ((1ull << 48) - 1), fl = l >> 48;
		if (o + el > en || (fl != 0 && fl != 0x8000 && fl != 0x4000)) {
			bad++;
			break;
		}
		unsigned long long cs = ZSTD_getFrameContentSize(enc + o, el);
		if (fl == 0x8000) {
			bad += el != m;
			memcpy(pl + a, enc + o, el < m ? el : m);
		} else if (fl == 0) {
			size_t z = ZSTD_decompress(pl + a, m, enc + o, el);
			bad += ZSTD_isError(z) || z != m || cs != m;
		} else {
			size_t z = ZSTD_decompress(q, m, enc + o, el);
			bad += ZSTD_isError(z) || z != m ||
			       cs != ZSTD_CONTENTSIZE_UNKNOWN;
			for (uint64_t i = 0; i < m / 2; i++) {
				pl[a + 2 * i] = q[i];
				pl[a + 2 * i + 1] = q[m / 2 + i];
			}
			if (m & 1)
				pl[a + m - 1] = q[m - 1];
			four++;
		}
		o += el;
	}
	free(q);
	if (n4)
		*n4 = four;
	bad += o != en;
	uint64_t hv = n / 2;
	for (uint64_t i = 0; i < hv; i++)
		bad += pl[i] != src[2 * i] || pl[hv + i] != src[2 * i + 1];
	if (n & 1)
		bad += pl[n - 1] != src[n - 1];
	free(pl);
	CHECK(bad == 0, "the format: %llu frames or bytes out of place",
	      (unsigned long long)bad);
	return bad != 0;
}

static int read_format(const uint8_t *enc, uint64_t en, const uint8_t *src,
		       uint64_t n)
{
	return read_format4(enc, en, src, n, NULL);
}

/* The offset of the middle byte of the first frame of two planes zstd
 * compressed. */
static uint64_t zstd_frame_mid(const uint8_t *enc)
{
	codec_hdr h;
	memcpy(&h, enc, sizeof h);
	uint64_t o = sizeof h + h.n_frames * 8;
	for (uint64_t f = 0; f < h.n_frames; f++) {
		uint64_t l;
		memcpy(&l, enc + sizeof h + f * 8, 8);
		if (!(l >> 62))
			return o + l / 2;
		o += l & CODEC_LEN_MASK;
	}
	REQUIRE(0, "no frame that zstd compressed");
	return 0;
}

/* The same bytes in frames of `frame` on 1 thread, 3 and 16, and they
 * decode. */
static void same_threads(const uint8_t *src, uint64_t n, uint64_t frame,
			 moor_pool *p3, moor_pool *p16, const char *what)
{
	uint8_t *e[3], *d = malloc(n);
	uint64_t en[3];
	moor_pool *pools[3] = {NULL, p3, p16};
	for (int i = 0; i < 3; i++) {
		e[i] = malloc(codec_bound(n));
		REQUIRE(e[i] && d, "oom");
		REQUIRE(codec_encode_framed(src, n, frame, e[i], &en[i],
					    pools[i], &ws) == 0,
			"%s: encode", what);
	}
	CHECK(en[0] == en[1] && en[0] == en[2] && !memcmp(e[0], e[1], en[0]) &&
		  !memcmp(e[0], e[2], en[0]),
	      "%s: 1, 3 and 16 threads write the same bytes", what);
	codec_hdr h;
	memcpy(&h, e[0], sizeof h);
	CHECK(h.frame == frame && h.n_frames == (n + frame - 1) / frame,
	      "%s: the header's frames", what);
	read_format(e[0], en[0], src, n);
	CHECK(codec_decode(e[0], en[0], d, n, p3, &ws) == 0 &&
		  !memcmp(d, src, n),
	      "%s: decodes", what);
	for (int i = 0; i < 3; i++)
		free(e[i]);
	free(d);
}

/* src[0, n) encoded in frames of F bytes by zstd alone, as the code of
 * before wrote them (8 MiB frames, CODEC_FRAME then): each frame the
 * planes' bytes compressed at level 1 with its checksum, raw when that
 * does not shrink them. Into out (codec_bound(n) bytes and room for the
 * lengths of F's frames); returns its length. F may be any size: the
 * decoder's check of it is tested with such buffers. */
static uint64_t by_hand(const uint8_t *src, uint64_t n, uint64_t F,
			uint8_t *out, uint64_t cap)
{
	uint64_t nf = (n + F - 1) / F, hv = n / 2;
	uint8_t *pl = malloc(n + 1);
	REQUIRE(pl, "oom");
	for (uint64_t i = 0; i < hv; i++) {
		pl[i] = src[2 * i];
		pl[hv + i] = src[2 * i + 1];
	}
	if (n & 1)
		pl[n - 1] = src[n - 1];
	codec_hdr h = {CODEC_MAGIC, n, nf, F};
	memcpy(out, &h, sizeof h);
	uint64_t o = sizeof h + nf * 8;
	REQUIRE(o + n <= cap, "room");
	ZSTD_CCtx *z = ZSTD_createCCtx();
	REQUIRE(z, "oom");
	ZSTD_CCtx_setParameter(z, ZSTD_c_compressionLevel, 1);
	ZSTD_CCtx_setParameter(z, ZSTD_c_checksumFlag, 1);
	for (uint64_t f = 0; f < nf; f++) {
		uint64_t a = f * F, m = n - a < F ? n - a : F, l;
		size_t r = ZSTD_compress2(z, out + o, cap - o, pl + a, m);
		if (ZSTD_isError(r) || r >= m) {
			memcpy(out + o, pl + a, m);
			l = m | 1ull << 63;
		} else {
			l = r;
		}
		memcpy(out + sizeof h + f * 8, &l, 8);
		o += l & ~(1ull << 63);
	}
	ZSTD_freeCCtx(z);
	free(pl);
	return o;
}

/* The buffers of before (8 MiB frames), built by hand: they decode (the
 * frame size is the header's), and codec_encode_framed in 8 MiB frames
 * writes the same bytes. */
static void old_layout(const uint8_t *src, uint64_t n, moor_pool *pool)
{
	const uint64_t F = 8ull << 20, cap = codec_bound(n);
	uint8_t *old = malloc(cap), *e = malloc(cap), *d = malloc(n + 1);
	REQUIRE(old && e && d, "oom");
	uint64_t o = by_hand(src, n, F, old, cap);
	CHECK(codec_decode(old, o, d, n, pool, &ws) == 0 && !memcmp(d, src, n),
	      "a buffer of 8 MiB frames (the layout of before) decodes");
	CHECK(codec_decode(old, o, d, n, NULL, NULL) == 0 && !memcmp(d, src, n),
	      "and on one thread, without a workspace");
	uint64_t en;
	REQUIRE(codec_encode_framed(src, n, F, e, &en, pool, &ws) == 0,
		"encode in 8 MiB frames");
	CHECK(en == o && !memcmp(e, old, o),
	      "codec_encode_framed in 8 MiB frames writes the layout of "
	      "before");
	free(old);
	free(e);
	free(d);
}

/* The header's frame size: not a power of two, out of [CODEC_FRAME_MIN,
 * CODEC_FRAME_MAX], or one that the header's frame count is not of, is
 * MOOR_EFORMAT (never a division by zero, never a crash). */
static void bad_frames(uint8_t *enc, uint64_t en, const uint8_t *src,
		       uint8_t *d, uint64_t n, moor_pool *pool)
{
	codec_hdr h;
	memcpy(&h, enc, sizeof h);
	const uint64_t bad[] = {0,
				1,
				CODEC_FRAME_MIN / 2,
				CODEC_FRAME + 1,
				3ull << 20,
				CODEC_FRAME * 2,
				CODEC_FRAME_MAX * 2,
				1ull << 63,
				~0ull};
	for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		codec_hdr x = h;
		x.frame = bad[i];
		memcpy(enc, &x, sizeof x);
		CHECK(codec_decode(enc, en, d, n, pool, &ws) == MOOR_EFORMAT,
		      "a frame size of %llu", (unsigned long long)bad[i]);
	}
	/* a frame size and count that agree, the lengths table not theirs */
	codec_hdr x = h;
	x.frame = CODEC_FRAME_MAX;
	x.n_frames = 1;
	memcpy(enc, &x, sizeof x);
	CHECK(codec_decode(enc, en, d, n, pool, &ws) == MOOR_EFORMAT,
	      "64 MiB frames over the lengths of 1 MiB ones");
	x = h;
	x.n_frames = h.n_frames + 1;
	memcpy(enc, &x, sizeof x);
	CHECK(codec_decode(enc, en, d, n, pool, &ws) == MOOR_EFORMAT,
	      "a frame count that is not the size's");
	memcpy(enc, &h, sizeof h);
	/* buffers whole and right but for their frame size: 3 MiB and
	 * 1.5 MiB (not powers of two), 32 KiB and 128 MiB (out of bounds) */
	const uint64_t whole[] = {3ull << 20, 3ull << 19, CODEC_FRAME_MIN / 2,
				  CODEC_FRAME_MAX * 2};
	uint64_t cap = codec_bound(n) + (n / (CODEC_FRAME_MIN / 2) + 1) * 8;
	uint8_t *w = malloc(cap);
	REQUIRE(w, "oom");
	for (unsigned i = 0; i < sizeof whole / sizeof whole[0]; i++) {
		uint64_t wn = by_hand(src, n, whole[i], w, cap);
		CHECK(codec_decode(w, wn, d, n, pool, &ws) == MOOR_EFORMAT,
		      "frames of %llu bytes, whole",
		      (unsigned long long)whole[i]);
	}
	free(w);
}

/* src[0, n) encoded in frames of `frame` with ws.planes = planes (0:
 * each frame chooses) into a buffer of its own; *en its length. */
static uint8_t *enc_planes(const uint8_t *src, uint64_t n, uint64_t frame,
			   int planes, moor_pool *pool, uint64_t *en)
{
	uint8_t *e = malloc(codec_bound(n));
	REQUIRE(e, "oom");
	ws.planes = planes;
	int rc = codec_encode_framed(src, n, frame, e, en, pool, &ws);
	ws.planes = 0;
	REQUIRE(rc == 0, "encode in %d planes: %s", planes, moor_strerror(rc));
	return e;
}

/* bf16-like values in the first half (rounded down to 4 bytes), fp32-like
 * in the rest: frames of either and, in 64 KiB ones, of both */
static void mixed(uint8_t *p, uint64_t n, uint64_t seed)
{
	uint64_t h = n / 2 & ~3ull;
	bf16ish(p, h, seed);
	fp32ish(p + h, n - h, seed + 1);
}

/* fp32 values take four planes and shrink more than in two; bf16 rows
 * keep two: the bytes of before, byte for byte. */
static void four_planes_chosen(moor_pool *pool)
{
	const uint64_t n = (8ull << 20) + 3;
	uint8_t *f = malloc(n), *b = malloc(n), *d = malloc(n);
	REQUIRE(f && b && d, "oom");
	fp32ish(f, n, 5);
	bf16ish(b, n, 11);
	uint64_t e[3], k[3];
	uint8_t *x[3];
	for (int i = 0; i < 3; i++) {
		x[i] = enc_planes(f, n, CODEC_FRAME, 2 * i, pool, &e[i]);
		CHECK(read_format4(x[i], e[i], f, n, &k[i]) == 0,
		      "fp32 in %d planes: the format", 2 * i);
		CHECK(codec_decode(x[i], e[i], d, n, pool, &ws) == 0 &&
			  !memcmp(d, f, n),
		      "fp32 in %d planes: decodes", 2 * i);
	}
	printf("fp32-like, 8 MiB + 3: %.2f%% saved in two planes, %.2f%% in "
	       "four, %.2f%% chosen (%llu frames of four)\n",
	       100.0 * (1 - (double)e[1] / (double)n),
	       100.0 * (1 - (double)e[2] / (double)n),
	       100.0 * (1 - (double)e[0] / (double)n),
	       (unsigned long long)k[0]);
	CHECK(k[0] > 0 && k[1] == 0 && k[2] >= k[0],
	      "fp32: frames of four planes where chosen (%llu) and forced "
	      "(%llu), none in two",
	      (unsigned long long)k[0], (unsigned long long)k[2]);
	CHECK(e[0] < e[1] * 95 / 100,
	      "fp32 values shrink 5%% more in four planes: %llu, two %llu",
	      (unsigned long long)e[0], (unsigned long long)e[1]);
	CHECK(e[0] <= e[2], "the choice no worse than four everywhere");
	for (int i = 0; i < 3; i++)
		free(x[i]);
	/* bf16: chosen is two planes, and two planes are the bytes of
	 * before (zstd alone, as by_hand writes them) */
	uint64_t e0, e2, k0;
	uint8_t *y0 = enc_planes(b, n, CODEC_FRAME, 0, pool, &e0);
	uint8_t *y2 = enc_planes(b, n, CODEC_FRAME, 2, pool, &e2);
	uint8_t *old = malloc(codec_bound(n));
	REQUIRE(old, "oom");
	uint64_t o = by_hand(b, n, CODEC_FRAME, old, codec_bound(n));
	CHECK(read_format4(y0, e0, b, n, &k0) == 0 && k0 == 0,
	      "bf16 rows keep two planes (%llu frames of four)",
	      (unsigned long long)k0);
	CHECK(e0 == e2 && e0 == o && !memcmp(y0, y2, e0) && !memcmp(y0, old, o),
	      "bf16 rows: the bytes of before");
	/* fp32 in two planes as the code of before wrote them decodes, and
	 * the seam's two planes are those bytes */
	o = by_hand(f, n, CODEC_FRAME, old, codec_bound(n));
	CHECK(codec_decode(old, o, d, n, pool, &ws) == 0 && !memcmp(d, f, n),
	      "fp32 in two planes, by zstd alone (a buffer of before), "
	      "decodes");
	x[0] = enc_planes(f, n, CODEC_FRAME, 2, NULL, &e[0]);
	CHECK(e[0] == o && !memcmp(x[0], old, o),
	      "two planes forced: the bytes of before");
	free(x[0]);
	free(old);
	free(y0);
	free(y2);
	free(f);
	free(b);
	free(d);
}

/* Every size that matters (1, 3, 5, 4k + 1..3, frames' seams, plane 1
 * starting on an odd offset) of five kinds of bytes, in frames of 64 KiB
 * and 1 MiB, chosen and forced two and four: round trips and the format. */
static void sweep(moor_pool *pool)
{
	const uint64_t K = 64ull << 10, M = 1ull << 20;
	const uint64_t sizes[] = {1,	     2,		3,	  4,	 5,
				  6,	     7,		9,	  4001,	 4002,
				  4003,	     4004,	K - 1,	  K,	 K + 1,
				  3 * K + 2, 5 * K + 3, M - 2,	  M + 1, M + 2,
				  M + 3,     2 * M + 4, 3 * M + 5};
	const uint64_t nmax = 3 * M + 5;
	const char *kinds[] = {"fp32", "bf16", "mixed", "random", "zeros"};
	uint8_t *src = malloc(nmax), *d = malloc(nmax);
	REQUIRE(src && d, "oom");
	uint64_t x = 17, bad = 0, runs = 0;
	for (int kd = 0; kd < 5; kd++) {
		for (unsigned si = 0; si < sizeof sizes / sizeof sizes[0];
		     si++) {
			uint64_t n = sizes[si];
			if (kd == 0)
				fp32ish(src, n, 3);
			else if (kd == 1)
				bf16ish(src, n, 3);
			else if (kd == 2)
				mixed(src, n, 3);
			else if (kd == 3)
				for (uint64_t i = 0; i < n; i++)
					src[i] = (uint8_t)rnd(&x);
			else
				memset(src, 0, n);
			for (int fi = 0; fi < 2; fi++) {
				for (int pi = 0; pi < 3; pi++) {
					uint64_t en, fr = fi ? M : K;
					uint8_t *e = enc_planes(
					    src, n, fr, 2 * pi, pool, &en);
					int rc = codec_decode(e, en, d, n, pool,
							      &ws);
					int ok =
					    rc == 0 && !memcmp(d, src, n) &&
					    en <= codec_bound(n) &&
					    read_format(e, en, src, n) == 0;
					CHECK(ok,
					      "%s, %llu bytes, frames of "
					      "%llu, %d planes: %s",
					      kinds[kd], (unsigned long long)n,
					      (unsigned long long)fr, 2 * pi,
					      moor_strerror(rc));
					bad += !ok;
					runs++;
					free(e);
				}
			}
		}
	}
	CHECK(bad == 0, "the sweep: %llu of %llu round trips failed",
	      (unsigned long long)bad, (unsigned long long)runs);
	free(src);
	free(d);
}

/* A copy of enc[0, en) with frame f's entry set to l decodes to
 * MOOR_EFORMAT (on the pool and on one thread without a workspace). */
static void bad_entry(const uint8_t *enc, uint64_t en, uint64_t n, uint64_t f,
		      uint64_t l, moor_pool *pool, const char *what)
{
	uint8_t *c = malloc(en), *d = malloc(n);
	REQUIRE(c && d, "oom");
	memcpy(c, enc, en);
	memcpy(c + sizeof(codec_hdr) + f * 8, &l, 8);
	int r1 = codec_decode(c, en, d, n, pool, &ws);
	int r2 = codec_decode(c, en, d, n, NULL, NULL);
	CHECK(r1 == MOOR_EFORMAT && r2 == MOOR_EFORMAT, "%s: %s, %s", what,
	      moor_strerror(r1), moor_strerror(r2));
	free(c);
	free(d);
}

static uint64_t entry(const uint8_t *enc, uint64_t f)
{
	uint64_t l;
	memcpy(&l, enc + sizeof(codec_hdr) + f * 8, 8);
	return l;
}

/* A one-frame buffer of n bytes whose frame is z[0, zn) with entry flags
 * fl; into out, its length returned. */
static uint64_t one_frame(uint64_t n, const uint8_t *z, uint64_t zn,
			  uint64_t fl, uint8_t *out)
{
	codec_hdr h = {CODEC_MAGIC, n, 1, CODEC_FRAME};
	uint64_t l = zn | fl;
	memcpy(out, &h, sizeof h);
	memcpy(out + sizeof h, &l, 8);
	memcpy(out + sizeof h + 8, z, zn);
	return sizeof h + 8 + zn;
}

/* Flags and lengths of the table that lie: MOOR_EFORMAT, never a crash
 * (the ASan build runs this) and never wrong bytes. */
static void bad_flags(moor_pool *pool)
{
	const uint64_t n = 4ull << 20;
	uint8_t *src = malloc(n);
	REQUIRE(src, "oom");
	mixed(src, n, 23);
	uint64_t en;
	uint8_t *e = enc_planes(src, n, CODEC_FRAME, 0, pool, &en);
	/* frames of each kind: raw, two planes, four */
	uint64_t fr = ~0ull, f2 = ~0ull, f4 = ~0ull, nf = n / CODEC_FRAME;
	for (uint64_t f = 0; f < nf; f++) {
		uint64_t fl = entry(e, f) >> 62;
		if (fl == 2 && fr == ~0ull)
			fr = f;
		if (fl == 0 && f2 == ~0ull)
			f2 = f;
		if (fl == 1 && f4 == ~0ull)
			f4 = f;
	}
	REQUIRE(fr < nf && f2 < nf && f4 < nf,
		"mixed bytes: frames raw (%llu), of two planes (%llu) and of "
		"four (%llu)",
		(unsigned long long)fr, (unsigned long long)f2,
		(unsigned long long)f4);
	uint64_t l4 = entry(e, f4), l2 = entry(e, f2), lr = entry(e, fr);
	for (int bit = 48; bit < 62; bit++)
		bad_entry(e, en, n, f4, l4 | 1ull << bit, pool,
			  "a reserved bit set");
	bad_entry(e, en, n, f4, l4 | CODEC_LEN_RAW, pool, "raw and four");
	bad_entry(e, en, n, fr, lr | CODEC_LEN_FOUR, pool, "raw and four");
	bad_entry(e, en, n, f2, l2 | CODEC_LEN_FOUR, pool,
		  "four set on a frame of two planes");
	bad_entry(e, en, n, f4, l4 & ~CODEC_LEN_FOUR, pool,
		  "four cleared on a frame of four planes");
	bad_entry(e, en, n, f4, l4 + 1, pool, "a frame of four one longer");
	bad_entry(e, en, n, f4, l4 - 1, pool, "a frame of four one shorter");
	/* the total kept: a neighbour one byte shorter or longer */
	{
		uint64_t nb = f4 + 1 < nf ? f4 + 1 : f4 - 1;
		uint8_t *c = malloc(en), *d = malloc(n);
		REQUIRE(c && d, "oom");
		for (int s = -1; s <= 1; s += 2) {
			memcpy(c, e, en);
			uint64_t a = l4 + (uint64_t)s,
				 b = entry(e, nb) - (uint64_t)s;
			memcpy(c + sizeof(codec_hdr) + f4 * 8, &a, 8);
			memcpy(c + sizeof(codec_hdr) + nb * 8, &b, 8);
			CHECK(codec_decode(c, en, d, n, pool, &ws) ==
				  MOOR_EFORMAT,
			      "a frame of four %s, its neighbour %s, the "
			      "total right",
			      s > 0 ? "longer" : "shorter",
			      s > 0 ? "shorter" : "longer");
		}
		/* a flipped byte in the frame of four: its checksum */
		uint64_t o = sizeof(codec_hdr) + nf * 8;
		for (uint64_t f = 0; f < f4; f++)
			o += entry(e, f) & CODEC_LEN_MASK;
		memcpy(c, e, en);
		c[o + (l4 & CODEC_LEN_MASK) / 2] ^= 0x08;
		CHECK(codec_decode(c, en, d, n, pool, &ws) == MOOR_EFORMAT,
		      "a flipped byte in a frame of four planes");
		free(c);
		free(d);
	}
	free(e);
	/* frames of four that decode short or long: zstd frames without a
	 * content size, of m - 2 and m + 2 bytes, for a frame of m; then one
	 * of m, which decodes to the bytes the format says (written out
	 * here: the frame's split undone into the planes, the planes into
	 * the values) */
	const uint64_t m = 300001;
	uint8_t *z = malloc(ZSTD_compressBound(m + 2)),
		*out = malloc(ZSTD_compressBound(m + 2) + 64), *d = malloc(m),
		*pl = malloc(m), *want = malloc(m);
	REQUIRE(z && out && d && pl && want, "oom");
	ZSTD_CCtx *cz = ZSTD_createCCtx();
	REQUIRE(cz, "oom");
	ZSTD_CCtx_setParameter(cz, ZSTD_c_contentSizeFlag, 0);
	ZSTD_CCtx_setParameter(cz, ZSTD_c_checksumFlag, 1);
	fp32ish(src, m + 2, 29);
	const uint64_t sz[3] = {m - 2, m + 2, m};
	int rc = 0;
	for (int i = 0; i < 3; i++) {
		size_t zn = ZSTD_compress2(cz, z, ZSTD_compressBound(m + 2),
					   src, sz[i]);
		REQUIRE(!ZSTD_isError(zn), "zstd");
		uint64_t on = one_frame(m, z, zn, CODEC_LEN_FOUR, out);
		rc = codec_decode(out, on, d, m, pool, &ws);
		if (i < 2)
			CHECK(rc == MOOR_EFORMAT,
			      "a frame of four planes of %llu bytes for %llu",
			      (unsigned long long)sz[i], (unsigned long long)m);
	}
	for (uint64_t i = 0; i < m / 2; i++) {
		pl[2 * i] = src[i];
		pl[2 * i + 1] = src[m / 2 + i];
	}
	pl[m - 1] = src[m - 1];
	for (uint64_t i = 0; i < m / 2; i++) {
		want[2 * i] = pl[i];
		want[2 * i + 1] = pl[m / 2 + i];
	}
	want[m - 1] = pl[m - 1];
	CHECK(rc == 0 && !memcmp(d, want, m),
	      "a frame of four planes built by hand decodes as the format "
	      "says: %s",
	      moor_strerror(rc));
	ZSTD_freeCCtx(cz);
	free(z);
	free(out);
	free(d);
	free(pl);
	free(want);
	free(src);
}

int main(void)
{
	moor_pool *pool = moor_pool_new(3), *pool16 = moor_pool_new(16);
	REQUIRE(pool && pool16, "pool");
	uint64_t en;
	uint8_t small[3] = {1, 2, 3};
	roundtrip(small, 0, NULL, &en, "0 bytes");
	roundtrip(small, 1, NULL, &en, "1 byte");
	roundtrip(small, 3, pool, &en, "3 bytes");

	uint64_t n = (8ull << 20) + 5;
	uint8_t *b = malloc(n), *r = malloc(n);
	REQUIRE(b && r, "oom");
	bf16ish(b, n, 7);
	uint64_t x = 99;
	for (uint64_t i = 0; i < n; i++)
		r[i] = (uint8_t)rnd(&x);
	roundtrip(b, n, pool, &en, "bf16, two frames");
	CHECK(en < n * 80 / 100,
	      "bf16 values of few exponents shrink by 20%% or more: %llu of "
	      "%llu",
	      (unsigned long long)en, (unsigned long long)n);
	uint64_t en_r;
	roundtrip(r, n, pool, &en_r, "random bytes");
	uint64_t nfr = (n + CODEC_FRAME - 1) / CODEC_FRAME;
	CHECK(en_r == n + sizeof(codec_hdr) + nfr * 8,
	      "random bytes stored raw: %llu", (unsigned long long)en_r);

	/* the same bytes whatever the threads */
	uint8_t *e1 = malloc(codec_bound(n)), *e3 = malloc(codec_bound(n));
	uint64_t n1, n3;
	REQUIRE(e1 && e3, "oom");
	REQUIRE(codec_encode(b, n, e1, &n1, NULL, NULL) == 0 &&
		    codec_encode(b, n, e3, &n3, pool, NULL) == 0,
		"encode");
	CHECK(n1 == n3 && !memcmp(e1, e3, n1),
	      "1 thread and 3 threads write the same bytes");
	REQUIRE(codec_encode(b, n, e3, &n3, pool16, NULL) == 0, "encode 16");
	CHECK(n1 == n3 && !memcmp(e1, e3, n1),
	      "1 thread and 16 threads (more than frames) write the same "
	      "bytes");
	same_threads(b, n, CODEC_FRAME_MIN, pool, pool16, "64 KiB frames");
	/* the format, read with zstd alone */
	{
		codec_hdr h;
		memcpy(&h, e1, sizeof h);
		CHECK(h.magic == CODEC_MAGIC && h.raw == n &&
			  h.n_frames == nfr && h.frame == CODEC_FRAME,
		      "the header");
		CHECK(read_format(e1, n1, b, n) == 0, "the format");
	}
	old_layout(b, n, pool);
	/* and a workspace that held other calls' bytes changes none */
	roundtrip(small, 3, pool, &en, "3 bytes after 8 MiB");
	REQUIRE(codec_encode(b, n, e3, &n3, pool, &ws) == 0, "encode ws");
	CHECK(n1 == n3 && !memcmp(e1, e3, n1),
	      "a kept workspace writes the same bytes");
	void *wb = codec_ws_buf(&ws, 0, n1);
	REQUIRE(wb, "codec_ws_buf");
	memcpy(wb, e1, n1);
	/* the second buffer (the spill's other slot): an encode into it
	 * leaves the first as it was */
	void *wb1 = codec_ws_buf(&ws, 1, codec_bound(n));
	uint64_t n4 = 0;
	REQUIRE(wb1 && wb1 != wb, "codec_ws_buf 1");
	REQUIRE(codec_encode(b, n, wb1, &n4, pool, &ws) == 0, "encode 1");
	CHECK(n4 == n1 && !memcmp(wb1, e1, n1) && !memcmp(wb, e1, n1),
	      "the workspace's two buffers: one encoded into, one kept");
	uint8_t *d2 = malloc(n);
	REQUIRE(d2, "oom");
	CHECK(codec_decode(wb, n1, d2, n, pool, &ws) == 0 && !memcmp(d2, b, n),
	      "decoding from the workspace's own buffer");
	free(d2);

	/* bad buffers */
	uint8_t *d = malloc(n);
	REQUIRE(d, "oom");
	uint64_t z = zstd_frame_mid(e1);
	e1[z] ^= 0x10;
	CHECK(codec_decode(e1, n1, d, n, pool, &ws) == MOOR_EFORMAT,
	      "a flipped byte in a frame");
	e1[z] ^= 0x10;
	CHECK(codec_decode(e1, n1 - 7, d, n, pool, &ws) == MOOR_EFORMAT,
	      "a cut buffer");
	CHECK(codec_decode(e1, n1, d, n - 1, pool, NULL) == MOOR_EFORMAT,
	      "a wrong decoded size");
	CHECK(codec_decode(e1, 10, d, n, pool, &ws) == MOOR_EFORMAT,
	      "shorter than a header");
	e1[0] ^= 1;
	CHECK(codec_decode(e1, n1, d, n, pool, &ws) == MOOR_EFORMAT,
	      "bad magic");
	e1[0] ^= 1;
	bad_frames(e1, n1, b, d, n, pool);
	CHECK(codec_decode(e1, n1, d, n, pool, &ws) == 0 && !memcmp(d, b, n),
	      "the repaired buffer decodes again");

	/* four planes */
	four_planes_chosen(pool);
	uint8_t *f = malloc(n);
	REQUIRE(f, "oom");
	fp32ish(f, n, 13);
	same_threads(f, n, CODEC_FRAME, pool, pool16, "fp32, 1 MiB frames");
	same_threads(f, n, CODEC_FRAME_MIN, pool, pool16,
		     "fp32, 64 KiB frames");
	mixed(f, n, 13);
	same_threads(f, n, CODEC_FRAME, pool, pool16, "mixed, 1 MiB frames");
	ws.planes = 4;
	same_threads(f, n, CODEC_FRAME_MIN, pool, pool16,
		     "mixed, four planes forced, 64 KiB frames");
	ws.planes = 0;
	free(f);
	sweep(pool);
	bad_flags(pool);
	free(b);
	free(r);
	free(e1);
	free(e3);
	free(d);
	codec_ws_fini(&ws);
	codec_ws_fini(&ws); /* safe on a zeroed one */
	moor_pool_free(pool);
	moor_pool_free(pool16);
	return t_done("test_codec");
}
