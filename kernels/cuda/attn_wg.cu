/* attn_wg.cu: prefill attention on Hopper's warpgroup MMA (k_flash_wg).
 *
 * The same arithmetic as attn.cu's k_flash (its header comment and ops.h's
 * attention()), on wgmma.mma_async instead of mma.sync, for bf16 K and V of
 * head dim 256 on an sm_90 device. Taken by kcu_attention by default
 * there (MOOR_ATTN_WG=0 takes k_flash); k_flash stays the fallback (a
 * tensor map the driver refuses, another head dim or chip) and the
 * reference the tests compare it to, bit for bit.
 *
 * A block takes 128 query rows of one query head: a producer warpgroup
 * (warps 0-3, 24 registers a thread after setmaxnreg) whose one lane copies
 * K and V tiles of 64 keys into shared memory with the bulk tensor copy
 * engine (TMA, a tensor map per call made by cuTensorMapEncodeTiled,
 * 128-byte swizzle), two stages each, on mbarriers (full: the copy landed;
 * empty: the 8 consumer warps are done with it), and two consumer
 * warpgroups (240 registers) of 64 rows each. A consumer warpgroup:
 *
 *   S = Q K^T   wgmma m64n64k16, Q and K from shared memory (both K-major),
 *               16 steps over d;
 *   softmax     k_flash's per row: rnd(s) * scale (one rounding when the
 *               scale is a power of two, two otherwise), the causal mask,
 *               the tile's max as a tree, p = rnd(ex2((s - m) log2 e)), the
 *               tile's sum over a lane's 16 values in order then the
 *               butterfly over the 4 lanes of a row, l = l c + sum;
 *   O += P V    wgmma m64n256k16, P from registers (S's accumulator rounded
 *               to bf16: the accumulator's layout is the A operand's), V
 *               from shared memory as MN-major B (the transpose flag).
 *
 * The accumulator layout of m64nNk16 is mma.m16n8k16's per warp, so each
 * thread holds the same rows and columns as in k_flash, and the softmax,
 * its sums and the rescale are k_flash's operations in k_flash's order.
 * Tile edges are fixed by the key index (segment starts are multiples of
 * 64), a row's arithmetic depends only on its own scores: the result does
 * not depend on the rows sharing the block, on T, or on timing. Where the
 * two kernels can differ is inside the tensor cores (the order in which an
 * MMA adds its 16 products into the fp32 accumulator), which the PTX ISA
 * does not specify for either instruction; the kernel test measures it.
 *
 * Pipelining within a warpgroup (FlashAttention-3's order): tile j's
 * S = Q K_j is issued, then O += P_{j-1} V_{j-1}; the softmax of tile j
 * runs while the P V product is in flight, and O is rescaled after it
 * lands. The arithmetic is the unpipelined order's: o_j = o_{j-1} c_j +
 * P_j V_j. Keys are cut into segments by k_flash's rule, a piece at a
 * time (kcu_flash_segs), and combined in order by k_flash's k_fcombine
 * (kcu_flash_combine). One launch runs a call's pieces (kcu_pieces: up
 * to the lines of kern_limits.chunk), each block in one piece, so that
 * a forward of several chunks is one launch and one combine where it was
 * a launch and a combine a chunk, and every row keeps its bits.
 *
 * wgmma and the kernel body are built for the sm_90a target only; the
 * compute_90 PTX that later chips JIT holds an empty kernel, and the host
 * takes this path only on a device of compute capability 9.0. */
#include "cuda.cuh"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdlib.h>
#include <string.h>

#define WG_D 256       /* head dim */
#define WG_BM 128      /* query rows of a block: two warpgroups of 64 */
#define WG_BC 64       /* keys of a tile */
#define WG_THREADS 384 /* the producer warpgroup + 2 consumer ones */
/* bytes of 64 rows of 64 bf16: one swizzled column chunk */
#define WG_CHUNK 8192
#define WG_QBYTES (64 * WG_D * 2)    /* a warpgroup's Q: 4 chunks */
#define WG_TBYTES (WG_BC * WG_D * 2) /* a K or V tile: 4 chunks */
#define WG_SMEM (2 * WG_QBYTES + 4 * WG_TBYTES + 64 + 1024)

