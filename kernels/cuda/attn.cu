/* attn.cu: causal GQA attention (ops.h) in two kernels.
 *
 * The tensor-core kernel (k_flash) runs prefill rows of a bf16 model whose
 * head dim is 64, 128 or 256: a block takes 64 query rows of one query
 * head, four warps of 16 rows each, two blocks an SM, and walks its keys
 * in tiles of 64 (tile edges fixed by the key index, so a row's arithmetic
 * does not depend on the rows it shares a block with). Scores come from
 * mma.m16n8k16 (bf16 in, fp32 out) and are rounded as ops.h says
 * (rnd(rnd(q.k) * scale)); the softmax is online (a row's max and sum
 * carried across tiles, the sum over the 4 lanes of a row in a fixed
 * butterfly, e^x by ex2.approx), p is rounded to bf16 for the P.V product,
 * and the row is divided by its sum at the end. A call's rows are cut
 * in pieces at the lines of kern_limits.chunk (kcu_pieces), and a long
 * piece's keys into up to FL_NSEG segments (a rule of the piece's rows,
 * its keys and Hq) whose partials k_fcombine adds in order. That is the
 * flash order of operations, not the CPU backend's (which normalises p before P.V): the
 * two agree within the tolerance the kernel test writes beside the case.
 * Measured on the H200 at the 27B's shapes (bench_kern): 189 TFLOP/s of
 * causal products for a 1,024-row chunk at 128k keys.
 *
 * The split kernels (k_split16 for bf16 K and V of head dim 128 or 256,
 * k_split for the rest, then k_combine) run decode and rows up to
 * KCU_SPLIT_ROWS, fp32 models, other head dims. A block takes one row and
 * one KV head with all its query heads (the K and V rows are read once for
 * the group) over KCU_SPLIT_KEYS keys (k_split_mma: several such tiles
 * past 4k keys, so a row has at most KCU_SPLIT_MAX splits); each split
 * writes its max, its sum and its unnormalised output, and k_combine adds
 * the splits in a fixed order (its L in a fixed tree). No atomics
 * anywhere: the same call gives the same bits.
 *
 * Both read the position from the queue's register under graph capture
 * (kcu_pos); the split grid is then shaped for the graph's max_len and the
 * splits past a launch's length return at once. */
#include "cuda.cuh"

#include <stdlib.h>
#include <string.h>

typedef __nv_bfloat16 bf16;

#define FL_BR 64 /* query rows of a block: 4 warps of 16 */
#define FL_THREADS (FL_BR / 16 * 32)
#define FL_BC 64 /* keys of a tile */
#define FL_PAD 8 /* bf16 of padding a smem row: conflict-free fragments */

/* ---- mma.sync helpers (the decode and prefill tensor-core kernels) ---- */

static __device__ inline uint32_t pack2(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
	return *(uint32_t *)&v;
}

static __device__ inline void mma16816(float *c, const uint32_t *a, uint32_t b0,
				       uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
		       "r"(b1));
}

static __device__ inline void ldsm_x4(uint32_t *r, const void *p)
{
	unsigned a = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
		     "{%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(a));
}

static __device__ inline void ldsm_x4_t(uint32_t *r, const void *p)
{
	unsigned a = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
		     "{%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(a));
}

/* ---- the split kernel ---- */

static __host__ __device__ inline int64_t splits_of(int64_t len)
{
	return (len + KCU_SPLIT_KEYS - 1) / KCU_SPLIT_KEYS;
}

/* The keys of a split at length len: KCU_SPLIT_KEYS, or with mt > 0 (the
 * tensor-core kernel, MOOR_DEC_MT) whole tiles of them, as few as keep a
 * row at most mt splits (KCU_SPLIT_MAX by default: a split of a row past
 * 4k keys walks 2, 3, ... tiles, and the partials, a fifth of the traffic
 * at 128k with one tile a split, stay at 64 a head). A rule of len alone,
 * so a graph and a direct call at the same length agree. bench_kern on
 * an H100 (2026-12-07), a layer at 8k / 32k / 128k keys: 0.0177 / 0.0559
 * / 0.1837 ms at most 64 splits, 0.0191 / 0.0576 / 0.1859 at 96, 0.0221
 * / 0.0641 / 0.1956 at 512 (the default before; one tile a split up to
 * 32k); bench_gpu's decode step 18.73 against 18.75 ms at 8k and 21.37
 * against 21.51 at 128k. Fewer splits: the 24 heads' 4 KV groups still
 * fill 256 blocks at 64, and each split's fixed cost (its q tile, its
 * partial's write, the combine's read) is paid fewer times. */
#define KCU_SPLIT_MAX 64
static __host__ __device__ inline int64_t split_keys(int64_t len, int mt)
{
	if (mt <= 0)
		return KCU_SPLIT_KEYS;
	int64_t tiles = splits_of(len);
	return (tiles + mt - 1) / mt * KCU_SPLIT_KEYS;
}

static __host__ __device__ inline int64_t split_count(int64_t len, int mt)
{
	int64_t k = split_keys(len, mt);
	return (len + k - 1) / k;
}

static size_t flash_part_bytes(const kern_limits *lim);

/* The partials' scratch: the split kernel's or the flash kernel's
 * segments', whichever is larger (the two never run at once). */
size_t kcu_att_part_bytes(const kern_limits *lim)
{
	if (lim->window <= 0 || lim->q_heads <= 0 || lim->head_dim <= 0)
		return 0;
	size_t sp = (size_t)KCU_SPLIT_BATCH * (size_t)lim->q_heads *
		    (size_t)splits_of(lim->window) * (size_t)(lim->head_dim + 2) *
		    sizeof(float);
	size_t fl = flash_part_bytes(lim);
	return sp > fl ? sp : fl;
}

static __device__ inline float kv_get(const void *p, int dt, size_t i)
{
	return kcu_wget(p, dt, i);
}

/* One key's scores against the G query heads in qs [G][D]: the sum over
 * d in order 0..D-1 (fmaf), a bf16 row read 8 values (16 bytes) at a
 * time when vec. */
static __device__ inline void key_dots(float *acc, const float *qs,
				       const void *K, int kvdt, size_t row,
				       int G, int D, int vec)
{
#pragma unroll
	for (int h = 0; h < KCU_GROUP_MAX; h++)
		acc[h] = 0.0f;
	if (vec) {
		const uint4 *kp = (const uint4 *)((const bf16 *)K + row);
#pragma unroll 4
		for (int d8 = 0; d8 < D / 8; d8++) {
			uint4 u = kp[d8];
			const bf16 *e = (const bf16 *)&u;
#pragma unroll
			for (int i = 0; i < 8; i++) {
				float kd = __bfloat162float(e[i]);
				const float *qd = qs + d8 * 8 + i;
#pragma unroll
				for (int h = 0; h < KCU_GROUP_MAX; h++)
					if (h < G)
						acc[h] = fmaf(qd[h * D], kd, acc[h]);
			}
		}
		return;
	}
	for (int d = 0; d < D; d++) {
		float kd = kv_get(K, kvdt, row + d);
#pragma unroll
		for (int h = 0; h < KCU_GROUP_MAX; h++)
			if (h < G)
				acc[h] = fmaf(qs[h * D + d], kd, acc[h]);
	}
}

/* grid (splits, Hkv, rows), KCU_SPLIT_KEYS threads: a thread a key for
 * the scores, a warp a head for the split's softmax, a thread a dim for
 * P V. part[r][h][s][D + 2] = the split's max, its sum, its unnormalised
 * output. */
