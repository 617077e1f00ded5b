/* test_kern_backends: every op through the vtable (alloc, upload, run,
 * download) on the CUDA backend against the CPU backend as the reference,
 * on ggml's test-backend-ops pattern; each case's tolerance is written
 * beside it. On the device alone, bit for bit: the same call twice
 * (determinism), the fused ops against the unfused ones they replace, a
 * kernel against the one it replaces (kept behind its switch),
 * a graph launched at another position against the direct calls,
 * fill_random and sample() against the CPU's bits.
 *
 * Exits 77 (meson's skip) with a line that says why when this build has no
 * CUDA backend or the machine no GPU. */
#include "kt.h"

typedef struct bk {
	const kern_ops *o;
	kern_ctx *c;
	kern_queue *q;
} bk;

static bk cpu, gpu;

static void *up(bk *b, const void *h, size_t n)
{
	void *p = NULL;
	if (b->o->alloc(b->c, n ? n : 4, &p)) {
		fprintf(stderr, "%s: alloc %zu failed\n", b->o->name, n);
		exit(1);
	}
	if (n)
		b->o->upload(b->q, p, h, n);
	b->o->sync(b->q);
	return p;
}

static void *zz(bk *b, size_t n)
{
	void *p = NULL;
	if (b->o->alloc(b->c, n, &p)) {
		fprintf(stderr, "%s: alloc %zu failed\n", b->o->name, n);
		exit(1);
	}
	b->o->zero(b->q, p, n);
	return p;
}

static void down(bk *b, void *h, const void *d, size_t n)
{
	int rc = b->o->download(b->q, h, d, n);
	if (!rc)
		rc = b->o->sync(b->q);
	if (rc) {
		fprintf(stderr, "%s: download: %s\n", b->o->name, moor_strerror(rc));
		exit(1);
	}
}

/* |got - ref| <= abs + rel |ref| everywhere */
static void close_all(const char *what, const float *got, const float *ref,
		      size_t n, double abs_tol, double rel)
{
	int bad = 0;
	double worst = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)got[i] - ref[i]);
		double tol = abs_tol + rel * fabs(ref[i]);
		if (!(d <= tol)) {
			if (bad++ < 5)
				fprintf(stderr, "  %s[%zu]: cuda %.9g cpu %.9g\n",
					what, i, got[i], ref[i]);
		}
		if (d > worst)
			worst = d;
	}
	ASSERT(bad == 0, "%s: %d of %zu outside tolerance (worst %.3g)", what,
	       bad, n, worst);
	printf("  %-28s max |cuda - cpu| %.3g over %zu\n", what, worst, n);
}

static float *rnd(size_t n, float lo, float hi)
{
	float *x = malloc(n * 4 + 4);
	kt_fill(x, n, lo, hi);
	return x;
}

/* ---- matmul, fused matmul_swiglu ---- */

static void one_matmul(bk *b, float *out, const float *x, const void *W,
		       int wdt, int T, int N, int K, int act)
{
	size_t wb = (size_t)N * K * (wdt == KERN_F32 ? 4 : 2);
	float *dx = up(b, x, (size_t)T * K * 4), *dy = zz(b, (size_t)T * N * 4);
	void *dw = up(b, W, wb);
	int rc = b->o->matmul(b->q, dy, N, dx, K, dw, wdt, T, N, K, act);
	ASSERT(rc == 0, "%s matmul: %s", b->o->name, moor_strerror(rc));
	down(b, out, dy, (size_t)T * N * 4);
	b->o->free(b->c, dx);
	b->o->free(b->c, dy);
	b->o->free(b->c, dw);
}

static void case_matmul(void)
{
	const int Ts[] = {1, 7, 64, 300};
	for (int dt = 0; dt < 2; dt++) {
		int wdt = dt ? KERN_F32 : KERN_BF16;
		int act = dt ? KERN_ACT_F32 : KERN_ACT_BF16;
		for (int ti = 0; ti < 4; ti++) {
			int T = Ts[ti], N = 384, K = 1024;
			void *W;
			float *wf = kt_weights((size_t)N * K, wdt, -0.05f, 0.05f, &W);
			float *x = rnd((size_t)T * K, -1, 1);
			for (size_t i = 0; i < (size_t)T * K; i++)
				x[i] = kt_to_dt(x[i], wdt);
			float *a = malloc((size_t)T * N * 4), *c = malloc((size_t)T * N * 4),
			      *c2 = malloc((size_t)T * N * 4);
			one_matmul(&cpu, a, x, W, wdt, T, N, K, act);
			one_matmul(&gpu, c, x, W, wdt, T, N, K, act);
			one_matmul(&gpu, c2, x, W, wdt, T, N, K, act);
			char nm[64];
			snprintf(nm, sizeof nm, "matmul %s T=%d", kt_dtname(wdt), T);
			/* fp32 sums of 1024 products in another order (tensor cores
			 * vs the CPU's sequence), then a bf16 rounding: one bf16 ulp */
			close_all(nm, c, a, (size_t)T * N, 1e-4, dt ? 1e-4 : 8e-3);
			ASSERT(!memcmp(c, c2, (size_t)T * N * 4),
			       "%s: two runs differ", nm);
			free(wf);
			free(W);
			free(x);
			free(a);
			free(c);
			free(c2);
		}
	}
	/* matmul_swiglu against swiglu + matmul, on the device, bit for bit
	 * (T = 1: the one-row product, T = 64: cuBLASLt) */
	for (int T = 1; gpu.o->matmul_swiglu && T <= 64; T += 63) {
		int N = 256, K = 512;
		void *W;
		float *wf = kt_weights((size_t)N * K, KERN_BF16, -0.05f, 0.05f, &W);
		float *gu = rnd((size_t)T * 2 * K, -2, 2);
		float *dgu = up(&gpu, gu, (size_t)T * 2 * K * 4);
		float *h = zz(&gpu, (size_t)T * K * 4);
		float *y1 = zz(&gpu, (size_t)T * N * 4), *y2 = zz(&gpu, (size_t)T * N * 4);
		void *dw = up(&gpu, W, (size_t)N * K * 2);
		/* swiglu wants contiguous gate and up: split them first */
		float *g = zz(&gpu, (size_t)T * K * 4), *u = zz(&gpu, (size_t)T * K * 4);
		for (int t = 0; t < T; t++) {
			gpu.o->copy(gpu.q, g + (size_t)t * K, dgu + (size_t)t * 2 * K, K * 4);
			gpu.o->copy(gpu.q, u + (size_t)t * K, dgu + (size_t)t * 2 * K + K,
				    K * 4);
		}
		gpu.o->swiglu(gpu.q, h, g, u, (size_t)T * K, KERN_ACT_BF16);
		gpu.o->matmul(gpu.q, y1, N, h, K, dw, KERN_BF16, T, N, K, KERN_ACT_BF16);
		int rc = gpu.o->matmul_swiglu(gpu.q, y2, N, dgu, dgu + K, 2 * K, dw,
					      KERN_BF16, T, N, K, KERN_ACT_BF16);
		ASSERT(rc == 0, "matmul_swiglu: %s", moor_strerror(rc));
		float *a = malloc((size_t)T * N * 4), *c = malloc((size_t)T * N * 4);
		down(&gpu, a, y1, (size_t)T * N * 4);
		down(&gpu, c, y2, (size_t)T * N * 4);
		ASSERT(!memcmp(a, c, (size_t)T * N * 4),
		       "matmul_swiglu differs from swiglu + matmul (T=%d)", T);
		free(wf);
		free(W);
		free(gu);
		free(a);
		free(c);
	}
}

/* mlp against matmul then matmul_swiglu, on the device, bit for bit, at
 * the shapes prefill gives it (x rounded to bf16 as the norms leave it;
 * T = 1 is refused: decode runs the two ops) */
static void case_mlp(void)
{
	if (!gpu.o->mlp)
		return;
	const int Ts[] = {1, 64, 300};
	for (int ti = 0; ti < 3; ti++) {
		int T = Ts[ti], H = 512, I = 768;
		void *Wg, *Wd;
		float *wg = kt_weights((size_t)2 * I * H, KERN_BF16, -0.05f, 0.05f, &Wg);
		float *wd = kt_weights((size_t)H * I, KERN_BF16, -0.05f, 0.05f, &Wd);
		float *x = rnd((size_t)T * H, -2, 2);
		for (size_t i = 0; i < (size_t)T * H; i++)
			x[i] = kt_to_dt(x[i], KERN_BF16);
		float *dx = up(&gpu, x, (size_t)T * H * 4);
		void *dg = up(&gpu, Wg, (size_t)2 * I * H * 2);
		void *dd = up(&gpu, Wd, (size_t)H * I * 2);
		float *tmp = zz(&gpu, (size_t)T * 2 * I * 4);
		float *y1 = zz(&gpu, (size_t)T * H * 4), *y2 = zz(&gpu, (size_t)T * H * 4);
		int rc = gpu.o->mlp(gpu.q, y2, H, dx, H, tmp, dg, dd, KERN_BF16, T,
				    H, I, KERN_ACT_BF16);
		ASSERT(rc == 0, "mlp T=%d: %s", T, moor_strerror(rc));
		/* one row (decode) leaves gate | up rounded in tmp: the
		 * GEMV's own, compared below */
		float *gu = malloc((size_t)T * 2 * I * 4), *gu1 = malloc((size_t)T * 2 * I * 4);
		down(&gpu, gu, tmp, (size_t)T * 2 * I * 4);
		gpu.o->matmul(gpu.q, tmp, 2 * I, dx, H, dg, KERN_BF16, T, 2 * I, H,
			      KERN_ACT_BF16);
		down(&gpu, gu1, tmp, (size_t)T * 2 * I * 4);
		if (T == 1)
			ASSERT(!memcmp(gu, gu1, (size_t)2 * I * 4),
			       "mlp T=1: gate | up differ from matmul's");
		gpu.o->matmul_swiglu(gpu.q, y1, H, tmp, tmp + I, 2 * I, dd,
				     KERN_BF16, T, H, I, KERN_ACT_BF16);
		float *a = malloc((size_t)T * H * 4), *c = malloc((size_t)T * H * 4);
		down(&gpu, a, y1, (size_t)T * H * 4);
		down(&gpu, c, y2, (size_t)T * H * 4);
		ASSERT(!memcmp(a, c, (size_t)T * H * 4),
		       "mlp differs from matmul + matmul_swiglu (T=%d)", T);
		printf("  mlp T=%-22d bit-exact against the two ops\n", T);
		free(a);
		free(c);
		free(gu);
		free(gu1);
		gpu.o->free(gpu.c, dx);
		gpu.o->free(gpu.c, dg);
		gpu.o->free(gpu.c, dd);
		gpu.o->free(gpu.c, tmp);
		gpu.o->free(gpu.c, y1);
		gpu.o->free(gpu.c, y2);
		free(wg);
		free(wd);
		free(Wg);
		free(Wd);
		free(x);
	}
}

/* ---- norms, elementwise ---- */

static void case_norms_run(void)
{
	int rows = 37, dim = 1024;
	size_t n = (size_t)rows * dim;
	void *W;
	float *wf = kt_weights(dim, KERN_BF16, -0.5f, 0.5f, &W);
	float *x = rnd(n, -3, 3), *h0 = rnd(n, -3, 3), *z = rnd(n, -3, 3);
	float *r[2][4];
	bk *bs[2] = {&cpu, &gpu};
	for (int i = 0; i < 2; i++) {
		bk *b = bs[i];
		float *dx = up(b, x, n * 4), *dz = up(b, z, n * 4);
		float *dh = up(b, h0, n * 4), *dy = zz(b, n * 4);
		void *dw = up(b, W, dim * 2);
		for (int k = 0; k < 4; k++)
			r[i][k] = malloc(n * 4);
		b->o->rmsnorm(b->q, dy, dim, dx, dim, dw, KERN_BF16, rows, dim, 1e-6f,
			      1, KERN_ACT_BF16);
		down(b, r[i][0], dy, n * 4);
		b->o->gated_rmsnorm(b->q, dy, dx, dz, 128, 1, dw, KERN_BF16,
				    rows * 8, 128, 1e-6f, KERN_ACT_BF16);
		down(b, r[i][1], dy, n * 4);
		b->o->add(b->q, dh, dx, n, KERN_ACT_BF16);
		b->o->rmsnorm(b->q, dy, dim, dh, dim, dw, KERN_BF16, rows, dim, 1e-6f,
			      1, KERN_ACT_BF16);
		down(b, r[i][2], dy, n * 4);
		b->o->swiglu(b->q, dy, dx, dz, n, KERN_ACT_BF16);
		down(b, r[i][3], dy, n * 4);
		if (i == 1 && b->o->add_rmsnorm) {
			/* the fused add + norm against the pair above: same bits */
			float *dh2 = up(b, h0, n * 4), *dy2 = zz(b, n * 4);
			float *f = malloc(n * 4), *hh = malloc(n * 4), *hh2 = malloc(n * 4);
			b->o->add_rmsnorm(b->q, dh2, dx, dy2, dw, KERN_BF16, rows, dim,
					  1e-6f, KERN_ACT_BF16);
			down(b, f, dy2, n * 4);
			down(b, hh, dh, n * 4);
			down(b, hh2, dh2, n * 4);
			ASSERT(!memcmp(f, r[1][2], n * 4) && !memcmp(hh, hh2, n * 4),
			       "add_rmsnorm differs from add + rmsnorm");
			free(f);
			free(hh);
			free(hh2);
		}
	}
	/* a sum of squares in another order, then bf16 roundings: 1 ulp */
	close_all("rmsnorm bf16", r[1][0], r[0][0], n, 1e-6, 8e-3);
	close_all("gated_rmsnorm bf16", r[1][1], r[0][1], n, 1e-6, 8e-3);
	close_all("add + rmsnorm bf16", r[1][2], r[0][2], n, 1e-6, 8e-3);
	/* expf on the device and on the host may differ by an ulp, then the
	 * bf16 roundings */
	close_all("swiglu bf16", r[1][3], r[0][3], n, 1e-6, 8e-3);
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < 4; k++)
			free(r[i][k]);
	free(wf);
	free(W);
	free(x);
	free(h0);
	free(z);
}

