/* misc.c: the element-wise and data-movement ops (embed, add, swiglu,
 * sigmoid_mul, split_qgate, kv_write). Each output element depends on its own
 * inputs only, so any partition gives the same bits; tasks are fixed blocks
 * of elements or rows. */
#include "cpu.h"

/* Elements per task of the element-wise ops. */
#define EW_BLOCK 16384

void kcpu_wrow(float *dst, const void *w, int dt, size_t i0, int n)
{
	if (dt == KERN_F32) {
		memcpy(dst, (const float *)w + i0, (size_t)n * 4);
	} else if (dt == KERN_BF16) {
		const uint16_t *s = (const uint16_t *)w + i0;
		int i = 0;
		for (; i + 4 <= n; i += 4)
			v4_store(dst + i, v4_bf16(s + i));
		for (; i < n; i++)
			dst[i] = moor_bf16_to_f32(s[i]);
	} else {
		const uint16_t *s = (const uint16_t *)w + i0;
		for (int i = 0; i < n; i++)
			dst[i] = moor_f16_to_f32(s[i]);
	}
}

static int ew_tasks(size_t n)
{
	return (int)((n + EW_BLOCK - 1) / EW_BLOCK);
}

/* ---- embed ---- */

struct embed_job {
	float *out;
	const void *table;
	const int32_t *ids;
	int wdt, H;
};

static void embed_task(void *arg, int t)
{
	const struct embed_job *j = arg;
	kcpu_wrow(j->out + (size_t)t * j->H, j->table, j->wdt,
		  (size_t)j->ids[t] * j->H, j->H);
}

int kcpu_embed(kern_queue *q, float *out, const void *table, int wdt,
	       const int32_t *ids, int T, int H, int V)
{
	if (!q || !out || !table || !ids || T < 0 || H < 0 || V < 0)
		return MOOR_ERANGE;
	if (!kcpu_dtype_ok(wdt))
		return MOOR_EDTYPE;
	for (int t = 0; t < T; t++)
		if (ids[t] < 0 || ids[t] >= V)
			return MOOR_ERANGE; /* before anything is written */
	struct embed_job j = {out, table, ids, wdt, H};
	moor_pool_run(kcpu_pool(q), H ? T : 0, embed_task, &j);
	return 0;
}

/* ---- element-wise ---- */

enum { EW_ADD, EW_SWIGLU, EW_SIGMUL };

struct ew_job {
	float *y;
	const float *a, *b;
	size_t n;
	int kind, act;
};

static inline __attribute__((always_inline)) v4f ew_op(const int kind, int act,
						       v4f a, v4f b, v4f y)
{
	if (kind == EW_ADD) /* y = x + y; a = x */
		return v4_rnd(a + y, act);
	if (kind == EW_SWIGLU) /* a = gate, b = up */
		return v4_rnd(v4_rnd(v4_silu(a), act) * b, act);
	return v4_rnd(a * v4_rnd(v4_sigmoid(b), act),
		      act); /* a = x, b = gate */
}

/* Four lanes at a time; the tail goes through the same vector code in a
 * padded buffer, so an element's bits do not depend on its index. */
static inline __attribute__((always_inline)) void
ew_loop(const int kind, int act, float *y, const float *a, const float *b,
	size_t i0, size_t i1)
{
	size_t i = i0;
	for (; i + 4 <= i1; i += 4)
		v4_store(y + i, ew_op(kind, act, v4_load(a + i), v4_load(b + i),
				      v4_load(y + i)));
	if (i < i1) {
		float ta[4] = {0}, tb[4] = {0}, ty[4] = {0};
		size_t n = i1 - i;
		memcpy(ta, a + i, n * 4);
		memcpy(tb, b + i, n * 4);
		memcpy(ty, y + i, n * 4);
		v4_store(ty, ew_op(kind, act, v4_load(ta), v4_load(tb),
				   v4_load(ty)));
		memcpy(y + i, ty, n * 4);
	}
}

static void ew_task(void *arg, int task)
{
	const struct ew_job *j = arg;
	size_t i0 = (size_t)task * EW_BLOCK;
	size_t i1 = j->n - i0 < EW_BLOCK ? j->n : i0 + EW_BLOCK;
	if (j->kind == EW_ADD)
		ew_loop(EW_ADD, j->act, j->y, j->a, j->b, i0, i1);
	else if (j->kind == EW_SWIGLU)
		ew_loop(EW_SWIGLU, j->act, j->y, j->a, j->b, i0, i1);
	else
		ew_loop(EW_SIGMUL, j->act, j->y, j->a, j->b, i0, i1);
}

