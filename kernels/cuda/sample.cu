/* sample.cu: sample() (ops.h) on the device, the same rule and the same
 * double arithmetic as kern_sample_host (kernels/sample.c, sample_rule.h),
 * so the same logits and draw give the same token on either backend.
 *
 * Greedy (the lowest index among the maxima) is logprobs()' first kernel
 * with one candidate a block, then one block's argmax over the blocks'
 * bests (k_pick): 0.025 ms at 248,320 logits on an H100, where one block
 * of 1,024 threads scanning them all took 0.071. Otherwise
 * the keys (ksr_key) are sorted with their indices by CUB's radix sort,
 * which is stable: equal keys keep index order, the rule's (logit desc,
 * index asc). Then one block of 256 threads a KERN_SAMPLE_BLOCK of
 * candidates computes w_i and the block's running sums R in order (one
 * thread, the rule's sequence of adds), and one block finishes: the blocks'
 * prefix P in order, min_p, top_p and the draw as searches for a first
 * index. Every double product and sum is an explicitly rounded intrinsic.
 * The picked id goes to dev_id and, through pinned memory, to the host.
 *
 * logprobs() (ops.h) is three kernels: each block of KERN_SAMPLE_BLOCK
 * logits finds its largest key and its n first candidates in the rule's
 * order (n rounds of a block argmax); each block then takes mx from the
 * blocks' maxima and sums its weights in order (one thread, as sample's
 * R); one block finishes: S in block order, kern_log_det(S), the token's
 * value and n rounds of an argmax over the blocks' candidates. */
#include <cub/cub.cuh>

#include "cuda.cuh"
#include "sample_rule.h"

#define SMP_FIN 1024 /* threads of the finishing block */
/* The result words: sample()'s id at 0; logprobs()' ids at 0, its values
 * (floats) from SMP_RES_LP. */
#define SMP_RES 64
#define SMP_RES_LP 32
static_assert(KERN_LOGPROBS_MAX <= SMP_RES_LP &&
		  KERN_LOGPROBS_MAX + 1 <= SMP_RES - SMP_RES_LP,
	      "logprobs' result fits the result words");

/* The scratch, carved from c->smp for c->smp_v candidates. */
typedef struct smp_lay {
	float *kin, *kout;
	int32_t *iin, *iout;
	double *w, *R, *P;
	int32_t *res;
	void *cub;
} smp_lay;

static size_t al256(size_t n)
{
	return (n + 255) & ~(size_t)255;
}

static size_t smp_layout(void *base, int V, size_t cub_bytes, smp_lay *L)
{
	size_t o = 0, v = (size_t)V;
	char *b = (char *)base;
#define TAKE(f, T, n)                                                          \
	do {                                                                   \
		if (L)                                                         \
			L->f = (T *)(b + o);                                   \
		o += al256((n) * sizeof(T));                                   \
	} while (0)
	TAKE(kin, float, v);
	TAKE(kout, float, v);
	TAKE(iin, int32_t, v);
	TAKE(iout, int32_t, v);
	TAKE(w, double, v);
	TAKE(R, double, v);
	TAKE(P, double, v / KERN_SAMPLE_BLOCK + 2);
	TAKE(res, int32_t, SMP_RES);
#undef TAKE
	if (L)
		L->cub = b + o;
	return o + al256(cub_bytes);
}

int kcu_sample_reserve(kern_ctx *c, int V)
{
	if (V <= 0)
		return 0;
	size_t cub_bytes = 0;
	cudaError_t e = cub::DeviceRadixSort::SortPairsDescending(
	    (void *)NULL, cub_bytes, (const float *)NULL, (float *)NULL,
	    (const int32_t *)NULL, (int32_t *)NULL, V);
	if (e != cudaSuccess)
		return kcu_fail(c, e, "cub sort size", __FILE__, __LINE__);
	size_t need = smp_layout(NULL, V, cub_bytes, NULL);
	void *p;
	KCU(c, cudaMalloc(&p, need));
	cudaFree(c->smp);
	c->smp = p;
	c->smp_bytes = need;
	c->smp_cub_bytes = cub_bytes;
	c->smp_v = V;
	if (!c->smp_host)
		KCU(c, cudaMallocHost((void **)&c->smp_host,
				      SMP_RES * sizeof(int32_t)));
	return 0;
}

