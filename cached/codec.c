/* codec.c: byte planes + zstd frames (codec.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "codec.h"
#include "moor.h"

#define RAW_BIT (1ull << 63)

uint64_t codec_bound(uint64_t n)
{
	uint64_t f = (n + CODEC_FRAME - 1) / CODEC_FRAME;
	/* a frame is stored raw when zstd does not shrink it */
	return sizeof(codec_hdr) + f * 8 + n;
}

/* The planed bytes [a, a + m) of src[0, n) into pl + a: planed byte p is
 * src[2p] (plane 0, p < n/2), src[2(p - n/2) + 1] (plane 1), or the odd
 * last byte. A frame's job planes its own bytes: the split runs on the
 * pool with the compression. */
static void planes_split(const uint8_t *src, uint64_t n, uint8_t *pl,
			 uint64_t a, uint64_t m)
{
	uint64_t h = n / 2, e = a + m, p = a;
	for (; p < e && p < h; p++)
		pl[p] = src[2 * p];
	for (; p < e && p < 2 * h; p++)
		pl[p] = src[2 * (p - h) + 1];
	if (p < e) /* the odd last byte */
		pl[p] = src[p];
}

/* dst[2i], dst[2i + 1] for i in [a, b) from the planes (the odd last byte
 * by the caller): a job joins its own stretch of dst, so that no two
 * threads write one cache line. */
static void planes_join(const uint8_t *pl, uint64_t n, uint8_t *dst,
			uint64_t a, uint64_t b)
{
	uint64_t h = n / 2;
	const uint8_t *lo = pl, *hi = pl + h;
	for (uint64_t i = a; i < b; i++) {
		dst[2 * i] = lo[i];
		dst[2 * i + 1] = hi[i];
	}
}

typedef struct job {
	const uint8_t *in;  /* encode: the source; decode: the encoded */
	uint8_t *out;	    /* encode: per-frame scratch; decode: planed */
	uint8_t *pl;	    /* encode: planed; decode: the caller's dst */
	uint8_t *dst;	    /* encode: the encoded frames' place */
	uint64_t n, nf;
	uint64_t *len;	    /* encoded frame lengths (RAW_BIT: raw) */
	uint64_t *off;	    /* decode: offsets of the frames in `in` */
	uint64_t cap;	    /* encode: scratch bytes per frame */
	int *rc;
} job;

static void enc_frame(void *ctx, int f)
{
	job *j = ctx;
	uint64_t a = (uint64_t)f * CODEC_FRAME;
	uint64_t m = j->n - a < CODEC_FRAME ? j->n - a : CODEC_FRAME;
	uint8_t *o = j->out + (uint64_t)f * j->cap;
	planes_split(j->in, j->n, j->pl, a, m);
	const uint8_t *in = j->pl + a;
	/* level 1, and a checksum in each frame: a flipped byte fails its
	 * frame before the block sums look */
	ZSTD_CCtx *z = ZSTD_createCCtx();
	size_t r = (size_t)-1;
	if (z && !ZSTD_isError(ZSTD_CCtx_setParameter(z, ZSTD_c_compressionLevel,
						      1)) &&
	    !ZSTD_isError(ZSTD_CCtx_setParameter(z, ZSTD_c_checksumFlag, 1)))
		r = ZSTD_compress2(z, o, j->cap, in, m);
	ZSTD_freeCCtx(z);
	if (ZSTD_isError(r) || r >= m) {
		memcpy(o, in, m);
		j->len[f] = m | RAW_BIT;
	} else {
		j->len[f] = r;
	}
}

void codec_ws_fini(codec_ws *w)
{
	if (!w)
		return;
	free(w->pl);
	free(w->scr);
	for (int i = 0; i < CODEC_WS_BUFS; i++)
		free(w->buf[i]);
	free(w->len);
	free(w->off);
	free(w->rc);
	memset(w, 0, sizeof *w);
}

/* *p to at least n bytes (its contents not kept). */
static int grow(void **p, uint64_t *cap, uint64_t n)
{
	if (*cap >= n && *p)
		return 0;
	void *q = malloc(n ? n : 1);
	if (!q)
		return -ENOMEM;
	free(*p);
	*p = q;
	*cap = n;
	return 0;
}

/* The buffers of a call of raw bytes in nf frames (scratch: encoding). */
static int ws_fit(codec_ws *w, uint64_t raw, uint64_t nf, uint64_t scratch)
{
	int rc = grow((void **)&w->pl, &w->pl_cap, raw);
	if (!rc)
		rc = grow((void **)&w->scr, &w->scr_cap, scratch);
	if (!rc && w->nf_cap < nf + 1) {
		uint64_t cap = 0;
		rc = grow((void **)&w->len, &cap, (nf + 1) * 8);
		cap = 0;
		if (!rc)
			rc = grow((void **)&w->off, &cap, (nf + 1) * 8);
		cap = 0;
		if (!rc)
			rc = grow((void **)&w->rc, &cap,
				  (nf + 1) * sizeof *w->rc);
		w->nf_cap = rc ? 0 : nf + 1;
	}
	return rc;
}