__global__ void __launch_bounds__(KCU_SPLIT_KEYS)
    k_split(float *part, int nsplit, const float *qv, int ldq, const void *K,
	    const void *V, int kvdt, int r0, const int64_t *dpos, int64_t padd,
	    int Hq, int Hkv, int D, float scale, int act)
{
	kcu_pdl_enter();
	extern __shared__ float sh[];
	const int G = Hq / Hkv, kh = blockIdx.y, s = blockIdx.x;
	const int rl = blockIdx.z, t = r0 + rl;
	const int64_t len = kcu_pos(dpos, padd) + t + 1;
	const int64_t j0 = (int64_t)s * KCU_SPLIT_KEYS;
	if (j0 >= len)
		return; /* past this launch's length (a graph's spare split) */
	const int n = (int)(len - j0 < KCU_SPLIT_KEYS ? len - j0 : KCU_SPLIT_KEYS);
	float *qs = sh;		       /* [G][D] */
	float *sc = sh + (size_t)G * D; /* [G][KCU_SPLIT_KEYS] */
	const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
	const int nw = blockDim.x >> 5;
	for (int i = tid; i < G * D; i += blockDim.x) {
		int h = i / D, d = i - h * D;
		qs[i] = qv[(size_t)t * ldq + (size_t)(kh * G + h) * D + d];
	}
	__syncthreads();
	const size_t kstride = (size_t)Hkv * D;
	const int vec = kvdt == KERN_BF16 && D % 8 == 0 &&
			((uintptr_t)K & 15) == 0;
	if (tid < n) {
		float acc[KCU_GROUP_MAX];
		key_dots(acc, qs, K, kvdt,
			 (size_t)(j0 + tid) * kstride + (size_t)kh * D, G, D, vec);
#pragma unroll
		for (int h = 0; h < KCU_GROUP_MAX; h++)
			if (h < G)
				sc[h * KCU_SPLIT_KEYS + tid] =
				    kcu_rnd(__fmul_rn(kcu_rnd(acc[h], act), scale), act);
	}
	__syncthreads();
	/* per head: the split's max, p = rnd(e^(s - m)), their sum (a lane's
	 * keys in order, then a butterfly) */
	for (int h = w; h < G; h += nw) {
		float *x = sc + h * KCU_SPLIT_KEYS;
		float m = -INFINITY;
		for (int j = lane; j < n; j += 32)
			m = fmaxf(m, x[j]);
		for (int o = 16; o > 0; o >>= 1)
			m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
		float l = 0.0f;
		for (int j = lane; j < n; j += 32) {
			float p = kcu_rnd(expf(x[j] - m), act);
			x[j] = p;
			l += p;
		}
		for (int o = 16; o > 0; o >>= 1)
			l += __shfl_xor_sync(0xffffffffu, l, o);
		if (lane == 0) {
			float *o_ = part + (((size_t)rl * Hq + kh * G + h) * nsplit + s) *
					     (D + 2);
			o_[0] = m;
			o_[1] = l;
		}
	}
	__syncthreads();
	/* p V: a thread a dim, every head of the group, keys in order */
	for (int d = tid; d < D; d += blockDim.x) {
		float acc[KCU_GROUP_MAX];
#pragma unroll
		for (int h = 0; h < KCU_GROUP_MAX; h++)
			acc[h] = 0.0f;
		const size_t base = (size_t)j0 * kstride + (size_t)kh * D + d;
#pragma unroll 8
		for (int j = 0; j < n; j++) {
			float v = kv_get(V, kvdt, base + (size_t)j * kstride);
#pragma unroll
			for (int h = 0; h < KCU_GROUP_MAX; h++)
				if (h < G)
					acc[h] = fmaf(sc[h * KCU_SPLIT_KEYS + j], v, acc[h]);
		}
#pragma unroll
		for (int h = 0; h < KCU_GROUP_MAX; h++)
			if (h < G)
				part[(((size_t)rl * Hq + kh * G + h) * nsplit + s) *
					 (D + 2) +
				     2 + d] = acc[h];
	}
}

/* The split kernel for bf16 K and V (D 128 or 256): grid (splits, Hkv,
 * rows), SP_THREADS threads. The split's K and V rows are copied into
 * shared memory at once (cp.async; V's copy runs under the scores), two
 * threads a key for the scores (halves of D, each in order d = 0.., the
 * halves added low + high), a warp a head for the split's softmax, a
 * thread two dims for P V (keys in order). Writes what k_split does.
 * (Measured on the H200 at 27B shapes: 34 / 112 / 397 us a layer at 8k /
 * 32k / 128k keys; walking 256-key splits in double-buffered 32-key tiles
 * instead took 76 / 246 / 955: too few blocks, each latency-bound.) */
#define SP_THREADS (2 * KCU_SPLIT_KEYS)
/* K rows in shared memory: the high half 8 values past the low one and
 * rows D + 16 apart, so the 8 threads of a 16-byte load phase (4 keys x
 * 2 halves) hit 8 distinct bank groups; q transposed [D][GP] (GP = G
 * rounded up to 8 or 16), a dim's heads read as float4s. */
static __host__ __device__ constexpr int sp_ld(int D)
{
	return D + 16;
}
static __host__ __device__ constexpr size_t sp_smem(int D, int GP, int G)
{
	return (size_t)2 * KCU_SPLIT_KEYS * sp_ld(D) * 2 +
	       ((size_t)GP * D + (size_t)G * KCU_SPLIT_KEYS) * 4;
}

template <int D, int GP>
__global__ void __launch_bounds__(SP_THREADS)
    k_split16(float *part, int nsplit, const float *qv, int ldq, const bf16 *K,
	      const bf16 *V, int r0, const int64_t *dpos, int64_t padd, int Hq,
	      int Hkv, float scale)
{
	kcu_pdl_enter();
	constexpr int LD = sp_ld(D), P8 = D / 8;
	extern __shared__ __align__(16) unsigned char smraw[];
	bf16 *Ks = (bf16 *)smraw, *Vs = Ks + KCU_SPLIT_KEYS * LD;
	float *qs = (float *)(Vs + KCU_SPLIT_KEYS * LD); /* [D][GP] */
	float *sc = qs + (size_t)D * GP;		  /* [G][KEYS] */
	const int G = Hq / Hkv, kh = blockIdx.y, s = blockIdx.x;
	const int rl = blockIdx.z, t = r0 + rl;
	const int64_t len = kcu_pos(dpos, padd) + t + 1;
	const int64_t j0 = (int64_t)s * KCU_SPLIT_KEYS;
	if (j0 >= len)
		return; /* past this launch's length (a graph's spare split) */
	const int n = (int)(len - j0 < KCU_SPLIT_KEYS ? len - j0 : KCU_SPLIT_KEYS);
	const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
	const size_t kstride = (size_t)Hkv * D;
	for (int i = tid; i < KCU_SPLIT_KEYS * P8; i += SP_THREADS) {
		int r = i / P8, c = (i - r * P8) * 8, ok = r < n;
		cp16(Ks + r * LD + c + (c >= D / 2 ? 8 : 0),
		     K + (size_t)(j0 + (ok ? r : 0)) * kstride + (size_t)kh * D + c,
		     ok);
	}
	cp_commit();
	for (int i = tid; i < KCU_SPLIT_KEYS * P8; i += SP_THREADS) {
		int r = i / P8, c = (i - r * P8) * 8, ok = r < n;
		cp16(Vs + r * LD + c,
		     V + (size_t)(j0 + (ok ? r : 0)) * kstride + (size_t)kh * D + c,
		     ok);
	}
	cp_commit();
	for (int i = tid; i < GP * D; i += SP_THREADS) {
		int h = i / D, d = i - h * D;
		qs[d * GP + h] =
		    h < G ? qv[(size_t)t * ldq + (size_t)(kh * G + h) * D + d] : 0.0f;
	}
	cp_wait<1>();
	__syncthreads();
	{
		const int key = tid >> 1, half = tid & 1;
		float acc[GP];
#pragma unroll
		for (int h = 0; h < GP; h++)
			acc[h] = 0.0f;
		const uint4 *kp =
		    (const uint4 *)(Ks + key * LD + half * (D / 2 + 8));
		const float *q0 = qs + half * (D / 2) * GP;
#pragma unroll 2
		for (int d8 = 0; d8 < P8 / 2; d8++) {
			uint4 u = kp[d8];
			const bf16 *e = (const bf16 *)&u;
#pragma unroll
			for (int i = 0; i < 8; i++) {
				float kd = __bfloat162float(e[i]);
				const float4 *qd =
				    (const float4 *)(q0 + (d8 * 8 + i) * GP);
#pragma unroll
				for (int h4 = 0; h4 < GP / 4; h4++) {
					float4 qq = qd[h4];
					acc[4 * h4] = fmaf(qq.x, kd, acc[4 * h4]);
					acc[4 * h4 + 1] = fmaf(qq.y, kd, acc[4 * h4 + 1]);
					acc[4 * h4 + 2] = fmaf(qq.z, kd, acc[4 * h4 + 2]);
					acc[4 * h4 + 3] = fmaf(qq.w, kd, acc[4 * h4 + 3]);
				}
			}
		}
#pragma unroll
		for (int h = 0; h < GP; h++)
			if (h < G) {
				float o = __shfl_xor_sync(0xffffffffu, acc[h], 1);
				float v = half ? o + acc[h] : acc[h] + o;
				if (!half && key < n)
					sc[h * KCU_SPLIT_KEYS + key] = kcu_bf16r(
					    __fmul_rn(kcu_bf16r(v), scale));
			}
	}
	__syncthreads();
	for (int h = w; h < G; h += SP_THREADS / 32) {
		float *x = sc + h * KCU_SPLIT_KEYS;
		float m = -INFINITY;
		for (int j = lane; j < n; j += 32)
			m = fmaxf(m, x[j]);
		for (int o = 16; o > 0; o >>= 1)
			m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
		float l = 0.0f;
		for (int j = lane; j < n; j += 32) {
			float p = kcu_bf16r(expf(x[j] - m));
			x[j] = p;
			l += p;
		}
		for (int o = 16; o > 0; o >>= 1)
			l += __shfl_xor_sync(0xffffffffu, l, o);
		if (lane == 0) {
			float *o_ = part + (((size_t)rl * Hq + kh * G + h) * nsplit + s) *
					     (D + 2);
			o_[0] = m;
			o_[1] = l;
		}
	}
	cp_wait<0>();
	__syncthreads();
	const int d = 2 * tid;
	if (d >= D)
		return;
	float a0[GP], a1[GP];
#pragma unroll
	for (int h = 0; h < GP; h++)
		a0[h] = a1[h] = 0.0f;
#pragma unroll 8
	for (int j = 0; j < n; j++) {
		float2 v = __bfloat1622float2(
		    *(const __nv_bfloat162 *)(Vs + j * LD + d));
#pragma unroll
		for (int h = 0; h < GP; h++)
			if (h < G) {
				float p_ = sc[h * KCU_SPLIT_KEYS + j];
				a0[h] = fmaf(p_, v.x, a0[h]);
				a1[h] = fmaf(p_, v.y, a1[h]);
			}
	}
#pragma unroll
	for (int h = 0; h < GP; h++)
		if (h < G) {
			float *op = part +
				    (((size_t)rl * Hq + kh * G + h) * nsplit + s) *
					(D + 2) +
				    2 + d;
			*(float2 *)op = make_float2(a0[h], a1[h]);
		}
}