void kcu_sample_fini(kern_ctx *c)
{
	cudaFree(c->smp);
	c->smp = NULL;
	if (c->smp_host)
		cudaFreeHost(c->smp_host);
	c->smp_host = NULL;
	c->smp_v = 0;
}

/* ---- greedy's order: the lowest index among the maxima ---- */

static __device__ inline void best_of(float *bk, int *bi, float k, int i)
{
	if (k > *bk || (k == *bk && i < *bi)) {
		*bk = k;
		*bi = i;
	}
}

/* ---- the sorted rule ---- */

__global__ void k_keys(const float *logits, int V, float *kin, int32_t *iin)
{
	kcu_pdl_enter();
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < V) {
		kin[i] = ksr_key(logits[i]);
		iin[i] = i;
	}
}

/* A block of KERN_SAMPLE_BLOCK candidates: w_i, then R (the running sum
 * from the block's start) in order by one thread. */
__global__ void __launch_bounds__(KERN_SAMPLE_BLOCK)
    k_weights(const float *kout, int n, double temp, double *w, double *R)
{
	kcu_pdl_enter();
	__shared__ double sw[KERN_SAMPLE_BLOCK];
	const double mx = (double)kout[0];
	int i = blockIdx.x * KERN_SAMPLE_BLOCK + threadIdx.x;
	if (i < n) {
		double x = ksr_exp(__ddiv_rn(__dsub_rn((double)kout[i], mx), temp));
		w[i] = x;
		sw[threadIdx.x] = x;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		int m = n - blockIdx.x * KERN_SAMPLE_BLOCK;
		if (m > KERN_SAMPLE_BLOCK)
			m = KERN_SAMPLE_BLOCK;
		double r = 0.0;
		for (int j = 0; j < m; j++) {
			r = __dadd_rn(r, sw[j]);
			R[blockIdx.x * KERN_SAMPLE_BLOCK + j] = r;
		}
	}
}

/* C(k) of ops.h's rule, k >= 1. */
static __device__ inline double cum(const double *P, const double *R, int k)
{
	int b = k / KERN_SAMPLE_BLOCK;
	return k % KERN_SAMPLE_BLOCK == 0 ? __dadd_rn(P[b], 0.0)
					  : __dadd_rn(P[b], R[k - 1]);
}

/* The least k in [lo, hi) for which pred holds, else hi: every thread
 * tests a strided share, the block takes the minimum. */
static __device__ inline int block_min(int v, int *sh)
{
	sh[threadIdx.x] = v;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s >>= 1) {
		if (threadIdx.x < s && sh[threadIdx.x + s] < sh[threadIdx.x])
			sh[threadIdx.x] = sh[threadIdx.x + s];
		__syncthreads();
	}
	int r = sh[0];
	__syncthreads();
	return r;
}

__global__ void __launch_bounds__(SMP_FIN)
    k_finish(const float *kout, const int32_t *iout, int n, const double *w,
	     const double *R, double *P, float min_p, float top_p,
	     uint64_t draw, int32_t *res, int32_t *dev_id)
{
	kcu_pdl_enter();
	__shared__ int sh[SMP_FIN];
	__shared__ double tot;
	const float mx = kout[0];
	const int tid = threadIdx.x;
	int pick;
	if (mx != mx || mx == INFINITY || mx == -INFINITY) {
		pick = 0; /* nothing to weigh against */
		goto out;
	}
	if (tid == 0) {
		int nb = n / KERN_SAMPLE_BLOCK;
		P[0] = 0.0;
		for (int b = 0; b < nb; b++)
			P[b + 1] = __dadd_rn(P[b], R[(b + 1) * KERN_SAMPLE_BLOCK - 1]);
	}
	__syncthreads();
	{
		int kept = n;
		if (min_p > 0.0f) {
			int f = n;
			for (int k = 1 + tid; k < n; k += blockDim.x)
				if (!(w[k] >= (double)min_p)) {
					f = k;
					break;
				}
			kept = block_min(f, sh);
		}
		if (top_p > 0.0f && top_p < 1.0f) {
			if (tid == 0)
				tot = __dmul_rn((double)top_p, cum(P, R, n));
			__syncthreads();
			double target = tot;
			int f = kept;
			for (int k = 1 + tid; k < kept; k += blockDim.x)
				if (cum(P, R, k) >= target) {
					f = k;
					break;
				}
			kept = block_min(f, sh);
		}
		double total = cum(P, R, kept);
		double u = __dmul_rn(__dmul_rn((double)(draw >> 11),
					       1.0 / 9007199254740992.0),
				     total);
		int f = kept - 1;
		for (int i = tid; i < kept; i += blockDim.x)
			if (u < cum(P, R, i + 1)) {
				f = i;
				break;
			}
		pick = block_min(f, sh);
	}
out:
	if (tid == 0) {
		res[0] = iout[pick];
		if (dev_id)
			*dev_id = iout[pick];
	}
}

