/* kern_prof: see kern_prof.h. */
#include "kern_prof.h"

#include <stdlib.h>
#include <string.h>

#include "moor.h"

#define PROF_ROWS 128

typedef struct prof_row {
	char name[64];
	long calls;
	double s;
} prof_row;

static const kern_ops *R;
static kern_ops W;
static prof_row rows[PROF_ROWS];
static int nrows;

static void add_row(const char *name, double s)
{
	int i;
	for (i = 0; i < nrows; i++)
		if (!strcmp(rows[i].name, name))
			break;
	if (i == nrows) {
		if (nrows == PROF_ROWS) {
			static int said;
			if (!said++)
				fprintf(stderr, "kern_prof: more than %d rows; "
						"%s and later ones not counted\n",
					PROF_ROWS, name);
			return;
		}
		memset(&rows[i], 0, sizeof rows[i]);
		snprintf(rows[i].name, sizeof rows[i].name, "%s", name);
		nrows++;
	}
	rows[i].calls++;
	rows[i].s += s;
}

/* runs the call, syncs q, adds the time under the name */
#define TIMED(name, q, call)                                                   \
	do {                                                                   \
		double t0_ = moor_now();                                       \
		int rc_ = (call);                                              \
		if (!rc_)                                                      \
			rc_ = R->sync(q);                                      \
		add_row(name, moor_now() - t0_);                               \
		return rc_;                                                    \
	} while (0)

static int p_embed(kern_queue *q, float *out, const void *table, int wdt,
		   const int32_t *ids, int T, int H, int V)
{
	TIMED("embed", q, R->embed(q, out, table, wdt, ids, T, H, V));
}

static void gemm_name(char *b, size_t n, const char *op, int T, int N, int K)
{
	snprintf(b, n, "%s %s N=%d K=%d", op, T == 1 ? "T=1" : "T>1", N, K);
}

static int p_matmul(kern_queue *q, float *y, int ldy, const float *x, int ldx,
		    const void *Wt, int wdt, int T, int N, int K, int act)
{
	char b[64];
	gemm_name(b, sizeof b, "matmul", T, N, K);
	TIMED(b, q, R->matmul(q, y, ldy, x, ldx, Wt, wdt, T, N, K, act));
}

static int p_matmul_swiglu(kern_queue *q, float *y, int ldy, const float *g,
			   const float *u, int ldgu, const void *Wt, int wdt,
			   int T, int N, int K, int act)
{
	char b[64];
	gemm_name(b, sizeof b, "matmul_swiglu", T, N, K);
	TIMED(b, q,
	      R->matmul_swiglu(q, y, ldy, g, u, ldgu, Wt, wdt, T, N, K, act));
}

static int p_add(kern_queue *q, float *y, const float *x, size_t n, int act)
{
	TIMED("add", q, R->add(q, y, x, n, act));
}

static int p_rmsnorm(kern_queue *q, float *y, int ldy, const float *x, int ldx,
		     const void *w, int wdt, int rows_, int dim, float eps,
		     int plus_one, int act)
{
	TIMED("rmsnorm", q,
	      R->rmsnorm(q, y, ldy, x, ldx, w, wdt, rows_, dim, eps, plus_one,
			 act));
}

static int p_gated_rmsnorm(kern_queue *q, float *y, const float *x,
			   const float *z, int ldz, int zg, const void *w,
			   int wdt, int rows_, int dim, float eps, int act)
{
	TIMED("gated_rmsnorm", q,
	      R->gated_rmsnorm(q, y, x, z, ldz, zg, w, wdt, rows_, dim, eps,
			       act));
}

static int p_conv1d(kern_queue *q, float *out, const float *in, int ldin,
		    float *tail, const void *w, int wdt, int T, int C, int Kc,
		    int act)
{
	TIMED("conv1d", q,
	      R->conv1d(q, out, in, ldin, tail, w, wdt, T, C, Kc, act));
}

static int p_gdn_gates(kern_queue *q, float *beta, float *g, const float *b,
		       int ldb, const float *a, int lda, const float *A_log,
		       const float *dt_bias, int T, int Hv, int act)
{
	TIMED("gdn_gates", q,
	      R->gdn_gates(q, beta, g, b, ldb, a, lda, A_log, dt_bias, T, Hv,
			   act));
}

