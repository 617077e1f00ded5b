/* bench_kern: the device backend's ops one at a time at the 27B's shapes
 * (SPEC-qwen35.md), each against its line in GPU-BUDGET.md.
 *
 *   bench_kern [--backend cuda] [--reps N] [--rows N (--only picks)]
 *              [--only attention|delta|decode|elem|sample|mm|gemv|rows|picks]
 *
 * Prints one table: prefill attention (a 1,024-row chunk at several
 * positions, and with --only attention the 4,096-row forwards that end a
 * 32k and a 128k prefill; TFLOP/s counting the causal products only; k_flash
 * and, on an sm_90 device, k_flash_wg side by side), the chunked delta rule
 * (one layer's 1,024-token chunk), the sampler and logprobs at the 248,320
 * vocabulary (ms a call, its sync and download included: a decode step pays
 * them whole), the decode GEMVs (one row: GB/s of the weight read) and prefill
 * GEMMs (1,024 rows: TFLOP/s); --only picks times cuBLASLt's candidates
 * for the prefill GEMMs side by side (gemm_picks). Inputs are fill_random
 * values (the bits do not matter to the times). Each figure is the mean of N
 * synced runs after one warm-up. Exits 0 with a line saying why when the
 * backend is not built or no device answers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moor.h"
#include "ops.h"

static const kern_ops *o;
static kern_ctx *cx;
static kern_queue *q;
static int reps = 5;

static int want(const char *only, const char *what)
{
	return !only[0] || !strcmp(only, what);
}

static void *dev(size_t bytes, int dt, float lo, float hi)
{
	void *p = NULL;
	if (o->alloc(cx, bytes, &p)) {
		fprintf(stderr, "bench_kern: alloc of %zu bytes failed\n", bytes);
		exit(1);
	}
	size_t n = bytes / (dt == KERN_F32 ? 4 : 2);
	if (o->fill_random(q, p, dt, n, 7, lo, hi)) {
		fprintf(stderr, "bench_kern: fill failed\n");
		exit(1);
	}
	return p;
}

/* The unfused prologues that bench_kern times beside attn_prep and
 * gdn_prep: the first op's error stops each, and is its result. */
static int gdn_prologue_ops(float *u, const float *in, int ldin, float *tail,
			    const void *w, int Kc, int T, int C, int Hk, int dk,
			    float qs, float *beta, float *g, const float *b,
			    const float *a, const float *A_log,
			    const float *dt_bias, int Hv)
{
	int rc;
	if ((rc = o->conv1d(q, u, in, ldin, tail, w, KERN_BF16, T, C, Kc,
			    KERN_ACT_BF16)) ||
	    (rc = o->l2norm(q, u, C, T, Hk, dk, 1e-6f, qs, KERN_ACT_F32)) ||
	    (rc = o->l2norm(q, u + (size_t)Hk * dk, C, T, Hk, dk, 1e-6f, 1.0f,
			    KERN_ACT_F32)))
		return rc;
	return o->gdn_gates(q, beta, g, b, ldin, a, ldin, A_log, dt_bias, T, Hv,
			    KERN_ACT_BF16);
}

static int attn_prologue_ops(float *qo, float *go, const float *qg, float *k,
			     const float *v, const void *qw, const void *kw,
			     void *K, void *V, int T, int Hq, int Hkv, int D,
			     int64_t p0)
{
	int rc;
	if ((rc = o->split_qgate(q, qo, go, qg, T, Hq, D)) ||
	    (rc = o->rmsnorm(q, qo, D, qo, D, qw, KERN_BF16, T * Hq, D, 1e-6f,
			     1, KERN_ACT_BF16)) ||
	    (rc = o->rmsnorm(q, k, D, k, D, kw, KERN_BF16, T * Hkv, D, 1e-6f, 1,
			     KERN_ACT_BF16)) ||
	    (rc = o->rope(q, qo, Hq * D, T, Hq, D, 64, p0, 1e7f,
			  KERN_ACT_BF16)) ||
	    (rc = o->rope(q, k, Hkv * D, T, Hkv, D, 64, p0, 1e7f,
			  KERN_ACT_BF16)) ||
	    (rc = o->kv_write(q, K, KERN_BF16, p0, k, Hkv * D, T, Hkv * D)))
		return rc;
	return o->kv_write(q, V, KERN_BF16, p0, v, Hkv * D, T, Hkv * D);
}

