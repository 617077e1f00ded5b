/* codec.h: the NVMe tiers' lossless codec (`codec_`): byte planes, then
 * zstd in frames, on a pool of threads.
 *
 * The bytes are read as 16-bit little-endian values; plane 0 holds every
 * value's low byte, plane 1 every high byte (for bf16 the high byte is the
 * sign and 7 exponent bits, which take few values). An odd last byte
 * travels as it is. The planed bytes are cut in frames of CODEC_FRAME
 * (1 MiB) and each frame is compressed alone (zstd level 1, with zstd's
 * own checksum in the frame), so frames run on separate threads and the
 * output does not depend on how many: a frame that does not shrink is
 * stored raw. A frame is a job: its planes split from the source into
 * the thread's own buffer (in its cache while zstd reads it), then
 * compressed with the thread slot's kept context; decoding, frames into
 * the planes, then the planes joined back in stretches on the pool. No
 * pass over the whole buffer runs on one thread.
 *
 * Four planes. A frame of m planed bytes may be split once more the same
 * way before zstd: its bytes at even offsets (from the frame's start),
 * then those at odd ones, then, m odd, its last byte as it is (the two
 * planes' rule applied to the frame alone: the values' 16 bits become
 * the frame's). fp32 values are why: plane 1 holds their bytes 1 and 3
 * in turn, byte 3 the sign and 7 exponent bits (few values), byte 1
 * mantissa (any); split, a 1 MiB frame is two halves of 512 KiB, zstd
 * blocks of their own with their own entropy tables, where in two planes
 * one table took the mix (plane 0 likewise: bytes 0 and 2). A buffer of
 * fp32 values in one frame and four planes holds bytes 0, 1, 2 and 3 of
 * its values in four quarters. The encoder chooses for each frame from
 * its bytes alone (codec.c's choose_four: a 32 KiB sample of its start
 * compressed both ways, or the frame itself where it holds both planes'
 * bytes); bf16 rows keep two planes. Saved on the project's 2-core VM,
 * two planes then chosen: 64 MiB of fp32 values (Gaussian, a scale per
 * row of 128) 9.5%, 14.7%; bench_spill's fp32-like bytes 8.1%, 13.5%;
 * models/tiny's states after 8,192 random ids (one frame) 10.1%, 15.3%;
 * bf16 rows (Gaussian 29.4%, bench_spill's 27.1%) the same bytes.
 *
 * Why 1 MiB frames. A block of the spill is 64 MiB of rows, a file of
 * sections 150 MiB: in frames of 8 MiB (the frames of before) a block is
 * 8 jobs and 16 threads stood half idle; 1 MiB is 64 jobs. zstd level 1
 * looks back 512 KiB (window log 19) whatever the frame, so the ratio is
 * the same (bench_spill's bf16-like rows: 27.09% saved in 8 MiB frames,
 * 27.09% in 1 MiB ones).
 *
 * An encoded buffer: codec_hdr, then n_frames u64 frame entries, then the
 * frames back to back. An entry: bits 0-47 the frame's length, bit 63
 * stored raw (its two planes' bytes), bit 62 four planes (a zstd frame of
 * them split), bits 48-61 zero, bits 62 and 63 never both. The flag is
 * written twice: a zstd frame of two planes has its content size in its
 * header (as every frame written before four planes had), one of four
 * has none, and a flag its frame does not repeat is MOOR_EFORMAT (a
 * flipped bit of the table, which no checksum covers). The frame size is
 * the header's: buffers of 8 MiB frames (written before 1 MiB) decode as
 * they are, and so do those of two planes alone (written before four;
 * the magic is the same: a decoder of before reads bit 62 as a length
 * past the buffer's end, MOOR_EFORMAT, never wrong bytes).
 * Decoding checks the frame size (a power of two in [CODEC_FRAME_MIN,
 * CODEC_FRAME_MAX]), every entry's flags and length and every frame's
 * decoded size; a buffer that does not decode is MOOR_EFORMAT, never a
 * crash. Lossless by construction; the spill checks it anyway with the
 * block sums of the decoded bytes.
 */
#ifndef CODEC_H
#define CODEC_H

#include <stdint.h>

#include "pool.h"