/* The sm_90a pass: __CUDA_ARCH_FEAT_SM90_ALL is defined there only. */
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_ARCH 1
#else
#define WG_ARCH 0
#endif

#if WG_ARCH

static __device__ inline uint32_t smem_u32(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ inline uint32_t wg_pack2(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
	return *(uint32_t *)&v;
}

/* ---- mbarriers and the bulk tensor copy ---- */

static __device__ inline void mbar_init(uint32_t bar, int count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar),
		     "r"(count));
}

static __device__ inline void mbar_expect(uint32_t bar, uint32_t bytes)
{
	asm volatile(
	    "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
		bar),
	    "r"(bytes)
	    : "memory");
}

static __device__ inline void mbar_arrive(uint32_t bar)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar)
		     : "memory");
}

static __device__ inline uint64_t wg_now_ns(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* Waits until the phase of parity `par` has completed. A wait that lasts
 * WG_HANG_NS (a lost copy, a miscounted barrier: a bug) traps, so the
 * call fails with an error at the next sync instead of hanging the
 * device; a healthy wait is microseconds. */
#define WG_HANG_NS 10000000000ull
static __device__ inline void mbar_wait(uint32_t bar, uint32_t par)
{
	uint32_t done, n = 0;
	uint64_t t0 = 0;
	for (;;) {
		asm volatile(
		    "{\n"
		    ".reg .pred p;\n"
		    "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
		    "selp.u32 %0, 1, 0, p;\n"
		    "}\n"
		    : "=r"(done)
		    : "r"(bar), "r"(par)
		    : "memory");
		if (done)
			return;
		if ((++n & 0xffff) == 0) {
			if (!t0)
				t0 = wg_now_ns();
			else if (wg_now_ns() - t0 > WG_HANG_NS)
				__trap();
		}
	}
}

/* One box {64 dims, 1 head, WG_BC keys} of a [keys][Hkv][D] tensor into
 * dst (128-byte swizzled rows of 64 bf16), completing on bar. */
static __device__ inline void tma_box(uint32_t dst, const CUtensorMap *tm,
				      int d, int kh, int key, uint32_t bar)
{
	asm volatile(
	    "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::"
	    "complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
	    "l"((uint64_t)tm), "r"(d), "r"(kh), "r"(key), "r"(bar)
	    : "memory");
}

/* ---- wgmma ---- */

/* A shared-memory matrix descriptor, 128-byte swizzle: the start address,
 * the leading and stride byte offsets (in 16-byte units). K-major (Q, K):
 * 8-row groups 1,024 bytes apart (SBO), LBO unused. MN-major (V as B):
 * 64-column chunks LBO apart, 8-key groups 1,024 bytes apart (SBO). */
static __device__ inline uint64_t wg_desc(uint32_t addr, uint32_t lbo,
					  uint32_t sbo)
{
	return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)(lbo >> 4) << 16 |
	       (uint64_t)(sbo >> 4) << 32 | 1ull << 62;
}