/* The norms of rows 1,024 wide and more in float4s (the default) and on
 * the scalar kernel (MOOR_NORM_V4=0), each against the CPU */
static void case_norms(void)
{
	case_norms_run();
	setenv("MOOR_NORM_V4", "0", 1);
	case_norms_run();
	unsetenv("MOOR_NORM_V4");
}

/* ---- the GDN ops ---- */

static void case_gdn(void)
{
	const int T = 200, Hk = 4, Hv = 8, dk = 128, dv = 128;
	int ldqk = Hk * dk, ldv = Hv * dv;
	size_t nq = (size_t)T * ldqk, nv = (size_t)T * ldv, ns = (size_t)Hv * dk * dv;
	float *qq = rnd(nq, -1, 1), *k = rnd(nq, -1, 1), *v = rnd(nv, -1, 1);
	float *g = rnd((size_t)T * Hv, -0.3f, -0.01f), *beta = rnd((size_t)T * Hv, 0.1f, 0.9f);
	float *S0 = rnd(ns, -0.1f, 0.1f);
	/* l2-normalised q and k, as the model feeds them */
	bk *bs[2] = {&cpu, &gpu};
	float *o[2][2], *S[2][2];
	for (int i = 0; i < 2; i++) {
		bk *b = bs[i];
		float *dq = up(b, qq, nq * 4), *dk_ = up(b, k, nq * 4), *dv_ = up(b, v, nv * 4);
		float *dg = up(b, g, (size_t)T * Hv * 4), *db = up(b, beta, (size_t)T * Hv * 4);
		b->o->l2norm(b->q, dq, ldqk, T, Hk, dk, 1e-6f, 1.0f / sqrtf(dk), KERN_ACT_F32);
		b->o->l2norm(b->q, dk_, ldqk, T, Hk, dk, 1e-6f, 1.0f, KERN_ACT_F32);
		float *dS = up(b, S0, ns * 4), *dS2 = up(b, S0, ns * 4);
		float *dO = zz(b, nv * 4), *dO2 = zz(b, nv * 4);
		size_t wsb = b->o->delta_ws_bytes(b->c, T, Hv, dk, dv);
		void *ws = zz(b, wsb ? wsb : 4);
		int rc = b->o->delta_chunked(b->q, dO, dS, dq, dk_, ldqk, dv_, ldv, dg, db,
					     T, Hk, Hv, dk, dv, ws, KERN_ACT_F32);
		ASSERT(rc == 0, "%s delta_chunked: %s", b->o->name, moor_strerror(rc));
		rc = b->o->delta_recurrent(b->q, dO2, dS2, dq, dk_, ldqk, dv_, ldv, dg, db,
					   T, Hk, Hv, dk, dv, KERN_ACT_F32);
		ASSERT(rc == 0, "%s delta_recurrent: %s", b->o->name, moor_strerror(rc));
		for (int j = 0; j < 2; j++) {
			o[i][j] = malloc(nv * 4);
			S[i][j] = malloc(ns * 4);
		}
		down(b, o[i][0], dO, nv * 4);
		down(b, S[i][0], dS, ns * 4);
		down(b, o[i][1], dO2, nv * 4);
		down(b, S[i][1], dS2, ns * 4);
	}
	/* fp32 arithmetic in another order over 200 steps of a contracting
	 * recurrence: relative 1e-3 of values of order 1 */
	close_all("delta_chunked o", o[1][0], o[0][0], nv, 1e-4, 1e-3);
	close_all("delta_chunked S", S[1][0], S[0][0], ns, 1e-4, 1e-3);
	close_all("delta_recurrent o", o[1][1], o[0][1], nv, 1e-4, 1e-3);
	close_all("delta_recurrent S", S[1][1], S[0][1], ns, 1e-4, 1e-3);
}

/* The chunked delta rule's SIMT kernels (MOOR_GDN_TC=0; the defaults at
 * dk below 128: k_intra_rt in half the shared memory, the state pass and
 * output in register tiles: k_hstate_rt, k_out4) against k_intra,
 * k_hstate and k_out (MOOR_GDN_RT=0), on the device, bit for bit: o, the
 * final state and the workspace (the states each sub-chunk starts from,
 * V'), at the head sizes it takes, with a short last sub-chunk (T =
 * 200). */
static void case_gdn_rt(void)
{
	const int T = 200, dks[] = {128, 64, 32};
	setenv("MOOR_GDN_TC", "0", 1);
	for (int di = 0; di < 3; di++) {
		int dk = dks[di], dv = dk, Hk = 2, Hv = 4;
		int ldqk = Hk * dk, ldv = Hv * dv;
		size_t nq = (size_t)T * ldqk, nv = (size_t)T * ldv,
		       ns = (size_t)Hv * dk * dv;
		float *qq = rnd(nq, -1, 1), *k = rnd(nq, -1, 1), *v = rnd(nv, -1, 1);
		float *g = rnd((size_t)T * Hv, -0.3f, -0.01f),
		      *beta = rnd((size_t)T * Hv, 0.1f, 0.9f);
		float *S0 = rnd(ns, -0.1f, 0.1f);
		float *dq = up(&gpu, qq, nq * 4), *dk_ = up(&gpu, k, nq * 4),
		      *dv_ = up(&gpu, v, nv * 4);
		float *dg = up(&gpu, g, (size_t)T * Hv * 4),
		      *db = up(&gpu, beta, (size_t)T * Hv * 4);
		gpu.o->l2norm(gpu.q, dq, ldqk, T, Hk, dk, 1e-6f, 1.0f / sqrtf(dk),
			      KERN_ACT_F32);
		gpu.o->l2norm(gpu.q, dk_, ldqk, T, Hk, dk, 1e-6f, 1.0f, KERN_ACT_F32);
		size_t wsb = gpu.o->delta_ws_bytes(gpu.c, T, Hv, dk, dv);
		/* r = 0: MOOR_GDN_RT=0; 1: the defaults (at dk 128 the state
		 * pass on CTA pairs, k_hstate_cl); 2: MOOR_GDN_CL=0
		 * MOOR_HSTATE_NT=128; 3: MOOR_GDN_CL=0 */
		float *ho[4], *hS[4];
		unsigned char *hw[4];
		for (int r = 0; r < 4; r++) {
			setenv("MOOR_GDN_RT", r ? "1" : "0", 1);
			if (r == 2)
				setenv("MOOR_HSTATE_NT", "128", 1);
			else
				unsetenv("MOOR_HSTATE_NT");
			if (r >= 2)
				setenv("MOOR_GDN_CL", "0", 1);
			else
				unsetenv("MOOR_GDN_CL");
			float *dS = up(&gpu, S0, ns * 4), *dO = zz(&gpu, nv * 4);
			void *ws = zz(&gpu, wsb);
			int rc = gpu.o->delta_chunked(gpu.q, dO, dS, dq, dk_, ldqk, dv_,
						      ldv, dg, db, T, Hk, Hv, dk, dv,
						      ws, KERN_ACT_BF16);
			ASSERT(rc == 0, "delta_chunked dk=%d: %s", dk, moor_strerror(rc));
			ho[r] = malloc(nv * 4);
			hS[r] = malloc(ns * 4);
			hw[r] = malloc(wsb);
			down(&gpu, ho[r], dO, nv * 4);
			down(&gpu, hS[r], dS, ns * 4);
			down(&gpu, hw[r], ws, wsb);
			gpu.o->free(gpu.c, dS);
			gpu.o->free(gpu.c, dO);
			gpu.o->free(gpu.c, ws);
		}
		unsetenv("MOOR_GDN_RT");
		unsetenv("MOOR_HSTATE_NT");
		unsetenv("MOOR_GDN_CL");
		for (int r = 1; r < 4; r++)
			ASSERT(!memcmp(ho[r - 1], ho[r], nv * 4) &&
				   !memcmp(hS[r - 1], hS[r], ns * 4) &&
				   !memcmp(hw[r - 1], hw[r], wsb),
			       "%s (dk=dv=%d)",
			       r == 1	? "the default kernels differ from "
					  "MOOR_GDN_RT=0's"
			       : r == 2 ? "MOOR_HSTATE_NT=128 differs from the "
					  "default"
					: "MOOR_GDN_CL=0 differs from "
					  "MOOR_HSTATE_NT=128",
			       dk);
		printf("  %-28s bit-exact against MOOR_GDN_RT=0, "
		       "MOOR_HSTATE_NT=128 and MOOR_GDN_CL=0\n",
		       dk == 128  ? "delta state pass dk=128"
		       : dk == 64 ? "delta state pass dk=64"
				  : "delta state pass dk=32");
		for (int r = 0; r < 4; r++) {
			free(ho[r]);
			free(hS[r]);
			free(hw[r]);
		}
		gpu.o->free(gpu.c, dq);
		gpu.o->free(gpu.c, dk_);
		gpu.o->free(gpu.c, dv_);
		gpu.o->free(gpu.c, dg);
		gpu.o->free(gpu.c, db);
		free(qq);
		free(k);
		free(v);
		free(g);
		free(beta);
		free(S0);
	}
	unsetenv("MOOR_GDN_TC");
}

/* The delta rule's inputs at the 27B's head counts (16 key heads, 48 value
 * heads of 128) for T tokens, random, on the device: q and k l2-normalised
 * as the model feeds them, and the host's S0 (the state entering). */
typedef struct {
	int T, Hk, Hv, dk, dv, ldqk, ldv;
	size_t nq, nv, ns, ng;
	float *S0;			 /* host */
	float *dq, *dk_, *dv_, *dg, *db; /* device */
} gdn_in;

static gdn_in gdn_inputs(int T)
{
	gdn_in in = {.T = T, .Hk = 16, .Hv = 48, .dk = 128, .dv = 128};
	in.ldqk = in.Hk * in.dk, in.ldv = in.Hv * in.dv;
	in.nq = (size_t)T * in.ldqk, in.nv = (size_t)T * in.ldv;
	in.ns = (size_t)in.Hv * in.dk * in.dv, in.ng = (size_t)T * in.Hv;
	float *qq = rnd(in.nq, -1, 1), *k = rnd(in.nq, -1, 1),
	      *v = rnd(in.nv, -1, 1);
	float *g = rnd(in.ng, -0.3f, -0.01f), *beta = rnd(in.ng, 0.1f, 0.9f);
	in.S0 = rnd(in.ns, -0.1f, 0.1f);
	in.dq = up(&gpu, qq, in.nq * 4), in.dk_ = up(&gpu, k, in.nq * 4);
	in.dv_ = up(&gpu, v, in.nv * 4), in.dg = up(&gpu, g, in.ng * 4);
	in.db = up(&gpu, beta, in.ng * 4);
	gpu.o->l2norm(gpu.q, in.dq, in.ldqk, T, in.Hk, in.dk, 1e-6f,
		      1.0f / sqrtf(in.dk), KERN_ACT_F32);
	gpu.o->l2norm(gpu.q, in.dk_, in.ldqk, T, in.Hk, in.dk, 1e-6f, 1.0f,
		      KERN_ACT_F32);
	gpu.o->sync(gpu.q); /* the uploads' sources are freed here */
	free(qq);
	free(k);
	free(v);
	free(g);
	free(beta);
	return in;
}