static int ew_run(kern_queue *q, float *y, const float *a, const float *b,
		  size_t n, int kind, int act)
{
	if (!q || !y || !a || !b)
		return MOOR_ERANGE;
	if (!kcpu_act_ok(act))
		return MOOR_EDTYPE;
	struct ew_job j = {y, a, b, n, kind, act};
	moor_pool_run(kcpu_pool(q), ew_tasks(n), ew_task, &j);
	return 0;
}

int kcpu_add(kern_queue *q, float *y, const float *x, size_t n, int act)
{
	return ew_run(q, y, x, x, n, EW_ADD, act);
}

int kcpu_swiglu(kern_queue *q, float *y, const float *gate, const float *up,
		size_t n, int act)
{
	return ew_run(q, y, gate, up, n, EW_SWIGLU, act);
}

int kcpu_sigmoid_mul(kern_queue *q, float *y, const float *x, const float *gate,
		     size_t n, int act)
{
	return ew_run(q, y, x, gate, n, EW_SIGMUL, act);
}

/* ---- split_qgate ---- */

struct split_job {
	float *qo, *go;
	const float *qg;
	int Hq, D;
};

static void split_task(void *arg, int t)
{
	const struct split_job *j = arg;
	size_t D = (size_t)j->D;
	for (int h = 0; h < j->Hq; h++) {
		size_t r = (size_t)t * j->Hq + h;
		memcpy(j->qo + r * D, j->qg + r * 2 * D, D * 4);
		memcpy(j->go + r * D, j->qg + r * 2 * D + D, D * 4);
	}
}

int kcpu_split_qgate(kern_queue *q, float *qo, float *go, const float *qg,
		     int T, int Hq, int D)
{
	if (!q || !qo || !go || !qg || T < 0 || Hq < 0 || D < 0)
		return MOOR_ERANGE;
	struct split_job j = {qo, go, qg, Hq, D};
	moor_pool_run(kcpu_pool(q), T, split_task, &j);
	return 0;
}

/* ---- kv_write ---- */

struct kvw_job {
	void *dst;
	const float *src;
	int64_t row0;
	int kvdt, ld, width;
};

static void kvw_task(void *arg, int t)
{
	const struct kvw_job *j = arg;
	const float *s = j->src + (size_t)t * j->ld;
	size_t off = (size_t)(j->row0 + t) * (size_t)j->width;
	int w = j->width;
	if (j->kvdt == KERN_F32) {
		memcpy((float *)j->dst + off, s, (size_t)w * 4);
	} else if (j->kvdt == KERN_BF16) {
		uint16_t *d = (uint16_t *)j->dst + off;
		for (int i = 0; i < w; i++)
			d[i] = moor_f32_to_bf16(s[i]);
	} else {
		uint16_t *d = (uint16_t *)j->dst + off;
		for (int i = 0; i < w; i++)
			d[i] = moor_f32_to_f16(s[i]);
	}
}

int kcpu_kv_write(kern_queue *q, void *dst, int kvdt, int64_t row0,
		  const float *src, int ld, int T, int width)
{
	if (!q || !dst || !src || row0 < 0 || T < 0 || width < 0 || ld < width)
		return MOOR_ERANGE;
	if (!kcpu_dtype_ok(kvdt))
		return MOOR_EDTYPE;
	struct kvw_job j = {dst, src, row0, kvdt, ld, width};
	moor_pool_run(kcpu_pool(q), T, kvw_task, &j);
	return 0;
}

/* ---- fill_random ---- */

#define FILL_PER_TASK 65536

struct fill_job {
	void *dst;
	int dt;
	size_t n;
	uint64_t seed;
	float lo, hi;
};

static void fill_task(void *arg, int task)
{
	const struct fill_job *j = arg;
	size_t i0 = (size_t)task * FILL_PER_TASK;
	size_t i1 = i0 + FILL_PER_TASK < j->n ? i0 + FILL_PER_TASK : j->n;
	for (size_t i = i0; i < i1; i++) {
		float x = kern_fill_value(j->seed, i, j->lo, j->hi);
		if (j->dt == KERN_F32)
			((float *)j->dst)[i] = x;
		else if (j->dt == KERN_BF16)
			((uint16_t *)j->dst)[i] = moor_f32_to_bf16(x);
		else
			((uint16_t *)j->dst)[i] = moor_f32_to_f16(x);
	}
}

int kcpu_fill_random(kern_queue *q, void *dst, int dt, size_t n, uint64_t seed,
		     float lo, float hi)
{
	if (!q || (n && !dst) || !(lo <= hi))
		return MOOR_ERANGE;
	if (!kcpu_dtype_ok(dt))
		return MOOR_EDTYPE;
	struct fill_job j = {dst, dt, n, seed, lo, hi};
	size_t tasks = (n + FILL_PER_TASK - 1) / FILL_PER_TASK;
	if (tasks > INT32_MAX)
		return MOOR_ERANGE;
	moor_pool_run(kcpu_pool(q), (int)tasks, fill_task, &j);
	return 0;
}
