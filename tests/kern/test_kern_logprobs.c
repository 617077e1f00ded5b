/* test_kern_logprobs: logprobs() (ops.h) on the host.
 *
 * kern_logprobs_host (kernels/sample.c: one pass with an insertion list,
 * the weights on vector lanes) gives the same bits as the rule written out
 * plainly here (every candidate qsorted, ksr_exp one at a time, the blocks
 * summed in order), over logit vectors of V = 1 .. 248320 (uniform, wide,
 * bf16-rounded with ties, few distinct values, -inf, NaN, -0 against +0,
 * +inf, all -inf) and every n_top; the CPU backend's op gives the same.
 *
 * Then the values against libm in long double: kern_log_det against logl,
 * and each logprob against the log-softmax; the tolerances are written
 * beside the checks. Last, the refusals. */
#include "kt.h"

#include "sample_rule.h"

typedef struct cand {
	float key;
	int32_t id;
} cand;

static int by_rule(const void *a, const void *b)
{
	const cand *x = a, *y = b;
	if (x->key != y->key)
		return x->key > y->key ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* The rule of ops.h, as written there. */
static void ref_logprobs(const float *l, int V, int32_t tok, int n, float *lp,
			 int32_t *ids)
{
	cand *c = malloc((size_t)V * sizeof *c);
	for (int i = 0; i < V; i++)
		c[i] = (cand){ksr_key(l[i]), i};
	qsort(c, (size_t)V, sizeof *c, by_rule);
	float mx = c[0].key;
	double lnS = 0.0;
	if (mx > -INFINITY && mx < INFINITY) {
		double S = 0.0;
		for (int b0 = 0; b0 < V; b0 += KERN_SAMPLE_BLOCK) {
			double r = 0.0;
			for (int i = b0; i < V && i < b0 + KERN_SAMPLE_BLOCK;
			     i++)
				r += ksr_exp((double)ksr_key(l[i]) - mx);
			S += r;
		}
		lnS = ksr_log(S);
	}
	lp[0] = ksr_lp(ksr_key(l[tok]), mx, lnS);
	for (int r = 0; r < n; r++) {
		ids[r] = c[r].id;
		lp[1 + r] = ksr_lp(c[r].key, mx, lnS);
	}
	free(c);
}

static void fill(float *l, int V, int kind)
{
	for (int i = 0; i < V; i++) {
		switch (kind) {
		case 0:
			l[i] = kt_unif(-4, 12);
			break;
		case 1:
			l[i] = kt_unif(-300, 300);
			break;
		case 2:
			l[i] = kt_to_dt(kt_unif(-8, 8), KERN_BF16);
			break;
		case 3:
			l[i] = (float)(kt_next() % 5);
			break;
		case 4: /* -inf, NaN, signed zeros among the values */
			switch (kt_next() % 6) {
			case 0:
				l[i] = -INFINITY;
				break;
			case 1:
				l[i] = NAN;
				break;
			case 2:
				l[i] = (kt_next() & 1) ? -0.0f : 0.0f;
				break;
			default:
				l[i] = kt_unif(-2, 2);
			}
			break;
		case 5:
			l[i] = -INFINITY;
			break;
		case 6:
			l[i] = i == V / 2 ? INFINITY : kt_unif(-1, 1);
			break;
		}
	}
}

static void case_rule(void)
{
	static const int Vs[] = {1, 2, 19, 255, 256, 257, 1000, 151669, 248320};
	kern_config cc = {.threads = 2};
	kern_ctx *ctx = NULL;
	const kern_ops *o = kern_backend("cpu");
	int rc = o->create(&cc, &ctx);
	ASSERT(rc == 0, "cpu create: %s", moor_strerror(rc));
	kern_queue *q = o->queue(ctx, KERN_Q_COMPUTE);
	int cases = 0;
	for (size_t vi = 0; vi < sizeof Vs / sizeof Vs[0]; vi++) {
		int V = Vs[vi];
		float *l = malloc((size_t)V * 4);
		for (int kind = 0; kind < 7; kind++) {
			fill(l, V, kind);
			for (int n = 0; n <= KERN_LOGPROBS_MAX && n <= V;
			     n += V > 1000 && n > 2 ? 9 : 1) {
				int32_t tok =
				    (int32_t)(kt_next() % (uint64_t)V);
				float a[KERN_LOGPROBS_MAX + 1],
				    b[KERN_LOGPROBS_MAX + 1],
				    c[KERN_LOGPROBS_MAX + 1];
				int32_t ia[KERN_LOGPROBS_MAX],
				    ib[KERN_LOGPROBS_MAX],
				    ic[KERN_LOGPROBS_MAX];
				ref_logprobs(l, V, tok, n, a, ia);
				int r1 =
				    kern_logprobs_host(l, V, tok, n, b, ib);
				int r2 = o->logprobs(q, l, V, tok, n, c, ic);
				ASSERT(r1 == 0 && r2 == 0, "V %d n %d: %s %s",
				       V, n, moor_strerror(r1),
				       moor_strerror(r2));
				ASSERT(!memcmp(a, b, (size_t)(n + 1) * 4) &&
					   !memcmp(ia, ib, (size_t)n * 4),
				       "V %d kind %d n %d: kern_logprobs_host "
				       "differs from the rule (token %.9g "
				       "against %.9g)",
				       V, kind, n, b[0], a[0]);
				ASSERT(!memcmp(a, c, (size_t)(n + 1) * 4) &&
					   !memcmp(ia, ic, (size_t)n * 4),
				       "V %d kind %d n %d: the CPU op differs "
				       "from the rule",
				       V, kind, n);
				cases++;
			}
		}
		free(l);
	}
	o->destroy(ctx);
	printf("  the rule's bits in %d cases\n", cases);
}

/* The values against long double. */
static void case_values(void)
{
	/* kern_log_det against logl: the series and the final adds lose a
	 * few ulps at most (the rounding of s, of 2 s p and of the sums);
	 * 4 ulps of the result is the bound checked */
	double worst = 0;
	for (int i = 0; i < 100000; i++) {
		double x = i < 4 ? (double[]){1.0, 2.0, 1.4142135623730951,
					      248320.0}[i]
				 : 1.0 + (double)(kt_next() >> 11) * 0x1p-53 *
					     (double)(1 << (i % 19));
		double got = kern_log_det(x);
		long double want = logl((long double)x);
		double ulp = want == 0
				 ? 0x1p-1074
				 : nextafter(fabs((double)want), INFINITY) -
				       fabs((double)want);
		double d = fabsl((long double)got - want) / ulp;
		if (d > worst)
			worst = d;
		if (x == 1.0)
			ASSERT(got == 0.0, "ln 1 = %.17g", got);
	}
	ASSERT(worst <= 4.0, "kern_log_det: %.2f ulps from logl", worst);
	printf("  kern_log_det: at most %.2f ulps from logl\n", worst);

	/* each logprob against log-softmax in long double: the rule rounds
	 * x - mx and x - mx - ln S in double and the result once to float,
	 * so a value is within one float rounding (2^-24 relative) plus the
	 * double error of ln S (~1e-15 absolute) of the truth; checked:
	 * 2^-23 relative + 1e-12 absolute. And the probabilities sum to 1
	 * within V float roundings of terms that sum to 1: 1e-6 at V =
	 * 8192 is far more than it needs. At V = 248320 a sample of the
	 * tokens (a call is a pass over all of them). */
	for (int kind = 0; kind < 6; kind++) {
		int V = kind < 3 ? 8192 : 248320, step = kind < 3 ? 1 : 509;
		float *l = malloc((size_t)V * 4);
		fill(l, V, kind % 3);
		long double mx = -INFINITY, S = 0;
		for (int i = 0; i < V; i++)
			mx = l[i] > mx ? l[i] : mx;
		for (int i = 0; i < V; i++)
			S += expl((long double)l[i] - mx);
		long double lnS = logl(S);
		double bad = 0, psum = 0;
		int n = 5;
		float lp[KERN_LOGPROBS_MAX + 1];
		int32_t ids[KERN_LOGPROBS_MAX];
		for (int tok = 0; tok < V; tok += step) {
			int rc = kern_logprobs_host(l, V, tok, tok % 97 ? 0 : n,
						    lp, ids);
			if (rc) {
				ASSERT(rc == 0, "logprobs: %s",
				       moor_strerror(rc));
				break;
			}
			long double want = (long double)l[tok] - mx - lnS;
			double tol = fabsl(want) * 0x1p-23 + 1e-12;
			double d = fabsl((long double)lp[0] - want);
			if (d > tol && bad++ < 3)
				fprintf(
				    stderr,
				    "  kind %d token %d: %.9g, want %.12Lg\n",
				    kind, tok, lp[0], want);
			psum += exp((double)lp[0]);
			if (tok % 97 == 0) {
				for (int r = 1; r < n; r++)
					ASSERT(lp[1 + r] <= lp[r] &&
						   (lp[1 + r] < lp[r] ||
						    ids[r] > ids[r - 1]),
					       "the top list's order at %d", r);
				for (int r = 0; r < n; r++)
					ASSERT(lp[1 + r] >= lp[0] ||
						   ids[r] != tok,
					       "a listed token's own value");
			}
		}
		ASSERT(bad == 0, "kind %d: %.0f logprobs outside the tolerance",
		       kind, bad);
		if (step == 1)
			ASSERT(fabs(psum - 1.0) <= 1e-6,
			       "kind %d: probabilities sum to %.9g", kind,
			       psum);
		free(l);
	}
	printf("  logprobs within a float rounding of log-softmax\n");
}

static void case_refusals(void)
{
	float l[4] = {1, 2, 3, 4}, lp[KERN_LOGPROBS_MAX + 2];
	int32_t ids[KERN_LOGPROBS_MAX + 1];
	ASSERT(kern_logprobs_host(l, 4, 4, 0, lp, ids) == MOOR_ERANGE,
	       "token past V");
	ASSERT(kern_logprobs_host(l, 4, -1, 0, lp, ids) == MOOR_ERANGE,
	       "negative token");
	ASSERT(kern_logprobs_host(l, 4, 0, 5, lp, ids) == MOOR_ERANGE,
	       "n_top past V");
	float big[64] = {0};
	ASSERT(kern_logprobs_host(big, 64, 0, KERN_LOGPROBS_MAX + 1, lp, ids) ==
		   MOOR_ERANGE,
	       "n_top past KERN_LOGPROBS_MAX");
	ASSERT(kern_logprobs_host(l, 4, 0, 1, lp, NULL) == MOOR_ERANGE,
	       "no ids");
	ASSERT(kern_logprobs_host(NULL, 4, 0, 0, lp, ids) == MOOR_ERANGE,
	       "no logits");
	ASSERT(kern_logprobs_host(l, 4, 3, 4, lp, ids) == 0, "n_top = V");
	ASSERT(ids[0] == 3 && ids[3] == 0 && lp[0] == lp[1], "the order");
}

int main(void)
{
	kt_seed(11);
	case_rule();
	case_values();
	case_refusals();
	return kt_done("test_kern_logprobs");
}