/* What sample() and logprobs() check first (both synchronise, so neither
 * may be captured; reserve() sized the scratch for V), then the scratch's
 * layout into *L. */
static int smp_begin(kern_queue *q, int V, const char *what, smp_lay *L)
{
	if (q->capturing)
		return MOOR_ERANGE;
	kern_ctx *c = q->ctx;
	if (V > c->smp_v) {
		moor_err("%s: %d logits, reserve() sized %d", what, V, c->smp_v);
		return MOOR_ERANGE;
	}
	kcu_use(c);
	smp_layout(c->smp, c->smp_v, c->smp_cub_bytes, L);
	return 0;
}

/* ---- logprobs() ---- */

/* The block's best of every thread's (*k, *i) by best_of, through sk and
 * si (blockDim.x each), into every thread's *k and *i. */
static __device__ inline void block_best(float *k, int *i, float *sk, int *si)
{
	sk[threadIdx.x] = *k;
	si[threadIdx.x] = *i;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s >>= 1) {
		if (threadIdx.x < s) {
			float a = sk[threadIdx.x];
			int ai = si[threadIdx.x];
			best_of(&a, &ai, sk[threadIdx.x + s], si[threadIdx.x + s]);
			sk[threadIdx.x] = a;
			si[threadIdx.x] = ai;
		}
		__syncthreads();
	}
	*k = sk[0];
	*i = si[0];
	__syncthreads(); /* sk and si are rewritten next */
}

/* Block b's largest key to bmax[b], its n first candidates (n >= 1) in the
 * rule's order to ck/ci[b n ..], padded with (-inf, INT_MAX). */
__global__ void __launch_bounds__(KERN_SAMPLE_BLOCK)
    k_lp_block(const float *logits, int V, int n, float *bmax, float *ck,
	       int32_t *ci)
{
	kcu_pdl_enter();
	__shared__ float rk[KERN_SAMPLE_BLOCK];
	__shared__ int ri[KERN_SAMPLE_BLOCK];
	const int tid = threadIdx.x;
	const int i = blockIdx.x * KERN_SAMPLE_BLOCK + tid;
	float k = i < V ? ksr_key(logits[i]) : -INFINITY;
	int idx = i < V ? i : INT_MAX;
	for (int r = 0; r < n; r++) {
		float wk = k;
		int wi = idx;
		block_best(&wk, &wi, rk, ri);
		if (tid == 0) {
			if (r == 0)
				bmax[blockIdx.x] = wk;
			ck[(size_t)blockIdx.x * n + r] = wk;
			ci[(size_t)blockIdx.x * n + r] = wi;
		}
		if (idx == wi) { /* taken (padding stays padding) */
			k = -INFINITY;
			idx = INT_MAX;
		}
	}
}

/* Greedy's finish: the best of the nb blocks' bests (k_lp_block with
 * n = 1) to res[0] and dev_id. Exact: the lowest index among the maxima
 * whatever the order. */
__global__ void __launch_bounds__(SMP_FIN)
    k_pick(const float *ck, const int32_t *ci, int nb, int32_t *res,
	   int32_t *dev_id)
{
	kcu_pdl_enter();
	__shared__ float sk[SMP_FIN];
	__shared__ int si[SMP_FIN];
	float k = -INFINITY;
	int i = INT_MAX;
	for (int j = threadIdx.x; j < nb; j += SMP_FIN)
		best_of(&k, &i, ck[j], ci[j]);
	block_best(&k, &i, sk, si);
	if (threadIdx.x == 0) {
		res[0] = i;
		if (dev_id)
			*dev_id = i;
	}
}