static int p_l2norm(kern_queue *q, float *x, int ld, int T, int heads, int dim,
		    float eps, float scale, int act)
{
	TIMED("l2norm", q, R->l2norm(q, x, ld, T, heads, dim, eps, scale, act));
}

static int p_delta_chunked(kern_queue *q, float *o, float *S, const float *qq,
			   const float *k, int ldqk, const float *v, int ldv,
			   const float *g, const float *beta, int T, int Hk,
			   int Hv, int dk, int dv, void *ws, int act)
{
	TIMED("delta_chunked", q,
	      R->delta_chunked(q, o, S, qq, k, ldqk, v, ldv, g, beta, T, Hk, Hv,
			       dk, dv, ws, act));
}

static int p_delta_recurrent(kern_queue *q, float *o, float *S,
			     const float *qq, const float *k, int ldqk,
			     const float *v, int ldv, const float *g,
			     const float *beta, int T, int Hk, int Hv, int dk,
			     int dv, int act)
{
	TIMED("delta_recurrent", q,
	      R->delta_recurrent(q, o, S, qq, k, ldqk, v, ldv, g, beta, T, Hk,
				 Hv, dk, dv, act));
}

static int p_rope(kern_queue *q, float *x, int ld, int T, int heads, int D,
		  int rot, int64_t pos0, float theta, int act)
{
	TIMED("rope", q, R->rope(q, x, ld, T, heads, D, rot, pos0, theta, act));
}

static int p_attention(kern_queue *q, float *out, const float *qv, int ldq,
		       const void *K, const void *V, int kvdt, int T,
		       int64_t pos0, int Hq, int Hkv, int D, float scale,
		       int act)
{
	char b[64];
	snprintf(b, sizeof b, "attention %s", T == 1 ? "T=1" : "T>1");
	TIMED(b, q,
	      R->attention(q, out, qv, ldq, K, V, kvdt, T, pos0, Hq, Hkv, D,
			   scale, act));
}

static int p_kv_write(kern_queue *q, void *dst, int kvdt, int64_t row0,
		      const float *src, int ld, int T, int width)
{
	TIMED("kv_write", q, R->kv_write(q, dst, kvdt, row0, src, ld, T, width));
}

static int p_swiglu(kern_queue *q, float *y, const float *gate,
		    const float *up, size_t n, int act)
{
	TIMED("swiglu", q, R->swiglu(q, y, gate, up, n, act));
}

static int p_split_qgate(kern_queue *q, float *qo, float *go, const float *qg,
			 int T, int Hq, int D)
{
	TIMED("split_qgate", q, R->split_qgate(q, qo, go, qg, T, Hq, D));
}

static int p_sigmoid_mul(kern_queue *q, float *y, const float *x,
			 const float *gate, size_t n, int act)
{
	TIMED("sigmoid_mul", q, R->sigmoid_mul(q, y, x, gate, n, act));
}

static int p_add_rmsnorm(kern_queue *q, float *h, const float *x, float *y,
			 const void *w, int wdt, int rows_, int dim, float eps,
			 int act)
{
	TIMED("add_rmsnorm", q,
	      R->add_rmsnorm(q, h, x, y, w, wdt, rows_, dim, eps, act));
}

/* The optional fused ops: a refusal (MOOR_EUNSUP: the model then runs
 * the unfused ones, which are timed) adds no row. */
#define TIMED_OPT(name, q, call)                                               \
	do {                                                                   \
		double t0_ = moor_now();                                       \
		int rc_ = (call);                                              \
		if (rc_ == MOOR_EUNSUP)                                        \
			return rc_;                                            \
		if (!rc_)                                                      \
			rc_ = R->sync(q);                                      \
		add_row(name, moor_now() - t0_);                               \
		return rc_;                                                    \
	} while (0)

static int p_mlp(kern_queue *q, float *y, int ldy, const float *x, int ldx,
		 float *tmp, const void *Wgu, const void *Wd, int wdt, int T,
		 int H, int I, int act)
{
	char b[64];
	snprintf(b, sizeof b, "mlp %s H=%d I=%d", T == 1 ? "T=1" : "T>1", H, I);
	TIMED_OPT(b, q,
		  R->mlp(q, y, ldy, x, ldx, tmp, Wgu, Wd, wdt, T, H, I, act));
}

