/* gdn.c: the Gated DeltaNet ops: conv1d, gdn_gates, the chunked and the
 * recurrent delta rule (SPEC §5.2-§5.6).
 *
 * The delta rule's value heads are independent, so a task is one head and
 * runs the head's whole token range in order; nothing depends on the thread
 * count. The chunked form follows transformers' torch_chunk_gated_delta_rule
 * step by step (the decay mask from g's cumulative sum, A, U and W by
 * forward substitution, then per chunk V', O and the state), every product
 * a kcpu_mm (sequential sums), a kcpu_dot or the substitution's sequential
 * sums. A row's sums run over the rows at or before it only
 * (kcpu_mm's klen), so the padding of the last chunk never enters a valid
 * output or the state: padded rows are simply not computed, which is what
 * padding with g = 0, beta = 0, k = 0 gives in exact arithmetic. */
#include "cpu.h"

#define C KERN_GDN_CHUNK
/* conv1d keeps a channel block's taps on the stack. */
#define CONV_KMAX 16
#define CONV_CB 64

/* ---- conv1d ---- */

struct conv_job {
	float *out, *tail;
	const float *in;
	const void *w;
	int ldin, wdt, T, Cn, Kc, act;
};

static void conv_task(void *arg, int task)
{
	const struct conv_job *j = arg;
	int c0 = task * CONV_CB;
	int cb = j->Cn - c0 < CONV_CB ? j->Cn - c0 : CONV_CB;
	int Kc = j->Kc, T = j->T, act = j->act;
	float wt[CONV_KMAX][CONV_CB]; /* [tap][channel] */
	float acc[CONV_CB] = {0};
	for (int c = 0; c < cb; c++)
		for (int k = 0; k < Kc; k++)
			wt[k][c] =
			    kcpu_wget(j->w, j->wdt, (size_t)(c0 + c) * Kc + k);
	for (int t = 0; t < T; t++) {
		for (int c = 0; c < cb; c++)
			acc[c] = 0.0f;
		for (int k = 0; k < Kc; k++) {
			int s = t - (Kc - 1) + k; /* input row; < 0: the tail */
			const float *x =
			    s >= 0
				? j->in + (size_t)s * j->ldin + c0
				: j->tail + (size_t)(Kc - 1 + s) * j->Cn + c0;
			for (int c = 0; c < cb; c++)
				acc[c] += wt[k][c] * x[c];
		}
		/* acc has CONV_CB lanes: the tail lanes beyond cb compute
		 * garbage that is never stored */
		float *o = j->out + (size_t)t * j->Cn + c0;
		float r[CONV_CB];
		for (int c = 0; c < cb; c += 4)
			v4_store(r + c,
				 v4_rnd(v4_silu(v4_rnd(v4_load(acc + c), act)),
					act));
		memcpy(o, r, (size_t)cb * 4);
	}
	/* The new tail is rows T .. T + Kc - 2 of [old tail; in]; ascending i
	 * reads old row T + i > i before anything overwrites it. */
	for (int i = 0; i < Kc - 1; i++) {
		int s = T + i;
		const float *x =
		    s < Kc - 1 ? j->tail + (size_t)s * j->Cn + c0
			       : j->in + (size_t)(s - (Kc - 1)) * j->ldin + c0;
		float *d = j->tail + (size_t)i * j->Cn + c0;
		if (d != x)
			memmove(d, x, (size_t)cb * 4);
	}
}

int kcpu_conv1d(kern_queue *q, float *out, const float *in, int ldin,
		float *tail, const void *w, int wdt, int T, int C_, int Kc,
		int act)
{
	if (!q || !out || !in || !w || (Kc > 1 && !tail) || T < 0 || C_ < 0 ||
	    Kc < 1 || Kc > CONV_KMAX || ldin < C_)
		return MOOR_ERANGE;
	if (!kcpu_dtype_ok(wdt) || !kcpu_act_ok(act))
		return MOOR_EDTYPE;
	if (T == 0 || C_ == 0)
		return 0;
	struct conv_job j = {.out = out,
			     .tail = tail,
			     .in = in,
			     .w = w,
			     .ldin = ldin,
			     .wdt = wdt,
			     .T = T,
			     .Cn = C_,
			     .Kc = Kc,
			     .act = act};
	moor_pool_run(kcpu_pool(q), (C_ + CONV_CB - 1) / CONV_CB, conv_task,
		      &j);
	return 0;
}

/* ---- gdn_gates ---- */

