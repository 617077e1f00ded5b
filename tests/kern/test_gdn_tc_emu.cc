// test_gdn_tc_emu: the chunked delta rule's tensor-core kernels
// (kernels/cuda/gdn_tc.cuh: k_intra_tc, k_hstate_tc, k_out_tc, taken at
// MOOR_GDN_TC=1) emulated on the host, against SPEC 5.5's recurrent form
// in double precision. A block runs as 256 threads with a barrier for
// __syncthreads; mma.m16n8k8's tf32 product is emulated per PTX's
// fragment layout (an A value's lane and register from its row and
// column, B's and the accumulators' likewise), so a wrong index in a
// kernel shows here without a GPU. What it cannot show: cp.async's timing
// (copies land at once here), bank conflicts, speed. test_kern_backends'
// case_gdn_tc runs the same kernels on the device.
//
// Cases: the 27B's head size (dk = dv = 128), 136 tokens (two sub-chunks
// and a short third), one key head for two value heads, then two key
// heads for four value heads at 70 tokens (another key head's rows).
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#define KCU_HOST_EMU 1
#define KERN_GDN_CHUNK 64
#define KERN_ACT_F32 0
#define KERN_ACT_BF16 1
#define __global__
#define __device__
#define __host__
#define __shared__
#define __align__(x)
#define __launch_bounds__(...)

// ---- host stand-ins for what cuda.cuh gives the kernels ----
struct float4 {
	float x, y, z, w;
};
struct float2 {
	float x, y;
};
static inline float4 make_float4(float a, float b, float c, float d)
{
	return {a, b, c, d};
}
static inline float2 make_float2(float a, float b)
{
	return {a, b};
}
struct uint2 {
	uint32_t x, y;
};
struct uint4 {
	uint32_t x, y, z, w;
};
static inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d)
{
	return {a, b, c, d};
}
struct uint3 {
	unsigned x, y, z;
};
static thread_local uint3 threadIdx;
static uint3 blockIdx, blockDim;
static std::barrier<> *g_bar;	  // the block's __syncthreads
static std::barrier<> *g_wbar[8]; // a warp's, for mma.sync
#define __syncthreads() g_bar->arrive_and_wait()
static inline void kcu_pdl_enter(void)
{
}
static inline void cp16(void *d, const void *s, int ok)
{
	if (ok)
		memcpy(d, s, 16);
	else
		memset(d, 0, 16);
}
static inline void cp_commit(void)
{
}
template <int N> static inline void cp_wait(void)
{
}
static inline float __uint_as_float(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}
static inline float kcu_rnd(float x, int act)
{
	(void)act; // the cases run act = F32
	return x;
}
// cvt.rna.tf32.f32: 10 bits of fraction, the rest rounded half away from
// zero (the magnitude's bits: adding half of the last kept bit)
static inline uint32_t tf32_of(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	if ((u & 0x7f800000) != 0x7f800000)
		u += 0x1000;
	return u & 0xffffe000;
}
// mma.sync.m16n8k8.row.col.f32.tf32.tf32.f32, D = A B + C, the tensor core
// reading 19 bits of each operand. Lane l = 4 g + t (g = l / 4, t = l % 4)
// holds A (16 x 8) [g][t], [g + 8][t], [g][t + 4], [g + 8][t + 4]; B (8 x
// 8) [t][g], [t + 4][g]; C and D (16 x 8) [g][2 t], [g][2 t + 1], [g + 8][2
// t], [g + 8][2 t + 1]. The lanes meet at the warp's barrier to trade,
// through one of two stages a call in turn: a lane can write the next
// call's stage while others read this one's, but not the one after (that
// needs the next barrier, which every lane reaches only once done here).
struct stage {
	uint32_t a[32][4], b[32][2];
};
static stage g_stage[8][2];
static thread_local int t_turn;
static inline float tf32v(uint32_t u)
{
	return __uint_as_float(u & 0xffffe000);
}
static inline void mma1688(float (&c)[4], const uint32_t (&a)[4],
			   const uint32_t (&b)[2])
{
	const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
	stage &st = g_stage[w][t_turn];
	t_turn ^= 1;
	memcpy(st.a[l], a, sizeof a);
	memcpy(st.b[l], b, sizeof b);
	g_wbar[w]->arrive_and_wait();
	const int g = l >> 2, t = l & 3;
	for (int e = 0; e < 4; e++) {
		const int m = g + 8 * (e >> 1), n = 2 * t + (e & 1);
		float s = c[e];
		for (int k = 0; k < 8; k++)
			s = fmaf(tf32v(st.a[(m % 8) * 4 + k % 4]
					   [(m >= 8) + 2 * (k >= 4)]),
				 tf32v(st.b[n * 4 + k % 4][k >= 4]), s);
		c[e] = s;
	}
}
// the kernels' shared memory (each names its own; they run one at a time)
static float tsm[40000], otm[40000], ism[40000], fsm[57000];

