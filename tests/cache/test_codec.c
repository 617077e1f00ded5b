/* test_codec: the NVMe tiers' codec (byte planes + zstd frames) is
 * lossless and checked:
 *   - round trips bit for bit (memcmp) for 0, 1 and 3 bytes, a bf16-like
 *     buffer, random bytes (stored raw: they do not shrink), and a buffer
 *     of nine frames and an odd tail (8 MiB + 5 bytes);
 *   - the encoded bytes are the same on 1 thread, on 3 and on 16 (more
 *     threads than frames), in 1 MiB frames and in 64 KiB ones (each
 *     frame alone), and with a workspace kept across calls of other sizes
 *     (the spill's) as with buffers of the call's own;
 *   - bf16 rows of few exponents shrink (the planes' point);
 *   - the format (stored files outlive the code): the header, then each
 *     frame a plain zstd frame of the planes (or the planes raw), plane 0
 *     the values' low bytes then plane 1 the high ones, the odd last byte
 *     at the end, read back with zstd alone;
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
 * frame a zstd frame of the planes or the planes raw (the top bit), the
 * planes plane 0's low bytes, plane 1's high ones, the odd byte last. 0
 * when it is so. */
static int read_format(const uint8_t *enc, uint64_t en, const uint8_t *src,
		       uint64_t n)
{
	codec_hdr h;
	memcpy(&h, enc, sizeof h);
	uint8_t *pl = malloc(n + 1);
	REQUIRE(pl, "oom");
	uint64_t o = sizeof h + h.n_frames * 8, bad = 0;
	for (uint64_t f = 0; f < h.n_frames; f++) {
		uint64_t l, a = f * h.frame;
		uint64_t m = n - a < h.frame ? n - a : h.frame;
		memcpy(&l, enc + sizeof h + f * 8, 8);
		uint64_t el = l & ~(1ull << 63);
		if (o + el > en) {
			bad++;
			break;
		}
		if (l >> 63) {
			bad += el != m;
			memcpy(pl + a, enc + o, el < m ? el : m);
		} else {
			size_t z = ZSTD_decompress(pl + a, m, enc + o, el);
			bad += ZSTD_isError(z) || z != m;
		}
		o += el;
	}
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

/* The offset of the middle byte of the first frame zstd compressed. */
static uint64_t zstd_frame_mid(const uint8_t *enc)
{
	codec_hdr h;
	memcpy(&h, enc, sizeof h);
	uint64_t o = sizeof h + h.n_frames * 8;
	for (uint64_t f = 0; f < h.n_frames; f++) {
		uint64_t l;
		memcpy(&l, enc + sizeof h + f * 8, 8);
		if (!(l >> 63))
			return o + l / 2;
		o += l & ~(1ull << 63);
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
