/* test_kern_deterministic: the bits of every op depend on its inputs only.
 *
 *  1. Every op on 1, 2 and 3 threads gives the same bytes (sizes chosen so
 *     that each op splits into several tasks).
 *  2. A row does not depend on the rows around it, where ops.h promises it:
 *     matmul, rmsnorm, l2norm and rope rows computed alone (T = 1, at an
 *     offset) or in a sub-range equal the rows of one large call; attention
 *     rows alone at pos0 + t equal the rows of one call at pos0, in short
 *     contexts and in long ones (33k keys), and so do the rows of a backend
 *     whose score buffer is lowered to 3000 floats (its test seam), where
 *     rows longer than that take three passes over chunks whose size
 *     depends on the group: the one-pass and three-pass paths agree bit for
 *     bit; conv1d
 *     over T equals three calls with the tail carried between them.
 *  3. The chunked delta rule over 256 tokens equals two calls over 128 + 128
 *     (o and the state), because sub-chunks are aligned to each call's start
 *     and 128 is a multiple of 64; and the rows of a partial last chunk
 *     (T = 100) equal the first rows of a longer call. The recurrent rule
 *     over 10 tokens equals 4 + 6. */
#include "kt.h"

#define NB 3
static kt_be be[NB]; /* 1, 2, 3 threads */
static kt_be bs[2];  /* 1, 2 threads, attention's score cap 3000 floats */

static void same(const char *what, const void *a, const void *b, size_t n)
{
	ASSERT(memcmp(a, b, n) == 0, "%s: bits differ", what);
}

static float *fmk(size_t n, float lo, float hi)
{
	float *x = malloc(n * 4 + 4);
	kt_fill(x, n, lo, hi);
	return x;
}

/* ---- matmul ---- */

static void mm_run(kt_be *b, float *y, int ldy, const float *x, int ldx,
		   const void *W, int wdt, int T, int N, int K, int act)
{
	int rc = b->o->matmul(b->q, y, ldy, x, ldx, W, wdt, T, N, K, act);
	ASSERT(rc == 0, "matmul %d", rc);
}

static void test_matmul(int wdt, int act)
{
	int T = 2100, N = 200, K = 300,
	    ld = K + 1; /* 256-row tasks, a partial one */
	float *x = fmk((size_t)T * ld, -1, 1);
	void *W;
	float *wf = kt_weights((size_t)N * K, wdt, -1, 1, &W);
	size_t ny = (size_t)T * N;
	float *y[NB], *r = malloc(ny * 4);
	for (int i = 0; i < NB; i++) {
		y[i] = malloc(ny * 4);
		kt_poison(y[i], ny);
		mm_run(&be[i], y[i], N, x, ld, W, wdt, T, N, K, act);
		if (i)
			same("matmul threads", y[0], y[i], ny * 4);
	}
	const int rows[] = {0, 1, 255, 256, 1300, 2099};
	for (int i = 0; i < 6; i++) {
		int t = rows[i];
		mm_run(&be[1], r, N, x + (size_t)t * ld, ld, W, wdt, 1, N, K,
		       act);
		same("matmul row alone", r, y[0] + (size_t)t * N,
		     (size_t)N * 4);
	}
	mm_run(&be[1], r, N, x + (size_t)101 * ld, ld, W, wdt, 37, N, K, act);
	same("matmul rows 101..137", r, y[0] + (size_t)101 * N,
	     (size_t)37 * N * 4);
	for (int i = 0; i < NB; i++)
		free(y[i]);
	free(r);
	free(x);
	free(wf);
	free(W);
}

/* ---- norms, rope ---- */

