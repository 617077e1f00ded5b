/* golden_probe: where our bf16 forward departs from transformers', tensor by
 * tensor (a diagnosis tool, not a test).
 *
 *   golden_probe [--force | --force-only NAME,...] [--grid N] FIXTURE_DIR
 *                REF.bin...
 *
 * REF.bin are the MOORDMP1 files tests/golden/probe_golden.py writes from
 * transformers (the fixture's prefill "p.*" and its 32 fed decode steps
 * "d.*", per layer "L<i>.<name>"). This program is built with a copy of the
 * engine compiled with -DENG_PROBE, whose forward calls eng_probe at every
 * point where the model rounds; the probe compares our tensor with the
 * reference's rows for the same positions. With --force it then overwrites
 * ours with the reference's, so every op starts from transformers' inputs
 * and each line measures that op alone (--force-only: only the tensors
 * named, e.g. core,att, to see whose differences matter downstream);
 * without it the lines show how the
 * differences grow along the forward.
 *
 * Per tensor and phase (prefill, decode): elements that differ (ours rounded
 * to bf16 against the reference, which holds bf16 values, except g, which is
 * fp32 in both and compared as is), those more than one bf16 ulp apart, and
 * max |d| / max |ref|. Then the logits' argmax agreement as the golden test
 * counts it. */
#include <math.h>

#include "eng.h"
#include "golden.h"
#include "moor.h"

typedef struct ref_t {
	char name[64];
	int ndim;
	uint32_t dims[4];
	size_t rows, cols;
	float *data;
} ref_t;

static ref_t *refs;
static int n_refs, cap_refs;

static int load_dump(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	char magic[8];
	if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "MOORDMP1", 8)) {
		fclose(f);
		return -1;
	}
	for (;;) {
		char name[64];
		uint32_t h[5];
		if (fread(name, 1, 64, f) != 64)
			break;
		if (fread(h, 4, 5, f) != 5 || h[0] > 4)
			goto bad;
		size_t n = 1;
		for (uint32_t i = 0; i < h[0]; i++)
			n *= h[1 + i];
		if (n_refs == cap_refs) {
			cap_refs = cap_refs ? 2 * cap_refs : 256;
			refs = realloc(refs, (size_t)cap_refs * sizeof *refs);
			if (!refs)
				goto bad;
		}
		ref_t *r = &refs[n_refs];
		memcpy(r->name, name, 64);
		r->name[63] = 0;
		r->ndim = (int)h[0];
		memcpy(r->dims, h + 1, 16);
		r->rows = h[0] ? h[1] : 1;
		r->cols = r->rows ? n / r->rows : 0;
		r->data = malloc(n * 4 + 4);
		if (!r->data || fread(r->data, 4, n, f) != n)
			goto bad;
		n_refs++;
	}
	fclose(f);
	return 0;
bad:
	fclose(f);
	return -1;
}

static const ref_t *find_ref(const char *name)
{
	for (int i = 0; i < n_refs; i++)
		if (strcmp(refs[i].name, name) == 0)
			return &refs[i];
	return NULL;
}

/* Statistics per (phase, name), in the order the forward first reaches
 * them. */
typedef struct stat_t {
	char name[64];
	size_t n, diff, far;
	double maxd, maxr;
	int missing;
} stat_t;

static stat_t stats[2][512];
static int n_stats[2];
static int force, n_prompt;
static const char *force_only; /* comma-separated names, NULL: all */

static int forced(const char *name)
{
	if (!force)
		return 0;
	if (!force_only)
		return 1;
	size_t n = strlen(name);
	for (const char *p = force_only; *p;) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		if (l == n && strncmp(p, name, n) == 0)
			return 1;
		p += l + (e != NULL);
	}
	return 0;
}

static stat_t *stat_of(int ph, const char *name)
{
	for (int i = 0; i < n_stats[ph]; i++)
		if (strcmp(stats[ph][i].name, name) == 0)
			return &stats[ph][i];
	if (n_stats[ph] == 512)
		return NULL;
	stat_t *s = &stats[ph][n_stats[ph]++];
	memset(s, 0, sizeof *s);
	snprintf(s->name, sizeof s->name, "%s", name);
	return s;
}

/* One bf16 ulp at x (x a bf16 value, not 0). */
static double ulp_bf16(float x)
{
	int e;
	frexpf(x, &e);
	return ldexp(1.0, e - 8);
}

void eng_probe(const char *name, int layer, float *x, int rows, int cols,
	       int ld, int64_t pos);
void eng_probe(const char *name, int layer, float *x, int rows, int cols,
	       int ld, int64_t pos)
{
	char key[64], rk[72];
	if (layer >= 0)
		snprintf(key, sizeof key, "L%d.%s", layer, name);
	else
		snprintf(key, sizeof key, "%s", name);
	int exact = strcmp(name, "g") == 0;
	for (int t = 0; t < rows; t++) {
		int64_t p = pos + t;
		int ph = p >= n_prompt;
		size_t row = (size_t)(ph ? p - n_prompt : p);
		snprintf(rk, sizeof rk, "%s.%s", ph ? "d" : "p", key);
		stat_t *s = stat_of(ph, key);
		const ref_t *r = find_ref(rk);
		if (!s)
			continue;
		if (!r || row >= r->rows || r->cols != (size_t)cols) {
			s->missing = 1;
			continue;
		}
		const float *rr = r->data + row * r->cols;
		float *xr = x + (size_t)t * ld;
		for (int i = 0; i < cols; i++) {
			float a = exact ? xr[i] : moor_round_bf16(xr[i]);
			double d = fabs((double)a - rr[i]);
			s->n++;
			if (a != rr[i]) {
				s->diff++;
				if (!exact && d > ulp_bf16(rr[i] != 0 ? rr[i] : a) *
							  1.0000001)
					s->far++;
			}
			s->maxd = d > s->maxd ? d : s->maxd;
			s->maxr = fabs(rr[i]) > s->maxr ? fabs(rr[i]) : s->maxr;
		}
		if (forced(name))
			memcpy(xr, rr, (size_t)cols * 4);
	}
}