/* beta is rounded to the model dtype as the reference computes it there
 * (measured against the transformers fixtures: rounding in an fp32 model
 * costs 2e-3 in the state, not rounding in a bf16 model 4x in the logits). */
int kcpu_gdn_gates(kern_queue *q, float *beta, float *g, const float *b,
		   int ldb, const float *a, int lda, const float *A_log,
		   const float *dt_bias, int T, int Hv, int act)
{
	if (!q || !beta || !g || !b || !a || !A_log || !dt_bias || T < 0 ||
	    Hv < 0 || ldb < Hv || lda < Hv)
		return MOOR_ERANGE;
	if (!kcpu_act_ok(act))
		return MOOR_EDTYPE;
	/* [T, Hv] is tiny next to everything around it: one thread. */
	for (int t = 0; t < T; t++) {
		const float *bt = b + (size_t)t * ldb;
		for (int h = 0; h < Hv; h++) {
			float x = a[(size_t)t * lda + h] + dt_bias[h];
			float sp = x > 20.0f ? x : log1pf(expf(x));
			beta[(size_t)t * Hv + h] =
			    kcpu_rnd(kcpu_sigmoid(bt[h]), act);
			g[(size_t)t * Hv + h] = -expf(A_log[h]) * sp;
		}
	}
	return 0;
}

/* ---- the delta rule ---- */

struct delta_job {
	float *o, *S;
	const float *q, *k, *v, *g, *beta;
	float *ws;
	int ldqk, ldv, T, Hk, Hv, dk, dv, act;
};

/* Floats of one head's workspace, a multiple of 16 (64 bytes). */
static size_t head_ws_floats(int dk, int dv)
{
	size_t n = 3 * C + 3 * (size_t)C * C + 3 * (size_t)C * dv +
		   4 * (size_t)C * dk + 2 * (size_t)dv;
	return (n + 15) & ~(size_t)15;
}

size_t kcpu_delta_ws_bytes(kern_ctx *ctx, int T, int Hv, int dk, int dv)
{
	(void)ctx;
	(void)T; /* a head's workspace is one chunk's, whatever T */
	if (Hv <= 0 || dk <= 0 || dv <= 0)
		return 0;
	return (size_t)Hv * head_ws_floats(dk, dv) * sizeof(float);
}

/* X = (I + A)^-1 B for the strictly lower part of A [n, C] (row stride
 * C), by forward substitution as torch.linalg.solve_triangular(unitriangular)
 * does it: row i of X is B_i - A_i0 X_0 - A_i1 X_1 - ..., the terms
 * subtracted in order j = 0 .. i - 1. B, X [n, w]; four columns at a time,
 * the tail columns one by one in the same order. */
static void solve_unit_lower(const float *A, int n, const float *B, float *X,
			     int w)
{
	for (int i = 0; i < n; i++) {
		const float *a = A + (size_t)i * C;
		int d = 0;
		for (; d + 4 <= w; d += 4) {
			v4f acc = v4_load(B + (size_t)i * w + d);
			for (int j = 0; j < i; j++)
				acc -= v4_splat(a[j]) *
				       v4_load(X + (size_t)j * w + d);
			v4_store(X + (size_t)i * w + d, acc);
		}
		for (; d < w; d++) {
			float acc = B[(size_t)i * w + d];
			for (int j = 0; j < i; j++)
				acc -= a[j] * X[(size_t)j * w + d];
			X[(size_t)i * w + d] = acc;
		}
	}
}

