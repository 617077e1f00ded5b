/* safetensors_write.h: a small safetensors writer (`st_`), for the tiny-model
 * generator and the tests.
 *
 * Layout written: u64 LE header length N, N bytes of compact JSON, the data.
 * The header holds "__metadata__": {"format": "pt"} first, then the tensors
 * sorted by name (bytewise), each {"dtype", "shape", "data_offsets"}; it is
 * padded with spaces so that 8 + N is a multiple of 8. Data follow in the
 * same order, contiguous (no holes, as safetensors requires), so a tensor is
 * 8-byte aligned in the file only if the ones before it keep it so.
 *
 * The write is atomic: a temporary file in the same directory
 * (PATH.tmp.XXXXXX) is written, fsync'ed and renamed over PATH, and the
 * directory is fsync'ed. On failure PATH is untouched and the temporary file
 * is removed. Returns 0 or a negative code (-errno, MOOR_ERANGE for a bad
 * entry) with err (MOOR_ERRLEN, may be NULL) naming the path and the tensor.
 *
 * Entries are borrowed for the call only.
 */
#ifndef ENG_SAFETENSORS_WRITE_H
#define ENG_SAFETENSORS_WRITE_H

#include <stddef.h>
#include <stdint.h>

typedef struct st_entry {
	const char *name;
	int dtype;		/* KERN_F32 / KERN_BF16 / KERN_F16 */
	const char *dtype_name; /* optional: overrides dtype with a safetensors
				   dtype string ("I64", "F8_E4M3", ...); tests
				   use it to write dtypes moor cannot load */
	int ndim;		/* 0..8 */
	const int64_t *shape;	/* [ndim] */
	const void *data;	/* prod(shape) elements of the dtype */
} st_entry;

int st_write(const char *path, const st_entry *entries, size_t n, char *err);

/* Bytes of prod(shape) elements of e's dtype, or -1 when the dtype string
 * is unknown or the shape invalid. */
int64_t st_entry_nbytes(const st_entry *e);

/* Fault injection for tests: when nth > 0, the nth subsequent write(),
 * fsync() or rename() step of st_write()/st_write_file() fails with EIO (or
 * ENOSPC for writes). 0 disables. Not thread-safe; tests only. */
void st_fault_set(int nth);

/* Writes len bytes to path atomically, as st_write() does (used to write
 * config.json and to copy tokenizer files). */
int st_write_file(const char *path, const void *data, size_t len, char *err);

#endif