static void gdn_inputs_free(gdn_in *in)
{
	gpu.o->free(gpu.c, in->dq);
	gpu.o->free(gpu.c, in->dk_);
	gpu.o->free(gpu.c, in->dv_);
	gpu.o->free(gpu.c, in->dg);
	gpu.o->free(gpu.c, in->db);
	free(in->S0);
}

/* The same (MOOR_GDN_TC=0) at the 27B's shapes as the engine runs them:
 * 16 key heads, 48 value heads of 128, three calls that carry the state (1,024, 1,024 and
 * 72 tokens: a short last sub-chunk) through one workspace that is never
 * cleared, o and the state after each call by memcmp against
 * MOOR_GDN_RT=0's, twice over; the default kernels in pieces on two
 * streams (MOOR_GDN_PIPE) too. Many blocks share each SM here: a missing
 * barrier in k_hstate_rt's first sub-chunk read another block's shared
 * memory at these shapes (bench_ttft's resumed turns differed from cold
 * prefills on the H100) and passed case_gdn_rt's four heads. */
static void case_gdn_rt_wide(void)
{
	const int Tmax = 1024;
	const int Ts[] = {1024, 1024, 72};
	gdn_in in = gdn_inputs(Tmax);
	const int Hk = in.Hk, Hv = in.Hv, dk = in.dk, dv = in.dv;
	const int ldqk = in.ldqk, ldv = in.ldv;
	const size_t nv = in.nv, ns = in.ns;
	float *S0 = in.S0, *dq = in.dq, *dk_ = in.dk_, *dv_ = in.dv_,
	      *dg = in.dg, *db = in.db;
	size_t wsb = gpu.o->delta_ws_bytes(gpu.c, Tmax, Hv, dk, dv);
	void *ws = zz(&gpu, wsb);
	float *ho = malloc(3 * nv * 4), *hS = malloc(3 * ns * 4);
	float *ro = malloc(nv * 4), *rS = malloc(ns * 4);
	ASSERT(ho && hS && ro && rS, "out of memory");
	/* r = 0: MOOR_GDN_RT=0 (kept); 1: the defaults; 2: MOOR_HSTATE_NT=128;
	 * 3, 4, 5: MOOR_GDN_PIPE=4, 3, 1 (pieces of 4, 3 and 1 sub-chunks:
	 * 4, 6 and 16 of the 1,024-token calls, 2 of the 72-token call at 1) */
	/* 6: MOOR_GDN_CL=0 (k_hstate_rt where the default takes
	 * k_hstate_cl) */
	static const char *pieces[] = {NULL, NULL, NULL, "4", "3", "1", NULL};
	setenv("MOOR_GDN_TC", "0", 1);
	for (int rep = 0; rep < 2; rep++)
		for (int r = 0; r < 7; r++) {
			setenv("MOOR_GDN_RT", r ? "1" : "0", 1);
			if (r == 2)
				setenv("MOOR_HSTATE_NT", "128", 1);
			else
				unsetenv("MOOR_HSTATE_NT");
			if (r == 2 || r == 6)
				setenv("MOOR_GDN_CL", "0", 1);
			else
				unsetenv("MOOR_GDN_CL");
			if (pieces[r])
				setenv("MOOR_GDN_PIPE", pieces[r], 1);
			else
				unsetenv("MOOR_GDN_PIPE");
			float *dS = up(&gpu, S0, ns * 4), *dO = zz(&gpu, nv * 4);
			for (int i = 0; i < 3; i++) {
				int rc = gpu.o->delta_chunked(
				    gpu.q, dO, dS, dq, dk_, ldqk, dv_, ldv, dg, db,
				    Ts[i], Hk, Hv, dk, dv, ws, KERN_ACT_BF16);
				ASSERT(rc == 0, "delta_chunked: %s", moor_strerror(rc));
				size_t no = (size_t)Ts[i] * ldv;
				if (r == 0) {
					down(&gpu, ho + i * nv, dO, no * 4);
					down(&gpu, hS + i * ns, dS, ns * 4);
					continue;
				}
				down(&gpu, ro, dO, no * 4);
				down(&gpu, rS, dS, ns * 4);
				ASSERT(!memcmp(ro, ho + i * nv, no * 4) &&
					   !memcmp(rS, hS + i * ns, ns * 4),
				       "27B shapes, call %d of %d tokens, "
				       "round %d: "
				       "%s%s differs from MOOR_GDN_RT=0",
				       i, Ts[i], rep,
				       r == 1	? "the default"
				       : r == 2 ? "MOOR_HSTATE_NT=128"
				       : r == 6 ? "MOOR_GDN_CL=0"
						: "MOOR_GDN_PIPE=",
				       pieces[r] ? pieces[r] : "");
			}
			gpu.o->free(gpu.c, dS);
			gpu.o->free(gpu.c, dO);
		}
	unsetenv("MOOR_GDN_RT");
	unsetenv("MOOR_HSTATE_NT");
	unsetenv("MOOR_GDN_PIPE");
	unsetenv("MOOR_GDN_CL");
	unsetenv("MOOR_GDN_TC");
	printf("  %-28s bit-exact against MOOR_GDN_RT=0 (48 heads, 3 calls; "
	       "MOOR_HSTATE_NT=128, MOOR_GDN_PIPE=4, 3, 1, MOOR_GDN_CL=0)\n",
	       "delta at the 27B's shapes");
	free(ho);
	free(hS);
	free(ro);
	free(rS);
	gpu.o->free(gpu.c, ws);
	gdn_inputs_free(&in);
}

/* The chunked rule on tensor cores (MOOR_GDN_TC=1, the default at dk
 * 128: k_intra_tc and k_chunk_tc, the state pass and the output in one
 * kernel; 3xTF32, so other bits than the SIMT kernels') at the 27B's
 * shapes. case_gdn holds the default to the CPU backend; here the SIMT
 * kernels (MOOR_GDN_TC=0) get case_gdn's check too, then 2,120 tokens of
 * 48 heads hold the tensor-core settings to the SIMT kernels within the
 * same tolerance (the
 * workspace NaNs before each run: what the tensor-core kernels read is
 * what intra wrote), and,
 * by memcmp, itself in calls of 1,024, 1,024 and 72 tokens (the state
 * carried between calls) against one call, a second run against the
 * first, and in pieces of 8 sub-chunks on two streams (MOOR_GDN_PIPE=8)
 * against one launch each. */
static void case_gdn_tc(void)
{
	setenv("MOOR_GDN_TC", "0", 1);
	printf("  MOOR_GDN_TC=0:\n");
	case_gdn();
	const int T = 2120;
	const int Ts[] = {1024, 1024, 72};
	gdn_in in = gdn_inputs(T);
	const int Hk = in.Hk, Hv = in.Hv, dk = in.dk, dv = in.dv;
	const int ldqk = in.ldqk, ldv = in.ldv;
	const size_t nv = in.nv, ns = in.ns;
	float *S0 = in.S0, *dq = in.dq, *dk_ = in.dk_, *dv_ = in.dv_,
	      *dg = in.dg, *db = in.db;
	size_t wsb = gpu.o->delta_ws_bytes(gpu.c, T, Hv, dk, dv);
	/* each run's workspace starts as NaNs: at MOOR_GDN_TC=1 intra leaves
	 * q e^G and k e^(G_last - G) out of it, and nothing may read them */
	unsigned char *nan = malloc(wsb);
	ASSERT(nan, "out of memory");
	memset(nan, 0xff, wsb);
	/* r = 0: MOOR_GDN_TC=0; 1: MOOR_GDN_TC=1 in one call; 2: the same in
	 * three calls; 3: one call again; 4: MOOR_GDN_TC=2 (the state pass
	 * alone on tensor cores); 5: MOOR_GDN_TC=1 in pieces; 6:
	 * MOOR_GDN_TC=3 (intra, the state pass and the output in three
	 * tensor-core kernels); 7: MOOR_GDN_TC=1 with k_intra_tc2 and
	 * k_chunk_tc2 (MOOR_GDN_IT=2 MOOR_GDN_CT=2: the same sums) */
	float *ho[8], *hS[8];
	for (int r = 0; r < 8; r++) {
		setenv("MOOR_GDN_TC",
		       r == 0	? "0"
		       : r == 4 ? "2"
		       : r == 6 ? "3"
				: "1",
		       1);
		if (r == 5)
			setenv("MOOR_GDN_PIPE", "8", 1);
		else
			unsetenv("MOOR_GDN_PIPE");
		if (r == 7) {
			setenv("MOOR_GDN_CT", "2", 1);
			setenv("MOOR_GDN_IT", "2", 1);
		} else {
			unsetenv("MOOR_GDN_CT");
			unsetenv("MOOR_GDN_IT");
		}
		float *dS = up(&gpu, S0, ns * 4), *dO = zz(&gpu, nv * 4);
		void *ws = up(&gpu, nan, wsb);
		for (int i = 0, t0 = 0; i < (r == 2 ? 3 : 1); t0 += Ts[i++]) {
			int n = r == 2 ? Ts[i] : T;
			size_t a = (size_t)t0;
			int rc = gpu.o->delta_chunked(
			    gpu.q, dO + a * ldv, dS, dq + a * ldqk,
			    dk_ + a * ldqk, ldqk, dv_ + a * ldv, ldv,
			    dg + a * Hv, db + a * Hv, n, Hk, Hv, dk, dv, ws,
			    KERN_ACT_F32);
			ASSERT(rc == 0, "delta_chunked: %s", moor_strerror(rc));
		}
		ho[r] = malloc(nv * 4);
		hS[r] = malloc(ns * 4);
		ASSERT(ho[r] && hS[r], "out of memory");
		down(&gpu, ho[r], dO, nv * 4);
		down(&gpu, hS[r], dS, ns * 4);
		gpu.o->free(gpu.c, dS);
		gpu.o->free(gpu.c, dO);
		gpu.o->free(gpu.c, ws);
	}
	free(nan);
	unsetenv("MOOR_GDN_TC");
	unsetenv("MOOR_GDN_PIPE");
	unsetenv("MOOR_GDN_CT");
	unsetenv("MOOR_GDN_IT");
	/* the tolerance of case_gdn: another order of fp32 sums (3xTF32
	 * keeps about fp32's precision) over a contracting recurrence */
	close_all("delta tc o (48 heads)", ho[1], ho[0], nv, 1e-4, 1e-3);
	close_all("delta tc S (48 heads)", hS[1], hS[0], ns, 1e-4, 1e-3);
	close_all("delta tc=2 o (48 heads)", ho[4], ho[0], nv, 1e-4, 1e-3);
	close_all("delta tc=3 o (48 heads)", ho[6], ho[0], nv, 1e-4, 1e-3);
	close_all("delta tc=3 S (48 heads)", hS[6], hS[0], ns, 1e-4, 1e-3);
	ASSERT(!memcmp(ho[2], ho[1], nv * 4) && !memcmp(hS[2], hS[1], ns * 4),
	       "MOOR_GDN_TC=1 in calls of 1,024, 1,024 and 72 tokens differs "
	       "from one call");
	ASSERT(!memcmp(ho[3], ho[1], nv * 4) && !memcmp(hS[3], hS[1], ns * 4),
	       "MOOR_GDN_TC=1 differs from itself run to run");
	ASSERT(!memcmp(ho[5], ho[1], nv * 4) && !memcmp(hS[5], hS[1], ns * 4),
	       "MOOR_GDN_TC=1 in pieces (MOOR_GDN_PIPE=8) differs from one "
	       "launch each");
	ASSERT(!memcmp(ho[7], ho[1], nv * 4) && !memcmp(hS[7], hS[1], ns * 4),
	       "MOOR_GDN_IT=2 MOOR_GDN_CT=2 (k_intra_tc2, k_chunk_tc2) "
	       "differs from k_intra_tc and k_chunk_tc");
	printf("  %-28s calls of 1,024, 1,024, 72, a second run, pieces, "
	       "k_intra_tc2 and k_chunk_tc2: bit-exact\n",
	       "delta tc");
	for (int r = 0; r < 8; r++) {
		free(ho[r]);
		free(hS[r]);
	}
	gdn_inputs_free(&in);
}

/* ---- attention: both kernels, and a graph ---- */

