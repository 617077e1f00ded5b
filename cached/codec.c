/* codec.c: byte planes + zstd frames (codec.h).
 *
 * A call runs its frames as slots: min(threads, frames) tasks of one pool
 * run, each with its own zstd context and buffers (encoding, one frame's
 * planes, their four-plane split and a second encoded frame; decoding,
 * a frame of four planes), each taking the next frame from a shared counter
 * until none is left. Which slot takes which frame depends on the
 * threads' timing, never what a frame's bytes are: a frame is compressed
 * alone (ZSTD_compress2 starts a new frame from the context's kept
 * parameters), and its planes are chosen from its own bytes (choose_four),
 * so the output depends on the frame's bytes only. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "codec.h"
#include "moor.h"

/* the bytes of a frame's start that choose_four compresses each way, and
 * what the four planes must save of them beyond the two (1/32 of the
 * two's size) */
#define CHOOSE_SAMPLE (32ull << 10)
#define CHOOSE_MARGIN 32
/* values a task of the decode's join writes back (2 bytes each): whole
 * cache lines, so that no two threads write one */
#define JOIN_VALUES (256ull << 10)

_Static_assert((CODEC_FRAME & (CODEC_FRAME - 1)) == 0 &&
		   CODEC_FRAME >= CODEC_FRAME_MIN &&
		   CODEC_FRAME <= CODEC_FRAME_MAX,
	       "CODEC_FRAME: a power of two in the frames read");

static uint64_t frames_of(uint64_t n, uint64_t frame)
{
	return n / frame + (n % frame != 0);
}

uint64_t codec_bound(uint64_t n)
{
	/* a frame is stored raw when zstd does not shrink it */
	return sizeof(codec_hdr) + frames_of(n, CODEC_FRAME_MIN) * 8 + n;
}

/* The planed bytes [a, a + m) of src[0, n) into out[0, m): planed byte p
 * is src[2p] (plane 0, p < n/2), src[2(p - n/2) + 1] (plane 1), or the
 * odd last byte. Each plane's loop has its bounds worked out first, so
 * that the compiler vectorizes both (plane 1's loop of before, bounded by
 * p < e && p < 2h and indexed by p - h, went a byte at a time: 15% of
 * perf's samples of an encode and decode on one thread). */
static void planes_split(const uint8_t *restrict src, uint64_t n,
			 uint8_t *restrict out, uint64_t a, uint64_t m)
{
	uint64_t h = n / 2, e = a + m;
	uint64_t e0 = e < h ? e : h;
	for (uint64_t p = a; p < e0; p++)
		out[p - a] = src[2 * p];
	uint64_t a1 = a > h ? a : h, e1 = e < 2 * h ? e : 2 * h;
	if (a1 < e1) {
		const uint8_t *s1 = src + 2 * (a1 - h) + 1;
		uint8_t *o1 = out + (a1 - a);
		for (uint64_t i = 0; i < e1 - a1; i++)
			o1[i] = s1[2 * i];
	}
	if (e > 2 * h) /* the odd last byte */
		out[2 * h - a] = src[2 * h];
}

/* dst[2i], dst[2i + 1] for i in [a, b) from the planes (the odd last byte
 * by the caller) */
