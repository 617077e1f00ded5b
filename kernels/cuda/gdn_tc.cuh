/* gdn_tc.cuh: the chunked delta rule's tensor-core kernels at dk 128
 * (MOOR_GDN_TC, gdn.cu), 3xTF32 on mma.sync, on gdn_ws.cuh: k_intra_tc;
 * k_chunk_tc, the state pass and the output in one kernel
 * (MOOR_GDN_TC=1); k_hstate_tc and k_out_tc, the same two apart (2: the
 * state pass alone; 3: both); k_intra_tc2 and k_chunk_tc2, the same sums
 * as k_intra_tc's and k_chunk_tc's in other shares (MOOR_GDN_IT=2,
 * MOOR_GDN_CT=2; opt-in until a GPU has measured them). Included by
 * gdn.cu, and by the host emulation (tests/kern/test_gdn_tc_emu.cc,
 * KCU_HOST_EMU), which supplies mma1688, the cp.async calls,
 * kcu_pdl_enter, kcu_rnd and __syncthreads and runs a block as 256
 * threads: so CI checks the kernels' indexing and arithmetic against the
 * SPEC without a GPU, and their barriers and cp.async waits (the threads
 * in three orders, copies landing at issue and at their wait, the same
 * bits).
 *
 * The first versions, measured on an H100 (2026-12-07, ncu, a 1,024-token
 * chunk of the 27B's 48 heads): k_intra_tc 126 us, k_hstate_tc 185,
 * k_out_tc 87, against k_intra_rt's 117, k_hstate_cl's 170 and k_out4's
 * 100. Neither memory nor the tensor cores bound them but instruction
 * issue: every fragment split its fp32 values into hi and lo again (a
 * cvt, a subtraction and a cvt each) in every warp that read it, and
 * k_hstate_tc kept the state in shared memory only (about 2,300
 * instructions a warp a sub-chunk, 0.57 issued a scheduler a cycle, on
 * 96 SMs); k_intra_tc waited at barriers for 31% of its cycles (the
 * inverse's 64 threads, and warps of unequal shares). So k_hstate_tc now
 * keeps the state in its warps' accumulators and splits V' once,
 * k_chunk_tc does the same with the output's products beside W S on the
 * same split state, and k_intra_tc's warps have even shares. Measured
 * the same way after: k_intra_tc 121 us, k_chunk_tc 191 (k_hstate_tc
 * 157, k_out_tc 88); bench_kern's delta_chunked 0.306 ms against the
 * SIMT kernels' 0.376, so MOOR_GDN_TC=1 became the default. k_chunk_tc
 * is latency-bound: one block of 8 warps an SM (its registers and
 * shared memory), 0.57 warps eligible a scheduler a cycle, the tensor
 * pipe 26% busy, 96 of 132 SMs. After the quads and the tf32 split in
 * two instructions (H100, 2026-12-08): k_intra_tc 104 us, k_chunk_tc
 * 163 (its executed instructions 36% fewer; its 96 SMs' shared memory
 * wavefronts 58% of their cycles, tensor pipe 42%), delta_chunked 0.258
 * ms. k_chunk_tc in 16 warps (a warp a row tile's half, 124 registers)
 * took 164 us: not latency then. */
#ifndef MOOR_GDN_TC_CUH
#define MOOR_GDN_TC_CUH

#include "gdn_ws.cuh"

/* 3xTF32 (CUTLASS's name for it): x = hi + lo, each a tf32 (cvt.rna: 11
 * bits of significand), and a product of two such splits summed as lo hi
 * + hi lo + hi hi, each an mma.m16n8k8 with fp32 accumulation; the lo lo
 * term (2^-22 of the product) is dropped. So fp32 operands keep about
 * fp32's precision on the tensor cores, in another order of sums than
 * the SIMT kernels: other bits, one order per shape. */
/* tf32 of x, rounded to nearest with ties away from zero: the bits of
 * cvt.rna.tf32.f32 for every finite x (half of the last kept bit added
 * to the magnitude's bits, a carry into the exponent included, then the
 * 13 low bits cut). Two instructions where ptxas makes cvt.rna four (its
 * guard for inf and NaN: ncu counted the splits' FSETP and SEL at 18% of
 * k_intra_tc's instructions). Only a NaN whose payload lies in the 13 low
 * bits differs: it becomes inf here, but the lo part x - hi is then NaN,
 * so the product is NaN either way. */
static __device__ inline uint32_t tf32_of(float x)
{
	return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}
template <int N>
static __device__ inline void tf32_split(const float (&x)[N], uint32_t (&hi)[N],
					 uint32_t (&lo)[N])
{
#pragma unroll
	for (int i = 0; i < N; i++) {
		hi[i] = tf32_of(x[i]);
		lo[i] = tf32_of(x[i] - __uint_as_float(hi[i]));
	}
}
#ifndef KCU_HOST_EMU
static __device__ inline void mma1688(float (&c)[4], const uint32_t (&a)[4],
				      const uint32_t (&b)[2])
{
	asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
		       "r"(b[1]));
}
#endif
/* c += a b, a and b split (3xTF32) */
static __device__ inline void mma3x(float (&c)[4], const uint32_t (&ah)[4],
				    const uint32_t (&al)[4],
				    const uint32_t (&bh)[2],
				    const uint32_t (&bl)[2])
{
	mma1688(c, al, bh);
	mma1688(c, ah, bl);
	mma1688(c, ah, bh);
}

/* The split fragments of mma.m16n8k8 (tf32) for lane (g, t) = (lane / 4,
 * lane % 4), after PTX's layout: A (16 x 8) [g][t], [g + 8][t], [g][t +
 * 4], [g + 8][t + 4]; B (8 x 8) [t][g], [t + 4][g]. a points at the
 * tile's [0][0], [m][k] at a[m * ld + k]; b likewise, [k][n] at b[k *
 * ld + n] (b[n * ld + k] where BT). A transposed A is frag_aq's. */
static __device__ inline void frag_a(uint32_t (&hi)[4], uint32_t (&lo)[4],
				     const float *a, int ld, int g, int t)
{
	float x[4] = {a[g * ld + t], a[(g + 8) * ld + t], a[g * ld + t + 4],
		      a[(g + 8) * ld + t + 4]};
	tf32_split(x, hi, lo);
}
template <bool BT>
static __device__ inline void frag_b(uint32_t (&hi)[2], uint32_t (&lo)[2],
				     const float *b, int ld, int g, int t)
{
	float x[2];
	if constexpr (BT)
		x[0] = b[g * ld + t], x[1] = b[g * ld + t + 4];
	else
		x[0] = b[t * ld + g], x[1] = b[(t + 4) * ld + g];
	tf32_split(x, hi, lo);
}

/* One k-step of 8 of a warp's 16-row strip: acc[i] += A B_i for the n-tiles
 * i < nt (of NT), A's tile at a, B_i's 8 columns on from b (frag_a's and
 * frag_b's layouts), in 3xTF32 */
template <int NT, bool BT = false>
static __device__ inline void mma_step(float (&acc)[NT][4], const float *a,
				       int lda, const float *b, int ldb, int g,
				       int t, int nt = NT)
{
	uint32_t ah[4], al[4];
	frag_a(ah, al, a, lda, g, t);
#pragma unroll
	for (int i = 0; i < NT; i++)
		if (i < nt) {
			uint32_t bh[2], bl[2];
			frag_b<BT>(bh, bl, b + (BT ? 8 * i * ldb : 8 * i), ldb, g,
				   t);
			mma3x(acc[i], ah, al, bh, bl);
		}
}

/* An accumulator tile of NT n-tiles (rows g, g + 8; columns 8 i + 2 t, + 1)
 * from or to memory, its [0][0] at p, rows ld apart */
template <int NT>
static __device__ inline void acc_ld(float (&a)[NT][4], const float *p,
				     size_t ld, int g, int t)
{
#pragma unroll
	for (int i = 0; i < NT; i++)
#pragma unroll
		for (int hf = 0; hf < 2; hf++) {
			const float2 x = *(const float2 *)(p + (g + 8 * hf) * ld +
							   8 * i + 2 * t);
			a[i][2 * hf] = x.x, a[i][2 * hf + 1] = x.y;
		}
}
template <int NT>
static __device__ inline void acc_st(const float (&a)[NT][4], float *p,
				     size_t ld, int g, int t)
{
#pragma unroll
	for (int i = 0; i < NT; i++)
#pragma unroll
		for (int hf = 0; hf < 2; hf++)
			*(float2 *)(p + (g + 8 * hf) * ld + 8 * i + 2 * t) =
			    make_float2(a[i][2 * hf], a[i][2 * hf + 1]);
}