static void one_attn(bk *b, float *out, const float *qv, const void *K,
		     const void *V, size_t kvb, int T, int64_t pos0, int Hq,
		     int Hkv, int D, int kvdt, int act)
{
	float *dq = up(b, qv, (size_t)T * Hq * D * 4);
	void *dK = up(b, K, kvb), *dV = up(b, V, kvb);
	float *dO = zz(b, (size_t)T * Hq * D * 4);
	int rc = b->o->attention(b->q, dO, dq, Hq * D, dK, dV, kvdt, T, pos0, Hq,
				 Hkv, D, 1.0f / sqrtf((float)D), act);
	ASSERT(rc == 0, "%s attention: %s", b->o->name, moor_strerror(rc));
	down(b, out, dO, (size_t)T * Hq * D * 4);
	b->o->free(b->c, dq);
	b->o->free(b->c, dK);
	b->o->free(b->c, dV);
	b->o->free(b->c, dO);
}

static void case_attention(void)
{
	struct {
		int T;
		int64_t pos0;
		int Hq, Hkv, D, kvdt;
	} cs[] = {
	    {200, 37, 24, 4, 256, KERN_BF16},  /* the flash kernel, 27B heads */
	    {130, 0, 8, 2, 128, KERN_BF16},    /* flash, D = 128 */
	    {70, 1000, 4, 2, 64, KERN_BF16},   /* flash, D = 64 */
	    {200, 4000, 24, 4, 256, KERN_BF16}, /* flash in 4 key segments */
	    {300, 2500, 8, 2, 128, KERN_BF16}, /* flash in 2 key segments */
	    {1, 3000, 24, 4, 256, KERN_BF16},  /* decode: 6 splits */
	    {5, 700, 24, 4, 256, KERN_BF16},   /* a few rows split */
	    {40, 90, 4, 2, 32, KERN_F32},      /* the split kernel for fp32 */
	};
	for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
		int T = cs[ci].T, Hq = cs[ci].Hq, Hkv = cs[ci].Hkv, D = cs[ci].D;
		int64_t pos0 = cs[ci].pos0, L = pos0 + T;
		int kvdt = cs[ci].kvdt, act = kvdt == KERN_BF16 ? KERN_ACT_BF16 : KERN_ACT_F32;
		size_t nkv = (size_t)L * Hkv * D;
		float *qv = rnd((size_t)T * Hq * D, -1, 1);
		for (size_t i = 0; i < (size_t)T * Hq * D; i++)
			qv[i] = kt_to_dt(qv[i], kvdt);
		void *K, *V;
		float *kf = kt_weights(nkv, kvdt, -2, 2, &K);
		float *vf = kt_weights(nkv, kvdt, -1, 1, &V);
		size_t kvb = nkv * (kvdt == KERN_F32 ? 4 : 2);
		size_t no = (size_t)T * Hq * D;
		float *a = malloc(no * 4), *c = malloc(no * 4), *c2 = malloc(no * 4);
		one_attn(&cpu, a, qv, K, V, kvb, T, pos0, Hq, Hkv, D, kvdt, act);
		one_attn(&gpu, c, qv, K, V, kvb, T, pos0, Hq, Hkv, D, kvdt, act);
		one_attn(&gpu, c2, qv, K, V, kvb, T, pos0, Hq, Hkv, D, kvdt, act);
		char nm[80];
		snprintf(nm, sizeof nm, "attention T=%d pos=%lld D=%d %s", T,
			 (long long)pos0, D, kt_dtname(kvdt));
		/* bf16: the flash order (p rounded before normalising, online
		 * rescaling) against the CPU's normalised p: a few bf16 ulps of
		 * outputs of order 0.1; fp32: sums in another order */
		close_all(nm, c, a, no, kvdt == KERN_BF16 ? 4e-3 : 1e-5,
			  kvdt == KERN_BF16 ? 3e-2 : 1e-4);
		ASSERT(!memcmp(c, c2, no * 4), "%s: two runs differ", nm);
		free(qv);
		free(kf);
		free(vf);
		free(K);
		free(V);
		free(a);
		free(c);
		free(c2);
	}
	/* a graph captured at position 100 for 4096 keys and launched at
	 * 3000 equals the direct call at 3000 bit for bit */
	if (gpu.o->graph_begin) {
		int Hq = 24, Hkv = 4, D = 256, T = 1;
		int64_t L = 4096;
		size_t nkv = (size_t)L * Hkv * D;
		void *K, *V;
		float *kf = kt_weights(nkv, KERN_BF16, -2, 2, &K);
		float *vf = kt_weights(nkv, KERN_BF16, -1, 1, &V);
		float *qv = rnd((size_t)Hq * D, -1, 1);
		for (int i = 0; i < Hq * D; i++)
			qv[i] = moor_round_bf16(qv[i]);
		float *dq = up(&gpu, qv, (size_t)Hq * D * 4);
		void *dK = up(&gpu, K, nkv * 2), *dV = up(&gpu, V, nkv * 2);
		float *d1 = zz(&gpu, (size_t)Hq * D * 4), *d2 = zz(&gpu, (size_t)Hq * D * 4);
		float sc = 1.0f / 16.0f;
		gpu.o->attention(gpu.q, d1, dq, Hq * D, dK, dV, KERN_BF16, T, 3000, Hq,
				 Hkv, D, sc, KERN_ACT_BF16);
		kern_graph *gr = NULL;
		int rc = gpu.o->graph_begin(gpu.q, 100, L);
		if (!rc)
			rc = gpu.o->attention(gpu.q, d2, dq, Hq * D, dK, dV, KERN_BF16, T,
					      100, Hq, Hkv, D, sc, KERN_ACT_BF16);
		int rc2 = gpu.o->graph_end(gpu.q, &gr);
		ASSERT(rc == 0 && rc2 == 0, "graph capture: %s %s", moor_strerror(rc),
		       moor_strerror(rc2));
		if (gr) {
			rc = gpu.o->graph_launch(gpu.q, gr, 3000);
			ASSERT(rc == 0, "graph launch: %s", moor_strerror(rc));
			float *a = malloc((size_t)Hq * D * 4), *c = malloc((size_t)Hq * D * 4);
			down(&gpu, a, d1, (size_t)Hq * D * 4);
			down(&gpu, c, d2, (size_t)Hq * D * 4);
			ASSERT(!memcmp(a, c, (size_t)Hq * D * 4),
			       "a graph launched at 3000 differs from the call at 3000");
			gpu.o->graph_free(gpu.c, gr);
			free(a);
			free(c);
		}
		free(kf);
		free(vf);
		free(K);
		free(V);
		free(qv);
	}
}

/* ---- the split attention at long rows: its tiles and its combine ---- */

/* One attention call on the device with the environment variable var set
 * to v (none when var is NULL). */
static void split_run(float *out, const float *dq, const void *dK,
		      const void *dV, int kvdt, int T, int64_t pos0, int Hq,
		      int Hkv, int D, const char *var, const char *v)
{
	size_t no = (size_t)T * Hq * D * 4;
	float *dO = zz(&gpu, no);
	if (var)
		setenv(var, v, 1);
	int rc =
	    gpu.o->attention(gpu.q, dO, dq, Hq * D, dK, dV, kvdt, T, pos0, Hq,
			     Hkv, D, 1.0f / sqrtf((float)D),
			     kvdt == KERN_BF16 ? KERN_ACT_BF16 : KERN_ACT_F32);
	if (var)
		unsetenv(var);
	ASSERT(rc == 0, "attention (%s=%s): %s", var ? var : "-", v,
	       moor_strerror(rc));
	down(&gpu, out, dO, no);
	gpu.o->free(gpu.c, dO);
}

/* From a few splits to rows of 300k keys, bf16 (k_split_mma) and fp32
 * (k_split), K and V filled on the device:
 * - k_combine against k_combine_ref (MOOR_DEC_COMB=0), the same
 *   arithmetic with its loads in flight: bit for bit, at the default
 *   partition and at one tile a split, where a row has more splits than
 *   either keeps weights of at once (1,024 and 4,096);
 * - k_split_mma's splits of several tiles past 4k keys against one tile
 *   a split (MOOR_DEC_MT=0): bit for bit where a split has one tile,
 *   else both against the CPU;
 * - a graph captured for 131,072 keys and launched at a long row against
 *   the direct call, bit for bit (its grid holds the most splits). */
static void case_split_long(void)
{
	const struct {
		int T;
		int64_t pos0;
		int Hq, Hkv, D, kvdt;
		int graph; /* and from a graph for 131,072 keys */
	} cs[] = {
	    {1, 3000, 24, 4, 256, KERN_BF16, 0},   /* 47 splits */
	    {5, 700, 24, 4, 256, KERN_BF16, 0},	   /* rows of a split launch */
	    {1, 4095, 24, 4, 256, KERN_BF16, 0},   /* 64 splits of a tile */
	    {3, 4095, 24, 4, 256, KERN_BF16, 0},   /* rows of 1 and 2 tiles */
	    {1, 32767, 24, 4, 256, KERN_BF16, 0},  /* 512 tiles, 8 a split */
	    {1, 70000, 24, 4, 256, KERN_BF16, 1},  /* 1,094 tiles: ref chunks */
	    {1, 300000, 24, 4, 256, KERN_BF16, 0}, /* 4,688 tiles, 74 a split */
	    {2, 5000, 4, 2, 32, KERN_F32, 0},	   /* k_split's partials */
	};
	kern_limits lim = {
	    .window = 300001 + 64, .q_heads = 24, .head_dim = 256};
	int rc = gpu.o->reserve(gpu.c, &lim);
	ASSERT(rc == 0, "split: reserve: %s", moor_strerror(rc));
	for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
		int T = cs[ci].T, Hq = cs[ci].Hq, Hkv = cs[ci].Hkv,
		    D = cs[ci].D, kvdt = cs[ci].kvdt;
		int64_t pos0 = cs[ci].pos0, L = pos0 + T;
		size_t nkv = (size_t)L * Hkv * D;
		size_t kvb = nkv * (kvdt == KERN_F32 ? 4 : 2);
		void *dK = zz(&gpu, kvb), *dV = zz(&gpu, kvb);
		/* K wide enough that a row's weights are far from flat */
		gpu.o->fill_random(gpu.q, dK, kvdt, nkv, 31 + ci, -6, 6);
		gpu.o->fill_random(gpu.q, dV, kvdt, nkv, 57 + ci, -1, 1);
		size_t nq = (size_t)T * Hq * D;
		float *qv = rnd(nq, -1, 1);
		for (size_t i = 0; i < nq; i++)
			qv[i] = kt_to_dt(qv[i], kvdt);
		float *dq = up(&gpu, qv, nq * 4);
		float *a = malloc(nq * 4), *b = malloc(nq * 4),
		      *c = malloc(nq * 4), *r = malloc(nq * 4);
		/* the default partition keeps a row at 64 splits (attn.cu's
		 * KCU_SPLIT_MAX): one 64-key tile a split up to 4,096 keys */
		const int one_tile = L <= 4096 || kvdt != KERN_BF16;
		split_run(a, dq, dK, dV, kvdt, T, pos0, Hq, Hkv, D, NULL, "");
		split_run(b, dq, dK, dV, kvdt, T, pos0, Hq, Hkv, D,
			  "MOOR_DEC_COMB", "0");
		split_run(c, dq, dK, dV, kvdt, T, pos0, Hq, Hkv, D,
			  "MOOR_DEC_MT", "0");
		char nm[96];
		snprintf(nm, sizeof nm, "split T=%d pos=%lld D=%d %s", T,
			 (long long)pos0, D, kt_dtname(kvdt));
		ASSERT(!memcmp(a, b, nq * 4),
		       "%s: k_combine differs from k_combine_ref", nm);
		/* the two combines at one tile a split too: up to 4,688
		 * splits a row */
		setenv("MOOR_DEC_MT", "0", 1);
		split_run(b, dq, dK, dV, kvdt, T, pos0, Hq, Hkv, D,
			  "MOOR_DEC_COMB", "0");
		unsetenv("MOOR_DEC_MT");
		ASSERT(!memcmp(c, b, nq * 4),
		       "%s: at one tile a split k_combine differs from "
		       "k_combine_ref",
		       nm);
		/* the CPU's reference from the same bytes */
		void *hK = malloc(kvb), *hV = malloc(kvb);
		down(&gpu, hK, dK, kvb);
		down(&gpu, hV, dV, kvb);
		one_attn(&cpu, r, qv, hK, hV, kvb, T, pos0, Hq, Hkv, D, kvdt,
			 kvdt == KERN_BF16 ? KERN_ACT_BF16 : KERN_ACT_F32);
		double ss = 0;
		for (size_t i = 0; i < nq; i++)
			ss += (double)r[i] * r[i];
		double rms = sqrt(ss / (double)nq);
		/* as case_attention, the abs part scaled to these outputs'
		 * size: the flash order against the CPU's normalised p is a
		 * few bf16 ulps; fp32 sums in another order */
		double at = kvdt == KERN_BF16 ? 4e-2 * rms : 1e-5,
		       rt = kvdt == KERN_BF16 ? 3e-2 : 1e-4;
		close_all(nm, a, r, nq, at, rt);
		if (one_tile)
			ASSERT(!memcmp(a, c, nq * 4),
			       "%s: MOOR_DEC_MT=0 differs at one tile a split",
			       nm);
		else
			close_all("  ... one tile a split", c, r, nq, at, rt);
		printf("  %-32s rms %.3g; k_combine bit-exact, %s\n", nm, rms,
		       one_tile ? "one tile a split bit-exact"
				: "both partitions near the CPU");
		if (cs[ci].graph && gpu.o->graph_begin) {
			kern_graph *gr = NULL;
			float *dO = zz(&gpu, nq * 4);
			rc = gpu.o->graph_begin(gpu.q, 100, 131072);
			if (!rc)
				rc = gpu.o->attention(gpu.q, dO, dq, Hq * D, dK,
						      dV, kvdt, T, 100, Hq, Hkv,
						      D, 1.0f / sqrtf((float)D),
						      KERN_ACT_BF16);
			int rc2 = gpu.o->graph_end(gpu.q, &gr);
			ASSERT(rc == 0 && rc2 == 0 && gr,
			       "graph capture: %s %s", moor_strerror(rc),
			       moor_strerror(rc2));
			if (gr) {
				rc = gpu.o->graph_launch(gpu.q, gr, pos0);
				ASSERT(rc == 0, "graph launch: %s",
				       moor_strerror(rc));
				down(&gpu, b, dO, nq * 4);
				ASSERT(!memcmp(a, b, nq * 4),
				       "%s: a graph for 131072 keys launched "
				       "there differs from the call",
				       nm);
				gpu.o->graph_free(gpu.c, gr);
			}
			gpu.o->free(gpu.c, dO);
		}
		free(hK);
		free(hV);
		free(qv);
		free(a);
		free(b);
		free(c);
		free(r);
		gpu.o->free(gpu.c, dq);
		gpu.o->free(gpu.c, dK);
		gpu.o->free(gpu.c, dV);
	}
}