/* The largest of bmax[0..nb), by a block of blockDim.x threads (sh holds
 * blockDim.x floats). Exact: a maximum has no order. */
static __device__ inline float block_max(const float *bmax, int nb, float *sh)
{
	float m = -INFINITY;
	for (int j = threadIdx.x; j < nb; j += blockDim.x)
		m = fmaxf(m, bmax[j]);
	sh[threadIdx.x] = m;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s >>= 1) {
		if (threadIdx.x < s)
			sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
		__syncthreads();
	}
	m = sh[0];
	__syncthreads();
	return m;
}

/* Block b's sum of w_i in index order from +0 to part[b]. */
__global__ void __launch_bounds__(KERN_SAMPLE_BLOCK)
    k_lp_sum(const float *logits, int V, const float *bmax, int nb,
	     double *part)
{
	kcu_pdl_enter();
	__shared__ float sh[KERN_SAMPLE_BLOCK];
	__shared__ double sw[KERN_SAMPLE_BLOCK];
	const float mx = block_max(bmax, nb, sh);
	const int i = blockIdx.x * KERN_SAMPLE_BLOCK + threadIdx.x;
	if (i < V)
		sw[threadIdx.x] = ksr_exp(
		    __dsub_rn((double)ksr_key(logits[i]), (double)mx));
	__syncthreads();
	if (threadIdx.x == 0) {
		int m = V - blockIdx.x * KERN_SAMPLE_BLOCK;
		if (m > KERN_SAMPLE_BLOCK)
			m = KERN_SAMPLE_BLOCK;
		double r = 0.0;
		for (int j = 0; j < m; j++)
			r = __dadd_rn(r, sw[j]);
		part[blockIdx.x] = r;
	}
}

/* S, kern_log_det(S), the token's value, then n rounds of an argmax over
 * the nb n candidates (a winner's slot marked taken): ids to res[0..n),
 * values to res[SMP_RES_LP..] as floats. */
__global__ void __launch_bounds__(SMP_FIN)
    k_lp_fin(const float *logits, int tok, int n, const float *bmax, int nb,
	     const double *part, float *ck, int32_t *ci, int32_t *res)
{
	kcu_pdl_enter();
	__shared__ float sk[SMP_FIN];
	__shared__ int si[SMP_FIN];
	__shared__ double sd[SMP_FIN];
	__shared__ double S, lnS;
	const int tid = threadIdx.x;
	const float mx = block_max(bmax, nb, sk);
	float *out = (float *)(res + SMP_RES_LP);
	const int finite = mx > -INFINITY && mx < INFINITY;
	if (tid == 0)
		S = 0.0;
	/* the sums in order, SMP_FIN at a time through shared memory (one
	 * thread's dependent loads from L2 would cost ~0.3 ms at 970) */
	for (int b0 = 0; finite && b0 < nb; b0 += SMP_FIN) {
		if (b0 + tid < nb)
			sd[tid] = part[b0 + tid];
		__syncthreads();
		if (tid == 0) {
			double a = S;
			for (int b = 0; b < SMP_FIN && b0 + b < nb; b++)
				a = __dadd_rn(a, sd[b]);
			S = a;
		}
		__syncthreads();
	}
	if (tid == 0) {
		double l = finite ? ksr_log(S) : 0.0;
		lnS = l;
		out[0] = ksr_lp(ksr_key(logits[tok]), mx, l);
	}
	__syncthreads();
	const int nc = nb * n;
	for (int r = 0; r < n; r++) {
		float wk = -INFINITY;
		int wi = INT_MAX;
		for (int j = tid; j < nc; j += SMP_FIN)
			best_of(&wk, &wi, ck[j], ci[j]);
		block_best(&wk, &wi, sk, si);
		if (tid == 0) {
			res[r] = wi;
			out[1 + r] = ksr_lp(wk, mx, lnS);
		}
		/* an index is among one block's candidates at most once */
		for (int j = tid; j < nc; j += SMP_FIN)
			if (ci[j] == wi) {
				ck[j] = -INFINITY;
				ci[j] = INT_MAX;
			}
		__syncthreads();
	}
}

