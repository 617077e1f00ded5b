/* arena_cuda_sum.cu: the two sums of dfile_sum2 over device memory, for
 * the CUDA mover's sum2 (arena.h, arena_cuda_sum.h).
 *
 * The buffer is n bytes at p, read as 4-byte little-endian words x_i, the
 * last one zero-padded when n % 4; the sums are a = sum x_i and
 * w = sum (i + 1) x_i, mod 2^64. Each thread adds the words it reads into
 * a uint64 pair (i is the word's index in the whole buffer), a block adds
 * its threads' pairs (warp shuffles, then one per warp through shared
 * memory) and writes one pair, and the host adds the blocks' pairs. Every
 * addition and product is mod 2^64 (uint64_t wraps), and addition mod 2^64
 * is associative and commutative, so any split and any order give
 * dfile_sum2's bits exactly: there is no rounding to argue about.
 *
 * Loads: where p + 4 * head is 16-byte aligned for some head < 4 (p 4-byte
 * aligned: the spill's views start 64-byte aligned, so head is 0), the
 * words [head, head + 4 * nvec) are read as uint4, four words a load, and
 * the few others (the head, the last whole words and the padded tail) a
 * byte at a time. A src that is not 4-byte aligned is read a byte at a
 * time throughout: correct, slower, and not a case the spill makes. No
 * byte outside [p, p + n) is read.
 */
#include "arena_cuda_sum.h"

#define SUM_THREADS 256

/* Word i of the n bytes at p, the bytes past n as zeros. */
__device__ static uint32_t word_at(const unsigned char *p, uint64_t n,
				   uint64_t i)
{
	uint64_t o = 4 * i;
	uint32_t x = 0;
	for (int k = 0; k < 4; k++)
		if (o + k < n)
			x |= (uint32_t)p[o + k] << (8 * k);
	return x;
}

/* part[2 * blockIdx.x ..]: the block's (a, w). Words [head, head + 4 *
 * nvec) as uint4 from p + 4 * head (16-byte aligned); the rest (rest of
 * them: [0, head) then [head + 4 * nvec, nw)) by bytes. */
__global__ void __launch_bounds__(SUM_THREADS)
    k_sum2(const unsigned char *p, uint64_t n, uint64_t head, uint64_t nvec,
	   uint64_t rest, uint64_t *part)
{
	uint64_t a = 0, w = 0;
	uint64_t t = (uint64_t)blockIdx.x * SUM_THREADS + threadIdx.x;
	uint64_t stride = (uint64_t)gridDim.x * SUM_THREADS;
	const uint4 *v = (const uint4 *)(p + 4 * head);
#pragma unroll 4
	for (uint64_t j = t; j < nvec; j += stride) {
		uint4 q = v[j];
		uint64_t s = (uint64_t)q.x + q.y + q.z + q.w;
		/* words head + 4j + k, weights head + 4j + k + 1 */
		a += s;
		w += (head + 4 * j) * s + (uint64_t)q.x + 2ull * q.y +
		     3ull * q.z + 4ull * q.w;
	}
	for (uint64_t k = t; k < rest; k += stride) {
		uint64_t i = k < head ? k : k + 4 * nvec;
		uint64_t x = word_at(p, n, i);
		a += x;
		w += (i + 1) * x;
	}
	for (int o = 16; o > 0; o >>= 1) {
		a += __shfl_down_sync(0xffffffffu, a, o);
		w += __shfl_down_sync(0xffffffffu, w, o);
	}
	__shared__ uint64_t sa[SUM_THREADS / 32], sw[SUM_THREADS / 32];
	if ((threadIdx.x & 31) == 0) {
		sa[threadIdx.x / 32] = a;
		sw[threadIdx.x / 32] = w;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		/* a, w: warp 0's already */
		for (int k = 1; k < SUM_THREADS / 32; k++) {
			a += sa[k];
			w += sw[k];
		}
		part[2 * blockIdx.x] = a;
		part[2 * blockIdx.x + 1] = w;
	}
}

extern "C" cudaError_t arena_cuda_sum2_launch(const void *src, uint64_t n,
					      uint64_t *part, uint32_t *blocks,
					      cudaStream_t st)
{
	const unsigned char *p = (const unsigned char *)src;
	uint64_t nw = (n + 3) / 4, head = 0, nvec = 0;
	uintptr_t a = (uintptr_t)p;
	if (a % 4 == 0) {
		head = (16 - a % 16) % 16 / 4;
		/* whole words only: the padded tail goes by bytes (and a
		 * buffer too short to reach the alignment has no vectors) */
		if (head > n / 4)
			head = n / 4;
		nvec = (n / 4 - head) / 4;
	}
	uint64_t rest = nw - 4 * nvec;
	/* a thread a uint4 (or a word of the rest) per pass, at most
	 * ARENA_SUM_BLOCKS blocks: a 64 MiB buffer is 16 passes */
	uint64_t units = nvec > rest ? nvec : rest;
	uint64_t nb = (units + SUM_THREADS - 1) / SUM_THREADS;
	nb = nb < 1 ? 1 : nb > ARENA_SUM_BLOCKS ? ARENA_SUM_BLOCKS : nb;
	*blocks = (uint32_t)nb;
	k_sum2<<<(unsigned)nb, SUM_THREADS, 0, st>>>(p, n, head, nvec, rest,
						     part);
	return cudaGetLastError();
}