/* The split kernel on tensor cores (bf16 K and V, D 128 or 256, G <= 16):
 * grid (splits, Hkv, rows), DM_THREADS threads, the partials k_split
 * writes (k_combine reads them unchanged). A split is one tile of
 * KCU_SPLIT_KEYS keys, or with mt as many tiles as split_keys() says (up
 * to 32k keys, one: the same bits either way). The group's G query rows
 * are the A operand of mma.m16n8k16 (padded to 16 rows with zeros; q is
 * bf16-valued where act is BF16, so its bf16 copy is exact), a warp takes
 * 16 keys of a tile for the scores (one n-tile pair over D / 16 k steps),
 * the tile's max meets across the 4 warps in shared memory (in order w =
 * 0..3) and with the split's running max, p = rnd(e^(s - m)) goes to
 * shared memory as bf16 (exact: p is rounded), the running sum and O are
 * rescaled by e^(m_old - m) (the flash order), and a warp takes D / 4
 * dims of P V over the tile's 64 keys (4 k steps in order). A tile's K is
 * fetched again while the last tile's P V runs, its V while the scores
 * run. K, V and q rows sit in shared memory unpadded, their 16-byte
 * chunks XOR-swizzled by the row (chunk c of row r at c ^ (r & 7)), so
 * the ldmatrix phases are conflict-free and three blocks fit an SM: the
 * loads of one block run under the others' products. (k_split16, its FMA
 * predecessor, was bound by its shared-memory reads of q: 34 / 112 / 397
 * us a layer at 8k / 32k / 128k keys on the H200, about 3.3x the KV
 * read.) */
#define DM_THREADS 128
#define DM_PLD (KCU_SPLIT_KEYS + 8) /* P rows: padded, conflict-free */

static __host__ __device__ constexpr size_t dm_smem(int D)
{
	return ((size_t)2 * KCU_SPLIT_KEYS * D + 16 * (size_t)D) * 2 +
	       (size_t)16 * DM_PLD * 2 + (size_t)2 * 4 * 16 * 4;
}

/* element (r, c) of a swizzled [rows][D] bf16 tile */
template <int D> static __device__ inline int dm_at(int r, int c)
{
	return r * D + ((((c >> 3) ^ (r & 7))) << 3) + (c & 7);
}

/* A tile of KEYS rows of K or V from key jt into a swizzled [KEYS][D]
 * tile, rows at or past n zero (their scores are -inf, their p 0). */
template <int D>
static __device__ inline void dm_tile(bf16 *s, const bf16 *X, int64_t jt,
				      int n, size_t kstride, int kh)
{
	constexpr int KEYS = KCU_SPLIT_KEYS, P8 = D / 8;
	for (int i = threadIdx.x; i < KEYS * P8; i += DM_THREADS) {
		int r = i / P8, c = (i - r * P8) * 8, ok = r < n;
		cp16(s + dm_at<D>(r, c),
		     X + (size_t)(jt + (ok ? r : 0)) * kstride +
			 (size_t)kh * D + c,
		     ok);
	}
}