static void test_rows(int act)
{
	int rows = 1000, dim = 64, ld = 70;
	size_t n = (size_t)rows * ld;
	float *x = fmk(n, -2, 2), *z = fmk(n, -4, 4);
	void *w;
	float *wf = kt_weights(dim, KERN_BF16, -1, 1, &w);
	float *y[NB], *r = malloc(n * 4);
	for (int i = 0; i < NB; i++) {
		y[i] = malloc(n * 4);
		kt_poison(y[i], n);
		ASSERT(be[i].o->rmsnorm(be[i].q, y[i], ld, x, ld, w, KERN_BF16,
					rows, dim, 1e-6f, 1, act) == 0,
		       "rmsnorm");
		if (i)
			same("rmsnorm threads", y[0], y[i], n * 4);
	}
	for (int t = 0; t < rows; t += 333) {
		ASSERT(be[1].o->rmsnorm(be[1].q, r, ld, x + (size_t)t * ld, ld,
					w, KERN_BF16, 1, dim, 1e-6f, 1,
					act) == 0,
		       "rmsnorm");
		same("rmsnorm row alone", r, y[0] + (size_t)t * ld,
		     (size_t)dim * 4);
	}

	/* gated_rmsnorm: [rows * 2, 32] contiguous */
	for (int i = 0; i < NB; i++) {
		kt_poison(y[i], n);
		ASSERT(be[i].o->gated_rmsnorm(be[i].q, y[i], x, z, 32, 1, w, KERN_BF16,
					      rows * 2, 32, 1e-6f, act) == 0,
		       "gated_rmsnorm");
		if (i)
			same("gated_rmsnorm threads", y[0], y[i],
			     (size_t)rows * 64 * 4);
	}

	/* l2norm and rope, in place on [T, 2 heads, 32] of stride 70 */
	for (int op = 0; op < 2; op++) {
		const char *nm = op ? "rope" : "l2norm";
		for (int i = 0; i < NB; i++) {
			memcpy(y[i], x, n * 4);
			int rc = op ? be[i].o->rope(be[i].q, y[i], ld, rows, 2,
						    32, 16, 1000, 1e7f, act)
				    : be[i].o->l2norm(be[i].q, y[i], ld, rows,
						      2, 32, 1e-6f, 0.17f, act);
			ASSERT(rc == 0, "%s", nm);
			if (i)
				same(nm, y[0], y[i], n * 4);
		}
		for (int t = 0; t < rows; t += 333) {
			memcpy(r, x + (size_t)t * ld, (size_t)ld * 4);
			int rc = op ? be[1].o->rope(be[1].q, r, ld, 1, 2, 32,
						    16, 1000 + t, 1e7f, act)
				    : be[1].o->l2norm(be[1].q, r, ld, 1, 2, 32,
						      1e-6f, 0.17f, act);
			ASSERT(rc == 0, "%s", nm);
			same(op ? "rope row alone" : "l2norm row alone", r,
			     y[0] + (size_t)t * ld, (size_t)ld * 4);
		}
	}
	for (int i = 0; i < NB; i++)
		free(y[i]);
	free(r);
	free(x);
	free(z);
	free(wf);
	free(w);
}

/* ---- element-wise, embed, gates, kv_write, split ---- */

static void test_elementwise(int act)
{
	size_t n = 100003;
	float *a = fmk(n, -5, 5), *b = fmk(n, -5, 5);
	float *y[NB];
	for (int op = 0; op < 3; op++) {
		for (int i = 0; i < NB; i++) {
			y[i] = malloc(n * 4);
			memcpy(y[i], b, n * 4);
			const kern_ops *o = be[i].o;
			int rc =
			    op == 0 ? o->add(be[i].q, y[i], a, n, act)
			    : op == 1
				? o->swiglu(be[i].q, y[i], a, b, n, act)
				: o->sigmoid_mul(be[i].q, y[i], a, b, n, act);
			ASSERT(rc == 0, "element-wise op %d", op);
			if (i)
				same("element-wise threads", y[0], y[i], n * 4);
		}
		for (int i = 0; i < NB; i++)
			free(y[i]);
	}
	free(a);
	free(b);
}