/* One chunk of n <= C valid rows starting at token t0, head h. */
static void delta_chunk(const struct delta_job *jb, int h, int t0, int n,
			float *ws)
{
	const int dk = jb->dk, dv = jb->dv, Hv = jb->Hv;
	const int kh = h / (Hv / jb->Hk);
	const ptrdiff_t ldqk = jb->ldqk, ldv = jb->ldv;
	float *S = jb->S + (size_t)h * dk * dv;
	float *G = ws, *eG = G + C, *bt = eG + C;
	float *Dm = bt + C;		   /* [C, C] e^(G_i - G_j), j <= i */
	float *Tm = Dm + C * C;		   /* [C, C] A, strictly lower */
	float *Am = Tm + C * C;		   /* [C, C] (Q K^T) o decay, j <= i */
	float *BV = Am + C * C;		   /* [C, dv] beta v; later A V' */
	float *U = BV + C * dv;		   /* [C, dv] (I+A)^-1 beta V, then V' */
	float *X = U + C * dv;		   /* [C, dv] W S, then Q e^G S */
	float *KB = X + C * dv;		   /* [C, dk] beta k, then beta e^G k */
	float *Wm = KB + C * dk;	   /* [C, dk] (I+A)^-1 beta e^G K */
	float *QE = Wm + C * dk;	   /* [C, dk] q e^G */
	float *KDt = QE + C * dk;	   /* [dk, C] (k e^(G_last - G))^T */
	float *tmp = KDt + (size_t)dk * C; /* [2, dv] */
	int tri[C];
	const float *kr[C], *qr[C];

	for (int i = 0; i < C; i++)
		tri[i] = i + 1; /* row i sums over rows 0..i */
	/* G: the cumulative sum of g, accumulated in fp64 and rounded per
	 * row, as torch's CPU cumsum does for fp32 (measured against the bf16
	 * fixture: an fp32 running sum quadruples the core output's bf16 flips
	 * against transformers) */
	double cum = 0.0;
	for (int i = 0; i < n; i++) {
		size_t t = (size_t)(t0 + i);
		cum += jb->g[t * Hv + h];
		G[i] = (float)cum;
		eG[i] = expf(G[i]);
		bt[i] = jb->beta[t * Hv + h];
		kr[i] = jb->k + t * ldqk + (size_t)kh * dk;
		qr[i] = jb->q + t * ldqk + (size_t)kh * dk;
		const float *vi = jb->v + t * ldv + (size_t)h * dv;
		for (int d = 0; d < dv; d++)
			BV[i * dv + d] = vi[d] * bt[i];
		for (int d = 0; d < dk; d++)
			KB[i * dk + d] = kr[i][d] * bt[i];
	}
	for (int i = 0; i < n; i++)
		for (int j = 0; j <= i; j++)
			Dm[i * C + j] = expf(G[i] - G[j]);

	/* A_ij = (beta_i k_i . k_j) e^(G_i - G_j), j < i */
	for (int i = 0; i < n; i++)
		for (int j = 0; j < i; j++)
			Tm[i * C + j] =
			    kcpu_dot(KB + i * dk, kr[j], dk) * Dm[i * C + j];
	for (int i = 0; i < n; i++)
		for (int d = 0; d < dk; d++)
			KB[i * dk + d] *= eG[i];
	/* U = (I + A)^-1 beta V; W = (I + A)^-1 beta e^G K */
	solve_unit_lower(Tm, n, BV, U, dv);
	solve_unit_lower(Tm, n, KB, Wm, dk);

	/* V' = U - W S (S entering the chunk) */
	kcpu_mm(n, dv, dk, Wm, dk, S, dv, X, dv, NULL, 0);
	for (int i = 0; i < n * dv; i++)
		U[i] -= X[i];

	/* O = (q e^G) S + ((Q K^T) o decay, causal incl. the diagonal) V' */
	for (int i = 0; i < n; i++) {
		for (int d = 0; d < dk; d++)
			QE[i * dk + d] = qr[i][d] * eG[i];
		for (int j = 0; j <= i; j++)
			Am[i * C + j] =
			    kcpu_dot(qr[i], kr[j], dk) * Dm[i * C + j];
	}
	kcpu_mm(n, dv, dk, QE, dk, S, dv, X, dv, NULL, 0);
	kcpu_mm(n, dv, n, Am, C, U, dv, BV, dv, tri, 0);
	for (int i = 0; i < n; i++) {
		float *o = jb->o + ((size_t)(t0 + i) * Hv + h) * dv;
		for (int d = 0; d < dv; d++)
			o[d] =
			    kcpu_rnd(X[i * dv + d] + BV[i * dv + d], jb->act);
	}

	/* S <- e^(G_last) S + (k e^(G_last - G))^T V' */
	float gl = G[n - 1], egl = expf(gl);
	for (int j = 0; j < n; j++) {
		float e = expf(gl - G[j]);
		for (int d = 0; d < dk; d++)
			KDt[(size_t)d * C + j] = kr[j][d] * e;
	}
	for (int d = 0; d < dk; d += 2) {
		int m = dk - d < 2 ? dk - d : 2;
		kcpu_mm(m, dv, n, KDt + (size_t)d * C, C, U, dv, tmp, dv, NULL,
			0);
		for (int r = 0; r < m; r++) {
			float *Sr = S + (size_t)(d + r) * dv;
			for (int e = 0; e < dv; e++)
				Sr[e] = Sr[e] * egl + tmp[r * dv + e];
		}
	}
}

