/* test_codec: the NVMe tiers' codec (byte planes + zstd frames) is
 * lossless and checked:
 *   - round trips bit for bit (memcmp) for 0, 1 and 3 bytes, a bf16-like
 *     buffer, random bytes (stored raw: they do not shrink), and a buffer
 *     of two frames and an odd tail (8 MiB + 5 bytes);
 *   - the encoded bytes are the same on 1 thread and on 3 (each frame
 *     alone), and with a workspace kept across calls of other sizes (the
 *     spill's) as with buffers of the call's own;
 *   - bf16 rows of few exponents shrink (the planes' point);
 *   - the format (stored files outlive the code): the header, then each
 *     frame a plain zstd frame of the planes, plane 0 the values' low
 *     bytes then plane 1 the high ones, the odd last byte at the end,
 *     read back with zstd alone;
 *   - a flipped byte in a frame, a cut buffer, a wrong decoded size and a
 *     bad magic are MOOR_EFORMAT, never a crash. */
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

int main(void)
{
	moor_pool *pool = moor_pool_new(3);
	REQUIRE(pool, "pool");
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
	CHECK(en_r <= n + 32 + 16, "random bytes stored raw: %llu",
	      (unsigned long long)en_r);

	/* the same bytes whatever the threads */
	uint8_t *e1 = malloc(codec_bound(n)), *e3 = malloc(codec_bound(n));
	uint64_t n1, n3;
	REQUIRE(e1 && e3, "oom");
	REQUIRE(codec_encode(b, n, e1, &n1, NULL, NULL) == 0 &&
		    codec_encode(b, n, e3, &n3, pool, NULL) == 0,
		"encode");
	CHECK(n1 == n3 && !memcmp(e1, e3, n1),
	      "1 thread and 3 threads write the same bytes");
	/* the format, read with zstd alone: 4 Mi + 2 values and an odd
	 * byte; frame 0 holds the first 8 MiB of the planes (the 4 Mi + 2
	 * low bytes, then the first 4 Mi - 2 high bytes), frame 1 the last
	 * 4 high bytes and the odd byte */
	{
		codec_hdr h;
		memcpy(&h, e1, sizeof h);
		CHECK(h.magic == CODEC_MAGIC && h.raw == n && h.n_frames == 2 &&
			      h.frame == CODEC_FRAME,
		      "the header");
		uint64_t l0, l1;
		memcpy(&l0, e1 + sizeof h, 8);
		memcpy(&l1, e1 + sizeof h + 8, 8);
		uint64_t o0 = sizeof h + 16, o1 = o0 + (l0 & ~(1ull << 63));
		uint8_t *pl = malloc(n);
		REQUIRE(pl, "oom");
		size_t z0 = ZSTD_decompress(pl, CODEC_FRAME, e1 + o0, l0);
		/* the 5-byte rest does not shrink: stored raw (the top bit) */
		CHECK(!(l0 >> 63) && z0 == CODEC_FRAME && l1 == (5 | 1ull << 63),
		      "a zstd frame of 8 MiB, then the rest raw");
		memcpy(pl + CODEC_FRAME, e1 + o1, 5);
		uint64_t hv = n / 2, bad = 0;
		for (uint64_t i = 0; i < hv; i++)
			bad += pl[i] != b[2 * i] || pl[hv + i] != b[2 * i + 1];
		bad += pl[n - 1] != b[n - 1];
		CHECK(bad == 0, "the planes: %llu bytes out of place",
		      (unsigned long long)bad);
		free(pl);
	}
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
	e1[n1 / 2] ^= 0x10;
	CHECK(codec_decode(e1, n1, d, n, pool, &ws) == MOOR_EFORMAT,
	      "a flipped byte in a frame");
	e1[n1 / 2] ^= 0x10;
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
	return t_done("test_codec");
}