static void argmax_of(const float *a, int V, int rnd, int *ia)
{
	int k = 0;
	for (int i = 1; i < V; i++)
		if (rnd ? moor_round_bf16(a[i]) > moor_round_bf16(a[k])
			: a[i] > a[k])
			k = i;
	*ia = k;
}

int main(int argc, char **argv)
{
	int grid = 128, ai = 1;
	for (; ai < argc && argv[ai][0] == '-'; ai++) {
		if (strcmp(argv[ai], "--force") == 0)
			force = 1;
		else if (strcmp(argv[ai], "--force-only") == 0 && ai + 1 < argc)
			force = 1, force_only = argv[++ai];
		else if (strcmp(argv[ai], "--grid") == 0 && ai + 1 < argc)
			grid = atoi(argv[++ai]);
		else
			break;
	}
	if (argc - ai < 2) {
		fprintf(stderr, "usage: golden_probe [--force | --force-only NAMES] [--grid N] "
				"FIXTURE_DIR REF.bin...\n");
		return 2;
	}
	const char *dir = argv[ai++];
	for (; ai < argc; ai++)
		if (load_dump(argv[ai])) {
			fprintf(stderr, "cannot read %s\n", argv[ai]);
			return 1;
		}
	char path[1100], err[MOOR_ERRLEN] = "";
	snprintf(path, sizeof path, "%s/golden.bin", dir);
	golden g;
	if (golden_read(path, &g)) {
		fprintf(stderr, "cannot read %s\n", path);
		return 1;
	}
	n_prompt = (int)g.n_prompt;
	kern_config kc = {.threads = 2};
	kern_ctx *ctx;
	if (kern_backend("cpu")->create(&kc, &ctx))
		return 1;
	eng_opts o = {.grid = grid, .window = 1024};
	eng_model *m;
	if (eng_model_load(dir, kern_backend("cpu"), ctx, &o, &m, err)) {
		fprintf(stderr, "load: %s\n", err);
		return 1;
	}
	int V = eng_model_vocab(m);
	eng_seq s;
	if (eng_seq_alloc(m, &s))
		return 1;
	float *lg = malloc((size_t)g.n_prompt * V * 4);
	float *row = malloc((size_t)V * 4);
	if (!lg || !row ||
	    eng_prefill(m, &s, g.prompt, g.n_prompt, lg, ENG_LOGITS_ALL))
		return 1;
	int agree = 0, dagree = 0;
	double worst = 0, sad = 0;
	for (uint32_t t = 0; t < g.n_prompt; t++) {
		int ia, ir;
		argmax_of(lg + (size_t)t * V, V, 1, &ia);
		argmax_of(g.prefill + (size_t)t * V, V, 0, &ir);
		agree += ia == ir;
		double md = 0, mx = 0;
		for (int i = 0; i < V; i++) {
			double d = fabs((double)lg[(size_t)t * V + i] -
					g.prefill[(size_t)t * V + i]);
			sad += fabs((double)moor_round_bf16(lg[(size_t)t * V + i]) -
				    g.prefill[(size_t)t * V + i]);
			md = d > md ? d : md;
			mx = fabs(g.prefill[(size_t)t * V + i]) > mx
				 ? fabs(g.prefill[(size_t)t * V + i])
				 : mx;
		}
		worst = md / mx > worst ? md / mx : worst;
	}
	for (uint32_t i = 0; i < g.n_decode; i++) {
		if (eng_decode(m, &s, g.fed[i], row))
			return 1;
		int ia, ir;
		argmax_of(row, V, 1, &ia);
		argmax_of(g.decode + (size_t)i * V, V, 0, &ir);
		dagree += ia == ir;
	}
	static const char *const phase[2] = {"prefill", "decode"};
	for (int ph = 0; ph < 2; ph++) {
		printf("%-7s %-14s %9s %9s %9s %10s\n", phase[ph], "tensor",
		       "elements", "differ", ">1 ulp", "max rel");
		for (int i = 0; i < n_stats[ph]; i++) {
			stat_t *st = &stats[ph][i];
			if (st->missing && !st->n) {
				printf("        %-14s (no reference)\n", st->name);
				continue;
			}
			printf("        %-14s %9zu %8.4f%% %8.4f%% %10.3g\n",
			       st->name, st->n, 100.0 * st->diff / st->n,
			       100.0 * st->far / st->n,
			       st->maxr > 0 ? st->maxd / st->maxr : st->maxd);
		}
	}
	printf("logits%s: prefill argmax %d/%u, max rel %.3g, mean |bf16(ours) - "
	       "ref| %.4g; decode argmax %d/%u; all %d/%u = %.2f%%\n",
	       force ? " (forced inputs)" : "", agree, g.n_prompt, worst,
	       sad / ((double)g.n_prompt * V),
	       dagree, g.n_decode, agree + dagree, g.n_prompt + g.n_decode,
	       100.0 * (agree + dagree) / (g.n_prompt + g.n_decode));
	free(lg);
	free(row);
	eng_seq_free(m, &s);
	eng_model_free(m);
	kern_backend("cpu")->destroy(ctx);
	golden_free(&g);
	return 0;
}