template <int D>
__global__ void __launch_bounds__(DM_THREADS)
    k_split_mma(float *part, int nsplit, const float *qv, int ldq,
		const bf16 *K, const bf16 *V, int r0, const int64_t *dpos,
		int64_t padd, int Hq, int Hkv, float scale, int mt)
{
	kcu_pdl_enter();
	constexpr int KEYS = KCU_SPLIT_KEYS, P8 = D / 8, DW = D / 4;
	extern __shared__ __align__(16) unsigned char smraw[];
	bf16 *Ks = (bf16 *)smraw;		   /* [KEYS][D] swizzled */
	bf16 *Vs = Ks + KEYS * D;		   /* [KEYS][D] swizzled */
	bf16 *Qs = Vs + KEYS * D;		   /* [16][D] swizzled */
	bf16 *Ps = Qs + 16 * D;			   /* [16][DM_PLD] */
	float *rmax = (float *)(Ps + 16 * DM_PLD); /* [4 warps][16 rows] */
	float *rsum = rmax + 4 * 16;
	const int G = Hq / Hkv, kh = blockIdx.y, s = blockIdx.x;
	const int rl = blockIdx.z, t = r0 + rl;
	const int64_t len = kcu_pos(dpos, padd) + t + 1;
	const int64_t ks = split_keys(len, mt);
	const int64_t j0 = (int64_t)s * ks;
	if (j0 >= len)
		return; /* past this launch's length (a graph's spare split) */
	const int64_t jend = len - j0 < ks ? len : j0 + ks;
	const int ntile = (int)((jend - j0 + KEYS - 1) / KEYS);
	const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
	const int g = lane >> 2, tq = lane & 3;
	const size_t kstride = (size_t)Hkv * D;
	int n = (int)(jend - j0 < KEYS ? jend - j0 : KEYS);
	dm_tile<D>(Ks, K, j0, n, kstride, kh);
	cp_commit();
	dm_tile<D>(Vs, V, j0, n, kstride, kh);
	cp_commit();
	for (int i = tid; i < 16 * P8; i += DM_THREADS) {
		int h = i / P8, c = (i - h * P8) * 8;
		uint4 u = make_uint4(0u, 0u, 0u, 0u);
		if (h < G) {
			const float *src =
			    qv + (size_t)t * ldq + (size_t)(kh * G + h) * D + c;
			float4 a = *(const float4 *)src,
			       b = *(const float4 *)(src + 4);
			u = make_uint4(pack2(a.x, a.y), pack2(a.z, a.w),
				       pack2(b.x, b.y), pack2(b.z, b.w));
		}
		*(uint4 *)(Qs + dm_at<D>(h, c)) = u;
	}
	/* the running max of rows g and g + 8 (every lane), of row tid and
	 * its sum (threads below 16), and O = P V over the tiles so far,
	 * this warp's dims DW w .. (rows g and g + 8) */
	float Ma = -INFINITY, Mb = -INFINITY, Mh = -INFINITY, Lh = 0.0f;
	float o[DW / 8][4];
#pragma unroll
	for (int i = 0; i < DW / 8; i++)
		o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
	for (int it = 0; it < ntile; it++) {
		cp_wait<1>();
		__syncthreads(); /* K (and at the first, q) in */

		/* S = Q K^T: rows = heads, this warp's keys 16 w .. 16 w + 15 */
		float sc[2][4];
#pragma unroll
		for (int i = 0; i < 2; i++)
			sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.0f;
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++) {
			uint32_t a[4], b[4];
			ldsm_x4(a, Qs + dm_at<D>(lane & 15,
						 kk * 16 + (lane >> 4) * 8));
			ldsm_x4(b, Ks + dm_at<D>(16 * w + (lane >> 4) * 8 +
						     (lane & 7),
						 kk * 16 + ((lane >> 3) & 1) * 8));
			mma16816(sc[0], a, b[0], b[1]);
			mma16816(sc[1], a, b[2], b[3]);
		}
		/* rounded and scaled as ops.h says; keys past the row's
		 * length -inf; the rows' maxima over this warp's keys (a
		 * maximum is exact in any order) */
		float ma = -INFINITY, mb = -INFINITY;
#pragma unroll
		for (int nt = 0; nt < 2; nt++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int key = 16 * w + 8 * nt + 2 * tq + (e & 1);
				float v = kcu_bf16r(
				    __fmul_rn(kcu_bf16r(sc[nt][e]), scale));
				if (key >= n)
					v = -INFINITY;
				sc[nt][e] = v;
				if (e < 2)
					ma = fmaxf(ma, v);
				else
					mb = fmaxf(mb, v);
			}
		for (int m = 1; m <= 2; m <<= 1) {
			ma = fmaxf(ma, __shfl_xor_sync(0xffffffffu, ma, m));
			mb = fmaxf(mb, __shfl_xor_sync(0xffffffffu, mb, m));
		}
		if (tq == 0) {
			rmax[w * 16 + g] = ma;
			rmax[w * 16 + g + 8] = mb;
		}
		__syncthreads();
		/* the running max with this tile's (a tile has a key, so it
		 * is finite); the old one's weight e^(M_old - M) rescales
		 * O and the sum (0 at the first tile) */
		ma = fmaxf(Ma, fmaxf(fmaxf(rmax[g], rmax[16 + g]),
				     fmaxf(rmax[32 + g], rmax[48 + g])));
		mb = fmaxf(Mb, fmaxf(fmaxf(rmax[g + 8], rmax[24 + g]),
				     fmaxf(rmax[40 + g], rmax[56 + g])));
		const float ca = expf(Ma - ma), cb = expf(Mb - mb);
		Ma = ma;
		Mb = mb;
		/* p = rnd(e^(s - M)); a lane's four in order, then the 4
		 * lanes of a row in a butterfly */
		float la = 0.0f, lb = 0.0f;
#pragma unroll
		for (int nt = 0; nt < 2; nt++) {
			float p0 = kcu_bf16r(expf(sc[nt][0] - ma));
			float p1 = kcu_bf16r(expf(sc[nt][1] - ma));
			float p2 = kcu_bf16r(expf(sc[nt][2] - mb));
			float p3 = kcu_bf16r(expf(sc[nt][3] - mb));
			la += p0;
			la += p1;
			lb += p2;
			lb += p3;
			int col = 16 * w + 8 * nt + 2 * tq;
			*(uint32_t *)(Ps + g * DM_PLD + col) = pack2(p0, p1);
			*(uint32_t *)(Ps + (g + 8) * DM_PLD + col) =
			    pack2(p2, p3);
		}
		for (int m = 1; m <= 2; m <<= 1) {
			la += __shfl_xor_sync(0xffffffffu, la, m);
			lb += __shfl_xor_sync(0xffffffffu, lb, m);
		}
		if (tq == 0) {
			rsum[w * 16 + g] = la;
			rsum[w * 16 + g + 8] = lb;
		}
		__syncthreads(); /* P and the sums in; K read by all */
		const int64_t jn = j0 + (int64_t)(it + 1) * KEYS;
		const int nn = (int)(jend - jn < KEYS ? jend - jn : KEYS);
		if (it + 1 < ntile)
			dm_tile<D>(Ks, K, jn, nn, kstride, kh);
		cp_commit(); /* (empty after the last tile: the count holds) */
		cp_wait<1>();
		__syncthreads(); /* V in */
		if (tid < 16 && tid < G) {
			float mh = fmaxf(Mh, fmaxf(fmaxf(rmax[tid], rmax[16 + tid]),
						   fmaxf(rmax[32 + tid],
							 rmax[48 + tid])));
			float l = rsum[tid];
			l += rsum[16 + tid];
			l += rsum[32 + tid];
			l += rsum[48 + tid];
			Lh = fmaf(Lh, expf(Mh - mh), l);
			Mh = mh;
		}
		/* O = O e^(M_old - M) + P V over the tile's keys */
#pragma unroll
		for (int i = 0; i < DW / 8; i++) {
			o[i][0] *= ca;
			o[i][1] *= ca;
			o[i][2] *= cb;
			o[i][3] *= cb;
		}
#pragma unroll
		for (int kk = 0; kk < KEYS / 16; kk++) {
			uint32_t a[4];
			ldsm_x4(a, Ps + (lane & 15) * DM_PLD + kk * 16 +
				       (lane >> 4) * 8);
#pragma unroll
			for (int n2 = 0; n2 < DW / 16; n2++) {
				uint32_t b[4];
				ldsm_x4_t(b, Vs + dm_at<D>(kk * 16 + (lane & 15),
							   DW * w + n2 * 16 +
							       (lane >> 4) * 8));
				mma16816(o[2 * n2], a, b[0], b[1]);
				mma16816(o[2 * n2 + 1], a, b[2], b[3]);
			}
		}
		__syncthreads(); /* V, P, the maxima and sums read by all */
		if (it + 1 < ntile)
			dm_tile<D>(Vs, V, jn, nn, kstride, kh);
		cp_commit();
		n = nn;
	}
	if (tid < 16 && tid < G) {
		float *o_ =
		    part +
		    (((size_t)rl * Hq + kh * G + tid) * nsplit + s) * (D + 2);
		o_[0] = Mh;
		o_[1] = Lh;
	}
#pragma unroll
	for (int half = 0; half < 2; half++) {
		int h = g + 8 * half;
		if (h >= G)
			continue;
		float *op =
		    part +
		    (((size_t)rl * Hq + kh * G + h) * nsplit + s) * (D + 2) +
		    2 + DW * w + 2 * tq;
#pragma unroll
		for (int i = 0; i < DW / 8; i++)
			*(float2 *)(op + 8 * i) =
			    make_float2(o[i][2 * half], o[i][2 * half + 1]);
	}
}

#define COMB_THREADS 256
#define COMB_DIMS 32 /* dims of a combine block: a lane each */
#define COMB_CHUNK 1024 /* k_combine_ref: splits whose weights sit in
			 * shared memory at once */
#define COMB_WSPLITS 4096 /* k_combine: the same, 256k keys */
#define COMB_U 32	  /* k_combine: a lane's loads in flight */

/* grid (Hq, rows, ceil(D / COMB_DIMS)), COMB_THREADS threads: the splits
 * of a row. The max is order-free; L = the block's fixed-order sum of
 * e^(m_s - M) l_s; warp w adds e^(m_s - M) o_s for s = w, w + 8, ... in
 * order (the weights a chunk at a time in shared memory, eight loads in
 * flight), then the 8 warps' sums are added in order. k_combine below
 * does the same arithmetic with its loads in flight: this one stays as
 * its reference (MOOR_DEC_COMB=0). */
__global__ void __launch_bounds__(COMB_THREADS)
    k_combine_ref(float *out, const float *part, int nsplit, int r0,
		  const int64_t *dpos, int64_t padd, int Hq, int D, int act,
		  int mt)
{
	kcu_pdl_enter();
	__shared__ float red[32];
	__shared__ float acc[COMB_THREADS / 32][COMB_DIMS];
	__shared__ float wsh[COMB_CHUNK]; /* e^(m_s - M) of a chunk of splits */
	const int h = blockIdx.x, rl = blockIdx.y, t = r0 + rl;
	const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
	const int d = blockIdx.z * COMB_DIMS + lane;
	const int64_t len = kcu_pos(dpos, padd) + t + 1;
	const int ns = (int)split_count(len, mt);
	const float *p = part + ((size_t)rl * Hq + h) * nsplit * (D + 2);
	float M = -INFINITY;
	for (int s = tid; s < ns; s += blockDim.x)
		M = fmaxf(M, p[(size_t)s * (D + 2)]);
	for (int o = 16; o > 0; o >>= 1)
		M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
	if (lane == 0)
		red[w] = M;
	__syncthreads();
	M = -INFINITY;
	for (int i = 0; i < COMB_THREADS / 32; i++)
		M = fmaxf(M, red[i]);
	float l = 0.0f;
	for (int s = tid; s < ns; s += blockDim.x) {
		const float *q = p + (size_t)s * (D + 2);
		l = fmaf(expf(q[0] - M), q[1], l);
	}
	const float L = kcu_block_sum(l, red);
	float a = 0.0f;
	for (int c0 = 0; c0 < ns; c0 += COMB_CHUNK) {
		const int cn = ns - c0 < COMB_CHUNK ? ns - c0 : COMB_CHUNK;
		__syncthreads();
		for (int i = tid; i < cn; i += COMB_THREADS)
			wsh[i] = expf(p[(size_t)(c0 + i) * (D + 2)] - M);
		__syncthreads();
		if (d < D) {
			const float *q = p + (size_t)c0 * (D + 2) + 2 + d;
#pragma unroll 8
			for (int s = w; s < cn; s += COMB_THREADS / 32)
				a = fmaf(wsh[s], __ldg(q + (size_t)s * (D + 2)), a);
		}
	}
	acc[w][lane] = a;
	__syncthreads();
	if (w == 0 && d < D) {
		float v = acc[0][lane];
		for (int i = 1; i < COMB_THREADS / 32; i++)
			v += acc[i][lane];
		out[((size_t)t * Hq + h) * D + d] = kcu_rnd(v / L, act);
	}
}

