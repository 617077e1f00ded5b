/* norm.c: rmsnorm, gated_rmsnorm, l2norm. One row's sum of squares is a
 * kcpu_dot of the row with itself (its order fixed by dim alone); tasks are
 * blocks of whole rows. */
#include "cpu.h"

/* Rows per task: about 16k elements of work each. */
static int rows_per_task(int dim)
{
	int r = 16384 / (dim > 0 ? dim : 1);
	return r < 1 ? 1 : r;
}

/* ---- rmsnorm ---- */

struct rms_job {
	float *y;
	const float *x;
	const void *w;
	int ldy, ldx, wdt, rows, dim, plus_one, act, rpt;
	float eps;
};

/* Weights up to this many elements are converted once per task. */
#define NORM_WMAX 4096

static void rms_task(void *arg, int task)
{
	const struct rms_job *j = arg;
	int r0 = task * j->rpt,
	    r1 = r0 + j->rpt < j->rows ? r0 + j->rpt : j->rows;
	int dim = j->dim;
	float wf[NORM_WMAX];
	int pre = dim <= NORM_WMAX;
	if (pre)
		for (int i = 0; i < dim; i++) {
			float w = kcpu_wget(j->w, j->wdt, (size_t)i);
			wf[i] = j->plus_one ? 1.0f + w : w;
		}
	for (int r = r0; r < r1; r++) {
		const float *x = j->x + (size_t)r * j->ldx;
		float *y = j->y + (size_t)r * j->ldy;
		float ss = kcpu_dot(x, x, dim);
		float inv = 1.0f / sqrtf(ss / (float)dim + j->eps);
		for (int i = 0; i < dim; i++) {
			float w;
			if (pre) {
				w = wf[i];
			} else {
				w = kcpu_wget(j->w, j->wdt, (size_t)i);
				if (j->plus_one)
					w = 1.0f + w;
			}
			y[i] = kcpu_rnd((x[i] * inv) * w, j->act);
		}
	}
}

int kcpu_rmsnorm(kern_queue *q, float *y, int ldy, const float *x, int ldx,
		 const void *w, int wdt, int rows, int dim, float eps,
		 int plus_one, int act)
{
	if (!q || !y || !x || !w || rows < 0 || dim < 0 || ldy < dim ||
	    ldx < dim)
		return MOOR_ERANGE;
	if (!kcpu_dtype_ok(wdt) || !kcpu_act_ok(act))
		return MOOR_EDTYPE;
	if (rows == 0 || dim == 0)
		return 0;
	struct rms_job j = {.y = y,
			    .x = x,
			    .w = w,
			    .ldy = ldy,
			    .ldx = ldx,
			    .wdt = wdt,
			    .rows = rows,
			    .dim = dim,
			    .plus_one = plus_one,
			    .act = act,
			    .rpt = rows_per_task(dim),
			    .eps = eps};
	moor_pool_run(kcpu_pool(q), (rows + j.rpt - 1) / j.rpt, rms_task, &j);
	return 0;
}

/* ---- gated_rmsnorm ---- */

struct grms_job {
	float *y;
	const float *x, *z;
	const void *w;
	int ldz, zg, wdt, rows, dim, act, rpt;
	float eps;
};

static void grms_task(void *arg, int task)
{
	const struct grms_job *j = arg;
	int r0 = task * j->rpt,
	    r1 = r0 + j->rpt < j->rows ? r0 + j->rpt : j->rows;
	int dim = j->dim, act = j->act;
	float wf[NORM_WMAX];
	int pre = dim <= NORM_WMAX;
	if (pre)
		kcpu_wrow(wf, j->w, j->wdt, 0, dim);
	for (int r = r0; r < r1; r++) {
		const float *x = j->x + (size_t)r * dim;
		const float *z = j->z + (size_t)(r / j->zg) * j->ldz +
				 (size_t)(r % j->zg) * dim;
		float *y = j->y + (size_t)r * dim;
		float ss = kcpu_dot(x, x, dim);
		float inv = 1.0f / sqrtf(ss / (float)dim + j->eps);
		int i = 0;
		for (; i + 4 <= dim && pre; i += 4) {
			v4f n = v4_rnd(v4_load(x + i) * v4_splat(inv), act);
			v4f p = v4_rnd(v4_load(wf + i) * n, act);
			v4_store(y + i,
				 v4_rnd(p * v4_silu(v4_load(z + i)), act));
		}
		for (; i < dim; i++) {
			float w =
			    pre ? wf[i] : kcpu_wget(j->w, j->wdt, (size_t)i);
			float n = kcpu_rnd(x[i] * inv, act);
			float p = kcpu_rnd(w * n, act);
			y[i] = kcpu_rnd(p * kcpu_silu(z[i]), act);
		}
	}
}

int kcpu_gated_rmsnorm(kern_queue *q, float *y, const float *x, const float *z,
		       int ldz, int zg, const void *w, int wdt, int rows,
		       int dim, float eps, int act)
{
	if (!q || !y || !x || !z || !w || rows < 0 || dim < 0 || zg < 1 ||
	    (int64_t)ldz < (int64_t)zg * dim)
		return MOOR_ERANGE;
	if (!kcpu_dtype_ok(wdt) || !kcpu_act_ok(act))
		return MOOR_EDTYPE;
	if (rows == 0 || dim == 0)
		return 0;
	struct grms_job j = {.y = y,
			     .x = x,
			     .z = z,
			     .w = w,
			     .ldz = ldz,
			     .zg = zg,
			     .wdt = wdt,
			     .rows = rows,
			     .dim = dim,
			     .act = act,
			     .rpt = rows_per_task(dim),
			     .eps = eps};
	moor_pool_run(kcpu_pool(q), (rows + j.rpt - 1) / j.rpt, grms_task, &j);
	return 0;
}

/* ---- l2norm ---- */

struct l2_job {
	float *x;
	int ld, T, heads, dim, act, tpt;
	float eps, scale;
};

static void l2_task(void *arg, int task)
{
	const struct l2_job *j = arg;
	int t0 = task * j->tpt, t1 = t0 + j->tpt < j->T ? t0 + j->tpt : j->T;
	int dim = j->dim;
	for (int t = t0; t < t1; t++)
		for (int h = 0; h < j->heads; h++) {
			float *x = j->x + (size_t)t * j->ld + (size_t)h * dim;
			float inv = 1.0f / sqrtf(kcpu_dot(x, x, dim) + j->eps);
			for (int i = 0; i < dim; i++)
				x[i] = kcpu_rnd(x[i] * inv, j->act) * j->scale;
		}
}

int kcpu_l2norm(kern_queue *q, float *x, int ld, int T, int heads, int dim,
		float eps, float scale, int act)
{
	if (!q || !x || T < 0 || heads < 0 || dim < 0 ||
	    (int64_t)ld < (int64_t)heads * dim)
		return MOOR_ERANGE;
	if (!kcpu_act_ok(act))
		return MOOR_EDTYPE;
	if (T == 0 || heads == 0 || dim == 0)
		return 0;
	int64_t per = (int64_t)heads * dim;
	struct l2_job j = {.x = x,
			   .ld = ld,
			   .T = T,
			   .heads = heads,
			   .dim = dim,
			   .act = act,
			   .tpt = (int)(per >= 16384 ? 1 : 16384 / per),
			   .eps = eps,
			   .scale = scale};
	moor_pool_run(kcpu_pool(q), (T + j.tpt - 1) / j.tpt, l2_task, &j);
	return 0;
}