static void chunked_task(void *arg, int h)
{
	const struct delta_job *jb = arg;
	float *ws = jb->ws + (size_t)h * head_ws_floats(jb->dk, jb->dv);
	for (int t0 = 0; t0 < jb->T; t0 += C)
		delta_chunk(jb, h, t0, jb->T - t0 < C ? jb->T - t0 : C, ws);
}

/* Token by token (SPEC §5.5); o's row is the scratch for S^T k and delta
 * before it receives S^T q. */
static void recurrent_task(void *arg, int h)
{
	const struct delta_job *jb = arg;
	const int dk = jb->dk, dv = jb->dv, Hv = jb->Hv;
	const int kh = h / (Hv / jb->Hk);
	float *S = jb->S + (size_t)h * dk * dv;
	size_t nS = (size_t)dk * dv;
	for (int t = 0; t < jb->T; t++) {
		const float *kt =
		    jb->k + (size_t)t * jb->ldqk + (size_t)kh * dk;
		const float *qt =
		    jb->q + (size_t)t * jb->ldqk + (size_t)kh * dk;
		const float *vt = jb->v + (size_t)t * jb->ldv + (size_t)h * dv;
		float *o = jb->o + ((size_t)t * Hv + h) * dv;
		float eg = expf(jb->g[(size_t)t * Hv + h]);
		float b = jb->beta[(size_t)t * Hv + h];
		for (size_t i = 0; i < nS; i++)
			S[i] *= eg;
		kcpu_mm(1, dv, dk, kt, dk, S, dv, o, dv, NULL, 0); /* S^T k */
		for (int d = 0; d < dv; d++)
			o[d] = (vt[d] - o[d]) * b; /* delta */
		for (int i = 0; i < dk; i++) {
			float ki = kt[i];
			float *Sr = S + (size_t)i * dv;
			for (int d = 0; d < dv; d++)
				Sr[d] += ki * o[d];
		}
		kcpu_mm(1, dv, dk, qt, dk, S, dv, o, dv, NULL, 0); /* S^T q */
		if (jb->act == KERN_ACT_BF16)
			for (int d = 0; d < dv; d++)
				o[d] = moor_round_bf16(o[d]);
	}
}

static int delta_check(float *o, float *S, const float *qq, const float *k,
		       int ldqk, const float *v, int ldv, const float *g,
		       const float *beta, int T, int Hk, int Hv, int dk, int dv,
		       int act)
{
	if (!o || !S || !qq || !k || !v || !g || !beta || T < 0 || Hk <= 0 ||
	    Hv <= 0 || Hv % Hk || dk <= 0 || dv <= 0 ||
	    (int64_t)ldqk < (int64_t)Hk * dk || (int64_t)ldv < (int64_t)Hv * dv)
		return MOOR_ERANGE;
	if (!kcpu_act_ok(act))
		return MOOR_EDTYPE;
	return 0;
}

int kcpu_delta_chunked(kern_queue *q, float *o, float *S, const float *qq,
		       const float *k, int ldqk, const float *v, int ldv,
		       const float *g, const float *beta, int T, int Hk, int Hv,
		       int dk, int dv, void *ws, int act)
{
	if (!q || !ws)
		return MOOR_ERANGE;
	int rc = delta_check(o, S, qq, k, ldqk, v, ldv, g, beta, T, Hk, Hv, dk,
			     dv, act);
	if (rc || T == 0)
		return rc;
	struct delta_job jb = {o,    S,	  qq, k,  v,  g,  beta, ws,
			       ldqk, ldv, T,  Hk, Hv, dk, dv,	act};
	moor_pool_run(kcpu_pool(q), Hv, chunked_task, &jb);
	return 0;
}

int kcpu_delta_recurrent(kern_queue *q, float *o, float *S, const float *qq,
			 const float *k, int ldqk, const float *v, int ldv,
			 const float *g, const float *beta, int T, int Hk,
			 int Hv, int dk, int dv, int act)
{
	if (!q)
		return MOOR_ERANGE;
	int rc = delta_check(o, S, qq, k, ldqk, v, ldv, g, beta, T, Hk, Hv, dk,
			     dv, act);
	if (rc || T == 0)
		return rc;
	struct delta_job jb = {o,    S,	  qq, k,  v,  g,  beta, NULL,
			       ldqk, ldv, T,  Hk, Hv, dk, dv,	act};
	moor_pool_run(kcpu_pool(q), Hv, recurrent_task, &jb);
	return 0;
}