/* k_combine_ref's arithmetic, the same bits, with its loads in flight: it
 * was latency bound (ncu on an H100 at 32k keys: 13.6 us, 0.9 TB/s, a
 * quarter of the split kernel's time; 9.4 us now, and 9.7 against 48.8
 * at 128k with the split kernel's tiles). The maxima and the (m, l) pairs are
 * read 4 a thread at a time before they are used; the weights of up to
 * COMB_WSPLITS splits are kept from L's pass (a longer row computes them
 * again a chunk at a time); a lane's sum over its splits loads COMB_U
 * outputs before it adds them in order. (Its launch bounds ask for one
 * block an SM: with the default, ptxas fits the kernel in 32 registers
 * and so cannot keep 32 loads in flight; there are only Hq * rows * 8
 * blocks.) */
__global__ void __launch_bounds__(COMB_THREADS, 1)
    k_combine(float *out, const float *part, int nsplit, int r0,
	      const int64_t *dpos, int64_t padd, int Hq, int D, int act,
	      int mt)
{
	kcu_pdl_enter();
	__shared__ float red[32];
	__shared__ float acc[COMB_THREADS / 32][COMB_DIMS];
	__shared__ float wsh[COMB_WSPLITS]; /* e^(m_s - M) of a chunk */
	const int h = blockIdx.x, rl = blockIdx.y, t = r0 + rl;
	const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
	const int d = blockIdx.z * COMB_DIMS + lane;
	const int64_t len = kcu_pos(dpos, padd) + t + 1;
	const int ns = (int)split_count(len, mt);
	const size_t st = (size_t)D + 2;
	const float *p = part + ((size_t)rl * Hq + h) * nsplit * st;
	const int kept = ns <= COMB_WSPLITS; /* L's pass keeps the weights */
	float M = -INFINITY;
	for (int s0 = tid; s0 < ns; s0 += 4 * COMB_THREADS) {
		float m[4];
#pragma unroll
		for (int u = 0; u < 4; u++) {
			int s = s0 + u * COMB_THREADS;
			m[u] = s < ns ? p[(size_t)s * st] : -INFINITY;
		}
#pragma unroll
		for (int u = 0; u < 4; u++)
			M = fmaxf(M, m[u]);
	}
	for (int o = 16; o > 0; o >>= 1)
		M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
	if (lane == 0)
		red[w] = M;
	__syncthreads();
	M = -INFINITY;
	for (int i = 0; i < COMB_THREADS / 32; i++)
		M = fmaxf(M, red[i]);
	/* a thread's splits s = tid, tid + 256, ... in order, as the ref */
	float l = 0.0f;
	for (int s0 = tid; s0 < ns; s0 += 4 * COMB_THREADS) {
		float m[4], ls[4];
#pragma unroll
		for (int u = 0; u < 4; u++) {
			int s = s0 + u * COMB_THREADS;
			m[u] = s < ns ? p[(size_t)s * st] : 0.0f;
			ls[u] = s < ns ? p[(size_t)s * st + 1] : 0.0f;
		}
#pragma unroll
		for (int u = 0; u < 4; u++) {
			int s = s0 + u * COMB_THREADS;
			if (s < ns) {
				float e = expf(m[u] - M);
				if (kept)
					wsh[s] = e;
				l = fmaf(e, ls[u], l);
			}
		}
	}
	const float L = kcu_block_sum(l, red); /* its syncs publish wsh */
	float a = 0.0f;
	for (int c0 = 0; c0 < ns; c0 += COMB_WSPLITS) {
		const int cn = ns - c0 < COMB_WSPLITS ? ns - c0 : COMB_WSPLITS;
		if (!kept) {
			__syncthreads();
			for (int i = tid; i < cn; i += COMB_THREADS)
				wsh[i] = expf(p[(size_t)(c0 + i) * st] - M);
			__syncthreads();
		}
		if (d < D) {
			const float *q = p + (size_t)c0 * st + 2 + d;
			int s0 = w;
			for (; s0 + 8 * (COMB_U - 1) < cn; s0 += 8 * COMB_U) {
				float v[COMB_U];
				const float *qs = q + (size_t)s0 * st;
#pragma unroll
				for (int u = 0; u < COMB_U; u++)
					v[u] = __ldg(qs + (size_t)u * 8 * st);
#pragma unroll
				for (int u = 0; u < COMB_U; u++)
					a = fmaf(wsh[s0 + 8 * u], v[u], a);
			}
			for (; s0 < cn; s0 += 8) /* the tail, in order */
				a = fmaf(wsh[s0], __ldg(q + (size_t)s0 * st), a);
		}
	}
	acc[w][lane] = a;
	__syncthreads();
	if (w == 0 && d < D) {
		float v = acc[0][lane];
		for (int i = 1; i < COMB_THREADS / 32; i++)
			v += acc[i][lane];
		out[((size_t)t * Hq + h) * D + d] = kcu_rnd(v / L, act);
	}
}

/* MOOR_DEC_MMA=0 takes k_split16 instead of k_split_mma (read once): the
 * two side by side in one benchmark run. */
static int dec_mma_on(void)
{
	static int on = -1;
	return kcu_env_once(&on, "MOOR_DEC_MMA", 1);
}

/* MOOR_DEC_MT: k_split_mma's most splits a row (split_keys), read each
 * call (the kernel test sets it): 0 one tile a split, N >= 64 at most N
 * splits, else KCU_SPLIT_MAX. */
static int dec_mt(void)
{
	long v = kcu_env_int("MOOR_DEC_MT", KCU_SPLIT_MAX);
	return v == 0 ? 0 : v >= 64 && v <= INT_MAX ? (int)v : KCU_SPLIT_MAX;
}

