/* attn.c: rope and causal GQA attention.
 *
 * attention computes each (token, query head) row on its own terms: scores
 * s_j = rnd(scale * rnd(q . k_j)) for j <= pos, q . k_j a sequential sum
 * over d (kcpu_mk, cpu.h), the max, e_j = v4_exp(s_j - max), their sum in
 * order j = 0.. in fp64, p_j = rnd(e_j * (1 / sum)) with the sum rounded to
 * fp32, out = rnd(sum_j p_j v_j) as a sequential sum over j (kcpu_mm). Nothing in it depends on the rows around it, so a task
 * takes a group of up to ATT_RG rows that share a KV head and streams each K
 * and V row once for all of them (the rows share only loads).
 *
 * A group keeps its scores in the task's scratch slot (cpu.h) when they fit:
 * up to ATT_RG = 64 rows of 32k keys. When they do not it makes three passes
 * over the keys in chunks: the max, then the sum, then p and p V, recomputing
 * the scores each time. The scores, e_j (v4_exp, the same bits in any lane) and
 * the sums (in order j) are the same function of the same inputs either way,
 * so both give the same bits; only the speed differs. */
#include "cpu.h"

#include <limits.h>

/* rope keeps a token's cos/sin on the stack. */
#define ROPE_ROT_MAX 1024
/* attention: the head_dim bound, the V block buffer (floats), rows per
 * group, keys per transposed K block. */
#define ATT_DMAX 512
#define ATT_VBUF 16384
#define ATT_RG 64
#define ATT_KB 16 /* a multiple of 4, at most 24 (kcpu_mk) */

/* ---- rope ---- */

struct rope_job {
	float *x;
	int64_t pos0;
	int ld, T, heads, D, rot, act, tpt;
	float theta;
};

static void rope_task(void *arg, int task)
{
	const struct rope_job *j = arg;
	int t0 = task * j->tpt, t1 = t0 + j->tpt < j->T ? t0 + j->tpt : j->T;
	int half = j->rot / 2, act = j->act;
	float cs[ROPE_ROT_MAX / 2], sn[ROPE_ROT_MAX / 2], inv[ROPE_ROT_MAX / 2];
	/* as transformers: inv_freq = 1 / theta^(2i / rot), angle = inv_freq
	 * * pos, all fp32 */
	for (int i = 0; i < half; i++)
		inv[i] = 1.0f / powf(j->theta, (float)(2 * i) / (float)j->rot);
	for (int t = t0; t < t1; t++) {
		float p = (float)(j->pos0 + t);
		for (int i = 0; i < half; i++) {
			float a = inv[i] * p;
			cs[i] = kcpu_rnd(cosf(a), act);
			sn[i] = kcpu_rnd(sinf(a), act);
		}
		for (int h = 0; h < j->heads; h++) {
			float *x = j->x + (size_t)t * j->ld + (size_t)h * j->D;
			for (int i = 0; i < half; i++) {
				float x1 = x[i], x2 = x[i + half];
				x[i] = kcpu_rnd(kcpu_rnd(x1 * cs[i], act) -
						    kcpu_rnd(x2 * sn[i], act),
						act);
				x[i + half] =
				    kcpu_rnd(kcpu_rnd(x2 * cs[i], act) +
						 kcpu_rnd(x1 * sn[i], act),
					     act);
			}
		}
	}
}

int kcpu_rope(kern_queue *q, float *x, int ld, int T, int heads, int D, int rot,
	      int64_t pos0, float theta, int act)
{
	if (!q || !x || T < 0 || heads < 0 || D < 0 || rot < 0 || rot > D ||
	    rot % 2 || rot > ROPE_ROT_MAX || pos0 < 0 ||
	    (int64_t)ld < (int64_t)heads * D)
		return MOOR_ERANGE;
	if (!kcpu_act_ok(act))
		return MOOR_EDTYPE;
	if (T == 0 || heads == 0 || rot == 0)
		return 0;
	struct rope_job j = {.x = x,
			     .pos0 = pos0,
			     .ld = ld,
			     .T = T,
			     .heads = heads,
			     .D = D,
			     .rot = rot,
			     .act = act,
			     .tpt = 16,
			     .theta = theta};
	moor_pool_run(kcpu_pool(q), (T + j.tpt - 1) / j.tpt, rope_task, &j);
	return 0;
}

/* ---- attention ---- */

