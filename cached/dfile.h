/* dfile.h: the file helpers of cached's NVMe tiers (`dfile_`): a whole
 * file written crash-safely, a whole file read back, the two 64-bit sums,
 * and the fault seam the sweeps drive.
 *
 * A write goes to NAME.tmp in the directory, is fsynced, renamed over NAME,
 * and the directory is fsynced: a crash leaves NAME as it was or as it is
 * now, and at most a NAME.tmp, which the next start deletes
 * (dfile_sweep_tmp). Pages written or read are dropped from the page cache
 * (posix_fadvise DONTNEED after the fsync / the read): the tiers' bytes are
 * read once, by a restore, and must not push the engine's pages out.
 *
 * Errors: -errno of the failing call, MOOR_ETRUNC for a file shorter than
 * it says. Every call names the file in err (MOOR_ERRLEN) where err is not
 * NULL.
 */
#ifndef DFILE_H
#define DFILE_H

#include <stddef.h>
#include <stdint.h>

/* The fault seam (tests only; NULL in production). Called before every
 * operation with its kind and the file's name; a negative return is the
 * error that operation fails with (-ENOSPC, -EIO), DFILE_SHORT makes a
 * write stop half way through and return what it wrote as a short write
 * (the helper then fails with -EIO, as a full disk does on the next
 * call), 0 lets it run. */
enum { DFILE_OP_WRITE = 1, DFILE_OP_FSYNC, DFILE_OP_RENAME, DFILE_OP_READ };
#define DFILE_SHORT 1
extern int (*dfile_fault)(int op, const char *name);

typedef struct dfile_part {
	const void *p;
	uint64_t n;
} dfile_part;

/* Writes the parts back to back as dirfd/name, crash-safely (above). The
 * directory is fsynced unless no_dir_sync (the caller fsyncs it once after
 * several files: dfile_sync_dir). On failure name is untouched and the
 * .tmp is gone. */
int dfile_write(int dirfd, const char *name, const dfile_part *parts, int n,
		int no_dir_sync, char *err);
int dfile_sync_dir(int dirfd, char *err);

/* Reads dirfd/name whole into a malloc'd buffer (*out, *n; the caller
 * frees it). -ENOENT when absent. max: the largest size accepted (a bigger
 * file is MOOR_EFORMAT). */
int dfile_read(int dirfd, const char *name, uint64_t max, void **out,
	       uint64_t *n, char *err);
/* Reads `n` bytes at `off` of dirfd/name into dst (a staging buffer). */
int dfile_read_at(int dirfd, const char *name, uint64_t off, void *dst,
		  uint64_t n, char *err);

/* O_DIRECT where the file system takes it (the spill's blocks and
 * anchors): the page cache is bypassed, not only dropped after, and a
 * buffered write's copy into it is saved. O_DIRECT wants the buffer, the
 * offset and the length aligned to DFILE_ALIGN; where open with O_DIRECT
 * fails with EINVAL (tmpfs, some FUSE) the same call runs buffered and
 * drops its pages with posix_fadvise DONTNEED, as dfile_write does.
 * *direct (may be NULL) says which one ran. */
#define DFILE_ALIGN 4096u
static inline uint64_t dfile_up4k(uint64_t n)
{
	return (n + DFILE_ALIGN - 1) & ~(uint64_t)(DFILE_ALIGN - 1);
}

/* dfile_write of one buffer, O_DIRECT: buf is DFILE_ALIGN-aligned and
 * holds dfile_up4k(n) bytes, of which [n, dfile_up4k(n)) is zeroed here
 * (the caller's bytes there are lost); the padded length is written, then
 * the file is cut back to n (ftruncate before the fdatasync), so the file
 * is the n bytes dfile_write would have made, byte for byte. The same
 * .tmp, fsync, rename and directory fsync, and the same fault seam: one
 * DFILE_OP_WRITE (DFILE_SHORT: half of it, in whole 4 KiB lines), then
 * DFILE_OP_FSYNC and DFILE_OP_RENAME as dfile_write. */
int dfile_write_direct(int dirfd, const char *name, void *buf, uint64_t n,
		       int no_dir_sync, int *direct, char *err);

/* Reads dirfd/name whole, O_DIRECT where taken, into buf
 * (DFILE_ALIGN-aligned, cap bytes, cap a multiple of DFILE_ALIGN): *n is
 * the file's size. A file larger than cap is read up to cap (*n = cap:
 * the caller's check of its header finds what it needs or fails); one
 * DFILE_OP_READ. -ENOENT when absent. */
int dfile_read_direct(int dirfd, const char *name, void *buf, uint64_t cap,
		      uint64_t *n, int *direct, char *err);

/* Deletes every *.tmp in the directory; returns how many. */
int dfile_sweep_tmp(int dirfd);
/* Removes dirfd/name and, if it is a directory, everything under it. */
int dfile_rm_rf(int dirfd, const char *name);
/* Bytes the files under dirfd/name hold (a file or one directory level). */
uint64_t dfile_bytes(int dirfd, const char *name);

/* The two sums of a buffer (the spill's block check): over its 32-bit
 * little-endian words w_i (the last one zero-padded), s[0] = sum w_i and
 * s[1] = sum (i + 1) * w_i, both mod 2^64. The plain sum sees a changed
 * word, the weighted one also two words swapped. */
void dfile_sum2(const void *p, uint64_t n, uint64_t s[2]);

/* dfile_sum2 of k pieces of p laid back to back (len[i] bytes each, any
 * size, piece i at p + len[0] + ... + len[i - 1]) into s[2 i], s[2 i + 1],
 * bit for bit what k dfile_sum2 calls give, with each piece cut in parts
 * of `part` bytes (0: DFILE_SUM_PART; a positive multiple of 4, a bug
 * otherwise: it asserts) summed on the pool's threads (NULL: this one).
 *
 * Why the parts add up exactly. A piece's words x_0 .. x_{m-1} (the last
 * zero-padded); a part starts at a multiple of 4 bytes, so at word q, and
 * holds words x_q .. x_{q+r-1}: its dfile_sum2 is a' = sum_j x_{q+j} and
 * w' = sum_j (j + 1) x_{q+j} (j < r; a part that ends the piece pads its
 * last word with zeros as the whole piece's sum does, and no other part
 * ends inside a word). The piece's own sums are then
 *   a = sum over parts of a',
 *   w = sum_i (i + 1) x_i = sum over parts of sum_j (q + j + 1) x_{q+j}
 *     = sum over parts of (w' + q a'),
 * equalities in the ring of integers mod 2^64 (sums and products of
 * uint64_t wrap, and the distributive law holds there), so whatever the
 * parts, the threads or their order the result is dfile_sum2's. */
#define DFILE_SUM_PART (1ull << 20)
struct moor_pool;
void dfile_sum2_pieces(const void *p, const uint64_t *len, uint32_t k,
		       uint64_t *s, uint64_t part, struct moor_pool *pool);

#endif