static int run_split(kern_queue *q, float *out, const float *qv, int ldq,
		     const void *K, const void *V, int kvdt, int T,
		     int64_t pos0, int Hq, int Hkv, int D, float scale, int act)
{
	kern_ctx *c = q->ctx;
	int G = Hq / Hkv;
	if (G > KCU_GROUP_MAX || D > 256)
		return MOOR_ERANGE;
	/* the grid: this call's keys, or the graph's max_len */
	int64_t keys = q->capturing ? q->max_len : pos0 + T;
	int64_t ns64 = splits_of(keys);
	if ((size_t)KCU_SPLIT_BATCH * Hq * ns64 * (D + 2) * sizeof(float) >
	    c->att_part_bytes) {
		moor_err("attention: %lld keys, %d heads of %d need the split "
			 "scratch reserve() sizes (window %lld)",
			 (long long)keys, Hq, D, (long long)c->lim.window);
		return MOOR_ERANGE;
	}
	int ns = (int)ns64;
	size_t shm = ((size_t)G * D + (size_t)G * KCU_SPLIT_KEYS) * sizeof(float);
	static int shm_set;
	if (shm > 48 * 1024 && !shm_set) {
		KCU(c, cudaFuncSetAttribute(
			   k_split, cudaFuncAttributeMaxDynamicSharedMemorySize,
			   (int)(((size_t)KCU_GROUP_MAX * 256 +
				  (size_t)KCU_GROUP_MAX * KCU_SPLIT_KEYS) *
				 sizeof(float))));
		shm_set = 1;
	}
	const int64_t *dp = kcu_dpos(q);
	int64_t pa = kcu_padd(q, pos0);
	/* the bf16 kernel: 16-byte aligned rows */
	int b16 = kvdt == KERN_BF16 && act == KERN_ACT_BF16 && D % 8 == 0 &&
		  (((uintptr_t)K | (uintptr_t)V) & 15) == 0;
	const int gp = G <= 8 ? 8 : 16;
	size_t shm16 = gp == 8 ? sp_smem(D, 8, G) : sp_smem(D, 16, G);
	b16 = b16 && (D == 128 || D == 256);
	static int shm16_set;
	if (b16 && !shm16_set) {
		int mx = (int)sp_smem(256, 16, KCU_GROUP_MAX);
		KCU(c, cudaFuncSetAttribute(
			   k_split16<256, 8>,
			   cudaFuncAttributeMaxDynamicSharedMemorySize, mx));
		KCU(c, cudaFuncSetAttribute(
			   k_split16<256, 16>,
			   cudaFuncAttributeMaxDynamicSharedMemorySize, mx));
		KCU(c, cudaFuncSetAttribute(
			   k_split16<128, 8>,
			   cudaFuncAttributeMaxDynamicSharedMemorySize, mx));
		KCU(c, cudaFuncSetAttribute(
			   k_split16<128, 16>,
			   cudaFuncAttributeMaxDynamicSharedMemorySize, mx));
		shm16_set = 1;
	}
	/* the tensor-core split kernel: q rows 16-byte aligned too */
	int mma =
	    b16 && ldq % 4 == 0 && ((uintptr_t)qv & 15) == 0 && dec_mma_on();
	/* its splits of several tiles past 4k keys (MOOR_DEC_MT=0: one tile
	 * each, as the other kernels' splits) */
	const int mt = mma ? dec_mt() : 0;
	if (mt > 0 && ns > mt)
		ns = mt;
	static int dm_set;
	if (mma && !dm_set) {
		KCU(c, cudaFuncSetAttribute(
			   k_split_mma<256>,
			   cudaFuncAttributeMaxDynamicSharedMemorySize,
			   (int)dm_smem(256)));
		KCU(c, cudaFuncSetAttribute(
			   k_split_mma<128>,
			   cudaFuncAttributeMaxDynamicSharedMemorySize,
			   (int)dm_smem(128)));
		dm_set = 1;
	}
	/* read each call: the kernel test runs both in one process */
	const int comb_new = kcu_env_flag("MOOR_DEC_COMB", 1);
	for (int r0 = 0; r0 < T; r0 += KCU_SPLIT_BATCH) {
		int nr = T - r0 < KCU_SPLIT_BATCH ? T - r0 : KCU_SPLIT_BATCH;
		dim3 gr(ns, Hkv, nr);
#define SPLIT_MMA(DD)                                                          \
	kcu_go(q, k_split_mma<DD>, gr, DM_THREADS, dm_smem(DD), c->att_part,   \
	       ns, qv, ldq, (const bf16 *)K, (const bf16 *)V, r0, dp, pa, Hq,  \
	       Hkv, scale, mt)
		if (mma && D == 256)
			SPLIT_MMA(256);
		else if (mma && D == 128)
			SPLIT_MMA(128);
#undef SPLIT_MMA
		else
#define SPLIT16(DD, GG)                                                        \
	kcu_go(q, k_split16<DD, GG>, gr, SP_THREADS, shm16, c->att_part, ns,   \
	       qv, ldq, (const bf16 *)K, (const bf16 *)V, r0, dp, pa, Hq, Hkv, \
	       scale)
		    if (b16 && D == 256 && gp == 8)
			SPLIT16(256, 8);
		else if (b16 && D == 256)
			SPLIT16(256, 16);
		else if (b16 && D == 128 && gp == 8)
			SPLIT16(128, 8);
		else if (b16 && D == 128)
			SPLIT16(128, 16);
#undef SPLIT16
		else
			kcu_go(q, k_split, gr, KCU_SPLIT_KEYS, shm, c->att_part,
			       ns, qv, ldq, K, V, kvdt, r0, dp, pa, Hq, Hkv, D,
			       scale, act);
		KCU_LAUNCHED(c);
		kcu_go(q, comb_new ? k_combine : k_combine_ref,
		       dim3(Hq, nr, (D + COMB_DIMS - 1) / COMB_DIMS),
		       COMB_THREADS, 0, out, c->att_part, ns, r0, dp, pa, Hq, D,
		       act, mt);
		KCU_LAUNCHED(c);
	}
	return 0;
}

/* ---- the tensor-core prefill kernel ---- */

/* A tile of FL_BC rows of K (or V) for KV head kh from key kb into s (row
 * stride D + FL_PAD), rows at or past kend zero. */
template <int D>
static __device__ inline void load_tile(bf16 *s, const bf16 *X, int64_t kb,
					int64_t kend, int Hkv, int kh)
{
	const int LD = D + FL_PAD, per = D / 8; /* 16-byte pieces a row */
	for (int i = threadIdx.x; i < FL_BC * per; i += blockDim.x) {
		int r = i / per, c = (i - r * per) * 8;
		int64_t j = kb + r;
		int ok = j < kend;
		const bf16 *src = X + ((size_t)(ok ? j : 0) * Hkv + kh) * D + c;
		cp16(s + r * LD + c, src, ok);
	}
}

/* e^x as the flash kernel takes it: ex2.approx of x log2(e) (two
 * instructions, where expf is a dozen; p is rounded to bf16 after it). */
static __device__ inline float fl_exp(float x)
{
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
	return y;
}

/* A tile's scores rounded and scaled as ops.h says, keys past a row's
 * position -inf when MASK (key index within the tile > lim_a for the
 * lane's row a, > lim_b for its row b), and the two rows' maxima (a tree:
 * a maximum is exact in any order). P2: scale is a power of two (1/16 at
 * head dim 256), so rnd(rnd(s) scale) is rnd(s) scale, one rounding (the
 * product of a bf16 value and 2^k is a bf16 value, scores below 2^-122
 * aside, whose fp32 product is subnormal). */
template <bool MASK, bool P2>
static __device__ inline void fl_scores(float (*s)[4], float scale, int lim_a,
					int lim_b, int tq, float &xa, float &xb)
{
	float ma[8], mb[8];
#pragma unroll
	for (int nt = 0; nt < 8; nt++) {
#pragma unroll
		for (int e = 0; e < 4; e++) {
			float v = P2 ? __fmul_rn(kcu_bf16r(s[nt][e]), scale)
				     : kcu_bf16r(__fmul_rn(kcu_bf16r(s[nt][e]), scale));
			if (MASK && nt * 8 + 2 * tq + (e & 1) > (e < 2 ? lim_a : lim_b))
				v = -INFINITY;
			s[nt][e] = v;
		}
		ma[nt] = fmaxf(s[nt][0], s[nt][1]);
		mb[nt] = fmaxf(s[nt][2], s[nt][3]);
	}
#pragma unroll
	for (int w = 4; w > 0; w >>= 1)
#pragma unroll
		for (int nt = 0; nt < w; nt++) {
			ma[nt] = fmaxf(ma[nt], ma[nt + w]);
			mb[nt] = fmaxf(mb[nt], mb[nt + w]);
		}
	xa = ma[0];
	xb = mb[0];
}

/* Keys are cut into nseg segments of seg keys (a multiple of FL_BC, the
 * same cut for every block of a launch): grid (ceil(T / FL_BR), Hq, nseg),
 * FL_THREADS threads. One K and one V buffer, staggered: V's copy runs
 * under S = Q K^T and the softmax, the next K's under O += P V, and two
 * blocks share an SM. nseg == 1 writes the normalised rows; otherwise a
 * segment writes part[(t Hq + h) nseg + s][D + 2] = its max, its sum and
 * its unnormalised output, and k_fcombine adds the segments in order. */
template <int D, bool P2>
__global__ void __launch_bounds__(FL_THREADS, 2)
    k_flash(float *out, float *part, int nseg, int64_t seg, const float *qv,
	    int ldq, const bf16 *K, const bf16 *V, int T, const int64_t *dpos,
	    int64_t padd, int Hq, int Hkv, float scale)
{
	kcu_pdl_enter();
	constexpr int LD = D + FL_PAD, NT = D / 8;
	extern __shared__ __align__(16) unsigned char smraw[];
	bf16 *Qs = (bf16 *)smraw;
	bf16 *Ks = Qs + FL_BR * LD; /* [FL_BC][LD] */
	bf16 *Vs = Ks + FL_BC * LD;
	/* the heaviest tiles (the last rows) start first */
	const int t0 = (gridDim.x - 1 - blockIdx.x) * FL_BR, h = blockIdx.y;
	const int sg = blockIdx.z;
	const int kh = h / (Hq / Hkv);
	const int64_t pos0 = kcu_pos(dpos, padd);
	const int64_t kend = pos0 + (t0 + FL_BR < T ? t0 + FL_BR : T);
	const int64_t k0 = (int64_t)sg * seg;
	if (k0 >= kend)
		return; /* no row of this block reads the segment */
	const int64_t k1 = k0 + seg < kend ? k0 + seg : kend;
	const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
	const int g = lane >> 2, tq = lane & 3;

	load_tile<D>(Ks, K, k0, k1, Hkv, kh);
	cp_commit();
	for (int i = tid; i < FL_BR * (D / 4); i += blockDim.x) {
		int r = i / (D / 4), c = (i - r * (D / 4)) * 4;
		float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
		if (t0 + r < T)
			v = *(const float4 *)(qv + (size_t)(t0 + r) * ldq +
					      (size_t)h * D + c);
		*(uint2 *)(Qs + r * LD + c) = make_uint2(pack2(v.x, v.y),
							  pack2(v.z, v.w));
	}
	const int ra = t0 + w * 16 + g, rb = ra + 8;
	const int64_t pa = pos0 + ra; /* row a reads keys j <= pa, row b <= pa + 8 */
	const int ntile = (int)((k1 - k0 + FL_BC - 1) / FL_BC);

	float o[NT][4];
#pragma unroll
	for (int i = 0; i < NT; i++)
		o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
	float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;

	for (int it = 0; it < ntile; it++) {
		const int64_t kb = k0 + (int64_t)it * FL_BC;
		cp_wait<0>();
		__syncthreads(); /* K in; every warp is done with V */
		load_tile<D>(Vs, V, kb, k1, Hkv, kh);
		cp_commit();

		/* S = Q K^T for this warp's 16 rows and the tile's 64 keys */
		float s[8][4];
#pragma unroll
		for (int i = 0; i < 8; i++)
			s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
		for (int ks = 0; ks < D / 16; ks++) {
			uint32_t a[4];
			ldsm_x4(a, Qs + (w * 16 + (lane & 15)) * LD + ks * 16 +
					(lane >> 4) * 8);
#pragma unroll
			for (int np = 0; np < 4; np++) {
				uint32_t b[4];
				ldsm_x4(b, Ks + ((2 * np + (lane >> 4)) * 8 + (lane & 7)) * LD +
					       ks * 16 + ((lane >> 3) & 1) * 8);
				mma16816(s[2 * np], a, b[0], b[1]);
				mma16816(s[2 * np + 1], a, b[2], b[3]);
			}
		}
		/* rounding, scale, the causal mask (only on a tile that reaches
		 * past the warp's first row); the rows' maxima */
		float xa, xb;
		const int64_t rel = pa - g - kb; /* the warp's first row - kb */
		if (rel >= FL_BC - 1)
			fl_scores<false, P2>(s, scale, 0, 0, tq, xa, xb);
		else
			fl_scores<true, P2>(s, scale, (int)(rel + g),
					    (int)(rel + g + 8), tq, xa, xb);
		for (int m = 1; m <= 2; m <<= 1) {
			xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, m));
			xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, m));
		}
		float na = fmaxf(ma, xa), nb = fmaxf(mb, xb);
		/* a row with no key yet (a padding row) keeps na = -inf */
		float ca = na == -INFINITY ? 0.0f : fl_exp(ma - na);
		float cb = nb == -INFINITY ? 0.0f : fl_exp(mb - nb);
		float sa = 0.0f, sb = 0.0f;