/* ---- attention on wgmma (k_flash_wg) against k_flash and the CPU ---- */

/* bf16 values (the attention's outputs are) as ordered integers: their
 * difference counts bf16 ulps. */
static int32_t bf16_ord(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	int32_t m = (int32_t)((u >> 16) & 0x7fff);
	return u >> 31 ? -m : m;
}

/* The scale of the k_flash_wg cases: 1/16, head dim 256's, a power of two
 * (one rounding of a score), or another (two roundings). */
static float wg_scale = 1.0f / 16.0f;

/* One attention call on the device with MOOR_ATTN_WG set to wg, into a
 * NaN-poisoned output: every element must be written. */
static void attn_dev(float *host, float *dO, const float *dq, const void *dK,
		     const void *dV, int T, int64_t pos0, int Hq, int Hkv,
		     int D, const char *wg, const char *nm)
{
	size_t n = (size_t)T * Hq * D;
	float *nan = malloc(n * 4);
	kt_poison(nan, n);
	gpu.o->upload(gpu.q, dO, nan, n * 4);
	setenv("MOOR_ATTN_WG", wg, 1);
	int rc = gpu.o->attention(gpu.q, dO, dq, Hq * D, dK, dV, KERN_BF16, T,
				  pos0, Hq, Hkv, D, wg_scale, KERN_ACT_BF16);
	unsetenv("MOOR_ATTN_WG");
	ASSERT(rc == 0, "%s attention (MOOR_ATTN_WG=%s): %s", nm, wg,
	       moor_strerror(rc));
	down(&gpu, host, dO, n * 4);
	free(nan);
	size_t unset = 0;
	for (size_t i = 0; i < n; i++)
		unset += !isfinite(host[i]);
	ASSERT(unset == 0,
	       "%s (MOOR_ATTN_WG=%s): %zu of %zu outputs not written "
	       "(NaN)",
	       nm, wg, unset, n);
}

/* ---- attention in pieces: one call against a call a piece ---- */

/* With kern_limits.chunk set, the backend cuts a call's rows at the lines
 * of chunk and each piece's keys into segments by the piece alone (ops.h
 * attention), so one call of a forward equals, bit for bit, calls of its
 * pieces: on k_flash (a launch a piece) and on k_flash_wg, which launches
 * pieces together as far as the partials' scratch and KCU_PIECES allow.
 * The cases: from a line and from between lines (a first piece of 14
 * rows takes the split kernels), at short and long keys; 3,000 rows at
 * 34,000 need more partials (8 segments a piece) than the scratch holds
 * (case_split_long's reserve left it about 464 MB: four pieces of 512
 * rows), so two launches; 8,704 rows of one segment a piece
 * (MOOR_ATTN_SEGS=1) are 17 pieces, more than KCU_PIECES. Run last: the
 * chunk stays reserved. */
static void case_attention_pieces(const char *desc)
{
	const int Hq = 24, Hkv = 4, D = 256, ch = 512, Tmax = 8704;
	const int64_t L = 40960;
	kern_limits lim = {.rows = 1024,
			   .chunk = ch,
			   .window = 8192,
			   .q_heads = Hq,
			   .head_dim = D};
	ASSERT(gpu.o->reserve(gpu.c, &lim) == 0, "pieces: reserve");
	size_t nkv = (size_t)L * Hkv * D, rw = (size_t)Hq * D, nq = Tmax * rw;
	void *K, *V;
	free(kt_weights(nkv, KERN_BF16, -2, 2, &K));
	free(kt_weights(nkv, KERN_BF16, -1, 1, &V));
	float *qv = rnd(nq, -1, 1);
	for (size_t i = 0; i < nq; i++)
		qv[i] = moor_round_bf16(qv[i]);
	void *dK = up(&gpu, K, nkv * 2), *dV = up(&gpu, V, nkv * 2);
	float *dq = up(&gpu, qv, nq * 4), *dO = zz(&gpu, nq * 4);
	float *a = malloc(nq * 4), *b = malloc(nq * 4);
	const int wg_ok = strstr(desc, "cc 9.0,") != NULL;
	static const struct {
		int T;
		int64_t pos0;
		const char *segs; /* MOOR_ATTN_SEGS, or unset */
	} cs[] = {{2048, 0, NULL},     {2048, 31744, NULL}, {1500, 1010, NULL},
		  {1100, 38000, NULL}, {3000, 34000, NULL}, {8704, 0, "1"}};
	for (int m = 0; m < 2; m++) {
		const char *wg = m ? "0" : "1";
		if (m == 0 && !wg_ok) {
			printf("  attention pieces on k_flash_wg: skipped: the "
			       "device is not cc 9.0\n");
			continue;
		}
		for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
			const int T = cs[i].T;
			const int64_t p0 = cs[i].pos0;
			char nm[96];
			if (cs[i].segs)
				setenv("MOOR_ATTN_SEGS", cs[i].segs, 1);
			snprintf(nm, sizeof nm, "pieces T=%d pos=%lld one call",
				 T, (long long)p0);
			attn_dev(a, dO, dq, dK, dV, T, p0, Hq, Hkv, D, wg, nm);
			int np = 0;
			for (int off = 0, n; off < T; off += n, np++) {
				const int64_t at = p0 + off;
				n = (int)((at / ch + 1) * ch - at);
				if (n > T - off)
					n = T - off;
				snprintf(nm, sizeof nm,
					 "pieces T=%d pos=%lld piece at %lld",
					 T, (long long)p0, (long long)at);
				attn_dev(b + off * rw, dO, dq + off * rw, dK,
					 dV, n, at, Hq, Hkv, D, wg, nm);
			}
			unsetenv("MOOR_ATTN_SEGS");
			const int same = !memcmp(a, b, (size_t)T * rw * 4);
			printf(
			    "  attention MOOR_ATTN_WG=%s T=%d at %lld%s: one "
			    "call against %d pieces of lines %d apart: %s\n",
			    wg, T, (long long)p0,
			    cs[i].segs ? " (MOOR_ATTN_SEGS=1)" : "", np, ch,
			    same ? "the same bits" : "DIFFER");
			ASSERT(same,
			       "attention MOOR_ATTN_WG=%s T=%d pos=%lld: one "
			       "call differs from its pieces",
			       wg, T, (long long)p0);
		}
	}
	gpu.o->free(gpu.c, dK);
	gpu.o->free(gpu.c, dV);
	gpu.o->free(gpu.c, dq);
	gpu.o->free(gpu.c, dO);
	free(K);
	free(V);
	free(qv);
	free(a);
	free(b);
}

/* Where outputs differ, by place: the row within its 128-row block in
 * groups of 16 (a warp's rows; 0-3 the first warpgroup) and the dim in
 * groups of 32 (a 64-wide chunk of the swizzled tiles is two groups): a
 * layout mistake shows as a pattern here. */
static void wg_where(const char *nm, const float *a, const float *ref, int T,
		     int Hq, int D)
{
	double byrow[8] = {0}, bydim[8] = {0};
	for (int t = 0; t < T; t++)
		for (int h = 0; h < Hq; h++)
			for (int d = 0; d < D; d++) {
				size_t i = ((size_t)t * Hq + h) * D + d;
				double e = fabs((double)a[i] - ref[i]);
				if (!(e == e))
					e = INFINITY;
				int r = (t % 128) / 16, c = d * 8 / D;
				if (e > byrow[r])
					byrow[r] = e;
				if (e > bydim[c])
					bydim[c] = e;
			}
	fprintf(stderr, "  %s: max |d| by row %% 128 / 16:", nm);
	for (int i = 0; i < 8; i++)
		fprintf(stderr, " %.2g", byrow[i]);
	fprintf(stderr, "\n  %s: max |d| by dim / %d:", nm, D / 8);
	for (int i = 0; i < 8; i++)
		fprintf(stderr, " %.2g", bydim[i]);
	fprintf(stderr, "\n");
}

typedef struct wg_bufs {
	const float *qv; /* host q [T][Hq][D] */
	float *dq, *dO;
	void *dK, *dV, *cK, *cV;
	float *fl, *a, *b; /* host outputs: k_flash, wg, wg again */
} wg_bufs;

/* One case: k_flash_wg against k_flash on every output, the CPU on a few
 * rows, and itself run again. */
