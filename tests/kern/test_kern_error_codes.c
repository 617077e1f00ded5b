/* test_kern_error_codes: the CPU backend's error paths return the codes
 * ops.h and moor.h document, and write nothing. The codes are moor.h's
 * negative band as they are (ops.h writes "-MOOR_ERANGE", but MOOR_ERANGE is
 * itself negative, and every caller tests rc < 0 / rc != 0 with the value
 * moor.h defines): an unknown dtype or act is MOOR_EDTYPE; a NULL pointer, a
 * negative size, a stride shorter than its row, an id >= V (or < 0), heads that
 * do not divide, an odd rotary width are MOOR_ERANGE. Also the memory calls:
 * alloc, wrap_host (the same pointer), upload/download/copy/zero round trips,
 * sync, and destroy/free on NULL. */
#include "kt.h"

#define ER MOOR_ERANGE
#define ED MOOR_EDTYPE

static int untouched(const float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isnan(x[i]))
			return 0;
	return 1;
}

int main(void)
{
	kt_seed(9);
	const kern_ops *o = &kern_cpu_ops;
	ASSERT(o->abi == KERN_ABI_VERSION, "abi %u", o->abi);
	kern_ctx *ctx = NULL;
	kern_config bad = {.threads = -1};
	ASSERT(o->create(&bad, &ctx) == ER && ctx == NULL, "threads < 0");
	ASSERT(o->create(NULL, NULL) == ER, "NULL out");
	kern_config cfg = {.threads = 0}; /* the backend's choice */
	ASSERT(o->create(&cfg, &ctx) == 0 && ctx, "create");
	kern_queue *q = o->queue(ctx, KERN_Q_COMPUTE);
	ASSERT(q != NULL && o->queue(NULL, KERN_Q_COMPUTE) == NULL, "queue");
	o->destroy(NULL);
	o->free(ctx, NULL);

	/* ---- memory ---- */
	void *p = NULL;
	ASSERT(o->alloc(ctx, 1000, &p) == 0 && p && ((uintptr_t)p & 63) == 0,
	       "alloc aligned");
	ASSERT(o->alloc(ctx, 10, NULL) == ER, "alloc NULL out");
	char host[1000], back[1000];
	for (int i = 0; i < 1000; i++)
		host[i] = (char)(i * 7);
	ASSERT(o->upload(q, p, host, 1000) == 0, "upload");
	void *p2;
	ASSERT(o->alloc(ctx, 1000, &p2) == 0, "alloc");
	ASSERT(o->copy(q, p2, p, 1000) == 0, "copy");
	ASSERT(o->download(q, back, p2, 1000) == 0, "download");
	ASSERT(memcmp(host, back, 1000) == 0, "round trip");
	ASSERT(o->zero(q, p2, 1000) == 0, "zero");
	ASSERT(o->download(q, back, p2, 1000) == 0, "download");
	int nz = 0;
	for (int i = 0; i < 1000; i++)
		nz += back[i] != 0;
	ASSERT(nz == 0, "zero left %d bytes", nz);
	ASSERT(o->sync(q) == 0, "sync");
	ASSERT(o->upload(q, NULL, host, 10) == ER, "upload NULL");
	void *w = NULL;
	ASSERT(o->wrap_host(ctx, host, sizeof host, &w) == 0 && w == host,
	       "wrap_host returns the host pointer");
	if (o->unwrap)
		o->unwrap(ctx, w);
	o->free(ctx, p);
	o->free(ctx, p2);

	/* ---- ops ---- */
	float out[4096], x[4096], S[4096];
	kt_fill(x, 4096, -1, 1);
	kt_fill(S, 4096, -1, 1);
	uint16_t tab16[64 * 8];
	for (int i = 0; i < 64 * 8; i++)
		tab16[i] = moor_f32_to_bf16(x[i]);

	/* embed: an id out of range writes nothing */
	int32_t ids[4] = {1, 2, 8, 3};
	kt_poison(out, 4096);
	ASSERT(o->embed(q, out, tab16, KERN_BF16, ids, 4, 8, 8) == ER,
	       "embed id == V");
	ASSERT(untouched(out, 4096), "embed wrote on error");
	ids[2] = -1;
	ASSERT(o->embed(q, out, tab16, KERN_BF16, ids, 4, 8, 8) == ER,
	       "embed id < 0");
	ASSERT(untouched(out, 4096), "embed wrote on error");
	ids[2] = 7;
	ASSERT(o->embed(q, out, tab16, 9, ids, 4, 8, 8) == ED, "embed dtype");
	ASSERT(o->embed(q, out, NULL, KERN_BF16, ids, 4, 8, 8) == ER,
	       "embed NULL");
	ASSERT(o->embed(q, out, tab16, KERN_BF16, ids, -1, 8, 8) == ER,
	       "embed T < 0");
	ASSERT(o->embed(q, out, tab16, KERN_BF16, ids, 4, 8, 8) == 0, "embed");

	/* matmul */
	kt_poison(out, 4096);
	ASSERT(o->matmul(q, out, 8, x, 8, tab16, 3, 4, 8, 8, 0) == ED,
	       "matmul dtype");
	ASSERT(o->matmul(q, out, 8, x, 8, tab16, KERN_BF16, 4, 8, 8, 2) == ED,
	       "matmul act");
	ASSERT(o->matmul(q, out, 8, NULL, 8, tab16, KERN_BF16, 4, 8, 8, 0) ==
		   ER,
	       "matmul NULL x");
	ASSERT(o->matmul(q, out, 8, x, 8, tab16, KERN_BF16, -4, 8, 8, 0) == ER,
	       "matmul T < 0");
	ASSERT(o->matmul(q, out, 8, x, 7, tab16, KERN_BF16, 4, 8, 8, 0) == ER,
	       "matmul ldx < K");
	ASSERT(o->matmul(q, out, 7, x, 8, tab16, KERN_BF16, 4, 8, 8, 0) == ER,
	       "matmul ldy < N");
	ASSERT(o->matmul(NULL, out, 8, x, 8, tab16, KERN_BF16, 4, 8, 8, 0) ==
		   ER,
	       "matmul NULL queue");
	ASSERT(untouched(out, 4096), "matmul wrote on error");
	ASSERT(o->matmul(q, out, 8, x, 8, tab16, KERN_BF16, 0, 8, 8, 0) == 0,
	       "matmul T = 0");

	/* norms */
	ASSERT(o->rmsnorm(q, out, 8, x, 8, tab16, 4, 4, 8, 1e-6f, 1, 0) == ED,
	       "rmsnorm dtype");
	ASSERT(o->rmsnorm(q, out, 8, x, 8, tab16, KERN_BF16, 4, -8, 1e-6f, 1,
			  0) == ER,
	       "rmsnorm dim < 0");
	ASSERT(o->rmsnorm(q, out, 4, x, 8, tab16, KERN_BF16, 4, 8, 1e-6f, 1,
			  0) == ER,
	       "rmsnorm ldy < dim");
	ASSERT(o->gated_rmsnorm(q, out, x, NULL, 8, 1, tab16, KERN_BF16, 4, 8, 1e-6f,
				0) == ER,
	       "gated_rmsnorm NULL z");
	ASSERT(o->gated_rmsnorm(q, out, x, x, 8, 1, tab16, 7, 4, 8, 1e-6f, 0) == ED,
	       "gated_rmsnorm dtype");
	ASSERT(o->l2norm(q, out, 15, 4, 2, 8, 1e-6f, 1, 0) == ER,
	       "l2norm ld < heads * dim");
	ASSERT(o->l2norm(q, out, 16, 4, 2, 8, 1e-6f, 1, 5) == ED, "l2norm act");
	ASSERT(untouched(out, 4096), "norm wrote on error");

	/* conv1d */
	float tail[3 * 8];
	kt_fill(tail, 24, -1, 1);
	ASSERT(o->conv1d(q, out, x, 8, tail, tab16, KERN_BF16, 4, 8, 0, 0) ==
		   ER,
	       "conv1d Kc = 0");
	ASSERT(o->conv1d(q, out, x, 8, NULL, tab16, KERN_BF16, 4, 8, 4, 0) ==
		   ER,
	       "conv1d NULL tail");
	ASSERT(o->conv1d(q, out, x, 8, tail, tab16, 11, 4, 8, 4, 0) == ED,
	       "conv1d dtype");
	ASSERT(o->conv1d(q, out, x, 6, tail, tab16, KERN_BF16, 4, 8, 4, 0) ==
		   ER,
	       "conv1d ldin < C");
	ASSERT(untouched(out, 4096), "conv1d wrote on error");

	/* gates, delta rule */
	float A_log[4] = {0}, dtb[4] = {0};
	ASSERT(o->gdn_gates(q, out, out + 64, x, 4, x, 4, NULL, dtb, 4, 4, 0) ==
		   ER,
	       "gdn_gates NULL A_log");
	ASSERT(o->gdn_gates(q, out, out + 64, x, 3, x, 4, A_log, dtb, 4, 4, 0) ==
		   ER,
	       "gdn_gates ldb < Hv");
	ASSERT(o->delta_ws_bytes(ctx, 64, 0, 8, 8) == 0, "delta_ws_bytes(0 heads)");
	void *ws;
	ASSERT(o->alloc(ctx, o->delta_ws_bytes(ctx, 64, 3, 8, 8), &ws) == 0, "alloc ws");
	/* Hv = 3 value heads over Hk = 2 key heads: not a grouping */
	ASSERT(o->delta_chunked(q, out, S, x, x, 64, x, 64, x, x, 4, 2, 3, 8, 8,
				ws, 0) == ER,
	       "delta_chunked Hv %% Hk");
	ASSERT(o->delta_chunked(q, out, S, x, x, 64, x, 64, x, x, 4, 1, 3, 8, 8,
				NULL, 0) == ER,
	       "delta_chunked NULL ws");
	ASSERT(o->delta_chunked(q, out, S, x, x, 64, x, 64, x, x, 4, 1, 3, 8, 8,
				ws, 9) == ED,
	       "delta_chunked act");
	ASSERT(o->delta_recurrent(q, out, S, x, x, 4, x, 64, x, x, 4, 1, 3, 8,
				  8, 0) == ER,
	       "delta_recurrent ldqk < Hk * dk");
	ASSERT(o->delta_recurrent(q, out, S, x, x, 64, x, 64, x, x, 4, 1, 3, 0,
				  8, 0) == ER,
	       "delta_recurrent dk = 0");
	ASSERT(untouched(out, 4096), "delta wrote on error");
	o->free(ctx, ws);

	/* rope, attention */
	ASSERT(o->rope(q, out, 16, 4, 2, 8, 5, 0, 1e4f, 0) == ER,
	       "rope odd rot");
	ASSERT(o->rope(q, out, 16, 4, 2, 8, 10, 0, 1e4f, 0) == ER,
	       "rope rot > D");
	ASSERT(o->rope(q, out, 16, 4, 2, 8, 4, -1, 1e4f, 0) == ER,
	       "rope pos0 < 0");
	ASSERT(o->attention(q, out, x, 24, x, x, KERN_F32, 2, 0, 3, 2, 8, 0.3f,
			    0) == ER,
	       "attention Hq %% Hkv");
	ASSERT(o->attention(q, out, x, 32, x, x, 6, 2, 0, 4, 2, 8, 0.3f, 0) ==
		   ED,
	       "attention kvdt");
	ASSERT(o->attention(q, out, x, 32, x, x, KERN_F32, 2, -3, 4, 2, 8, 0.3f,
			    0) == ER,
	       "attention pos0 < 0");
	ASSERT(o->attention(q, out, x, 31, x, x, KERN_F32, 2, 0, 4, 2, 8, 0.3f,
			    0) == ER,
	       "attention ldq < Hq * D");
	ASSERT(untouched(out, 4096), "rope/attention wrote on error");

	/* kv_write, element-wise, split */
	ASSERT(o->kv_write(q, out, 4, 0, x, 8, 4, 8) == ED, "kv_write kvdt");
	ASSERT(o->kv_write(q, out, KERN_BF16, -1, x, 8, 4, 8) == ER,
	       "kv_write row0 < 0");
	ASSERT(o->kv_write(q, out, KERN_BF16, 0, x, 7, 4, 8) == ER,
	       "kv_write ld < width");
	ASSERT(o->add(q, out, NULL, 16, 0) == ER, "add NULL");
	ASSERT(o->add(q, out, x, 16, 3) == ED, "add act");
	ASSERT(o->swiglu(q, out, x, NULL, 16, 0) == ER, "swiglu NULL");
	ASSERT(o->sigmoid_mul(q, NULL, x, x, 16, 0) == ER, "sigmoid_mul NULL");
	ASSERT(o->split_qgate(q, out, NULL, x, 2, 2, 4) == ER, "split NULL");
	ASSERT(o->split_qgate(q, out, out + 64, x, 2, -2, 4) == ER,
	       "split Hq < 0");
	ASSERT(untouched(out, 4096), "wrote on error");

	ASSERT(ER < 0 && ED < 0 &&
		   strcmp(moor_strerror(ER), moor_strerror(ED)) != 0,
	       "negative codes with distinct messages");
	o->destroy(ctx);
	return kt_done("test_kern_error_codes");
}