struct att_job {
	kern_ctx *ctx;
	float *out;
	const float *qv;
	const void *K, *V;
	int64_t pos0;
	int ldq, kvdt, T, Hq, Hkv, D, act, r;
	float scale;
	int tpt, hpt; /* tokens and query heads per task */
	int nhb;      /* head blocks */
};

/* A group of rows sharing KV head g: row i is token t[i], query head h[i],
 * with len[i] = pos0 + t[i] + 1 keys, nondecreasing in i. */
struct att_group {
	int n, g;
	int t[ATT_RG], h[ATT_RG], len[ATT_RG];
	const float *q[ATT_RG];
};

/* Key j of KV head g as fp32: a pointer into K itself (F32) or into buf. */
static const float *kv_row(const struct att_job *jb, const void *base,
			   int64_t j, int g, float *buf)
{
	size_t off = ((size_t)j * jb->Hkv + g) * jb->D;
	if (jb->kvdt == KERN_F32)
		return (const float *)base + off;
	kcpu_wrow(buf, base, jb->kvdt, off, jb->D);
	return buf;
}

#if defined(__clang__) || __GNUC__ >= 12
#define AT_SHUF(a, b, i, j, k, l) __builtin_shufflevector(a, b, i, j, k, l)
#else
#define AT_SHUF(a, b, i, j, k, l) __builtin_shuffle(a, b, (v4i){i, j, k, l})
#endif

/* Keys [j0, j0 + nb) of KV head g as fp32, transposed: kt[d * ATT_KB + jj]
 * = k_{j0 + jj}[d]; columns from nb on are zero. */
static void k_block_t(const struct att_job *jb, int g, int j0, int nb,
		      float *kt)
{
	int D = jb->D, jj = 0;
	size_t rs = (size_t)jb->Hkv * D; /* elements between keys */
	size_t base = ((size_t)j0 * jb->Hkv + g) * D;
	for (; jj + 4 <= nb && jb->kvdt != KERN_F16; jj += 4) {
		size_t o = base + jj * rs;
		int d = 0;
		for (; d + 4 <= D; d += 4) {
			v4f r[4];
			for (int i = 0; i < 4; i++)
				r[i] = jb->kvdt == KERN_BF16
					   ? v4_bf16((const uint16_t *)jb->K +
						     o + i * rs + d)
					   : v4_load((const float *)jb->K + o +
						     i * rs + d);
			v4f t0 = AT_SHUF(r[0], r[1], 0, 4, 1, 5);
			v4f t1 = AT_SHUF(r[0], r[1], 2, 6, 3, 7);
			v4f t2 = AT_SHUF(r[2], r[3], 0, 4, 1, 5);
			v4f t3 = AT_SHUF(r[2], r[3], 2, 6, 3, 7);
			float *dst = kt + d * ATT_KB + jj;
			v4_store(dst, AT_SHUF(t0, t2, 0, 1, 4, 5));
			v4_store(dst + ATT_KB, AT_SHUF(t0, t2, 2, 3, 6, 7));
			v4_store(dst + 2 * ATT_KB, AT_SHUF(t1, t3, 0, 1, 4, 5));
			v4_store(dst + 3 * ATT_KB, AT_SHUF(t1, t3, 2, 3, 6, 7));
		}
		for (; d < D; d++)
			for (int i = 0; i < 4; i++)
				kt[d * ATT_KB + jj + i] =
				    kcpu_wget(jb->K, jb->kvdt, o + i * rs + d);
	}
	for (; jj < ATT_KB; jj++)
		for (int d = 0; d < D; d++)
			kt[d * ATT_KB + jj] =
			    jj < nb
				? kcpu_wget(jb->K, jb->kvdt, base + jj * rs + d)
				: 0.0f;
}

/* sc[i * ldsc + j - ja] = s_ij for ja <= j < min(je, len[i]): q . k_j as a
 * sequential sum over d (kcpu_mk: rows in pairs, ATT_KB keys per call), then
 * times scale. */