static void wg_case(const char *tag, wg_bufs *w, int T, int64_t p0)
{
	const int Hq = 24, Hkv = 4, D = 256;
	const size_t n = (size_t)T * Hq * D;
	char nm[96];
	snprintf(nm, sizeof nm, "attention wg %sT=%d pos=%lld", tag, T,
		 (long long)p0);
	double t0 = moor_now();
	attn_dev(w->fl, w->dO, w->dq, w->dK, w->dV, T, p0, Hq, Hkv, D, "0", nm);
	double t1 = moor_now();
	attn_dev(w->a, w->dO, w->dq, w->dK, w->dV, T, p0, Hq, Hkv, D, "1", nm);
	double t2 = moor_now();
	/* k_flash_wg against k_flash. Both take the same scores' roundings,
	 * the same p, the same sums in the same order; they can differ only
	 * inside the tensor cores (the order an MMA adds its products in
	 * fp32), which moves a score by an fp32 ulp and now and then its
	 * bf16 rounding by one bf16 ulp, and the P V sums by fp32 ulps: the
	 * bf16 outputs then differ by a bf16 ulp, rarely two. Bound: 2 bf16
	 * ulps, or 1e-5 absolute where an output is near zero (fp32 noise of
	 * sums of terms of order 1, where the ulps of tiny values are many). */
	size_t ndiff = 0, bad = 0;
	int32_t ulps = 0;
	double mabs = 0, mrel = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)w->a[i] - w->fl[i]);
		int32_t u = abs(bf16_ord(w->a[i]) - bf16_ord(w->fl[i]));
		if (!(d == 0))
			ndiff++;
		if (d > mabs)
			mabs = d;
		if (w->fl[i] != 0 && d / fabs(w->fl[i]) > mrel)
			mrel = d / fabs(w->fl[i]);
		if (!(u <= 2 || d <= 1e-5)) {
			if (bad++ < 5)
				fprintf(stderr, "  %s[%zu]: wg %.9g k_flash %.9g\n",
					nm, i, w->a[i], w->fl[i]);
		}
		if (d <= 1e-5)
			u = 0;
		if (u > ulps)
			ulps = u;
	}
	printf("  %-34s vs k_flash: %zu of %zu differ, max %d bf16 ulps, "
	       "max |d| %.3g, max rel %.3g (k_flash %.1f ms, wg %.1f ms, "
	       "copies included)\n",
	       nm, ndiff, n, ulps, mabs, mrel, (t1 - t0) * 1e3, (t2 - t1) * 1e3);
	if (bad)
		wg_where(nm, w->a, w->fl, T, Hq, D);
	ASSERT(bad == 0, "%s: %zu of %zu outputs more than 2 bf16 ulps from "
	       "k_flash's", nm, bad, n);
	/* determinism: the same call again, bit for bit */
	attn_dev(w->b, w->dO, w->dq, w->dK, w->dV, T, p0, Hq, Hkv, D, "1", nm);
	ASSERT(!memcmp(w->a, w->b, n * 4), "%s: two runs differ", nm);
	/* the CPU reference on a few rows (a row's result does not depend on
	 * T: each is its own T = 1 call at its position): first and last rows
	 * of warps, warpgroups, blocks and the call; case_attention's bf16
	 * tolerance */
	const int rows[] = {0, 127, T - 1, 64, 15, 63, 128, T / 2 + 5};
	/* a CPU row is 3.2 GFLOP at 130k keys: the first three rows past
	 * 32k keys */
	const int nrows = p0 > 32768 ? 3 : 8;
	float *cq = malloc((size_t)Hq * D * 4), *co = malloc((size_t)Hq * D * 4);
	for (int ri = 0; ri < nrows; ri++) {
		int t = rows[ri];
		memcpy(cq, w->qv + (size_t)t * Hq * D, (size_t)Hq * D * 4);
		float *cqd = up(&cpu, cq, (size_t)Hq * D * 4);
		float *cod = zz(&cpu, (size_t)Hq * D * 4);
		int rc = cpu.o->attention(cpu.q, cod, cqd, Hq * D, w->cK, w->cV,
					  KERN_BF16, 1, p0 + t, Hq, Hkv, D,
					  wg_scale, KERN_ACT_BF16);
		ASSERT(rc == 0, "cpu attention: %s", moor_strerror(rc));
		down(&cpu, co, cod, (size_t)Hq * D * 4);
		char rn[128];
		snprintf(rn, sizeof rn, "%s row %d", nm, t);
		close_all(rn, w->a + (size_t)t * Hq * D, co, (size_t)Hq * D, 4e-3,
			  3e-2);
		cpu.o->free(cpu.c, cqd);
		cpu.o->free(cpu.c, cod);
	}
	free(cq);
	free(co);
}

static void case_attention_wg(const char *desc)
{
	if (!strstr(desc, "cc 9.0,")) {
		printf("  attention k_flash_wg: skipped: the device is not cc "
		       "9.0 (the kernel is built for sm_90a only)\n");
		return;
	}
	const int Hq = 24, Hkv = 4, D = 256, Tmax = 2048;
	const int64_t pos_max = 130048, L = pos_max + Tmax;
	size_t nkv = (size_t)L * Hkv * D, nq = (size_t)Tmax * Hq * D;
	void *K, *V;
	free(kt_weights(nkv, KERN_BF16, -2, 2, &K));
	free(kt_weights(nkv, KERN_BF16, -1, 1, &V));
	float *qv = rnd(nq, -1, 1), *q0 = calloc(nq, 4);
	for (size_t i = 0; i < nq; i++)
		qv[i] = moor_round_bf16(qv[i]);
	wg_bufs w = {.qv = q0};
	w.dK = up(&gpu, K, nkv * 2);
	w.dV = up(&gpu, V, nkv * 2);
	w.cK = up(&cpu, K, nkv * 2);
	w.cV = up(&cpu, V, nkv * 2);
	w.dO = zz(&gpu, nq * 4);
	w.fl = malloc(nq * 4);
	w.a = malloc(nq * 4);
	w.b = malloc(nq * 4);
	/* q = 0 first: every score is 0 whatever the Q K^T layout, so the
	 * output is the mean of the row's V rows, which checks P V, the
	 * mask and the softmax apart from S */
	w.dq = up(&gpu, q0, nq * 4);
	wg_case("q=0 ", &w, 1024, 1000);
	gpu.o->free(gpu.c, w.dq);
	w.qv = qv;
	w.dq = up(&gpu, qv, nq * 4);
	/* a scale that is not a power of two: two roundings of a score */
	wg_scale = 0.07f;
	wg_case("scale=0.07 ", &w, 1024, 1000);
	wg_scale = 1.0f / 16.0f;
	const int Ts[] = {1024, 2048};
	const int64_t pos[] = {0, 1000, 31744, 130048};
	for (int ti = 0; ti < 2; ti++)
		for (int pi = 0; pi < 4; pi++)
			wg_case("", &w, Ts[ti], pos[pi]);
	/* a row's result depends on its own q and keys only, not on T or on
	 * the rows sharing its block. Under 1,024 keys a call is one segment
	 * (the same cut), so rows 100..163 of a call of 1,024 rows at
	 * position 0 (100..127 in the first block's second warpgroup,
	 * 128..163 in the second block's first) equal, bit for bit, a call
	 * of those 64 rows at position 100 (one block, other warps) */
	{
		const size_t rw = (size_t)Hq * D;
		float *dq2 = up(&gpu, qv + 100 * rw, 64 * rw * 4);
		attn_dev(w.a, w.dO, w.dq, w.dK, w.dV, 1024, 0, Hq, Hkv, D, "1",
			 "attention wg T=1024 pos=0");
		attn_dev(w.b, w.dO, dq2, w.dK, w.dV, 64, 100, Hq, Hkv, D, "1",
			 "attention wg T=64 pos=100");
		const int same = !memcmp(w.a + 100 * rw, w.b, 64 * rw * 4);
		printf("  attention wg rows 100..163, T=1024 at 0 against T=64 "
		       "at 100: %s\n",
		       same ? "the same bits" : "DIFFER");
		ASSERT(same,
		       "attention wg: rows 100..163 at T=1024 pos=0 differ "
		       "from the same rows at T=64 pos=100");
		gpu.o->free(gpu.c, dq2);
	}
	gpu.o->free(gpu.c, w.dK);
	gpu.o->free(gpu.c, w.dV);
	gpu.o->free(gpu.c, w.dq);
	gpu.o->free(gpu.c, w.dO);
	cpu.o->free(cpu.c, w.cK);
	cpu.o->free(cpu.c, w.cV);
	free(K);
	free(V);
	free(qv);
	free(q0);
	free(w.fl);
	free(w.a);
	free(w.b);
}

/* ---- conv1d: the 4-tap kernel against the generic one ---- */

/* MOOR_CONV_KC=1 runs the CUDA backend's 4-tap kernel where it runs the
 * generic one (any tap count): the same sums in the same order, so the
 * outputs and tails compare by memcmp (a fused projection's row stride,
 * a chunk that ends inside a tile, then decode-sized calls). */
static void case_conv_kc(void)
{
	int T = 45, C = 640, ld = 1000, Kc = 4;
	void *Wc;
	float *wcf = kt_weights((size_t)C * Kc, KERN_BF16, -0.5f, 0.5f, &Wc);
	float *in = rnd((size_t)T * ld, -2, 2), *tail = rnd((size_t)(Kc - 1) * C, -1, 1);
	size_t on = (size_t)(T + 3) * C;
	float *r[2][2];
	for (int v = 0; v < 2; v++) {
		setenv("MOOR_CONV_KC", v ? "1" : "0", 1);
		float *din = up(&gpu, in, (size_t)T * ld * 4);
		float *dt = up(&gpu, tail, (size_t)(Kc - 1) * C * 4);
		void *dw = up(&gpu, Wc, (size_t)C * Kc * 2);
		float *dout = zz(&gpu, on * 4);
		ASSERT(gpu.o->conv1d(gpu.q, dout, din, ld, dt, dw, KERN_BF16, T, C,
				     Kc, KERN_ACT_BF16) == 0 &&
			       gpu.o->conv1d(gpu.q, dout + (size_t)T * C, din, ld, dt,
					     dw, KERN_BF16, 1, C, Kc,
					     KERN_ACT_BF16) == 0 &&
			       gpu.o->conv1d(gpu.q, dout + (size_t)(T + 1) * C,
					     din + ld, ld, dt, dw, KERN_BF16, 2, C,
					     Kc, KERN_ACT_BF16) == 0,
		       "conv1d (MOOR_CONV_KC=%d)", v);
		r[v][0] = malloc(on * 4);
		r[v][1] = malloc((size_t)(Kc - 1) * C * 4);
		down(&gpu, r[v][0], dout, on * 4);
		down(&gpu, r[v][1], dt, (size_t)(Kc - 1) * C * 4);
		gpu.o->free(gpu.c, din);
		gpu.o->free(gpu.c, dt);
		gpu.o->free(gpu.c, dw);
		gpu.o->free(gpu.c, dout);
	}
	unsetenv("MOOR_CONV_KC");
	ASSERT(!memcmp(r[0][0], r[1][0], on * 4),
	       "conv1d: the 4-tap kernel's outputs differ from the generic one's");
	ASSERT(!memcmp(r[0][1], r[1][1], (size_t)(Kc - 1) * C * 4),
	       "conv1d: the 4-tap kernel's tail differs from the generic one's");
	printf("  %-28s bit-exact against the generic kernel\n", "conv1d 4 taps");
	for (int v = 0; v < 2; v++) {
		free(r[v][0]);
		free(r[v][1]);
	}
	free(wcf);
	free(Wc);
	free(in);
	free(tail);
}

/* ---- the rest of the small ops ---- */

static void case_small(void)
{
	int T = 33, C = 640, Kc = 4, H = 256, V = 1000, Hv = 16;
	bk *bs[2] = {&cpu, &gpu};
	void *Wc, *Emb;
	float *wcf = kt_weights((size_t)C * Kc, KERN_BF16, -0.5f, 0.5f, &Wc);
	float *ef = kt_weights((size_t)V * H, KERN_BF16, -1, 1, &Emb);
	float *in = rnd((size_t)T * C, -2, 2), *tail = rnd((size_t)(Kc - 1) * C, -1, 1);
	float *ba = rnd((size_t)T * 2 * Hv, -3, 3), *alog = rnd(Hv, -1, 1), *dtb = rnd(Hv, -1, 1);
	float *x = rnd((size_t)T * 8 * 64, -2, 2);
	int32_t ids[33];
	for (int i = 0; i < T; i++)
		ids[i] = (i * 37 + 5) % V;
	float *r[2][8];
	for (int i = 0; i < 2; i++) {
		bk *b = bs[i];
		for (int k = 0; k < 8; k++)
			r[i][k] = malloc((size_t)T * (C > H ? C : H) * 8 + 4096);
		float *din = up(b, in, (size_t)T * C * 4), *dt = up(b, tail, (size_t)(Kc - 1) * C * 4);
		void *dw = up(b, Wc, (size_t)C * Kc * 2), *de = up(b, Emb, (size_t)V * H * 2);
		float *dout = zz(b, (size_t)T * C * 4);
		b->o->conv1d(b->q, dout, din, C, dt, dw, KERN_BF16, T, C, Kc, KERN_ACT_BF16);
		down(b, r[i][0], dout, (size_t)T * C * 4);
		down(b, r[i][1], dt, (size_t)(Kc - 1) * C * 4);
		/* decode-sized calls after it (T = 1, then 2: shorter than the
		 * tail, whose old values then stay in the new one) */
		float *dout2 = zz(b, (size_t)3 * C * 4);
		b->o->conv1d(b->q, dout2, din, C, dt, dw, KERN_BF16, 1, C, Kc, KERN_ACT_BF16);
		b->o->conv1d(b->q, dout2 + C, din + C, C, dt, dw, KERN_BF16, 2, C, Kc,
			     KERN_ACT_BF16);
		down(b, r[i][6], dout2, (size_t)3 * C * 4);
		down(b, r[i][7], dt, (size_t)(Kc - 1) * C * 4);
		int32_t *did = up(b, ids, sizeof ids);
		float *demb = zz(b, (size_t)T * H * 4);
		b->o->embed(b->q, demb, de, KERN_BF16, did, T, H, V);
		down(b, r[i][2], demb, (size_t)T * H * 4);
		float *dba = up(b, ba, (size_t)T * 2 * Hv * 4), *dal = up(b, alog, Hv * 4),
		      *ddt = up(b, dtb, Hv * 4);
		float *dbe = zz(b, (size_t)T * Hv * 4), *dg = zz(b, (size_t)T * Hv * 4);
		b->o->gdn_gates(b->q, dbe, dg, dba, 2 * Hv, dba + Hv, 2 * Hv, dal, ddt, T, Hv,
				KERN_ACT_BF16);
		down(b, r[i][3], dbe, (size_t)T * Hv * 4);
		down(b, r[i][4], dg, (size_t)T * Hv * 4);
		float *dx = up(b, x, (size_t)T * 8 * 64 * 4);
		b->o->rope(b->q, dx, 8 * 64, T, 8, 64, 16, 12345, 1e7f, KERN_ACT_BF16);
		down(b, r[i][5], dx, (size_t)T * 8 * 64 * 4);
	}
	/* the conv's sums of 4 products in the SPEC's order, then the device's
	 * expf in silu: an ulp of fp32 can move the sum's bf16 rounding by
	 * one ulp, and one bf16 ulp of silu's input is up to two of its
	 * output (silu' reaches 1.1 and the output lies below the input:
	 * 0.3828 against 0.3789 seen on an H100, an input near 0.6) */
	close_all("conv1d bf16", r[1][0], r[0][0], (size_t)T * C, 1e-6, 1.6e-2);
	ASSERT(!memcmp(r[1][1], r[0][1], (size_t)(Kc - 1) * C * 4), "conv1d tail differs");
	close_all("conv1d bf16 T=1, 2", r[1][6], r[0][6], (size_t)3 * C, 1e-6, 8e-3);
	ASSERT(!memcmp(r[1][7], r[0][7], (size_t)(Kc - 1) * C * 4),
	       "conv1d tail after T=1, 2 differs");
	ASSERT(!memcmp(r[1][2], r[0][2], (size_t)T * H * 4), "embed differs");
	close_all("gdn_gates beta", r[1][3], r[0][3], (size_t)T * Hv, 1e-6, 8e-3);
	close_all("gdn_gates g", r[1][4], r[0][4], (size_t)T * Hv, 1e-5, 1e-3);
	/* cos/sin of large angles: the device's and libm's may differ by an
	 * ulp, then bf16 roundings */
	close_all("rope bf16", r[1][5], r[0][5], (size_t)T * 8 * 64, 1e-2, 8e-3);
	free(wcf); /* the fp32 copies kt_weights made: the checks read the 16-bit ones */
	free(ef);
}