#define TIME(ms, call)                                                         \
	do {                                                                   \
		int rc_ = (call);                                              \
		if (!rc_)                                                      \
			rc_ = o->sync(q);                                      \
		double t0_ = moor_now();                                       \
		for (int r_ = 0; r_ < reps && !rc_; r_++)                      \
			rc_ = (call);                                          \
		if (!rc_)                                                      \
			rc_ = o->sync(q);                                      \
		(ms) = (moor_now() - t0_) * 1e3 / reps;                        \
		if (rc_) {                                                     \
			fprintf(stderr, "bench_kern: %s: %s\n", #call,         \
				moor_strerror(rc_));                           \
			exit(1);                                               \
		}                                                              \
	} while (0)

/* prefill attention at the 27B's shapes (24 query heads, 4 KV heads of
 * 256): rows from pos0 in calls of piece rows; the FLOPs of its causal
 * products */
static int attn_pieces(float *ao, const float *qv, const void *K, const void *V,
		       int rows, int64_t pos0, int piece)
{
	const int Hq = 24, D = 256;
	int rc = 0;
	for (int off = 0; off < rows && !rc; off += piece)
		rc = o->attention(q, ao + (size_t)off * Hq * D,
				  qv + (size_t)off * Hq * D, Hq * D, K, V,
				  KERN_BF16,
				  rows - off < piece ? rows - off : piece,
				  pos0 + off, Hq, 4, D, 0.0625f, KERN_ACT_BF16);
	return rc;
}

static double attn_flop(int rows, int64_t pos0)
{
	return 4.0 * 256 * 24 *
	       ((double)rows * pos0 + (double)rows * (rows + 1) / 2);
}

/* A product shape of the 27B's (bench_kern's mm rows). */
typedef struct {
	const char *name;
	int N, K;
} mm_shape;

/* --only picks: each prefill product of rows rows (--rows; 4,096 by
 * default, a forward, on the 1,024-row bucket's algorithm as the model
 * runs it) for MOOR_GEMM_PICK = 0 (the heuristic's first) to 7: its
 * candidates side by side, "-" past the last one it may take. TFLOP/s,
 * or below 512 rows (a follow-up turn's products, which read the
 * weights) GB/s of the weights; "*" after a figure when its first rows
 * differ from the same rows' products of 64 and of 256 rows on those
 * buckets' first candidates (a prefill's rows must keep their bits
 * whatever the forward that computes them: gemm.cu's buckets). */