/* Split B operands in shared memory as quads. mma.m16n8k8's B fragment
 * gives lane (g, t) k-slots t and t + 4 of column g; an accumulator tile
 * gives it rows g and g + 8. So k-step j takes the k (rows of B, columns
 * of A) kq(j, t) in slot t and kq(j, t) + 8 in slot t + 4: the 16 k of
 * each pair of k-steps in another order, which the A fragment follows.
 * Rows r and r + 8 of B (r % 16 < 8) then share a quad per column, {hi_r,
 * hi_r+8, lo_r, lo_r+8}: one 16-byte store from the warp that holds them
 * as accumulator rows, one 16-byte load a B fragment (pairs of 8 bytes
 * took two loads and four register moves: ncu counted IMAD.MOV at a
 * third of k_chunk_tc's instructions). Quad row 8 (r / 16) + r % 8 (=
 * 4 j + t), qp quads a row (a multiple of 8), column n at n ^ qsw(quad
 * row % 4): the loads' and the stores' 8-lane phases each meet 8
 * distinct 16-byte bank groups (test_gdn_tc_emu checks it). */
static __device__ inline int kq(int j, int t)
{
	return 16 * (j >> 1) + 4 * (j & 1) + t;
}
static __device__ inline int qsw(int s)
{
	return 2 * s + (s & 1);
}
/* lane (g, t)'s quad (in quads from the start) of its B fragment in
 * k-step 0, columns 0 .. 7: k-step j's columns 8 i .. on are 4 j qp + 8
 * i quads on */
static __device__ inline int quad_lane_b(int qp, int g, int t)
{
	return t * qp + (g ^ qsw(t));
}
/* lane (g, t)'s quad of its store of rows g and g + 8, column 2 t + e:
 * of rows 16 b + g and + 8, column 8 i + 2 t + e, 8 b qp + 8 i quads on */
static __device__ inline int quad_lane_st(int qp, int g, int t, int e)
{
	return g * qp + ((2 * t + e) ^ qsw(g & 3));
}
/* x and y (rows r and r + 8 of a column), split, into the quad at q */
static __device__ inline void quad_st(uint32_t *q, float x, float y)
{
	const float v[2] = {x, y};
	uint32_t hi[2], lo[2];
	tf32_split(v, hi, lo);
	*(uint4 *)q = make_uint4(hi[0], hi[1], lo[0], lo[1]);
}
/* lane (g, t)'s A fragment of k-step j in kq's order: A [m][k] at a[m ld
 * + k], or at a[k ld + m] where AT (a transpose); where e, each value
 * times e[k] */
template <bool AT>
static __device__ inline void frag_aq(uint32_t (&hi)[4], uint32_t (&lo)[4],
				      const float *a, int ld, int j, int g,
				      int t, const float *e = nullptr)
{
	const int k0 = kq(j, t), k1 = k0 + 8;
	float x[4];
	if constexpr (AT) {
		x[0] = a[k0 * ld + g], x[1] = a[k0 * ld + g + 8];
		x[2] = a[k1 * ld + g], x[3] = a[k1 * ld + g + 8];
	} else {
		x[0] = a[g * ld + k0], x[1] = a[(g + 8) * ld + k0];
		x[2] = a[g * ld + k1], x[3] = a[(g + 8) * ld + k1];
	}
	if (e) {
		const float e0 = e[k0], e1 = e[k1];
		x[0] *= e0, x[1] *= e0, x[2] *= e1, x[3] *= e1;
	}
	tf32_split(x, hi, lo);
}

/* acc[i] += A B_i for n-tiles i < NT, A split (ah, al), B_i's fragment
 * from the quad at q + 32 i (q: the lane's quad of the k-step's
 * first n-tile, quad_lane_b) */
template <int NT>
static __device__ inline void mma_quads(float (&acc)[NT][4],
					const uint32_t (&ah)[4],
					const uint32_t (&al)[4],
					const uint32_t *q)
{
#pragma unroll
	for (int i = 0; i < NT; i++) {
		const uint4 b = *(const uint4 *)(q + 32 * i);
		const uint32_t bh[2] = {b.x, b.y}, bl[2] = {b.z, b.w};
		mma3x(acc[i], ah, al, bh, bl);
	}
}

/* k_hstate_tc: the state pass of dk 128 (k_hstate_rt<128>'s work and
 * workspace: it writes each sub-chunk's starting state and V' where
 * k_out4 and k_out_tc read them) in 3xTF32 on mma.sync, from k's rows as
 * they are (intra leaves k e^(G_last - G) out of the workspace at
 * MOOR_GDN_TC=1): the update takes k^T V'' with V'' = e^(G_last - G) V'
 * instead, the same sum in exact arithmetic. One block of 8 warps a
 * (value head, 32 value columns): 192 blocks for the 27B, two an SM. A
 * fragment's lanes are g = lane / 4 and t = lane % 4 (PTX's groupID and
 * threadID_in_group):
 *   V' = U - W S   M = 64 tokens, N = 32, K = 128: warp w takes rows
 *                  16 (w % 4) .. + 15 and columns 16 (w / 4) .. + 15 (two
 *                  n-tiles), A = W by rows, B = the state (fp32 in
 *                  shared memory, split where a fragment is loaded); U
 *                  and e^(G_last - G) of the lane's rows come straight
 *                  from global memory into registers, and V'' goes to
 *                  shared memory split once (tf32 hi and lo side by side);
 *   S <- e^(G_last) S + k^T V''   M = 128 state rows, N = 32, K = the
 *                  sub-chunk's tokens (rounded up to 8; rows past n are
 *                  zeros in k and in V''): warp w takes state rows 16 w ..
 *                  + 15, every column (four n-tiles), A = k by columns
 *                  (its transpose), B = V'' as split. The warp's rows of S
 *                  stay in its accumulators from sub-chunk to sub-chunk;
 *                  they go to shared memory (for the next W S) and to the
 *                  unit (for the output) once a sub-chunk.
 * Shared rows are padded so that every fragment's loads hit distinct
 * banks: W [C][128 + 4] (lanes g rows apart, t columns), k [C][128 + 8]
 * and the state [128][32 + 8] (lanes t rows apart, g columns), V'' as
 * split quads (quad_st), the update's k in kq's order. 105 KB. W of the
 * next sub-chunk is copied under the update, k of this one under W S.
 * Three barriers a sub-chunk. The rewrite of 2026-12-07's k_hstate_tc
 * (185 us a 1,024-token chunk of the 27B's heads on an H100, ncu), which
 * split S and V' again in every warp that read them and kept S in shared
 * memory only: about 2,300 instructions a warp a sub-chunk. */
#define TC_NT 256
#define TC_PW (128 + 4)
#define TC_PK (128 + 8)
#define TC_SW 32 /* value columns a block */
#define TC_PV (TC_SW + 8)
#define TC_QP TC_SW /* V'' quads a row */

static size_t hstate_tc_smem(void)
{
	return ((size_t)C * TC_PW + (size_t)C * TC_PK + (size_t)128 * TC_PV +
		(size_t)C * TC_QP * 2) *
	       sizeof(float);
}