/* ---- decode's fused prologues against the unfused ops, on the device,
 * bit for bit (ops.h attn_prep, gdn_prep) ---- */

static int bits_eq(const void *a, const void *b, size_t n)
{
	return !memcmp(a, b, n);
}

static void case_prep(void)
{
	if (!gpu.o->attn_prep || !gpu.o->gdn_prep) {
		printf("  prep: the CUDA backend has no fused prologues\n");
		return;
	}
	bk *b = &gpu;
	/* attention: the 27B's shapes (24 query heads, 4 KV heads of 256,
	 * rot 64) and a small one, one row at a far position; a few rows;
	 * a prefill chunk of the 27B's at a grid line */
	const struct {
		int Hq, Hkv, D, rot, T;
		int64_t pos;
	} ac[] = {{24, 4, 256, 64, 1, 70001},
		  {8, 2, 64, 16, 1, 3},
		  {8, 2, 128, 32, 3, 500},
		  {24, 4, 256, 64, 1024, 3072}};
	for (size_t ci = 0; ci < sizeof ac / sizeof ac[0]; ci++) {
		int Hq = ac[ci].Hq, Hkv = ac[ci].Hkv, D = ac[ci].D,
		    T = ac[ci].T;
		int64_t pos = ac[ci].pos, rows = pos + T;
		size_t nq = (size_t)T * Hq * D, nk = (size_t)T * Hkv * D;
		size_t nkv = (size_t)rows * Hkv * D;
		void *Wq, *Wk;
		float *wq = kt_weights(D, KERN_BF16, -0.5f, 0.5f, &Wq);
		float *wk = kt_weights(D, KERN_BF16, -0.5f, 0.5f, &Wk);
		float *qg = rnd(2 * nq, -3, 3), *k = rnd(nk, -3, 3),
		      *v = rnd(nk, -3, 3);
		for (size_t i = 0; i < 2 * nq; i++)
			qg[i] = kt_to_dt(qg[i], KERN_BF16);
		float *dqg = up(b, qg, 2 * nq * 4), *dk = up(b, k, nk * 4);
		float *dv = up(b, v, nk * 4);
		void *dwq = up(b, Wq, D * 2), *dwk = up(b, Wk, D * 2);
		float *out[2][4];
		for (int f = 0; f < 2; f++) {
			float *dqo = zz(b, nq * 4), *dgo = zz(b, nq * 4);
			void *dK = zz(b, nkv * 2), *dV = zz(b, nkv * 2);
			float *dk2 = up(b, k, nk * 4);
			int rc;
			if (f) {
				rc = b->o->attn_prep(
				    b->q, dqo, dgo, dqg, dk2, dv, dwq, dwk,
				    KERN_BF16, dK, dV, KERN_BF16, T, Hq, Hkv, D,
				    ac[ci].rot, pos, 1e7f, 1e-6f,
				    KERN_ACT_BF16);
			} else {
				rc = b->o->split_qgate(b->q, dqo, dgo, dqg, T,
						       Hq, D);
				rc = rc ? rc
					: b->o->rmsnorm(b->q, dqo, D, dqo, D,
							dwq, KERN_BF16, T * Hq,
							D, 1e-6f, 1,
							KERN_ACT_BF16);
				rc = rc ? rc
					: b->o->rmsnorm(b->q, dk2, D, dk2, D,
							dwk, KERN_BF16, T * Hkv,
							D, 1e-6f, 1,
							KERN_ACT_BF16);
				rc = rc ? rc
					: b->o->rope(b->q, dqo, Hq * D, T, Hq,
						     D, ac[ci].rot, pos, 1e7f,
						     KERN_ACT_BF16);
				rc = rc ? rc
					: b->o->rope(b->q, dk2, Hkv * D, T, Hkv,
						     D, ac[ci].rot, pos, 1e7f,
						     KERN_ACT_BF16);
				rc = rc ? rc
					: b->o->kv_write(b->q, dK, KERN_BF16,
							 pos, dk2, Hkv * D, T,
							 Hkv * D);
				rc = rc ? rc
					: b->o->kv_write(b->q, dV, KERN_BF16,
							 pos, dv, Hkv * D, T,
							 Hkv * D);
			}
			ASSERT(rc == 0, "attn prologue (fused %d): %s", f,
			       moor_strerror(rc));
			out[f][0] = malloc(nq * 4);
			out[f][1] = malloc(nq * 4);
			out[f][2] = malloc(nkv * 2);
			out[f][3] = malloc(nkv * 2);
			down(b, out[f][0], dqo, nq * 4);
			down(b, out[f][1], dgo, nq * 4);
			down(b, out[f][2], dK, nkv * 2);
			down(b, out[f][3], dV, nkv * 2);
			b->o->free(b->c, dqo);
			b->o->free(b->c, dgo);
			b->o->free(b->c, dK);
			b->o->free(b->c, dV);
			b->o->free(b->c, dk2);
		}
		ASSERT(bits_eq(out[0][0], out[1][0], nq * 4) &&
			   bits_eq(out[0][1], out[1][1], nq * 4) &&
			   bits_eq(out[0][2], out[1][2], nkv * 2) &&
			   bits_eq(out[0][3], out[1][3], nkv * 2),
		       "attn_prep differs from its unfused ops (Hq %d, D %d, T "
		       "%d)",
		       Hq, D, T);
		printf("  %-28s Hq %d Hkv %d D %d T %d: same bits\n",
		       "attn_prep", Hq, Hkv, D, T);
		for (int f = 0; f < 2; f++)
			for (int j = 0; j < 4; j++)
				free(out[f][j]);
		b->o->free(b->c, dqg);
		b->o->free(b->c, dk);
		b->o->free(b->c, dv);
		b->o->free(b->c, dwq);
		b->o->free(b->c, dwk);
		free(wq);
		free(wk);
		free(Wq);
		free(Wk);
		free(qg);
		free(k);
		free(v);
	}

	/* GDN: the 27B's heads (16 q/k heads of 128, 48 v heads of 128, conv
	 * of 4), a small shape and one whose v channels end in a partial
	 * block of 128; b and a inside the projection's rows. One token (a
	 * decode step) and prefill chunks: shorter than the conv's window
	 * (the tail read and rewritten), within one tile of 16 tokens,
	 * across tiles with a partial one, and a grid chunk. Where the CUDA
	 * backend does not fuse (T > 1 at dk 64) it must say so */
	const struct {
		int Hk, dk, Hv, dv;
	} gc[] = {{16, 128, 48, 128}, {2, 64, 4, 32}, {1, 128, 3, 96}};
	const int gT[] = {1, 2, 5, 17, 100, 1024};
	for (size_t ci = 0; ci < sizeof gc / sizeof gc[0]; ci++)
		for (size_t ti = 0; ti < sizeof gT / sizeof gT[0]; ti++) {
			int Hk = gc[ci].Hk, dk = gc[ci].dk, Hv = gc[ci].Hv,
			    dv = gc[ci].dv, T = gT[ti];
			int Kc = 4, C = 2 * Hk * dk + Hv * dv, W = C + 2 * Hv;
			size_t nm = (size_t)T * W, nu = (size_t)T * C,
			       ng = (size_t)T * Hv;
			void *Wc;
			float *wc = kt_weights((size_t)C * Kc, KERN_BF16, -0.5f,
					       0.5f, &Wc);
			float *mixed = rnd(nm, -2, 2),
			      *tail = rnd((size_t)(Kc - 1) * C, -1, 1);
			float *alog = rnd(Hv, -1, 1), *dtb = rnd(Hv, -1, 1);
			for (size_t i = 0; i < nm; i++)
				mixed[i] = kt_to_dt(mixed[i], KERN_BF16);
			float *dm = up(b, mixed, nm * 4),
			      *dal = up(b, alog, Hv * 4);
			float *ddt = up(b, dtb, Hv * 4);
			void *dw = up(b, Wc, (size_t)C * Kc * 2);
			float *res[2][4] = {{0}};
			float qs = 1.0f / sqrtf((float)dk);
			int fused = 1;
			for (int f = 0; f < 2 && fused; f++) {
				float *dt =
				    up(b, tail, (size_t)(Kc - 1) * C * 4);
				float *du = zz(b, nu * 4), *dbe = zz(b, ng * 4),
				      *dg = zz(b, ng * 4);
				const float *db = dm + C, *da = dm + C + Hv;
				int rc;
				if (f) {
					rc = b->o->gdn_prep(
					    b->q, du, dm, W, dt, dw, KERN_BF16,
					    Kc, Hk, dk, Hv, dv, 1e-6f, qs, dbe,
					    dg, db, da, W, dal, ddt, T,
					    KERN_ACT_BF16);
					/* T = 1 and dk 128 are fused */
					ASSERT(
					    rc != MOOR_EUNSUP ||
						(T > 1 && dk != 128),
					    "gdn_prep did not fuse T %d dk %d",
					    T, dk);
					if (rc == MOOR_EUNSUP) {
						fused = 0;
						rc = 0;
					}
				} else {
					rc = b->o->conv1d(b->q, du, dm, W, dt,
							  dw, KERN_BF16, T, C,
							  Kc, KERN_ACT_BF16);
					rc = rc ? rc
						: b->o->l2norm(
						      b->q, du, C, T, Hk, dk,
						      1e-6f, qs, KERN_ACT_F32);
					rc = rc ? rc
						: b->o->l2norm(
						      b->q, du + Hk * dk, C, T,
						      Hk, dk, 1e-6f, 1.0f,
						      KERN_ACT_F32);
					rc = rc ? rc
						: b->o->gdn_gates(
						      b->q, dbe, dg, db, W, da,
						      W, dal, ddt, T, Hv,
						      KERN_ACT_BF16);
				}
				ASSERT(rc == 0, "gdn prologue (fused %d): %s",
				       f, moor_strerror(rc));
				size_t sz[4] = {nu * 4,
						(size_t)(Kc - 1) * C * 4,
						ng * 4, ng * 4};
				void *src[4] = {du, dt, dbe, dg};
				for (int j = 0; fused && j < 4; j++) {
					res[f][j] = malloc(sz[j]);
					down(b, res[f][j], src[j], sz[j]);
				}
				ASSERT(
				    !fused ||
					(bits_eq(res[0][0], res[f][0], sz[0]) &&
					 bits_eq(res[0][1], res[f][1], sz[1]) &&
					 bits_eq(res[0][2], res[f][2], sz[2]) &&
					 bits_eq(res[0][3], res[f][3], sz[3])),
				    "gdn_prep differs from its unfused ops (Hk "
				    "%d, "
				    "dk %d, Hv %d, dv %d, T %d)",
				    Hk, dk, Hv, dv, T);
				b->o->free(b->c, dt);
				b->o->free(b->c, du);
				b->o->free(b->c, dbe);
				b->o->free(b->c, dg);
			}
			printf("  %-28s Hk %d dk %d Hv %d dv %d T %d: %s\n",
			       "gdn_prep", Hk, dk, Hv, dv, T,
			       fused ? "same bits"
				     : "not fused (the unfused ops run)");
			for (int f = 0; f < 2; f++)
				for (int j = 0; j < 4; j++)
					free(res[f][j]);
			b->o->free(b->c, dm);
			b->o->free(b->c, dal);
			b->o->free(b->c, ddt);
			b->o->free(b->c, dw);
			free(wc);
			free(Wc);
			free(mixed);
			free(tail);
			free(alog);
			free(dtb);
		}
	/* rows narrower than the channels, or b and a's narrower than Hv:
	 * refused before anything runs (no pointer is read) */
	{
		float *d = zz(b, 64);
		ASSERT(b->o->gdn_prep(b->q, d, d, 2 * 128 + 128 - 1, d, d,
				      KERN_BF16, 4, 1, 128, 1, 128, 1e-6f, 1.0f,
				      d, d, d, d, 1, d, d, 16,
				      KERN_ACT_BF16) == MOOR_ERANGE &&
			   b->o->gdn_prep(b->q, d, d, 2 * 128 + 2 * 128, d, d,
					  KERN_BF16, 4, 1, 128, 2, 128, 1e-6f,
					  1.0f, d, d, d, d, 1, d, d, 16,
					  KERN_ACT_BF16) == MOOR_ERANGE,
		       "gdn_prep took rows narrower than its channels or gates");
		b->o->free(b->c, d);
	}
}