#pragma unroll
		for (int nt = 0; nt < 8; nt++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				float m = e < 2 ? na : nb;
				float p = m == -INFINITY ? 0.0f
							 : kcu_bf16r(fl_exp(s[nt][e] - m));
				s[nt][e] = p;
				if (e < 2)
					sa += p;
				else
					sb += p;
			}
		for (int m = 1; m <= 2; m <<= 1) {
			sa += __shfl_xor_sync(0xffffffffu, sa, m);
			sb += __shfl_xor_sync(0xffffffffu, sb, m);
		}
		la = la * ca + sa;
		lb = lb * cb + sb;
		ma = na;
		mb = nb;
		/* o * 1 is o: the rescale is skipped when no row's max moved */
		if (__any_sync(0xffffffffu, ca != 1.0f || cb != 1.0f))
#pragma unroll
			for (int i = 0; i < NT; i++) {
				o[i][0] *= ca;
				o[i][1] *= ca;
				o[i][2] *= cb;
				o[i][3] *= cb;
			}
		cp_wait<0>();
		__syncthreads(); /* V in; every warp is done with K */
		if (it + 1 < ntile) {
			load_tile<D>(Ks, K, kb + FL_BC, k1, Hkv, kh);
			cp_commit();
		}
		/* O += P V, 16 keys a step */
#pragma unroll
		for (int kk = 0; kk < 4; kk++) {
			uint32_t a[4] = {pack2(s[2 * kk][0], s[2 * kk][1]),
					 pack2(s[2 * kk][2], s[2 * kk][3]),
					 pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
					 pack2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
			for (int n2 = 0; n2 < NT / 2; n2++) {
				uint32_t b[4];
				ldsm_x4_t(b, Vs + (kk * 16 + (lane & 15)) * LD +
						 n2 * 16 + (lane >> 4) * 8);
				mma16816(o[2 * n2], a, b[0], b[1]);
				mma16816(o[2 * n2 + 1], a, b[2], b[3]);
			}
		}
	}
	if (nseg > 1) {
		/* the segment's partials; a row past T is never combined */
		for (int half = 0; half < 2; half++) {
			int r = half ? rb : ra;
			if (r >= T)
				continue;
			float *pp = part + (((size_t)r * Hq + h) * nseg + sg) * (D + 2);
			if (tq == 0) {
				pp[0] = half ? mb : ma;
				pp[1] = half ? lb : la;
			}
#pragma unroll
			for (int i = 0; i < NT; i++) {
				int d = i * 8 + 2 * tq;
				*(float2 *)(pp + 2 + d) =
				    make_float2(o[i][2 * half], o[i][2 * half + 1]);
			}
		}
		return;
	}
	float ia = la > 0.0f ? 1.0f / la : 0.0f, ib = lb > 0.0f ? 1.0f / lb : 0.0f;
#pragma unroll
	for (int i = 0; i < NT; i++) {
		int d = i * 8 + 2 * tq;
		if (ra < T) {
			float *y = out + ((size_t)ra * Hq + h) * D + d;
			y[0] = kcu_bf16r(o[i][0] * ia);
			y[1] = kcu_bf16r(o[i][1] * ia);
		}
		if (rb < T) {
			float *y = out + ((size_t)rb * Hq + h) * D + d;
			y[0] = kcu_bf16r(o[i][2] * ib);
			y[1] = kcu_bf16r(o[i][3] * ib);
		}
	}
}

/* grid (Hq, T), D / 2 threads (two dims each): a row's segments (those
 * of its piece of pc), the weights e^(m_s - M) and their sums in order
 * s = 0, 1, ... */
__global__ void k_fcombine(float *out, const float *part,
			   const __grid_constant__ kcu_pieces pc,
			   const int64_t *dpos, int64_t padd, int Hq, int D)
{
	kcu_pdl_enter();
	const int h = blockIdx.x, t = blockIdx.y, d = 2 * threadIdx.x;
	int pi = 0;
	while (pi + 1 < pc.n && pc.row0[pi + 1] <= t)
		pi++;
	const int nseg = pc.nseg[pi];
	if (nseg <= 1)
		return; /* the piece's rows were written whole */
	const int64_t seg = pc.seg[pi];
	const int64_t len = kcu_pos(dpos, padd) + t + 1;
	const int ns = (int)((len + seg - 1) / seg);
	const float *p = part + pc.part[pi] +
			 ((size_t)(t - pc.row0[pi]) * Hq + h) * nseg * (D + 2);
	float M = -INFINITY;
	for (int s = 0; s < ns; s++)
		M = fmaxf(M, p[(size_t)s * (D + 2)]);
	float L = 0.0f, o0 = 0.0f, o1 = 0.0f;
	for (int s = 0; s < ns; s++) {
		const float *q = p + (size_t)s * (D + 2);
		float wgt = expf(q[0] - M);
		L = fmaf(wgt, q[1], L);
		o0 = fmaf(wgt, q[2 + d], o0);
		o1 = fmaf(wgt, q[3 + d], o1);
	}
	float *y = out + ((size_t)t * Hq + h) * D + d;
	y[0] = kcu_bf16r(o0 / L);
	y[1] = kcu_bf16r(o1 / L);
}

/* Segments: about FL_TARGET blocks of 64 rows in a piece's launch, each
 * segment FL_SEG_MIN keys at least, at most FL_NSEG; one segment under
 * graph capture (positions on the device). A rule of (T, keys, Hq) and
 * the scratch's size only, so a piece's bits depend neither on the chip's
 * SM count nor on the pieces launched with it. 1,024 since a forward's
 * pieces share one launch (2,048 before: a 1,024-row piece in 6 segments
 * at 32k keys, 3 now; on an H100, 2026-12-07, bench_kern's 4,096-row
 * forward at 126,976 keys 21.28 ms against 21.90, bench_gpu's prefill
 * 3.88 s against 3.93 at 32k and 19.83 against 20.07 at 128k; 512
 * measured within the runs' noise of 1,024: 3.91 and 19.94 s). */
#define FL_TARGET 1024
#define FL_SEG_MIN 1024
#define FL_NSEG 8

/* MOOR_ATTN_SEGS=N: FL_TARGET's value (read at each call; it is part of
 * the bits, kern_bits_env) */
static int fl_target(void)
{
	long v = kcu_env_int("MOOR_ATTN_SEGS", FL_TARGET);
	return v > 0 && v <= 1 << 20 ? (int)v : FL_TARGET;
}