static void gemm_picks(const mm_shape *mm, size_t n, int rows, int kmax)
{
	const int wide = rows > 512;
	float *x = dev((size_t)rows * kmax * 4, KERN_F32, -1, 1);
	float *y = dev((size_t)rows * 2 * kmax * 4, KERN_F32, 0, 0);
	printf("\n| picks | shape | MOOR_GEMM_PICK 0 (the heuristic's first) "
	       ".. 7: %s at %d rows |\n|---|---|---|\n",
	       wide ? "TFLOP/s" : "GB/s of the weights", rows);
	setenv("MOOR_GEMM_BUCKET_MAX", "1024", 1);
	for (size_t i = 0; i < n; i++) {
		int N = mm[i].N, K = mm[i].K;
		void *W = dev((size_t)N * K * 2, KERN_BF16, -0.02f, 0.02f);
		char line[256] = "";
		/* the first 64 rows on the 64- and 256-row buckets' first
		 * candidates */
		const size_t rb = (size_t)64 * N * 4;
		float *ref[2] = {malloc(rb), malloc(rb)}, *got = malloc(rb);
		if (!ref[0] || !ref[1] || !got) {
			fprintf(stderr, "bench_kern: picks: out of memory\n");
			exit(1);
		}
		setenv("MOOR_GEMM_PICK", "0", 1);
		for (int b = 0; b < 2; b++) {
			int rc = o->matmul(q, y, N, x, K, W, KERN_BF16,
					   b ? 256 : 64, N, K, KERN_ACT_BF16);
			if (!rc)
				rc = o->download(q, ref[b], y, rb);
			if (!rc)
				rc = o->sync(q);
			if (rc) {
				fprintf(stderr, "bench_kern: picks: %s\n",
					moor_strerror(rc));
				exit(1);
			}
		}
		for (int p = 0; p < 8; p++) {
			char v[8];
			snprintf(v, sizeof v, "%d", p);
			setenv("MOOR_GEMM_PICK", v, 1);
			/* a first call picks (or finds no candidate) */
			int rc = o->matmul(q, y, N, x, K, W, KERN_BF16, rows, N,
					   K, KERN_ACT_BF16);
			if (!rc)
				rc = o->download(q, got, y, rb);
			if (!rc)
				rc = o->sync(q);
			const int same = !rc && !memcmp(got, ref[0], rb) &&
					 !memcmp(got, ref[1], rb);
			double ms = 0;
			if (!rc)
				TIME(ms, o->matmul(q, y, N, x, K, W, KERN_BF16,
						   rows, N, K, KERN_ACT_BF16));
			size_t l = strlen(line);
			if (rc)
				snprintf(line + l, sizeof line - l, " -");
			else
				snprintf(line + l, sizeof line - l, " %.0f%s",
					 wide ? 2.0 * rows * N * K / ms / 1e9
					      : 2.0 * N * K / ms / 1e6,
					 same ? "" : "*");
		}
		printf("| picks | %s %dx%d |%s |\n", mm[i].name, N, K, line);
		free(ref[0]);
		free(ref[1]);
		free(got);
		o->free(cx, W);
	}
	unsetenv("MOOR_GEMM_PICK");
	unsetenv("MOOR_GEMM_BUCKET_MAX");
	o->free(cx, x);
	o->free(cx, y);
}