static __device__ inline void wg_fence(void)
{
	asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
static __device__ inline void wg_commit(void)
{
	asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> static __device__ inline void wg_wait(void)
{
	asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving a register's reads or writes across the
 * asynchronous MMA's issue and wait. */
static __device__ inline void reg_fence(float &r)
{
	asm volatile("" : "+f"(r)::"memory");
}
static __device__ inline void reg_fence_u(uint32_t &r)
{
	asm volatile("" : "+r"(r)::"memory");
}

#define F4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define F16(i) F4(i), F4(i + 4), F4(i + 8), F4(i + 12)
#define F32(i) F16(i), F16(i + 16)

/* d[64x64] (+)= A[64x16] B[16x64], both from shared memory, K-major. */
template <int ACC>
static __device__ inline void wg_ss64(float *d, uint64_t da, uint64_t db)
{
	asm volatile(
	    "{\n"
	    ".reg .pred p;\n"
	    "setp.ne.b32 p, %34, 0;\n"
	    "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
	    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
	    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
	    "}, %32, %33, p, 1, 1, 0, 0;\n"
	    "}\n"
	    : F32(0)
	    : "l"(da), "l"(db), "n"(ACC));
}

/* d[64x256] += A[64x16] (registers, bf16 pairs) B[16x256] (shared
 * memory, MN-major: the transpose flag). */
static __device__ inline void wg_rs256(float *d, const uint32_t *a, uint64_t db)
{
	asm volatile(
	    "{\n"
	    ".reg .pred p;\n"
	    "setp.ne.b32 p, 1, 0;\n"
	    "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
	    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
	    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
	    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
	    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
	    "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
	    "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
	    "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,"
	    "%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,"
	    "%121,%122,%123,%124,%125,%126,%127"
	    "}, {%128,%129,%130,%131}, %132, p, 1, 1, 1;\n"
	    "}\n"
	    : F32(0), F32(32), F32(64), F32(96)
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

#undef F4
#undef F16
#undef F32

/* S = Q K^T for a warpgroup's 64 rows (Q at qa) and a tile's 64 keys (K
 * at kt): 16 steps of 16 dims, 4 in each 64-column chunk (32 bytes
 * apart inside a swizzled row). */
static __device__ inline void wg_qk(float *s, uint32_t qa, uint32_t kt)
{
#pragma unroll
	for (int ks = 0; ks < WG_D / 16; ks++) {
		uint32_t off = (uint32_t)(ks >> 2) * WG_CHUNK + (ks & 3) * 32;
		uint64_t da = wg_desc(qa + off, 16, 1024);
		uint64_t db = wg_desc(kt + off, 16, 1024);
		if (ks == 0)
			wg_ss64<0>(s, da, db);
		else
			wg_ss64<1>(s, da, db);
	}
	wg_commit();
}

/* O += P V: 4 steps of 16 keys (2,048 bytes of V rows apart), P's step kk
 * in p[4 kk .. 4 kk + 3]. */
static __device__ inline void wg_pv(float *o, const uint32_t *p, uint32_t vt)
{
#pragma unroll
	for (int kk = 0; kk < WG_BC / 16; kk++)
		wg_rs256(o, p + 4 * kk,
			 wg_desc(vt + (uint32_t)kk * 2048, WG_CHUNK, 1024));
	wg_commit();
}

/* e^x as k_flash takes it: ex2.approx of x log2(e). */
static __device__ inline float wg_exp(float x)
{
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;"
	    : "=f"(y)
	    : "f"(x * 1.4426950408889634f));
	return y;
}

/* Two scores rounded to bf16 at once (one conversion for the pair; the
 * same values as two kcu_bf16r). */
static __device__ inline float2 wg_bf16r2(float a, float b)
{
	return __bfloat1622float2(__floats2bfloat162_rn(a, b));
}

/* A tile's softmax step for the thread's two rows (a: g, b: g + 8 of its
 * warp's 16), k_flash's operations in k_flash's order: the scores rounded
 * and scaled, masked past lim_a / lim_b (key index within the tile) when
 * MASK, the maxima, c = e^(m_old - m_new), p rounded to bf16, l = l c +
 * the tile's sum; s[4 nt + e] is k_flash's s[nt][e]. The roundings are
 * done in pairs (one conversion for two values: the same values as two
 * kcu_bf16r), p written as the bf16 pairs of the P V product's A operand
 * (pn[2 nt + h] holds p of s[4 nt + 2 h] and s[4 nt + 2 h + 1]), s left
 * as it was. */
template <bool MASK, bool P2>
static __device__ inline void
wg_softmax2(const float *s, uint32_t *pn, float scale, int lim_a, int lim_b,
	    int tq, float &ma, float &mb, float &la, float &lb, float &ca,
	    float &cb)
{
	float v[32], xa[8], xb[8];
#pragma unroll
	for (int nt = 0; nt < 8; nt++) {
#pragma unroll
		for (int h = 0; h < 2; h++) {
			float2 r =
			    wg_bf16r2(s[4 * nt + 2 * h], s[4 * nt + 2 * h + 1]);
			r.x = __fmul_rn(r.x, scale);
			r.y = __fmul_rn(r.y, scale);
			if (!P2)
				r = wg_bf16r2(r.x, r.y);
			if (MASK) {
				const int lim = h ? lim_b : lim_a,
					  k = nt * 8 + 2 * tq;
				if (k > lim)
					r.x = -INFINITY;
				if (k + 1 > lim)
					r.y = -INFINITY;
			}
			v[4 * nt + 2 * h] = r.x;
			v[4 * nt + 2 * h + 1] = r.y;
		}
		xa[nt] = fmaxf(v[4 * nt], v[4 * nt + 1]);
		xb[nt] = fmaxf(v[4 * nt + 2], v[4 * nt + 3]);
	}
#pragma unroll
	for (int w = 4; w > 0; w >>= 1)
#pragma unroll
		for (int nt = 0; nt < w; nt++) {
			xa[nt] = fmaxf(xa[nt], xa[nt + w]);
			xb[nt] = fmaxf(xb[nt], xb[nt + w]);
		}
	float mxa = xa[0], mxb = xb[0];
	for (int m = 1; m <= 2; m <<= 1) {
		mxa = fmaxf(mxa, __shfl_xor_sync(0xffffffffu, mxa, m));
		mxb = fmaxf(mxb, __shfl_xor_sync(0xffffffffu, mxb, m));
	}
	const float na = fmaxf(ma, mxa), nb = fmaxf(mb, mxb);
	ca = na == -INFINITY ? 0.0f : wg_exp(ma - na);
	cb = nb == -INFINITY ? 0.0f : wg_exp(mb - nb);
	float sa = 0.0f, sb = 0.0f;
#pragma unroll
	for (int nt = 0; nt < 8; nt++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const float m = h ? nb : na;
			__nv_bfloat162 r = __floats2bfloat162_rn(0.0f, 0.0f);
			if (m != -INFINITY)
				r = __floats2bfloat162_rn(
				    wg_exp(v[4 * nt + 2 * h] - m),
				    wg_exp(v[4 * nt + 2 * h + 1] - m));
			pn[2 * nt + h] = *(uint32_t *)&r;
			const float2 f = __bfloat1622float2(r);
			if (h) {
				sb += f.x;
				sb += f.y;
			} else {
				sa += f.x;
				sa += f.y;
			}
		}
	for (int m = 1; m <= 2; m <<= 1) {
		sa += __shfl_xor_sync(0xffffffffu, sa, m);
		sb += __shfl_xor_sync(0xffffffffu, sb, m);
	}
	la = la * ca + sa;
	lb = lb * cb + sb;
	ma = na;
	mb = nb;
}

template <bool P2>
static __device__ inline void
wg_tile_softmax2(const float *s, uint32_t *pn, float scale, int64_t rel, int g,
		 int tq, float &ma, float &mb, float &la, float &lb, float &ca,
		 float &cb)
{
	if (rel >= WG_BC - 1)
		wg_softmax2<false, P2>(s, pn, scale, 0, 0, tq, ma, mb, la, lb,
				       ca, cb);
	else
		wg_softmax2<true, P2>(s, pn, scale, (int)(rel + g),
				      (int)(rel + g + 8), tq, ma, mb, la, lb,
				      ca, cb);
}

/* o of the thread's two rows times ca (row a) and cb (row b); o * 1 is
 * o, so a warp whose rows' maxima did not move skips it. */
static __device__ inline void wg_rescale(float *o, float ca, float cb)
{
	if (__any_sync(0xffffffffu, ca != 1.0f || cb != 1.0f))
#pragma unroll
		for (int i = 0; i < 32; i++) {
			o[4 * i] *= ca;
			o[4 * i + 1] *= ca;
			o[4 * i + 2] *= cb;
			o[4 * i + 3] *= cb;
		}
}

/* grid (pc.blk0[pc.n], Hq, the pieces' most segments), WG_THREADS
 * threads, WG_SMEM bytes of dynamic shared memory: a piece's rows in
 * blocks of WG_BM from its first row. tmK, tmV: [pos0 + T][Hkv][D] bf16
 * (keys past the call's read as zeros). Writes for each piece what
 * k_flash writes for it alone: the normalised rows when it has one
 * segment, else each segment's max, sum and unnormalised output into
 * part[pc.part[p] + ((t - row0) Hq + h) nseg + s][D + 2]. */
template <bool P2>
__global__ void __launch_bounds__(WG_THREADS, 1)
    k_flash_wg(const __grid_constant__ CUtensorMap tmK,
	       const __grid_constant__ CUtensorMap tmV, float *out,
	       float *part_all, const __grid_constant__ kcu_pieces pc,
	       const float *qv, int ldq, int64_t pos0, int Hq, int Hkv,
	       float scale)
{
	extern __shared__ unsigned char wg_raw[];
	const uint32_t raw = smem_u32(wg_raw);
	const uint32_t base = (raw + 1023u) & ~1023u;
	unsigned char *gq = wg_raw + (base - raw); /* Q, generic pointer */
	const uint32_t sQ = base, sK = sQ + 2 * WG_QBYTES,
		       sV = sK + 2 * WG_TBYTES, sB = sV + 2 * WG_TBYTES;
	/* barriers: full K [2], full V [2], empty K [2], empty V [2] */
#define FULLK(st) (sB + 8u * (st))
#define FULLV(st) (sB + 16u + 8u * (st))
#define EMPTYK(st) (sB + 32u + 8u * (st))
#define EMPTYV(st) (sB + 48u + 8u * (st))
	/* the heaviest tiles (the last rows) start first */
	const int xb = (int)(gridDim.x - 1 - blockIdx.x), h = blockIdx.y;
	int pi = 0;
	while (pi + 1 < pc.n && pc.blk0[pi + 1] <= xb)
		pi++;
	const int nseg = pc.nseg[pi], sg = blockIdx.z, kh = h / (Hq / Hkv);
	if (sg >= nseg)
		return;
	const int64_t seg = pc.seg[pi];
	/* the piece's rows: r0 .. T - 1 of the call */
	const int r0 = pc.row0[pi], T = pc.row0[pi + 1];
	float *part = part_all + pc.part[pi];
	const int t0 = r0 + (xb - pc.blk0[pi]) * WG_BM;
	const int64_t kend = pos0 + (t0 + WG_BM < T ? t0 + WG_BM : T);
	const int64_t k0 = (int64_t)sg * seg;
	if (k0 >= kend)
		return; /* no row of this block reads the segment */
	const int64_t k1 = k0 + seg < kend ? k0 + seg : kend;
	const int ntile = (int)((k1 - k0 + WG_BC - 1) / WG_BC);
	/* the warp index through a shuffle: the compiler then knows it is
	 * uniform in the warp, and the roles' branches are not divergent */
	const int tid = threadIdx.x, lane = tid & 31;
	const int w = __shfl_sync(0xffffffffu, tid >> 5, 0);

	if (tid == 0) {
		for (int i = 0; i < 4; i++)
			mbar_init(sB + 8u * i, 1);
		for (int i = 4; i < 8; i++)
			mbar_init(sB + 8u * i,
				  8); /* one arrive per consumer warp */
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::
				 : "memory");
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
	}
	__syncthreads();

	if (w < 4) {
		/* the producer warpgroup gives its registers to the consumers;
		 * one lane copies K_j then V_j into stage j % 2 */
		asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::
				 : "memory");
		if (w == 0 && lane == 0) {
			for (int j = 0; j < ntile; j++) {
				const uint32_t st = j & 1, ph = (j >> 1) & 1;
				const int kb = (int)(k0 + (int64_t)j * WG_BC);
				mbar_wait(EMPTYK(st), ph ^ 1);
				mbar_expect(FULLK(st), WG_TBYTES);
				for (int c = 0; c < WG_D / 64; c++)
					tma_box(
					    sK + st * WG_TBYTES + c * WG_CHUNK,
					    &tmK, c * 64, kh, kb, FULLK(st));
				mbar_wait(EMPTYV(st), ph ^ 1);
				mbar_expect(FULLV(st), WG_TBYTES);
				for (int c = 0; c < WG_D / 64; c++)
					tma_box(
					    sV + st * WG_TBYTES + c * WG_CHUNK,
					    &tmV, c * 64, kh, kb, FULLV(st));
			}
		}
		return;
	}

	/* a consumer warpgroup: rows t0 + 64 wg .. + 63 */
	asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
	const int wg = (w >> 2) - 1, wq = w & 3, wt = tid & 127;
	const int g = lane >> 2, tq = lane & 3;
	{
		/* Q as bf16 in the 128-byte swizzle: row r, column chunk c at
		 * c 8192 + r 128, its 16-byte pieces XORed with r % 8 */
		unsigned char *qs = gq + wg * WG_QBYTES;
		/* 64 rows of 64 float4s: 32 a thread, in 2 batches of 16
		 * loads in flight before their stores */
#pragma unroll 1
		for (int b0 = 0; b0 < 32; b0 += 16) {
			float4 v[16];
#pragma unroll
			for (int k = 0; k < 16; k++) {
				const int i = wt + 128 * (b0 + k);
				const int r = i / (WG_D / 4),
					  col = (i % (WG_D / 4)) * 4;
				const int t = t0 + wg * 64 + r;
				v[k] = make_float4(0.f, 0.f, 0.f, 0.f);
				if (t < T)
					v[k] = __ldg(
					    (const float4 *)(qv +
							     (size_t)t * ldq +
							     (size_t)h * WG_D +
							     col));
			}
#pragma unroll
			for (int k = 0; k < 16; k++) {
				const int i = wt + 128 * (b0 + k);
				const int r = i / (WG_D / 4),
					  col = (i % (WG_D / 4)) * 4;
				const int c = col >> 6, cc = col & 63;
				const uint32_t off =
				    c * WG_CHUNK + r * 128 +
				    (((cc >> 3) ^ (r & 7)) << 4) + (cc & 7) * 2;
				*(uint2 *)(qs + off) =
				    make_uint2(wg_pack2(v[k].x, v[k].y),
					       wg_pack2(v[k].z, v[k].w));
			}
		}
		/* the tensor cores read Q through the async proxy */
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
		asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
	}
	const uint32_t qa = sQ + wg * WG_QBYTES;
	const int ra = t0 + wg * 64 + wq * 16 + g, rb = ra + 8;
	/* the warp's first row's position: row a reads keys <= wpos + g */
	const int64_t wpos = pos0 + t0 + wg * 64 + wq * 16;

	float o[128], s[32];
	uint32_t p[16];
#pragma unroll
	for (int i = 0; i < 128; i++)
		o[i] = 0.0f;
	float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;
	float ca = 1.0f, cb = 1.0f;

	/* The roundings in pairs (wg_softmax2): p goes straight into the
	 * next P (pn), which becomes P once the P V product in flight has
	 * read P (an asm copy: a C assignment let ptxas serialise the
	 * wgmmas, its info C7513, as did rescaling O under the next
	 * S = Q K^T, FlashAttention-3's order for large heads). A first
	 * form of this loop rounded one value at a time and packed P from
	 * s after the P V product landed: the same bits, 537 to 556 against
	 * 573 to 650 TFLOP/s on the H100 (bench_kern); it is gone. */
	uint32_t pn[16];
	mbar_wait(FULLK(0), 0);
	wg_fence();
	wg_qk(s, qa, sK);
	wg_wait<0>();
#pragma unroll
	for (int i = 0; i < 32; i++)
		reg_fence(s[i]);
	__syncwarp();
	if (lane == 0)
		mbar_arrive(EMPTYK(0));
	wg_tile_softmax2<P2>(s, p, scale, wpos - k0, g, tq, ma, mb, la, lb, ca,
			     cb);
	for (int j = 1; j < ntile; j++) {
		const uint32_t st = j & 1, ph = (j >> 1) & 1;
		const uint32_t pst = st ^ 1, pph = ((j - 1) >> 1) & 1;
		mbar_wait(FULLK(st), ph);
		wg_fence();
		wg_qk(s, qa, sK + st * WG_TBYTES);
		mbar_wait(FULLV(pst), pph);
		wg_fence();
		wg_pv(o, p, sV + pst * WG_TBYTES);
		wg_wait<1>(); /* S landed; P V in flight */
#pragma unroll
		for (int i = 0; i < 32; i++)
			reg_fence(s[i]);
		__syncwarp();
		if (lane == 0)
			mbar_arrive(EMPTYK(st));
		wg_tile_softmax2<P2>(s, pn, scale,
				     wpos - (k0 + (int64_t)j * WG_BC), g, tq,
				     ma, mb, la, lb, ca, cb);
		wg_wait<0>(); /* P_{j-1} V_{j-1} landed */
#pragma unroll
		for (int i = 0; i < 128; i++)
			reg_fence(o[i]);
#pragma unroll
		for (int i = 0; i < 16; i++)
			reg_fence_u(p[i]); /* read until here */
		__syncwarp();
		if (lane == 0)
			mbar_arrive(EMPTYV(pst));
		wg_rescale(o, ca, cb);
#pragma unroll
		for (int i = 0; i < 16; i++) /* not a C copy: C7513 */
			asm volatile("mov.b32 %0, %1;"
				     : "=r"(p[i])
				     : "r"(pn[i]));
	}
	{
		const uint32_t pst = (ntile - 1) & 1,
			       pph = ((ntile - 1) >> 1) & 1;
		mbar_wait(FULLV(pst), pph);
		wg_fence();
		wg_pv(o, p, sV + pst * WG_TBYTES);
		wg_wait<0>();
#pragma unroll
		for (int i = 0; i < 128; i++)
			reg_fence(o[i]);
	}
#undef FULLK
#undef FULLV
#undef EMPTYK
#undef EMPTYV

	if (nseg > 1) {
		/* the segment's partials; a row past T is never combined */
#pragma unroll
		for (int half = 0; half < 2; half++) {
			const int r = half ? rb : ra;
			if (r >= T)
				continue;
			float *pp =
			    part + (((size_t)(r - r0) * Hq + h) * nseg + sg) *
				       (WG_D + 2);
			if (tq == 0) {
				pp[0] = half ? mb : ma;
				pp[1] = half ? lb : la;
			}
#pragma unroll
			for (int i = 0; i < 32; i++) {
				const int d = i * 8 + 2 * tq;
				*(float2 *)(pp + 2 + d) =
				    make_float2(o[4 * i + 2 * half],
						o[4 * i + 2 * half + 1]);
			}
		}
		return;
	}
	const float ia = la > 0.0f ? 1.0f / la : 0.0f;
	const float ib = lb > 0.0f ? 1.0f / lb : 0.0f;
#pragma unroll
	for (int i = 0; i < 32; i++) {
		const int d = i * 8 + 2 * tq;
		if (ra < T)
			*(float2 *)(out + ((size_t)ra * Hq + h) * WG_D + d) =
			    make_float2(kcu_bf16r(o[4 * i] * ia),
					kcu_bf16r(o[4 * i + 1] * ia));
		if (rb < T)
			*(float2 *)(out + ((size_t)rb * Hq + h) * WG_D + d) =
			    make_float2(kcu_bf16r(o[4 * i + 2] * ib),
					kcu_bf16r(o[4 * i + 3] * ib));
	}
}

#else /* the host's pass and compute_90's: the same kernel, empty */

template <bool P2>
__global__ void __launch_bounds__(WG_THREADS, 1)
    k_flash_wg(const __grid_constant__ CUtensorMap tmK,
	       const __grid_constant__ CUtensorMap tmV, float *out,
	       float *part_all, const __grid_constant__ kcu_pieces pc,
	       const float *qv, int ldq, int64_t pos0, int Hq, int Hkv,
	       float scale)
{
}

#endif /* WG_ARCH */

/* ---- the host side ---- */

static PFN_cuTensorMapEncodeTiled_v12000 wg_encode;

static int wg_encode_fn(void)
{
	if (wg_encode)
		return 0;
	void *fn = NULL;
	cudaDriverEntryPointQueryResult qr;
	cudaError_t e = cudaGetDriverEntryPointByVersion(
	    "cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &qr);
	if (e != cudaSuccess || qr != cudaDriverEntryPointSuccess || !fn) {
		moor_err("attention: cuTensorMapEncodeTiled not found in the "
			 "driver (%s)",
			 cudaGetErrorString(e));
		return MOOR_EUNSUP;
	}
	wg_encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
	return 0;
}

/* A [keys][Hkv][D] bf16 tensor, boxes of {64, 1, WG_BC}, 128-byte
 * swizzle; coordinates past keys read as zeros. */
static int wg_map(CUtensorMap *m, const void *X, int64_t keys, int Hkv)
{
	cuuint64_t dim[3] = {WG_D, (cuuint64_t)Hkv, (cuuint64_t)keys};
	cuuint64_t stride[2] = {WG_D * 2, (cuuint64_t)Hkv * WG_D * 2};
	cuuint32_t box[3] = {64, 1, WG_BC}, es[3] = {1, 1, 1};
	CUresult r = wg_encode(
	    m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, (void *)X, dim, stride, box,
	    es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
	    CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
	    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	if (r != CUDA_SUCCESS) {
		moor_err(
		    "attention: cuTensorMapEncodeTiled failed (%d) for %lld "
		    "keys of %d heads",
		    (int)r, (long long)keys, Hkv);
		return MOOR_EUNSUP;
	}
	return 0;
}

/* MOOR_ATTN_WG: unset or 1 this kernel, 0 k_flash; read at every call:
 * bench_kern and the kernel test set it between calls. */
static int wg_mode(void)
{
	return kcu_env_flag("MOOR_ATTN_WG", 1);
}

/* Measured on an H100 (bench_kern, 1,024 rows of 24 heads of 256): 571
 * TFLOP/s at 32k keys and 640 at 128k, against k_flash's 204 and 206; the
 * kernel tests (against k_flash, the CPU, itself, and a row range called
 * alone) and the GPU suite passed. */
int kcu_attn_wg_wanted(const kern_ctx *c, int D)
{
	if (D != WG_D || c->prop.major != 9 || c->prop.minor != 0)
		return 0;
	return wg_mode() != 0;
}

int kcu_attention_wg(kern_queue *q, float *out, const float *qv, int ldq,
		     const void *K, const void *V, const kcu_pieces *pc,
		     int64_t pos0, int Hq, int Hkv, float scale)
{
	kern_ctx *c = q->ctx;
	if (q->capturing || pc->n <= 0 || pc->n > KCU_PIECES || ldq % 4 ||
	    ((uintptr_t)qv & 15) || ((uintptr_t)K & 15) || ((uintptr_t)V & 15))
		return MOOR_ERANGE;
	const int T = pc->row0[pc->n];
	if (T <= 0)
		return MOOR_ERANGE;
	int rc = wg_encode_fn();
	if (rc)
		return rc;
	const int64_t keys = pos0 + T;
	CUtensorMap mk, mv;
	if ((rc = wg_map(&mk, K, keys, Hkv)) ||
	    (rc = wg_map(&mv, V, keys, Hkv)))
		return rc;
	typedef void (*wg_kernel)(CUtensorMap, CUtensorMap, float *, float *,
				  kcu_pieces, const float *, int, int64_t, int,
				  int, float);
	static const wg_kernel ks[2] = {k_flash_wg<false>, k_flash_wg<true>};
	static int set;
	if (!set) {
		for (int i = 0; i < 2; i++)
			KCU(c, cudaFuncSetAttribute(
				   ks[i],
				   cudaFuncAttributeMaxDynamicSharedMemorySize,
				   WG_SMEM));
		set = 1;
	}
	/* each piece's row blocks from its first row; the most segments */
	kcu_pieces p = *pc;
	int nseg = 1, comb = 0;
	p.blk0[0] = 0;
	for (int i = 0; i < p.n; i++) {
		p.blk0[i + 1] =
		    p.blk0[i] + (p.row0[i + 1] - p.row0[i] + WG_BM - 1) / WG_BM;
		if (p.nseg[i] > nseg)
			nseg = p.nseg[i];
		comb |= p.nseg[i] > 1;
	}
	int e2;
	const bool p2 = frexpf(scale, &e2) == 0.5f;
	const wg_kernel kf = ks[p2];
	kf<<<dim3(p.blk0[p.n], Hq, nseg), WG_THREADS, WG_SMEM, q->s>>>(
	    mk, mv, out, c->att_part, p, qv, ldq, pos0, Hq, Hkv, scale);
	KCU_LAUNCHED(c);
	/* the segments in order: k_flash's combine (attn.cu) */
	return comb ? kcu_flash_combine(q, out, &p, pos0, Hq, WG_D) : 0;
}