static void test_misc(void)
{
	int T = 300, H = 48, V = 1000;
	void *tab;
	float *tf = kt_weights((size_t)V * H, KERN_BF16, -1, 1, &tab);
	int32_t *ids = malloc((size_t)T * 4);
	for (int t = 0; t < T; t++)
		ids[t] = (int32_t)(kt_next() % V);
	size_t n = (size_t)T * 2 * H;
	float *src = fmk(n, -3, 3);
	const float *bb = src, *aa = src + T * 8;
	float A_log[8] = {0.1f, -0.3f, 1, 0.5f, -1, 2, 0.2f, -0.7f};
	float dtb[8] = {0.5f, -0.1f, 0.3f, 1, -2, 0.2f, 0.1f, -0.4f};
	/* per backend: embed, split q, split gate, kv_write, beta, g */
	enum { NOUT = 6 };
	static const char *const nm[NOUT] = {
	    "embed", "split q", "split gate", "kv_write", "gdn beta", "gdn g"};
	float *y[NB][NOUT];
	for (int i = 0; i < NB; i++) {
		const kern_ops *o = be[i].o;
		for (int j = 0; j < NOUT; j++) {
			y[i][j] = malloc(n * 4);
			memset(y[i][j], 0, n * 4);
		}
		ASSERT(o->embed(be[i].q, y[i][0], tab, KERN_BF16, ids, T, H,
				V) == 0,
		       "embed");
		ASSERT(o->split_qgate(be[i].q, y[i][1], y[i][2], src, T, 4,
				      H / 4) == 0,
		       "split_qgate");
		ASSERT(o->kv_write(be[i].q, y[i][3], KERN_BF16, 7, src, 2 * H,
				   T - 7, H) == 0,
		       "kv_write");
		ASSERT(o->gdn_gates(be[i].q, y[i][4], y[i][5], bb, 8, aa, 8,
				    A_log, dtb, T, 8, KERN_ACT_BF16) == 0,
		       "gdn_gates");
		if (i)
			for (int j = 0; j < NOUT; j++)
				same(nm[j], y[0][j], y[i][j], n * 4);
	}
	for (int i = 0; i < NB; i++)
		for (int j = 0; j < NOUT; j++)
			free(y[i][j]);
	free(tf);
	free(tab);
	free(ids);
	free(src);
}

/* ---- conv1d ---- */

static void test_conv1d(int act)
{
	int T = 100, C = 300, Kc = 4, ld = C + 2;
	float *in = fmk((size_t)T * ld, -2, 2);
	float *tail0 = fmk((size_t)(Kc - 1) * C, -2, 2);
	void *w;
	float *wf = kt_weights((size_t)C * Kc, KERN_BF16, -1, 1, &w);
	size_t no = (size_t)T * C, nt = (size_t)(Kc - 1) * C;
	float *out[NB], *tail[NB];
	for (int i = 0; i < NB; i++) {
		out[i] = malloc(no * 4);
		tail[i] = malloc(nt * 4);
		memcpy(tail[i], tail0, nt * 4);
		ASSERT(be[i].o->conv1d(be[i].q, out[i], in, ld, tail[i], w,
				       KERN_BF16, T, C, Kc, act) == 0,
		       "conv1d");
		if (i) {
			same("conv1d threads", out[0], out[i], no * 4);
			same("conv1d tail threads", tail[0], tail[i], nt * 4);
		}
	}
	/* 37 + 1 + 62 tokens, the tail carried */
	float *o2 = malloc(no * 4), *t2 = malloc(nt * 4);
	memcpy(t2, tail0, nt * 4);
	const int cut[4] = {0, 37, 38, 100};
	for (int s = 0; s < 3; s++)
		ASSERT(be[1].o->conv1d(be[1].q, o2 + (size_t)cut[s] * C,
				       in + (size_t)cut[s] * ld, ld, t2, w,
				       KERN_BF16, cut[s + 1] - cut[s], C, Kc,
				       act) == 0,
		       "conv1d");
	same("conv1d split 37+1+62", out[0], o2, no * 4);
	same("conv1d split tail", tail[0], t2, nt * 4);
	for (int i = 0; i < NB; i++) {
		free(out[i]);
		free(tail[i]);
	}
	free(o2);
	free(t2);
	free(in);
	free(tail0);
	free(wf);
	free(w);
}

/* ---- attention ---- */