static __global__ void __launch_bounds__(TC_NT, 2)
    k_hstate_tc(float *S, float *ws, const float *k, int ldqk, int T, int Hk,
		int Hv, int dv)
{
	kcu_pdl_enter();
	constexpr int DK = 128;
	extern __shared__ __align__(16) float tsm[];
	float *sW = tsm;	    /* [C][TC_PW] W */
	float *sK = sW + C * TC_PW; /* [C][TC_PK] k */
	float *sS = sK + C * TC_PK; /* [DK][TC_PV] the state */
	/* V'' as quads (quad_st), C / 2 rows of TC_QP */
	uint32_t *sV = (uint32_t *)(sS + DK * TC_PV);
	const int h = blockIdx.x, s0 = blockIdx.y * TC_SW;
	const int tid = threadIdx.x, warp = tid >> 5, g = (tid & 31) >> 2,
		  t = tid & 3;
	const int wm = (warp & 3) * 16, wn = (warp >> 2) * 16, um = warp * 16;
	const int qb = quad_lane_b(TC_QP, g, t),
		  qs0 = quad_lane_st(TC_QP, g, t, 0),
		  qs1 = quad_lane_st(TC_QP, g, t, 1);
	float *Sh = S + (size_t)h * DK * dv + s0;
	const float *kh = k + (size_t)(h / (Hv / Hk)) * DK;
	const size_t uf = unit_floats(DK, dv);
	const size_t oU = off_U(DK), oG = off_G(DK, dv), oS = off_S(DK, dv);

	/* the warp's rows of the state: um + g (+ 8), columns 8 i + 2 t (+ 1) */
	float st[4][4];
	acc_ld(st, Sh + (size_t)um * dv, dv, g, t);
	hs_rows(sW, ws + (size_t)h * uf, DK, TC_PW);
	cp_commit();
	const int nch = (T + C - 1) / C;
	for (int c = 0; c < nch; c++) {
		const int n = T - c * C < C ? T - c * C : C;
		float *u = ws + ((size_t)c * Hv + h) * uf;
		/* the state this sub-chunk starts from: for W S, and for the
		 * output in the unit */
		acc_st(st, sS + um * TC_PV, TC_PV, g, t);
		acc_st(st, u + oS + (size_t)um * dv + s0, dv, g, t);
		cp_wait<0>();
		__syncthreads(); /* W and the state in; k and V'' read */
		/* k's rows of the sub-chunk (zeros past n) */
		const float *kc = kh + (size_t)c * C * ldqk;
		for (int e = tid; e < C * (DK / 4); e += TC_NT) {
			int j = e / (DK / 4), p = (e % (DK / 4)) * 4;
			cp16(sK + j * TC_PK + p,
			     kc + (size_t)(j < n ? j : 0) * ldqk + p, j < n);
		}
		cp_commit();
		/* U and e^(G_last - G) of this lane's rows of V' */
		const float gl = u[oG + n - 1];
		float2 uv[2][2];
		float er[2];
#pragma unroll
		for (int hf = 0; hf < 2; hf++) {
			const int r = wm + g + 8 * hf;
			er[hf] = r < n ? expf(gl - u[oG + r]) : 0.0f;
#pragma unroll
			for (int i = 0; i < 2; i++)
				uv[i][hf] =
				    r < n ? *(const float2 *)(u + oU +
							      (size_t)r * dv +
							      s0 + wn + 8 * i +
							      2 * t)
					  : make_float2(0.0f, 0.0f);
		}
		/* W S: rows wm + g (+ 8), columns wn + 8 i + 2 t (+ 1) */
		float acc[2][4] = {};
#pragma unroll 4
		for (int d = 0; d < DK; d += 8)
			mma_step<2>(acc, sW + wm * TC_PW + d, TC_PW,
				    sS + d * TC_PV + wn, TC_PV, g, t);
		/* V' = U - W S to the unit (zeros past n), V'' split: rows
		 * wm + g and wm + g + 8 a quad a column */
#pragma unroll
		for (int i = 0; i < 2; i++) {
			const int col = wn + 8 * i + 2 * t;
			float x[2][2] = {};
#pragma unroll
			for (int hf = 0; hf < 2; hf++) {
				const int r = wm + g + 8 * hf;
				if (r < n) {
					const float2 v = make_float2(
					    uv[i][hf].x - acc[i][2 * hf],
					    uv[i][hf].y - acc[i][2 * hf + 1]);
					*(float2 *)(u + oU + (size_t)r * dv +
						    s0 + col) = v;
					x[hf][0] = v.x * er[hf];
					x[hf][1] = v.y * er[hf];
				}
			}
			uint32_t *qv = sV + 4 * ((wm / 2) * TC_QP + wn + 8 * i);
			quad_st(qv + 4 * qs0, x[0][0], x[1][0]);
			quad_st(qv + 4 * qs1, x[0][1], x[1][1]);
		}
		const float egl = expf(gl);
#pragma unroll
		for (int i = 0; i < 4; i++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				st[i][e] *= egl;
		cp_wait<0>();
		__syncthreads(); /* k and V'' whole; W read */
		if (c + 1 < nch)
			hs_rows(sW, u + (size_t)Hv * uf, DK, TC_PW);
		cp_commit();
		/* S <- e^(G_last) S + k^T V'': the k-steps of the 16-token
		 * blocks that hold the sub-chunk's tokens (k and V'' are
		 * zeros past n) */
		const int js = ((n + 15) >> 4) * 2;
		for (int j = 0; j < js; j++) {
			uint32_t ah[4], al[4];
			frag_aq<true>(ah, al, sK + um, TC_PK, j, g, t);
			mma_quads(st, ah, al, sV + 4 * (qb + 4 * TC_QP * j));
		}
	}
	acc_st(st, Sh + (size_t)um * dv, dv, g, t);
}
/* k_out_tc: k_out4's output, O = (q e^G) S + Am V' (rounded when act is
 * BF16), in 3xTF32 on mma.sync, the two products into one accumulator
 * (S's first): other bits than k_out4's. One block of 8 warps a
 * (sub-chunk, value head, 64 value columns), as k_out4, making q e^G from
 * q's rows and G as k_hstate_tc makes k e^(G_last - G); warp w takes rows
 * 16 (w % 4) .. + 15 and columns 32 (w / 4) .. + 31 (four n-tiles). Am
 * is lower triangular (zeros above its diagonal and past n, as intra
 * writes it), so a warp's Am V' stops at the k-step of its last row.
 * Shared rows padded for conflict-free fragments: q e^G [C][dk + 4] and
 * Am [C][C + 4] (A, by rows), S [dk][64 + 8] and V' [C][64 + 8] (B). 106
 * KB at dk 128. With k_hstate_tc (MOOR_GDN_TC=3, dk 128, dv % 64 == 0). */
#define OT_PA (C + 4)
#define OT_PV (64 + 8)

static size_t out_tc_smem(int dk)
{
	return ((size_t)C * (dk + 4) + (size_t)dk * OT_PV + (size_t)C * OT_PA +
		(size_t)C * OT_PV) *
	       sizeof(float);
}

static __global__ void __launch_bounds__(256, 2)
    k_out_tc(float *o, const float *ws, const float *q, int ldqk, int T, int Hk,
	     int Hv, int dv, int act)
{
	kcu_pdl_enter();
	constexpr int DK = 128, PQ = DK + 4, OC = 64, Q4 = OC / 4;
	extern __shared__ __align__(16) float otm[];
	float *sQ = otm;	     /* [C][PQ] q e^G */
	float *sS = sQ + C * PQ;     /* [DK][OT_PV] */
	float *sA = sS + DK * OT_PV; /* [C][OT_PA] Am */
	float *sV = sA + C * OT_PA;  /* [C][OT_PV] V' */
	const int c = blockIdx.x, h = blockIdx.y, s0 = blockIdx.z * OC;
	const int t0 = c * C, n = T - t0 < C ? T - t0 : C;
	const float *u = ws + ((size_t)c * Hv + h) * unit_floats(DK, dv);
	const int tid = threadIdx.x, warp = tid >> 5, g = (tid & 31) >> 2,
		  t = tid & 3;
	const int wm = (warp & 3) * 16, wn = (warp >> 2) * 32;

	/* q (zeros past n) and S first, then Am and V', which land under
	 * Q S */
	const float *qc = q + (size_t)t0 * ldqk + (size_t)(h / (Hv / Hk)) * DK;
	for (int e = tid; e < C * (DK / 4); e += 256) {
		int i = e / (DK / 4), p = (e % (DK / 4)) * 4;
		cp16(sQ + i * PQ + p, qc + (size_t)(i < n ? i : 0) * ldqk + p,
		     i < n);
	}
	for (int e = tid; e < DK * Q4; e += 256) {
		int d = e / Q4, p = (e % Q4) * 4;
		cp16(sS + d * OT_PV + p,
		     u + off_S(DK, dv) + (size_t)d * dv + s0 + p, 1);
	}
	cp_commit();
	for (int e = tid; e < C * Q4; e += 256) {
		int j = e / Q4, p = (e % Q4) * 4;
		cp16(sV + j * OT_PV + p,
		     u + off_U(DK) + (size_t)j * dv + s0 + p, j < n);
	}
	const float *gA = u + off_A(DK, dv);
	for (int e = tid; e < C * (C / 4); e += 256) {
		int i = e / (C / 4), p = (e % (C / 4)) * 4;
		cp16(sA + i * OT_PA + p, gA + (size_t)i * C + p, 1);
	}
	cp_commit();
	cp_wait<1>();
	__syncthreads();
	/* q e^G, each value's product as intra's (the same expf of the same
	 * G), so the same bits as the workspace's */
	const float *gG = u + off_G(DK, dv);
	for (int e = tid; e < C * (DK / 4); e += 256) {
		int i = e / (DK / 4), p = (e % (DK / 4)) * 4;
		const float eq = i < n ? expf(gG[i]) : 0.0f;
		float4 *qp = (float4 *)(sQ + i * PQ + p);
		const float4 a = *qp;
		*qp = make_float4(a.x * eq, a.y * eq, a.z * eq, a.w * eq);
	}
	__syncthreads();

	float acc[4][4] = {};
#pragma unroll 2
	for (int d = 0; d < DK; d += 8)
		mma_step<4>(acc, sQ + wm * PQ + d, PQ, sS + d * OT_PV + wn, OT_PV,
			    g, t);
	cp_wait<0>();
	__syncthreads(); /* Am and V' in */
	for (int j = 0; j < wm + 16; j += 8)
		mma_step<4>(acc, sA + wm * OT_PA + j, OT_PA, sV + j * OT_PV + wn,
			    OT_PV, g, t);
#pragma unroll
	for (int hf = 0; hf < 2; hf++) {
		const int r = wm + g + 8 * hf;
		if (r < n) {
			float *op = o + ((size_t)(t0 + r) * Hv + h) * dv + s0 +
				    wn + 2 * t;
#pragma unroll
			for (int i = 0; i < 4; i++)
				*(float2 *)(op + 8 * i) = make_float2(
				    kcu_rnd(acc[i][2 * hf], act),
				    kcu_rnd(acc[i][2 * hf + 1], act));
		}
	}
}

/* k_chunk_tc: the state pass and the output in one kernel at dk 128
 * (MOOR_GDN_TC=1), 3xTF32 on mma.sync: for each sub-chunk in order, from
 * intra's W, U, Am and G and from q and k as they are,
 *   phase 1   [W; q e^G] S: M = 128 (W's 64 rows, then q's), N = 64 value
 *             columns, K = 128: warp w takes rows 16 w .. + 15 (W's for w
 *             < 4, q's for the rest, each value times e^G as it is
 *             loaded), every column (eight n-tiles); the W warps make V'
 *             = U - W S (U straight from the unit into registers) into
 *             shared memory, split (tf32 hi and lo side by side), and
 *             the q warps keep their part of O;
 *   phase 2   the q warps: O += Am V' (K up to their last row: Am is
 *             lower triangular), rounded when act is BF16, to o;
 *   update    S <- e^(G_last) S + (k e^(G_last - G))^T V': warp w takes
 *             state rows 16 w .. + 15, every column; k's values are
 *             scaled by e^(G_last - G) as they are loaded. A warp's rows
 *             of S stay in its accumulators from sub-chunk to sub-chunk
 *             and go to shared memory split, once a sub-chunk, as phase
 *             1's B.
 * So neither V' nor the sub-chunks' states go through the workspace (the
 * 64 KB of S a unit that k_hstate_tc writes and k_out_tc reads), and
 * every B fragment is split once. One block of 8 warps a (value head, 64
 * value columns), one an SM (213 KB of shared memory: W and q [C][128 +
 * 4], k [C][128 + 8], Am [C][C + 4], e^(G_last - G) [C]; the state and
 * V' as split quads (quad_st), the products' k in kq's order; each
 * fragment's loads on distinct banks): 96 blocks for the 27B. k and Am
 * are copied under phase 1, W, q and G of the next sub-chunk under phase
 * 2 and the update. Two barriers a sub-chunk. */
#define CT_PA (128 + 4)
#define CT_PK (128 + 8)
#define CT_PM (C + 4)
#define CT_OC 64	     /* value columns a block */
#define CT_QP CT_OC /* quads a row of the state and of V' */

static size_t chunk_tc_smem(void)
{
	return ((size_t)2 * C * CT_PA + (size_t)C * CT_PK + (size_t)C * CT_PM +
		2 * C + 2 * ((size_t)128 * CT_QP + (size_t)C * CT_QP)) *
	       sizeof(float);
}

/* k_chunk_tc's and k_chunk_tc2's shared memory (chunk_tc_smem's sum):
 * sW, sQ [C][CT_PA] W and q; sK [C][CT_PK] k; sA [C][CT_PM] Am; sE [C]
 * e^(G_last - G); sG [C] G; sS and sV the state and V' split, as quads
 * (quad_st): 128 / 2 and C / 2 rows of CT_QP */
#define CT_CARVE(base)                                                        \
	float *sW = (base), *sQ = sW + C * CT_PA, *sK = sQ + C * CT_PA,     \
	      *sA = sK + C * CT_PK, *sE = sA + C * CT_PM, *sG = sE + C;      \
	uint32_t *sS = (uint32_t *)(sG + C), *sV = sS + 2 * 128 * CT_QP

/* W's rows and G of the unit at wu (G at wu + og) and q's rows t0 .. t0 +
 * n - 1 (zeros past n) into sW, sG and sQ */
static __device__ inline void chunk_wq(float *sW, float *sG, float *sQ,
				       const float *wu, size_t og,
				       const float *qh, int ldqk, int t0,
				       int n)
{
	if (threadIdx.x < C / 4)
		cp16(sG + 4 * threadIdx.x, wu + og + 4 * threadIdx.x, 1);
	for (int e = threadIdx.x; e < C * 32; e += 256) {
		const int j = e >> 5, p = (e & 31) * 4;
		cp16(sW + j * CT_PA + p, wu + (size_t)j * 128 + p, 1);
		cp16(sQ + j * CT_PA + p,
		     qh + (size_t)(t0 + (j < n ? j : 0)) * ldqk + p, j < n);
	}
}

/* k's rows t0 .. t0 + n - 1 (zeros past n) and Am (at am) into sK and
 * sA, committed; e^(G_last - G) into sE from G in sG; returns G_last */
static __device__ inline float chunk_ka(float *sK, float *sA, float *sE,
					const float *sG, const float *kh,
					const float *am, int ldqk, int t0, int n)
{
	const int tid = threadIdx.x;
	for (int e = tid; e < C * 32; e += 256) {
		const int j = e >> 5, p = (e & 31) * 4;
		cp16(sK + j * CT_PK + p,
		     kh + (size_t)(t0 + (j < n ? j : 0)) * ldqk + p, j < n);
	}
	for (int e = tid; e < C * (C / 4); e += 256) {
		const int i = e / (C / 4), p = (e % (C / 4)) * 4;
		cp16(sA + i * CT_PM + p, am + (size_t)i * C + p, 1);
	}
	cp_commit();
	const float gl = sG[n - 1];
	if (tid < C)
		sE[tid] = tid < n ? expf(gl - sG[tid]) : 0.0f;
	return gl;
}

static __global__ void __launch_bounds__(256, 1)
    k_chunk_tc(float *o, float *S, const float *ws, const float *q,
	       const float *k, int ldqk, int T, int Hk, int Hv, int dv,
	       int act)
{
	kcu_pdl_enter();
	constexpr int DK = 128;
	extern __shared__ __align__(16) float fsm[];
	CT_CARVE(fsm);
	const int h = blockIdx.x, s0 = blockIdx.y * CT_OC;
	const int tid = threadIdx.x, warp = tid >> 5, g = (tid & 31) >> 2,
		  t = tid & 3;
	const bool isq = warp >= 4;
	const int m0 = (warp & 3) * 16, um = warp * 16;
	const int qb = quad_lane_b(CT_QP, g, t),
		  qs[2] = {quad_lane_st(CT_QP, g, t, 0),
			   quad_lane_st(CT_QP, g, t, 1)};
	float *Sh = S + (size_t)h * DK * dv + s0;
	const float *qh = q + (size_t)(h / (Hv / Hk)) * DK,
		    *kh = k + (size_t)(h / (Hv / Hk)) * DK;
	const size_t uf = unit_floats(DK, dv);
	const size_t oU = off_U(DK), oA = off_A(DK, dv), oG = off_G(DK, dv);

	/* the warp's rows of the state: um + g (+ 8), columns 8 i + 2 t (+ 1) */
	float st[8][4];
	acc_ld(st, Sh + (size_t)um * dv, dv, g, t);
	chunk_wq(sW, sG, sQ, ws + (size_t)h * uf, oG, qh, ldqk, 0,
		 T < C ? T : C);
	cp_commit();
	const int nch = (T + C - 1) / C;
	for (int c = 0; c < nch; c++) {
		const int t0 = c * C, n = T - t0 < C ? T - t0 : C;
		const float *u = ws + ((size_t)c * Hv + h) * uf;
		/* the state this sub-chunk starts from, split, for phase 1 */
#pragma unroll
		for (int i = 0; i < 8; i++)
#pragma unroll
			for (int e = 0; e < 2; e++)
				quad_st(sS + 4 * (qs[e] + (um / 2) * CT_QP + 8 * i),
					st[i][e], st[i][2 + e]);
		cp_wait<0>();
		__syncthreads(); /* W, q and S in; k, Am, V' and sE read */
		const float gl = chunk_ka(sK, sA, sE, sG, kh, u + oA, ldqk, t0, n);
		/* this lane's rows m0 + g (+ 8): e^G (q's warps) or U (W's) */
		float ef[2];
		float2 uv[8][2];
#pragma unroll
		for (int hf = 0; hf < 2; hf++) {
			const int r = m0 + g + 8 * hf;
			ef[hf] = isq && r < n ? expf(sG[r]) : 0.0f;
#pragma unroll
			for (int i = 0; i < 8; i++)
				uv[i][hf] = !isq && r < n
						? *(const float2 *)(u + oU +
								    (size_t)r * dv +
								    s0 + 8 * i + 2 * t)
						: make_float2(0.0f, 0.0f);
		}
		/* phase 1: rows m0 + g (+ 8) of W S or of (q e^G) S, columns
		 * 8 i + 2 t (+ 1) */
		float acc[8][4] = {};
		const float *sa = (isq ? sQ : sW) + m0 * CT_PA;
#pragma unroll 2
		for (int j = 0; j < DK / 8; j++) {
			const int k0 = kq(j, t), k1 = k0 + 8;
			float x[4] = {sa[g * CT_PA + k0], sa[(g + 8) * CT_PA + k0],
				      sa[g * CT_PA + k1],
				      sa[(g + 8) * CT_PA + k1]};
			if (isq)
				x[0] *= ef[0], x[1] *= ef[1], x[2] *= ef[0],
				    x[3] *= ef[1];
			uint32_t ah[4], al[4];
			tf32_split(x, ah, al);
			mma_quads(acc, ah, al, sS + 4 * (qb + 4 * CT_QP * j));
		}
		if (!isq) /* V' = U - W S (zeros past n), split */
#pragma unroll
			for (int i = 0; i < 8; i++)
#pragma unroll
				for (int e = 0; e < 2; e++) {
					float x[2];
#pragma unroll
					for (int hf = 0; hf < 2; hf++) {
						const float uu =
						    e ? uv[i][hf].y : uv[i][hf].x;
						x[hf] = m0 + g + 8 * hf < n
							    ? uu - acc[i][2 * hf + e]
							    : 0.0f;
					}
					quad_st(sV + 4 * (qs[e] + (m0 / 2) * CT_QP +
							  8 * i),
						x[0], x[1]);
				}
		cp_wait<0>();
		__syncthreads(); /* V' whole, k and Am in; W and q read */
		if (c + 1 < nch)
			chunk_wq(sW, sG, sQ, u + (size_t)Hv * uf, oG, qh, ldqk,
				 t0 + C,
				 T - t0 - C < C ? T - t0 - C : C);
		cp_commit();
		if (isq) { /* phase 2: O += Am V', to o */
			for (int j = 0; j < m0 / 8 + 2; j++) {
				uint32_t ah[4], al[4];
				frag_aq<false>(ah, al, sA + m0 * CT_PM, CT_PM, j,
					       g, t);
				mma_quads(acc, ah, al,
					  sV + 4 * (qb + 4 * CT_QP * j));
			}
#pragma unroll
			for (int hf = 0; hf < 2; hf++) {
				const int r = m0 + g + 8 * hf;
				if (r < n) {
					float *op = o +
						    ((size_t)(t0 + r) * Hv + h) * dv +
						    s0 + 2 * t;
#pragma unroll
					for (int i = 0; i < 8; i++)
						*(float2 *)(op + 8 * i) = make_float2(
						    kcu_rnd(acc[i][2 * hf], act),
						    kcu_rnd(acc[i][2 * hf + 1], act));
				}
			}
		}
		/* the update: S <- e^(G_last) S + (k e^(G_last - G))^T V' */
		const float egl = expf(gl);
#pragma unroll
		for (int i = 0; i < 8; i++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				st[i][e] *= egl;
		/* the k-steps of the 16-token blocks that hold the
		 * sub-chunk's tokens (k, sE and V' are zeros past n) */
		const int js = ((n + 15) >> 4) * 2;
		for (int j = 0; j < js; j++) {
			uint32_t ah[4], al[4];
			frag_aq<true>(ah, al, sK + um, CT_PK, j, g, t, sE);
			mma_quads(st, ah, al, sV + 4 * (qb + 4 * CT_QP * j));
		}
	}
	acc_st(st, Sh + (size_t)um * dv, dv, g, t);
}

/* k_chunk_tc2: k_chunk_tc's work and sums in other warps' shares
 * (MOOR_GDN_CT=2): warp w = 4 hf + p takes the value columns 32 hf ..
 * + 31 (four n-tiles) of two row tiles in each product, so that each B
 * fragment it loads serves two A fragments (k_chunk_tc's warps load all
 * of B for one: shared memory's wavefronts were 58% of its cycles on an
 * H100, its tensor pipe 42%), and phase 2 is every warp's:
 *   phase 1   W's rows 16 p and q's rows 16 mq, mq = p (hf 0) or 3 - p
 *             (hf 1): the two warps of a scheduler (p and p + 4) then
 *             share phase 2's ten k-steps evenly;
 *   phase 2   q's rows 16 mq, O += Am V';
 *   update    state rows 16 p and 16 (p + 4).
 * Each accumulator tile's sum runs over the same k-steps in the same
 * order as in k_chunk_tc: the same bits (test_gdn_tc_emu compares them). */
static __global__ void __launch_bounds__(256, 1)
    k_chunk_tc2(float *o, float *S, const float *ws, const float *q,
		const float *k, int ldqk, int T, int Hk, int Hv, int dv,
		int act)
{
	kcu_pdl_enter();
	constexpr int DK = 128;
	extern __shared__ __align__(16) float fsm[];
	CT_CARVE(fsm);
	const int h = blockIdx.x, s0 = blockIdx.y * CT_OC;
	const int tid = threadIdx.x, warp = tid >> 5, g = (tid & 31) >> 2,
		  t = tid & 3;
	/* c0: the warp's first value column, and its first quad in a row
	 * of sS and sV */
	const int p = warp & 3, hf = warp >> 2, c0 = 32 * hf;
	const int mw = 16 * p, mq = 16 * (hf ? 3 - p : p);
	const int qb = quad_lane_b(CT_QP, g, t),
		  qs[2] = {quad_lane_st(CT_QP, g, t, 0),
			   quad_lane_st(CT_QP, g, t, 1)};
	float *Sh = S + (size_t)h * DK * dv + s0 + c0;
	const float *qh = q + (size_t)(h / (Hv / Hk)) * DK,
		    *kh = k + (size_t)(h / (Hv / Hk)) * DK;
	const size_t uf = unit_floats(DK, dv);
	const size_t oU = off_U(DK), oA = off_A(DK, dv), oG = off_G(DK, dv);

	/* the warp's state: rows 16 (p + 4 r) + g (+ 8), columns c0 + 8 i
	 * + 2 t (+ 1) */
	float st[2][4][4];
#pragma unroll
	for (int r = 0; r < 2; r++)
		acc_ld(st[r], Sh + (size_t)(mw + 64 * r) * dv, dv, g, t);
	chunk_wq(sW, sG, sQ, ws + (size_t)h * uf, oG, qh, ldqk, 0,
		      T < C ? T : C);
	cp_commit();
	const int nch = (T + C - 1) / C;
	for (int c = 0; c < nch; c++) {
		const int t0 = c * C, n = T - t0 < C ? T - t0 : C;
		const float *u = ws + ((size_t)c * Hv + h) * uf;
#pragma unroll
		for (int r = 0; r < 2; r++)
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int e = 0; e < 2; e++)
					quad_st(sS + 4 * (qs[e] +
							  ((mw + 64 * r) / 2) * CT_QP +
							  c0 + 8 * i),
						st[r][i][e], st[r][i][2 + e]);
		cp_wait<0>();
		__syncthreads(); /* W, q and S in; k, Am, V' and sE read */
		const float gl = chunk_ka(sK, sA, sE, sG, kh, u + oA, ldqk, t0, n);
		/* e^G of q's rows mq + g (+ 8); U of W's rows mw + g (+ 8) */
		float ef[2];
		float2 uv[4][2];
#pragma unroll
		for (int r = 0; r < 2; r++) {
			const int rq = mq + g + 8 * r, rw = mw + g + 8 * r;
			ef[r] = rq < n ? expf(sG[rq]) : 0.0f;
#pragma unroll
			for (int i = 0; i < 4; i++)
				uv[i][r] = rw < n ? *(const float2 *)(u + oU +
								       (size_t)rw * dv +
								       s0 + c0 + 8 * i +
								       2 * t)
						  : make_float2(0.0f, 0.0f);
		}
		/* phase 1: W S (aw) and (q e^G) S (aq), the warp's rows and
		 * columns */
		float aw[4][4] = {}, aq[4][4] = {};
		const float *pw = sW + mw * CT_PA, *pq = sQ + mq * CT_PA;
#pragma unroll 2
		for (int j = 0; j < DK / 8; j++) {
			const int k0 = kq(j, t), k1 = k0 + 8;
			float xw[4] = {pw[g * CT_PA + k0], pw[(g + 8) * CT_PA + k0],
				       pw[g * CT_PA + k1],
				       pw[(g + 8) * CT_PA + k1]};
			float xq[4] = {pq[g * CT_PA + k0] * ef[0],
				       pq[(g + 8) * CT_PA + k0] * ef[1],
				       pq[g * CT_PA + k1] * ef[0],
				       pq[(g + 8) * CT_PA + k1] * ef[1]};
			uint32_t wh[4], wl[4], qhi[4], qlo[4];
			tf32_split(xw, wh, wl);
			tf32_split(xq, qhi, qlo);
			const uint32_t *b = sS + 4 * (qb + 4 * CT_QP * j + c0);
#pragma unroll
			for (int i = 0; i < 4; i++) {
				const uint4 bb = *(const uint4 *)(b + 32 * i);
				const uint32_t bh[2] = {bb.x, bb.y},
					       bl[2] = {bb.z, bb.w};
				mma3x(aw[i], wh, wl, bh, bl);
				mma3x(aq[i], qhi, qlo, bh, bl);
			}
		}
		/* V' = U - W S (zeros past n), split */
#pragma unroll
		for (int i = 0; i < 4; i++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				float x[2];
#pragma unroll
				for (int r = 0; r < 2; r++) {
					const float uu = e ? uv[i][r].y : uv[i][r].x;
					x[r] = mw + g + 8 * r < n
						   ? uu - aw[i][2 * r + e]
						   : 0.0f;
				}
				quad_st(sV + 4 * (qs[e] + (mw / 2) * CT_QP + c0 +
						  8 * i),
					x[0], x[1]);
			}
		cp_wait<0>();
		__syncthreads(); /* V' whole, k and Am in; W and q read */
		if (c + 1 < nch)
			chunk_wq(sW, sG, sQ, u + (size_t)Hv * uf, oG, qh,
				      ldqk, t0 + C,
				      T - t0 - C < C ? T - t0 - C : C);
		cp_commit();
		/* phase 2: O += Am V', to o */
		for (int j = 0; j < mq / 8 + 2; j++) {
			uint32_t ah[4], al[4];
			frag_aq<false>(ah, al, sA + mq * CT_PM, CT_PM, j, g, t);
			mma_quads(aq, ah, al, sV + 4 * (qb + 4 * CT_QP * j + c0));
		}
#pragma unroll
		for (int r = 0; r < 2; r++) {
			const int rq = mq + g + 8 * r;
			if (rq < n) {
				float *op = o + ((size_t)(t0 + rq) * Hv + h) * dv +
					    s0 + c0 + 2 * t;
#pragma unroll
				for (int i = 0; i < 4; i++)
					*(float2 *)(op + 8 * i) =
					    make_float2(kcu_rnd(aq[i][2 * r], act),
							kcu_rnd(aq[i][2 * r + 1], act));
			}
		}
		/* the update: S <- e^(G_last) S + (k e^(G_last - G))^T V' */
		const float egl = expf(gl);
#pragma unroll
		for (int r = 0; r < 2; r++)
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					st[r][i][e] *= egl;
		const int js = ((n + 15) >> 4) * 2;
		for (int j = 0; j < js; j++) {
			uint32_t ah[2][4], al[2][4];
#pragma unroll
			for (int r = 0; r < 2; r++)
				frag_aq<true>(ah[r], al[r], sK + mw + 64 * r, CT_PK,
					      j, g, t, sE);
			const uint32_t *b = sV + 4 * (qb + 4 * CT_QP * j + c0);
#pragma unroll
			for (int i = 0; i < 4; i++) {
				const uint4 bb = *(const uint4 *)(b + 32 * i);
				const uint32_t bh[2] = {bb.x, bb.y},
					       bl[2] = {bb.z, bb.w};
#pragma unroll
				for (int r = 0; r < 2; r++)
					mma3x(st[r][i], ah[r], al[r], bh, bl);
			}
		}
	}
#pragma unroll
	for (int r = 0; r < 2; r++)
		acc_st(st[r], Sh + (size_t)(mw + 64 * r) * dv, dv, g, t);
}

/* k_intra_tc: intra at dk = dv = 128 for MOOR_GDN_TC=1, its products in
 * 3xTF32 on mma.sync (the tf32 helpers above), and W and U as
 * X (beta e^G K) and X (beta V) with X = (I + A)^-1 made once (64 columns
 * of the substitution instead of W's and U's 256). Other bits than
 * k_intra_rt's. It writes W, U, Am and G (q e^G and k e^(G_last - G) are
 * made where they are read, by k_chunk_tc, k_hstate_tc and k_out_tc).
 * One block of 8 warps a (sub-chunk, value head), two an SM; a
 * fragment's lanes are g = lane / 4, t = lane % 4:
 *   products   warps 0-3 k k^T, 4-7 q k^T: the tiles on or below the
 *              diagonal (20 of 64) five a warp, in runs of one m-tile's
 *              n-tiles; A_ij = (beta_i k_i . k_j) e^(G_i - G_j) (j < i)
 *              into shared memory by columns, Am_ij = (q_i . k_j) e^(G_i
 *              - G_j) (j <= i) to the workspace; zeros above and past n;
 *   X          64 threads, a column of X each in registers, right-looking
 *              as intra_subst_rl (the others wait);
 *   W, U       warps 0-3 W, 4-7 U: warp w takes n-tiles 4 (w % 4) .. + 3
 *              of every m-tile, each m-tile over the k-steps up to its
 *              last row (X is lower triangular), so the warps' shares
 *              are even.
 * Both shares were a warp an m-tile at first (the last m-tile's
 * warp four times the first's work); the sums are the same, so are the
 * bits.
 * Shared: k and q [C][128 + 4] for the products (A and B both by rows),
 * then beta e^G k in q's place and beta v in k's [C][128 + 8] (B of W and
 * U), A by columns then X by rows [C][C + 4]; 88 KB. */
#define IT_P1 (128 + 4)
#define IT_P2 (128 + 8)
#define IT_PX (C + 4)

static size_t intra_tc_smem(void)
{
	return ((size_t)2 * C * IT_P2 + (size_t)C * IT_PX + 3 * C) *
	       sizeof(float);
}

/* k_intra_tc's and k_intra_tc2's last products: W = X (beta e^G k) or
 * U = X (beta v), the warp's columns (n-tiles 4 (w % 4) .. + 3, B at sB,
 * [C][IT_P2]) of every m-tile, each m-tile over the k-steps up to its
 * last row (X, [C][IT_PX] at sX, is lower triangular), to dst (rows 128
 * apart); rows past n are zeros (X's rows there are e_i, and k's and
 * v's rows zeros) */
static __device__ inline void intra_tc_wu(const float *sB, const float *sX,
					  float *dst, int gl, int tl)
{
	float acc[4][4][4] = {};
#pragma unroll
	for (int kk = 0; kk < 8; kk++) {
		uint32_t bh[4][2], bl[4][2];
#pragma unroll
		for (int ni = 0; ni < 4; ni++)
			frag_b<false>(bh[ni], bl[ni], sB + 8 * kk * IT_P2 + 8 * ni,
				      IT_P2, gl, tl);
		/* m-tile m takes k-steps 0 .. 2 m + 1 */
#pragma unroll
		for (int m = kk / 2; m < 4; m++) {
			uint32_t ah[4], al[4];
			frag_a(ah, al, sX + 16 * m * IT_PX + 8 * kk, IT_PX, gl,
			       tl);
#pragma unroll
			for (int ni = 0; ni < 4; ni++)
				mma3x(acc[m][ni], ah, al, bh[ni], bl[ni]);
		}
	}
#pragma unroll
	for (int m = 0; m < 4; m++)
#pragma unroll
		for (int hf = 0; hf < 2; hf++) {
			const int r = 16 * m + gl + 8 * hf;
#pragma unroll
			for (int ni = 0; ni < 4; ni++)
				*(float2 *)(dst + (size_t)r * 128 + 8 * ni + 2 * tl) =
				    make_float2(acc[m][ni][2 * hf],
						acc[m][ni][2 * hf + 1]);
		}
}

/* the products' shares: m-tile mt's warps take five of the lower
 * triangle's 20 tiles (n-tiles 0 .. 2 m + 1 of m-tile m) in one or two
 * runs of one m-tile's n-tiles, run r: m-tile rm, n-tiles r0 .. r0 + rn
 * - 1 (rn 0: none; a second run has four at most) */
static __device__ inline void intra_tc_share(int mt, int r, int &rm, int &r0,
					     int &rn)
{
	const int odd = mt & 1;
	rm = r ? (mt == 1 ? 0 : 1) : (mt < 2 ? 3 : 2);
	r0 = r ? 0 : (odd ? 5 : 0);
	rn = r ? (odd ? (mt == 1 ? 2 : 4) : 0) : (odd ? (mt == 1 ? 3 : 1) : 5);
}
/* k_intra_tc's and k_intra_tc2's run of tiles out: A_ij = (beta_i k_i . k_j) e^(G_i - G_j) (j < i)
 * into shared memory by columns, Am_ij = (q_i . k_j) e^(G_i - G_j) (j <=
 * i) to the workspace (where pr); zeros above and past n */
template <int NT>
static __device__ inline void intra_tc_put(const float (&acc)[NT][4], float *Am,
					 float *sX, const float *sG,
					 const float *sb, int rm, int r0, int rn,
					 int pr, int n, int gl, int tl)
{
#pragma unroll
	for (int j = 0; j < NT; j++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const int i = 16 * rm + gl + 8 * (e >> 1),
				  jj = 8 * (r0 + j) + 2 * tl + (e & 1);
			if (j >= rn)
				continue;
			float x = 0.0f;
			if (i < n && jj <= i) {
				const float dm = expf(sG[i] - sG[jj]);
				x = pr	     ? acc[j][e] * dm
				    : jj < i ? (sb[i] * acc[j][e]) * dm
					     : 0.0f;
			}
			if (pr)
				Am[i * C + jj] = x;
			else
				sX[jj * IT_PX + i] = x;
		}
}
/* the zeros above the triangle in m-tile mt (n-tiles 2 mt + 2 ..), to
 * Am where pr, else to A by columns in sX */
static __device__ inline void intra_tc_zeros(float *Am, float *sX, int mt,
					     int pr, int gl, int tl)
{
	for (int j = 2 * mt + 2; j < 8; j++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const int i = 16 * mt + gl + 8 * (e >> 1),
				  jj = 8 * j + 2 * tl + (e & 1);
			if (pr)
				Am[i * C + jj] = 0.0f;
			else
				sX[jj * IT_PX + i] = 0.0f;
		}
}

static __global__ void __launch_bounds__(256, 2)
    k_intra_tc(float *ws, const float *q, const float *k, int ldqk,
	       const float *v, int ldv, const float *g, const float *beta,
	       int T, int Hk, int Hv)
{
	kcu_pdl_enter();
	constexpr int DK = 128, DV = 128, Q4 = DK / 4;
	extern __shared__ __align__(16) float ism[];
	float *sk = ism; /* k [C][IT_P1], then beta v [C][IT_P2] */
	float *sq =
	    sk + C * IT_P2; /* q [C][IT_P1], then beta e^G k [C][IT_P2] */
	float *sX =
	    sq + C * IT_P2; /* A by columns, then X by rows [C][IT_PX] */
	float *sG = sX + C * IT_PX; /* [C] */
	float *sb = sG + C;	    /* [C] beta */
	float *sEq = sb + C;	    /* [C] e^G */
	const int c = blockIdx.x, h = blockIdx.y, t0 = c * C;
	const int n = T - t0 < C ? T - t0 : C;
	const int tid = threadIdx.x, warp = tid >> 5, gl = (tid & 31) >> 2,
		  tl = tid & 3;
	const int mt = warp & 3, pr = warp >> 2;
	float *u = ws + ((size_t)c * Hv + h) * unit_floats(DK, DV);

	const size_t kq = (size_t)t0 * ldqk + (size_t)(h / (Hv / Hk)) * DK;
	for (int e = tid; e < C * Q4; e += 256) {
		int i = e / Q4, p = (e % Q4) * 4;
		size_t off = kq + (size_t)(i < n ? i : 0) * ldqk + p;
		cp16(sk + i * IT_P1 + p, k + off, i < n);
		cp16(sq + i * IT_P1 + p, q + off, i < n);
	}
	cp_commit();
	intra_gates(sG, sb, g, beta, t0, n, h, Hv);
	for (int i = tid; i < C; i += 256) {
		sEq[i] = i < n ? expf(sG[i]) : 0.0f;
		u[off_G(DK, DV) + i] = i < n ? sG[i] : 0.0f;
	}
	cp_wait<0>();
	__syncthreads(); /* k, q and e^G in */

	/* the products: the lower triangle's tiles (n-tiles 0 .. 2 mt + 1 of
	 * m-tile mt, 20 a product) in even shares, five tiles a warp in one
	 * or two runs of one m-tile's n-tiles (m-tile, first, count); then
	 * each warp's zeros above the triangle in m-tile mt */
	float *Am = u + off_A(DK, DV);
	const float *sa = pr ? sq : sk;
	for (int run = 0; run < 2; run++) {
		int rm, r0, rn;
		intra_tc_share(mt, run, rm, r0, rn);
		if (!rn)
			continue;
		float acc[5][4] = {};
		for (int d = 0; d < DK; d += 8)
			mma_step<5, true>(acc, sa + 16 * rm * IT_P1 + d,
						 IT_P1, sk + 8 * r0 * IT_P1 + d,
						 IT_P1, gl, tl, rn);
		intra_tc_put(acc, Am, sX, sG, sb, rm, r0, rn, pr, n, gl, tl);
	}
	intra_tc_zeros(Am, sX, mt, pr, gl, tl);
	__syncthreads(); /* k and q read; A whole */
	/* beta e^G k in q's place (k_intra_rt's W before the substitution) */
	for (int e = tid; e < C * Q4; e += 256) {
		int i = e / Q4, p = (e % Q4) * 4;
		const float4 a = *(const float4 *)(sk + i * IT_P1 + p);
		const float bb = sb[i], eq = sEq[i];
		*(float4 *)(sq + i * IT_P2 + p) =
		    make_float4((a.x * bb) * eq, (a.y * bb) * eq,
				(a.z * bb) * eq, (a.w * bb) * eq);
	}
	__syncthreads(); /* k read: v goes in its place */
	const float *vc = v + (size_t)t0 * ldv + (size_t)h * DV;
	for (int e = tid; e < C * (DV / 4); e += 256) {
		int i = e / (DV / 4), p = (e % (DV / 4)) * 4;
		cp16(sk + i * IT_P2 + p, vc + (size_t)(i < n ? i : 0) * ldv + p,
		     i < n);
	}
	cp_commit();
	/* X = (I + A)^-1: column tid of X from e_tid, right-looking */
	float xr[C];
	if (tid < C) {
#pragma unroll
		for (int i = 0; i < C; i++)
			xr[i] = i == tid ? 1.0f : 0.0f;
		subst_col(xr, sX, IT_PX);
	}
	__syncthreads(); /* A read */
	if (tid < C)
#pragma unroll
		for (int i = 0; i < C; i++)
			sX[i * IT_PX + tid] = xr[i];
	cp_wait<0>();
	__syncthreads(); /* X whole, v in */
	/* beta v (intra_bv's products) */
	for (int e = tid; e < C * (DV / 4); e += 256) {
		int i = e / (DV / 4), p = (e % (DV / 4)) * 4;
		float4 *vp = (float4 *)(sk + i * IT_P2 + p);
		const float4 a = *vp;
		const float bb = sb[i];
		*vp = make_float4(a.x * bb, a.y * bb, a.z * bb, a.w * bb);
	}
	__syncthreads();
	/* W = X (beta e^G k) (w < 4), U = X (beta v) */
	intra_tc_wu((pr ? sk : sq) + 32 * mt, sX,
		    u + (pr ? off_U(DK) : 0) + 32 * mt, gl, tl);
}


/* k_intra_tc2: k_intra_tc's work and sums (MOOR_GDN_IT=2), k split
 * once: its rows go into shared memory as split quads {hi_(r,d),
 * hi_(r,d+4), lo_(r,d), lo_(r,d+4)} (d = 8 j + t, k-step j, lane t),
 * the B fragment of both products and the A fragment of k k^T each one
 * 16-byte load, no split in the products (k_intra_tc split k's values
 * again in every warp that read them: the products were 39% of its
 * stall samples and half its instructions, H100, 2026-12-07). The
 * products' accumulators stay in registers until the quads and q are
 * read; then k is copied again, as it is, for beta e^G k (made in
 * place), v where q was, A into shared memory. Shared: k's quads [C][64
 * quads] (64 KB; then beta e^G k [C][128 + 8] and A / X [C][C + 4] in
 * that room), q [C][128 + 4] then beta v [C][128 + 8]; 99 KB, two
 * blocks an SM. The same splits, products and sums: the same bits.
 * ptxas (13.0, sm_90a) spills 13 registers (52 bytes) at its 128:
 * without the substitution or without W and U it fits (119), and
 * k_intra_tc, with the same two, takes 123; where it spills is for the
 * device's SASS to say (session.sh dsrc). */
static size_t intra_tc2_smem(void)
{
	return ((size_t)C * 256 + (size_t)C * IT_P2 + 3 * C) * sizeof(float);
}

/* the quad of k's row i, k-step j, lane t (in quads from the start): a
 * row's 64 quads in k-step order, lane t's of k-step j at 4 j + t, the
 * odd rows' at it ^ 4, so that a fragment's 8-lane phases (rows g and g
 * + 1, lanes t) meet 8 distinct 16-byte bank groups */
static __device__ inline int it_quad(int i, int j, int t)
{
	return i * 64 + ((4 * j + t) ^ (4 * (i & 1)));
}

/* k_intra_tc2's run of the products: acc[i] += (q or k) k^T, m-tile rm
 * (q's rows where pr), n-tiles r0 + i, i < rn (of NT) */
template <int NT>
static __device__ inline void intra2_run(float (&acc)[NT][4],
					 const uint32_t *sKq, const float *sq,
					 int rm, int r0, int rn, int pr, int gl,
					 int tl)
{
	if (!rn)
		return;
	for (int j = 0; j < 128 / 8; j++) {
		uint32_t ah[4], al[4];
		if (pr) {
			frag_a(ah, al, sq + 16 * rm * IT_P1 + 8 * j, IT_P1, gl,
			       tl);
		} else {
			const uint4 x0 = *(const uint4 *)(sKq +
							   4 * it_quad(16 * rm + gl, j, tl)),
				    x1 = *(const uint4 *)(sKq +
							   4 * it_quad(16 * rm + gl + 8, j,
								       tl));
			ah[0] = x0.x, ah[1] = x1.x, ah[2] = x0.y, ah[3] = x1.y;
			al[0] = x0.z, al[1] = x1.z, al[2] = x0.w, al[3] = x1.w;
		}
#pragma unroll
		for (int i = 0; i < NT; i++)
			if (i < rn) {
				const uint4 b = *(const uint4 *)(sKq +
								  4 * it_quad(8 * (r0 + i) + gl, j,
									      tl));
				const uint32_t bh[2] = {b.x, b.y},
					       bl[2] = {b.z, b.w};
				mma3x(acc[i], ah, al, bh, bl);
			}
	}
}

static __global__ void __launch_bounds__(256, 2)
    k_intra_tc2(float *ws, const float *q, const float *k, int ldqk,
		const float *v, int ldv, const float *g, const float *beta,
		int T, int Hk, int Hv)
{
	kcu_pdl_enter();
	constexpr int DK = 128, DV = 128, Q4 = DK / 4;
	extern __shared__ __align__(16) float ism[];
	uint32_t *sKq = (uint32_t *)ism; /* k split, it_quad */
	float *sk = ism;		 /* then beta e^G k [C][IT_P2] */
	float *sX = sk + C * IT_P2;	 /* then A by columns, X by rows */
	float *sq = ism + C * 256;	 /* q [C][IT_P1], then beta v [C][IT_P2] */
	float *sG = sq + C * IT_P2;	 /* [C] */
	float *sb = sG + C;		 /* [C] beta */
	float *sEq = sb + C;		 /* [C] e^G */
	const int c = blockIdx.x, h = blockIdx.y, t0 = c * C;
	const int n = T - t0 < C ? T - t0 : C;
	const int tid = threadIdx.x, warp = tid >> 5, gl = (tid & 31) >> 2,
		  tl = tid & 3;
	const int mt = warp & 3, pr = warp >> 2;
	float *u = ws + ((size_t)c * Hv + h) * unit_floats(DK, DV);

	const size_t kq0 = (size_t)t0 * ldqk + (size_t)(h / (Hv / Hk)) * DK;
	for (int e = tid; e < C * Q4; e += 256) {
		int i = e / Q4, p = (e % Q4) * 4;
		cp16(sq + i * IT_P1 + p, q + kq0 + (size_t)(i < n ? i : 0) * ldqk + p,
		     i < n);
	}
	cp_commit();
	/* k's quads: thread e takes row e / 16's k-step e % 16 (zeros past
	 * n) */
	for (int e = tid; e < C * 16; e += 256) {
		const int i = e >> 4, j = e & 15;
		float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), b = a;
		if (i < n) {
			const float4 *src =
			    (const float4 *)(k + kq0 + (size_t)i * ldqk + 8 * j);
			a = src[0];
			b = src[1];
		}
		const float x[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
		for (int tt = 0; tt < 4; tt++) {
			const float y[2] = {x[tt], x[tt + 4]};
			uint32_t hi[2], lo[2];
			tf32_split(y, hi, lo);
			*(uint4 *)(sKq + 4 * it_quad(i, j, tt)) =
			    make_uint4(hi[0], hi[1], lo[0], lo[1]);
		}
	}
	intra_gates(sG, sb, g, beta, t0, n, h, Hv);
	for (int i = tid; i < C; i += 256) {
		sEq[i] = i < n ? expf(sG[i]) : 0.0f;
		u[off_G(DK, DV) + i] = i < n ? sG[i] : 0.0f;
	}
	cp_wait<0>();
	__syncthreads(); /* k's quads, q and e^G in */

	/* the products: k_intra_tc's runs (m-tile rm, n-tiles r0 .. r0 + rn
	 * - 1; a second run of four at most), their accumulators kept until
	 * the quads and q are read */
	int rms[2], r0s[2], rns[2];
	for (int r = 0; r < 2; r++)
		intra_tc_share(mt, r, rms[r], r0s[r], rns[r]);
	float acc0[5][4] = {}, acc1[4][4] = {};
	intra2_run(acc0, sKq, sq, rms[0], r0s[0], rns[0], pr, gl, tl);
	intra2_run(acc1, sKq, sq, rms[1], r0s[1], rns[1], pr, gl, tl);
	__syncthreads(); /* k's quads and q read */
	/* k again, as it is, and v where q was */
	const float *vc = v + (size_t)t0 * ldv + (size_t)h * DV;
	for (int e = tid; e < C * Q4; e += 256) {
		int i = e / Q4, p = (e % Q4) * 4;
		cp16(sk + i * IT_P2 + p, k + kq0 + (size_t)(i < n ? i : 0) * ldqk + p,
		     i < n);
		cp16(sq + i * IT_P2 + p, vc + (size_t)(i < n ? i : 0) * ldv + p,
		     i < n);
	}
	cp_commit();
	/* A_ij = (beta_i k_i . k_j) e^(G_i - G_j) (j < i) into shared memory
	 * by columns, Am_ij = (q_i . k_j) e^(G_i - G_j) (j <= i) to the
	 * workspace; zeros above and past n */
	float *Am = u + off_A(DK, DV);
	intra_tc_put(acc0, Am, sX, sG, sb, rms[0], r0s[0], rns[0], pr, n, gl,
		   tl);
	intra_tc_put(acc1, Am, sX, sG, sb, rms[1], r0s[1], rns[1], pr, n, gl,
		   tl);
	intra_tc_zeros(Am, sX, mt, pr, gl, tl);
	cp_wait<0>();
	__syncthreads(); /* A whole; k and v in */
	/* beta e^G k and beta v, in place */
	for (int e = tid; e < C * Q4; e += 256) {
		int i = e / Q4, p = (e % Q4) * 4;
		float4 *kp = (float4 *)(sk + i * IT_P2 + p),
		       *vp = (float4 *)(sq + i * IT_P2 + p);
		const float4 a = *kp, w = *vp;
		const float bb = sb[i], eq = sEq[i];
		*kp = make_float4((a.x * bb) * eq, (a.y * bb) * eq,
				  (a.z * bb) * eq, (a.w * bb) * eq);
		*vp = make_float4(w.x * bb, w.y * bb, w.z * bb, w.w * bb);
	}
	/* X = (I + A)^-1: column tid of X from e_tid, right-looking */
	float xr[C];
	if (tid < C) {
#pragma unroll
		for (int i = 0; i < C; i++)
			xr[i] = i == tid ? 1.0f : 0.0f;
		subst_col(xr, sX, IT_PX);
	}
	__syncthreads(); /* A read; beta e^G k and beta v made */
	if (tid < C)
#pragma unroll
		for (int i = 0; i < C; i++)
			sX[i * IT_PX + tid] = xr[i];
	__syncthreads(); /* X whole */
	/* W = X (beta e^G k) (w < 4), U = X (beta v) */
	intra_tc_wu((pr ? sq : sk) + 32 * mt, sX,
		    u + (pr ? off_U(DK) : 0) + 32 * mt, gl, tl);
}
#endif
