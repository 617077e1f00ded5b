/* ckpt.h: safetensors checkpoints, mmapped read-only (`eng_ckpt_`).
 *
 * A checkpoint directory holds either DIR/model.safetensors or shards named by
 * DIR/model.safetensors.index.json ("weight_map": {tensor: shard file}).
 * When both exist the single file wins, as in transformers. Every shard is
 * mmapped read-only (MAP_PRIVATE) and every header is parsed and validated
 * at open, so that a later eng_ckpt_get() only checks names, shapes and
 * dtypes:
 *
 *   - 8-byte little-endian header length N, 2 <= N <= 100 MiB and
 *     8 + N <= file size;
 *   - the header is a JSON object (duplicate keys rejected); every entry but
 *     "__metadata__" has "dtype" (string), "shape" (array of integers >= 0)
 *     and "data_offsets" [begin, end] with begin <= end, 8 + N + end within
 *     the file, and end - begin == prod(shape) * element size;
 *   - no two tensors of a shard overlap (holes are tolerated);
 *   - a tensor name appears once across all shards, and every weight_map
 *     entry is found in the shard it names.
 *
 * dtypes. BF16, F16 and F32 map to KERN_BF16/KERN_F16/KERN_F32. Any other
 * dtype string is kept (dtype = ENG_DTYPE_OTHER, dtype_name says which) and is
 * an error only when that tensor is asked for with eng_ckpt_get(): a
 * published checkpoint may carry tensors we never read (vision, MTP, int
 * buffers). Its byte size is checked when the dtype is one safetensors
 * defines (I64, F8_E4M3, ...); an unknown dtype string only has its offsets
 * range-checked. Tensors of more than ENG_MAX_DIMS dimensions (a vision
 * conv3d) are kept likewise: ndim is the true rank, shape[] holds the first
 * ENG_MAX_DIMS dims, and eng_ckpt_get() refuses them.
 *
 * Alignment. `data` points into the mapping at 8 + N + begin of its shard.
 * The mapping is page aligned, but safetensors does not align tensors: the
 * writers of transformers/safetensors pad the header so the data section
 * starts 8-byte aligned and order tensors so offsets are aligned in practice,
 * yet a valid file may place a bf16 tensor at an odd byte offset. Callers
 * that need alignment check ((uintptr_t)t->data % a) themselves, or copy
 * (eng_tensor_to_f32()).
 *
 * Errors: 0 or a negative code: -errno, or one of moor.h's project codes,
 * which are themselves negative (MOOR_EFORMAT == -30001: return them as they
 * are, not negated). err (MOOR_ERRLEN, may be NULL) then names the file and,
 * where one is at fault, the tensor. Open fails with MOOR_ETRUNC when the
 * file is shorter than its header says, MOOR_EFORMAT for any other
 * malformation, MOOR_EMISSING when the index maps a tensor to a shard that
 * lacks it, -ENOENT when there is no checkpoint (or a shard is absent).
 *
 * Ownership and lifetimes: eng_ckpt_open() gives the caller a handle to free
 * with eng_ckpt_close(); on failure *out is NULL and nothing is left open.
 * Every eng_tensor, name, file string and data pointer borrowed from a handle
 * lives until eng_ckpt_close() of it. A handle is immutable after open, so
 * concurrent readers need no lock.
 */
#ifndef ENG_CKPT_H
#define ENG_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "ops.h"

#define ENG_MAX_DIMS 4
/* dtype of a tensor whose safetensors dtype is not BF16, F16 or F32. */
#define ENG_DTYPE_OTHER (-1)

typedef struct eng_tensor {
	const char *name;	     /* full name as stored */
	int dtype;		     /* KERN_F32, KERN_BF16, KERN_F16, or
					ENG_DTYPE_OTHER */
	const char *dtype_name;	     /* as stored: "BF16", "I64", ... */
	int ndim;		     /* true rank; may exceed ENG_MAX_DIMS */
	int64_t shape[ENG_MAX_DIMS]; /* the first min(ndim, 4) dims */
	const void *data; /* into the mapping; no alignment promised */
	size_t nbytes;
	const char *file; /* the shard's path (DIR/name) */
	uint64_t offset;  /* of data in the file (8 + N + begin): what a
			     reader that does not go through the mapping
			     preads (wload.h) */
} eng_tensor;

typedef struct eng_ckpt eng_ckpt;

/* Opens the checkpoint in DIR (see above). */
int eng_ckpt_open(const char *dir, eng_ckpt **out, char *err);
void eng_ckpt_close(eng_ckpt *c); /* safe on NULL */

/* The tensor called `name`, or NULL. Any dtype, any rank. */
const eng_tensor *eng_ckpt_find(const eng_ckpt *c, const char *name);

/* Finds `name` and checks that it has rank ndim, the ndim dims of `shape`,
 * and dtype BF16, F16 or F32. Returns 0 and *out, or MOOR_EMISSING,
 * MOOR_ESHAPE or MOOR_EDTYPE with err such as
 * "DIR/model.safetensors: tensor model.layers.3.mlp.up_proj.weight: shape
 * [128, 64], expected [128, 32]". *out is NULL on failure. */
int eng_ckpt_get(const eng_ckpt *c, const char *name, int ndim,
		 const int64_t *shape, const eng_tensor **out, char *err);

/* Tensors in a fixed order (shard by shard, then by data offset). */
size_t eng_ckpt_count(const eng_ckpt *c);
const eng_tensor *eng_ckpt_at(const eng_ckpt *c, size_t i); /* NULL past end */

/* The checkpoint's directory, as given to eng_ckpt_open(). */
const char *eng_ckpt_dir(const eng_ckpt *c);

/* Elements of a tensor (product of its dims; 1 for rank 0). */
int64_t eng_tensor_numel(const eng_tensor *t);

/* Converts t (BF16, F16 or F32) into n floats at dst; n must equal
 * eng_tensor_numel(t). Reads unaligned data safely. Returns 0,
 * MOOR_EDTYPE or MOOR_ERANGE. For the small fp32-kept tensors (A_log,
 * dt_bias, norms: SPEC §2). */
int eng_tensor_to_f32(const eng_tensor *t, float *dst, size_t n);

#endif
