/* arena_cuda_sum.h: the kernel of the CUDA mover's sum2 (arena.h), between
 * arena_cuda.c and arena_cuda_sum.cu. Built only when CUDA is. */
#ifndef ARENA_CUDA_SUM_H
#define ARENA_CUDA_SUM_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Blocks of the kernel, at most: the partials buffer of a mover holds
 * 2 * ARENA_SUM_BLOCKS uint64 (16 KiB). */
#define ARENA_SUM_BLOCKS 1024

/* Queues on st the kernel that sums the n bytes (n > 0) at device pointer
 * src, any alignment: block b writes its partial sums to part[2 * b]
 * (plain) and part[2 * b + 1] (weighted, the weight of word i is i + 1 by
 * its index in the whole buffer), b < *blocks <= ARENA_SUM_BLOCKS. The sum
 * of the partials mod 2^64 is dfile_sum2's. The caller copies the partials
 * out on st after it. Returns the launch's error (cudaGetLastError). */
cudaError_t arena_cuda_sum2_launch(const void *src, uint64_t n, uint64_t *part,
				   uint32_t *blocks, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