static int p_attn_prep(kern_queue *q, float *qo, float *go, const float *qg,
		       const float *k, const float *v, const void *qw,
		       const void *kw, int wdt, void *K, void *V, int kvdt,
		       int T, int Hq, int Hkv, int D, int rot, int64_t pos0,
		       float theta, float eps, int act)
{
	TIMED_OPT("attn_prep", q,
		  R->attn_prep(q, qo, go, qg, k, v, qw, kw, wdt, K, V, kvdt, T,
			       Hq, Hkv, D, rot, pos0, theta, eps, act));
}

static int p_gdn_prep(kern_queue *q, float *u, const float *mixed,
		      int ldin, float *tail, const void *cw, int cwdt, int Kc,
		      int Hk, int dk, int Hv, int dv, float eps, float qscale,
		      float *beta, float *g, const float *b, const float *a,
		      int ldba, const float *A_log, const float *dt_bias, int T,
		      int act)
{
	TIMED_OPT("gdn_prep", q,
		  R->gdn_prep(q, u, mixed, ldin, tail, cw, cwdt, Kc, Hk, dk, Hv,
			      dv, eps, qscale, beta, g, b, a, ldba, A_log,
			      dt_bias, T, act));
}

static int p_copy(kern_queue *q, void *dst, const void *src, size_t n)
{
	TIMED("copy", q, R->copy(q, dst, src, n));
}

static int p_zero(kern_queue *q, void *dst, size_t n)
{
	TIMED("zero", q, R->zero(q, dst, n));
}

static int p_upload(kern_queue *q, void *dst, const void *src, size_t n)
{
	TIMED("upload", q, R->upload(q, dst, src, n));
}

static int p_sample(kern_queue *q, const float *logits, int V,
		    const kern_sampling *p, uint64_t draw, int32_t *dev_id,
		    int32_t *host_id)
{
	TIMED("sample", q, R->sample(q, logits, V, p, draw, dev_id, host_id));
}

const kern_ops *kern_prof_wrap(const kern_ops *real)
{
	R = real;
	W = *real;
	W.embed = p_embed;
	W.matmul = p_matmul;
	W.add = p_add;
	W.rmsnorm = p_rmsnorm;
	W.gated_rmsnorm = p_gated_rmsnorm;
	W.conv1d = p_conv1d;
	W.gdn_gates = p_gdn_gates;
	W.l2norm = p_l2norm;
	W.delta_chunked = p_delta_chunked;
	W.delta_recurrent = p_delta_recurrent;
	W.rope = p_rope;
	W.attention = p_attention;
	W.kv_write = p_kv_write;
	W.swiglu = p_swiglu;
	W.split_qgate = p_split_qgate;
	W.sigmoid_mul = p_sigmoid_mul;
	W.copy = p_copy;
	W.zero = p_zero;
	W.upload = p_upload;
	W.sample = p_sample;
	if (real->add_rmsnorm)
		W.add_rmsnorm = p_add_rmsnorm;
	if (real->matmul_swiglu)
		W.matmul_swiglu = p_matmul_swiglu;
	if (real->mlp)
		W.mlp = p_mlp;
	if (real->attn_prep)
		W.attn_prep = p_attn_prep;
	if (real->gdn_prep)
		W.gdn_prep = p_gdn_prep;
	W.graph_begin = NULL;
	W.graph_end = NULL;
	W.graph_launch = NULL;
	return &W;
}

void kern_prof_reset(void)
{
	nrows = 0;
}

static int by_time(const void *a, const void *b)
{
	double x = ((const prof_row *)a)->s, y = ((const prof_row *)b)->s;
	return x > y ? -1 : x < y;
}

void kern_prof_report(FILE *f, const char *title)
{
	double tot = 0;
	for (int i = 0; i < nrows; i++)
		tot += rows[i].s;
	qsort(rows, (size_t)nrows, sizeof rows[0], by_time);
	fprintf(f, "\n%s: %.3f s in ops (each synced)\n", title, tot);
	fprintf(f, "  %-40s %8s %10s %9s %6s\n", "op", "calls", "total ms",
		"us/call", "share");
	for (int i = 0; i < nrows; i++)
		fprintf(f, "  %-40s %8ld %10.2f %9.1f %5.1f%%\n", rows[i].name,
			rows[i].calls, rows[i].s * 1e3,
			rows[i].s / (double)rows[i].calls * 1e6,
			tot > 0 ? 100 * rows[i].s / tot : 0);
}