int kcu_logprobs(kern_queue *q, const float *logits, int V, int32_t tok,
		 int n_top, float *lp, int32_t *ids)
{
	if (!q || !logits || V <= 0 || tok < 0 || tok >= V || n_top < 0 ||
	    n_top > KERN_LOGPROBS_MAX || n_top > V || !lp || (n_top && !ids))
		return MOOR_ERANGE;
	kern_ctx *c = q->ctx;
	smp_lay L;
	int rc = smp_begin(q, V, "logprobs", &L);
	if (rc)
		return rc;
	/* sample()'s scratch: nb n <= V candidates (nb = ceil(V / 256),
	 * n <= 20, n <= V) in kin and iin, the maxima in kout, the sums in
	 * R */
	const int nb = (V + KERN_SAMPLE_BLOCK - 1) / KERN_SAMPLE_BLOCK;
	const int n = n_top ? n_top : 1; /* round 0 finds the block's max */
	kcu_go(q, k_lp_block, nb, KERN_SAMPLE_BLOCK, 0, logits, V, n, L.kout,
	       L.kin, L.iin);
	KCU_LAUNCHED(c);
	kcu_go(q, k_lp_sum, nb, KERN_SAMPLE_BLOCK, 0, logits, V,
	       (const float *)L.kout, nb, L.R);
	KCU_LAUNCHED(c);
	kcu_go(q, k_lp_fin, 1, SMP_FIN, 0, logits, (int)tok, n_top,
	       (const float *)L.kout, nb, (const double *)L.R, L.kin, L.iin,
	       L.res);
	KCU_LAUNCHED(c);
	KCU(c, cudaMemcpyAsync(c->smp_host, L.res, SMP_RES * sizeof(int32_t),
			       cudaMemcpyDeviceToHost, q->s));
	KCU(c, cudaStreamSynchronize(q->s));
	const float *v = (const float *)(c->smp_host + SMP_RES_LP);
	lp[0] = v[0];
	for (int r = 0; r < n_top; r++) {
		ids[r] = c->smp_host[r];
		lp[1 + r] = v[1 + r];
	}
	return 0;
}

int kcu_sample(kern_queue *q, const float *logits, int V,
	       const kern_sampling *p, uint64_t draw, int32_t *dev_id,
	       int32_t *host_id)
{
	if (!q || !logits || V <= 0 || !p || !host_id)
		return MOOR_ERANGE;
	kern_ctx *c = q->ctx;
	smp_lay L;
	int rc = smp_begin(q, V, "sample", &L);
	if (rc)
		return rc;
	if (p->temperature <= 0.0f || p->top_k == 1) {
		const int nb = (V + KERN_SAMPLE_BLOCK - 1) / KERN_SAMPLE_BLOCK;
		kcu_go(q, k_lp_block, nb, KERN_SAMPLE_BLOCK, 0, logits, V, 1,
		       L.kout, L.kin, L.iin);
		KCU_LAUNCHED(c);
		kcu_go(q, k_pick, 1, SMP_FIN, 0, (const float *)L.kin,
		       (const int32_t *)L.iin, nb, L.res, dev_id);
		KCU_LAUNCHED(c);
	} else {
		kcu_go(q, k_keys, kcu_blocks((size_t)V, 256), 256, 0, logits, V,
		       L.kin, L.iin);
		KCU_LAUNCHED(c);
		size_t cb = c->smp_cub_bytes;
		KCU(c, cub::DeviceRadixSort::SortPairsDescending(
			   L.cub, cb, L.kin, L.kout, L.iin, L.iout, V, 0,
			   (int)(8 * sizeof(float)), q->s));
		int n = p->top_k > 0 && p->top_k < V ? p->top_k : V;
		int nb = (n + KERN_SAMPLE_BLOCK - 1) / KERN_SAMPLE_BLOCK;
		kcu_go(q, k_weights, nb, KERN_SAMPLE_BLOCK, 0, L.kout, n,
		       (double)p->temperature, L.w, L.R);
		KCU_LAUNCHED(c);
		kcu_go(q, k_finish, 1, SMP_FIN, 0, L.kout, L.iout, n, L.w, L.R,
		       L.P, p->min_p, p->top_p, draw, L.res, dev_id);
		KCU_LAUNCHED(c);
	}
	KCU(c, cudaMemcpyAsync(c->smp_host, L.res, sizeof(int32_t),
			       cudaMemcpyDeviceToHost, q->s));
	KCU(c, cudaStreamSynchronize(q->s));
	*host_id = c->smp_host[0];
	return 0;
}