static void att_scores(const struct att_job *jb, const struct att_group *gr,
		       int ja, int je, float *sc, int ldsc)
{
	float kt[ATT_DMAX * ATT_KB];
	float s[2 * ATT_KB];
	int D = jb->D;
	for (int j0 = ja; j0 < je; j0 += ATT_KB) {
		int nb = je - j0 < ATT_KB ? je - j0 : ATT_KB;
		k_block_t(jb, gr->g, j0, nb, kt);
		/* rows needing keys of this block: a suffix (lens
		 * nondecrease) */
		int i = 0;
		while (i < gr->n && gr->len[i] <= j0)
			i++;
		while (i < gr->n) {
			int mr = gr->n - i >= 2 ? 2 : 1;
			const float *a[2] = {gr->q[i],
					     mr > 1 ? gr->q[i + 1] : gr->q[i]};
			if (mr == 2)
				kcpu_mk(2, ATT_KB / 4, a, kt, ATT_KB, D, s,
					ATT_KB, 0);
			else
				kcpu_mk(1, ATT_KB / 4, a, kt, ATT_KB, D, s,
					ATT_KB, 0);
			for (int r = 0; r < mr; r++) {
				int e = gr->len[i + r] - j0;
				e = e < nb ? e : nb;
				float *dst =
				    sc + (size_t)(i + r) * ldsc + (j0 - ja);
				for (int jj = 0; jj < e; jj++)
					dst[jj] = kcpu_rnd(
					    jb->scale *
						kcpu_rnd(s[r * ATT_KB + jj],
							 jb->act),
					    jb->act);
			}
			i += mr;
		}
	}
}

/* acc[i][.] += sum_{ja <= j < min(je, len[i])} p[i * ldp + j - ja] v_j,
 * in order j. */
static void att_pv(const struct att_job *jb, const struct att_group *gr, int ja,
		   int je, const float *p, int ldp, float *acc)
{
	float vbuf[ATT_VBUF];
	int D = jb->D, vb = ATT_VBUF / D;
	int klen[ATT_RG];
	for (int j0 = ja; j0 < je; j0 += vb) {
		int nb = je - j0 < vb ? je - j0 : vb;
		const float *B;
		ptrdiff_t ldb;
		if (jb->kvdt == KERN_F32) {
			B = (const float *)jb->V +
			    ((size_t)j0 * jb->Hkv + gr->g) * D;
			ldb = (ptrdiff_t)jb->Hkv * D;
		} else {
			for (int jj = 0; jj < nb; jj++)
				kv_row(jb, jb->V, j0 + jj, gr->g,
				       vbuf + jj * D);
			B = vbuf;
			ldb = D;
		}
		for (int i = 0; i < gr->n; i++)
			klen[i] = gr->len[i] - j0;
		kcpu_mm(gr->n, D, nb, p + (j0 - ja), ldp, B, ldb, acc, D, klen,
			1);
	}
}

/* e_j = exp(s_j - m) in place for j < n, through v4_exp four at a time
 * (the tail padded), so an element's bits do not depend on its position. */
static void exp_shift(float *s, int n, float m)
{
	v4f mv = v4_splat(m);
	int j = 0;
	for (; j + 4 <= n; j += 4)
		v4_store(s + j, v4_exp(v4_load(s + j) - mv));
	if (j < n) {
		float t[4] = {0, 0, 0, 0};
		memcpy(t, s + j, (size_t)(n - j) * 4);
		v4_store(t, v4_exp(v4_load(t) - mv));
		memcpy(s + j, t, (size_t)(n - j) * 4);
	}
}

/* p_j = rnd(e_j * (1 / sum)) in place, with sum rounded to fp32 first
 * (torch's softmax multiplies by the reciprocal), four at a time, the tail
 * through the same code. */
static void normalize(float *p, int n, double sum, int act)
{
	float inv = 1.0f / (float)sum;
	v4f iv = v4_splat(inv);
	int j = 0;
	for (; j + 4 <= n; j += 4)
		v4_store(p + j, v4_rnd(v4_load(p + j) * iv, act));
	for (; j < n; j++)
		p[j] = kcpu_rnd(p[j] * inv, act);
}

/* max(m, s[0 .. n)); a max is exact, so its order is free */
static float max_of(const float *s, int n, float m)
{
	v4f mv = v4_splat(m);
	int j = 0;
	for (; j + 4 <= n; j += 4) {
		v4f x = v4_load(s + j);
		mv = v4_sel(x > mv, x, mv);
	}
	for (int l = 0; l < 4; l++)
		m = mv[l] > m ? mv[l] : m;
	for (; j < n; j++)
		m = s[j] > m ? s[j] : m;
	return m;
}

/* sum[i] += e[i * ld + j] for j < len[i], in order j, in fp64 (an fp32
 * running sum over thousands of keys drifts enough to move p's bf16
 * rounding: measured against transformers' softmax, whose vectorised sum
 * is closer to exact); four rows' chains interleaved, so the adds are not
 * one long latency chain. */