#include "cuda/gdn_tc.cuh" /* and gdn_ws.cuh */

// a grid, block by block, each block's threads at once; shared memory NaN
// at each block's start
static void run_grid(uint3 grid, const std::function<void()> &body)
{
	blockDim = {256, 1, 1};
	for (unsigned z = 0; z < grid.z; z++)
		for (unsigned y = 0; y < grid.y; y++)
			for (unsigned x = 0; x < grid.x; x++) {
				blockIdx = {x, y, z};
				for (float *m : {tsm, otm, ism})
					for (int i = 0; i < 40000; i++)
						m[i] = NAN;
				for (float &x : fsm)
					x = NAN;
				std::barrier<> bar(256);
				g_bar = &bar;
				for (int w = 0; w < 8; w++)
					g_wbar[w] = new std::barrier<>(32);
				std::vector<std::thread> th;
				for (unsigned t = 0; t < 256; t++)
					th.emplace_back([t, &body] {
						threadIdx = {t, 0, 0};
						t_turn = 0;
						body();
					});
				for (auto &t : th)
					t.join();
				for (int w = 0; w < 8; w++)
					delete g_wbar[w];
			}
}

static double rnd(void)
{
	return (double)rand() / RAND_MAX * 2 - 1;
}

// how many of got[0, n) lie outside case_gdn's tolerance of ref (the
// first few named on stderr); *worst the largest |got - ref|
static int outside(const char *what, const float *got, const double *ref,
		   size_t n, double *worst)
{
	int bad = 0;
	for (size_t i = 0; i < n; i++) {
		const double d = fabs(got[i] - ref[i]);
		if (!(d <= 1e-4 + 1e-3 * fabs(ref[i])) && bad++ < 5)
			fprintf(stderr,
				"  %s[%zu]: %.9g, the recurrent form %.9g\n",
				what, i, got[i], ref[i]);
		if (!(d <= *worst))
			*worst = d;
	}
	return bad;
}