int main(int argc, char **argv)
{
	const char *be = "cuda", *only = "";
	int picks_rows = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--backend") && i + 1 < argc)
			be = argv[++i];
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--rows") && i + 1 < argc)
			picks_rows = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--only") && i + 1 < argc)
			only = argv[++i];
		else {
			fprintf(stderr, "usage: bench_kern [--backend NAME] "
					"[--reps N] [--rows N] [--only "
					"attention|delta|decode|elem|sample|mm|"
					"gemv|rows|picks]\n");
			return 2;
		}
	}
	if (reps < 1)
		reps = 1;
	o = kern_backend(be);
	char err[MOOR_ERRLEN] = "";
	if (!o) {
		printf("bench_kern: skipped: backend %s is not built\n", be);
		return 0;
	}
	if (o->probe && o->probe(0, err)) {
		printf("bench_kern: skipped: %s: %s\n", be, err);
		return 0;
	}
	kern_config cfg = {.threads = 0, .device = 0};
	if (o->create(&cfg, &cx)) {
		fprintf(stderr, "bench_kern: create failed\n");
		return 1;
	}
	q = o->queue(cx, KERN_Q_COMPUTE);
	const int T = 1024, H = 5120, Hq = 24, Hkv = 4, D = 256, I = 17408;
	const int Hk = 16, Hv = 48, dk = 128, dv = 128;
	const int64_t maxpos = 131072;
	/* --only rows: products of 4 T rows (the stage holds them);
	 * --only attention adds chunks of 4 T rows, a prefill forward's */
	const int rows_mode = !strcmp(only, "rows");
	const int picks_mode = !strcmp(only, "picks");
	const int big = rows_mode || picks_mode || !strcmp(only, "attention");
	/* --only attention: the model's chunk, so that a call of 4 T rows
	 * is cut in pieces of T as a forward's is (ops.h attention) */
	kern_limits lim = {.rows = big ? 4 * T : T,
			   .chunk = !strcmp(only, "attention") ? T : 0,
			   .width = I,
			   .window = maxpos,
			   .q_heads = Hq,
			   .head_dim = D,
			   .vocab = 248320};
	if (o->reserve && o->reserve(cx, &lim)) {
		fprintf(stderr, "bench_kern: reserve failed\n");
		return 1;
	}
	char desc[256];
	o->describe(cx, desc, sizeof desc);
	printf("bench_kern: %s, %d runs each\n\n", desc, reps);
	printf("| op | shape | ms | rate | line |\n|---|---|---|---|---|\n");

	/* attention: a chunk of T (or 4 T) rows ending at pos0 + rows */
	float *qv = dev((size_t)lim.rows * Hq * D * 4, KERN_F32, -1, 1);
	float *ao = dev((size_t)lim.rows * Hq * D * 4, KERN_F32, 0, 0);
	void *K = dev((size_t)maxpos * Hkv * D * 2, KERN_BF16, -1, 1);
	void *V = dev((size_t)maxpos * Hkv * D * 2, KERN_BF16, -1, 1);
	/* T rows at five positions, k_flash and, on a cc 9.0 device,
	 * k_flash_wg (wgmma; MOOR_ATTN_WG picks it), same inputs */
	int64_t pos[] = {0, 7168, 31744, 64512, 130048};
	const int wg = strstr(desc, "cc 9.0,") != NULL;
	for (size_t i = 0;
	     i < sizeof pos / sizeof pos[0] && want(only, "attention"); i++)
		for (int k = 0; k < 1 + wg; k++) {
			static const char *mode[] = {"0", "1"};
			static const char *name[] = {"k_flash", "k_flash_wg"};
			double ms;
			setenv("MOOR_ATTN_WG", mode[k], 1);
			TIME(ms, attn_pieces(ao, qv, K, V, T, pos[i], T));
			unsetenv("MOOR_ATTN_WG");
			printf("| attention %s | %d rows at %lld, %d heads "
			       "of %d | %.3f | %.0f TFLOP/s | 645 (SDPA) |\n",
			       name[k], T, (long long)pos[i], Hq, D, ms,
			       attn_flop(T, pos[i]) / ms / 1e9);
		}
	/* --only attention: the last 4 T-row forward of a 32k and of a
	 * 128k prefill, in one call (the model's: the backend cuts it on
	 * each grid line and launches the pieces together) and in a call a
	 * piece; the same bits */
	int64_t fpos[] = {32768 - 4 * T, maxpos - 4 * T};
	for (size_t i = 0; i < 2 && big && wg && want(only, "attention"); i++)
		for (int piece = 4 * T; piece >= T; piece -= 3 * T) {
			double ms;
			TIME(ms,
			     attn_pieces(ao, qv, K, V, 4 * T, fpos[i], piece));
			printf(
			    "| attention k_flash_wg | %d rows at %lld in calls "
			    "of %d | %.3f | %.0f TFLOP/s | 645 (SDPA) |\n",
			    4 * T, (long long)fpos[i], piece, ms,
			    attn_flop(4 * T, fpos[i]) / ms / 1e9);
		}
	if (!wg && want(only, "attention"))
		printf("| attention k_flash_wg | not run: the device is not "
		       "cc 9.0 | | | |\n");
	/* decode: one row at the end of 8k, 32k and 128k keys */
	int64_t dpos[] = {8191, 32767, 131071};
	for (size_t i = 0; i < sizeof dpos / sizeof dpos[0] && want(only, "decode");
	     i++) {
		double ms;
		TIME(ms, o->attention(q, ao, qv, Hq * D, K, V, KERN_BF16, 1, dpos[i],
				      Hq, Hkv, D, 0.0625f, KERN_ACT_BF16));
		double kv = (double)(dpos[i] + 1) * Hkv * D * 2 * 2;
		printf("| attention | 1 row at %lld | %.4f | %.0f GB/s | 4300 "
		       "(copy) |\n",
		       (long long)dpos[i], ms, kv / ms / 1e6);
	}
	o->free(cx, K);
	o->free(cx, V);

	/* the chunked delta rule: one layer's chunk; the recurrent one a
	 * decode step */
	if (want(only, "delta") || want(only, "decode")) {
		float *qq = dev((size_t)T * Hk * dk * 4, KERN_F32, -0.1f, 0.1f);
		float *kk = dev((size_t)T * Hk * dk * 4, KERN_F32, -0.1f, 0.1f);
		float *vv = dev((size_t)T * Hv * dv * 4, KERN_F32, -1, 1);
		float *g = dev((size_t)T * Hv * 4, KERN_F32, -0.1f, 0.0f);
		float *beta = dev((size_t)T * Hv * 4, KERN_F32, 0, 1);
		float *S = dev((size_t)Hv * dk * dv * 4, KERN_F32, 0, 0);
		float *out = dev((size_t)T * Hv * dv * 4, KERN_F32, 0, 0);
		size_t wsb = o->delta_ws_bytes(cx, T, Hv, dk, dv);
		void *ws = dev(wsb, KERN_F32, 0, 0);
		double ms;
		TIME(ms, o->delta_recurrent(q, out, S, qq, kk, Hk * dk, vv, Hv * dv,
					    g, beta, 1, Hk, Hv, dk, dv,
					    KERN_ACT_BF16));
		printf("| delta_recurrent | 1 token, %d heads | %.4f | %.0f GB/s "
		       "(the state read and written) | 4300 (copy) |\n",
		       Hv, ms, (double)Hv * dk * dv * 8 / ms / 1e6);
		TIME(ms, o->delta_chunked(q, out, S, qq, kk, Hk * dk, vv, Hv * dv, g,
					  beta, T, Hk, Hv, dk, dv, ws,
					  KERN_ACT_BF16));
		double fl = 98e3 * Hv * T;
		printf("| delta_chunked | %d tokens, %d heads of %dx%d | %.3f | "
		       "%.1f TFLOP/s | (48 layers: %.0f ms a 1,024 chunk) |\n",
		       T, Hv, dk, dv, ms, fl / ms / 1e9, 48 * ms);
		o->free(cx, qq);
		o->free(cx, kk);
		o->free(cx, vv);
		o->free(cx, g);
		o->free(cx, beta);
		o->free(cx, S);
		o->free(cx, out);
		o->free(cx, ws);
	}

	/* the prefill's element-wise ops of a 1,024-token chunk: the GDN
	 * conv (10,240 channels read from the fused projection's rows of
	 * 16,480, the 4-tap kernel and the generic one) and the residual
	 * add + norm; GB/s of the bytes read and written once */
	if (want(only, "elem")) {
		int C = 10240, ldin = 16480, Kc = 4;
		float *in = dev((size_t)T * ldin * 4, KERN_F32, -1, 1);
		float *out = dev((size_t)T * C * 4, KERN_F32, 0, 0);
		float *tl = dev((size_t)(Kc - 1) * C * 4, KERN_F32, -1, 1);
		void *w = dev((size_t)C * Kc * 2, KERN_BF16, -0.5f, 0.5f);
		double ms, gb = (double)T * C * 8 / 1e9;
		for (int v = 1; v >= 0; v--) {
			setenv("MOOR_CONV_KC", v ? "1" : "0", 1);
			TIME(ms, o->conv1d(q, out, in, ldin, tl, w, KERN_BF16, T, C,
					   Kc, KERN_ACT_BF16));
			printf("| conv1d%s | %d tokens, %d channels | %.4f | %.0f "
			       "GB/s | 4300 (copy) |\n",
			       v ? " (4 taps)" : " (generic)", T, C, ms, gb / ms * 1e3);
		}
		unsetenv("MOOR_CONV_KC");
		/* a GDN layer's prologue: the conv, l2norm of q and k and the
		 * gates as four ops, then gdn_prep (one kernel, the same bits;
		 * b and a at the end of the projection's rows) */
		if (o->gdn_prep) {
			float *bt = dev((size_t)T * Hv * 4, KERN_F32, 0, 0);
			float *gg = dev((size_t)T * Hv * 4, KERN_F32, 0, 0);
			float *al = dev((size_t)Hv * 4, KERN_F32, -1, 1);
			float *db = dev((size_t)Hv * 4, KERN_F32, -1, 1);
			const float *pb = in + C + Hv * dv, *pa = pb + Hv;
			const float qs = 0.0883883f;
			TIME(ms, gdn_prologue_ops(out, in, ldin, tl, w, Kc, T,
						  C, Hk, dk, qs, bt, gg, pb, pa,
						  al, db, Hv));
			printf("| conv1d + l2norm x2 + gates | %d tokens, %d "
			       "channels | %.4f | %.0f GB/s | 4300 (copy) |\n",
			       T, C, ms, gb / ms * 1e3);
			int rc = 0;
			TIME(ms,
			     (rc = o->gdn_prep(
				  q, out, in, ldin, tl, w, KERN_BF16, Kc, Hk,
				  dk, Hv, dv, 1e-6f, qs, bt, gg, pb, pa, ldin,
				  al, db, T, KERN_ACT_BF16)) == MOOR_EUNSUP
				 ? 0
				 : rc);
			if (rc == MOOR_EUNSUP)
				printf("| gdn_prep | not fused at %d tokens "
				       "| | | |\n",
				       T);
			else
				printf("| gdn_prep | %d tokens, %d channels | "
				       "%.4f | %.0f GB/s | 4300 (copy) |\n",
				       T, C, ms, gb / ms * 1e3);
			o->free(cx, bt);
			o->free(cx, gg);
			o->free(cx, al);
			o->free(cx, db);
		}
		/* a full-attention layer's prologue at a grid line (row
		 * 3,072): split_qgate, the q and k norms, rope of both and the
		 * KV rows as seven ops, then attn_prep (one kernel, the same
		 * bits); GB/s of qg, k and v read and qo, go, K and V written
		 */
		if (o->attn_prep) {
			const int64_t p0 = 3072;
			size_t nq = (size_t)T * Hq * D,
			       nk = (size_t)T * Hkv * D;
			size_t nkv = (size_t)(p0 + T) * Hkv * D;
			float *qg = dev(2 * nq * 4, KERN_F32, -2, 2);
			float *kk = dev(nk * 4, KERN_F32, -2, 2);
			float *vv = dev(nk * 4, KERN_F32, -2, 2);
			float *qo = dev(nq * 4, KERN_F32, 0, 0);
			float *go = dev(nq * 4, KERN_F32, 0, 0);
			void *Kr = dev(nkv * 2, KERN_BF16, 0, 0);
			void *Vr = dev(nkv * 2, KERN_BF16, 0, 0);
			void *qw = dev((size_t)D * 2, KERN_BF16, -0.5f, 0.5f);
			void *kw = dev((size_t)D * 2, KERN_BF16, -0.5f, 0.5f);
			double ab = ((double)3 * nq * 4 + 2.0 * nk * 4 +
				     (double)nk * 2 * 2 + (double)nk * 4) /
				    1e9;
			TIME(ms, attn_prologue_ops(qo, go, qg, kk, vv, qw, kw,
						   Kr, Vr, T, Hq, Hkv, D, p0));
			printf(
			    "| split_qgate + rmsnorm x2 + rope x2 + kv_write "
			    "x2 | %d tokens, %d + %d heads of %d | %.4f | "
			    "%.0f GB/s | 4300 (copy) |\n",
			    T, Hq, Hkv, D, ms, ab / ms * 1e3);
			int rc = 0;
			TIME(ms,
			     (rc = o->attn_prep(q, qo, go, qg, kk, vv, qw, kw,
						KERN_BF16, Kr, Vr, KERN_BF16, T,
						Hq, Hkv, D, 64, p0, 1e7f, 1e-6f,
						KERN_ACT_BF16)) == MOOR_EUNSUP
				 ? 0
				 : rc);
			if (rc == MOOR_EUNSUP)
				printf("| attn_prep | not fused at %d tokens "
				       "| | | |\n",
				       T);
			else
				printf("| attn_prep | %d tokens, %d + %d heads "
				       "of %d | %.4f | %.0f GB/s | 4300 (copy) "
				       "|\n",
				       T, Hq, Hkv, D, ms, ab / ms * 1e3);
			void *fr[] = {qg, kk, vv, qo, go, Kr, Vr, qw, kw};
			for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++)
				o->free(cx, fr[i]);
		}
		float *h = dev((size_t)T * H * 4, KERN_F32, -1, 1);
		float *xn = dev((size_t)T * H * 4, KERN_F32, 0, 0);
		void *nw = dev((size_t)H * 2, KERN_BF16, -0.5f, 0.5f);
		/* float4s (the default) and the scalar kernel (MOOR_NORM_V4=0),
		 * a chunk's rows and a decode step's one */
		for (int v = 1; v >= 0; v--) {
			setenv("MOOR_NORM_V4", v ? "1" : "0", 1);
			for (int rows = T; rows >= 1; rows = rows > 1 ? 1 : 0) {
				TIME(ms, o->add_rmsnorm(q, h, out, xn, nw, KERN_BF16,
							rows, H, 1e-6f,
							KERN_ACT_BF16));
				printf("| add_rmsnorm%s | %d tokens, %d wide | %.4f | "
				       "%.0f GB/s | 4300 (copy) |\n",
				       v ? " (float4)" : " (scalar)", rows, H, ms,
				       (double)rows * H * 16 / 1e9 / ms * 1e3);
			}
		}
		unsetenv("MOOR_NORM_V4");
		o->free(cx, in);
		o->free(cx, out);
		o->free(cx, tl);
		o->free(cx, w);
		o->free(cx, h);
		o->free(cx, xn);
		o->free(cx, nw);
	}

	/* a decode step's pick: greedy, top-p (a sort of the vocabulary),
	 * and logprobs with 0, 5 and 20 alternatives; the line is the
	 * logits' read at 4.3 TB/s, which none of them comes near (each is
	 * a few small kernels and a sync) */
	if (want(only, "sample")) {
		const int Vv = 248320;
		float *lg = dev((size_t)Vv * 4, KERN_F32, -8, 12);
		int32_t *id = dev(4, KERN_F32, 0, 0);
		int32_t tok = 0, ids[KERN_LOGPROBS_MAX];
		float lp[KERN_LOGPROBS_MAX + 1];
		kern_sampling greedy = {0.0f, 0, 1.0f, 0.0f},
			      topp = {0.7f, 0, 0.95f, 0.0f};
		double ms;
		TIME(ms, o->sample(q, lg, Vv, &greedy, 0, id, &tok));
		printf("| sample (greedy) | %d logits | %.4f | | 0.0002 |\n",
		       Vv, ms);
		TIME(ms, o->sample(q, lg, Vv, &topp, 0x9e3779b97f4a7c15ull, id,
				   &tok));
		printf(
		    "| sample (top-p 0.95) | %d logits | %.4f | | 0.0002 |\n",
		    Vv, ms);
		for (int n = 0; n <= KERN_LOGPROBS_MAX; n += n ? 15 : 5) {
			TIME(ms, o->logprobs(q, lg, Vv, tok, n, lp, ids));
			printf(
			    "| logprobs (%d alternatives) | %d logits | %.4f | "
			    "| 0.0002 |\n",
			    n, Vv, ms);
		}
		o->free(cx, lg);
		o->free(cx, id);
	}

	/* GEMVs and GEMMs at the 27B's projections */
	mm_shape mm[] = {
	    {"MLP gate+up", 2 * I, H},
	    {"MLP down", H, I},
	    {"GDN in_proj (fused)", 16480, H},
	    {"GDN out", H, 6144},
	    {"attn q+gate", 12288, H},
	    {"attn k", 1024, H},
	    {"attn o", H, 6144},
	    {"lm_head", 248320, H},
	};
	float *x = dev((size_t)T * I * 4, KERN_F32, -1, 1);
	float *y = dev((size_t)T * 248320 * 4, KERN_F32, 0, 0);
	if (picks_mode) {
		gemm_picks(mm, sizeof mm / sizeof mm[0] - 1,
			   picks_rows > 0 && picks_rows <= 4 * T ? picks_rows
								 : 4 * T,
			   I);
		goto done;
	}
	if (!want(only, "mm") && !want(only, "gemv") && !rows_mode)
		goto done;
	for (size_t i = 0; i < sizeof mm / sizeof mm[0] && !rows_mode; i++) {
		int N = mm[i].N, Kd = mm[i].K;
		void *W = dev((size_t)N * Kd * 2, KERN_BF16, -0.02f, 0.02f);
		double ms;
		TIME(ms, o->matmul(q, y, N, x, Kd, W, KERN_BF16, 1, N, Kd,
				   KERN_ACT_BF16));
		printf("| matmul 1 row | %s %dx%d | %.4f | %.0f GB/s | 4300 "
		       "(copy) |\n",
		       mm[i].name, N, Kd, ms, (double)N * Kd * 2 / ms / 1e6);
		if (N < 100000 && strcmp(only, "gemv")) {
			TIME(ms, o->matmul(q, y, N, x, Kd, W, KERN_BF16, T, N, Kd,
					   KERN_ACT_BF16));
			printf("| matmul %d rows | %s %dx%d | %.3f | %.0f TFLOP/s | "
			       "612 (cuBLAS, 1,024 rows) |\n",
			       T, mm[i].name, N, Kd, ms,
			       2.0 * T * N * Kd / ms / 1e9);
		}
		o->free(cx, W);
	}
	/* --only rows: are a product's rows the same bits whatever the
	 * row count (what a forward of 4,096 rows with anchors at the
	 * 1,024 grid would need), and at what rate? Rows [r, r + T) of a
	 * 4 T-row product against a T-row product of the same rows, with
	 * each bucket's own algorithm, then with MOOR_GEMM_BUCKET_MAX=T
	 * (gemm.cu: the T-row algorithm for 4 T rows too). */
	if (rows_mode) {
		float *x4 = dev((size_t)4 * T * I * 4, KERN_F32, -1, 1);
		float *y4 = dev((size_t)4 * T * 2 * I * 4, KERN_F32, 0, 0);
		printf("\n| rows | shape | 1,024 rows TFLOP/s | 4,096 rows (own "
		       "algorithm): TFLOP/s, rows equal | 4,096 rows (the "
		       "1,024 rows' algorithm): TFLOP/s, rows equal |\n"
		       "|---|---|---|---|---|\n");
		for (size_t i = 0; i + 1 < sizeof mm / sizeof mm[0]; i++) {
			int N = mm[i].N, Kd = mm[i].K;
			void *W = dev((size_t)N * Kd * 2, KERN_BF16, -0.02f, 0.02f);
			size_t rb = (size_t)T * N * 4;
			float *a = malloc(rb), *b = malloc(rb);
			double ms1, ms4[2];
			int same[2] = {1, 1};
			TIME(ms1, o->matmul(q, y, N, x4, Kd, W, KERN_BF16, T, N, Kd,
					    KERN_ACT_BF16));
			for (int m = 0; m < 2 && a && b; m++) {
				if (m)
					setenv("MOOR_GEMM_BUCKET_MAX", "1024", 1);
				TIME(ms4[m], o->matmul(q, y4, N, x4, Kd, W, KERN_BF16,
						       4 * T, N, Kd, KERN_ACT_BF16));
				for (int r = 0; r < 4; r++) {
					int rc = o->matmul(q, y, N,
							   x4 + (size_t)r * T * Kd, Kd,
							   W, KERN_BF16, T, N, Kd,
							   KERN_ACT_BF16);
					if (!rc)
						rc = o->download(q, a, y, rb);
					if (!rc)
						rc = o->download(q, b,
								 y4 + (size_t)r * T * N,
								 rb);
					if (!rc)
						rc = o->sync(q);
					if (rc || memcmp(a, b, rb))
						same[m] = 0;
				}
				unsetenv("MOOR_GEMM_BUCKET_MAX");
			}
			printf("| rows | %s %dx%d | %.0f | %.0f, %s | %.0f, %s |\n",
			       mm[i].name, N, Kd, 2.0 * T * N * Kd / ms1 / 1e9,
			       8.0 * T * N * Kd / ms4[0] / 1e9,
			       same[0] ? "yes" : "no",
			       8.0 * T * N * Kd / ms4[1] / 1e9,
			       same[1] ? "yes" : "no");
			free(a);
			free(b);
			o->free(cx, W);
		}
		o->free(cx, x4);
		o->free(cx, y4);
	}
done:
	o->free(cx, x);
	o->free(cx, y);
	o->free(cx, qv);
	o->free(cx, ao);
	o->destroy(cx);
	return 0;
}