/* nb backends (1, 2, 3 threads); rows alone every `step` tokens */
static void test_attention(int T, int64_t pos0, int Hq, int Hkv, int D,
			   int kvdt, int act, int nb, int step)
{
	int ldq = Hq * D + 3;
	size_t L = (size_t)pos0 + T, nkv = L * Hkv * D;
	float *qv = fmk((size_t)T * ldq, -1.5f, 1.5f);
	void *K, *V;
	float *kf = kt_weights(nkv, kvdt, -1, 1, &K);
	float *vf = kt_weights(nkv, kvdt, -1, 1, &V);
	size_t no = (size_t)T * Hq * D;
	float *out[NB], *r = malloc((size_t)Hq * D * 4);
	float sc = 1.0f / sqrtf((float)D);
	char what[80];
	snprintf(what, sizeof what, "attention T%d pos%lld", T,
		 (long long)pos0);
	for (int i = 0; i < nb; i++) {
		out[i] = malloc(no * 4);
		kt_poison(out[i], no);
		ASSERT(be[i].o->attention(be[i].q, out[i], qv, ldq, K, V, kvdt,
					  T, pos0, Hq, Hkv, D, sc, act) == 0,
		       "attention");
		if (i)
			same(what, out[0], out[i], no * 4);
	}
	/* the small score cap: groups of other sizes, and rows longer than
	 * the cap take three passes; the bits stay */
	for (int i = 0; i < 2; i++) {
		kt_poison(out[nb - 1], no);
		ASSERT(bs[i].o->attention(bs[i].q, out[nb - 1], qv, ldq, K, V,
					  kvdt, T, pos0, Hq, Hkv, D, sc,
					  act) == 0,
		       "attention");
		same(i ? "attention small cap, 2 threads"
		       : "attention small cap, 1 thread",
		     out[0], out[nb - 1], no * 4);
	}
	for (int t = step - 1; t < T; t += step) {
		kt_poison(r, (size_t)Hq * D);
		ASSERT(bs[0].o->attention(bs[0].q, r, qv + (size_t)t * ldq, ldq,
					  K, V, kvdt, 1, pos0 + t, Hq, Hkv, D,
					  sc, act) == 0,
		       "attention");
		same("attention row alone, small cap", r,
		     out[0] + (size_t)t * Hq * D, (size_t)Hq * D * 4);
		kt_poison(r, (size_t)Hq * D);
		ASSERT(be[1].o->attention(be[1].q, r, qv + (size_t)t * ldq, ldq,
					  K, V, kvdt, 1, pos0 + t, Hq, Hkv, D,
					  sc, act) == 0,
		       "attention");
		same("attention row alone", r, out[0] + (size_t)t * Hq * D,
		     (size_t)Hq * D * 4);
	}
	for (int i = 0; i < nb; i++)
		free(out[i]);
	free(r);
	free(qv);
	free(kf);
	free(vf);
	free(K);
	free(V);
}

/* ---- the delta rule ---- */

struct dr {
	int T, Hk, Hv, dk, dv, ld;
	float *u, *g, *beta, *S0;
};

static void dr_make(struct dr *d, int T, int Hk, int Hv, int dk, int dv)
{
	*d = (struct dr){.T = T,
			 .Hk = Hk,
			 .Hv = Hv,
			 .dk = dk,
			 .dv = dv,
			 .ld = 2 * Hk * dk + Hv * dv};
	d->u = fmk((size_t)T * d->ld, -0.3f, 0.3f);
	d->g = fmk((size_t)T * Hv, -1.0f, -0.01f);
	d->beta = fmk((size_t)T * Hv, 0.05f, 0.95f);
	d->S0 = fmk((size_t)Hv * dk * dv, -0.5f, 0.5f);
}

/* Tokens [t0, t0 + n) of d, o rows into o + t0 rows, S in place. */
static void dr_run(kt_be *b, const struct dr *d, int chunked, int t0, int n,
		   float *o, float *S, void *ws, int act)
{
	const float *u = d->u + (size_t)t0 * d->ld;
	const float *q = u, *k = u + (size_t)d->Hk * d->dk,
		    *v = u + (size_t)2 * d->Hk * d->dk;
	const float *g = d->g + (size_t)t0 * d->Hv,
		    *be_ = d->beta + (size_t)t0 * d->Hv;
	float *oo = o + (size_t)t0 * d->Hv * d->dv;
	int rc = chunked ? b->o->delta_chunked(b->q, oo, S, q, k, d->ld, v,
					       d->ld, g, be_, n, d->Hk, d->Hv,
					       d->dk, d->dv, ws, act)
			 : b->o->delta_recurrent(b->q, oo, S, q, k, d->ld, v,
						 d->ld, g, be_, n, d->Hk, d->Hv,
						 d->dk, d->dv, act);
	ASSERT(rc == 0, "delta: %d", rc);
}