/* ---- fill_random and sample(): the CPU's bits ---- */

static void case_bits(void)
{
	size_t n = 100003;
	for (int dt = 0; dt < 3; dt++) {
		int d = dt == 0 ? KERN_F32 : dt == 1 ? KERN_BF16 : KERN_F16;
		size_t b = n * (d == KERN_F32 ? 4 : 2);
		void *pc = zz(&cpu, b), *pg = zz(&gpu, b);
		cpu.o->fill_random(cpu.q, pc, d, n, 77, -0.25f, 0.5f);
		gpu.o->fill_random(gpu.q, pg, d, n, 77, -0.25f, 0.5f);
		void *hc = malloc(b), *hg = malloc(b);
		down(&cpu, hc, pc, b);
		down(&gpu, hg, pg, b);
		ASSERT(!memcmp(hc, hg, b), "fill_random %s differs from the CPU's", kt_dtname(d));
		free(hc);
		free(hg);
	}
	int V = 248320;
	kern_limits lim = {.rows = 1, .width = 1, .vocab = V};
	gpu.o->reserve(gpu.c, &lim);
	cpu.o->reserve(cpu.c, &lim);
	float *lg = rnd(V, -4, 12);
	lg[17] = NAN;
	lg[5000] = lg[4000] = 30.0f; /* a tie at the top: index 4000 first */
	for (int i = 100; i < 110; i++)
		lg[i] = 12.0f; /* ties inside the candidates */
	float *dc = up(&cpu, lg, (size_t)V * 4), *dg = up(&gpu, lg, (size_t)V * 4);
	int32_t *gid = zz(&gpu, 4);
	kern_sampling ps[] = {
	    {0.0f, 0, 1.0f, 0.0f}, {1.0f, 0, 1.0f, 0.0f}, {0.7f, 40, 0.95f, 0.0f},
	    {1.3f, 0, 0.9f, 0.05f}, {0.5f, 1000, 1.0f, 0.01f}, {2.0f, 0, 0.5f, 0.0f},
	};
	uint64_t draw = 0x0123456789abcdefull;
	int same = 0, total = 0;
	for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++)
		for (int k = 0; k < 40; k++) {
			draw = draw * 6364136223846793005ull + 1442695040888963407ull;
			int32_t a = -1, c = -1, cd = -1;
			int rc = cpu.o->sample(cpu.q, dc, V, &ps[pi], draw, NULL, &a);
			int rc2 = gpu.o->sample(gpu.q, dg, V, &ps[pi], draw, gid, &c);
			down(&gpu, &cd, gid, 4);
			ASSERT(rc == 0 && rc2 == 0, "sample: %s %s", moor_strerror(rc),
			       moor_strerror(rc2));
			ASSERT(c == cd, "sample: host id %d, device id %d", c, cd);
			total++;
			same += a == c;
			if (a != c && total - same < 5)
				fprintf(stderr, "  sample case %zu draw %d: cpu %d cuda %d\n",
					pi, k, a, c);
		}
	ASSERT(same == total, "sample: %d of %d draws differ from the CPU's", total - same,
	       total);
	printf("  sample: %d of %d draws give the CPU's token\n", same, total);

	/* logprobs(): the CPU's bits, ids and values (ops.h's rule is the
	 * same double arithmetic on both), on the logits above (a NaN, ties
	 * at the top and inside the top 20), at every n_top, and on logits
	 * with -inf among them, all -inf, and a +inf */
	for (int lc = 0; lc < 4; lc++) {
		if (lc == 1)
			for (int i = 0; i < V; i += 3)
				lg[i] = -INFINITY;
		if (lc == 2)
			for (int i = 0; i < V; i++)
				lg[i] = -INFINITY;
		if (lc == 3)
			lg[777] = INFINITY;
		if (lc) {
			cpu.o->free(cpu.c, dc);
			gpu.o->free(gpu.c, dg);
			dc = up(&cpu, lg, (size_t)V * 4);
			dg = up(&gpu, lg, (size_t)V * 4);
		}
		for (int nt = 0; nt <= KERN_LOGPROBS_MAX;
		     nt += nt < 3 ? 1 : 6) {
			int32_t tok = (int32_t)((nt * 7919 + lc * 104729) % V);
			float lc_[KERN_LOGPROBS_MAX + 1],
			    lg_[KERN_LOGPROBS_MAX + 1];
			int32_t ic[KERN_LOGPROBS_MAX], ig[KERN_LOGPROBS_MAX];
			memset(lc_, 0, sizeof lc_);
			memset(lg_, 0xff, sizeof lg_);
			memset(ic, 0, sizeof ic);
			memset(ig, 0xff, sizeof ig);
			int rc =
			    cpu.o->logprobs(cpu.q, dc, V, tok, nt, lc_, ic);
			int rc2 =
			    gpu.o->logprobs(gpu.q, dg, V, tok, nt, lg_, ig);
			ASSERT(rc == 0 && rc2 == 0, "logprobs: %s %s",
			       moor_strerror(rc), moor_strerror(rc2));
			ASSERT(!memcmp(lc_, lg_, (size_t)(nt + 1) * 4) &&
				   !memcmp(ic, ig, (size_t)nt * 4),
			       "logprobs (logits %d, n_top %d) differ from the "
			       "CPU's: token %.9g against %.9g, first id %d "
			       "against %d",
			       lc, nt, lg_[0], lc_[0], nt ? ig[0] : -1,
			       nt ? ic[0] : -1);
		}
	}
	printf("  logprobs: the CPU's bits on 4 logit sets, n_top 0..20\n");
	free(lg);
}

/* ---- greedy sample(): the rule's token at every kind of maximum ---- */

/* The lowest index among the maxima, NaN as -inf (kern_sample_host, the
 * rule), from the device's blocks of KERN_SAMPLE_BLOCK and their finish:
 * V of 1, a block and one either side, several blocks with the last
 * partial, the tiny model's and the 248k family's vocabularies; the
 * maximum at a block's first or last index or in the last partial block,
 * ties of it across blocks and inside one, NaNs (at index 0 too), -0
 * against +0, +inf, all -inf and all NaN. dev_id gets the same token. */
static void case_greedy(void)
{
	static const int Vs[] = {1, 2, 255, 256, 257, 4097, 151669, 248320};
	const kern_sampling g = {
	    .temperature = 0.0f, .top_k = 0, .top_p = 1.0f};
	int cases = 0;
	kern_limits lim = {.rows = 1, .width = 1, .vocab = 248320};
	ASSERT(gpu.o->reserve(gpu.c, &lim) == 0, "reserve");
	for (size_t vi = 0; vi < sizeof Vs / sizeof Vs[0]; vi++) {
		const int V = Vs[vi];
		float *lg = malloc((size_t)V * 4);
		int32_t *gid = zz(&gpu, 4);
		for (int kind = 0; kind < 10; kind++) {
			for (int i = 0; i < V; i++)
				lg[i] = kt_unif(-4.0f, 4.0f);
			const int B = KERN_SAMPLE_BLOCK;
			switch (kind) {
			case 1: /* a block's first index */
				lg[(V / 2) / B * B] = 9.0f;
				break;
			case 2: /* a block's last index (or the last) */
				lg[V - 1 < B - 1 ? V - 1 : B - 1] = 9.0f;
				break;
			case 3: /* the last partial block */
				lg[V - 1] = 9.0f;
				break;
			case 4: /* a tie across blocks: the lower wins */
				lg[V - 1] = lg[V / 3] = 9.0f;
				break;
			case 5: /* NaNs, index 0 among them, above a tie */
				for (int i = 0; i < V; i += 97)
					lg[i] = NAN;
				lg[V / 2] = lg[V - 1] = 9.0f;
				lg[0] = NAN;
				break;
			case 6: /* -0 against +0 at the top: a tie */
				for (int i = 0; i < V; i++)
					lg[i] = -1.0f;
				lg[V - 1] = 0.0f;
				lg[V / 2] = -0.0f;
				break;
			case 7: /* +inf */
				lg[(V * 2) / 3] = INFINITY;
				break;
			case 8: /* all -inf */
				for (int i = 0; i < V; i++)
					lg[i] = -INFINITY;
				break;
			case 9: /* all NaN */
				for (int i = 0; i < V; i++)
					lg[i] = NAN;
				break;
			}
			int32_t want = kern_sample_host(lg, V, &g, 0, NULL);
			float *dg = up(&gpu, lg, (size_t)V * 4);
			int32_t got = -1, dev = -1;
			int rc = gpu.o->sample(gpu.q, dg, V, &g, 7, gid, &got);
			down(&gpu, &dev, gid, 4);
			ASSERT(rc == 0, "greedy V %d kind %d: %s", V, kind,
			       moor_strerror(rc));
			ASSERT(got == want && dev == want,
			       "greedy V %d kind %d: token %d (device %d), the "
			       "rule says %d",
			       V, kind, got, dev, want);
			gpu.o->free(gpu.c, dg);
			cases++;
		}
		gpu.o->free(gpu.c, gid);
		free(lg);
	}
	printf("  greedy: the rule's token in %d cases\n", cases);
}

int main(void)
{
	const kern_ops *g = kern_backend("cuda");
	if (!g) {
		printf("test_kern_backends: skipped: this build has no CUDA backend\n");
		return 77;
	}
	char err[MOOR_ERRLEN] = "";
	if (g->probe(0, err)) {
		printf("test_kern_backends: skipped: no usable GPU (%s)\n", err);
		return 77;
	}
	kern_config cc = {.threads = 4}, gc = {.device = 0};
	cpu.o = kern_backend("cpu");
	gpu.o = g;
	if (cpu.o->create(&cc, &cpu.c) || gpu.o->create(&gc, &gpu.c)) {
		fprintf(stderr, "create failed\n");
		return 1;
	}
	cpu.q = cpu.o->queue(cpu.c, KERN_Q_COMPUTE);
	gpu.q = gpu.o->queue(gpu.c, KERN_Q_COMPUTE);
	kern_limits lim = {.rows = 1024, .width = 20000, .window = 8192,
			   .q_heads = 24, .head_dim = 256, .vocab = 1000};
	cpu.o->reserve(cpu.c, &lim);
	int rc = gpu.o->reserve(gpu.c, &lim);
	ASSERT(rc == 0, "reserve: %s", moor_strerror(rc));
	char d[256];
	gpu.o->describe(gpu.c, d, sizeof d);
	printf("cuda: %s\n", d);
	kt_seed(5);
	case_matmul();
	case_mlp();
	case_norms();
	case_gdn();
	case_gdn_rt();
	case_gdn_rt_wide();
	case_attention();
	case_split_long();
	case_prep();
	case_small();
	case_conv_kc();
	case_bits();
	case_greedy();
	/* last: a fault there (a new kernel) leaves the other cases' results */
	case_attention_wg(d);
	case_attention_pieces(d);
	case_gdn_tc();
	cpu.o->destroy(cpu.c);
	gpu.o->destroy(gpu.c);
	return kt_done("test_kern_backends");
}