#define CODEC_MAGIC 0x31434f43524f4f4dull /* "MOORCOC1" */
#define CODEC_FRAME (1ull << 20)	  /* the frames written */
/* the frames read: a power of two in [MIN, MAX] */
#define CODEC_FRAME_MIN (64ull << 10)
#define CODEC_FRAME_MAX (64ull << 20)
/* a frame's entry in the length table */
#define CODEC_LEN_RAW (1ull << 63)	  /* stored raw */
#define CODEC_LEN_FOUR (1ull << 62)	  /* four planes */
#define CODEC_LEN_MASK ((1ull << 48) - 1) /* the length */

typedef struct codec_hdr {
	uint64_t magic;
	uint64_t raw;	   /* decoded bytes */
	uint64_t n_frames; /* ceil(raw / frame) */
	uint64_t frame;	   /* bytes; CODEC_FRAME when written (8 MiB
			    * before), a power of two */
} codec_hdr;
_Static_assert(sizeof(codec_hdr) == 32, "codec_hdr is 32 bytes");

/* The most bytes codec_encode can write for n input bytes, and the most
 * a buffer that decodes to n bytes can hold: counted in frames of
 * CODEC_FRAME_MIN (the most frames any frame size makes). */
uint64_t codec_bound(uint64_t n);

/* The codec's working buffers, kept between the calls of one caller (one
 * call at a time): zeroed is empty, each grows to the largest call, and
 * codec_ws_fini frees them (safe on a zeroed one). A block of the spill is
 * tens of MiB: buffers taken and given back every call cost their pages'
 * faults and zeroing each time, the larger part of a save or a read-back
 * where faults are dear (a paravirtual machine: 2x measured). */
#define CODEC_WS_BUFS 2
struct ZSTD_CCtx_s;
struct ZSTD_DCtx_s;
typedef struct codec_ws {
	/* encoding: pl each slot's planes, their four-plane split and a
	 * second encoded frame [slots, 2 frame + cap], scr the encoded
	 * frames [n_frames, cap] (cap: ZSTD_compressBound(frame) in whole
	 * cache lines); decoding: pl the planes [raw], scr each slot's
	 * frame of four planes [slots, frame] where a frame has four */
	uint8_t *pl, *scr;
	uint8_t *buf[CODEC_WS_BUFS]; /* the caller's */
	uint64_t *len, *off;	     /* [n_frames + 1] */
	int *rc;		     /* [n_frames + 1] */
	/* a zstd context per slot (a task of the pool's run: one thread at
	 * a time), made once, its tables kept between frames and calls */
	struct ZSTD_CCtx_s **cz; /* [nz] */
	struct ZSTD_DCtx_s **dz; /* [nz] */
	int nz;
	/* the tests' seam: 0 (each frame chooses its planes, as the spill
	 * encodes), 2 or 4 (every frame so; 2 writes the buffers of before
	 * this flag) */
	int planes;
	uint64_t pl_cap, scr_cap, buf_cap[CODEC_WS_BUFS], nf_cap;
} codec_ws;
void codec_ws_fini(codec_ws *w);
/* Buffer i (0 <= i < CODEC_WS_BUFS) of at least n bytes for the caller:
 * an encoded block to write or one read; two, so that a save writes one
 * block from one while it encodes the next into the other (spill.c). The
 * codec's calls on w leave them alone; buffer i is valid until the next
 * codec_ws_buf of the same i or codec_ws_fini (its contents are not kept
 * when it grows). NULL when out of memory. */
void *codec_ws_buf(codec_ws *w, int i, uint64_t n);

/* Encodes src[0, n) into dst (codec_bound(n) bytes); *out_n gets the
 * encoded length. pool may be NULL (one thread), ws too (buffers of the
 * call's own). */
int codec_encode(const void *src, uint64_t n, void *dst, uint64_t *out_n,
		 moor_pool *pool, codec_ws *ws);
/* codec_encode in frames of `frame` bytes, a power of two in
 * [CODEC_FRAME_MIN, CODEC_FRAME_MAX] (a bug otherwise: it asserts), into
 * codec_bound(n) bytes: the tests write the buffers of before (8 MiB
 * frames) and many small frames with it. Both return -ENOMEM when a
 * buffer or a zstd context cannot be had. */
int codec_encode_framed(const void *src, uint64_t n, uint64_t frame, void *dst,
			uint64_t *out_n, moor_pool *pool, codec_ws *ws);
/* Decodes enc[0, enc_n) into dst, which holds exactly `raw` bytes, in
 * the frames its header names. MOOR_EFORMAT when it is not such a buffer
 * or does not decode to raw; -ENOMEM as above. */
int codec_decode(const void *enc, uint64_t enc_n, void *dst, uint64_t raw,
		 moor_pool *pool, codec_ws *ws);

#endif
