/* codec.h: the NVMe tiers' lossless codec (`codec_`): byte planes, then
 * zstd in frames, on a pool of threads.
 *
 * The bytes are read as 16-bit little-endian values; plane 0 holds every
 * value's low byte, plane 1 every high byte (for bf16 the high byte is the
 * sign and 7 exponent bits, which take few values; for fp32 the high
 * halves' high bytes the same). An odd last byte travels as it is. The
 * planed bytes are cut in frames of CODEC_FRAME (8 MiB) and each frame is
 * compressed alone (zstd level 1, with zstd's own checksum in the
 * frame), so frames run on separate threads and
 * the output does not depend on how many: a frame that does not shrink is
 * stored raw.
 *
 * An encoded buffer: codec_hdr, then n_frames u64 frame lengths (the top
 * bit set: stored raw), then the frames back to back. Decoding checks
 * every length and every frame's decoded size; a buffer that does not
 * decode is MOOR_EFORMAT, never a crash. Lossless by construction; the
 * spill checks it anyway with the block sums of the decoded bytes.
 */
#ifndef CODEC_H
#define CODEC_H

#include <stdint.h>

#include "pool.h"

#define CODEC_MAGIC 0x31434f43524f4f4dull /* "MOORCOC1" */
#define CODEC_FRAME (8ull << 20)

typedef struct codec_hdr {
	uint64_t magic;
	uint64_t raw;	   /* decoded bytes */
	uint64_t n_frames; /* ceil(raw / CODEC_FRAME) */
	uint64_t frame;	   /* CODEC_FRAME when written */
} codec_hdr;
_Static_assert(sizeof(codec_hdr) == 32, "codec_hdr is 32 bytes");

/* The most bytes codec_encode can write for n input bytes. */
uint64_t codec_bound(uint64_t n);
/* Encodes src[0, n) into dst (codec_bound(n) bytes); *out_n gets the
 * encoded length. pool may be NULL (one thread). */
int codec_encode(const void *src, uint64_t n, void *dst, uint64_t *out_n,
		 moor_pool *pool);
/* Decodes enc[0, enc_n) into dst, which holds exactly `raw` bytes.
 * MOOR_EFORMAT when it is not such a buffer or does not decode to raw. */
int codec_decode(const void *enc, uint64_t enc_n, void *dst, uint64_t raw,
		 moor_pool *pool);

#endif