void *codec_ws_buf(codec_ws *w, int i, uint64_t n)
{
	MOOR_ASSERT(i >= 0 && i < CODEC_WS_BUFS);
	return grow((void **)&w->buf[i], &w->buf_cap[i], n) ? NULL : w->buf[i];
}

/* A frame's encoded bytes to their place (off: its offset), on the pool */
static void gather_frame(void *ctx, int f)
{
	job *j = ctx;
	memcpy(j->dst + j->off[f], j->out + (uint64_t)f * j->cap,
	       j->len[f] & ~RAW_BIT);
}

int codec_encode(const void *src, uint64_t n, void *dst, uint64_t *out_n,
		 moor_pool *pool, codec_ws *ws)
{
	codec_ws own = {0}, *w = ws ? ws : &own;
	uint64_t nf = (n + CODEC_FRAME - 1) / CODEC_FRAME;
	uint64_t cap = ZSTD_compressBound(CODEC_FRAME);
	int rc = ws_fit(w, n, nf, nf * cap);
	if (rc) {
		codec_ws_fini(&own);
		return rc;
	}
	uint64_t *len = w->len, *off = w->off;
	uint8_t *d = dst;
	job j = {.in = src, .out = w->scr, .pl = w->pl, .dst = d, .n = n,
		 .nf = nf, .len = len, .off = off, .cap = cap};
	moor_pool_run(pool, (int)nf, enc_frame, &j);
	codec_hdr h = {CODEC_MAGIC, n, nf, CODEC_FRAME};
	memcpy(d, &h, sizeof h);
	memcpy(d + sizeof h, len, nf * 8);
	uint64_t o = sizeof h + nf * 8;
	for (uint64_t f = 0; f < nf; f++) {
		off[f] = o;
		o += len[f] & ~RAW_BIT;
	}
	moor_pool_run(pool, (int)nf, gather_frame, &j);
	*out_n = o;
	codec_ws_fini(&own);
	return 0;
}

static void dec_frame(void *ctx, int f)
{
	job *j = ctx;
	uint64_t a = (uint64_t)f * CODEC_FRAME;
	uint64_t m = j->n - a < CODEC_FRAME ? j->n - a : CODEC_FRAME;
	uint64_t el = j->len[f] & ~RAW_BIT;
	if (j->len[f] & RAW_BIT) {
		if (el != m)
			j->rc[f] = MOOR_EFORMAT;
		else
			memcpy(j->out + a, j->in + j->off[f], m);
		return;
	}
	size_t r = ZSTD_decompress(j->out + a, m, j->in + j->off[f], el);
	if (ZSTD_isError(r) || r != m)
		j->rc[f] = MOOR_EFORMAT;
}

/* The values [f F/2, (f + 1) F/2) of dst joined from the planes (F:
 * CODEC_FRAME): nf stretches of whole values, on the pool */
static void join_part(void *ctx, int f)
{
	job *j = ctx;
	uint64_t h = j->n / 2, a = (uint64_t)f * (CODEC_FRAME / 2);
	uint64_t b = a + CODEC_FRAME / 2 < h ? a + CODEC_FRAME / 2 : h;
	if (a < b)
		planes_join(j->out, j->n, j->pl, a, b);
}

int codec_decode(const void *enc, uint64_t enc_n, void *dst, uint64_t raw,
		 moor_pool *pool, codec_ws *ws)
{
	const uint8_t *e = enc;
	codec_hdr h;
	if (enc_n < sizeof h)
		return MOOR_EFORMAT;
	memcpy(&h, e, sizeof h);
	uint64_t nf = (raw + CODEC_FRAME - 1) / CODEC_FRAME;
	if (h.magic != CODEC_MAGIC || h.raw != raw || h.n_frames != nf ||
	    h.frame != CODEC_FRAME || (enc_n - sizeof h) / 8 < nf)
		return MOOR_EFORMAT;
	codec_ws own = {0}, *w = ws ? ws : &own;
	int ret = ws_fit(w, raw, nf, 0);
	uint64_t *len = w->len, *off = w->off;
	int *rc = w->rc;
	uint8_t *pl = w->pl;
	if (!ret) {
		memset(rc, 0, (nf + 1) * sizeof *rc);
		memcpy(len, e + sizeof h, nf * 8);
		uint64_t o = sizeof h + nf * 8;
		for (uint64_t f = 0; f < nf && !ret; f++) {
			uint64_t m = len[f] & ~RAW_BIT;
			if (m > enc_n - o)
				ret = MOOR_EFORMAT;
			off[f] = o;
			o += m;
		}
		if (!ret && o != enc_n)
			ret = MOOR_EFORMAT;
	}
	if (!ret) {
		job j = {.in = e, .out = pl, .pl = dst, .n = raw, .nf = nf,
			 .len = len, .off = off, .rc = rc};
		moor_pool_run(pool, (int)nf, dec_frame, &j);
		for (uint64_t f = 0; f < nf && !ret; f++)
			ret = rc[f];
		if (!ret) {
			/* h = raw / 2 values in nf stretches of F/2 */
			moor_pool_run(pool, (int)nf, join_part, &j);
			if (raw & 1)
				((uint8_t *)dst)[raw - 1] = pl[raw - 1];
		}
	}
	codec_ws_fini(&own);
	return ret;
}
