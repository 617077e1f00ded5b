/* registry.c: the backends this build has, by name (ops.h). The CUDA entry
 * comes from kernels/cuda/entry.c when CUDA is built and from
 * kernels/no_cuda.c (NULL) when it is not: meson picks the file. */
#include <stdio.h>
#include <string.h>

#include "moor.h"
#include "ops.h"

extern const kern_ops *const kern_cuda_entry;

/* CUDA: MOOR_NORM_V4=0, the hidden size's norms on the scalar kernel
 * (another order of the sum of squares); MOOR_ATTN_WG, prefill attention
 * on mma.sync or wgmma (the same bits on the H100 in every case of
 * test_kern_backends, which the PTX ISA does not promise: the order an
 * MMA adds its products in); MOOR_GEMM_BUCKET_MAX, another algorithm for
 * longer products, and MOOR_GEMM_PICK, another for every product (the
 * heuristic's candidates in turn, for a benchmark; set, it also turns
 * gemm.cu's measured table off); MOOR_DEC_MMA and MOOR_DEC_MT,
 * the split attention's kernel and partition, which run decode and also a
 * prefill call of up to KCU_SPLIT_ROWS rows (a short turn, a prompt's tail past
 * its last grid line), so they are not decode-only switches;
 * MOOR_ATTN_SEGS, how many segments prefill attention cuts a piece's keys
 * into (attn.cu). */
const char *const kern_bits_env[] = {"MOOR_NORM_V4",
				     "MOOR_ATTN_WG",
				     "MOOR_GEMM_BUCKET_MAX",
				     "MOOR_GEMM_PICK",
				     "MOOR_DEC_MMA",
				     "MOOR_DEC_MT",
				     "MOOR_ATTN_SEGS",
				     "MOOR_GDN_TC",
				     NULL};

const kern_ops *kern_backend(const char *name)
{
	if (!name)
		return NULL;
	if (strcmp(name, "cpu") == 0)
		return &kern_cpu_ops;
	if (strcmp(name, "cuda") == 0)
		return kern_cuda_entry;
	return NULL;
}

const kern_ops *kern_backend_auto(int device, char *why)
{
	char err[MOOR_ERRLEN] = "";
	if (!kern_cuda_entry) {
		moor_errf(why, "backend cpu (this build has no CUDA backend)");
		return &kern_cpu_ops;
	}
	if (kern_cuda_entry->probe(device, err) == 0) {
		moor_errf(why, "backend cuda (device %d)", device);
		return kern_cuda_entry;
	}
	moor_errf(why, "backend cpu (cuda: %s)", err);
	return &kern_cpu_ops;
}

const char *const *kern_backend_names(void)
{
	static const char *const both[] = {"cpu", "cuda", NULL};
	static const char *const cpu[] = {"cpu", NULL};
	return kern_cuda_entry ? both : cpu;
}