static void test_delta(int act)
{
	struct dr d;
	dr_make(&d, 256, 2, 4, 32, 32);
	size_t no = (size_t)d.T * d.Hv * d.dv, nS = (size_t)d.Hv * d.dk * d.dv;
	size_t wsb = be[0].o->delta_ws_bytes(be[0].ctx, d.T, d.Hv, d.dk, d.dv);
	void *ws;
	ASSERT(be[0].o->alloc(be[0].ctx, wsb, &ws) == 0, "alloc");
	float *o[NB], *S[NB];
	for (int i = 0; i < NB; i++) {
		o[i] = malloc(no * 4);
		S[i] = malloc(nS * 4);
		kt_poison(o[i], no);
		memcpy(S[i], d.S0, nS * 4);
		dr_run(&be[i], &d, 1, 0, d.T, o[i], S[i], ws, act);
		if (i) {
			same("delta_chunked threads", o[0], o[i], no * 4);
			same("delta_chunked S threads", S[0], S[i], nS * 4);
		}
	}
	float *o2 = malloc(no * 4), *S2 = malloc(nS * 4);
	kt_poison(o2, no);
	memcpy(S2, d.S0, nS * 4);
	dr_run(&be[1], &d, 1, 0, 128, o2, S2, ws, act);
	dr_run(&be[1], &d, 1, 128, 128, o2, S2, ws, act);
	same("delta_chunked 256 = 128 + 128", o[0], o2, no * 4);
	same("delta_chunked 256 = 128 + 128, S", S[0], S2, nS * 4);

	/* a partial last chunk: rows 0..99 of T = 100 are rows 0..99 of
	 * T = 256 (the state differs, of course) */
	kt_poison(o2, no);
	memcpy(S2, d.S0, nS * 4);
	dr_run(&be[1], &d, 1, 0, 100, o2, S2, ws, act);
	same("delta_chunked rows of a partial chunk", o[0], o2,
	     (size_t)100 * d.Hv * d.dv * 4);

	/* recurrent: threads, and 10 = 4 + 6 */
	for (int i = 0; i < NB; i++) {
		kt_poison(o[i], no);
		memcpy(S[i], d.S0, nS * 4);
		dr_run(&be[i], &d, 0, 0, 10, o[i], S[i], NULL, act);
		if (i) {
			same("delta_recurrent threads", o[0], o[i], no * 4);
			same("delta_recurrent S threads", S[0], S[i], nS * 4);
		}
	}
	kt_poison(o2, no);
	memcpy(S2, d.S0, nS * 4);
	dr_run(&be[1], &d, 0, 0, 4, o2, S2, NULL, act);
	dr_run(&be[1], &d, 0, 4, 6, o2, S2, NULL, act);
	same("delta_recurrent 10 = 4 + 6", o[0], o2,
	     (size_t)10 * d.Hv * d.dv * 4);
	same("delta_recurrent 10 = 4 + 6, S", S[0], S2, nS * 4);

	for (int i = 0; i < NB; i++) {
		free(o[i]);
		free(S[i]);
	}
	free(o2);
	free(S2);
	be[0].o->free(be[0].ctx, ws);
	free(d.u);
	free(d.g);
	free(d.beta);
	free(d.S0);
}

int main(void)
{
	kt_seed(77);
	for (int i = 0; i < NB; i++)
		be[i] = kt_open(i + 1);
	for (int i = 0; i < 2; i++)
		bs[i] = kt_open_cap(i + 1, 3000);
	for (int act = 0; act < 2; act++) {
		test_matmul(KERN_BF16, act);
		test_matmul(KERN_F32, act);
		test_rows(act);
		test_elementwise(act);
		test_conv1d(act);
		test_attention(67, 13, 4, 2, 64, KERN_BF16, act, NB, 11);
		test_attention(9, 0, 6, 1, 40, KERN_F32, act, NB, 1);
		test_delta(act);
	}
	/* long contexts: 33k keys in one pass (the small cap: three); 3500
	 * keys, one pass against three passes in chunks whose size depends
	 * on the group */
	test_attention(5, 33000, 2, 1, 16, KERN_BF16, KERN_ACT_BF16, NB, 2);
	for (int act = 0; act < 2; act++)
		test_attention(20, 3500, 4, 2, 24, KERN_BF16, act, NB, 7);
	test_misc();
	for (int i = 0; i < NB; i++)
		kt_close_be(&be[i]);
	for (int i = 0; i < 2; i++)
		kt_close_be(&bs[i]);
	return kt_done("test_kern_deterministic");
}