static void sum_rows(int n, const float *e, int ld, const int *len,
		     double *sum)
{
	int i = 0;
	for (; i + 4 <= n; i += 4) {
		int c = len[i];
		for (int r = 1; r < 4; r++)
			c = len[i + r] < c ? len[i + r] : c;
		const float *e0 = e + (size_t)i * ld;
		double s0 = sum[i], s1 = sum[i + 1], s2 = sum[i + 2],
		       s3 = sum[i + 3];
		for (int j = 0; j < c; j++) {
			s0 += e0[j];
			s1 += e0[ld + j];
			s2 += e0[2 * ld + j];
			s3 += e0[3 * ld + j];
		}
		sum[i] = s0;
		sum[i + 1] = s1;
		sum[i + 2] = s2;
		sum[i + 3] = s3;
		for (int r = 0; r < 4; r++)
			for (int j = c; j < len[i + r]; j++)
				sum[i + r] += e0[(size_t)r * ld + j];
	}
	for (; i < n; i++)
		for (int j = 0; j < len[i]; j++)
			sum[i] += e[(size_t)i * ld + j];
}

/* The steps of a sweep over keys; each sweep goes through the keys in
 * blocks of ATT_SWEEP, doing its steps on a block while it is in cache. */
enum {
	ST_SCORES = 1, /* compute the scores (else they are in sc already) */
	ST_MAX = 2,    /* mx[i] = max(mx[i], s) */
	ST_EXP = 4,    /* s = exp(s - mx[i]) */
	ST_SUM = 8,    /* sum[i] += s, in order */
	ST_PV = 16,    /* p = rnd(s * (1 / sum[i])); acc[i] += p V */
};
#define ATT_SWEEP 256

/* Keys [ja, je) of the group, their scores at sc[i * ld + j - base]. */
static void att_sweep(const struct att_job *jb, const struct att_group *gr,
		      int ja, int je, float *sc, int ld, int base, int steps,
		      float *mx, double *sum, float *acc)
{
	int rel[ATT_RG];
	int n = gr->n;
	for (int j0 = ja; j0 < je; j0 += ATT_SWEEP) {
		int j1 = je - j0 < ATT_SWEEP ? je : j0 + ATT_SWEEP;
		float *blk = sc + (j0 - base);
		if (steps & ST_SCORES)
			att_scores(jb, gr, j0, j1, blk, ld);
		for (int i = 0; i < n; i++) {
			int e = (gr->len[i] < j1 ? gr->len[i] : j1) - j0;
			rel[i] = e < 0 ? 0 : e;
		}
		for (int i = 0; i < n; i++) {
			float *s = blk + (size_t)i * ld;
			if (steps & ST_MAX)
				mx[i] = max_of(s, rel[i], mx[i]);
			if (steps & ST_EXP)
				exp_shift(s, rel[i], mx[i]);
		}
		if (steps & ST_SUM)
			sum_rows(n, blk, ld, rel, sum);
		if (steps & ST_PV) {
			for (int i = 0; i < n; i++)
				normalize(blk + (size_t)i * ld, rel[i], sum[i],
					  jb->act);
			att_pv(jb, gr, j0, j1, blk, ld, acc);
		}
	}
}

/* sc: the scores, cap floats; acc: ATT_RG * D floats, both from the task's
 * scratch slot. One pass when the group's scores fit (three sweeps over the
 * stored scores: max, exp and sum, p V), else three passes over chunks of
 * keys, each computing its chunk's scores again. */
static void att_group_run(const struct att_job *jb, const struct att_group *gr,
			  float *sc, size_t cap, float *acc)
{
	float mx[ATT_RG];
	double sum[ATT_RG];
	int n = gr->n, D = jb->D, act = jb->act;
	int lmax = gr->len[n - 1];
	for (int i = 0; i < n * D; i++)
		acc[i] = 0.0f;
	for (int i = 0; i < n; i++) {
		mx[i] = -INFINITY;
		sum[i] = 0.0f;
	}
	if ((size_t)n * lmax <= cap) {
		att_sweep(jb, gr, 0, lmax, sc, lmax, 0, ST_SCORES | ST_MAX, mx,
			  sum, acc);
		att_sweep(jb, gr, 0, lmax, sc, lmax, 0, ST_EXP | ST_SUM, mx,
			  sum, acc);
		att_sweep(jb, gr, 0, lmax, sc, lmax, 0, ST_PV, mx, sum, acc);
	} else {
		int ch = (int)(cap / n);
		static const int pass[3] = {ST_SCORES | ST_MAX,
					    ST_SCORES | ST_EXP | ST_SUM,
					    ST_SCORES | ST_EXP | ST_PV};
		for (int p = 0; p < 3; p++)
			for (int ja = 0; ja < lmax; ja += ch) {
				int je = lmax - ja < ch ? lmax : ja + ch;
				att_sweep(jb, gr, ja, je, sc, ch, ja, pass[p],
					  mx, sum, acc);
			}
	}
	for (int i = 0; i < n; i++) {
		float *o = jb->out + ((size_t)gr->t[i] * jb->Hq + gr->h[i]) * D;
		for (int d = 0; d < D; d++)
			o[d] = kcpu_rnd(acc[i * D + d], act);
	}
}