static void planes_join(const uint8_t *restrict pl, uint64_t n,
			uint8_t *restrict dst, uint64_t a, uint64_t b)
{
	const uint8_t *lo = pl + a, *hi = pl + n / 2 + a;
	uint8_t *d = dst + 2 * a;
	for (uint64_t i = 0; i < b - a; i++) {
		d[2 * i] = lo[i];
		d[2 * i + 1] = hi[i];
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
	for (int i = 0; i < w->nz; i++) {
		if (w->cz)
			ZSTD_freeCCtx(w->cz[i]);
		if (w->dz)
			ZSTD_freeDCtx(w->dz[i]);
	}
	free(w->cz);
	free(w->dz);
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

/* The buffers of a call in nf frames: pl and scr bytes, the frame tables. */
static int ws_fit(codec_ws *w, uint64_t pl, uint64_t nf, uint64_t scratch)
{
	int rc = grow((void **)&w->pl, &w->pl_cap, pl);
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

/* Contexts for slots [0, k): the encoder's (enc) or the decoder's, made
 * where missing; the encoder's take level 1 and a checksum in each frame
 * (a flipped byte fails its frame before the block sums look). */
static int ws_ctx(codec_ws *w, int k, int enc)
{
	if (w->nz < k) {
		ZSTD_CCtx **cz = realloc(w->cz, (size_t)k * sizeof *cz);
		if (cz)
			w->cz = cz;
		ZSTD_DCtx **dz =
		    cz ? realloc(w->dz, (size_t)k * sizeof *dz) : NULL;
		if (dz)
			w->dz = dz;
		if (!cz || !dz)
			return -ENOMEM;
		for (int i = w->nz; i < k; i++) {
			w->cz[i] = NULL;
			w->dz[i] = NULL;
		}
		w->nz = k;
	}
	for (int i = 0; i < k; i++) {
		if (enc && !w->cz[i]) {
			ZSTD_CCtx *z = ZSTD_createCCtx();
			if (!z)
				return -ENOMEM;
			if (ZSTD_isError(ZSTD_CCtx_setParameter(
				z, ZSTD_c_compressionLevel, 1)) ||
			    ZSTD_isError(ZSTD_CCtx_setParameter(
				z, ZSTD_c_checksumFlag, 1))) {
				ZSTD_freeCCtx(z);
				return -ENOMEM;
			}
			w->cz[i] = z;
		} else if (!enc && !w->dz[i]) {
			if (!(w->dz[i] = ZSTD_createDCtx()))
				return -ENOMEM;
		}
	}
	return 0;
}

void *codec_ws_buf(codec_ws *w, int i, uint64_t n)
{
	MOOR_ASSERT(i >= 0 && i < CODEC_WS_BUFS);
	return grow((void **)&w->buf[i], &w->buf_cap[i], n) ? NULL : w->buf[i];
}

typedef struct job {
	const uint8_t *in; /* encode: the source; decode: the encoded */
	uint8_t *pl;	   /* encode: each slot's planes, their four-plane
			      split and a second encoded frame [k, 2 frame
			      + cap]; decode: the planes [n] */
	uint8_t *scr;	   /* encode: the frames [nf, cap]; decode: the
			      slots' four-plane frames [k, frame] */
	uint8_t *dst;	   /* encode: the encoded; decode: the caller's */
	uint64_t n, nf, frame, cap;
	uint64_t *len;	    /* the length table's entries (codec.h) */
	uint64_t *off;	    /* offsets of the frames in the encoded */
	int *rc;	    /* decode: each frame's */
	int planes;	    /* encode: 0 (each frame chooses), 2 or 4 */
	codec_ws *w;	    /* the slots' contexts */
	atomic_ullong next; /* the next frame to take */
} job;

/* The frame's bytes [a, a + m) of j->n, m > 0 */
static uint64_t frame_len(const job *j, uint64_t f)
{
	uint64_t a = f * j->frame;
	return j->n - a < j->frame ? j->n - a : j->frame;
}

/* zstd's size of in[0, m) into o[0, cap) as a frame of two planes or of
 * four (the frame header's content size: codec.h), m when it does not
 * shrink. The flag is set on every call: a slot's context keeps it from
 * its last frame, which depends on the threads. */
static uint64_t zsize(ZSTD_CCtx *z, uint8_t *o, uint64_t cap, const uint8_t *in,
		      uint64_t m, int four)
{
	size_t p = ZSTD_CCtx_setParameter(z, ZSTD_c_contentSizeFlag, !four);
	MOOR_ASSERT(!ZSTD_isError(p));
	size_t r = ZSTD_compress2(z, o, cap, in, m);
	return ZSTD_isError(r) || r >= m ? m : r;
}

/* Whether a frame of planed bytes pl[0, m) goes in four planes: its first
 * CHOOSE_SAMPLE bytes compressed as they are and split again (into q),
 * the four kept when they save CHOOSE_MARGIN's share more. Measured on
 * 1 MiB frames (fp32 and bf16 values, Gaussian with a scale per row and
 * bench_spill's generators): the sample of a frame of fp32 values' high
 * bytes 11-13% smaller in four, of bf16 values' high bytes 1-4% larger,
 * of plane 0's bytes of either not shrunk either way; never near the
 * margin, so bf16 rows keep two planes, the bytes of before.
 *
 * The split sample's halves are compressed apart, as the frame's halves
 * are blocks of their own (zstd's entropy tables are a block's): one
 * zstd call over both would mix them in a block and see no gain. A frame
 * under two blocks mixes its halves in one: its sample is compressed as
 * the frame will be.
 *
 * A sample, not the frame: both ways over the whole frame took the
 * encoder from 1.06 GB/s a thread to 0.49 on fp32 rows (this 2-core VM),
 * from 0.55 to 0.29 on bf16 rows; the sample costs 5-9% (bf16 rows), and
 * its ratios stood as far from the margin at 16 and 64 KiB. o: scratch
 * of cap bytes. */
static int choose_four(ZSTD_CCtx *z, const uint8_t *pl, uint64_t m, uint8_t *q,
		       uint8_t *o, uint64_t cap)
{
	uint64_t s = m < CHOOSE_SAMPLE ? m : CHOOSE_SAMPLE;
	uint64_t r2 = zsize(z, o, cap, pl, s, 0);
	planes_split(pl, s, q, 0, s);
	uint64_t r4 = m >= 2 * ZSTD_BLOCKSIZE_MAX
			  ? zsize(z, o, cap, q, s / 2, 1) +
				zsize(z, o, cap, q + s / 2, s - s / 2, 1)
			  : zsize(z, o, cap, q, s, 1);
	return r4 + r2 / CHOOSE_MARGIN < r2;
}

static void enc_slot(void *ctx, int t)
{
	job *j = ctx;
	ZSTD_CCtx *z = j->w->cz[t];
	/* the frame's planes [frame], their four-plane split [frame] and a
	 * second encoded frame [cap] */
	uint8_t *pl = j->pl + (uint64_t)t * (2 * j->frame + j->cap);
	uint8_t *q = pl + j->frame, *o4 = q + j->frame;
	for (;;) {
		uint64_t f = atomic_fetch_add_explicit(&j->next, 1,
						       memory_order_relaxed);
		if (f >= j->nf)
			return;
		uint64_t a = f * j->frame, m = frame_len(j, f), h = j->n / 2;
		uint8_t *o = j->scr + f * j->cap;
		planes_split(j->in, j->n, pl, a, m);
		/* r: o's encoded size of the planes chosen, 0 while o does
		 * not hold them */
		int four;
		uint64_t r = 0;
		if (j->planes) {
			four = j->planes == 4;
		} else if (a < h && h < a + m) {
			/* both planes' bytes (a buffer of one frame, or the
			 * frame at the planes' seam): a sample of its start
			 * would speak for plane 0 alone; the frame is
			 * compressed both ways */
			uint64_t r2 = zsize(z, o, j->cap, pl, m, 0);
			planes_split(pl, m, q, 0, m);
			uint64_t r4 = zsize(z, o4, j->cap, q, m, 1);
			four = r4 + r2 / CHOOSE_MARGIN < r2;
			r = four ? r4 : r2;
			if (four)
				memcpy(o, o4, r4);
		} else {
			four = choose_four(z, pl, m, q, o, j->cap);
		}
		if (!r && four)
			planes_split(pl, m, q, 0, m);
		if (!r)
			r = zsize(z, o, j->cap, four ? q : pl, m, four);
		if (r >= m) /* raw: the two planes' bytes, whatever chosen */
			memcpy(o, pl, m);
		j->len[f] = r >= m ? m | CODEC_LEN_RAW
				   : r | (four ? CODEC_LEN_FOUR : 0);
	}
}

/* A frame's encoded bytes to their place (off: its offset), on the pool */
static void gather_frame(void *ctx, int f)
{
	job *j = ctx;
	memcpy(j->dst + j->off[f], j->scr + (uint64_t)f * j->cap,
	       j->len[f] & CODEC_LEN_MASK);
}

/* Slots for nf frames on the pool: one per thread, no more than frames. */
static int slots_of(moor_pool *pool, uint64_t nf)
{
	uint64_t k = (uint64_t)moor_pool_threads(pool);
	return (int)(k < nf ? k : nf);
}

int codec_encode_framed(const void *src, uint64_t n, uint64_t frame, void *dst,
			uint64_t *out_n, moor_pool *pool, codec_ws *ws)
{
	MOOR_ASSERT((frame & (frame - 1)) == 0 && frame >= CODEC_FRAME_MIN &&
		    frame <= CODEC_FRAME_MAX);
	codec_ws own = {0}, *w = ws ? ws : &own;
	uint64_t nf = frames_of(n, frame);
	/* an encoded frame's room, in whole cache lines (the slots' and
	 * the frames' strides) */
	uint64_t cap = (ZSTD_compressBound(frame) + 63) & ~63ull;
	int k = slots_of(pool, nf);
	MOOR_ASSERT(w->planes == 0 || w->planes == 2 || w->planes == 4);
	int rc = ws_fit(w, (uint64_t)k * (2 * frame + cap), nf, nf * cap);
	if (!rc)
		rc = ws_ctx(w, k, 1);
	if (rc) {
		codec_ws_fini(&own);
		return rc;
	}
	uint8_t *d = dst;
	job j = {.in = src,
		 .pl = w->pl,
		 .scr = w->scr,
		 .dst = d,
		 .n = n,
		 .nf = nf,
		 .frame = frame,
		 .cap = cap,
		 .len = w->len,
		 .off = w->off,
		 .planes = w->planes,
		 .w = w};
	atomic_init(&j.next, 0);
	moor_pool_run(pool, k, enc_slot, &j);
	codec_hdr h = {CODEC_MAGIC, n, nf, frame};
	memcpy(d, &h, sizeof h);
	memcpy(d + sizeof h, j.len, nf * 8);
	uint64_t o = sizeof h + nf * 8;
	for (uint64_t f = 0; f < nf; f++) {
		j.off[f] = o;
		o += j.len[f] & CODEC_LEN_MASK;
	}
	moor_pool_run(pool, (int)nf, gather_frame, &j);
	*out_n = o;
	codec_ws_fini(&own);
	return 0;
}

int codec_encode(const void *src, uint64_t n, void *dst, uint64_t *out_n,
		 moor_pool *pool, codec_ws *ws)
{
	return codec_encode_framed(src, n, CODEC_FRAME, dst, out_n, pool, ws);
}

static void dec_slot(void *ctx, int t)
{
	job *j = ctx;
	ZSTD_DCtx *z = j->w->dz[t];
	for (;;) {
		uint64_t f = atomic_fetch_add_explicit(&j->next, 1,
						       memory_order_relaxed);
		if (f >= j->nf)
			return;
		uint64_t m = frame_len(j, f), el = j->len[f] & CODEC_LEN_MASK;
		uint8_t *o = j->pl + f * j->frame;
		if (j->len[f] & CODEC_LEN_RAW) {
			if (el != m)
				j->rc[f] = MOOR_EFORMAT;
			else
				memcpy(o, j->in + j->off[f], m);
			continue;
		}
		/* four planes: into the slot's scratch, then joined back
		 * into the frame's two (planes_split's inverse). The zstd
		 * frame's header says the same as the table's flag (its
		 * content size: codec.h), or the flag was flipped. */
		int four = (j->len[f] & CODEC_LEN_FOUR) != 0;
		uint8_t *q = four ? j->scr + (uint64_t)t * j->frame : o;
		const uint8_t *in = j->in + j->off[f];
		unsigned long long cs = ZSTD_getFrameContentSize(in, el);
		if (four ? cs != ZSTD_CONTENTSIZE_UNKNOWN : cs != m) {
			j->rc[f] = MOOR_EFORMAT;
			continue;
		}
		size_t r = ZSTD_decompressDCtx(z, q, m, in, el);
		if (ZSTD_isError(r) || r != m) {
			j->rc[f] = MOOR_EFORMAT;
		} else if (four) {
			planes_join(q, m, o, 0, m / 2);
			if (m & 1)
				o[m - 1] = q[m - 1];
		}
	}
}

/* The values [t V, (t + 1) V) of dst joined from the planes (V:
 * JOIN_VALUES), on the pool */
static void join_part(void *ctx, int t)
{
	job *j = ctx;
	uint64_t h = j->n / 2, a = (uint64_t)t * JOIN_VALUES;
	uint64_t b = h - a < JOIN_VALUES ? h : a + JOIN_VALUES;
	planes_join(j->pl, j->n, j->dst, a, b);
}

int codec_decode(const void *enc, uint64_t enc_n, void *dst, uint64_t raw,
		 moor_pool *pool, codec_ws *ws)
{
	const uint8_t *e = enc;
	codec_hdr h;
	if (enc_n < sizeof h)
		return MOOR_EFORMAT;
	memcpy(&h, e, sizeof h);
	/* the frame size is the header's: a power of two within the frames
	 * read, checked before it divides */
	if (h.magic != CODEC_MAGIC || h.raw != raw ||
	    (h.frame & (h.frame - 1)) || h.frame < CODEC_FRAME_MIN ||
	    h.frame > CODEC_FRAME_MAX)
		return MOOR_EFORMAT;
	uint64_t nf = frames_of(raw, h.frame);
	if (h.n_frames != nf || (enc_n - sizeof h) / 8 < nf)
		return MOOR_EFORMAT;
	/* the flags (codec.h): known ones, raw and four planes not both; a
	 * slot's scratch of a frame where four planes are to be joined */
	int any4 = 0;
	for (uint64_t f = 0; f < nf; f++) {
		uint64_t l;
		memcpy(&l, e + sizeof h + f * 8, 8);
		uint64_t fl = l & ~CODEC_LEN_MASK;
		if ((fl & ~(CODEC_LEN_RAW | CODEC_LEN_FOUR)) ||
		    fl == (CODEC_LEN_RAW | CODEC_LEN_FOUR))
			return MOOR_EFORMAT;
		any4 |= fl == CODEC_LEN_FOUR;
	}
	codec_ws own = {0}, *w = ws ? ws : &own;
	int k = slots_of(pool, nf);
	int ret = ws_fit(w, raw, nf, any4 ? (uint64_t)k * h.frame : 0);
	if (!ret)
		ret = ws_ctx(w, k, 0);
	uint64_t *len = w->len, *off = w->off;
	int *rc = w->rc;
	if (!ret) {
		memset(rc, 0, (nf + 1) * sizeof *rc);
		memcpy(len, e + sizeof h, nf * 8);
		uint64_t o = sizeof h + nf * 8;
		for (uint64_t f = 0; f < nf && !ret; f++) {
			uint64_t m = len[f] & CODEC_LEN_MASK;
			if (m > enc_n - o)
				ret = MOOR_EFORMAT;
			off[f] = o;
			o += m;
		}
		if (!ret && o != enc_n)
			ret = MOOR_EFORMAT;
	}
	if (!ret) {
		job j = {.in = e,
			 .pl = w->pl,
			 .scr = w->scr,
			 .dst = dst,
			 .n = raw,
			 .nf = nf,
			 .frame = h.frame,
			 .len = len,
			 .off = off,
			 .rc = rc,
			 .w = w};
		atomic_init(&j.next, 0);
		moor_pool_run(pool, k, dec_slot, &j);
		for (uint64_t f = 0; f < nf && !ret; f++)
			ret = rc[f];
		if (!ret) {
			/* raw / 2 values in stretches of JOIN_VALUES */
			uint64_t hv = raw / 2;
			moor_pool_run(pool, (int)frames_of(hv, JOIN_VALUES),
				      join_part, &j);
			if (raw & 1)
				((uint8_t *)dst)[raw - 1] = w->pl[raw - 1];
		}
	}
	codec_ws_fini(&own);
	return ret;
}