int kcu_flash_segs(const kern_queue *q, int T, int64_t keys, int Hq, int D,
		   int64_t *seg)
{
	const int nrb = (T + 63) / 64;
	int nseg = (fl_target() + nrb * Hq - 1) / (nrb * Hq);
	if (nseg > FL_NSEG)
		nseg = FL_NSEG;
	if (nseg > keys / FL_SEG_MIN)
		nseg = (int)(keys / FL_SEG_MIN);
	if (nseg < 1 || q->capturing ||
	    (size_t)T * Hq * nseg * (D + 2) * sizeof(float) >
		q->ctx->att_part_bytes)
		nseg = 1;
	int64_t s = (keys + nseg - 1) / nseg;
	*seg = (s + 63) / 64 * 64;
	return nseg;
}

/* The partials' scratch: a piece's rows at most (kern_limits.chunk) at
 * FL_NSEG segments. (nseg above is cut to what it holds, so its size is
 * part of the bits; k_flash_wg launches as many pieces at once as it
 * holds.) */
static size_t flash_part_bytes(const kern_limits *lim)
{
	int rows = lim->chunk > 0 && lim->chunk < lim->rows ? lim->chunk
							     : lim->rows;
	if (rows <= KCU_SPLIT_ROWS || lim->q_heads <= 0 || lim->head_dim <= 0)
		return 0;
	return (size_t)rows * (size_t)lim->q_heads * FL_NSEG *
	       (size_t)(lim->head_dim + 2) * sizeof(float);
}

/* One piece of T rows on k_flash */
template <int D>
static int run_flash(kern_queue *q, float *out, const float *qv, int ldq,
		     const void *K, const void *V, int T, int64_t pos0, int Hq,
		     int Hkv, float scale)
{
	kern_ctx *c = q->ctx;
	size_t shm = (size_t)(FL_BR + 2 * FL_BC) * (D + FL_PAD) * sizeof(bf16);
	static int set;
	if (!set) {
		KCU(c, cudaFuncSetAttribute(
			   k_flash<D, false>,
			   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm));
		KCU(c, cudaFuncSetAttribute(
			   k_flash<D, true>,
			   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm));
		set = 1;
	}
	const int nrb = (T + FL_BR - 1) / FL_BR;
	kcu_pieces pc = {};
	pc.n = 1;
	pc.row0[1] = T;
	pc.nseg[0] = kcu_flash_segs(q, T, pos0 + T, Hq, D, &pc.seg[0]);
	int e2;
	const bool p2 = frexpf(scale, &e2) == 0.5f;
	auto kf = p2 ? k_flash<D, true> : k_flash<D, false>;
	kcu_go(q, kf, dim3(nrb, Hq, pc.nseg[0]), FL_THREADS, shm, out,
	       c->att_part, pc.nseg[0], pc.seg[0], qv, ldq, (const bf16 *)K,
	       (const bf16 *)V, T, kcu_dpos(q), kcu_padd(q, pos0), Hq, Hkv,
	       scale);
	KCU_LAUNCHED(c);
	return pc.nseg[0] > 1 ? kcu_flash_combine(q, out, &pc, pos0, Hq, D) : 0;
}

int kcu_flash_combine(kern_queue *q, float *out, const kcu_pieces *pc,
		      int64_t pos0, int Hq, int D)
{
	kcu_go(q, k_fcombine, dim3(Hq, pc->row0[pc->n]), D / 2, 0, out,
	       q->ctx->att_part, *pc, kcu_dpos(q), kcu_padd(q, pos0), Hq, D);
	KCU_LAUNCHED(q->ctx);
	return 0;
}

/* One piece (rows that do not cross a line of kern_limits.chunk) on
 * k_flash or the split kernels */
static int attention_piece(kern_queue *q, float *out, const float *qv,
			   int ldq, const void *K, const void *V, int kvdt,
			   int T, int64_t pos0, int Hq, int Hkv, int D,
			   float scale, int act, int tc)
{
	if (tc && T > KCU_SPLIT_ROWS && D == 256)
		return run_flash<256>(q, out, qv, ldq, K, V, T, pos0, Hq, Hkv, scale);
	if (tc && T > KCU_SPLIT_ROWS && D == 128)
		return run_flash<128>(q, out, qv, ldq, K, V, T, pos0, Hq, Hkv, scale);
	if (tc && T > KCU_SPLIT_ROWS && D == 64)
		return run_flash<64>(q, out, qv, ldq, K, V, T, pos0, Hq, Hkv, scale);
	return run_split(q, out, qv, ldq, K, V, kvdt, T, pos0, Hq, Hkv, D, scale,
			 act);
}

/* k_flash_wg over the pieces gathered in pc (rows from row 0 of the call
 * at pos0), or, where the driver gives no tensor map for them (the same
 * answer for the same rows every time), k_flash a piece at a time */
static int flush_wg(kern_queue *q, kcu_pieces *pc, float *out,
		    const float *qv, int ldq, const void *K, const void *V,
		    int64_t pos0, int Hq, int Hkv, int D, float scale)
{
	if (!pc->n)
		return 0;
	const int r0 = pc->row0[0];
	kcu_pieces rel = *pc;
	for (int i = 0; i <= rel.n; i++)
		rel.row0[i] -= r0;
	int rc = kcu_attention_wg(q, out + (size_t)r0 * Hq * D,
				  qv + (size_t)r0 * ldq, ldq, K, V, &rel,
				  pos0 + r0, Hq, Hkv, scale);
	if (rc == MOOR_EUNSUP) {
		rc = 0;
		for (int i = 0; i < pc->n && !rc; i++) {
			const int a = pc->row0[i], n = pc->row0[i + 1] - a;
			rc = attention_piece(q, out + (size_t)a * Hq * D,
					     qv + (size_t)a * ldq, ldq, K, V,
					     KERN_BF16, n, pos0 + a, Hq, Hkv, D,
					     scale, KERN_ACT_BF16, 1);
		}
	}
	pc->n = 0;
	return rc;
}

int kcu_attention(kern_queue *q, float *out, const float *qv, int ldq,
		  const void *K, const void *V, int kvdt, int T, int64_t pos0,
		  int Hq, int Hkv, int D, float scale, int act)
{
	if (!q || !out || !qv || !K || !V || T < 0 || pos0 < 0 || Hq <= 0 ||
	    Hkv <= 0 || Hq % Hkv || D <= 0 || ldq < Hq * D || !kcu_dtype_ok(kvdt) ||
	    !kcu_act_ok(act))
		return MOOR_ERANGE;
	if (T == 0)
		return 0;
	kcu_use(q->ctx);
	kern_ctx *c = q->ctx;
	/* the tensor-core kernels: bf16 rows and KV, 16-byte aligned q rows */
	const int tc = kvdt == KERN_BF16 && act == KERN_ACT_BF16 &&
		       ldq % 4 == 0 && ((uintptr_t)qv & 15) == 0 &&
		       ((uintptr_t)K & 15) == 0 && ((uintptr_t)V & 15) == 0;
	const int wg = tc && !q->capturing && kcu_attn_wg_wanted(c, D);
	/* pieces where segments can be: the flash kernels' rows, positions
	 * on the host (the split kernels' rows do not depend on the call) */
	const int64_t ch =
	    tc && !q->capturing && c->lim.chunk > 0 ? c->lim.chunk : 0;
	const size_t cap = c->att_part_bytes / sizeof(float);
	kcu_pieces pc;
	pc.n = 0;
	size_t used = 0;
	int rc = 0;
	for (int off = 0, n; off < T && !rc; off += n) {
		const int64_t at = pos0 + off;
		n = T - off;
		if (ch && (at / ch + 1) * ch - at < n)
			n = (int)((at / ch + 1) * ch - at);
		if (!wg || n <= KCU_SPLIT_ROWS) {
			rc = flush_wg(q, &pc, out, qv, ldq, K, V, pos0, Hq,
				      Hkv, D, scale);
			used = 0;
			if (!rc)
				rc = attention_piece(
				    q, out + (size_t)off * Hq * D,
				    qv + (size_t)off * ldq, ldq, K, V, kvdt, n,
				    at, Hq, Hkv, D, scale, act, tc);
			continue;
		}
		int64_t seg;
		const int ns = kcu_flash_segs(q, n, at + n, Hq, D, &seg);
		const size_t need = ns > 1 ? (size_t)n * Hq * ns * (D + 2) : 0;
		if (pc.n == KCU_PIECES || used + need > cap) {
			rc = flush_wg(q, &pc, out, qv, ldq, K, V, pos0, Hq,
				      Hkv, D, scale);
			used = 0;
			if (rc)
				break;
		}
		const int i = pc.n++;
		pc.row0[i] = off;
		pc.row0[i + 1] = off + n;
		pc.nseg[i] = ns;
		pc.seg[i] = seg;
		pc.part[i] = (int64_t)used;
		used += need;
	}
	if (!rc)
		rc = flush_wg(q, &pc, out, qv, ldq, K, V, pos0, Hq, Hkv, D,
			      scale);
	return rc;
}