// one case: returns the number of values outside the tolerance
static int one(int T, int Hk, int Hv)
{
	const int dk = 128, dv = 128, ldqk = Hk * dk, ldv = Hv * dv;
	std::vector<float> q((size_t)T * ldqk), k((size_t)T * ldqk),
	    v((size_t)T * ldv), g((size_t)T * Hv), beta((size_t)T * Hv),
	    S0((size_t)Hv * dk * dv);
	// q and k as the model feeds them (SPEC 5.4): unit k, q of norm dk^-0.5
	for (int t = 0; t < T; t++)
		for (int h = 0; h < Hk; h++) {
			float *qp = &q[(size_t)t * ldqk + h * dk],
			      *kp = &k[(size_t)t * ldqk + h * dk];
			double nq = 0, nk = 0;
			for (int d = 0; d < dk; d++) {
				qp[d] = (float)rnd();
				kp[d] = (float)rnd();
				nq += (double)qp[d] * qp[d];
				nk += (double)kp[d] * kp[d];
			}
			for (int d = 0; d < dk; d++) {
				qp[d] = (float)(qp[d] /
						(sqrt(nq) * sqrt((double)dk)));
				kp[d] = (float)(kp[d] / sqrt(nk));
			}
		}
	for (float &x : v)
		x = (float)rnd();
	for (float &x : g)
		x = (float)(-0.01 - 0.145 * (rnd() + 1));
	for (float &x : beta)
		x = (float)(0.1 + 0.4 * (rnd() + 1));
	for (float &x : S0)
		x = (float)(0.1 * rnd());

	// SPEC 5.5 in double
	std::vector<double> Sr(S0.begin(), S0.end()), orf((size_t)T * ldv);
	for (int h = 0; h < Hv; h++) {
		double *S = &Sr[(size_t)h * dk * dv];
		const int kh = h / (Hv / Hk);
		for (int t = 0; t < T; t++) {
			const double eg = exp((double)g[(size_t)t * Hv + h]),
				     b = beta[(size_t)t * Hv + h];
			const float *kt = &k[(size_t)t * ldqk + kh * dk],
				    *qt = &q[(size_t)t * ldqk + kh * dk],
				    *vt = &v[(size_t)t * ldv + h * dv];
			for (int i = 0; i < dk * dv; i++)
				S[i] *= eg;
			for (int c = 0; c < dv; c++) {
				double m = 0;
				for (int d = 0; d < dk; d++)
					m += S[d * dv + c] * kt[d];
				const double del = b * (vt[c] - m);
				for (int d = 0; d < dk; d++)
					S[d * dv + c] += kt[d] * del;
			}
			for (int c = 0; c < dv; c++) {
				double o = 0;
				for (int d = 0; d < dk; d++)
					o += S[d * dv + c] * qt[d];
				orf[(size_t)t * ldv + h * dv + c] = o;
			}
		}
	}

	// the kernels as gdn.cu launches them, on a workspace of NaNs, each
	// in the shared memory it asks for: fused 0, intra, the state pass
	// and the output (MOOR_GDN_TC=3); fused 1, intra and k_chunk_tc
	// (MOOR_GDN_TC=1)
	if (hstate_tc_smem() > sizeof tsm || out_tc_smem(dk) > sizeof otm ||
	    intra_tc_smem() > sizeof ism || chunk_tc_smem() > sizeof fsm) {
		fprintf(stderr, "a kernel asks for more shared memory than the "
				"emulation has\n");
		return 1;
	}
	int bad = 0;
	for (int fused = 0; fused < 2; fused++) {
		const int nch = (T + C - 1) / C;
		std::vector<float> ws((size_t)nch * Hv * unit_floats(dk, dv),
				      NAN),
		    S(S0), o((size_t)T * ldv, NAN);
		float *pws = ws.data(), *pS = S.data(), *po = o.data();
		const float *pq = q.data(), *pk = k.data(), *pv = v.data(),
			    *pg = g.data(), *pb = beta.data();
		run_grid({(unsigned)nch, (unsigned)Hv, 1}, [&] {
			k_intra_tc(pws, pq, pk, ldqk, pv, ldv, pg, pb, T, Hk,
				   Hv);
		});
		if (fused) {
			run_grid(
			    {(unsigned)Hv, (unsigned)(dv / CT_OC), 1}, [&] {
				    k_chunk_tc(po, pS, pws, pq, pk, ldqk, T, Hk,
					       Hv, dv, KERN_ACT_F32);
			    });
		} else {
			run_grid({(unsigned)Hv, (unsigned)(dv / TC_SW), 1},
				 [&] {
					 k_hstate_tc(pS, pws, pk, ldqk, T, Hk,
						     Hv, dv);
				 });
			run_grid(
			    {(unsigned)nch, (unsigned)Hv, (unsigned)(dv / 64)},
			    [&] {
				    k_out_tc(po, pws, pq, ldqk, T, Hk, Hv, dv,
					     KERN_ACT_F32);
			    });
		}

		// 3xTF32 keeps about fp32's precision: case_gdn's tolerance
		// (another order of fp32 sums over a contracting recurrence),
		// which a wrong fragment index misses by orders of magnitude
		double wo = 0, wS = 0;
		const int b =
		    outside("o", o.data(), orf.data(), o.size(), &wo) +
		    outside("S", S.data(), Sr.data(), S.size(), &wS);
		printf(
		    "  %s, T %d, %d key heads, %d value heads: max |o - ref| "
		    "%.3g, max |S - ref| %.3g%s\n",
		    fused ? "k_chunk_tc" : "k_hstate_tc + k_out_tc", T, Hk, Hv,
		    wo, wS, b ? ": FAIL" : "");
		bad += b;
	}
	return bad;
}

int main(void)
{
	srand(5);
	int bad = one(136, 1, 2) + one(70, 2, 4);
	printf("test_gdn_tc_emu: %s\n", bad ? "FAIL" : "ok");
	return bad ? 1 : 0;
}