static void att_task(void *arg, int task)
{
	const struct att_job *jb = arg;
	int t0 = (task / jb->nhb) * jb->tpt;
	int h0 = (task % jb->nhb) * jb->hpt;
	int t1 = t0 + jb->tpt < jb->T ? t0 + jb->tpt : jb->T;
	int slot;
	float *sc = kcpu_scratch_get(jb->ctx, &slot);
	float *acc = sc + (KCPU_SCRATCH - (size_t)ATT_RG * ATT_DMAX);
	size_t cap = KCPU_SCRATCH - (size_t)ATT_RG * ATT_DMAX;
	cap = jb->ctx->att_cap < cap ? jb->ctx->att_cap : cap;
	struct att_group gr;
	gr.n = 0;
	gr.g = h0 / jb->r;
	for (int t = t0; t < t1; t++)
		for (int h = h0; h < h0 + jb->hpt; h++) {
			int len = (int)(jb->pos0 + t + 1);
			/* A group keeps its scores in the scratch slot while
			 * they fit; rows too long for that go in groups of
			 * ATT_RG through the three passes. */
			if (gr.n > 0 &&
			    ((size_t)len > cap
				 ? (size_t)gr.len[0] <= cap
				 : (size_t)(gr.n + 1) * len > cap)) {
				att_group_run(jb, &gr, sc, cap, acc);
				gr.n = 0;
			}
			int i = gr.n++;
			gr.t[i] = t;
			gr.h[i] = h;
			gr.len[i] = len;
			gr.q[i] =
			    jb->qv + (size_t)t * jb->ldq + (size_t)h * jb->D;
			if (gr.n == ATT_RG) {
				att_group_run(jb, &gr, sc, cap, acc);
				gr.n = 0;
			}
		}
	if (gr.n > 0)
		att_group_run(jb, &gr, sc, cap, acc);
	kcpu_scratch_put(jb->ctx, slot);
}

int kcpu_attention(kern_queue *q, float *out, const float *qv, int ldq,
		   const void *K, const void *V, int kvdt, int T, int64_t pos0,
		   int Hq, int Hkv, int D, float scale, int act)
{
	if (!q || !out || !qv || !K || !V || T < 0 || pos0 < 0 || Hq <= 0 ||
	    Hkv <= 0 || Hq % Hkv || D <= 0 || D > ATT_DMAX ||
	    (int64_t)ldq < (int64_t)Hq * D || pos0 + T > INT_MAX / 2)
		return MOOR_ERANGE;
	if (!kcpu_dtype_ok(kvdt) || !kcpu_act_ok(act))
		return MOOR_EDTYPE;
	if (T == 0)
		return 0;
	struct att_job jb = {.ctx = q->ctx,
			     .out = out,
			     .qv = qv,
			     .K = K,
			     .V = V,
			     .pos0 = pos0,
			     .ldq = ldq,
			     .kvdt = kvdt,
			     .T = T,
			     .Hq = Hq,
			     .Hkv = Hkv,
			     .D = D,
			     .act = act,
			     .r = Hq / Hkv,
			     .scale = scale};
	/* A task is a block of tokens times the query heads of one KV head,
	 * or times one query head when that leaves the threads idle. */
	int threads = moor_pool_threads(kcpu_pool(q));
	jb.hpt = jb.r;
	if ((int64_t)T * Hkv < 4 * threads)
		jb.hpt = 1;
	if (jb.hpt > ATT_RG)
		jb.hpt = 1;
	jb.nhb = Hq / jb.hpt;
	jb.tpt = ATT_RG / jb.hpt;
	if ((int64_t)T * jb.nhb < 4 * threads || jb.tpt < 1)
		jb.tpt = 1;
	moor_pool_run(kcpu_pool(q), ((T + jb.tpt - 1) / jb.tpt) * jb.nhb,
		      att_task, &jb);
	return 0;
}
